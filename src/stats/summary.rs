//! The Summary API's types (kubelet's `stats/v1alpha1`): kubelet's JSON field names,
//! with `omitempty` exactly where kubelet has it, so clients written against kubelet
//! (metrics tools, the eviction tests of conformance suites) decode oxlet's summary.
//!
//! Times are `metav1.Time`: RFC 3339 UTC in whole seconds, and the zero time is
//! `null`; [`Time`] does that.

use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `metav1.Time`: whole seconds, `null` for the zero time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Time(pub Option<jiff::Timestamp>);

impl Time {
    /// The time at full precision (the wire truncates it to whole seconds; the
    /// resource metrics keep milliseconds, as kubelet's do); the epoch and times
    /// before it are Go's zero here and become `null`.
    pub(crate) fn from_system(t: SystemTime) -> Time {
        match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) if d.as_secs() > 0 => Time(jiff::Timestamp::try_from(t).ok()),
            _ => Time(None),
        }
    }

    /// Milliseconds since the epoch, if set.
    pub(crate) fn unix_millis(self) -> Option<i64> {
        self.0.map(jiff::Timestamp::as_millisecond)
    }

    /// Seconds since the epoch with their fraction, if set.
    #[allow(clippy::cast_precision_loss, reason = "kubelet's float64 seconds too")]
    pub(crate) fn unix_seconds_f64(self) -> Option<f64> {
        self.0.map(|t| t.as_nanosecond() as f64 / 1e9)
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            None => s.serialize_none(),
            Some(t) => s.serialize_str(&t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        match text {
            None => Ok(Time(None)),
            Some(s) => s
                .parse::<jiff::Timestamp>()
                .map(|t| Time(Some(t)))
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A float64 as Go's encoding/json writes it: an integral value without `.0`.
fn go_float<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        s.serialize_i64(*v as i64)
    } else {
        s.serialize_f64(*v)
    }
}

/// `null` or a missing field decodes as the default (Go's nil slice).
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub node: NodeStats,
    #[serde(deserialize_with = "null_default", default)]
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeStats {
    pub node_name: String,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub system_containers: Vec<ContainerStats>,
    pub start_time: Time,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub runtime: Option<RuntimeStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rlimit: Option<RlimitStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Time,
    /// Always present; `null` (None) only when decoded so.
    pub containers: Option<Vec<ContainerStats>>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub network: Option<NetworkStats>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub volume: Vec<VolumeStats>,
    #[serde(
        rename = "ephemeral-storage",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(
        rename = "process_stats",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub process_stats: Option<ProcessStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContainerStats {
    pub name: String,
    pub start_time: Time,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cpu: Option<CpuStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub memory: Option<MemoryStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub io: Option<IoStats>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub accelerators: Vec<AcceleratorStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rootfs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub logs: Option<FsStats>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub user_defined_metrics: Vec<UserDefinedMetric>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub swap: Option<SwapStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CpuStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage_core_nano_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub psi: Option<PsiStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemoryStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub major_page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub psi: Option<PsiStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SwapStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub swap_available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub swap_usage_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct IoStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub psi: Option<PsiStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PsiStats {
    pub some: PsiData,
    pub full: PsiData,
}

/// One PSI line: `total` is the cumulative stall in microseconds (as the kernel
/// reports it and as kubelet passes it on), the averages are percentages.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PsiData {
    pub total: u64,
    #[serde(serialize_with = "go_float")]
    pub avg10: f64,
    #[serde(serialize_with = "go_float")]
    pub avg60: f64,
    #[serde(serialize_with = "go_float")]
    pub avg300: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InterfaceStats {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rx_errors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tx_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tx_errors: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct NetworkStats {
    pub time: Time,
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FsStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub inodes_used: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PvcReference {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct VolumeHealthStats {
    pub abnormal: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pvc_ref: Option<PvcReference>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub volume_health_stats: Option<VolumeHealthStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuntimeStats {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub image_fs: Option<FsStats>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub container_fs: Option<FsStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RlimitStats {
    pub time: Time,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub maxpid: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub curproc: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessStats {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub process_count: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AcceleratorStats {
    pub make: String,
    pub model: String,
    pub id: String,
    pub memory_total: u64,
    pub memory_used: u64,
    pub duty_cycle: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct UserDefinedMetric {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub units: String,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty", default)]
    pub labels: std::collections::BTreeMap<String, String>,
    pub time: Time,
    #[serde(serialize_with = "go_float")]
    pub value: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by hand from kubelet's types: every field once, omitempty ones both
    /// present and absent, `null` times, the odd spellings.
    const GOLDEN: &str = r#"{
  "node": {
    "nodeName": "n1",
    "systemContainers": [
      {"name": "kubelet", "startTime": "2024-01-02T03:04:05Z",
       "cpu": {"time": "2024-01-02T03:04:06Z", "usageNanoCores": 1, "usageCoreNanoSeconds": 2},
       "memory": {"time": "2024-01-02T03:04:06Z", "usageBytes": 3, "workingSetBytes": 4, "rssBytes": 5, "pageFaults": 6, "majorPageFaults": 7}}
    ],
    "startTime": "2024-01-01T00:00:00Z",
    "cpu": {"time": "2024-01-02T03:04:06Z", "usageNanoCores": 10, "usageCoreNanoSeconds": 20,
            "psi": {"some": {"total": 1, "avg10": 0.5, "avg60": 0.25, "avg300": 0}, "full": {"total": 0, "avg10": 0, "avg60": 0, "avg300": 0}}},
    "memory": {"time": "2024-01-02T03:04:06Z", "availableBytes": 100, "usageBytes": 200, "workingSetBytes": 150, "rssBytes": 50, "pageFaults": 9, "majorPageFaults": 1},
    "io": {"time": "2024-01-02T03:04:06Z"},
    "network": {"time": "2024-01-02T03:04:06Z", "name": "eth0", "rxBytes": 1, "txErrors": 0,
                "interfaces": [{"name": "eth0", "rxBytes": 1, "txErrors": 0}]},
    "fs": {"time": "2024-01-02T03:04:06Z", "availableBytes": 1, "capacityBytes": 2, "usedBytes": 1, "inodesFree": 5, "inodes": 10, "inodesUsed": 5},
    "runtime": {"imageFs": {"time": "2024-01-02T03:04:06Z", "usedBytes": 7}, "containerFs": {"time": null}},
    "rlimit": {"time": "2024-01-02T03:04:06Z", "maxpid": 4194304, "curproc": 300},
    "swap": {"time": "2024-01-02T03:04:06Z", "swapUsageBytes": 0}
  },
  "pods": [
    {
      "podRef": {"name": "web", "namespace": "default", "uid": "u1"},
      "startTime": null,
      "containers": [
        {"name": "app", "startTime": "2024-01-02T03:00:00Z",
         "rootfs": {"time": "2024-01-02T03:04:06Z", "usedBytes": 4096, "inodesUsed": 2},
         "logs": {"time": "2024-01-02T03:04:06Z", "usedBytes": 100},
         "accelerators": [{"make": "m", "model": "x", "id": "0", "memoryTotal": 1, "memoryUsed": 0, "dutyCycle": 0}],
         "userDefinedMetrics": [{"name": "q", "type": "gauge", "units": "n", "labels": {"a": "b"}, "time": "2024-01-02T03:04:06Z", "value": 1.5}],
         "swap": {"time": "2024-01-02T03:04:06Z", "swapAvailableBytes": 3}}
      ],
      "cpu": {"time": "2024-01-02T03:04:06Z", "usageCoreNanoSeconds": 5},
      "volume": [
        {"time": "2024-01-02T03:04:06Z", "usedBytes": 2097152, "inodesUsed": 1, "name": "data"},
        {"time": "2024-01-02T03:04:06Z", "name": "claim", "pvcRef": {"name": "c", "namespace": "default"}, "volumeHealthStats": {"abnormal": false}}
      ],
      "ephemeral-storage": {"time": "2024-01-02T03:04:06Z", "usedBytes": 2101348},
      "process_stats": {"process_count": 3}
    },
    {"podRef": {"name": "empty", "namespace": "default", "uid": "u2"}, "startTime": "2024-01-02T03:00:00Z", "containers": null}
  ]
}"#;

    #[test]
    fn golden_decodes_and_reencodes_equal() {
        let decoded: Summary = serde_json::from_str(GOLDEN).unwrap();
        assert_eq!(
            decoded.pods[0]
                .ephemeral_storage
                .as_ref()
                .unwrap()
                .used_bytes,
            Some(2_101_348)
        );
        assert_eq!(
            decoded.pods[0]
                .process_stats
                .as_ref()
                .unwrap()
                .process_count,
            Some(3)
        );
        assert_eq!(decoded.pods[0].start_time, Time(None));
        assert_eq!(decoded.pods[1].containers, None);
        assert_eq!(decoded.node.network.as_ref().unwrap().default.name, "eth0");
        let again = serde_json::to_value(&decoded).unwrap();
        let golden: serde_json::Value = serde_json::from_str(GOLDEN).unwrap();
        assert_eq!(again, golden);
    }

    #[test]
    fn times_are_whole_seconds_and_zero_is_null() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_999);
        let json = serde_json::to_string(&Time::from_system(t)).unwrap();
        assert_eq!(json, "\"2023-11-14T22:13:20Z\"");
        assert_eq!(Time::from_system(t).unix_millis(), Some(1_700_000_000_999));
        assert_eq!(
            serde_json::to_string(&Time::from_system(SystemTime::UNIX_EPOCH)).unwrap(),
            "null"
        );
    }

    #[test]
    fn required_fields_are_present_when_empty() {
        let s = Summary {
            node: NodeStats::default(),
            pods: Vec::new(),
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"node": {"nodeName": "", "startTime": null}, "pods": []})
        );
        let p = PodStats {
            containers: Some(Vec::new()),
            ..Default::default()
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"podRef": {"name": "", "namespace": "", "uid": ""}, "startTime": null, "containers": []})
        );
    }
}

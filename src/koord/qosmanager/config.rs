//! The QoS manager's configuration: koordlet's NodeSLO `resourceUsedThresholdWithBE`
//! (same field names and defaults) plus one switch per strategy (koordlet's feature
//! gates). The thresholds come from this node's NodeSLO in cluster mode, else from
//! `--node-slo-file`, a NodeSLO spec with oxlet's `strategies` block beside it; the
//! switches come from the file. Everything is off unless the NodeSLO turns it on:
//! koordlet's `enable` defaults to false; of its gates, only BECPUSuppress is on by
//! default, and eviction and cgroup reconcile are off.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::koord::slo::{NodeSLOSpec, ResourceThresholdStrategy, SPEC_FIELDS, THRESHOLD_FIELDS};

/// The largest config file read (a NodeSLO section is a few hundred bytes).
pub(crate) const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// How BestEffort pods' CPU is held back. oxlet implements `cfsQuota`; `cpuset` is
/// accepted by name (it is koordlet's default) but refused: it needs the CPU topology
/// and the kubelet CPU manager's pinned sets, which oxlet does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum CpuSuppressPolicy {
    Cpuset,
    CfsQuota,
}

/// Which strategies run (koordlet's feature gates); a switch left out keeps its
/// default below.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub(crate) struct Strategies {
    /// `BECPUSuppress`, beta and on by default.
    pub cpu_suppress: bool,
    /// `BEMemoryEvict`, alpha and off.
    pub memory_evict: bool,
    /// `CgroupReconcile`, alpha and off.
    pub cgroup_reconcile: bool,
}

impl Default for Strategies {
    fn default() -> Self {
        Strategies {
            cpu_suppress: true,
            memory_evict: false,
            cgroup_reconcile: false,
        }
    }
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QosConfig {
    pub enable: bool,
    pub cpu_suppress_threshold_percent: i64,
    pub cpu_suppress_min_percent: Option<i64>,
    pub cpu_suppress_policy: CpuSuppressPolicy,
    pub memory_evict_threshold_percent: i64,
    pub memory_evict_lower_percent: i64,
    pub strategies: Strategies,
}

impl Default for QosConfig {
    /// koordlet's defaults, everything off.
    fn default() -> Self {
        QosConfig {
            enable: false,
            cpu_suppress_threshold_percent: 65,
            cpu_suppress_min_percent: None,
            cpu_suppress_policy: CpuSuppressPolicy::CfsQuota,
            memory_evict_threshold_percent: 70,
            memory_evict_lower_percent: 68,
            strategies: Strategies::default(),
        }
    }
}

impl QosConfig {
    /// CPU suppress runs: the thresholds are enabled and its switch is on.
    pub(crate) fn cpu_suppress_on(&self) -> bool {
        self.enable && self.strategies.cpu_suppress
    }

    /// Memory eviction by usage runs.
    pub(crate) fn memory_evict_on(&self) -> bool {
        self.enable && self.strategies.memory_evict
    }

    /// cgroup reconcile runs (a gate of its own in koordlet, not under `enable`).
    pub(crate) fn cgroup_reconcile_on(&self) -> bool {
        self.strategies.cgroup_reconcile
    }
}

/// A config file that cannot be used, naming the file, the field and the reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("node SLO config {}: cannot read: {error}", file.display())]
    Read {
        file: PathBuf,
        error: std::io::Error,
    },
    #[error("node SLO config {}: larger than {MAX_CONFIG_BYTES} bytes", file.display())]
    TooLarge { file: PathBuf },
    #[error("node SLO config {}: {error}", file.display())]
    Parse { file: PathBuf, error: String },
    #[error("node SLO config {}: {error}", file.display())]
    Invalid { file: PathBuf, error: InvalidField },
}

/// A NodeSLO field whose value cannot be used, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("field {field}: {reason}")]
pub(crate) struct InvalidField {
    pub field: &'static str,
    pub reason: String,
}

/// Reads and validates the file (YAML, of which JSON is a subset).
pub(crate) fn load_qos_config(file: &Path) -> Result<QosConfig, ConfigError> {
    use std::io::Read;
    let f = std::fs::File::open(file).map_err(|error| ConfigError::Read {
        file: file.to_path_buf(),
        error,
    })?;
    let mut text = String::new();
    f.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|error| ConfigError::Read {
            file: file.to_path_buf(),
            error,
        })?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            file: file.to_path_buf(),
        });
    }
    parse(file, &text)
}

/// The first key of `doc` (an object) not in `known`, with `prefix`.
fn unknown_key(doc: &Value, known: &[&str], prefix: &str) -> Option<String> {
    doc.as_object()?
        .keys()
        .find(|k| !known.contains(&k.as_str()))
        .map(|k| format!("{prefix}{k}"))
}

/// Parses and validates `text`, read from `file`: a NodeSLO spec whose sections and
/// threshold fields are koordinator's (anything else is refused, naming it), and
/// oxlet's `strategies`.
pub(crate) fn parse(file: &Path, text: &str) -> Result<QosConfig, ConfigError> {
    let parse_error = |error: String| ConfigError::Parse {
        file: file.to_path_buf(),
        error,
    };
    let mut doc: Value = if text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        serde_yaml_ng::from_str(text).map_err(|e| parse_error(e.to_string()))?
    };
    if !doc.is_object() {
        return Err(parse_error("not a map of NodeSLO spec sections".into()));
    }
    let known: Vec<&str> = SPEC_FIELDS.iter().copied().chain(["strategies"]).collect();
    let unknown = unknown_key(&doc, &known, "").or_else(|| {
        unknown_key(
            &doc["resourceUsedThresholdWithBE"],
            &THRESHOLD_FIELDS,
            "resourceUsedThresholdWithBE.",
        )
    });
    if let Some(field) = unknown {
        return Err(parse_error(format!("unknown field `{field}`")));
    }
    let strategies = match doc.as_object_mut().and_then(|m| m.remove("strategies")) {
        Some(v) => {
            Strategies::deserialize(v).map_err(|e| parse_error(format!("strategies: {e}")))?
        }
        None => Strategies::default(),
    };
    let spec: NodeSLOSpec = serde_json::from_value(doc).map_err(|e| parse_error(e.to_string()))?;
    QosConfig::from_slo(spec.resource_used_threshold_with_be.as_ref(), strategies).map_err(
        |error| ConfigError::Invalid {
            file: file.to_path_buf(),
            error,
        },
    )
}

impl QosConfig {
    /// The configuration of a NodeSLO's thresholds (None: the section is absent)
    /// with `strategies`, over koordlet's defaults; the first unusable field is named.
    pub(crate) fn from_slo(
        t: Option<&ResourceThresholdStrategy>,
        strategies: Strategies,
    ) -> Result<QosConfig, InvalidField> {
        let default_t = ResourceThresholdStrategy::default();
        let t = t.unwrap_or(&default_t);
        let invalid = |field: &'static str, reason: String| InvalidField { field, reason };
        let percent = |field: &'static str, v: i64, lo: i64| {
            if (lo..=100).contains(&v) {
                Ok(v)
            } else {
                Err(invalid(
                    field,
                    format!("{v} is not a percent in [{lo}, 100]"),
                ))
            }
        };
        let d = QosConfig::default();
        let cpu_threshold = percent(
            "resourceUsedThresholdWithBE.cpuSuppressThresholdPercent",
            t.cpu_suppress_threshold_percent
                .unwrap_or(d.cpu_suppress_threshold_percent),
            1,
        )?;
        let cpu_min = t
            .cpu_suppress_min_percent
            .map(|v| percent("resourceUsedThresholdWithBE.cpuSuppressMinPercent", v, 0))
            .transpose()?;
        if let Some(m) = cpu_min.filter(|m| *m > cpu_threshold) {
            return Err(invalid(
                "resourceUsedThresholdWithBE.cpuSuppressMinPercent",
                format!("{m} is above cpuSuppressThresholdPercent ({cpu_threshold})"),
            ));
        }
        let policy = match t.cpu_suppress_policy.as_deref() {
            None | Some("" | "cfsQuota") => CpuSuppressPolicy::CfsQuota,
            Some("cpuset") => {
                return Err(invalid(
                    "resourceUsedThresholdWithBE.cpuSuppressPolicy",
                    "\"cpuset\" is not supported by oxlet (no CPU topology or CPU manager); use \"cfsQuota\"".into(),
                ));
            }
            Some(other) => {
                return Err(invalid(
                    "resourceUsedThresholdWithBE.cpuSuppressPolicy",
                    format!("unknown policy {other:?} (want \"cfsQuota\" or \"cpuset\")"),
                ));
            }
        };
        let mem_threshold = percent(
            "resourceUsedThresholdWithBE.memoryEvictThresholdPercent",
            t.memory_evict_threshold_percent
                .unwrap_or(d.memory_evict_threshold_percent),
            1,
        )?;
        let mem_lower = match t.memory_evict_lower_percent {
            Some(v) => percent("resourceUsedThresholdWithBE.memoryEvictLowerPercent", v, 0)?,
            None => (mem_threshold - 2).max(0),
        };
        if mem_lower > mem_threshold {
            return Err(invalid(
                "resourceUsedThresholdWithBE.memoryEvictLowerPercent",
                format!("{mem_lower} is above memoryEvictThresholdPercent ({mem_threshold})"),
            ));
        }
        Ok(QosConfig {
            enable: t.enable.unwrap_or(false),
            cpu_suppress_threshold_percent: cpu_threshold,
            cpu_suppress_min_percent: cpu_min,
            cpu_suppress_policy: policy,
            memory_evict_threshold_percent: mem_threshold,
            memory_evict_lower_percent: mem_lower,
            strategies,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<QosConfig, ConfigError> {
        parse(Path::new("/etc/slo.yaml"), text)
    }

    #[test]
    fn defaults_are_koordlets_and_everything_is_off() {
        let c = p("").unwrap();
        assert_eq!(c, QosConfig::default());
        assert!(!c.cpu_suppress_on() && !c.memory_evict_on() && !c.cgroup_reconcile_on());
        let c = p("strategies: {cpuSuppress: true}").unwrap();
        assert!(!c.cpu_suppress_on(), "enable=false keeps suppress off");
    }

    #[test]
    fn fields_and_the_lower_percent_default() {
        let c = p(r#"{"resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressThresholdPercent": 50,
            "cpuSuppressMinPercent": 10, "cpuSuppressPolicy": "cfsQuota", "memoryEvictThresholdPercent": 80},
            "strategies": {"cpuSuppress": true, "memoryEvict": true}}"#)
        .unwrap();
        assert!(c.cpu_suppress_on() && c.memory_evict_on() && !c.cgroup_reconcile_on());
        assert_eq!(c.cpu_suppress_threshold_percent, 50);
        assert_eq!(c.cpu_suppress_min_percent, Some(10));
        assert_eq!(c.memory_evict_lower_percent, 78);
    }

    #[test]
    fn a_real_node_slo_spec_is_read_and_a_misspelt_field_refused() {
        // koord-manager's NodeSLO carries sections and threshold fields oxlet does not
        // act on: all read without error.
        let c = p(r#"{"resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressThresholdPercent": 60,
            "cpuSuppressPolicy": "cfsQuota", "memoryAllocatableEvictThresholdPercent": 110, "cpuEvictPolicy": "evictByRealLimit"},
            "resourceQOSStrategy": {"lsClass": {"cpuQOS": {"enable": false}}}, "cpuBurstStrategy": {"policy": "none"},
            "systemStrategy": {"minFreeKbytesFactor": 100}, "extensions": {}, "hostApplications": []}"#)
        .unwrap();
        assert_eq!(c.cpu_suppress_threshold_percent, 60);
        // koordlet's BECPUSuppress gate is on by default; the others are off.
        assert!(c.cpu_suppress_on() && !c.memory_evict_on() && !c.cgroup_reconcile_on());
        let e = p("resourceUsedThresholdWithBE: {cpuSupressThresholdPercent: 60}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "node SLO config /etc/slo.yaml: unknown field `resourceUsedThresholdWithBE.cpuSupressThresholdPercent`"
        );
        let e = p("strategies: {cpuSupress: true}").unwrap_err().to_string();
        assert!(e.contains("strategies: unknown field `cpuSupress`"), "{e}");
        let e = p("- a").unwrap_err().to_string();
        assert!(e.contains("not a map"), "{e}");
    }

    #[test]
    fn errors_name_the_file_the_field_and_the_reason() {
        let e = p("resourceUsedThresholdWithBE: {cpuSuppressThresholdPercent: 120}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "node SLO config /etc/slo.yaml: field resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: 120 is not a percent in [1, 100]"
        );
        let e = p("resourceUsedThresholdWithBE: {cpuSuppressPolicy: magic}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cpuSuppressPolicy: unknown policy \"magic\""),
            "{e}"
        );
        let e = p("resourceUsedThresholdWithBE: {cpuSuppressPolicy: cpuset}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not supported"), "{e}");
        let e = p("resourceUsedThresholdWithBE: {memoryEvictThresholdPercent: 50, memoryEvictLowerPercent: 60}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("memoryEvictLowerPercent: 60 is above"), "{e}");
        let e = p("resourceUsedThresholdWithBE: {cpuSuppressThresholdPercent: 30, cpuSuppressMinPercent: 40}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cpuSuppressMinPercent: 40 is above"), "{e}");
        let e = p("bogus: 1").unwrap_err().to_string();
        assert!(
            e.starts_with("node SLO config /etc/slo.yaml: unknown field `bogus`"),
            "{e}"
        );
        let e = load_qos_config(Path::new("/nonexistent/slo.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("node SLO config /nonexistent/slo.yaml: cannot read"),
            "{e}"
        );
    }
}

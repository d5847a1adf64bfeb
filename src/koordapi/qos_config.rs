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

use super::slo_spec;
use super::slo_types::{NodeSLOSpec, SPEC_FIELDS, THRESHOLD_FIELDS};

/// The largest config file read (a NodeSLO section is a few hundred bytes).
pub(crate) const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// How BestEffort pods' CPU is held back: a CFS quota on the BestEffort QoS cgroup,
/// or a `cpuset.cpus` on it and every cgroup below (koordlet's default policy; oxlet's
/// default stays `cfsQuota`, which the runtime hooks' rule is built on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum CpuSuppressPolicy {
    Cpuset,
    CfsQuota,
}

impl CpuSuppressPolicy {
    /// The NodeSLO's spelling.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CpuSuppressPolicy::Cpuset => "cpuset",
            CpuSuppressPolicy::CfsQuota => "cfsQuota",
        }
    }
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
    /// `BECPUEvict`, alpha and off.
    pub cpu_evict: bool,
    /// `CPUEvict` (by node CPU usage, pods up to a priority), alpha and off.
    pub cpu_usage_evict: bool,
}

impl Default for Strategies {
    fn default() -> Self {
        Strategies {
            cpu_suppress: true,
            memory_evict: false,
            cgroup_reconcile: false,
            cpu_evict: false,
            cpu_usage_evict: false,
        }
    }
}

/// CPUEvict's NodeSLO fields (`cpuEvictThresholdPercent`, `cpuEvictLowerPercent`,
/// `evictEnabledPriorityThreshold`); the window is BECPUEvict's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuUsageEvictConfig {
    pub threshold_percent: i64,
    /// `cpuEvictLowerPercent`, else the threshold − 2.
    pub lower_percent: i64,
    /// Pods with a priority above it are never evicted.
    pub priority_threshold: i32,
}

/// Where BECPUEvict takes the BestEffort tier's CPU limit from (`cpuEvictPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CpuEvictPolicy {
    /// The limit the BestEffort cgroups really have (koordlet's default).
    EvictByRealLimit,
    /// The node's `kubernetes.io/batch-cpu` allocatable.
    EvictByAllocatable,
}

/// BECPUEvict's NodeSLO fields (koordlet's `cpuEvictBE*` and `cpuEvictTimeWindowSeconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuEvictConfig {
    /// `cpuEvictBESatisfactionLowerPercent` and `…UpperPercent`; None while either
    /// is unset, and then BECPUEvict does nothing (koordlet skips the feature).
    pub satisfaction: Option<(i64, i64)>,
    /// `cpuEvictBEUsageThresholdPercent` (90 when unset).
    pub usage_threshold_percent: i64,
    /// `cpuEvictTimeWindowSeconds`, at least the 1 s collect interval.
    pub window_seconds: i64,
    pub policy: CpuEvictPolicy,
}

impl Default for CpuEvictConfig {
    fn default() -> Self {
        CpuEvictConfig {
            satisfaction: None,
            usage_threshold_percent: 90,
            window_seconds: 1,
            policy: CpuEvictPolicy::EvictByRealLimit,
        }
    }
}

/// One koordinator QoS class's memory QoS (`resourceQOSStrategy.<class>.memoryQOS`)
/// as koordlet applies it: the percents of requests for `memory.min` and
/// `memory.low`, and the throttling percent for `memory.high`; all 0 unless the
/// class's `enable` is true (koordlet merges a disabled class with `NoneMemoryQOS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryQosPercents {
    pub min: i64,
    pub low: i64,
    pub throttling: i64,
}

/// The memory QoS of each class (LSE pods use LSR's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryQosClasses {
    pub lsr: MemoryQosPercents,
    pub ls: MemoryQosPercents,
    pub be: MemoryQosPercents,
    pub system: MemoryQosPercents,
}

/// BEMemoryEvict's thresholds: evict over `threshold_percent` of the node's memory,
/// down to `lower_percent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryEvictConfig {
    pub threshold_percent: i64,
    pub lower_percent: i64,
}

impl Default for MemoryEvictConfig {
    /// koordlet's defaults: 70 %, and the threshold − 2.
    fn default() -> Self {
        MemoryEvictConfig {
            threshold_percent: 70,
            lower_percent: 68,
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
    /// None when the NodeSLO's memory eviction fields failed koordlet's check:
    /// BEMemoryEvict does not run then (koordlet skips the feature).
    pub memory_evict: Option<MemoryEvictConfig>,
    pub cpu_evict: CpuEvictConfig,
    /// None while the threshold or the priority threshold is unset: CPUEvict then
    /// does nothing (koordlet skips the feature).
    pub cpu_usage_evict: Option<CpuUsageEvictConfig>,
    /// From `resourceQOSStrategy`, for cgroup reconcile.
    pub memory_qos: MemoryQosClasses,
    pub strategies: Strategies,
}

impl Default for QosConfig {
    /// koordlet's defaults, everything off.
    fn default() -> Self {
        QosConfig {
            enable: false,
            cpu_suppress_threshold_percent: 65,
            cpu_suppress_min_percent: None,
            cpu_suppress_policy: CpuSuppressPolicy::Cpuset,
            memory_evict: Some(MemoryEvictConfig::default()),
            cpu_evict: CpuEvictConfig::default(),
            cpu_usage_evict: None,
            memory_qos: MemoryQosClasses::default(),
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
        self.enable && self.strategies.memory_evict && self.memory_evict.is_some()
    }

    /// BECPUEvict runs.
    pub(crate) fn cpu_evict_on(&self) -> bool {
        self.enable && self.strategies.cpu_evict
    }

    /// CPUEvict runs.
    pub(crate) fn cpu_usage_evict_on(&self) -> bool {
        self.enable && self.strategies.cpu_usage_evict
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

/// A NodeSLO field whose value cannot be used: its path, the value, and why (with the
/// range allowed).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("field {field}: {value} {reason}")]
pub(crate) struct InvalidField {
    pub field: &'static str,
    pub value: Value,
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
/// threshold fields are koordinator's with values in koordinator's ranges (anything
/// else is refused, naming it), and oxlet's `strategies`.
pub(crate) fn parse(file: &Path, text: &str) -> Result<QosConfig, ConfigError> {
    let parse_error = |error: String| ConfigError::Parse {
        file: file.to_path_buf(),
        error,
    };
    let mut doc: Value = if text.trim().is_empty() {
        Value::Object(Default::default())
    } else {
        crate::yaml::single(text, &crate::yaml::CONFIG_LIMITS)
            .map_err(|e| parse_error(e.to_string()))?
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
    // The file is the operator's own: a value out of range refuses it at start,
    // where a NodeSLO's drops only its strategy.
    let (cfg, skipped) = slo_spec::from_spec(&spec, &QosConfig::default(), strategies);
    match skipped.into_iter().next() {
        Some(s) => Err(ConfigError::Invalid {
            file: file.to_path_buf(),
            error: s.error,
        }),
        None => Ok(cfg),
    }
}

/// The next configuration `updates` sends (this node's NodeSLO, as it changes).
/// Without updates, or once their sender is gone, it never resolves: the last
/// configuration stays.
pub(crate) async fn next_update(
    updates: &mut Option<tokio::sync::watch::Receiver<QosConfig>>,
) -> QosConfig {
    loop {
        let Some(rx) = updates.as_mut() else {
            return std::future::pending().await;
        };
        if rx.changed().await.is_ok() {
            return rx.borrow_and_update().clone();
        }
        *updates = None;
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
        assert_eq!(c.memory_evict.map(|m| m.lower_percent), Some(78));
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
    fn the_cpuset_policy_and_be_cpu_evict_fields() {
        let c =
            p("resourceUsedThresholdWithBE: {enable: true, cpuSuppressPolicy: cpuset}").unwrap();
        assert_eq!(c.cpu_suppress_policy, CpuSuppressPolicy::Cpuset);
        // BECPUEvict is off by default, and without the satisfaction pair does nothing.
        assert!(!c.cpu_evict_on());
        assert_eq!(c.cpu_evict, CpuEvictConfig::default());
        let c = p(r#"{"resourceUsedThresholdWithBE": {"enable": true, "cpuEvictBESatisfactionLowerPercent": 40,
            "cpuEvictBESatisfactionUpperPercent": 60, "cpuEvictBEUsageThresholdPercent": 80,
            "cpuEvictTimeWindowSeconds": 30, "cpuEvictPolicy": "evictByAllocatable"},
            "strategies": {"cpuEvict": true}}"#)
        .unwrap();
        assert!(c.cpu_evict_on());
        assert_eq!(
            c.cpu_evict,
            CpuEvictConfig {
                satisfaction: Some((40, 60)),
                usage_threshold_percent: 80,
                window_seconds: 30,
                policy: CpuEvictPolicy::EvictByAllocatable,
            }
        );
        // A window under the 1 s collect interval is the interval.
        let c = p("resourceUsedThresholdWithBE: {cpuEvictTimeWindowSeconds: -5}").unwrap();
        assert_eq!(c.cpu_evict.window_seconds, 1);
        // koordinator bounds neither the window nor the usage threshold, and evicts by
        // the real limit under any policy but evictByAllocatable.
        let c = p(
            r#"{"resourceUsedThresholdWithBE": {"cpuEvictTimeWindowSeconds": 86400,
            "cpuEvictBEUsageThresholdPercent": 101, "cpuEvictPolicy": "evictByMagic"}}"#,
        )
        .unwrap();
        assert_eq!(
            (
                c.cpu_evict.window_seconds,
                c.cpu_evict.usage_threshold_percent
            ),
            (86400, 101)
        );
        assert_eq!(c.cpu_evict.policy, CpuEvictPolicy::EvictByRealLimit);
        let err = |text: &str| p(text).unwrap_err().to_string();
        for (text, want) in [
            (
                "{cpuEvictBESatisfactionLowerPercent: 0}",
                "field resourceUsedThresholdWithBE.cpuEvictBESatisfactionLowerPercent: 0 is not in [1, 60]",
            ),
            (
                "{cpuEvictBESatisfactionLowerPercent: 61}",
                "cpuEvictBESatisfactionLowerPercent: 61 is not in [1, 60]",
            ),
            (
                "{cpuEvictBESatisfactionUpperPercent: 100}",
                "cpuEvictBESatisfactionUpperPercent: 100 is not in [1, 99]",
            ),
            (
                "{cpuEvictBESatisfactionLowerPercent: 50, cpuEvictBESatisfactionUpperPercent: 40}",
                "cpuEvictBESatisfactionUpperPercent: 40 is below cpuEvictBESatisfactionLowerPercent (50)",
            ),
            (
                "{cpuEvictBEUsageThresholdPercent: high}",
                "cpuEvictBEUsageThresholdPercent: \"high\" is not an integer",
            ),
            ("{cpuEvictPolicy: 7}", "cpuEvictPolicy: 7 is not a string"),
        ] {
            let e = err(&format!("resourceUsedThresholdWithBE: {text}"));
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    #[test]
    fn cpu_usage_evict_fields() {
        let c = p(
            r#"{"resourceUsedThresholdWithBE": {"enable": true, "cpuEvictThresholdPercent": 80,
            "evictEnabledPriorityThreshold": 5999}, "strategies": {"cpuUsageEvict": true}}"#,
        )
        .unwrap();
        assert!(c.cpu_usage_evict_on() && !c.cpu_evict_on());
        assert_eq!(
            c.cpu_usage_evict,
            Some(CpuUsageEvictConfig {
                threshold_percent: 80,
                lower_percent: 78,
                priority_threshold: 5999
            })
        );
        // Without the priority threshold koordlet skips the feature.
        let c = p("resourceUsedThresholdWithBE: {cpuEvictThresholdPercent: 80}").unwrap();
        assert_eq!(c.cpu_usage_evict, None);
        let e = p(
            "resourceUsedThresholdWithBE: {cpuEvictThresholdPercent: 80, cpuEvictLowerPercent: 80}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("field resourceUsedThresholdWithBE.cpuEvictLowerPercent: 80 is not below cpuEvictThresholdPercent (80)"),
            "{e}"
        );
        let e = p("resourceUsedThresholdWithBE: {evictEnabledPriorityThreshold: 3000000000}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("evictEnabledPriorityThreshold: 3000000000 is not in"),
            "{e}"
        );
    }

    #[test]
    fn memory_qos_per_class_counts_only_where_enabled() {
        let c = p(r#"{"resourceQOSStrategy": {
            "lsClass": {"memoryQOS": {"enable": true, "minLimitPercent": 40, "lowLimitPercent": 60, "throttlingPercent": 80}},
            "beClass": {"memoryQOS": {"enable": false, "minLimitPercent": 50}, "cpuQOS": {"enable": true}},
            "lsrClass": {"memoryQOS": {"enable": true, "lowLimitPercent": 100}}}}"#)
        .unwrap();
        let m = c.memory_qos;
        assert_eq!(
            m.ls,
            MemoryQosPercents {
                min: 40,
                low: 60,
                throttling: 80
            }
        );
        // Disabled: koordlet's NoneMemoryQOS, all 0; unset percents are 0 too.
        assert_eq!(m.be, MemoryQosPercents::default());
        assert_eq!((m.lsr.min, m.lsr.low, m.lsr.throttling), (0, 100, 0));
        assert_eq!(m.system, MemoryQosPercents::default());
        let e = p(
            "resourceQOSStrategy: {lsClass: {memoryQOS: {enable: true, throttlingPercent: 101}}}",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "node SLO config /etc/slo.yaml: field resourceQOSStrategy.lsClass.memoryQOS.throttlingPercent: 101 is not in [0, 100]"
        );
        let e = p("resourceQOSStrategy: {beClass: {memoryQOS: {enable: yes please}}}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("field resourceQOSStrategy.beClass.memoryQOS.enable"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_file_the_field_and_the_reason() {
        let e = p("resourceUsedThresholdWithBE: {cpuSuppressThresholdPercent: 120}")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "node SLO config /etc/slo.yaml: field resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: 120 is not in [0, 100]"
        );
        let e = p("resourceUsedThresholdWithBE: {memoryEvictThresholdPercent: 50, memoryEvictLowerPercent: 50}")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("memoryEvictLowerPercent: 50 is not below memoryEvictThresholdPercent (50)"),
            "{e}"
        );
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

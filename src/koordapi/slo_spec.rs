//! A NodeSLO spec made into the QoS manager's configuration strategy by strategy, as
//! koordlet uses it (koordinator's `states_nodeslo.go` and the qosmanager plugins):
//! koordlet's informer merges the spec over its defaults without checking anything,
//! and each plugin checks only its own fields when it runs. So a value out of
//! koordinator's range drops its own strategy, and the others apply:
//!
//! - an eviction strategy (BEMemoryEvict, BECPUEvict, CPUEvict) does nothing, as
//!   koordlet's `buildEvictTask` skips a feature whose config is invalid;
//! - CPU suppress, `enable` and a class's memory QoS keep their previous values: their
//!   only ranges are the CRD's, which a real apiserver enforces, so koordlet would
//!   still hold the last NodeSLO the apiserver accepted.
//!
//! The ranges are koordinator's: the CRD's `+kubebuilder:validation` markers and the
//! plugins' own checks. A field with neither takes any value of its type.

use std::ops::RangeInclusive;

use serde_json::Value;

use super::qos_config::{
    CpuEvictConfig, CpuEvictPolicy, CpuSuppressPolicy, CpuUsageEvictConfig, InvalidField,
    MemoryEvictConfig, MemoryQosClasses, MemoryQosPercents, QosConfig, Strategies,
};
use super::slo_types::NodeSLOSpec;

/// What a dropped strategy does until a NodeSLO gives it usable values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// It keeps the values it had before this NodeSLO.
    Previous,
    /// It does not run (koordlet skips the feature).
    Nothing,
}

impl Kept {
    /// What the log says happens.
    pub(crate) fn says(self) -> &'static str {
        match self {
            Kept::Previous => "keeps its previous values",
            Kept::Nothing => "does not run",
        }
    }
}

/// A strategy dropped from a NodeSLO: which, the field that made it, and what it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{strategy} skipped: {error}")]
pub(crate) struct Skipped {
    pub strategy: &'static str,
    pub error: InvalidField,
    pub kept: Kept,
}

/// The percent fields of the CRD: `Minimum=0`, `Maximum=100`.
const PERCENT: RangeInclusive<i64> = 0..=100;
/// A field with no range of koordinator's.
const ANY: RangeInclusive<i64> = i64::MIN..=i64::MAX;
/// `*int32` fields: what Go can decode.
const INT32: RangeInclusive<i64> = i32::MIN as i64..=i32::MAX as i64;

/// The `resourceUsedThresholdWithBE` fields (full paths, for the logs and errors).
mod field {
    pub(super) const ENABLE: &str = "resourceUsedThresholdWithBE.enable";
    pub(super) const SUPPRESS: &str = "resourceUsedThresholdWithBE.cpuSuppressThresholdPercent";
    pub(super) const SUPPRESS_MIN: &str = "resourceUsedThresholdWithBE.cpuSuppressMinPercent";
    pub(super) const SUPPRESS_POLICY: &str = "resourceUsedThresholdWithBE.cpuSuppressPolicy";
    pub(super) const MEM: &str = "resourceUsedThresholdWithBE.memoryEvictThresholdPercent";
    pub(super) const MEM_LOWER: &str = "resourceUsedThresholdWithBE.memoryEvictLowerPercent";
    pub(super) const SAT_LOWER: &str =
        "resourceUsedThresholdWithBE.cpuEvictBESatisfactionLowerPercent";
    pub(super) const SAT_UPPER: &str =
        "resourceUsedThresholdWithBE.cpuEvictBESatisfactionUpperPercent";
    pub(super) const BE_USAGE: &str = "resourceUsedThresholdWithBE.cpuEvictBEUsageThresholdPercent";
    pub(super) const WINDOW: &str = "resourceUsedThresholdWithBE.cpuEvictTimeWindowSeconds";
    pub(super) const EVICT_POLICY: &str = "resourceUsedThresholdWithBE.cpuEvictPolicy";
    pub(super) const CPU: &str = "resourceUsedThresholdWithBE.cpuEvictThresholdPercent";
    pub(super) const CPU_LOWER: &str = "resourceUsedThresholdWithBE.cpuEvictLowerPercent";
    pub(super) const PRIORITY: &str = "resourceUsedThresholdWithBE.evictEnabledPriorityThreshold";
}

fn invalid(field: &'static str, value: &Value, reason: impl Into<String>) -> InvalidField {
    InvalidField {
        field,
        value: value.clone(),
        reason: reason.into(),
    }
}

/// One section's fields by name, each read with its type and range; a field is named
/// by its full path, whose last part is its key here.
struct Fields<'a>(Option<&'a serde_json::Map<String, Value>>);

impl Fields<'_> {
    /// The value at `field`; None when absent or null.
    fn get(&self, field: &'static str) -> Option<&Value> {
        let key = field.rsplit('.').next().unwrap_or(field);
        self.0?.get(key).filter(|v| !v.is_null())
    }

    fn int(
        &self,
        field: &'static str,
        range: RangeInclusive<i64>,
    ) -> Result<Option<i64>, InvalidField> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        let n = v
            .as_i64()
            .ok_or_else(|| invalid(field, v, "is not an integer"))?;
        if !range.contains(&n) {
            let (lo, hi) = (range.start(), range.end());
            return Err(invalid(field, v, format!("is not in [{lo}, {hi}]")));
        }
        Ok(Some(n))
    }

    fn string(&self, field: &'static str) -> Result<Option<&str>, InvalidField> {
        self.get(field)
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| invalid(field, v, "is not a string"))
            })
            .transpose()
    }

    fn bool(&self, field: &'static str) -> Result<Option<bool>, InvalidField> {
        self.get(field)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| invalid(field, v, "is not true or false"))
            })
            .transpose()
    }
}

/// `r`'s value, or, with `r`'s error noted in `skipped`, `fallback`'s.
fn or_skip<T>(
    skipped: &mut Vec<Skipped>,
    strategy: &'static str,
    kept: Kept,
    r: Result<T, InvalidField>,
    fallback: impl FnOnce() -> T,
) -> T {
    r.unwrap_or_else(|error| {
        skipped.push(Skipped {
            strategy,
            error,
            kept,
        });
        fallback()
    })
}

/// The configuration a NodeSLO spec gives over koordlet's defaults, with `strategies`;
/// a strategy with an unusable value is dropped as the module doc says, `prev` giving
/// what a kept one keeps.
pub(crate) fn from_spec(
    spec: &NodeSLOSpec,
    prev: &QosConfig,
    strategies: Strategies,
) -> (QosConfig, Vec<Skipped>) {
    let t = Fields(spec.resource_used_threshold_with_be.as_ref().map(|t| &t.0));
    let mut skipped = Vec::new();
    let s = &mut skipped;
    let enable = t.bool(field::ENABLE).map(|b| b.unwrap_or(false));
    let enable = or_skip(s, "enable", Kept::Previous, enable, || prev.enable);
    let (threshold, min, policy) =
        or_skip(s, "BECPUSuppress", Kept::Previous, cpu_suppress(&t), || {
            (
                prev.cpu_suppress_threshold_percent,
                prev.cpu_suppress_min_percent,
                prev.cpu_suppress_policy,
            )
        });
    let memory = or_skip(
        s,
        "BEMemoryEvict",
        Kept::Nothing,
        memory_evict(&t).map(Some),
        || None,
    );
    let cpu_evict = or_skip(s, "BECPUEvict", Kept::Nothing, cpu_evict(&t), || {
        CpuEvictConfig {
            window_seconds: window(&t).unwrap_or(CpuEvictConfig::default().window_seconds),
            ..CpuEvictConfig::default()
        }
    });
    let cpu_usage_evict = or_skip(s, "CPUEvict", Kept::Nothing, cpu_usage_evict(&t), || None);
    let memory_qos = memory_qos(spec.resource_qos_strategy.as_ref(), &prev.memory_qos, s);
    let cfg = QosConfig {
        enable,
        cpu_suppress_threshold_percent: threshold,
        cpu_suppress_min_percent: min,
        cpu_suppress_policy: policy,
        memory_evict: memory,
        cpu_evict,
        cpu_usage_evict,
        memory_qos,
        strategies,
    };
    (cfg, skipped)
}

/// BECPUSuppress's fields: the threshold (65 when unset) and the minimum in the CRD's
/// percent range. koordlet takes a minimum above the threshold (the minimum wins) and
/// suppresses by cpuset under any policy but `cfsQuota`.
fn cpu_suppress(t: &Fields) -> Result<(i64, Option<i64>, CpuSuppressPolicy), InvalidField> {
    let threshold = t.int(field::SUPPRESS, PERCENT)?;
    let min = t.int(field::SUPPRESS_MIN, PERCENT)?;
    let policy = match t.string(field::SUPPRESS_POLICY)? {
        Some("cfsQuota") => CpuSuppressPolicy::CfsQuota,
        _ => CpuSuppressPolicy::Cpuset,
    };
    let d = QosConfig::default().cpu_suppress_threshold_percent;
    Ok((threshold.unwrap_or(d), min, policy))
}

/// BEMemoryEvict's threshold (70 when unset) and lower percent (the threshold − 2 when
/// unset), with koordlet's check (`generateConfigCheck`): the lower below the threshold.
fn memory_evict(t: &Fields) -> Result<MemoryEvictConfig, InvalidField> {
    let threshold = t.int(field::MEM, PERCENT)?;
    let threshold = threshold.unwrap_or(MemoryEvictConfig::default().threshold_percent);
    let Some(lower) = t.int(field::MEM_LOWER, PERCENT)? else {
        return Ok(MemoryEvictConfig {
            threshold_percent: threshold,
            lower_percent: threshold - 2,
        });
    };
    if lower >= threshold {
        let v = &Value::from(lower);
        let reason = format!("is not below memoryEvictThresholdPercent ({threshold})");
        return Err(invalid(field::MEM_LOWER, v, reason));
    }
    Ok(MemoryEvictConfig {
        threshold_percent: threshold,
        lower_percent: lower,
    })
}

/// `cpuEvictTimeWindowSeconds`, at least the 1 s collect interval (koordlet takes a
/// larger window only); no upper bound.
fn window(t: &Fields) -> Result<i64, InvalidField> {
    let w = t.int(field::WINDOW, ANY)?;
    Ok(w.unwrap_or(0).max(CpuEvictConfig::default().window_seconds))
}

/// BECPUEvict's fields, with koordlet's checks (`isSatisfactionConfigValid`): the
/// lower satisfaction percent in (0, 60], the upper in (0, 100) and not below the
/// lower. The usage threshold has no range (90 when unset); any policy but
/// `evictByAllocatable` evicts by the real limit, as koordlet compares.
fn cpu_evict(t: &Fields) -> Result<CpuEvictConfig, InvalidField> {
    let lower = t.int(field::SAT_LOWER, 1..=60)?;
    let upper = t.int(field::SAT_UPPER, 1..=99)?;
    if let (Some(l), Some(u)) = (lower, upper)
        && u < l
    {
        let reason = format!("is below cpuEvictBESatisfactionLowerPercent ({l})");
        return Err(invalid(field::SAT_UPPER, &Value::from(u), reason));
    }
    let usage = t.int(field::BE_USAGE, ANY)?;
    let policy = match t.string(field::EVICT_POLICY)? {
        Some("evictByAllocatable") => CpuEvictPolicy::EvictByAllocatable,
        _ => CpuEvictPolicy::EvictByRealLimit,
    };
    Ok(CpuEvictConfig {
        satisfaction: lower.zip(upper),
        usage_threshold_percent: usage.unwrap_or(CpuEvictConfig::default().usage_threshold_percent),
        window_seconds: window(t)?,
        policy,
    })
}

/// CPUEvict's fields, with koordlet's checks (`isUsedThresholdConfigValid`): the
/// lower percent (the threshold − 2 when unset) below the threshold. None while the
/// threshold or the priority threshold is unset: koordlet skips the feature.
fn cpu_usage_evict(t: &Fields) -> Result<Option<CpuUsageEvictConfig>, InvalidField> {
    let threshold = t.int(field::CPU, PERCENT)?;
    let lower = t.int(field::CPU_LOWER, PERCENT)?;
    let priority = t.int(field::PRIORITY, INT32)?;
    let Some(threshold) = threshold else {
        return Ok(None);
    };
    let lower = lower.unwrap_or(threshold - 2);
    if lower >= threshold {
        let reason = format!("is not below cpuEvictThresholdPercent ({threshold})");
        return Err(invalid(field::CPU_LOWER, &Value::from(lower), reason));
    }
    Ok(priority.map(|p| CpuUsageEvictConfig {
        threshold_percent: threshold,
        lower_percent: lower,
        priority_threshold: i32::try_from(p).unwrap_or(i32::MAX),
    }))
}

/// The NodeSLO paths of one class's memory QoS.
struct ClassFields {
    class: &'static str,
    strategy: &'static str,
    enable: &'static str,
    percents: [&'static str; 3],
}

macro_rules! class_fields {
    ($class:literal) => {
        ClassFields {
            class: $class,
            strategy: concat!("resourceQOSStrategy.", $class, ".memoryQOS"),
            enable: concat!("resourceQOSStrategy.", $class, ".memoryQOS.enable"),
            percents: [
                concat!("resourceQOSStrategy.", $class, ".memoryQOS.minLimitPercent"),
                concat!("resourceQOSStrategy.", $class, ".memoryQOS.lowLimitPercent"),
                concat!(
                    "resourceQOSStrategy.",
                    $class,
                    ".memoryQOS.throttlingPercent"
                ),
            ],
        }
    };
}

/// Each class's memory QoS from `resourceQOSStrategy` (None: absent, every class
/// off); a class with an unusable value keeps its previous one.
fn memory_qos(
    strategy: Option<&Value>,
    prev: &MemoryQosClasses,
    skipped: &mut Vec<Skipped>,
) -> MemoryQosClasses {
    let mut class = |f: ClassFields, prev: MemoryQosPercents| {
        let r = memory_qos_class(strategy.and_then(|s| s.get(f.class)), &f);
        or_skip(skipped, f.strategy, Kept::Previous, r, || prev)
    };
    MemoryQosClasses {
        lsr: class(class_fields!("lsrClass"), prev.lsr),
        ls: class(class_fields!("lsClass"), prev.ls),
        be: class(class_fields!("beClass"), prev.be),
        system: class(class_fields!("systemClass"), prev.system),
    }
}

/// One class's memory QoS (its section of `resourceQOSStrategy`, None: absent): the
/// percents in the CRD's range; all 0 unless `enable` is true (koordlet merges a
/// disabled class with `NoneMemoryQOS`).
fn memory_qos_class(
    section: Option<&Value>,
    f: &ClassFields,
) -> Result<MemoryQosPercents, InvalidField> {
    let Some(m) = section
        .and_then(|c| c.get("memoryQOS"))
        .filter(|m| !m.is_null())
    else {
        return Ok(MemoryQosPercents::default());
    };
    let fields = Fields(m.as_object());
    if fields.0.is_none() {
        return Err(invalid(f.strategy, m, "is not an object"));
    }
    let enable = fields.bool(f.enable)?.unwrap_or(false);
    let [min, low, throttling] = f.percents.map(|p| fields.int(p, PERCENT));
    let (min, low, throttling) = (
        min?.unwrap_or(0),
        low?.unwrap_or(0),
        throttling?.unwrap_or(0),
    );
    Ok(if enable {
        MemoryQosPercents {
            min,
            low,
            throttling,
        }
    } else {
        MemoryQosPercents::default()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn spec(v: Value) -> NodeSLOSpec {
        serde_json::from_value(v).unwrap()
    }

    /// What the last NodeSLO gave: CPU suppress at 10 % by cfsQuota, the LS class's
    /// memory QoS on.
    fn previous() -> QosConfig {
        let mut prev = QosConfig {
            enable: true,
            cpu_suppress_threshold_percent: 10,
            cpu_suppress_min_percent: Some(5),
            cpu_suppress_policy: CpuSuppressPolicy::CfsQuota,
            ..QosConfig::default()
        };
        prev.memory_qos.ls = MemoryQosPercents {
            min: 10,
            low: 20,
            throttling: 30,
        };
        prev
    }

    #[test]
    fn one_bad_value_drops_its_strategy_and_the_others_apply() {
        let s = spec(json!({
            "resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressThresholdPercent": 40,
                "memoryEvictThresholdPercent": 80,
                "cpuEvictBESatisfactionLowerPercent": 80, "cpuEvictBESatisfactionUpperPercent": 90,
                "cpuEvictThresholdPercent": 70, "evictEnabledPriorityThreshold": 5999},
            "resourceQOSStrategy": {
                "lsClass": {"memoryQOS": {"enable": true, "throttlingPercent": 101}},
                "beClass": {"memoryQOS": {"enable": true, "minLimitPercent": 30}}}}));
        let prev = previous();
        let (c, skipped) = from_spec(&s, &prev, Strategies::default());
        // Applied: CPU suppress, memory eviction, CPUEvict, the BE class.
        assert_eq!(c.cpu_suppress_threshold_percent, 40);
        assert_eq!(c.cpu_suppress_min_percent, None);
        assert_eq!(c.cpu_suppress_policy, CpuSuppressPolicy::Cpuset);
        let m = c.memory_evict.expect("BEMemoryEvict applied");
        assert_eq!((m.threshold_percent, m.lower_percent), (80, 78));
        assert_eq!(
            c.cpu_usage_evict,
            Some(CpuUsageEvictConfig {
                threshold_percent: 70,
                lower_percent: 68,
                priority_threshold: 5999
            })
        );
        assert_eq!(c.memory_qos.be.min, 30);
        // Dropped: BECPUEvict does not run; the LS class keeps what it had.
        assert_eq!(c.cpu_evict, CpuEvictConfig::default());
        assert_eq!(c.memory_qos.ls, prev.memory_qos.ls);
        let got: Vec<_> = skipped
            .iter()
            .map(|s| (s.strategy, s.error.field, s.error.value.clone(), s.kept))
            .collect();
        assert_eq!(
            got,
            [
                ("BECPUEvict", field::SAT_LOWER, json!(80), Kept::Nothing),
                (
                    "resourceQOSStrategy.lsClass.memoryQOS",
                    "resourceQOSStrategy.lsClass.memoryQOS.throttlingPercent",
                    json!(101),
                    Kept::Previous
                ),
            ]
        );
        assert_eq!(skipped[0].error.reason, "is not in [1, 60]");
        assert_eq!(skipped[1].error.reason, "is not in [0, 100]");
    }

    #[test]
    fn cpu_suppress_out_of_the_crd_range_keeps_its_previous_values() {
        let s = spec(json!({"resourceUsedThresholdWithBE": {"enable": true,
            "cpuSuppressThresholdPercent": 150, "memoryEvictThresholdPercent": 90}}));
        let prev = previous();
        let (c, skipped) = from_spec(&s, &prev, Strategies::default());
        assert_eq!(
            (
                c.cpu_suppress_threshold_percent,
                c.cpu_suppress_min_percent,
                c.cpu_suppress_policy
            ),
            (10, Some(5), CpuSuppressPolicy::CfsQuota)
        );
        assert_eq!(c.memory_evict.map(|m| m.threshold_percent), Some(90));
        // Memory QoS is absent from this NodeSLO: every class off again.
        assert_eq!(c.memory_qos, MemoryQosClasses::default());
        assert_eq!(skipped.len(), 1);
        assert_eq!(
            skipped[0].to_string(),
            "BECPUSuppress skipped: field resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: 150 is not in [0, 100]"
        );
        // With no previous NodeSLO, what was in force before: koordlet's defaults.
        let (c, _) = from_spec(&s, &QosConfig::default(), Strategies::default());
        assert_eq!(c.cpu_suppress_threshold_percent, 65);
    }

    #[test]
    fn memory_eviction_failing_koordlets_check_does_not_run() {
        let s = spec(json!({"resourceUsedThresholdWithBE": {"enable": true,
            "memoryEvictThresholdPercent": 60, "memoryEvictLowerPercent": 60,
            "cpuSuppressThresholdPercent": 30}}));
        let on = Strategies {
            memory_evict: true,
            ..Strategies::default()
        };
        let (c, skipped) = from_spec(&s, &previous(), on);
        assert!(!c.memory_evict_on() && c.cpu_suppress_on());
        assert_eq!(c.cpu_suppress_threshold_percent, 30);
        assert_eq!(skipped[0].strategy, "BEMemoryEvict");
        assert_eq!(
            skipped[0].error.reason,
            "is not below memoryEvictThresholdPercent (60)"
        );
        // The next NodeSLO with usable values runs it again.
        let s = spec(json!({"resourceUsedThresholdWithBE": {"enable": true,
            "memoryEvictThresholdPercent": 60}}));
        let (c, skipped) = from_spec(&s, &c, on);
        assert!(c.memory_evict_on() && skipped.is_empty());
    }

    #[test]
    fn koordinators_ranges_not_stricter_ones() {
        // The CRD allows a 0 threshold; koordlet takes a minimum above the threshold,
        // any policy but cfsQuota as cpuset, a lower memory percent below 0 by default.
        let s = spec(json!({"resourceUsedThresholdWithBE": {
            "cpuSuppressThresholdPercent": 0, "cpuSuppressMinPercent": 20,
            "cpuSuppressPolicy": "magic", "memoryEvictThresholdPercent": 0,
            "cpuEvictBEUsageThresholdPercent": 150, "cpuEvictTimeWindowSeconds": 86400,
            "cpuEvictThresholdPercent": 0, "cpuEvictLowerPercent": 0}}));
        let (c, skipped) = from_spec(&s, &previous(), Strategies::default());
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        // cpuEvictLowerPercent 0 is not below a threshold of 0: koordlet's check.
        assert_eq!(skipped[0].strategy, "CPUEvict");
        assert_eq!(
            (
                c.cpu_suppress_threshold_percent,
                c.cpu_suppress_min_percent,
                c.cpu_suppress_policy
            ),
            (0, Some(20), CpuSuppressPolicy::Cpuset)
        );
        let m = c.memory_evict.expect("BEMemoryEvict applied");
        assert_eq!((m.threshold_percent, m.lower_percent), (0, -2));
        assert_eq!(
            (
                c.cpu_evict.usage_threshold_percent,
                c.cpu_evict.window_seconds
            ),
            (150, 86400)
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_drops_its_strategy_not_the_nodeslo() {
        let s = spec(json!({"resourceUsedThresholdWithBE": {"enable": "yes",
            "cpuSuppressThresholdPercent": "high", "memoryEvictThresholdPercent": 75,
            "cpuEvictBESatisfactionLowerPercent": 30, "cpuEvictBESatisfactionUpperPercent": 50,
            "cpuEvictTimeWindowSeconds": 20, "cpuEvictPolicy": 3},
            "resourceQOSStrategy": {"lsClass": {"memoryQOS": "on"}}}));
        let prev = previous();
        let (c, skipped) = from_spec(&s, &prev, Strategies::default());
        assert!(c.enable, "enable keeps its previous value");
        assert_eq!(c.cpu_suppress_threshold_percent, 10);
        assert_eq!(c.memory_evict.map(|m| m.threshold_percent), Some(75));
        // BECPUEvict is dropped; the window it shares with CPUEvict stays.
        assert_eq!(c.cpu_evict.satisfaction, None);
        assert_eq!(c.cpu_evict.window_seconds, 20);
        assert_eq!(c.memory_qos.ls, prev.memory_qos.ls);
        let strategies: Vec<_> = skipped.iter().map(|s| s.strategy).collect();
        assert_eq!(
            strategies,
            [
                "enable",
                "BECPUSuppress",
                "BECPUEvict",
                "resourceQOSStrategy.lsClass.memoryQOS"
            ]
        );
        assert_eq!(skipped[1].error.reason, "is not an integer");
        assert_eq!(skipped[3].error.reason, "is not an object");
    }
}

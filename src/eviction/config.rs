//! The eviction settings beyond `evictionHard` (kubelet's `ParseThresholdConfig`):
//! soft thresholds and their grace periods, minimum reclaim, the pressure transition
//! period and the soft eviction's grace cap, with kubelet's validation rules.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::contracts::{Signal, ThresholdError, ThresholdValue, Thresholds};

/// kubelet's `evictionPressureTransitionPeriod` default.
pub(crate) const DEFAULT_TRANSITION_PERIOD: Duration = Duration::from_secs(300);

/// One threshold the manager watches: hard (no grace) or soft (with its grace).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
    /// None: a hard threshold, acted on at once.
    pub grace: Option<Duration>,
    /// Kept met until the signal is above the threshold plus this.
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// kubelet's `isHardEvictionThreshold`: no grace period, or a zero one (a soft
    /// threshold with `0s` acts at once, and kills as a hard one does).
    pub(crate) fn is_hard(&self) -> bool {
        self.grace.is_none_or(|g| g.is_zero())
    }
}

/// Everything the manager is configured with.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EvictionConfig {
    pub thresholds: Vec<Threshold>,
    pub transition_period: Duration,
    /// `evictionMaxPodGracePeriod`, seconds (soft evictions only).
    pub max_pod_grace_seconds: i64,
    /// Whether `allocatableMemory.available` is observed (enforceNodeAllocatable has pods).
    pub allocatable_memory: bool,
}

impl EvictionConfig {
    /// Hard then soft thresholds, each with its signal's minimum reclaim.
    pub(crate) fn new(
        hard: &Thresholds,
        soft: &Thresholds,
        soft_grace: &BTreeMap<Signal, Duration>,
        min_reclaim: &BTreeMap<Signal, ThresholdValue>,
    ) -> Self {
        let mut thresholds = Vec::new();
        for (s, v) in &hard.0 {
            thresholds.push(Threshold {
                signal: *s,
                value: *v,
                grace: None,
                min_reclaim: min_reclaim.get(s).copied(),
            });
        }
        for (s, v) in &soft.0 {
            thresholds.push(Threshold {
                signal: *s,
                value: *v,
                grace: soft_grace.get(s).copied(),
                min_reclaim: min_reclaim.get(s).copied(),
            });
        }
        EvictionConfig {
            thresholds,
            transition_period: DEFAULT_TRANSITION_PERIOD,
            max_pod_grace_seconds: 0,
            allocatable_memory: false,
        }
    }

    /// enforceNodeAllocatable has `pods` (kubelet's `addAllocatableThresholds`):
    /// `allocatableMemory.available` is observed, and each hard `memory.available`
    /// threshold is copied to it with its minimum reclaim.
    pub(crate) fn enforce_pod_allocatable(&mut self) {
        self.allocatable_memory = true;
        let copies: Vec<Threshold> = self
            .thresholds
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..*t
            })
            .collect();
        self.thresholds.extend(copies);
    }
}

/// Why the eviction settings are refused (kubelet's messages where it has them).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("unsupported eviction signal {0}")]
    Signal(String),
    #[error("grace period must be specified for the soft eviction threshold {0}")]
    SoftWithoutGrace(Signal),
    #[error("eviction grace period for {signal}: {value:?} is not a duration (e.g. 1m30s)")]
    GraceNotDuration { signal: Signal, value: String },
    #[error("invalid eviction grace period specified: {0}, must be a positive value")]
    NegativeGrace(String),
    #[error("minimum reclaim for {signal}: {value:?} is not a quantity or a percentage")]
    MinReclaimMalformed { signal: Signal, value: String },
    #[error("eviction percentage minimum reclaim {signal} must be positive: {value}")]
    MinReclaimPercentage { signal: Signal, value: String },
    #[error("negative eviction minimum reclaim specified for {0}")]
    NegativeMinReclaim(Signal),
    #[error(transparent)]
    Threshold(#[from] ThresholdError),
}

/// `evictionSoftGracePeriod`: signal → Go duration, not negative (kubelet's
/// `parseGracePeriods`; a grace period for a signal without a soft threshold is
/// accepted and unused, as there).
pub(crate) fn parse_grace_periods<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<BTreeMap<Signal, Duration>, ConfigError> {
    let mut map = BTreeMap::new();
    for (s, v) in pairs {
        let signal = Signal::parse(s).ok_or_else(|| ConfigError::Signal(s.to_string()))?;
        let d =
            crate::duration::parse_go_duration(v).map_err(|_| ConfigError::GraceNotDuration {
                signal,
                value: v.to_string(),
            })?;
        let d = d
            .to_std()
            .ok_or_else(|| ConfigError::NegativeGrace(v.to_string()))?;
        map.insert(signal, d);
    }
    Ok(map)
}

/// `evictionMinimumReclaim` (kubelet's `parseMinimumReclaims`): signal → a percentage
/// above zero (of the capacity; above 100% is accepted, as there) or a quantity not
/// negative (a zero reclaims nothing beyond the threshold).
pub(crate) fn parse_min_reclaim<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<BTreeMap<Signal, ThresholdValue>, ConfigError> {
    let mut map = BTreeMap::new();
    for (s, v) in pairs {
        let signal = Signal::parse(s).ok_or_else(|| ConfigError::Signal(s.to_string()))?;
        let bad = || ConfigError::MinReclaimMalformed {
            signal,
            value: v.to_string(),
        };
        let value = if let Some(p) = v.strip_suffix('%') {
            let p: f64 = p.parse().map_err(|_| bad())?;
            if !p.is_finite() {
                return Err(bad());
            }
            if p <= 0.0 {
                return Err(ConfigError::MinReclaimPercentage {
                    signal,
                    value: v.to_string(),
                });
            }
            ThresholdValue::Percentage(p / 100.0)
        } else {
            let q = crate::quantity::bytes(
                &k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_string()),
            )
            .map_err(|_| bad())?;
            if q < 0 {
                return Err(ConfigError::NegativeMinReclaim(signal));
            }
            ThresholdValue::Quantity(q)
        };
        map.insert(signal, value);
    }
    Ok(map)
}

/// kubelet's rule: every soft threshold has a grace period.
pub(crate) fn check_soft(
    soft: &Thresholds,
    grace: &BTreeMap<Signal, Duration>,
) -> Result<(), ConfigError> {
    match soft.0.keys().find(|s| !grace.contains_key(s)) {
        Some(s) => Err(ConfigError::SoftWithoutGrace(*s)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soft(pairs: &[(&str, &str)]) -> Thresholds {
        Thresholds::parse(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn soft_thresholds_and_grace_periods_go_together() {
        let g = parse_grace_periods([("memory.available", "1m30s")]).unwrap();
        assert_eq!(g[&Signal::MemoryAvailable], Duration::from_secs(90));
        assert_eq!(
            check_soft(&soft(&[("memory.available", "1Gi")]), &g),
            Ok(())
        );
        assert_eq!(
            check_soft(&soft(&[("nodefs.available", "10%")]), &g)
                .unwrap_err()
                .to_string(),
            "grace period must be specified for the soft eviction threshold nodefs.available"
        );
        // A grace period without its soft threshold is unused, as in kubelet.
        assert_eq!(check_soft(&Thresholds::default(), &g), Ok(()));
        // A disabled (0%) soft threshold needs no grace.
        assert_eq!(
            check_soft(&soft(&[("memory.available", "0%")]), &BTreeMap::new()),
            Ok(())
        );
    }

    #[test]
    fn grace_periods_are_durations_not_negative_of_known_signals() {
        let zero = parse_grace_periods([("memory.available", "0s")]).unwrap();
        assert_eq!(zero[&Signal::MemoryAvailable], Duration::ZERO);
        let err = |k, v| parse_grace_periods([(k, v)]).unwrap_err().to_string();
        assert_eq!(
            err("memory.available", "-1s"),
            "invalid eviction grace period specified: -1s, must be a positive value"
        );
        assert_eq!(
            err("memory.available", "soon"),
            "eviction grace period for memory.available: \"soon\" is not a duration (e.g. 1m30s)"
        );
        assert_eq!(
            err("memory.free", "1m"),
            "unsupported eviction signal memory.free"
        );
    }

    #[test]
    fn minimum_reclaim_takes_quantities_and_percentages_of_known_signals() {
        let m =
            parse_min_reclaim([("memory.available", "500Mi"), ("nodefs.available", "5%")]).unwrap();
        assert_eq!(
            m[&Signal::MemoryAvailable],
            ThresholdValue::Quantity(500 << 20)
        );
        assert_eq!(
            m[&Signal::NodeFsAvailable],
            ThresholdValue::Percentage(0.05)
        );
        let err = |k, v| parse_min_reclaim([(k, v)]).unwrap_err().to_string();
        assert_eq!(
            err("memory.available", "-1Mi"),
            "negative eviction minimum reclaim specified for memory.available"
        );
        assert_eq!(
            err("nodefs.available", "0%"),
            "eviction percentage minimum reclaim nodefs.available must be positive: 0%"
        );
        assert_eq!(
            err("nodefs.available", "lots"),
            "minimum reclaim for nodefs.available: \"lots\" is not a quantity or a percentage"
        );
        // kubelet has no upper bound on a minimum reclaim percentage.
        assert_eq!(
            parse_min_reclaim([("nodefs.available", "150%")]).unwrap()[&Signal::NodeFsAvailable],
            ThresholdValue::Percentage(1.5)
        );
        assert_eq!(
            err("disk.free", "1Gi"),
            "unsupported eviction signal disk.free"
        );
    }

    #[test]
    fn config_lists_hard_then_soft_with_their_minimum_reclaim() {
        let hard = soft(&[("memory.available", "100Mi")]);
        let s = soft(&[("memory.available", "1Gi")]);
        let g = parse_grace_periods([("memory.available", "1m")]).unwrap();
        let m = parse_min_reclaim([("memory.available", "50Mi")]).unwrap();
        let c = EvictionConfig::new(&hard, &s, &g, &m);
        assert_eq!(c.thresholds.len(), 2);
        assert!(c.thresholds[0].is_hard());
        assert_eq!(c.thresholds[1].grace, Some(Duration::from_secs(60)));
        assert_eq!(
            c.thresholds[1].min_reclaim,
            Some(ThresholdValue::Quantity(50 << 20))
        );
        // With pods' allocatable enforced, the hard memory threshold (only) is copied.
        let mut c = c;
        c.enforce_pod_allocatable();
        assert!(c.allocatable_memory);
        assert_eq!(c.thresholds.len(), 3);
        let copy = c.thresholds[2];
        assert_eq!(copy.signal, Signal::AllocatableMemoryAvailable);
        assert!(copy.is_hard());
        assert_eq!(copy.value, ThresholdValue::Quantity(100 << 20));
        assert_eq!(copy.min_reclaim, Some(ThresholdValue::Quantity(50 << 20)));
    }
}

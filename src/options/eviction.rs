//! The eviction manager: hard and soft thresholds, grace periods, reclaim.

use super::Options;
use super::settings::{
    Input, InvalidValue,
    Kind::{Duration, Int, Map},
    Setting, map_pairs, parse_duration, parse_int, row,
};
use crate::contracts::DEFAULT_EVICTION_HARD;
use crate::contracts::Thresholds;

/// The eviction manager's thresholds and periods (read by `agent/node.rs`).
#[derive(Debug, Clone)]
pub(crate) struct EvictionOptions {
    /// `evictionHard`: kubelet's defaults unless given (then replaced whole).
    pub(crate) hard: Thresholds,
    // The eviction manager: the settings beyond evictionHard.
    pub(crate) soft: Thresholds,
    pub(crate) soft_grace_period:
        std::collections::BTreeMap<crate::contracts::Signal, std::time::Duration>,
    pub(crate) minimum_reclaim:
        std::collections::BTreeMap<crate::contracts::Signal, crate::contracts::ThresholdValue>,
    pub(crate) pressure_transition_period: std::time::Duration,
    pub(crate) max_pod_grace_period: i64,
}

impl EvictionOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        EvictionOptions {
            hard: Thresholds::default(),
            soft: Thresholds::default(),
            soft_grace_period: Default::default(),
            minimum_reclaim: Default::default(),
            pressure_transition_period: std::time::Duration::ZERO,
            max_pod_grace_period: 0,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for EvictionOptions {
    fn default() -> Self {
        super::Options::default().eviction
    }
}

/// The hard thresholds (the container manager reads them for allocatable too).
pub(super) const HARD: &[Setting] = &[row(
    "eviction-hard",
    Some("evictionHard"),
    Map('<'),
    DEFAULT_EVICTION_HARD,
    "SIGNAL<VALUE,...",
    "Hard eviction thresholds; a given set replaces the defaults (0% or 100% disables one)",
    set_eviction_hard,
)];

/// The eviction manager's settings beyond evictionHard; the soft thresholds after
/// their grace periods (their check reads them).
pub(super) const SOFT: &[Setting] = &[
    row(
        "eviction-soft-grace-period",
        Some("evictionSoftGracePeriod"),
        Map('='),
        "",
        "SIGNAL=DURATION,...",
        "How long each soft threshold must hold before a pod is evicted",
        set_eviction_soft_grace,
    ),
    row(
        "eviction-soft",
        Some("evictionSoft"),
        Map('<'),
        "",
        "SIGNAL<VALUE,...",
        "Soft eviction thresholds, acted on after their grace period",
        set_eviction_soft,
    ),
    row(
        "eviction-minimum-reclaim",
        Some("evictionMinimumReclaim"),
        Map('='),
        "",
        "SIGNAL=VALUE,...",
        "How far above its threshold a signal must get back before the threshold counts as \
         resolved",
        |o, i| {
            crate::eviction::parse_min_reclaim(map_pairs(i.text, '=')?)
                .map(|m| o.eviction.minimum_reclaim = m)
                .map_err(|e| InvalidValue(e.to_string()))
        },
    ),
    row(
        "eviction-pressure-transition-period",
        Some("evictionPressureTransitionPeriod"),
        Duration,
        "5m0s",
        "DURATION",
        "How long a pressure condition stays True after its threshold was last met",
        |o, i| {
            parse_duration(i.text)?
                .to_std()
                .map(|d| o.eviction.pressure_transition_period = d)
                .ok_or_else(|| "must not be negative".into())
        },
    ),
    row(
        "eviction-max-pod-grace-period",
        Some("evictionMaxPodGracePeriod"),
        Int,
        "0",
        "SECONDS",
        "Longest grace period given to a pod evicted for a soft threshold",
        |o, i| parse_int(i.text).map(|n| o.eviction.max_pod_grace_period = n),
    ),
];

fn set_eviction_hard(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.eviction.hard =
        Thresholds::parse(map_pairs(i.text, '<')?).map_err(|e| InvalidValue(e.to_string()))?;
    Ok(())
}

fn set_eviction_soft_grace(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.eviction.soft_grace_period = crate::eviction::parse_grace_periods(map_pairs(i.text, '=')?)
        .map_err(|e| InvalidValue(e.to_string()))?;
    Ok(())
}

/// kubelet's rule: each soft threshold has a grace period (read from the row before).
fn set_eviction_soft(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let soft =
        Thresholds::parse(map_pairs(i.text, '<')?).map_err(|e| InvalidValue(e.to_string()))?;
    crate::eviction::check_soft(&soft, &o.eviction.soft_grace_period).map_err(|e| {
        InvalidValue(format!(
            "{e} (set --eviction-soft-grace-period or evictionSoftGracePeriod)"
        ))
    })?;
    o.eviction.soft = soft;
    Ok(())
}

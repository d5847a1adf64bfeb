//! Graceful node shutdown: the grace periods, or budgets by pod priority.

use super::Options;
use super::settings::{
    Input, InvalidValue,
    Kind::{Duration, GraceByPriority},
    Setting, grace_by_priority, parse_duration, row,
};

/// Graceful node shutdown's budgets (read by `agent/node.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ShutdownOptions {
    /// Graceful node shutdown: `shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`
    /// (zero: off) and `shutdownGracePeriodByPodPriority` (checked: not with the others).
    pub(crate) grace_period: std::time::Duration,
    pub(crate) grace_period_critical_pods: std::time::Duration,
    pub(crate) by_pod_priority: Vec<crate::nodeshutdown::PriorityGrace>,
}

impl ShutdownOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        ShutdownOptions {
            grace_period: std::time::Duration::ZERO,
            grace_period_critical_pods: std::time::Duration::ZERO,
            by_pod_priority: Vec::new(),
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for ShutdownOptions {
    fn default() -> Self {
        super::Options::default().shutdown
    }
}

/// Graceful node shutdown (config file only, as in kubelet); each row's check
/// reads the rows above it.
pub(super) const SHUTDOWN: &[Setting] = &[
    row(
        "",
        Some("shutdownGracePeriod"),
        Duration,
        "",
        "DURATION",
        "How long a node shutdown is delayed for the pods to stop (unset or 0s: graceful node \
         shutdown off); config file only",
        |o, i| shutdown_period(i.text).map(|d| o.shutdown.grace_period = d),
    ),
    row(
        "",
        Some("shutdownGracePeriodCriticalPods"),
        Duration,
        "",
        "DURATION",
        "The part of shutdownGracePeriod kept for critical pods (priority 2000000000 and up), \
         stopped after the others; config file only",
        set_shutdown_grace_critical,
    ),
    row(
        "",
        Some("shutdownGracePeriodByPodPriority"),
        GraceByPriority,
        "",
        "PRIORITY=SECONDS,...",
        "Shutdown budgets by pod priority, instead of the two above; config file only",
        set_shutdown_by_priority,
    ),
];

/// kubelet's check of the shutdown periods: zero, or at least a second.
fn shutdown_period(text: &str) -> Result<std::time::Duration, InvalidValue> {
    if text.is_empty() {
        return Ok(std::time::Duration::ZERO);
    }
    parse_duration(text)?
        .to_std()
        .filter(|d| d.is_zero() || *d >= std::time::Duration::from_secs(1))
        .ok_or_else(|| "must be either zero or otherwise >= 1 sec".into())
}

/// kubelet's: no longer than `shutdownGracePeriod` (its row comes first).
fn set_shutdown_grace_critical(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let d = shutdown_period(i.text)?;
    if d > o.shutdown.grace_period {
        return Err(format!(
            "must be <= shutdownGracePeriod {}",
            crate::duration::format_go_duration(o.shutdown.grace_period)
        )
        .into());
    }
    o.shutdown.grace_period_critical_pods = d;
    Ok(())
}

/// kubelet's: not together with `shutdownGracePeriod` or
/// `shutdownGracePeriodCriticalPods` (their rows come first).
fn set_shutdown_by_priority(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let list = grace_by_priority(i.text)?;
    let periods_given =
        !o.shutdown.grace_period.is_zero() || !o.shutdown.grace_period_critical_pods.is_zero();
    if !list.is_empty() && periods_given {
        return Err(
            "cannot be given with shutdownGracePeriod or shutdownGracePeriodCriticalPods at the \
             same time"
                .into(),
        );
    }
    o.shutdown.by_pod_priority = list;
    Ok(())
}

//! CPU suppress, `cfsQuota` policy (koordlet's `cpusuppress`): BestEffort pods get
//! what the node has left under the threshold once the other pods and the system
//! have taken theirs, as a CFS quota on the BestEffort QoS cgroup.

use super::inputs::{PodUsage, UsageView};
use crate::koordapi::QosConfig;

/// The CFS period the quota is written against (µs).
pub(crate) const PERIOD_US: i64 = 100_000;
/// The least quota ever set (koordlet's `cfsQuotaMinValue`): 0.02 CPU.
pub(crate) const MIN_QUOTA_US: i64 = 2000;

/// The inputs of one round, all in millicores.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SuppressInputs {
    pub capacity_milli: i64,
    pub allocatable_milli: i64,
    pub node_used_milli: f64,
    pub pods_used_milli: f64,
    pub non_be_pods_used_milli: f64,
    /// The host applications' CPU: all, and those not BE.
    pub host_apps_used_milli: f64,
    pub non_be_host_apps_used_milli: f64,
    /// The CPU the Node's `node.koordinator.sh/reservation` annotation reserves
    /// (0 without one, and in standalone mode).
    pub annotation_reserved_milli: i64,
}

impl SuppressInputs {
    /// From the usage view (cores) and the node's capacity and allocatable.
    pub(crate) fn from_usage(
        view: &UsageView,
        capacity_milli: i64,
        allocatable_milli: i64,
    ) -> Self {
        let sum = |f: &dyn Fn(&PodUsage) -> bool| {
            view.pods
                .iter()
                .filter(|p| f(p))
                .map(|p| p.cpu_cores * 1000.0)
                .sum::<f64>()
        };
        SuppressInputs {
            capacity_milli,
            allocatable_milli,
            node_used_milli: view.node_cpu_cores * 1000.0,
            pods_used_milli: sum(&|_| true),
            non_be_pods_used_milli: sum(&|p| !p.best_effort && !p.koord_be),
            host_apps_used_milli: view.host_apps_cpu_cores.0 * 1000.0,
            non_be_host_apps_used_milli: view.host_apps_cpu_cores.1 * 1000.0,
            annotation_reserved_milli: 0,
        }
    }

    /// `max(node − all pods − all host applications, 0)`, raised to at least the
    /// node's reservation: koordlet's `GetNodeResourceReserved`, the larger of
    /// kubelet's (`capacity − allocatable`) and the reservation annotation's.
    pub(crate) fn system_used_milli(&self) -> f64 {
        let kubelet = (self.capacity_milli - self.allocatable_milli).max(0);
        let reserved = kubelet.max(self.annotation_reserved_milli) as f64;
        (self.node_used_milli - self.pods_used_milli - self.host_apps_used_milli)
            .max(0.0)
            .max(reserved)
    }
}

/// What BestEffort may use, in millicores (koordlet's `calculateBESuppressCPU`):
/// capacity × threshold% − non-BE pod and host application usage − system usage,
/// floored at capacity ×
/// min% when that is set. May be negative (then the quota is the minimum).
pub(crate) fn suppress_milli(cfg: &QosConfig, i: &SuppressInputs) -> f64 {
    let cap = i.capacity_milli as f64;
    let s = cap * cfg.cpu_suppress_threshold_percent as f64 / 100.0
        - i.non_be_pods_used_milli
        - i.non_be_host_apps_used_milli
        - i.system_used_milli();
    match cfg.cpu_suppress_min_percent {
        Some(min) => s.max(cap * min as f64 / 100.0),
        None => s,
    }
}

/// The quota to write this round, or None to leave the current one (koordlet's
/// `adjustByCfsQuota`): quota = suppress × 100 µs per millicore, at least
/// [`MIN_QUOTA_US`]; changes under 1 % of the node's quota are skipped unless the
/// target is the minimum; once a quota is set, an increase is at most 10 % of the
/// node's quota per round.
pub(crate) fn next_quota(
    suppress_milli: f64,
    current: Option<i64>,
    capacity_milli: i64,
) -> Option<i64> {
    let node_quota = capacity_milli.saturating_mul(PERIOD_US / 1000);
    let mut target = ((suppress_milli * (PERIOD_US / 1000) as f64) as i64).max(MIN_QUOTA_US);
    let Some(cur) = current.filter(|c| *c > 0) else {
        return Some(target);
    };
    if target > cur {
        target = target.min(cur.saturating_add(node_quota / 10));
    }
    let small = (target - cur).abs() < node_quota / 100;
    if target == cur || (small && target != MIN_QUOTA_US) {
        return None;
    }
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(threshold: i64, min: Option<i64>) -> QosConfig {
        QosConfig {
            cpu_suppress_threshold_percent: threshold,
            cpu_suppress_min_percent: min,
            ..QosConfig::default()
        }
    }

    #[test]
    fn suppress_takes_non_be_pods_and_the_system_off_the_threshold() {
        // 4 CPUs, 65 %: 2600m. LS pods use 1000m, BE pods 750m, node 2250m:
        // system = 2250 − 1750 = 500m (above the 200m reservation).
        let view = UsageView {
            host_apps_cpu_cores: (0.0, 0.0),
            node_cpu_cores: 2.25,
            node_memory_bytes: 0.0,
            pods: vec![
                PodUsage::test("ls", false, 1.0, 0.0),
                PodUsage::test("be", true, 0.5, 0.0),
                // Burstable by kube QoS, BE by koordinator's label: not counted.
                PodUsage {
                    koord_be: true,
                    ..PodUsage::test("koord-be", false, 0.25, 0.0)
                },
            ],
        };
        let i = SuppressInputs::from_usage(&view, 4000, 3800);
        assert_eq!(i.non_be_pods_used_milli, 1000.0);
        assert_eq!(i.system_used_milli(), 500.0);
        assert_eq!(suppress_milli(&cfg(65, None), &i), 1100.0);
        // The reservation is the floor of the system's share.
        let idle = SuppressInputs {
            node_used_milli: 1500.0,
            ..i.clone()
        };
        assert_eq!(idle.system_used_milli(), 200.0);
        assert_eq!(suppress_milli(&cfg(65, None), &idle), 1400.0);
        // Busy LS pods: negative, floored at min% when set.
        let busy = SuppressInputs {
            non_be_pods_used_milli: 3000.0,
            ..i.clone()
        };
        assert_eq!(suppress_milli(&cfg(65, None), &busy), -900.0);
        assert_eq!(suppress_milli(&cfg(65, Some(10)), &busy), 400.0);
        // Host applications: 300m in all, 200m of it not BE. The system's share
        // loses all 300m; the threshold loses the 200m not BE.
        let with_apps = SuppressInputs::from_usage(
            &UsageView {
                host_apps_cpu_cores: (0.3, 0.2),
                ..view
            },
            4000,
            3800,
        );
        assert_eq!(with_apps.system_used_milli(), 200.0);
        assert_eq!(suppress_milli(&cfg(65, None), &with_apps), 1200.0);
        // The Node's reservation annotation (1 CPU) is a floor above kubelet's 200m.
        let reserved = SuppressInputs {
            annotation_reserved_milli: 1000,
            ..idle.clone()
        };
        assert_eq!(reserved.system_used_milli(), 1000.0);
        assert_eq!(suppress_milli(&cfg(65, None), &reserved), 600.0);
        // Under the system's usage it changes nothing.
        let small = SuppressInputs {
            annotation_reserved_milli: 300,
            ..i.clone()
        };
        assert_eq!(small.system_used_milli(), 500.0);
    }

    #[test]
    fn quota_steps_follow_koordlet() {
        // First write: no cap.
        assert_eq!(next_quota(1100.0, None, 4000), Some(110_000));
        assert_eq!(next_quota(1100.0, Some(-1), 4000), Some(110_000));
        // Negative suppress: the minimum.
        assert_eq!(next_quota(-900.0, Some(110_000), 4000), Some(MIN_QUOTA_US));
        // Under 1 % of 400000 (4000): skipped.
        assert_eq!(next_quota(1130.0, Some(110_000), 4000), None);
        // Increase capped at 10 % (40000) per round.
        assert_eq!(next_quota(3000.0, Some(110_000), 4000), Some(150_000));
        // Decreases are immediate.
        assert_eq!(next_quota(500.0, Some(150_000), 4000), Some(50_000));
        // At the minimum already: nothing to do.
        assert_eq!(next_quota(0.0, Some(MIN_QUOTA_US), 4000), None);
        // A small step down to the minimum is still taken.
        assert_eq!(next_quota(0.0, Some(3000), 4000), Some(MIN_QUOTA_US));
    }
}

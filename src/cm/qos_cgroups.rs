//! The node-level cgroups: `kubepods` with node allocatable's limits, and the
//! `burstable` and `besteffort` QoS cgroups with their cpu shares (kubelet's
//! `setupNode` and `qosContainerManager.UpdateCgroups`).

use crate::locks::Locked as _;
use tracing::{debug, info};

use super::fs::CgroupError;
use super::manager::{ContainerManager, warn_failed};
use super::qos::QosClass;
use super::resources::{ResourceConfig, milli_cpu_to_shares};

impl ContainerManager {
    /// Creates `kubepods` and the QoS cgroups at start, with their limits. An error
    /// here stops the agent: pods must not start outside the tree.
    pub(crate) fn setup(&self) -> Result<(), CgroupError> {
        if !self.cfg.cgroups_per_qos {
            return Ok(());
        }
        let kubepods = self.qos_path(QosClass::Guaranteed);
        self.fs.create(&kubepods, &self.cfg.kubepods)?;
        info!(cgroup = %kubepods, cpuShares = self.cfg.kubepods.cpu_shares, memoryLimit = self.cfg.kubepods.memory_limit, pidsLimit = self.cfg.kubepods.pids_limit, "the kubepods cgroup and its QoS cgroups are ready");
        for class in [QosClass::Burstable, QosClass::BestEffort] {
            self.fs
                .create(&self.qos_path(class), &self.qos_limits(class))?;
        }
        Ok(())
    }

    /// The limits of a QoS cgroup: BestEffort gets the least cpu shares, Burstable
    /// the sum of its pods' cpu requests.
    fn qos_limits(&self, class: QosClass) -> ResourceConfig {
        let milli: i64 = match class {
            QosClass::BestEffort => 0,
            _ => self
                .tracked()
                .values()
                .filter(|p| p.class == class)
                .map(|p| p.cpu_request_milli)
                .fold(0i64, i64::saturating_add),
        };
        ResourceConfig {
            // 0 millicores is the least shares (2).
            cpu_shares: u64::try_from(milli_cpu_to_shares(milli)).ok(),
            ..ResourceConfig::default()
        }
    }

    /// Recomputes the QoS cgroups' shares, re-creating any cgroup of the tree that
    /// was removed from outside. Failures are logged; the next call tries again.
    pub(crate) fn update_qos(&self) {
        if !self.cfg.cgroups_per_qos {
            return;
        }
        let _serial = self.qos_update.locked();
        let kubepods = self.qos_path(QosClass::Guaranteed);
        if !self.fs.exists(&kubepods) {
            info!(cgroup = %kubepods, "the kubepods cgroup is missing; re-creating it");
        }
        // Idempotent: creates only what is missing, then writes the limits.
        let update = |path: &str, limits: &ResourceConfig| {
            crate::metrics::cgroup_op("update", || self.fs.create(path, limits))
        };
        if let Err(e) = update(&kubepods, &self.cfg.kubepods) {
            warn_failed("cannot repair the kubepods cgroup", &e);
        }
        for class in [QosClass::Burstable, QosClass::BestEffort] {
            let path = self.qos_path(class);
            let limits = self.qos_limits(class);
            if !self.fs.exists(&path) {
                info!(cgroup = %path, "a QoS cgroup is missing; re-creating it");
            }
            match update(&path, &limits) {
                Ok(()) => {
                    debug!(cgroup = %path, shares = limits.cpu_shares.unwrap_or_default(), "updated QoS cgroup");
                }
                Err(e) => warn_failed("cannot update a QoS cgroup", &e),
            }
        }
    }
}

/// What the node QoS manager (koordlet's qosmanager) reads and writes on
/// the QoS cgroups: the BestEffort CFS quota (CPU suppress) and the QoS shares put
/// back when something else changed them (cgroup reconcile).
impl ContainerManager {
    /// The BestEffort QoS cgroup's CFS quota in µs (−1: no limit; None: unreadable
    /// as a number, e.g. no cpu controller file).
    pub(crate) fn best_effort_cpu_quota(&self) -> Result<Option<i64>, CgroupError> {
        Ok(self
            .fs
            .resources(&self.qos_path(QosClass::BestEffort))?
            .cpu_quota)
    }

    /// Writes the BestEffort QoS cgroup's CFS quota with the default period (−1
    /// lifts the limit). Without per-QoS cgroups there is no such cgroup: a no-op.
    pub(crate) fn set_best_effort_cpu_quota(&self, quota_us: i64) -> Result<(), CgroupError> {
        if !self.cfg.cgroups_per_qos {
            return Ok(());
        }
        let res = ResourceConfig {
            cpu_period: Some(crate::cm::resources::DEFAULT_CPU_PERIOD_US.unsigned_abs()),
            cpu_quota: Some(quota_us),
            ..ResourceConfig::default()
        };
        self.fs.update(&self.qos_path(QosClass::BestEffort), &res)
    }

    /// Puts the Burstable and BestEffort cgroups' cpu shares (v2: the weight, read
    /// back as shares) back to what oxlet set, when they drifted. Returns each
    /// repaired cgroup with the shares found and the shares written.
    pub(crate) fn reconcile_qos_shares(&self) -> Vec<(String, Option<u64>, u64)> {
        if !self.cfg.cgroups_per_qos {
            return Vec::new();
        }
        let _serial = self.qos_update.locked();
        let mut fixed = Vec::new();
        for class in [QosClass::Burstable, QosClass::BestEffort] {
            let path = self.qos_path(class);
            let want = self.qos_limits(class);
            let Some(want_shares) = want.cpu_shares else {
                continue;
            };
            let have = match self.fs.resources(&path) {
                Ok(r) => r.cpu_shares,
                Err(e) => {
                    warn_failed("cannot read a QoS cgroup", &e);
                    continue;
                }
            };
            // v2 stores a weight: shares → weight → shares may round; compare there.
            if have.map(crate::cm::fs::shares_to_weight)
                == Some(crate::cm::fs::shares_to_weight(want_shares))
            {
                continue;
            }
            let res = ResourceConfig {
                cpu_shares: Some(want_shares),
                ..ResourceConfig::default()
            };
            match self.fs.update(&path, &res) {
                Ok(()) => fixed.push((path, have, want_shares)),
                Err(e) => warn_failed("cannot reconcile a QoS cgroup", &e),
            }
        }
        fixed
    }
}

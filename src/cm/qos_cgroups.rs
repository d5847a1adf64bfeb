//! The node-level cgroups: `kubepods` with node allocatable's limits, and the
//! `burstable` and `besteffort` QoS cgroups with their cpu shares (kubelet's
//! `setupNode` and `qosContainerManager.UpdateCgroups`).

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
        info!(cgroup = %kubepods, limits = ?self.cfg.kubepods, "the kubepods cgroup and its QoS cgroups are ready");
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
                Ok(()) => debug!(cgroup = %path, shares = ?limits.cpu_shares, "updated QoS cgroup"),
                Err(e) => warn_failed("cannot update a QoS cgroup", &e),
            }
        }
    }
}

//! One cgroup per pod (kubelet's `podContainerManager`): created with the pod's
//! limits before its sandbox, and destroyed once no worker may run the pod any more,
//! from housekeeping, which also finds the cgroups of pods oxlet forgot.

use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, info, warn};

use super::fs::CgroupError;
use super::manager::{ContainerManager, TrackedPod, warn_failed};
use super::name::{CgroupName, NameError, pod_uid_from_base};
use super::qos::QosClass;
use super::resources::{self, PodResourceError, ResourceConfig};
use crate::pod::{pod_ref, pod_uid};

/// How often a pod cgroup's leftover processes are killed before giving up until the
/// next housekeeping (kubelet's `tryKillingCgroupProcesses` tries 5 times).
const KILL_ATTEMPTS: usize = 5;

/// Why a pod's cgroup could not be made (the pod does not start this sync) or removed
/// (its worker tries again).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodCgroupError {
    #[error("failed to ensure that the pod {uid} cgroups exist and are correctly applied: {cause}")]
    Ensure { uid: String, cause: PodCgroupCause },
    #[error("failed to destroy the cgroup of the terminated pod {uid}: {cause}")]
    Destroy { uid: String, cause: PodCgroupCause },
    /// A resize could not read or write the pod's cgroup (kubelet's
    /// `GetPodCgroupConfig` / `SetPodCgroupConfig` failing).
    #[error("failed to update the cgroup of pod {uid}: {cause}")]
    Update { uid: String, cause: PodCgroupCause },
}

/// The cause of a [`PodCgroupError`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodCgroupCause {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Resources(#[from] PodResourceError),
}

impl ContainerManager {
    /// Whether the pod's cgroup exists (always true without per-QoS cgroups).
    pub(crate) fn pod_cgroup_exists(&self, pod: &Pod) -> bool {
        if !self.cfg.cgroups_per_qos {
            return true;
        }
        self.pod_path(pod)
            .is_ok_and(|(_, _, path)| self.fs.exists(&path))
    }

    /// Runs `step` on the pod's cgroup (its UID, QoS class, name and path) when pods get
    /// cgroups of their own; a failure names the pod, made by `failed`.
    fn on_pod_cgroup(
        &self,
        pod: &Pod,
        failed: fn(String, PodCgroupCause) -> PodCgroupError,
        step: impl FnOnce(&str, QosClass, CgroupName, String) -> Result<(), PodCgroupCause>,
    ) -> Result<(), PodCgroupError> {
        if !self.cfg.cgroups_per_qos {
            return Ok(());
        }
        let uid = pod_uid(pod).to_string();
        self.pod_path(pod)
            .map_err(PodCgroupCause::from)
            .and_then(|(class, name, path)| step(&uid, class, name, path))
            .map_err(|cause| failed(uid, cause))
    }

    /// Creates the pod's cgroup with its limits when it is missing (kubelet's
    /// `EnsureExists`: an existing one is left as it is), after updating the QoS
    /// cgroups so the new pod's request counts at once.
    pub(crate) fn ensure_pod(&self, pod: &Pod) -> Result<(), PodCgroupError> {
        let failed = |uid, cause| PodCgroupError::Ensure { uid, cause };
        self.on_pod_cgroup(pod, failed, |uid, class, name, path| {
            let limits = resources::pod_resource_config(pod, self.cfg.pod)?;
            let cpu_request_milli = resources::pod_requests(pod)?.cpu_milli.unwrap_or(0);
            let tracked = TrackedPod {
                class,
                cpu_request_milli,
                name,
            };
            let before = self.tracked().insert(uid.to_string(), tracked);
            if self.fs.exists(&path) {
                // Adopted after a restart, or resized in place: the shares count what
                // it is allocated now.
                if before.is_none_or(|b| b.cpu_request_milli != cpu_request_milli) {
                    self.update_qos();
                }
                return Ok(());
            }
            self.update_qos();
            crate::metrics::cgroup_op("create", || self.fs.create(&path, &limits))?;
            info!(pod = %pod_ref(pod), podUID = %uid, cgroup = %path, qos = class.as_str(), cpuShares = limits.cpu_shares, cpuQuota = limits.cpu_quota, cpuPeriod = limits.cpu_period, memoryLimit = limits.memory_limit, pidsLimit = limits.pids_limit, "created pod cgroup");
            Ok(())
        })
    }

    /// Destroys a terminated pod's cgroup (kubelet's `SyncTerminatedPod`): what is
    /// left in it is killed and it is removed, before the pod's worker finishes, so
    /// the pod's final delete in the apiserver comes after its cgroup is gone.
    /// Housekeeping's orphan cleanup stays for the pods oxlet forgot.
    pub(crate) fn destroy_pod(&self, pod: &Pod) -> Result<(), PodCgroupError> {
        let failed = |uid, cause| PodCgroupError::Destroy { uid, cause };
        self.on_pod_cgroup(pod, failed, |uid, _, _, path| {
            if self.fs.exists(&path) {
                self.destroy(&path)?;
                debug!(pod = %pod_ref(pod), podUID = %uid, cgroup = %path, "pod termination removed its cgroup");
            }
            if self.tracked().remove(uid).is_some() {
                self.update_qos();
            }
            Ok(())
        })
    }

    /// The limits kubelet's formulas give the pod's cgroup for the resources `pod`
    /// carries (kubelet's `ResourceConfigForPod`), and the limits its cgroup has now;
    /// None without pod cgroups. A resize compares the two.
    pub(crate) fn pod_cgroup_limits(
        &self,
        pod: &Pod,
    ) -> Result<Option<(ResourceConfig, ResourceConfig)>, PodCgroupError> {
        let mut out = None;
        let failed = |uid, cause| PodCgroupError::Update { uid, cause };
        self.on_pod_cgroup(pod, failed, |_, _, _, path| {
            let target = resources::pod_resource_config(pod, self.cfg.pod)?;
            out = Some((target, self.fs.resources(&path)?));
            Ok(())
        })?;
        Ok(out)
    }

    /// The memory the pod's cgroup charges now (kubelet's `GetPodCgroupMemoryUsage`);
    /// None without pod cgroups.
    pub(crate) fn pod_memory_usage(&self, pod: &Pod) -> Result<Option<u64>, PodCgroupError> {
        let mut out = None;
        let failed = |uid, cause| PodCgroupError::Update { uid, cause };
        self.on_pod_cgroup(pod, failed, |_, _, _, path| {
            out = Some(self.fs.memory_usage(&path)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Writes the limits set in `limits` to the pod's existing cgroup (kubelet's
    /// `SetPodCgroupConfig`, one resource at a time as a resize orders them). New cpu
    /// shares also change the pod's weight in its QoS cgroup's shares.
    pub(crate) fn set_pod_cgroup_limits(
        &self,
        pod: &Pod,
        limits: &ResourceConfig,
    ) -> Result<(), PodCgroupError> {
        let failed = |uid, cause| PodCgroupError::Update { uid, cause };
        self.on_pod_cgroup(pod, failed, |uid, class, name, path| {
            crate::metrics::cgroup_op("update", || self.fs.update(&path, limits))?;
            info!(pod = %pod_ref(pod), podUID = %uid, cgroup = %path, cpuShares = limits.cpu_shares, cpuQuota = limits.cpu_quota, cpuPeriod = limits.cpu_period, memoryLimit = limits.memory_limit, "updated pod cgroup for a resize");
            if limits.cpu_shares.is_some() {
                let cpu_request_milli = resources::pod_requests(pod)?.cpu_milli.unwrap_or(0);
                let tracked = TrackedPod {
                    class,
                    cpu_request_milli,
                    name,
                };
                self.tracked().insert(uid.to_string(), tracked);
                self.update_qos();
            }
            Ok(())
        })
    }

    /// The pod cgroups below the QoS cgroups now, by pod UID.
    fn scan(&self) -> Vec<(String, CgroupName)> {
        let mut found = Vec::new();
        for class in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            let children = match self.fs.children(&self.qos_path(class)) {
                Ok(c) => c,
                Err(e) => {
                    debug!(error = %e, "cannot list a QoS cgroup");
                    continue;
                }
            };
            for child in children {
                let Some(uid) = pod_uid_from_base(self.cfg.driver, &child) else {
                    continue;
                };
                if let Ok(name) = self.tree.pod(class, &uid) {
                    found.push((uid, name));
                }
            }
        }
        found
    }

    /// Destroys the cgroups of pods no worker may run any more (kubelet's
    /// `cleanupOrphanedPodCgroups`): the pod's leftover processes are killed first,
    /// then the cgroup and the empty ones below it are removed. A pod whose cgroup
    /// cannot go yet is tried again at the next housekeeping.
    pub(crate) fn cleanup_orphans(&self, possibly_running: &dyn Fn(&str) -> bool) {
        if !self.cfg.cgroups_per_qos {
            return;
        }
        let mut removed = false;
        for (uid, name) in self.scan() {
            if possibly_running(&uid) {
                continue;
            }
            let Ok(path) = self.path(&name) else {
                continue;
            };
            match self.destroy(&path) {
                Ok(()) => {
                    info!(podUID = %uid, cgroup = %path, "removed the cgroup of a pod that is gone");
                    self.tracked().remove(&uid);
                    removed = true;
                }
                Err(e) => warn_failed("cannot remove an orphaned pod cgroup yet", &e),
            }
        }
        // Tracked pods whose cgroup vanished some other way.
        let before = self.tracked().len();
        self.tracked().retain(|uid, p| {
            possibly_running(uid) || self.path(&p.name).is_ok_and(|path| self.fs.exists(&path))
        });
        if removed || self.tracked().len() != before {
            self.update_qos();
        }
    }

    /// Kills what is left in the cgroup, then removes it (kubelet's `Destroy`).
    fn destroy(&self, path: &str) -> Result<(), CgroupError> {
        crate::metrics::cgroup_op("destroy", || self.kill_and_remove(path))
    }

    fn kill_and_remove(&self, path: &str) -> Result<(), CgroupError> {
        for _ in 0..KILL_ATTEMPTS {
            let procs = self.fs.procs(path)?;
            if procs.is_empty() {
                break;
            }
            for pid in procs {
                kill(pid);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.fs.remove(path)
    }
}

/// SIGKILL to a process found in a pod cgroup oxlet owns. Never oxlet itself or init.
fn kill(pid: i32) {
    if pid <= 1 || u32::try_from(pid).is_ok_and(|p| p == std::process::id()) {
        return;
    }
    let Some(p) = rustix::process::Pid::from_raw(pid) else {
        return;
    };
    match rustix::process::kill_process(p, rustix::process::Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => warn!(pid, error = %e, "cannot kill a process left in a pod cgroup"),
    }
}

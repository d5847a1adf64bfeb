//! [`ContainerManager`]: the node's cgroup tree as one value the rest of oxlet holds.
//! The pod syncer asks it for a pod's cgroup before the sandbox, housekeeping asks it
//! to drop the cgroups of pods that are gone, the runtime asks it for the sandbox's
//! cgroup parent, and its own task repairs the QoS cgroups every minute.

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::driver::CgroupDriver;
use super::fs::{CgroupError, CgroupFs};
use super::name::{CgroupName, NameError};
use super::qos::QosClass;
use super::resources::{PodCgroupSettings, ResourceConfig};
use super::tree::QosTree;
use crate::contracts::PodCgroupParent;
use crate::pod::pod_uid;

/// kubelet's `periodicQOSCgroupUpdateInterval`.
pub(crate) const QOS_RECONCILE_PERIOD: Duration = Duration::from_secs(60);

/// What the container manager was configured with (resolved from the options).
#[derive(Debug, Clone)]
pub(crate) struct CmConfig {
    pub driver: CgroupDriver,
    /// `--cgroup-root` as a name.
    pub cgroup_root: CgroupName,
    /// `--cgroups-per-qos`: without it there are no QoS or pod cgroups at all.
    pub cgroups_per_qos: bool,
    /// `--cpu-cfs-quota`, `--cpu-cfs-quota-period` and `--pod-max-pids`.
    pub pod: PodCgroupSettings,
    /// What `kubepods` is limited to (node allocatable when `pods` is enforced,
    /// capacity otherwise).
    pub kubepods: ResourceConfig,
}

/// A pod that has a cgroup: what the QoS update needs to know of it.
#[derive(Debug, Clone)]
pub(super) struct TrackedPod {
    pub class: QosClass,
    /// The pod's cpu request in millicores (burstable shares are their sum).
    pub cpu_request_milli: i64,
    pub name: CgroupName,
}

/// The node's cgroup tree (see the module doc).
#[derive(Debug)]
pub(crate) struct ContainerManager {
    pub(super) cfg: CmConfig,
    pub(super) fs: Arc<dyn CgroupFs>,
    pub(super) tree: QosTree,
    /// Pods with a cgroup, by UID.
    pub(super) pods: Mutex<HashMap<String, TrackedPod>>,
    /// Held across a QoS update's read of the census and its writes: two pods' syncs
    /// updating at once must not let the older census be written last.
    pub(super) qos_update: Mutex<()>,
    /// What the host lacks that kubelet only warns about (its `Status().SoftRequirements`).
    pub(super) soft_requirements: Option<&'static str>,
}

impl ContainerManager {
    /// Pods with a cgroup (the census).
    pub(crate) fn pod_count(&self) -> usize {
        self.pods.locked().len()
    }

    /// Fails when `--cgroup-root` cannot be spelled for the driver.
    pub(crate) fn new(cfg: CmConfig, fs: Arc<dyn CgroupFs>) -> Result<ContainerManager, NameError> {
        let tree = QosTree::new(&cfg.cgroup_root);
        for class in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            tree.qos(class).to_path(cfg.driver)?;
        }
        Ok(ContainerManager {
            tree,
            cfg,
            fs,
            pods: Mutex::default(),
            qos_update: Mutex::default(),
            soft_requirements: None,
        })
    }

    pub(super) fn tracked(&self) -> MutexGuard<'_, HashMap<String, TrackedPod>> {
        self.pods.locked()
    }

    /// A name as a path below the cgroup mount, spelled for the driver.
    pub(super) fn path(&self, name: &CgroupName) -> Result<String, NameError> {
        name.to_path(self.cfg.driver)
    }

    /// The path of the pod's cgroup, from its QoS class and UID.
    pub(super) fn pod_path(&self, pod: &Pod) -> Result<(QosClass, CgroupName, String), NameError> {
        let class = QosClass::of(pod);
        let name = self.tree.pod(class, pod_uid(pod))?;
        let path = self.path(&name)?;
        Ok((class, name, path))
    }

    /// Whether pods get cgroups of their own.
    pub(crate) fn cgroups_per_qos(&self) -> bool {
        self.cfg.cgroups_per_qos
    }

    /// The pod's cgroup path below the mount, for the metric advisor; None without
    /// `--cgroups-per-qos` (pods then have no cgroup of their own).
    pub(crate) fn pod_cgroup_path(&self, pod: &Pod) -> Option<String> {
        if !self.cfg.cgroups_per_qos {
            return None;
        }
        self.pod_path(pod).ok().map(|(_, _, path)| path)
    }

    /// The `kubepods` cgroup's path (kubelet's `pods` system container), when pods
    /// have cgroups.
    pub(crate) fn kubepods_path(&self) -> Option<String> {
        if !self.cfg.cgroups_per_qos {
            return None;
        }
        self.path(self.tree.kubepods()).ok()
    }

    /// What the host lacks that the node's Ready condition warns about, in kubelet's
    /// words (`CPU hardcapping unsupported`); None when nothing is.
    pub(crate) fn soft_requirements(&self) -> Option<&'static str> {
        self.soft_requirements
    }

    /// The cgroup driver, which spells container cgroups too.
    pub(crate) fn driver(&self) -> CgroupDriver {
        self.cfg.driver
    }

    /// A QoS cgroup's path (checked when the manager was made).
    pub(super) fn qos_path(&self, class: QosClass) -> String {
        self.path(&self.tree.qos(class)).unwrap_or_default()
    }

    /// Repairs the QoS cgroups and recomputes their shares every minute, until
    /// cancelled (kubelet's periodic `UpdateCgroups`).
    pub(crate) async fn run(self: Arc<Self>, cancel: CancellationToken) {
        if !self.cfg.cgroups_per_qos {
            cancel.cancelled().await;
            return;
        }
        let mut tick = tokio::time::interval(QOS_RECONCILE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => {
                    debug!("reconciling the QoS cgroups");
                    self.update_qos();
                }
            }
        }
    }
}

impl PodCgroupParent for ContainerManager {
    /// The pod's cgroup in the driver's full spelling, as kubelet gives it to the CRI
    /// (`/kubepods/burstable/pod<uid>`); empty without per-QoS cgroups, which leaves
    /// the sandbox where the runtime puts it.
    fn cgroup_parent(&self, pod: &Pod) -> String {
        if !self.cfg.cgroups_per_qos {
            return String::new();
        }
        // A UID that cannot name a cgroup never got one (ensure_pod failed first).
        self.pod_path(pod)
            .and_then(|(_, name, _)| name.driver_name(self.cfg.driver))
            .unwrap_or_default()
    }
}

/// Logs a failed cgroup operation once per call site, without stopping anything.
pub(super) fn warn_failed(what: &str, e: &CgroupError) {
    warn!(error = %e, "{what}");
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::cm::fake_fs::{FakeCgroupFs, fake_manager};

    /// A pod with one container of these requests and limits (JSON maps).
    pub(in crate::cm) fn pod(uid: &str, requests: &str, limits: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid},
            "spec": {"containers": [{
                "name": "c",
                "resources": {
                    "requests": serde_json::from_str::<serde_json::Value>(requests).unwrap(),
                    "limits": serde_json::from_str::<serde_json::Value>(limits).unwrap(),
                },
            }]},
        }))
        .unwrap()
    }

    fn shares(fs: &FakeCgroupFs, path: &str) -> Option<u64> {
        fs.resources(path).unwrap().cpu_shares
    }

    #[test]
    fn setup_makes_the_qos_tree_with_its_limits() {
        let (cm, fs) = fake_manager(true);
        cm.setup().unwrap();
        assert_eq!(
            fs.paths(),
            [
                "root",
                "root/kubepods",
                "root/kubepods/besteffort",
                "root/kubepods/burstable"
            ]
        );
        assert_eq!(fs.resources("root/kubepods").unwrap(), cm.cfg.kubepods);
        assert_eq!(shares(&fs, "root/kubepods/besteffort"), Some(2));
        assert_eq!(shares(&fs, "root/kubepods/burstable"), Some(2));

        let (off, fs) = fake_manager(false);
        off.setup().unwrap();
        assert!(fs.paths().is_empty());
        let p = pod("u1", "{}", "{}");
        off.ensure_pod(&p).unwrap();
        assert!(fs.paths().is_empty());
        assert!(off.pod_cgroup_exists(&p));
        assert_eq!(off.cgroup_parent(&p), "");
    }

    #[test]
    fn each_pod_gets_a_cgroup_below_its_qos_class_and_burstable_shares_follow() {
        let (cm, fs) = fake_manager(true);
        cm.setup().unwrap();
        let g = pod("g1", "{}", r#"{"cpu": "500m", "memory": "64Mi"}"#);
        let b = pod("b1", r#"{"cpu": "250m"}"#, "{}");
        let e = pod("e1", "{}", "{}");
        for p in [&g, &b, &e] {
            assert!(!cm.pod_cgroup_exists(p));
            cm.ensure_pod(p).unwrap();
            assert!(cm.pod_cgroup_exists(p));
        }
        let gl = fs.resources("root/kubepods/podg1").unwrap();
        assert_eq!(gl.cpu_shares, Some(512));
        assert_eq!(gl.cpu_quota, Some(50_000));
        assert_eq!(gl.memory_limit, Some(64 << 20));
        assert_eq!(gl.pids_limit, Some(50));
        assert_eq!(shares(&fs, "root/kubepods/burstable/podb1"), Some(256));
        assert_eq!(shares(&fs, "root/kubepods/besteffort/pode1"), Some(2));
        assert_eq!(cm.cgroup_parent(&b), "/root/kubepods/burstable/podb1");
        // The burstable QoS cgroup's shares are its pods' requests.
        assert_eq!(shares(&fs, "root/kubepods/burstable"), Some(256));
        let b2 = pod("b2", r#"{"cpu": "1"}"#, "{}");
        cm.ensure_pod(&b2).unwrap();
        assert_eq!(shares(&fs, "root/kubepods/burstable"), Some(1280));
        // b2 resized in place to 500m (its cgroup exists): the QoS shares follow.
        let b2 = pod("b2", r#"{"cpu": "500m"}"#, "{}");
        cm.ensure_pod(&b2).unwrap();
        assert_eq!(shares(&fs, "root/kubepods/burstable"), Some(768));

        // A pod whose UID cannot name a cgroup gets an error, not a cgroup elsewhere.
        let bad = pod("..", "{}", "{}");
        let e = cm.ensure_pod(&bad).unwrap_err();
        assert!(e.to_string().contains("\"..\""), "{e}");
        assert_eq!(cm.cgroup_parent(&bad), "");
    }

    #[test]
    fn orphans_go_unless_a_worker_may_still_run_them_and_busy_ones_wait() {
        let (cm, fs) = fake_manager(true);
        cm.setup().unwrap();
        for uid in ["a", "b", "c"] {
            cm.ensure_pod(&pod(uid, r#"{"cpu": "100m"}"#, "{}"))
                .unwrap();
        }
        // Not a pod cgroup, and a pod cgroup left by an earlier run: only the latter goes.
        fs.create("root/kubepods/burstable/other", &ResourceConfig::default())
            .unwrap();
        fs.create(
            "root/kubepods/besteffort/podold",
            &ResourceConfig::default(),
        )
        .unwrap();
        // c's container is still in there: a pid no process has (above pid_max).
        fs.create(
            "root/kubepods/burstable/podc/ctr",
            &ResourceConfig::default(),
        )
        .unwrap();
        fs.add_proc("root/kubepods/burstable/podc/ctr", 2_000_000_000);
        assert_eq!(shares(&fs, "root/kubepods/burstable"), Some(307));

        cm.cleanup_orphans(&|uid| uid == "a");
        let paths = fs.paths();
        assert!(paths.contains(&"root/kubepods/burstable/poda".to_string()));
        assert!(!paths.contains(&"root/kubepods/burstable/podb".to_string()));
        assert!(!paths.contains(&"root/kubepods/besteffort/podold".to_string()));
        assert!(paths.contains(&"root/kubepods/burstable/other".to_string()));
        assert!(paths.contains(&"root/kubepods/burstable/podc/ctr".to_string()));
        // a and c still count; b no more.
        assert_eq!(shares(&fs, "root/kubepods/burstable"), Some(204));
    }

    /// A terminated pod's cgroup goes at once (kubelet's `SyncTerminatedPod`), its
    /// request leaves the Burstable shares, and a second call finds nothing to do.
    #[test]
    fn a_terminated_pods_cgroup_is_destroyed_and_stops_counting() {
        let (cm, fs) = fake_manager(true);
        cm.setup().unwrap();
        let a = pod("a", r#"{"cpu": "100m"}"#, "{}");
        let b = pod("b", r#"{"cpu": "200m"}"#, "{}");
        for p in [&a, &b] {
            cm.ensure_pod(p).unwrap();
        }
        assert_eq!(shares(&fs, "root/kubepods/burstable"), Some(307));
        cm.destroy_pod(&b).unwrap();
        assert!(!cm.pod_cgroup_exists(&b));
        assert!(cm.pod_cgroup_exists(&a));
        assert_eq!(shares(&fs, "root/kubepods/burstable"), Some(102));
        cm.destroy_pod(&b).unwrap();
        // A pod whose UID cannot name a cgroup is an error, and nothing is removed.
        assert!(cm.destroy_pod(&pod("..", "{}", "{}")).is_err());
        assert!(cm.pod_cgroup_exists(&a));
    }

    #[test]
    fn the_qos_update_repairs_what_was_removed_from_outside() {
        let (cm, fs) = fake_manager(true);
        cm.setup().unwrap();
        fs.remove_from_outside("root/kubepods");
        assert!(fs.paths().len() == 1);
        cm.update_qos();
        assert_eq!(
            fs.paths(),
            [
                "root",
                "root/kubepods",
                "root/kubepods/besteffort",
                "root/kubepods/burstable"
            ]
        );
        assert_eq!(fs.resources("root/kubepods").unwrap(), cm.cfg.kubepods);
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_reconciles_every_minute() {
        let (cm, fs) = fake_manager(true);
        cm.setup().unwrap();
        let cm = Arc::new(cm);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(cm.clone().run(cancel.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        fs.remove_from_outside("root/kubepods/besteffort");
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!fs.exists("root/kubepods/besteffort"));
        tokio::time::sleep(QOS_RECONCILE_PERIOD).await;
        assert!(fs.exists("root/kubepods/besteffort"));
        cancel.cancel();
        task.await.unwrap();
    }
}

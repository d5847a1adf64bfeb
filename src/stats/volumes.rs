//! What each pod's local storage holds: its disk-backed volume directories (emptyDir
//! without `medium: Memory`, configMap), its log files and its `etc-hosts`, measured
//! like kubelet's `du`/`find` volume metrics. The Summary API serves these numbers and
//! the eviction manager reads them (`usage_of`) for emptyDir `sizeLimit` and
//! ephemeral-storage limits.
//!
//! A walk is bounded (entries per pod and per round), never follows a symlink, counts
//! a hard-linked file once and stays on the device it started on, so a mount inside a
//! volume (or a tmpfs volume) is not counted. Each pod is measured on kubelet's volume
//! stats cadence (`volumeStatsAggPeriod`, default 1 minute) from the moment it
//! is first seen, as kubelet starts a calculator per pod: a new pod (or every pod after
//! a restart) is measured within a tick, not a period later. A pod whose walk fails
//! keeps its previous numbers and never stops the others.

use crate::locks::{Locked as _, ReadWriteLocked as _};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, warn};

use crate::pod::pod_uid;
use crate::safe_path;

/// How often the task looks for pods due (new ones, or measured a period ago).
pub(crate) const VOLUME_STATS_TICK: Duration = Duration::from_secs(1);
/// Most directory entries looked at for one pod in one round.
pub(crate) const MAX_ENTRIES_PER_POD: usize = 200_000;
/// Most directory entries looked at in one round, all pods together.
pub(crate) const MAX_ENTRIES_PER_ROUND: usize = 2_000_000;

/// Bytes (allocated blocks × 512) and inodes below one directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub bytes: u64,
    pub inodes: u64,
    /// The walk stopped at its entry bound: the numbers are a lower bound.
    pub partial: bool,
}

impl Usage {
    fn add(&mut self, other: Usage) {
        self.bytes += other.bytes;
        self.inodes += other.inodes;
        self.partial |= other.partial;
    }
}

/// One pod's measured local storage.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodUsage {
    pub time: Option<SystemTime>,
    /// The pod's namespace and name (the log metric's labels).
    pub namespace: String,
    pub name: String,
    /// Per volume name, the disk-backed volumes that exist.
    pub volumes: Vec<(String, Usage)>,
    /// Per container name, its log directory.
    pub container_logs: Vec<(String, Usage)>,
    /// Files directly in the pod's log directory (not the containers' directories).
    pub pod_logs: Usage,
    pub etc_hosts: Option<Usage>,
}

impl PodUsage {
    /// The usage of the named container's logs.
    pub(crate) fn container_log(&self, name: &str) -> Option<Usage> {
        self.container_logs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, u)| *u)
    }

    /// The usage of the named volume.
    pub(crate) fn volume(&self, name: &str) -> Option<Usage> {
        self.volumes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, u)| *u)
    }
}

/// Where pods keep their files.
#[derive(Debug, Clone)]
pub(crate) struct Dirs {
    /// `<root-dir>/pods`.
    pub pods: PathBuf,
    /// `--pod-logs-dir`.
    pub pod_logs: PathBuf,
}

/// The latest usage of each pod, by UID.
#[derive(Debug, Default)]
pub(crate) struct VolumeUsage {
    pods: RwLock<HashMap<String, Arc<PodUsage>>>,
    /// When each pod was last measured or tried, so each is walked once a period.
    last_try: Mutex<HashMap<String, Instant>>,
}

impl VolumeUsage {
    /// Pods measured, and pods with a time of their last try (the census).
    pub(crate) fn census(&self) -> (usize, usize) {
        (self.pods.read_locked().len(), self.last_try.locked().len())
    }

    /// The latest usage measured for a pod, if any round saw it.
    pub(crate) fn usage_of(&self, uid: &str) -> Option<Arc<PodUsage>> {
        self.pods.read_locked().get(uid).cloned()
    }

    /// Every pod's latest usage, by UID (at most one entry per managed pod).
    pub(crate) fn all(&self) -> Vec<(String, Arc<PodUsage>)> {
        self.pods
            .read_locked()
            .iter()
            .map(|(uid, u)| (uid.clone(), u.clone()))
            .collect()
    }

    /// Sets a pod's usage directly (unit tests of the readers).
    #[cfg(test)]
    pub(crate) fn set(&self, uid: &str, usage: PodUsage) {
        self.pods
            .write_locked()
            .insert(uid.to_string(), Arc::new(usage));
    }

    /// Measures every pod now and forgets pods that are gone (unit tests).
    #[cfg(test)]
    pub(crate) fn refresh(&self, pods: &[Arc<Pod>], dirs: &Dirs) {
        self.refresh_due(pods, dirs, Duration::ZERO);
    }

    /// Measures the pods not measured (or tried) within `period`, keeps the others'
    /// numbers, and forgets pods that are gone. Blocking. Returns how many it walked.
    pub(crate) fn refresh_due(&self, pods: &[Arc<Pod>], dirs: &Dirs, period: Duration) -> usize {
        let now = Instant::now();
        let wanted: HashSet<&str> = pods.iter().map(|p| pod_uid(p)).collect();
        let mut round_left = MAX_ENTRIES_PER_ROUND;
        let mut measured = HashMap::new();
        let mut walked = 0;
        {
            let mut tried = self.last_try.locked();
            tried.retain(|uid, _| wanted.contains(uid.as_str()));
            for pod in pods {
                let uid = pod_uid(pod);
                if tried
                    .get(uid)
                    .is_some_and(|t| now.saturating_duration_since(*t) < period)
                {
                    continue;
                }
                tried.insert(uid.to_string(), now);
                walked += 1;
                match measure_pod(pod, dirs, &mut round_left) {
                    Ok(usage) => {
                        measured.insert(uid.to_string(), Arc::new(usage));
                    }
                    Err(e) => {
                        let name = format!(
                            "{}/{}",
                            pod.metadata.namespace.as_deref().unwrap_or_default(),
                            pod.metadata.name.as_deref().unwrap_or_default()
                        );
                        debug!(pod = %name, podUID = %uid, error = %e, "cannot measure the pod's volumes");
                    }
                }
            }
        }
        let mut all = self.pods.write_locked();
        all.retain(|uid, _| wanted.contains(uid.as_str()));
        all.extend(measured);
        walked
    }
}

/// Why a pod could not be measured.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MeasureError {
    #[error(transparent)]
    Path(#[from] safe_path::PathError),
}

/// The plugin directory of a disk-backed volume; None for volumes on a tmpfs or
/// outside the pod directory (hostPath, secret, projected, memory emptyDir).
fn disk_plugin(v: &k8s_openapi::api::core::v1::Volume) -> Option<&'static str> {
    if let Some(ed) = &v.empty_dir {
        return (ed.medium.as_deref() != Some("Memory")).then_some("kubernetes.io~empty-dir");
    }
    v.config_map.as_ref().map(|_| "kubernetes.io~configmap")
}

fn measure_pod(pod: &Pod, dirs: &Dirs, round_left: &mut usize) -> Result<PodUsage, MeasureError> {
    let uid = pod_uid(pod);
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let name_for_log = format!("{ns}/{name}");
    let pod_dir = safe_path::beneath(&dirs.pods, &[uid])?;
    let mut budget = Budget {
        pod_left: MAX_ENTRIES_PER_POD,
        round_left,
    };
    let mut usage = PodUsage {
        time: Some(SystemTime::now()),
        namespace: ns.to_string(),
        name: name.to_string(),
        ..PodUsage::default()
    };
    let pod_dev = std::fs::symlink_metadata(&pod_dir).ok().map(|m| m.dev());
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    for v in volumes.unwrap_or_default() {
        let Some(plugin) = disk_plugin(v) else {
            continue;
        };
        let dir = safe_path::beneath(
            &pod_dir,
            &[
                crate::pod::VOLUMES_DIR,
                plugin,
                safe_path::component(&v.name)?,
            ],
        )?;
        // A volume on its own mount (a tmpfs) is not the pod's disk.
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        if !meta.is_dir() || Some(meta.dev()) != pod_dev {
            continue;
        }
        let u = walk(&dir, &mut budget);
        usage.volumes.push((v.name.clone(), u));
    }
    if let Ok(meta) = std::fs::symlink_metadata(pod_dir.join(crate::pod::HOSTS_FILE))
        && meta.is_file()
    {
        usage.etc_hosts = Some(Usage {
            bytes: meta.blocks() * 512,
            inodes: 1,
            partial: false,
        });
    }
    if let Ok(log_dir) = crate::pod::pod_log_dir(&dirs.pod_logs, ns, name, uid) {
        measure_logs(&log_dir, &mut usage, &mut budget);
    }
    let partial = usage
        .volumes
        .iter()
        .chain(&usage.container_logs)
        .any(|(_, u)| u.partial)
        || usage.pod_logs.partial;
    if partial {
        warn!(pod = %name_for_log, podUID = %uid, maxEntries = MAX_ENTRIES_PER_POD, "volume usage is partial: the entry bound was hit");
    }
    Ok(usage)
}

/// The pod log directory: each container's directory as a whole, and the files
/// directly in it as the pod's own logs (kubelet's `podLogStats`).
fn measure_logs(log_dir: &Path, usage: &mut PodUsage, budget: &mut Budget) {
    let Ok(entries) = std::fs::read_dir(log_dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !budget.take() {
            usage.pod_logs.partial = true;
            break;
        }
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let u = walk(&entry.path(), budget);
            usage.container_logs.push((name, u));
        } else if meta.is_file() {
            usage.pod_logs.add(Usage {
                bytes: meta.blocks() * 512,
                inodes: 1,
                partial: false,
            });
        }
    }
    usage.container_logs.sort_by(|a, b| a.0.cmp(&b.0));
}

/// The entries a pod may still look at, within the round's.
struct Budget<'a> {
    pod_left: usize,
    round_left: &'a mut usize,
}

impl Budget<'_> {
    fn take(&mut self) -> bool {
        if self.pod_left == 0 || *self.round_left == 0 {
            return false;
        }
        self.pod_left -= 1;
        *self.round_left -= 1;
        true
    }
}

/// `du -x -s` and `find -xdev | wc -l` of `root` in one walk: the directory itself and
/// everything below it on its device, symlinks counted as themselves, hard links once.
/// An unreadable subdirectory is skipped; the bound ends the walk early (`partial`).
fn walk(root: &Path, budget: &mut Budget) -> Usage {
    let mut usage = Usage::default();
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        return usage;
    };
    let dev = meta.dev();
    usage.bytes += meta.blocks() * 512;
    usage.inodes += 1;
    if !meta.is_dir() {
        return usage;
    }
    let mut seen = HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if !budget.take() {
                usage.partial = true;
                return usage;
            }
            // DirEntry::metadata does not follow a symlink.
            let Ok(meta) = entry.metadata() else { continue };
            if meta.dev() != dev {
                continue;
            }
            if !meta.is_dir() && meta.nlink() > 1 && !seen.insert(meta.ino()) {
                continue;
            }
            usage.bytes += meta.blocks() * 512;
            usage.inodes += 1;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    usage
}

/// The refresh period: `configured` (`volumeStatsAggPeriod`), or
/// `OXLET_TEST_VOLUME_STATS_PERIOD_MS` (test-only: integration tests shorten it).
pub(crate) fn volume_stats_period(configured: Duration) -> Duration {
    std::env::var("OXLET_TEST_VOLUME_STATS_PERIOD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(configured, Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(n: usize, round: &mut usize) -> Budget<'_> {
        Budget {
            pod_left: n,
            round_left: round,
        }
    }

    fn write(path: &Path, bytes: usize) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, vec![7u8; bytes]).unwrap();
    }

    #[test]
    fn walk_counts_blocks_and_inodes_once_and_never_follows_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("vol");
        write(&root.join("a"), 1 << 20);
        write(&root.join("sub/b"), 4096);
        std::fs::hard_link(root.join("a"), root.join("sub/a-link")).unwrap();
        // A big file outside, reached only through symlinks: never counted.
        write(&tmp.path().join("outside/big"), 4 << 20);
        std::os::unix::fs::symlink(tmp.path().join("outside"), root.join("to-dir")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside/big"), root.join("to-file")).unwrap();
        let mut round = 1000;
        let u = walk(&root, &mut budget(1000, &mut round));
        // vol, a, sub, b, a-link (once), to-dir, to-file.
        assert_eq!(u.inodes, 6);
        assert!(u.bytes >= (1 << 20) + 4096, "{u:?}");
        assert!(
            u.bytes < (2 << 20),
            "hard link or symlink target counted: {u:?}"
        );
        assert!(!u.partial);
        assert_eq!(round, 1000 - 6);
    }

    #[test]
    fn the_entry_bound_gives_a_partial_lower_bound() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..20 {
            write(&tmp.path().join(format!("f{i}")), 10);
        }
        let mut round = 1000;
        let u = walk(tmp.path(), &mut budget(5, &mut round));
        assert!(u.partial);
        assert_eq!(u.inodes, 6);
        // The round's bound applies too.
        let mut round = 3;
        let u = walk(tmp.path(), &mut budget(1000, &mut round));
        assert!(u.partial);
        assert_eq!((u.inodes, round), (4, 0));
    }

    fn pod(uid: &str, volumes: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "ns", "uid": uid},
                "spec": {"containers": [{"name": "app", "image": "x"}], "volumes": volumes}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn pods_are_measured_by_volume_log_and_hosts_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = Dirs {
            pods: tmp.path().join("pods"),
            pod_logs: tmp.path().join("logs"),
        };
        let p = pod(
            "u1",
            serde_json::json!([
                {"name": "data", "emptyDir": {}},
                {"name": "mem", "emptyDir": {"medium": "Memory"}},
                {"name": "host", "hostPath": {"path": "/"}}
            ]),
        );
        write(
            &dirs.pods.join("u1/volumes/kubernetes.io~empty-dir/data/f"),
            2 << 20,
        );
        write(
            &dirs.pods.join("u1/volumes/kubernetes.io~empty-dir/mem/f"),
            1 << 20,
        );
        write(&dirs.pods.join("u1/etc-hosts"), 100);
        write(&dirs.pod_logs.join("ns_web_u1/app/0.log"), 8192);
        write(&dirs.pod_logs.join("ns_web_u1/pod.log"), 10);
        let usage = VolumeUsage::default();
        usage.refresh(std::slice::from_ref(&p), &dirs);
        let u = usage.usage_of("u1").unwrap();
        let data = u.volume("data").unwrap();
        assert!(data.bytes >= 2 << 20 && data.inodes == 2, "{data:?}");
        assert_eq!(u.volume("mem"), None, "a Memory emptyDir is not disk");
        assert_eq!(u.volume("host"), None);
        assert_eq!(u.volumes.len(), 1);
        let app = u.container_log("app").unwrap();
        assert!(app.bytes >= 8192 && app.inodes == 2, "{app:?}");
        assert_eq!(u.pod_logs.inodes, 1);
        assert_eq!(u.etc_hosts.unwrap().inodes, 1);
        // A pod that is gone is forgotten.
        usage.refresh(&[], &dirs);
        assert!(usage.usage_of("u1").is_none());
    }

    #[test]
    fn each_pod_is_walked_once_a_period_and_a_new_pod_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = Dirs {
            pods: tmp.path().join("pods"),
            pod_logs: tmp.path().join("logs"),
        };
        let data = serde_json::json!([{"name": "d", "emptyDir": {}}]);
        let (a, b) = (pod("ua", data.clone()), pod("ub", data));
        write(
            &dirs.pods.join("ua/volumes/kubernetes.io~empty-dir/d/f"),
            4096,
        );
        let usage = VolumeUsage::default();
        let hour = Duration::from_secs(3600);
        assert_eq!(usage.refresh_due(std::slice::from_ref(&a), &dirs, hour), 1);
        let first = usage.usage_of("ua").unwrap().volume("d").unwrap().bytes;
        // Within the period the pod is not walked again: new data shows later.
        write(
            &dirs.pods.join("ua/volumes/kubernetes.io~empty-dir/d/g"),
            1 << 20,
        );
        // A pod seen for the first time is measured at once, whatever the period.
        assert_eq!(usage.refresh_due(&[a.clone(), b.clone()], &dirs, hour), 1);
        assert!(usage.usage_of("ub").is_some());
        assert_eq!(
            usage.usage_of("ua").unwrap().volume("d").unwrap().bytes,
            first
        );
        // Once the period is over (zero here), it is walked again.
        assert_eq!(usage.refresh_due(&[a, b.clone()], &dirs, Duration::ZERO), 2);
        assert!(usage.usage_of("ua").unwrap().volume("d").unwrap().bytes >= first + (1 << 20));
        // A pod that is gone is forgotten, and measured at once if it comes back.
        usage.refresh_due(std::slice::from_ref(&b), &dirs, hour);
        assert!(usage.usage_of("ua").is_none());
    }

    #[test]
    fn a_bad_volume_name_fails_only_that_pod() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = Dirs {
            pods: tmp.path().join("pods"),
            pod_logs: tmp.path().join("logs"),
        };
        let bad = pod("u1", serde_json::json!([{"name": "..", "emptyDir": {}}]));
        let good = pod("u2", serde_json::json!([{"name": "d", "emptyDir": {}}]));
        write(
            &dirs.pods.join("u2/volumes/kubernetes.io~empty-dir/d/f"),
            10,
        );
        let usage = VolumeUsage::default();
        usage.refresh(&[bad, good], &dirs);
        assert!(usage.usage_of("u1").is_none());
        assert!(usage.usage_of("u2").unwrap().volume("d").is_some());
    }
}

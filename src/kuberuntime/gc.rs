//! Container garbage collection (kubelet's `kuberuntime_gc.go`: `containerGC`, policy `minAge 0`,
//! `maxPerPodContainer 1`, `maxContainers -1`) and the orphaned-directory sweep
//! (kubelet's `cleanupOrphanedPodDirs` and `evictPodLogsDirectories`).
//!
//! Crash loops and sandbox re-creations leave dead containers, dead sandboxes (each
//! holding a network namespace until stopped) and log files behind; without this they
//! pile up for as long as the pod lives. The deciding is pure and unit tested; the
//! acting goes through the runtime manager (CRI) and `safe_path` (disk).
//!
//! Cadence: oxlet runs a GC pass at every housekeeping (2 s) on the runtime listing that
//! housekeeping already makes, so a pass costs no extra list calls and only acts when
//! something is over the limit. kubelet runs it every minute; a 2 s pass keeps a crash
//! loop's leftovers bounded at once instead of for up to a minute.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;

use tracing::{debug, info, warn};

use k8s_openapi::api::core::v1::Pod;

use super::container_kill::gone_is_ok;
use super::manager::RuntimeManager;
use super::types::{ContainerState, PodRuntimeStatus, RuntimePod};
use crate::contracts::{DiskReclaimer, DiskTarget, ReclaimError, Reclaimed};
use crate::cri::CriError;
use crate::pod::{pod_ref, pod_uid};

/// Dead instances kept per (pod, container name): kubelet's `maxPerPodContainer`.
pub(crate) const MAX_DEAD_PER_CONTAINER: usize = 1;

/// One container as the GC sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GcContainer<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub state: ContainerState,
    pub created_at: i64,
}

/// The dead (not running) containers beyond the newest `keep` of each container name,
/// oldest last. Running containers are never chosen and do not count, and neither is
/// the newest instance of a name while it is only created: it is the attempt about to
/// start, and counting it would remove the exited instance its status still reports as
/// `lastState` (a GC pass between a restart's CreateContainer and StartContainer).
pub(crate) fn dead_beyond_limit<'a>(
    containers: &[GcContainer<'a>],
    keep: usize,
) -> Vec<GcContainer<'a>> {
    let mut newest: std::collections::HashMap<&str, i64> = std::collections::HashMap::new();
    for c in containers {
        let n = newest.entry(c.name).or_insert(c.created_at);
        *n = (*n).max(c.created_at);
    }
    let starting = |c: &GcContainer<'_>| {
        c.state == ContainerState::Created && newest.get(c.name) == Some(&c.created_at)
    };
    let mut dead: Vec<&GcContainer<'a>> = containers
        .iter()
        .filter(|c| c.state != ContainerState::Running && !starting(c))
        .collect();
    // Newest first, so the first `keep` of each name are the ones kept.
    dead.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    dead.into_iter()
        .filter(|c| {
            let n = seen.entry(c.name).or_default();
            *n += 1;
            *n > keep
        })
        .copied()
        .collect()
}

/// The sandboxes of a pod that still exists which may go (kubelet's `evictSandboxes`):
/// every one that is not ready and has no containers left, but, with `keep_newest`,
/// the newest (by attempt, then creation), kept even when dead: it is the pod's
/// current one. A terminated pod's go too (`keep_newest` false).
pub(crate) fn evictable_sandboxes<'a>(
    pod: &'a RuntimePod,
    still_has_containers: &HashSet<&str>,
    keep_newest: bool,
) -> Vec<&'a str> {
    let mut sandboxes: Vec<_> = pod.sandboxes.iter().collect();
    sandboxes.sort_by_key(|s| std::cmp::Reverse((s.attempt, s.created_at)));
    sandboxes
        .into_iter()
        .skip(usize::from(keep_newest))
        .filter(|s| !s.ready && !still_has_containers.contains(s.id.as_str()))
        .map(|s| s.id.as_str())
        .collect()
}

/// One GC pass over a pod that still exists: its dead containers beyond the limit
/// (each with its log file), then its dead sandboxes that are no longer needed.
/// Failures are logged and left for the next pass.
pub(crate) async fn collect_pod(runtime: &RuntimeManager, pod: &RuntimePod) {
    collect_pod_keeping(runtime, pod, MAX_DEAD_PER_CONTAINER, true).await;
}

/// [`collect_pod`] keeping `keep` dead instances per container name and, with
/// `keep_newest_sandbox`, the pod's newest sandbox; returns how many containers and
/// sandboxes went.
async fn collect_pod_keeping(
    runtime: &RuntimeManager,
    pod: &RuntimePod,
    keep: usize,
    keep_newest_sandbox: bool,
) -> usize {
    let containers: Vec<GcContainer> = pod
        .containers
        .iter()
        .map(|c| GcContainer {
            id: &c.id,
            name: &c.name,
            state: c.state,
            created_at: c.created_at,
        })
        .collect();
    let mut removed: HashSet<&str> = HashSet::new();
    for c in dead_beyond_limit(&containers, keep) {
        debug!(pod = %pod.pod_ref(), podUID = %pod.uid, container = %c.name, containerID = %c.id, "garbage-collecting dead container");
        match runtime
            .remove_container(c.id, c.state == ContainerState::Unknown)
            .await
        {
            Ok(()) => {
                removed.insert(c.id);
            }
            Err(e) => {
                warn!(pod = %pod.pod_ref(), podUID = %pod.uid, containerID = %c.id, error = %e, "cannot garbage-collect container");
            }
        }
    }
    // A sandbox is in use while any container that was not just removed still points at it.
    let in_use: HashSet<&str> = pod
        .containers
        .iter()
        .filter(|c| !removed.contains(c.id.as_str()))
        .map(|c| c.sandbox_id.as_str())
        .collect();
    let mut gone = removed.len();
    for id in evictable_sandboxes(pod, &in_use, keep_newest_sandbox) {
        debug!(pod = %pod.pod_ref(), podUID = %pod.uid, sandboxID = %id, "garbage-collecting dead sandbox");
        match runtime.remove_sandbox(id).await {
            Ok(()) => gone += 1,
            Err(e) => {
                warn!(pod = %pod.pod_ref(), podUID = %pod.uid, sandboxID = %id, error = %e, "cannot garbage-collect sandbox");
            }
        }
    }
    gone
}

/// Whether every dead container and sandbox of the pod with this UID may go (its
/// worker is done with it, or nothing wants it any more): kubelet's
/// `evictNonDeletedPods` test for terminated pods.
pub(crate) type PodDone = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The eviction manager's `deleteTerminatedContainers` step (kubelet's
/// `DeleteAllUnusedContainers`): a GC pass over every pod that removes all dead
/// containers and sandboxes of terminated pods and, of the others, every dead
/// container but the newest of each name. Running containers are never touched.
pub(crate) struct DeadContainers {
    runtime: Arc<RuntimeManager>,
    done: PodDone,
    /// Filesystems whose available bytes are compared before and after, for the
    /// bytes freed (the pod logs dir; the image filesystem holds the writable layers).
    measure: Vec<PathBuf>,
}

impl DeadContainers {
    pub(crate) fn new(runtime: Arc<RuntimeManager>, done: PodDone, measure: Vec<PathBuf>) -> Self {
        DeadContainers {
            runtime,
            done,
            measure,
        }
    }

    /// Runs the pass; returns what went.
    pub(crate) async fn delete_all_unused(&self) -> Result<Reclaimed, crate::cri::CriError> {
        let mut paths = self.measure.clone();
        if let Ok(fs) = self.runtime.cri().image_fs_info().await {
            paths.extend(
                fs.into_iter()
                    .filter_map(|u| u.fs_id.map(|f| PathBuf::from(f.mountpoint)))
                    .filter(|p| !p.as_os_str().is_empty()),
            );
        }
        let before = available_bytes(&paths);
        let mut removed = 0;
        for pod in self.runtime.get_pods().await? {
            let done = (self.done)(&pod.uid);
            let (keep, keep_newest_sandbox) = if done {
                (0, false)
            } else {
                (MAX_DEAD_PER_CONTAINER, true)
            };
            removed += collect_pod_keeping(&self.runtime, &pod, keep, keep_newest_sandbox).await;
        }
        let bytes = available_bytes(&paths).saturating_sub(before);
        info!(
            removed,
            freedBytes = bytes,
            "deleted unused containers and sandboxes"
        );
        Ok(Reclaimed { bytes, removed })
    }
}

/// The bytes available on the distinct filesystems of `paths` (statvfs; one
/// that cannot be read counts 0).
fn available_bytes(paths: &[PathBuf]) -> u64 {
    let mut seen = HashSet::new();
    paths
        .iter()
        .filter_map(|p| rustix::fs::statvfs(p).ok())
        .filter(|s| seen.insert(s.f_fsid))
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .sum()
}

impl DiskReclaimer for DeadContainers {
    fn name(&self) -> &'static str {
        "deleteTerminatedContainers"
    }

    /// Logs are on the node filesystem, writable layers on the image filesystem.
    fn targets(&self) -> &'static [DiskTarget] {
        &[DiskTarget::NodeFs, DiskTarget::ImageFs]
    }

    fn reclaim(&self) -> BoxFuture<'_, Result<Reclaimed, ReclaimError>> {
        Box::pin(async move {
            self.delete_all_unused().await.map_err(|e| ReclaimError {
                step: "deleteTerminatedContainers",
                message: e.to_string(),
            })
        })
    }
}

/// True for the two UID spellings oxlet's pods have: an RFC 4122 UUID
/// (`8-4-4-4-12` hex digits, as the apiserver assigns) or 32 hex digits (the
/// static-pod hash). Anything else under oxlet's directories is not taken for a pod.
pub(crate) fn looks_like_uid(s: &str) -> bool {
    let b = s.as_bytes();
    match b.len() {
        32 => b.iter().all(u8::is_ascii_hexdigit),
        36 => b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        }),
        _ => false,
    }
}

/// The pod UID in a pod log directory name `<namespace>_<name>_<uid>` (kubelet's
/// `parsePodUIDFromLogsDirectory`). Namespaces and names are DNS labels and subdomains,
/// which never contain `_`, so a well-formed name has exactly three parts.
pub(crate) fn uid_of_log_dir(dir_name: &str) -> Option<&str> {
    let mut parts = dir_name.split('_');
    let (ns, name, uid) = (parts.next()?, parts.next()?, parts.next()?);
    (parts.next().is_none() && !ns.is_empty() && !name.is_empty() && !uid.is_empty()).then_some(uid)
}

/// Real directories (never symlinks) directly in `dir` whose name `uid_of` maps to a
/// pod UID, with that UID. An unreadable or missing `dir` has none.
fn pod_dirs_in(dir: &Path, uid_of: impl Fn(&str) -> Option<String>) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let name = e.file_name();
            let uid = uid_of(name.to_str()?)?;
            Some((e.path(), uid))
        })
        .collect()
}

/// The log directories `<logs_dir>/<ns>_<name>_<uid>` of the pod with this UID. Matched
/// by suffix, not by [`uid_of_log_dir`]: a manifest's own `metadata.uid` may contain `_`,
/// and its pod's log directory must still go with the pod.
pub(crate) fn log_dirs_of(logs_dir: &Path, uid: &str) -> Vec<PathBuf> {
    pod_dirs_in(logs_dir, |n| {
        let ns_name = n.strip_suffix(uid)?.strip_suffix('_')?;
        let (ns, name) = ns_name.split_once('_')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains('_')).then(|| uid.to_string())
    })
    .into_iter()
    .map(|(p, _)| p)
    .collect()
}

/// Pod directories (`<pods_dir>/<uid>`) and pod log directories
/// (`<logs_dir>/<ns>_<name>_<uid>`) of pods for which `known` is false. Only real
/// directories named in oxlet's layout with a UID-shaped UID are candidates.
pub(crate) fn orphaned_dirs(
    pods_dir: &Path,
    logs_dir: &Path,
    known: &dyn Fn(&str) -> bool,
) -> Vec<(PathBuf, PathBuf)> {
    let pod_dirs = pod_dirs_in(pods_dir, |n| looks_like_uid(n).then(|| n.to_string()));
    let log_dirs = pod_dirs_in(logs_dir, |n| {
        uid_of_log_dir(n)
            .filter(|u| looks_like_uid(u))
            .map(str::to_string)
    });
    pod_dirs
        .into_iter()
        .map(|(p, uid)| (pods_dir.to_path_buf(), p, uid))
        .chain(
            log_dirs
                .into_iter()
                .map(|(p, uid)| (logs_dir.to_path_buf(), p, uid)),
        )
        .filter(|(_, _, uid)| !known(uid))
        .map(|(root, p, _)| (root, p))
        .collect()
}

/// Removes the directories of pods that are neither desired, nor being worked on, nor
/// in the runtime (`known` says which are). Housekeeping calls it only once every
/// source has reported, so a pod not yet read back after a restart is never taken for
/// an orphan.
pub(crate) fn cleanup_orphaned_dirs(
    pods_dir: &Path,
    logs_dir: &Path,
    known: &dyn Fn(&str) -> bool,
) {
    for (root, dir) in orphaned_dirs(pods_dir, logs_dir, known) {
        // Memory emptyDirs are tmpfs mounts the removal would refuse to cross.
        if root == pods_dir
            && let Err(e) = crate::volumes::unmount_pod_volumes(&dir)
        {
            warn!(dir = %dir.display(), error = %e, "cannot unmount orphaned pod volumes");
        }
        match crate::safe_path::remove_beneath(&root, &dir) {
            Ok(true) => info!(dir = %dir.display(), "removed orphaned pod directory"),
            Ok(false) => {}
            Err(e) => {
                warn!(dir = %dir.display(), error = %e, "cannot remove orphaned pod directory");
            }
        }
    }
}

impl RuntimeManager {
    /// Keeps only the newest dead instance of each container (kubelet's per-pod cleanup
    /// on `ContainerDied`, `maxPerPodContainer = 1`), so crash loops don't pile up dead
    /// containers and their logs between housekeeping passes.
    pub(super) async fn prune_dead_containers(&self, pod: &Pod, status: &PodRuntimeStatus) {
        let containers: Vec<GcContainer> = status
            .containers
            .iter()
            .map(|c| GcContainer {
                id: &c.id,
                name: &c.name,
                state: c.state,
                created_at: c.created_at,
            })
            .collect();
        for c in dead_beyond_limit(&containers, MAX_DEAD_PER_CONTAINER) {
            debug!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %c.name, containerID = %c.id, "removing old dead container");
            let unknown = c.state == ContainerState::Unknown;
            if let Err(e) = self.remove_container(c.id, unknown).await {
                debug!(error = %e, "failed to remove dead container");
            }
        }
    }

    /// Container GC: removes legacy log symlinks whose log is gone.
    pub(crate) async fn remove_dangling_log_symlinks(&self) {
        if let Some(dir) = &self.log_symlink_dir {
            crate::logs::remove_dangling_log_links(dir, self.pod_logs_dir(), self.cri.as_ref())
                .await;
        }
    }

    /// Stops, then removes a sandbox (kubelet's GC `removeSandbox`: stopping first
    /// tears down its network, which releases its IP, should nothing have done so).
    pub(crate) async fn remove_sandbox(&self, id: &str) -> Result<(), CriError> {
        gone_is_ok(self.cri.stop_pod_sandbox(id).await)?;
        gone_is_ok(self.cri.remove_pod_sandbox(id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::types::RuntimeSandbox;

    fn c<'a>(id: &'a str, name: &'a str, state: ContainerState, t: i64) -> GcContainer<'a> {
        GcContainer {
            id,
            name,
            state,
            created_at: t,
        }
    }

    #[test]
    fn keeps_the_newest_dead_instance_per_name_and_every_running_one() {
        use ContainerState::*;
        let cs = [
            c("a3", "a", Running, 30),
            c("a2", "a", Exited, 20),
            c("a1", "a", Exited, 10),
            c("a0", "a", Unknown, 5),
            c("b1", "b", Exited, 12),
            c("b2", "b", Created, 25),
        ];
        let mut out: Vec<&str> = dead_beyond_limit(&cs, 1).iter().map(|c| c.id).collect();
        out.sort();
        // a: a2 kept (newest dead), a1 and a0 go; b: b2 (created, newest) is the attempt
        // about to start and does not count, so b1 (its lastState) is kept.
        assert_eq!(out, vec!["a0", "a1"]);
        assert!(
            dead_beyond_limit(&cs[..1], 1).is_empty(),
            "running is never removed"
        );
        assert_eq!(dead_beyond_limit(&cs, 0).len(), 4);
    }

    fn sb(id: &str, ready: bool, attempt: u32, t: i64) -> RuntimeSandbox {
        RuntimeSandbox {
            id: id.into(),
            ready,
            attempt,
            created_at: t,
        }
    }

    #[test]
    fn sandboxes_keep_the_newest_the_ready_and_those_with_containers() {
        let pod = RuntimePod {
            sandboxes: vec![
                sb("s0", false, 0, 1),
                sb("s1", false, 1, 2),
                sb("s3", false, 3, 4),
                sb("s2", true, 2, 3),
            ],
            ..Default::default()
        };
        let in_use = HashSet::from(["s1"]);
        // s3 is the newest (kept although dead), s2 ready, s1 still has a container.
        assert_eq!(evictable_sandboxes(&pod, &in_use, true), vec!["s0"]);
        assert_eq!(
            evictable_sandboxes(&pod, &HashSet::new(), true),
            vec!["s1", "s0"]
        );
        // A terminated pod's newest dead sandbox goes too; a ready one never.
        assert_eq!(
            evictable_sandboxes(&pod, &HashSet::new(), false),
            vec!["s3", "s1", "s0"]
        );
        let one = RuntimePod {
            sandboxes: vec![sb("only", false, 0, 1)],
            ..Default::default()
        };
        assert!(evictable_sandboxes(&one, &HashSet::new(), true).is_empty());
        assert_eq!(
            evictable_sandboxes(&one, &HashSet::new(), false),
            vec!["only"]
        );
    }

    /// kubelet's `DeleteAllUnusedContainers`: a terminated pod loses every dead
    /// container and sandbox, a running pod keeps its running container and its newest
    /// dead instance.
    #[tokio::test]
    async fn delete_all_unused_empties_terminated_pods_and_keeps_one_dead_of_others() {
        use crate::cri::support::{FakeNode, pod};
        use crate::cri::{Cri, CriRead};
        let node = FakeNode::new();
        let web = pod("web", &[], &["app"], "Always");
        let done = pod("done", &[], &["app"], "Never");
        node.sync(&web).await.unwrap();
        node.sync(&done).await.unwrap();
        // web crashes once and restarts: one dead instance, one running.
        let id = node.fake.container_id("web", "app").unwrap();
        node.fake.exit_container(&id, 1);
        node.sync(&web).await.unwrap();
        // done's container exits and its sandbox is stopped (the pod is terminated).
        let id = node.fake.container_id("done", "app").unwrap();
        node.fake.exit_container(&id, 0);
        for s in node.fake.list_pod_sandbox(None).await.unwrap() {
            if s.metadata.is_some_and(|m| m.name == "done") {
                node.fake.stop_pod_sandbox(&s.id).await.unwrap();
            }
        }
        assert_eq!(node.fake.object_counts(), (2, 3));
        let step = DeadContainers::new(
            node.manager.clone(),
            Arc::new(|uid: &str| uid == "uid-done"),
            vec![node.dir.path().to_path_buf()],
        );
        assert_eq!(step.name(), "deleteTerminatedContainers");
        let got = step.reclaim().await.unwrap();
        assert_eq!(got.removed, 2, "done's container and sandbox");
        assert_eq!(node.fake.object_counts(), (1, 2));
        assert_eq!(node.fake.container_count("web", "app"), 2);
        assert_eq!(node.fake.container_count("done", "app"), 0);
        // A second pass finds nothing more to remove.
        assert_eq!(step.reclaim().await.unwrap().removed, 0);
    }

    #[test]
    fn uid_shapes() {
        assert!(looks_like_uid("0f5e1b3c-8a7d-4e2f-9b6a-1c2d3e4f5a6b"));
        assert!(looks_like_uid("0123456789abcdef0123456789ABCDEF"));
        for bad in [
            "",
            "my-uid",
            "lost+found",
            "0f5e1b3c-8a7d-4e2f-9b6a-1c2d3e4f5a6",
            "0f5e1b3c+8a7d-4e2f-9b6a-1c2d3e4f5a6b",
            "../../../../etc/passwd0123456789",
        ] {
            assert!(!looks_like_uid(bad), "{bad:?}");
        }
        assert_eq!(uid_of_log_dir("default_web_abc"), Some("abc"));
        for bad in [
            "default_web",
            "a_b_c_d",
            "_web_abc",
            "default__abc",
            "default_web_",
        ] {
            assert_eq!(uid_of_log_dir(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_orphans_memory_volume_is_unmounted_and_a_foreign_mount_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let logs = tmp.path().join("logs");
        let ours = "aaaaaaaa-bbbb-cccc-dddd-000000000001";
        let foreign = "aaaaaaaa-bbbb-cccc-dddd-000000000002";
        let tmpfs = |p: &Path| {
            std::fs::create_dir_all(p).unwrap();
            rustix::mount::mount("tmpfs", p, "tmpfs", rustix::mount::MountFlags::empty(), c"")
                .unwrap();
        };
        tmpfs(&pods.join(ours).join("volumes/kubernetes.io~empty-dir/m"));
        // Not where oxlet puts a Memory volume: never unmounted by oxlet.
        let other = pods.join(foreign).join("volumes/other/m");
        tmpfs(&other);
        std::fs::create_dir_all(&logs).unwrap();
        cleanup_orphaned_dirs(&pods, &logs, &|_| false);
        let ours_gone = !pods.join(ours).exists();
        let foreign_mounted = crate::safe_path::mounts_at_or_below(&other).unwrap().len() == 1;
        // Detached before asserting, so a failure leaks no mount.
        crate::safe_path::detach(&other).unwrap();
        assert!(ours_gone, "the orphan with oxlet's tmpfs is removed");
        assert!(
            foreign_mounted,
            "a mount oxlet did not make is left, refusing the removal"
        );
    }

    #[test]
    fn orphans_are_real_dirs_in_oxlets_layout_of_unknown_pods() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let logs = tmp.path().join("logs");
        let outside = tmp.path().join("outside");
        for d in [&pods, &logs, &outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        let known = "11111111-2222-3333-4444-555555555555";
        let orphan = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
        let hash = "0123456789abcdef0123456789abcdef";
        for d in [known, orphan, hash, "not-a-uid"] {
            std::fs::create_dir(pods.join(d)).unwrap();
        }
        std::fs::create_dir(logs.join(format!("default_web_{known}"))).unwrap();
        std::fs::create_dir(logs.join(format!("default_web_{orphan}"))).unwrap();
        std::fs::create_dir(logs.join("something_else")).unwrap();
        std::fs::write(pods.join("ffffffff-bbbb-cccc-dddd-eeeeeeeeeeee"), b"a file").unwrap();
        let linked = "99999999-bbbb-cccc-dddd-eeeeeeeeeeee";
        std::os::unix::fs::symlink(&outside, pods.join(linked)).unwrap();
        std::os::unix::fs::symlink(&outside, logs.join(format!("ns_n_{linked}"))).unwrap();

        let is_known = |u: &str| u == known;
        let mut found: Vec<PathBuf> = orphaned_dirs(&pods, &logs, &is_known)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        found.sort();
        let mut want = vec![
            pods.join(orphan),
            pods.join(hash),
            logs.join(format!("default_web_{orphan}")),
        ];
        want.sort();
        assert_eq!(found, want);

        cleanup_orphaned_dirs(&pods, &logs, &is_known);
        for p in &want {
            assert!(!p.exists(), "{} still there", p.display());
        }
        for kept in [
            pods.join(known),
            pods.join("not-a-uid"),
            pods.join(linked),
            logs.join(format!("default_web_{known}")),
            logs.join("something_else"),
            logs.join(format!("ns_n_{linked}")),
            outside.clone(),
        ] {
            assert!(
                kept.symlink_metadata().is_ok(),
                "{} was removed",
                kept.display()
            );
        }
        assert_eq!(
            log_dirs_of(&logs, known),
            vec![logs.join(format!("default_web_{known}"))]
        );
        assert!(
            log_dirs_of(&logs, linked).is_empty(),
            "a link is not a log dir"
        );
        // A manifest's own UID may hold '_': its log dir is still found, and only its own.
        for d in ["default_web_x_y", "default_web_y", "a_b_c_x_y"] {
            std::fs::create_dir(logs.join(d)).unwrap();
        }
        assert_eq!(
            log_dirs_of(&logs, "x_y"),
            vec![logs.join("default_web_x_y")]
        );
    }
}

#[cfg(test)]
mod created_tests {
    use super::*;

    #[test]
    fn the_attempt_about_to_start_does_not_push_out_the_exited_one() {
        let c = |id, state, created_at| GcContainer {
            id,
            name: "main",
            state,
            created_at,
        };
        let old = c("old", ContainerState::Exited, 1);
        let new = c("new", ContainerState::Created, 2);
        assert!(dead_beyond_limit(&[old, new], 1).is_empty());
        // A created instance that is not the newest (a start that failed) is dead.
        let newer = c("newer", ContainerState::Exited, 3);
        let gone: Vec<&str> = dead_beyond_limit(&[old, new, newer], 1)
            .iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(gone, ["new", "old"]);
    }
}

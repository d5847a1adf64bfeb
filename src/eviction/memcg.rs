//! The kernel's memory threshold notification (kubelet's `memoryThresholdNotifier` on
//! its `linuxCgroupNotifier`): on cgroup v1 an eventfd is registered with the memory
//! cgroup's `cgroup.event_control` against `memory.usage_in_bytes`, so the eviction
//! manager hears that usage crossed the threshold between its ticks.
//!
//! One notifier watches one cgroup: the root for `memory.available`, `kubepods` for
//! `allocatableMemory.available`. It holds at most one registration: each
//! [`ThresholdNotifier::set_threshold`] registers a new eventfd and closes the old one
//! (closing it ends the kernel's registration). cgroup v2 has no such notification;
//! kubelet runs a disabled notifier there, and [`MemcgNotifier::new`] refuses v2 with
//! an error saying so, so the manager simply relies on its ticks.

use crate::locks::Locked as _;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rustix::event::{EventfdFlags, eventfd};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::reclaim::ThresholdNotifier;
use crate::cm::{CgroupError, CgroupTree};
use crate::contracts::ReclaimError;
use crate::contracts::ThresholdValue;

/// The step name in a [`ReclaimError`] from [`MemcgNotifier::set_threshold`].
const STEP: &str = "memcg threshold";

/// Why a notifier cannot be made or armed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MemcgError {
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("memory threshold notification is not supported on cgroup v2")]
    V2Unsupported,
    #[error("eventfd: {0}")]
    Eventfd(#[source] std::io::Error),
}

/// Watches one memory cgroup for its usage crossing a threshold.
#[derive(Debug)]
pub(crate) struct MemcgNotifier {
    tree: CgroupTree,
    /// The cgroup, relative to the memory hierarchy (`""` is the root).
    cgroup: String,
    /// kubelet's description, for logs ("hard memory eviction threshold").
    description: &'static str,
    /// The one armed eventfd, shared with a waiting [`ThresholdNotifier::crossed`].
    armed: Mutex<Option<Arc<AsyncFd<OwnedFd>>>>,
    /// Wakes a waiting `crossed` so it moves to the new eventfd.
    rearmed: Notify,
}

impl MemcgNotifier {
    /// A notifier on `cgroup` (relative to the memory hierarchy); nothing is armed
    /// until the first `set_threshold`. Fails on cgroup v2.
    pub(crate) fn new(
        tree: CgroupTree,
        cgroup: &str,
        description: &'static str,
    ) -> Result<MemcgNotifier, MemcgError> {
        if !tree.version().uses_v1_controllers() {
            return Err(MemcgError::V2Unsupported);
        }
        Ok(MemcgNotifier {
            tree,
            cgroup: cgroup.to_string(),
            description,
            armed: Mutex::new(None),
            rearmed: Notify::new(),
        })
    }

    /// The node's notifier, on the root memory cgroup (`memory.available`).
    pub(crate) fn node(tree: CgroupTree) -> Result<MemcgNotifier, MemcgError> {
        MemcgNotifier::new(tree, "", "hard memory eviction threshold")
    }

    /// The allocatable notifier, on the pods' cgroup (`allocatableMemory.available`);
    /// `kubepods` is its path relative to the cgroup root as the driver spells it.
    pub(crate) fn allocatable(
        tree: CgroupTree,
        kubepods: &str,
    ) -> Result<MemcgNotifier, MemcgError> {
        MemcgNotifier::new(tree, kubepods, "hard allocatable memory eviction threshold")
    }

    /// Registers a fresh eventfd at `usage_bytes`, then replaces (and so closes) the
    /// previous one. Must run inside the tokio runtime (the eventfd joins its reactor).
    fn arm(&self, usage_bytes: u64) -> Result<(), MemcgError> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| MemcgError::Eventfd(e.into()))?;
        // The files are opened for each registration and closed after it, as kubelet
        // does: the kernel keeps what it needs, and a recreated cgroup is found anew.
        let mut files = self.tree.memory_threshold_files(&self.cgroup)?;
        files.register(fd.as_fd(), usage_bytes)?;
        // `new` is deprecated for fds the AsyncFd does not own; it owns this OwnedFd,
        // and the unsafe `register` is not for oxlet (it forbids `unsafe`).
        #[allow(deprecated, reason = "sound: the AsyncFd owns the OwnedFd")]
        let fd = AsyncFd::new(fd).map_err(MemcgError::Eventfd)?;
        let old = self.armed.locked().replace(Arc::new(fd));
        drop(old);
        self.rearmed.notify_waiters();
        debug!(notifier = self.description, cgroup = %files.dir().display(), threshold = usage_bytes, "memcg threshold armed");
        Ok(())
    }

    fn current(&self) -> Option<Arc<AsyncFd<OwnedFd>>> {
        self.armed.locked().clone()
    }
}

/// Reads the eventfd's counter: `Ok(true)` when an event was there.
fn consume(fd: &AsyncFd<OwnedFd>) -> std::io::Result<bool> {
    let mut buf = [0u8; 8];
    match rustix::io::read(fd.get_ref(), &mut buf) {
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::AGAIN) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl ThresholdNotifier for MemcgNotifier {
    fn set_threshold(&self, usage_bytes: u64) -> Result<(), ReclaimError> {
        self.arm(usage_bytes).map_err(|e| ReclaimError {
            step: STEP,
            message: format!("{}: {e}", self.description),
        })
    }

    fn crossed(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            loop {
                // Listen for a re-arm before looking at the eventfd, so none is missed.
                let rearmed = self.rearmed.notified();
                tokio::pin!(rearmed);
                rearmed.as_mut().enable();
                let Some(fd) = self.current() else {
                    rearmed.await;
                    continue;
                };
                tokio::select! {
                    () = &mut rearmed => {}
                    ready = fd.readable() => {
                        let failed = match ready {
                            Ok(mut guard) => match consume(&fd) {
                                Ok(true) => return,
                                Ok(false) => {
                                    guard.clear_ready();
                                    None
                                }
                                Err(e) => Some(e),
                            },
                            Err(e) => Some(e),
                        };
                        if let Some(e) = failed {
                            // Never spin on a broken eventfd: wait for the next arm.
                            warn!(notifier = self.description, error = %e, "cannot read the memcg eventfd");
                            drop(fd);
                            rearmed.await;
                        }
                    }
                }
            }
        })
    }
}

/// The `memory.usage_in_bytes` at which to be notified (kubelet's `UpdateThreshold`):
/// capacity − the eviction threshold + inactive file, so the notification comes when
/// the working set reaches capacity − threshold. Capacity is available + working set,
/// inactive file is usage − working set, from the same cgroup's reading (the node for
/// `memory.available`, the `pods` system container for the allocatable one).
pub(crate) fn usage_threshold(
    available: u64,
    working_set: u64,
    usage: u64,
    threshold: ThresholdValue,
) -> u64 {
    let capacity = available.saturating_add(working_set);
    let inactive_file = usage.saturating_sub(working_set);
    let evict_at =
        u64::try_from(threshold.amount(i64::try_from(capacity).unwrap_or(i64::MAX))).unwrap_or(0);
    capacity
        .saturating_sub(evict_at)
        .saturating_add(inactive_file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::{CgroupFs, CgroupVersion, ResourceConfig, detect_cgroup_version};
    use std::path::Path;
    use std::time::{Duration, Instant};

    #[test]
    fn the_usage_threshold_is_kubelets_formula() {
        const MI: u64 = 1 << 20;
        // capacity 1000Mi (900 available + 100 working set), 50Mi inactive file:
        // notify at usage 1000 − 100 + 50 Mi.
        assert_eq!(
            usage_threshold(
                900 * MI,
                100 * MI,
                150 * MI,
                ThresholdValue::Quantity((100 * MI) as i64)
            ),
            950 * MI
        );
        // 10% of capacity.
        assert_eq!(
            usage_threshold(
                900 * MI,
                100 * MI,
                100 * MI,
                ThresholdValue::Percentage(0.1)
            ),
            900 * MI
        );
        // A threshold above capacity never goes below zero.
        assert_eq!(usage_threshold(0, 10, 10, ThresholdValue::Quantity(100)), 0);
    }

    fn v1_tree() -> (tempfile::TempDir, CgroupTree) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("memory/kubepods")).unwrap();
        std::fs::create_dir_all(dir.path().join("cpu,cpuacct")).unwrap();
        for d in ["memory", "memory/kubepods"] {
            std::fs::write(dir.path().join(d).join("memory.usage_in_bytes"), "0\n").unwrap();
            std::fs::write(dir.path().join(d).join("cgroup.event_control"), "").unwrap();
        }
        let tree = CgroupTree::new(dir.path(), CgroupVersion::Hybrid).unwrap();
        (dir, tree)
    }

    #[test]
    fn cgroup_v2_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), "memory").unwrap();
        let tree = CgroupTree::new(dir.path(), CgroupVersion::V2).unwrap();
        let e = MemcgNotifier::node(tree).unwrap_err();
        assert_eq!(
            e.to_string(),
            "memory threshold notification is not supported on cgroup v2"
        );
    }

    #[tokio::test]
    async fn each_arm_registers_a_new_eventfd_and_closes_the_old() {
        let (dir, tree) = v1_tree();
        let n = MemcgNotifier::allocatable(tree, "kubepods").unwrap();
        let control = dir.path().join("memory/kubepods/cgroup.event_control");
        n.set_threshold(1000).unwrap();
        let first = std::fs::read_to_string(&control).unwrap();
        assert!(first.ends_with(" 1000"), "{first:?}");
        let first_fd: i32 = first.split(' ').next().unwrap().parse().unwrap();
        let first_arc = n.current().unwrap();
        n.set_threshold(2000).unwrap();
        let second = std::fs::read_to_string(&control).unwrap();
        assert!(second.ends_with(" 2000"), "{second:?}");
        // The notifier let go of the old eventfd: only this test's clone holds it.
        assert_eq!(Arc::strong_count(&first_arc), 1);
        drop(first_arc);
        let second_fd: i32 = second.split(' ').next().unwrap().parse().unwrap();
        assert!(Path::new(&format!("/proc/self/fd/{second_fd}")).exists());
        assert_ne!(
            first_fd, second_fd,
            "the new eventfd was opened before the old closed"
        );
        // (Whether the first fd number is free now cannot be told here: the other
        // tests of this process open eventfds of their own and may reuse it.)
        // A missing cgroup fails the arm with the path and keeps the last registration.
        std::fs::remove_file(&control).unwrap();
        let e = n.set_threshold(3000).unwrap_err();
        assert!(e.to_string().contains("cgroup.event_control"), "{e}");
        assert!(n.current().is_some());
    }

    #[tokio::test]
    async fn crossed_waits_for_an_arm_and_moves_to_the_new_eventfd() {
        let (_dir, tree) = v1_tree();
        let n = Arc::new(MemcgNotifier::node(tree).unwrap());
        let waiter = {
            let n = Arc::clone(&n);
            tokio::spawn(async move { n.crossed().await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "nothing armed, nothing crossed");
        n.set_threshold(10).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "armed, not signalled");
        n.set_threshold(20).unwrap();
        // Signal the new eventfd as the kernel would.
        let fd = n.current().unwrap();
        rustix::io::write(fd.get_ref(), &1u64.to_ne_bytes()).unwrap();
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("crossed resolves")
            .unwrap();
        // The event was consumed: the next wait does not return at once.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), n.crossed())
                .await
                .is_err()
        );
    }

    /// Removes the test's tmpfs files and cgroup, whatever happened.
    struct RealCgroup {
        tree: CgroupTree,
        rel: String,
        files: Vec<std::path::PathBuf>,
    }

    impl Drop for RealCgroup {
        fn drop(&mut self) {
            for f in &self.files {
                let _ = std::fs::remove_file(f);
            }
            let _ = self.tree.remove(&self.rel);
        }
    }

    /// Runs `dd` inside the cgroup, writing `mib` MiB into a tmpfs file: the pages are
    /// charged to the cgroup and stay charged after `dd` exits.
    fn fill(tree: &CgroupTree, rel: &str, file: &Path, mib: u32) {
        let procs = tree
            .memory_threshold_files(rel)
            .unwrap()
            .dir()
            .join("cgroup.procs");
        let script = format!(
            "echo $$ > {} && exec dd if=/dev/zero of={} bs=1M count={mib} oflag=append conv=notrunc status=none",
            procs.display(),
            file.display()
        );
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
    }

    #[tokio::test]
    async fn v1_for_real_the_kernel_signals_a_crossing_and_not_below_it() {
        let version = detect_cgroup_version(Path::new(crate::cm::HOST_MOUNT)).unwrap();
        let tree = CgroupTree::host(version).unwrap();
        if !version.uses_v1_controllers() {
            assert!(matches!(
                MemcgNotifier::node(tree),
                Err(MemcgError::V2Unsupported)
            ));
            return;
        }
        let rel = format!("oxlet-memcg-{}", std::process::id());
        let shm = Path::new("/dev/shm").join(format!("oxlet-memcg-{}", std::process::id()));
        let guard = RealCgroup {
            tree: tree.clone(),
            rel: rel.clone(),
            files: vec![shm.clone()],
        };
        tree.create(&rel, &ResourceConfig::default()).unwrap();
        let usage_file = tree
            .memory_threshold_files(&rel)
            .unwrap()
            .dir()
            .join("memory.usage_in_bytes");
        let usage = || -> u64 {
            std::fs::read_to_string(&usage_file)
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let n = MemcgNotifier::new(tree.clone(), &rel, "test memory threshold").unwrap();
        let threshold = usage() + (16 << 20);
        n.set_threshold(threshold).unwrap();

        // 4 MiB: below the threshold, no notification.
        fill(&tree, &rel, &shm, 4);
        assert!(usage() < threshold);
        assert!(
            tokio::time::timeout(Duration::from_millis(500), n.crossed())
                .await
                .is_err(),
            "signalled below the threshold (usage {}, threshold {threshold})",
            usage()
        );

        // 32 MiB more: above it, notified within a second.
        let started = Instant::now();
        fill(&tree, &rel, &shm, 32);
        tokio::time::timeout(Duration::from_secs(1), n.crossed())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "not signalled within 1 s (usage {}, threshold {threshold})",
                    usage()
                )
            });
        eprintln!(
            "memcg crossing seen {:?} after the write started",
            started.elapsed()
        );
        drop(n);
        drop(guard);
        assert!(!tree.exists(&rel));
    }
}

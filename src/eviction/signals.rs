//! The eviction signals observed from the metric advisor's latest round (kubelet's
//! `makeSignalObservations`): what is available of each resource, its capacity, and
//! when it was read (so a threshold is acted on only when its reading is new).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::contracts::Signal;
use crate::contracts::{FsReading, Snapshot};

/// Readings older than this are not acted on (the advisor publishes every second).
pub(crate) const MAX_AGE: Duration = Duration::from_secs(3);

/// One signal's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Observation {
    /// What is available: bytes, inodes or pids (negative when over-committed).
    pub available: i64,
    pub capacity: i64,
    #[serde(skip)]
    pub time: SystemTime,
}

/// Every signal that could be observed.
pub(crate) type Observations = BTreeMap<Signal, Observation>;

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The signals of `snapshot`. `allocatable_memory` is the pods' allocatable memory
/// when enforceNodeAllocatable has `pods` (kubelet then observes
/// `allocatableMemory.available` against the `pods` system container).
pub(crate) fn observe(snapshot: &Snapshot, allocatable_memory: Option<i64>) -> Observations {
    let node = &snapshot.node;
    let mut o = Observations::new();
    if let Some(mem) = node.cgroup.memory {
        let capacity = i(node.memory_capacity_bytes);
        o.insert(
            Signal::MemoryAvailable,
            Observation {
                available: capacity - i(mem.working_set_bytes),
                capacity,
                time: node.cgroup.time,
            },
        );
    }
    if let Some(allocatable) = allocatable_memory {
        let pods = node
            .system_containers
            .iter()
            .find(|c| c.name == "pods")
            .map(|c| &c.cgroup);
        if let Some((c, mem)) = pods.and_then(|c| Some((c, c.memory?))) {
            o.insert(
                Signal::AllocatableMemoryAvailable,
                Observation {
                    available: allocatable - i(mem.working_set_bytes),
                    capacity: allocatable,
                    time: c.time,
                },
            );
        }
    }
    fs_signals(
        &mut o,
        node.fs.as_ref(),
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
    );
    fs_signals(
        &mut o,
        node.image_fs.as_ref(),
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
    );
    if let (Some(max), Some(procs)) = (node.max_pid, node.processes) {
        o.insert(
            Signal::PidAvailable,
            Observation {
                available: i(max) - i(procs),
                capacity: i(max),
                time: node.cgroup.time,
            },
        );
    }
    o
}

/// Bytes and inodes of one filesystem.
pub(crate) fn fs_signals(
    o: &mut Observations,
    fs: Option<&FsReading>,
    bytes: Signal,
    inodes: Signal,
) {
    let Some(fs) = fs else { return };
    o.insert(
        bytes,
        Observation {
            available: i(fs.available_bytes),
            capacity: i(fs.capacity_bytes),
            time: fs.time,
        },
    );
    if let (Some(total), Some(free)) = (fs.inodes, fs.inodes_free) {
        o.insert(
            inodes,
            Observation {
                available: i(free),
                capacity: i(total),
                time: fs.time,
            },
        );
    }
}

/// Whether the round is recent enough to act on.
pub(crate) fn fresh(snapshot: &Snapshot, now: SystemTime) -> bool {
    now.duration_since(snapshot.node.cgroup.time)
        .is_ok_and(|age| age <= MAX_AGE)
        || snapshot.node.cgroup.time > now
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::contracts::{CgroupReading, MemoryReading, NodeReading};

    pub(crate) fn cgroup(time: SystemTime, working_set: u64) -> CgroupReading {
        CgroupReading {
            time,
            cpu: None,
            memory: Some(MemoryReading {
                usage_bytes: working_set,
                working_set_bytes: working_set,
                ..Default::default()
            }),
            pids: None,
            pressure: Default::default(),
        }
    }

    pub(crate) fn fs(time: SystemTime, cap: u64, avail: u64, inodes: u64, free: u64) -> FsReading {
        FsReading {
            time,
            capacity_bytes: cap,
            available_bytes: avail,
            used_bytes: cap - avail,
            inodes: Some(inodes),
            inodes_free: Some(free),
            inodes_used: Some(inodes - free),
        }
    }

    /// A node of 8 GiB using 6 GiB; kubepods uses 5 GiB; fs 100 GB with 20 GB free.
    pub(crate) fn snapshot(time: SystemTime) -> Snapshot {
        Snapshot {
            node: NodeReading {
                name: "n".into(),
                started_at: time,
                cgroup: cgroup(time, 6 << 30),
                memory_capacity_bytes: 8 << 30,
                fs: Some(fs(time, 100_000, 20_000, 1000, 50)),
                image_fs: Some(fs(time, 50_000, 40_000, 500, 400)),
                max_pid: Some(4_194_304),
                processes: Some(4_000_000),
                system_containers: vec![crate::contracts::SystemContainerReading {
                    name: "pods".into(),
                    created_at: None,
                    cgroup: cgroup(time, 5 << 30),
                }],
                network: None,
            },
            pods: vec![],
        }
    }

    #[test]
    fn every_signal_from_a_synthetic_snapshot() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let o = observe(&snapshot(t), Some(7 << 30));
        let get = |s| o[&s];
        assert_eq!(get(Signal::MemoryAvailable).available, 2 << 30);
        assert_eq!(get(Signal::MemoryAvailable).capacity, 8 << 30);
        assert_eq!(get(Signal::AllocatableMemoryAvailable).available, 2 << 30);
        assert_eq!(get(Signal::AllocatableMemoryAvailable).capacity, 7 << 30);
        assert_eq!(get(Signal::NodeFsAvailable).available, 20_000);
        assert_eq!(get(Signal::NodeFsInodesFree).available, 50);
        assert_eq!(get(Signal::NodeFsInodesFree).capacity, 1000);
        assert_eq!(get(Signal::ImageFsAvailable).available, 40_000);
        assert_eq!(get(Signal::ImageFsInodesFree).available, 400);
        assert_eq!(get(Signal::PidAvailable).available, 194_304);
        assert_eq!(get(Signal::PidAvailable).time, t);
        // Without node allocatable enforcement, no allocatable signal.
        assert!(!observe(&snapshot(t), None).contains_key(&Signal::AllocatableMemoryAvailable));
    }

    #[test]
    fn missing_readings_leave_their_signals_out() {
        let t = SystemTime::UNIX_EPOCH;
        let mut s = snapshot(t);
        s.node.cgroup.memory = None;
        s.node.fs.as_mut().unwrap().inodes = None;
        s.node.image_fs = None;
        s.node.processes = None;
        s.node.system_containers.clear();
        let o = observe(&s, Some(1));
        assert_eq!(
            o.keys().copied().collect::<Vec<_>>(),
            [Signal::NodeFsAvailable]
        );
    }

    #[test]
    fn stale_rounds_are_not_fresh() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let s = snapshot(t);
        assert!(fresh(&s, t + Duration::from_secs(2)));
        assert!(!fresh(&s, t + Duration::from_secs(10)));
    }
}

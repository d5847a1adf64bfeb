//! The latest readings of the node, its pods and their containers: what the metric
//! advisor saw in its last round, kept whole so that `/stats/summary`,
//! `/metrics/resource` and the QoS manager serve the same data the metric cache holds.
//!
//! Cumulative counters stay cumulative here (CPU time, page faults, PSI totals); the
//! advisor also fills the rates it computed from its previous round. A field is `None`
//! when its source could not be read, and the Summary API then omits it, as kubelet does.

use crate::locks::ReadWriteLocked as _;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

/// CPU of one cgroup (or of the node).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CpuReading {
    /// Total CPU time used, in nanoseconds.
    pub usage_core_nanos: u64,
    /// The rate since the advisor's previous reading, in nanocores; None on the first.
    pub usage_nano_cores: Option<u64>,
    /// CFS throttling counters, where the cgroup has a quota controller.
    pub throttling: Option<Throttling>,
}

/// `cpu.stat`'s throttling counters (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Throttling {
    pub periods: u64,
    pub throttled_periods: u64,
    pub throttled_nanos: u64,
}

/// Memory of one cgroup (or of the node).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryReading {
    /// Usage including the page cache (`memory.usage_in_bytes` / `memory.current`).
    pub usage_bytes: u64,
    /// Usage minus inactive file pages (kubelet's working set).
    pub working_set_bytes: u64,
    /// Anonymous pages, active and inactive, and unevictable ones: koordlet's memory
    /// usage (`usageWithoutPageCache`, its default node memory collect policy), which
    /// its metric cache records for pods and containers.
    pub without_cache_bytes: u64,
    /// The same plus the file pages, active and inactive: koordlet's usage with page
    /// cache (`MemoryStatRaw.UsageWithPageCache`).
    pub with_cache_bytes: u64,
    /// Anonymous and swap cache memory (`rss` / `anon`).
    pub rss_bytes: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// The limit, when one is set (for `availableBytes`).
    pub limit_bytes: Option<u64>,
    /// Swap in use (v2 `memory.swap.current`; the node's SwapTotal − SwapFree); None
    /// where there is no swap accounting.
    pub swap_usage_bytes: Option<u64>,
    /// The swap limit, when one is set (v2 `memory.swap.max`; the node's SwapTotal),
    /// for the summary's `swapAvailableBytes`.
    pub swap_limit_bytes: Option<u64>,
}

/// One line of a pressure file.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct PsiLine {
    /// Cumulative stall time, in microseconds, as the kernel reports it.
    pub total_us: u64,
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
}

/// A pressure file: `some`, and `full` where the kernel has it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Psi {
    pub some: PsiLine,
    pub full: Option<PsiLine>,
}

/// The pressure files of a cgroup; None where the kernel has no PSI for it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Pressure {
    pub cpu: Option<Psi>,
    pub memory: Option<Psi>,
    pub io: Option<Psi>,
}

/// What one cgroup uses, read at `time`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CgroupReading {
    pub time: SystemTime,
    pub cpu: Option<CpuReading>,
    pub memory: Option<MemoryReading>,
    /// Tasks in the cgroup and below.
    pub pids: Option<u64>,
    pub pressure: Pressure,
}

/// A filesystem's size and use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FsReading {
    pub time: SystemTime,
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub inodes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes_used: Option<u64>,
}

impl FsReading {
    /// A filesystem's size and use from statvfs; None when it cannot be read.
    pub(crate) fn of(path: &std::path::Path) -> Option<FsReading> {
        let s = rustix::fs::statvfs(path)
            .inspect_err(|e| tracing::debug!(path = %path.display(), error = %e, "statvfs failed"))
            .ok()?;
        let frsize = s.f_frsize;
        Some(FsReading {
            time: SystemTime::now(),
            capacity_bytes: s.f_blocks.saturating_mul(frsize),
            available_bytes: s.f_bavail.saturating_mul(frsize),
            used_bytes: s.f_blocks.saturating_sub(s.f_bfree).saturating_mul(frsize),
            inodes: Some(s.f_files),
            inodes_free: Some(s.f_ffree),
            inodes_used: Some(s.f_files.saturating_sub(s.f_ffree)),
        })
    }
}

/// One network interface's cumulative counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct InterfaceReading {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

/// The host's network interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NetworkReading {
    pub time: SystemTime,
    /// The interface holding the default route, if any.
    pub default: Option<String>,
    pub interfaces: Vec<InterfaceReading>,
}

/// One of kubelet's system containers (`pods`, `kubelet`, `runtime`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SystemContainerReading {
    pub name: String,
    /// The cgroup directory's modification time, the oldest over its hierarchies
    /// (cAdvisor's creation time for a raw cgroup).
    pub created_at: Option<SystemTime>,
    pub cgroup: CgroupReading,
}

/// One running container.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ContainerReading {
    /// The runtime's container ID.
    pub id: String,
    /// The spec's container name.
    pub name: String,
    /// The image the runtime says it runs (cAdvisor's `image` label).
    pub image: Arc<str>,
    /// Its cgroup below the hierarchy's mount, without a leading `/` (cAdvisor's `id`).
    pub cgroup_path: Arc<str>,
    /// When the runtime created it (kubelet's container `startTime` in the summary).
    pub created_at: SystemTime,
    pub cgroup: CgroupReading,
    /// Its writable layer, from the runtime, when known.
    pub rootfs: Option<FsReading>,
    /// Its log files, when known.
    pub logs: Option<FsReading>,
}

/// One pod with a running sandbox.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodReading {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// The sandbox's creation time (kubelet's pod `startTime` in the summary).
    pub started_at: SystemTime,
    /// The pod cgroup, or None when it could not be read.
    pub cgroup: Option<CgroupReading>,
    /// The pod cgroup below the mount, without a leading `/` (None without pod cgroups).
    pub cgroup_path: Option<Arc<str>>,
    pub containers: Vec<ContainerReading>,
    /// Per volume name: what its directory holds (emptyDir and the like).
    pub volumes: Vec<(String, FsReading)>,
}

/// The node as a whole.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NodeReading {
    pub name: String,
    /// Boot time.
    pub started_at: SystemTime,
    /// The root cgroup (the whole machine).
    pub cgroup: CgroupReading,
    /// Memory the machine has (`MemTotal`).
    pub memory_capacity_bytes: u64,
    /// The filesystem of `--root-dir`.
    pub fs: Option<FsReading>,
    /// The runtime's image filesystem (CRI `ImageFsInfo`).
    pub image_fs: Option<FsReading>,
    /// `kernel.pid_max` and the processes now running.
    pub max_pid: Option<u64>,
    pub processes: Option<u64>,
    /// kubelet's system containers that exist here, by kubelet's names (`pods`,
    /// `kubelet`, `runtime`).
    pub system_containers: Vec<SystemContainerReading>,
    /// The host's interfaces, when `/proc/net/dev` could be read.
    pub network: Option<NetworkReading>,
}

/// One round of the advisor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snapshot {
    pub node: NodeReading,
    pub pods: Vec<PodReading>,
}

/// The latest snapshot; the advisor replaces it each round, readers take a cheap
/// `Arc` to it. None until the first round finished.
#[derive(Debug, Default)]
pub(crate) struct LatestReadings {
    latest: RwLock<Option<Arc<Snapshot>>>,
}

impl LatestReadings {
    pub(crate) fn set(&self, snapshot: Snapshot) {
        *self.latest.write_locked() = Some(Arc::new(snapshot));
    }

    pub(crate) fn get(&self) -> Option<Arc<Snapshot>> {
        self.latest.read_locked().clone()
    }
}

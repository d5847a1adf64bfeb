//! Which cgroup hierarchy the host runs: kubelet and koordlet decide from the statfs
//! magic of the cgroup mount (`/sys/fs/cgroup`).

/// The host's cgroup layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CgroupVersion {
    /// One mount per v1 controller below a tmpfs.
    V1,
    /// v1 controllers, plus a cgroup2 mount (`unified`) with no controllers: run as v1.
    Hybrid,
    /// The unified hierarchy: cgroup2 mounted at the root.
    V2,
}

impl CgroupVersion {
    /// Whether limits are written to v1 controller files (v1 and hybrid).
    pub(crate) fn uses_v1_controllers(self) -> bool {
        self != CgroupVersion::V2
    }
}

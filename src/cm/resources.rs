//! The limits kubelet writes into a cgroup (its `ResourceConfig`), and the formulas
//! that turn requests and limits into them.

/// What to set on one cgroup; `None` leaves a value as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ResourceConfig {
    /// v1 `cpu.shares` (v2: converted to `cpu.weight`).
    pub cpu_shares: Option<u64>,
    /// v1 `cpu.cfs_quota_us`, -1 for no quota (v2: the first field of `cpu.max`).
    pub cpu_quota: Option<i64>,
    /// v1 `cpu.cfs_period_us` (v2: the second field of `cpu.max`).
    pub cpu_period: Option<u64>,
    /// v1 `memory.limit_in_bytes` (v2 `memory.max`), -1 for no limit.
    pub memory_limit: Option<i64>,
    /// `pids.max`, -1 for no limit.
    pub pids_limit: Option<i64>,
}

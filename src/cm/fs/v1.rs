//! cgroup v1 (and hybrid): one directory per hierarchy, limits in the controllers'
//! own files (`cpu.shares`, `memory.limit_in_bytes`, `pids.max`, …).

use std::path::Path;

use super::CgroupError;
use super::files::{self, err};
use super::tree::CgroupTree;
use crate::cm::resources::ResourceConfig;

/// v1 reports "no memory limit" as the largest page-aligned value (2^63 − page size);
/// anything this large is read back as -1.
const UNLIMITED_MEMORY: i64 = 1 << 62;

/// Creates `rel` and its missing parents in every hierarchy. A new cpuset cgroup starts
/// with no cpus and no memory nodes, and no task could join it: like libcontainer, copy
/// the parent's when empty.
pub(super) fn create(tree: &CgroupTree, rel: &str) -> Result<(), CgroupError> {
    for h in tree.hierarchies().iter().filter(|h| h.create) {
        let parts = files::parts("create", &h.dir, rel)?;
        let cpuset = h.controllers.iter().any(|c| c == "cpuset");
        for depth in 1..=parts.len() {
            let dir = files::join("create", &h.dir, &parts[..depth])?;
            if files::is_dir(&dir) {
                continue;
            }
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(err("create", &dir, e)),
            }
            if cpuset && let Some(parent) = dir.parent() {
                inherit_cpuset(parent, &dir)?;
            }
        }
    }
    Ok(())
}

fn inherit_cpuset(parent: &Path, dir: &Path) -> Result<(), CgroupError> {
    for name in ["cpuset.cpus", "cpuset.mems"] {
        let own = files::read_opt(dir, name)?.unwrap_or_default();
        if !own.trim().is_empty() {
            continue;
        }
        if let Some(value) = files::read_opt(parent, name)?.filter(|v| !v.trim().is_empty()) {
            files::write(dir, name, value.trim())?;
        }
    }
    Ok(())
}

/// Writes the limits that are set: the CFS period before the quota (a quota is
/// checked against the period in force), as libcontainer does.
pub(super) fn update(
    tree: &CgroupTree,
    rel: &str,
    res: &ResourceConfig,
) -> Result<(), CgroupError> {
    if res.cpu_shares.is_some() || res.cpu_period.is_some() || res.cpu_quota.is_some() {
        let dir = files::existing("update", tree.controller_dir("update", "cpu", rel)?)?;
        if let Some(shares) = res.cpu_shares {
            files::write(&dir, "cpu.shares", &shares.to_string())?;
        }
        if let Some(period) = res.cpu_period {
            files::write(&dir, "cpu.cfs_period_us", &period.to_string())?;
        }
        if let Some(quota) = res.cpu_quota {
            files::write(&dir, "cpu.cfs_quota_us", &quota.max(-1).to_string())?;
        }
    }
    if let Some(limit) = res.memory_limit {
        let dir = files::existing("update", tree.controller_dir("update", "memory", rel)?)?;
        files::write(&dir, "memory.limit_in_bytes", &limit.max(-1).to_string())?;
    }
    if let Some(limit) = res.pids_limit {
        let dir = files::existing("update", tree.controller_dir("update", "pids", rel)?)?;
        let value = if limit < 0 {
            "max".to_string()
        } else {
            limit.to_string()
        };
        files::write(&dir, "pids.max", &value)?;
    }
    Ok(())
}

/// The limits read back; a file that is not there is `None`.
pub(super) fn resources(tree: &CgroupTree, rel: &str) -> Result<ResourceConfig, CgroupError> {
    let read = |controller: &str, name: &str| -> Result<Option<i64>, CgroupError> {
        let dir = files::existing("read", tree.controller_dir("read", controller, rel)?)?;
        files::read_opt(&dir, name)?
            .map(|text| files::parse_limit(&dir.join(name), &text))
            .transpose()
    };
    let unsigned = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
    Ok(ResourceConfig {
        cpu_shares: unsigned(read("cpu", "cpu.shares")?),
        cpu_quota: read("cpu", "cpu.cfs_quota_us")?,
        cpu_period: unsigned(read("cpu", "cpu.cfs_period_us")?),
        memory_limit: read("memory", "memory.limit_in_bytes")?
            .map(|v| if v >= UNLIMITED_MEMORY { -1 } else { v }),
        pids_limit: read("pids", "pids.max")?,
    })
}

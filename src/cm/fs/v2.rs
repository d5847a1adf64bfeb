//! cgroup v2: one tree; controllers enabled top-down through each parent's
//! `cgroup.subtree_control`; limits in `cpu.weight`, `cpu.max`, `memory.max`, `pids.max`.

use std::path::Path;

use super::CgroupError;
use super::files::{self, err};
use super::tree::CgroupTree;
use crate::cm::resources::ResourceConfig;

/// The controllers oxlet limits, enabled for its cgroups where the parent has them.
const CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

/// kubelet's (runc's) `ConvertCPUSharesToCgroupV2Value`: shares 2…262144 onto weight
/// 1…10000; 0 means unset.
pub(crate) fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// The smallest shares value with this weight, so that reading back and converting
/// again gives the same weight (the conversion is not one-to-one).
pub(crate) fn weight_to_shares(weight: u64) -> u64 {
    let weight = weight.clamp(1, 10_000);
    2 + ((weight - 1) * 262_142).div_ceil(9999)
}

/// Which controllers `dir`'s children may enable: the root's `cgroup.controllers`, or
/// what its parent enabled for it (the kernel's rule; a test tree needs no copies).
fn available(tree: &CgroupTree, dir: &Path) -> Result<Vec<String>, CgroupError> {
    let text = match dir.parent() {
        Some(parent) if dir != tree.root() => files::read_opt(parent, "cgroup.subtree_control")?,
        _ => files::read_opt(dir, "cgroup.controllers")?,
    };
    Ok(tokens(text.as_deref().unwrap_or_default()))
}

fn tokens(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|t| t.trim_start_matches('+').to_string())
        .collect()
}

/// Enables oxlet's controllers (those available) for `dir`'s children. The whole set is
/// written with `+`, which the kernel applies as additions.
fn enable(tree: &CgroupTree, dir: &Path) -> Result<(), CgroupError> {
    let available = available(tree, dir)?;
    let mut enabled = tokens(&files::read_opt(dir, "cgroup.subtree_control")?.unwrap_or_default());
    let missing: Vec<&str> = CONTROLLERS
        .iter()
        .copied()
        .filter(|c| available.iter().any(|a| a == c) && !enabled.iter().any(|e| e == c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    enabled.extend(missing.iter().map(|c| (*c).to_string()));
    let line: Vec<String> = enabled.iter().map(|c| format!("+{c}")).collect();
    files::write(dir, "cgroup.subtree_control", &line.join(" "))
}

/// Creates `rel` and its missing parents, enabling the controllers on the way down.
pub(super) fn create(tree: &CgroupTree, rel: &str) -> Result<(), CgroupError> {
    let h = &tree.hierarchies()[0];
    let parts = files::parts("create", &h.dir, rel)?;
    for depth in 1..=parts.len() {
        let parent = files::join("create", &h.dir, &parts[..depth - 1])?;
        enable(tree, &parent)?;
        let dir = files::join("create", &h.dir, &parts[..depth])?;
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && files::is_dir(&dir) => {}
            Err(e) => return Err(err("create", &dir, e)),
        }
    }
    Ok(())
}

/// Writes the limits that are set. `cpu.max` carries quota and period together; the
/// one not given keeps its value.
pub(super) fn update(
    tree: &CgroupTree,
    rel: &str,
    res: &ResourceConfig,
) -> Result<(), CgroupError> {
    let h = &tree.hierarchies()[0];
    let dir = files::existing("update", tree.dir_in("update", h, rel)?)?;
    if let Some(shares) = res.cpu_shares {
        files::write(
            &dir,
            "cpu.weight",
            &shares_to_weight(shares).max(1).to_string(),
        )?;
    }
    if res.cpu_quota.is_some() || res.cpu_period.is_some() {
        // What is not given is kept from the file (the kernel would keep it too).
        let current = files::read_opt(&dir, "cpu.max")?.unwrap_or_default();
        let mut fields = current.split_whitespace();
        let (old_quota, old_period) = (fields.next(), fields.next());
        let quota = match res.cpu_quota {
            Some(q) if q >= 0 => q.to_string(),
            Some(_) => "max".to_string(),
            None => old_quota.unwrap_or("max").to_string(),
        };
        let value = match (res.cpu_period, old_period) {
            (Some(p), _) => format!("{quota} {p}"),
            (None, Some(p)) => format!("{quota} {p}"),
            (None, None) => quota,
        };
        files::write(&dir, "cpu.max", &value)?;
    }
    let limit = |v: i64| {
        if v < 0 {
            "max".to_string()
        } else {
            v.to_string()
        }
    };
    if let Some(m) = res.memory_limit {
        files::write(&dir, "memory.max", &limit(m))?;
    }
    if let Some(p) = res.pids_limit {
        files::write(&dir, "pids.max", &limit(p))?;
    }
    Ok(())
}

/// The limits read back; a file that is not there is `None`. Shares come back as the
/// smallest value with the weight found ([`weight_to_shares`]).
pub(super) fn resources(tree: &CgroupTree, rel: &str) -> Result<ResourceConfig, CgroupError> {
    let dir = files::existing("read", tree.dir_in("read", &tree.hierarchies()[0], rel)?)?;
    let read = |name: &str| -> Result<Option<i64>, CgroupError> {
        files::read_opt(&dir, name)?
            .map(|t| files::parse_limit(&dir.join(name), &t))
            .transpose()
    };
    let cpu_shares = read("cpu.weight")?
        .and_then(|w| u64::try_from(w).ok())
        .map(weight_to_shares);
    let (cpu_quota, cpu_period) = match files::read_opt(&dir, "cpu.max")? {
        Some(text) => {
            let path = dir.join("cpu.max");
            let mut fields = text.split_whitespace();
            let quota = fields
                .next()
                .map(|q| files::parse_limit(&path, q))
                .transpose()?;
            let period = fields
                .next()
                .map(|p| files::parse_u64(&path, p))
                .transpose()?;
            (quota, period)
        }
        None => (None, None),
    };
    Ok(ResourceConfig {
        cpu_shares,
        cpu_quota,
        cpu_period,
        memory_limit: read("memory.max")?,
        pids_limit: read("pids.max")?,
    })
}

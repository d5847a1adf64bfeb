//! cgroup v2: one tree; every controller a level offers enabled top-down through its
//! `cgroup.subtree_control`, as libcontainer's fs2 does; limits in `cpu.weight`,
//! `cpu.max`, `memory.max`, `pids.max`.

use std::path::Path;

use tracing::debug;

use super::CgroupError;
use super::files::{self, err};
use super::tree::CgroupTree;
use crate::cm::resources::ResourceConfig;

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

/// The controllers `dir` offers its children: its `cgroup.controllers`, the kernel's
/// list of what the parent enabled for it (at the root: every controller there is).
fn offered(dir: &Path) -> Result<Vec<String>, CgroupError> {
    Ok(tokens(
        files::read_opt(dir, "cgroup.controllers")?
            .as_deref()
            .unwrap_or_default(),
    ))
}

fn tokens(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|t| t.trim_start_matches('+').to_string())
        .collect()
}

/// Enables at `dir` every controller it offers, as libcontainer's `CreateCgroupPath`
/// does: it writes the root's whole `cgroup.controllers` list to each level and the
/// kernel keeps what that level offers (`io`, `cpuset`, `hugetlb`, `rdma`, `misc` too,
/// so containers below may use them). Reading the offer first gives the same result
/// without writes the kernel refuses. One line of `+` additions, enabled ones kept;
/// if the kernel refuses the line, one controller at a time, and like libcontainer a
/// refusal is not an error here: the limit that needs the controller fails instead.
fn enable(dir: &Path, kernel: bool) -> Result<(), CgroupError> {
    let enabled = tokens(&files::read_opt(dir, "cgroup.subtree_control")?.unwrap_or_default());
    let missing: Vec<String> = offered(dir)?
        .into_iter()
        .filter(|c| !enabled.contains(c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let line: Vec<String> = enabled
        .iter()
        .chain(&missing)
        .map(|c| format!("+{c}"))
        .collect();
    if files::write(dir, "cgroup.subtree_control", &line.join(" ")).is_err() {
        for c in &missing {
            if let Err(e) = files::write(dir, "cgroup.subtree_control", &format!("+{c}")) {
                debug!(cgroup = %dir.display(), controller = %c, error = %e, "cannot enable a cgroup controller; limits below that need it will fail");
            }
        }
    }
    if !kernel {
        plain_tree_offers(dir)?;
    }
    Ok(())
}

/// Whether `res` sets a domain controller (cpu, memory), which a threaded subtree
/// cannot hold (libcontainer's `containsDomainController`; pids is threaded).
fn sets_domain_controller(res: &ResourceConfig) -> bool {
    res.cpu_shares.is_some()
        || res.cpu_quota.is_some()
        || res.cpu_period.is_some()
        || res.memory_limit.is_some()
}

/// libcontainer's `cgroup.type` check at each level below the root: a cgroup with
/// domain controllers cannot sit in a threaded subtree or below a cgroup that lost
/// its domain (`domain invalid`: a process sat in its parent). Without domain
/// controllers, a `domain invalid` level is turned threaded, as libcontainer does.
fn check_type(dir: &Path, domain: bool) -> Result<(), CgroupError> {
    let kind = files::read_opt(dir, "cgroup.type")?.unwrap_or_default();
    let kind = kind.trim();
    let refuse = |why: String| {
        Err(err(
            "create",
            dir,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
        ))
    };
    match kind {
        "domain invalid" if domain => refuse(
            "cannot enter cgroupv2 with domain controllers: it is in an invalid state".into(),
        ),
        // Best effort, as libcontainer: an error shows at the first limit written.
        "domain invalid" => files::write(dir, "cgroup.type", "threaded").or(Ok(())),
        "domain threaded" | "threaded" if domain => refuse(format!(
            "cannot enter cgroupv2 with domain controllers: it is in {kind} mode"
        )),
        _ => Ok(()),
    }
}

/// A plain-file test tree has no kernel to keep `cgroup.controllers` up to date: write
/// each child's as the kernel shows it, what `dir` enabled, so the same code reads the
/// same files on both. Never on cgroupfs, where the kernel owns these files.
fn plain_tree_offers(dir: &Path) -> Result<(), CgroupError> {
    let enabled = tokens(&files::read_opt(dir, "cgroup.subtree_control")?.unwrap_or_default());
    for child in files::subdirs(dir)? {
        files::write(
            &dir.join(child),
            "cgroup.controllers",
            &format!("{}\n", enabled.join(" ")),
        )?;
    }
    Ok(())
}

/// Creates `rel` and its missing parents (libcontainer's `CreateCgroupPath`): every
/// level below the root has its `cgroup.type` checked, and every level above `rel`
/// enables what it offers. On an error the directories made by this call are removed
/// again (children first; nothing else is touched), as libcontainer does.
pub(super) fn create(
    tree: &CgroupTree,
    rel: &str,
    res: &ResourceConfig,
) -> Result<(), CgroupError> {
    let h = &tree.hierarchies()[0];
    let parts = files::parts("create", &h.dir, rel)?;
    let mut made = Vec::new();
    let result = create_levels(tree, &parts, sets_domain_controller(res), &mut made);
    if result.is_err() {
        for dir in made.iter().rev() {
            // Made by this call, and empty but for a test tree's plain files.
            let _ = files::remove_tree(dir, h.kernel);
        }
    }
    result
}

/// [`create`]'s walk from the root down, recording each directory it makes in `made`
/// so that a failure can take back exactly those.
fn create_levels(
    tree: &CgroupTree,
    parts: &[&str],
    domain: bool,
    made: &mut Vec<std::path::PathBuf>,
) -> Result<(), CgroupError> {
    let h = &tree.hierarchies()[0];
    for depth in 0..=parts.len() {
        let dir = files::join("create", &h.dir, &parts[..depth])?;
        if depth > 0 {
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    made.push(dir.clone());
                    // A new cgroup enables nothing; on a test tree, say so as the
                    // kernel does, and offer it what its parent enabled.
                    if !h.kernel
                        && let Some(parent) = dir.parent()
                    {
                        files::write(&dir, "cgroup.subtree_control", "")?;
                        plain_tree_offers(parent)?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && files::is_dir(&dir) => {}
                Err(e) => return Err(err("create", &dir, e)),
            }
            check_type(&dir, domain)?;
        }
        if depth < parts.len() {
            enable(&dir, h.kernel)?;
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

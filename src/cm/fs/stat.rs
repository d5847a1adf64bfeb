//! Reading a cgroup's stat files for the metric advisor: CPU time and throttling,
//! memory (usage, working set, rss, faults, limit), tasks and pressure, from v1 or v2
//! files. Every file is optional except the cgroup itself: a missing directory is a
//! `NotFound` error (the cgroup went away between list and read, which is normal),
//! a missing file leaves its part `None`.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::CgroupError;
use super::files::{self, err};
use super::tree::{CgroupTree, Hierarchy};
use crate::contracts::{MemoryReading, Pressure, Psi, PsiLine, Throttling};

/// One line of a pressure file: `some avg10=0.00 avg60=0.00 avg300=0.00 total=0`.
fn parse_psi_line(line: &str) -> Option<PsiLine> {
    let mut out = PsiLine::default();
    let mut seen = 0;
    for field in line.split_whitespace().skip(1) {
        let (k, v) = field.split_once('=')?;
        match k {
            "avg10" => out.avg10 = v.parse().ok()?,
            "avg60" => out.avg60 = v.parse().ok()?,
            "avg300" => out.avg300 = v.parse().ok()?,
            "total" => out.total_us = v.parse().ok()?,
            _ => continue,
        }
        seen += 1;
    }
    (seen == 4).then_some(out)
}

/// A pressure file (`/proc/pressure/*`, `<cgroup>/*.pressure`): `some` is required,
/// `full` is there for memory and io (and cpu since 5.13). None when malformed.
pub(crate) fn parse_psi(text: &str) -> Option<Psi> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        match line.split_whitespace().next() {
            Some("some") => some = Some(parse_psi_line(line)?),
            Some("full") => full = Some(parse_psi_line(line)?),
            _ => {}
        }
    }
    Some(Psi { some: some?, full })
}

fn psi_of(dir: &Path, name: &str) -> Option<Psi> {
    files::read_opt(dir, name)
        .ok()
        .flatten()
        .and_then(|t| parse_psi(&t))
}

fn pressure_in(dir: &Path) -> Pressure {
    Pressure {
        cpu: psi_of(dir, "cpu.pressure"),
        memory: psi_of(dir, "memory.pressure"),
        io: psi_of(dir, "io.pressure"),
    }
}

/// The throttling counters of a `cpu.stat` (v1: `throttled_time` in ns; v2:
/// `throttled_usec`). None when the cgroup has no CFS counters.
pub(crate) fn throttling(cpu_stat: &str, v1: bool) -> Option<Throttling> {
    let periods = files::stat_field(cpu_stat, "nr_periods")?;
    let throttled_periods = files::stat_field(cpu_stat, "nr_throttled")?;
    let throttled_nanos = if v1 {
        files::stat_field(cpu_stat, "throttled_time")?
    } else {
        files::stat_field(cpu_stat, "throttled_usec")?.saturating_mul(1000)
    };
    Some(Throttling {
        periods,
        throttled_periods,
        throttled_nanos,
    })
}

fn missing(path: &Path) -> CgroupError {
    err(
        "stats",
        path,
        io::Error::new(io::ErrorKind::NotFound, "no such cgroup"),
    )
}

/// The directory of `rel` in `h`. Every part is one plain component (checked); on a
/// kernel cgroup filesystem nothing below the mount can be a symlink (cgroupfs has
/// only directories and control files; `symlink()` there fails), so the per-level
/// `lstat` walk of [`files::join`] is only needed on a test tree. This is the advisor's
/// hot path: about 1,000 cgroups a second at 110 pods.
pub(super) fn dir_of(tree: &CgroupTree, h: &Hierarchy, rel: &str) -> Result<PathBuf, CgroupError> {
    let parts = files::parts("stats", &h.dir, rel)?;
    if h.kernel {
        let mut dir = h.dir.clone();
        dir.extend(parts);
        Ok(dir)
    } else {
        tree.dir_in("stats", h, rel)
    }
}

/// The fields of one `memory.stat`, in one pass; the limit is read apart (the
/// caller's).
pub(super) fn memory_from_stat(usage: u64, stat: &str, v1: bool) -> MemoryReading {
    let names: [&[u8]; 8] = if v1 {
        [
            b"total_inactive_file",
            b"total_rss",
            b"total_pgfault",
            b"total_pgmajfault",
            b"total_inactive_anon",
            b"total_active_anon",
            b"total_unevictable",
            b"total_active_file",
        ]
    } else {
        [
            b"inactive_file",
            b"anon",
            b"pgfault",
            b"pgmajfault",
            b"inactive_anon",
            b"active_anon",
            b"unevictable",
            b"active_file",
        ]
    };
    let [
        inactive_file,
        rss,
        pgfault,
        pgmajfault,
        inactive_anon,
        active_anon,
        unevictable,
        active_file,
    ] = stat_values(stat.as_bytes(), names);
    // Saturating: the kernel's numbers fit, a corrupt file's may not.
    let without_cache = inactive_anon
        .saturating_add(active_anon)
        .saturating_add(unevictable);
    MemoryReading {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(inactive_file),
        without_cache_bytes: without_cache,
        with_cache_bytes: without_cache
            .saturating_add(active_file)
            .saturating_add(inactive_file),
        rss_bytes: rss,
        page_faults: pgfault,
        major_page_faults: pgmajfault,
        limit_bytes: None,
        swap_usage_bytes: None,
        swap_limit_bytes: None,
    }
}

/// koordlet's usage without page cache (`MemoryStatRaw.Usage`: inactive and active
/// anonymous pages plus unevictable ones) and with it (plus the file pages), alone,
/// for the rounds that reuse the rest.
pub(super) fn cache_split_from_stat(stat: &str, v1: bool) -> (u64, u64) {
    let names: [&[u8]; 5] = if v1 {
        [
            b"total_inactive_anon",
            b"total_active_anon",
            b"total_unevictable",
            b"total_active_file",
            b"total_inactive_file",
        ]
    } else {
        [
            b"inactive_anon",
            b"active_anon",
            b"unevictable",
            b"active_file",
            b"inactive_file",
        ]
    };
    let [ia, aa, u, af, ifile] = stat_values(stat.as_bytes(), names);
    let without = ia.saturating_add(aa).saturating_add(u);
    (without, without.saturating_add(af).saturating_add(ifile))
}

/// The values of `names` in a `key value` per line file (0 when absent or not a
/// number). A byte scan: the advisor parses 220 `memory.stat` files of 40 to 70 lines a
/// second at 110 pods, and splitting each line as text cost two to three times as much.
pub(super) fn stat_values<const N: usize>(stat: &[u8], names: [&[u8]; N]) -> [u64; N] {
    let mut values = [0u64; N];
    for line in stat.split(|b| *b == b'\n') {
        let Some(i) = names
            .iter()
            .position(|n| line.len() > n.len() && line[n.len()] == b' ' && line.starts_with(n))
        else {
            continue;
        };
        let digits = line[names[i].len() + 1..].trim_ascii();
        values[i] = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0);
    }
    values
}

impl CgroupTree {
    /// The files `CgroupTree::stats` (tests) and the stat reader read for `rel` (the benchmark's baseline reads
    /// the same files without parsing).
    pub(crate) fn stat_files(&self, rel: &str) -> Vec<std::path::PathBuf> {
        let v1: [(&str, &[&str]); 4] = [
            ("cpuacct", &["cpuacct.usage"]),
            ("cpu", &["cpu.stat"]),
            (
                "memory",
                &[
                    "memory.usage_in_bytes",
                    "memory.stat",
                    "memory.limit_in_bytes",
                ],
            ),
            ("pids", &["pids.current"]),
        ];
        if self.version().uses_v1_controllers() {
            v1.iter()
                .filter_map(|(c, names)| {
                    let dir = self.controller_dir("stats", c, rel).ok()?;
                    Some(names.iter().map(move |n| dir.join(n)))
                })
                .flatten()
                .collect()
        } else {
            let Ok(dir) = self.dir_in("stats", &self.hierarchies()[0], rel) else {
                return Vec::new();
            };
            [
                "cpu.stat",
                "memory.current",
                "memory.swap.current",
                "memory.stat",
                "memory.max",
                "memory.swap.max",
                "pids.current",
            ]
            .iter()
            .map(|n| dir.join(n))
            .collect()
        }
    }

    /// When the cgroup `rel` was made, as cAdvisor tells it for a raw cgroup: the
    /// oldest modification time of its directory over the hierarchies that have it
    /// (a cgroup directory's mtime changes only when a child is made or removed, so
    /// for kubelet's long-lived system cgroups it is close to creation). None when
    /// no hierarchy has it.
    pub(crate) fn created(&self, rel: &str) -> Option<SystemTime> {
        self.hierarchies()
            .iter()
            .filter_map(|h| dir_of(self, h, rel).ok())
            .filter_map(|d| std::fs::symlink_metadata(d).ok()?.modified().ok())
            .min()
    }

    /// The pressure files of `rel` (read apart from the usage files: koordlet
    /// reads PSI every 10 s, usage every second). v2: `<cgroup>/*.pressure`; v1: only
    /// some kernels (Anolis) put them in `cpuacct`, elsewhere every part is `None`.
    pub(crate) fn pressure(&self, rel: &str) -> Result<Pressure, CgroupError> {
        let dir = if self.version().uses_v1_controllers() {
            self.controller_dir("pressure", "cpuacct", rel)?
        } else {
            self.dir_in("pressure", &self.hierarchies()[0], rel)?
        };
        if !files::is_dir(&dir) {
            return Err(missing(&dir));
        }
        Ok(pressure_in(&dir))
    }

    /// What the cgroup `rel` uses now, read once (opening each file); the advisor
    /// reads through a [`StatReader`](super::StatReader), which keeps them open.
    #[cfg(test)]
    pub(crate) fn stats(&self, rel: &str) -> Result<crate::contracts::CgroupReading, CgroupError> {
        super::StatReader::with_limit(self.clone(), 0).stats(rel, true)
    }
}

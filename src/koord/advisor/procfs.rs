//! The node's procfs files the advisor reads, each read bounded, and their parsers
//! (pure functions on text, so they are tested on plain strings).

use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The largest procfs file read (`/proc/stat` is a few KiB even on large machines).
pub(crate) const MAX_PROC_BYTES: u64 = 256 * 1024;

/// Why a procfs file gave no value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcError {
    #[error("read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: {what}")]
    Parse { path: String, what: &'static str },
}

/// The text of `path`, at most [`MAX_PROC_BYTES`].
pub(crate) fn read_bounded(path: &Path) -> Result<String, ProcError> {
    let io = |error| ProcError::Read {
        path: path.display().to_string(),
        error,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // Room for the usual file at once: grown from nothing, each read's text took
    // several reallocations (and, past 1 KiB, a walk of malloc's free lists).
    let mut text = String::with_capacity(4096);
    file.take(MAX_PROC_BYTES)
        .read_to_string(&mut text)
        .map_err(io)?;
    Ok(text)
}

fn parse_err(path: &Path, what: &'static str) -> ProcError {
    ProcError::Parse {
        path: path.display().to_string(),
        what,
    }
}

/// `/proc/stat`'s aggregate `cpu` line, in jiffies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuJiffies {
    /// user + nice + system + irq + softirq (koordlet's busy time; idle, iowait and
    /// steal excluded).
    pub busy: u64,
}

/// The `cpu` line of `/proc/stat`.
pub(crate) fn parse_cpu_jiffies(text: &str) -> Option<CpuJiffies> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq …
    if f.len() < 7 {
        return None;
    }
    // Saturating: a corrupt or hostile file must not overflow (a panic in a debug build).
    let busy = [f[0], f[1], f[2], f[5], f[6]]
        .into_iter()
        .fold(0u64, u64::saturating_add);
    Some(CpuJiffies { busy })
}

/// The boot time from `/proc/stat`'s `btime` (unix seconds).
pub(crate) fn parse_boot_time(text: &str) -> Option<SystemTime> {
    let secs: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // A time past what the clock can hold is no boot time.
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// What the advisor needs of `/proc/meminfo`, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemInfo {
    pub total: u64,
    pub free: u64,
    pub available: u64,
    pub inactive_file: u64,
    /// `SwapTotal` and `SwapFree` (0 without swap).
    pub swap_total: u64,
    pub swap_free: u64,
}

impl MemInfo {
    /// koordlet's node memory usage: MemTotal − MemAvailable.
    pub(crate) fn used(&self) -> u64 {
        self.total.saturating_sub(self.available)
    }

    /// Swap in use, as runc reads the root cgroup's: SwapTotal − SwapFree.
    pub(crate) fn swap_used(&self) -> u64 {
        self.swap_total.saturating_sub(self.swap_free)
    }
}

/// `/proc/meminfo` (values in kB). MemTotal and MemAvailable are required.
pub(crate) fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut m = MemInfo::default();
    let (mut total, mut available) = (false, false);
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(kb) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        let bytes = kb.saturating_mul(1024);
        match key {
            "MemTotal" => (m.total, total) = (bytes, true),
            "MemFree" => m.free = bytes,
            "MemAvailable" => (m.available, available) = (bytes, true),
            "Inactive(file)" => m.inactive_file = bytes,
            "SwapTotal" => m.swap_total = bytes,
            "SwapFree" => m.swap_free = bytes,
            _ => {}
        }
    }
    (total && available).then_some(m)
}

/// The number of scheduling entities (threads) from `/proc/loadavg`'s fourth field
/// (`running/total`), kubelet's "running processes" (its `sysinfo.procs`).
pub(crate) fn parse_loadavg_tasks(text: &str) -> Option<u64> {
    let field = text.split_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}

/// A file holding one number (`/proc/sys/kernel/pid_max`).
pub(crate) fn read_number(path: &Path) -> Result<u64, ProcError> {
    read_bounded(path)?
        .trim()
        .parse()
        .map_err(|_| parse_err(path, "not a number"))
}

/// Reads and parses `path` with `parse`, naming the file in the error.
pub(crate) fn read_parsed<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Option<T>,
    what: &'static str,
) -> Result<T, ProcError> {
    parse(&read_bounded(path)?).ok_or_else(|| parse_err(path, what))
}

#[cfg(test)]
mod overflow_tests {
    use super::*;

    #[test]
    fn huge_values_neither_overflow_nor_panic() {
        let max = u64::MAX;
        let stat = format!("cpu {max} {max} 1 2 3 {max} {max}\nbtime {max}\n");
        assert_eq!(parse_cpu_jiffies(&stat).unwrap().busy, u64::MAX);
        assert_eq!(parse_boot_time(&stat), None);
    }
}

//! The parsers of the `/proc` files more than one room reads, one file here per
//! `/proc` file (`meminfo`, `stat`, `self/mountinfo`, `<pid>/cgroup`, `<pid>/limits`,
//! `<pid>/net/dev`, and `loadavg` beside the metric advisor's other node files), each a
//! pure function on text (tested and fuzzed on plain strings), and the bounded reads
//! the callers share. This room uses no other: it is below every room that reads
//! `/proc`, `safe_path` included.
//!
//! Why hand-written, not the `procfs` crate: `procfs` reads the host's `/proc`, and the
//! callers read a root given at run time (koordlet's `proc_root`, the machine
//! collector's root, a test bed's fake tree). `procfs-core` parses from any reader,
//! which would serve that, but its parsers want more than oxlet reads and fail without
//! it: `Meminfo` requires some fifteen lines (`Buffers`, `Dirty`, `VmallocChunk`, …)
//! where the node status needs `MemTotal` alone, and `KernelStats` requires `ctxt`,
//! `processes` and the tick rate to give `btime`. They also allocate per sample (a
//! `String` per line, a `HashMap` for meminfo, a `Vec` per CPU for stat), and the metric
//! advisor reads stat and meminfo every second, where these walk the text once and
//! allocate nothing (the CPU and heap at rest in `docs/benchmarks.md`). Seven small
//! parsers do not earn a dependency tree (`bitflags`, `hex`, `chrono` by default).
//!
//! Files one room alone reads are parsed in that room: `/proc/self/{stat,net/netstat}`
//! in `metrics`, `/proc/net/route` in `koord`, pressure files in `cm` (the cgroups'
//! `*.pressure` share the format), `/proc/self/status` in `node`, `/proc/swaps` in `cm`.

mod cgroup;
mod limits;
mod loadavg;
mod meminfo;
mod mountinfo;
mod net_dev;
mod stat;

use std::io::Read;
use std::path::Path;

pub(crate) use cgroup::cgroup_path;
pub(crate) use limits::{Limit, soft_limit};
pub(crate) use loadavg::parse_loadavg_tasks;
pub(crate) use meminfo::{MemInfo, parse_meminfo};
pub(crate) use mountinfo::parse_mountinfo;
pub(crate) use net_dev::{ignored_by_cadvisor, net_devices};
pub(crate) use stat::{CpuJiffies, boot_time_secs, parse_boot_time, parse_cpu_jiffies};

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

//! The machine's CPU and NUMA topology as sysfs shows it, for every room that reads
//! it: `/sys/devices/system/cpu` (the online CPUs, and each CPU's core, package,
//! thread siblings, L3 cache and online flag) and `/sys/devices/system/node` (the
//! NUMA nodes, their CPU lists, distances, memory and huge pages). One file here per
//! sysfs directory (`cpu.rs`, `node.rs`), and `cpulist.rs` for the kernel's CPU list
//! form those directories and cgroups' `cpuset.cpus` share. Each parser is a pure
//! function on text; the reads are bounded, and each error names its file.
//!
//! Why a room of its own: the CPU manager, the memory manager, the topology manager,
//! the machine collector and koordlet's advisor each read part of the same tree, each
//! with its own policy for what is missing (the CPU manager refuses to start, the
//! advisor falls back as `lscpu` does). They share these readers, with a root a test
//! moves, and keep their policies. Like `procfs`, it uses no other room.

mod cpu;
mod cpulist;
mod node;

use std::io::Read as _;
use std::path::{Path, PathBuf};

pub(crate) use cpu::CpuDir;
pub(crate) use cpulist::{CpuListError, format_cpu_list, parse_cpu_list};
pub(crate) use node::{NodeDir, SysNode};

/// The largest sysfs file read: an attribute is at most a page, a node's meminfo a
/// couple of KiB.
pub(crate) const MAX_SYSFS_BYTES: u64 = 64 << 10;
/// Directory entries looked at in one sysfs directory, at most: every CPU the kernel
/// can have (`NR_CPUS`), and the directory's own files.
const MAX_ENTRIES: usize = 8192 + 64;

/// Why a sysfs file gave no value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SysfsError {
    #[error("reading {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path} is larger than {MAX_SYSFS_BYTES} bytes")]
    TooBig { path: String },
    #[error("{path} holds {text:?}, not a number")]
    NotANumber { path: String, text: String },
    #[error("{path}: {error}")]
    CpuList { path: String, error: CpuListError },
    #[error("{path}: {what}")]
    Parse { path: String, what: &'static str },
}

impl SysfsError {
    /// The file (or directory) the error is about.
    pub(crate) fn path(&self) -> &str {
        match self {
            Self::Read { path, .. }
            | Self::TooBig { path }
            | Self::NotANumber { path, .. }
            | Self::CpuList { path, .. }
            | Self::Parse { path, .. } => path,
        }
    }

    /// The file is not there (a kernel without NUMA, a CPU without an L3 id).
    pub(crate) fn is_missing(&self) -> bool {
        matches!(self, Self::Read { error, .. } if error.kind() == std::io::ErrorKind::NotFound)
    }

    /// As an I/O error, for callers that report one: a read's own error, else
    /// `InvalidData` with this text.
    pub(crate) fn into_io(self) -> std::io::Error {
        match self {
            Self::Read { error, .. } => error,
            other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

fn read_error(path: &Path, error: std::io::Error) -> SysfsError {
    SysfsError::Read {
        path: path.display().to_string(),
        error,
    }
}

/// The text of `path`, at most [`MAX_SYSFS_BYTES`] (a larger file is refused).
fn read_text(path: &Path) -> Result<String, SysfsError> {
    let file = std::fs::File::open(path).map_err(|e| read_error(path, e))?;
    let mut body = Vec::with_capacity(256);
    (file.take(MAX_SYSFS_BYTES + 1).read_to_end(&mut body)).map_err(|e| read_error(path, e))?;
    if body.len() as u64 > MAX_SYSFS_BYTES {
        return Err(SysfsError::TooBig {
            path: path.display().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// A file holding one number (an id, a count). `-1`, the kernel's "no id", is not one:
/// every caller treats it as an id it cannot use.
fn read_number(path: &Path) -> Result<u64, SysfsError> {
    let text = read_text(path)?;
    parse_number(&text).ok_or_else(|| SysfsError::NotANumber {
        path: path.display().to_string(),
        text: text.trim().chars().take(64).collect(),
    })
}

/// One decimal number and its newline.
fn parse_number(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// A file holding a CPU list (`online`, `cpulist`, `thread_siblings_list`).
fn read_cpu_list(path: &Path) -> Result<Vec<usize>, SysfsError> {
    parse_cpu_list(&read_text(path)?).map_err(|error| SysfsError::CpuList {
        path: path.display().to_string(),
        error,
    })
}

/// The numbered entries of `dir` named `<prefix><id>` (`cpu3`, `node1`), by id; at
/// most [`MAX_ENTRIES`] entries are looked at.
fn numbered(dir: &Path, prefix: &str) -> Result<Vec<(usize, PathBuf)>, SysfsError> {
    let entries = std::fs::read_dir(dir).map_err(|e| read_error(dir, e))?;
    let mut out = Vec::new();
    for e in entries.take(MAX_ENTRIES) {
        let e = e.map_err(|e| read_error(dir, e))?;
        let name = e.file_name();
        let id = (name.to_str())
            .and_then(|n| n.strip_prefix(prefix))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<usize>().ok());
        if let Some(id) = id {
            out.push((id, e.path()));
        }
    }
    out.sort_unstable_by_key(|(id, _)| *id);
    Ok(out)
}

/// Writes `text` at `rel` under `root`, its directories made: the fake sysfs trees
/// of the readers' tests and their callers'.
#[cfg(test)]
pub(crate) fn write_fake(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_errors_name_their_file() {
        let dir = tempfile::tempdir().unwrap();
        write_fake(dir.path(), "id", "7\n");
        write_fake(dir.path(), "bad", "-1\n");
        assert_eq!(read_number(&dir.path().join("id")).unwrap(), 7);
        let e = read_number(&dir.path().join("bad")).unwrap_err();
        assert!(
            e.to_string().ends_with("bad holds \"-1\", not a number"),
            "{e}"
        );
        let e = read_number(&dir.path().join("absent")).unwrap_err();
        assert!(e.is_missing() && e.path().ends_with("absent"), "{e}");
        assert_eq!(e.into_io().kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn reads_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let big = "1".repeat(MAX_SYSFS_BYTES as usize + 1);
        write_fake(dir.path(), "big", &big);
        let e = read_text(&dir.path().join("big")).unwrap_err();
        assert!(matches!(e, SysfsError::TooBig { .. }), "{e}");
    }

    #[test]
    fn numbered_entries_come_by_id_and_others_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["cpu10", "cpu2", "cpufreq", "cpu", "cpuidle", "cpu+1"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let ids: Vec<usize> = (numbered(dir.path(), "cpu").unwrap().into_iter())
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids, [2, 10]);
        assert!(
            numbered(&dir.path().join("absent"), "cpu")
                .unwrap_err()
                .is_missing()
        );
    }
}

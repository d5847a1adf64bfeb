//! `/sys/devices/system/cpu`: the online CPUs, the CPU directories, and each CPU's
//! `topology/` (core, package, thread siblings), L3 cache id (`cache/index3/id`) and
//! online flag.

use std::path::{Path, PathBuf};

use super::{SysfsError, numbered, read_cpu_list, read_number, read_text};

/// The CPU directory of a sysfs tree.
pub(crate) struct CpuDir {
    dir: PathBuf,
}

impl CpuDir {
    /// The CPU directory under `sys` (`/sys` on a node).
    pub(crate) fn under(sys: &Path) -> Self {
        Self {
            dir: sys.join("devices/system/cpu"),
        }
    }

    /// `online`: the CPUs the kernel runs, ascending.
    pub(crate) fn online(&self) -> Result<Vec<usize>, SysfsError> {
        read_cpu_list(&self.dir.join("online"))
    }

    /// The CPUs with a `cpuN` directory (online or not), ascending.
    pub(crate) fn listed(&self) -> Result<Vec<usize>, SysfsError> {
        Ok(numbered(&self.dir, "cpu")?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    /// CPU `id`'s directory.
    pub(crate) fn cpu(&self, id: usize) -> SysCpu {
        SysCpu {
            dir: self.dir.join(format!("cpu{id}")),
        }
    }
}

/// One CPU's directory (`cpuN`).
pub(crate) struct SysCpu {
    dir: PathBuf,
}

impl SysCpu {
    /// `topology/core_id`: the core's id within its package.
    pub(crate) fn core_id(&self) -> Result<u64, SysfsError> {
        read_number(&self.dir.join("topology/core_id"))
    }

    /// `topology/physical_package_id`: the socket.
    pub(crate) fn package_id(&self) -> Result<u64, SysfsError> {
        read_number(&self.dir.join("topology/physical_package_id"))
    }

    /// `topology/thread_siblings_list`: the CPUs of this CPU's core, itself included.
    pub(crate) fn thread_siblings(&self) -> Result<Vec<usize>, SysfsError> {
        read_cpu_list(&self.dir.join("topology/thread_siblings_list"))
    }

    /// `cache/index3/id`: the L3 (uncore) cache's id, missing where the kernel has none.
    pub(crate) fn l3_id(&self) -> Result<u64, SysfsError> {
        read_number(&self.dir.join("cache/index3/id"))
    }

    /// `online`: false for a CPU taken offline (cpu0 often has no such file: missing).
    pub(crate) fn online(&self) -> Result<bool, SysfsError> {
        let path = self.dir.join("online");
        parse_online(&read_text(&path)?).ok_or_else(|| SysfsError::Parse {
            path: path.display().to_string(),
            what: "not 0 or 1",
        })
    }
}

/// A CPU's `online` flag: `0` or `1`.
fn parse_online(text: &str) -> Option<bool> {
    match text.trim() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::write_fake;
    use super::*;

    #[test]
    fn a_cpu_is_read_from_its_directory() {
        let sys = tempfile::tempdir().unwrap();
        let s = sys.path();
        write_fake(s, "devices/system/cpu/online", "0-1,3\n");
        write_fake(s, "devices/system/cpu/cpu3/topology/core_id", "1\n");
        write_fake(
            s,
            "devices/system/cpu/cpu3/topology/physical_package_id",
            "0\n",
        );
        write_fake(
            s,
            "devices/system/cpu/cpu3/topology/thread_siblings_list",
            "1,3\n",
        );
        write_fake(s, "devices/system/cpu/cpu3/online", "0\n");
        write_fake(s, "devices/system/cpu/cpu1/online", "yes\n");
        let dir = CpuDir::under(s);
        assert_eq!(dir.online().unwrap(), [0, 1, 3]);
        assert_eq!(dir.listed().unwrap(), [1, 3]);
        let cpu = dir.cpu(3);
        assert_eq!((cpu.core_id().unwrap(), cpu.package_id().unwrap()), (1, 0));
        assert_eq!(cpu.thread_siblings().unwrap(), [1, 3]);
        assert!(cpu.l3_id().unwrap_err().is_missing());
        assert!(!cpu.online().unwrap());
        assert!(matches!(dir.cpu(1).online(), Err(SysfsError::Parse { .. })));
        assert!(dir.cpu(0).online().unwrap_err().is_missing());
        write_fake(s, "devices/system/cpu/online", "0-x\n");
        let e = dir.online().unwrap_err();
        assert!(matches!(e, SysfsError::CpuList { .. }) && e.path().ends_with("online"));
    }
}

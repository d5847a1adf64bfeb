//! The `machine_*` families of kubelet's cAdvisor machine collector: CPU topology,
//! memory and swap, and the NVM gauges, labelled `boot_id`, `machine_id` and
//! `system_uuid`. cAdvisor reads the machine once and again every five minutes; so
//! does this, and the samples carry the time they were read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::cgroup_extras::read_small;
use crate::locks::Locked as _;

/// CPUs looked at, at most.
const MAX_CPUS: usize = 8192;
/// How long a reading is served before the machine is read again (cAdvisor's
/// `update_machine_info_interval`).
const REFRESH: Duration = Duration::from_secs(300);

/// What cAdvisor's machine info holds that the collector writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Machine {
    pub time: SystemTime,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    /// Logical CPUs, cores (distinct package and core ids), sockets (packages).
    pub cpus: u64,
    pub physical_cores: u64,
    pub sockets: u64,
    pub memory_bytes: u64,
    pub swap_bytes: u64,
}

fn trimmed(path: &Path) -> String {
    read_small(path).map_or_else(String::new, |s| s.trim().to_string())
}

/// Where the machine's files are (the host's `/`, or a test tree).
pub(crate) struct MachineReader {
    root: PathBuf,
    cached: Mutex<Option<Machine>>,
}

impl MachineReader {
    pub(crate) fn new(root: &Path) -> MachineReader {
        MachineReader {
            root: root.to_path_buf(),
            cached: Mutex::new(None),
        }
    }

    /// The machine as last read, read again when older than [`REFRESH`].
    pub(crate) fn get(&self, now: SystemTime) -> Machine {
        let mut cached = self.cached.locked();
        if let Some(m) = cached
            .as_ref()
            .filter(|m| now.duration_since(m.time).is_ok_and(|age| age < REFRESH))
        {
            return m.clone();
        }
        let m = self.read(now);
        *cached = Some(m.clone());
        m
    }

    fn read(&self, now: SystemTime) -> Machine {
        let at = |p: &str| self.root.join(p);
        let meminfo = read_small(&at("proc/meminfo"))
            .and_then(|m| crate::procfs::parse_meminfo(&m))
            .unwrap_or_default();
        let (cpus, physical_cores, sockets) = self.topology();
        // cAdvisor: `/etc/machine-id`, else dbus's copy.
        let mut machine_id = trimmed(&at("etc/machine-id"));
        if machine_id.is_empty() {
            machine_id = trimmed(&at("var/lib/dbus/machine-id"));
        }
        Machine {
            time: now,
            machine_id,
            system_uuid: trimmed(&at("sys/class/dmi/id/product_uuid")),
            boot_id: trimmed(&at("proc/sys/kernel/random/boot_id")),
            cpus,
            physical_cores,
            sockets,
            memory_bytes: meminfo.total,
            swap_bytes: meminfo.swap_total,
        }
    }

    /// (logical CPUs, cores, sockets) from sysfs's topology of each online CPU.
    fn topology(&self) -> (u64, u64, u64) {
        let dir = crate::sysfs::CpuDir::under(&self.root.join("sys"));
        let Ok(listed) = dir.listed() else {
            return (0, 0, 0);
        };
        let (mut cpus, mut cores, mut packages) = (0u64, BTreeSet::new(), BTreeSet::new());
        for id in listed.into_iter().take(MAX_CPUS) {
            let cpu = dir.cpu(id);
            // An offline CPU has `online` 0 (cpu0 often has no such file).
            if matches!(cpu.online(), Ok(false)) {
                continue;
            }
            cpus += 1;
            let package = cpu.package_id().ok();
            cores.insert((package, cpu.core_id().ok()));
            packages.insert(package);
        }
        (cpus, cores.len() as u64, packages.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_counts_threads_cores_and_packages() {
        let dir = tempfile::tempdir().unwrap();
        let w = |p: &str, v: &str| {
            let path = dir.path().join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, v).unwrap();
        };
        // Two packages, two cores each, two threads per core; cpu7 offline.
        for cpu in 0..8 {
            let base = format!("sys/devices/system/cpu/cpu{cpu}");
            w(
                &format!("{base}/topology/physical_package_id"),
                &format!("{}\n", cpu / 4),
            );
            w(
                &format!("{base}/topology/core_id"),
                &format!("{}\n", (cpu / 2) % 2),
            );
        }
        w("sys/devices/system/cpu/cpu7/online", "0\n");
        w("sys/devices/system/cpu/cpufreq/x", "");
        w(
            "proc/meminfo",
            "MemTotal:       2048 kB\nSwapTotal:  1024 kB\n",
        );
        w("etc/machine-id", "abc\n");
        w("proc/sys/kernel/random/boot_id", "b-1\n");
        let m = MachineReader::new(dir.path()).get(SystemTime::UNIX_EPOCH);
        assert_eq!((m.cpus, m.physical_cores, m.sockets), (7, 4, 2));
        assert_eq!((m.memory_bytes, m.swap_bytes), (2 << 20, 1 << 20));
        assert_eq!((m.machine_id.as_str(), m.boot_id.as_str()), ("abc", "b-1"));
        assert_eq!(m.system_uuid, "");
    }
}

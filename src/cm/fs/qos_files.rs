//! The control files koordlet's QoS manager reads and writes beside the limits:
//! `cpuset.cpus` (CPU suppress, `cpuset` policy) and `memory.min`, `memory.low`,
//! `memory.high` (cgroup reconcile). v1 keeps each in its controller's hierarchy (the
//! memory ones exist only on Anolis kernels); v2 in the one tree. A file the kernel
//! does not offer is an `Unsupported` error on write and `None` on read, so callers
//! can tell "not here" from a failure, as koordlet's `SupportedIfFileExists` does.

use std::io;

use super::CgroupError;
use super::files::{self, err};
use super::tree::CgroupTree;

/// One QoS control file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum QosFile {
    /// The CPUs a cgroup may run on; read back as v2's `cpuset.cpus.effective`.
    CpusetCpus,
    MemoryMin,
    MemoryLow,
    MemoryHigh,
}

impl QosFile {
    /// The file written.
    pub(crate) fn name(self) -> &'static str {
        match self {
            QosFile::CpusetCpus => "cpuset.cpus",
            QosFile::MemoryMin => "memory.min",
            QosFile::MemoryLow => "memory.low",
            QosFile::MemoryHigh => "memory.high",
        }
    }

    /// The file read: koordlet reads v2's effective CPUs (what the kernel grants).
    fn read_name(self, v1: bool) -> &'static str {
        match self {
            QosFile::CpusetCpus if !v1 => "cpuset.cpus.effective",
            _ => self.name(),
        }
    }

    /// The v1 hierarchy holding the file.
    fn controller(self) -> &'static str {
        match self {
            QosFile::CpusetCpus => "cpuset",
            _ => "memory",
        }
    }
}

/// The existing directory of `rel` holding `file`.
fn dir(
    tree: &CgroupTree,
    op: &'static str,
    rel: &str,
    file: QosFile,
) -> Result<std::path::PathBuf, CgroupError> {
    let d = if tree.version().uses_v1_controllers() {
        tree.controller_dir(op, file.controller(), rel)?
    } else {
        tree.dir_in(op, &tree.hierarchies()[0], rel)?
    };
    files::existing(op, d)
}

/// The text of `file` in `rel`; None when the kernel does not offer it.
pub(super) fn read(
    tree: &CgroupTree,
    rel: &str,
    file: QosFile,
) -> Result<Option<String>, CgroupError> {
    let v1 = tree.version().uses_v1_controllers();
    files::read_opt(&dir(tree, "read", rel, file)?, file.read_name(v1))
}

/// Writes `value` to `file` of the existing cgroup `rel`; `Unsupported` when the
/// kernel does not offer the file there (no file is ever created in a cgroup).
pub(super) fn write(
    tree: &CgroupTree,
    rel: &str,
    file: QosFile,
    value: &str,
) -> Result<(), CgroupError> {
    let d = dir(tree, "write", rel, file)?;
    if files::read_opt(&d, file.name())?.is_none() {
        return Err(err(
            "write",
            &d.join(file.name()),
            io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel does not offer this file",
            ),
        ));
    }
    files::write(&d, file.name(), value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::fs::CgroupFs;
    use crate::cm::resources::ResourceConfig;
    use crate::cm::version::CgroupVersion;
    use std::fs;

    const BE: &str = "kubepods/besteffort";

    #[test]
    fn v1_cpuset_lives_in_the_cpuset_hierarchy_and_memory_files_only_where_offered() {
        let dir = tempfile::tempdir().unwrap();
        for h in ["cpu,cpuacct", "cpuset", "memory", "pids"] {
            fs::create_dir(dir.path().join(h)).unwrap();
        }
        fs::write(dir.path().join("cpuset/cpuset.cpus"), "0-3\n").unwrap();
        fs::write(dir.path().join("cpuset/cpuset.mems"), "0\n").unwrap();
        let tree = CgroupTree::new(dir.path(), CgroupVersion::Hybrid).unwrap();
        tree.create(BE, &ResourceConfig::default()).unwrap();
        // The new cpuset cgroup took its parent's CPUs; a write replaces them there.
        assert_eq!(
            tree.read_qos_file(BE, QosFile::CpusetCpus)
                .unwrap()
                .as_deref(),
            Some("0-3")
        );
        tree.write_qos_file(BE, QosFile::CpusetCpus, "0,2").unwrap();
        let file = dir.path().join("cpuset/kubepods/besteffort/cpuset.cpus");
        assert_eq!(fs::read_to_string(file).unwrap(), "0,2");
        // No Anolis memory.min: nothing is created, the caller is told.
        assert_eq!(tree.read_qos_file(BE, QosFile::MemoryMin).unwrap(), None);
        let e = tree
            .write_qos_file(BE, QosFile::MemoryMin, "1")
            .unwrap_err();
        assert_eq!(e.error.kind(), io::ErrorKind::Unsupported);
        assert!(
            !dir.path()
                .join("memory/kubepods/besteffort/memory.min")
                .exists()
        );
        // A kernel that offers it (Anolis): written in the memory hierarchy.
        let min = dir.path().join("memory/kubepods/besteffort/memory.min");
        fs::write(&min, "0\n").unwrap();
        tree.write_qos_file(BE, QosFile::MemoryMin, "4096").unwrap();
        assert_eq!(fs::read_to_string(&min).unwrap(), "4096");
        // A missing cgroup is an error, not a new directory.
        assert!(
            tree.write_qos_file("kubepods/nope", QosFile::CpusetCpus, "0")
                .is_err()
        );
        assert!(!dir.path().join("cpuset/kubepods/nope").exists());
        // Paths stay below the mount.
        assert!(tree.read_qos_file("../etc", QosFile::CpusetCpus).is_err());
    }

    #[test]
    fn v2_reads_the_effective_cpus_and_writes_the_one_tree() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("cgroup.controllers"),
            "cpuset cpu memory pids",
        )
        .unwrap();
        fs::write(dir.path().join("cgroup.subtree_control"), "").unwrap();
        let tree = CgroupTree::new(dir.path(), CgroupVersion::V2).unwrap();
        tree.create(BE, &ResourceConfig::default()).unwrap();
        let d = dir.path().join(BE);
        for (name, v) in [
            ("cpuset.cpus", ""),
            ("cpuset.cpus.effective", "0-7"),
            ("memory.min", "0"),
            ("memory.high", "max"),
        ] {
            fs::write(d.join(name), v).unwrap();
        }
        assert_eq!(
            tree.read_qos_file(BE, QosFile::CpusetCpus)
                .unwrap()
                .as_deref(),
            Some("0-7")
        );
        tree.write_qos_file(BE, QosFile::CpusetCpus, "0-1").unwrap();
        assert_eq!(fs::read_to_string(d.join("cpuset.cpus")).unwrap(), "0-1");
        tree.write_qos_file(BE, QosFile::MemoryHigh, "1048576")
            .unwrap();
        assert_eq!(
            fs::read_to_string(d.join("memory.high")).unwrap(),
            "1048576"
        );
        assert_eq!(tree.read_qos_file(BE, QosFile::MemoryLow).unwrap(), None);
    }
}

//! What the node QoS manager (koordlet's qosmanager) reads and writes besides
//! limits: the QoS control files ([`QosFile`]: `cpuset.cpus`, `memory.min/low/high`)
//! of the BestEffort tree and of pod cgroups, through the one cgroup boundary.

use tracing::debug;

use super::fs::{CgroupError, QosFile};
use super::manager::ContainerManager;
use super::qos::QosClass;

impl ContainerManager {
    /// The BestEffort QoS cgroup and the cgroups below it down to `depth` levels
    /// (1: pods, 2: their containers), each parent before its children, as
    /// koordlet's `GetBECPUSetPathsByMaxDepth` walks them. Empty without per-QoS
    /// cgroups. A cgroup that goes away during the walk is left out.
    pub(crate) fn best_effort_tree(&self, depth: usize) -> Result<Vec<String>, CgroupError> {
        let Some(root) = self.qos_cgroup_path(QosClass::BestEffort) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        self.fs.children(&root)?;
        self.walk(root, depth, &mut out);
        Ok(out)
    }

    fn walk(&self, path: String, depth: usize, out: &mut Vec<String>) {
        let children = if depth == 0 {
            Vec::new()
        } else {
            match self.fs.children(&path) {
                Ok(c) => c,
                Err(e) => {
                    debug!(cgroup = %path, error = %e, "a cgroup went away during the walk; left out");
                    return;
                }
            }
        };
        out.push(path.clone());
        for c in children {
            self.walk(format!("{path}/{c}"), depth - 1, out);
        }
    }

    /// A QoS control file of the cgroup `path` (below the mount); None when the
    /// kernel does not offer it.
    pub(crate) fn read_qos_file(
        &self,
        path: &str,
        file: QosFile,
    ) -> Result<Option<String>, CgroupError> {
        self.fs.read_qos_file(path, file)
    }

    /// Writes a QoS control file of the existing cgroup `path`; an `Unsupported`
    /// error when the kernel does not offer it.
    pub(crate) fn write_qos_file(
        &self,
        path: &str,
        file: QosFile,
        value: &str,
    ) -> Result<(), CgroupError> {
        crate::metrics::cgroup_op("update", || self.fs.write_qos_file(path, file, value))
    }
}

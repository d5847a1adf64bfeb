//! What koordlet's runtime hooks read and write on pod, container and QoS cgroups
//! (`koord`'s hook rules and their reconciler): limits read back and written as
//! given, through the one cgroup boundary, so the rules never touch files directly.

use super::fs::{CgroupError, shares_to_weight, weight_to_shares};
use super::manager::ContainerManager;
use super::qos::QosClass;
use super::resources::ResourceConfig;

impl ContainerManager {
    /// A QoS cgroup's path below the mount (`Guaranteed` is `kubepods` itself); None
    /// without per-QoS cgroups.
    pub(crate) fn qos_cgroup_path(&self, class: QosClass) -> Option<String> {
        self.cfg.cgroups_per_qos.then(|| self.qos_path(class))
    }

    /// The limits set on `path` (a path below the mount), read back.
    pub(crate) fn read_limits(&self, path: &str) -> Result<ResourceConfig, CgroupError> {
        self.fs.resources(path)
    }

    /// Whether cpu shares read back as `have` are `want` on this tree: v1 keeps
    /// shares as written, v2 keeps a weight and reads back the least shares with it.
    pub(crate) fn shares_match(&self, have: u64, want: u64) -> bool {
        if self.fs.keeps_shares() {
            have == want
        } else {
            have == weight_to_shares(shares_to_weight(want))
        }
    }

    /// Writes the limits set in `res` to the existing cgroup `path`.
    pub(crate) fn write_limits(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError> {
        crate::metrics::cgroup_op("update", || self.fs.update(path, res))
    }
}

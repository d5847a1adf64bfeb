//! A cgroup's name independent of the driver (kubelet's `CgroupName`): a list of
//! components such as `["kubepods", "burstable", "pod<uid>"]`.

/// The components of a cgroup name, outermost first; empty is the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CgroupName(pub Vec<String>);

impl CgroupName {
    /// The name one level below this one.
    pub(crate) fn child(&self, part: &str) -> CgroupName {
        let mut parts = self.0.clone();
        parts.push(part.to_string());
        CgroupName(parts)
    }
}

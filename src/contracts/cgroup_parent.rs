//! Where a pod's sandbox goes in the cgroup tree: the runtime asks, the container
//! manager answers, and neither imports the other.

use k8s_openapi::api::core::v1::Pod;

/// The one place a sandbox's cgroup parent is decided (kubelet's
/// `RuntimeHelper.GetPodCgroupParent`). The container manager answers with the pod's
/// cgroup (`/kubepods/<qos>/pod<uid>`); tests without cgroups use `RuntimeDefaultCgroups`.
pub(crate) trait PodCgroupParent: Send + Sync + std::fmt::Debug {
    /// The cgroup parent for `pod`'s sandbox; empty leaves it to the runtime.
    fn cgroup_parent(&self, pod: &Pod) -> String;
}

/// No pod cgroups: every sandbox goes where containerd puts it by default.
#[cfg(test)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RuntimeDefaultCgroups;

#[cfg(test)]
impl PodCgroupParent for RuntimeDefaultCgroups {
    fn cgroup_parent(&self, _pod: &Pod) -> String {
        String::new()
    }
}

//! The node's extended resources from device plugins (kubelet's
//! `GetDevicePluginResourceCapacity` and `UpdatePluginResources`): the device manager
//! counts them; the node status reports them and admission's resource fit checks pods
//! against them, without importing the device manager.

use std::collections::BTreeMap;

/// Each device plugin resource's count, by resource name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExtendedResources {
    /// Every device a registered plugin advertises.
    pub capacity: BTreeMap<String, i64>,
    /// The healthy ones.
    pub allocatable: BTreeMap<String, i64>,
    /// Resources whose plugin went away and stayed away: reported as zero, so the
    /// scheduler stops placing pods that ask for them.
    pub removed: Vec<String>,
    /// Devices pods hold now, per resource (admission never counts a resource as
    /// smaller than what its pods hold, as kubelet's `UpdatePluginResources`).
    pub allocated: BTreeMap<String, i64>,
}

/// Where the counts come from (the device manager).
pub(crate) trait ExtendedResourceSource: Send + Sync {
    fn extended_resources(&self) -> ExtendedResources;
}

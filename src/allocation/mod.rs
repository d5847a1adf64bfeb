//! kubelet's pod resource allocation state (`pkg/kubelet/allocation/state`): the
//! resources each pod was admitted (or last resized) at, and the resources the runtime
//! was last told, each kept in the root dir so a restarted agent neither forgets an
//! admitted resize nor applies one twice.
//!
//! Two files, as kubelet 1.36 keeps them: `allocated_pods_state` (what admission
//! granted: the pod spec's resources as the pod runs them, which may trail the spec
//! while a resize waits) and `actuated_pods_state` (what the runtime was last told per
//! container, which trails the allocation while a resize is applied). The sync loop
//! owns the first, the runtime manager the second.

mod state;

// The states, what a pod's entry holds, and the pod as its allocation says.
pub(crate) use state::{
    ACTUATED_STATE_FILE, ALLOCATED_STATE_FILE, PodResources, ResourceState, apply_allocation,
    is_resizable, resizable_containers, same_optional, same_requirements,
};

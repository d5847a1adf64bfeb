//! What a hint provider offers (kubelet's `TopologyHint` and `HintProvider`) and how it
//! says no (kubelet's admission errors, whose type becomes the pod's reason).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::NumaMask;

/// One way a resource could be placed: on these NUMA nodes (`None`: anywhere, no
/// preference), and whether that placement is one the provider prefers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopologyHint {
    pub numa_affinity: Option<NumaMask>,
    pub preferred: bool,
}

impl std::fmt::Display for TopologyHint {
    /// As klog prints kubelet's hint (`{NUMANodeAffinity:01 Preferred:true}`), with
    /// the mask as node ids: `{NUMANodeAffinity:0,1 Preferred:true}`, `<nil>` for any.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.numa_affinity {
            Some(m) => write!(f, "{{NUMANodeAffinity:{m} Preferred:{}}}", self.preferred),
            None => write!(f, "{{NUMANodeAffinity:<nil> Preferred:{}}}", self.preferred),
        }
    }
}

/// A provider's hints as klog prints kubelet's map: `map[cpu:[{…} {…}] memory:[…]]`.
pub(super) fn hints_text(hints: &Hints) -> String {
    let entries: Vec<String> = hints
        .iter()
        .map(|(resource, list)| {
            let list: Vec<String> = list.iter().map(ToString::to_string).collect();
            format!("{resource}:[{}]", list.join(" "))
        })
        .collect();
    format!("map[{}]", entries.join(" "))
}

/// A provider's hints by resource name (`cpu`, `memory`, `hugepages-2Mi`, a device
/// plugin's resource). A resource with no entry has no preference; an entry with an
/// empty list means the resource cannot be placed at all.
pub(crate) type Hints = BTreeMap<String, Vec<TopologyHint>>;

/// Why a provider (or the topology manager) refuses a pod: kubelet's `admission.Error`.
/// `reason` is the error's type, which kubelet puts in the pod's status
/// (`TopologyAffinityError`, `SMTAlignmentError`, `UnexpectedAdmissionError`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub(crate) struct AdmitError {
    pub reason: String,
    pub message: String,
}

/// kubelet's reason for a pod whose resources cannot be aligned.
const TOPOLOGY_AFFINITY_ERROR: &str = "TopologyAffinityError";

impl AdmitError {
    /// kubelet's `TopologyAffinityError`: the policy found no admissible affinity.
    pub(crate) fn topology_affinity() -> Self {
        Self {
            reason: TOPOLOGY_AFFINITY_ERROR.into(),
            message: "Resources cannot be allocated with Topology locality".into(),
        }
    }

    /// An error a provider did not classify: kubelet's `UnexpectedAdmissionError`,
    /// whose message is `Allocate failed due to <cause>, which is unexpected`.
    pub(crate) fn unexpected(cause: impl std::fmt::Display) -> Self {
        Self {
            reason: "UnexpectedAdmissionError".into(),
            message: format!("Allocate failed due to {cause}, which is unexpected"),
        }
    }
}

/// A resource manager the topology manager asks (kubelet's `HintProvider`): its hints
/// for one container (container scope) or the whole pod (pod scope), then, once the
/// affinity is chosen, the allocation itself. `allocate` reads the chosen affinity from
/// the topology manager's store (`affinity` is it, `None` when any placement will do).
pub(crate) trait HintProvider: Send + Sync {
    /// A short name for logs (`cpu`, `memory`, `devices`, `dra`).
    fn name(&self) -> &'static str;
    /// The hints for one container of `pod`.
    fn container_hints(&self, pod: &Pod, container: &Container) -> Hints;
    /// The hints for the whole pod (pod scope).
    fn pod_hints(&self, pod: &Pod) -> Hints;
    /// Allocates `container`'s resources at `affinity`.
    fn allocate(
        &self,
        pod: &Pod,
        container: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<(), AdmitError>;
}

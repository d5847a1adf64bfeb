//! The topology manager itself (kubelet's `topology_manager.go` and `scope*.go`):
//! at admission it asks every hint provider for its hints (per container, or once
//! for the pod), merges them under the policy, refuses the pod with
//! `TopologyAffinityError` when the policy will not admit the best hint, else keeps
//! the affinity and has every provider allocate at it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{debug, info};

use super::hint::hints_text;
use super::policy::Policy;
use super::{
    AdmitError, HintProvider, Hints, NumaInfo, PolicyName, PolicyOptions, TopologyError,
    TopologyHint, TopologySettings,
};
use crate::locks::Locked as _;
use crate::logging::STARTUP_TARGET as V0;
use crate::metrics::{ALIGN_SCOPE_CONTAINER, ALIGN_SCOPE_POD, ALIGNED_NUMA_NODE};
use crate::pod::{pod_ref, pod_uid};

/// Where hints are asked: per container or once for the whole pod; policy `none`
/// has a scope of its own that asks nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    None,
    Container,
    Pod,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::None => "none",
            Scope::Container => "container",
            Scope::Pod => "pod",
        }
    }
}

/// The topology manager: a policy, a scope, the providers, and the affinity
/// chosen for each admitted container (kubelet's `Store`).
pub(crate) struct TopologyManager {
    policy: Policy,
    scope: Scope,
    providers: Vec<Arc<dyn HintProvider>>,
    /// pod UID → container name → the hint it was admitted with.
    affinities: Mutex<BTreeMap<String, BTreeMap<String, TopologyHint>>>,
}

impl TopologyManager {
    /// kubelet's `NewManager`: policy `none` needs nothing else (its options and
    /// scope are not even read); any other policy checks its options, and refuses a
    /// machine with more NUMA nodes than `max-allowable-numa-nodes`.
    pub(crate) fn new(
        settings: &TopologySettings,
        numa: NumaInfo,
        providers: Vec<Arc<dyn HintProvider>>,
    ) -> Result<Self, TopologyError> {
        let name = PolicyName::parse(&settings.policy)?;
        if name == PolicyName::None {
            info!(target: V0, "Creating topology manager with none policy");
            return Ok(Self::with(
                Policy::new(name, numa, PolicyOptions::default()),
                Scope::None,
                providers,
            ));
        }
        let options = PolicyOptions::parse(&settings.options)?;
        info!(target: V0, topologyPolicyName = name.as_str(), topologyScopeName = %settings.scope, preferClosestNUMA = options.prefer_closest_numa, maxAllowableNUMANodes = options.max_allowable_numa_nodes, "Creating topology manager with policy per scope");
        if options.prefer_closest_numa && !numa.has_distances() {
            return Err(TopologyError::Numa(
                "error getting NUMA distances from sysfs".into(),
            ));
        }
        if numa.nodes().len() > options.max_allowable_numa_nodes {
            return Err(TopologyError::TooManyNodes(
                options.max_allowable_numa_nodes,
            ));
        }
        let scope = match settings.scope.as_str() {
            "container" => Scope::Container,
            "pod" => Scope::Pod,
            other => return Err(TopologyError::UnknownScope(other.into())),
        };
        Ok(Self::with(
            Policy::new(name, numa, options),
            scope,
            providers,
        ))
    }

    fn with(policy: Policy, scope: Scope, providers: Vec<Arc<dyn HintProvider>>) -> Self {
        // kubelet's `initializeMetrics`: the NUMA alignment series exist from the start.
        for s in [ALIGN_SCOPE_CONTAINER, ALIGN_SCOPE_POD] {
            crate::metrics::aligned_compute_series(s, ALIGNED_NUMA_NODE, true);
        }
        Self {
            policy,
            scope,
            providers,
            affinities: Mutex::new(BTreeMap::new()),
        }
    }

    /// The policy's name (`none`, `best-effort`, `restricted`, `single-numa-node`).
    pub(crate) fn policy_name(&self) -> &'static str {
        self.policy.name.as_str()
    }

    /// The scope's name (`container`, `pod`, or `none` under policy `none`).
    pub(crate) fn scope_name(&self) -> &'static str {
        self.scope.as_str()
    }

    #[cfg(test)]
    /// The affinity `container` of the pod was admitted with (kubelet's `GetAffinity`).
    pub(crate) fn affinity(&self, pod_uid: &str, container: &str) -> Option<TopologyHint> {
        self.affinities
            .locked()
            .get(pod_uid)?
            .get(container)
            .copied()
    }

    #[cfg(test)]
    /// Forgets one container's affinity.
    pub(crate) fn remove_container(&self, pod_uid: &str, container: &str) {
        let mut all = self.affinities.locked();
        if let Some(pod) = all.get_mut(pod_uid) {
            pod.remove(container);
            if pod.is_empty() {
                all.remove(pod_uid);
            }
        }
    }

    /// Forgets a pod's affinities.
    pub(crate) fn remove_pod(&self, pod_uid: &str) {
        self.affinities.locked().remove(pod_uid);
    }

    /// kubelet's `Admit`: the scope's decision; the first refusal ends it, and what
    /// providers already allocated stays allocated, as in kubelet (their own
    /// clean-up, when the pod is removed, gives it back).
    pub(crate) fn admit(&self, pod: &Pod) -> Result<(), AdmitError> {
        debug!(pod = %pod_ref(pod), podUID = pod_uid(pod), "Topology manager admission check");
        let started = std::time::Instant::now();
        let result = match self.scope {
            Scope::None => self.admit_none(pod),
            Scope::Container => self.admit_containers(pod),
            Scope::Pod => self.admit_pod(pod),
        };
        // Policy `none` admits without alignment: kubelet's none scope counts the
        // request and its time, never an error.
        let refused = result.is_err() && self.scope != Scope::None;
        crate::metrics::topology_admission(started.elapsed(), !refused);
        let message = result
            .as_ref()
            .err()
            .map(|e| e.message.as_str())
            .unwrap_or("");
        debug!(pod = %pod_ref(pod), podUID = pod_uid(pod), message, "Pod Admit Result");
        result
    }

    /// Policy `none`: every provider allocates anywhere, no hint asked.
    fn admit_none(&self, pod: &Pod) -> Result<(), AdmitError> {
        containers(pod).try_for_each(|c| self.allocate(pod, c, None))
    }

    /// Container scope: init containers first, then the others, each merged,
    /// decided, stored and allocated before the next.
    fn admit_containers(&self, pod: &Pod) -> Result<(), AdmitError> {
        for c in containers(pod) {
            let hints: Vec<Hints> = self
                .providers
                .iter()
                .map(|p| {
                    let hints = p.container_hints(pod, c);
                    info!(target: V0, pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = %c.name, provider = p.name(), hints = %hints_text(&hints), "TopologyHints");
                    hints
                })
                .collect();
            let best = self.aligned(ALIGN_SCOPE_CONTAINER, self.decide(pod, Some(c), &hints))?;
            self.store(pod, c, best);
            self.allocate(pod, c, Some(best))?;
            self.count_aligned(ALIGN_SCOPE_CONTAINER);
        }
        Ok(())
    }

    /// Pod scope: one merge over the providers' pod hints, then every container
    /// stored and allocated at that affinity.
    fn admit_pod(&self, pod: &Pod) -> Result<(), AdmitError> {
        let hints: Vec<Hints> = self
            .providers
            .iter()
            .map(|p| {
                let hints = p.pod_hints(pod);
                info!(target: V0, pod = %pod_ref(pod), podUID = pod_uid(pod), provider = p.name(), hints = %hints_text(&hints), "TopologyHints");
                hints
            })
            .collect();
        let best = self.aligned(ALIGN_SCOPE_POD, self.decide(pod, None, &hints))?;
        for c in containers(pod) {
            self.store(pod, c, best);
            self.allocate(pod, c, Some(best))?;
        }
        self.count_aligned(ALIGN_SCOPE_POD);
        Ok(())
    }

    /// kubelet's `IsAlignmentGuaranteed`: only `single-numa-node` promises one node.
    fn guarantees_alignment(&self) -> bool {
        self.policy.name == PolicyName::SingleNumaNode
    }

    /// A refused merge is a failed NUMA alignment where one was guaranteed.
    fn aligned(
        &self,
        scope: &str,
        decided: Result<TopologyHint, AdmitError>,
    ) -> Result<TopologyHint, AdmitError> {
        if decided.is_err() && self.guarantees_alignment() {
            crate::metrics::aligned_compute_failed(scope, ALIGNED_NUMA_NODE);
        }
        decided
    }

    /// A container (or pod) got its resources on one NUMA node, as guaranteed.
    fn count_aligned(&self, scope: &str) {
        if self.guarantees_alignment() {
            crate::metrics::aligned_compute(scope, ALIGNED_NUMA_NODE);
        }
    }

    /// The policy's merge and admit decision, told at kubelet's level.
    fn decide(
        &self,
        pod: &Pod,
        container: Option<&Container>,
        hints: &[Hints],
    ) -> Result<TopologyHint, AdmitError> {
        let (best, admit) = self.policy.merge(hints);
        let name = container.map_or("", |c| c.name.as_str());
        info!(target: V0, pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = name, bestHint = %best, admit, policy = self.policy_name(), "Best TopologyHint");
        if !admit {
            info!(target: V0, pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = name, bestHint = %best, policy = self.policy_name(), "Topology affinity refused: the policy admits only a preferred hint and the providers' hints merge to no preferred one");
            return Err(AdmitError::topology_affinity());
        }
        Ok(best)
    }

    fn store(&self, pod: &Pod, c: &Container, best: TopologyHint) {
        info!(target: V0, pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = %c.name, bestHint = %best, "Topology Affinity");
        self.affinities
            .locked()
            .entry(pod_uid(pod).to_owned())
            .or_default()
            .insert(c.name.clone(), best);
    }

    /// Every provider allocates `c` at `hint`'s affinity; the first error is the answer.
    fn allocate(
        &self,
        pod: &Pod,
        c: &Container,
        hint: Option<TopologyHint>,
    ) -> Result<(), AdmitError> {
        let affinity = hint.and_then(|h| h.numa_affinity);
        for p in &self.providers {
            p.allocate(pod, c, affinity).inspect_err(|e| {
                info!(pod = %pod_ref(pod), podUID = pod_uid(pod), containerName = %c.name, provider = p.name(), reason = %e.reason, err = %e.message, "Allocation failed, the pod is refused");
            })?;
        }
        Ok(())
    }
}

/// A pod's containers in kubelet's order: init containers, then the others.
fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let inits = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten();
    inits.chain(spec.map(|s| s.containers.iter()).into_iter().flatten())
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;

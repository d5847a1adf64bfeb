//! The static policy's admission side (kubelet's `policy_static.go`): how many
//! exclusive CPUs a container asks for, the NUMA hints it offers the topology
//! manager, and the allocation once an affinity is chosen.

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::info;

use super::CpuSet;
use super::assign::combinations;
use super::manager::{CpuManager, Inner, note_existing, pod_ref, pod_uid};
use super::options::CpuManagerPolicy;
use crate::cm::QosClass;
use crate::topology::{AdmitError, HintProvider, Hints, NumaMask, TopologyHint};

/// kubelet's `SMTAlignmentError` message (reason `SMTAlignmentError`).
fn smt_alignment_error(requested: usize, per_core: usize, available: Option<usize>) -> AdmitError {
    let message = match available {
        Some(a) => format!(
            "SMT Alignment Error: not enough free physical CPUs: available physical CPUs = {a}, requested CPUs = {requested}, CPUs per core = {per_core}"
        ),
        None => format!(
            "SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}"
        ),
    };
    AdmitError {
        reason: "SMTAlignmentError".into(),
        message,
    }
}

/// kubelet's `guaranteedCPUs`: the whole CPUs a container of a Guaranteed pod
/// requests; 0 for any other pod or a fractional request.
fn guaranteed_cpus(pod: &Pod, container: &Container) -> usize {
    if QosClass::of(pod) != QosClass::Guaranteed {
        return 0;
    }
    let q = crate::cm::container_resource(container, "requests", "cpu")
        .or_else(|| crate::cm::container_resource(container, "limits", "cpu"));
    match q.map(crate::quantity::milli_cpu) {
        Some(Ok(m)) if m > 0 && m % 1000 == 0 => (m / 1000) as usize,
        _ => 0,
    }
}

/// Whether a container names a cpu request (kubelet's pod total skips those without).
fn has_cpu_request(c: &Container) -> bool {
    crate::cm::container_resource(c, "requests", "cpu").is_some()
        || crate::cm::container_resource(c, "limits", "cpu").is_some()
}

/// kubelet's `podGuaranteedCPUs`: the larger of the init containers' peak (with the
/// sidecars started before each) and the long-running containers' sum.
fn pod_guaranteed_cpus(pod: &Pod) -> usize {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let (mut init_peak, mut sidecars) = (0, 0);
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| has_cpu_request(c))
    {
        let n = guaranteed_cpus(pod, c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars += n;
        } else {
            init_peak = init_peak.max(sidecars + n);
        }
    }
    let apps: usize = spec
        .containers
        .iter()
        .filter(|c| has_cpu_request(c))
        .map(|c| guaranteed_cpus(pod, c))
        .sum();
    init_peak.max(apps + sidecars)
}

/// kubelet's `IsPodLevelResourcesSet`: the pod names cpu or memory at pod level,
/// which the static policy leaves to the shared pool in 1.36.
fn pod_level_resources_set(pod: &Pod) -> bool {
    let Some(r) = pod.spec.as_ref().and_then(|s| s.resources.as_ref()) else {
        return false;
    };
    [r.requests.as_ref(), r.limits.as_ref()]
        .into_iter()
        .flatten()
        .any(|m| m.contains_key("cpu") || m.contains_key("memory"))
}

impl CpuManager {
    /// kubelet's `generateCPUTopologyHints`: every NUMA combination whose free (plus
    /// reusable) CPUs hold the request, preferred when it has the fewest nodes any
    /// combination large enough for the request could have.
    fn cpu_hints(
        &self,
        available: &CpuSet,
        reusable: &CpuSet,
        request: usize,
    ) -> Vec<TopologyHint> {
        let nodes = self.topology.numa_nodes();
        let all = self.topology.all();
        let mut min_size = nodes.len();
        let mut hints = Vec::new();
        for k in 1..=nodes.len() {
            for combo in combinations(&nodes, k) {
                if self.topology.select(&all, |i| i.numa, &combo).len() >= request {
                    min_size = min_size.min(k);
                }
                let in_mask = |c: usize| {
                    self.topology
                        .cpus
                        .get(&c)
                        .is_some_and(|i| combo.contains(&i.numa))
                };
                if !reusable.iter().all(in_mask) {
                    continue;
                }
                let matching = reusable.len() + available.iter().filter(|&c| in_mask(c)).count();
                if matching >= request {
                    hints.push(TopologyHint {
                        numa_affinity: Some(NumaMask::of(combo.iter().copied())),
                        preferred: false,
                    });
                }
            }
        }
        for h in &mut hints {
            h.preferred = h
                .numa_affinity
                .is_some_and(|m| m.count() as usize == min_size);
        }
        hints
    }

    fn container_hints_locked(&self, inner: &Inner, pod: &Pod, container: &Container) -> Hints {
        let requested = guaranteed_cpus(pod, container);
        if requested == 0 || pod_level_resources_set(pod) {
            return Hints::new();
        }
        let uid = pod_uid(pod);
        if let Some(held) = inner
            .saved
            .assignments
            .get(&uid)
            .and_then(|c| c.get(&container.name))
        {
            if held.len() != requested {
                info!(pod = %pod_ref(pod), pod_uid = %uid, container = %container.name, requested_size = requested, allocated_size = held.len(), "CPUs already allocated to container with different number than request");
                return Hints::from([("cpu".to_owned(), vec![])]);
            }
            let hints = self.cpu_hints(held, &CpuSet::new(), requested);
            return Hints::from([("cpu".to_owned(), hints)]);
        }
        let reusable = inner.reuse.get(&uid).cloned().unwrap_or_default();
        let hints = self.cpu_hints(&self.available(inner), &reusable, requested);
        Hints::from([("cpu".to_owned(), hints)])
    }

    fn pod_hints_locked(&self, inner: &Inner, pod: &Pod) -> Hints {
        let requested = pod_guaranteed_cpus(pod);
        if requested == 0 || pod_level_resources_set(pod) {
            return Hints::new();
        }
        let uid = pod_uid(pod);
        let mut assigned = CpuSet::new();
        let spec = pod.spec.as_ref();
        let containers = spec
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers));
        for c in containers {
            if let Some(held) = inner
                .saved
                .assignments
                .get(&uid)
                .and_then(|m| m.get(&c.name))
            {
                if held.len() != guaranteed_cpus(pod, c) {
                    return Hints::from([("cpu".to_owned(), vec![])]);
                }
                assigned = assigned.union(held);
            }
        }
        if assigned.len() == requested {
            return Hints::from([(
                "cpu".to_owned(),
                self.cpu_hints(&assigned, &CpuSet::new(), requested),
            )]);
        }
        let reusable = inner
            .reuse
            .get(&uid)
            .cloned()
            .unwrap_or_default()
            .union(&assigned);
        let hints = self.cpu_hints(&self.available(inner), &reusable, requested);
        Hints::from([("cpu".to_owned(), hints)])
    }

    /// kubelet's static `Allocate`.
    fn allocate_static(
        &self,
        pod: &Pod,
        container: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<(), AdmitError> {
        let n = guaranteed_cpus(pod, container);
        if n == 0 {
            return Ok(());
        }
        let uid = pod_uid(pod);
        if pod_level_resources_set(pod) {
            info!(pod = %pod_ref(pod), pod_uid = %uid, container = %container.name, "CPU manager allocation skipped, pod is using pod-level resources which are not supported by the static CPU manager policy");
            return Ok(());
        }
        crate::metrics::cpu_pinning_requested();
        let result = self.allocate_exclusive(pod, container, n, affinity);
        let physical = self.options.full_pcpus_only;
        let (scope, core) = (
            crate::metrics::ALIGN_SCOPE_CONTAINER,
            crate::metrics::ALIGNED_PHYSICAL_CPU,
        );
        match (&result, physical) {
            (Err(_), _) => {
                crate::metrics::cpu_pinning_failed();
                if physical {
                    crate::metrics::aligned_compute_failed(scope, core);
                }
            }
            (Ok(()), true) => crate::metrics::aligned_compute(scope, core),
            (Ok(()), false) => {}
        }
        result
    }

    /// The allocation proper, once kubelet counts the pinning request: the SMT
    /// checks, a container that already holds CPUs, or new CPUs at `affinity`.
    fn allocate_exclusive(
        &self,
        pod: &Pod,
        container: &Container,
        n: usize,
        affinity: Option<NumaMask>,
    ) -> Result<(), AdmitError> {
        let uid = pod_uid(pod);
        let mut inner = self.lock();
        if self.options.full_pcpus_only {
            let per_core = self.topology.cpus_per_core();
            if !n.is_multiple_of(per_core) {
                return Err(smt_alignment_error(n, per_core, None));
            }
            let physical = inner
                .saved
                .default_set
                .difference(&self.reserved_physical)
                .len();
            if n > physical {
                return Err(smt_alignment_error(n, per_core, Some(physical)));
            }
        }
        if let Some(held) = inner
            .saved
            .assignments
            .get(&uid)
            .and_then(|c| c.get(&container.name))
            .cloned()
        {
            note_existing(&mut inner, pod, container, &held);
            return Ok(());
        }
        let reusable = inner.reuse.get(&uid).cloned().unwrap_or_default();
        let cpus = self
            .allocate_cpus(&inner, n, affinity, &reusable)
            .map_err(AdmitError::unexpected)?;
        if self.topology.keys_of(&cpus, |i| i.uncore_cache).len() == 1 {
            crate::metrics::aligned_compute(
                crate::metrics::ALIGN_SCOPE_CONTAINER,
                crate::metrics::ALIGNED_UNCORE_CACHE,
            );
        }
        self.assign(&mut inner, pod, container, cpus);
        Ok(())
    }
}

impl HintProvider for CpuManager {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn container_hints(&self, pod: &Pod, container: &Container) -> Hints {
        if self.policy == CpuManagerPolicy::None {
            return Hints::new();
        }
        self.container_hints_locked(&self.lock(), pod, container)
    }

    fn pod_hints(&self, pod: &Pod) -> Hints {
        if self.policy == CpuManagerPolicy::None {
            return Hints::new();
        }
        self.pod_hints_locked(&self.lock(), pod)
    }

    fn allocate(
        &self,
        pod: &Pod,
        container: &Container,
        affinity: Option<NumaMask>,
    ) -> Result<(), AdmitError> {
        if self.policy == CpuManagerPolicy::None {
            return Ok(());
        }
        self.allocate_static(pod, container, affinity)
    }
}

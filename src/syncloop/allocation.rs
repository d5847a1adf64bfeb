//! kubelet's allocation manager (`pkg/kubelet/allocation`): which resources each pod
//! runs at. A pod is admitted at its spec's resources and they are kept in
//! `allocated_pods_state`; a later change of the spec (a `pods/resize`) is admitted on
//! its own, against the node's allocatable and the other pods' allocations, and either
//! becomes the new allocation (`PodResizeInProgress` until the runtime has it) or waits
//! (`PodResizePending`: `Infeasible` for ever, `Deferred` until room frees up, retried
//! in kubelet's order). The pod workers run the allocated pod, never the spec's wish.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;
use tracing::{debug, info};

use crate::allocation::{PodResources, ResourceState, apply_allocation, resizable_containers};
use crate::cm::{MemoryPolicy, NodeResources, QosClass, SwapDecision, pod_requests};
use crate::contracts::{AdmissionChain, PodAdmitAttributes, Rejection};
use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::locks::Locked as _;
use crate::pod::{is_static_pod, pod_ref, pod_uid};

/// kubelet's first retry of pending resizes, and the period after it.
pub(crate) const INITIAL_RETRY_DELAY: Duration = Duration::from_secs(30);
pub(crate) const RETRY_DELAY: Duration = Duration::from_secs(180);

/// `PodResizePending` reasons, the API's `PodReasonDeferred` and `PodReasonInfeasible`.
pub(crate) const DEFERRED: &str = "Deferred";
pub(crate) const INFEASIBLE: &str = "Infeasible";
/// `PodResizeInProgress`'s reason when actuation failed (`PodReasonError`).
pub(crate) const RESIZE_ERROR: &str = "Error";

/// What triggered a retry of the pending resizes (kubelet's trigger reasons, the
/// label of `kubelet_pod_deferred_accepted_resizes_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    PodsAdded,
    PodUpdated,
    PodsRemoved,
    PodResized,
    Periodic,
}

impl Trigger {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::PodsAdded => "pods_added",
            Trigger::PodUpdated => "pod_updated",
            Trigger::PodsRemoved => "pods_removed",
            Trigger::PodResized => "pod_resized",
            Trigger::Periodic => "periodic_retry",
        }
    }
}

/// A pod's two resize conditions (kubelet's status manager keeps them the same way).
#[derive(Debug, Clone, Default)]
struct ResizeConditions {
    pending: Option<PodCondition>,
    in_progress: Option<PodCondition>,
}

/// What one look at a pod's resize decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResizeDecision {
    /// The spec asks for what is allocated: nothing to do.
    Unchanged,
    /// The new resources are the allocation now; the pod must sync to apply them.
    Allocated,
    /// Not now (`Deferred`) or never (`Infeasible`), with kubelet's message.
    Pending {
        reason: &'static str,
        message: String,
    },
}

/// The allocation manager; shared by the sync loop (admission, resizes) and the pod
/// syncer (the allocated pod, the resize conditions).
pub(crate) struct AllocationManager {
    allocated: ResourceState,
    allocatable: NodeResources,
    /// Which containers get swap: kubelet refuses to resize their memory in place.
    memory: MemoryPolicy,
    events: EventRecorder,
    conditions: Mutex<HashMap<String, ResizeConditions>>,
    /// UIDs with a resize waiting, in kubelet's retry order.
    pending: Mutex<Vec<String>>,
    /// A pod worker finished a resize: the loop retries the waiting ones.
    retry_requested: AtomicBool,
}

impl AllocationManager {
    pub(crate) fn new(
        allocated: ResourceState,
        allocatable: NodeResources,
        memory: MemoryPolicy,
        events: EventRecorder,
    ) -> Self {
        AllocationManager {
            allocated,
            allocatable,
            memory,
            events,
            conditions: Mutex::default(),
            pending: Mutex::default(),
            retry_requested: AtomicBool::new(false),
        }
    }

    /// kubelet's `UpdatePodFromAllocation`: the pod as it was admitted or last resized.
    pub(crate) fn allocated_pod(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        self.allocated
            .pod(pod_uid(pod))
            .and_then(|alloc| apply_allocation(pod, &alloc))
            .map_or_else(|| pod.clone(), Arc::new)
    }

    /// The allocation of a pod, if it was admitted.
    pub(crate) fn allocation(&self, uid: &str) -> Option<PodResources> {
        self.allocated.pod(uid)
    }

    fn allocated_pods(&self, pods: &[Arc<Pod>], except: &str) -> Vec<Arc<Pod>> {
        (pods.iter())
            .filter(|p| pod_uid(p) != except)
            .map(|p| self.allocated_pod(p))
            .collect()
    }

    /// kubelet's `AddPod`: admission at the pod's allocation if it has one (an agent
    /// restarted keeps what it granted), else at its spec, which then becomes it.
    pub(crate) fn add_pod(
        &self,
        chain: &AdmissionChain,
        active: &[Arc<Pod>],
        pod: &Arc<Pod>,
    ) -> Result<(), Rejection> {
        let uid = pod_uid(pod);
        let pod = self.allocated_pod(pod);
        let others = self.allocated_pods(active, uid);
        chain.admit(&PodAdmitAttributes {
            pod: &pod,
            other_pods: &others,
        })?;
        if let Err(e) = self.allocated.set_pod(uid, PodResources::of_pod(&pod)) {
            tracing::error!(pod = %pod_ref(&pod), podUID = %uid, err = %e, "failed to checkpoint the pod's allocation");
        }
        Ok(())
    }

    /// Whether the pod's spec asks for other resources than it runs at.
    pub(crate) fn resize_requested(&self, pod: &Pod) -> bool {
        self.allocated
            .pod(pod_uid(pod))
            .is_some_and(|alloc| apply_allocation(pod, &alloc).is_some())
    }

    /// kubelet's `IsInPlacePodVerticalScalingAllowed` and the node's capacity: why a
    /// resize can never be granted here.
    fn infeasible(&self, pod: &Arc<Pod>) -> Option<String> {
        if is_static_pod(pod) {
            crate::metrics::infeasible_resize("static_pod");
            return Some("In-place resize of static-pods is not supported".into());
        }
        if self.swap_resize(pod) {
            crate::metrics::infeasible_resize("swap_limitation");
            return Some("In-place resize of containers with swap is not supported.".into());
        }
        let wanted = pod_requests(pod).ok()?;
        let (cpu, memory) = (
            wanted.cpu_milli.unwrap_or(0),
            wanted.memory_bytes.unwrap_or(0),
        );
        let a = &self.allocatable;
        if memory > a.memory_bytes || cpu > a.cpu_milli {
            crate::metrics::infeasible_resize("insufficient_node_allocatable");
        }
        // Memory is named first when both are too large, as kubelet does.
        if memory > a.memory_bytes {
            return Some(format!(
                "Node didn't have enough capacity: memory, requested: {memory}, capacity: {}",
                a.memory_bytes
            ));
        }
        if cpu > a.cpu_milli {
            return Some(format!(
                "Node didn't have enough capacity: cpu, requested: {cpu}, capacity: {}",
                a.cpu_milli
            ));
        }
        None
    }

    /// kubelet's `disallowResizeForSwappableContainers`: a container whose memory
    /// request changes in place (no `RestartContainer` for memory) and that has swap
    /// before or after.
    fn swap_resize(&self, pod: &Arc<Pod>) -> bool {
        let before = self.allocated_pod(pod);
        let containers = |p: &Pod| {
            let spec = p.spec.clone().unwrap_or_default();
            spec.containers
                .into_iter()
                .chain(spec.init_containers.unwrap_or_default())
        };
        let memory_request = |c: &k8s_openapi::api::core::v1::Container| {
            let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            r.and_then(|r| r.get("memory"))
                .and_then(|q| crate::quantity::bytes(q).ok())
        };
        let swaps = |p: &Pod, c: &k8s_openapi::api::core::v1::Container| {
            matches!(
                self.memory.swap_decision(p, c),
                Some(SwapDecision::Limited(_))
            )
        };
        containers(pod).any(|want| {
            let Some(had) = containers(&before).find(|c| c.name == want.name) else {
                return false;
            };
            let restarts = (had.resize_policy.iter().flatten())
                .any(|r| r.resource_name == "memory" && r.restart_policy == "RestartContainer");
            memory_request(&want) != memory_request(&had)
                && !restarts
                && (swaps(pod, &want) || swaps(&before, &had))
        })
    }

    /// kubelet's `handlePodResourcesResize`: the pod's new resources admitted as if it
    /// were a new pod among the others at their allocations.
    pub(crate) fn handle_resize(
        &self,
        chain: &AdmissionChain,
        active: &[Arc<Pod>],
        pod: &Arc<Pod>,
    ) -> ResizeDecision {
        let uid = pod_uid(pod);
        if !self.resize_requested(pod) {
            self.clear_pending(uid);
            return ResizeDecision::Unchanged;
        }
        let generation = pod.metadata.generation.unwrap_or(0);
        let refused = match self.infeasible(pod) {
            Some(message) => Some((INFEASIBLE, message)),
            None => {
                let others = self.allocated_pods(active, uid);
                let attrs = PodAdmitAttributes {
                    pod,
                    other_pods: &others,
                };
                chain
                    .admit(&attrs)
                    .err()
                    .map(|r: Rejection| (DEFERRED, r.message))
            }
        };
        if let Some((reason, message)) = refused {
            if self.set_pending(uid, reason, &message, generation) {
                info!(pod = %pod_ref(pod), podUID = %uid, reason, generation, "pod resize pending: {message}");
                let kind = format!("Resize{reason}");
                let msg = resize_message(pod, generation, Some(&message));
                let text = format!("Pod resize {reason}: {msg}");
                self.events
                    .event(&ObjectRef::pod(pod), EventType::Warning, kind, text);
            }
            return ResizeDecision::Pending { reason, message };
        }
        if let Err(e) = self.allocated.set_pod(uid, PodResources::of_pod(pod)) {
            tracing::error!(pod = %pod_ref(pod), podUID = %uid, err = %e, "failed to checkpoint the pod's new allocation; the resize waits");
            return ResizeDecision::Pending {
                reason: DEFERRED,
                message: format!("checkpointing the allocation: {e}"),
            };
        }
        self.clear_pending(uid);
        self.set_in_progress(uid, None, "", generation);
        let msg = resize_message(pod, generation, None);
        info!(pod = %pod_ref(pod), podUID = %uid, generation, "pod resize allocated: the pod's new resources fit; applying them");
        self.events.event(
            &ObjectRef::pod(pod),
            EventType::Normal,
            "ResizeStarted",
            format!("Pod resize started: {msg}"),
        );
        ResizeDecision::Allocated
    }

    /// Queues a pod whose resize waits (kubelet's `PushPendingResize`).
    pub(crate) fn push_pending(&self, uid: &str) {
        let mut pending = self.pending.locked();
        if !pending.iter().any(|u| u == uid) {
            pending.push(uid.to_owned());
        }
    }

    /// Asks the loop for a retry of the waiting resizes (a resize completed and may
    /// have freed room: kubelet's `pod_resized` trigger).
    pub(crate) fn request_retry(&self) {
        self.retry_requested.store(true, Ordering::Relaxed);
    }

    /// Whether a retry was asked for since the last call.
    pub(crate) fn take_retry_request(&self) -> bool {
        self.retry_requested.swap(false, Ordering::Relaxed)
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.locked().is_empty()
    }

    /// kubelet's `RetryPendingResizes`: each waiting pod tried again in kubelet's order
    /// (resizes that ask for no more first, then priority, then Guaranteed, then the
    /// longest waiting); returns the pods to sync (allocated, or whose condition changed).
    pub(crate) fn retry_pending(
        &self,
        chain: &AdmissionChain,
        active: &[Arc<Pod>],
        get: impl Fn(&str) -> Option<Arc<Pod>>,
        trigger: Trigger,
    ) -> Vec<Arc<Pod>> {
        let uids = std::mem::take(&mut *self.pending.locked());
        let mut pods: Vec<Arc<Pod>> = uids.iter().filter_map(|u| get(u)).collect();
        pods.sort_by_cached_key(|p| self.retry_key(p));
        let mut to_sync = Vec::new();
        for pod in pods {
            let uid = pod_uid(&pod).to_string();
            let before = self.pending_condition(&uid);
            let was_deferred = before.as_ref().is_some_and(|c| c.0 == DEFERRED);
            match self.handle_resize(chain, active, &pod) {
                ResizeDecision::Pending { reason, .. } if reason == DEFERRED => {
                    debug!(pod = %pod_ref(&pod), podUID = %uid, trigger = trigger.as_str(), "pod resize still deferred; tried again later");
                    self.push_pending(&uid);
                }
                ResizeDecision::Allocated => {
                    if was_deferred {
                        crate::metrics::deferred_resize_accepted(trigger.as_str());
                        info!(pod = %pod_ref(&pod), podUID = %uid, trigger = trigger.as_str(), "deferred pod resize allocated on retry");
                    }
                    to_sync.push(pod);
                    continue;
                }
                _ => {}
            }
            if self.pending_condition(&uid) != before {
                to_sync.push(pod);
            }
        }
        to_sync
    }

    /// The retry order's key: smaller first.
    fn retry_key(&self, pod: &Pod) -> (bool, i32, bool, Option<jiff::Timestamp>) {
        let increasing = self.allocated.pod(pod_uid(pod)).is_some_and(|alloc| {
            let before = apply_allocation(pod, &alloc);
            let (Some(before), Ok(new)) = (before, pod_requests(pod)) else {
                return false;
            };
            let Ok(old) = pod_requests(&before) else {
                return false;
            };
            new.cpu_milli.unwrap_or(0) > old.cpu_milli.unwrap_or(0)
                || new.memory_bytes.unwrap_or(0) > old.memory_bytes.unwrap_or(0)
        });
        let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        let guaranteed = QosClass::of(pod) == QosClass::Guaranteed;
        let since = self
            .conditions
            .locked()
            .get(pod_uid(pod))
            .and_then(|c| c.pending.as_ref())
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0);
        // A pod never pending sorts after those that have waited.
        let since = since.or(Some(jiff::Timestamp::MAX));
        (increasing, -priority, !guaranteed, since)
    }

    /// kubelet's pending and in-progress resize gauges, counted again after a change.
    fn publish_gauges(&self) {
        let all = self.conditions.locked();
        let pending = |reason: &str| {
            all.values()
                .filter(|c| {
                    (c.pending.as_ref()).is_some_and(|p| p.reason.as_deref() == Some(reason))
                })
                .count()
        };
        let in_progress = all.values().filter(|c| c.in_progress.is_some()).count();
        crate::metrics::set_resize_gauges(pending(DEFERRED), pending(INFEASIBLE), in_progress);
    }

    fn pending_condition(&self, uid: &str) -> Option<(String, String)> {
        let c = self.conditions.locked();
        let p = c.get(uid)?.pending.as_ref()?;
        Some((
            p.reason.clone().unwrap_or_default(),
            p.message.clone().unwrap_or_default(),
        ))
    }

    /// Changes one pod's resize conditions, then counts the gauges again.
    fn change<R>(&self, uid: &str, f: impl FnOnce(&mut ResizeConditions) -> R) -> R {
        let out = f(self.conditions.locked().entry(uid.to_owned()).or_default());
        self.publish_gauges();
        out
    }

    /// Sets `PodResizePending`; true when its reason or message changed.
    fn set_pending(&self, uid: &str, reason: &str, message: &str, generation: i64) -> bool {
        self.change(uid, |c| {
            set_condition(
                &mut c.pending,
                "PodResizePending",
                Some(reason),
                message,
                generation,
            )
        })
    }

    fn clear_pending(&self, uid: &str) {
        self.change(uid, |c| c.pending = None);
    }

    /// Sets `PodResizeInProgress` (reason `Error` with a message when actuation failed);
    /// true when its reason or message changed.
    pub(crate) fn set_in_progress(
        &self,
        uid: &str,
        reason: Option<&str>,
        message: &str,
        generation: i64,
    ) -> bool {
        self.change(uid, |c| {
            let kind = "PodResizeInProgress";
            set_condition(&mut c.in_progress, kind, reason, message, generation)
        })
    }

    /// Clears `PodResizeInProgress`; true when it was set (the resize just completed).
    pub(crate) fn clear_in_progress(&self, uid: &str) -> bool {
        self.change(uid, |c| c.in_progress.take().is_some())
    }

    pub(crate) fn in_progress(&self, uid: &str) -> bool {
        self.conditions
            .locked()
            .get(uid)
            .is_some_and(|c| c.in_progress.is_some())
    }

    /// The resize conditions for the pod's status (none once it is terminal).
    pub(crate) fn conditions(&self, uid: &str) -> Vec<PodCondition> {
        let all = self.conditions.locked();
        let Some(c) = all.get(uid) else {
            return Vec::new();
        };
        c.pending.iter().chain(&c.in_progress).cloned().collect()
    }

    /// Forgets a pod gone from the node (kubelet's `RemovePod`).
    pub(crate) fn remove_pod(&self, uid: &str) {
        self.conditions.locked().remove(uid);
        self.publish_gauges();
        self.pending.locked().retain(|u| u != uid);
        if let Err(e) = self.allocated.remove_pod(uid) {
            debug!(podUID = %uid, err = %e, "failed to forget the pod's allocation; housekeeping tries again");
        }
    }

    /// Forgets every pod `keep` says no to (kubelet's `RemoveOrphanedPods`).
    pub(crate) fn remove_orphans(&self, keep: impl Fn(&str) -> bool) {
        self.conditions.locked().retain(|uid, _| keep(uid));
        self.publish_gauges();
        self.pending.locked().retain(|uid| keep(uid));
        if let Err(e) = self.allocated.retain(keep) {
            debug!(err = %e, "failed to forget orphaned allocations; housekeeping tries again");
        }
    }
}

/// Sets a resize condition; its transition time stays while its reason and message
/// do. True when they changed.
fn set_condition(
    slot: &mut Option<PodCondition>,
    kind: &str,
    reason: Option<&str>,
    message: &str,
    generation: i64,
) -> bool {
    let changed = slot.as_ref().is_none_or(|c| {
        c.reason.as_deref() != reason || c.message.as_deref().unwrap_or("") != message
    });
    let since = (slot.as_ref())
        .filter(|_| !changed)
        .and_then(|c| c.last_transition_time.clone());
    *slot = Some(resize_condition(kind, reason, message, generation, since));
    changed
}

fn resize_condition(
    kind: &str,
    reason: Option<&str>,
    message: &str,
    generation: i64,
    since: Option<Time>,
) -> PodCondition {
    PodCondition {
        type_: kind.to_owned(),
        status: "True".to_owned(),
        reason: reason.map(str::to_owned),
        message: (!message.is_empty()).then(|| message.to_owned()),
        observed_generation: (generation > 0).then_some(generation),
        last_transition_time: Some(since.unwrap_or_else(|| Time(jiff::Timestamp::now()))),
        last_probe_time: None,
    }
}

/// kubelet's resize event detail: the resizable containers' resources as the spec
/// asks, the generation, and the error when there is one.
pub(crate) fn resize_message(pod: &Pod, generation: i64, error: Option<&str>) -> String {
    let containers: Vec<serde_json::Value> = (pod.spec.iter())
        .flat_map(resizable_containers)
        .map(|(c, _)| json!({"name": c.name, "resources": c.resources.clone().unwrap_or_default()}))
        .collect();
    // Go's field order: containers, generation, error.
    let containers = serde_json::Value::Array(containers);
    match error {
        Some(e) => format!(
            "{{\"containers\":{containers},\"generation\":{generation},\"error\":{}}}",
            json!(e)
        ),
        None => format!("{{\"containers\":{containers},\"generation\":{generation}}}"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::cri::support::pod as test_pod;

    /// A 2-CPU, 1 GiB node with the standard chain plus resource fit.
    fn manager() -> (AllocationManager, AdmissionChain) {
        let allocatable = NodeResources {
            cpu_milli: 2000,
            memory_bytes: 1 << 30,
            ephemeral_storage_bytes: 10 << 30,
            pods: 110,
        };
        let mut chain = AdmissionChain::default();
        chain.push(Box::new(crate::cm::ResourceFit {
            allocatable,
            extended: None,
        }));
        let m = AllocationManager::new(
            ResourceState::in_memory(),
            allocatable,
            MemoryPolicy::NONE,
            EventRecorder::log_only(),
        );
        (m, chain)
    }

    fn asking(name: &str, cpu: &str, priority: i32) -> Arc<Pod> {
        let mut p = test_pod(name, &[], &["main"], "Always");
        p.metadata.generation = Some(1);
        let spec = p.spec.as_mut().unwrap();
        spec.priority = Some(priority);
        spec.containers[0].resources = Some(ResourceRequirements {
            requests: Some(BTreeMap::from([("cpu".into(), Quantity(cpu.into()))])),
            ..Default::default()
        });
        Arc::new(p)
    }

    fn resized(p: &Arc<Pod>, cpu: &str) -> Arc<Pod> {
        let mut p = (**p).clone();
        p.metadata.generation = Some(p.metadata.generation.unwrap_or(1) + 1);
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.resources.as_mut().unwrap().requests =
            Some(BTreeMap::from([("cpu".into(), Quantity(cpu.into()))]));
        Arc::new(p)
    }

    fn cpu_of(p: &Pod) -> String {
        p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap()["cpu"]
            .0
            .clone()
    }

    #[test]
    fn a_resize_is_infeasible_deferred_or_allocated_as_kubelet_decides() {
        let (m, chain) = manager();
        let a = asking("a", "500m", 0);
        let b = asking("b", "1", 0);
        m.add_pod(&chain, &[], &a).unwrap();
        m.add_pod(&chain, std::slice::from_ref(&a), &b).unwrap();
        let active = vec![a.clone(), b.clone()];

        // More than the node has: never.
        let big = resized(&a, "3");
        assert_eq!(
            m.handle_resize(&chain, &active, &big),
            ResizeDecision::Pending {
                reason: INFEASIBLE,
                message: "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"
                    .into()
            }
        );
        // The pod keeps running at what it was admitted at.
        assert_eq!(cpu_of(&m.allocated_pod(&big)), "500m");
        let cond = &m.conditions(pod_uid(&a))[0];
        assert_eq!(
            (cond.type_.as_str(), cond.reason.as_deref()),
            ("PodResizePending", Some("Infeasible"))
        );
        assert_eq!(cond.observed_generation, Some(2));

        // More than is free next to b: later.
        let more = resized(&a, "1500m");
        let d = m.handle_resize(&chain, &active, &more);
        assert!(
            matches!(&d, ResizeDecision::Pending { reason, message } if *reason == DEFERRED
                && message == "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"),
            "{d:?}"
        );
        m.push_pending(pod_uid(&a));

        // b leaves: the retry allocates it and asks for a sync.
        m.remove_pod(pod_uid(&b));
        let synced = m.retry_pending(
            &chain,
            std::slice::from_ref(&more),
            |_| Some(more.clone()),
            Trigger::PodsRemoved,
        );
        assert_eq!(synced.len(), 1);
        assert_eq!(cpu_of(&m.allocated_pod(&more)), "1500m");
        assert!(!m.has_pending());
        let conds = m.conditions(pod_uid(&a));
        assert_eq!(conds.len(), 1, "pending cleared, in progress set");
        assert_eq!(conds[0].type_, "PodResizeInProgress");
        assert!(m.clear_in_progress(pod_uid(&a)));
        assert!(m.conditions(pod_uid(&a)).is_empty());
    }

    #[test]
    fn a_memory_resize_of_a_container_with_swap_is_infeasible_unless_it_restarts() {
        let (mut m, chain) = manager();
        let settings = crate::cm::MemorySettings {
            single_process_oom_kill: None,
            swap_behavior: Some(crate::cm::SwapBehavior::LimitedSwap),
        };
        m.memory = MemoryPolicy::new(
            crate::cm::CgroupVersion::V2,
            &settings,
            true,
            8 << 30,
            1 << 30,
        );
        // Burstable, memory request below its limit: LimitedSwap gives it swap.
        let mut p = (*asking("swappy", "100m", 0)).clone();
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        let r = c.resources.as_mut().unwrap();
        r.requests
            .as_mut()
            .unwrap()
            .insert("memory".into(), Quantity("64Mi".into()));
        r.limits = Some(BTreeMap::from([(
            "memory".into(),
            Quantity("256Mi".into()),
        )]));
        let p = Arc::new(p);
        m.add_pod(&chain, &[], &p).unwrap();
        let mut more = (*p).clone();
        more.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert("memory".into(), Quantity("128Mi".into()));
        let more = Arc::new(more);
        assert_eq!(
            m.handle_resize(&chain, std::slice::from_ref(&p), &more),
            ResizeDecision::Pending {
                reason: INFEASIBLE,
                message: "In-place resize of containers with swap is not supported.".into()
            }
        );
        // With RestartContainer for memory, the container restarts into its new swap.
        let mut restarting = (*more).clone();
        restarting.spec.as_mut().unwrap().containers[0].resize_policy = Some(vec![
            serde_json::from_value(
                serde_json::json!({"resourceName": "memory", "restartPolicy": "RestartContainer"}),
            )
            .unwrap(),
        ]);
        let mut admitted = (*p).clone();
        admitted.spec.as_mut().unwrap().containers[0].resize_policy =
            restarting.spec.as_ref().unwrap().containers[0]
                .resize_policy
                .clone();
        let (m2, chain2) = manager();
        let mut m2 = m2;
        m2.memory = m.memory;
        m2.add_pod(&chain2, &[], &Arc::new(admitted)).unwrap();
        assert_eq!(
            m2.handle_resize(&chain2, &[], &Arc::new(restarting)),
            ResizeDecision::Allocated
        );
    }

    #[test]
    fn retries_go_shrinking_first_then_by_priority() {
        let (m, chain) = manager();
        let low = asking("low", "200m", 0);
        let high = asking("high", "200m", 1000);
        let shrink = asking("shrink", "400m", 0);
        for p in [&low, &high, &shrink] {
            m.add_pod(&chain, &[], p).unwrap();
        }
        let wants = [
            resized(&low, "300m"),
            resized(&high, "300m"),
            resized(&shrink, "100m"),
        ];
        for p in &wants {
            m.push_pending(pod_uid(p));
        }
        let mut keys: Vec<_> = wants
            .iter()
            .map(|p| (m.retry_key(p), p.metadata.name.clone()))
            .collect();
        keys.sort();
        let order: Vec<_> = keys.into_iter().map(|(_, n)| n.unwrap()).collect();
        assert_eq!(order, ["shrink", "high", "low"]);
    }

    #[test]
    fn a_restarted_agent_admits_at_the_allocation_not_the_spec() {
        let (m, chain) = manager();
        let a = asking("a", "500m", 0);
        m.add_pod(&chain, &[], &a).unwrap();
        // The spec now asks for more than the node has (a resize that never fit);
        // admission after a restart still takes the pod, at its allocation.
        let wants = resized(&a, "5");
        m.add_pod(&chain, &[], &wants).unwrap();
        assert!(m.resize_requested(&wants));
        assert_eq!(cpu_of(&m.allocated_pod(&wants)), "500m");
    }

    #[test]
    fn the_event_detail_is_kubelets_json() {
        let a = asking("a", "1", 0);
        assert_eq!(
            resize_message(&a, 3, Some("no room")),
            r#"{"containers":[{"name":"main","resources":{"requests":{"cpu":"1"}}}],"generation":3,"error":"no room"}"#
        );
    }
}

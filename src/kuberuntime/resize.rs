//! In-place pod resize, the runtime's half (kubelet's `computePodResizeAction` and
//! `doPodResizeAction`): the running containers whose (allocated) cpu or memory
//! differs from what the runtime was last told are updated in place with
//! `UpdateContainerResources`, or restarted when their `resizePolicy` asks for it, and
//! the pod cgroup follows, each resource in the order that never lets a container's
//! limit exceed its pod's.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;
use tracing::{info, warn};

use super::actions::PodActions;
use super::hooks::RuntimeHooks;
use super::sandbox::SandboxEnv;
use super::types::{ContainerState, ContainerStatus, PodRuntimeStatus, RuntimeResources};
use crate::allocation::{ResourceState, is_resizable};
use crate::cm::{ContainerManager, ResourceConfig};
use crate::cri::Cri;
use crate::pod::{pod_ref, pod_uid};

/// kubelet's `cm.MinShares` as a milli-CPU request: requests at or below it are equal.
const MIN_CPU_REQUEST_MILLI: i64 = 2;
/// kubelet's `cm.MinMilliCPULimit`: limits at or below it are equal (the kernel's
/// smallest quota).
const MIN_CPU_LIMIT_MILLI: i64 = 10;

/// The two resources a resize changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    Cpu,
    Memory,
}

impl Resource {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
        }
    }
}

/// A container's cpu and memory as kubelet compares them (its `containerResources`):
/// milli-CPU and bytes, 0 for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Amounts {
    pub cpu_request_milli: i64,
    pub cpu_limit_milli: i64,
    pub memory_request: i64,
    pub memory_limit: i64,
}

fn amount(list: Option<&BTreeMap<String, Quantity>>, name: &str) -> Option<i64> {
    let q = list?.get(name)?;
    let v = if name == "cpu" {
        crate::quantity::milli_cpu(q)
    } else {
        crate::quantity::bytes(q)
    };
    v.ok()
}

fn put(list: &mut BTreeMap<String, Quantity>, name: &str, value: i64) {
    if value <= 0 {
        return;
    }
    let text = if name == "cpu" {
        format!("{value}m")
    } else {
        value.to_string()
    };
    list.insert(name.to_string(), Quantity(text));
}

impl Amounts {
    /// From requirements (requests default to limits, as the runtime is given them).
    pub(crate) fn of(r: Option<&ResourceRequirements>) -> Self {
        let req = r.and_then(|r| r.requests.as_ref());
        let lim = r.and_then(|r| r.limits.as_ref());
        let cpu_limit_milli = amount(lim, "cpu").unwrap_or(0);
        let memory_limit = amount(lim, "memory").unwrap_or(0);
        Amounts {
            cpu_request_milli: amount(req, "cpu").unwrap_or(cpu_limit_milli),
            cpu_limit_milli,
            memory_request: amount(req, "memory").unwrap_or(memory_limit),
            memory_limit,
        }
    }

    /// From what the runtime reports; it does not know memory requests, so that one
    /// is taken from `desired` (kubelet's fallback).
    fn of_runtime(r: &RuntimeResources, desired: &Amounts) -> Self {
        Amounts {
            cpu_request_milli: r.cpu_request_milli().unwrap_or(0),
            cpu_limit_milli: r.cpu_limit_milli().unwrap_or(0),
            memory_request: desired.memory_request,
            memory_limit: r.memory_limit().unwrap_or(0),
        }
    }

    /// `base` with its cpu and memory replaced by these amounts (its other resources
    /// kept): the container as the runtime is told about it, and its actuated entry.
    pub(crate) fn apply_to(&self, base: Option<&ResourceRequirements>) -> ResourceRequirements {
        let mut out = base.cloned().unwrap_or_default();
        let mut requests = out.requests.take().unwrap_or_default();
        let mut limits = out.limits.take().unwrap_or_default();
        for list in [&mut requests, &mut limits] {
            list.remove("cpu");
            list.remove("memory");
        }
        put(&mut requests, "cpu", self.cpu_request_milli);
        put(&mut requests, "memory", self.memory_request);
        put(&mut limits, "cpu", self.cpu_limit_milli);
        put(&mut limits, "memory", self.memory_limit);
        out.requests = (!requests.is_empty()).then_some(requests);
        out.limits = (!limits.is_empty()).then_some(limits);
        out
    }

    /// kubelet's rule for the smallest cpu amounts: below the least the runtime can
    /// set (2m of request, 10m of limit) on both sides, they are the same.
    fn small_cpu_as(mut self, have: &Amounts) -> Self {
        if self.cpu_request_milli <= MIN_CPU_REQUEST_MILLI
            && have.cpu_request_milli <= MIN_CPU_REQUEST_MILLI
        {
            self.cpu_request_milli = have.cpu_request_milli;
        }
        if self.cpu_limit_milli <= MIN_CPU_LIMIT_MILLI
            && have.cpu_limit_milli <= MIN_CPU_LIMIT_MILLI
        {
            self.cpu_limit_milli = have.cpu_limit_milli;
        }
        self
    }

    /// `self` with `resource`'s amounts taken from `from`.
    pub(crate) fn with(mut self, resource: Resource, from: &Amounts) -> Self {
        match resource {
            Resource::Cpu => {
                self.cpu_request_milli = from.cpu_request_milli;
                self.cpu_limit_milli = from.cpu_limit_milli;
            }
            Resource::Memory => {
                self.memory_request = from.memory_request;
                self.memory_limit = from.memory_limit;
            }
        }
        self
    }
}

/// One running container whose resources change in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerUpdate {
    pub id: String,
    pub name: String,
    /// A sidecar (`spec.initContainers`) rather than a regular container.
    pub init: bool,
    pub desired: Amounts,
    pub current: Amounts,
}

/// What a resize must do (kubelet's `ContainersToUpdate` and `UpdatePodResources`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ResizeActions {
    /// Containers whose memory changes, decreases first.
    pub memory: Vec<ContainerUpdate>,
    /// Containers whose cpu changes, decreases first.
    pub cpu: Vec<ContainerUpdate>,
    /// The pod cgroup is brought to the pod's resources (some container changes).
    pub update_pod: bool,
}

impl ResizeActions {
    pub(crate) fn is_empty(&self) -> bool {
        self.memory.is_empty() && self.cpu.is_empty() && !self.update_pod
    }

    /// Decreases go first, so the sum never passes the pod cgroup's limit on the way.
    fn push(&mut self, resource: Resource, update: ContainerUpdate, increase: bool) {
        let list = match resource {
            Resource::Cpu => &mut self.cpu,
            Resource::Memory => &mut self.memory,
        };
        if increase {
            list.push(update);
        } else {
            list.insert(0, update);
        }
    }
}

/// The policy of `resource` in the container's `resizePolicy` (default `NotRequired`):
/// whether a change restarts the container.
fn restarts_for(c: &Container, resource: Resource) -> bool {
    (c.resize_policy.iter().flatten())
        .find(|p| p.resource_name == resource.as_str())
        .is_some_and(|p| p.restart_policy == "RestartContainer")
}

/// The resources the runtime has for a container now: what it was last told (the
/// actuated state), else what it reports, else nothing known (None).
fn current_amounts(
    actuated: Option<&ResourceRequirements>,
    status: &ContainerStatus,
    desired: &Amounts,
) -> Option<Amounts> {
    match (actuated, &status.resources) {
        (Some(a), _) => Some(Amounts::of(Some(a))),
        (None, Some(r)) => Some(Amounts::of_runtime(r, desired)),
        (None, None) => None,
    }
}

/// kubelet's `computePodResizeAction` for one running container: adds its in-place
/// updates, or its restart (kill with kubelet's message, then start), to `actions`.
fn container_resize(
    c: &Container,
    index: usize,
    init: bool,
    status: &ContainerStatus,
    actuated: Option<&ResourceRequirements>,
    actions: &mut PodActions,
) {
    let mut desired = Amounts::of(c.resources.as_ref());
    // Nothing known of what it runs with: update in place (the call is idempotent),
    // never restart on a guess.
    let (mut current, known) = match current_amounts(actuated, status, &desired) {
        Some(a) => (a, true),
        None => (Amounts::default(), false),
    };
    desired = desired.small_cpu_as(&current);
    if desired == current {
        return;
    }
    let cpu_changes = desired.cpu_limit_milli != current.cpu_limit_milli
        || desired.cpu_request_milli != current.cpu_request_milli;
    let memory_changes = desired.memory_limit != current.memory_limit
        || desired.memory_request != current.memory_request;
    let restart = known
        && ((cpu_changes && restarts_for(c, Resource::Cpu))
            || (memory_changes && restarts_for(c, Resource::Memory)));
    actions.resize.update_pod = true;
    if restart {
        actions.kill.push((
            status.id.clone(),
            c.name.clone(),
            format!("Container {} resize requires restart", c.name),
        ));
        let starts = if init {
            &mut actions.start_init
        } else {
            &mut actions.start
        };
        starts.push(index);
        starts.sort_unstable();
        starts.dedup();
        return;
    }
    // kubelet's unknown memory request reads as the desired one: it alone is no reason.
    if !known {
        current.memory_request = desired.memory_request;
    }
    let update = ContainerUpdate {
        id: status.id.clone(),
        name: c.name.clone(),
        init,
        desired,
        current,
    };
    if memory_changes {
        let increase = if desired.memory_limit != current.memory_limit {
            unlimited_if_zero(desired.memory_limit) > unlimited_if_zero(current.memory_limit)
        } else {
            desired.memory_request > current.memory_request
        };
        actions
            .resize
            .push(Resource::Memory, update.clone(), increase);
    }
    if cpu_changes {
        let increase = if desired.cpu_limit_milli != current.cpu_limit_milli {
            unlimited_if_zero(desired.cpu_limit_milli) > unlimited_if_zero(current.cpu_limit_milli)
        } else {
            desired.cpu_request_milli > current.cpu_request_milli
        };
        actions.resize.push(Resource::Cpu, update, increase);
    }
}

/// Whether a container runs at `desired` by what it was last given (kubelet's
/// `isPodResizeInProgress` for one container: cpu and memory, requests and limits,
/// the smallest cpu amounts alike).
pub(crate) fn settled(
    desired: Option<&ResourceRequirements>,
    actuated: &ResourceRequirements,
) -> bool {
    let have = Amounts::of(Some(actuated));
    Amounts::of(desired).small_cpu_as(&have) == have
}

/// A limit of 0 (none) is the largest.
fn unlimited_if_zero(v: i64) -> i64 {
    if v <= 0 { i64::MAX } else { v }
}

/// Adds the resize of every running resizable container to `actions` (the part of
/// kubelet's `computePodActions` that calls `computePodResizeAction` for the
/// containers it keeps). Nothing when the pod is killed or gets a new sandbox, or is
/// a static pod (kubelet resizes only pods from the apiserver). `actuated` gives what
/// the runtime was last told for a container, by name.
pub(crate) fn compute_resize(
    pod: &Pod,
    status: &PodRuntimeStatus,
    actuated: &dyn Fn(&str) -> Option<ResourceRequirements>,
    actions: &mut PodActions,
) {
    if actions.kill_pod || actions.create_sandbox || crate::pod::is_static_pod(pod) {
        return;
    }
    let Some(spec) = pod.spec.as_ref() else {
        return;
    };
    let inits = spec.init_containers.iter().flatten().enumerate();
    let regular = spec.containers.iter().enumerate();
    let all = (inits.map(|(i, c)| (i, c, true))).chain(regular.map(|(i, c)| (i, c, false)));
    for (index, c, init) in all {
        if !is_resizable(c, init) {
            continue;
        }
        let Some(s) = status.latest(&c.name) else {
            continue;
        };
        let killed = actions.kill.iter().any(|(id, _, _)| *id == s.id);
        if s.state != ContainerState::Running || killed {
            continue;
        }
        container_resize(c, index, init, s, actuated(&c.name).as_ref(), actions);
    }
}

/// Why a resize could not be carried out; the pod's `PodResizeInProgress` condition
/// shows it (reason `Error`), and the next sync tries again.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResizeError {
    /// kubelet 1.36's refusal to set a memory limit below what is in use (the kernel
    /// would OOM-kill, or on v1 refuse): nothing of the resize was applied.
    #[error("cannot decrease memory limits: {0}")]
    MemoryBelowUsage(String),
    #[error(transparent)]
    PodCgroup(#[from] crate::cm::PodCgroupError),
    #[error("failed to read the memory usage of container {container:?}: {source}")]
    ContainerUsage {
        container: String,
        source: crate::cri::CriError,
    },
    #[error("failed to update the resources of container {container:?}: {source}")]
    UpdateContainer {
        container: String,
        source: crate::cri::CriError,
    },
    #[error("container {container:?}: {source}")]
    Resources {
        container: String,
        source: crate::cm::ResourceError,
    },
}

/// kubelet's list of errors: one alone as it is, several in brackets.
pub(crate) fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Logs one container update decision at -v=2 with its values and cause.
pub(crate) fn log_update(pod: &Pod, u: &ContainerUpdate, resource: Resource, policy: &str) {
    info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %u.name, containerID = %u.id, resource = resource.as_str(), cpuRequest = u.desired.cpu_request_milli, cpuLimit = u.desired.cpu_limit_milli, memoryRequest = u.desired.memory_request, memoryLimit = u.desired.memory_limit, fromCpuRequest = u.current.cpu_request_milli, fromCpuLimit = u.current.cpu_limit_milli, fromMemoryLimit = u.current.memory_limit, policy, "resizing container in place: its allocated resources differ from those the runtime was given");
}

/// Logs a restart a resize asked for.
pub(crate) fn log_restarts(pod: &Pod, actions: &PodActions) {
    for (id, name, why) in &actions.kill {
        if why.ends_with("resize requires restart") {
            info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %name, containerID = %id, policy = "RestartContainer", "restarting container for a resize: its resizePolicy asks for a restart");
        }
    }
}

/// Warns once for a resize that failed, with its cause.
pub(crate) fn log_failed(pod: &Pod, e: &ResizeError) {
    warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), error = %e, "pod resize failed; the next sync tries again");
}

/// A cgroup limit as a number to compare: none (-1, or not set) is the largest.
fn limit_value(v: Option<i64>) -> i64 {
    match v {
        Some(v) if v >= 0 => v,
        _ => i64::MAX,
    }
}

/// The container named in the pod spec (a sidecar among the init containers).
fn spec_container<'p>(pod: &'p Pod, name: &str, init: bool) -> Option<&'p Container> {
    let spec = pod.spec.as_ref()?;
    if init {
        spec.init_containers
            .iter()
            .flatten()
            .find(|c| c.name == name)
    } else {
        spec.containers.iter().find(|c| c.name == name)
    }
}

/// What carries a resize out (kubelet's `doPodResizeAction`): the runtime, the pod
/// cgroups (None: pods have none), the runtime hooks, the actuated state, and the host
/// facts a container's resources are built from.
pub(crate) struct Actuator<'a> {
    pub cri: &'a dyn Cri,
    pub cgroups: Option<&'a ContainerManager>,
    pub hooks: &'a RuntimeHooks,
    pub actuated: Option<&'a ResourceState>,
    pub env: &'a SandboxEnv,
}

impl Actuator<'_> {
    /// Applies `resize` to the pod's running containers and its cgroup: memory, then
    /// cpu, each growing the pod cgroup before its containers and shrinking it after.
    /// A memory limit below what is in use refuses the whole resize up front.
    pub(crate) async fn resize(
        &self,
        pod: &Pod,
        resize: &ResizeActions,
    ) -> Result<(), ResizeError> {
        let limits = match self.cgroups {
            Some(cm) => cm.pod_cgroup_limits(pod)?,
            None => None,
        };
        self.check_memory_decrease(pod, resize, limits.as_ref())
            .await?;
        let has_pod_cgroup = limits.is_some();
        let (target, now) = limits.unwrap_or_default();
        if !resize.memory.is_empty() || resize.update_pod {
            let lim = (
                limit_value(now.memory_limit),
                limit_value(target.memory_limit.or(now.memory_limit)),
            );
            let step = Step {
                resource: Resource::Memory,
                limit: lim,
                request: (0, 0),
                target: has_pod_cgroup.then_some(&target),
            };
            self.resize_resource(pod, &step, &resize.memory).await?;
        }
        if !resize.cpu.is_empty() || resize.update_pod {
            // The memory updates all went through: the cpu calls carry the new memory.
            let cpu: Vec<ContainerUpdate> = (resize.cpu.iter().cloned())
                .map(|mut u| {
                    if resize.memory.iter().any(|m| m.id == u.id) {
                        u.current = u.current.with(Resource::Memory, &u.desired);
                    }
                    u
                })
                .collect();
            let shares = |v: Option<u64>| v.map_or(0, |s| i64::try_from(s).unwrap_or(i64::MAX));
            let step = Step {
                resource: Resource::Cpu,
                limit: (
                    limit_value(now.cpu_quota),
                    limit_value(target.cpu_quota.or(now.cpu_quota)),
                ),
                request: (shares(now.cpu_shares), shares(target.cpu_shares)),
                target: has_pod_cgroup.then_some(&target),
            };
            self.resize_resource(pod, &step, &cpu).await?;
        }
        Ok(())
    }

    /// kubelet 1.36's check before a memory limit goes down: neither the pod's nor a
    /// container's new limit may be at or below what it uses now.
    async fn check_memory_decrease(
        &self,
        pod: &Pod,
        resize: &ResizeActions,
        limits: Option<&(ResourceConfig, ResourceConfig)>,
    ) -> Result<(), ResizeError> {
        let mut errors = Vec::new();
        if let (Some(cm), Some((target, now))) = (self.cgroups, limits)
            && let Some(new) = target.memory_limit.filter(|v| *v > 0)
            && new < limit_value(now.memory_limit)
            && let Some(usage) = cm.pod_memory_usage(pod)?
            && usage >= new.unsigned_abs()
        {
            errors.push(format!(
                "attempting to set pod memory limit ({new}) below current usage ({usage})"
            ));
        }
        for u in &resize.memory {
            let new = u.desired.memory_limit;
            if new <= 0 || new >= unlimited_if_zero(u.current.memory_limit) {
                continue;
            }
            if let Some(usage) = self.container_memory_usage(u).await?
                && usage >= new.unsigned_abs()
            {
                errors.push(format!(
                    "attempting to set container {:?} memory limit ({new}) below current usage ({usage})",
                    u.name
                ));
            }
        }
        if errors.is_empty() {
            return Ok(());
        }
        Err(ResizeError::MemoryBelowUsage(aggregate(&errors)))
    }

    /// The memory the runtime's stats say the container uses; None when it does not say.
    async fn container_memory_usage(
        &self,
        u: &ContainerUpdate,
    ) -> Result<Option<u64>, ResizeError> {
        let filter = k8s_cri::v1::ContainerStatsFilter {
            id: u.id.clone(),
            ..Default::default()
        };
        let stats = (self.cri.list_container_stats(Some(filter)).await).map_err(|source| {
            ResizeError::ContainerUsage {
                container: u.name.clone(),
                source,
            }
        })?;
        Ok(stats
            .iter()
            .filter_map(|s| s.memory.as_ref()?.usage_bytes.as_ref())
            .map(|v| v.value)
            .next())
    }

    /// One resource's part of kubelet's `resizeContainers`: a larger pod limit and
    /// request first, then the containers in order, then a smaller request and limit.
    async fn resize_resource(
        &self,
        pod: &Pod,
        step: &Step<'_>,
        updates: &[ContainerUpdate],
    ) -> Result<(), ResizeError> {
        let ((cur_lim, new_lim), (cur_req, new_req)) = (step.limit, step.request);
        if new_lim > cur_lim {
            self.set_pod_cgroup(pod, step, true)?;
        }
        if new_req > cur_req {
            self.set_pod_cgroup(pod, step, false)?;
        }
        for u in updates {
            self.update_container(pod, step.resource, u).await?;
        }
        if new_req < cur_req {
            self.set_pod_cgroup(pod, step, false)?;
        }
        if new_lim < cur_lim {
            self.set_pod_cgroup(pod, step, true)?;
        }
        Ok(())
    }

    /// kubelet's `setPodCgroupConfig`: the limit (cpu quota and period, memory limit)
    /// or the request (cpu shares; memory requests are not written) of the pod cgroup.
    fn set_pod_cgroup(&self, pod: &Pod, step: &Step<'_>, limit: bool) -> Result<(), ResizeError> {
        let (Some(cm), Some(t)) = (self.cgroups, step.target) else {
            return Ok(());
        };
        let config = match (step.resource, limit) {
            (Resource::Cpu, true) => ResourceConfig {
                cpu_quota: t.cpu_quota,
                cpu_period: t.cpu_period,
                ..Default::default()
            },
            (Resource::Cpu, false) => ResourceConfig {
                cpu_shares: t.cpu_shares,
                ..Default::default()
            },
            (Resource::Memory, true) => ResourceConfig {
                memory_limit: t.memory_limit,
                ..Default::default()
            },
            (Resource::Memory, false) => return Ok(()),
        };
        if config == ResourceConfig::default() {
            return Ok(());
        }
        Ok(cm.set_pod_cgroup_limits(pod, &config)?)
    }

    /// kubelet's `updateContainerResources` for one resource of one container: the
    /// other resource stays as the runtime has it; the hooks see the resources first;
    /// what the runtime took is recorded as actuated.
    async fn update_container(
        &self,
        pod: &Pod,
        resource: Resource,
        u: &ContainerUpdate,
    ) -> Result<(), ResizeError> {
        let Some(spec) = spec_container(pod, &u.name, u.init) else {
            return Ok(());
        };
        let sent = u.current.with(resource, &u.desired);
        let mut c = spec.clone();
        c.resources = Some(sent.apply_to(spec.resources.as_ref()));
        let env = self.env;
        let oom = crate::cm::clamp_oom_score_adj(
            crate::cm::container_oom_score_adj(pod, &c, env.node_memory_bytes),
            env.min_oom_score_adj,
        );
        let mut res =
            super::container::container_resources(pod, &c, oom, env.cfs_period_us, &env.memory)
                .map_err(|source| ResizeError::Resources {
                    container: u.name.clone(),
                    source,
                })?;
        self.hooks.pre_update(pod, &c, &mut res);
        let policy = if restarts_for(spec, resource) {
            "RestartContainer"
        } else {
            "NotRequired"
        };
        log_update(pod, u, resource, policy);
        (self.cri.update_container_resources(&u.id, res).await).map_err(|source| {
            ResizeError::UpdateContainer {
                container: u.name.clone(),
                source,
            }
        })?;
        let actuated = if sent == u.desired {
            spec.resources.clone().unwrap_or_default()
        } else {
            sent.apply_to(spec.resources.as_ref())
        };
        record(self.actuated, pod, &u.name, actuated);
        Ok(())
    }
}

/// One resource's pod cgroup values for a resize: (now, new) limit and request, and
/// the pod cgroup's target limits (None: no pod cgroup).
struct Step<'a> {
    resource: Resource,
    limit: (i64, i64),
    request: (i64, i64),
    target: Option<&'a ResourceConfig>,
}

/// Records what the runtime was given for a container (kubelet's
/// `SetActuatedResources`); a failed write is logged, and the next resize is then
/// compared against what the runtime reports.
pub(crate) fn record(
    state: Option<&ResourceState>,
    pod: &Pod,
    name: &str,
    resources: ResourceRequirements,
) {
    let Some(state) = state else {
        return;
    };
    if let Err(e) = state.set_container(pod_uid(pod), name, resources) {
        warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = name, error = %e, "cannot record the container's actuated resources");
    }
}

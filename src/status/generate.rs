//! Generating a pod's API status from its spec and the runtime's view, as kubelet
//! does: phase, conditions, container statuses, IPs, start time and QoS class.
//! Pure: where the status is written (our API, or the apiserver later) is elsewhere.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodSpec, PodStatus,
    VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::kuberuntime::is_sidecar;
use crate::kuberuntime::{self as rt, PodRuntimeStatus};
use crate::pod::{Phase, TerminatedReason, WaitingReason, container_should_restart};

/// What status generation needs besides the pod and the runtime view.
pub(crate) struct StatusInputs<'a> {
    pub pod: &'a Pod,
    pub runtime: &'a PodRuntimeStatus,
    /// The waiting reason recorded for a container (CrashLoopBackOff, ErrImagePull, …).
    pub waiting_reason: &'a dyn Fn(&str) -> Option<(WaitingReason, String)>,
    /// The status we reported last time (keeps startTime and transition times).
    pub old: Option<&'a PodStatus>,
    /// The node's InternalIPs, primary first (one per family): `hostIP` is the first,
    /// `hostIPs` all of them, as kubelet's `getHostIPsAnyWay` gives them.
    pub host_ips: &'a [String],
    /// The runtime's name for container IDs (`containerd://…`).
    pub runtime_name: &'a str,
    /// True once the pod is being terminated (then all-stopped means terminal).
    pub terminating: bool,
    pub now: jiff::Timestamp,
    /// A running container's (ready, started) from its probes, by spec and runtime
    /// ID; None when it has no readiness or startup probe.
    pub probed: &'a ProbedFn<'a>,
    /// Whether the pod's runtime handler supports recursive read-only mounts (the
    /// containers' `volumeMounts` statuses say which mounts are).
    pub supports_rro: bool,
    /// In-place resize: what the pod was admitted at, what the runtime was last given
    /// and the resize conditions; `None` for a pod the allocation manager never saw.
    pub resize: Option<&'a ResizeInputs>,
}

/// The allocation manager's view of a pod, for its status.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResizeInputs {
    pub allocated: Option<crate::allocation::PodResources>,
    pub actuated: Option<crate::allocation::PodResources>,
    /// `PodResizePending` and `PodResizeInProgress`, when set.
    pub conditions: Vec<PodCondition>,
}

/// A running container's (ready, started) from its probes (see `StatusInputs::probed`).
pub(crate) type ProbedFn<'a> = dyn Fn(&Container, &str) -> Option<(bool, bool)> + 'a;

/// CRI nanoseconds → API time at second precision (kubelet normalises to 1 s).
fn time_of(ns: i64) -> Option<Time> {
    (ns > 0)
        .then(|| jiff::Timestamp::from_second(ns / 1_000_000_000).ok())
        .flatten()
        .map(Time)
}

fn seconds(t: jiff::Timestamp) -> Time {
    Time(jiff::Timestamp::from_second(t.as_second()).unwrap_or(t))
}

fn terminated(c: &rt::ContainerStatus, runtime_name: &str) -> ContainerStateTerminated {
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: Some(c.terminated_reason().to_string()),
        message: (!c.message.is_empty()).then(|| c.message.clone()),
        started_at: time_of(c.started_at),
        finished_at: time_of(c.finished_at),
        container_id: Some(format!("{runtime_name}://{}", c.id)),
        signal: None,
    }
}

fn waiting(reason: Option<WaitingReason>, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: reason.map(|r| r.to_string()),
            message,
        }),
        ..Default::default()
    }
}

fn terminated_state(t: ContainerStateTerminated) -> ContainerState {
    ContainerState {
        terminated: Some(t),
        ..Default::default()
    }
}

fn is_running(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn is_terminated(s: &ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.terminated.is_some())
}

/// The state one runtime instance gives (kubelet's `convertContainerStatus`).
fn instance_state(
    c: &rt::ContainerStatus,
    old: Option<&ContainerStatus>,
    runtime_name: &str,
) -> (ContainerState, Option<i32>) {
    match c.state {
        rt::ContainerState::Running => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: time_of(c.started_at),
                }),
                ..Default::default()
            },
            None,
        ),
        rt::ContainerState::Exited => (terminated_state(terminated(c, runtime_name)), None),
        // It ran before and the runtime lost track of it: it ended, we do not know how.
        rt::ContainerState::Unknown if old.is_some_and(is_running) => (
            terminated_state(ContainerStateTerminated {
                exit_code: 137,
                reason: Some(TerminatedReason::ContainerStatusUnknown.to_string()),
                message: Some(
                    "The container could not be located when the pod was terminated".into(),
                ),
                ..Default::default()
            }),
            old.map(|o| o.restart_count + 1),
        ),
        // Created but not started: waiting to run, with no reason of its own.
        rt::ContainerState::Created | rt::ContainerState::Unknown => (waiting(None, None), None),
    }
}

/// True when a regular container of the pod has a runtime record (kubelet's
/// `HasAnyRegularContainerCreated`): the pod was initialized.
fn any_regular_created(inputs: &StatusInputs<'_>) -> bool {
    inputs
        .pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| inputs.runtime.latest(&c.name))
        .any(|c| c.state != rt::ContainerState::Unknown)
}

/// Which list a container is in and how it runs: a plain init container runs to
/// completion, while a sidecar (an init container restarted Always) runs like an app.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Regular,
    Init,
    Sidecar,
}

/// One container's API status (kubelet's `convertToAPIContainerStatuses` for one
/// container, plus the prober's ready/started).
fn container_status(
    spec: &Container,
    inputs: &StatusInputs<'_>,
    old: Option<&ContainerStatus>,
    default_waiting: WaitingReason,
    is_init: bool,
) -> ContainerStatus {
    let latest = inputs.runtime.latest(&spec.name);
    let previous = inputs.runtime.previous(&spec.name);
    let mut status = carried_over_status(spec, old, default_waiting);
    match latest {
        None => mark_lost_container(&mut status, old, default_waiting, inputs),
        Some(c) => {
            status = runtime_container_status(spec, c, previous, old, inputs.runtime_name);
            status.volume_mounts = volume_mount_statuses(spec, inputs.supports_rro);
        }
    }
    // A sidecar is never done: it runs again whenever it exits, whatever its code.
    let role = if !is_init {
        Role::Regular
    } else if is_sidecar(spec) {
        Role::Sidecar
    } else {
        Role::Init
    };
    apply_waiting_state(&mut status, spec, latest, role, inputs);
    update_ready_and_started(&mut status, spec, latest, role, inputs);
    apply_resources(&mut status, spec, old, inputs);
    status
}

/// Millicores as the API writes them (`NewMilliQuantity(v, DecimalSI)`): `1`, `250m`.
fn milli_quantity(milli: i64) -> Quantity {
    if milli % 1000 == 0 {
        Quantity((milli / 1000).to_string())
    } else {
        Quantity(format!("{milli}m"))
    }
}

/// kubelet's `allocatedResources` (the requests admission granted) and, for a running
/// container, `resources` (`convertContainerStatusResources`): cpu and memory as the
/// runtime was last given them, else as the container started with them.
fn apply_resources(
    status: &mut ContainerStatus,
    spec: &Container,
    old: Option<&ContainerStatus>,
    inputs: &StatusInputs<'_>,
) {
    let Some(resize) = inputs.resize else {
        return;
    };
    let allocated = (resize.allocated.as_ref())
        .and_then(|a| a.containers.get(&spec.name))
        .cloned();
    status.allocated_resources = allocated
        .as_ref()
        .and_then(|a| a.requests.clone())
        .or_else(|| old.and_then(|o| o.allocated_resources.clone()));
    if !is_running(status) {
        return;
    }
    let granted = allocated.unwrap_or_else(|| spec.resources.clone().unwrap_or_default());
    let actuated = (resize.actuated.as_ref()).and_then(|a| a.containers.get(&spec.name));
    // What the runtime reports of the running instance comes first (kubelet's
    // `cStatus.Resources`), as the API spells it.
    let reported = inputs
        .runtime
        .latest(&spec.name)
        .and_then(|c| c.resources.as_ref());
    let from_runtime = |limits: bool, name: &str| -> Option<Quantity> {
        let r = reported?;
        match (limits, name) {
            (true, "cpu") => r.cpu_limit_milli().map(milli_quantity),
            (true, "memory") => r
                .memory_limit()
                .map(|b| Quantity(crate::quantity::canonical(b, true))),
            (false, "cpu") => r.cpu_request_milli().map(milli_quantity),
            _ => None,
        }
    };
    // The old status's value while the same container runs; the granted one when it
    // has just started (kubelet's `determineResource`).
    let same_instance = old.is_some_and(|o| is_running(o) && o.container_id == status.container_id);
    let pick = |limits: bool, name: &str| {
        let list = |r: &k8s_openapi::api::core::v1::ResourceRequirements| {
            if limits {
                r.limits.clone()
            } else {
                r.requests.clone()
            }
        };
        if let Some(q) = from_runtime(limits, name) {
            return Some(q);
        }
        if let Some(q) = actuated.and_then(list).and_then(|l| l.get(name).cloned()) {
            return Some(q);
        }
        let from_old = old
            .and_then(|o| o.resources.as_ref())
            .and_then(list)
            .and_then(|l| l.get(name).cloned());
        if same_instance && from_old.is_some() {
            return from_old;
        }
        list(&granted).and_then(|l| l.get(name).cloned())
    };
    let mut out = k8s_openapi::api::core::v1::ResourceRequirements::default();
    for (limits, names) in [
        (true, ["cpu", "memory", "ephemeral-storage"]),
        (false, ["cpu", "memory", "ephemeral-storage"]),
    ] {
        let granted_list = if limits {
            &granted.limits
        } else {
            &granted.requests
        };
        let Some(granted_list) = granted_list else {
            continue;
        };
        let mut list = std::collections::BTreeMap::new();
        for name in names {
            if !granted_list.contains_key(name) {
                continue;
            }
            // Ephemeral storage is never resized: the spec's value stands.
            let q = if name == "ephemeral-storage" {
                granted_list.get(name).cloned()
            } else {
                pick(limits, name)
            };
            if let Some(q) = q {
                list.insert(name.to_owned(), q);
            }
        }
        if limits {
            out.limits = Some(list);
        } else {
            out.requests = Some(list);
        }
    }
    status.resources = Some(out);
}

/// The status while the runtime has no record of the container: waiting for the
/// default reason, or what we said before, which carries over until it has something newer.
fn carried_over_status(
    spec: &Container,
    old: Option<&ContainerStatus>,
    default_waiting: WaitingReason,
) -> ContainerStatus {
    let mut status = ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        state: Some(waiting(Some(default_waiting), None)),
        ..Default::default()
    };
    if let Some(o) = old {
        if is_terminated(o) {
            status = o.clone();
        } else {
            status.restart_count = o.restart_count;
            status.last_state = o.last_state.clone();
        }
    }
    status
}

/// kubelet's ContainerStatusUnknown for a container that was running and has no
/// runtime record now: say it ended, not that it never started.
fn mark_lost_container(
    status: &mut ContainerStatus,
    old: Option<&ContainerStatus>,
    default_waiting: WaitingReason,
    inputs: &StatusInputs<'_>,
) {
    let is_default = status
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .is_some_and(|w| w.reason.as_deref() == Some(default_waiting.as_str()));
    let has_last = status
        .last_state
        .as_ref()
        .is_some_and(|l| l.terminated.is_some());
    if old.is_some_and(is_running) && is_default && !has_last {
        status.last_state = Some(terminated_state(ContainerStateTerminated {
            exit_code: 137,
            reason: Some(TerminatedReason::ContainerStatusUnknown.to_string()),
            message: Some(
                "The container could not be located when the pod was deleted.  The container used to be Running"
                    .into(),
            ),
            ..Default::default()
        }));
        if inputs.pod.metadata.deletion_timestamp.is_none() {
            status.restart_count += 1;
        }
    }
}

/// The status from the runtime's latest and previous instances (kubelet's
/// `convertContainerStatus` for both), replacing anything said before.
fn runtime_container_status(
    spec: &Container,
    latest: &rt::ContainerStatus,
    previous: Option<&rt::ContainerStatus>,
    old: Option<&ContainerStatus>,
    runtime_name: &str,
) -> ContainerStatus {
    let (state, restarts) = instance_state(latest, old, runtime_name);
    ContainerStatus {
        name: spec.name.clone(),
        // The image as the runtime reports it (kubelet's `cs.Image`).
        image: if latest.image.is_empty() {
            spec.image.clone().unwrap_or_default()
        } else {
            latest.image.clone()
        },
        image_id: latest.image_ref.clone(),
        container_id: Some(format!("{runtime_name}://{}", latest.id)),
        restart_count: restarts.unwrap_or(latest.restart_count),
        state: Some(state),
        last_state: previous.map(|p| instance_state(p, None, runtime_name).0),
        user: latest.user.as_ref().map(api_user),
        ..Default::default()
    }
}

/// kubelet's `volumeMounts` in a created container's status: each mount, and for a
/// read-only one whether it is recursively so (as `resolveRecursiveReadOnly` decided
/// when the container was made; a mount that could not be resolved never made one).
fn volume_mount_statuses(spec: &Container, supports_rro: bool) -> Option<Vec<VolumeMountStatus>> {
    let mounts = spec.volume_mounts.as_deref().filter(|m| !m.is_empty())?;
    Some(
        (mounts.iter())
            .map(|m| {
                let read_only = m.read_only == Some(true);
                let rro = read_only.then(|| {
                    match crate::volumes::resolve_recursive_read_only(m, supports_rro) {
                        Ok(true) => "Enabled",
                        _ => "Disabled",
                    }
                    .to_string()
                });
                VolumeMountStatus {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: m.read_only.filter(|r| *r),
                    recursive_read_only: rro,
                    volume_status: None,
                }
            })
            .collect(),
    )
}

/// kubelet's `convertContainerStatusUser` (SupplementalGroupsPolicy, on by default since
/// 1.33): the identity the runtime reports the process runs as.
fn api_user(u: &rt::ContainerUser) -> k8s_openapi::api::core::v1::ContainerUser {
    k8s_openapi::api::core::v1::ContainerUser {
        linux: Some(k8s_openapi::api::core::v1::LinuxContainerUser {
            uid: u.uid,
            gid: u.gid,
            supplemental_groups: Some(u.supplemental_groups.clone()),
        }),
    }
}

/// kubelet's waiting states over the runtime's view: a vanished init container of an
/// initialized pod completed; one to be (re)started waits with the recorded reason.
fn apply_waiting_state(
    status: &mut ContainerStatus,
    spec: &Container,
    latest: Option<&rt::ContainerStatus>,
    role: Role,
    inputs: &StatusInputs<'_>,
) {
    let waiting_now = status.state.as_ref().is_some_and(|s| s.waiting.is_some());
    let init_done = role == Role::Init
        && latest.is_some_and(|c| c.state == rt::ContainerState::Exited && c.exit_code == 0);
    let restarts = if role == Role::Sidecar {
        inputs.pod.metadata.deletion_timestamp.is_none()
            && latest.is_none_or(|c| c.state != rt::ContainerState::Running)
    } else {
        crate::kuberuntime::should_restart(inputs.pod, spec, latest)
    };
    if role == Role::Init
        && !init_done
        && latest.is_none()
        && waiting_now
        && any_regular_created(inputs)
    {
        // Its record was garbage-collected after the app containers were created:
        // it completed.
        status.state = Some(terminated_state(ContainerStateTerminated {
            exit_code: 0,
            reason: Some(TerminatedReason::Completed.to_string()),
            message: Some(
                "Unable to get init container status from container runtime and pod has been initialized, treat it as exited normally"
                    .into(),
            ),
            ..Default::default()
        }));
    } else if !init_done
        && !inputs.terminating
        && restarts
        && let Some((reason, message)) = (inputs.waiting_reason)(&spec.name)
    {
        // Waiting to be (re)started: say why, and keep what happened last.
        if is_terminated(status) {
            status.last_state = status.state.take();
        }
        status.state = Some(waiting(Some(reason), Some(message)));
    }
}

/// The prober manager's `UpdatePodStatus`: ready and started from the probes, with
/// kubelet's defaults where there are none.
fn update_ready_and_started(
    status: &mut ContainerStatus,
    spec: &Container,
    latest: Option<&rt::ContainerStatus>,
    role: Role,
    inputs: &StatusInputs<'_>,
) {
    // Without probes, a running app container or sidecar is ready and started; an
    // init container is ready once it completed.
    let running = is_running(status);
    status.started = Some(running);
    status.ready = if role == Role::Init {
        status
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    } else {
        running
    };
    if running
        && let Some(c) = latest
        && let Some((ready, started)) = (inputs.probed)(spec, &c.id)
    {
        status.ready = ready;
        status.started = Some(started);
    }
}

/// kubelet's `getPhase` over generated container statuses. Whether a stopped
/// container counts as restarting is the container's own call: its restart rules
/// and policy, else the pod's (`container_should_restart`).
pub(crate) fn pod_phase(
    pod: &Pod,
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
    terminating: bool,
) -> Phase {
    let empty = PodSpec::default();
    let spec = pod.spec.as_ref().unwrap_or(&empty);
    let restarts = |list: &[Container], name: &str, code: i32| {
        list.iter()
            .find(|c| c.name == name)
            .is_some_and(|c| container_should_restart(c, spec, code))
    };
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    let sidecars = sidecar_names(pod);
    let mut counts = PhaseCounts::default();
    counts.count_sidecars(init.iter().filter(|s| sidecars.contains(&s.name.as_str())));
    counts.count_init_containers(
        init.iter().filter(|s| !sidecars.contains(&s.name.as_str())),
        &|name, code| restarts(inits, name, code),
    );
    let initialized = regular.iter().any(|s| {
        is_running(s)
            || is_terminated(s)
            || s.last_state
                .as_ref()
                .is_some_and(|l| l.terminated.is_some())
    });
    counts.count_regular(regular, &|name, code| {
        restarts(&spec.containers, name, code)
    });
    counts.phase(initialized, terminating)
}

/// Says whether the container of that name restarts after that exit code.
type Restarts<'a> = dyn Fn(&str, i32) -> bool + 'a;

/// The container tallies `getPhase` decides on.
#[derive(Default)]
struct PhaseCounts {
    pending_init: u32,
    /// Init containers whose last exit failed and that will not run again.
    failed_init_for_good: u32,
    unknown: u32,
    running: u32,
    waiting: u32,
    stopped: u32,
    /// Stopped containers that will not run again.
    stopped_for_good: u32,
    succeeded: u32,
    /// Sidecars not started yet: they hold the pod Pending until it was initialized.
    pending_sidecars: u32,
}

impl PhaseCounts {
    /// Sidecars count as running while they run and are ignored once they stopped;
    /// one that has not started yet holds the pod Pending until it was initialized.
    fn count_sidecars<'a>(&mut self, sidecars: impl Iterator<Item = &'a ContainerStatus>) {
        for s in sidecars {
            let st = s.state.as_ref();
            if st.is_some_and(|st| st.running.is_some()) {
                if s.started != Some(true) {
                    self.pending_sidecars += 1;
                }
                self.running += 1;
            } else if st.is_some_and(|st| st.terminated.is_some()) {
                // A stopped sidecar does not count towards the phase.
            } else if st.is_some_and(|st| st.waiting.is_some()) {
                if s.last_state
                    .as_ref()
                    .and_then(|l| l.terminated.as_ref())
                    .is_none()
                {
                    self.pending_sidecars += 1;
                    self.waiting += 1;
                }
            } else {
                self.unknown += 1;
            }
        }
    }

    /// Plain init containers: pending until they exit; one whose last exit was
    /// not 0 and that will not run again fails the pod.
    fn count_init_containers<'a>(
        &mut self,
        inits: impl Iterator<Item = &'a ContainerStatus>,
        restarts: &Restarts<'_>,
    ) {
        for s in inits {
            let st = s.state.as_ref();
            let failed_with = |code: i32| u32::from(code != 0 && !restarts(&s.name, code));
            if st.is_some_and(|st| st.running.is_some()) {
                self.pending_init += 1;
            } else if let Some(t) = st.and_then(|st| st.terminated.as_ref()) {
                self.failed_init_for_good += failed_with(t.exit_code);
            } else if st.is_some_and(|st| st.waiting.is_some()) {
                match s.last_state.as_ref().and_then(|l| l.terminated.as_ref()) {
                    Some(t) => self.failed_init_for_good += failed_with(t.exit_code),
                    None => self.pending_init += 1,
                }
            } else {
                self.pending_init += 1;
            }
        }
    }

    /// App containers: running, stopped (and whether successfully) or waiting; one
    /// waiting after it ran counts as stopped.
    fn count_regular(&mut self, regular: &[ContainerStatus], restarts: &Restarts<'_>) {
        for s in regular {
            let Some(st) = s.state.as_ref() else {
                self.unknown += 1;
                continue;
            };
            let last_exit = s.last_state.as_ref().and_then(|l| l.terminated.as_ref());
            let stopped_code = if st.running.is_some() {
                self.running += 1;
                None
            } else if let Some(t) = &st.terminated {
                self.succeeded += u32::from(t.exit_code == 0);
                Some(t.exit_code)
            } else if st.waiting.is_some() {
                self.waiting += u32::from(last_exit.is_none());
                last_exit.map(|t| t.exit_code)
            } else {
                self.unknown += 1;
                None
            };
            if let Some(code) = stopped_code {
                self.stopped += 1;
                self.stopped_for_good += u32::from(!restarts(&s.name, code));
            }
        }
    }

    /// `getPhase`'s decision over the tallies.
    fn phase(&self, initialized: bool, terminating: bool) -> Phase {
        if self.failed_init_for_good > 0 {
            return Phase::Failed;
        }
        if self.pending_init > 0 || (self.pending_sidecars > 0 && !initialized) || self.waiting > 0
        {
            return Phase::Pending;
        }
        if self.running > 0 && self.unknown == 0 {
            return Phase::Running;
        }
        if self.running == 0 && self.stopped > 0 && self.unknown == 0 {
            if terminating {
                return if self.stopped == self.succeeded {
                    Phase::Succeeded
                } else {
                    Phase::Failed
                };
            }
            // At least one of them will run again.
            if self.stopped != self.stopped_for_good {
                return Phase::Running;
            }
            return if self.stopped == self.succeeded {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        Phase::Pending
    }
}

/// Condition types kubelet owns (it regenerates them; any other condition in the
/// pod's status is someone else's and is kept).
const KUBELET_CONDITIONS: [&str; 7] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
    "PodResizePending",
    "PodResizeInProgress",
];

fn condition(
    kind: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    inputs: &StatusInputs<'_>,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    // The transition time moves only when the condition's status changes.
    let last = inputs
        .old
        .and_then(|o| o.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == kind))
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone());
    PodCondition {
        type_: kind.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: Some(last.unwrap_or_else(|| seconds(inputs.now))),
        last_probe_time: None,
        observed_generation: observed_generation(inputs.pod),
    }
}

/// The pod generation a status or condition was computed from (PodObservedGeneration
/// Tracking, GA in 1.35, so always): `metadata.generation`, left out while it is 0
/// (a static pod from a file has none).
fn observed_generation(pod: &Pod) -> Option<i64> {
    pod.metadata.generation.filter(|g| *g != 0)
}

/// kubelet's status manager for a pod it holds no status for (a static pod after a
/// restart): the mirror pod's status is the old one, so each condition whose status
/// is unchanged keeps its transition time, and the start time is kept. Nothing else
/// is taken from it: a static pod's mirror may describe an earlier life of its UID.
pub(crate) fn keep_times_from(status: &mut PodStatus, previous: &PodStatus) {
    for c in status.conditions.iter_mut().flatten() {
        if let Some(t) = previous
            .conditions
            .iter()
            .flatten()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
            .and_then(|p| p.last_transition_time.clone())
        {
            c.last_transition_time = Some(t);
        }
    }
    if previous.start_time.is_some() {
        status.start_time = previous.start_time.clone();
    }
}

/// Go's `%s` of a string slice: `[a b]`.
fn go_list(names: &[&str]) -> String {
    format!("[{}]", names.join(" "))
}

/// kubelet's `GeneratePodInitializedCondition`.
fn initialized_condition(
    pod: &Pod,
    init_statuses: &[ContainerStatus],
    regular: &[ContainerStatus],
    phase: Phase,
    inputs: &StatusInputs<'_>,
) -> PodCondition {
    let kind = "Initialized";
    if phase == Phase::Succeeded {
        return condition(kind, true, Some("PodCompleted"), None, inputs);
    }
    let has_inits = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.init_containers.as_ref().is_some_and(|i| !i.is_empty()));
    // A regular container that ran means the pod was initialized before.
    if !has_inits || regular.iter().any(|s| is_running(s) || is_terminated(s)) {
        return condition(kind, true, None, None, inputs);
    }
    // A regular init container is complete once it succeeded (ready), a sidecar once
    // it started.
    let sidecars = sidecar_names(pod);
    let incomplete: Vec<&str> = init_statuses
        .iter()
        .filter(|s| {
            if sidecars.contains(&s.name.as_str()) {
                s.started != Some(true)
            } else {
                !s.ready
            }
        })
        .map(|s| s.name.as_str())
        .collect();
    if incomplete.is_empty() {
        return condition(kind, true, None, None, inputs);
    }
    condition(
        kind,
        false,
        Some("ContainersNotInitialized"),
        Some(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        )),
        inputs,
    )
}

/// The names of the pod's sidecars, in spec order.
fn sidecar_names(pod: &Pod) -> Vec<&str> {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| is_sidecar(c))
        .map(|c| c.name.as_str())
        .collect()
}

/// kubelet's `GenerateContainersReadyCondition`: sidecars first, then the app
/// containers.
fn containers_ready_condition(
    pod: &Pod,
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
    phase: Phase,
    inputs: &StatusInputs<'_>,
) -> PodCondition {
    let kind = "ContainersReady";
    match phase {
        Phase::Succeeded => return condition(kind, false, Some("PodCompleted"), None, inputs),
        Phase::Failed => return condition(kind, false, Some("PodFailed"), None, inputs),
        _ => {}
    }
    let sidecars = sidecar_names(pod);
    let unready: Vec<&str> = init
        .iter()
        .filter(|s| sidecars.contains(&s.name.as_str()))
        .chain(regular)
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    if unready.is_empty() {
        return condition(kind, true, None, None, inputs);
    }
    condition(
        kind,
        false,
        Some("ContainersNotReady"),
        Some(format!(
            "containers with unready status: {}",
            go_list(&unready)
        )),
        inputs,
    )
}

/// kubelet's `GeneratePodReadyCondition`: ContainersReady, and every readiness gate's
/// condition True.
fn ready_condition(
    pod: &Pod,
    containers_ready: &PodCondition,
    others: &[PodCondition],
    inputs: &StatusInputs<'_>,
) -> PodCondition {
    let kind = "Ready";
    if containers_ready.status != "True" {
        return condition(
            kind,
            false,
            containers_ready.reason.as_deref(),
            containers_ready.message.clone(),
            inputs,
        );
    }
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or_default();
    let unready: Vec<String> = gates
        .iter()
        .filter_map(|g| {
            let t = &g.condition_type;
            match others.iter().find(|c| &c.type_ == t) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{t}\" does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate \"{t}\" is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    if unready.is_empty() {
        condition(kind, true, None, None, inputs)
    } else {
        condition(
            kind,
            false,
            Some("ReadinessGatesNotReady"),
            Some(unready.join(", ")),
            inputs,
        )
    }
}

fn old_of<'a>(list: Option<&'a Vec<ContainerStatus>>, name: &str) -> Option<&'a ContainerStatus> {
    list.and_then(|l| l.iter().find(|c| c.name == name))
}

/// The whole API status (kubelet's `generateAPIPodStatus`).
pub(crate) fn generate_pod_status(inputs: &StatusInputs<'_>) -> PodStatus {
    let pod = inputs.pod;
    let (init_statuses, statuses) = container_statuses(inputs);
    let ephemeral_statuses = ephemeral_container_statuses(inputs);
    let phase = generate_phase(inputs, &init_statuses, &statuses);
    // The reason and message belong to the phase: kept while it stays.
    let (reason, message) = match inputs.old {
        Some(o) if o.phase.as_deref() == Some(phase.as_str()) => {
            (o.reason.clone(), o.message.clone())
        }
        _ => (None, None),
    };
    let conditions = pod_conditions(inputs, &init_statuses, &statuses, phase);

    let host_network = crate::pod::is_host_network(pod);
    let ips: Vec<String> = if host_network {
        inputs.host_ips.to_vec()
    } else {
        inputs.runtime.ips.clone()
    };
    let start_time = inputs
        .old
        .and_then(|o| o.start_time.clone())
        .unwrap_or_else(|| seconds(inputs.now));
    let mut status = PodStatus {
        phase: Some(phase.to_string()),
        reason,
        message,
        conditions: Some(conditions),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ephemeral_container_statuses: (!ephemeral_statuses.is_empty())
            .then_some(ephemeral_statuses),
        host_ip: inputs.host_ips.first().cloned(),
        host_ips: Some(
            (inputs.host_ips.iter())
                .map(|ip| HostIP { ip: ip.clone() })
                .collect(),
        ),
        pod_ip: ips.first().cloned(),
        pod_ips: (!ips.is_empty()).then(|| ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: Some(start_time),
        qos_class: Some(crate::cm::QosClass::of(pod).as_str().to_string()),
        observed_generation: observed_generation(pod),
        ..Default::default()
    };
    apply_pod_level_resources(&mut status, inputs);
    // kubelet's status manager caps termination messages per pod (12 KiB in all).
    crate::kuberuntime::cap_pod_messages(pod, &mut status);
    status
}

/// A pod with its own resources (`spec.resources`) reports them as granted
/// (`allocatedResources`, the requests) and as its pod cgroup was last given
/// (`resources`; the grant until the runtime side has a record).
fn apply_pod_level_resources(status: &mut PodStatus, inputs: &StatusInputs<'_>) {
    let spec_level = inputs.pod.spec.as_ref().and_then(|s| s.resources.as_ref());
    let (Some(spec_level), Some(resize)) = (spec_level, inputs.resize) else {
        return;
    };
    let granted = (resize.allocated.as_ref())
        .and_then(|a| a.pod_level.clone())
        .unwrap_or_else(|| spec_level.clone());
    let given = (resize.actuated.as_ref()).and_then(|a| a.pod_level.clone());
    status.allocated_resources = granted.requests.clone();
    status.resources = Some(given.unwrap_or(granted));
}

/// What a container with no runtime record waits as: every container of a pod with init
/// containers waits as PodInitializing (kubelet's `hasInitContainers`), else
/// ContainerCreating.
fn default_waiting(pod: &Pod) -> WaitingReason {
    let has_inits = (pod.spec.as_ref())
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|i| !i.is_empty());
    if has_inits {
        WaitingReason::PodInitializing
    } else {
        WaitingReason::ContainerCreating
    }
}

/// kubelet's `convertToAPIContainerStatuses` for both lists: the init containers' in
/// spec order, then the regular ones sorted by name.
fn container_statuses(inputs: &StatusInputs<'_>) -> (Vec<ContainerStatus>, Vec<ContainerStatus>) {
    let spec = inputs.pod.spec.as_ref();
    let inits = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let default_waiting = default_waiting(inputs.pod);
    // Init container statuses stay in spec order.
    let init_statuses: Vec<ContainerStatus> = inits
        .iter()
        .map(|c| {
            let old = old_of(
                inputs.old.and_then(|o| o.init_container_statuses.as_ref()),
                &c.name,
            );
            container_status(c, inputs, old, default_waiting, true)
        })
        .collect();
    // Regular ones are sorted by name (kubelet's `SortedContainerStatuses`).
    let mut statuses: Vec<ContainerStatus> = containers
        .iter()
        .map(|c| {
            let old = old_of(
                inputs.old.and_then(|o| o.container_statuses.as_ref()),
                &c.name,
            );
            container_status(c, inputs, old, default_waiting, false)
        })
        .collect();
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    (init_statuses, statuses)
}

/// kubelet's `convertToAPIContainerStatuses` for the ephemeral containers: as regular
/// ones, sorted by name, but the prober never sees them, so they are not ready and say
/// nothing of being started. They count for neither the phase nor the conditions.
fn ephemeral_container_statuses(inputs: &StatusInputs<'_>) -> Vec<ContainerStatus> {
    let spec = inputs.pod.spec.as_ref();
    let default_waiting = default_waiting(inputs.pod);
    let olds = inputs
        .old
        .and_then(|o| o.ephemeral_container_statuses.as_ref());
    let mut statuses: Vec<ContainerStatus> = (spec.and_then(|s| s.ephemeral_containers.as_ref()))
        .into_iter()
        .flatten()
        .map(|ec| {
            let c = crate::kuberuntime::ephemeral_as_container(ec);
            let mut status =
                container_status(&c, inputs, old_of(olds, &c.name), default_waiting, false);
            status.ready = false;
            status.started = None;
            status
        })
        .collect();
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    statuses
}

/// The phase from the container statuses, except that a terminal phase, once reported
/// by us or found in the API, is never left again.
fn generate_phase(
    inputs: &StatusInputs<'_>,
    init_statuses: &[ContainerStatus],
    statuses: &[ContainerStatus],
) -> Phase {
    let pod = inputs.pod;
    let parsed = |s: Option<&PodStatus>| s.and_then(|s| s.phase.as_deref()?.parse::<Phase>().ok());
    let old_phase = parsed(inputs.old);
    let api_phase = parsed(pod.status.as_ref());
    let mut phase = pod_phase(pod, init_statuses, statuses, inputs.terminating);
    // A terminal phase is never left again.
    if !phase.is_terminal()
        && let Some(p) = [old_phase, api_phase]
            .into_iter()
            .flatten()
            .find(|p| p.is_terminal())
    {
        phase = p;
    }
    phase
}

/// The pod's conditions: those kubelet does not own, kept as they are, then kubelet's
/// own in the order `generateAPIPodStatus` appends them.
fn pod_conditions(
    inputs: &StatusInputs<'_>,
    init_statuses: &[ContainerStatus],
    statuses: &[ContainerStatus],
    phase: Phase,
) -> Vec<PodCondition> {
    let pod = inputs.pod;
    let mut conditions = kept_conditions(inputs);
    let sandbox_ready = inputs
        .runtime
        .sandboxes
        .first()
        .is_some_and(|s| s.ready && (s.host_network || !s.ips.is_empty()));
    let containers_ready = containers_ready_condition(pod, init_statuses, statuses, phase, inputs);
    let ready = ready_condition(pod, &containers_ready, &conditions, inputs);
    // kubelet's resize conditions come first among its own, and go once the pod ends.
    if !phase.is_terminal()
        && let Some(resize) = inputs.resize
    {
        conditions.extend(resize.conditions.iter().cloned());
    }
    conditions.push(condition(
        "PodReadyToStartContainers",
        sandbox_ready,
        None,
        None,
        inputs,
    ));
    conditions.push(initialized_condition(
        pod,
        init_statuses,
        statuses,
        phase,
        inputs,
    ));
    conditions.push(ready);
    conditions.push(containers_ready);
    conditions.push(condition("PodScheduled", true, None, None, inputs));
    conditions
}

/// Conditions kubelet does not own are kept (they may be readiness gates); so is a
/// DisruptionTarget set when the pod was evicted.
fn kept_conditions(inputs: &StatusInputs<'_>) -> Vec<PodCondition> {
    let mut conditions: Vec<PodCondition> = inputs
        .pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| !KUBELET_CONDITIONS.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    if let Some(d) = inputs
        .old
        .and_then(|o| o.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
    {
        conditions.retain(|c| c.type_ != "DisruptionTarget");
        conditions.push(d.clone());
    }
    conditions
}

/// How kubelet's `rejectPod` starts the message of a pod rejected at admission.
const REJECTED_PREFIX: &str = "Pod was rejected: ";

/// Whether `status` is one [`rejected`] made (whatever the admission handler's reason).
pub(crate) fn was_rejected(status: &PodStatus) -> bool {
    status.phase.as_deref() == Some("Failed")
        && status
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with(REJECTED_PREFIX))
}

/// The status of a pod rejected at admission (kubelet's `rejectPod`): Failed with
/// the reason and `Pod was rejected: <message>`, its QoS class, and the start time
/// the status manager gives every pod it records.
pub(crate) fn rejected(pod: &Pod, reason: &str, message: &str, now: jiff::Timestamp) -> PodStatus {
    PodStatus {
        phase: Some(Phase::Failed.to_string()),
        reason: Some(reason.to_string()),
        message: Some(format!("{REJECTED_PREFIX}{message}")),
        qos_class: Some(crate::cm::QosClass::of(pod).as_str().to_string()),
        start_time: Some(seconds(now)),
        observed_generation: observed_generation(pod),
        ..Default::default()
    }
}

#[cfg(test)]
mod exit_reason_tests {
    use super::*;

    fn exited(exit_code: i32, reason: &str, message: &str) -> rt::ContainerStatus {
        rt::ContainerStatus {
            id: "abc".into(),
            name: "app".into(),
            state: rt::ContainerState::Exited,
            created_at: 1_000_000_000,
            started_at: 2_000_000_000,
            finished_at: 5_500_000_000,
            exit_code,
            image: String::new(),
            image_ref: String::new(),
            reason: reason.into(),
            message: message.into(),
            hash: 0,
            restart_count: 0,
            is_init: false,
            user: None,
            resources: None,
        }
    }

    /// kubelet's `convertContainerStatus`: the runtime's reason as it gives it
    /// (OOMKilled, StartError, ContainerCannotRun, …), else Completed/Error by code;
    /// times at second precision; no signal (the CRI reports none).
    #[test]
    fn runtime_reasons_pass_through_else_completed_or_error() {
        for (code, runtime_reason, want) in [
            (0, "", TerminatedReason::Completed.as_str()),
            (1, "", TerminatedReason::Error.as_str()),
            (143, "", TerminatedReason::Error.as_str()),
            (137, "OOMKilled", TerminatedReason::OomKilled.as_str()),
            (128, "StartError", TerminatedReason::StartError.as_str()),
            (
                128,
                "ContainerCannotRun",
                TerminatedReason::ContainerCannotRun.as_str(),
            ),
        ] {
            let t = terminated(&exited(code, runtime_reason, ""), "containerd");
            assert_eq!(t.reason.as_deref(), Some(want), "{code} {runtime_reason:?}");
            assert_eq!(t.exit_code, code);
            assert_eq!(t.signal, None);
            assert_eq!(t.container_id.as_deref(), Some("containerd://abc"));
            assert_eq!(t.started_at.unwrap().0.as_second(), 2);
            assert_eq!(t.finished_at.unwrap().0.as_second(), 5);
        }
        let t = terminated(
            &exited(
                128,
                "StartError",
                "exec: \"nope\": executable file not found",
            ),
            "containerd",
        );
        assert_eq!(
            t.message.as_deref(),
            Some("exec: \"nope\": executable file not found")
        );
        assert_eq!(terminated(&exited(0, "", ""), "c").message, None);
    }
}

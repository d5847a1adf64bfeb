//! Generating a pod's API status from its spec and the runtime's view, as kubelet
//! does: phase, conditions, container statuses, IPs, start time and QoS class.
//! Pure: where the status is written (our API, or the apiserver later) is elsewhere.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::runtime::types::{self as rt, PodRuntimeStatus};

/// What status generation needs besides the pod and the runtime view.
pub struct StatusInputs<'a> {
    pub pod: &'a Pod,
    pub runtime: &'a PodRuntimeStatus,
    /// The waiting reason recorded for a container (CrashLoopBackOff, ErrImagePull, …).
    pub waiting_reason: &'a dyn Fn(&str) -> Option<(String, String)>,
    /// The status we reported last time (keeps startTime and transition times).
    pub old: Option<&'a PodStatus>,
    pub host_ip: &'a str,
    /// The runtime's name for container IDs (`containerd://…`).
    pub runtime_name: &'a str,
    /// True once the pod is being terminated (then all-stopped means terminal).
    pub terminating: bool,
    pub now: jiff::Timestamp,
}

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
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    ContainerStateTerminated {
        exit_code: c.exit_code,
        reason: Some(reason),
        message: (!c.message.is_empty()).then(|| c.message.clone()),
        started_at: time_of(c.started_at),
        finished_at: time_of(c.finished_at),
        container_id: Some(format!("{runtime_name}://{}", c.id)),
        signal: None,
    }
}

/// The `lastState` an earlier, exited instance gives.
fn last_terminated(
    previous: Option<&rt::ContainerStatus>,
    runtime_name: &str,
) -> Option<ContainerState> {
    previous
        .filter(|p| p.state == rt::ContainerState::Exited)
        .map(|p| ContainerState {
            terminated: Some(terminated(p, runtime_name)),
            ..Default::default()
        })
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_string()),
            message,
        }),
        ..Default::default()
    }
}

/// One container's API status.
fn container_status(
    spec: &Container,
    inputs: &StatusInputs<'_>,
    default_waiting: &str,
) -> ContainerStatus {
    let latest = inputs.runtime.latest(&spec.name);
    let previous = inputs.runtime.previous(&spec.name);
    let id = |c: &rt::ContainerStatus| format!("{}://{}", inputs.runtime_name, c.id);
    let mut status = ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        image_id: String::new(),
        restart_count: latest.map(|c| c.restart_count).unwrap_or(0),
        ready: false,
        started: Some(false),
        ..Default::default()
    };
    let cached = (inputs.waiting_reason)(&spec.name);
    match latest {
        None => {
            let (reason, msg) =
                cached.map_or((default_waiting.to_string(), None), |(r, m)| (r, Some(m)));
            status.state = Some(waiting(&reason, msg));
            // Keep what we reported about an earlier instance that the runtime no longer has.
            status.last_state = inputs.old.and_then(|o| {
                o.container_statuses
                    .iter()
                    .flatten()
                    .find(|c| c.name == spec.name)
                    .and_then(|c| c.last_state.clone())
            });
        }
        Some(c) => {
            status.container_id = Some(id(c));
            status.image_id = c.image_ref.clone();
            match c.state {
                rt::ContainerState::Running => {
                    status.state = Some(ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: time_of(c.started_at),
                        }),
                        ..Default::default()
                    });
                    status.ready = true;
                    status.started = Some(true);
                    status.last_state = last_terminated(previous, inputs.runtime_name);
                }
                rt::ContainerState::Exited => {
                    let term = ContainerState {
                        terminated: Some(terminated(c, inputs.runtime_name)),
                        ..Default::default()
                    };
                    match cached {
                        // Waiting to be restarted: show why, and what happened last.
                        Some((reason, msg)) if !inputs.terminating => {
                            status.state = Some(waiting(&reason, Some(msg)));
                            status.last_state = Some(term);
                        }
                        _ => {
                            status.state = Some(term);
                            status.last_state = last_terminated(previous, inputs.runtime_name);
                        }
                    }
                }
                rt::ContainerState::Created | rt::ContainerState::Unknown => {
                    let (reason, msg) =
                        cached.map_or((default_waiting.to_string(), None), |(r, m)| (r, Some(m)));
                    status.state = Some(waiting(&reason, msg));
                }
            }
        }
    }
    status
}

/// kubelet's `getPhase` over generated container statuses.
pub fn pod_phase(
    pod: &Pod,
    init: &[ContainerStatus],
    regular: &[ContainerStatus],
    terminating: bool,
) -> &'static str {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let mut pending_init = 0;
    let mut failed_init = 0;
    for s in init {
        let st = s.state.as_ref();
        match st.and_then(|s| s.terminated.as_ref()) {
            Some(t) if t.exit_code == 0 => {}
            Some(_) => failed_init += 1,
            None => {
                let last_failed = s
                    .last_state
                    .as_ref()
                    .and_then(|l| l.terminated.as_ref())
                    .is_some_and(|t| t.exit_code != 0);
                if last_failed {
                    failed_init += 1;
                } else {
                    pending_init += 1;
                }
            }
        }
    }
    if failed_init > 0 && policy == "Never" {
        return "Failed";
    }
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for s in regular {
        let Some(st) = s.state.as_ref() else {
            unknown += 1;
            continue;
        };
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = &st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            if s.last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
            {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    if pending_init > 0 || failed_init > 0 {
        return "Pending";
    }
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if terminating {
            return if stopped == succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        return match policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        };
    }
    "Pending"
}

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
        ..Default::default()
    }
}

/// The whole API status.
pub fn generate(inputs: &StatusInputs<'_>) -> PodStatus {
    let pod = inputs.pod;
    let spec = pod.spec.as_ref();
    let inits = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let containers = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let init_statuses: Vec<ContainerStatus> = inits
        .iter()
        .map(|c| container_status(c, inputs, "PodInitializing"))
        .collect();
    let inits_done = init_statuses.iter().all(|s| {
        s.state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    });
    let default_waiting = if inits_done {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    let statuses: Vec<ContainerStatus> = containers
        .iter()
        .map(|c| container_status(c, inputs, default_waiting))
        .collect();
    let old_phase = inputs.old.and_then(|o| o.phase.as_deref());
    let mut phase = pod_phase(pod, &init_statuses, &statuses, inputs.terminating);
    // A terminal phase is never left again.
    if let Some(p @ ("Succeeded" | "Failed")) = old_phase {
        phase = if p == "Succeeded" {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    let completed = phase == "Succeeded" || phase == "Failed";

    let sandbox_ready = inputs
        .runtime
        .sandboxes
        .first()
        .is_some_and(|s| s.ready && (s.host_network || !s.ips.is_empty()));
    let incomplete: Vec<&str> = inits
        .iter()
        .zip(&init_statuses)
        .filter(|(_, s)| {
            s.state
                .as_ref()
                .and_then(|st| st.terminated.as_ref())
                .is_none_or(|t| t.exit_code != 0)
        })
        .map(|(c, _)| c.name.as_str())
        .collect();
    let unready: Vec<&str> = statuses
        .iter()
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();
    let initialized = if incomplete.is_empty() {
        condition(
            "Initialized",
            true,
            completed.then_some("PodCompleted"),
            None,
            inputs,
        )
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
            inputs,
        )
    };
    let ready_cond = |kind: &str| {
        if completed {
            condition(kind, unready.is_empty(), Some("PodCompleted"), None, inputs)
        } else if unready.is_empty() {
            condition(kind, true, None, None, inputs)
        } else {
            condition(
                kind,
                false,
                Some("ContainersNotReady"),
                Some(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                )),
                inputs,
            )
        }
    };
    let conditions = vec![
        condition(
            "PodReadyToStartContainers",
            sandbox_ready,
            None,
            None,
            inputs,
        ),
        initialized,
        ready_cond("Ready"),
        ready_cond("ContainersReady"),
        condition("PodScheduled", true, None, None, inputs),
    ];

    let host_network = crate::runtime::sandbox::is_host_network(pod);
    let ips: Vec<String> = if host_network {
        vec![inputs.host_ip.to_string()]
    } else {
        inputs.runtime.ips.clone()
    };
    let start_time = inputs
        .old
        .and_then(|o| o.start_time.clone())
        .unwrap_or_else(|| seconds(inputs.now));
    PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        host_ip: Some(inputs.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: inputs.host_ip.to_string(),
        }]),
        pod_ip: ips.first().cloned(),
        pod_ips: (!ips.is_empty()).then(|| ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        start_time: Some(start_time),
        qos_class: Some(super::qos::qos_class(pod).to_string()),
        ..Default::default()
    }
}

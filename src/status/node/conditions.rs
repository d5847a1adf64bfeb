//! The node conditions (kubelet's `ReadyCondition`, `MemoryPressureCondition`, …):
//! reasons and messages exactly as kubelet's, transition times kept while the
//! status holds, heartbeats set to the time the status is computed.

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Whether the node is under memory, disk or PID pressure. The eviction manager
/// sets it; the node status and pressure admission read it.
#[derive(Debug, Default)]
pub(crate) struct PressureSource {
    memory: AtomicBool,
    disk: AtomicBool,
    pid: AtomicBool,
}

/// One reading of a [`PressureSource`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

impl PressureSource {
    pub(crate) fn set(&self, p: Pressure) {
        self.memory.store(p.memory, Ordering::Relaxed);
        self.disk.store(p.disk, Ordering::Relaxed);
        self.pid.store(p.pid, Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Pressure {
        Pressure {
            memory: self.memory.load(Ordering::Relaxed),
            disk: self.disk.load(Ordering::Relaxed),
            pid: self.pid.load(Ordering::Relaxed),
        }
    }
}

/// What the Ready condition is computed from: kubelet's runtime and PLEG errors, its
/// network errors (the runtime's `NetworkReady`), then its node shutdown manager's, in
/// its order. Empty: ready.
pub(crate) fn not_ready_errors(
    runtime_up: bool,
    pleg: Option<String>,
    network: Option<String>,
    shutting_down: bool,
) -> Vec<String> {
    let mut errs = Vec::new();
    if !runtime_up {
        errs.push("container runtime is down".to_string());
    }
    if let Some(e) = pleg {
        errs.push(format!("PLEG is not healthy: {e}"));
    }
    errs.extend(network);
    if shutting_down {
        errs.push(crate::contracts::NODE_SHUTTING_DOWN.to_string());
    }
    errs
}

fn condition(type_: &str, status: bool, reason: &str, message: String) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message),
        ..Default::default()
    }
}

/// The four conditions, pressure first and Ready last (kubelet's setter order),
/// without times: [`with_times`] adds them.
pub(crate) fn desired(pressure: Pressure, not_ready: &[String]) -> Vec<NodeCondition> {
    let mem = if pressure.memory {
        condition(
            "MemoryPressure",
            true,
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available".into(),
        )
    } else {
        condition(
            "MemoryPressure",
            false,
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available".into(),
        )
    };
    let disk = if pressure.disk {
        condition(
            "DiskPressure",
            true,
            "KubeletHasDiskPressure",
            "kubelet has disk pressure".into(),
        )
    } else {
        condition(
            "DiskPressure",
            false,
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure".into(),
        )
    };
    let pid = if pressure.pid {
        condition(
            "PIDPressure",
            true,
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available".into(),
        )
    } else {
        condition(
            "PIDPressure",
            false,
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available".into(),
        )
    };
    let ready = if not_ready.is_empty() {
        condition(
            "Ready",
            true,
            "KubeletReady",
            "kubelet is posting ready status".into(),
        )
    } else {
        condition("Ready", false, "KubeletNotReady", not_ready.join(","))
    };
    vec![mem, disk, pid, ready]
}

/// kubelet's note of the container manager's soft requirements on the Ready condition,
/// whatever its status: `kubelet is posting ready status. WARNING: CPU hardcapping
/// unsupported`.
pub(crate) fn warn_soft_requirements(
    mut conds: Vec<NodeCondition>,
    soft: Option<&str>,
) -> Vec<NodeCondition> {
    let Some(soft) = soft else {
        return conds;
    };
    for c in conds.iter_mut().filter(|c| c.type_ == "Ready") {
        let message = c.message.take().unwrap_or_default();
        c.message = Some(format!("{message}. WARNING: {soft}"));
    }
    conds
}

/// Adds the times: the heartbeat is `now`; the transition time is kept from the
/// condition of the same type in `previous` when its status is unchanged, else `now`.
pub(crate) fn with_times(
    mut conds: Vec<NodeCondition>,
    previous: &[NodeCondition],
    now: jiff::Timestamp,
) -> Vec<NodeCondition> {
    for c in &mut conds {
        c.last_heartbeat_time = Some(Time(now));
        c.last_transition_time = previous
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
            .and_then(|p| p.last_transition_time.clone())
            .or(Some(Time(now)));
    }
    conds
}

/// The node events of the condition changes from `previous` to `current` (kubelet's
/// setters with `recordNodeStatusEvent`): a pressure condition's event whenever its
/// status changes, also from absent (Unknown) at registration; NodeReady/NodeNotReady
/// only when an existing Ready condition changes status, as kubelet's Ready setter.
pub(crate) fn transition_events(
    previous: &[NodeCondition],
    current: &[NodeCondition],
) -> Vec<&'static str> {
    let status = |list: &[NodeCondition], t: &str| {
        list.iter().find(|c| c.type_ == t).map(|c| c.status.clone())
    };
    let mut out = Vec::new();
    for (t, on_true, on_false) in [
        (
            "MemoryPressure",
            "NodeHasInsufficientMemory",
            "NodeHasSufficientMemory",
        ),
        (
            "DiskPressure",
            "NodeHasDiskPressure",
            "NodeHasNoDiskPressure",
        ),
        (
            "PIDPressure",
            "NodeHasInsufficientPID",
            "NodeHasSufficientPID",
        ),
    ] {
        let now = status(current, t);
        if now.is_some() && now != status(previous, t) {
            out.push(if now.as_deref() == Some("True") {
                on_true
            } else {
                on_false
            });
        }
    }
    if let (Some(before), Some(now)) = (status(previous, "Ready"), status(current, "Ready"))
        && before != now
    {
        out.push(if now == "True" {
            crate::events::reason::NODE_READY
        } else {
            crate::events::reason::NODE_NOT_READY
        });
    }
    out
}

/// Whether two condition lists differ in anything but heartbeats (kubelet's
/// `nodeConditionsHaveChanged`).
pub(crate) fn changed(a: &[NodeCondition], b: &[NodeCondition]) -> bool {
    let strip = |c: &[NodeCondition]| {
        c.iter()
            .map(|c| NodeCondition {
                last_heartbeat_time: None,
                ..c.clone()
            })
            .collect::<Vec<_>>()
    };
    strip(a) != strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find<'a>(c: &'a [NodeCondition], t: &str) -> &'a NodeCondition {
        c.iter().find(|c| c.type_ == t).unwrap()
    }

    fn with(pressure: Pressure, not_ready: &[&str]) -> Vec<NodeCondition> {
        let errs: Vec<String> = not_ready.iter().map(|s| (*s).to_string()).collect();
        desired(pressure, &errs)
    }

    #[test]
    fn registration_reports_every_pressure_condition_but_not_ready() {
        let first = with(Pressure::default(), &[]);
        assert_eq!(
            transition_events(&[], &first),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID"
            ]
        );
        // Nothing changed: no event, whatever the heartbeats.
        assert!(transition_events(&first, &with(Pressure::default(), &[])).is_empty());
    }

    #[test]
    fn each_transition_is_one_event_both_ways() {
        let calm = with(Pressure::default(), &[]);
        let pressed = with(
            Pressure {
                memory: true,
                disk: true,
                pid: true,
            },
            &["PLEG is not healthy"],
        );
        assert_eq!(
            transition_events(&calm, &pressed),
            [
                "NodeHasInsufficientMemory",
                "NodeHasDiskPressure",
                "NodeHasInsufficientPID",
                "NodeNotReady"
            ]
        );
        assert_eq!(
            transition_events(&pressed, &calm),
            [
                "NodeHasSufficientMemory",
                "NodeHasNoDiskPressure",
                "NodeHasSufficientPID",
                "NodeReady"
            ]
        );
        let disk_only = with(
            Pressure {
                disk: true,
                ..Pressure::default()
            },
            &[],
        );
        assert_eq!(
            transition_events(&calm, &disk_only),
            ["NodeHasDiskPressure"]
        );
    }

    #[test]
    fn healthy_node_is_ready_without_pressure() {
        let c = desired(
            PressureSource::default().get(),
            &not_ready_errors(true, None, None, false),
        );
        let types: Vec<_> = c.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        let r = find(&c, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );
        assert_eq!(
            r.message.as_deref(),
            Some("kubelet is posting ready status")
        );
        let m = find(&c, "MemoryPressure");
        assert_eq!(
            (m.status.as_str(), m.reason.as_deref()),
            ("False", Some("KubeletHasSufficientMemory"))
        );
        assert_eq!(
            m.message.as_deref(),
            Some("kubelet has sufficient memory available")
        );
        assert_eq!(
            find(&c, "DiskPressure").reason.as_deref(),
            Some("KubeletHasNoDiskPressure")
        );
        assert_eq!(
            find(&c, "PIDPressure").message.as_deref(),
            Some("kubelet has sufficient PID available")
        );
    }

    #[test]
    fn soft_requirements_are_a_warning_on_the_ready_message() {
        let ready = warn_soft_requirements(
            with(Pressure::default(), &[]),
            Some("CPU hardcapping unsupported"),
        );
        let r = find(&ready, "Ready");
        assert_eq!(r.status, "True");
        assert_eq!(
            r.message.as_deref(),
            Some("kubelet is posting ready status. WARNING: CPU hardcapping unsupported")
        );
        assert_eq!(
            find(&ready, "MemoryPressure").message.as_deref(),
            Some("kubelet has sufficient memory available")
        );
        let down = warn_soft_requirements(
            with(Pressure::default(), &["container runtime is down"]),
            Some("CPU hardcapping unsupported"),
        );
        assert_eq!(
            find(&down, "Ready").message.as_deref(),
            Some("container runtime is down. WARNING: CPU hardcapping unsupported")
        );
        assert_eq!(
            warn_soft_requirements(with(Pressure::default(), &[]), None),
            with(Pressure::default(), &[])
        );
    }

    #[test]
    fn runtime_down_or_pleg_unhealthy_is_not_ready() {
        let errs = not_ready_errors(
            false,
            Some("pleg has yet to be successful".into()),
            None,
            false,
        );
        let c = desired(Pressure::default(), &errs);
        let r = find(&c, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref()),
            ("False", Some("KubeletNotReady"))
        );
        assert_eq!(
            r.message.as_deref(),
            Some("container runtime is down,PLEG is not healthy: pleg has yet to be successful")
        );
    }

    #[test]
    fn a_runtime_network_not_ready_is_not_ready_with_kubelets_message() {
        let network = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";
        let c = desired(
            Pressure::default(),
            &not_ready_errors(true, None, Some(network.into()), false),
        );
        let r = find(&c, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref(), r.message.as_deref()),
            ("False", Some("KubeletNotReady"), Some(network))
        );
    }

    #[test]
    fn a_node_shutting_down_is_not_ready_with_kubelets_message() {
        let c = desired(
            Pressure::default(),
            &not_ready_errors(true, None, None, true),
        );
        let r = find(&c, "Ready");
        assert_eq!(
            (r.status.as_str(), r.reason.as_deref(), r.message.as_deref()),
            (
                "False",
                Some("KubeletNotReady"),
                Some("node is shutting down")
            )
        );
    }

    #[test]
    fn pressure_source_drives_the_conditions() {
        let src = PressureSource::default();
        src.set(Pressure {
            memory: true,
            disk: true,
            pid: true,
        });
        let c = desired(src.get(), &[]);
        let m = find(&c, "MemoryPressure");
        assert_eq!(
            (m.status.as_str(), m.reason.as_deref()),
            ("True", Some("KubeletHasInsufficientMemory"))
        );
        assert_eq!(
            find(&c, "DiskPressure").reason.as_deref(),
            Some("KubeletHasDiskPressure")
        );
        assert_eq!(
            find(&c, "PIDPressure").message.as_deref(),
            Some("kubelet has insufficient PID available")
        );
    }

    #[test]
    fn transition_time_kept_while_status_holds() {
        let t0 = jiff::Timestamp::from_second(1_000).unwrap();
        let t1 = jiff::Timestamp::from_second(2_000).unwrap();
        let first = with_times(desired(Pressure::default(), &[]), &[], t0);
        let same = with_times(desired(Pressure::default(), &[]), &first, t1);
        let r = find(&same, "Ready");
        assert_eq!(r.last_transition_time, Some(Time(t0)));
        assert_eq!(r.last_heartbeat_time, Some(Time(t1)));
        assert!(!changed(&first, &same));
        let down = with_times(desired(Pressure::default(), &["x".into()]), &first, t1);
        assert_eq!(find(&down, "Ready").last_transition_time, Some(Time(t1)));
        assert_eq!(
            find(&down, "MemoryPressure").last_transition_time,
            Some(Time(t0))
        );
        assert!(changed(&first, &down));
    }
}

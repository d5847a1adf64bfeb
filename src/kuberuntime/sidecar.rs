//! Sidecars: init containers with `restartPolicy: Always` (kubelet's restartable init
//! containers). They start in order like init containers but keep running beside the
//! app containers, and when the pod is killed they stop after the app containers, in
//! reverse order (kubelet's `terminationOrdering`). The startup gate is the seam
//! through which the prober tells the runtime that a sidecar's startup probe passed.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio_util::sync::CancellationToken;

use super::types::ContainerStatus;
use crate::pod::RestartPolicy;

/// True for an init container that is a sidecar (`restartPolicy: Always`).
pub(crate) fn is_sidecar(c: &Container) -> bool {
    RestartPolicy::of_container(c) == Some(RestartPolicy::Always)
}

/// True when the pod has at least one sidecar.
pub(crate) fn has_sidecars(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .any(is_sidecar)
}

/// What the startup probe says about a running container (kubelet's
/// `startupManager.Get`, folded with "no startup probe").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Startup {
    /// No result yet: the next init container waits.
    Pending,
    /// Started (or the container has no startup probe).
    Succeeded,
    /// The startup probe failed: the sidecar is killed and started again.
    Failed,
}

/// Whether a running container has started as far as its startup probe goes. The
/// runtime asks before it starts the init container after a sidecar.
pub(crate) trait StartupGate: Send + Sync {
    fn startup(&self, pod_uid: &str, spec: &Container, running: &ContainerStatus) -> Startup;
}

/// The gate while no prober is plugged in: a running container has started.
#[derive(Debug, Default)]
pub(crate) struct RunningIsStarted;

impl StartupGate for RunningIsStarted {
    fn startup(&self, _: &str, _: &Container, _: &ContainerStatus) -> Startup {
        Startup::Succeeded
    }
}

/// Who stops before whom when a pod with sidecars is killed: every sidecar waits for
/// all app containers and for the sidecars after it in the spec. Containers that are
/// not running count as stopped already.
#[derive(Debug, Default)]
pub(crate) struct TerminationOrder {
    stopped: HashMap<String, CancellationToken>,
    waits_for: HashMap<String, Vec<CancellationToken>>,
}

impl TerminationOrder {
    /// The order for `pod` given the names of its running containers.
    pub(crate) fn new<'a>(pod: &Pod, running: impl IntoIterator<Item = &'a str>) -> Self {
        let running: Vec<&str> = running.into_iter().collect();
        let mut order = TerminationOrder::default();
        let Some(spec) = pod.spec.as_ref() else {
            return order;
        };
        let mut token = |name: &str| {
            let t = CancellationToken::new();
            if !running.contains(&name) {
                t.cancel();
            }
            order.stopped.insert(name.to_string(), t.clone());
            t
        };
        let apps: Vec<CancellationToken> = spec.containers.iter().map(|c| token(&c.name)).collect();
        let mut later_sidecar: Option<CancellationToken> = None;
        let mut waits = Vec::new();
        for c in spec.init_containers.iter().flatten().rev() {
            let t = token(&c.name);
            if is_sidecar(c) {
                let mut deps = apps.clone();
                deps.extend(later_sidecar.replace(t));
                waits.push((c.name.clone(), deps));
            }
        }
        order.waits_for = waits.into_iter().collect();
        order
    }

    /// Waits until every container `name` must outlive has stopped, at most `grace`;
    /// returns how long it waited (kubelet's `waitForTurn`).
    pub(crate) async fn wait_for_turn(&self, name: &str, grace: Duration) -> Duration {
        let Some(deps) = self.waits_for.get(name).filter(|d| !d.is_empty()) else {
            return Duration::ZERO;
        };
        let start = tokio::time::Instant::now();
        let all = async {
            for d in deps {
                d.cancelled().await;
            }
        };
        let _ = tokio::time::timeout(grace, all).await;
        start.elapsed()
    }

    /// Records that `name` has stopped, which lets the sidecars waiting on it go.
    pub(crate) fn stopped(&self, name: &str) {
        if let Some(t) = self.stopped.get(name) {
            t.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "initContainers": [
                    {"name": "s1", "restartPolicy": "Always"},
                    {"name": "init"},
                    {"name": "s2", "restartPolicy": "Always"},
                ],
                "containers": [{"name": "a"}, {"name": "b"}],
            }
        }))
        .unwrap()
    }

    #[test]
    fn sidecars_are_init_containers_that_always_restart() {
        let p = pod();
        let inits = p.spec.as_ref().unwrap().init_containers.as_ref().unwrap();
        let flags: Vec<bool> = inits.iter().map(is_sidecar).collect();
        assert_eq!(flags, [true, false, true]);
        assert!(has_sidecars(&p));
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_wait_for_apps_then_later_sidecars() {
        let o = TerminationOrder::new(&pod(), ["a", "b", "s1", "s2"]);
        let grace = Duration::from_secs(30);
        // Apps never wait.
        assert_eq!(o.wait_for_turn("a", grace).await, Duration::ZERO);
        // s2 waits for both apps; s1 waits for s2 as well.
        let s1 = o.wait_for_turn("s1", grace);
        let s2 = o.wait_for_turn("s2", grace);
        let step = Duration::from_secs(1);
        let run = async {
            tokio::time::sleep(step).await;
            o.stopped("a");
            tokio::time::sleep(step).await;
            o.stopped("b");
        };
        let (w1, w2, ()) = tokio::join!(
            async {
                let w = s1.await;
                o.stopped("s1");
                w
            },
            async {
                let w = s2.await;
                tokio::time::sleep(step).await;
                o.stopped("s2");
                w
            },
            run
        );
        assert_eq!(w2, 2 * step, "s2 goes once both apps stopped");
        assert_eq!(w1, 3 * step, "s1 goes once s2 stopped");
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_is_bounded_by_the_grace_and_stopped_ones_do_not_count() {
        // Only s1 and a run: s2 and b count as stopped.
        let o = TerminationOrder::new(&pod(), ["a", "s1"]);
        let w = o.wait_for_turn("s1", Duration::from_secs(5)).await;
        assert_eq!(
            w,
            Duration::from_secs(5),
            "a never stops: the grace ends the wait"
        );
        o.stopped("a");
        assert_eq!(
            o.wait_for_turn("s1", Duration::from_secs(5)).await,
            Duration::ZERO
        );
    }
}

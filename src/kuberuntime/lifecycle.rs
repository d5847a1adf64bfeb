//! Container lifecycle hooks as kubelet runs them (`pkg/kubelet/lifecycle/handlers.go`
//! and the hook half of `kuberuntime_container.go`): a handler is an exec through CRI
//! `ExecSync`, an HTTP GET, or a sleep. postStart runs right after StartContainer and
//! blocks the pod's next container; preStop runs inside the grace budget before
//! StopContainer, which then gets what is left, never less than 2 s.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::cri::Cri;
use crate::http_get::{self as http_client, HttpGetError};
use crate::pod::{pod_ref, pod_uid};

/// kubelet's `minimumGracePeriodInSeconds`: a stop always leaves the container this
/// long between SIGTERM and SIGKILL, whatever a preStop hook used up.
pub(crate) const MIN_GRACE_SECS: i64 = 2;

/// Most bytes of a hook's exec output kept in its failure message (kubelet keeps the
/// output whole; a chatty hook must not fill the status and the log).
const MAX_HOOK_OUTPUT: usize = 1024;

/// Most bytes of an HTTP hook's response read before the connection is dropped.
const MAX_HTTP_HEAD: usize = 16 * 1024;

/// How a hook failed, worded as kubelet's `handlerRunner.Run` words it: the text
/// becomes the container's waiting message (postStart) and the log line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HookError {
    #[error(
        "Exec lifecycle hook ({command}) for Container {container:?} in Pod {pod:?} failed - error: {error}, message: {output:?}"
    )]
    Exec {
        command: String,
        container: String,
        pod: String,
        error: String,
        output: String,
    },
    #[error(
        "HTTP lifecycle hook ({path}) for Container {container:?} in Pod {pod:?} failed - error: {error}"
    )]
    Http {
        path: String,
        container: String,
        pod: String,
        error: String,
    },
    #[error("lifecycle hook for Container {container:?} in Pod {pod:?}: {reason}")]
    Invalid {
        container: String,
        pod: String,
        reason: String,
    },
}

/// Where an HTTP hook goes when its handler names no host: the pod's IP.
#[derive(Debug, Clone, Default)]
pub(crate) struct HookTarget {
    pub pod_ip: String,
}

/// kubelet's `format.Pod`: `name_namespace(uid)`.
fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod_uid(pod)
    )
}

/// Runs one handler to its end. `limit` bounds an exec (CRI timeout; zero leaves
/// only the runtime request timeout, as kubelet's postStart does).
pub(crate) async fn run_handler(
    cri: &dyn Cri,
    container_id: &str,
    pod: &Pod,
    container: &Container,
    handler: &LifecycleHandler,
    target: &HookTarget,
    limit: Duration,
) -> Result<(), HookError> {
    if let Some(exec) = &handler.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let fail = |error: String, output: String| HookError::Exec {
            command: format!("[{}]", cmd.join(" ")),
            container: container.name.clone(),
            pod: format_pod(pod),
            error,
            output,
        };
        let out = cri
            .exec_sync(container_id, cmd.clone(), limit)
            .await
            .map_err(|e| fail(e.to_string(), String::new()))?;
        if out.exit_code != 0 {
            let mut text = out.stdout;
            text.extend_from_slice(&out.stderr);
            text.truncate(MAX_HOOK_OUTPUT);
            let text = String::from_utf8_lossy(&text).into_owned();
            return Err(fail(
                format!("command '{}' exited with {}", cmd.join(" "), out.exit_code),
                text,
            ));
        }
        return Ok(());
    }
    if let Some(get) = &handler.http_get {
        let path = get.path.clone().unwrap_or_default();
        let fail = |error: String| HookError::Http {
            path: path.clone(),
            container: container.name.clone(),
            pod: format_pod(pod),
            error,
        };
        let port = resolve_port(&get.port, container).ok_or_else(|| {
            fail(format!(
                "port {:?} is neither a number nor a named container port",
                get.port
            ))
        })?;
        let host = get
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| target.pod_ip.clone());
        // kubelet's hook runner dials HTTPS without checking the certificate.
        let https = get
            .scheme
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("https"));
        let headers: Vec<(String, String)> = get
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        return http_get(https, &host, port, &path, &headers, limit)
            .await
            .map_err(|e| fail(e.to_string()));
    }
    if let Some(sleep) = &handler.sleep {
        let secs = u64::try_from(sleep.seconds).unwrap_or(0);
        tokio::time::sleep(Duration::from_secs(secs)).await;
        return Ok(());
    }
    Err(HookError::Invalid {
        container: container.name.clone(),
        pod: format_pod(pod),
        reason: "the handler has no exec, httpGet or sleep".into(),
    })
}

/// A port by number, or by the name of one of the container's ports.
fn resolve_port(port: &IntOrString, container: &Container) -> Option<u16> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).ok().filter(|p| *p > 0),
        IntOrString::String(s) => s.parse::<u16>().ok().filter(|p| *p > 0).or_else(|| {
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(s.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok())
        }),
    }
}

/// A hook's GET that got no answer (kubelet's wording: `Get "<url>": <why>`).
#[derive(Debug, thiserror::Error)]
#[error("Get \"{url}\": {reason}")]
pub(crate) struct HookGetError {
    url: String,
    reason: HookGetFailure,
}

#[derive(Debug, thiserror::Error)]
enum HookGetFailure {
    #[error(transparent)]
    Get(#[from] HttpGetError),
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
}

/// One HTTP/1.1 GET. As in kubelet's hook runner, only a failed request fails the
/// hook; the status code and the body do not. Bounded by `limit` when set, else by
/// 2 minutes (kubelet bounds it by its HTTP client).
async fn http_get(
    https: bool,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    limit: Duration,
) -> Result<(), HookGetError> {
    let limit = if limit.is_zero() {
        Duration::from_secs(120)
    } else {
        limit
    };
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let scheme = if https { "https" } else { "http" };
    let fail = |reason: HookGetFailure| HookGetError {
        url: format!("{scheme}://{authority}{path}"),
        reason,
    };
    let mut req = hyper::Request::get(&path)
        .header(hyper::header::HOST, &authority)
        .header(
            hyper::header::USER_AGENT,
            concat!("kube-lifecycle/", env!("CARGO_PKG_VERSION")),
        );
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(http_body_util::Empty::new())
        .map_err(|e| fail(HttpGetError::from(e).into()))?;
    match tokio::time::timeout(
        limit,
        http_client::get(https, host, port, req, MAX_HTTP_HEAD),
    )
    .await
    {
        // The body is read only to be let go; a broken one does not fail the hook.
        Ok(Ok(_) | Err(HttpGetError::Body(_))) => Ok(()),
        Ok(Err(e)) => Err(fail(e.into())),
        Err(_) => Err(fail(HookGetFailure::TimedOut(limit))),
    }
}

/// The pod's container spec by name, app or init.
pub(crate) fn container_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

/// What a stop of one container needs: its grace and its preStop hook (from the
/// pod's spec, or recovered from the container's annotations).
#[derive(Debug, Clone)]
pub(crate) struct StopPlan {
    pub id: String,
    pub name: String,
    pub grace: i64,
    pub pre_stop: Option<LifecycleHandler>,
}

/// The grace StopContainer gets after a preStop hook used `elapsed` of `grace`
/// (kubelet subtracts whole seconds and keeps at least [`MIN_GRACE_SECS`]).
pub(crate) fn grace_after_pre_stop(grace: i64, elapsed: Duration) -> i64 {
    let used = i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX);
    grace.saturating_sub(used).max(MIN_GRACE_SECS)
}

/// Runs the preStop hook (if any, and if there is grace to run it in) for at most
/// `grace` seconds, and returns the grace left for StopContainer. A failed or
/// timed-out hook is logged (a failed one is kubelet's `FailedPreStopHook` event) and
/// the stop goes on.
pub(crate) async fn run_pre_stop(
    cri: &dyn Cri,
    pod: &Pod,
    plan: &StopPlan,
    target: &HookTarget,
    events: &crate::events::EventRecorder,
) -> i64 {
    let Some(handler) = plan.pre_stop.as_ref().filter(|_| plan.grace > 0) else {
        return plan.grace.max(MIN_GRACE_SECS);
    };
    let budget = Duration::from_secs(u64::try_from(plan.grace).unwrap_or(0));
    let start = Instant::now();
    let spec = container_spec(pod, &plan.name)
        .cloned()
        .unwrap_or_else(|| Container {
            name: plan.name.clone(),
            ..Default::default()
        });
    info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %plan.name, containerID = %plan.id, gracePeriod = plan.grace, "running preStop hook");
    let run = run_handler(cri, &plan.id, pod, &spec, handler, target, budget);
    match tokio::time::timeout(budget, run).await {
        Ok(Ok(())) => {
            let took = start.elapsed();
            info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %plan.name,
                elapsed = %crate::duration::format_go_duration(took),
                "preStop hook took {:.1}s of the {}s grace; stopping the container (SIGTERM) with {}s left",
                took.as_secs_f64(), plan.grace, grace_after_pre_stop(plan.grace, took));
        }
        Ok(Err(e)) => {
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %plan.name, event = "FailedPreStopHook", error = %e, "preStop hook failed");
            // kubelet keeps the error out of the event, so no secret leaks to the apiserver.
            let obj = crate::events::ObjectRef::container(pod, &plan.name);
            let warning = crate::events::EventType::Warning;
            events.event(
                &obj,
                warning,
                crate::events::reason::FAILED_PRE_STOP_HOOK,
                "PreStopHook failed",
            );
        }
        Err(_) => {
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %plan.name, event = "FailedPreStopHook", gracePeriod = plan.grace,
                "preStop hook did not finish within the {}s grace; stopping the container with the minimum {}s", plan.grace, MIN_GRACE_SECS);
        }
    }
    grace_after_pre_stop(plan.grace, start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, SleepAction};

    #[test]
    fn stop_gets_the_rest_of_the_grace_and_at_least_two_seconds() {
        assert_eq!(grace_after_pre_stop(30, Duration::from_millis(4900)), 26);
        assert_eq!(grace_after_pre_stop(10, Duration::from_secs(9)), 2);
        assert_eq!(grace_after_pre_stop(3, Duration::from_secs(30)), 2);
        assert_eq!(grace_after_pre_stop(1, Duration::ZERO), 2);
        assert_eq!(grace_after_pre_stop(i64::MAX, Duration::MAX), 2);
    }

    #[test]
    fn ports_resolve_by_number_or_container_port_name() {
        let c = Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Some(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Some(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("81".into()), &c),
            Some(81)
        );
        assert_eq!(resolve_port(&IntOrString::String("nope".into()), &c), None);
        assert_eq!(resolve_port(&IntOrString::Int(70000), &c), None);
        assert_eq!(resolve_port(&IntOrString::Int(0), &c), None);
    }

    fn pod_with(handler: LifecycleHandler) -> Pod {
        use k8s_openapi::api::core::v1::{Lifecycle, PodSpec};
        let mut pod = crate::cri::support::pod("p", &[], &["app"], "Always");
        let spec = pod.spec.get_or_insert_with(PodSpec::default);
        spec.containers[0].lifecycle = Some(Lifecycle {
            pre_stop: Some(handler),
            ..Default::default()
        });
        pod
    }

    /// A failed preStop hook is kubelet's FailedPreStopHook warning about the container,
    /// without the error (it could hold a secret); the stop goes on with the grace left.
    #[tokio::test]
    async fn a_failed_pre_stop_is_a_warning_event() {
        use k8s_openapi::api::core::v1::ExecAction;
        let fake = crate::cri::FakeRuntime::new();
        fake.set_exec_result("c1", Err(tonic::Code::Internal));
        let pod = pod_with(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["false".into()]),
            }),
            ..Default::default()
        });
        let plan = StopPlan {
            id: "c1".into(),
            name: "app".into(),
            grace: 10,
            pre_stop: pod.spec.as_ref().unwrap().containers[0]
                .lifecycle
                .as_ref()
                .unwrap()
                .pre_stop
                .clone(),
        };
        let (events, mut rx) = crate::events::EventRecorder::queued(8);
        let left = run_pre_stop(&fake, &pod, &plan, &HookTarget::default(), &events).await;
        assert!(left >= MIN_GRACE_SECS, "{left}");
        let e = rx.try_recv().expect("one event");
        assert_eq!(
            (e.reason.as_ref(), e.message.as_str()),
            ("FailedPreStopHook", "PreStopHook failed")
        );
        assert_eq!(e.kind, crate::events::EventType::Warning);
        assert_eq!(e.object.field_path, "spec.containers{app}");
        assert!(rx.try_recv().is_err(), "only one event");
    }

    /// A sleep preStop longer than the grace is cut at the grace, and the stop still
    /// gets the 2 s minimum (paused clock).
    #[tokio::test(start_paused = true)]
    async fn pre_stop_is_cut_at_the_grace_period() {
        let fake = crate::cri::FakeRuntime::new();
        let pod = pod_with(LifecycleHandler {
            sleep: Some(SleepAction { seconds: 60 }),
            ..Default::default()
        });
        let plan = StopPlan {
            id: "c1".into(),
            name: pod.spec.as_ref().unwrap().containers[0].name.clone(),
            grace: 3,
            pre_stop: pod.spec.as_ref().unwrap().containers[0]
                .lifecycle
                .as_ref()
                .unwrap()
                .pre_stop
                .clone(),
        };
        let start = Instant::now();
        let left = run_pre_stop(
            &fake,
            &pod,
            &plan,
            &HookTarget::default(),
            &Default::default(),
        )
        .await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        assert_eq!(left, MIN_GRACE_SECS);
        // A short sleep uses its own time only.
        let plan = StopPlan {
            grace: 30,
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction { seconds: 5 }),
                ..Default::default()
            }),
            ..plan
        };
        let start = Instant::now();
        assert_eq!(
            run_pre_stop(
                &fake,
                &pod,
                &plan,
                &HookTarget::default(),
                &Default::default()
            )
            .await,
            25
        );
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    /// An HTTP hook sends a GET with the path, headers and kubelet-style user agent
    /// to a real local listener; any answer is success, a refused connection is not.
    #[tokio::test]
    async fn http_hook_sends_a_get_and_fails_only_on_a_failed_request() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = async {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let n = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 2\r\n\r\nno")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        };
        let headers = [("X-Hook".to_string(), "yes".to_string())];
        let client = http_get(
            false,
            "127.0.0.1",
            port,
            "stop",
            &headers,
            Duration::from_secs(5),
        );
        let (req, res) = tokio::join!(server, client);
        assert!(
            res.is_ok(),
            "a 500 answer does not fail the hook (kubelet): {res:?}"
        );
        assert!(req.starts_with("GET /stop HTTP/1.1\r\n"), "{req}");
        assert!(req.to_lowercase().contains("x-hook: yes"), "{req}");
        assert!(req.contains("kube-lifecycle/"), "{req}");
        drop(listener);
        let err = http_get(false, "127.0.0.1", port, "/", &[], Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    }

    #[test]
    fn exec_failure_reads_like_kubelets() {
        let e = HookError::Exec {
            command: "[sh -c exit 3]".into(),
            container: "app".into(),
            pod: "p_default(u1)".into(),
            error: "command 'sh -c exit 3' exited with 3".into(),
            output: "boom\n".into(),
        };
        assert_eq!(
            e.to_string(),
            "Exec lifecycle hook ([sh -c exit 3]) for Container \"app\" in Pod \"p_default(u1)\" failed - error: command 'sh -c exit 3' exited with 3, message: \"boom\\n\""
        );
    }
}

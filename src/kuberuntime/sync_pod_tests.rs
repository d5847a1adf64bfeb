//! `RuntimeManager::sync_pod` on the in-memory runtime and tokio's paused clock:
//! actions and their order, crash-loop back-off, image errors, adoption, isolation.

use std::time::Duration;

use super::super::labels;
use super::*;
use crate::cri::support::{FakeNode, IMAGE, pod};
use crate::pod::WaitingReason;
use k8s_openapi::api::core::v1::PodSecurityContext;

fn uid(p: &Pod) -> &str {
    p.metadata.uid.as_deref().unwrap()
}

#[tokio::test(start_paused = true)]
async fn sync_creates_the_sandbox_then_init_containers_in_order_then_app_containers() {
    let node = FakeNode::new();
    let p = pod("web", &["init-a", "init-b"], &["app", "side"], "Always");

    node.sync(&p).await.unwrap();
    assert_eq!(node.fake.calls_of("RunPodSandbox"), ["web"]);
    assert_eq!(node.fake.calls_of("StartContainer"), ["web/init-a"]);
    // init-a still runs: nothing more starts.
    node.sync(&p).await.unwrap();
    assert_eq!(node.fake.calls_of("StartContainer"), ["web/init-a"]);

    let id = node.fake.container_id("web", "init-a").unwrap();
    node.fake.exit_container(&id, 0);
    node.sync(&p).await.unwrap();
    assert_eq!(
        node.fake.calls_of("StartContainer"),
        ["web/init-a", "web/init-b"]
    );

    let id = node.fake.container_id("web", "init-b").unwrap();
    node.fake.exit_container(&id, 0);
    node.sync(&p).await.unwrap();
    assert_eq!(
        node.fake.calls_of("StartContainer"),
        ["web/init-a", "web/init-b", "web/app", "web/side"]
    );
    // One sandbox for the whole life; a steady pod needs nothing more.
    assert_eq!(node.fake.calls_of("RunPodSandbox"), ["web"]);
    let out = node.sync(&p).await.unwrap();
    assert!(!out.acted, "a running pod needs no action");
}

#[tokio::test(start_paused = true)]
async fn a_failed_init_container_is_retried_before_any_app_container_starts() {
    let node = FakeNode::new();
    let p = pod("job", &["setup"], &["app"], "Always");
    node.sync(&p).await.unwrap();
    let id = node.fake.container_id("job", "setup").unwrap();
    node.fake.exit_container(&id, 3);
    node.sync(&p).await.unwrap();
    assert_eq!(
        node.fake.calls_of("StartContainer"),
        ["job/setup", "job/setup"],
        "the failed init container restarts; the app waits"
    );
}

/// Exits the app container and syncs until it restarts; returns how long (tokio
/// time) the restart waited and the first back-off a sync asked for. CRI timestamps
/// are wall-clock, so both are exact to within the real time the test took.
async fn crash_and_restart(node: &FakeNode, p: &Pod) -> (Duration, Option<Duration>) {
    let id = node.fake.container_id("crash", "app").unwrap();
    node.fake.exit_container(&id, 1);
    let created = node.fake.calls_of("CreateContainer").len();
    let start = tokio::time::Instant::now();
    let mut first = None;
    loop {
        let out = node.sync(p).await.unwrap();
        if node.fake.container_id("crash", "app").unwrap() != id {
            return (start.elapsed(), first);
        }
        let wait = out
            .retry_after
            .expect("a container in back-off asks for a retry");
        first.get_or_insert(wait);
        assert_eq!(node.fake.calls_of("CreateContainer").len(), created);
        tokio::time::advance(wait + Duration::from_millis(1)).await;
    }
}

/// Within the real time a loaded machine may take between two syncs (the CRI's
/// wall-clock timestamps drift from the paused tokio clock by it): still far from the
/// next step of the doubling.
fn about(d: Duration, secs: u64) -> bool {
    d.abs_diff(Duration::from_secs(secs)) < Duration::from_millis(500)
}

#[tokio::test(start_paused = true)]
async fn crash_loop_back_off_starts_at_ten_seconds_and_doubles() {
    let node = FakeNode::new();
    let p = pod("crash", &[], &["app"], "Always");
    node.sync(&p).await.unwrap();

    // The first crash restarts at once (kubelet: the back-off starts with it).
    assert_eq!(crash_and_restart(&node, &p).await, (Duration::ZERO, None));
    let (waited, asked) = crash_and_restart(&node, &p).await;
    assert!(
        about(waited, 10) && about(asked.unwrap(), 10),
        "{waited:?} {asked:?}"
    );
    assert_eq!(node.manager.reasons().get(uid(&p), "app"), None);
    let (waited, asked) = crash_and_restart(&node, &p).await;
    assert!(
        about(waited, 20) && about(asked.unwrap(), 20),
        "{waited:?} {asked:?}"
    );

    // While backing off, the waiting reason says so, with kubelet's message.
    let id = node.fake.container_id("crash", "app").unwrap();
    node.fake.exit_container(&id, 1);
    let out = node.sync(&p).await.unwrap();
    assert!(about(out.retry_after.unwrap(), 40));
    let (reason, message) = node.manager.reasons().get(uid(&p), "app").unwrap();
    assert_eq!(reason, WaitingReason::CrashLoopBackOff);
    assert!(
        message.starts_with("back-off 40s restarting failed container=app pod=crash_default"),
        "{message}"
    );
    // Only the newest dead instance is kept.
    assert!(node.fake.container_count("crash", "app") <= 2);
}

#[tokio::test(start_paused = true)]
async fn an_oom_killed_container_reads_back_as_oom_killed_and_restarts() {
    let node = FakeNode::new();
    let p = pod("hog", &[], &["app"], "Always");
    node.sync(&p).await.unwrap();
    let id = node.fake.container_id("hog", "app").unwrap();
    node.fake.oom_kill(&id);
    let st = node
        .manager
        .get_pod_status(uid(&p), "hog", "default")
        .await
        .unwrap();
    let c = st.latest("app").unwrap();
    assert_eq!((c.state, c.exit_code), (ContainerState::Exited, 137));
    assert_eq!(c.reason, "OOMKilled");
    node.sync(&p).await.unwrap();
    assert_ne!(node.fake.container_id("hog", "app").unwrap(), id);
}

#[tokio::test(start_paused = true)]
async fn image_errors_show_as_waiting_reasons_with_pull_back_off() {
    let node = FakeNode::new();
    let mut p = pod("img", &[], &["app"], "Always");
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.image = Some("localhost/absent:1".into());
    c.image_pull_policy = Some("Never".into());
    assert!(node.sync(&p).await.is_err());
    let (reason, _) = node.manager.reasons().get(uid(&p), "app").unwrap();
    assert_eq!(reason, WaitingReason::ErrImageNeverPull);

    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.image_pull_policy = Some("IfNotPresent".into());
    node.fake
        .fail_next("PullImage", None, 1, tonic::Code::NotFound);
    let out = node.sync(&p).await.unwrap();
    assert_eq!(out.retry_after, Some(Duration::from_secs(10)));
    assert_eq!(
        node.manager.reasons().get(uid(&p), "app").unwrap().0,
        WaitingReason::ErrImagePull
    );
    let out = node.sync(&p).await.unwrap();
    assert_eq!(out.retry_after, Some(Duration::from_secs(10)));
    assert_eq!(
        node.manager.reasons().get(uid(&p), "app").unwrap().0,
        WaitingReason::ImagePullBackOff
    );
    assert_eq!(
        node.fake.calls_of("PullImage").len(),
        1,
        "no pull while backing off"
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    node.sync(&p).await.unwrap();
    assert_eq!(node.fake.calls_of("PullImage").len(), 2);
    assert!(node.fake.container_id("img", "app").is_some());
    assert_eq!(node.manager.reasons().get(uid(&p), "app"), None);
}

#[tokio::test(start_paused = true)]
async fn a_restarted_agent_adopts_the_pod_from_its_labels() {
    let node = FakeNode::new();
    let p = pod("kept", &["init"], &["app"], "Always");
    node.sync(&p).await.unwrap();
    let init = node.fake.container_id("kept", "init").unwrap();
    node.fake.exit_container(&init, 0);
    node.sync(&p).await.unwrap();
    let app = node.fake.container_id("kept", "app").unwrap();

    let (labels, annotations) = node.fake.container_metadata(&app).unwrap();
    assert_eq!(labels[labels::POD_UID_LABEL], "uid-kept");
    assert_eq!(labels[labels::POD_NAME_LABEL], "kept");
    assert_eq!(labels[labels::POD_NAMESPACE_LABEL], "default");
    assert_eq!(labels[labels::CONTAINER_NAME_LABEL], "app");
    assert!(annotations.contains_key(labels::CONTAINER_HASH_ANNOTATION));

    // A new manager (a restarted agent) over the same runtime.
    let again = FakeNode::manager_over(&node.fake, &node.dir);
    let pods = again.get_pods().await.unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(
        (pods[0].uid.as_str(), pods[0].pod_ref()),
        ("uid-kept", "default/kept".into())
    );
    let st = again
        .get_pod_status("uid-kept", "kept", "default")
        .await
        .unwrap();
    let c = st.latest("app").unwrap();
    assert_eq!(
        c.hash,
        labels::container_hash(&p.spec.as_ref().unwrap().containers[0])
    );
    assert!(st.latest("init").unwrap().is_init);
    let calls = node.fake.calls().len();
    let out = again.sync_pod(&p, &st).await.unwrap();
    assert!(!out.acted, "the adopted pod is left running");
    assert!(
        node.fake.calls()[calls..].iter().all(|c| !matches!(
            c.call,
            "StopContainer" | "RunPodSandbox" | "CreateContainer"
        )),
        "nothing was stopped or recreated"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cri_failure_on_one_pod_does_not_stop_another() {
    let node = FakeNode::new();
    node.fake.fail_next(
        "CreateContainer",
        Some("bad"),
        100,
        tonic::Code::Unavailable,
    );
    let bad = pod("bad", &[], &["app"], "Always");
    let good = pod("good", &[], &["app"], "Always");
    let (b, g) = tokio::join!(node.sync(&bad), node.sync(&good));
    let err = b.unwrap_err();
    assert_eq!(
        err.waiting_reason(),
        Some(WaitingReason::CreateContainerError)
    );
    assert!(err.retryable());
    assert!(err.to_string().contains("CreateContainerError"), "{err}");
    assert_eq!(
        node.manager.reasons().get("uid-bad", "app").unwrap().0,
        WaitingReason::CreateContainerError
    );
    g.unwrap();
    let st = node
        .manager
        .get_pod_status("uid-good", "good", "default")
        .await
        .unwrap();
    assert_eq!(st.latest("app").unwrap().state, ContainerState::Running);
    assert_eq!(IMAGE, st.latest("app").unwrap().image);
}

#[tokio::test(start_paused = true)]
async fn a_failed_sandbox_is_reported_and_retried_on_the_next_sync() {
    let node = FakeNode::new();
    node.fake
        .fail_next("RunPodSandbox", None, 1, tonic::Code::Unknown);
    let p = pod("sb", &[], &["app"], "Always");
    assert!(matches!(
        node.sync(&p).await,
        Err(SyncError::CreateSandbox(_))
    ));
    node.sync(&p).await.unwrap();
    assert_eq!(node.fake.calls_of("RunPodSandbox"), ["sb", "sb"]);
    assert_eq!(node.fake.calls_of("StartContainer"), ["sb/app"]);
}

#[tokio::test(start_paused = true)]
async fn kill_and_remove_leave_nothing_of_the_pod() {
    let node = FakeNode::new();
    let p = pod("gone", &[], &["app"], "Always");
    node.sync(&p).await.unwrap();
    let st = node
        .manager
        .get_pod_status("uid-gone", "gone", "default")
        .await
        .unwrap();
    node.manager
        .kill_pod_status(&p, &st, Some(0))
        .await
        .unwrap();
    assert_eq!(node.fake.calls_of("StopContainer"), ["gone/app"]);
    assert_eq!(node.fake.calls_of("StopPodSandbox"), ["gone"]);
    node.manager
        .remove_pod("uid-gone", "default/gone")
        .await
        .unwrap();
    assert_eq!(node.fake.object_counts(), (0, 0));
}

/// `pod` with the init containers named `s*` made sidecars (`restartPolicy: Always`).
fn sidecar_pod(name: &str, init: &[&str], containers: &[&str], restart: &str) -> Pod {
    let mut p = pod(name, init, containers, restart);
    for c in p.spec.as_mut().unwrap().init_containers.as_mut().unwrap() {
        if c.name.starts_with('s') {
            c.restart_policy = Some("Always".into());
        }
    }
    p
}

#[tokio::test(start_paused = true)]
async fn sidecars_start_in_order_each_before_the_next_init_container() {
    let node = FakeNode::new();
    let p = sidecar_pod("mesh", &["s1", "s2", "init"], &["app"], "Always");
    for _ in 0..3 {
        node.sync(&p).await.unwrap();
    }
    // Each running sidecar lets the next init container start; init still runs.
    assert_eq!(
        node.fake.calls_of("StartContainer"),
        ["mesh/s1", "mesh/s2", "mesh/init"]
    );
    assert!(!node.sync(&p).await.unwrap().acted, "init is waited for");
    let id = node.fake.container_id("mesh", "init").unwrap();
    node.fake.exit_container(&id, 0);
    node.sync(&p).await.unwrap();
    assert_eq!(
        node.fake.calls_of("StartContainer"),
        ["mesh/s1", "mesh/s2", "mesh/init", "mesh/app"]
    );
    assert!(
        !node.sync(&p).await.unwrap().acted,
        "a steady pod with sidecars"
    );
}

#[tokio::test(start_paused = true)]
async fn a_crashing_sidecar_restarts_with_back_off_while_the_app_runs() {
    let node = FakeNode::new();
    let p = sidecar_pod("flaky", &["side"], &["app"], "Never");
    node.sync(&p).await.unwrap();
    node.sync(&p).await.unwrap();
    let app = node.fake.container_id("flaky", "app").unwrap();
    // The first crash restarts at once, even under restartPolicy Never.
    let first = node.fake.container_id("flaky", "side").unwrap();
    node.fake.exit_container(&first, 1);
    node.sync(&p).await.unwrap();
    let second = node.fake.container_id("flaky", "side").unwrap();
    assert_ne!(second, first);
    // The second waits out 10 s of back-off.
    node.fake.exit_container(&second, 0);
    let out = node.sync(&p).await.unwrap();
    assert!(about(out.retry_after.unwrap(), 10), "{out:?}");
    assert_eq!(node.fake.container_id("flaky", "side").unwrap(), second);
    assert_eq!(
        node.manager.reasons().get(uid(&p), "side").unwrap().0,
        WaitingReason::CrashLoopBackOff
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    node.sync(&p).await.unwrap();
    assert_ne!(node.fake.container_id("flaky", "side").unwrap(), second);
    // The app was never touched.
    assert_eq!(node.fake.container_id("flaky", "app").unwrap(), app);
    assert!(node.fake.calls_of("StopContainer").is_empty());
}

#[tokio::test(start_paused = true)]
async fn sidecars_stop_after_the_app_containers_in_reverse_order() {
    let node = FakeNode::new();
    let p = sidecar_pod("order", &["s1", "s2"], &["a", "b"], "Always");
    for _ in 0..3 {
        node.sync(&p).await.unwrap();
    }
    let mut st = node
        .manager
        .get_pod_status("uid-order", "order", "default")
        .await
        .unwrap();
    assert_eq!(st.running_containers().count(), 4);
    // Oldest first, so that stopping in list order would stop the sidecars first.
    st.containers.sort_by_key(|c| c.created_at);
    st.containers.sort_by_key(|c| !c.is_init);
    node.manager
        .kill_pod_status(&p, &st, Some(5))
        .await
        .unwrap();
    let stops = node.fake.calls_of("StopContainer");
    assert_eq!(stops.len(), 4, "{stops:?}");
    let mut apps = stops[..2].to_vec();
    apps.sort();
    assert_eq!(apps, ["order/a", "order/b"], "{stops:?}");
    assert_eq!(stops[2..], ["order/s2", "order/s1"]);
}

#[tokio::test(start_paused = true)]
async fn a_pod_whose_app_finished_stops_its_sidecars_instead_of_restarting_them() {
    let node = FakeNode::new();
    let p = sidecar_pod("job", &["side"], &["app"], "OnFailure");
    node.sync(&p).await.unwrap();
    node.sync(&p).await.unwrap();
    let app = node.fake.container_id("job", "app").unwrap();
    node.fake.exit_container(&app, 0);
    node.sync(&p).await.unwrap();
    assert_eq!(node.fake.calls_of("StopContainer"), ["job/side"]);
    assert_eq!(node.fake.calls_of("StopPodSandbox"), ["job"]);
    assert_eq!(
        node.fake.calls_of("StartContainer"),
        ["job/side", "job/app"]
    );
}

/// preStop runs inside the grace budget before StopContainer (paused clock): a short
/// hook takes its own time, a long one is cut at the grace period, and the stop
/// happens either way.
#[tokio::test(start_paused = true)]
async fn pre_stop_runs_within_the_grace_before_the_stop() {
    use k8s_openapi::api::core::v1::{Lifecycle, LifecycleHandler, SleepAction};
    for (sleep, grace, expect) in [(5, 30, 5), (60, 3, 3)] {
        let node = FakeNode::new();
        let mut p = pod("web", &[], &["app"], "Always");
        let spec = p.spec.as_mut().unwrap();
        spec.termination_grace_period_seconds = Some(grace);
        spec.containers[0].lifecycle = Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction { seconds: sleep }),
                ..Default::default()
            }),
            ..Default::default()
        });
        node.sync(&p).await.unwrap();
        let st = node
            .manager
            .get_pod_status(uid(&p), "web", "default")
            .await
            .unwrap();
        let t = tokio::time::Instant::now();
        node.manager.kill_pod_status(&p, &st, None).await.unwrap();
        assert_eq!(
            t.elapsed(),
            Duration::from_secs(expect),
            "sleep {sleep}, grace {grace}"
        );
        assert_eq!(node.fake.calls_of("StopContainer"), ["web/app"]);
        let st = node
            .manager
            .get_pod_status(uid(&p), "web", "default")
            .await
            .unwrap();
        assert_eq!(st.running_containers().count(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn run_as_non_root_with_a_root_image_is_a_config_error_and_nothing_is_created() {
    let node = FakeNode::new();
    let mut p = pod("nonroot", &[], &["app"], "Always");
    p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        run_as_non_root: Some(true),
        ..Default::default()
    });
    let err = node.sync(&p).await.unwrap_err();
    assert_eq!(
        err.waiting_reason(),
        Some(WaitingReason::CreateContainerConfigError)
    );
    let (_, message) = node.manager.reasons().get("uid-nonroot", "app").unwrap();
    assert_eq!(
        message,
        r#"container has runAsNonRoot and image will run as root (pod: "nonroot_default(uid-nonroot)", container: app)"#
    );
    assert!(node.fake.calls_of("CreateContainer").is_empty());
    // With a non-root runAsUser the same image starts.
    p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(1000),
        ..Default::default()
    });
    node.sync(&p).await.unwrap();
    assert_eq!(node.fake.calls_of("StartContainer"), ["nonroot/app"]);
}

/// kubelet's container events, about the container (fieldPath), and FailedKillPod
/// about the pod when a kill fails.
#[tokio::test]
async fn container_events_and_a_failed_kill() {
    let node = FakeNode::new();
    let (events, mut rx) = crate::events::EventRecorder::queued(64);
    let manager = FakeNode::manager_over(&node.fake, &node.dir).with_events(events);
    let p = pod("ev", &[], &["app"], "Always");
    manager
        .sync_pod(&p, &PodRuntimeStatus::default())
        .await
        .unwrap();
    let mut seen = Vec::new();
    while let Ok(e) = rx.try_recv() {
        seen.push((e.reason.to_string(), e.message, e.object.field_path));
    }
    let at = |r: &str| seen.iter().find(|(reason, ..)| *reason == r).cloned();
    let (_, created, path) = at("Created").expect("Created");
    assert_eq!(
        (created.as_str(), path.as_str()),
        ("Created container: app", "spec.containers{app}")
    );
    assert_eq!(at("Started").unwrap().1, "Started container app");
    assert!(
        at("Pulled")
            .unwrap()
            .1
            .contains("already present on machine")
    );

    let st = manager
        .get_pod_status("uid-ev", "ev", "default")
        .await
        .unwrap();
    node.fake
        .fail_next("StopContainer", None, 1, tonic::Code::Internal);
    assert!(manager.kill_pod_status(&p, &st, Some(0)).await.is_err());
    let mut seen = Vec::new();
    while let Ok(e) = rx.try_recv() {
        seen.push((e.reason.to_string(), e.message, e.object.field_path));
    }
    assert!(
        seen.contains(&(
            "Killing".into(),
            "Stopping container app".into(),
            "spec.containers{app}".into()
        )),
        "{seen:?}"
    );
    let failed = seen
        .iter()
        .find(|(r, ..)| *r == "FailedKillPod")
        .expect("FailedKillPod");
    assert!(failed.1.starts_with("error killing pod: "), "{failed:?}");
    assert_eq!(failed.2, "", "about the pod");
}

/// kubelet's startContainer records `Failed` ("Error: <message>") on the container when
/// its config cannot be made, and doBackOff records `BackOff` on the container too.
#[tokio::test(start_paused = true)]
async fn config_errors_and_crash_loop_back_off_are_container_events() {
    let node = FakeNode::new();
    let (events, mut rx) = crate::events::EventRecorder::queued(64);
    let manager = FakeNode::manager_over(&node.fake, &node.dir).with_events(events);
    let mut p = pod("evc", &[], &["app"], "Always");
    p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        run_as_non_root: Some(true),
        ..Default::default()
    });
    let sync = |p: Pod| {
        let manager = &manager;
        async move {
            let st = manager.get_pod_status("uid-evc", "evc", "default").await?;
            manager.sync_pod(&p, &st).await
        }
    };
    let drain = |rx: &mut crate::events::EventQueue| {
        let mut seen = Vec::new();
        while let Ok(e) = rx.try_recv() {
            seen.push((e.reason.to_string(), e.message, e.object.field_path));
        }
        seen
    };
    assert!(sync(p.clone()).await.is_err());
    let seen = drain(&mut rx);
    let failed = seen.iter().find(|(r, ..)| *r == "Failed").expect("Failed");
    assert_eq!(
        (failed.1.as_str(), failed.2.as_str()),
        (
            r#"Error: container has runAsNonRoot and image will run as root (pod: "evc_default(uid-evc)", container: app)"#,
            "spec.containers{app}"
        )
    );

    p.spec.as_mut().unwrap().security_context = None;
    sync(p.clone()).await.unwrap();
    // The first crash restarts at once; the second backs off.
    for _ in 0..2 {
        let id = node.fake.container_id("evc", "app").unwrap();
        node.fake.exit_container(&id, 1);
        sync(p.clone()).await.unwrap();
    }
    let seen = drain(&mut rx);
    let back_off = seen
        .iter()
        .find(|(r, ..)| *r == "BackOff")
        .expect("BackOff");
    assert_eq!(
        (back_off.1.as_str(), back_off.2.as_str()),
        (
            "Back-off restarting failed container app in pod evc_default(uid-evc)",
            "spec.containers{app}"
        )
    );
}

/// An ObjectSource with a fixed set of ConfigMaps (no Secrets, no tokens).
struct ConfigMaps(Vec<&'static str>);

impl crate::objects::ObjectSource for ConfigMaps {
    fn config_map<'a>(
        &'a self,
        _: &'a str,
        name: &'a str,
    ) -> crate::objects::ObjectFuture<'a, Option<k8s_openapi::api::core::v1::ConfigMap>> {
        let found = self.0.contains(&name);
        Box::pin(async move { Ok(found.then(Default::default)) })
    }
    fn secret<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> crate::objects::ObjectFuture<'a, Option<k8s_openapi::api::core::v1::Secret>> {
        Box::pin(async { Ok(None) })
    }
    fn claim<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> crate::objects::ObjectFuture<'a, Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>>
    {
        Box::pin(async { Ok(None) })
    }
    fn volume<'a>(
        &'a self,
        _: &'a str,
    ) -> crate::objects::ObjectFuture<'a, Option<k8s_openapi::api::core::v1::PersistentVolume>>
    {
        Box::pin(async { Ok(None) })
    }
    fn node<'a>(
        &'a self,
        _: &'a str,
    ) -> crate::objects::ObjectFuture<'a, Option<k8s_openapi::api::core::v1::Node>> {
        Box::pin(async { Ok(None) })
    }
    fn runtime_class<'a>(
        &'a self,
        _: &'a str,
    ) -> crate::objects::ObjectFuture<'a, Option<k8s_openapi::api::node::v1::RuntimeClass>> {
        Box::pin(async { Ok(None) })
    }
    fn service_account<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> crate::objects::ObjectFuture<'a, Option<k8s_openapi::api::core::v1::ServiceAccount>> {
        Box::pin(async { Ok(None) })
    }
    fn token<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a k8s_openapi::api::authentication::v1::TokenRequest,
    ) -> crate::objects::ObjectFuture<'a, k8s_openapi::api::authentication::v1::TokenRequest> {
        Box::pin(async {
            Err(crate::objects::ObjectError::NotFound {
                kind: "tokens",
                name: "t".into(),
            })
        })
    }
}

/// kubelet waits for the pod's volumes before the runtime sync: a configMap volume
/// whose ConfigMap is missing means no sandbox, a `FailedMount` event on the pod, and
/// a retry; once the ConfigMap exists the pod starts. An optional one never blocks.
#[tokio::test]
async fn a_missing_config_map_volume_holds_the_sandbox_back_with_failed_mount() {
    let node = FakeNode::new();
    let (events, mut rx) = crate::events::EventRecorder::queued(64);
    let with = |cms: Vec<&'static str>| {
        let objects = crate::objects::ObjectManager::new(Arc::new(ConfigMaps(cms)));
        FakeNode::manager_over(&node.fake, &node.dir)
            .with_events(events.clone())
            .with_objects(Some(Arc::new(objects)))
    };
    let mut p = pod("vol", &[], &["app"], "Always");
    let spec = p.spec.as_mut().unwrap();
    spec.volumes = Some(
        serde_json::from_value(serde_json::json!([
            {"name": "v", "configMap": {"name": "x"}},
            {"name": "opt", "configMap": {"name": "gone", "optional": true}},
        ]))
        .unwrap(),
    );
    spec.containers[0].volume_mounts = Some(
        serde_json::from_value(serde_json::json!([
            {"name": "v", "mountPath": "/v"}, {"name": "opt", "mountPath": "/opt"},
        ]))
        .unwrap(),
    );
    let manager = with(vec![]);
    let err = manager
        .sync_pod(&p, &PodRuntimeStatus::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SyncError::UnmountedVolumes(v) if v == &["v"]),
        "{err}"
    );
    assert!(err.retryable());
    assert!(node.fake.calls_of("RunPodSandbox").is_empty());
    let mut seen = Vec::new();
    while let Ok(e) = rx.try_recv() {
        seen.push((e.reason.to_string(), e.message, e.object.field_path));
    }
    assert_eq!(
        seen,
        [(
            "FailedMount".to_string(),
            r#"MountVolume.SetUp failed for volume "v" : configmap "x" not found"#.to_string(),
            String::new()
        )]
    );

    let manager = with(vec!["x"]);
    manager
        .sync_pod(&p, &PodRuntimeStatus::default())
        .await
        .unwrap();
    assert_eq!(node.fake.calls_of("RunPodSandbox").len(), 1);
    assert_eq!(node.fake.calls_of("StartContainer"), ["vol/app"]);
}

/// The hook point: rules change the CreateContainer request the runtime sends.
#[tokio::test(start_paused = true)]
async fn container_hooks_shape_the_create_request() {
    use crate::koord::HookSet;
    use crate::koordapi::QosConfig;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let fake = Arc::new(crate::cri::FakeRuntime::new());
    fake.add_image(IMAGE);
    let dir = tempfile::tempdir().unwrap();
    let (cm, _) = crate::cm::fake_manager(true);
    let hooks = HookSet::new(&QosConfig::default(), Arc::new(cm));
    let node = FakeNode {
        manager: Arc::new(
            FakeNode::manager_over(&fake, &dir).with_runtime_hooks(hooks.runtime_hooks()),
        ),
        fake,
        dir,
    };
    let mut p = pod("batch", &[], &["app"], "Always");
    p.metadata.labels = Some([("koordinator.sh/qosClass".to_string(), "BE".to_string())].into());
    p.spec.as_mut().unwrap().containers[0].resources = Some(ResourceRequirements {
        requests: Some(
            [(
                "kubernetes.io/batch-cpu".to_string(),
                Quantity("250".into()),
            )]
            .into(),
        ),
        ..Default::default()
    });
    node.sync(&p).await.unwrap();
    let id = node.fake.container_id("batch", "app").unwrap();
    assert_eq!(node.fake.container_resources(&id).unwrap().cpu_shares, 256);
    assert_eq!(node.fake.calls_of("StartContainer"), ["batch/app"]);
}

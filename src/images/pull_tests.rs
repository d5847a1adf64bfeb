//! `ImagePuller` on the in-memory runtime and tokio's paused clock: the pull limit,
//! policies, reasons and messages, back-off, and cancelled pulls.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::cri::FakeRuntime;
use crate::cri::support::pod;

const PULL: Duration = Duration::from_secs(5);

/// Pod `name` whose one container runs `image` with `policy`.
fn pod_with(name: &str, image: &str, policy: &str) -> (Pod, cri::PodSandboxConfig) {
    let mut p = pod(name, &[], &["app"], "Always");
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.image = Some(image.to_string());
    c.image_pull_policy = Some(policy.to_string());
    let sandbox = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    };
    (p, sandbox)
}

/// Pulls `n` different images for `n` pods at once; returns how long it took.
async fn pull_many(limit: PullLimit, n: usize) -> (Arc<FakeRuntime>, Duration) {
    let fake = Arc::new(FakeRuntime::new());
    fake.set_pull_delay(PULL);
    let puller = ImagePuller::new(limit);
    let pods: Vec<_> = (0..n)
        .map(|i| pod_with(&format!("p{i}"), &format!("localhost/img{i}:1"), "Always"))
        .collect();
    let start = tokio::time::Instant::now();
    let pulls = pods.iter().map(|(p, sb)| {
        let c = &p.spec.as_ref().unwrap().containers[0];
        puller.ensure_image(fake.as_ref(), p, c, sb, &[])
    });
    for r in futures::future::join_all(pulls).await {
        r.unwrap();
    }
    (fake, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn serialized_pulls_never_overlap() {
    let (fake, took) = pull_many(PullLimit::Serial, 3).await;
    assert_eq!(fake.max_pulls_in_flight(), 1);
    assert_eq!(fake.calls_of("PullImage").len(), 3);
    assert!(took >= 3 * PULL, "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn max_parallel_image_pulls_bounds_the_overlap() {
    let (fake, took) = pull_many(PullLimit::Parallel(Some(2)), 4).await;
    assert_eq!(fake.max_pulls_in_flight(), 2);
    assert!(took >= 2 * PULL && took < 3 * PULL, "{took:?}");
    let (fake, took) = pull_many(PullLimit::Parallel(None), 4).await;
    assert_eq!(fake.max_pulls_in_flight(), 4);
    assert!(took < 2 * PULL, "{took:?}");
}

#[test]
fn the_settings_choose_the_limit() {
    assert_eq!(PullLimit::from_settings(true, None), PullLimit::Serial);
    assert_eq!(PullLimit::from_settings(true, Some(1)), PullLimit::Serial);
    assert_eq!(
        PullLimit::from_settings(false, Some(3)),
        PullLimit::Parallel(Some(3))
    );
    assert_eq!(
        PullLimit::from_settings(false, None),
        PullLimit::Parallel(None)
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_pull_frees_its_slot_and_spares_other_pods_pulls() {
    let fake = Arc::new(FakeRuntime::new());
    fake.set_pull_delay(Duration::from_secs(3600));
    let puller = ImagePuller::new(PullLimit::Parallel(Some(2)));
    let (a, sa) = pod_with("a", "localhost/shared:1", "Always");
    let (b, sb) = pod_with("b", "localhost/shared:1", "Always");
    let ca = &a.spec.as_ref().unwrap().containers[0];
    let cb = &b.spec.as_ref().unwrap().containers[0];
    let pull_b = puller.ensure_image(fake.as_ref(), &b, cb, &sb, &[]);
    tokio::pin!(pull_b);
    // Pod a is removed while its pull hangs: its sync (and the pull) is dropped.
    let pull_a = puller.ensure_image(fake.as_ref(), &a, ca, &sa, &[]);
    tokio::select! {
        _ = pull_a => panic!("the pull cannot finish"),
        _ = &mut pull_b => panic!("the pull cannot finish"),
        () = tokio::time::sleep(Duration::from_secs(60)) => {}
    }
    assert_eq!(fake.pulls_in_flight(), 1, "only pod b's pull is left");
    // b's pull of the same image goes on and ends.
    fake.set_pull_delay(Duration::ZERO);
    let r = tokio::time::timeout(Duration::from_secs(3600), &mut pull_b).await;
    assert!(r.unwrap().is_ok());
    assert_eq!(fake.pulls_in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn serialized_slot_is_freed_when_the_waiting_pull_is_dropped() {
    let fake = Arc::new(FakeRuntime::new());
    fake.set_pull_delay(Duration::from_secs(3600));
    let puller = ImagePuller::new(PullLimit::Serial);
    let (a, sa) = pod_with("a", "localhost/a:1", "Always");
    let (b, sb) = pod_with("b", "localhost/b:1", "Always");
    let ca = &a.spec.as_ref().unwrap().containers[0];
    let cb = &b.spec.as_ref().unwrap().containers[0];
    let hung = tokio::time::timeout(
        Duration::from_secs(10),
        puller.ensure_image(fake.as_ref(), &a, ca, &sa, &[]),
    )
    .await;
    assert!(
        hung.is_err(),
        "no deadline of its own: it hangs until dropped"
    );
    fake.set_pull_delay(Duration::ZERO);
    puller
        .ensure_image(fake.as_ref(), &b, cb, &sb, &[])
        .await
        .expect("the slot was freed");
}

#[tokio::test(start_paused = true)]
async fn policies_reasons_and_messages() {
    let fake = FakeRuntime::new();
    let puller = ImagePuller::default();
    let run = |p: &Pod, sb: &cri::PodSandboxConfig| {
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let (p, sb) = (p.clone(), sb.clone());
        let (fake, puller) = (&fake, &puller);
        async move { puller.ensure_image(fake, &p, &c, &sb, &[]).await }
    };

    let (p, sb) = pod_with("never", "localhost/absent:1", "Never");
    let e = run(&p, &sb).await.unwrap_err();
    assert_eq!(e.reason, WaitingReason::ErrImageNeverPull);
    assert_eq!(
        e.message,
        "Container image \"localhost/absent:1\" is not present with pull policy of Never"
    );
    assert_eq!(e.retry_after, None);

    let (p, sb) = pod_with("bad", "Localhost/UPPER", "IfNotPresent");
    let e = run(&p, &sb).await.unwrap_err();
    assert_eq!(e.reason, WaitingReason::InvalidImageName);
    assert!(
        e.message.starts_with(
            "Failed to apply default image tag \"Localhost/UPPER\": couldn't parse image name"
        ),
        "{}",
        e.message
    );
    assert!(e.message.contains("must be lowercase"), "{}", e.message);
    assert!(
        fake.calls_of("ImageStatus").len() == 1,
        "only the never pod inspected"
    );

    // Present: IfNotPresent does not pull, Always does.
    fake.add_image("localhost/here:1");
    let (p, sb) = pod_with("here", "localhost/here:1", "IfNotPresent");
    run(&p, &sb).await.unwrap();
    assert!(fake.calls_of("PullImage").is_empty());
    let (p, sb) = pod_with("always", "localhost/here:1", "Always");
    run(&p, &sb).await.unwrap();
    assert_eq!(fake.calls_of("PullImage").len(), 1);

    // A failed pull names the image and the runtime's reason, then backs off.
    fake.fail_next("PullImage", Some("refused"), 1, tonic::Code::Unavailable);
    let (p, sb) = pod_with("refused", "127.0.0.1:1/x:1", "Always");
    let e = run(&p, &sb).await.unwrap_err();
    assert_eq!(e.reason, WaitingReason::ErrImagePull);
    assert_eq!(
        e.message,
        "Failed to pull image \"127.0.0.1:1/x:1\": injected failure"
    );
    assert_eq!(e.retry_after, Some(Duration::from_secs(10)));
    tokio::time::advance(Duration::from_secs(4)).await;
    let e = run(&p, &sb).await.unwrap_err();
    assert_eq!(e.reason, WaitingReason::ImagePullBackOff);
    assert_eq!(e.message, "Back-off pulling image \"127.0.0.1:1/x:1\"");
    assert_eq!(e.retry_after, Some(Duration::from_secs(6)));
    tokio::time::advance(Duration::from_secs(6)).await;
    run(&p, &sb)
        .await
        .expect("the retry after the back-off pulls");
    // The second failure backs off 20 s; the retry 10 s later lands inside it.
    fake.fail_next("PullImage", Some("refused"), 1, tonic::Code::Unavailable);
    let e = run(&p, &sb).await.unwrap_err();
    assert_eq!(e.reason, WaitingReason::ErrImagePull);
    assert_eq!(e.retry_after, Some(Duration::from_secs(10)));
    tokio::time::advance(Duration::from_secs(10)).await;
    let e = run(&p, &sb).await.unwrap_err();
    assert_eq!(e.reason, WaitingReason::ImagePullBackOff);
    assert_eq!(e.retry_after, Some(Duration::from_secs(10)));
    // Forgetting the pod forgets its back-off.
    puller.forget_pod("uid-refused");
    run(&p, &sb).await.expect("no back-off left");
}

/// Every image failure is followed by kubelet's `Failed` event `Error: <reason>`
/// (startContainer's, after EnsureImageExists's own event).
#[tokio::test(start_paused = true)]
async fn each_image_failure_records_error_reason_on_the_container() {
    let fake = FakeRuntime::new();
    let (events, mut rx) = crate::events::EventRecorder::queued(16);
    let puller = ImagePuller::new(PullLimit::Serial).with_events(events);
    for (name, image, policy, want) in [
        (
            "bad",
            "UPPER/Bad::x",
            "IfNotPresent",
            "Error: InvalidImageName",
        ),
        (
            "never",
            "localhost/absent:1",
            "Never",
            "Error: ErrImageNeverPull",
        ),
    ] {
        let (p, sb) = pod_with(name, image, policy);
        let c = &p.spec.as_ref().unwrap().containers[0];
        assert!(puller.ensure_image(&fake, &p, c, &sb, &[]).await.is_err());
        let mut failed = Vec::new();
        while let Ok(e) = rx.try_recv() {
            if e.reason == "Failed" {
                failed.push((e.message, e.object.field_path));
            }
        }
        assert_eq!(
            failed,
            [(want.to_string(), "spec.containers{app}".to_string())],
            "{name}"
        );
    }
}

fn pull_secret(name: &str, registry: &str, user: &str) -> Secret {
    let json =
        format!(r#"{{"auths":{{"{registry}":{{"username":"{user}","password":"{user}-pw"}}}}}}"#);
    Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        type_: Some(credentials::DOCKER_CONFIG_JSON_TYPE.into()),
        data: Some(
            [(
                credentials::DOCKER_CONFIG_JSON_KEY.to_string(),
                k8s_openapi::ByteString(json.into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    }
}

#[tokio::test]
async fn logins_are_tried_in_order_until_the_registry_takes_one() {
    let fake = FakeRuntime::new();
    let image = "reg.example.com:5000/team/app:1";
    fake.require_pull_login(image, "right", "right-pw");
    let (p, sb) = pod_with("creds", image, "Always");
    let c = &p.spec.as_ref().unwrap().containers[0];
    // The most specific key first: the team's login before the host's.
    let wrong = pull_secret("a", "reg.example.com:5000/team", "wrong");
    let right = pull_secret("b", "reg.example.com:5000", "right");
    let other = pull_secret("c", "other.example.com", "other");
    let puller = ImagePuller::new(PullLimit::Serial);
    puller
        .ensure_image(&fake, &p, c, &sb, &[&right, &wrong, &other])
        .await
        .unwrap();
    assert_eq!(fake.pull_logins(), ["wrong:wrong-pw", "right:right-pw"]);
}

#[tokio::test]
async fn every_refusal_is_in_the_message_when_no_login_works() {
    let fake = FakeRuntime::new();
    let image = "reg.example.com/app:1";
    fake.require_pull_login(image, "right", "right-pw");
    let (p, sb) = pod_with("refused", image, "Always");
    let c = &p.spec.as_ref().unwrap().containers[0];
    let puller = ImagePuller::new(PullLimit::Serial);

    // No login matches: one anonymous pull, the registry's reason as it is.
    let e = puller
        .ensure_image(&fake, &p, c, &sb, &[])
        .await
        .unwrap_err();
    assert_eq!(e.reason, WaitingReason::ErrImagePull);
    assert!(e.message.ends_with("401 Unauthorized"), "{}", e.message);
    assert!(
        !e.message
            .starts_with("Failed to pull image \"reg.example.com/app:1\": [")
    );
    assert_eq!(fake.pull_logins(), [""]);

    let puller = ImagePuller::new(PullLimit::Serial);
    let (a, b) = (
        pull_secret("a", "reg.example.com", "one"),
        pull_secret("b", "reg.example.com", "two"),
    );
    let e = puller
        .ensure_image(&fake, &p, c, &sb, &[&a, &b])
        .await
        .unwrap_err();
    assert!(
        e.message
            .starts_with("Failed to pull image \"reg.example.com/app:1\": [")
            && e.message.matches("401 Unauthorized").count() == 2,
        "{}",
        e.message
    );
    assert!(
        !e.message.contains("-pw"),
        "no password in a message: {}",
        e.message
    );
}

#[tokio::test]
async fn a_broken_pull_secret_fails_the_pull_with_its_name() {
    let fake = FakeRuntime::new();
    let (p, sb) = pod_with("broken", "reg.example.com/app:1", "Always");
    let c = &p.spec.as_ref().unwrap().containers[0];
    let mut bad = pull_secret("bad", "reg.example.com", "x");
    bad.data.as_mut().unwrap().insert(
        credentials::DOCKER_CONFIG_JSON_KEY.to_string(),
        k8s_openapi::ByteString(b"{".to_vec()),
    );
    let e = ImagePuller::new(PullLimit::Serial)
        .ensure_image(&fake, &p, c, &sb, &[&bad])
        .await
        .unwrap_err();
    assert_eq!(e.reason, WaitingReason::ErrImagePull);
    assert!(e.message.contains("secret default/bad"), "{}", e.message);
    assert!(fake.calls_of("PullImage").is_empty());
}

#[tokio::test]
async fn the_nodes_docker_config_serves_when_the_pod_has_no_login() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"auths":{"https://reg.example.com/v2/":{"auth":"bm9kZTpub2RlLXB3"}}}"#,
    )
    .unwrap();
    let fake = FakeRuntime::new();
    let image = "reg.example.com/app:1";
    fake.require_pull_login(image, "node", "node-pw");
    let (p, sb) = pod_with("node-login", image, "Always");
    let c = &p.spec.as_ref().unwrap().containers[0];
    let node = NodeKeyring::with_dirs(vec![dir.path().into()], vec![], Duration::from_secs(60));
    let puller = ImagePuller::new(PullLimit::Serial).with_node_keyring(node);
    puller.ensure_image(&fake, &p, c, &sb, &[]).await.unwrap();
    assert_eq!(fake.pull_logins(), ["node:node-pw"]);
}

/// kubelet's Pulled event: Go's duration spelling, the wait for a slot counted apart.
#[tokio::test(start_paused = true)]
async fn the_pulled_event_spells_durations_as_go_does() {
    let fake = Arc::new(FakeRuntime::new());
    fake.set_pull_delay(Duration::from_millis(61_500));
    let (events, mut rx) = crate::events::EventRecorder::queued(16);
    let puller = Arc::new(ImagePuller::new(PullLimit::Serial).with_events(events));
    let (a, sa) = pod_with("a", "localhost/a:1", "Always");
    let (b, sb) = pod_with("b", "localhost/b:1", "Always");
    let (ca, cb) = (
        &a.spec.as_ref().unwrap().containers[0],
        &b.spec.as_ref().unwrap().containers[0],
    );
    let (ra, rb) = futures::join!(
        puller.ensure_image(fake.as_ref(), &a, ca, &sa, &[]),
        puller.ensure_image(fake.as_ref(), &b, cb, &sb, &[])
    );
    ra.unwrap();
    rb.unwrap();
    let mut pulled = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if e.reason == "Pulled" {
            pulled.push(e.message);
        }
    }
    pulled.sort();
    assert_eq!(
        pulled,
        [
            "Successfully pulled image \"localhost/a:1\" in 1m1.5s (1m1.5s including waiting). Image size: 0 bytes.",
            "Successfully pulled image \"localhost/b:1\" in 1m1.5s (2m3s including waiting). Image size: 0 bytes.",
        ]
    );
}

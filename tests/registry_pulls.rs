//! Pulls from a real registry (distribution 2.8 on loopback, TLS, htpasswd), on real
//! containerd with the oxlet binary: an open registry pulls with no login; a private one
//! refuses a pod without one (ErrImagePull with the registry's reason, then
//! ImagePullBackOff); the node's docker config (`<root-dir>/config.json`) and a cluster
//! pod's `imagePullSecrets` (`.dockerconfigjson` and `.dockercfg`) are matched to the
//! image and sent as the CRI login; a wrong login is tried and the next one taken; a pull
//! secret that cannot be had is a FailedToRetrieveImagePullSecret warning.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use common::registry::{Login, Registry, docker_config_json, pull_pod};
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use serde_json::json;
use testapi::TestApiServer;

const WAIT: Duration = Duration::from_secs(40);

fn alice() -> Login {
    Login {
        username: "alice".into(),
        password: "s3cret-pw".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_pods_pull_with_and_without_logins() {
    let bed = Testbed::start().await;
    let open = Registry::start(&bed, None, &["open/busybox:1"]).await;
    let private = Registry::start(&bed, Some(alice()), &["team/busybox:1", "node/busybox:1"]).await;
    let mut ox = Oxlet::new(&bed);
    // The node's login covers only the `node` repositories of the private registry.
    std::fs::create_dir_all(&ox.root).unwrap();
    let node_key = format!("{}/node", private.host());
    std::fs::write(
        ox.root.join("config.json"),
        docker_config_json(&node_key, &alice()),
    )
    .unwrap();
    ox.spawn(&[]);
    let m = &ox.manifests;
    let open_image = open.image("open/busybox:1");
    write_manifest(m, "open.yaml", &pull_pod("open", &open_image, "Always"));
    write_manifest(
        m,
        "nologin.yaml",
        &pull_pod("nologin", &private.image("team/busybox:1"), "Always"),
    );
    write_manifest(
        m,
        "nodelogin.yaml",
        &pull_pod("nodelogin", &private.image("node/busybox:1"), "Always"),
    );

    // An open registry: pulled with no login, kubelet's event with the size.
    ox.wait_running("open", WAIT).await;
    let pulled = format!("Event: Successfully pulled image \\\"{open_image}\\\" in ");
    ox.wait_logged(&pulled, 1, WAIT).await;
    let log = ox.log();
    let line = log.lines().find(|l| l.contains(&pulled)).unwrap();
    assert!(line.contains("including waiting). Image size: "), "{line}");
    assert!(!line.contains("Image size: 0 bytes"), "{line}");

    // The pull policies on a pulled image: IfNotPresent takes it as it is, Never will
    // not pull one that is not there.
    write_manifest(
        m,
        "again.yaml",
        &pull_pod("again", &open_image, "IfNotPresent"),
    );
    let absent = open.image("open/absent:1");
    write_manifest(m, "never.yaml", &pull_pod("never", &absent, "Never"));
    ox.wait_running("again", WAIT).await;
    let present = format!("Event: Container image \\\"{open_image}\\\" already present on machine");
    ox.wait_logged(&present, 1, WAIT).await;
    ox.wait_main_waiting("never", "ErrImageNeverPull", WAIT)
        .await;

    // The node's docker config serves the repositories its key covers.
    ox.wait_running("nodelogin", WAIT).await;

    // No login: the registry's refusal, then the back-off. containerd 1.6 reports the
    // bare 401; 1.7 and 2.x say that no basic auth credentials were there.
    let w = ox.wait_main_waiting("nologin", "ErrImagePull", WAIT).await;
    let msg = w.message.unwrap_or_default();
    let refusal = match bed.containerd_release() {
        (1, 6) => "401 Unauthorized",
        _ => "authorization failed: no basic auth credentials",
    };
    assert!(
        msg.starts_with(&format!(
            "Failed to pull image \"{}\": ",
            private.image("team/busybox:1")
        )) && msg.contains(refusal),
        "{msg}"
    );
    ox.wait_main_waiting("nologin", "ImagePullBackOff", WAIT)
        .await;

    // No password in oxlet's log, whatever it says about logins.
    let log = ox.log();
    assert!(
        !log.contains(&alice().password),
        "a password reached the log"
    );
    assert!(
        log.contains("pulling with the registry logins that match"),
        "{}",
        tail(&log, 40)
    );
}

fn object<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).unwrap()
}

/// A pull secret of `type_` holding `key` = `value`.
fn pull_secret(name: &str, type_: &str, key: &str, value: &str) -> Secret {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(value);
    object(json!({
        "metadata": {"name": name, "namespace": "default"},
        "type": type_, "data": {key: b64},
    }))
}

fn cluster_pod(name: &str, image: &str, secrets: &[&str]) -> Pod {
    let refs: Vec<_> = secrets.iter().map(|s| json!({"name": s})).collect();
    object(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "testnode",
            "terminationGracePeriodSeconds": 1,
            "hostNetwork": true,
            "imagePullSecrets": refs,
            "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "Always",
                "command": ["sleep", "3600"],
            }],
        },
    }))
}

/// Waits until an event about `pod` has `reason` and `message` contains `text`.
async fn wait_event(ox: &Oxlet, api: &TestApiServer, pod: &str, reason: &str, text: &str) -> Event {
    wait_event_in(ox, api, "default", pod, reason, text).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_pods_pull_with_their_image_pull_secrets() {
    let bed = Testbed::start().await;
    let private = Registry::start(&bed, Some(alice()), &["team/busybox:1"]).await;
    let image = private.image("team/busybox:1");
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    let host = private.host();
    let right = alice();
    let wrong = Login {
        username: "alice".into(),
        password: "not-it".into(),
    };
    let json_secret = docker_config_json(host, &right);
    api.put(&pull_secret(
        "regcred",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &json_secret,
    ))
    .unwrap();
    // The old format: the registry map itself, with user name and password fields.
    let dockercfg = format!(
        r#"{{"https://{host}":{{"username":"{}","password":"{}","email":"a@example.com"}}}}"#,
        right.username, right.password
    );
    api.put(&pull_secret(
        "oldcfg",
        "kubernetes.io/dockercfg",
        ".dockercfg",
        &dockercfg,
    ))
    .unwrap();
    // A wrong login filed under the repository's own path: tried first, as the more
    // specific key.
    let wrong_json = docker_config_json(&format!("{host}/team"), &wrong);
    api.put(&pull_secret(
        "wrong",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &wrong_json,
    ))
    .unwrap();

    for (name, secrets) in [
        ("json", vec!["regcred"]),
        ("cfg", vec!["oldcfg"]),
        ("wrong", vec!["wrong"]),
        ("rotated", vec!["wrong", "regcred"]),
        ("missing", vec!["nosuch"]),
    ] {
        api.put(&cluster_pod(name, &image, &secrets)).unwrap();
    }
    let ox = Oxlet::start(
        &bed,
        &[
            &format!("--kubeconfig={}", api.kubeconfig().display()),
            "--sync-frequency=1s",
        ],
    );

    for name in ["json", "cfg", "rotated"] {
        ox.wait_api_running(name, WAIT).await;
    }
    let e = wait_event(&ox, &api, "json", "Pulled", "Successfully pulled image").await;
    assert!(e.message.unwrap().contains("Image size: "));

    // Only a wrong login: the registry's refusal in the status and the event.
    let w = ox.wait_main_waiting("wrong", "ErrImagePull", WAIT).await;
    assert!(w.message.unwrap_or_default().contains("401 Unauthorized"));
    wait_event(&ox, &api, "wrong", "Failed", "401 Unauthorized").await;

    // A pull secret that does not exist: kubelet's warning, and the pull goes on
    // without it (and is refused).
    wait_event(
        &ox,
        &api,
        "missing",
        "FailedToRetrieveImagePullSecret",
        "Unable to retrieve some image pull secrets (nosuch)",
    )
    .await;
    ox.wait_main_waiting("missing", "ErrImagePull", WAIT).await;

    // The secret is created: the next try after the back-off takes it.
    api.put(&pull_secret(
        "nosuch",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &json_secret,
    ))
    .unwrap();
    ox.wait_api_running("missing", Duration::from_secs(60))
        .await;
    assert!(
        !ox.log().contains(&right.password),
        "a password reached the log"
    );
}

/// A pod in `namespace` with pull policy `policy` and these pull secrets.
fn pod_in(namespace: &str, name: &str, image: &str, policy: &str, secrets: &[&str]) -> Pod {
    let mut p = cluster_pod(name, image, secrets);
    p.metadata.namespace = Some(namespace.into());
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.image_pull_policy = Some(policy.into());
    p
}

/// Waits for an event about `pod` in `namespace` with `reason` whose message contains
/// `text`; returns it.
async fn wait_event_in(
    ox: &Oxlet,
    api: &TestApiServer,
    namespace: &str,
    pod: &str,
    reason: &str,
    text: &str,
) -> Event {
    ox.poll(
        &format!("{reason} event for {namespace}/{pod}"),
        WAIT,
        || {
            let events = api.list::<Event>(Some(namespace)).ok()?;
            events.into_iter().find(|e| {
                e.involved_object.name.as_deref() == Some(pod)
                    && e.reason.as_deref() == Some(reason)
                    && e.message.as_deref().is_some_and(|m| m.contains(text))
            })
        },
    )
    .await
}

/// kubelet's `imagePullCredentialsVerificationPolicy`: a private image pulled with one
/// namespace's secret is not another namespace's to use from the node's cache, under
/// AlwaysVerify and under the default (it was the agent that pulled it); a secret with
/// the same login is; Never says "not present"; the records survive a restart; and
/// under NeverVerify any pod takes what is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn present_private_images_are_only_for_pods_whose_credentials_pulled_them() {
    let bed = Testbed::start().await;
    let private = Registry::start(&bed, Some(alice()), &["team/busybox:1"]).await;
    let image = private.image("team/busybox:1");
    let dir = tempfile::tempdir().unwrap();
    let api = TestApiServer::start(dir.path()).await.unwrap();
    let login = docker_config_json(private.host(), &alice());
    for (namespace, name) in [("team-a", "regcred"), ("team-c", "copy")] {
        let mut s = pull_secret(
            name,
            "kubernetes.io/dockerconfigjson",
            ".dockerconfigjson",
            &login,
        );
        s.metadata.namespace = Some(namespace.into());
        api.put(&s).unwrap();
    }
    let config = |policy: &str| {
        let file = bed.base_dir().join(format!("kubelet-{policy}.yaml"));
        std::fs::write(
            &file,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 imagePullCredentialsVerificationPolicy: {policy}\n"
            ),
        )
        .unwrap();
        format!("--config={}", file.display())
    };
    let kubeconfig = format!("--kubeconfig={}", api.kubeconfig().display());
    let mut ox = Oxlet::new(&bed);
    ox.spawn(&[&kubeconfig, "--sync-frequency=1s", &config("AlwaysVerify")]);

    // The owner pulls it with its namespace's secret.
    api.put(&pod_in(
        "team-a",
        "owner",
        &image,
        "IfNotPresent",
        &["regcred"],
    ))
    .unwrap();
    ox.wait_api_running("owner", WAIT).await;
    wait_event_in(
        &ox,
        &api,
        "team-a",
        "owner",
        "Pulled",
        "Successfully pulled image",
    )
    .await;
    let pulled_dir = ox.root.join("image_manager/pulled");
    let record = std::fs::read_dir(&pulled_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        text.contains("\"kind\":\"ImagePulledRecord\"") && text.contains("\"name\":\"regcred\""),
        "{text}"
    );
    assert!(
        !text.contains(&alice().password),
        "a password reached the pull record"
    );

    // Another namespace without a secret: the image is there, but the pod must pull it
    // with its own credentials, and has none. With Never it is "not present".
    api.put(&pod_in("team-b", "intruder", &image, "IfNotPresent", &[]))
        .unwrap();
    api.put(&pod_in("team-b", "never", &image, "Never", &[]))
        .unwrap();
    let w = ox.wait_main_waiting("intruder", "ErrImagePull", WAIT).await;
    assert!(
        w.message
            .unwrap_or_default()
            .starts_with("Failed to pull image")
    );
    let w = ox
        .wait_main_waiting("never", "ErrImageNeverPull", WAIT)
        .await;
    assert_eq!(
        w.message.as_deref(),
        Some(
            format!("Container image {image:?} is not present with pull policy of Never").as_str()
        )
    );
    // A secret of its own with the same login: known, so no pull.
    api.put(&pod_in(
        "team-c",
        "sibling",
        &image,
        "IfNotPresent",
        &["copy"],
    ))
    .unwrap();
    ox.wait_api_running("sibling", WAIT).await;
    wait_event_in(
        &ox,
        &api,
        "team-c",
        "sibling",
        "Pulled",
        "already present on machine and can be accessed by the pod",
    )
    .await;

    // The default policy after a restart: the records say the agent pulled it, so the
    // intruder is still refused (a new refusal, said by the new process).
    let refusal = "image present but this pod's pull credentials must be verified first";
    let intruder_refusals = |log: &str| {
        log.lines()
            .filter(|l| {
                l.contains(refusal)
                    && l.contains("intruder")
                    && l.contains("NeverVerifyPreloadedImages")
            })
            .count()
    };
    assert_eq!(intruder_refusals(&ox.log()), 0);
    ox.sigterm();
    ox.spawn(&[&kubeconfig, "--sync-frequency=1s"]);
    ox.poll(
        "the intruder refused under the default policy",
        WAIT,
        || (intruder_refusals(&ox.log()) > 0).then_some(()),
    )
    .await;

    // NeverVerify: any pod takes what the node has.
    ox.sigterm();
    ox.spawn(&[&kubeconfig, "--sync-frequency=1s", &config("NeverVerify")]);
    ox.wait_api_running("intruder", Duration::from_secs(60))
        .await;
    ox.wait_api_running("never", WAIT).await;
    let log = ox.log();
    assert!(
        log.contains("image present but this pod's pull credentials must be verified first"),
        "{}",
        tail(&log, 40)
    );
    assert!(
        !log.contains(&alice().password),
        "a password reached the log"
    );
}

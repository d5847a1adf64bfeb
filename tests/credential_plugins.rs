//! Credential provider plugins (`--image-credential-provider-config`,
//! `--image-credential-provider-bin-dir`) with the real oxlet, real containerd and a real
//! registry with htpasswd: private images pull with the logins a plugin returns (no pull
//! secret, no node docker config); its answers are cached by image or by registry for as
//! long as it says, and not at all for 0; a failing plugin leaves its pod in
//! ErrImagePull (the registry's refusal, the plugin's error in the log) and the others
//! running; a bad config stops the start. In cluster mode a provider with
//! `tokenAttributes` gets a token of the pod's service account for its audience (which the
//! apiserver grants a node only by RBAC) and the account's annotations.
//!
//! The plugin is `tests/data/credential-provider.sh` (sh and coreutils): it saves each
//! request to a file, so a test counts runs and reads what oxlet sent without the
//! script having to parse JSON.

mod agent;
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::*;
use common::Testbed;
use common::registry::{Login, Registry, pull_pod};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(40);
const PLUGIN: &str = "tests/data/credential-provider.sh";

fn alice() -> Login {
    Login {
        username: "alice".into(),
        password: "plugin-pw-4711".into(),
    }
}

/// One provider of the config: the test plugin installed as `name`, recording into
/// `<dir>/<name>`, with the given matchImages and env.
struct Provider<'a> {
    name: &'a str,
    match_images: Vec<String>,
    env: Vec<(&'a str, String)>,
    extra: &'a str,
}

/// Writes the bin dir (the plugin under each provider's name) and the config; returns
/// the flags.
fn install(dir: &Path, providers: &[Provider<'_>]) -> Vec<String> {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mut config = String::from(
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n",
    );
    for p in providers {
        std::fs::copy(PLUGIN, bin.join(p.name)).unwrap();
        let records = dir.join(p.name);
        std::fs::create_dir_all(&records).unwrap();
        let mut env = vec![("RECORD_DIR", records.display().to_string())];
        env.extend(p.env.iter().cloned());
        let env: Vec<String> = env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}).to_string())
            .collect();
        config.push_str(&format!(
            "- name: {}\n  matchImages: {}\n  defaultCacheDuration: 1h\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  env: [{}]\n{}",
            p.name,
            json!(p.match_images),
            env.join(", "),
            p.extra
        ));
    }
    let file = dir.join("credential-providers.yaml");
    std::fs::write(&file, config).unwrap();
    vec![
        format!("--image-credential-provider-config={}", file.display()),
        format!("--image-credential-provider-bin-dir={}", bin.display()),
    ]
}

/// The requests provider `name` was sent, oldest first.
fn requests(dir: &Path, name: &str) -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join(name))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap())
        .collect()
}

fn login_env(registry: &Registry, key_type: &str) -> Vec<(&'static str, String)> {
    vec![
        ("REGISTRY", registry.host().to_string()),
        ("USERNAME", alice().username),
        ("PASSWORD", alice().password),
        ("CACHE_KEY_TYPE", key_type.to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_images_pull_through_plugins_and_their_cache() {
    let bed = Testbed::start().await;
    let repos = [
        "img/busybox:1",
        "img/other:1",
        "reg/busybox:1",
        "reg/other:1",
        "nocache/busybox:1",
        "broken/busybox:1",
    ];
    let registry = Registry::start(&bed, Some(alice()), &repos).await;
    let host = registry.host().to_string();
    let plugins = tempfile::tempdir().unwrap();
    let mut broken = login_env(&registry, "Image");
    broken.push(("FAIL", "the token service is unreachable".into()));
    let mut zero = login_env(&registry, "Image");
    zero.push(("CACHE_DURATION", "0s".into()));
    let flags = install(
        plugins.path(),
        &[
            Provider {
                name: "by-image",
                match_images: vec![format!("{host}/img")],
                env: login_env(&registry, "Image"),
                extra: "",
            },
            Provider {
                name: "by-registry",
                match_images: vec![format!("{host}/reg")],
                env: login_env(&registry, "Registry"),
                extra: "",
            },
            Provider {
                name: "no-cache",
                match_images: vec![format!("{host}/nocache")],
                env: zero,
                extra: "",
            },
            Provider {
                name: "broken",
                match_images: vec![format!("{host}/broken")],
                env: broken,
                extra: "",
            },
        ],
    );
    let mut ox = Oxlet::new(&bed);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    ox.spawn(&flags);
    let m = ox.manifests.clone();
    let runs = |name: &str| requests(plugins.path(), name).len();

    // The first pull runs the plugin and takes its login; a second pod pulling the
    // same image (pull policy Always) is served from the cache.
    write_manifest(
        &m,
        "a.yaml",
        &pull_pod("a", &registry.image("img/busybox:1"), "Always"),
    );
    write_manifest(
        &m,
        "broken.yaml",
        &pull_pod("broken", &registry.image("broken/busybox:1"), "Always"),
    );
    ox.wait_running("a", WAIT).await;
    assert_eq!(runs("by-image"), 1);
    assert_eq!(
        requests(plugins.path(), "by-image")[0]["image"],
        format!("{host}/img/busybox")
    );
    write_manifest(
        &m,
        "b.yaml",
        &pull_pod("b", &registry.image("img/busybox:1"), "Always"),
    );
    ox.wait_running("b", WAIT).await;
    assert_eq!(
        runs("by-image"),
        1,
        "the cached login served the second pull"
    );
    // cacheKeyType Image: another image of the registry runs the plugin again.
    write_manifest(
        &m,
        "c.yaml",
        &pull_pod("c", &registry.image("img/other:1"), "Always"),
    );
    ox.wait_running("c", WAIT).await;
    assert_eq!(runs("by-image"), 2);

    // cacheKeyType Registry: one run serves every image of the registry.
    write_manifest(
        &m,
        "r1.yaml",
        &pull_pod("r1", &registry.image("reg/busybox:1"), "Always"),
    );
    ox.wait_running("r1", WAIT).await;
    write_manifest(
        &m,
        "r2.yaml",
        &pull_pod("r2", &registry.image("reg/other:1"), "Always"),
    );
    ox.wait_running("r2", WAIT).await;
    assert_eq!(runs("by-registry"), 1);

    // cacheDuration 0: never cached.
    write_manifest(
        &m,
        "z1.yaml",
        &pull_pod("z1", &registry.image("nocache/busybox:1"), "Always"),
    );
    ox.wait_running("z1", WAIT).await;
    write_manifest(
        &m,
        "z2.yaml",
        &pull_pod("z2", &registry.image("nocache/busybox:1"), "Always"),
    );
    ox.wait_running("z2", WAIT).await;
    assert_eq!(runs("no-cache"), 2);

    // The failing plugin: no login, so the registry refuses the pull; the plugin's
    // error is in the log; the other pods ran meanwhile.
    let w = ox.wait_main_waiting("broken", "ErrImagePull", WAIT).await;
    let msg = w.message.unwrap_or_default();
    assert!(
        msg.starts_with(&format!(
            "Failed to pull image \"{}\": ",
            registry.image("broken/busybox:1")
        )),
        "{msg}"
    );
    ox.wait_logged("the token service is unreachable", 1, WAIT)
        .await;
    let log = ox.log();
    let line = log
        .lines()
        .find(|l| l.contains("the token service is unreachable"))
        .unwrap();
    assert!(
        line.contains("error execing credential provider plugin broken for image ")
            && line.contains("exit status 1"),
        "{line}"
    );
    assert!(
        !log.contains(&alice().password),
        "a password reached the log"
    );
    assert!(
        log.contains("registered credential provider plugin"),
        "{}",
        tail(&log, 40)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_or_a_missing_plugin_stops_the_start() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let config = dir.path().join("providers.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
         - name: ../escape\n  matchImages: [\"registry.example\"]\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
    )
    .unwrap();
    let flags = [
        format!("--image-credential-provider-config={}", config.display()),
        format!("--image-credential-provider-bin-dir={}", bin.display()),
    ];
    let run = |flags: &[String]| {
        let mut ox = Oxlet::new(&bed);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        ox.spawn(&flags);
        let status = ox.wait_exit(WAIT);
        (status, ox.log())
    };
    let (status, log) = run(&flags);
    assert!(!status.success());
    let shown = config.display().to_string();
    assert!(
        log.contains(
            "Failed to register CRI auth plugins: failed to validate credential provider config"
        ) && log.contains(&shown)
            && log.contains(
                // Go-quoted inside the log line's err, as klog writes it.
                r#"providers.name: Invalid value: \"../escape\": provider name cannot contain '/'"#
            )
            && log.contains("providers.defaultCacheDuration: Required value"),
        "{}",
        tail(&log, 20)
    );

    // A valid config whose plugin is not in the bin dir.
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
         - name: absent\n  matchImages: [\"registry.example\"]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
    )
    .unwrap();
    let (status, log) = run(&flags);
    assert!(!status.success());
    let want = format!(
        "plugin binary executable {} did not exist",
        bin.join("absent").display()
    );
    assert!(log.contains(&want), "{}", tail(&log, 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_reach_the_plugin_in_cluster_mode() {
    let bed = Testbed::start().await;
    let registry = Registry::start(&bed, Some(alice()), &["team/busybox:1"]).await;
    let image = registry.image("team/busybox:1");
    let plugins = tempfile::tempdir().unwrap();
    let audience = "registry.example/pull";
    let attrs = format!(
        "  tokenAttributes:\n    serviceAccountTokenAudience: {audience}\n    cacheType: ServiceAccount\n    requireServiceAccount: true\n    requiredServiceAccountAnnotationKeys: [registry.example/role]\n    optionalServiceAccountAnnotationKeys: [registry.example/team, registry.example/absent]\n"
    );
    let flags = install(
        plugins.path(),
        &[Provider {
            name: "workload-identity",
            match_images: vec![registry.host().to_string()],
            env: login_env(&registry, "Image"),
            extra: &attrs,
        }],
    );
    let dir = tempfile::tempdir().unwrap();
    let api = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let sa: ServiceAccount = serde_json::from_value(json!({
        "metadata": {"name": "puller", "namespace": "default", "uid": "sa-uid-1",
            "annotations": {"registry.example/role": "reader", "registry.example/team": "blue", "other/x": "no"}},
    }))
    .unwrap();
    api.put(&sa).unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "wid", "namespace": "default"},
        "spec": {
            "nodeName": "testnode", "serviceAccountName": "puller",
            "terminationGracePeriodSeconds": 1, "hostNetwork": true,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Always", "command": ["sleep", "3600"]}],
        },
    }))
    .unwrap();
    api.put(&pod).unwrap();
    let mut args = vec![
        format!("--kubeconfig={}", api.kubeconfig().display()),
        "--sync-frequency=1s".to_string(),
    ];
    args.extend(flags);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ox = Oxlet::start(&bed, &args);

    // The node may not ask for the audience yet: the apiserver refuses the token, the
    // plugin is skipped, and the registry refuses the pull without a login.
    ox.wait_main_waiting("wid", "ErrImagePull", WAIT).await;
    ox.wait_logged(
        "not authorized to request tokens for this audience",
        1,
        WAIT,
    )
    .await;
    assert!(requests(plugins.path(), "workload-identity").is_empty());

    // RBAC grants the nodes the audience: the next try gets a token and pulls.
    api.allow_token_audience("system:nodes", audience, Some("puller"));
    ox.wait_api_running("wid", Duration::from_secs(60)).await;
    let sent = requests(plugins.path(), "workload-identity");
    assert_eq!(sent.len(), 1, "{sent:?}");
    let token = sent[0]["serviceAccountToken"].as_str().unwrap_or_default();
    assert!(token.starts_with("testapi-default-puller-"), "{token}");
    assert_eq!(
        sent[0]["serviceAccountAnnotations"],
        json!({"registry.example/role": "reader", "registry.example/team": "blue"})
    );
    // The token was asked for the configured audience, bound to the pod.
    let asked = api
        .requests()
        .into_iter()
        .find(|r| {
            r.method == "POST"
                && r.path.ends_with("/serviceaccounts/puller/token")
                && r.status == 201
        })
        .expect("a granted TokenRequest");
    let body: serde_json::Value = serde_json::from_str(&asked.body).unwrap();
    assert_eq!(body["spec"]["audiences"], json!([audience]));
    assert_eq!(body["spec"]["boundObjectRef"]["kind"], "Pod");
    assert_eq!(body["spec"]["boundObjectRef"]["name"], "wid");
    assert!(!ox.log().contains(token), "the token reached the log");
}

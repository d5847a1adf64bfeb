use std::os::unix::fs::PermissionsExt as _;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

/// A plugin that counts its runs in `<dir>/runs`, saves its last request in
/// `<dir>/request`, and answers with `cacheKeyType`/`cacheDuration` from its args.
fn setup(dir: &Path, provider_extra: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\ncat > {d}/request\necho run >> {d}/runs\nsleep 0.2\nprintf '{{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"cacheKeyType\":\"%s\",%s\"auth\":{{\"reg.io\":{{\"username\":\"plugin\",\"password\":\"pw\"}}}}}}' \"$1\" \"$2\"\n",
        d = dir.display()
    );
    let binary = bin.join("fake");
    std::fs::write(&binary, script).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: fake\n  matchImages: [\"*.io\"]\n  defaultCacheDuration: 1h\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n{provider_extra}"),
    )
    .unwrap();
    (config, bin)
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs")).map_or(0, |s| s.lines().count())
}

fn pod(sa: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            service_account_name: sa.map(Into::into),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn users(k: &Keyring, repo: &str) -> Vec<(String, LoginSource)> {
    k.lookup(repo)
        .into_iter()
        .map(|l| (l.credential.username, l.source))
        .collect()
}

#[tokio::test]
async fn concurrent_asks_run_the_plugin_once_and_the_answer_is_cached() {
    let dir = tempfile::tempdir().unwrap();
    let (config, bin) = setup(dir.path(), "  args: [Registry, '']\n");
    let plugins = CredentialPlugins::load(&config, &bin, None).unwrap();
    let p = pod(None);
    let (a, b) = tokio::join!(
        plugins.keyring("reg.io/x", &p),
        plugins.keyring("reg.io/x", &p)
    );
    assert_eq!(
        users(&a, "reg.io/x"),
        [("plugin".to_string(), LoginSource::Node)]
    );
    assert_eq!(users(&b, "reg.io/x").len(), 1);
    assert_eq!(runs(dir.path()), 1, "one run for two concurrent asks");
    // Registry key: another image of the registry is served from the cache.
    assert_eq!(
        users(&plugins.keyring("reg.io/y", &p).await, "reg.io/y").len(),
        1
    );
    assert_eq!(runs(dir.path()), 1);
    // Images the provider does not match never run it.
    assert!(
        plugins
            .keyring("example.com/x", &p)
            .await
            .lookup("example.com/x")
            .is_empty()
    );
    assert_eq!(runs(dir.path()), 1);
    let request: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("request")).unwrap()).unwrap();
    assert_eq!(request["image"], "reg.io/x");
    assert!(request.get("serviceAccountToken").is_none());
}

#[tokio::test]
async fn a_zero_duration_is_not_cached_and_image_keys_are_per_image() {
    let dir = tempfile::tempdir().unwrap();
    let (config, bin) = setup(dir.path(), "  args: [Image, '\"cacheDuration\":\"0s\",']\n");
    let plugins = CredentialPlugins::load(&config, &bin, None).unwrap();
    let p = pod(None);
    plugins.keyring("reg.io/x", &p).await;
    plugins.keyring("reg.io/x", &p).await;
    assert_eq!(runs(dir.path()), 2);

    let dir = tempfile::tempdir().unwrap();
    let (config, bin) = setup(dir.path(), "  args: [Image, '']\n");
    let plugins = CredentialPlugins::load(&config, &bin, None).unwrap();
    plugins.keyring("reg.io/x", &p).await;
    plugins.keyring("reg.io/x", &p).await;
    assert_eq!(runs(dir.path()), 1);
    plugins.keyring("reg.io/y", &p).await;
    assert_eq!(
        runs(dir.path()),
        2,
        "an Image key does not serve another image"
    );
}

/// The apiserver's part in unit tests: one account with annotations; tokens numbered.
struct Accounts {
    issued: AtomicUsize,
}

impl ServiceAccounts for Accounts {
    fn service_account<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> AccountFuture<'a, Option<ServiceAccount>> {
        let found = (ns == "ns" && name == "builder").then(|| ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some("sa-uid".into()),
                annotations: Some(BTreeMap::from([
                    ("example.com/role".to_string(), "pull".to_string()),
                    ("example.com/other".to_string(), "x".to_string()),
                ])),
                ..Default::default()
            },
            ..Default::default()
        });
        Box::pin(async move { Ok(found) })
    }

    fn token<'a>(
        &'a self,
        pod: &'a Pod,
        account: &'a str,
        audience: &'a str,
    ) -> AccountFuture<'a, String> {
        let n = self.issued.fetch_add(1, Ordering::SeqCst);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        Box::pin(async move { Ok(format!("{account}-{audience}-{uid}-{n}")) })
    }
}

#[tokio::test]
async fn token_mode_passes_the_token_and_annotations_and_keys_the_cache_by_account() {
    let dir = tempfile::tempdir().unwrap();
    let attrs = "  args: [Global, '']\n  tokenAttributes:\n    serviceAccountTokenAudience: my-registry\n    cacheType: ServiceAccount\n    requireServiceAccount: true\n    requiredServiceAccountAnnotationKeys: [example.com/role]\n    optionalServiceAccountAnnotationKeys: [example.com/team]\n";
    let (config, bin) = setup(dir.path(), attrs);
    let accounts = Arc::new(Accounts {
        issued: AtomicUsize::new(0),
    });
    let plugins = CredentialPlugins::load(&config, &bin, Some(accounts.clone())).unwrap();
    let found = users(
        &plugins.keyring("reg.io/x", &pod(Some("builder"))).await,
        "reg.io/x",
    );
    let account = LoginSource::ServiceAccount {
        namespace: "ns".into(),
        name: "builder".into(),
        uid: "sa-uid".into(),
    };
    assert_eq!(found, [("plugin".to_string(), account)]);
    let request: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("request")).unwrap()).unwrap();
    assert_eq!(
        request["serviceAccountToken"],
        "builder-my-registry-uid-1-0"
    );
    assert_eq!(
        request["serviceAccountAnnotations"],
        serde_json::json!({"example.com/role": "pull"}),
        "only the listed annotations"
    );
    // Cached for the account (Global key), though each ask requests a token.
    plugins.keyring("other.io/y", &pod(Some("builder"))).await;
    assert_eq!(runs(dir.path()), 1);
    assert_eq!(accounts.issued.load(Ordering::SeqCst), 2);
    // No account, or one without the required annotation: skipped, no run.
    assert!(
        plugins
            .keyring("reg.io/x", &pod(None))
            .await
            .lookup("reg.io/x")
            .is_empty()
    );
    assert!(
        plugins
            .keyring("reg.io/x", &pod(Some("nobody")))
            .await
            .lookup("reg.io/x")
            .is_empty()
    );
    assert_eq!(runs(dir.path()), 1);
    // Standalone: no apiserver, so no token; the provider is skipped for the pod.
    let standalone = CredentialPlugins::load(&config, &bin, None).unwrap();
    assert!(
        standalone
            .keyring("reg.io/x", &pod(Some("builder")))
            .await
            .lookup("reg.io/x")
            .is_empty()
    );
    assert_eq!(runs(dir.path()), 1);
}

#[test]
fn setup_refuses_a_missing_bin_dir_or_binary() {
    let dir = tempfile::tempdir().unwrap();
    let (config, bin) = setup(dir.path(), "");
    let e = CredentialPlugins::load(&config, &dir.path().join("nope"), None).unwrap_err();
    assert!(
        e.to_string().starts_with("plugin binary directory ")
            && e.to_string().ends_with("nope did not exist"),
        "{e}"
    );
    std::fs::remove_file(bin.join("fake")).unwrap();
    let e = CredentialPlugins::load(&config, &bin, None).unwrap_err();
    assert!(
        e.to_string().contains("plugin binary executable")
            && e.to_string().contains("fake did not exist"),
        "{e}"
    );
    std::fs::write(bin.join("fake"), "#!/bin/sh\n").unwrap();
    let e = CredentialPlugins::load(&config, &bin, None).unwrap_err();
    assert!(e.to_string().contains("is not an executable file"), "{e}");
}

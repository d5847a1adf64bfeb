//! The clients built from kubeconfig files written here, against a real HTTPS server
//! (`test_apiserver`) that checks the bearer token or the client certificate.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use tokio::time::Instant;

use super::test_apiserver::{Auth, Pki, TestApiserver};
use super::{ClientSettings, build};

const TOKEN: &str = "abcdef.0123456789abcdef";

fn settings() -> ClientSettings {
    ClientSettings {
        qps: 50,
        burst: 100,
        node_status_update_frequency: Duration::from_secs(10),
        node_lease_duration: Duration::from_secs(40),
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig in kind's kubelet.conf shape with `cluster` and `user` spliced in.
fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n{cluster}  name: kind\n\
         contexts:\n- context:\n    cluster: kind\n    user: system:node:kind-control-plane\n  \
         name: system:node:kind-control-plane@kind\n\
         current-context: system:node:kind-control-plane@kind\npreferences: {{}}\n\
         users:\n- name: system:node:kind-control-plane\n  user:\n{user}"
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

async fn version_via(path: &Path) -> Result<String, String> {
    let clients = build(path, settings()).await.map_err(|e| e.to_string())?;
    clients
        .main
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn bearer_token_and_ca_data() {
    let pki = Pki::new();
    let server = TestApiserver::start(&pki, TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!(
        "    certificate-authority-data: {}\n    server: {}\n",
        b64(&pki.ca_pem),
        server.url
    );
    let good = write(
        dir.path(),
        "good.conf",
        &kubeconfig(&cluster, &format!("    token: {TOKEN}\n")),
    );
    assert_eq!(version_via(&good).await.unwrap(), "v1.33.1");
    let bad = write(
        dir.path(),
        "bad.conf",
        &kubeconfig(&cluster, "    token: wrong\n"),
    );
    let err = version_via(&bad).await.unwrap_err();
    assert!(err.contains("401") || err.contains("Unauthorized"), "{err}");
    let auths: Vec<Auth> = server.seen().into_iter().map(|s| s.auth).collect();
    assert_eq!(auths[0], Auth::Token);
    assert!(auths[1..].iter().all(|a| *a == Auth::None), "{auths:?}");
}

#[tokio::test]
async fn client_certificate_data() {
    let pki = Pki::new();
    let server = TestApiserver::start(&pki, TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!(
        "    certificate-authority-data: {}\n    server: {}\n",
        b64(&pki.ca_pem),
        server.url
    );
    let user = format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(&pki.client_cert_pem),
        b64(&pki.client_key_pem)
    );
    let path = write(dir.path(), "admin.conf", &kubeconfig(&cluster, &user));
    assert_eq!(version_via(&path).await.unwrap(), "v1.33.1");
    assert_eq!(server.seen()[0].auth, Auth::ClientCert);
}

/// Files named relative to the kubeconfig's directory, and kind's one PEM file that
/// holds both the client certificate and its key, named by both fields.
#[tokio::test]
async fn relative_file_paths_and_kinds_combined_pem() {
    let pki = Pki::new();
    let server = TestApiserver::start(&pki, TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pki")).unwrap();
    write(dir.path(), "pki/ca.crt", &pki.ca_pem);
    write(dir.path(), "pki/client.crt", &pki.client_cert_pem);
    write(dir.path(), "pki/client.key", &pki.client_key_pem);
    write(
        dir.path(),
        "pki/kubelet-client-current.pem",
        &format!("{}{}", pki.client_cert_pem, pki.client_key_pem),
    );
    let cluster = format!(
        "    certificate-authority: pki/ca.crt\n    server: {}\n",
        server.url
    );
    let separate = write(
        dir.path(),
        "separate.conf",
        &kubeconfig(
            &cluster,
            "    client-certificate: pki/client.crt\n    client-key: pki/client.key\n",
        ),
    );
    assert_eq!(version_via(&separate).await.unwrap(), "v1.33.1");
    let combined = dir.path().join("pki/kubelet-client-current.pem");
    let kind = write(
        dir.path(),
        "kubelet.conf",
        &kubeconfig(
            &cluster,
            &format!(
                "    client-certificate: {0}\n    client-key: {0}\n",
                combined.display()
            ),
        ),
    );
    assert_eq!(version_via(&kind).await.unwrap(), "v1.33.1");
    assert!(server.seen().iter().all(|s| s.auth == Auth::ClientCert));
}

#[tokio::test]
async fn token_file() {
    let pki = Pki::new();
    let server = TestApiserver::start(&pki, TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ca.crt", &pki.ca_pem);
    write(dir.path(), "token", &format!("{TOKEN}\n"));
    let cluster = format!(
        "    certificate-authority: ca.crt\n    server: {}\n",
        server.url
    );
    let path = write(
        dir.path(),
        "t.conf",
        &kubeconfig(&cluster, "    tokenFile: token\n"),
    );
    assert_eq!(version_via(&path).await.unwrap(), "v1.33.1");
    // Without the newline, kube-rs's own re-read tokenFile is used as is.
    write(dir.path(), "token", TOKEN);
    assert_eq!(version_via(&path).await.unwrap(), "v1.33.1");
    assert!(server.seen().iter().all(|s| s.auth == Auth::Token));
    write(dir.path(), "token", "wrong\n");
    assert!(version_via(&path).await.is_err());
}

/// kubeAPIQPS/kubeAPIBurst hold back the main client: with qps 10 and burst 2, seven
/// requests need five refills, at least 500 ms; the heartbeat client is not throttled.
#[tokio::test]
async fn main_client_is_throttled_heartbeat_is_not() {
    let pki = Pki::new();
    let server = TestApiserver::start(&pki, TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!(
        "    certificate-authority-data: {}\n    server: {}\n",
        b64(&pki.ca_pem),
        server.url
    );
    let path = write(
        dir.path(),
        "k.conf",
        &kubeconfig(&cluster, &format!("    token: {TOKEN}\n")),
    );
    let clients = build(
        &path,
        ClientSettings {
            qps: 10,
            burst: 2,
            ..settings()
        },
    )
    .await
    .unwrap();
    let start = Instant::now();
    for _ in 0..7 {
        clients.main.apiserver_version().await.unwrap();
    }
    let throttled = start.elapsed();
    assert!(throttled >= Duration::from_millis(500), "{throttled:?}");
    // The server saw each of them, spread out: the seventh arrived at least 400 ms
    // after the first (five refills of 100 ms, less the first request's own latency).
    let seen = server.seen();
    assert_eq!(seen.len(), 7);
    let span = seen[6].at - seen[0].at;
    assert!(span >= Duration::from_millis(400), "{span:?}");

    // The heartbeat client shares no bucket with the main one: its seven requests
    // right after are not held back by the main client's empty bucket.
    let start = Instant::now();
    for _ in 0..7 {
        clients.heartbeat.apiserver_version().await.unwrap();
    }
    let unthrottled = start.elapsed();
    assert!(unthrottled < throttled, "{unthrottled:?} vs {throttled:?}");
}

/// The heartbeat client gives up after min(nodeStatusUpdateFrequency, lease duration).
#[tokio::test]
async fn heartbeat_times_out_under_the_lease() {
    let s = settings();
    assert_eq!(s.heartbeat_timeout(), Duration::from_secs(10));
    let s = ClientSettings {
        node_status_update_frequency: Duration::from_secs(60),
        ..settings()
    };
    assert_eq!(s.heartbeat_timeout(), Duration::from_secs(40));

    let pki = Pki::new();
    let server = TestApiserver::start(&pki, TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!(
        "    certificate-authority-data: {}\n    server: {}\n",
        b64(&pki.ca_pem),
        server.url
    );
    let path = write(
        dir.path(),
        "k.conf",
        &kubeconfig(&cluster, &format!("    token: {TOKEN}\n")),
    );
    let clients = build(
        &path,
        ClientSettings {
            node_status_update_frequency: Duration::from_millis(300),
            node_lease_duration: Duration::from_secs(1),
            ..settings()
        },
    )
    .await
    .unwrap();
    let stall = || hyper::Request::get("/stall").body(Vec::new()).unwrap();
    let start = Instant::now();
    let err = clients.heartbeat.request_text(stall()).await.unwrap_err();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}: {err}"
    );
    assert!(
        server
            .seen()
            .iter()
            .any(|s| s.path == "/stall" && s.auth == Auth::Token)
    );
    // The main client has no such timeout (kubelet's has none either).
    let main = tokio::time::timeout(
        Duration::from_millis(800),
        clients.main.request_text(stall()),
    )
    .await;
    assert!(main.is_err(), "the main client returned early: {main:?}");
}

/// A bad kubeconfig is one error naming the file and the field.
#[tokio::test]
async fn bad_kubeconfigs_name_file_and_field() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let ca = format!("    certificate-authority-data: {}\n", b64(&pki.ca_pem));
    let server = "    server: https://127.0.0.1:6443\n";
    let token = "    token: x\n";
    let cert = format!(
        "    client-certificate-data: {}\n",
        b64(&pki.client_cert_pem)
    );
    let key = format!("    client-key-data: {}\n", b64(&pki.client_key_pem));
    let cases: Vec<(&str, String, String)> = vec![
        (
            "no-server",
            kubeconfig(&ca, token),
            "field clusters[kind].cluster.server: is not set".into(),
        ),
        (
            "bad-server",
            kubeconfig(&format!("{ca}    server: 127.0.0.1:6443\n"), token),
            "field clusters[kind].cluster.server: \"127.0.0.1:6443\" is not an https:// or http:// URL".into(),
        ),
        (
            "bad-ca",
            kubeconfig(&format!("    certificate-authority-data: '!!'\n{server}"), token),
            "field clusters[kind].cluster.certificate-authority-data: is not valid base64".into(),
        ),
        (
            "ca-not-pem",
            kubeconfig(&format!("    certificate-authority-data: {}\n{server}", b64("hello")), token),
            "field clusters[kind].cluster.certificate-authority-data: holds no PEM CERTIFICATE".into(),
        ),
        (
            "ca-file-missing",
            kubeconfig(&format!("    certificate-authority: nope.crt\n{server}"), token),
            format!("field clusters[kind].cluster.certificate-authority: {d}/nope.crt: cannot read: No such file or directory"),
        ),
        (
            "cert-without-key",
            kubeconfig(&format!("{ca}{server}"), &cert),
            "field users[system:node:kind-control-plane].user.client-key: is not set, but users[system:node:kind-control-plane].user.client-certificate-data is".into(),
        ),
        (
            "key-is-a-cert",
            kubeconfig(&format!("{ca}{server}"), &format!("{cert}    client-key-data: {}\n", b64(&pki.client_cert_pem))),
            "field users[system:node:kind-control-plane].user.client-key-data: holds no PEM private key".into(),
        ),
        (
            "key-file-missing",
            kubeconfig(&format!("{ca}{server}"), &format!("{cert}    client-key: /nonexistent/k.pem\n")),
            "field users[system:node:kind-control-plane].user.client-key: /nonexistent/k.pem: cannot read: No such file or directory".into(),
        ),
        (
            "empty-token-file",
            kubeconfig(&format!("{ca}{server}"), "    tokenFile: empty\n"),
            format!("field users[system:node:kind-control-plane].user.tokenFile: {d}/empty is empty"),
        ),
        (
            "no-context",
            kubeconfig(&format!("{ca}{server}"), &format!("{cert}{key}"))
                .replace("current-context: system:node:kind-control-plane@kind", "current-context: other"),
            "field current-context: names context \"other\", which is not in contexts".into(),
        ),
        (
            "no-current-context",
            kubeconfig(&format!("{ca}{server}"), token)
                .replace("current-context: system:node:kind-control-plane@kind\n", ""),
            "field current-context: is not set".into(),
        ),
        (
            "no-cluster",
            kubeconfig(&format!("{ca}{server}"), token).replace("  name: kind\n", "  name: other\n"),
            "field contexts[system:node:kind-control-plane@kind].context.cluster: names cluster \"kind\", which is not in clusters".into(),
        ),
    ];
    write(dir.path(), "empty", "\n");
    for (name, text, want) in cases {
        let path = write(dir.path(), name, &text);
        let err = build(&path, settings()).await.err().unwrap().to_string();
        let want = format!("kubeconfig {}: {want}", path.display());
        assert!(err.starts_with(&want), "{name}:\n got {err}\nwant {want}");
    }

    // The whole file: missing, not YAML, too large.
    let missing = dir.path().join("missing.conf");
    let err = build(&missing, settings()).await.err().unwrap().to_string();
    assert_eq!(
        err,
        format!(
            "kubeconfig {}: cannot read: No such file or directory (os error 2)",
            missing.display()
        )
    );
    let garbage = write(dir.path(), "garbage.conf", "clusters: [: nope\n");
    let err = build(&garbage, settings()).await.err().unwrap().to_string();
    assert!(
        err.starts_with(&format!("kubeconfig {}: ", garbage.display())),
        "{err}"
    );
    let big = write(dir.path(), "big.conf", &"#".repeat(2 << 20));
    let err = build(&big, settings()).await.err().unwrap().to_string();
    assert_eq!(
        err,
        format!("kubeconfig {}: is larger than 1048576 bytes", big.display())
    );
}

/// A YAML alias bomb stays an error, not a hang or an out-of-memory (the parser's
/// alias budget; the file itself is bounded by `MAX_FILE_BYTES`).
#[tokio::test]
async fn alias_bomb_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    text.push_str("preferences: *a11\n");
    let path = write(dir.path(), "bomb.conf", &text);
    let start = Instant::now();
    let err = build(&path, settings()).await.err().unwrap().to_string();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(
        err.starts_with(&format!("kubeconfig {}: ", path.display())),
        "{err}"
    );
}

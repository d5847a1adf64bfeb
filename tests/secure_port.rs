//! The secure port on a real containerd, with real TLS clients: certificates from a
//! CA the test makes, bearer tokens checked by the test apiserver's TokenReview, and
//! its SubjectAccessReview rules. Covers kubelet's 401 / 403 / 200 paths, anonymous
//! on and off, the self-signed serving pair, `/configz` and `/runningpods/` moving off
//! the read-only port, `/containerLogs` with its options, and exec, `/run` and
//! port-forward streams through the runtime's streaming server (WebSocket channel
//! protocol, as kubectl speaks it).

mod agent;
mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use agent::secure::*;
use agent::*;
use common::Testbed;
use futures::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::tungstenite::Message;

const START: Duration = Duration::from_secs(30);

/// x509 users, anonymous off, AlwaysAllow: 401 without a certificate, 200 with
/// one; a foreign CA's certificate is a 401 until `clientCAFile` is replaced by its
/// CA, then the old CA's is; the serving key is root's alone; kubelet's debugging
/// endpoints left the read-only port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_and_anonymous_requests() {
    let bed = Testbed::start().await;
    let ca = Ca::new("test-client-ca");
    let ca_file = bed.base_dir().join("client-ca.crt");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let (mut ox, port) = start_secure(
        &bed,
        &[
            &format!("--client-ca-file={}", ca_file.display()),
            "--anonymous-auth=false",
        ],
    );
    ox.wait_up(START).await;
    let alice = ca.client("alice", &["devs"]);
    let with_cert = Client::new(&ox, port, Some(&alice));
    wait_serving(&with_cert).await;
    let key = ox.root.join("pki/kubelet.key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let anonymous = Client::new(&ox, port, None);
    assert_eq!(
        anonymous.get("/pods").await,
        (401, "Unauthorized".to_string())
    );
    let (code, body) = with_cert.get("/pods").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"PodList\""), "{body}");
    for path in [
        "/configz",
        "/runningpods/",
        "/stats/summary",
        "/metrics",
        "/healthz",
    ] {
        let (code, body) = with_cert.get(path).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
    let (_, configz) = with_cert.get("/configz").await;
    let v: serde_json::Value = serde_json::from_str(&configz).unwrap();
    let c = &v["kubeletconfig"];
    assert_eq!(c["authentication"]["anonymous"]["enabled"], false);
    assert_eq!(c["port"], port);
    assert_eq!(c["staticPodPath"], ox.manifests.display().to_string());
    assert_eq!(c["fileCheckFrequency"], "2s");
    let ep = c["containerRuntimeEndpoint"].as_str().unwrap();
    assert!(
        ep.ends_with(bed.endpoint().trim_start_matches("unix://")),
        "{ep}"
    );
    assert!(c.get("kind").is_none() && c.get("apiVersion").is_none());
    zpages_are_kubelets(&with_cert, port).await;
    cpu_profile_is_pprofs(&with_cert, &bed).await;
    assert_eq!(ox.get("/statusz").await.unwrap().0, 404);
    assert_eq!(ox.get("/flagz").await.unwrap().0, 404);
    // /runningpods/: the runtime's running pods, names, UIDs and images only.
    write_manifest(
        &ox.manifests,
        "idle.yaml",
        &pod_yaml("idle", "sleep 3600", ""),
    );
    let uid = uid(&ox.wait_running("idle", START).await);
    let (code, body) = with_cert.get("/runningpods/").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "PodList");
    let pod = (v["items"].as_array().into_iter().flatten())
        .find(|p| p["metadata"]["uid"] == uid.as_str())
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(pod["metadata"]["name"], "idle-testnode");
    assert_eq!(pod["spec"]["containers"][0]["name"], "main");
    assert!(pod["metadata"].get("labels").is_none() && pod["spec"].get("volumes").is_none());
    let (code, body) = with_cert
        .request("POST", "/runningpods/", "")
        .await
        .unwrap();
    assert_eq!((code, body.as_str()), (405, "Method Not Allowed"));
    // kubelet keeps these to the secure port.
    assert_eq!(ox.get("/configz").await.unwrap().0, 404);
    assert_eq!(ox.get("/runningpods/").await.unwrap().0, 405);
    assert_eq!(ox.get("/pods").await.unwrap().0, 200);
    // oxlet's debug views too: they are the secure port's alone, behind authentication.
    for path in [
        "/debug/koord/metrics?kind=node_cpu_usage",
        "/debug/koord/nodemetric",
        "/debug/eviction",
        "/debug/census",
        "/debug/pods/default/idle-testnode/timeline",
    ] {
        assert_eq!(ox.get(path).await.unwrap().0, 404, "read-only port: {path}");
        assert_eq!(
            anonymous.get(path).await.0,
            401,
            "secure, anonymous: {path}"
        );
        let (code, body) = with_cert.get(path).await;
        assert_eq!(code, 200, "secure, alice: {path}: {body}");
    }
    assert_eq!(ox.get("/debug/tasks").await.unwrap().0, 404);
    assert_eq!(anonymous.get("/debug/tasks").await.0, 401);

    // /logs/: the node's /var/log, nothing outside it.
    let name = format!("oxlet-secure-port-{}", std::process::id());
    let (file, escape) = (
        std::path::PathBuf::from(format!("/var/log/{name}.log")),
        std::path::PathBuf::from(format!("/var/log/{name}-escape")),
    );
    std::fs::write(&file, "node log line\n").unwrap();
    let _ = std::fs::remove_file(&escape);
    std::os::unix::fs::symlink("/etc/shadow", &escape).unwrap();
    let (code, listing) = with_cert.get("/logs/").await;
    assert_eq!(code, 200);
    assert!(
        listing.contains(&format!("<a href=\"{name}.log\">")),
        "{listing}"
    );
    assert_eq!(
        with_cert.get(&format!("/logs/{name}.log")).await,
        (200, "node log line\n".into())
    );
    let (code, body) = with_cert.get(&format!("/logs/{name}-escape")).await;
    assert_eq!(code, 404, "a link out of /var/log was followed: {body}");
    assert_eq!(with_cert.get("/logs/../etc/shadow").await.0, 404);
    assert_eq!(anonymous.get("/logs/").await.0, 401);
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&escape);

    // A certificate from a CA the node does not trust: the handshake completes
    // (kubelet asks for a certificate and verifies it in its authenticator) and
    // the request is kubelet's 401.
    let another_ca = Ca::new("another-ca");
    let stranger = another_ca.client("mallory", &["system:masters"]);
    let foreign = Client::new(&ox, port, Some(&stranger));
    assert_eq!(
        foreign.request("GET", "/pods", "").await.unwrap(),
        (401, "Unauthorized".to_string()),
        "a certificate from another CA"
    );
    // clientCAFile replaced: the new CA's certificates authenticate, the old CA's
    // no longer do, without a restart.
    std::fs::write(&ca_file, &another_ca.pem).unwrap();
    let t = Instant::now();
    while foreign.get("/pods").await.0 != 200 {
        assert!(
            t.elapsed() < START,
            "the replaced client CA file was never reloaded"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(ox.log().contains("reloaded the client CA bundle"));
    assert_eq!(
        with_cert.get("/pods").await,
        (401, "Unauthorized".to_string())
    );
    std::fs::write(&ca_file, &ca.pem).unwrap();

    // Anonymous on: the same request is system:anonymous and allowed.
    ox.sigterm();
    ox.spawn(&[
        &format!("--port={port}"),
        &format!("--client-ca-file={}", ca_file.display()),
        "--anonymous-auth=true",
    ]);
    ox.wait_up(START).await;
    wait_serving(&anonymous).await;
    let (code, body) = anonymous.get("/pods").await;
    assert_eq!(code, 200, "{body}");
    // An untrusted certificate is not anonymous (kubelet's fail-on-error union).
    assert_eq!(foreign.get("/pods").await.0, 401);
    // The self-signed pair made at the first start is kept.
    assert!(
        ox.log()
            .matches("made a self-signed serving certificate")
            .count()
            == 1
    );
}

/// Bearer tokens through TokenReview and every request through SubjectAccessReview:
/// an unknown token is 401 even with anonymous on, a refusal is kubelet's 403, and
/// answers are cached for their TTLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_authentication_and_authorization() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    server.add_token_user(
        "token-of-ms",
        "system:serviceaccount:kube-system:metrics-server",
        &["system:serviceaccounts"],
    );
    server.add_token_user("token-of-bob", "bob", &["viewers"]);
    // A monitoring account allowed nodes/pods alone (kubelet 1.36's fine-grained
    // authorization): it reads /pods without nodes/proxy, and nothing else.
    server.add_token_user("token-of-mon", "monitor", &[]);
    server.allow_node_access("monitor", "get", "pods");
    server.allow_node_access(
        "system:serviceaccount:kube-system:metrics-server",
        "get",
        "metrics",
    );
    server.allow_node_access("viewers", "get", "stats");
    server.allow_node_access("viewers", "get", "proxy");
    let (ox, port) = start_secure(
        &bed,
        &[
            &format!("--kubeconfig={}", server.kubeconfig().display()),
            "--authentication-token-webhook",
            "--authorization-mode=Webhook",
            "--anonymous-auth=true",
        ],
    );
    ox.wait_up(START).await;
    let client = Client::new(&ox, port, None);
    wait_serving(&client).await;
    let bearer = |t: &str| format!("Authorization: Bearer {t}\r\n");

    let (code, body) = client
        .request("GET", "/metrics/resource", &bearer("token-of-ms"))
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("node_cpu_usage_seconds_total"), "{body}");
    // `/pods` is nodes/pods, then nodes/proxy; a pod's timeline, like the other debug
    // views, is nodes/proxy.
    for (path, subs) in [
        ("/pods", "[pods proxy]"),
        ("/debug/pods/default/x/timeline", "[proxy]"),
        ("/debug/koord/metrics?kind=node_cpu_usage", "[proxy]"),
        ("/debug/census", "[proxy]"),
    ] {
        let (code, body) = client
            .request("GET", path, &bearer("token-of-ms"))
            .await
            .unwrap();
        assert_eq!(
            (code, body.as_str()),
            (
                403,
                format!("Forbidden (user=system:serviceaccount:kube-system:metrics-server, verb=get, resource=nodes, subresource(s)={subs})\n").as_str()
            ),
            "{path}"
        );
    }
    let (code, body) = client
        .request("GET", "/pods", &bearer("token-of-mon"))
        .await
        .unwrap();
    assert_eq!(code, 200, "nodes/pods reads /pods: {body}");
    assert!(body.contains("\"kind\":\"PodList\""), "{body}");
    for path in [
        "/exec/default/x/main?command=ls",
        "/debug/census",
        "/configz",
    ] {
        let (code, _) = client
            .request("GET", path, &bearer("token-of-mon"))
            .await
            .unwrap();
        assert_eq!(code, 403, "nodes/pods alone does not open {path}");
    }
    // nodes/proxy opens /pods too (kubelet's fall-back).
    let (code, body) = client
        .request("GET", "/pods", &bearer("token-of-bob"))
        .await
        .unwrap();
    assert_eq!(code, 200, "nodes/proxy reads /pods: {body}");
    let (code, _) = client
        .request("GET", "/stats/summary", &bearer("token-of-bob"))
        .await
        .unwrap();
    assert_eq!(code, 200);
    let (code, body) = client
        .request(
            "GET",
            "/debug/pods/default/x/timeline",
            &bearer("token-of-bob"),
        )
        .await
        .unwrap();
    assert_eq!(
        code, 404,
        "bob may read timelines; none for a pod never seen: {body}"
    );
    assert!(body.contains("no timeline for pod default/x"), "{body}");
    let (code, _) = client
        .request(
            "POST",
            "/run/default/x/main?cmd=ls",
            &bearer("token-of-bob"),
        )
        .await
        .unwrap();
    assert_eq!(code, 403, "bob may not create on nodes/proxy");
    let (code, body) = client
        .request("GET", "/pods", &bearer("not-a-token"))
        .await
        .unwrap();
    assert_eq!(
        (code, body.as_str()),
        (401, "Unauthorized"),
        "a bad token is not anonymous"
    );
    let (code, body) = client.get("/stats/summary").await;
    assert_eq!(
        (code, body.as_str()),
        (
            403,
            "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource(s)=[stats])\n"
        )
    );
    // Cached: the same token and attributes again ask the apiserver nothing more.
    let asked = |kind: &str| {
        server
            .requests()
            .iter()
            .filter(|r| r.path.ends_with(kind))
            .count()
    };
    let (tokens, reviews) = (asked("tokenreviews"), asked("subjectaccessreviews"));
    for _ in 0..3 {
        let (code, _) = client
            .request("GET", "/metrics/resource", &bearer("token-of-ms"))
            .await
            .unwrap();
        assert_eq!(code, 200);
    }
    assert_eq!(
        (asked("tokenreviews"), asked("subjectaccessreviews")),
        (tokens, reviews)
    );
    // The SubjectAccessReview names the user as the TokenReview did: with its UID
    // and extra, as kubelet's webhook authorizer sends them.
    let bobs: Vec<serde_json::Value> = (server.requests().iter())
        .filter(|r| r.path.ends_with("subjectaccessreviews"))
        .filter_map(|r| serde_json::from_str(&r.body).ok())
        .filter(|b: &serde_json::Value| b["spec"]["user"] == "bob")
        .collect();
    assert!(!bobs.is_empty());
    for b in bobs {
        assert_eq!(b["spec"]["uid"], testapi::user_uid("bob"), "{b}");
        assert_eq!(
            b["spec"]["extra"]["authentication.kubernetes.io/credential-id"],
            serde_json::json!([testapi::credential_id("token-of-bob")]),
            "{b}"
        );
    }
}

/// `/containerLogs` with kubelet's options, `previous`, and a followed log that sees a
/// line written after the request; its refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_logs_with_kubelets_options() {
    let bed = Testbed::start().await;
    let (ox, port) = start_secure(&bed, &["--anonymous-auth=true"]);
    let script = "echo one; usleep 100000; echo two >&2; usleep 100000; echo three; \
        while [ ! -f /tmp/go ]; do usleep 50000; done; echo late; sleep 3600";
    write_manifest(
        &ox.manifests,
        "talker.yaml",
        &pod_yaml("talker", script, ""),
    );
    ox.wait_running("talker", START).await;
    let c = Client::new(&ox, port, None);
    wait_serving(&c).await;
    let logs = "/containerLogs/default/talker-testnode/main";
    let t = Instant::now();
    loop {
        let (code, body) = c.get(logs).await;
        if code == 200 && body == "one\ntwo\nthree\n" {
            break;
        }
        assert!(t.elapsed() < START, "{code} {body:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        c.get(&format!("{logs}?tailLines=1")).await,
        (200, "three\n".into())
    );
    assert_eq!(
        c.get(&format!("{logs}?limitBytes=5")).await,
        (200, "one\nt".into())
    );
    let (_, stamped) = c.get(&format!("{logs}?tailLines=1&timestamps=true")).await;
    let (stamp, line) = stamped.split_once(' ').unwrap();
    assert_eq!(line, "three\n");
    assert!(stamp.len() == 30 && stamp.ends_with('Z'), "{stamp}");
    assert_eq!(
        c.get(&format!("{logs}?sinceTime=2099-01-01T00:00:00Z"))
            .await,
        (200, String::new())
    );
    assert_eq!(
        c.get(&format!("{logs}?sinceSeconds=3600")).await.1,
        "one\ntwo\nthree\n"
    );
    assert_eq!(c.get(&format!("{logs}?tailLines=-1")).await.0, 422);
    let (code, body) = c.get(&format!("{logs}?previous=true")).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("previous terminated container"), "{body}");
    let (code, body) = c.get("/containerLogs/default/talker-testnode/nope").await;
    assert_eq!(
        (code, body.as_str()),
        (
            404,
            "container \"nope\" not found in pod \"talker-testnode\""
        )
    );
    assert_eq!(c.get("/containerLogs/default/absent/main").await.0, 404);

    // follow: the stream stays open and carries a line written after it began.
    let mut s = c.connect().await.unwrap();
    s.write_all(
        format!("GET {logs}?follow=true&tailLines=1 HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "three\n").await;
    exec_ws(port, &ox, "talker-testnode", &["touch", "/tmp/go"]).await;
    let t = Instant::now();
    read_until(&mut s, &mut seen, "late\n").await;
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// exec through the runtime's streaming server: stdout, stderr and the exit code;
/// `/run`; a plain GET is refused; port-forward to an HTTP server in the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_run_and_port_forward_streams() {
    let bed = Testbed::start().await;
    let (ox, port) = start_secure(
        &bed,
        &[
            "--anonymous-auth=true",
            "--streaming-connection-idle-timeout=2s",
        ],
    );
    let script =
        "mkdir -p /www && echo hello-from-pod > /www/index.html && httpd -f -p 8080 -h /www";
    write_manifest(&ox.manifests, "web.yaml", &pod_yaml("web", script, ""));
    ox.wait_running("web", START).await;
    let c = Client::new(&ox, port, None);
    wait_serving(&c).await;

    let r = exec_ws(
        port,
        &ox,
        "web-testnode",
        &["sh", "-c", "echo out; echo err >&2; exit 3"],
    )
    .await;
    assert_eq!(
        (r.stdout.as_str(), r.stderr.as_str()),
        ("out\n", "err\n"),
        "{r:?}"
    );
    let status = r.status.expect("an exit status on the error channel");
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    assert_eq!(status["details"]["causes"][0]["message"], "3", "{status}");
    let ok = exec_ws(port, &ox, "web-testnode", &["cat", "/www/index.html"]).await;
    assert_eq!(ok.stdout, "hello-from-pod\n");
    assert_eq!(
        ok.status.map(|s| s["status"].clone()),
        Some(serde_json::json!("Success"))
    );

    let (code, body) = c
        .request(
            "POST",
            "/run/default/web-testnode/main?cmd=cat%20/www/index.html",
            "",
        )
        .await
        .unwrap();
    assert_eq!((code, body.as_str()), (200, "hello-from-pod\n"));
    let (code, body) = c
        .get("/exec/default/web-testnode/main?command=ls&output=1")
        .await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("Upgrade request required"), "{body}");
    let (code, _) = c.get("/exec/default/nope/main?command=ls&output=1").await;
    assert_eq!(code, 404);

    // attach: the container's own output, as it comes.
    let ticker = "while true; do echo tick; usleep 200000; done";
    write_manifest(
        &ox.manifests,
        "ticker.yaml",
        &pod_yaml("ticker", ticker, ""),
    );
    ox.wait_running("ticker", START).await;
    let mut ws = channel_socket(&c, "/attach/default/ticker-testnode/main?output=1&error=1").await;
    let mut attached = String::new();
    while !attached.contains("tick\ntick\n") {
        let msg = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .unwrap();
        if let Some(Ok(Message::Binary(data))) = msg
            && data.first() == Some(&1)
        {
            attached.push_str(&String::from_utf8_lossy(&data[1..]));
        }
    }
    drop(ws);

    // streamingConnectionIdleTimeout: a stream on which nothing moves is closed.
    let t = Instant::now();
    let idle = exec_ws(port, &ox, "web-testnode", &["sleep", "30"]).await;
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "an idle stream stayed open {:?}",
        t.elapsed()
    );
    assert!(idle.status.is_none(), "{idle:?}");

    // port-forward over WebSocket: channel 0 carries data, 1 errors; each starts
    // with the port, little-endian.
    let mut ws = channel_socket(&c, "/portForward/default/web-testnode?port=8080").await;
    let mut frame = vec![0u8];
    frame.extend_from_slice(b"GET /index.html HTTP/1.0\r\n\r\n");
    ws.send(Message::Binary(frame.into())).await.unwrap();
    let mut got = Vec::new();
    let mut port_prefixes = 0;
    while let Ok(Some(Ok(msg))) = tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
        let Message::Binary(data) = msg else { continue };
        let Some((&channel, rest)) = data.split_first() else {
            continue;
        };
        if channel != 0 {
            continue;
        }
        // The first frame of each channel is the port.
        if port_prefixes == 0 && rest.len() == 2 {
            assert_eq!(u16::from_le_bytes([rest[0], rest[1]]), 8080);
            port_prefixes += 1;
            continue;
        }
        got.extend_from_slice(rest);
        if String::from_utf8_lossy(&got).contains("hello-from-pod") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.") && text.contains("hello-from-pod"),
        "{text:?}"
    );
}

/// Runs kubectl against the test apiserver; (exit code, stdout, stderr).
async fn kubectl(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (i32, String, String) {
    kubectl_with(kubeconfig, &[], args, stdin).await
}

/// [`kubectl`] with `env` set for it.
async fn kubectl_with(
    kubeconfig: &std::path::Path,
    env: &[(&str, &str)],
    args: &[&str],
    stdin: Option<&str>,
) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.envs(env.iter().copied())
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("kubectl");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).await.unwrap();
        drop(pipe);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish"))
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a cluster does to a node, end to end: kubectl logs (tail, follow), exec
/// (exit codes, stderr, stdin), port-forward and `get --raw .../proxy/stats/summary`
/// and `.../proxy/metrics/cadvisor`, and `kubectl debug` (an ephemeral container)
/// go through the test apiserver, which reaches oxlet's secure port with its client
/// certificate; oxlet asks the apiserver whether that user may (Webhook).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reaches_the_node_through_the_apiserver() {
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: kubectl is not installed (scripts/install-test-deps.sh installs it)");
        return;
    }
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let ca = Ca::new("kubernetes");
    let ca_file = bed.base_dir().join("cluster-ca.crt");
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let (cert, key) = ca.client("kube-apiserver-kubelet-client", &["kubeadm:cluster-admins"]);
    server
        .set_kubelet_client_cert(cert.as_bytes(), key.as_bytes())
        .unwrap();
    server.allow_node_access("kube-apiserver-kubelet-client", "*", "*");
    let (ox, _port) = start_secure(
        &bed,
        &[
            &format!("--kubeconfig={}", server.kubeconfig().display()),
            &format!("--client-ca-file={}", ca_file.display()),
            "--anonymous-auth=false",
            "--authorization-mode=Webhook",
            "--node-ip=127.0.0.1",
        ],
    );
    let script = "mkdir -p /www && echo hello-from-pod > /www/index.html && httpd -p 8080 -h /www; \
        echo one; echo two; echo three; while [ ! -f /tmp/go ]; do usleep 50000; done; echo late; sleep 3600";
    server.put(&api_pod("web", "testnode", script, 1)).unwrap();
    ox.wait_api_running("web", START).await;
    let kc = server.kubeconfig().to_path_buf();

    let t = Instant::now();
    loop {
        let (code, out, err) = kubectl(&kc, &["logs", "web"], None).await;
        if code == 0 && out == "one\ntwo\nthree\n" {
            break;
        }
        assert!(t.elapsed() < START, "kubectl logs: {code} {out:?} {err}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        kubectl(&kc, &["logs", "web", "--tail=1"], None).await.1,
        "three\n"
    );

    let (code, out, err) = kubectl(
        &kc,
        &[
            "exec",
            "web",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    )
    .await;
    assert_eq!((code, out.as_str()), (3, "out\n"), "{err}");
    assert!(err.contains("err"), "{err}");
    let (code, out, err) = kubectl(
        &kc,
        &["exec", "-i", "web", "--", "tr", "a-z", "A-Z"],
        Some("shout\n"),
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "SHOUT\n"), "{err}");
    // kubectl 1.30 and later speak WebSocket first; -v=8 shows which protocol carried
    // each exec. SPDY/3.1 (what older kubectls and the real apiserver speak to a
    // node) is asked for by turning WebSockets off, and must work too.
    let (code, out, err) = kubectl(
        &kc,
        &["exec", "-v=8", "web", "--", "echo", "via-default"],
        None,
    )
    .await;
    assert_eq!((code, out.as_str()), (0, "via-default\n"), "{err}");
    eprintln!(
        "kubectl exec upgraded with: {:?}",
        err.lines()
            .filter(|l| l.contains("Upgrade")
                || l.contains("X-Stream-Protocol")
                || l.contains("Sec-Websocket-Protocol"))
            .collect::<Vec<_>>()
    );
    let mut spdy = tokio::process::Command::new("kubectl");
    let out = spdy
        .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
        .arg(format!("--kubeconfig={}", kc.display()))
        .args(["exec", "-v=8", "web", "--", "echo", "via-spdy"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "via-spdy\n", "{err}");
    // kubectls before 1.30 speak only SPDY and may not log the upgrade headers.
    let version = std::process::Command::new("kubectl")
        .args(["version", "--client", "-o", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&version.stdout).unwrap_or_default();
    let minor: u32 = (v["clientVersion"]["minor"].as_str().unwrap_or("0"))
        .trim_end_matches('+')
        .parse()
        .unwrap_or(0);
    if minor >= 30 {
        assert!(err.contains("SPDY/3.1"), "not SPDY: {err}");
    }

    let (code, out, err) = kubectl(
        &kc,
        &["get", "--raw", "/api/v1/nodes/testnode/proxy/stats/summary"],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["node"]["nodeName"], "testnode");
    // Prometheus' node scrape job: cAdvisor's families through the node proxy.
    let (code, out, err) = kubectl(
        &kc,
        &[
            "get",
            "--raw",
            "/api/v1/nodes/testnode/proxy/metrics/cadvisor",
        ],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("container_cpu_usage_seconds_total{")
                && l.contains("namespace=\"default\",pod=\"web\"}")),
        "{out}"
    );

    // kubectl debug: an ephemeral container that joins main's processes (--target).
    // kubectls before 1.22 speak the subresource's old kind; kube-rs sends their request.
    let debug_script = "ps -o pid,args; echo debugged";
    if minor >= 22 {
        let (code, out, err) = kubectl(
            &kc,
            &[
                "debug",
                "web",
                "--image=localhost/oxlet/busybox:1",
                "--image-pull-policy=IfNotPresent",
                "--container=dbg",
                "--target=main",
                "--",
                "sh",
                "-c",
                debug_script,
            ],
            None,
        )
        .await;
        assert_eq!(code, 0, "{out}{err}");
    } else {
        add_debug_container(&kc, debug_script).await;
    }
    let t = Instant::now();
    let dbg = loop {
        let (_, out, _) = kubectl(&kc, &["get", "pod", "web", "-o", "json"], None).await;
        let pod: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let status = pod["status"]["ephemeralContainerStatuses"]
            .as_array()
            .and_then(|l| l.iter().find(|c| c["name"] == "dbg").cloned());
        if let Some(s) = status.filter(|s| s["state"]["terminated"].is_object()) {
            break s;
        }
        assert!(t.elapsed() < START, "dbg never ended: {out}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(dbg["state"]["terminated"]["exitCode"], 0, "{dbg}");
    assert_eq!(dbg["ready"], false, "{dbg}");
    let (code, out, err) = kubectl(&kc, &["logs", "web", "-c", "dbg"], None).await;
    assert_eq!(code, 0, "{err}");
    // main's shell and httpd, seen from the debug container: one process namespace.
    assert!(
        out.contains("httpd -p 8080") && out.ends_with("debugged\n"),
        "{out}"
    );
    // kubectl debug -i: a second one, attached to as it starts, its stdin kubectl's.
    // SPDY, as the real apiserver (1.30 and later) speaks to a node whatever kubectl
    // speaks: the test apiserver relays kubectl's WebSocket try instead, which reaches
    // the node as a first attach of its own before kubectl falls back. stdin stays open
    // until the answer came: containerd detaches the output when an attach's stdin ends.
    if minor >= 22 {
        let mut debug = tokio::process::Command::new("kubectl")
            .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
            .arg(format!("--kubeconfig={}", kc.display()))
            .args([
                "debug",
                "-i",
                "web",
                "--image=localhost/oxlet/busybox:1",
                "--image-pull-policy=IfNotPresent",
                "--container=dbg2",
                "--",
                "sh",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdin = debug.stdin.take().unwrap();
        let mut seen = String::new();
        // Said until the shell answers: the first lines may come before the attach.
        let mut stdout = debug.stdout.take().unwrap();
        let t = Instant::now();
        while !seen.contains("attached-42") {
            assert!(
                t.elapsed() < START,
                "no answer through the attach: {seen:?}"
            );
            stdin.write_all(b"echo attached-$((6*7))\n").await.unwrap();
            let mut buf = [0u8; 4096];
            if let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(500), stdout.read(&mut buf)).await
            {
                assert!(n > 0, "the attach ended: {seen:?}");
                seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
        stdin.write_all(b"exit 0\n").await.unwrap();
        drop(stdin);
        let status = tokio::time::timeout(START, debug.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "kubectl debug -i: {status}");
    }
    // The pod itself ran on untouched.
    let (_, out, _) = kubectl(&kc, &["get", "pod", "web", "-o", "json"], None).await;
    let pod: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(pod["status"]["phase"], "Running");

    // logs -f: a line written after it started arrives.
    let mut follow = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kc.display()))
        .args(["logs", "-f", "--tail=1", "web"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = follow.stdout.take().unwrap();
    let mut seen = String::new();
    read_until(&mut stdout, &mut seen, "three").await;
    let (code, _, err) = kubectl(&kc, &["exec", "web", "--", "touch", "/tmp/go"], None).await;
    assert_eq!(code, 0, "{err}");
    read_until(&mut stdout, &mut seen, "late").await;
    drop(follow);

    // attach: the running container's own output.
    let ticker = "while true; do echo tick; usleep 200000; done";
    server
        .put(&api_pod("ticker", "testnode", ticker, 1))
        .unwrap();
    ox.wait_api_running("ticker", START).await;
    let mut attach = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kc.display()))
        .args(["attach", "ticker"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut attached = String::new();
    read_until(
        attach.stdout.as_mut().unwrap(),
        &mut attached,
        "tick\ntick\n",
    )
    .await;
    drop(attach);

    // cp: exec tar in both directions.
    let local_file = dir.path().join("to-pod.txt");
    std::fs::write(&local_file, "copied in\n").unwrap();
    let dest = "web:/tmp/from-host.txt";
    let (code, _, err) = kubectl(&kc, &["cp", &local_file.display().to_string(), dest], None).await;
    assert_eq!(code, 0, "kubectl cp in: {err}");
    let (_, out, _) = kubectl(
        &kc,
        &["exec", "web", "--", "cat", "/tmp/from-host.txt"],
        None,
    )
    .await;
    assert_eq!(out, "copied in\n");
    let back = dir.path().join("index.html");
    let (code, _, err) = kubectl(
        &kc,
        &["cp", "web:/www/index.html", &back.display().to_string()],
        None,
    )
    .await;
    assert_eq!(code, 0, "kubectl cp out: {err}");
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "hello-from-pod\n");

    // port-forward to the pod's HTTP server.
    let local = free_port();
    let mut pf = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kc.display()))
        .args(["port-forward", "pod/web", &format!("{local}:8080")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let t = Instant::now();
    let page = loop {
        let got = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", local))
                .await
                .ok()?;
            s.write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
                .await
                .ok()?;
            let mut b = Vec::new();
            s.read_to_end(&mut b).await.ok()?;
            Some(String::from_utf8_lossy(&b).into_owned())
        };
        if let Ok(Some(p)) = tokio::time::timeout(Duration::from_secs(5), got).await
            && p.contains("hello-from-pod")
        {
            break p;
        }
        assert!(t.elapsed() < START, "port-forward never served the page");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(page.starts_with("HTTP/1."), "{page}");
    let _ = pf.kill().await;
}

/// `previous` reads the instance before a restart; a followed log carries on, with no
/// line lost or repeated, across a rotation by the log manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_logs_and_follow_across_a_rotation() {
    let bed = Testbed::start().await;
    let config = bed.base_dir().join("kubelet-config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerLogMonitorInterval: 3s\n",
    )
    .unwrap();
    let (ox, port) = start_secure(
        &bed,
        &[
            &format!("--config={}", config.display()),
            "--anonymous-auth=true",
            "--authorization-mode=AlwaysAllow",
            "--authentication-token-webhook=false",
            "--container-log-max-size=8Ki",
        ],
    );
    // The first instance says so and exits; the second counts, 1 KiB a line.
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: counter
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: state
    emptyDir: {}
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "if [ ! -f /state/ran ]; then touch /state/ran; echo first-instance; exit 1; fi; P=$(printf %01000d 0); i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo L$i $P; usleep 50000; done; sleep 3600"]
    volumeMounts:
    - {name: state, mountPath: /state}
"#;
    write_manifest(&ox.manifests, "counter.yaml", manifest);
    ox.wait_up(START).await;
    let c = Client::new(&ox, port, None);
    wait_serving(&c).await;
    let logs = "/containerLogs/default/counter-testnode/main";
    let t = Instant::now();
    loop {
        let (code, body) = c.get(&format!("{logs}?previous=true")).await;
        if code == 200 {
            assert_eq!(body, "first-instance\n");
            break;
        }
        assert!(t.elapsed() < START, "no previous instance: {code} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Follow the second instance once it runs (before, kubelet and oxlet serve the
    // last one that ran, whose followed log ends at once).
    ox.wait_for("counter restarted and running", START, |pods| {
        let p = find(pods, "counter")?;
        let s = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
        (s.restart_count >= 1 && s.state.as_ref()?.running.is_some()).then_some(())
    })
    .await;
    let mut s = c.connect().await.unwrap();
    s.write_all(format!("GET {logs}?follow=true HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut seen = String::new();
    read_until(&mut s, &mut seen, "L200 ").await;
    let numbers: Vec<u32> = seen
        .lines()
        .filter_map(|l| l.strip_prefix('L')?.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(
        numbers,
        (1..=200).collect::<Vec<_>>(),
        "lines lost or repeated"
    );
    let pod = ox.wait_running("counter", START).await;
    let dir = ox
        .logs
        .join(format!("default_counter-testnode_{}/main", uid(&pod)));
    let rotated = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("1.log."))
        .count();
    assert!(
        rotated >= 1,
        "the log never rotated: {:?}",
        std::fs::read_dir(&dir).unwrap().collect::<Vec<_>>()
    );
}

/// `tlsCertFile`/`tlsPrivateKeyFile` with `tlsMinVersion: VersionTLS13`: the
/// configured pair is served, and no self-signed one is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_serving_pair_is_served() {
    let bed = Testbed::start().await;
    let ca = Ca::new("serving-ca");
    let (cert, key) = ca.serving();
    let (cert_file, key_file) = (
        bed.base_dir().join("tls.crt"),
        bed.base_dir().join("tls.key"),
    );
    std::fs::write(&cert_file, &cert).unwrap();
    std::fs::write(&key_file, &key).unwrap();
    let (ox, port) = start_secure(
        &bed,
        &[
            &format!("--tls-cert-file={}", cert_file.display()),
            &format!("--tls-private-key-file={}", key_file.display()),
            "--tls-min-version=VersionTLS13",
        ],
    );
    ox.wait_up(START).await;
    let c = Client::trusting(ca.pem.as_bytes(), port, None);
    wait_serving(&c).await;
    let (code, body) = c.get("/pods").await;
    assert_eq!(code, 200, "{body}");
    assert!(
        !ox.root.join("pki/kubelet.crt").exists(),
        "a self-signed pair was made"
    );
}

/// `POST /checkpoint/...` as kubelet answers it (404s for what does not exist, the
/// runtime's reason on a 500, or the archive's path), into a directory root's alone;
/// and `PUT /debug/flags/v`, which changes `-v` while oxlet runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_and_the_verbosity_flag() {
    let bed = Testbed::start().await;
    let (ox, port) = start_secure(&bed, &["--anonymous-auth=true", "-v=0"]);
    write_manifest(&ox.manifests, "cp.yaml", &pod_yaml("cp", "sleep 3600", ""));
    ox.wait_running("cp", START).await;
    let c = Client::new(&ox, port, None);
    wait_serving(&c).await;

    let post = |path: &'static str| c.request("POST", path, "Content-Length: 0\r\n");
    let (code, body) = post("/checkpoint/default/nope/main").await.unwrap();
    assert_eq!((code, body.as_str()), (404, "pod does not exist"));
    let (code, body) = post("/checkpoint/default/cp-testnode/nope").await.unwrap();
    assert_eq!(
        (code, body.as_str()),
        (404, "container nope does not exist")
    );
    let (code, body) = post("/checkpoint/default/cp-testnode/main?timeout=soon")
        .await
        .unwrap();
    assert_eq!(
        (code, body.as_str()),
        (404, "cannot parse value of timeout parameter")
    );
    let (code, _) = c.get("/checkpoint/default/cp-testnode/main").await;
    assert_eq!(code, 405);
    // containerd 1.6 has no checkpointing, later ones need CRIU: either the
    // runtime's reason, or the archive it wrote.
    let (code, body) = post("/checkpoint/default/cp-testnode/main?timeout=30")
        .await
        .unwrap();
    let dir = ox.root.join("checkpoints");
    if code == 200 {
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let archive = v["items"][0].as_str().unwrap();
        assert!(archive.starts_with(dir.to_str().unwrap()), "{archive}");
        assert!(
            archive.contains("checkpoint-cp-testnode_default-main-"),
            "{archive}"
        );
        assert!(std::path::Path::new(archive).is_file(), "{archive}");
    } else {
        assert_eq!(code, 500, "{body}");
        assert!(
            body.starts_with("checkpointing of default/cp-testnode/main failed (")
                && body.len() > "checkpointing of default/cp-testnode/main failed ()".len(),
            "{body}"
        );
    }
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);

    // -v=0 logs no debug line (the sync loop's iterations); PUT 4 turns them on, PUT 0
    // off again.
    let debug_lines = || {
        let log = ox.log();
        log.lines()
            .filter(|l| l.contains("] \"sync loop iteration"))
            .count()
    };
    assert_eq!(debug_lines(), 0);
    let put = |v: &'static str| {
        let c = &c;
        async move {
            let mut s = c.connect().await.unwrap();
            let req = format!(
                "PUT /debug/flags/v HTTP/1.0\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{v}",
                v.len()
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        }
    };
    assert_eq!(c.get("/debug/flags/v").await.0, 406);
    let bad = put("loud").await;
    assert!(
        bad.starts_with("HTTP/1.0 400") && bad.contains("failed set klog.logging.verbosity loud"),
        "{bad}"
    );
    let ok = put("4").await;
    assert!(
        ok.starts_with("HTTP/1.0 200")
            && ok.ends_with("successfully set klog.logging.verbosity to 4"),
        "{ok}"
    );
    let t = Instant::now();
    while debug_lines() == 0 {
        assert!(t.elapsed() < START, "no debug line after -v=4");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(put("0").await.starts_with("HTTP/1.0 200"));
    let settled = debug_lines();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(debug_lines(), settled, "debug lines after -v=0");
}

/// What `kubectl debug --target=main` sends: a strategic patch of web's
/// `ephemeralcontainers` subresource, through kube-rs.
async fn add_debug_container(kubeconfig: &std::path::Path, script: &str) {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let patch = serde_json::json!({"spec": {"ephemeralContainers": [{
        "name": "dbg", "image": "localhost/oxlet/busybox:1", "imagePullPolicy": "IfNotPresent",
        "targetContainerName": "main", "command": ["sh", "-c", script],
        "terminationMessagePolicy": "File",
    }]}});
    pods.patch_ephemeral_containers(
        "web",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(patch),
    )
    .await
    .unwrap();
}

/// The value of `name` on a z-page, whichever of kubelet's four delimiters the
/// response drew (`:`, `: `, `=`, ` `).
fn zpage_value<'a>(page: &'a str, name: &str) -> Option<&'a str> {
    page.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?;
        [": ", ":", "=", " "]
            .iter()
            .find_map(|d| rest.strip_prefix(d))
            .map(str::trim)
    })
}

/// `/statusz` and `/flagz` as kubelet 1.36 serves them: its header and warning,
/// the versions, an uptime that moves, each flag with the value in force.
async fn zpages_are_kubelets(client: &Client, port: u16) {
    let (code, statusz) = client.get("/statusz").await;
    assert_eq!(code, 200, "{statusz}");
    assert!(
        statusz.starts_with(
            "\nkubelet statusz\nWarning: This endpoint is not meant to be machine parseable"
        ),
        "{statusz}"
    );
    assert_eq!(
        zpage_value(&statusz, "Binary version"),
        Some("1.36.0"),
        "{statusz}"
    );
    assert_eq!(
        zpage_value(&statusz, "Emulation version"),
        Some("1.36"),
        "{statusz}"
    );
    let up = zpage_value(&statusz, "Up").unwrap().to_string();
    assert!(up.ends_with(" sec") && up.contains(" hr "), "{up}");
    let paths = zpage_value(&statusz, "Paths").unwrap();
    for p in ["/pods", "/stats", "/metrics", "/exec", "/configz", "/flagz"] {
        assert!(paths.split(' ').any(|x| x == p), "{p} not in {paths}");
    }
    // Served as what each path is: a listed path is not a 404.
    for p in [
        "/pods",
        "/stats/summary",
        "/metrics",
        "/configz",
        "/flagz",
        "/healthz",
    ] {
        assert_ne!(client.get(p).await.0, 404, "{p}");
    }
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (_, again) = client.get("/statusz").await;
    assert_ne!(zpage_value(&again, "Up").unwrap(), up, "the uptime moves");

    let (code, flagz) = client.get("/flagz").await;
    assert_eq!(code, 200, "{flagz}");
    assert!(flagz.starts_with("\nkubelet flags\nWarning: "), "{flagz}");
    let port_text = port.to_string();
    assert_eq!(
        zpage_value(&flagz, "port"),
        Some(port_text.as_str()),
        "{flagz}"
    );
    assert_eq!(
        zpage_value(&flagz, "file-check-frequency"),
        Some("2s"),
        "{flagz}"
    );
    let names: Vec<&str> = flagz
        .lines()
        .skip(4)
        .map(|l| l.split([':', '=', ' ']).next().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "flags are listed by name");
}

/// `/debug/pprof/profile`: a gzipped pprof protobuf that `protoc` decodes with the
/// format's schema, holding the samples of a busy oxlet; one profile at a time.
async fn cpu_profile_is_pprofs(client: &Client, bed: &Testbed) {
    let busy = async {
        for _ in 0..400 {
            let _ = client.get("/metrics").await;
        }
    };
    let profile = client.request_bytes("GET", "/debug/pprof/profile?seconds=3", "");
    let second = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        client.get("/debug/pprof/profile?seconds=1").await
    };
    let (profile, (), second) = tokio::join!(profile, busy, second);
    let (code, body) = profile.unwrap();
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        second,
        (
            500,
            "Could not enable CPU profiling: cpu profiling already in use\n".to_string()
        )
    );
    assert_eq!(&body[..2], [0x1f, 0x8b], "gzip, as Go serves it");
    let file = bed.base_dir().join("profile.pb.gz");
    std::fs::write(&file, &body).unwrap();
    let schema = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pprof");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "gzip -dc {} | protoc --decode=perftools.profiles.Profile -I {} profile.proto",
            file.display(),
            schema.display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("period: 10000000"), "{text}");
    assert!(
        text.contains("string_table: \"samples\"") && text.contains("string_table: \"cpu\""),
        "{text}"
    );
    assert!(
        text.contains("sample {"),
        "no samples from a busy oxlet:\n{text}"
    );
    assert!(
        text.contains("string_table: \"oxlet::"),
        "oxlet's own functions are named:\n{}",
        &text[..text.len().min(4000)]
    );
    let (code, cmdline) = client.get("/debug/pprof/cmdline").await;
    assert_eq!(code, 200);
    assert!(cmdline.contains("--client-ca-file="), "{cmdline:?}");
    let (code, index) = client.get("/debug/pprof/heap").await;
    assert_eq!(code, 404);
    assert!(index.contains("no heap"), "{index}");
}

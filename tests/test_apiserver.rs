//! The in-repo test apiserver (`testapi/`) checked with real clients: kube-rs (lists, watches,
//! resuming, a 410 that `kube_runtime::watcher` recovers from by relisting, status patches,
//! graceful and forced deletes, leases with conflicts, events, tokens, CSRs), raw HTTP for the
//! protocol's strictness, and kubectl when it is installed.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Secret, ServiceAccount};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent,
    WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, Config};
use serde_json::{Value, json};
use testapi::TestApiServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(5);

async fn server() -> (tempfile::TempDir, TestApiServer, Client) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    let client = client_of(&server).await;
    (dir, server, client)
}

async fn client_of(server: &TestApiServer) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn pod(name: &str, node: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "c", "image": "localhost/oxlet-test/busybox:1"}]},
    }))
    .unwrap()
}

fn api_error(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// One raw HTTP/1.1 request; returns the status code and the body.
async fn raw(
    server: &TestApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
    auth: bool,
) -> (u16, Value) {
    let mut s = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(ct) = content_type {
        req.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    if auth {
        req.push_str(&format!("Authorization: Bearer {}\r\n", server.token()));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (
        code,
        serde_json::from_str(body).unwrap_or(Value::String(body.to_owned())),
    )
}

#[tokio::test]
async fn kube_lists_and_watches_pods_by_node_and_labels() {
    let (_dir, _server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let other: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let created = pods
        .create(
            &PostParams::default(),
            &pod("a", "n1", json!({"app": "web"})),
        )
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    pods.create(
        &PostParams::default(),
        &pod("b", "n2", json!({"app": "web"})),
    )
    .await
    .unwrap();
    other
        .create(
            &PostParams::default(),
            &pod("c", "n1", json!({"app": "db"})),
        )
        .await
        .unwrap();

    let all: Api<Pod> = Api::all(client.clone());
    let on_n1 = all
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    let mut names: Vec<_> = on_n1
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "c"]);
    let web = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(web.items.len(), 2);
    assert!(web.metadata.resource_version.is_some());
    let paged = all.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(paged.items.len(), 2);
    let rest = all
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(paged.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);

    // kube-runtime's watcher over the node's pods in all namespaces, as kubelet's source runs.
    let mut w = watcher(
        all.clone(),
        watcher::Config::default().fields("spec.nodeName=n1"),
    )
    .boxed();
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, w.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            watcher::Event::InitApply(p) => seen.push(p.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    seen.sort();
    assert_eq!(seen, ["a", "c"]);
    pods.create(&PostParams::default(), &pod("d", "n2", json!({})))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("e", "n1", json!({})))
        .await
        .unwrap();
    match tokio::time::timeout(WAIT, w.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        watcher::Event::Apply(p) => assert_eq!(p.metadata.name.as_deref(), Some("e")),
        other => panic!("expected e applied, got {other:?}"),
    }
    pods.delete("e", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    match tokio::time::timeout(WAIT, w.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        watcher::Event::Delete(p) => assert_eq!(p.metadata.name.as_deref(), Some("e")),
        other => panic!("expected e deleted, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_resumes_from_a_version_and_reports_gone() {
    let (_dir, server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let a = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .unwrap();
    let rv = a.metadata.resource_version.unwrap();
    pods.create(&PostParams::default(), &pod("b", "n1", json!({})))
        .await
        .unwrap();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("b")),
        other => panic!("expected b added, got {other:?}"),
    }
    drop(stream);

    server.compact();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    // A consistent list at a compacted version is Gone as well.
    let e = pods
        .list(
            &ListParams::default()
                .limit(1)
                .continue_token(&format!("{rv}.default.a")),
        )
        .await
        .unwrap_err();
    assert_eq!(api_error(e).0, 410);

    // Bookmarks carry the version a watch has seen, so a client can resume from there.
    server.set_bookmark_interval(Duration::from_millis(100));
    let now = server.resource_version().to_string();
    let mut stream = pods
        .watch(
            &WatchParams {
                bookmarks: true,
                ..WatchParams::default().timeout(5)
            },
            &now,
        )
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, now),
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn watcher_relists_after_an_outage_with_410() {
    let (_dir, mut server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .unwrap();
    let mut w = watcher(pods.clone(), watcher::Config::default()).boxed();
    loop {
        if let watcher::Event::InitDone = tokio::time::timeout(WAIT, w.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            break;
        }
    }
    server.stop().await.unwrap();
    // Changes while the watcher is away, and the history it would resume from is lost.
    server.put(&pod("b", "n1", json!({}))).unwrap();
    server.compact();
    server.restart().await.unwrap();
    let relisted = async {
        let mut names = Vec::new();
        loop {
            match w.next().await.unwrap() {
                // Errors while the server is away or the watch is Gone: the watcher retries.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Ok(watcher::Event::Init) => names.clear(),
                Ok(watcher::Event::InitApply(p)) => names.push(p.metadata.name.unwrap()),
                Ok(watcher::Event::InitDone) => return names,
                Ok(_) => {}
            }
        }
    };
    let mut names = tokio::time::timeout(WAIT, relisted).await.unwrap();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    let reqs = server.requests();
    assert!(
        reqs.iter().all(|r| r.authenticated),
        "kube-rs sends the kubeconfig's token"
    );
    let lists = reqs
        .iter()
        .filter(|r| r.method == "GET" && !r.query.contains("watch=true"))
        .count();
    assert_eq!(
        lists, 2,
        "the first list and the relist after 410: {reqs:?}"
    );

    // Without compaction the history survives a restart: the watcher resumes, no relist.
    server.stop().await.unwrap();
    server.put(&pod("c", "n1", json!({}))).unwrap();
    server.restart().await.unwrap();
    let resumed = async {
        loop {
            match w.next().await.unwrap() {
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                Ok(e) => return e,
            }
        }
    };
    match tokio::time::timeout(WAIT, resumed).await.unwrap() {
        watcher::Event::Apply(p) => assert_eq!(p.metadata.name.as_deref(), Some("c")),
        other => panic!("expected the watch to resume with c, got {other:?}"),
    }
}

#[tokio::test]
async fn pod_status_patches_merge_and_strategic_with_uid_precondition() {
    let (_dir, _server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let p = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .unwrap();
    let uid = p.metadata.uid.unwrap();
    let merged = pods
        .patch_status("a", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running", "podIP": "10.0.0.5",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]}})))
        .await
        .unwrap();
    let rv1 = merged.metadata.resource_version.clone().unwrap();
    assert_eq!(
        merged.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    // kubelet's patch: UID precondition in metadata, conditions by type, statuses by name.
    let strategic = json!({
        "metadata": {"uid": uid},
        "spec": {"nodeName": "elsewhere"},
        "status": {
            "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}, {"type": "Initialized"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "i", "imageID": ""}],
        },
    });
    let after = pods
        .patch_status("a", &PatchParams::default(), &Patch::Strategic(strategic))
        .await
        .unwrap();
    let status = after.status.unwrap();
    let conds: Vec<_> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conds,
        [
            ("PodScheduled".into(), "True".into()),
            ("Ready".into(), "True".into()),
            ("Initialized".into(), "True".into())
        ]
    );
    assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.5"));
    assert_eq!(status.container_statuses.unwrap()[0].name, "c");
    // The status subresource never changes the spec.
    assert_eq!(after.spec.unwrap().node_name.as_deref(), Some("n1"));
    assert_ne!(after.metadata.resource_version.unwrap(), rv1);

    let wrong = json!({"metadata": {"uid": "00000000-0000-4000-a000-000000000000"}, "status": {"phase": "Failed"}});
    let (code, reason, message) = api_error(
        pods.patch_status("a", &PatchParams::default(), &Patch::Strategic(wrong))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(
        message.contains("Precondition failed: UID in precondition"),
        "{message}"
    );
    let stale = json!({"metadata": {"resourceVersion": rv1}, "status": {"phase": "Failed"}});
    assert_eq!(
        api_error(
            pods.patch_status("a", &PatchParams::default(), &Patch::Merge(stale))
                .await
                .unwrap_err()
        )
        .0,
        409
    );
}

/// `kubectl debug`'s request: a strategic patch of `pods/ephemeralcontainers`. It adds
/// ephemeral containers and nothing else, and the ones there may not change.
#[tokio::test]
async fn ephemeral_containers_are_added_through_their_subresource_only() {
    let (_dir, _server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .unwrap();
    let debug = |image: &str| {
        json!({"spec": {
            "containers": [{"name": "c", "image": "changed:1"}],
            "ephemeralContainers": [{"name": "dbg", "image": image, "targetContainerName": "c"}],
        }})
    };
    let p = pods
        .patch_ephemeral_containers(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(debug("busybox:1")),
        )
        .await
        .unwrap();
    let spec = p.spec.unwrap();
    let ec = spec.ephemeral_containers.unwrap();
    assert_eq!((ec.len(), ec[0].name.as_str()), (1, "dbg"));
    assert_eq!(ec[0].target_container_name.as_deref(), Some("c"));
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some("localhost/oxlet-test/busybox:1"),
        "the subresource takes only the ephemeral containers"
    );
    let err = pods
        .patch_ephemeral_containers(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(debug("other:2")),
        )
        .await
        .unwrap_err();
    let (code, reason, message) = api_error(err);
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(message.contains("\"dbg\" may not be changed"), "{message}");
    // A plain update of the pod cannot change them.
    let mut p = pods.get("a").await.unwrap();
    p.spec.as_mut().unwrap().ephemeral_containers = None;
    assert!(
        pods.replace("a", &PostParams::default(), &p).await.is_err() || {
            let now = pods.get("a").await.unwrap();
            now.spec
                .unwrap()
                .ephemeral_containers
                .is_some_and(|e| e.len() == 1)
        }
    );
}

#[tokio::test]
async fn graceful_delete_then_grace_zero_with_uid_precondition() {
    let (_dir, server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let p = pods
        .create(&PostParams::default(), &pod("a", "n1", json!({})))
        .await
        .unwrap();
    let uid = p.metadata.uid.clone().unwrap();
    let rv = p.metadata.resource_version.unwrap();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();

    let deleting = pods
        .delete("a", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("a pod is returned");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(deleting.metadata.deletion_grace_period_seconds, Some(30));
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Modified(p) => assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30)),
        other => panic!("expected the graceful delete as MODIFIED, got {other:?}"),
    }
    // A longer grace changes nothing; the object stays until the final delete.
    pods.delete("a", &DeleteParams::default().grace_period(60))
        .await
        .unwrap();
    assert_eq!(
        pods.get("a")
            .await
            .unwrap()
            .metadata
            .deletion_grace_period_seconds,
        Some(30)
    );

    let wrong = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    assert_eq!(
        api_error(pods.delete("a", &wrong).await.unwrap_err()).1,
        "Conflict"
    );
    let last = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete("a", &last).await.unwrap();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Deleted(p) => assert_eq!(p.metadata.name.as_deref(), Some("a")),
        other => panic!("expected DELETED, got {other:?}"),
    }
    let (code, reason, _) = api_error(pods.get("a").await.unwrap_err());
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert!(server.get::<Pod>("default", "a").unwrap().is_none());

    // An unbound pod has nobody to stop it, so it goes at once.
    pods.create(&PostParams::default(), &pod("u", "", json!({})))
        .await
        .unwrap();
    pods.delete("u", &DeleteParams::default()).await.unwrap();
    assert!(server.get::<Pod>("default", "u").unwrap().is_none());
}

#[tokio::test]
async fn lease_create_renew_and_conflicts() {
    let (_dir, _server, client) = server().await;
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40, "renewTime": "2026-01-01T00:00:00.000000Z"},
    }))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let (code, reason, _) = api_error(
        leases
            .create(&PostParams::default(), &lease)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    let mut renewed = created.clone();
    renewed.spec.as_mut().unwrap().renew_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            k8s_openapi::jiff::Timestamp::now(),
        ));
    let after = leases
        .replace("n1", &PostParams::default(), &renewed)
        .await
        .unwrap();
    assert_ne!(
        after.metadata.resource_version,
        created.metadata.resource_version
    );
    // Renewing from the stale copy loses the optimistic lock.
    let (code, reason, message) = api_error(
        leases
            .replace("n1", &PostParams::default(), &renewed)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(
        message.contains("the object has been modified"),
        "{message}"
    );
}

#[tokio::test]
async fn strict_like_the_real_server() {
    let (_dir, server, _client) = server().await;
    let body = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolcy": "Never"}]}}).to_string();
    let (code, status) = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some("application/json"),
        &body,
        true,
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        status["message"],
        "strict decoding error: unknown field \"spec.containers[0].imagePullPolcy\""
    );
    let good =
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}})
            .to_string();
    let (code, status) = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some("text/plain"),
        &good,
        true,
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    let (code, _) = raw(
        &server,
        "PATCH",
        "/api/v1/namespaces/default/pods/p/status",
        Some("application/json"),
        "{}",
        true,
    )
    .await;
    assert_eq!(code, 415);
    let (code, _) = raw(&server, "GET", "/api/v1/pods", None, "", false).await;
    assert_eq!(
        code, 200,
        "anonymous, as client-go sends no token over http"
    );
    server.set_anonymous(false);
    let (code, status) = raw(&server, "GET", "/api/v1/pods", None, "", false).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (401, Some("Unauthorized"))
    );
    server.set_anonymous(true);
    let (code, _) = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/pods",
        Some("application/json"),
        &good,
        true,
    )
    .await;
    assert_eq!(code, 201);
    // List items carry no TypeMeta; single GETs and the list itself do.
    let (_, list) = raw(
        &server,
        "GET",
        "/api/v1/namespaces/default/pods",
        None,
        "",
        true,
    )
    .await;
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("PodList"), Some("v1"))
    );
    let item = &list["items"][0];
    assert!(
        item.get("kind").is_none() && item.get("apiVersion").is_none(),
        "{item}"
    );
    assert!(item["metadata"]["resourceVersion"].is_string());
    let (_, one) = raw(
        &server,
        "GET",
        "/api/v1/namespaces/default/pods/p",
        None,
        "",
        true,
    )
    .await;
    assert_eq!(one["kind"], "Pod");
    let (code, missing) = raw(
        &server,
        "GET",
        "/api/v1/namespaces/default/pods/q",
        None,
        "",
        true,
    )
    .await;
    assert_eq!(
        (code, missing["reason"].as_str(), missing["kind"].as_str()),
        (404, Some("NotFound"), Some("Status"))
    );
    let (code, _) = raw(
        &server,
        "GET",
        "/api/v1/pods?fieldSelector=spec.hostname%3Dx",
        None,
        "",
        true,
    )
    .await;
    assert_eq!(code, 400);
    // JSON patch too.
    let ops = json!([{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]).to_string();
    let (code, patched) = raw(
        &server,
        "PATCH",
        "/api/v1/namespaces/default/pods/p",
        Some("application/json-patch+json"),
        &ops,
        true,
    )
    .await;
    assert_eq!(
        (code, &patched["metadata"]["labels"]["a"]),
        (200, &json!("b"))
    );
    let big = format!(
        "{{\"metadata\": {{\"name\": \"{}\"}}}}",
        "x".repeat(4 << 20)
    );
    let (code, _) = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        &big,
        true,
    )
    .await;
    assert_eq!(code, 413);
}

#[tokio::test]
async fn stop_and_restart_keep_state() {
    let (dir, mut server, client) = server().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(
        json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "status": {"capacity": {"cpu": "2", "pods": "110"}}}),
    )
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}});
    let patched = nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Merge(ready))
        .await
        .unwrap();
    assert_eq!(
        patched.status.as_ref().unwrap().capacity.as_ref().unwrap()["cpu"].0,
        "2"
    );
    let rv = server.resource_version();

    server.stop().await.unwrap();
    let e = tokio::time::timeout(WAIT, nodes.get("n1"))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        !matches!(e, kube::Error::Api(_)),
        "no server should answer: {e:?}"
    );
    server.restart().await.unwrap();
    let back = nodes.get("n1").await.unwrap();
    assert_eq!(back.status.unwrap().conditions.unwrap()[0].type_, "Ready");
    assert_eq!(server.resource_version(), rv);

    // A new server on the same state directory loads what the stopped one saved.
    server.stop().await.unwrap();
    drop(server);
    let started = std::time::Instant::now();
    let second = TestApiServer::start(dir.path()).await.unwrap();
    let took = started.elapsed();
    eprintln!("test apiserver start with saved state: {took:?}");
    assert!(
        took < Duration::from_millis(500),
        "start should take milliseconds, took {took:?}"
    );
    let nodes: Api<Node> = Api::all(client_of(&second).await);
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    assert!(second.get::<Node>("", "n1").unwrap().is_none());
    assert!(second.resource_version() > rv);
}

#[tokio::test]
async fn events_configmaps_secrets_tokens_and_csrs() {
    let (_dir, server, client) = server().await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let ev: Event = serde_json::from_value(json!({"metadata": {"name": "a.1"}, "involvedObject": {"kind": "Pod", "name": "a", "namespace": "default"},
        "reason": "Pulled", "message": "m", "count": 1, "type": "Normal", "source": {"component": "kubelet", "host": "n1"}})).unwrap();
    events.create(&PostParams::default(), &ev).await.unwrap();
    let counted = events
        .patch(
            "a.1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"count": 2, "message": "m2"})),
        )
        .await
        .unwrap();
    assert_eq!(counted.count, Some(2));
    let by_reason = events
        .list(&ListParams::default().fields("reason=Pulled,involvedObject.name=a"))
        .await
        .unwrap();
    assert_eq!(by_reason.items.len(), 1);
    let new_events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let ne: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({"metadata": {"generateName": "a."},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "oxlet", "reportingInstance": "n1", "action": "Pulling", "reason": "Pulling", "type": "Normal"})).unwrap();
    let made = new_events
        .create(&PostParams::default(), &ne)
        .await
        .unwrap();
    assert!(made.metadata.name.unwrap().starts_with("a."));

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    server
        .put(
            &serde_json::from_value::<ConfigMap>(
                json!({"metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "v"}}),
            )
            .unwrap(),
        )
        .unwrap();
    assert_eq!(cms.get("cm").await.unwrap().data.unwrap()["k"], "v");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    server
        .put(
            &serde_json::from_value::<Secret>(
                json!({"metadata": {"name": "s", "namespace": "default"}, "data": {"k": "dg=="}}),
            )
            .unwrap(),
        )
        .unwrap();
    assert_eq!(secrets.get("s").await.unwrap().data.unwrap()["k"].0, b"v");
    let mut w = secrets
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    assert!(matches!(
        w.try_next().await.unwrap().unwrap(),
        WatchEvent::Added(_)
    ));

    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let tr: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let got: TokenRequest = sas
        .create_subresource("token", "default", &PostParams::default(), &tr)
        .await
        .unwrap();
    let status = got.status.unwrap();
    assert!(!status.token.unwrap_or_default().is_empty());
    assert!(status.expiration_timestamp.unwrap().0 > k8s_openapi::jiff::Timestamp::now());
    server.set_token_max_expiration(Some(Duration::from_secs(700)));
    let short: TokenRequest = sas
        .create_subresource("token", "default", &PostParams::default(), &tr)
        .await
        .unwrap();
    assert_eq!(short.spec.unwrap().expiration_seconds, Some(700));
    let e = sas
        .create_subresource::<_, TokenRequest>("token", "nobody", &PostParams::default(), &tr)
        .await
        .unwrap_err();
    assert_eq!(api_error(e).0, 404);

    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let csr: CertificateSigningRequest = serde_json::from_value(json!({"metadata": {"generateName": "csr-"},
        "spec": {"request": "LS0t", "signerName": "kubernetes.io/kube-apiserver-client-kubelet", "usages": ["client auth"]}})).unwrap();
    let made = csrs.create(&PostParams::default(), &csr).await.unwrap();
    let name = made.metadata.name.unwrap();
    server
        .approve_csr(&name, Some(b"-----BEGIN CERTIFICATE-----\n"))
        .unwrap();
    let approved = csrs.get(&name).await.unwrap().status.unwrap();
    assert_eq!(approved.conditions.unwrap()[0].type_, "Approved");
    assert_eq!(
        approved.certificate.unwrap().0,
        b"-----BEGIN CERTIFICATE-----\n"
    );
}

/// Whether kubectl is here; says the test is skipped when it is not.
fn kubectl_installed() -> bool {
    let here = std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok();
    if !here {
        eprintln!("SKIPPED: kubectl is not installed (apt-get install kubernetes-client)");
    }
    here
}

/// Runs kubectl against `server`: (succeeded, stdout, stderr).
async fn kubectl_run(server: &TestApiServer, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(server.kubeconfig())
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn kubectl_gets_pods_and_nodes() {
    if !kubectl_installed() {
        return;
    }
    let (_dir, server, _client) = server().await;
    server.put(&pod("a", "n1", json!({"app": "web"}))).unwrap();
    server
        .put(&serde_json::from_value::<Node>(json!({"metadata": {"name": "n1"}})).unwrap())
        .unwrap();
    let kubectl = |args: &'static [&'static str]| {
        let server = &server;
        async move {
            let (ok, out, err) = kubectl_run(server, args).await;
            assert!(ok, "kubectl {args:?}: {err}");
            out
        }
    };
    let pods: Value = serde_json::from_str(&kubectl(&["get", "pods", "-o", "json"]).await).unwrap();
    assert_eq!(pods["items"][0]["metadata"]["name"], "a");
    assert_eq!(pods["items"][0]["spec"]["nodeName"], "n1");
    let table = kubectl(&["get", "nodes"]).await;
    assert!(table.contains("n1"), "{table}");
    let sel = kubectl(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        "spec.nodeName=n1",
        "-l",
        "app=web",
        "-o",
        "name",
    ])
    .await;
    assert_eq!(sel.trim(), "pod/a");
    kubectl(&[
        "patch",
        "pod",
        "a",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/labels/x","value":"y"}]"#,
    ])
    .await;
    kubectl(&["delete", "pod", "a", "--grace-period=0", "--force"]).await;
    assert!(server.get::<Pod>("default", "a").unwrap().is_none());
}

#[tokio::test]
async fn selector_watches_see_objects_leave_and_finalizers_hold_deletion() {
    let (_dir, _server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let rv = server_rv(&pods).await;
    let mut web = pods
        .watch(&WatchParams::default().labels("app=web").timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    pods.create(
        &PostParams::default(),
        &pod("a", "n1", json!({"app": "db"})),
    )
    .await
    .unwrap();
    // Relabelled into the selection: ADDED; out of it again: DELETED, as the real watch cache says.
    let into = json!({"metadata": {"labels": {"app": "web"}}});
    pods.patch("a", &PatchParams::default(), &Patch::Merge(into))
        .await
        .unwrap();
    let out = json!({"metadata": {"labels": {"app": "db"}, "finalizers": ["example.com/hold"]}});
    pods.patch("a", &PatchParams::default(), &Patch::Strategic(out))
        .await
        .unwrap();
    let kinds: Vec<&str> = [web.try_next().await, web.try_next().await]
        .into_iter()
        .map(|e| match e.unwrap().unwrap() {
            WatchEvent::Added(_) => "ADDED",
            WatchEvent::Deleted(_) => "DELETED",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["ADDED", "DELETED"]);

    // A finalizer keeps even a grace-0 delete until it is removed.
    pods.delete("a", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let held = pods.get("a").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let release =
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/hold"]}});
    pods.patch("a", &PatchParams::default(), &Patch::Strategic(release))
        .await
        .unwrap();
    assert_eq!(api_error(pods.get("a").await.unwrap_err()).0, 404);
}

async fn server_rv(pods: &Api<Pod>) -> String {
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
}

/// Like the real server: a Secret's `stringData` lands in `data` (base64) on create,
/// update and patch; pods with duplicate container names or unsupported policies are
/// refused with 422 Invalid naming the field.
#[tokio::test]
async fn secrets_merge_string_data_and_pods_are_validated() {
    let (_dir, _server, client) = server().await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let s: Secret = serde_json::from_value(json!({"metadata": {"name": "s"},
        "stringData": {"user": "admin"}}))
    .unwrap();
    let created = secrets.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(created.data.as_ref().unwrap()["user"].0, b"admin");
    assert!(created.string_data.is_none());
    let mut s2 = created.clone();
    s2.string_data = Some([("pass".to_owned(), "pw".to_owned())].into());
    let updated = secrets
        .replace("s", &PostParams::default(), &s2)
        .await
        .unwrap();
    let data = updated.data.unwrap();
    assert_eq!(
        (data["user"].0.as_slice(), data["pass"].0.as_slice()),
        (&b"admin"[..], &b"pw"[..])
    );
    let patched = secrets
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"user": "root"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["user"].0, b"root");

    let pods: Api<Pod> = Api::namespaced(client, "default");
    for (spec, field) in [
        (
            json!({"initContainers": [{"name": "c", "image": "i"}], "containers": [{"name": "c", "image": "i"}]}),
            "spec.containers[0].name: Duplicate value",
        ),
        (
            json!({"restartPolicy": "Sometimes", "containers": [{"name": "c", "image": "i"}]}),
            "spec.restartPolicy: Unsupported value",
        ),
        (
            json!({"containers": [{"name": "c", "image": "i", "imagePullPolicy": "Maybe"}]}),
            "spec.containers[0].imagePullPolicy: Unsupported value",
        ),
    ] {
        let p: Pod =
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap();
        match pods.create(&PostParams::default(), &p).await {
            Err(kube::Error::Api(e)) => {
                assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
                assert!(e.message.contains(field), "{}", e.message);
            }
            other => panic!("expected 422 for {field}, got {other:?}"),
        }
    }
}

/// `start_on` listens where asked, so a server started by hand (the `serve` example)
/// comes back on the same port and its kubeconfig still works.
#[tokio::test]
async fn start_on_a_given_port_survives_a_process_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = TestApiServer::start(dir.path()).await.unwrap();
    let url = first.url();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    first.stop().await.unwrap();
    drop(first);
    let second = TestApiServer::start_on(dir.path(), port).await.unwrap();
    assert_eq!(second.url(), url);
    let nodes: Api<Node> = Api::all(client_of(&second).await);
    nodes.list(&ListParams::default()).await.unwrap();
}

/// `deploy/koordlet-rbac.yaml` applied as docs/kind.md says (`kubectl apply -f`; the
/// test apiserver serves no OpenAPI, hence `--validate=false`): a node identity that
/// RBAC refused NodeSLOs gets them once the file is applied, and only what it grants.
/// The node speaks through kube-rs (kubectl sends no bearer token over plain http).
#[tokio::test]
async fn kubectl_applies_the_koordlet_rbac_file_and_a_node_gets_its_node_slo() {
    if !kubectl_installed() {
        return;
    }
    let (_dir, server, client) = server().await;
    let node_kubeconfig = server.add_node_token("node-n1", "n1").unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&node_kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let node = Client::try_from(config).unwrap();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodeslos.slo.koordinator.sh"},
        "spec": {"group": "slo.koordinator.sh", "scope": "Cluster",
            "names": {"kind": "NodeSLO", "plural": "nodeslos"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true}]}});
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(crd).unwrap();
    server.put(&crd).unwrap();
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("slo.koordinator.sh", "v1alpha1", "NodeSLO"),
        "nodeslos",
    );
    let mut slo = kube::api::DynamicObject::new("n1", &ar);
    slo.data = json!({"spec": {}});
    Api::<kube::api::DynamicObject>::all_with(client, &ar)
        .create(&PostParams::default(), &slo)
        .await
        .unwrap();
    let slos: Api<kube::api::DynamicObject> = Api::all_with(node, &ar);
    let refused = slos.get("n1").await.unwrap_err();
    assert!(
        refused.to_string().contains("User \"system:node:n1\" cannot get resource \"nodeslos\" in API group \"slo.koordinator.sh\" at the cluster scope"),
        "{refused}"
    );
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/koordlet-rbac.yaml");
    let (ok, out, err) = kubectl_run(&server, &["apply", "--validate=false", "-f", file]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("clusterrolebinding.rbac.authorization.k8s.io/oxlet-koordlet created"),
        "{out}"
    );
    assert_eq!(
        slos.get("n1").await.unwrap().metadata.name.as_deref(),
        Some("n1")
    );
    let list = slos
        .list(&ListParams::default().fields("metadata.name=n1"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let refused = slos
        .delete("n1", &DeleteParams::default())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("cannot delete resource"),
        "{refused}"
    );
}

/// Custom resources, as the real server serves them: a CRD created with kubectl makes
/// its group discoverable and its plural, short name and status subresource served;
/// objects keep fields no built-in type knows, and the main resource keeps the status.
#[tokio::test]
async fn kubectl_serves_a_custom_resource_once_its_crd_is_created() {
    if !kubectl_installed() {
        return;
    }
    let (dir, server, client) = server().await;
    let kubectl = |line: &str| {
        let args: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let server = &server;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl_run(server, &args).await
        }
    };
    // Not served before its CRD exists.
    let (ok, _, err) = kubectl("get nodemetrics").await;
    assert!(
        !ok && err.contains("the server doesn't have a resource type"),
        "{err}"
    );
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodemetrics.slo.koordinator.sh"},
        "spec": {"group": "slo.koordinator.sh", "scope": "Cluster",
            "names": {"kind": "NodeMetric", "plural": "nodemetrics", "singular": "nodemetric", "shortNames": ["nm"]},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}}}]}});
    let nm = json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": "n1"}, "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 60}},
        "status": {"ignored": true}});
    for (name, doc) in [("crd.json", &crd), ("nm.json", &nm)] {
        let path = dir.path().join(name);
        std::fs::write(&path, doc.to_string()).unwrap();
        // The server publishes no OpenAPI document for kubectl to validate against.
        let (ok, out, err) =
            kubectl(&format!("create --validate=false -f {}", path.display())).await;
        assert!(ok, "{out}{err}");
    }
    let (ok, out, err) = kubectl("get nm n1 -o json").await;
    assert!(ok, "{err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        got["spec"]["metricCollectPolicy"]["reportIntervalSeconds"],
        60
    );
    assert!(got.get("status").is_none(), "create keeps no status: {got}");
    let (ok, _, err) = kubectl(
        r#"patch nodemetric n1 --subresource=status --type=merge -p {"status":{"podsMetric":[{"name":"a"}]}}"#,
    )
    .await;
    assert!(ok, "{err}");
    let (ok, out, err) = kubectl("get nodemetrics.slo.koordinator.sh -o name").await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "nodemetric.slo.koordinator.sh/n1");
    // The same object through kube-rs, as a dynamic object found by discovery.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) = discovery
        .groups()
        .flat_map(kube::discovery::ApiGroup::recommended_resources)
        .find(|(ar, _)| ar.kind == "NodeMetric")
        .expect("NodeMetric is discovered");
    assert_eq!(ar.api_version, "slo.koordinator.sh/v1alpha1");
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
    let api: Api<kube::api::DynamicObject> = Api::all_with(client, &ar);
    let n1 = api.get("n1").await.unwrap();
    assert_eq!(n1.data["status"]["podsMetric"][0]["name"], "a");
}

/// Like the real server (`ValidateNode`, `ValidateNodeUpdate`): a kubelet-shaped node
/// registers and updates its status; a status with a negative capacity, a fractional
/// pod count or an address listed twice is refused with 422, as is moving a set
/// `podCIDR`; a status write cannot smuggle a spec change past that check.
#[tokio::test]
async fn node_writes_are_validated_like_the_real_server() {
    let (_dir, _server, client) = server().await;
    let nodes: Api<Node> = Api::all(client);
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"},
        "spec": {"podCIDR": "10.244.1.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]}}))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = |capacity: serde_json::Value, addresses: serde_json::Value| {
        Patch::Merge(
            json!({"status": {"capacity": capacity, "allocatable": capacity,
            "addresses": addresses}}),
        )
    };
    let ip = json!({"type": "InternalIP", "address": "10.0.0.1"});
    let ok = status(json!({"cpu": "2", "pods": "110"}), json!([ip]));
    nodes
        .patch_status("n1", &PatchParams::default(), &ok)
        .await
        .unwrap();
    let refused = [
        (
            status(json!({"cpu": "-1"}), json!([ip])),
            "status.capacity.cpu: Invalid value: \"-1\": must be greater than or equal to 0",
        ),
        (
            status(json!({"pods": "1500m"}), json!([ip])),
            "status.capacity.pods: Invalid value: \"1500m\": must be an integer",
        ),
        (
            status(json!({"cpu": "2"}), json!([ip, ip])),
            "status.addresses[1]: Duplicate value",
        ),
        (
            Patch::Merge(json!({"spec": {"podCIDR": "10.244.9.0/24"}})),
            "spec.podCIDR: Forbidden: node updates may not change podCIDR except from \"\" to valid",
        ),
    ];
    for (i, (patch, message)) in refused.iter().enumerate() {
        let result = if i == 3 {
            nodes.patch("n1", &PatchParams::default(), patch).await
        } else {
            nodes
                .patch_status("n1", &PatchParams::default(), patch)
                .await
        };
        match result {
            Err(kube::Error::Api(e)) => {
                assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"), "{e:?}");
                assert!(e.message.contains(message), "{}", e.message);
            }
            other => panic!("expected 422 for {message}, got {other:?}"),
        }
    }
    // Through the status subresource, a spec in the body is ignored, not refused.
    let with_spec = Patch::Merge(json!({"spec": {"podCIDR": "10.244.9.0/24"},
        "status": {"capacity": {"cpu": "4"}}}));
    let n = nodes
        .patch_status("n1", &PatchParams::default(), &with_spec)
        .await
        .unwrap();
    assert_eq!(n.spec.unwrap().pod_cidr.as_deref(), Some("10.244.1.0/24"));
}

/// `patch`, strategic, to pod `r`'s resize subresource through kube-rs.
async fn resize_r(pods: &Api<Pod>, patch: Value) -> Result<Pod, kube::Error> {
    let params = PatchParams::default();
    (pods.patch_subresource("resize", "r", &params, &Patch::Strategic(patch))).await
}

/// `patch` sent by curl as a merge patch to pod `r`'s resize subresource; the answer.
/// Run without blocking: the server answers on the test's own runtime.
async fn curl_resize(server: &TestApiServer, patch: &str) -> Value {
    let url = format!("{}/api/v1/namespaces/default/pods/r/resize", server.url());
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "-X", "PATCH"])
        .args(["-H", "Content-Type: application/merge-patch+json"])
        .args(["-H", &format!("Authorization: Bearer {}", server.token())])
        .args(["--data", patch, &url])
        .output()
        .await
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn burstable_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "localhost/oxlet-test/busybox:1",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"cpu": "500m", "memory": "128Mi"}}}]},
    }))
    .unwrap()
}

/// `pods/resize` through kube-rs and curl: cpu and memory change (generation and
/// resourceVersion move, watchers see it), the rest of the body is ignored, the 1.36
/// refusals come with their messages, and a plain pod update may not touch resources.
#[tokio::test]
async fn pods_resize_through_its_subresource_only() {
    let (_dir, server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let created = pods
        .create(&PostParams::default(), &burstable_pod("r"))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    let mut events = pods
        .watch(&WatchParams::default().fields("metadata.name=r"), &rv)
        .await
        .unwrap()
        .boxed();
    let resize = json!({"metadata": {"labels": {"ignored": "yes"}},
        "spec": {"activeDeadlineSeconds": 5,
                 "containers": [{"name": "c", "image": "ignored:2",
                                 "resources": {"limits": {"cpu": "1", "memory": "96Mi"}}}]}});
    let p = resize_r(&pods, resize).await.unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    assert_ne!(p.metadata.resource_version, Some(rv));
    assert!(
        p.metadata.labels.is_none(),
        "only the resize fields are taken"
    );
    let spec = p.spec.unwrap();
    assert_eq!(spec.active_deadline_seconds, None);
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some("localhost/oxlet-test/busybox:1")
    );
    let limits = spec.containers[0]
        .resources
        .as_ref()
        .unwrap()
        .limits
        .clone()
        .unwrap();
    // The memory limit went down under the default (NotRequired) policy: allowed in 1.36.
    assert_eq!(
        (limits["cpu"].0.as_str(), limits["memory"].0.as_str()),
        ("1", "96Mi")
    );
    let seen = tokio::time::timeout(WAIT, events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match seen {
        WatchEvent::Modified(p) => assert_eq!(p.metadata.generation, Some(2)),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    let got: Pod = serde_json::from_value(
        raw(
            &server,
            "GET",
            "/api/v1/namespaces/default/pods/r/resize",
            None,
            "",
            true,
        )
        .await
        .1,
    )
    .unwrap();
    assert_eq!(
        got.metadata.generation,
        Some(2),
        "GET on resize answers the pod"
    );

    let refused = |patch: Value| {
        let pods = pods.clone();
        async move {
            let err = resize_r(&pods, patch).await.unwrap_err();
            let (code, reason, message) = api_error(err);
            assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
            message
        }
    };
    let limit =
        |l: Value| json!({"spec": {"containers": [{"name": "c", "resources": {"limits": l}}]}});
    assert_eq!(
        refused(limit(json!({"memory": null}))).await,
        "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed"
    );
    assert_eq!(
        refused(json!({"spec": {"containers": [{"name": "c", "resources": {
            "requests": {"cpu": "1", "memory": "96Mi"}, "limits": {"cpu": "1", "memory": "96Mi"}}}]}})).await,
        "spec: Invalid value: \"Burstable\": Pod QOS Class may not change as a result of resizing"
    );
    assert_eq!(
        refused(limit(json!({"ephemeral-storage": "1Gi"}))).await,
        "spec: Forbidden: only cpu and memory resources are mutable"
    );

    // A plain update may not change resources; a new image it may.
    let (code, body) = raw(
        &server,
        "PATCH",
        "/api/v1/namespaces/default/pods/r",
        Some("application/strategic-merge-patch+json"),
        &limit(json!({"cpu": "2"})).to_string(),
        true,
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(body["message"].as_str().unwrap().starts_with(
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"), "{body}");
    let image =
        json!({"spec": {"containers": [{"name": "c", "image": "localhost/oxlet-test/busybox:2"}]}});
    let p = pods
        .patch("r", &PatchParams::default(), &Patch::Strategic(image))
        .await
        .unwrap();
    assert_eq!(p.metadata.generation, Some(3));

    // curl, as a user would: a merge patch on the subresource, then a refused one.
    let answer = curl_resize(&server, r#"{"spec":{"containers":[{"name":"c","image":"localhost/oxlet-test/busybox:2","resources":{"requests":{"cpu":"200m","memory":"64Mi"},"limits":{"cpu":"1","memory":"96Mi"}}}]}}"#).await;
    assert_eq!(answer["metadata"]["generation"], 4, "{answer}");
    assert_eq!(
        answer["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "200m"
    );
    let answer = curl_resize(&server, r#"{"spec":{"containers":[{"name":"c","image":"localhost/oxlet-test/busybox:2","resources":{"requests":{"cpu":"2","memory":"64Mi"},"limits":{"cpu":"1","memory":"96Mi"}}}]}}"#).await;
    assert_eq!(answer["code"], 422, "{answer}");
    assert_eq!(
        answer["message"],
        "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"
    );
    assert_eq!(pods.get("r").await.unwrap().metadata.generation, Some(4));
}

/// `kubectl patch --subresource resize`, as a user resizes a pod.
#[tokio::test]
async fn kubectl_resizes_a_pod() {
    if !kubectl_installed() {
        return;
    }
    let (_dir, server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &burstable_pod("r"))
        .await
        .unwrap();
    let patch = r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"800m"}}}]}}"#;
    let (ok, out, err) = kubectl_run(
        &server,
        &["patch", "pod", "r", "--subresource", "resize", "-p", patch],
    )
    .await;
    assert!(ok, "{out}{err}");
    let p = pods.get("r").await.unwrap();
    assert_eq!(p.metadata.generation, Some(2));
    let limits = p.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(limits["cpu"].0, "800m");
    let removal = r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":null}}}]}}"#;
    let (ok, _, err) = kubectl_run(
        &server,
        &[
            "patch",
            "pod",
            "r",
            "--subresource",
            "resize",
            "-p",
            removal,
        ],
    )
    .await;
    assert!(!ok);
    assert!(err.contains("resource requests cannot be removed"), "{err}");
}

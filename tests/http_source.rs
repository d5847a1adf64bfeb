//! The HTTP pod source on a real containerd: pods served by a local HTTP server
//! are started, an edit replaces a pod, a pod dropped from the served list is
//! stopped, and a server that goes away leaves the running pods alone.

mod agent;
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent::*;
use common::Testbed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const START: Duration = Duration::from_secs(30);

/// A pod as the API writes a PodList item (no kind/apiVersion), running `sleep`.
fn item(name: &str, marker: &str) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","labels":{{"marker":"{marker}"}}}},"spec":{{"terminationGracePeriodSeconds":1,"containers":[{{"name":"main","image":"localhost/oxlet/busybox:1","imagePullPolicy":"IfNotPresent","command":["sleep","3600"]}}]}}}}"#
    )
}

fn list(items: &[String]) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"PodList","items":[{}]}}"#,
        items.join(",")
    )
}

/// A tiny HTTP server answering every GET with the current body; aborted to make
/// it go away.
struct Server {
    url: String,
    body: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(body: String) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/pods", listener.local_addr().unwrap());
        let body = Arc::new(Mutex::new(body));
        let served = body.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let body = served.lock().unwrap().clone();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        Server { url, body, task }
    }

    fn serve(&self, body: String) {
        *self.body.lock().unwrap() = body;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn label(p: &k8s_openapi::api::core::v1::Pod) -> String {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("marker").cloned())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_pods_start_are_replaced_removed_and_outlive_the_server() {
    let bed = Testbed::start().await;
    let server = Server::start(list(&[item("web", "v1"), item("side", "v1")])).await;
    let ox = Oxlet::start(
        &bed,
        &[
            &format!("--manifest-url={}", server.url),
            "--manifest-url-header=X-Test:yes",
            "--http-check-frequency=200ms",
        ],
    );

    // Served pods start, named for the node and marked as from source http.
    let web = ox.wait_running("web", START).await;
    let side = ox.wait_running("side", START).await;
    let ann = web.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        ann.get("kubernetes.io/config.source").map(String::as_str),
        Some("http")
    );
    assert_eq!(cri_containers(&bed, &uid(&web)).await.len(), 1);

    // An edit is a new pod (a new UID); the old one's containers go.
    server.serve(list(&[item("web", "v2"), item("side", "v1")]));
    let web2 = ox
        .wait_for("web v2 Running", START, |pods| {
            find(pods, "web")
                .filter(|p| label(p) == "v2" && is_running(p))
                .cloned()
        })
        .await;
    assert_ne!(uid(&web2), uid(&web));
    ox.wait_for("old web gone", START, |pods| {
        (!pods.iter().any(|p| uid(p) == uid(&web))).then_some(())
    })
    .await;

    // Dropped from the list: stopped and gone.
    server.serve(list(&[item("web", "v2")]));
    ox.wait_for("side gone from /pods", START, |pods| {
        find(pods, "side").is_none().then_some(())
    })
    .await;
    let t = std::time::Instant::now();
    while cri_containers(&bed, &uid(&side))
        .await
        .iter()
        .any(|c| c.state == 1)
    {
        assert!(
            t.elapsed() < START,
            "side still running\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The server goes away: polls fail, the last good set stays running.
    drop(server);
    ox.wait_logged("failed to read pods from URL", 1, START)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pods = ox.pods().await;
    let still = find(&pods, "web").expect("web kept");
    assert_eq!(uid(still), uid(&web2));
    assert!(is_running(still));
    let running = cri_containers(&bed, &uid(&web2)).await;
    assert!(running.iter().any(|c| c.state == 1), "{running:?}");
}

//! kubelet's Prometheus endpoints end to end: the real oxlet on a real containerd runs
//! a static pod with a readiness probe; `/metrics` and `/metrics/probes` on the
//! read-only port then show what kubelet's would (parsed, not grepped).

mod agent;
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;

type Labels = BTreeMap<String, String>;

/// One sample line of the text format: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Labels,
    value: f64,
}

/// Parses label pairs `a="x",b="y\"z"` (the text format's escapes: `\\`, `\"`, `\n`).
fn parse_labels(s: &str) -> Labels {
    let mut out = Labels::new();
    let mut chars = s.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let name = name.trim_start_matches(',').trim().to_string();
        if name.is_empty() {
            return out;
        }
        assert_eq!(chars.next(), Some('"'), "label {name} has a quoted value");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(o) => value.push(o),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(name, value);
    }
}

/// Every sample of a text-format page; panics on a malformed line.
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("bad value in {l:?}")),
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (
                    n,
                    parse_labels(rest.strip_suffix('}').expect("closing brace")),
                ),
                None => (series, Labels::new()),
            };
            Sample {
                name: name.to_string(),
                labels,
                value,
            }
        })
        .collect()
}

/// The value of the sample `name` whose labels include `want`.
fn value(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && want
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

#[test]
fn the_parser_reads_the_text_format() {
    let s = parse(
        "# HELP a x\n# TYPE a counter\na{b=\"q\\\"r\",c=\"\"} 3\nd 1.5e+06\ne_bucket{le=\"+Inf\"} 2\n",
    );
    assert_eq!(s.len(), 3);
    assert_eq!(s[0].labels["b"], "q\"r");
    assert_eq!(s[0].labels["c"], "", "an empty value is kept");
    assert_eq!(s[0].value, 3.0);
    assert_eq!(s[1].value, 1.5e6);
    assert_eq!((s[2].labels["le"].as_str(), s[2].value), ("+Inf", 2.0));
}

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: probed
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "sleep 3600"]
    readinessProbe:
      exec:
        command: ["true"]
      periodSeconds: 1
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_probe_metrics_after_a_static_pod_runs() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(&ox.manifests, "probed.yaml", POD);
    let pod = ox.wait_running("probed", Duration::from_secs(30)).await;
    let uid = uid(&pod);
    // A static pod's name carries the node's (kubelet's `probed-testnode`).
    let name = pod.metadata.name.clone().unwrap();

    // The PLEG relists every second and the probe runs every second: poll until both
    // have been seen, then check everything on one scrape of each endpoint.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (metrics, probes) = loop {
        let m = ox.get("/metrics").await;
        let p = ox.get("/metrics/probes").await;
        if let (Some((200, m)), Some((200, p))) = (&m, &p) {
            let (ms, ps) = (parse(m), parse(p));
            let ready = value(
                &ps,
                "prober_probe_total",
                &[
                    ("probe_type", "Readiness"),
                    ("result", "successful"),
                    ("pod_uid", &uid),
                ],
            )
            .is_some_and(|v| v >= 1.0);
            let working = value(
                &ms,
                "kubelet_working_pods",
                &[
                    ("lifecycle", "sync"),
                    ("config", "desired"),
                    ("static", "true"),
                ],
            );
            if ready && working == Some(1.0) && value(&ms, "kubelet_running_pods", &[]) == Some(1.0)
            {
                break (ms, ps);
            }
        }
        assert!(
            Instant::now() < deadline,
            "metrics never showed the running, probed pod:\n{m:?}\n{p:?}\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    assert_eq!(value(&metrics, "kubelet_running_pods", &[]), Some(1.0));
    assert_eq!(
        value(&metrics, "kubelet_desired_pods", &[("static", "true")]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &metrics,
            "kubelet_pod_worker_duration_seconds_count",
            &[("operation_type", "create")]
        ),
        Some(1.0),
        "one create sync"
    );
    assert!(
        value(&metrics, "kubelet_pod_start_duration_seconds_count", &[]).is_some_and(|v| v >= 1.0)
    );
    assert!(value(&metrics, "kubelet_cgroup_version", &[]).is_some_and(|v| v == 1.0 || v == 2.0));
    assert_eq!(
        value(&metrics, "kubelet_node_name", &[("node", "testnode")]),
        Some(1.0)
    );
    let started = value(
        &metrics,
        "kubelet_started_containers_total",
        &[("container_type", "container")],
    );
    assert!(started.is_some_and(|v| v >= 1.0), "{started:?}");
    assert!(value(&metrics, "kubelet_started_pods_total", &[]).is_some_and(|v| v >= 1.0));
    let sandboxes = value(
        &metrics,
        "kubelet_runtime_operations_total",
        &[("operation_type", "run_podsandbox")],
    );
    assert!(sandboxes.is_some_and(|v| v >= 1.0), "{sandboxes:?}");
    let running = value(
        &metrics,
        "kubelet_running_containers",
        &[("container_state", "running")],
    );
    assert!(running.is_some_and(|v| v >= 1.0), "{running:?}");
    let sli = value(
        &metrics,
        "kubelet_pod_start_sli_duration_seconds_count",
        &[],
    );
    assert_eq!(sli, Some(1.0), "one pod started, one SLI sample");
    let inf = value(
        &metrics,
        "kubelet_pod_start_sli_duration_seconds_bucket",
        &[("le", "+Inf")],
    );
    assert_eq!(inf, Some(1.0));
    let relists = value(&metrics, "kubelet_pleg_relist_duration_seconds_count", &[]);
    assert!(relists.is_some_and(|v| v > 0.0), "{relists:?}");
    let http = value(
        &metrics,
        "kubelet_http_requests_total",
        &[
            ("path", "pods"),
            ("method", "GET"),
            ("server_type", "readonly"),
        ],
    );
    assert!(http.is_some_and(|v| v >= 1.0), "{http:?}");
    assert!(value(&metrics, "process_start_time_seconds", &[]).is_some_and(|v| v > 1.5e9));

    let labels = [
        ("probe_type", "Readiness"),
        ("container", "main"),
        ("pod", name.as_str()),
        ("namespace", "default"),
    ];
    let count = value(&probes, "prober_probe_duration_seconds_count", &labels);
    assert!(count.is_some_and(|v| v >= 1.0), "{count:?}\n{probes:?}");
    assert!(value(&probes, "process_start_time_seconds", &[]).is_some());
    assert!(
        probes
            .iter()
            .all(|s| s.name.starts_with("prober_probe_") || s.name == "process_start_time_seconds"),
        "only the probe families on /metrics/probes"
    );

    // The content type and the family order are kubelet's.
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", ox.port))
        .await
        .unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    let names: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "families sorted by name");

    // Removing the pod stops its probe worker, which deletes its series.
    std::fs::remove_file(ox.manifests.join("probed.yaml")).unwrap();
    ox.wait_for("probed gone", Duration::from_secs(20), |pods| {
        find(pods, "probed").is_none().then_some(())
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, p) = ox.get("/metrics/probes").await.unwrap();
        if !parse(&p).iter().any(|s| s.labels.get("pod") == Some(&name)) {
            break;
        }
        assert!(Instant::now() < deadline, "probe series stayed:\n{p}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

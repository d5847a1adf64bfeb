//! The Summary API and kubelet's other read endpoints on a real containerd with the
//! real oxlet binary: a static pod whose container writes 2 MiB into an emptyDir and
//! 15 MiB into its own root filesystem (the writable layer).
//!
//! `stats_and_debug_endpoints` needs only oxlet's own parts (`/configz` and
//! `/runningpods/` kept to the secure port, `/spec` gone, `/stats/summary` and `/metrics/resource` agreeing
//! on whether the metric advisor has a reading). `summary_matches_the_cgroup_and_the_volume`
//! needs the metric advisor to fill the readings.

mod agent;
mod common;

#[allow(dead_code, unreachable_pub)]
#[path = "../src/stats/summary.rs"]
mod summary;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const START: Duration = Duration::from_secs(30);

fn manifest() -> String {
    r#"apiVersion: v1
kind: Pod
metadata:
  name: sum
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: data
    emptyDir: {}
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "dd if=/dev/zero of=/data/f bs=1048576 count=2 && dd if=/dev/zero of=/layer bs=1048576 count=15 && echo written && sleep 3600"]
    resources:
      limits: {cpu: "1", memory: 256Mi}
    volumeMounts:
    - {name: data, mountPath: /data}
"#
    .to_string()
}

async fn start(bed: &Testbed) -> (Oxlet, String) {
    let mut ox = Oxlet::new(bed);
    ox.env
        .push(("OXLET_TEST_VOLUME_STATS_PERIOD_MS".into(), "200".into()));
    ox.spawn(&[]);
    write_manifest(&ox.manifests, "sum.yaml", &manifest());
    let pod = ox.wait_running("sum", START).await;
    let uid = uid(&pod);
    (ox, uid)
}

/// A request with any method; (status, head, body).
async fn request(ox: &Oxlet, method: &str, path: &str) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", ox.port))
        .await
        .unwrap();
    s.write_all(
        format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, head.to_lowercase(), body.to_string())
}

/// A GET with `Accept-Encoding: gzip`; (head, body bytes).
async fn get_gzip(ox: &Oxlet, path: &str) -> (String, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", ox.port))
        .await
        .unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.0\r\nHost: localhost\r\nAccept-Encoding: gzip\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let at = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    (
        String::from_utf8_lossy(&buf[..at]).to_lowercase(),
        buf[at + 4..].to_vec(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_debug_endpoints() {
    let bed = Testbed::start().await;
    let (ox, uid) = start(&bed).await;

    // kubelet serves /configz and /runningpods/ on the secure port alone
    // (tests/secure_port.rs reads them there); its read-only port answers the
    // debugging endpoints as switched off (its server has no configuration).
    assert_eq!(request(&ox, "GET", "/configz").await.0, 404);
    let (code, _, body) = request(&ox, "GET", "/runningpods/").await;
    assert_eq!(
        (code, body.as_str()),
        (405, "Debug endpoints are disabled.\n")
    );
    let _ = &uid;
    // GET-only endpoints answer other methods as kubelet does.
    for path in ["/pods", "/pods/"] {
        for method in ["POST", "PUT", "DELETE"] {
            let (code, head, body) = request(&ox, method, path).await;
            assert_eq!(code, 405, "{method} {path}");
            assert!(
                head.contains("\r\nallow: get\r\n"),
                "{method} {path}: {head}"
            );
            assert_eq!(body, "Method Not Allowed", "{method} {path}");
        }
    }

    // The Prometheus endpoints gzip on request.
    for path in [
        "/metrics",
        "/metrics/probes",
        "/metrics/resource",
        "/metrics/cadvisor",
    ] {
        let (head, body) = get_gzip(&ox, path).await;
        assert!(head.starts_with("http/1.0 200"), "{path}: {head}");
        assert!(
            head.contains("\r\ncontent-encoding: gzip"),
            "{path}: {head}"
        );
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut text)
            .unwrap_or_else(|e| panic!("{path}: not gzip: {e}"));
        assert!(text.contains("# TYPE "), "{path}: {text}");
    }

    // Removed from kubelet in 1.21.
    assert_eq!(request(&ox, "GET", "/spec").await.0, 404);
    assert_eq!(request(&ox, "GET", "/stats/container").await.0, 404);

    // The summary and the resource metrics agree on whether a reading exists.
    for method in ["GET", "POST"] {
        let (code, head, body) = request(&ox, method, "/stats/summary").await;
        let (_, _, metrics) = request(&ox, "GET", "/metrics/resource").await;
        match code {
            500 => {
                assert!(body.starts_with("Internal Error: "), "{body}");
                assert!(metrics.ends_with("resource_scrape_error 1\n"), "{metrics}");
            }
            200 => {
                assert!(head.contains("content-type: application/json"), "{head}");
                let s: summary::Summary = serde_json::from_str(&body).unwrap();
                assert_eq!(s.node.node_name, "testnode");
                assert!(metrics.contains("\nresource_scrape_error 0\n"), "{metrics}");
            }
            other => panic!("{method} /stats/summary: {other} {body}"),
        }
    }
}

/// Finds the directory named `name` below `root` (a container's cgroup).
fn find_dir(root: &Path, name: &str) -> Option<PathBuf> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            if e.file_type().ok()?.is_dir() {
                if e.file_name() == name {
                    return Some(e.path());
                }
                stack.push(e.path());
            }
        }
    }
    None
}

fn stat_field(stat: &str, key: &str) -> u64 {
    stat.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{key} not in memory.stat"))
}

/// kubelet's working set from the container cgroup's own files.
fn working_set_from_files(cgroup_root: &str, id: &str) -> u64 {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let read =
        |p: PathBuf| std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    if v2 {
        let dir = find_dir(
            &Path::new("/sys/fs/cgroup").join(cgroup_root.trim_start_matches('/')),
            id,
        )
        .unwrap();
        let usage: u64 = read(dir.join("memory.current")).trim().parse().unwrap();
        usage.saturating_sub(stat_field(&read(dir.join("memory.stat")), "inactive_file"))
    } else {
        let dir = find_dir(
            &Path::new("/sys/fs/cgroup/memory").join(cgroup_root.trim_start_matches('/')),
            id,
        )
        .unwrap();
        let usage: u64 = read(dir.join("memory.usage_in_bytes"))
            .trim()
            .parse()
            .unwrap();
        usage.saturating_sub(stat_field(
            &read(dir.join("memory.stat")),
            "total_inactive_file",
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_matches_the_cgroup_and_the_volume() {
    let bed = Testbed::start().await;
    let (ox, uid) = start(&bed).await;
    let id = cri_containers(&bed, &uid)
        .await
        .into_iter()
        .find(|c| c.state == RUNNING)
        .unwrap()
        .id;

    // Within one refresh of the volume stats (200 ms here) and one of the advisor's
    // storage collector (10 s: the writable layer) of the advisor's first round.
    let t = Instant::now();
    let (s, pod) = loop {
        let (code, _, body) = request(&ox, "GET", "/stats/summary").await;
        if code == 200 {
            let s: summary::Summary = serde_json::from_str(&body).unwrap();
            let pod = s.pods.iter().find(|p| p.pod_ref.uid == uid).cloned();
            let written = pod
                .as_ref()
                .and_then(|p| p.volume.iter().find(|v| v.name == "data")?.fs.used_bytes);
            let layer = pod.as_ref().and_then(|p| {
                let main = p.containers.as_ref()?.iter().find(|c| c.name == "main")?;
                main.rootfs.as_ref()?.used_bytes
            });
            if let (Some(pod), Some(w), Some(l)) = (pod, written, layer)
                && w >= 2 << 20
                && l >= 15 << 20
            {
                break (s, pod);
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no summary with the pod's 2 MiB volume and 15 MiB layer: {code} {body}\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(s.node.node_name, "testnode");
    // go-restful takes the first value of a repeated parameter.
    let (code, _, body) = request(
        &ox,
        "GET",
        "/stats/summary?only_cpu_and_memory=true&only_cpu_and_memory=false",
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let only: summary::Summary = serde_json::from_str(&body).unwrap();
    assert!(only.node.fs.is_none(), "{body}");
    assert!(
        only.pods.iter().all(|p| p.ephemeral_storage.is_none()),
        "{body}"
    );
    assert!(
        s.node
            .cpu
            .as_ref()
            .and_then(|c| c.usage_core_nano_seconds)
            .is_some()
    );
    assert!(
        s.node
            .memory
            .as_ref()
            .and_then(|m| m.working_set_bytes)
            .is_some_and(|w| w > 0)
    );
    assert_eq!(pod.pod_ref.name, "sum-testnode");
    let eph = pod
        .ephemeral_storage
        .as_ref()
        .and_then(|e| e.used_bytes)
        .unwrap_or(0);
    let main = pod
        .containers
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.name == "main")
        .unwrap();
    // The writable layer as rootfs, on the image filesystem's capacity.
    let rootfs = main.rootfs.as_ref().unwrap();
    let rootfs_used = rootfs.used_bytes.unwrap();
    assert!(rootfs_used >= 15 << 20, "rootfs {rootfs_used}");
    assert!(
        rootfs.capacity_bytes.unwrap_or(0) > rootfs_used,
        "{rootfs:?}"
    );
    let logs_used = main.logs.as_ref().and_then(|l| l.used_bytes).unwrap_or(0);
    // kubelet's calcEphemeralStorage: rootfs + logs + the emptyDir (+ pod logs, etc-hosts).
    assert!(
        eph >= rootfs_used + logs_used + (2 << 20),
        "ephemeral storage {eph} < rootfs {rootfs_used} + logs {logs_used} + emptyDir 2 MiB"
    );
    let reported = main
        .memory
        .as_ref()
        .and_then(|m| m.working_set_bytes)
        .unwrap();
    let from_files = working_set_from_files(&ox.cgroup_root, &id);
    let diff = reported.abs_diff(from_files);
    assert!(
        diff <= (1 << 20).max(from_files / 10),
        "working set {reported} vs cgroup files {from_files}"
    );

    // The host's network: the default-route interface inline (this host has one),
    // every non-ignored interface listed, loopback never.
    let net = s.node.network.as_ref().expect("node network");
    assert!(!net.interfaces.is_empty(), "{net:?}");
    assert!(net.interfaces.iter().all(|i| i.name != "lo"), "{net:?}");
    let route = std::fs::read_to_string("/proc/net/route").unwrap();
    let default_iface = route
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 7 && f[1] == "00000000" && f[7] == "00000000")
        .map(|f| f[0].to_string());
    if let Some(d) = default_iface {
        assert_eq!(net.default.name, d, "{net:?}");
        assert!(net.default.rx_bytes.is_some_and(|b| b > 0), "{net:?}");
    }
    // The pods cgroup was made by this oxlet, well after boot: its own time shows.
    let pods_sc = s
        .node
        .system_containers
        .iter()
        .find(|c| c.name == "pods")
        .expect("the pods system container");
    assert!(
        pods_sc.start_time.0 > s.node.start_time.0,
        "pods cgroup start {:?} is not after boot {:?}",
        pods_sc.start_time,
        s.node.start_time
    );

    let (code, head, metrics) = request(&ox, "GET", "/metrics/resource").await;
    assert_eq!(code, 200);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let labels = "{container=\"main\",namespace=\"default\",pod=\"sum-testnode\"}";
    for family in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
    ] {
        assert!(
            metrics.contains(&format!("\n{family}{labels} ")),
            "{family} missing:\n{metrics}"
        );
    }
    assert!(metrics.contains("\nresource_scrape_error 0\n"), "{metrics}");

    cadvisor_rows_match_the_cgroups(&ox, &uid, &id, from_files).await;

    // kubelet's log usage gauge: the container's log directory as the summary has it.
    let (code, _, metrics) = request(&ox, "GET", "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("# HELP kubelet_container_log_filesystem_used_bytes [ALPHA] Bytes used by the container's logs on the filesystem.\n"),
        "{metrics}"
    );
    let series = format!(
        "kubelet_container_log_filesystem_used_bytes{{container=\"main\",namespace=\"default\",pod=\"sum-testnode\",uid=\"{uid}\"}} "
    );
    let value: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .unwrap_or_else(|| panic!("{series} missing:\n{metrics}"))
        .parse()
        .unwrap();
    assert!(value > 0.0, "the container wrote a log line: {value}");
}

/// The value of the one `family` line whose labels contain every one of `has`.
fn sample(text: &str, family: &str, has: &[&str]) -> f64 {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && has.iter().all(|h| l.contains(h)))
        .collect();
    assert_eq!(lines.len(), 1, "{family} with {has:?}: {lines:?}\n{text}");
    lines[0].split(' ').nth(1).unwrap().parse().unwrap()
}

/// `/metrics/cadvisor` as Prometheus reads it: the container's row with kubelet's six
/// labels, its pod's row and the root's, values from the same cgroups.
async fn cadvisor_rows_match_the_cgroups(ox: &Oxlet, uid: &str, id: &str, working_set: u64) {
    let (code, head, text) = request(ox, "GET", "/metrics/cadvisor").await;
    assert_eq!(code, 200, "{text}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(text.contains("\ncontainer_scrape_error 0\n"), "{text}");
    let main = [
        "{container=\"main\",",
        "image=\"localhost/oxlet/busybox:1\"",
        ",namespace=\"default\",pod=\"sum-testnode\"}",
    ];
    let by_id = format!("name=\"{id}\"");
    let in_cgroup = format!("/{id}\",image=");
    let mut row: Vec<&str> = main.to_vec();
    row.extend([by_id.as_str(), in_cgroup.as_str()]);
    let ws = sample(&text, "container_memory_working_set_bytes", &row);
    assert!(
        (ws as u64).abs_diff(working_set) <= (1 << 20).max(working_set / 10),
        "working set {ws} vs cgroup files {working_set}"
    );
    let mut cpu_row = row.clone();
    cpu_row.push(",cpu=\"total\",");
    assert!(sample(&text, "container_cpu_usage_seconds_total", &cpu_row) > 0.0);
    assert_eq!(
        sample(&text, "container_spec_memory_limit_bytes", &row),
        268_435_456.0
    );
    // A CPU limit is a CFS quota: the periods the container ran in are counted.
    assert!(sample(&text, "container_cpu_cfs_periods_total", &row) >= 1.0);
    assert!(sample(&text, "container_start_time_seconds", &row) > 1.6e9);
    // The pod's own cgroup: no container, image or name.
    let pod_cgroup = format!("pod{}", uid.replace('-', "_"));
    let pod_cgroup_fs = format!("pod{uid}\",image=\"\"");
    let pod_row = [
        "{container=\"\",",
        ",namespace=\"default\",pod=\"sum-testnode\"}",
    ];
    let found = text.lines().any(|l| {
        l.starts_with("container_memory_usage_bytes{")
            && pod_row.iter().all(|h| l.contains(h))
            && (l.contains(&pod_cgroup_fs) || l.contains(&format!("{pod_cgroup}.slice\"")))
    });
    assert!(found, "no row for the pod cgroup of {uid}:\n{text}");
    let root = ["{container=\"\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}"];
    assert!(sample(&text, "container_memory_working_set_bytes", &root) > 0.0);
}

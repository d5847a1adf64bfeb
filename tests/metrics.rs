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
            // The series ends at the last `}` (or the first space); then the value and
            // an optional timestamp.
            let (series, rest) = match l.rfind('}') {
                Some(i) => (&l[..=i], &l[i + 1..]),
                None => l
                    .split_once(' ')
                    .unwrap_or_else(|| panic!("bad line {l:?}")),
            };
            let value = rest
                .split_whitespace()
                .next()
                .unwrap_or_else(|| panic!("no value in {l:?}"));
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
        "# HELP a x\n# TYPE a counter\na{b=\"q\\\"r\",c=\"\"} 3\nd 1.5e+06\ne_bucket{le=\"+Inf\"} 2\nf{g=\"a b}\"} 7 1700000000000\n",
    );
    assert_eq!(s.len(), 4);
    assert_eq!(
        (s[3].labels["g"].as_str(), s[3].value),
        ("a b}", 7.0),
        "a timestamp is no value"
    );
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

/// The cAdvisor families a scrape reads for itself, on a pod that writes a file with
/// fsync, holds five extra descriptors open and pings its gateway.
const BUSY_POD: &str = r"apiVersion: v1
kind: Pod
metadata:
  name: busy
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    resources:
      limits:
        cpu: 500m
        memory: 64Mi
    command:
    - sh
    - -c
    - |
      exec 3</etc/hostname 4</etc/hostname 5</etc/hostname 6</etc/hostname 7</etc/hostname
      dd if=/dev/urandom of=/tmp/blob bs=64k count=32 conv=fsync 2>/dev/null
      ping -c 3 -W 1 $(ip route | awk '/default/ {print $3}') >/dev/null 2>&1
      touch /tmp/done
      exec sleep 3600
";

fn cgroup_v2() -> bool {
    std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// The kernel file `name` of the cgroup `id` (a row's `id` label) in `controller`.
fn kernel_file(controller: &str, id: &str, name: &str) -> String {
    let dir = if cgroup_v2() {
        format!("/sys/fs/cgroup{id}")
    } else {
        format!("/sys/fs/cgroup/{controller}{id}")
    };
    std::fs::read_to_string(format!("{dir}/{name}")).unwrap_or_default()
}

/// The block device holding `path`, as `(major, minor)`.
fn device_of(path: &std::path::Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(path).unwrap().dev();
    (
        u64::from(rustix::fs::major(dev)),
        u64::from(rustix::fs::minor(dev)),
    )
}

/// Since Linux 6.9 a v1 blkio cgroup counts I/O only on a queue whose throttling was
/// set up (by any limit); a host that uses blkio limits has it, this test sets a
/// limit of 1 TiB/s on a scratch cgroup so the kernel counts, then removes it.
fn let_v1_blkio_count(dev: (u64, u64)) {
    if cgroup_v2() {
        return;
    }
    let dir = format!("/sys/fs/cgroup/blkio/oxlet-metrics-{}", std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    let rule = |limit: u64| {
        std::fs::write(
            format!("{dir}/blkio.throttle.write_bps_device"),
            format!("{}:{} {limit}", dev.0, dev.1),
        )
    };
    rule(1 << 40).unwrap();
    rule(0).unwrap();
    std::fs::remove_dir(&dir).unwrap();
}

/// Bytes written to `dev` by the cgroup `id`, from the kernel's own file.
fn kernel_written(id: &str, dev: (u64, u64)) -> u64 {
    let key = format!("{}:{}", dev.0, dev.1);
    if cgroup_v2() {
        let stat = kernel_file("io", id, "io.stat");
        let line = stat.lines().find(|l| l.starts_with(&format!("{key} ")));
        return line
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix("wbytes="))
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
    }
    let stat = kernel_file("blkio", id, "blkio.throttle.io_service_bytes_recursive");
    stat.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} Write ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The soft `Max open files` limit of process `pid`, from `/proc`.
fn soft_open_files(pid: u32) -> f64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// The descriptors of the cgroup's own processes, counted in `/proc`.
fn kernel_fds(id: &str) -> (u64, u64) {
    let procs = kernel_file("cpu", id, "cgroup.procs");
    let pids: Vec<&str> = procs.lines().collect();
    let fds = pids
        .iter()
        .filter_map(|p| std::fs::read_dir(format!("/proc/{p}/fd")).ok())
        .map(|d| d.count() as u64)
        .sum();
    (pids.len() as u64, fds)
}

/// Scrapes `path` every half second until `done` holds for its samples (30 s at most).
async fn scrape_until(
    ox: &Oxlet,
    path: &str,
    what: &str,
    done: impl Fn(&[Sample]) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match ox.get(path).await {
            Some((200, text)) if done(&parse(&text)) => return text,
            _ if Instant::now() >= deadline => {
                panic!("{what} never showed:\n{}", tail(&ox.log(), 30))
            }
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cadvisor_io_network_process_spec_and_machine_families_match_the_kernel() {
    let bed = Testbed::start().await;
    let dev = device_of(bed.base_dir());
    let_v1_blkio_count(dev);
    let ox = Oxlet::start(&bed, &[]);
    write_manifest(&ox.manifests, "busy.yaml", BUSY_POD);
    ox.wait_running("busy", Duration::from_secs(30)).await;
    let row = [("container", "main"), ("namespace", "default")];
    // Poll until the pod's work is done and seen: writes, and the pings' packets.
    let text = scrape_until(
        &ox,
        "/metrics/cadvisor",
        "the pod's writes and pings",
        |samples| {
            let wrote = value(samples, "container_fs_writes_bytes_total", &row)
                .is_some_and(|v| v >= f64::from(2 << 20));
            let pinged = samples.iter().any(|s| {
                s.name == "container_network_receive_packets_total"
                    && s.labels["container"].is_empty()
                    && s.labels["pod"].starts_with("busy")
                    && s.value >= 1.0
            });
            wrote && pinged
        },
    )
    .await;
    let samples = parse(&text);
    let app = samples
        .iter()
        .find(|s| s.name == "container_processes" && s.labels["container"] == "main")
        .unwrap_or_else(|| panic!("no container_processes for main:\n{text}"));
    let id = app.labels["id"].clone();
    block_io_matches(&samples, &id, dev);
    processes_and_spec_match(&samples, &id);
    network_and_machine_match(&samples, &text);
}

fn block_io_matches(samples: &[Sample], id: &str, dev: (u64, u64)) {
    let row = [("id", id)];
    let written = value(samples, "container_fs_writes_bytes_total", &row).unwrap();
    // Counters only grow: what was served is at most what the kernel says now.
    let kernel = kernel_written(id, dev) as f64;
    assert!(
        written >= f64::from(2 << 20) && written <= kernel,
        "{written} vs {kernel}"
    );
    let (major, minor) = (dev.0.to_string(), dev.1.to_string());
    let usage = [
        ("id", id),
        ("major", major.as_str()),
        ("minor", minor.as_str()),
        ("operation", "Write"),
    ];
    assert_eq!(
        value(samples, "container_blkio_device_usage_total", &usage),
        Some(written)
    );
    assert!(value(samples, "container_fs_writes_total", &row).is_some_and(|v| v >= 1.0));
    assert!(value(samples, "container_fs_reads_bytes_total", &row).is_some());
}

fn processes_and_spec_match(samples: &[Sample], id: &str) {
    let row = [("id", id)];
    let (procs, fds) = kernel_fds(id);
    // sh and sleep, each with stdin, stdout, stderr and the five extra descriptors.
    assert_eq!(
        value(samples, "container_processes", &row),
        Some(procs as f64)
    );
    let served = value(samples, "container_file_descriptors", &row).unwrap();
    assert!(served >= 8.0 && served == fds as f64, "{served} vs {fds}");
    assert!(value(samples, "container_sockets", &row).is_some());
    let threads = kernel_file("pids", id, "pids.current");
    assert_eq!(
        value(samples, "container_threads", &row),
        Some(threads.trim().parse::<f64>().unwrap())
    );
    assert!(value(samples, "container_threads_max", &row).is_some());
    // The container's init (its lowest pid here) and its soft open-files limit.
    let init = kernel_file("cpu", id, "cgroup.procs")
        .lines()
        .filter_map(|p| p.parse::<u32>().ok())
        .min()
        .unwrap();
    let soft = soft_open_files(init);
    let ulimit = [("id", id), ("ulimit", "max_open_files")];
    assert_eq!(
        value(samples, "container_ulimits_soft", &ulimit),
        Some(soft)
    );
    assert_eq!(
        value(samples, "container_spec_cpu_quota", &row),
        Some(50_000.0)
    );
    assert_eq!(
        value(samples, "container_spec_cpu_period", &row),
        Some(100_000.0)
    );
    let shares = if cgroup_v2() {
        let w: u64 = kernel_file("cpu", id, "cpu.weight").trim().parse().unwrap();
        2 + (w - 1) * 262_142 / 9999
    } else {
        kernel_file("cpu", id, "cpu.shares").trim().parse().unwrap()
    };
    assert_eq!(
        value(samples, "container_spec_cpu_shares", &row),
        Some(shares as f64)
    );
    let faults = [
        ("id", id),
        ("failure_type", "pgfault"),
        ("scope", "container"),
    ];
    assert!(value(samples, "container_memory_failures_total", &faults).is_some_and(|v| v > 0.0));
    assert_eq!(
        value(samples, "container_cpu_load_average_10s", &row),
        Some(0.0)
    );
}

fn network_and_machine_match(samples: &[Sample], text: &str) {
    let pod_eth0 = |name: &str| {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels["container"].is_empty()
                    && s.labels["pod"].starts_with("busy")
                    && s.labels["interface"] == "eth0"
            })
            .map(|s| s.value)
            .unwrap_or_else(|| panic!("no {name} for the pod's eth0:\n{text}"))
    };
    assert!(pod_eth0("container_network_transmit_bytes_total") > 0.0);
    assert!(pod_eth0("container_network_receive_bytes_total") > 0.0);
    assert!(pod_eth0("container_network_transmit_packets_total") >= 1.0);
    assert!(pod_eth0("container_network_receive_errors_total") >= 0.0);
    assert!(
        !samples
            .iter()
            .any(|s| s.name.starts_with("container_network_") && s.labels["container"] == "main"),
        "a container shares its pod's network namespace: no rows of its own"
    );
    // The root's row has the host's interfaces.
    assert!(
        samples
            .iter()
            .any(|s| s.name == "container_network_receive_bytes_total" && s.labels["id"] == "/")
    );
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let ids = [("boot_id", boot_id.trim())];
    assert_eq!(
        value(samples, "machine_memory_bytes", &ids),
        Some(meminfo("MemTotal:") as f64)
    );
    let online = std::fs::read_dir("/sys/devices/system/cpu")
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix("cpu")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                && std::fs::read_to_string(e.path().join("online"))
                    .map_or(true, |o| o.trim() == "1")
        })
        .count();
    assert_eq!(
        value(samples, "machine_cpu_cores", &ids),
        Some(online as f64)
    );
    assert!(value(samples, "machine_cpu_sockets", &ids).is_some_and(|v| v >= 1.0));
    assert_eq!(value(samples, "machine_scrape_error", &[]), Some(0.0));
}

/// kubelet's own registry: the process collector's families from `/proc`, the build
/// info, and the node families that exist from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_build_info_and_node_families_on_metrics() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    ox.wait_up(Duration::from_secs(30)).await;
    let (code, text) = ox.get("/metrics").await.unwrap();
    assert_eq!(code, 200);
    let samples = parse(&text);
    let pid = ox.pid();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as f64;
    let open = value(&samples, "process_open_fds", &[]).unwrap();
    // Connections come and go while the agent runs: close, not equal.
    assert!(open >= 3.0 && (open - fds).abs() <= 32.0, "{open} vs {fds}");
    let soft = soft_open_files(pid);
    assert_eq!(value(&samples, "process_max_fds", &[]), Some(soft));
    let vsize = value(&samples, "process_virtual_memory_bytes", &[]).unwrap();
    assert!(vsize > value(&samples, "process_resident_memory_bytes", &[]).unwrap());
    assert!(value(&samples, "process_virtual_memory_max_bytes", &[]).is_some());
    assert!(value(&samples, "process_network_receive_bytes_total", &[]).is_some());
    let build = [
        ("major", "1"),
        ("minor", "36"),
        ("gitVersion", "v1.36.0"),
        ("compiler", "rustc"),
        ("platform", "linux/amd64"),
    ];
    assert_eq!(value(&samples, "kubernetes_build_info", &build), Some(1.0));
    assert_eq!(
        value(&samples, "kubelet_managed_ephemeral_containers", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &samples,
            "kubelet_graceful_shutdown_start_time_seconds",
            &[]
        ),
        Some(0.0),
        "no shutdown recorded yet"
    );
}

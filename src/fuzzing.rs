//! The fuzz targets' entry points (`fuzz/`, `docs/reliability.md`): each takes
//! arbitrary bytes, hands them to one of oxlet's parsers the way production does, and
//! asserts what must hold beyond "no panic" where that is cheap. Not an API: the fuzz
//! crate alone calls it. The top floor, so it may use any room, through its face.
//!
//! An input that stands for several files holds them separated by NUL bytes
//! (`parts`); the seeds under `fuzz/seeds/` are made that way.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cm::{CgroupFs as _, CgroupTree, CgroupVersion, QosFile, StatReader};

/// The node every input is decoded for.
const NODE: &str = "fuzz-node";

/// `data` split at NUL bytes into exactly `n` parts (the last keeps any further NULs;
/// missing ones are empty): one input carries several files.
fn parts(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = data.splitn(n, |b| *b == 0).collect();
    out.resize(n, &[]);
    out
}

/// This process's scratch directory under `$TMPDIR` (the fuzz script gives each run
/// its own and removes it): the parsers that read files read them from here.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("oxlet-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the scratch directory can be made");
        dir
    })
}

/// `bytes` written to `name` in the scratch directory.
fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, bytes).expect("the scratch directory is writable");
    path
}

/// One current-thread runtime for the async parsers (the kubeconfig reader).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime can be built")
    })
}

/// A static pod manifest as the file source and the manifest URL decode it: decode,
/// API defaults, validation, identity. A file pod decodes the same twice (its UID
/// must survive a restart), carries its UID as the config hash and `<name>-<node>`,
/// and the same body from a URL is valid too.
pub fn manifest(data: &[u8]) {
    let path = Path::new("/etc/kubernetes/manifests/fuzz.yaml");
    let file = crate::config::decode_static_pod(data, path, NODE);
    let url = crate::config::decode_url_pods(data, "https://user:secret@example.com/pods", NODE);
    let Ok(pod) = file else { return };
    let again = crate::config::decode_static_pod(data, path, NODE);
    assert_eq!(again.as_ref().ok(), Some(&pod), "a second decode differs");
    let meta = &pod.metadata;
    let uid = meta.uid.as_deref().unwrap_or_default();
    assert!(!uid.is_empty(), "a decoded static pod has no UID");
    let hash = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.hash"));
    assert_eq!(hash.map(String::as_str), Some(uid));
    let name = meta.name.as_deref().unwrap_or_default();
    assert!(name.ends_with(&format!("-{NODE}")), "name {name:?}");
    match url {
        Ok(pods) => assert_eq!(
            pods.len(),
            1,
            "one pod from a file, {} from a URL",
            pods.len()
        ),
        Err(e) => panic!("valid as a file, refused from a URL: {e}"),
    }
}

/// Resource quantities: a value that parses prints (Go's canonical form, BinarySI,
/// millicores) and parses back to itself, and bytes are millicores rounded up.
pub fn quantity(data: &[u8]) {
    use crate::quantity::{binary_si, bytes, canonical, milli_cpu};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let q = |s: String| Quantity(s);
    let milli = milli_cpu(&q(text.to_string()));
    if let Ok(m) = milli {
        assert_eq!(milli_cpu(&q(format!("{m}m"))), Ok(m), "{text:?}");
    }
    let Ok(b) = bytes(&q(text.to_string())) else {
        return;
    };
    for printed in [canonical(b, true), canonical(b, false), binary_si(b)] {
        assert_eq!(
            bytes(&q(printed.clone())),
            Ok(b),
            "{text:?} printed {printed:?}"
        );
    }
    if let Ok(m) = milli {
        // ceil(ceil(1000 x) / 1000) = ceil(x); `/` truncates, which is ceil below zero.
        let up = m / 1000 + i64::from(m % 1000 > 0);
        assert_eq!(b, up, "{text:?}: {m} millicores");
    }
}

/// Go durations: one that parses prints as Go prints it and parses back to itself.
pub fn duration(data: &[u8]) {
    use crate::duration::{format_go_duration, parse_go_duration};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(d) = parse_go_duration(text) else {
        return;
    };
    let printed = d.to_string();
    assert_eq!(
        parse_go_duration(&printed),
        Ok(d),
        "{text:?} printed {printed:?}"
    );
    if let Some(std) = d.to_std() {
        assert_eq!(format_go_duration(std), printed);
    }
}

/// A `KubeletConfiguration` file through `--config`: decoded, merged with the
/// defaults, every setting parsed and checked, and `/configz` made from the result.
pub fn kubelet_config(data: &[u8]) {
    let path = scratch_file("config.yaml", data);
    let args = [
        "oxlet".as_ref(),
        "--config".as_ref(),
        path.as_os_str(),
        "--hostname-override".as_ref(),
        NODE.as_ref(),
    ];
    if let Ok(o) = crate::options::load(args) {
        let _ = crate::options::kubelet_configuration(&o, "unix:///run/containerd/containerd.sock");
    }
}

/// A `--kubeconfig` file: client-go's checks, then kube-rs's config.
pub fn kubeconfig(data: &[u8]) {
    let path = scratch_file("kubelet.conf", data);
    let _ = runtime().block_on(crate::kubeclient::load_kubeconfig(&path));
}

/// A NodeSLO: `--node-slo-file`'s spec (thresholds, resource QoS, strategies) and the
/// host applications with their cgroup paths, which stay plain relative paths.
pub fn node_slo(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = crate::koordapi::parse_qos_config(Path::new("/etc/oxlet/node-slo.yaml"), text);
    let Ok(doc) = crate::yaml::single(text, &crate::yaml::CONFIG_LIMITS) else {
        return;
    };
    let list = doc
        .get("hostApplications")
        .and_then(serde_json::Value::as_array);
    let (apps, _) = crate::koordapi::parse_host_apps(list.map(Vec::as_slice));
    let bases = crate::koordapi::QosPaths {
        kubepods: Some("kubepods".into()),
        burstable: Some("kubepods/burstable".into()),
        best_effort: Some("kubepods/besteffort".into()),
    };
    for app in &apps {
        if let Some(path) = app.cgroup_path(&bases) {
            let bad = path.split('/').any(|p| p == ".." || p == ".");
            assert!(!bad && !path.starts_with('/'), "{path:?}");
        }
    }
}

/// A container's CRI log file read back as `kubectl logs` shows it. The first byte
/// picks the options (its bits: tail, since, limit, timestamps), the next three give
/// their values, the rest is the file. The output stays within `limitBytes` and has
/// no more lines than `tailLines`.
pub fn container_log(data: &[u8]) {
    let (head, log) = data.split_at(data.len().min(4));
    let byte = |i: usize| head.get(i).copied().unwrap_or(0);
    let flags = byte(0);
    let opts = crate::logs::LogOptions {
        tail: (flags & 1 != 0).then(|| u64::from(byte(1) % 16)),
        // 2026-01-01T00:00:00Z plus up to 255 s.
        since_nanos: (flags & 2 != 0)
            .then(|| (1_767_225_600 + i128::from(byte(2))) * 1_000_000_000),
        limit_bytes: (flags & 4 != 0).then(|| u64::from(byte(3)) + 1),
        timestamps: flags & 8 != 0,
        follow: false,
    };
    let path = scratch_file("0.log", log);
    let root = path.parent().expect("a scratch file is in a directory");
    let mut reader = crate::logs::LogReader::open(root, &path, opts.clone(), None)
        .expect("the log file is readable");
    let mut out = Vec::new();
    // Not followed: the reader never waits, so the first poll of each piece is its answer.
    while let Some(chunk) = futures::executor::block_on(reader.next()) {
        out.extend_from_slice(&chunk);
    }
    if let Some(limit) = opts.limit_bytes {
        assert!(
            out.len() as u64 <= limit,
            "{} bytes over limitBytes {limit}",
            out.len()
        );
    }
    if let Some(n) = opts.tail {
        let lines = out.iter().filter(|b| **b == b'\n').count() as u64;
        assert!(lines <= n, "{lines} lines for tailLines {n}");
    }
}

/// An issued certificate: the CSR object's status as the apiserver returns it (when
/// the input is one), then the PEM as the bootstrap, the rotations and the secure
/// port's x509 authenticator read it.
pub fn certificate(data: &[u8]) {
    let issued = serde_json::from_slice(data).ok().and_then(|csr| {
        crate::kubeclient::issued_certificate("fuzz", &csr)
            .ok()
            .flatten()
    });
    let pem = issued.as_deref().unwrap_or(data);
    if let Some(info) = crate::kubeclient::cert_info(pem) {
        let at = crate::kubeclient::rotation_deadline(&info, 0.5);
        let end = info.not_after.max(info.not_before);
        assert!(
            info.not_before <= at && at <= end,
            "deadline {at} outside the validity"
        );
    }
    let _ = crate::kubeclient::Template::client(NODE).satisfied_by(pem);
    let addresses = [k8s_openapi::api::core::v1::NodeAddress {
        address: "10.0.0.1".into(),
        type_: "InternalIP".into(),
    }];
    if let Some(t) = crate::kubeclient::Template::serving(NODE, &addresses) {
        let _ = t.satisfied_by(pem);
    }
    for block in crate::kubeclient::certificate_blocks(pem) {
        let der = tokio_rustls::rustls::pki_types::CertificateDer::from(block.contents);
        let _ = crate::server::user_of(Some(&[der]));
    }
}

/// A test cgroup tree of each layout, made once: `pod` below every hierarchy.
fn cgroup_trees() -> &'static [(CgroupTree, PathBuf, Vec<&'static str>); 2] {
    static TREES: OnceLock<[(CgroupTree, PathBuf, Vec<&'static str>); 2]> = OnceLock::new();
    TREES.get_or_init(|| {
        let make = |name: &str, version, dirs: Vec<&'static str>| {
            let root = scratch().join(name);
            for d in &dirs {
                std::fs::create_dir_all(root.join(d).join("pod")).expect("scratch tree");
            }
            let tree = CgroupTree::new(&root, version).expect("a test tree");
            (tree, root, dirs)
        };
        [
            make(
                "v1",
                CgroupVersion::V1,
                vec!["cpu,cpuacct", "memory", "pids", "cpuset"],
            ),
            make("v2", CgroupVersion::V2, vec![""]),
        ]
    })
}

/// The files of one cgroup, in the order of an input's parts: (v1 hierarchy, v1 name,
/// v2 name).
const CGROUP_FILES: [(&str, &str, &str); 12] = [
    ("cpu,cpuacct", "cpu.stat", "cpu.stat"),
    ("memory", "memory.usage_in_bytes", "memory.current"),
    ("memory", "memory.stat", "memory.stat"),
    ("memory", "memory.limit_in_bytes", "memory.max"),
    ("pids", "pids.current", "pids.current"),
    ("cpu,cpuacct", "cpuacct.usage", "cpu.pressure"),
    ("cpu,cpuacct", "cpu.pressure", "memory.pressure"),
    ("cpu,cpuacct", "cpu.cfs_quota_us", "cpu.max"),
    ("cpu,cpuacct", "cpu.shares", "cpu.weight"),
    ("cpu,cpuacct", "cpu.cfs_period_us", "io.pressure"),
    ("pids", "pids.max", "pids.max"),
    ("cpuset", "cpuset.cpus", "cpuset.cpus.effective"),
];

/// The cgroup file parsers: CPU lists (printed and parsed back to themselves) and
/// pressure files on the whole input, then its parts as one cgroup's files on a test
/// tree of each layout, read by the advisor's stat reader, the pressure reader, the
/// limits read-back and the QoS file reader.
pub fn cgroup(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(ids) = crate::cm::parse_cpu_list(&text) {
        let printed = crate::cm::format_cpu_list(&ids);
        assert_eq!(
            crate::cm::parse_cpu_list(&printed).as_ref(),
            Ok(&ids),
            "{printed:?}"
        );
    }
    let _ = crate::cm::parse_psi(&text);
    let files = parts(data, CGROUP_FILES.len());
    for (i, (tree, root, _)) in cgroup_trees().iter().enumerate() {
        let v1 = i == 0;
        for ((dir, v1_name, v2_name), bytes) in CGROUP_FILES.iter().zip(&files) {
            let path = match v1 {
                true => root.join(dir).join("pod").join(v1_name),
                false => root.join("pod").join(v2_name),
            };
            std::fs::write(path, bytes).expect("scratch tree");
        }
        let _ = StatReader::with_limit(tree.clone(), 0).stats("pod", true);
        let mut kept = StatReader::with_limit(tree.clone(), 1024);
        for _ in 0..2 {
            let _ = kept.stats("pod", true);
            kept.end_round();
        }
        let _ = tree.pressure("pod");
        let _ = tree.resources("pod");
        for file in [
            QosFile::CpusetCpus,
            QosFile::MemoryMin,
            QosFile::MemoryLow,
            QosFile::MemoryHigh,
        ] {
            let _ = tree.read_qos_file("pod", file);
        }
    }
}

/// The procfs parsers, each on the whole input: `/proc/stat`, `/proc/meminfo`,
/// `/proc/loadavg`, `/proc/net/{dev,route}`, `/proc/self/{stat,status,mountinfo}`, and
/// the node facts' files.
pub fn procfs(data: &[u8]) {
    use crate::advisor::{memory_from_meminfo, parse_default_route, parse_net_dev};
    use crate::procfs::{
        parse_boot_time, parse_cpu_jiffies, parse_loadavg_tasks, parse_meminfo, parse_mountinfo,
    };
    let text = String::from_utf8_lossy(data);
    let _ = parse_cpu_jiffies(&text);
    let _ = parse_boot_time(&text);
    if let Some(m) = parse_meminfo(&text) {
        let r = memory_from_meminfo(&m);
        assert!(r.working_set_bytes <= r.usage_bytes);
        assert!(m.used().is_none_or(|u| u <= m.total));
    }
    let _ = parse_loadavg_tasks(&text);
    let _ = parse_default_route(&text);
    assert!(parse_net_dev(&text).len() <= 64);
    let _ = crate::metrics::parse_process_stat(&text, &text, 100.0, 4096.0);
    let _ = parse_mountinfo(data);
    let _ = crate::node::cpus_allowed(&text);
    let _ = crate::node::cpu_list_len(&text);
    let _ = crate::node::os_pretty_name(&text);
    let _ = crate::node::first_inet(&text);
}

/// Both API ports' routers over an empty node (no pods, no readings), made once: the
/// read-only port's as served, and the secure port's with anonymous requests allowed
/// (`authentication.anonymous.enabled`, `authorization.mode: AlwaysAllow`), so each
/// request reaches its handler. The runtime client is never dialled: with no pod, the
/// handlers that would call it refuse first. `/logs/` serves a scratch directory.
fn routers() -> &'static [axum::Router; 2] {
    use std::sync::Arc;
    static ROUTERS: OnceLock<[axum::Router; 2]> = OnceLock::new();
    ROUTERS.get_or_init(|| {
        let _rt = runtime().enter();
        let pods = Arc::new(crate::pod::PodManager::default());
        let pod_cache = Arc::new(crate::pleg::PodCache::default());
        let cache = Arc::new(crate::metriccache::MetricCache::new(
            crate::metriccache::CacheLimits::DEFAULT,
        ));
        let no_prediction: crate::koord::PredictionView = Arc::new(|_| None);
        let health = crate::server::Health {
            syncloop: Arc::new(crate::syncloop::SyncLoopMonitor::default()),
            stall_threshold: std::time::Duration::from_secs(300),
        };
        let views = crate::server::Views {
            pods: pods.clone(),
            statuses: Arc::new(crate::status::StatusManager::default()),
            health,
            cache: cache.clone(),
            readings: Arc::new(crate::contracts::LatestReadings::default()),
            pod_cache: pod_cache.clone(),
            volumes: Arc::new(crate::stats::VolumeUsage::default()),
            configz: Arc::new(serde_json::json!({"kubeletconfig": {}})),
            prediction: None,
            eviction: Arc::new(crate::eviction::StatusView::default()),
            node_metric: Arc::new(crate::koord::NodeMetricSource::new(
                cache,
                pods.clone(),
                tokio::sync::watch::channel(Vec::new()).1,
                no_prediction,
                None,
            )),
            cgroups: Arc::new(crate::stats::ExtrasCache::new(None)),
            machine: Arc::new(crate::stats::MachineReader::new(scratch())),
        };
        let logs = scratch().join("logs");
        std::fs::create_dir_all(logs.join("pods")).expect("scratch logs");
        std::fs::write(logs.join("syslog"), "a line\n").expect("scratch logs");
        let cri = crate::cri::RemoteRuntime::lazy("unix:///nonexistent/fuzz.sock", SECOND)
            .expect("a fixed endpoint");
        let cri: Arc<dyn crate::cri::Cri> = Arc::new(cri);
        let auth = crate::server::Auth::new(NODE, &anonymous_serving(), None, None)
            .expect("no webhook, no apiserver needed");
        let secure = crate::server::Secure {
            views: views.clone(),
            streaming: crate::server::Streaming {
                pods: pods.clone(),
                pod_cache: pod_cache.clone(),
                cri: cri.clone(),
                idle_timeout: SECOND,
                run_timeout: SECOND,
                slots: crate::server::stream_slots(crate::server::MAX_STREAMS),
            },
            logs: crate::server::ContainerLogs {
                pods: pods.clone(),
                pod_cache: pod_cache.clone(),
                pod_logs_dir: logs.join("pods"),
                follows: crate::server::Follows::new(4, SECOND),
            },
            node_logs: crate::server::NodeLogs {
                dir: logs,
                query: None,
            },
            checkpoints: crate::server::Checkpoints {
                pods,
                pod_cache,
                cri,
                dir: scratch().join("checkpoints"),
            },
            zpages: Arc::new(crate::server::Zpages::new(
                std::time::SystemTime::now(),
                vec![("v".into(), "0".into())],
            )),
            auth: Arc::new(auth),
            handlers: crate::options::DebugHandlers::default(),
        };
        [
            crate::server::read_only_router(views),
            crate::server::secure_router(secure),
        ]
    })
}

const SECOND: std::time::Duration = std::time::Duration::from_secs(1);

/// The secure port's settings with anonymous requests allowed and no webhook.
fn anonymous_serving() -> crate::options::Serving {
    crate::options::Serving {
        enable: true,
        anonymous: true,
        authorization_mode: crate::options::AuthorizationMode::AlwaysAllow,
        ..crate::options::Serving::blank()
    }
}

/// Bytes sent on one connection to either API port (the first byte picks it: even
/// the read-only port, odd the secure one), served as the real servers serve a
/// connection: hyper's HTTP/1 request heads, the routes, the query strings and paths
/// each handler reads. The connection must end within its timeouts.
pub fn http_request(data: &[u8]) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Some((&port, bytes)) = data.split_first() else {
        return;
    };
    let router = routers()[usize::from(port & 1)].clone();
    runtime().block_on(async {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(crate::server::serve_io(router, server));
        let exchange = async {
            // The server may answer and close before it has read everything.
            let _ = client.write_all(bytes).await;
            let _ = client.shutdown().await;
            let mut answer = Vec::new();
            let _ = client.read_to_end(&mut answer).await;
        };
        tokio::time::timeout(std::time::Duration::from_secs(8), exchange)
            .await
            .expect("the connection ends within the header-read timeout");
        drop(client);
        let _ = serving.await;
    });
}

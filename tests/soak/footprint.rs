//! What a node agent can leak, counted from outside and from oxlet's census: the
//! process (descriptors, threads, tasks, memory), the node (cgroups, pod dirs, mounts,
//! IP allocations, log dirs and links) and the runtime (sandboxes, containers,
//! snapshots), and every per-pod map oxlet keeps (`/debug/census`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;

use crate::agent::Oxlet;
use crate::common::Testbed;

/// One reading of everything, by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Footprint(pub(crate) BTreeMap<String, u64>);

/// Kept by design for a while after a pod leaves, each with its bound: judged only
/// after a settle longer than the longest bound (the full run's).
pub(crate) const TIME_BOUNDED: &[(&str, &str)] = &[
    (
        "census: metric cache series",
        "a series leaves memory with the head's window (at most 11 min), as koordlet's TSDB head",
    ),
    (
        "census: prediction models",
        "a model unseen for 30 min expires (koordlet's modelExpiration)",
    ),
    (
        "census: timeline: lives",
        "a gone pod's story is kept 10 min, at most 256 of them",
    ),
    (
        "census: timeline: pod names",
        "a gone pod's story is kept 10 min, at most 256 of them",
    ),
];

/// The figures read but not judged. A leak shows in the heap ("RSS anon KiB"),
/// which is. The rest of RSS is the binary's own pages, read in from its file
/// as code paths first run (a crash loop, a volume, a deletion) and clean, so the
/// kernel drops them under pressure; it is bounded by the binary's size.
pub(crate) const NOT_JUDGED: &[(&str, &str)] = &[
    (
        "RSS KiB",
        "the heap (judged) plus the binary's pages (not a leak)",
    ),
    (
        "RSS file KiB",
        "the binary's pages, read in as code paths first run",
    ),
    (
        "census: event correlator: other objects",
        "the Node's events (image GC on a full disk), not the pods'; client-go's LRU of 4096 bounds them",
    ),
];

/// Where a test bed's runtime and a test's oxlet keep what is counted.
pub(crate) struct Places<'a> {
    pub(crate) ox: &'a Oxlet,
    /// The runtime's CRI socket.
    pub(crate) socket: &'a Path,
    /// host-local's data dir (one subdir per network).
    pub(crate) ipam: &'a Path,
    /// The runtime's `ctr` and its gRPC socket, for snapshots.
    pub(crate) ctr: PathBuf,
}

impl<'a> Places<'a> {
    /// `ox` on the test bed's runtime.
    pub(crate) fn of_bed(ox: &'a Oxlet, bed: &'a Testbed) -> Places<'a> {
        Places {
            ox,
            socket: bed.socket(),
            ipam: &bed.layout().cni_data_dir,
            ctr: bed.ctr(),
        }
    }
}

impl Footprint {
    pub(crate) async fn take(at: &Places<'_>) -> Footprint {
        let mut f = BTreeMap::new();
        let pid = at.ox.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        f.insert(
            "open fds".into(),
            count_entries(Path::new(&format!("/proc/{pid}/fd"))),
        );
        f.insert("threads".into(), status_field(&status, "Threads:"));
        f.insert("RSS KiB".into(), rss_kib_in(&status));
        f.insert("RSS anon KiB".into(), status_field(&status, "RssAnon:"));
        f.insert("RSS file KiB".into(), status_field(&status, "RssFile:"));
        if let Some(v) = census(at.ox).await {
            f.insert("tokio tasks".into(), v["tokioTasks"].as_u64().unwrap_or(0));
            for (name, n) in v["counts"].as_object().into_iter().flatten() {
                f.insert(format!("census: {name}"), n.as_u64().unwrap_or(0));
            }
        }
        f.insert("pod cgroups (memory)".into(), cgroups(at.ox));
        f.insert("pod dirs".into(), count_entries(&at.ox.root.join("pods")));
        f.insert(
            "mounts below the root dir".into(),
            mounts_below(&at.ox.root),
        );
        f.insert(
            "IPAM allocations".into(),
            reserved_ips(at.ipam).len() as u64,
        );
        f.insert("pod log dirs".into(), count_entries(&at.ox.logs));
        f.insert("log symlinks".into(), count_entries(&at.ox.links));
        let (sandboxes, containers) = runtime_objects(at.socket).await;
        f.insert("runtime sandboxes".into(), sandboxes);
        f.insert("runtime containers".into(), containers);
        f.insert("runtime snapshots".into(), snapshots(&at.ctr, at.socket));
        Footprint(f)
    }

    pub(crate) fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }
}

/// oxlet's `/debug/census`: its per-pod maps by name (`counts`) and its tokio tasks.
pub(crate) async fn census(ox: &Oxlet) -> Option<serde_json::Value> {
    match ox.debug_get("/debug/census").await {
        Some((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

/// Judged only after a settle longer than the caches kept by design (the full run),
/// like [`TIME_BOUNDED`]:
/// the heap holds what those caches hold, the HTTP clients' idle connections (kept
/// 90 s) each have a task, and tokio's blocking pool keeps the threads a burst of
/// file work started while periodic work (each second) keeps waking them in turn,
/// before their 10 s idle timeout. A gone pod's correlator entries go once the sink
/// has written the events queued before its forget, which at the event QPS can take
/// longer than a short settle.
pub(crate) const JUDGED_AFTER_A_LONG_SETTLE: &[&str] = &[
    "RSS anon KiB",
    "tokio tasks",
    "threads",
    "census: event correlator: pods",
];

/// The comparison of an end reading with a baseline: a row per name, and the names
/// over 5 % (and over one for small counts) that are not [`NOT_JUDGED`] (nor, when
/// `settled_long` is false, [`TIME_BOUNDED`] or [`JUDGED_AFTER_A_LONG_SETTLE`]).
pub(crate) fn compare(
    base: &Footprint,
    after: &Footprint,
    settled_long: bool,
) -> (Vec<[String; 4]>, Vec<String>) {
    let mut rows = Vec::new();
    let mut over = Vec::new();
    let names: std::collections::BTreeSet<&String> = base.0.keys().chain(after.0.keys()).collect();
    for name in names {
        let (b, a) = (base.get(name), after.get(name));
        let allowed = (b + b.div_ceil(20)).max(b + 1);
        let bounded = TIME_BOUNDED
            .iter()
            .find(|(n, _)| n == name)
            .filter(|_| !settled_long);
        let unjudged = NOT_JUDGED.iter().find(|(n, _)| n == name);
        let later = !settled_long && JUDGED_AFTER_A_LONG_SETTLE.contains(&name.as_str());
        let verdict = match (bounded, unjudged) {
            (Some((_, why)), _) => format!("kept by design: {why}"),
            (_, Some((_, why))) => format!("not judged: {why}"),
            _ if later && a > allowed => "above (judged in the full run)".to_string(),
            _ if a <= allowed => "back".to_string(),
            _ => {
                over.push(format!("{name}: {b} before, {a} after"));
                "NOT back".to_string()
            }
        };
        rows.push([name.clone(), b.to_string(), a.to_string(), verdict]);
    }
    (rows, over)
}

/// The process's resident memory (KiB), without the rest of a reading.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    rss_kib_in(&std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default())
}

fn rss_kib_in(status: &str) -> u64 {
    status_field(status, "VmRSS:")
}

fn status_field(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn count_entries(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |d| d.count() as u64)
}

/// Every cgroup below oxlet's `--cgroup-root` in the memory hierarchy (the QoS
/// parents, pods and containers).
fn cgroups(ox: &Oxlet) -> u64 {
    fn walk(dir: &Path) -> u64 {
        std::fs::read_dir(dir).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| 1 + walk(&e.path()))
                .sum()
        })
    }
    walk(&ox.cgroup_file("memory", ""))
}

fn mounts_below(root: &Path) -> u64 {
    let root = root.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&root)))
        .count() as u64
}

/// The addresses host-local has reserved: a file per address (its `lock` and
/// `last_reserved_ip.*` files are not reservations).
pub(crate) fn reserved_ips(dir: &Path) -> std::collections::BTreeSet<String> {
    let Ok(networks) = std::fs::read_dir(dir) else {
        return Default::default();
    };
    networks
        .flatten()
        .filter_map(|n| std::fs::read_dir(n.path()).ok())
        .flat_map(Iterator::flatten)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
        .collect()
}

/// A CRI client on `socket`, or None while nothing answers there.
pub(crate) async fn cri_client(
    socket: &Path,
) -> Option<cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>> {
    let ep =
        tonic::transport::Endpoint::from_shared(format!("unix://{}", socket.display())).ok()?;
    let channel = tokio::time::timeout(std::time::Duration::from_secs(2), ep.connect())
        .await
        .ok()?
        .ok()?;
    Some(cri::runtime_service_client::RuntimeServiceClient::new(
        channel,
    ))
}

/// The runtime's (sandboxes, containers), in any state.
pub(crate) async fn runtime_objects(socket: &Path) -> (u64, u64) {
    let Some(mut c) = cri_client(socket).await else {
        return (0, 0);
    };
    let sandboxes = c
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .map_or(0, |r| r.into_inner().items.len() as u64);
    let containers = c
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .map_or(0, |r| r.into_inner().containers.len() as u64);
    (sandboxes, containers)
}

/// The overlayfs snapshots in the CRI's namespace (the images' layers included).
fn snapshots(ctr: &Path, socket: &Path) -> u64 {
    let out = std::process::Command::new(ctr)
        .args([
            "-a",
            &socket.to_string_lossy(),
            "-n",
            "k8s.io",
            "snapshots",
            "ls",
        ])
        .output();
    out.map_or(0, |o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .count() as u64
    })
}

//! The order pods are evicted in (kubelet's `rankMemoryPressure`,
//! `rankDiskPressureFunc`, `rankPIDPressure`): a pod without stats first, then one
//! over its requests, then lower priority, then larger use above requests. The sort
//! is stable: pods that tie keep the order they were listed in.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::contracts::Signal;
use crate::contracts::Snapshot;
use crate::pod::pod_uid;
use crate::stats::VolumeUsage;

/// What one pod uses, as far as it was measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodStats {
    /// The pod cgroup's working set.
    pub memory: Option<u64>,
    /// Per container name: its working set.
    pub container_memory: Vec<(String, u64)>,
    pub processes: Option<u64>,
    /// The local storage the disk ranking counts (bytes, inodes), per [`DiskSources`].
    pub disk: Option<(u64, u64)>,
    /// Per container name: its logs' bytes plus its writable layer's when known (what
    /// kubelet's eviction message reports).
    pub container_disk: Vec<(String, u64)>,
}

/// Which of a pod's local storage a disk ranking counts (kubelet's `fsStatsType`s in
/// `buildSignalToRankFunc`): with a dedicated image filesystem, nodefs holds the logs
/// and local volumes and imagefs the containers' writable layers; without one, both
/// signals count all three.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DiskSources {
    pub logs_and_volumes: bool,
    pub writable_layers: bool,
}

impl DiskSources {
    pub(crate) fn of(signal: Signal, dedicated_image_fs: bool) -> DiskSources {
        let image_fs = matches!(
            signal,
            Signal::ImageFsAvailable
                | Signal::ImageFsInodesFree
                | Signal::ContainerFsAvailable
                | Signal::ContainerFsInodesFree
        );
        DiskSources {
            logs_and_volumes: !dedicated_image_fs || !image_fs,
            writable_layers: !dedicated_image_fs || image_fs,
        }
    }
}

/// Stats by pod UID, from the advisor's round (cgroups, writable layers) and the
/// volume usage task (volumes, logs).
pub(crate) fn pod_stats(
    snapshot: &Snapshot,
    volumes: &VolumeUsage,
    sources: DiskSources,
) -> HashMap<String, PodStats> {
    let mut out = HashMap::new();
    for p in &snapshot.pods {
        let mut s = PodStats {
            memory: p
                .cgroup
                .as_ref()
                .and_then(|c| c.memory)
                .map(|m| m.working_set_bytes),
            processes: p.cgroup.as_ref().and_then(|c| c.pids),
            container_memory: p
                .containers
                .iter()
                .filter_map(|c| Some((c.name.clone(), c.cgroup.memory?.working_set_bytes)))
                .collect(),
            ..Default::default()
        };
        let layers: Vec<(&str, u64, u64)> = p
            .containers
            .iter()
            .filter_map(|c| {
                let fs = c.rootfs.as_ref()?;
                Some((c.name.as_str(), fs.used_bytes, fs.inodes_used.unwrap_or(0)))
            })
            .collect();
        let used = volumes.usage_of(&p.uid);
        let mut disk: Option<(u64, u64)> = None;
        let mut add = |b: u64, i: u64| {
            let d = disk.get_or_insert((0, 0));
            d.0 += b;
            d.1 += i;
        };
        if sources.logs_and_volumes
            && let Some(u) = &used
        {
            add(u.pod_logs.bytes, u.pod_logs.inodes);
            for (_, v) in u.volumes.iter().chain(&u.container_logs) {
                add(v.bytes, v.inodes);
            }
        }
        if sources.writable_layers {
            for &(_, b, i) in &layers {
                add(b, i);
            }
        }
        s.disk = disk;
        let mut per_container: Vec<(String, u64)> = used
            .iter()
            .flat_map(|u| u.container_logs.iter())
            .map(|(n, v)| (n.clone(), v.bytes))
            .collect();
        for &(name, b, _) in &layers {
            match per_container.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => *v += b,
                None => per_container.push((name.to_string(), b)),
            }
        }
        s.container_disk = per_container;
        out.insert(p.uid.clone(), s);
    }
    out
}

/// Which of kubelet's rankings a signal uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ranking {
    Memory,
    /// Ephemeral storage bytes.
    DiskBytes,
    Inodes,
    Pids,
}

impl Ranking {
    pub(crate) fn of(signal: Signal) -> Ranking {
        match signal {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Ranking::Memory,
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => Ranking::Inodes,
            Signal::PidAvailable => Ranking::Pids,
            _ => Ranking::DiskBytes,
        }
    }
}

/// A container's request of `resource` in bytes, 0 when absent or unreadable.
fn request(c: &Container, resource: &str) -> i64 {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(resource))
        .and_then(|q| crate::quantity::bytes(q).ok())
        .unwrap_or(0)
}

/// The pod's request of `resource` (kubelet's `GetResourceRequestQuantity`): the
/// pod's own request when it sets pod-level resources, else the containers' aggregate
/// (the sidecars counted as kubelet's `PodRequests` counts them); plus the overhead.
/// 0 when a quantity cannot be read.
pub(crate) fn pod_request(pod: &Pod, resource: &str) -> i64 {
    crate::cm::pod_request_for_eviction(pod, resource).unwrap_or(0)
}

/// The container's request of `resource` (for the eviction message).
pub(crate) fn container_request(pod: &Pod, name: &str, resource: &str) -> i64 {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .find(|c| c.name == name)
        .map_or(0, |c| request(c, resource))
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The usage a ranking measures and the request it is compared with.
fn usage(ranking: Ranking, pod: &Pod, s: &PodStats) -> Option<(i64, i64)> {
    let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    match ranking {
        Ranking::Memory => Some((i(s.memory?), pod_request(pod, "memory"))),
        Ranking::DiskBytes => Some((i(s.disk?.0), pod_request(pod, "ephemeral-storage"))),
        // kubelet has no inode requests: all inodes used count.
        Ranking::Inodes => Some((i(s.disk?.1), 0)),
        Ranking::Pids => Some((i(s.processes?), 0)),
    }
}

/// Why a pod ranks where it does, for the log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ranked {
    pub pod: Arc<Pod>,
    /// None: no stats (ranked first).
    pub usage: Option<i64>,
    pub request: i64,
    pub priority: i32,
}

impl Ranked {
    pub(crate) fn exceeds_requests(&self) -> bool {
        self.usage.is_some_and(|u| u > self.request)
    }
}

/// `pods` in eviction order for `signal`.
pub(crate) fn rank(
    signal: Signal,
    pods: &[Arc<Pod>],
    stats: &HashMap<String, PodStats>,
) -> Vec<Ranked> {
    let ranking = Ranking::of(signal);
    let mut ranked: Vec<Ranked> = pods
        .iter()
        .map(|p| {
            let u = stats.get(pod_uid(p)).and_then(|s| usage(ranking, p, s));
            Ranked {
                pod: p.clone(),
                usage: u.map(|(u, _)| u),
                request: u.map_or(0, |(_, r)| r),
                priority: priority(p),
            }
        })
        .collect();
    ranked.sort_by(|a, b| compare(ranking, a, b));
    ranked
}

/// kubelet's `orderedBy(...)` for the ranking.
fn compare(ranking: Ranking, a: &Ranked, b: &Ranked) -> Ordering {
    // Missing stats first, in every ranking that looks at stats.
    let missing = b.usage.is_none().cmp(&a.usage.is_none());
    if missing != Ordering::Equal || a.usage.is_none() {
        return missing;
    }
    let exceeds = b.exceeds_requests().cmp(&a.exceeds_requests());
    let prio = a.priority.cmp(&b.priority);
    let above = |r: &Ranked| r.usage.unwrap_or(0).saturating_sub(r.request);
    let by_usage = above(b).cmp(&above(a));
    match ranking {
        // rankPIDPressure: priority, then process count.
        Ranking::Pids => prio.then(by_usage),
        _ => exceeds.then(prio).then(by_usage),
    }
}

/// A short account of the first few pods, for the `-v=2` line.
pub(crate) fn explain(ranked: &[Ranked], n: usize) -> String {
    let more = ranked.len().saturating_sub(n);
    let named = ranked
        .iter()
        .take(n)
        .map(|r| {
            let p = &r.pod.metadata;
            let name = format!(
                "{}/{}",
                p.namespace.as_deref().unwrap_or(""),
                p.name.as_deref().unwrap_or("")
            );
            match r.usage {
                None => format!("{name} (no stats)"),
                Some(u) => format!(
                    "{name} (usage {u}, request {}, exceeds {}, priority {})",
                    r.request,
                    r.exceeds_requests(),
                    r.priority
                ),
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        format!("{named}, and {more} more")
    } else {
        named
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(name: &str, priority: i32, requests: &[(&str, &str)]) -> Arc<Pod> {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some(name.into());
        p.spec = Some(PodSpec {
            priority: Some(priority),
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(
                        requests
                            .iter()
                            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                            .collect(),
                    ),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        Arc::new(p)
    }

    fn names(r: &[Ranked]) -> Vec<&str> {
        r.iter()
            .map(|r| r.pod.metadata.name.as_deref().unwrap())
            .collect()
    }

    fn stats(entries: &[(&str, PodStats)]) -> HashMap<String, PodStats> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn mem(v: u64) -> PodStats {
        PodStats {
            memory: Some(v),
            ..Default::default()
        }
    }

    fn disk(bytes: u64, inodes: u64) -> PodStats {
        PodStats {
            disk: Some((bytes, inodes)),
            ..Default::default()
        }
    }

    fn procs(n: u64) -> PodStats {
        PodStats {
            processes: Some(n),
            ..Default::default()
        }
    }

    #[test]
    fn memory_missing_stats_then_over_requests_then_priority_then_usage_above_request() {
        let pods = [
            pod("under", 0, &[("memory", "1000")]),
            pod("over-high-prio", 10, &[("memory", "100")]),
            pod("over-small", 0, &[("memory", "100")]),
            pod("over-big", 0, &[("memory", "100")]),
            pod("nostats", 100, &[]),
        ];
        let s = stats(&[
            ("under", mem(500)),
            ("over-high-prio", mem(10_000)),
            ("over-small", mem(200)),
            ("over-big", mem(900)),
        ]);
        for signal in [Signal::MemoryAvailable, Signal::AllocatableMemoryAvailable] {
            let r = rank(signal, &pods, &s);
            assert_eq!(
                names(&r),
                [
                    "nostats",
                    "over-big",
                    "over-small",
                    "over-high-prio",
                    "under"
                ]
            );
        }
    }

    #[test]
    fn memory_ties_keep_the_listed_order() {
        let pods = [pod("a", 0, &[]), pod("b", 0, &[]), pod("c", 0, &[])];
        let s = stats(&[("a", mem(5)), ("b", mem(5)), ("c", mem(5))]);
        assert_eq!(
            names(&rank(Signal::MemoryAvailable, &pods, &s)),
            ["a", "b", "c"]
        );
        // Two pods without stats tie too.
        assert_eq!(
            names(&rank(Signal::MemoryAvailable, &pods, &HashMap::new())),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn disk_bytes_compare_volumes_and_logs_with_ephemeral_requests() {
        let pods = [
            pod("within", 0, &[("ephemeral-storage", "10k")]),
            pod("big-within", 0, &[("ephemeral-storage", "1M")]),
            pod("over", 0, &[("ephemeral-storage", "1k")]),
            pod("best-effort", 0, &[]),
            pod("nostats", 0, &[]),
        ];
        let s = stats(&[
            ("within", disk(5_000, 1)),
            ("big-within", disk(900_000, 1)),
            ("over", disk(2_000, 1)),
            ("best-effort", disk(1_500, 1)),
        ]);
        for signal in [
            Signal::NodeFsAvailable,
            Signal::ImageFsAvailable,
            Signal::ContainerFsAvailable,
        ] {
            assert_eq!(
                names(&rank(signal, &pods, &s)),
                ["nostats", "best-effort", "over", "within", "big-within"],
                "{signal}"
            );
        }
    }

    #[test]
    fn inodes_rank_by_priority_then_inodes_used() {
        let pods = [
            pod("few", 0, &[]),
            pod("many-high-prio", 5, &[]),
            pod("many", 0, &[]),
            pod("nostats", 9, &[]),
        ];
        let s = stats(&[
            ("few", disk(1, 10)),
            ("many-high-prio", disk(1, 1000)),
            ("many", disk(1, 500)),
        ]);
        for signal in [
            Signal::NodeFsInodesFree,
            Signal::ImageFsInodesFree,
            Signal::ContainerFsInodesFree,
        ] {
            assert_eq!(
                names(&rank(signal, &pods, &s)),
                ["nostats", "many", "few", "many-high-prio"],
                "{signal}"
            );
        }
    }

    #[test]
    fn pids_rank_by_missing_stats_priority_then_process_count() {
        let pods = [
            pod("few", 0, &[]),
            pod("many-high-prio", 5, &[]),
            pod("many", 0, &[]),
            pod("nostats", 9, &[]),
            pod("few-too", 0, &[]),
        ];
        let s = stats(&[
            ("few", procs(2)),
            ("many-high-prio", procs(300)),
            ("many", procs(100)),
            ("few-too", procs(2)),
        ]);
        assert_eq!(
            names(&rank(Signal::PidAvailable, &pods, &s)),
            ["nostats", "many", "few", "few-too", "many-high-prio"]
        );
    }

    #[test]
    fn requests_sum_containers_take_the_largest_init_and_add_overhead() {
        let mut p = (*pod("p", 0, &[("memory", "100")])).clone();
        let spec = p.spec.as_mut().unwrap();
        spec.containers.push(spec.containers[0].clone());
        let mut init = spec.containers[0].clone();
        init.resources = Some(ResourceRequirements {
            requests: Some([("memory".to_string(), Quantity("500".into()))].into()),
            ..Default::default()
        });
        spec.init_containers = Some(vec![init]);
        assert_eq!(pod_request(&p, "memory"), 500);
        p.spec.as_mut().unwrap().overhead =
            Some([("memory".to_string(), Quantity("7".into()))].into());
        assert_eq!(pod_request(&p, "memory"), 507);
        assert_eq!(pod_request(&p, "ephemeral-storage"), 7 - 7);
        assert_eq!(container_request(&p, "c", "memory"), 100);
    }

    /// kubelet's `buildSignalToRankFunc`: which local storage a disk ranking counts.
    #[test]
    fn disk_stats_count_layers_logs_and_volumes_by_filesystem() {
        use super::super::signals::tests::{cgroup, fs, snapshot};
        use crate::contracts::{ContainerReading, PodReading};
        use crate::stats::{PodUsage, Usage};
        use std::time::SystemTime;
        let t = SystemTime::UNIX_EPOCH;
        let mut snap = snapshot(t);
        let container = |name: &str, layer: u64| ContainerReading {
            id: name.into(),
            name: name.into(),
            image: "".into(),
            cgroup_path: "".into(),
            created_at: t,
            cgroup: cgroup(t, 0),
            rootfs: Some(fs(t, 0, 0, 7, 0)).map(|mut f| {
                f.used_bytes = layer;
                f
            }),
            logs: None,
        };
        snap.pods = vec![PodReading {
            uid: "u".into(),
            name: "p".into(),
            namespace: "ns".into(),
            started_at: t,
            cgroup: None,
            cgroup_path: None,
            containers: vec![container("a", 1000), container("b", 20)],
            volumes: vec![],
        }];
        let volumes = VolumeUsage::default();
        let u = |bytes, inodes| Usage {
            bytes,
            inodes,
            partial: false,
        };
        volumes.set(
            "u",
            PodUsage {
                volumes: vec![("scratch".into(), u(300, 3))],
                container_logs: vec![("a".into(), u(40, 2))],
                pod_logs: u(5, 1),
                ..Default::default()
            },
        );
        let disk = |signal, dedicated| {
            pod_stats(&snap, &volumes, DiskSources::of(signal, dedicated))["u"].disk
        };
        // Shared image filesystem: writable layers (7 inodes each) + logs + volumes.
        assert_eq!(disk(Signal::NodeFsAvailable, false), Some((1365, 20)));
        assert_eq!(disk(Signal::ImageFsAvailable, false), Some((1365, 20)));
        // Dedicated: nodefs has the logs and volumes, imagefs the layers.
        assert_eq!(disk(Signal::NodeFsAvailable, true), Some((345, 6)));
        assert_eq!(disk(Signal::ImageFsInodesFree, true), Some((1020, 14)));
        // The message's per-container figure: logs plus writable layer.
        let s = &pod_stats(
            &snap,
            &volumes,
            DiskSources::of(Signal::NodeFsAvailable, true),
        )["u"];
        assert_eq!(
            s.container_disk,
            vec![("a".to_string(), 1040), ("b".to_string(), 20)]
        );
    }

    #[test]
    fn explain_names_the_top_pods() {
        let pods = [pod("a", 0, &[]), pod("b", 3, &[])];
        let r = rank(Signal::MemoryAvailable, &pods, &stats(&[("b", mem(10))]));
        assert_eq!(
            explain(&r, 5),
            "ns/a (no stats), ns/b (usage 10, request 0, exceeds true, priority 3)"
        );
        assert_eq!(explain(&r, 1), "ns/a (no stats), and 1 more");
    }
}

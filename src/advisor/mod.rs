//! The metric advisor: koordlet's `metricsadvisor`. Collectors, each with one job and
//! its own interval (koordlet's defaults), sample the node (procfs), the pods and
//! containers (cgroups), pressure, filesystems and the system part into the metric
//! cache, and every round the advisor publishes a whole [`Snapshot`] to
//! [`LatestReadings`] for the Summary API and `/metrics/resource`.
//!
//! One task runs every collector in turn on a 1 s tick (the finest interval), so the
//! collectors share their round's results through [`Shared`] without locks, as
//! koordlet's `SharedState` does; a collector whose interval has not passed keeps its
//! previous results. A failing read skips that value for the round, never the loop.

mod be;
mod bench;
mod debug;
mod hostapp;
mod network;
mod node;
mod pagecache;
mod perf;
mod pods;
mod psi;
mod rate;
mod storage;
mod system;
mod topology;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub(crate) use debug::{DebugQuery, DebugQueryError, debug_query};
// The network files' readings, for the fuzz targets (`crate::fuzzing`).
pub(crate) use network::{parse_default_route, parse_net_dev};
pub(crate) use node::memory_from_meminfo;
pub(crate) use pods::{ManagedPods, PodCollector, PodTarget, TargetLister};
// The node's CPUs as the advisor stores them, for the QoS manager's suppress.
/// The metric advisor's benchmark handles (`benches/advisor.rs`); not an API.
#[doc(hidden)]
pub use bench::{CollectorBench, FilledCache};
pub(crate) use topology::{CPU_INFO_KEY, NodeCpuInfo, Processor};

use crate::contracts::{
    CgroupReading, FsReading, LatestReadings, NetworkReading, NodeReading, PodReading, Pressure,
    Snapshot, SystemContainerReading,
};
use crate::metriccache::{MetricCache, Sample, now_ms};

/// koordlet's `CollectResUsedInterval`: node, pod and system usage.
pub(crate) const RES_USED_INTERVAL: Duration = Duration::from_secs(1);
/// koordlet's `PSICollectorInterval`.
pub(crate) const PSI_INTERVAL: Duration = Duration::from_secs(10);
/// koordlet's `CollectNodeCPUInfoInterval`: boot time, memory size, pid_max.
pub(crate) const NODE_INFO_INTERVAL: Duration = Duration::from_secs(60);
/// Filesystems: koordlet's storage collector runs every second but is gated off by
/// default; kubelet's cAdvisor refreshes filesystem usage in the background every
/// few seconds. statvfs is cheap, the CRI call less so: every 10 s.
pub(crate) const STORAGE_INTERVAL: Duration = Duration::from_secs(10);
/// How often old points leave the cache.
const GC_INTERVAL: Duration = Duration::from_secs(60);

/// The key-value store's key for [`NodeInfo`].
pub(crate) const NODE_INFO_KEY: &str = "node_info";

/// The node facts as the key-value store keeps them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeInfo {
    pub boot_time_unix: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub pid_max: Option<u64>,
    pub cpus: Option<usize>,
}

/// The node facts that change rarely.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NodeFacts {
    pub boot_time: Option<SystemTime>,
    pub memory_total: Option<u64>,
    pub pid_max: Option<u64>,
}

/// What the collectors share within and across rounds (koordlet's `SharedState`).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Node CPU in cores and memory in bytes from procfs, this round.
    pub node_cpu_cores: Option<f64>,
    pub node_memory_bytes: Option<f64>,
    /// MemTotal − MemFree: the node's memory with the page cache (koordlet's).
    pub node_memory_with_cache_bytes: Option<f64>,
    /// The root cgroup.
    pub node_cgroup: Option<CgroupReading>,
    pub processes: Option<u64>,
    pub facts: NodeFacts,
    /// kubelet's system containers (`pods`).
    pub system_containers: Vec<SystemContainerReading>,
    /// The host's network interfaces, this round.
    pub network: Option<NetworkReading>,
    /// The pods with their cgroups, from the pod collector's last round.
    pub pods: Vec<PodReading>,
    /// Σ pod CPU cores and memory bytes of this round (for the system part).
    pub pods_cpu_cores: Option<f64>,
    pub pods_memory_bytes: f64,
    /// Σ host application CPU cores and memory bytes (without page cache), this round.
    pub host_apps_usage: (f64, f64),
    /// The pods and containers listed this round, with their cgroups.
    pub targets: Vec<Arc<PodTarget>>,
    /// Pressure by cgroup path, and the node's, from the PSI collector's last round.
    pub pressure: HashMap<String, Pressure>,
    pub node_pressure: Pressure,
    pub fs: Option<FsReading>,
    pub image_fs: Option<FsReading>,
    /// Each container's writable layer by ID, from the storage collector's last round.
    pub container_rootfs: HashMap<String, FsReading>,
    /// The CPU and NUMA topology, from the node info collector's last round.
    pub topology: Option<(topology::NodeCpuInfo, topology::NodeNumaInfo)>,
    /// This round's samples, appended to the cache at its end.
    pub samples: Vec<Sample>,
}

impl Shared {
    /// Adds a sample; a label mistake is a bug in a collector, logged, not fatal.
    pub(crate) fn push(
        &mut self,
        kind: crate::metriccache::MetricKind,
        labels: &[(&str, &str)],
        ts_ms: i64,
        value: f64,
    ) {
        self.keep(Sample::new(kind, labels, ts_ms, value));
    }

    /// Adds a sample to a series whose key the collector keeps.
    pub(crate) fn push_keyed(
        &mut self,
        key: &crate::metriccache::SeriesKey,
        ts_ms: i64,
        value: f64,
    ) {
        self.keep(Sample::with_key(key, ts_ms, value));
    }

    fn keep(&mut self, sample: Result<Sample, crate::metriccache::SampleError>) {
        match sample {
            Ok(s) => self.samples.push(s),
            Err(e) => debug!(error = %e, "metric advisor: sample dropped"),
        }
    }
}

/// A collection round's future.
pub(crate) type CollectFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One collector (koordlet's `Enabled/Setup/Run`, kept to what oxlet needs).
pub(crate) trait Collector: Send {
    fn name(&self) -> &'static str;
    /// How often it runs: most collectors read the node every round.
    fn interval(&self) -> Duration {
        RES_USED_INTERVAL
    }
    /// None when it can run here; else why not (logged once at `-v=2`).
    fn disabled_reason(&self) -> Option<String> {
        None
    }
    /// One round: reads, fills `shared`, adds samples.
    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a>;
}

/// What the advisor reads and writes.
pub(crate) struct AdvisorDeps {
    pub cache: Arc<MetricCache>,
    pub readings: Arc<LatestReadings>,
    pub node_name: String,
    pub proc_root: PathBuf,
    /// `/sys` on a node: the CPU and NUMA topology.
    pub sys_root: PathBuf,
    pub cgroups: crate::cm::CgroupTree,
    /// kubelet's `pods` system container (the `kubepods` cgroup), if pods have cgroups.
    pub kubepods: Option<String>,
    /// kubelet's `runtime` system container: `--runtime-cgroups`, if given.
    pub runtime_cgroup: Option<String>,
    pub lister: Box<dyn TargetLister>,
    /// The BestEffort QoS cgroup (None without per-QoS cgroups): the BE collector's.
    pub best_effort: Option<String>,
    /// `--enable-pagecache-collector`.
    pub page_cache: bool,
    /// The NodeSLO's host applications, as they change, and the pod cgroups' bases
    /// their paths may start from.
    pub host_apps: tokio::sync::watch::Receiver<Vec<crate::koordapi::HostApp>>,
    pub qos_paths: crate::koordapi::QosPaths,
    pub root_dir: PathBuf,
    pub cri: Arc<dyn crate::cri::CriRead>,
}

struct Slot {
    collector: Box<dyn Collector>,
    next: Instant,
    /// `advisor/<name>`: what its rounds' CPU is charged to (`--task-cpu-accounting`).
    cpu_name: &'static str,
}

/// The collectors and their shared state.
pub(crate) struct Advisor {
    slots: Vec<Slot>,
    shared: Shared,
    cache: Arc<MetricCache>,
    readings: Arc<LatestReadings>,
    node_name: String,
    last_gc: Instant,
    /// What [`Advisor::store_node_info`] stored last.
    stored_info: Option<NodeInfo>,
    stored_topology: Option<(topology::NodeCpuInfo, topology::NodeNumaInfo)>,
}

impl Advisor {
    /// The collectors in their round order: node and pods before the system part,
    /// which subtracts one from the other. Disabled ones are logged once and left out.
    pub(crate) fn new(deps: AdvisorDeps) -> Advisor {
        let tree = deps.cgroups;
        let collectors: Vec<Box<dyn Collector>> = vec![
            Box::new(node::NodeInfoCollector::new(
                deps.proc_root.clone(),
                deps.sys_root.clone(),
            )),
            Box::new(node::NodeCollector::new(
                deps.proc_root.clone(),
                tree.clone(),
                deps.kubepods,
                deps.runtime_cgroup,
            )),
            Box::new(PodCollector::new(tree.clone(), deps.lister)),
            Box::new(pagecache::PageCacheCollector::new(deps.page_cache)),
            Box::new(hostapp::HostAppCollector::new(
                tree.clone(),
                deps.host_apps,
                deps.qos_paths,
                deps.cache.clone(),
            )),
            Box::new(be::BeCollector::new(
                tree.clone(),
                deps.best_effort,
                deps.node_name.clone(),
            )),
            Box::new(system::SystemCollector),
            Box::new(psi::PsiCollector::new(deps.proc_root, tree)),
            Box::new(storage::StorageCollector::new(deps.root_dir, deps.cri)),
            Box::new(perf::PerfCollector),
        ];
        let now = Instant::now();
        let mut slots = Vec::new();
        for c in collectors {
            match c.disabled_reason() {
                None => {
                    info!(collector = c.name(), interval = %crate::duration::format_go_duration(c.interval()), "metric advisor: collector enabled");
                    let cpu_name = crate::tasks::intern_task_name(format!("advisor/{}", c.name()));
                    slots.push(Slot {
                        collector: c,
                        next: now,
                        cpu_name,
                    });
                }
                Some(why) => {
                    info!(collector = c.name(), reason = %why, "metric advisor: collector disabled");
                }
            }
        }
        Advisor {
            slots,
            shared: Shared::default(),
            cache: deps.cache,
            readings: deps.readings,
            node_name: deps.node_name,
            last_gc: now,
            stored_info: None,
            stored_topology: None,
        }
    }

    /// One round: every collector that is due, then the samples to the cache and the
    /// snapshot to the latest readings.
    pub(crate) async fn round(&mut self) {
        let started = Instant::now();
        self.shared.samples.clear();
        let mut ran = 0;
        for slot in &mut self.slots {
            if slot.next > started {
                continue;
            }
            let collect = slot.collector.collect(&mut self.shared);
            crate::tasks::metered(slot.cpu_name, collect).await;
            // On a fixed schedule, so a tick that comes a hair early still finds a 1 s
            // collector due; after a stall, from now.
            slot.next += slot.collector.interval();
            if slot.next <= started {
                slot.next = started + slot.collector.interval();
            }
            ran += 1;
        }
        // Kept (and cleared at the next round's start), so each round's vector is
        // not grown anew.
        let samples = &self.shared.samples;
        let count = samples.len();
        let stored = crate::tasks::metered_sync("advisor/cache", || {
            let stored = self.cache.append_slice(samples);
            if started.duration_since(self.last_gc) >= GC_INTERVAL {
                self.cache.gc(now_ms());
                self.last_gc = started;
            }
            stored
        });
        self.store_node_info();
        crate::tasks::metered_sync("advisor/publish", || {
            self.readings.set(self.snapshot());
        });
        debug!(
            duration = %crate::duration::format_go_duration(started.elapsed()),
            collectors = ran,
            pods = self.shared.pods.len(),
            containers = self.shared.pods.iter().map(|p| p.containers.len()).sum::<usize>(),
            samples = count,
            stored,
            series = self.cache.series_count(),
            "metric advisor round"
        );
    }

    /// The node facts in the cache's key-value store under [`NODE_INFO_KEY`] (koordlet
    /// keeps its `node_cpu_info` there), rewritten only when they change.
    fn store_node_info(&mut self) {
        let f = self.shared.facts;
        let info = NodeInfo {
            boot_time_unix: f
                .boot_time
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
            memory_total_bytes: f.memory_total,
            pid_max: f.pid_max,
            cpus: std::thread::available_parallelism()
                .ok()
                .map(std::num::NonZero::get),
        };
        if self.stored_info.as_ref() == Some(&info) {
            return;
        }
        match self.cache.kv().set(NODE_INFO_KEY, &info) {
            Ok(()) => self.stored_info = Some(info),
            Err(e) => warn!(error = %e, "metric advisor: node info not stored"),
        }
        self.store_topology();
    }

    /// The CPU and NUMA topology under koordlet's keys, rewritten only when it changes
    /// (a CPU taken offline, say).
    fn store_topology(&mut self) {
        let Some(t) = self.shared.topology.as_ref() else {
            return;
        };
        if self.stored_topology.as_ref() == Some(t) {
            return;
        }
        let kv = self.cache.kv();
        match kv
            .set(topology::CPU_INFO_KEY, &t.0)
            .and_then(|()| kv.set(topology::NUMA_INFO_KEY, &t.1))
        {
            Ok(()) => {
                info!(
                    cpus = t.0.total_info.number_cpus,
                    cores = t.0.total_info.number_cores,
                    sockets = t.0.total_info.number_sockets,
                    numaNodes = t.0.total_info.number_nodes,
                    "metric advisor: stored the CPU topology"
                );
                self.stored_topology = Some(t.clone());
            }
            Err(e) => warn!(error = %e, "metric advisor: CPU topology not stored"),
        }
    }

    /// The whole latest picture, with each collector's last results.
    fn snapshot(&self) -> Snapshot {
        let s = &self.shared;
        let now = SystemTime::now();
        let with_pressure = |path: Option<&str>, mut r: CgroupReading| {
            if let Some(p) = path.and_then(|p| s.pressure.get(p)) {
                r.pressure = *p;
            }
            r
        };
        let mut node_cgroup = s.node_cgroup.clone().unwrap_or(CgroupReading {
            time: now,
            cpu: None,
            memory: None,
            pids: None,
            pressure: Pressure::default(),
        });
        node_cgroup.pressure = s.node_pressure;
        let paths: HashMap<&str, &PodTarget> =
            s.targets.iter().map(|t| (t.uid.as_str(), &**t)).collect();
        let pods = s
            .pods
            .iter()
            .map(|p| {
                let target = paths.get(p.uid.as_str());
                let mut p = p.clone();
                p.cgroup = p
                    .cgroup
                    .take()
                    .map(|c| with_pressure(target.and_then(|t| t.cgroup.as_deref()), c));
                for c in &mut p.containers {
                    let path = target.and_then(|t| {
                        t.containers
                            .iter()
                            .find(|ct| ct.id == c.id)
                            .map(|ct| &*ct.cgroup)
                    });
                    c.cgroup = with_pressure(path, c.cgroup.clone());
                }
                p
            })
            .collect();
        Snapshot {
            node: NodeReading {
                name: self.node_name.clone(),
                started_at: s.facts.boot_time.unwrap_or(SystemTime::UNIX_EPOCH),
                cgroup: node_cgroup,
                memory_capacity_bytes: s.facts.memory_total.unwrap_or(0),
                fs: s.fs.clone(),
                image_fs: s.image_fs.clone(),
                max_pid: s.facts.pid_max,
                processes: s.processes,
                system_containers: s.system_containers.clone(),
                network: s.network.clone(),
            },
            pods,
        }
    }

    /// Rounds every [`RES_USED_INTERVAL`] until cancelled.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let mut tick = tokio::time::interval(RES_USED_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = tick.tick() => self.round().await,
            }
        }
    }
}

//! The pod and container collector (koordlet's `podresource` and `podthrottled`):
//! each desired pod with a running sandbox, its cgroup and its running containers'
//! cgroups; CPU cores and throttling from deltas, and memory as koordlet records it
//! (without page cache) into the metric cache. The readings the Summary API and
//! eviction use keep kubelet's working set, refreshed every tenth round as cAdvisor's
//! 10 s housekeeping refreshes it under kubelet.

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use tracing::debug;

use super::rate::RateTracker;
use super::{CollectFuture, Collector, Shared};
use crate::cm::{CgroupDriver, CgroupError, CgroupTree, ContainerManager, StatReader};
use crate::contracts::{CgroupReading, ContainerReading, PodReading};
use crate::koordapi::KoordQos;
use crate::kuberuntime::{ContainerState, PodRuntimeStatus};
use crate::metriccache::{MetricKind, SeriesKey, label, unix_ms};
use crate::pleg::PodCache;
use crate::pod::PodManager;
use crate::pod::pod_uid;

/// Containers listed per round at most (pods are bounded by `--max-pods`).
pub(crate) const MAX_CONTAINERS: usize = 4096;

/// One running container and its cgroup path below the mount.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ContainerTarget {
    pub id: String,
    pub name: String,
    /// Shared with each round's reading (`/metrics/cadvisor`'s `image` label).
    pub image: Arc<str>,
    pub created_at: SystemTime,
    /// Shared with each round's reading (`/metrics/cadvisor`'s `id` label).
    pub cgroup: Arc<str>,
    /// Its series in the metric cache, made once with the target.
    pub keys: SampleKeys,
}

/// One pod with a sandbox, and its cgroup path (None without pod cgroups).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PodTarget {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub started_at: SystemTime,
    pub cgroup: Option<Arc<str>>,
    pub containers: Vec<ContainerTarget>,
    /// For a `koordinator.sh/qosClass: BE` pod, its batch CPU request in millicores
    /// (the BE collector's `request`).
    pub be_batch_cpu_milli: Option<i64>,
    /// Its series in the metric cache, made once with the target.
    pub keys: SampleKeys,
}

/// The series one pod's or container's readings are written to: made with its
/// target (kept while the pod and its status stay the same), so a round writes
/// each point with a shared key rather than a fresh one.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SampleKeys {
    cpu: SeriesKey,
    memory: SeriesKey,
    throttled: SeriesKey,
    /// Containers have no pids kind in koordlet's schema.
    pids: Option<SeriesKey>,
}

impl SampleKeys {
    /// A pod's series, by its UID.
    pub(crate) fn pod(uid: &str) -> SampleKeys {
        let key = |kind| SeriesKey::new(kind, vec![(label::POD_UID, uid.to_string())]);
        SampleKeys {
            cpu: key(MetricKind::PodCpuUsage),
            memory: key(MetricKind::PodMemoryUsage),
            throttled: key(MetricKind::PodCpuThrottled),
            pids: Some(key(MetricKind::PodPids)),
        }
    }

    /// Every key (for tests).
    #[cfg(test)]
    pub(crate) fn keys(&self) -> Vec<SeriesKey> {
        let mut keys = vec![
            self.cpu.clone(),
            self.memory.clone(),
            self.throttled.clone(),
        ];
        keys.extend(self.pids.clone());
        keys
    }

    /// A container's series, by its runtime ID.
    pub(crate) fn container(id: &str) -> SampleKeys {
        let key = |kind| SeriesKey::new(kind, vec![(label::CONTAINER_ID, id.to_string())]);
        SampleKeys {
            cpu: key(MetricKind::ContainerCpuUsage),
            memory: key(MetricKind::ContainerMemoryUsage),
            throttled: key(MetricKind::ContainerCpuThrottled),
            pids: None,
        }
    }
}

/// Where the pods to read come from (the pod manager and the PLEG cache in the
/// agent; a fixed list in the benchmark).
pub(crate) trait TargetLister: Send + Sync {
    fn list(&self) -> Vec<Arc<PodTarget>>;
}

/// A container's cgroup below its pod's, as containerd names it for the driver.
pub(crate) fn container_cgroup(driver: CgroupDriver, pod: &str, id: &str) -> String {
    match driver {
        CgroupDriver::Cgroupfs => format!("{pod}/{id}"),
        CgroupDriver::Systemd => format!("{pod}/cri-containerd-{id}.scope"),
    }
}

fn from_unix_nanos(ns: i64) -> SystemTime {
    u64::try_from(ns).map_or(UNIX_EPOCH, |ns| UNIX_EPOCH + Duration::from_nanos(ns))
}

/// The agent's pods: desired (pod manager) and running (PLEG cache).
pub(crate) struct ManagedPods {
    pods: Arc<PodManager>,
    cache: Arc<PodCache>,
    cm: Arc<ContainerManager>,
    /// Last round's target per pod UID, with the pod and status it was made from.
    memo: Mutex<HashMap<String, Memo>>,
}

/// A target is made again only when its pod or its runtime status changed (they are
/// replaced, never changed in place): at rest every round reuses every target, where
/// making them anew cost ~10 allocations and a QoS class computation per pod.
struct Memo {
    pod: Arc<Pod>,
    status: Arc<PodRuntimeStatus>,
    target: Arc<PodTarget>,
}

impl ManagedPods {
    pub(crate) fn new(
        pods: Arc<PodManager>,
        cache: Arc<PodCache>,
        cm: Arc<ContainerManager>,
    ) -> Self {
        ManagedPods {
            pods,
            cache,
            cm,
            memo: Mutex::default(),
        }
    }

    /// The target of `pod` with `status`, or None without a running sandbox;
    /// `containers` counts the containers listed so far this round.
    fn target(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        containers: &mut usize,
    ) -> Option<PodTarget> {
        // Newest first: the running sandbox is the first ready one.
        let sandbox = status.sandboxes.iter().find(|s| s.ready)?;
        let cgroup = self.cm.pod_cgroup_path(pod);
        let uid = pod_uid(pod);
        let mut target = PodTarget {
            uid: uid.to_string(),
            name: status.name.clone(),
            namespace: status.namespace.clone(),
            started_at: from_unix_nanos(sandbox.created_at),
            cgroup: cgroup.as_deref().map(Arc::from),
            containers: Vec::new(),
            be_batch_cpu_milli: (KoordQos::of_label(pod) == Some(KoordQos::Be))
                .then(|| crate::koordapi::batch_milli_cpu_request(pod)),
            keys: SampleKeys::pod(uid),
        };
        let Some(pod_cg) = &cgroup else {
            return Some(target);
        };
        let driver = self.cm.driver();
        for c in (status.containers.iter()).filter(|c| c.state == ContainerState::Running) {
            // IDs come from the runtime; one plain component or skipped.
            if *containers >= MAX_CONTAINERS || crate::safe_path::component(&c.id).is_err() {
                continue;
            }
            *containers += 1;
            target.containers.push(ContainerTarget {
                id: c.id.clone(),
                name: c.name.clone(),
                image: c.image.as_str().into(),
                created_at: from_unix_nanos(c.created_at),
                cgroup: container_cgroup(driver, pod_cg, &c.id).into(),
                keys: SampleKeys::container(&c.id),
            });
        }
        Some(target)
    }
}

impl TargetLister for ManagedPods {
    fn list(&self) -> Vec<Arc<PodTarget>> {
        let mut memo = self.memo.locked();
        let mut next = HashMap::with_capacity(memo.len());
        let mut containers = 0;
        let mut out = Vec::new();
        for pod in self.pods.all() {
            if crate::pod::is_mirror(&pod) {
                continue;
            }
            let uid = pod_uid(&pod);
            let Some(status) = self.cache.get(uid) else {
                continue;
            };
            let target = match memo.remove(uid) {
                Some(m) if Arc::ptr_eq(&m.pod, &pod) && Arc::ptr_eq(&m.status, &status) => {
                    containers += m.target.containers.len();
                    m.target
                }
                _ => match self.target(&pod, &status, &mut containers) {
                    Some(t) => Arc::new(t),
                    None => continue,
                },
            };
            out.push(target.clone());
            next.insert(
                uid.to_string(),
                Memo {
                    pod,
                    status,
                    target,
                },
            );
        }
        *memo = next;
        out
    }
}

/// Reads the pods' and containers' cgroups.
pub(crate) struct PodCollector {
    reader: StatReader,
    lister: Box<dyn TargetLister>,
    rates: RateTracker,
}

fn is_gone(e: &CgroupError) -> bool {
    e.error.kind() == std::io::ErrorKind::NotFound
}

impl PodCollector {
    pub(crate) fn new(tree: CgroupTree, lister: Box<dyn TargetLister>) -> PodCollector {
        PodCollector {
            reader: StatReader::new(tree).reusing_details(),
            lister,
            rates: RateTracker::default(),
        }
    }

    /// Reads one cgroup, fills its rate and adds its samples to `keys`' series; None
    /// when it is gone (quiet) or unreadable (debug). The process count, read every
    /// tenth round only, is added only when it was read this round.
    fn read(
        &mut self,
        path: &str,
        id: &str,
        keys: &SampleKeys,
        shared: &mut Shared,
    ) -> Option<(CgroupReading, Option<f64>)> {
        let mut r = match self.reader.stats(path, keys.pids.is_some()) {
            Ok(r) => r,
            Err(e) if is_gone(&e) => return None,
            Err(e) => {
                debug!(cgroup = path, error = %e, "metric advisor: cgroup not read");
                return None;
            }
        };
        let ts = unix_ms(r.time);
        let mut cores = None;
        if let Some(cpu) = r.cpu.as_mut() {
            let rates = self.rates.update(id, r.time, cpu);
            cores = rates.cores;
            if let Some(c) = rates.cores {
                shared.push_keyed(&keys.cpu, ts, c);
            }
            if let Some(t) = rates.throttled_ratio {
                shared.push_keyed(&keys.throttled, ts, t);
            }
        }
        if let Some(m) = r.memory {
            shared.push_keyed(&keys.memory, ts, m.without_cache_bytes as f64);
        }
        if let (Some(p), Some(key)) = (r.pids, &keys.pids)
            && self.reader.read_details_now(path)
        {
            shared.push_keyed(key, ts, p as f64);
        }
        Some((r, cores))
    }

    /// One round over `targets`.
    pub(crate) fn collect_targets(&mut self, targets: &[Arc<PodTarget>], shared: &mut Shared) {
        let mut pods = Vec::with_capacity(targets.len());
        let (mut cpu_sum, mut mem_sum, mut any_cpu) = (0.0, 0.0, false);
        for t in targets {
            let cgroup = t
                .cgroup
                .as_deref()
                .and_then(|path| self.read(path, &t.uid, &t.keys, shared));
            let cgroup = cgroup.map(|(r, cores)| {
                if let Some(c) = cores {
                    cpu_sum += c;
                    any_cpu = true;
                }
                mem_sum += r.memory.map_or(0.0, |m| m.without_cache_bytes as f64);
                r
            });
            let mut containers = Vec::with_capacity(t.containers.len());
            for c in &t.containers {
                if let Some((r, _)) = self.read(&c.cgroup, &c.id, &c.keys, shared) {
                    containers.push(ContainerReading {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        image: c.image.clone(),
                        cgroup_path: c.cgroup.clone(),
                        created_at: c.created_at,
                        cgroup: r,
                        rootfs: shared.container_rootfs.get(&c.id).cloned(),
                        logs: None,
                    });
                }
            }
            pods.push(PodReading {
                uid: t.uid.clone(),
                name: t.name.clone(),
                namespace: t.namespace.clone(),
                started_at: t.started_at,
                cgroup,
                cgroup_path: t.cgroup.clone(),
                containers,
                volumes: Vec::new(),
            });
        }
        self.rates.end_round();
        self.reader.end_round();
        shared.pods = pods;
        shared.pods_cpu_cores = any_cpu.then_some(cpu_sum);
        shared.pods_memory_bytes = mem_sum;
    }

    /// The lister's pods now.
    pub(crate) fn lister_list(&self) -> Vec<Arc<PodTarget>> {
        self.lister.list()
    }

    /// IDs with a previous reading (for tests).
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.rates.tracked()
    }
}

impl Collector for PodCollector {
    fn name(&self) -> &'static str {
        "podresource"
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            let targets = self.lister.list();
            self.collect_targets(&targets, shared);
            shared.targets = targets;
        })
    }
}

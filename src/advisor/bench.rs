//! The benchmark's handle on the pod collector and the metric cache
//! (`benches/advisor.rs`): it runs the real collector on real cgroups it creates
//! below a parent of its own, and fills a cache as the advisor would.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::Shared;
use super::pods::{ContainerTarget, PodCollector, PodTarget, SampleKeys, TargetLister};
use crate::cm::{CgroupFs, CgroupTree, HOST_MOUNT, ResourceConfig};
use crate::metriccache::{MetricCache, MetricKind, synthetic_round};

struct Fixed(Arc<Vec<Arc<PodTarget>>>);

impl TargetLister for Fixed {
    fn list(&self) -> Vec<Arc<PodTarget>> {
        self.0.as_ref().clone()
    }
}

/// `pods` pod cgroups of `containers` container cgroups each, below `parent` on the
/// host's cgroup mount; removed again by [`CollectorBench::remove`].
pub struct CollectorBench {
    tree: CgroupTree,
    parent: String,
    targets: Arc<Vec<Arc<PodTarget>>>,
    collector: PodCollector,
    shared: Shared,
    cache: MetricCache,
}

impl CollectorBench {
    pub fn create(parent: &str, pods: usize, containers: usize) -> Result<Self, Box<dyn Error>> {
        let version = crate::cm::detect_cgroup_version(std::path::Path::new(HOST_MOUNT))?;
        let tree = CgroupTree::host(version)?;
        let mut targets = Vec::new();
        for p in 0..pods {
            let uid = format!("bench-pod-{p:04}");
            let pod_path = format!("{parent}/pod{uid}");
            tree.create(&pod_path, &ResourceConfig::default())?;
            let mut cs = Vec::new();
            for c in 0..containers {
                let id = format!("{p:04}{c:02}{}", "0".repeat(58));
                let path = format!("{pod_path}/{id}");
                tree.create(&path, &ResourceConfig::default())?;
                cs.push(ContainerTarget {
                    keys: SampleKeys::container(&id),
                    id,
                    name: format!("c{c}"),
                    image: "".into(),
                    created_at: SystemTime::now(),
                    cgroup: path.into(),
                });
            }
            targets.push(Arc::new(PodTarget {
                keys: SampleKeys::pod(&uid),
                uid: uid.clone(),
                name: uid,
                namespace: "bench".into(),
                started_at: SystemTime::now(),
                cgroup: Some(pod_path.into()),
                containers: cs,
                be_batch_cpu_milli: None,
            }));
        }
        let targets = Arc::new(targets);
        let collector = PodCollector::new(tree.clone(), Box::new(Fixed(targets.clone())));
        Ok(CollectorBench {
            tree,
            parent: parent.to_string(),
            targets,
            collector,
            shared: Shared::default(),
            cache: MetricCache::default(),
        })
    }

    /// One collector round, listing and the cache append included, as the advisor
    /// runs it; returns the samples it stored.
    pub fn round(&mut self) -> usize {
        let targets = self.collector.lister_list();
        self.collector.collect_targets(&targets, &mut self.shared);
        self.cache.append(std::mem::take(&mut self.shared.samples))
    }

    /// Pods and containers read in the last round.
    pub fn read_counts(&self) -> (usize, usize) {
        let pods = self
            .shared
            .pods
            .iter()
            .filter(|p| p.cgroup.is_some())
            .count();
        let containers = self.shared.pods.iter().map(|p| p.containers.len()).sum();
        (pods, containers)
    }

    /// Every file a round reads, for the bare-read baseline.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for t in self.targets.iter() {
            if let Some(p) = &t.cgroup {
                out.extend(self.tree.stat_files(p));
            }
            for c in &t.containers {
                out.extend(self.tree.stat_files(&c.cgroup));
            }
        }
        out
    }

    /// Removes the cgroups made (empty: nothing ever joined them).
    pub fn remove(&self) -> Result<(), Box<dyn Error>> {
        self.tree.remove(&self.parent)?;
        Ok(())
    }
}

/// A metric cache the bench fills with rounds shaped as the advisor's, in memory or on
/// disk, kept alive while the bench reads the process's RSS.
pub struct FilledCache {
    cache: MetricCache,
    pods: i64,
    containers: i64,
    start_ms: i64,
    next_sec: i64,
}

impl FilledCache {
    /// In memory only, the default limits (30 minutes).
    pub fn in_memory(pods: usize, containers: usize, start_ms: i64) -> FilledCache {
        FilledCache::with(MetricCache::default(), pods, containers, start_ms)
    }

    /// On disk in `dir`, koordlet's limits (12 h, 100 MiB).
    pub fn on_disk(
        dir: &std::path::Path,
        pods: usize,
        containers: usize,
        start_ms: i64,
    ) -> Result<FilledCache, Box<dyn Error>> {
        let (cache, _) = MetricCache::open(dir, crate::metriccache::CacheLimits::ON_DISK)?;
        Ok(FilledCache::with(cache, pods, containers, start_ms))
    }

    fn with(cache: MetricCache, pods: usize, containers: usize, start_ms: i64) -> FilledCache {
        FilledCache {
            cache,
            pods: pods as i64,
            containers: containers as i64,
            start_ms,
            next_sec: 0,
        }
    }

    /// Appends the next `seconds` rounds, one a second of sample time, running the
    /// cache's GC each minute as the advisor does; returns the samples stored.
    pub fn append_seconds(&mut self, seconds: usize) -> usize {
        let mut stored = 0;
        for _ in 0..seconds {
            let sec = self.next_sec;
            let ts = self.start_ms + sec * 1000;
            stored += self
                .cache
                .append(synthetic_round(self.pods, self.containers, sec, ts));
            if sec % 60 == 59 {
                self.cache.gc(ts);
            }
            self.next_sec += 1;
        }
        stored
    }

    pub fn series(&self) -> usize {
        self.cache.series_count()
    }

    /// The cache's own estimate of its heap (`MetricCache::approx_bytes`).
    pub fn approx_bytes(&self) -> usize {
        self.cache.approx_bytes()
    }

    /// `(disk bytes, blocks, bytes written since open)`.
    pub fn disk(&self) -> (u64, usize, u64) {
        let s = self.cache.stats();
        (s.disk_bytes, s.blocks, s.bytes_written)
    }

    /// The span of sample time a query of the node's CPU finds, oldest to newest, in s.
    pub fn held_seconds(&self) -> f64 {
        let r = self
            .cache
            .query(MetricKind::NodeCpuUsage, &[], i64::MIN, i64::MAX);
        r.time_range_ms() as f64 / 1000.0
    }
}

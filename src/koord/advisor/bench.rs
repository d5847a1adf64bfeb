//! The benchmark's handle on the pod collector and the metric cache
//! (`benches/advisor.rs`): it runs the real collector on real cgroups it creates
//! below a parent of its own, and fills a cache as the advisor would.

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::Shared;
use super::pods::{ContainerTarget, PodCollector, PodTarget, TargetLister};
use crate::cm::{CgroupFs, CgroupTree, HOST_MOUNT, ResourceConfig};
use crate::koord::metriccache::{MetricCache, MetricKind, Sample, label};

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
                    id,
                    name: format!("c{c}"),
                    created_at: SystemTime::now(),
                    cgroup: path,
                });
            }
            targets.push(Arc::new(PodTarget {
                uid: uid.clone(),
                name: uid,
                namespace: "bench".into(),
                started_at: SystemTime::now(),
                cgroup: Some(pod_path),
                containers: cs,
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

/// A filled cache, kept alive while the benchmark reads the process's RSS.
pub struct FilledCache(MetricCache);

impl FilledCache {
    pub fn series(&self) -> usize {
        self.0.series_count()
    }

    /// The cache's own estimate of its heap ([`MetricCache::approx_bytes`]).
    pub fn approx_bytes(&self) -> usize {
        self.0.approx_bytes()
    }
}

/// Fills a default-sized cache with `seconds` rounds of what the advisor writes each
/// second for `pods` pods of `containers` containers (node, system, pod and container
/// kinds; PSI every 10 s).
pub fn fill_cache(pods: usize, containers: usize, seconds: usize) -> FilledCache {
    let cache = MetricCache::default();
    let start = crate::koord::metriccache::now_ms() - (seconds as i64) * 1000;
    let psi = |labels: &[(&str, &str)], kind, ts, out: &mut Vec<Sample>| {
        for res in ["cpu", "mem", "io"] {
            for degree in ["some", "full"] {
                let mut l = labels.to_vec();
                l.extend([
                    (label::PSI_RESOURCE, res),
                    (label::PSI_PRECISION, "10"),
                    (label::PSI_DEGREE, degree),
                ]);
                out.extend(Sample::new(kind, &l, ts, 0.5));
            }
        }
    };
    for s in 0..seconds {
        let ts = start + (s as i64) * 1000;
        let mut batch = Vec::new();
        for kind in [
            MetricKind::NodeCpuUsage,
            MetricKind::NodeMemoryUsage,
            MetricKind::SysCpuUsage,
            MetricKind::SysMemoryUsage,
        ] {
            batch.extend(Sample::new(kind, &[], ts, 1.0));
        }
        for p in 0..pods {
            let uid = format!("00000000-0000-0000-0000-{p:012}");
            let l = [(label::POD_UID, uid.as_str())];
            for kind in [
                MetricKind::PodCpuUsage,
                MetricKind::PodMemoryUsage,
                MetricKind::PodCpuThrottled,
                MetricKind::PodPids,
            ] {
                batch.extend(Sample::new(kind, &l, ts, s as f64));
            }
            if s % 10 == 0 {
                psi(&l, MetricKind::PodPsi, ts, &mut batch);
            }
            for c in 0..containers {
                let id = format!("{p:06}{c:02}{}", "a".repeat(56));
                let l = [(label::CONTAINER_ID, id.as_str())];
                for kind in [
                    MetricKind::ContainerCpuUsage,
                    MetricKind::ContainerMemoryUsage,
                    MetricKind::ContainerCpuThrottled,
                ] {
                    batch.extend(Sample::new(kind, &l, ts, s as f64));
                }
                if s % 10 == 0 {
                    let l = [
                        (label::POD_UID, uid.as_str()),
                        (label::CONTAINER_ID, id.as_str()),
                    ];
                    psi(&l, MetricKind::ContainerPsi, ts, &mut batch);
                }
            }
        }
        cache.append(batch);
    }
    FilledCache(cache)
}

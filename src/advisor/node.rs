//! The node collectors: `noderesource` (koordlet, every second: CPU from `/proc/stat`
//! jiffies, memory MemTotal − MemAvailable; plus the root cgroup for kubelet's node
//! working set and swap, the `pods` system container and the running processes; the network
//! counters every [`NETWORK_INTERVAL`]) and `nodeinfo` (every minute: boot time,
//! memory size, pid_max).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use tracing::debug;

use super::rate::RateTracker;
use super::{CollectFuture, Collector, NODE_INFO_INTERVAL, Shared};
use crate::cm::{CgroupTree, CgroupVersion, StatReader};
use crate::contracts::{CgroupReading, CpuReading, MemoryReading, SystemContainerReading};
use crate::metriccache::{MetricKind, now_ms};
use crate::procfs::{self, CpuJiffies, MemInfo};

/// Node CPU in cores from two `/proc/stat` readings `elapsed` apart.
pub(crate) fn cpu_cores(
    prev: CpuJiffies,
    now: CpuJiffies,
    elapsed: Duration,
    hz: u64,
) -> Option<f64> {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 || hz == 0 || now.busy < prev.busy {
        return None;
    }
    Some((now.busy - prev.busy) as f64 / hz as f64 / secs)
}

/// The node's memory as kubelet reports it when the root cgroup has no usage file
/// (cgroup v2): usage MemTotal − MemFree, working set usage − Inactive(file).
pub(crate) fn memory_from_meminfo(m: &MemInfo) -> MemoryReading {
    let usage = m.total.saturating_sub(m.free);
    MemoryReading {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(m.inactive_file),
        ..MemoryReading::default()
    }
}

/// kubelet's `kubelet` system container when `kubeletCgroups` is unset: the cgroup
/// oxlet itself runs in (kind: `/kubelet.slice/kubelet.service`), from
/// `/proc/self/cgroup`: the unified line on v2, the memory hierarchy's on v1.
fn own_cgroup(proc_root: &Path, tree: &CgroupTree) -> Option<String> {
    let text = procfs::read_bounded(&proc_root.join("self/cgroup")).ok()?;
    cgroup_of(&text, tree.version())
}

/// The path `/proc/<pid>/cgroup` gives for `version`'s hierarchy that oxlet reads.
fn cgroup_of(text: &str, version: CgroupVersion) -> Option<String> {
    let controller = match version {
        CgroupVersion::V2 => None,
        CgroupVersion::V1 | CgroupVersion::Hybrid => Some("memory"),
    };
    procfs::cgroup_path(text, controller).map(str::to_string)
}

/// How often the host's network counters are read: cAdvisor's housekeeping interval
/// under kubelet, where the summary's `node.network` comes from. `/proc/net/dev`
/// lists every pod's `veth` too, so at 110 pods a read each second was a tenth of the
/// collector.
pub(crate) const NETWORK_INTERVAL: Duration = Duration::from_secs(10);

pub(crate) struct NodeCollector {
    proc_root: PathBuf,
    tree: CgroupTree,
    reader: StatReader,
    kubepods: Option<String>,
    /// When `kubepods` was made: read once (a dozen `stat`s), it does not change.
    kubepods_created: Option<SystemTime>,
    /// kubelet's `runtime` (`--runtime-cgroups`) and `kubelet` (its own cgroup) system
    /// containers: name, path and when the cgroup was made.
    system: Vec<(&'static str, String, Option<SystemTime>)>,
    hz: u64,
    prev: Option<(Instant, CpuJiffies)>,
    rates: RateTracker,
    /// The last network reading and when it was taken.
    /// (tokio's clock, so tests can move it).
    network: Option<(
        tokio::time::Instant,
        Option<crate::contracts::NetworkReading>,
    )>,
}

impl NodeCollector {
    /// `kubepods` and `runtime` are cgroup paths below the hierarchies' roots.
    pub(crate) fn new(
        proc_root: PathBuf,
        tree: CgroupTree,
        kubepods: Option<String>,
        runtime: Option<String>,
    ) -> Self {
        let system = [
            ("runtime", runtime),
            ("kubelet", own_cgroup(&proc_root, &tree)),
        ]
        .into_iter()
        .filter_map(|(name, p)| Some((name, p?.trim_start_matches('/').to_string(), None)))
        .collect();
        NodeCollector {
            proc_root,
            reader: StatReader::new(tree.clone()),
            tree,
            kubepods,
            kubepods_created: None,
            system,
            hz: rustix::param::clock_ticks_per_second(),
            prev: None,
            rates: RateTracker::default(),
            network: None,
        }
    }

    fn cgroup(&mut self, id: &str, path: &str) -> Option<CgroupReading> {
        match self.reader.stats(path, true) {
            Ok(mut r) => {
                if let Some(cpu) = r.cpu.as_mut() {
                    self.rates.update(id, r.time, cpu);
                }
                Some(r)
            }
            Err(e) => {
                debug!(cgroup = path, error = %e, "metric advisor: cgroup not read");
                None
            }
        }
    }
}

impl NodeCollector {
    /// The host's network reading, re-read once [`NETWORK_INTERVAL`] has passed.
    fn network(&mut self) -> Option<crate::contracts::NetworkReading> {
        let now = tokio::time::Instant::now();
        match &self.network {
            Some((at, r)) if now.duration_since(*at) < NETWORK_INTERVAL => r.clone(),
            _ => {
                let r = super::network::read(&self.proc_root)
                    .inspect_err(|e| debug!(error = %e, "metric advisor: network not read"))
                    .ok();
                self.network = Some((now, r.clone()));
                r
            }
        }
    }
}

impl Collector for NodeCollector {
    fn name(&self) -> &'static str {
        "noderesource"
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            let ts = now_ms();
            shared.node_cpu_cores = None;
            shared.node_memory_bytes = None;
            shared.node_memory_with_cache_bytes = None;
            let stat = self.proc_root.join("stat");
            match procfs::read_parsed(&stat, procfs::parse_cpu_jiffies, "no cpu line") {
                Ok(j) => {
                    let at = Instant::now();
                    if let Some((t0, j0)) = self.prev
                        && let Some(c) = cpu_cores(j0, j, at - t0, self.hz)
                    {
                        shared.node_cpu_cores = Some(c);
                        shared.push(MetricKind::NodeCpuUsage, &[], ts, c);
                    }
                    self.prev = Some((at, j));
                }
                Err(e) => debug!(error = %e, "metric advisor: node cpu not read"),
            }
            let meminfo = procfs::read_parsed(
                &self.proc_root.join("meminfo"),
                |text| procfs::parse_meminfo(text).filter(|m| m.available.is_some()),
                "no MemTotal or MemAvailable",
            );
            let meminfo = match meminfo {
                Ok(m) => {
                    let used = m.used().unwrap_or_default() as f64;
                    shared.node_memory_bytes = Some(used);
                    shared.node_memory_with_cache_bytes =
                        Some(m.total.saturating_sub(m.free) as f64);
                    shared.push(MetricKind::NodeMemoryUsage, &[], ts, used);
                    Some(m)
                }
                Err(e) => {
                    debug!(error = %e, "metric advisor: node memory not read");
                    None
                }
            };
            let mut root = self.cgroup("node", "");
            if let Some(r) = root.as_mut() {
                if r.memory.is_none()
                    && let Some(m) = &meminfo
                {
                    r.memory = Some(memory_from_meminfo(m));
                }
                if let Some(m) = r.memory.as_mut() {
                    m.limit_bytes = meminfo.map(|m| m.total);
                    // cAdvisor's root: swap used from meminfo, SwapTotal its limit.
                    m.swap_usage_bytes = meminfo.map(|m| m.swap_used());
                    m.swap_limit_bytes = meminfo.map(|m| m.swap_total);
                }
                if r.cpu.is_none() {
                    r.cpu = Some(CpuReading::default());
                }
            }
            shared.node_cgroup = root;
            shared.system_containers.clear();
            if let Some(path) = self.kubepods.clone()
                && let Some(r) = self.cgroup("pods", &path)
            {
                if self.kubepods_created.is_none() {
                    self.kubepods_created = self.tree.created(&path);
                }
                shared.system_containers.push(SystemContainerReading {
                    name: "pods".to_string(),
                    created_at: self.kubepods_created,
                    cgroup: r,
                });
            }
            for i in 0..self.system.len() {
                let (name, path, created) = self.system[i].clone();
                let Some(r) = self.cgroup(name, &path) else {
                    continue;
                };
                let created = created.or_else(|| self.tree.created(&path));
                self.system[i].2 = created;
                shared.system_containers.push(SystemContainerReading {
                    name: name.to_string(),
                    created_at: created,
                    cgroup: r,
                });
            }
            self.rates.end_round();
            self.reader.end_round();
            shared.network = self.network();
            shared.processes = procfs::read_parsed(
                &self.proc_root.join("loadavg"),
                procfs::parse_loadavg_tasks,
                "no running/total field",
            )
            .inspect_err(|e| debug!(error = %e, "metric advisor: processes not read"))
            .ok();
        })
    }
}

pub(crate) struct NodeInfoCollector {
    proc_root: PathBuf,
    sys_root: PathBuf,
}

impl NodeInfoCollector {
    pub(crate) fn new(proc_root: PathBuf, sys_root: PathBuf) -> Self {
        NodeInfoCollector {
            proc_root,
            sys_root,
        }
    }
}

impl Collector for NodeInfoCollector {
    fn name(&self) -> &'static str {
        "nodeinfo"
    }

    fn interval(&self) -> Duration {
        NODE_INFO_INTERVAL
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            let boot: Option<SystemTime> = procfs::read_parsed(
                &self.proc_root.join("stat"),
                procfs::parse_boot_time,
                "no btime",
            )
            .inspect_err(|e| debug!(error = %e, "metric advisor: boot time not read"))
            .ok();
            shared.facts.boot_time = boot.or(shared.facts.boot_time);
            let mem = procfs::read_parsed(
                &self.proc_root.join("meminfo"),
                procfs::parse_meminfo,
                "no MemTotal",
            );
            if let Ok(m) = mem {
                shared.facts.memory_total = Some(m.total);
            }
            shared.facts.pid_max =
                procfs::read_number(&self.proc_root.join("sys/kernel/pid_max")).ok();
            match super::topology::read(&self.sys_root) {
                Ok((cpu, numa)) => shared.topology = Some((cpu, numa)),
                Err(e) => debug!(error = %e, "metric advisor: CPU topology not read"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::RES_USED_INTERVAL;
    use super::*;
    use crate::cm::CgroupVersion;

    fn net_dev(rx: u64) -> String {
        format!(
            "Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n  eth0: {rx} 1 0 0 0 0 0 0 2 1 0 0 0 0 0 0\n"
        )
    }

    /// The network counters are read at the first round and again only once
    /// `NETWORK_INTERVAL` has passed; the rounds between repeat the last reading.
    #[tokio::test(start_paused = true)]
    async fn network_is_read_at_its_own_slower_interval() {
        let proc_root = tempfile::tempdir().unwrap();
        std::fs::create_dir(proc_root.path().join("net")).unwrap();
        std::fs::write(proc_root.path().join("net/dev"), net_dev(100)).unwrap();
        let cgroups = tempfile::tempdir().unwrap();
        let tree = CgroupTree::new(cgroups.path(), CgroupVersion::V2).unwrap();
        let mut c = NodeCollector::new(proc_root.path().to_path_buf(), tree, None, None);
        let mut shared = Shared::default();
        let rx = |s: &Shared| s.network.as_ref().map(|n| n.interfaces[0].rx_bytes);

        c.collect(&mut shared).await;
        assert_eq!(rx(&shared), Some(100));
        std::fs::write(proc_root.path().join("net/dev"), net_dev(200)).unwrap();
        tokio::time::advance(RES_USED_INTERVAL).await;
        c.collect(&mut shared).await;
        assert_eq!(rx(&shared), Some(100), "not re-read within the interval");
        tokio::time::advance(NETWORK_INTERVAL).await;
        c.collect(&mut shared).await;
        assert_eq!(rx(&shared), Some(200));
    }

    /// kubelet's `kubelet` system container is the cgroup oxlet runs in: the unified
    /// line on v2, the memory hierarchy's line on v1 and hybrid hosts.
    #[test]
    fn own_cgroup_is_the_unified_line_on_v2_and_the_memory_line_on_v1() {
        let v2 = "0::/kubelet.slice/kubelet.service\n";
        assert_eq!(
            cgroup_of(v2, CgroupVersion::V2).as_deref(),
            Some("/kubelet.slice/kubelet.service")
        );
        let hybrid =
            "12:cpu,cpuacct:/oxlet\n7:memory:/system.slice/oxlet.service\n0::/init.scope\n";
        for v in [CgroupVersion::V1, CgroupVersion::Hybrid] {
            assert_eq!(
                cgroup_of(hybrid, v).as_deref(),
                Some("/system.slice/oxlet.service")
            );
        }
        assert_eq!(
            cgroup_of(hybrid, CgroupVersion::V2).as_deref(),
            Some("/init.scope")
        );
        assert_eq!(cgroup_of("12:cpu:/x\n", CgroupVersion::V1), None);
    }
}

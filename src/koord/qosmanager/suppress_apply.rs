//! CPU suppress applied to the cgroups (koordlet's `suppressBECPU`): the suppress
//! value goes on the BestEffort tier by the configured policy, and the other policy's
//! mechanism is put back (`recoverCFSQuotaIfNeed`, `recoverCPUSetIfNeed`): under
//! `cpuset` the quota is lifted, under `cfsQuota` every BestEffort cgroup gets all
//! CPUs again. Every write is logged with its cause; nothing is written that is
//! already so. The CPUs the Node's reservation annotation lists are never given to
//! BestEffort, and the CPU it reserves is a floor of the system's usage.

use std::io::Read as _;

use tracing::{debug, info, warn};

use super::{QosManager, cpu_suppress, cpuset_suppress, inputs, metrics};
use crate::advisor::{CPU_INFO_KEY, NodeCpuInfo, Processor};
use crate::cm::{QosFile, format_cpu_list, parse_cpu_list};
use crate::koordapi::CpuSuppressPolicy;

/// Why a cgroup's cpuset could not be read (logged; the next round tries again).
#[derive(Debug, thiserror::Error)]
enum CpusetReadError {
    #[error(transparent)]
    Cgroup(#[from] crate::cm::CgroupError),
    #[error(transparent)]
    CpuList(#[from] crate::cm::CpuListError),
}

/// koordlet's `ContainerCgroupPathRelativeDepth`: the BestEffort cgroup, its pods,
/// their containers.
const CONTAINER_DEPTH: usize = 2;
/// The kernel's list of online CPUs, used while the metric cache has no topology.
pub(super) const ONLINE_CPUS: &str = "/sys/devices/system/cpu/online";

impl QosManager {
    /// One CPU suppress round over `view`.
    pub(super) fn suppress(&mut self, view: &inputs::UsageView) {
        if !self.d.cm.cgroups_per_qos() {
            debug!("cpu suppress: no QoS cgroups (--cgroups-per-qos=false); nothing to limit");
            return;
        }
        // The advisor's first reading of a pod has its memory but no CPU rate yet; its
        // CPU would count as the system's, so wait for the next round.
        if let Some(p) = view
            .pods
            .iter()
            .find(|p| !p.best_effort && !p.koord_be && p.has_memory && !p.has_cpu)
        {
            debug!(pod = %crate::pod::pod_ref(&p.pod), podUID = %crate::pod::pod_uid(&p.pod), "cpu suppress: no CPU rate for a running pod yet; waiting a round");
            return;
        }
        let i = cpu_suppress::SuppressInputs {
            annotation_reserved_milli: self.node().map_or(0, |n| n.reserved_cpu_milli()),
            ..cpu_suppress::SuppressInputs::from_usage(
                view,
                self.d.capacity.cpu_milli,
                self.d.allocatable.cpu_milli,
            )
        };
        let suppress = cpu_suppress::suppress_milli(&self.d.cfg, &i);
        match self.d.cfg.cpu_suppress_policy {
            CpuSuppressPolicy::CfsQuota => {
                self.suppress_by_quota(&i, suppress);
                self.recover_cpuset("the cpu suppress policy is cfsQuota");
            }
            CpuSuppressPolicy::Cpuset => {
                let pods: Vec<&k8s_openapi::api::core::v1::Pod> =
                    view.pods.iter().map(|p| p.pod.as_ref()).collect();
                self.suppress_by_cpuset(&i, suppress, &cpuset_suppress::pinned(&pods));
                self.restore_quota("the cpu suppress policy is cpuset");
            }
        }
    }

    fn suppress_by_quota(&mut self, i: &cpu_suppress::SuppressInputs, suppress: f64) {
        let current = match self.d.cm.best_effort_cpu_quota() {
            Ok(q) => q,
            Err(e) => {
                warn!(error = %e, "cpu suppress: cannot read the BestEffort cgroup's quota");
                return;
            }
        };
        let Some(quota) = cpu_suppress::next_quota(suppress, current, self.d.capacity.cpu_milli)
        else {
            debug!(
                suppressMilli = suppress as i64,
                currentQuota = current.unwrap_or(-1),
                "cpu suppress: change too small, quota kept"
            );
            return;
        };
        if let Err(e) = self.d.cm.set_best_effort_cpu_quota(quota) {
            warn!(error = %e, quota, "cpu suppress: cannot write the BestEffort cgroup's quota");
            return;
        }
        if let Some(m) = metrics::qos() {
            m.be_suppress_cpu_cores
                .with_label_values(&[self.d.node_name.as_str(), metrics::SUPPRESS_CFS_QUOTA])
                // koordlet records the quota written, in cores (never below the 2 ms
                // minimum), not the suppress value, which can be negative.
                .set(quota as f64 / cpu_suppress::PERIOD_US as f64);
        }
        info!(
            capacityMilli = i.capacity_milli,
            thresholdPercent = self.d.cfg.cpu_suppress_threshold_percent,
            nodeUsedMilli = i.node_used_milli as i64,
            nonBEPodsUsedMilli = i.non_be_pods_used_milli as i64,
            systemUsedMilli = i.system_used_milli() as i64,
            suppressMilli = suppress as i64,
            oldQuota = current.unwrap_or(-1),
            quota,
            "cpu suppress: set the BestEffort cgroup's cfs quota"
        );
    }

    /// The node's CPUs with their cores, sockets and NUMA nodes: the advisor's
    /// topology from the metric cache, else the kernel's online list.
    fn processors(&self) -> Option<Vec<Processor>> {
        if let Some(info) = self.d.cache.kv().get::<NodeCpuInfo>(CPU_INFO_KEY)
            && !info.processor_infos.is_empty()
        {
            return Some(info.processor_infos);
        }
        let mut text = String::new();
        let read = std::fs::File::open(&self.online_cpus)
            .and_then(|f| f.take(64 * 1024).read_to_string(&mut text));
        match read.map(|_| parse_cpu_list(&text)) {
            Ok(Ok(cpus)) if !cpus.is_empty() => {
                Some(cpuset_suppress::processors_from_online(&cpus))
            }
            Ok(Ok(_)) => None,
            Ok(Err(e)) => {
                warn!(file = %self.online_cpus.display(), error = %e, "cpu suppress: cannot read the online CPUs");
                None
            }
            Err(e) => {
                warn!(file = %self.online_cpus.display(), error = %e, "cpu suppress: cannot read the online CPUs");
                None
            }
        }
    }

    fn suppress_by_cpuset(
        &mut self,
        i: &cpu_suppress::SuppressInputs,
        suppress: f64,
        pins: &std::collections::BTreeMap<usize, Option<crate::koordapi::KoordQos>>,
    ) {
        let Some(procs) = self.processors() else {
            warn!("cpu suppress: no CPU topology and no online CPU list; cpuset kept");
            return;
        };
        let Some(be) = self.d.cm.qos_cgroup_path(crate::cm::QosClass::BestEffort) else {
            return;
        };
        let old = match self.read_cpuset(&be) {
            Ok(Some(old)) => old,
            Ok(None) => {
                if self.first_time("no-cpuset") {
                    warn!(cgroup = %be, "cpu suppress: the BestEffort cgroup has no cpuset.cpus (no cpuset controller); cpuset policy cannot apply");
                }
                return;
            }
            Err(e) => {
                warn!(cgroup = %be, error = %e, "cpu suppress: cannot read the BestEffort cgroup's cpuset");
                return;
            }
        };
        let n = cpuset_suppress::cpu_count(suppress, old.len(), procs.len());
        let usable = cpuset_suppress::without(&procs, &self.reserved_cpus());
        let cpus = cpuset_suppress::choose_in_pools(n, &usable, pins);
        if cpus.is_empty() {
            if self.first_time("too-few-cpus") {
                warn!(
                    want = n,
                    cpus = procs.len(),
                    "cpu suppress: fewer CPUs than the BestEffort set needs; cpuset kept"
                );
            }
            return;
        }
        let written = self.write_best_effort_cpuset(&cpus, &old);
        if let Some(m) = metrics::qos() {
            m.be_suppress_cpu_cores
                .with_label_values(&[self.d.node_name.as_str(), metrics::SUPPRESS_CPUSET])
                .set(cpus.len() as f64);
        }
        if written > 0 {
            info!(
                capacityMilli = i.capacity_milli,
                thresholdPercent = self.d.cfg.cpu_suppress_threshold_percent,
                nonBEPodsUsedMilli = i.non_be_pods_used_milli as i64,
                systemUsedMilli = i.system_used_milli() as i64,
                suppressMilli = suppress as i64,
                oldCpus = %format_cpu_list(&old),
                cpus = %format_cpu_list(&cpus),
                cgroups = written,
                "cpu suppress: set the BestEffort cgroups' cpuset"
            );
        }
    }

    /// koordlet's `applyCPUSetWithNonePolicy`: old ∪ new top-down (a v1 child's set
    /// must lie within its parent's), then the new set bottom-up. Returns how many
    /// cgroups now differ from before.
    fn write_best_effort_cpuset(&self, cpus: &[usize], old: &[usize]) -> usize {
        let paths = match self.d.cm.best_effort_tree(CONTAINER_DEPTH) {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "cpu suppress: cannot list the BestEffort cgroups");
                return 0;
            }
        };
        let before: Vec<Option<Vec<usize>>> = paths
            .iter()
            .map(|p| self.read_cpuset(p).ok().flatten())
            .collect();
        let merged = cpuset_suppress::union(old, cpus);
        for (p, b) in paths.iter().zip(&before) {
            if b.as_deref() != Some(cpus) {
                self.write_cpuset(p, &merged);
            }
        }
        let mut changed = 0;
        for (p, b) in paths.iter().zip(&before).rev() {
            if b.as_deref() != Some(cpus) && self.write_cpuset(p, cpus) {
                changed += 1;
            }
        }
        changed
    }

    /// koordlet's `recoverCPUSetIfNeed`: every BestEffort cgroup, top-down, gets all
    /// of the node's CPUs but those LSE pods are pinned to, where it has other ones.
    pub(super) fn recover_cpuset(&self, cause: &str) {
        if !self.d.cm.cgroups_per_qos() {
            return;
        }
        let Some(procs) = self.processors() else {
            return;
        };
        let pods = self.d.pods.all();
        let refs: Vec<&k8s_openapi::api::core::v1::Pod> = pods.iter().map(AsRef::as_ref).collect();
        let usable = cpuset_suppress::without(&procs, &self.reserved_cpus());
        let all = cpuset_suppress::all_but_lse(&usable, &cpuset_suppress::pinned(&refs));
        let Ok(paths) = self.d.cm.best_effort_tree(CONTAINER_DEPTH) else {
            return;
        };
        let mut written = 0;
        for p in &paths {
            let fewer = matches!(self.read_cpuset(p), Ok(Some(have)) if have != all);
            if fewer && self.write_cpuset(p, &all) {
                written += 1;
            }
        }
        if written > 0 {
            info!(cpus = %format_cpu_list(&all), cgroups = written, cause, "cpu suppress: gave the BestEffort cgroups all CPUs back");
        }
    }

    /// Lifts the BestEffort quota (−1), as koordlet does when suppress is off or the
    /// policy is `cpuset`.
    pub(super) fn restore_quota(&mut self, cause: &str) {
        if !self.d.cm.cgroups_per_qos() {
            return;
        }
        match self.d.cm.best_effort_cpu_quota() {
            Ok(Some(q)) if q > 0 => match self.d.cm.set_best_effort_cpu_quota(-1) {
                Ok(()) => info!(
                    oldQuota = q,
                    cause, "cpu suppress: lifted the BestEffort cgroup's cfs quota"
                ),
                Err(e) => {
                    warn!(error = %e, cause, "cpu suppress: cannot lift the BestEffort cgroup's quota");
                }
            },
            Ok(_) => {}
            Err(e) => {
                debug!(error = %e, "cpu suppress: cannot read the BestEffort cgroup's quota");
            }
        }
    }

    /// The CPUs the Node's reservation annotation lists, which BestEffort never gets
    /// (koordlet's `GetReservedCPUs`, read through its NodeResourceTopology, which
    /// copies the annotation); none in standalone mode.
    fn reserved_cpus(&self) -> Vec<usize> {
        self.node()
            .map(|n| n.reserved_cpus().to_vec())
            .unwrap_or_default()
    }

    /// Whether a lasting condition (`what`) is met for the first time, so that it is
    /// said once rather than every second.
    pub(super) fn first_time(&mut self, what: &'static str) -> bool {
        self.said.insert(what)
    }

    /// A cgroup's CPUs; None when the kernel offers no cpuset there.
    fn read_cpuset(&self, path: &str) -> Result<Option<Vec<usize>>, CpusetReadError> {
        match self.d.cm.read_qos_file(path, QosFile::CpusetCpus)? {
            Some(text) => Ok(Some(parse_cpu_list(&text)?)),
            None => Ok(None),
        }
    }

    /// Writes a cgroup's CPUs; a failure (a container that just went away, a set the
    /// parent does not allow) is logged and the next round tries again.
    fn write_cpuset(&self, path: &str, cpus: &[usize]) -> bool {
        match self
            .d
            .cm
            .write_qos_file(path, QosFile::CpusetCpus, &format_cpu_list(cpus))
        {
            Ok(()) => true,
            Err(e) => {
                debug!(cgroup = %path, cpus = %format_cpu_list(cpus), error = %e, "cpu suppress: cannot write a cpuset");
                false
            }
        }
    }
}

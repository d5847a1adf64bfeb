//! What a rule says for one cgroup, and how that reaches the cgroup (koordlet's
//! `protocol` contexts and its `resourceexecutor`): a rule gives values per level
//! (the QoS cgroup, the pod, the container); at `PreCreateContainer` and
//! `PreUpdateContainerResources` they go into the CRI request, at `PreRunPodSandbox`
//! and in the reconciler they are written to the cgroup, each only when the cgroup
//! does not hold it already.

use std::sync::Arc;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::info;

use super::rule::{HookRule, SharedRule};
use crate::cm::{CgroupError, ContainerManager, QosClass, ResourceConfig};
use crate::kuberuntime::{HookError, RuntimeHook};
use crate::pod::{pod_ref, pod_uid};

/// One level's values (koordlet's protocol `Resources`); None leaves it as it is.
/// −1 is "no limit" for the quota and the memory limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CgroupValues {
    pub cpu_shares: Option<i64>,
    pub cfs_quota: Option<i64>,
    pub memory_limit: Option<i64>,
}

/// A rule's functions per level (koordlet's hook and reconciler registrations).
pub(crate) trait CgroupRule: Send + Sync {
    /// Its name, in logs.
    fn name(&self) -> &'static str;
    /// A QoS cgroup's values (koordlet's `kubeqos` level); none by default.
    fn kube_qos(&self, _class: QosClass, _rule: HookRule) -> Option<CgroupValues> {
        None
    }
    /// The pod cgroup's values; None leaves the pod alone.
    fn pod(&self, pod: &Pod, rule: HookRule) -> Result<Option<CgroupValues>, HookError>;
    /// A container's values; None leaves the container alone.
    fn container(
        &self,
        pod: &Pod,
        c: &Container,
        rule: HookRule,
    ) -> Result<Option<CgroupValues>, HookError>;
}

/// Why a cgroup value is written, said in its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// `PreRunPodSandbox`: the pod's sandbox is about to run.
    Sandbox,
    /// The periodic reconcile found the cgroup away from the rule (a hand edit, a
    /// runtime write, or a pod from before a restart).
    Drift,
    /// The NodeSLO changed the rule.
    RuleChanged,
}

impl Cause {
    fn sentence(self) -> &'static str {
        match self {
            Cause::Sandbox => "runtime hook set a pod cgroup value before its sandbox runs",
            Cause::Drift => {
                "runtime hooks reconciler: a cgroup value was not the rule's (changed from outside or never set); written back"
            }
            Cause::RuleChanged => {
                "runtime hooks reconciler: the NodeSLO changed the rule; cgroup value written"
            }
        }
    }
}

/// Which drifted values a write takes: a pod's looser values go before its
/// containers', its tighter ones after, so that a child never asks for more than its
/// parent allows (cgroup v1 refuses a child CFS quota above its parent's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    All,
    Looser,
    Tighter,
}

/// The cgroup a write goes to, for its log line.
pub(crate) struct Target<'a> {
    pub pod: Option<&'a Pod>,
    pub container: Option<&'a str>,
    /// `kubeqos`, `pod` or `container`, as koordlet's reconciler levels.
    pub level: &'static str,
    pub path: &'a str,
}

/// −1 for every "no limit".
fn unlimited_as_minus_one(v: i64) -> i64 {
    if v < 0 { -1 } else { v }
}

/// The kernel keeps memory limits in pages: a limit reads back rounded down.
const PAGE_BYTES: i64 = 4096;

/// Whether `want` is looser than `have` (no limit, or at least as much).
fn looser(want: i64, have: Option<i64>) -> bool {
    let want = unlimited_as_minus_one(want);
    want == -1 || have.is_some_and(|h| h >= 0 && want >= h)
}

/// The values of `want` that `have` lacks and `pass` takes, as a write
/// (`shares_match` says whether shares read back are the shares wanted).
fn drifted(
    want: CgroupValues,
    have: &ResourceConfig,
    pass: Pass,
    shares_match: impl Fn(u64, u64) -> bool,
) -> ResourceConfig {
    let takes = |is_looser: bool| match pass {
        Pass::All => true,
        Pass::Looser => is_looser,
        Pass::Tighter => !is_looser,
    };
    let mut out = ResourceConfig::default();
    if let Some(w) = want.cpu_shares.and_then(|w| u64::try_from(w).ok())
        && !have.cpu_shares.is_some_and(|h| shares_match(h, w))
        && takes(true)
    {
        out.cpu_shares = Some(w);
    }
    if let Some(w) = want.cfs_quota.map(unlimited_as_minus_one)
        && have.cpu_quota.map(unlimited_as_minus_one) != Some(w)
        && takes(looser(w, have.cpu_quota))
    {
        out.cpu_quota = Some(w);
    }
    if let Some(w) = want.memory_limit.map(unlimited_as_minus_one) {
        let h = have.memory_limit.map(unlimited_as_minus_one);
        let right = h == Some(w) || (w > 0 && h == Some(w - w % PAGE_BYTES));
        if !right && takes(looser(w, have.memory_limit)) {
            out.memory_limit = Some(w);
        }
    }
    out
}

/// Writes the values of `want` that the cgroup at `t.path` does not hold yet (one
/// read, then one write of only what differs), and logs each at -v=2 with `cause`.
/// Returns how many values it wrote.
pub(crate) fn apply(
    cm: &ContainerManager,
    t: &Target<'_>,
    rule: &str,
    want: CgroupValues,
    pass: Pass,
    cause: Cause,
) -> Result<usize, CgroupError> {
    let have = cm.read_limits(t.path)?;
    let write = drifted(want, &have, pass, |h, w| cm.shares_match(h, w));
    if write == ResourceConfig::default() {
        return Ok(0);
    }
    cm.write_limits(t.path, &write)?;
    let changes = [
        (
            "cpu.shares",
            have.cpu_shares.map(|v| v as i64),
            write.cpu_shares.map(|v| v as i64),
        ),
        ("cpu.cfs_quota_us", have.cpu_quota, write.cpu_quota),
        (
            "memory.limit_in_bytes",
            have.memory_limit,
            write.memory_limit,
        ),
    ];
    let mut written = 0;
    for (resource, found, value) in changes {
        let Some(value) = value else { continue };
        written += 1;
        let found = found.map_or_else(|| "none".to_string(), |v| v.to_string());
        log_write(t, rule, resource, &found, value, cause);
    }
    Ok(written)
}

fn log_write(t: &Target<'_>, rule: &str, resource: &str, found: &str, value: i64, cause: Cause) {
    let (level, cgroup, says) = (t.level, t.path, cause.sentence());
    match (t.pod, t.container) {
        (Some(pod), Some(container)) => {
            info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container, level, cgroup, hook = rule, resource, found, value, "{says}");
        }
        (Some(pod), None) => {
            info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), level, cgroup, hook = rule, resource, found, value, "{says}");
        }
        (None, _) => {
            info!(level, cgroup, hook = rule, resource, found, value, "{says}");
        }
    }
}

/// A [`CgroupRule`] at the runtime's hook points, with the rule in force.
pub(crate) struct RuleHook {
    pub rule: Arc<dyn CgroupRule>,
    pub shared: Arc<SharedRule>,
    pub cm: Arc<ContainerManager>,
}

impl RuleHook {
    /// The container's values into a CRI request; `unlimited` is how "no limit" is
    /// sent (0, "not set", for a new container; −1 for an update).
    fn fill_cri_request(
        &self,
        pod: &Pod,
        c: &Container,
        r: &mut cri::LinuxContainerResources,
        unlimited: i64,
    ) -> Result<bool, HookError> {
        let Some(v) = self.rule.container(pod, c, self.shared.get())? else {
            return Ok(false);
        };
        let as_sent = |v: i64| if v < 0 { unlimited } else { v };
        if let Some(shares) = v.cpu_shares {
            r.cpu_shares = shares;
        }
        if let Some(quota) = v.cfs_quota {
            r.cpu_quota = as_sent(quota);
            if quota > 0 && r.cpu_period == 0 {
                r.cpu_period = crate::cm::DEFAULT_CPU_PERIOD_US;
            }
        }
        if let Some(limit) = v.memory_limit {
            r.memory_limit_in_bytes = as_sent(limit);
        }
        Ok(v != CgroupValues::default())
    }
}

impl RuntimeHook for RuleHook {
    fn name(&self) -> &'static str {
        self.rule.name()
    }

    fn pre_run_pod_sandbox(&self, pod: &Pod) -> Result<bool, HookError> {
        let Some(want) = self.rule.pod(pod, self.shared.get())? else {
            return Ok(false);
        };
        let Some(path) = self.cm.pod_cgroup_path(pod) else {
            return Ok(false);
        };
        let t = Target {
            pod: Some(pod),
            container: None,
            level: "pod",
            path: &path,
        };
        apply(&self.cm, &t, self.name(), want, Pass::All, Cause::Sandbox)
            .map(|n| n > 0)
            .map_err(|e| HookError(e.to_string()))
    }

    fn pre_create_container(
        &self,
        pod: &Pod,
        c: &Container,
        r: &mut cri::LinuxContainerResources,
    ) -> Result<bool, HookError> {
        self.fill_cri_request(pod, c, r, 0)
    }

    fn pre_update_container_resources(
        &self,
        pod: &Pod,
        c: &Container,
        r: &mut cri::LinuxContainerResources,
    ) -> Result<bool, HookError> {
        self.fill_cri_request(pod, c, r, -1)
    }
}

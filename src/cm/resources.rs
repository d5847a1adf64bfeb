//! The limits kubelet writes into a cgroup (its `ResourceConfig`), and the formulas
//! that turn requests and limits into them.

/// What to set on one cgroup; `None` leaves a value as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ResourceConfig {
    /// v1 `cpu.shares` (v2: converted to `cpu.weight`).
    pub cpu_shares: Option<u64>,
    /// v1 `cpu.cfs_quota_us`, -1 for no quota (v2: the first field of `cpu.max`).
    pub cpu_quota: Option<i64>,
    /// v1 `cpu.cfs_period_us` (v2: the second field of `cpu.max`).
    pub cpu_period: Option<u64>,
    /// v1 `memory.limit_in_bytes` (v2 `memory.max`), -1 for no limit.
    pub memory_limit: Option<i64>,
    /// `pids.max`, -1 for no limit.
    pub pids_limit: Option<i64>,
}

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::qos::QosClass;
use crate::quantity::{self, QuantityError};

/// The kernel's bounds for `cpu.shares`.
pub(crate) const MIN_SHARES: i64 = 2;
pub(crate) const MAX_SHARES: i64 = 262_144;
/// kubelet's default CFS period (`cpuCFSQuotaPeriod`, 100 ms) in µs.
pub(crate) const DEFAULT_CPU_PERIOD_US: i64 = 100_000;
/// The smallest quota the kernel takes (1 ms).
pub(crate) const MIN_CPU_QUOTA_US: i64 = 1000;

/// CPU shares for a milli-CPU request (kubelet's `MilliCPUToShares`):
/// `m × 1024 / 1000`, clamped to 2..262144; no request is 2. Saturating is exact
/// here: anything past the clamp is the maximum anyway.
pub(crate) fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The milli-CPU request `shares` stand for (kubelet's `sharesToMilliCPU`):
/// `⌈shares × 1000 / 1024⌉`, 0 below the kernel's 2 shares.
pub(crate) fn shares_to_milli_cpu(shares: i64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    (shares.saturating_mul(1000) + 1023) / 1024
}

/// The CFS quota for a milli-CPU limit over `period_us` (kubelet's
/// `MilliCPUToQuota`): `m × period / 1000`, at least 1 ms; a zero limit sets no
/// quota (0). None when the product does not fit 64 bits.
pub(crate) fn milli_cpu_to_quota(milli: i64, period_us: i64) -> Option<i64> {
    if milli == 0 {
        return Some(0);
    }
    Some((milli.checked_mul(period_us)? / 1000).max(MIN_CPU_QUOTA_US))
}

/// The amounts of the resources oxlet accounts for; `None` when nothing names
/// the resource (kubelet's "not found" in a `ResourceList`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PodResources {
    pub cpu_milli: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub ephemeral_storage_bytes: Option<i64>,
}

const NAMES: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

impl PodResources {
    fn slot(&mut self, name: &str) -> &mut Option<i64> {
        match name {
            "cpu" => &mut self.cpu_milli,
            "memory" => &mut self.memory_bytes,
            _ => &mut self.ephemeral_storage_bytes,
        }
    }

    fn get(&self, name: &str) -> Option<i64> {
        match name {
            "cpu" => self.cpu_milli,
            "memory" => self.memory_bytes,
            _ => self.ephemeral_storage_bytes,
        }
    }

    /// kubelet's `addResourceList`.
    fn add(&mut self, other: &PodResources) {
        for name in NAMES {
            if let Some(v) = other.get(name) {
                let slot = self.slot(name);
                *slot = Some(slot.unwrap_or(0).saturating_add(v));
            }
        }
    }

    /// kubelet's `maxResourceList`.
    fn max(&mut self, other: &PodResources) {
        for name in NAMES {
            if let Some(v) = other.get(name) {
                let slot = self.slot(name);
                *slot = Some(slot.map_or(v, |s| s.max(v)));
            }
        }
    }
}

/// A quantity in a pod's resources that cannot be used, with its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PodResourceError {
    #[error("{field}: {source}")]
    Quantity {
        field: String,
        #[source]
        source: QuantityError,
    },
    #[error("{field}: must be greater than or equal to 0")]
    Negative { field: String },
    #[error("cpu limit {milli}m is too large for a CFS quota")]
    CpuLimit { milli: i64 },
}

/// One value: millicores for cpu, bytes otherwise.
fn value(
    field: impl FnOnce() -> String,
    name: &str,
    q: &Quantity,
) -> Result<i64, PodResourceError> {
    let v = if name == "cpu" {
        quantity::milli_cpu(q)
    } else {
        quantity::bytes(q)
    };
    match v {
        Ok(v) if v >= 0 => Ok(v),
        Ok(_) => Err(PodResourceError::Negative { field: field() }),
        Err(source) => Err(PodResourceError::Quantity {
            field: field(),
            source,
        }),
    }
}

/// Whether the pod's requests or its limits are summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Requests,
    Limits,
}

/// A container's list; a request left out defaults to the limit, as the API's
/// defaulting does for static pods too.
fn container_list(c: &Container, which: Which) -> Result<PodResources, PodResourceError> {
    let mut out = PodResources::default();
    for name in NAMES {
        let (key, q) = match which {
            Which::Limits => ("limits", super::qos::container_resource(c, "limits", name)),
            Which::Requests => match super::qos::container_resource(c, "requests", name) {
                Some(q) => ("requests", Some(q)),
                None => ("limits", super::qos::container_resource(c, "limits", name)),
            },
        };
        if let Some(q) = q {
            let field = || format!("container {:?}: resources.{key}.{name}", c.name);
            *out.slot(name) = Some(value(field, name, q)?);
        }
    }
    Ok(out)
}

/// kubelet's `AggregateContainerRequests` / `AggregateContainerLimits`: the sum
/// of the regular containers and the sidecars (restartable init containers), or
/// the largest init container if more, where each init container also counts
/// the sidecars started before it. `on_container` sees each container's list as
/// kubelet's `ContainerFn` does.
fn aggregate(
    pod: &Pod,
    which: Which,
    mut on_container: impl FnMut(&PodResources),
) -> Result<PodResources, PodResourceError> {
    let mut total = PodResources::default();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(total);
    };
    for c in &spec.containers {
        let r = container_list(c, which)?;
        on_container(&r);
        total.add(&r);
    }
    let mut sidecars = PodResources::default();
    let mut init_max = PodResources::default();
    for c in spec.init_containers.iter().flatten() {
        let mut r = container_list(c, which)?;
        if c.restart_policy.as_deref() == Some("Always") {
            total.add(&r);
            sidecars.add(&r);
            r = sidecars;
        } else {
            r.add(&sidecars);
        }
        on_container(&r);
        init_max.max(&r);
    }
    total.max(&init_max);
    Ok(total)
}

/// `spec.overhead` (RuntimeClass), parsed.
fn overhead(pod: &Pod) -> Result<PodResources, PodResourceError> {
    let mut out = PodResources::default();
    let Some(o) = pod.spec.as_ref().and_then(|s| s.overhead.as_ref()) else {
        return Ok(out);
    };
    for name in NAMES {
        if let Some(q) = o.get(name) {
            *out.slot(name) = Some(value(|| format!("spec.overhead.{name}"), name, q)?);
        }
    }
    Ok(out)
}

/// The pod's own requests or limits (`spec.resources`, pod-level resources: beta and
/// on by default since 1.34), cpu and memory: the ones kubelet takes at pod level
/// (hugepages aside). A request left out defaults to the limit, as the API's defaulting
/// does (static pods too). None when the pod sets none of them (kubelet's
/// `IsPodLevelResourcesSet` false).
fn pod_level(pod: &Pod, which: Which) -> Result<Option<PodResources>, PodResourceError> {
    let Some(level) = pod.spec.as_ref().and_then(|s| s.resources.as_ref()) else {
        return Ok(None);
    };
    let (requests, limits) = (level.requests.as_ref(), level.limits.as_ref());
    let mut out = PodResources::default();
    for name in ["cpu", "memory"] {
        let (key, q) = match (which, requests.and_then(|r| r.get(name))) {
            (Which::Requests, Some(q)) => ("requests", Some(q)),
            _ => ("limits", limits.and_then(|l| l.get(name))),
        };
        if let Some(q) = q {
            *out.slot(name) = Some(value(|| format!("spec.resources.{key}.{name}"), name, q)?);
        }
    }
    Ok((out != PodResources::default()).then_some(out))
}

impl PodResources {
    /// kubelet's `applyPodLevelResources`: the pod's own values replace the
    /// containers' aggregate, resource by resource.
    fn apply_pod_level(&mut self, level: &PodResources) {
        for name in ["cpu", "memory"] {
            if let Some(v) = level.get(name) {
                *self.slot(name) = Some(v);
            }
        }
    }
}

/// The containers' aggregate with the pod's own values in its place where it sets them
/// (kubelet's `PodRequests` / `PodLimits` without the overhead), and those pod-level
/// values. `on_container` sees each container's list, as in [`aggregate`].
fn effective(
    pod: &Pod,
    which: Which,
    on_container: impl FnMut(&PodResources),
) -> Result<(PodResources, Option<PodResources>), PodResourceError> {
    let mut total = aggregate(pod, which, on_container)?;
    let level = pod_level(pod, which)?;
    if let Some(level) = &level {
        total.apply_pod_level(level);
    }
    Ok((total, level))
}

/// The pod's effective requests (kubelet's `PodRequests`): the containers'
/// aggregate, the pod's own requests in its place where it sets them, plus the
/// overhead.
pub(crate) fn pod_requests(pod: &Pod) -> Result<PodResources, PodResourceError> {
    let (mut reqs, _) = effective(pod, Which::Requests, |_| {})?;
    reqs.add(&overhead(pod)?);
    Ok(reqs)
}

/// kubelet's `remainingPodMemReqPerContainer`: the part of a pod-level memory request
/// that no container requests, shared equally among all the pod's containers (init
/// ones too), which each Burstable container's `oom_score_adj` counts as its own. 0
/// without a pod-level memory request.
pub(crate) fn unrequested_pod_memory_per_container(pod: &Pod) -> i64 {
    let pod_memory = pod_level(pod, Which::Requests)
        .ok()
        .flatten()
        .and_then(|level| level.memory_bytes)
        .unwrap_or(0);
    let Some(spec) = pod.spec.as_ref().filter(|_| pod_memory > 0) else {
        return 0;
    };
    let count = spec.containers.len() + spec.init_containers.as_ref().map_or(0, Vec::len);
    let requested = aggregate(pod, Which::Requests, |_| {})
        .ok()
        .and_then(|r| r.memory_bytes)
        .unwrap_or(0);
    pod_memory.saturating_sub(requested) / i64::try_from(count.max(1)).unwrap_or(i64::MAX)
}

/// The pod's request of `name` as eviction ranks it (kubelet's
/// `GetResourceRequestQuantity`): with pod-level resources set, the pod's own request
/// alone (0 for what it leaves out), else the containers' aggregate; plus the overhead.
pub(crate) fn pod_request_for_eviction(pod: &Pod, name: &str) -> Result<i64, PodResourceError> {
    let mut reqs = match pod_level(pod, Which::Requests)? {
        Some(level) => level,
        None => aggregate(pod, Which::Requests, |_| {})?,
    };
    reqs.add(&overhead(pod)?);
    Ok(reqs.get(name).unwrap_or(0))
}

/// What kubelet tells the runtime about a sandbox (`applySandboxResources`): the
/// containers' requests and limits without the overhead, and the overhead alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SandboxAmounts {
    pub requests: PodResources,
    pub limits: PodResources,
    pub overhead: Option<PodResources>,
}

/// The [`SandboxAmounts`] of `pod`.
pub(crate) fn sandbox_amounts(pod: &Pod) -> Result<SandboxAmounts, PodResourceError> {
    let has_overhead = pod.spec.as_ref().is_some_and(|s| s.overhead.is_some());
    Ok(SandboxAmounts {
        requests: effective(pod, Which::Requests, |_| {})?.0,
        limits: effective(pod, Which::Limits, |_| {})?.0,
        overhead: if has_overhead {
            Some(overhead(pod)?)
        } else {
            None
        },
    })
}

/// Whether every container limits cpu, and memory (kubelet's
/// `cpuLimitsDeclared` / `memoryLimitsDeclared`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitsDeclared {
    pub cpu: bool,
    pub memory: bool,
}

/// The pod's effective limits (kubelet's `PodLimits`): the containers'
/// aggregate, the pod's own limits in its place where it sets them, plus the
/// overhead for the resources that have a limit. A pod-level cpu or memory limit
/// declares that resource limited, as every container limiting it does
/// (kubelet's `ResourceConfigForPod`).
pub(crate) fn pod_limits(pod: &Pod) -> Result<(PodResources, LimitsDeclared), PodResourceError> {
    let mut declared = LimitsDeclared {
        cpu: true,
        memory: true,
    };
    let (mut limits, level) = effective(pod, Which::Limits, |r| {
        declared.cpu &= r.cpu_milli.unwrap_or(0) != 0;
        declared.memory &= r.memory_bytes.unwrap_or(0) != 0;
    })?;
    if let Some(level) = level {
        declared.cpu |= level.cpu_milli.unwrap_or(0) != 0;
        declared.memory |= level.memory_bytes.unwrap_or(0) != 0;
    }
    let over = overhead(pod)?;
    for name in NAMES {
        if let (Some(l), Some(o)) = (limits.get(name), over.get(name)) {
            *limits.slot(name) = Some(l.saturating_add(o));
        }
    }
    Ok((limits, declared))
}

/// What the pod cgroup is limited by, from the options that decide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PodCgroupSettings {
    /// `cpuCFSQuota`: without it the quota is -1 (none).
    pub cpu_cfs_quota: bool,
    /// `cpuCFSQuotaPeriod` in µs.
    pub cpu_period_us: i64,
    /// `podPidsLimit`; only a positive value is written.
    pub pod_pids_limit: i64,
}

/// The pod cgroup's limits (kubelet's `ResourceConfigForPod`, plus the pod
/// container manager's `pids.max`): Guaranteed gets shares, quota and memory;
/// Burstable gets shares, a quota only when every container limits cpu and a
/// memory limit only when every container limits memory; BestEffort gets 2 shares.
pub(crate) fn pod_resource_config(
    pod: &Pod,
    settings: PodCgroupSettings,
) -> Result<ResourceConfig, PodResourceError> {
    let reqs = pod_requests(pod)?;
    let (limits, declared) = pod_limits(pod)?;
    let shares = milli_cpu_to_shares(reqs.cpu_milli.unwrap_or(0));
    let cpu_limit = limits.cpu_milli.unwrap_or(0);
    let quota = if settings.cpu_cfs_quota {
        milli_cpu_to_quota(cpu_limit, settings.cpu_period_us)
            .ok_or(PodResourceError::CpuLimit { milli: cpu_limit })?
    } else {
        -1
    };
    let period = u64::try_from(settings.cpu_period_us).unwrap_or(0);
    let memory = limits.memory_bytes.unwrap_or(0);
    let mut config = ResourceConfig::default();
    match QosClass::of(pod) {
        QosClass::Guaranteed => {
            config.cpu_shares = Some(shares as u64);
            config.cpu_quota = Some(quota);
            config.cpu_period = Some(period);
            config.memory_limit = Some(memory);
        }
        QosClass::Burstable => {
            config.cpu_shares = Some(shares as u64);
            if declared.cpu {
                config.cpu_quota = Some(quota);
                config.cpu_period = Some(period);
            }
            if declared.memory {
                config.memory_limit = Some(memory);
            }
        }
        QosClass::BestEffort => config.cpu_shares = Some(MIN_SHARES as u64),
    }
    if settings.pod_pids_limit > 0 {
        config.pids_limit = Some(settings.pod_pids_limit);
    }
    Ok(config)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    /// A container with requests and limits, e.g. `&[("cpu", "100m")]`.
    pub(crate) fn container(name: &str, reqs: &[(&str, &str)], lims: &[(&str, &str)]) -> Container {
        let m = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect()
            })
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: m(reqs),
                limits: m(lims),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) fn sidecar(name: &str, reqs: &[(&str, &str)], lims: &[(&str, &str)]) -> Container {
        let mut c = container(name, reqs, lims);
        c.restart_policy = Some("Always".into());
        c
    }

    pub(crate) fn pod_of(containers: Vec<Container>, inits: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: (!inits.is_empty()).then_some(inits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    const SETTINGS: PodCgroupSettings = PodCgroupSettings {
        cpu_cfs_quota: true,
        cpu_period_us: DEFAULT_CPU_PERIOD_US,
        pod_pids_limit: -1,
    };
    const MI: i64 = 1 << 20;

    /// `p` with pod-level requests and limits (`spec.resources`).
    pub(crate) fn with_pod_level(mut p: Pod, reqs: &[(&str, &str)], lims: &[(&str, &str)]) -> Pod {
        let level = container("", reqs, lims).resources;
        p.spec.as_mut().unwrap().resources = level;
        p
    }

    #[test]
    fn a_pod_level_memory_request_no_container_claims_is_shared_in_the_oom_score() {
        let cap = 4096 * MI;
        let containers = vec![
            container("a", &[("memory", "64Mi")], &[]),
            container("b", &[], &[]),
        ];
        let p = with_pod_level(pod_of(containers, vec![]), &[("memory", "512Mi")], &[]);
        assert_eq!(QosClass::of(&p), QosClass::Burstable);
        // (512 − 64) Mi over two containers.
        assert_eq!(unrequested_pod_memory_per_container(&p), 224 * MI);
        let spec = p.spec.as_ref().unwrap();
        let adj =
            |i: usize| super::super::qos::container_oom_score_adj(&p, &spec.containers[i], cap);
        // 1000 − 1000 × 288 / 4096 and 1000 − 1000 × 224 / 4096, as kubelet's integers.
        assert_eq!((adj(0), adj(1)), (930, 946));
        let own = pod_of(vec![container("a", &[("memory", "64Mi")], &[])], vec![]);
        assert_eq!(unrequested_pod_memory_per_container(&own), 0);
    }

    #[test]
    fn pod_level_resources_take_the_place_of_the_containers() {
        // The containers ask little; the pod's own requests and limits decide.
        let app = container("app", &[("cpu", "100m"), ("memory", "64Mi")], &[]);
        let p = with_pod_level(
            pod_of(vec![app.clone()], vec![]),
            &[("cpu", "1"), ("memory", "256Mi")],
            &[("cpu", "2"), ("memory", "512Mi")],
        );
        let r = pod_requests(&p).unwrap();
        assert_eq!((r.cpu_milli, r.memory_bytes), (Some(1000), Some(256 * MI)));
        let (l, declared) = pod_limits(&p).unwrap();
        assert_eq!((l.cpu_milli, l.memory_bytes), (Some(2000), Some(512 * MI)));
        assert!(declared.cpu && declared.memory, "the pod limits both");
        assert_eq!(QosClass::of(&p), QosClass::Burstable);
        let c = pod_resource_config(&p, SETTINGS).unwrap();
        assert_eq!(
            (c.cpu_shares, c.cpu_quota, c.memory_limit),
            (Some(1024), Some(200_000), Some(512 * MI))
        );
        assert_eq!(pod_request_for_eviction(&p, "memory").unwrap(), 256 * MI);

        // Limits alone: the requests default to them, and the pod is Guaranteed
        // although its container sets nothing.
        let g = with_pod_level(
            pod_of(vec![container("app", &[], &[])], vec![]),
            &[],
            &[("cpu", "500m"), ("memory", "128Mi")],
        );
        assert_eq!(QosClass::of(&g), QosClass::Guaranteed);
        let c = pod_resource_config(&g, SETTINGS).unwrap();
        assert_eq!(
            (c.cpu_shares, c.cpu_quota, c.memory_limit),
            (Some(512), Some(50_000), Some(128 * MI))
        );
        let s = sandbox_amounts(&g).unwrap();
        assert_eq!(s.requests.memory_bytes, Some(128 * MI));
        assert_eq!(s.limits.cpu_milli, Some(500));

        // Only a cpu request at pod level: Burstable, the memory limit left to the
        // containers, and eviction counts no memory request (the containers' are not
        // looked at once the pod sets its own).
        let b = with_pod_level(pod_of(vec![app], vec![]), &[("cpu", "250m")], &[]);
        assert_eq!(QosClass::of(&b), QosClass::Burstable);
        let (_, declared) = pod_limits(&b).unwrap();
        assert!(!declared.memory && !declared.cpu);
        assert_eq!(pod_requests(&b).unwrap().memory_bytes, Some(64 * MI));
        assert_eq!(pod_request_for_eviction(&b, "memory").unwrap(), 0);

        // An empty `spec.resources` classes the pod by it: BestEffort, as kubelet's.
        let e = with_pod_level(
            pod_of(
                vec![container("app", &[("cpu", "1")], &[("cpu", "1")])],
                vec![],
            ),
            &[],
            &[],
        );
        assert_eq!(QosClass::of(&e), QosClass::BestEffort);

        // A bad pod-level quantity names its field.
        let bad = with_pod_level(pod_of(vec![], vec![]), &[("memory", "lots")], &[]);
        let e = pod_requests(&bad).unwrap_err().to_string();
        assert!(e.starts_with("spec.resources.requests.memory: "), "{e}");
    }

    #[test]
    fn shares_and_quota_follow_kubelets_formulas() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), 262_144);
        assert_eq!(milli_cpu_to_quota(0, 100_000), Some(0));
        assert_eq!(milli_cpu_to_quota(5, 100_000), Some(1000));
        assert_eq!(milli_cpu_to_quota(250, 100_000), Some(25_000));
        assert_eq!(milli_cpu_to_quota(1500, 50_000), Some(75_000));
        assert_eq!(milli_cpu_to_quota(i64::MAX, 100_000), None);
    }

    #[test]
    fn requests_take_the_larger_of_init_and_regular_and_add_overhead() {
        // Regular 300m + 200m; the init container wants 1 cpu: 1000m.
        let p = pod_of(
            vec![
                container("a", &[("cpu", "300m"), ("memory", "100Mi")], &[]),
                container("b", &[("cpu", "200m")], &[]),
            ],
            vec![container("init", &[("cpu", "1"), ("memory", "50Mi")], &[])],
        );
        let r = pod_requests(&p).unwrap();
        assert_eq!(r.cpu_milli, Some(1000));
        assert_eq!(r.memory_bytes, Some(100 * MI));
        assert_eq!(r.ephemeral_storage_bytes, None);
        // Overhead adds to every request.
        let mut p = p;
        p.spec.as_mut().unwrap().overhead = Some(
            [
                ("cpu".to_string(), Quantity("250m".into())),
                ("memory".to_string(), Quantity("10Mi".into())),
            ]
            .into(),
        );
        let r = pod_requests(&p).unwrap();
        assert_eq!(r.cpu_milli, Some(1250));
        assert_eq!(r.memory_bytes, Some(110 * MI));
    }

    #[test]
    fn sidecars_add_to_regular_and_to_later_init_containers() {
        // kubelet's example: sidecar 100m runs beside the regular 500m; an init
        // container started after the sidecar needs its own 1000m plus 100m.
        let p = pod_of(
            vec![container("app", &[("cpu", "500m")], &[])],
            vec![
                container("before", &[("cpu", "2")], &[]),
                sidecar("side", &[("cpu", "100m")], &[]),
                container("after", &[("cpu", "1")], &[]),
            ],
        );
        // max(2000, 100 + 1000, 500 + 100) = 2000.
        assert_eq!(pod_requests(&p).unwrap().cpu_milli, Some(2000));
        let p = pod_of(
            vec![container("app", &[("cpu", "500m")], &[])],
            vec![
                sidecar("side", &[("cpu", "100m")], &[]),
                container("after", &[("cpu", "1")], &[]),
            ],
        );
        assert_eq!(pod_requests(&p).unwrap().cpu_milli, Some(1100));
        let p = pod_of(
            vec![container("app", &[("cpu", "2")], &[])],
            vec![sidecar("side", &[("cpu", "100m")], &[])],
        );
        assert_eq!(pod_requests(&p).unwrap().cpu_milli, Some(2100));
    }

    #[test]
    fn requests_default_to_limits_and_bad_quantities_name_their_field() {
        let p = pod_of(
            vec![container("a", &[], &[("cpu", "1"), ("memory", "64Mi")])],
            vec![],
        );
        let r = pod_requests(&p).unwrap();
        assert_eq!((r.cpu_milli, r.memory_bytes), (Some(1000), Some(64 * MI)));
        let p = pod_of(
            vec![container("a", &[("ephemeral-storage", "lots")], &[])],
            vec![],
        );
        let e = pod_requests(&p).unwrap_err().to_string();
        assert!(
            e.starts_with("container \"a\": resources.requests.ephemeral-storage: "),
            "{e}"
        );
        let p = pod_of(vec![container("a", &[], &[("memory", "-1")])], vec![]);
        assert_eq!(
            pod_limits(&p).unwrap_err().to_string(),
            "container \"a\": resources.limits.memory: must be greater than or equal to 0"
        );
    }

    #[test]
    fn limits_overhead_only_where_limited() {
        let mut p = pod_of(vec![container("a", &[], &[("cpu", "1")])], vec![]);
        p.spec.as_mut().unwrap().overhead = Some(
            [
                ("cpu".to_string(), Quantity("100m".into())),
                ("memory".to_string(), Quantity("10Mi".into())),
            ]
            .into(),
        );
        let (l, declared) = pod_limits(&p).unwrap();
        assert_eq!((l.cpu_milli, l.memory_bytes), (Some(1100), None));
        assert_eq!(
            declared,
            LimitsDeclared {
                cpu: true,
                memory: false
            }
        );
    }

    #[test]
    fn pod_cgroup_config_per_qos_class() {
        // Guaranteed: shares, quota with the period, memory.
        let g = pod_of(
            vec![
                container("a", &[], &[("cpu", "1"), ("memory", "100Mi")]),
                container("b", &[], &[("cpu", "500m"), ("memory", "28Mi")]),
            ],
            vec![],
        );
        assert_eq!(
            pod_resource_config(&g, SETTINGS).unwrap(),
            ResourceConfig {
                cpu_shares: Some(1536),
                cpu_quota: Some(150_000),
                cpu_period: Some(100_000),
                memory_limit: Some(128 * MI),
                pids_limit: None,
            }
        );
        // Burstable, every container limited: quota and memory too.
        let b = pod_of(
            vec![container(
                "a",
                &[("cpu", "250m"), ("memory", "64Mi")],
                &[("cpu", "500m"), ("memory", "128Mi")],
            )],
            vec![],
        );
        assert_eq!(
            pod_resource_config(&b, SETTINGS).unwrap(),
            ResourceConfig {
                cpu_shares: Some(256),
                cpu_quota: Some(50_000),
                cpu_period: Some(100_000),
                memory_limit: Some(128 * MI),
                pids_limit: None,
            }
        );
        // Burstable, one container without limits: shares only.
        let b2 = pod_of(
            vec![
                container(
                    "a",
                    &[("cpu", "250m")],
                    &[("cpu", "500m"), ("memory", "128Mi")],
                ),
                container("b", &[("cpu", "100m")], &[]),
            ],
            vec![],
        );
        assert_eq!(
            pod_resource_config(&b2, SETTINGS).unwrap(),
            ResourceConfig {
                cpu_shares: Some(358),
                ..Default::default()
            }
        );
        // BestEffort: 2 shares; pids from podPidsLimit.
        let be = pod_of(vec![container("a", &[], &[])], vec![]);
        let with_pids = PodCgroupSettings {
            pod_pids_limit: 1024,
            ..SETTINGS
        };
        assert_eq!(
            pod_resource_config(&be, with_pids).unwrap(),
            ResourceConfig {
                cpu_shares: Some(2),
                pids_limit: Some(1024),
                ..Default::default()
            }
        );
        // cpuCFSQuota off: quota -1 (none); a custom period is used as given.
        let off = PodCgroupSettings {
            cpu_cfs_quota: false,
            ..SETTINGS
        };
        assert_eq!(pod_resource_config(&g, off).unwrap().cpu_quota, Some(-1));
        let short = PodCgroupSettings {
            cpu_period_us: 10_000,
            ..SETTINGS
        };
        let c = pod_resource_config(&g, short).unwrap();
        assert_eq!((c.cpu_quota, c.cpu_period), (Some(15_000), Some(10_000)));
    }
}

//! koordlet's `batchresource` rule: a pod labelled `koordinator.sh/qosClass: BE`
//! gets cgroup limits from koordinator's batch resources, so that what CPU suppress
//! leaves to BestEffort is shared out by request.
//!
//! - container: cpu.shares from its `batch-cpu` request (2 without one), the CFS
//!   quota from its `batch-cpu` limit (−1 without one), the memory limit from its
//!   `batch-memory` limit (−1 without one);
//! - pod: cpu.shares from the sum of the requests, the CFS quota from the sum of the
//!   limits and the memory limit from the sum of the limits, each −1 unless every
//!   container that asks for batch resources has that limit;
//! - while CPU suppress holds BestEffort by CFS quota ([`HookRule`]), both quotas are −1;
//!   otherwise a limited quota is divided by the Node's CPU normalization ratio when
//!   that is above 1 (`node.koordinator.sh/cpu-normalization-ratio`, cluster mode).
//!
//! A container asking for no batch resource is left alone, and counts for nothing
//! in its pod's sums; a pod with none is left alone. Init containers do not count
//! (koordinator's TODO).

use k8s_openapi::api::core::v1::{Container, Pod};

use super::protocol::{CgroupRule, CgroupValues};
use super::rule::HookRule;
use crate::cm::{DEFAULT_CPU_PERIOD_US, milli_cpu_to_quota, milli_cpu_to_shares};
use crate::koordapi::KoordQos;
use crate::kuberuntime::HookError;

pub(crate) use crate::koordapi::{BATCH_CPU, BATCH_MEMORY};

/// See the module doc.
pub(crate) struct BatchResource;

/// A container's batch resources (koordinator's `GetContainerExtendedResources`);
/// each absent one is None.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchSpec {
    cpu_request: Option<i64>,
    cpu_limit: Option<i64>,
    memory_limit: Option<i64>,
}

impl BatchSpec {
    const NONE: BatchSpec = BatchSpec {
        cpu_request: None,
        cpu_limit: None,
        memory_limit: None,
    };
}

/// A batch resource of the container as a plain integer (`batch-cpu` counts
/// millicores, `batch-memory` bytes, as koordinator writes them).
fn amount(c: &Container, which: &str, name: &str) -> Result<Option<i64>, HookError> {
    let Some(q) = crate::cm::container_resource(c, which, name) else {
        return Ok(None);
    };
    crate::quantity::bytes(q).map(Some).map_err(|e| {
        HookError(format!(
            "container {}: resources.{which}[{name}]: {e}",
            c.name
        ))
    })
}

/// The container's batch resources; None when it asks for none (a `batch-memory`
/// request alone counts as asking, as in koordinator, though no value uses it).
fn batch_spec(c: &Container) -> Result<Option<BatchSpec>, HookError> {
    let spec = BatchSpec {
        cpu_request: amount(c, "requests", BATCH_CPU)?,
        cpu_limit: amount(c, "limits", BATCH_CPU)?,
        memory_limit: amount(c, "limits", BATCH_MEMORY)?,
    };
    let asks = spec != BatchSpec::NONE || amount(c, "requests", BATCH_MEMORY)?.is_some();
    Ok(asks.then_some(spec))
}

/// A positive amount, else None (koordinator counts ≤ 0 as "not set").
fn positive(v: Option<i64>) -> Option<i64> {
    v.filter(|v| *v > 0)
}

/// koordlet's `MilliCPUToQuota`: −1 for no limit, at least 1 ms otherwise.
fn quota(milli: Option<i64>) -> i64 {
    positive(milli)
        .and_then(|m| milli_cpu_to_quota(m, DEFAULT_CPU_PERIOD_US))
        .unwrap_or(-1)
}

/// koordlet's scaling of a BE CFS quota by the Node's CPU normalization ratio: a
/// limited quota divided by it, rounded up, when it is above 1 (a ratio in (0, 1] is
/// not supported there yet, so it changes nothing).
fn normalized(quota: i64, rule: HookRule) -> i64 {
    match rule.cpu_normalization_ratio {
        Some(r) if quota > 0 && r > 1.0 => (quota as f64 / r).ceil() as i64,
        _ => quota,
    }
}

/// The sum of every spec's amount, or None once one has none.
fn sum_all(specs: &[BatchSpec], of: fn(&BatchSpec) -> Option<i64>) -> Option<i64> {
    specs
        .iter()
        .map(|s| positive(of(s)))
        .try_fold(0i64, |sum, v| Some(sum.saturating_add(v?)))
}

fn is_be(pod: &Pod) -> bool {
    KoordQos::of_label(pod) == Some(KoordQos::Be)
}

impl CgroupRule for BatchResource {
    fn name(&self) -> &'static str {
        "batchresource"
    }

    fn pod(&self, pod: &Pod, rule: HookRule) -> Result<Option<CgroupValues>, HookError> {
        if !is_be(pod) {
            return Ok(None);
        }
        let containers = pod.spec.as_ref().map_or(&[][..], |s| &s.containers[..]);
        let mut specs = Vec::new();
        for c in containers {
            specs.extend(batch_spec(c)?);
        }
        if specs.is_empty() {
            return Ok(None);
        }
        let requests = specs
            .iter()
            .filter_map(|s| positive(s.cpu_request))
            .fold(0i64, i64::saturating_add);
        let cfs_quota = if rule.batch_cfs_quota {
            normalized(quota(sum_all(&specs, |s| s.cpu_limit)), rule)
        } else {
            -1
        };
        Ok(Some(CgroupValues {
            cpu_shares: Some(milli_cpu_to_shares(requests)),
            cfs_quota: Some(cfs_quota),
            memory_limit: Some(sum_all(&specs, |s| s.memory_limit).unwrap_or(-1)),
        }))
    }

    fn container(
        &self,
        pod: &Pod,
        c: &Container,
        rule: HookRule,
    ) -> Result<Option<CgroupValues>, HookError> {
        if !is_be(pod) {
            return Ok(None);
        }
        let Some(spec) = batch_spec(c)? else {
            return Ok(None);
        };
        let cfs_quota = if rule.batch_cfs_quota {
            normalized(quota(spec.cpu_limit), rule)
        } else {
            -1
        };
        Ok(Some(CgroupValues {
            cpu_shares: Some(milli_cpu_to_shares(positive(spec.cpu_request).unwrap_or(0))),
            cfs_quota: Some(cfs_quota),
            memory_limit: Some(positive(spec.memory_limit).unwrap_or(-1)),
        }))
    }
}

//! A container's Linux resources from its requests and limits (kubelet's
//! `calculateLinuxResources` with the formulas of `cm/helpers_linux.go`): CPU shares,
//! CFS quota and period, and the memory limit the runtime is asked to set. Manifest
//! validation uses the same arithmetic, so what it accepts the runtime can use.

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Container;

use super::resources::{self, milli_cpu_to_shares};
use crate::quantity::QuantityError;

/// A resource quantity the cgroup arithmetic cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResourceError {
    #[error("resources.{which}.{name}: {source}")]
    Quantity {
        which: &'static str,
        name: &'static str,
        #[source]
        source: QuantityError,
    },
    #[error("resources.{which}.{name}: must be greater than or equal to 0")]
    Negative {
        which: &'static str,
        name: &'static str,
    },
    #[error("resources.limits.cpu: {milli}m is too large for a CFS quota (at most {max}m)")]
    CpuLimit { milli: i64, max: i64 },
}

impl ResourceError {
    /// The field below the container, e.g. `resources.limits.memory`.
    pub(crate) fn field(&self) -> String {
        match self {
            ResourceError::Quantity { which, name, .. }
            | ResourceError::Negative { which, name } => {
                format!("resources.{which}.{name}")
            }
            ResourceError::CpuLimit { .. } => "resources.limits.cpu".to_string(),
        }
    }

    /// What is wrong with it, without the field.
    pub(crate) fn reason(&self) -> String {
        match self {
            ResourceError::Quantity { source, .. } => source.to_string(),
            ResourceError::Negative { .. } => "must be greater than or equal to 0".to_string(),
            ResourceError::CpuLimit { milli, max } => {
                format!("{milli}m is too large for a CFS quota (at most {max}m)")
            }
        }
    }
}

/// Kubernetes' CFS period (100 ms) in µs.
const CPU_PERIOD_US: i64 = resources::DEFAULT_CPU_PERIOD_US;
/// The largest CPU limit whose quota (`m × period / 1000`) fits 64 bits.
const MAX_CPU_LIMIT_MILLI: i64 = i64::MAX / CPU_PERIOD_US * 1000;

/// Linux resources from the container's requests and limits (kubelet's formulas).
/// Manifest validation calls this too, so a quantity the arithmetic cannot use is
/// refused when the file is read, and is never a panic or a wrapped value here.
pub(crate) fn linux_resources(
    container: &Container,
) -> Result<cri::LinuxContainerResources, ResourceError> {
    use crate::quantity;
    let res = container.resources.as_ref();
    let get = |which: &'static str, name: &'static str| -> Result<Option<i64>, ResourceError> {
        let m = match which {
            "requests" => res.and_then(|r| r.requests.as_ref()),
            _ => res.and_then(|r| r.limits.as_ref()),
        };
        let Some(q) = m.and_then(|m| m.get(name)) else {
            return Ok(None);
        };
        let v = if name == "cpu" {
            quantity::milli_cpu(q)
        } else {
            quantity::bytes(q)
        }
        .map_err(|source| ResourceError::Quantity {
            which,
            name,
            source,
        })?;
        if v < 0 {
            return Err(ResourceError::Negative { which, name });
        }
        Ok(Some(v))
    };
    let cpu_limit = get("limits", "cpu")?;
    // Requests default to limits when only limits are set.
    let cpu_request = get("requests", "cpu")?.or(cpu_limit);
    let mem_limit = get("limits", "memory")?;
    get("requests", "memory")?;
    let mut r = cri::LinuxContainerResources {
        cpu_shares: cpu_request.map(milli_cpu_to_shares).unwrap_or(2),
        ..Default::default()
    };
    if let Some(limit) = cpu_limit {
        r.cpu_period = CPU_PERIOD_US;
        r.cpu_quota = milli_cpu_to_quota(limit)?;
    }
    if let Some(mem) = mem_limit {
        r.memory_limit_in_bytes = mem;
    }
    Ok(r)
}

/// `cpuCFSQuota` off: no quota and no period; another `cpuCFSQuotaPeriod`: the quota
/// scaled to it (the 100 ms quota is exactly `milli × 100` µs, limits under 10m
/// already raised to 10m).
pub(crate) fn apply_cfs_period(r: &mut cri::LinuxContainerResources, period_us: Option<i64>) {
    if r.cpu_period == 0 {
        return;
    }
    match period_us {
        None => {
            r.cpu_quota = 0;
            r.cpu_period = 0;
        }
        Some(p) if p != r.cpu_period => {
            let milli = r.cpu_quota / (CPU_PERIOD_US / 1000);
            if let Some(q) = resources::milli_cpu_to_quota(milli, p) {
                r.cpu_quota = q;
                r.cpu_period = p;
            }
        }
        Some(_) => {}
    }
}

/// CFS quota for a milli-CPU limit with the 100 ms period (see
/// [`resources::milli_cpu_to_quota`]); a limit too large is refused.
fn milli_cpu_to_quota(milli: i64) -> Result<i64, ResourceError> {
    let too_large = ResourceError::CpuLimit {
        milli,
        max: MAX_CPU_LIMIT_MILLI,
    };
    if milli > MAX_CPU_LIMIT_MILLI {
        return Err(too_large);
    }
    resources::milli_cpu_to_quota(milli, CPU_PERIOD_US).ok_or(too_large)
}

//! Two memory settings of each container's CRI resources that depend on the host
//! (kubelet's `kuberuntime_container_linux.go`): `memory.oom.group`, so that an OOM
//! kill on cgroup v2 takes the whole container rather than one process (unless
//! `singleProcessOOMKill`), and swap (`memorySwap.swapBehavior`, kubelet's NodeSwap):
//! none by default, a share of the node's swap for Burstable containers under
//! `LimitedSwap`.

use std::path::Path;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{debug, error, info};

use super::qos::{QosClass, container_resource};
use super::version::CgroupVersion;
use crate::logging::STARTUP_TARGET;

/// The unified key that makes the kernel kill every process of the cgroup on OOM.
const OOM_GROUP: &str = "memory.oom.group";
/// The unified key of a container's swap limit (kubelet's `Cgroup2MaxSwapFilename`).
const SWAP_MAX: &str = "memory.swap.max";

/// `memorySwap.swapBehavior` (kubelet's `types.SwapBehavior`); "" is `NoSwap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SwapBehavior {
    #[default]
    NoSwap,
    LimitedSwap,
}

impl SwapBehavior {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SwapBehavior::NoSwap => "NoSwap",
            SwapBehavior::LimitedSwap => "LimitedSwap",
        }
    }

    /// kubelet's validation: "" (None, unset), `NoSwap` or `LimitedSwap`.
    pub(crate) fn parse(text: &str) -> Result<Option<SwapBehavior>, MemorySettingsError> {
        match text {
            "" => Ok(None),
            "NoSwap" => Ok(Some(SwapBehavior::NoSwap)),
            "LimitedSwap" => Ok(Some(SwapBehavior::LimitedSwap)),
            _ => Err(MemorySettingsError::SwapBehavior),
        }
    }
}

/// The settings the policy is made of (kubelet's config fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemorySettings {
    /// `singleProcessOOMKill` as given (None: not set).
    pub single_process_oom_kill: Option<bool>,
    /// `memorySwap.swapBehavior` as given (None: not set, i.e. `NoSwap`).
    pub swap_behavior: Option<SwapBehavior>,
}

/// Why the container manager refuses these settings on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MemorySettingsError {
    /// `memorySwap.swapBehavior` names no behavior kubelet knows.
    #[error(r#"must be one of: "", "LimitedSwap" or "NoSwap""#)]
    SwapBehavior,
    /// kubelet's `validateKubeletOSConfiguration`, in its words.
    #[error(
        "invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1"
    )]
    OomGroupOnV1,
    /// kubelet's refusal at start (`cmd/kubelet/app/server.go`), in its words.
    #[error("swap feature is enabled and LimitedSwap but it is only supported with cgroupv2")]
    LimitedSwapOnV1,
}

/// kubelet's checks of these settings against the cgroup version (hybrid is v1).
pub(crate) fn check_settings(
    version: CgroupVersion,
    s: &MemorySettings,
) -> Result<(), MemorySettingsError> {
    if !version.uses_v1_controllers() {
        return Ok(());
    }
    if s.single_process_oom_kill == Some(false) {
        return Err(MemorySettingsError::OomGroupOnV1);
    }
    if s.swap_behavior == Some(SwapBehavior::LimitedSwap) {
        return Err(MemorySettingsError::LimitedSwapOnV1);
    }
    Ok(())
}

/// kubelet's `swapControllerAvailable`: on v2 `memory.swap.max` in oxlet's own cgroup
/// (`self_cgroup` is `/proc/self/cgroup`; the root cgroup has no such file), on v1
/// `memory.memsw.limit_in_bytes` at the memory controller's root.
pub(crate) fn swap_controller_available(
    version: CgroupVersion,
    mount: &Path,
    self_cgroup: &str,
) -> bool {
    let file = if version.uses_v1_controllers() {
        mount.join("memory/memory.memsw.limit_in_bytes")
    } else {
        let Some(own) = crate::procfs::cgroup_path(self_cgroup, None) else {
            return false;
        };
        mount
            .join(own.trim().trim_start_matches('/'))
            .join("memory.swap.max")
    };
    file.exists()
}

/// The node's swap terms for `LimitedSwap` (kubelet's machine info, read at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SwapTerms {
    behavior: SwapBehavior,
    /// `MemTotal`, and `SwapTotal`, in bytes.
    node_memory_bytes: u64,
    node_swap_bytes: u64,
}

/// What every container's resources get (see the module doc). The default
/// ([`MemoryPolicy::NONE`]) sets nothing: a v1 host without a swap controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemoryPolicy {
    v2: bool,
    /// `memory.oom.group` = 1 for each container and the sandbox.
    oom_group: bool,
    /// None without a swap controller: kubelet then says nothing about swap.
    swap: Option<SwapTerms>,
}

/// A container's swap, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SwapDecision {
    /// No swap: v2 `memory.swap.max` 0, v1 memory+swap limited to the memory limit.
    NoSwap(&'static str),
    /// v2 `memory.swap.max` of this many bytes.
    Limited(i64),
}

/// Why a container's share of the swap cannot be computed (kubelet's words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SwapShareError {
    #[error("total node memory is 0")]
    NoNodeMemory,
    #[error("container request {request} is larger than total node memory {memory}")]
    RequestAboveNodeMemory { request: i64, memory: i64 },
}

/// kubelet's `calcSwapForBurstablePods`: the request's share of the node's memory,
/// times the node's swap, in float64 as kubelet computes it (so the bytes match).
pub(crate) fn limited_swap_bytes(
    request: i64,
    node_memory: u64,
    node_swap: u64,
) -> Result<i64, SwapShareError> {
    let memory = i64::try_from(node_memory).unwrap_or(i64::MAX);
    if memory <= 0 {
        return Err(SwapShareError::NoNodeMemory);
    }
    if request > memory {
        return Err(SwapShareError::RequestAboveNodeMemory { request, memory });
    }
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    let bytes = (request as f64 / memory as f64 * node_swap as f64) as i64;
    Ok(bytes)
}

/// A container's memory request (its limit when left out, as the API defaults it)
/// and limit, in bytes; 0 when absent.
fn memory_request_and_limit(c: &Container) -> (i64, i64) {
    let bytes = |which| {
        container_resource(c, which, "memory")
            .and_then(|q| crate::quantity::bytes(q).ok())
            .unwrap_or(0)
    };
    let limit = bytes("limits");
    let request = match container_resource(c, "requests", "memory") {
        Some(_) => bytes("requests"),
        None => limit,
    };
    (request, limit)
}

impl Default for MemoryPolicy {
    fn default() -> Self {
        MemoryPolicy::NONE
    }
}

impl MemoryPolicy {
    /// Nothing set: a v1 host without a swap controller.
    pub(crate) const NONE: MemoryPolicy = MemoryPolicy {
        v2: false,
        oom_group: false,
        swap: None,
    };

    /// The policy for `version`, kubelet's way: on v1 a single process is killed (its
    /// default there); on v2 the whole container unless `singleProcessOOMKill: true`.
    /// Swap is set only where the swap controller is.
    pub(crate) fn new(
        version: CgroupVersion,
        s: &MemorySettings,
        swap_controller: bool,
        node_memory_bytes: u64,
        node_swap_bytes: u64,
    ) -> MemoryPolicy {
        let v2 = !version.uses_v1_controllers();
        MemoryPolicy {
            v2,
            oom_group: v2 && !s.single_process_oom_kill.unwrap_or(false),
            swap: swap_controller.then_some(SwapTerms {
                behavior: s.swap_behavior.unwrap_or_default(),
                node_memory_bytes,
                node_swap_bytes,
            }),
        }
    }

    /// The policy for this host: the version of `mount`, the swap controller seen
    /// from `/proc/self/cgroup`; logs the decisions once.
    pub(crate) fn detect(
        s: &MemorySettings,
        fail_swap_on: bool,
        node_memory_bytes: u64,
        node_swap_bytes: u64,
    ) -> MemoryPolicy {
        let mount = Path::new(super::fs::HOST_MOUNT);
        let version = super::version::detect_cgroup_version(mount).unwrap_or(CgroupVersion::V1);
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let controller = swap_controller_available(version, mount, &own);
        let p = MemoryPolicy::new(version, s, controller, node_memory_bytes, node_swap_bytes);
        p.log_start(s, fail_swap_on);
        p
    }

    /// The start-up lines: how an OOM kill ends a container, and what swap pods get.
    fn log_start(&self, s: &MemorySettings, fail_swap_on: bool) {
        let (single, why) = match (self.v2, s.single_process_oom_kill) {
            (false, _) => (true, "cgroup v1 has no memory.oom.group"),
            (true, Some(true)) => (true, "singleProcessOOMKill is true"),
            (true, _) => (false, "cgroup v2 and singleProcessOOMKill is not true"),
        };
        let how = if single {
            "the kernel kills one process of a container that runs out of memory"
        } else {
            "each container gets memory.oom.group=1, so the kernel kills all its processes when it runs out of memory"
        };
        info!(target: STARTUP_TARGET, singleProcessOOMKill = single, "OOM kills: {how} ({why})");
        if !fail_swap_on && s.swap_behavior.is_none() {
            // kubelet's words for the default.
            info!(target: STARTUP_TARGET, memorySwapBehavior = "", FailSwapOn = fail_swap_on, "NoSwap is set due to memorySwapBehavior not specified");
        }
        match self.swap {
            None => {
                info!(target: STARTUP_TARGET, "swap: no swap controller (v2: memory.swap.max in oxlet's cgroup; v1: memory.memsw.limit_in_bytes), so containers get no swap settings");
            }
            Some(t) => info!(
                target: STARTUP_TARGET,
                swapBehavior = t.behavior.as_str(),
                nodeSwapBytes = t.node_swap_bytes,
                nodeMemoryBytes = t.node_memory_bytes,
                "swap: {}",
                match t.behavior {
                    SwapBehavior::NoSwap => "no container may swap (v2: memory.swap.max=0; v1: memory+swap limited to the memory limit)",
                    SwapBehavior::LimitedSwap => "Burstable containers of pods that are not critical may swap their memory request's share of the node's swap; every other container none",
                }
            ),
        }
    }

    /// Whether a container's (and the sandbox's) resources get `memory.oom.group`.
    #[cfg(test)]
    pub(crate) fn oom_group(&self) -> bool {
        self.oom_group
    }

    /// `memory.oom.group` into `r` where the policy asks for it.
    pub(crate) fn apply_oom_group(&self, r: &mut cri::LinuxContainerResources) {
        if self.oom_group {
            r.unified.insert(OOM_GROUP.to_string(), "1".to_string());
        }
    }

    /// kubelet's `GetContainerSwapBehavior` with `ConfigureLimitedSwap`: None without
    /// a swap controller.
    pub(crate) fn swap_decision(&self, pod: &Pod, c: &Container) -> Option<SwapDecision> {
        let t = self.swap?;
        if t.behavior != SwapBehavior::LimitedSwap {
            return Some(SwapDecision::NoSwap("memorySwap.swapBehavior is NoSwap"));
        }
        if !self.v2 {
            return Some(SwapDecision::NoSwap("swap is only given on cgroup v2"));
        }
        if crate::pod::is_critical_pod(pod) {
            return Some(SwapDecision::NoSwap(
                "the pod is critical (static, mirror, or priority 2000000000 and up)",
            ));
        }
        if QosClass::of(pod) != QosClass::Burstable {
            return Some(SwapDecision::NoSwap("the pod is not Burstable"));
        }
        let (request, limit) = memory_request_and_limit(c);
        if request == 0 && limit == 0 {
            return Some(SwapDecision::NoSwap(
                "the container has no memory request or limit",
            ));
        }
        if request == limit {
            return Some(SwapDecision::NoSwap(
                "the container's memory request equals its limit",
            ));
        }
        Some(
            match limited_swap_bytes(request, t.node_memory_bytes, t.node_swap_bytes) {
                Ok(bytes) => SwapDecision::Limited(bytes),
                Err(e) => {
                    error!(pod = %crate::pod::pod_ref(pod), podUID = crate::pod::pod_uid(pod), container = %c.name, err = %e, "cannot calculate swap allocation amount; disallowing swap");
                    SwapDecision::NoSwap("its swap could not be calculated")
                }
            },
        )
    }

    /// Both settings into a container's resources, each swap decision logged.
    pub(crate) fn apply(&self, pod: &Pod, c: &Container, r: &mut cri::LinuxContainerResources) {
        self.apply_oom_group(r);
        let Some(decision) = self.swap_decision(pod, c) else {
            return;
        };
        let (pod_ref, uid) = (crate::pod::pod_ref(pod), crate::pod::pod_uid(pod));
        match decision {
            SwapDecision::NoSwap(reason) if !self.v2 => {
                // memory+swap = memory: no swap above the limit (none without one).
                r.memory_swap_limit_in_bytes = r.memory_limit_in_bytes;
                debug!(pod = %pod_ref, podUID = uid, container = %c.name, reason, "container gets no swap: memory+swap is limited to its memory limit");
            }
            SwapDecision::NoSwap(reason) => {
                r.unified.insert(SWAP_MAX.to_string(), "0".to_string());
                debug!(pod = %pod_ref, podUID = uid, container = %c.name, reason, "container gets no swap (memory.swap.max=0): {reason}");
            }
            SwapDecision::Limited(bytes) => {
                r.unified.insert(SWAP_MAX.to_string(), bytes.to_string());
                info!(pod = %pod_ref, podUID = uid, container = %c.name, swapLimit = bytes, "container may swap {bytes} bytes (LimitedSwap: its memory request's share of the node's swap)");
            }
        }
    }
}

#[cfg(test)]
#[path = "memory_policy_tests.rs"]
mod tests;

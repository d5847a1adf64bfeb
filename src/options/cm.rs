//! The container manager: cgroups, swap and memory, reserved resources and
//! allocatable enforcement, the kernel's tunables.

use super::Options;
use super::settings::{
    Input, InvalidValue,
    Kind::{Bool, Duration, Int, List, Map, Text},
    Setting, list_items, map_pairs, parse_bool, parse_duration, parse_int, row,
};
use crate::cm::CgroupDriver;
use crate::cm::CgroupName;
use crate::cm::Enforced;
use crate::cm::NodeAllocatableEnforcement;
use crate::cm::Reserved;

/// The container manager's settings; [`super::Options::cm_settings`] hands them to `cm`.
#[derive(Debug, Clone)]
pub(crate) struct CmOptions {
    /// `failSwapOn`: refuse to start while swap is on.
    pub(crate) fail_swap_on: bool,
    /// `singleProcessOOMKill` and `memorySwap.swapBehavior`, as given (None: unset).
    pub(crate) memory: crate::cm::MemorySettings,
    /// `cgroupDriver`; the runtime's driver may replace it unless explicit.
    pub(crate) cgroup_driver: CgroupDriver,
    /// True when the driver was given (flag or config file), not defaulted.
    pub(crate) cgroup_driver_explicit: bool,
    /// `cgroupRoot` as components; empty is `/`.
    pub(crate) cgroup_root: CgroupName,
    pub(crate) cgroups_per_qos: bool,
    /// `podPidsLimit`: -1 for no limit (negatives become -1, as in kubelet).
    pub(crate) pod_pids_limit: i64,
    pub(crate) cpu_cfs_quota: bool,
    pub(crate) cpu_cfs_quota_period: std::time::Duration,
    pub(crate) fail_cgroup_v1: bool,
    pub(crate) kube_reserved: Reserved,
    pub(crate) system_reserved: Reserved,
    pub(crate) kube_reserved_cgroup: Option<CgroupName>,
    pub(crate) system_reserved_cgroup: Option<CgroupName>,
    pub(crate) enforce_node_allocatable: NodeAllocatableEnforcement,
    /// `protectKernelDefaults`: refuse to start when the kernel's tunables differ
    /// from kubelet's values, instead of writing them.
    pub(crate) protect_kernel_defaults: bool,
}

impl CmOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        CmOptions {
            fail_swap_on: true,
            memory: crate::cm::MemorySettings::default(),
            cgroup_driver: CgroupDriver::Cgroupfs,
            cgroup_driver_explicit: false,
            cgroup_root: CgroupName::default(),
            // kubelet's default, so enforceNodeAllocatable's cross-check holds
            // when a row is checked on its own.
            cgroups_per_qos: true,
            pod_pids_limit: -1,
            cpu_cfs_quota: false,
            cpu_cfs_quota_period: std::time::Duration::ZERO,
            fail_cgroup_v1: false,
            kube_reserved: Reserved::default(),
            system_reserved: Reserved::default(),
            kube_reserved_cgroup: None,
            system_reserved_cgroup: None,
            enforce_node_allocatable: NodeAllocatableEnforcement::default(),
            protect_kernel_defaults: false,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for CmOptions {
    fn default() -> Self {
        super::Options::default().cm
    }
}

/// Swap and OOM kills.
pub(super) const SWAP_AND_OOM: &[Setting] = &[
    row(
        "fail-swap-on",
        Some("failSwapOn"),
        Bool,
        "true",
        "true|false",
        "Refuse to start while swap is on",
        |o, i| parse_bool(i.text).map(|b| o.cm.fail_swap_on = b),
    ),
    row(
        "",
        Some("memorySwap.swapBehavior"),
        Text,
        "",
        "NoSwap|LimitedSwap",
        "Swap for containers where the swap controller is: NoSwap (unset: memory.swap.max 0 for \
         each), or LimitedSwap (cgroup v2 only: a Burstable container of a pod that is not \
         critical, whose memory request differs from its limit, may swap its request's share of \
         the node's swap); config file only",
        |o, i| {
            crate::cm::SwapBehavior::parse(i.text)
                .map(|b| o.cm.memory.swap_behavior = b)
                .map_err(|e| InvalidValue(e.to_string()))
        },
    ),
    row(
        "",
        Some("singleProcessOOMKill"),
        Bool,
        "",
        "true|false",
        "On an OOM kill the kernel kills one process of the container, not all of them (unset: \
         false on cgroup v2, where each container gets memory.oom.group=1; cgroup v1 always kills \
         one and refuses false); config file only",
        |o, i| {
            o.cm.memory.single_process_oom_kill = if i.text.is_empty() {
                None
            } else {
                Some(parse_bool(i.text)?)
            };
            Ok(())
        },
    ),
];

/// The cgroups and the kernel's tunables.
pub(super) const CGROUPS: &[Setting] = &[
    row(
        "cgroup-driver",
        Some("cgroupDriver"),
        Text,
        "cgroupfs",
        "cgroupfs|systemd",
        "Cgroup driver; a driver the runtime reports wins over the default, and a contradicting \
         explicit one is refused",
        set_cgroup_driver,
    ),
    row(
        "cgroup-root",
        Some("cgroupRoot"),
        Text,
        "",
        "PATH",
        "Cgroup below which kubepods is created (empty: the root, /)",
        |o, i| cgroup_path(i.text).map(|n| o.cm.cgroup_root = n.unwrap_or_default()),
    ),
    row(
        "cgroups-per-qos",
        Some("cgroupsPerQOS"),
        Bool,
        "true",
        "true|false",
        "Create the QoS cgroups and a cgroup per pod",
        |o, i| parse_bool(i.text).map(|b| o.cm.cgroups_per_qos = b),
    ),
    row(
        "pod-max-pids",
        Some("podPidsLimit"),
        Int,
        "-1",
        "N",
        "Most processes in one pod (-1: no limit)",
        |o, i| parse_int(i.text).map(|n| o.cm.pod_pids_limit = n.max(-1)),
    ),
    row(
        "cpu-cfs-quota",
        Some("cpuCFSQuota"),
        Bool,
        "true",
        "true|false",
        "Enforce CPU limits with a CFS quota",
        |o, i| parse_bool(i.text).map(|b| o.cm.cpu_cfs_quota = b),
    ),
    row(
        "cpu-cfs-quota-period",
        Some("cpuCFSQuotaPeriod"),
        Duration,
        "100ms",
        "DURATION",
        "CFS quota period for CPU limits (1ms to 1s)",
        set_cfs_quota_period,
    ),
    row(
        "protect-kernel-defaults",
        Some("protectKernelDefaults"),
        Bool,
        "false",
        "true|false",
        "Refuse to start when a kernel tunable differs from kubelet's value \
         (vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10, kernel.panic_on_oops=1, \
         kernel.keys.root_maxkeys=1000000, kernel.keys.root_maxbytes=25000000); false writes \
         kubelet's values, as kubelet does",
        |o, i| parse_bool(i.text).map(|b| o.cm.protect_kernel_defaults = b),
    ),
    row(
        "fail-cgroupv1",
        Some("failCgroupV1"),
        Bool,
        "true",
        "true|false",
        "Refuse to start on a cgroup v1 host (kubelet's default since 1.35)",
        |o, i| parse_bool(i.text).map(|b| o.cm.fail_cgroup_v1 = b),
    ),
];

/// Resources held back, and their cgroups.
pub(super) const RESERVED: &[Setting] = &[
    row(
        "kube-reserved",
        Some("kubeReserved"),
        Map('='),
        "",
        "cpu=100m,memory=1Gi,ephemeral-storage=1Gi,pid=100",
        "Resources held back for Kubernetes daemons",
        |o, i| reserved(i.text).map(|r| o.cm.kube_reserved = r),
    ),
    row(
        "system-reserved",
        Some("systemReserved"),
        Map('='),
        "",
        "cpu=100m,memory=1Gi,ephemeral-storage=1Gi,pid=100",
        "Resources held back for the operating system",
        |o, i| reserved(i.text).map(|r| o.cm.system_reserved = r),
    ),
    row(
        "kube-reserved-cgroup",
        Some("kubeReservedCgroup"),
        Text,
        "",
        "NAME",
        "Cgroup of the Kubernetes daemons, for enforcing kube-reserved",
        |o, i| cgroup_path(i.text).map(|n| o.cm.kube_reserved_cgroup = n),
    ),
    row(
        "system-reserved-cgroup",
        Some("systemReservedCgroup"),
        Text,
        "",
        "NAME",
        "Cgroup of the system daemons, for enforcing system-reserved",
        |o, i| cgroup_path(i.text).map(|n| o.cm.system_reserved_cgroup = n),
    ),
];

/// After cgroups-per-qos and the reserved cgroups: its check reads their final values.
pub(super) const ENFORCE: &[Setting] = &[row(
    "enforce-node-allocatable",
    Some("enforceNodeAllocatable"),
    List,
    "pods",
    "pods,system-reserved,kube-reserved|none",
    "Which reservations to enforce with cgroup limits",
    set_enforce_node_allocatable,
)];

/// The driver, and whether the user chose it: only an explicit driver that
/// contradicts the runtime's is refused; the default gives way to the runtime's.
fn set_cgroup_driver(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.cm.cgroup_driver =
        CgroupDriver::parse(i.text).ok_or("must be \"cgroupfs\" or \"systemd\"")?;
    o.cm.cgroup_driver_explicit = i.explicit;
    Ok(())
}

/// A cgroup given as an absolute cgroupfs path (`/`, `/kubelet`); None for "".
/// Its parts become directory names below the cgroup mounts, so each must be one
/// plain path component.
fn cgroup_path(text: &str) -> Result<Option<CgroupName>, InvalidValue> {
    if text.is_empty() {
        return Ok(None);
    }
    let Some(rest) = text.strip_prefix('/') else {
        return Err("must be an absolute cgroup path such as /kubelet".into());
    };
    let parts: Vec<String> = rest
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| {
            crate::safe_path::component(p)
                .map(str::to_string)
                .map_err(|_| InvalidValue::from("must not contain '.' or '..' components"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Some(CgroupName(parts)))
}

/// kubelet's range for `cpuCFSQuotaPeriod` (which it also gates behind
/// `CustomCPUCFSQuotaPeriod`; oxlet has no feature gates).
fn set_cfs_quota_period(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let d = parse_duration(i.text)?;
    o.cm.cpu_cfs_quota_period = d
        .to_std()
        .filter(|d| (MIN_CFS_QUOTA_PERIOD..=MAX_CFS_QUOTA_PERIOD).contains(d))
        .ok_or("must be between 1ms and 1sec, inclusive")?;
    Ok(())
}

const MIN_CFS_QUOTA_PERIOD: std::time::Duration = std::time::Duration::from_millis(1);

const MAX_CFS_QUOTA_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

fn reserved(text: &str) -> Result<Reserved, InvalidValue> {
    Reserved::parse(map_pairs(text, '=')?).map_err(|e| e.to_string().into())
}

/// kubelet's `enforceNodeAllocatable` validation, with its messages.
fn set_enforce_node_allocatable(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let items = list_items(i.text);
    let mut e = NodeAllocatableEnforcement::default();
    let mut seen = Vec::new();
    for &val in &items {
        if seen.contains(&val) {
            return Err(
                format!("duplicated enforcements {val:?} in enforceNodeAllocatable").into(),
            );
        }
        seen.push(val);
        match val {
            "pods" => e.pods = true,
            "system-reserved" | "system-reserved-compressible" => {
                if o.cm.system_reserved_cgroup.is_none() {
                    return Err(format!(
                        "systemReservedCgroup (--system-reserved-cgroup) must be \
                                        specified when {val:?} included in \
                                        enforceNodeAllocatable"
                    )
                    .into());
                }
                if e.system_reserved.is_some() {
                    return Err(
                        "both \"system-reserved\" and \"system-reserved-compressible\" \
                                cannot be specified together in enforceNodeAllocatable"
                            .into(),
                    );
                }
                e.system_reserved = Some(enforced_of(val));
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                if o.cm.kube_reserved_cgroup.is_none() {
                    return Err(format!(
                        "kubeReservedCgroup (--kube-reserved-cgroup) must be \
                                        specified when {val:?} included in \
                                        enforceNodeAllocatable"
                    )
                    .into());
                }
                if e.kube_reserved.is_some() {
                    return Err("both \"kube-reserved\" and \"kube-reserved-compressible\" \
                                cannot be specified together in enforceNodeAllocatable"
                        .into());
                }
                e.kube_reserved = Some(enforced_of(val));
            }
            "none" => {
                if items.len() > 1 {
                    return Err(
                        "enforceNodeAllocatable may not contain additional enforcements \
                                when \"none\" is specified"
                            .into(),
                    );
                }
                continue;
            }
            other => {
                return Err(format!(
                    "option {other:?} specified for enforceNodeAllocatable. Valid options are \
                     \"pods\", \"system-reserved\", \"kube-reserved\", \
                     \"system-reserved-compressible\", \"kube-reserved-compressible\" or \
                     \"none\""
                )
                .into());
            }
        }
        if !o.cm.cgroups_per_qos {
            return Err(format!(
                "cgroupsPerQOS (--cgroups-per-qos) must be set to true when \
                                {val:?} contained in enforceNodeAllocatable"
            )
            .into());
        }
    }
    o.cm.enforce_node_allocatable = e;
    Ok(())
}

/// `*-compressible` limits cpu only; the plain option every reserved resource.
fn enforced_of(option: &str) -> Enforced {
    if option.ends_with("-compressible") {
        Enforced::Compressible
    } else {
        Enforced::All
    }
}

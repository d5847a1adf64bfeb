//! Starting the container manager (kubelet's `NewContainerManager` and `Start`): the
//! cgroup version from the mount, the driver (from the runtime, the configuration or
//! the host's directories; a configured one the runtime contradicts is refused), who
//! makes the cgroups (oxlet's files, or systemd's units over D-Bus), one start-up line
//! that says what was found and why, kubelet's checks of the host (the cgroup root must
//! already exist: `host_checks`), then the `kubepods` tree.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::allocatable::{
    Enforced, NodeAllocatable, NodeAllocatableEnforcement, Reservations, Reserved,
};
use super::driver::{
    self, CgroupDriver, DriverMismatch, SOURCE_CONTAINERD_CONFIG, SOURCE_RUNTIME_CONFIG,
};
use super::fs::{
    CgroupError, CgroupFs, CgroupTree, DbusSystemd, HOST_MOUNT, NotMounted, SystemFeatures,
    SystemdFs,
};
use super::host_checks::{RootRefused, check_host};
use super::manager::{CmConfig, ContainerManager};
use super::name::{CgroupName, NameError};
use super::resources::ResourceConfig;
use super::version::{self, CgroupVersion, VersionError};
use crate::contracts::Thresholds;
use crate::cri::RemoteRuntime;
use crate::logging::STARTUP_TARGET;
use crate::node::NodeInfo;

/// What the container manager starts with: kubelet's configuration fields it reads
/// (the settings room builds this; cm never sees the whole configuration).
pub(crate) struct CmSettings {
    /// `failCgroupV1`.
    pub fail_cgroup_v1: bool,
    /// `failSwapOn`.
    pub fail_swap_on: bool,
    /// `singleProcessOOMKill` and `memorySwap.swapBehavior`, checked against the
    /// cgroup version.
    pub memory: super::MemorySettings,
    /// `protectKernelDefaults`: a kernel tunable off kubelet's value stops the start
    /// (false: it is written).
    pub protect_kernel_defaults: bool,
    /// `cgroupDriver`, and whether it was given rather than defaulted.
    pub cgroup_driver: CgroupDriver,
    pub cgroup_driver_explicit: bool,
    /// `cgroupRoot`.
    pub cgroup_root: CgroupName,
    /// `cgroupsPerQOS`.
    pub cgroups_per_qos: bool,
    /// `cpuCFSQuota` and `cpuCFSQuotaPeriod`.
    pub cpu_cfs_quota: bool,
    pub cpu_cfs_quota_period: Duration,
    /// `podPidsLimit`.
    pub pod_pids_limit: i64,
    /// `kubeReserved`, `systemReserved` and `evictionHard`: what allocatable subtracts.
    pub kube_reserved: Reserved,
    pub system_reserved: Reserved,
    pub eviction_hard: Thresholds,
    /// `enforceNodeAllocatable` with `kubeReservedCgroup` and `systemReservedCgroup`.
    pub enforce_node_allocatable: NodeAllocatableEnforcement,
    pub kube_reserved_cgroup: Option<CgroupName>,
    pub system_reserved_cgroup: Option<CgroupName>,
}

/// Why the container manager cannot start: the agent stops with this one line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CmStartError {
    #[error(transparent)]
    Version(#[from] VersionError),
    #[error(
        "oxlet is configured not to run on a host using cgroup v1 (--fail-cgroupv1 / failCgroupV1), and this host uses {0}"
    )]
    CgroupV1(CgroupVersion),
    /// kubelet's words, with what `/proc/swaps` listed.
    #[error(
        "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false (failSwapOn). /proc/swaps contained: {0:?}"
    )]
    SwapOn(Vec<String>),
    #[error("cannot read /proc/swaps to check for swap (failSwapOn): {0}")]
    Swaps(std::io::Error),
    #[error(transparent)]
    Memory(#[from] super::memory_policy::MemorySettingsError),
    #[error(transparent)]
    Driver(#[from] DriverMismatch),
    /// kubelet's words, each tunable named; under `protectKernelDefaults` the fix is
    /// the host's sysctls, otherwise oxlet could not write them.
    #[error("{0} (protectKernelDefaults: {1})")]
    KernelTunables(super::kernel::TunablesError, bool),
    #[error("--cgroup-root: {0}")]
    Root(NameError),
    /// kubelet's refusal of a cgroup root that is not there or lacks controllers.
    #[error(transparent)]
    RootRefused(Box<RootRefused>),
    /// kubelet's refusal of a v1 host without the controllers it needs.
    #[error(transparent)]
    NotMounted(#[from] NotMounted),
    #[error("cannot create the kubepods cgroups: {0}")]
    Setup(CgroupError),
    /// kubelet's refusal: libcontainer's systemd manager cannot work without systemd.
    #[error(
        "the systemd cgroup driver needs systemd as the init system, and {SYSTEMD_RUNNING} does not exist; \
         use --cgroup-driver=cgroupfs (cgroupDriver) with the runtime's cgroup driver set alike"
    )]
    NoSystemd,
    #[error("cannot start the thread that talks to systemd over D-Bus: {0}")]
    SystemdThread(std::io::Error),
    #[error("{flag}: cannot limit the reserved cgroup {name}: {cause}")]
    Reserved {
        flag: &'static str,
        name: String,
        cause: CgroupError,
    },
}

/// By hand rather than `#[from]`: the message already says the cause once.
impl From<NameError> for CmStartError {
    fn from(e: NameError) -> Self {
        CmStartError::Root(e)
    }
}

/// What the runtime says its cgroup driver is: CRI `RuntimeConfig` where it has one
/// (containerd 2.0, CRI-O), else containerd's own CRI configuration (1.6, 1.7).
async fn runtime_driver(cri: &RemoteRuntime) -> Option<(CgroupDriver, &'static str)> {
    match cri.runtime_config().await {
        Ok(resp) => {
            if let Some(d) = driver::from_runtime_config(&resp) {
                return Some((d, SOURCE_RUNTIME_CONFIG));
            }
        }
        Err(e) if e.code() == Some(tonic::Code::Unimplemented) => {}
        Err(e) => warn!(error = %e, "cannot ask the runtime for its cgroup driver"),
    }
    let status = match cri.verbose_status().await {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "cannot read the runtime's verbose status for its cgroup driver");
            return None;
        }
    };
    let config = status.info.get("config")?;
    match driver::from_containerd_config(config) {
        Ok(d) => Some((d, SOURCE_CONTAINERD_CONFIG)),
        Err(e) => {
            warn!(error = %e, "cannot tell the runtime's cgroup driver from its config");
            None
        }
    }
}

/// Capacity, allocatable and the `kubepods` limits from the node's facts and the
/// reservations (kubelet's node allocatable).
pub(crate) fn node_allocatable(opts: &CmSettings, node: &NodeInfo) -> NodeAllocatable {
    NodeAllocatable::new(
        &node.capacity,
        Reservations {
            kube: &opts.kube_reserved,
            system: &opts.system_reserved,
            eviction_hard: &opts.eviction_hard,
            enforce_pods: opts.enforce_node_allocatable.pods && opts.cgroups_per_qos,
        },
        super::allocatable::pid_max(),
    )
}

/// A reserved cgroup `enforceNodeAllocatable` limits, and to what.
struct ReservedCgroup<'a> {
    flag: &'static str,
    /// `None` when not enforced.
    name: Option<&'a CgroupName>,
    limits: ResourceConfig,
}

/// The reserved cgroups `enforceNodeAllocatable` limits, with their limits (kubelet's
/// `enforceExistingCgroup`: cpu shares, memory and pids of the reservation).
fn reserved_cgroups(opts: &CmSettings) -> Vec<ReservedCgroup<'_>> {
    let limits = |r: &Reserved, how: Option<Enforced>| {
        let cpu = ResourceConfig {
            cpu_shares: r
                .cpu_milli
                .and_then(|m| u64::try_from(super::resources::milli_cpu_to_shares(m)).ok()),
            ..ResourceConfig::default()
        };
        match how {
            Some(Enforced::Compressible) | None => cpu,
            Some(Enforced::All) => ResourceConfig {
                memory_limit: r.memory_bytes,
                pids_limit: r.pids,
                ..cpu
            },
        }
    };
    let e = &opts.enforce_node_allocatable;
    vec![
        ReservedCgroup {
            flag: "--system-reserved-cgroup",
            name: opts
                .system_reserved_cgroup
                .as_ref()
                .filter(|_| e.system_reserved.is_some()),
            limits: limits(&opts.system_reserved, e.system_reserved),
        },
        ReservedCgroup {
            flag: "--kube-reserved-cgroup",
            name: opts
                .kube_reserved_cgroup
                .as_ref()
                .filter(|_| e.kube_reserved.is_some()),
            limits: limits(&opts.kube_reserved, e.kube_reserved),
        },
    ]
}

/// Where the kernel lists the active swap areas.
const PROC_SWAPS: &str = "/proc/swaps";

/// kubelet's swap check: `/proc/swaps` trimmed, more than its header line means swap is
/// on; a missing file means it is off.
fn check_swap(path: &Path) -> Result<(), CmStartError> {
    use std::io::Read as _;
    // The header and one line per swap area: a few KiB even with many.
    let read = std::fs::File::open(path).and_then(|f| {
        let mut text = String::new();
        f.take(64 * 1024).read_to_string(&mut text).map(|_| text)
    });
    let text = match read {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            info!(path = %path.display(), "file does not exist, assuming that swap is disabled");
            return Ok(());
        }
        Err(e) => return Err(CmStartError::Swaps(e)),
    };
    let lines: Vec<String> = text.trim().lines().map(str::to_string).collect();
    if lines.len() > 1 {
        return Err(CmStartError::SwapOn(lines));
    }
    Ok(())
}

/// Detects, decides, logs once and builds the tree. `kubepods` is what node
/// allocatable limits the `kubepods` cgroup to.
pub(crate) async fn start(
    opts: &CmSettings,
    cri: &RemoteRuntime,
    kubepods: ResourceConfig,
) -> Result<Arc<ContainerManager>, CmStartError> {
    let version = version::detect_cgroup_version(Path::new(HOST_MOUNT))?;
    // kubelet's container manager reports 2 only for the unified hierarchy.
    let gauge = if version == version::CgroupVersion::V2 {
        2
    } else {
        1
    };
    crate::metrics::kubelet().cgroup_version.set(gauge.into());
    if opts.fail_cgroup_v1 && version.uses_v1_controllers() {
        return Err(CmStartError::CgroupV1(version));
    }
    super::memory_policy::check_settings(version, &opts.memory)?;
    if opts.fail_swap_on {
        check_swap(Path::new(PROC_SWAPS))?;
    }
    let root_text = opts.cgroup_root.to_cgroupfs()?;
    let reported = runtime_driver(cri).await;
    let guessed = driver::guess(Path::new(HOST_MOUNT), version, &opts.cgroup_root);
    let resolved = driver::resolve(
        opts.cgroup_driver,
        opts.cgroup_driver_explicit,
        reported,
        guessed,
    )?;
    let (manager, how) = cgroup_manager(resolved.driver, version, systemd_running())?;
    info!(
        target: STARTUP_TARGET,
        cgroupVersion = %version,
        cgroupDriver = %resolved.driver,
        cgroupManager = manager.as_str(),
        cgroupRoot = %root_text,
        cgroupsPerQOS = opts.cgroups_per_qos,
        "container manager: cgroup {version}, driver {} ({}); {how}",
        resolved.driver,
        resolved.why
    );
    if let Some(w) = &resolved.warning {
        warn!("{w}");
    }
    let tree = CgroupTree::host(version).map_err(CmStartError::Setup)?;
    // kubelet's order: the cgroup root when the manager is made, then its `setupNode`:
    // the mounted controllers, the kernel tunables, and only then any cgroup.
    let features = check_host(opts, &tree, resolved.driver)?;
    let protect = opts.protect_kernel_defaults;
    super::kernel::setup_kernel_tunables(Path::new(super::kernel::PROC_SYS), protect)
        .map_err(|e| CmStartError::KernelTunables(e, protect))?;
    let fs: Arc<dyn CgroupFs> = match manager {
        CgroupManager::Files => Arc::new(tree),
        CgroupManager::SystemdUnits => {
            let bus = DbusSystemd::start().map_err(CmStartError::SystemdThread)?;
            Arc::new(SystemdFs::new(tree, Arc::new(bus)))
        }
    };
    build(opts, fs, resolved.driver, kubepods, features)
}

/// Where systemd says it runs as the init system (`sd_booted(3)`; runc's
/// `IsRunningSystemd`): a directory, not a link to one.
const SYSTEMD_RUNNING: &str = "/run/systemd/system";

fn systemd_running() -> bool {
    std::fs::symlink_metadata(SYSTEMD_RUNNING).is_ok_and(|m| m.is_dir())
}

/// Who makes the cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CgroupManager {
    /// The cgroupfs driver: oxlet's own files.
    Files,
    /// The systemd driver: each slice a transient unit over D-Bus, its limits unit
    /// properties, as kubelet's libcontainer systemd manager (v2's or v1's).
    SystemdUnits,
}

impl CgroupManager {
    fn as_str(self) -> &'static str {
        match self {
            CgroupManager::Files => "cgroupfs",
            CgroupManager::SystemdUnits => "systemd-dbus",
        }
    }
}

/// Who makes the cgroups, and the reason for the start-up line. The systemd driver
/// without systemd as PID 1 is refused, as kubelet refuses it: the runtime, set to
/// systemd cgroups as the driver must match, could not start a container either, so
/// one line at start says it instead of every sandbox failing. No test on a host
/// without systemd runs the systemd driver this far: they pass `--cgroup-driver=cgroupfs`
/// or are refused earlier for a driver the runtime contradicts.
pub(super) fn cgroup_manager(
    driver: CgroupDriver,
    version: CgroupVersion,
    systemd_running: bool,
) -> Result<(CgroupManager, &'static str), CmStartError> {
    match (driver, systemd_running) {
        (CgroupDriver::Cgroupfs, _) => {
            Ok((CgroupManager::Files, "oxlet writes the cgroup files itself"))
        }
        (CgroupDriver::Systemd, false) => Err(CmStartError::NoSystemd),
        (CgroupDriver::Systemd, true) if version.uses_v1_controllers() => Ok((
            CgroupManager::SystemdUnits,
            "systemd runs as PID 1, so each slice is a systemd unit made over D-Bus with its limits as unit properties (v1's CPUShares and MemoryLimit)",
        )),
        (CgroupDriver::Systemd, true) => Ok((
            CgroupManager::SystemdUnits,
            "systemd runs as PID 1, so each slice is a systemd unit made over D-Bus with its limits as unit properties",
        )),
    }
}

/// The manager on `fs` with the settled driver and what the host allows (see
/// [`check_host`], which comes first): `kubepods` and the QoS cgroups made, then the
/// reserved cgroups `enforceNodeAllocatable` names limited.
pub(super) fn build(
    opts: &CmSettings,
    fs: Arc<dyn CgroupFs>,
    driver: CgroupDriver,
    kubepods: ResourceConfig,
    features: SystemFeatures,
) -> Result<Arc<ContainerManager>, CmStartError> {
    let cfg = CmConfig {
        driver,
        cgroup_root: opts.cgroup_root.clone(),
        cgroups_per_qos: opts.cgroups_per_qos,
        pod: super::resources::PodCgroupSettings {
            cpu_cfs_quota: opts.cpu_cfs_quota,
            cpu_period_us: i64::try_from(opts.cpu_cfs_quota_period.as_micros()).unwrap_or(i64::MAX),
            pod_pids_limit: opts.pod_pids_limit,
        },
        kubepods,
    };
    let mut cm = ContainerManager::new(cfg, fs.clone())?;
    if !features.cpu_hardcapping {
        cm.soft_requirements = Some(super::host_checks::CPU_HARDCAPPING_UNSUPPORTED);
    }
    cm.setup().map_err(CmStartError::Setup)?;
    // `enforceNodeAllocatable: [system-reserved|kube-reserved]`: limit those cgroups,
    // which must already exist (kubelet's `enforceExistingCgroup`).
    for ReservedCgroup { flag, name, limits } in reserved_cgroups(opts) {
        let Some(name) = name else { continue };
        let path = reserved_path(name, driver)?;
        fs.update(&path, &limits)
            .map_err(|cause| CmStartError::Reserved {
                flag,
                name: path.clone(),
                cause,
            })?;
        info!(target: STARTUP_TARGET, cgroup = %path, cpuShares = limits.cpu_shares, memoryLimit = limits.memory_limit, pidsLimit = limits.pids_limit, "limited the {flag} cgroup");
    }
    Ok(Arc::new(cm))
}

/// A reserved cgroup's path as kubelet reads the flag (`cgroupManager.CgroupName`):
/// with the systemd driver `/system.slice` is the slice `system.slice` itself, not a
/// slice named `system.slice` below the root.
fn reserved_path(name: &CgroupName, driver: CgroupDriver) -> Result<String, NameError> {
    CgroupName::parse(driver, &name.to_cgroupfs()?).to_path(driver)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_is_on_when_proc_swaps_lists_an_area() {
        let dir = tempfile::tempdir().unwrap();
        let swaps = dir.path().join("swaps");
        std::fs::write(&swaps, "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n").unwrap();
        assert!(check_swap(&swaps).is_ok());
        std::fs::write(
            &swaps,
            "Filename\tType\tSize\tUsed\tPriority\n/swapfile\tfile\t1048572\t0\t-2\n",
        )
        .unwrap();
        let err = check_swap(&swaps).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "running with swap on is not supported, please disable swap or set --fail-swap-on flag to false"
            ),
            "{err}"
        );
        assert!(err.contains("/swapfile"), "{err}");
        assert!(check_swap(&dir.path().join("absent")).is_ok());
    }

    #[test]
    fn the_systemd_driver_makes_units_and_is_refused_without_systemd() {
        use CgroupVersion::{Hybrid, V1, V2};
        let manager =
            |driver, version, running| cgroup_manager(driver, version, running).map(|(m, _)| m);
        for version in [V1, Hybrid, V2] {
            for running in [false, true] {
                assert_eq!(
                    manager(CgroupDriver::Cgroupfs, version, running).unwrap(),
                    CgroupManager::Files
                );
            }
            let refused = manager(CgroupDriver::Systemd, version, false).unwrap_err();
            let line = refused.to_string();
            assert!(
                line.contains("/run/systemd/system does not exist")
                    && line.contains("--cgroup-driver=cgroupfs"),
                "{line}"
            );
        }
        for version in [V1, Hybrid, V2] {
            assert_eq!(
                manager(CgroupDriver::Systemd, version, true).unwrap(),
                CgroupManager::SystemdUnits
            );
        }
    }

    #[test]
    fn reserved_cgroups_are_read_as_kubelet_reads_them_for_each_driver() {
        let name = |parts: &[&str]| CgroupName(parts.iter().map(|p| (*p).to_string()).collect());
        let system = name(&["system.slice"]);
        assert_eq!(
            reserved_path(&system, CgroupDriver::Systemd).unwrap(),
            "system.slice"
        );
        assert_eq!(
            reserved_path(&system, CgroupDriver::Cgroupfs).unwrap(),
            "system.slice"
        );
        // The last slice names the whole path: its parents follow from it.
        let nested = name(&["kube.slice", "kube-reserved.slice"]);
        assert_eq!(
            reserved_path(&nested, CgroupDriver::Systemd).unwrap(),
            "kube.slice/kube-reserved.slice"
        );
        assert_eq!(
            reserved_path(&name(&["kube", "reserved"]), CgroupDriver::Cgroupfs).unwrap(),
            "kube/reserved"
        );
    }
}

//! [`SystemdFs`]: the systemd cgroup driver, as kubelet runs it through runc's
//! libcontainer systemd manager (`libcontainer/cgroups/systemd/v2.go`, `v1.go`,
//! `common.go`). With systemd as PID 1 the slices below the root are systemd's: when
//! containerd's `SystemdCgroup` scopes make systemd load `kubepods-….slice` as a unit,
//! systemd writes that unit's properties over the cgroup files, and a slice oxlet made
//! with `mkdir` has none, so its limits are lost (`memory.max` back to `max`). So each
//! slice oxlet names is a transient unit, and its limits are unit properties:
//!
//! - create: `StartTransientUnit` (`Wants=` the parent slice, accounting on,
//!   `DefaultDependencies=false`), the job waited for ("UnitExists" is fine, as runc
//!   treats it for kubelet's slices), then the same as update;
//! - update: `SetUnitProperties` (runtime) with the properties of the cgroup version
//!   (v2: `CPUWeight`, `MemoryMax`; v1: `CPUShares`, `MemoryLimit`), then the files
//!   written too by the [`CgroupTree`] (runc's `fsMgr.Set` after the properties): the
//!   exact quota systemd rounds, and the controllers enabled down the path;
//! - remove: `StopUnit` (a unit systemd does not know is fine), `ResetFailedUnit`, then
//!   what is left removed from the filesystem by the tree.
//!
//! A path whose last component is not a slice placed where systemd places it
//! (a container's scope, a reserved cgroup such as `kubelet.slice/kubelet.service`) is
//! not oxlet's unit: it goes to the tree alone, as koordlet writes container cgroups.
//! Reading (`exists`, `children`, `procs`, `resources`, the QoS files) is the tree's.
//! runc's v1 manager freezes a cgroup around `SetUnitProperties` because systemd
//! rewrites device rules disruptively; oxlet sets no device properties (kubelet's pod
//! cgroups skip devices), so there is nothing to freeze for.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use super::qos_files::QosFile;
use super::v2::shares_to_weight;
use super::{CgroupError, CgroupFs, CgroupTree};
use crate::cm::resources::{DEFAULT_CPU_PERIOD_US, ResourceConfig};
use crate::cm::version::CgroupVersion;

/// How long a call and its job may take (runc's job timeout).
pub(crate) const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// The job result that means the job did what was asked.
const JOB_DONE: &str = "done";
/// The suffix of the units oxlet makes.
const SLICE: &str = ".slice";
/// The root slice, parent of a slice at the top of the tree.
const ROOT_SLICE: &str = "-.slice";
/// The first systemd that takes `CPUQuotaPeriodUSec` (runc's check).
const QUOTA_PERIOD_SINCE: u32 = 242;
/// systemd's `USEC_INFINITY` and `CGROUP_LIMIT_MAX`: no limit.
const INFINITY: u64 = u64::MAX;
/// `CPUQuotaPerSecUSec` is kept as a whole percent of a CPU: 10 ms per second.
const QUOTA_STEP_US: u64 = 10_000;

/// A unit property's value, typed as systemd's D-Bus API types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PropValue {
    /// `b`
    Bool(bool),
    /// `t`
    U64(u64),
    /// `s`
    Str(String),
    /// `as`
    Strs(Vec<String>),
}

/// A unit property: its name (`MemoryMax`) and value.
pub(crate) type Property = (&'static str, PropValue);

/// What went wrong on the way to systemd.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BusError {
    /// systemd's error reply: its D-Bus name (`org.freedesktop.systemd1.NoSuchUnit`)
    /// and message.
    #[error("{name}: {message}")]
    Method { name: String, message: String },
    /// The call or its job did not end in time.
    #[error("no answer within {}s", .0.as_secs())]
    Timeout(Duration),
    /// The bus could not be reached, or the connection broke.
    #[error("{0}")]
    Transport(String),
}

impl BusError {
    /// Whether systemd answered with the error `name` (the last part of its D-Bus name).
    fn is(&self, name: &str) -> bool {
        matches!(self, BusError::Method { name: n, .. } if n.rsplit('.').next() == Some(name))
    }
}

/// The calls of systemd's manager (`org.freedesktop.systemd1.Manager`) the driver
/// makes: the one boundary to systemd, a real one over the system bus and a fake in
/// the unit tests. A call that queues a job returns once the job is removed, with its
/// result (`done`, `failed`, `timeout`, `canceled`, `dependency`, `skipped`).
pub(crate) trait SystemdManager: Send + Sync + std::fmt::Debug {
    /// `StartTransientUnit(unit, "replace", props, [])` and its job's result.
    fn start_transient_unit(&self, unit: &str, props: &[Property]) -> Result<String, BusError>;
    /// `SetUnitProperties(unit, runtime = true, props)`.
    fn set_unit_properties(&self, unit: &str, props: &[Property]) -> Result<(), BusError>;
    /// `StopUnit(unit, "replace")` and its job's result.
    fn stop_unit(&self, unit: &str) -> Result<String, BusError>;
    /// `ResetFailedUnit(unit)`.
    fn reset_failed_unit(&self, unit: &str) -> Result<(), BusError>;
    /// The manager's `Version`, as a number (`255` of `"255.4-1"`).
    fn version(&self) -> Result<u32, BusError>;
}

/// The number at the start of systemd's version string (runc's `systemdVersionAtoi`):
/// `"v245.4-1.fc32"`, `"245"` and `"245-1"` are all 245.
pub(crate) fn parse_version(text: &str) -> Option<u32> {
    let text = text.trim_start_matches(['"', 'v']);
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

/// The unit of a cgroup path and its parent slice, when the path is a slice where
/// systemd puts it (libcontainer's `ExpandSlice` of the last component gives the
/// whole path): `a.slice/a-b.slice` is `a-b.slice` in `a.slice`; `a.slice` is in
/// `-.slice`.
pub(crate) fn slice_unit(path: &str) -> Option<(&str, &str)> {
    let parts: Vec<&str> = path.split('/').collect();
    let unit = *parts.last()?;
    let stem = unit.strip_suffix(SLICE)?;
    let mut expanded = Vec::new();
    let mut prefix = String::new();
    for component in stem.split('-') {
        // `a--b.slice`, `-a.slice` and `-.slice` itself are not oxlet's slices.
        if component.is_empty() {
            return None;
        }
        prefix.push_str(component);
        expanded.push(format!("{prefix}{SLICE}"));
        prefix.push('-');
    }
    if expanded != parts {
        return None;
    }
    let parent = match parts.len() {
        1 => ROOT_SLICE,
        n => parts[n - 2],
    };
    Some((unit, parent))
}

/// What runc's `Apply(-1)` asks of a new slice: its description (runc's words, so
/// `systemctl status` reads as on a kubelet node), a `Wants=` on its parent, every
/// accounting on (v1's I/O accounting is `BlockIOAccounting`), and no default
/// dependencies.
pub(crate) fn start_properties(unit: &str, parent: &str, version: CgroupVersion) -> Vec<Property> {
    let io = if version.uses_v1_controllers() {
        "BlockIOAccounting"
    } else {
        "IOAccounting"
    };
    vec![
        (
            "Description",
            PropValue::Str(format!("libcontainer container {unit}")),
        ),
        ("Wants", PropValue::Strs(vec![parent.to_string()])),
        ("MemoryAccounting", PropValue::Bool(true)),
        ("CPUAccounting", PropValue::Bool(true)),
        (io, PropValue::Bool(true)),
        ("TasksAccounting", PropValue::Bool(true)),
        ("DefaultDependencies", PropValue::Bool(false)),
    ]
}

/// runc's `CPUQuotaPerSecUSec` for a quota over a period: µs of CPU per second,
/// rounded up to whole 10 ms (systemd keeps a whole percent, and a child cgroup must
/// still fit the exact quota); none or a negative quota is no limit.
pub(crate) fn quota_per_sec(quota_us: i64, period_us: u64) -> u64 {
    let Ok(quota) = u64::try_from(quota_us) else {
        return INFINITY;
    };
    if quota == 0 || period_us == 0 {
        return INFINITY;
    }
    let per_sec = quota.saturating_mul(1_000_000) / period_us;
    per_sec
        .div_ceil(QUOTA_STEP_US)
        .saturating_mul(QUOTA_STEP_US)
}

/// A limit as systemd takes it: a negative one (oxlet's -1) is `infinity`.
fn limit(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(INFINITY)
}

/// runc's `genV2ResourcesProperties` (`genV1ResourcesProperties` on v1) for what oxlet
/// sets: `CPUWeight` from the shares (v1: `CPUShares` as they are), the quota per
/// second (and `CPUQuotaPeriodUSec` when the period is not the kernel's default and
/// `period_supported`), `MemoryMax` (v1: `MemoryLimit`) and `TasksMax`. `current` fills
/// in a quota or period `res` leaves as it is, so the quota per second is the cgroup's.
pub(crate) fn resource_properties(
    res: &ResourceConfig,
    current: Option<&ResourceConfig>,
    version: CgroupVersion,
    period_supported: bool,
) -> Vec<Property> {
    let v1 = version.uses_v1_controllers();
    let mut props = Vec::new();
    match res.cpu_shares.filter(|s| *s > 0) {
        Some(shares) if v1 => props.push(("CPUShares", PropValue::U64(shares))),
        Some(shares) => props.push(("CPUWeight", PropValue::U64(shares_to_weight(shares)))),
        None => {}
    }
    if res.cpu_quota.is_some() || res.cpu_period.is_some() {
        let default_period = DEFAULT_CPU_PERIOD_US.unsigned_abs();
        let period = res
            .cpu_period
            .or_else(|| current.and_then(|c| c.cpu_period))
            .filter(|p| *p > 0)
            .unwrap_or(default_period);
        let quota = res
            .cpu_quota
            .or_else(|| current.and_then(|c| c.cpu_quota))
            .unwrap_or(-1);
        if period_supported && res.cpu_period.is_some() && period != default_period {
            props.push(("CPUQuotaPeriodUSec", PropValue::U64(period)));
        }
        props.push((
            "CPUQuotaPerSecUSec",
            PropValue::U64(quota_per_sec(quota, period)),
        ));
    }
    if let Some(m) = res.memory_limit {
        let name = if v1 { "MemoryLimit" } else { "MemoryMax" };
        props.push((name, PropValue::U64(limit(m))));
    }
    // runc sets TasksMax for a positive limit or -1; 0 is "not set" in its config.
    if let Some(p) = res.pids_limit.filter(|p| *p != 0) {
        props.push(("TasksMax", PropValue::U64(limit(p))));
    }
    props
}

/// The systemd driver's cgroups (see the module doc).
#[derive(Debug)]
pub(crate) struct SystemdFs {
    tree: CgroupTree,
    bus: Arc<dyn SystemdManager>,
    /// systemd takes `CPUQuotaPeriodUSec` (v242 and later).
    period_supported: bool,
}

impl SystemdFs {
    /// The driver over `tree` (v2, or v1 and hybrid) and systemd's manager. systemd's version is
    /// asked once; unknown, the period stays a file the tree writes.
    pub(crate) fn new(tree: CgroupTree, bus: Arc<dyn SystemdManager>) -> SystemdFs {
        let period_supported = match bus.version() {
            Ok(v) => v >= QUOTA_PERIOD_SINCE,
            Err(e) => {
                warn!(error = %e, "cannot read systemd's version; the CPU quota period is written to the cgroup files only");
                false
            }
        };
        SystemdFs {
            tree,
            bus,
            period_supported,
        }
    }

    /// A failed call, as a cgroup error on `path` naming the unit and systemd's answer.
    fn fail(&self, op: &'static str, path: &str, unit: &str, what: String) -> CgroupError {
        CgroupError {
            op,
            path: self.tree.root().join(path),
            error: io::Error::other(format!("systemd unit {unit}: {what}")),
        }
    }

    /// runc's `startUnit` for a slice: started and its job waited for. A unit that
    /// already exists is kept (runc's `ignoreExist` for kubelet's slices); a failed
    /// job is reset so that systemd forgets it, and reported.
    fn start(&self, path: &str, unit: &str, parent: &str) -> Result<(), CgroupError> {
        match self
            .bus
            .start_transient_unit(unit, &start_properties(unit, parent, self.tree.version()))
        {
            Ok(result) if result == JOB_DONE => {
                debug!(unit = %unit, parent = %parent, "started systemd slice");
                Ok(())
            }
            Err(e) if e.is("UnitExists") => Ok(()),
            Ok(result) => {
                self.reset_failed(unit);
                Err(self.fail(
                    "create",
                    path,
                    unit,
                    format!("StartTransientUnit: job result {result:?}, not \"done\""),
                ))
            }
            Err(e) => {
                if matches!(e, BusError::Timeout(_)) {
                    self.reset_failed(unit);
                }
                Err(self.fail("create", path, unit, format!("StartTransientUnit: {e}")))
            }
        }
    }

    /// runc's `Set`, its first half: the unit's properties (the caller then writes the
    /// files through the tree). A quota or period `res` leaves out is read from the
    /// cgroup, so the quota per second is over the period the cgroup has.
    fn set(
        &self,
        op: &'static str,
        path: &str,
        unit: &str,
        res: &ResourceConfig,
    ) -> Result<(), CgroupError> {
        let needs_current = res.cpu_quota.is_some() != res.cpu_period.is_some();
        let current = needs_current
            .then(|| self.tree.resources(path).ok())
            .flatten();
        let props = resource_properties(
            res,
            current.as_ref(),
            self.tree.version(),
            self.period_supported,
        );
        if !props.is_empty() {
            self.bus
                .set_unit_properties(unit, &props)
                .map_err(|e| self.fail(op, path, unit, format!("SetUnitProperties: {e}")))?;
        }
        Ok(())
    }

    /// runc's `stopUnit`: stopped and its job waited for; a unit systemd does not know
    /// is already stopped; a job that ends otherwise than "done" is only a warning, as
    /// runc's, since what is left is removed from the filesystem next.
    fn stop(&self, path: &str, unit: &str) -> Result<(), CgroupError> {
        let stopped = match self.bus.stop_unit(unit) {
            Ok(result) if result == JOB_DONE => Ok(()),
            Ok(result) => {
                warn!(unit = %unit, jobResult = %result, "stopping a systemd slice did not end \"done\"; removing what is left of its cgroup");
                Ok(())
            }
            Err(e) if e.is("NoSuchUnit") => Ok(()),
            Err(e) => Err(self.fail("remove", path, unit, format!("StopUnit: {e}"))),
        };
        self.reset_failed(unit);
        stopped
    }

    /// Lets systemd forget a failed unit; a unit that is not loaded or not failed is
    /// nothing to reset.
    fn reset_failed(&self, unit: &str) {
        match self.bus.reset_failed_unit(unit) {
            Ok(()) => {}
            Err(e) if e.is("NoSuchUnit") => {}
            Err(e) => debug!(unit = %unit, error = %e, "cannot reset a failed systemd unit"),
        }
    }
}

impl CgroupFs for SystemdFs {
    fn create(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError> {
        if let Some((unit, parent)) = slice_unit(path) {
            self.start(path, unit, parent)?;
            self.set("create", path, unit, res)?;
        }
        // libcontainer's CreateCgroupPath and `fsMgr.Set`: the controllers enabled
        // down the path and the limits written, exactly.
        self.tree.create(path, res)
    }

    fn update(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError> {
        if let Some((unit, _)) = slice_unit(path) {
            // A missing cgroup is the tree's error, before systemd loads a stub unit
            // for a slice nobody started.
            if !self.tree.exists(path) {
                return self.tree.update(path, res);
            }
            self.set("update", path, unit, res)?;
        }
        self.tree.update(path, res)
    }

    fn exists(&self, path: &str) -> bool {
        self.tree.exists(path)
    }

    fn remove(&self, path: &str) -> Result<(), CgroupError> {
        if let Some((unit, _)) = slice_unit(path) {
            self.stop(path, unit)?;
        }
        self.tree.remove(path)
    }

    fn children(&self, path: &str) -> Result<Vec<String>, CgroupError> {
        self.tree.children(path)
    }

    fn procs(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        self.tree.procs(path)
    }

    fn resources(&self, path: &str) -> Result<ResourceConfig, CgroupError> {
        self.tree.resources(path)
    }

    fn memory_usage(&self, path: &str) -> Result<u64, CgroupError> {
        self.tree.memory_usage(path)
    }

    fn keeps_shares(&self) -> bool {
        self.tree.keeps_shares()
    }

    fn read_qos_file(&self, path: &str, file: QosFile) -> Result<Option<String>, CgroupError> {
        self.tree.read_qos_file(path, file)
    }

    fn write_qos_file(&self, path: &str, file: QosFile, value: &str) -> Result<(), CgroupError> {
        self.tree.write_qos_file(path, file, value)
    }
}

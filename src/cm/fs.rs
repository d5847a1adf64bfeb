//! The one boundary to the cgroup filesystem. Paths are relative to the cgroup root
//! and already spelled for the driver (see [`super::name`]). [`CgroupTree`] is the real
//! one, for v1 (and hybrid) and v2; [`SystemdFs`] wraps it for the systemd driver,
//! making each slice a systemd unit over D-Bus ([`DbusSystemd`]) as kubelet does.
//! `validate.rs` reads what kubelet checks before it makes a cgroup: that a given one
//! exists (with its controllers, on v2), and which v1 controllers are mounted.
//!
//! Written on `std::fs` rather than `cgroups-rs`: every path here is checked to stay
//! below the mount without following a symlink, every read is bounded, removal never
//! unlinks on cgroupfs, and the same code runs on a test tree of plain files.

mod event;
mod files;
mod qos_files;
mod stat;
mod stat_reader;
mod systemd;
mod systemd_dbus;
mod tree;
mod v1;
mod v2;
mod validate;

#[cfg(test)]
pub(super) mod fake_systemd;
#[cfg(test)]
mod systemd_dbus_tests;
#[cfg(test)]
mod systemd_tests;
#[cfg(test)]
pub(super) mod tests;

pub(crate) use qos_files::QosFile;
pub(crate) use stat::parse_psi;
pub(crate) use stat_reader::StatReader;
pub(crate) use systemd::SystemdFs;
pub(crate) use systemd_dbus::DbusSystemd;
pub(crate) use tree::{CgroupTree, HOST_MOUNT};
pub(crate) use v2::{shares_to_weight, weight_to_shares};
pub(crate) use validate::{CgroupInvalid, NotMounted, SystemFeatures};

use std::path::PathBuf;

use super::resources::ResourceConfig;

/// A cgroup operation that failed, with the file or directory it failed on.
#[derive(Debug, thiserror::Error)]
/// The I/O error is part of the message (and not a `source`), so a log line with
/// `%e` says everything and a `{:#}` chain says it once.
#[error("cgroup {op} {}: {error}", path.display())]
pub(crate) struct CgroupError {
    pub op: &'static str,
    pub path: PathBuf,
    pub error: std::io::Error,
}

/// Creating, limiting, reading and removing cgroups.
pub(crate) trait CgroupFs: Send + Sync + std::fmt::Debug {
    /// Creates `path` and its missing parents in every hierarchy, then writes `res`.
    fn create(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError>;
    /// Writes `res` to an existing cgroup.
    fn update(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError>;
    /// Whether `path` exists in every hierarchy oxlet limits.
    fn exists(&self, path: &str) -> bool;
    /// Removes `path` and the empty cgroups below it from every hierarchy (children
    /// first); fails while a task is still inside. A missing cgroup is not an error.
    fn remove(&self, path: &str) -> Result<(), CgroupError>;
    /// The names of the cgroups directly below `path`.
    fn children(&self, path: &str) -> Result<Vec<String>, CgroupError>;
    /// The processes in `path` and below.
    fn procs(&self, path: &str) -> Result<Vec<i32>, CgroupError>;
    /// The limits set on `path`, read back.
    fn resources(&self, path: &str) -> Result<ResourceConfig, CgroupError>;
    /// The memory `path` charges now (v1 `memory.usage_in_bytes`, v2 `memory.current`):
    /// what a lower limit is checked against before it is written.
    fn memory_usage(&self, path: &str) -> Result<u64, CgroupError>;
    /// Whether cpu shares read back exactly as written (v1); v2 keeps a weight and
    /// reads back the least shares with it.
    fn keeps_shares(&self) -> bool {
        true
    }
    /// A QoS control file of `path` (koordlet's cpuset and memory QoS files); None
    /// when the kernel does not offer it.
    fn read_qos_file(&self, path: &str, file: QosFile) -> Result<Option<String>, CgroupError>;
    /// Writes a QoS control file of the existing cgroup `path`; `Unsupported` when
    /// the kernel does not offer it.
    fn write_qos_file(&self, path: &str, file: QosFile, value: &str) -> Result<(), CgroupError>;
}

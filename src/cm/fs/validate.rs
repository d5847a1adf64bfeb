//! What kubelet checks of the host's cgroups before it makes any: that a cgroup it is
//! given (the cgroup root) exists with what it needs (its cgroup manager's `Validate`),
//! and that the v1 controllers it needs are mounted (`validateSystemRequirements`).
//! Read from the same files on a test tree and on the host; nothing is written.

use std::io;
use std::path::PathBuf;

use super::CgroupError;
use super::files;
use super::tree::CgroupTree;

/// The controllers kubelet needs a v2 cgroup to be offered (`getSupportedUnifiedControllers`),
/// as far as the host has them at all.
const V2_NEEDED: [&str; 5] = ["cpu", "cpuset", "hugetlb", "memory", "pids"];
/// The v1 hierarchies kubelet looks for an existing cgroup in (its allowlist; hugetlb
/// only when mounted, as every hierarchy here). The others (freezer, devices, blkio …)
/// are not looked at.
const V1_CHECKED: [&str; 7] = [
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "name=systemd",
    "pids",
    "hugetlb",
];
/// The v1 controllers kubelet refuses to start without.
const V1_REQUIRED: [&str; 4] = ["cpu", "cpuacct", "cpuset", "memory"];
/// The files of the cpu hierarchy that CFS quota needs (kubelet's "CPU hardcapping").
const CFS_FILES: [&str; 2] = ["cpu.cfs_period_us", "cpu.cfs_quota_us"];

/// Why an existing cgroup kubelet needs is not usable.
#[derive(Debug)]
pub(crate) enum CgroupInvalid {
    /// v1: the cgroup is not in these hierarchies (the directories looked at).
    MissingPaths(Vec<PathBuf>),
    /// v2: the cgroup's `cgroup.controllers` cannot be read: mostly, it does not exist.
    Unreadable { path: PathBuf, error: io::Error },
    /// v2: the host's `cgroup.controllers` cannot be read (kubelet panics there).
    HostUnreadable { path: PathBuf, error: io::Error },
    /// v2: controllers kubelet needs and the host has, which the cgroup is not offered
    /// (its parent did not enable them), sorted; and what it is offered.
    MissingControllers {
        path: PathBuf,
        missing: Vec<String>,
        offered: Vec<String>,
    },
    /// The path cannot be looked at safely (a symlink or a file on the way).
    Path(CgroupError),
}

impl CgroupInvalid {
    /// kubelet's sentence for it, naming the cgroup as kubelet prints its name (`name`).
    pub(crate) fn sentence(&self, name: &str) -> String {
        let list = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            CgroupInvalid::MissingPaths(paths) => {
                format!("cgroup {name} has some missing paths: {}", list(paths))
            }
            CgroupInvalid::Unreadable { path, error } => format!(
                "could not read controllers for cgroup {name}: {}: {error}",
                path.display()
            ),
            CgroupInvalid::HostUnreadable { path, error } => {
                format!(
                    "cannot read cgroup controllers at {}: {error}",
                    path.display()
                )
            }
            CgroupInvalid::MissingControllers {
                path,
                missing,
                offered,
            } => format!(
                "cgroup {name} has some missing controllers: {} ({} lists {:?})",
                missing.join(", "),
                path.display(),
                offered.join(" ")
            ),
            CgroupInvalid::Path(e) => format!("cgroup {name}: {e}"),
        }
    }

    /// Whether the cgroup is simply not there (rather than there without controllers).
    pub(crate) fn is_missing(&self) -> bool {
        match self {
            CgroupInvalid::MissingPaths(_) => true,
            CgroupInvalid::Unreadable { error, .. } => error.kind() == io::ErrorKind::NotFound,
            _ => false,
        }
    }
}

/// What a valid cgroup was found to be, for the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupFound {
    /// The directories looked at (v1: one per hierarchy checked; v2: the one).
    pub dirs: Vec<PathBuf>,
    /// v2: the controllers it is offered (its `cgroup.controllers`); v1: none.
    pub controllers: Vec<String>,
}

/// What the mounted hierarchies allow (kubelet's `features`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SystemFeatures {
    /// CFS quota can be set: always on v2; on v1 when the cpu hierarchy has its files.
    pub cpu_hardcapping: bool,
}

/// v1 controllers kubelet needs that no hierarchy holds, in its words
/// (`system validation failed - Following Cgroup subsystem not mounted: [...]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "system validation failed - Following Cgroup subsystem not mounted: [{}]",
    .0.join(" ")
)]
pub(crate) struct NotMounted(pub Vec<String>);

/// The error for a missing file or cgroup, in the words kubelet's message carries.
fn not_found() -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "no such file or directory")
}

impl CgroupTree {
    /// Whether the existing cgroup `rel` (spelled for the driver; empty is the root) is
    /// one kubelet would run below: on v1 a directory in every hierarchy it checks, on
    /// v2 offered every controller it needs that the host has. Nothing is created.
    pub(crate) fn validate(&self, rel: &str) -> Result<CgroupFound, CgroupInvalid> {
        if self.version().uses_v1_controllers() {
            self.validate_v1(rel)
        } else {
            self.validate_v2(rel)
        }
    }

    fn validate_v1(&self, rel: &str) -> Result<CgroupFound, CgroupInvalid> {
        let mut dirs = Vec::new();
        let mut missing = Vec::new();
        let checked = self.hierarchies().iter().filter(|h| {
            h.create
                && h.controllers
                    .iter()
                    .any(|c| V1_CHECKED.contains(&c.as_str()))
        });
        for h in checked {
            let dir = self
                .dir_in("validate", h, rel)
                .map_err(CgroupInvalid::Path)?;
            if files::is_dir(&dir) {
                dirs.push(dir);
            } else {
                missing.push(dir);
            }
        }
        if !missing.is_empty() {
            return Err(CgroupInvalid::MissingPaths(missing));
        }
        Ok(CgroupFound {
            dirs,
            controllers: Vec::new(),
        })
    }

    fn validate_v2(&self, rel: &str) -> Result<CgroupFound, CgroupInvalid> {
        let h = &self.hierarchies()[0];
        let read = |dir: &std::path::Path| {
            let path = dir.join("cgroup.controllers");
            match files::read_opt(dir, "cgroup.controllers") {
                Ok(Some(text)) => Ok(text
                    .split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()),
                Ok(None) => Err((path, not_found())),
                Err(e) => Err((path, e.error)),
            }
        };
        let host =
            read(&h.dir).map_err(|(path, error)| CgroupInvalid::HostUnreadable { path, error })?;
        let dir = self
            .dir_in("validate", h, rel)
            .map_err(CgroupInvalid::Path)?;
        // A missing cgroup has no `cgroup.controllers`: kubelet's words for it too.
        let offered =
            read(&dir).map_err(|(path, error)| CgroupInvalid::Unreadable { path, error })?;
        let missing: Vec<String> = V2_NEEDED
            .iter()
            .filter(|c| host.iter().any(|o| o == *c) && !offered.iter().any(|o| o == *c))
            .map(|c| (*c).to_string())
            .collect();
        if !missing.is_empty() {
            return Err(CgroupInvalid::MissingControllers {
                path: dir.join("cgroup.controllers"),
                missing,
                offered,
            });
        }
        Ok(CgroupFound {
            dirs: vec![dir],
            controllers: offered,
        })
    }

    /// kubelet's `validateSystemRequirements`: on v1 the cpu, cpuacct, cpuset and
    /// memory controllers mounted (else refused), and CFS quota when the cpu hierarchy
    /// has its files; v2 needs nothing here (the cgroup root's controllers are checked
    /// by [`CgroupTree::validate`]).
    pub(crate) fn system_features(&self) -> Result<SystemFeatures, NotMounted> {
        if !self.version().uses_v1_controllers() {
            return Ok(SystemFeatures {
                cpu_hardcapping: true,
            });
        }
        let missing: Vec<String> = V1_REQUIRED
            .iter()
            .filter(|c| self.controller(c).is_none())
            .map(|c| (*c).to_string())
            .collect();
        if !missing.is_empty() {
            return Err(NotMounted(missing));
        }
        let cpu_hardcapping = self.controller("cpu").is_some_and(|h| {
            CFS_FILES
                .iter()
                .all(|f| std::fs::symlink_metadata(h.dir.join(f)).is_ok_and(|m| m.is_file()))
        });
        Ok(SystemFeatures { cpu_hardcapping })
    }
}

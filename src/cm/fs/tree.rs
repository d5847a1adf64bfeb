//! [`CgroupTree`]: the real [`CgroupFs`] for one cgroup mount, with the hierarchies
//! found below it (v1: one mount per controller; v2: the mount itself).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use super::files::{self, err};
use super::qos_files::{self, QosFile};
use super::{CgroupError, CgroupFs, v1, v2};
use crate::cm::resources::ResourceConfig;
use crate::cm::version::CgroupVersion;

/// Where the host's cgroups are mounted.
pub(crate) const HOST_MOUNT: &str = "/sys/fs/cgroup";
const MOUNTINFO: &str = "/proc/self/mountinfo";
/// The largest mount table read.
const MAX_MOUNTINFO_BYTES: u64 = 4 * 1024 * 1024;
/// The hybrid layout's cgroup2 mount: runc puts container cgroups there too.
const UNIFIED: &str = "unified";
/// `CGROUP_SUPER_MAGIC` and `CGROUP2_SUPER_MAGIC` from `linux/magic.h`.
const CGROUP_MAGICS: [u64; 2] = [0x0027_e0eb, 0x6367_7270];

/// One cgroup hierarchy: a v1 controller mount, or the v2 unified mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hierarchy {
    pub dir: PathBuf,
    /// The controllers (v1 mount options such as `cpu`, `cpuacct`, `name=systemd`).
    pub controllers: Vec<String>,
    /// oxlet creates its cgroups here (all v1 hierarchies; not hybrid's `unified`,
    /// which it only cleans up after runc).
    pub create: bool,
    /// A kernel cgroup filesystem, not a test tree of plain files.
    pub kernel: bool,
}

/// The cgroups below one mount root, written as `version` lays them out.
#[derive(Debug, Clone)]
pub(crate) struct CgroupTree {
    root: PathBuf,
    version: CgroupVersion,
    hierarchies: Vec<Hierarchy>,
}

fn is_kernel(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|s| {
        #[allow(clippy::cast_sign_loss, clippy::unnecessary_cast)]
        let magic = s.f_type as u64 & 0xffff_ffff;
        CGROUP_MAGICS.contains(&magic)
    })
}

impl CgroupTree {
    /// The host's cgroups at [`HOST_MOUNT`].
    pub(crate) fn host(version: CgroupVersion) -> Result<CgroupTree, CgroupError> {
        CgroupTree::new(Path::new(HOST_MOUNT), version)
    }

    /// The tree at `root`. v1 and hybrid: the cgroup mounts below `root` in the mount
    /// table, or, when there are none (a test tree), the directories below `root`, each
    /// named by its controllers (`cpu`, `cpu,cpuacct`, `memory`, …). v2: `root` itself.
    pub(crate) fn new(root: &Path, version: CgroupVersion) -> Result<CgroupTree, CgroupError> {
        let hierarchies = if version.uses_v1_controllers() {
            let text = std::fs::File::open(MOUNTINFO)
                .and_then(|f| {
                    let mut text = Vec::new();
                    io::Read::read_to_end(&mut io::Read::take(f, MAX_MOUNTINFO_BYTES), &mut text)?;
                    Ok(text)
                })
                .map_err(|e| err("read", Path::new(MOUNTINFO), e))?;
            let mounted = v1_mounts(&text, root, version);
            if mounted.is_empty() {
                v1_dirs(root, version)?
            } else {
                mounted
            }
        } else {
            vec![Hierarchy {
                dir: root.to_path_buf(),
                controllers: Vec::new(),
                create: true,
                kernel: is_kernel(root),
            }]
        };
        if hierarchies.is_empty() {
            return Err(err(
                "open",
                root,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "no cgroup hierarchy below the cgroup root",
                ),
            ));
        }
        Ok(CgroupTree {
            root: root.to_path_buf(),
            version,
            hierarchies,
        })
    }

    /// The layout this tree was read as.
    pub(crate) fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The mount root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The file `name` of the cgroup `rel` (below the mount, `""` the root): in the
    /// hierarchy holding `controller` on v1, in the one directory on v2. None when that
    /// controller is not mounted or `rel` is no cgroup path (readers beside the
    /// container manager, which read files it does not: `io.stat`, `cgroup.procs`).
    pub(crate) fn file_of(&self, controller: &str, rel: &str, name: &str) -> Option<PathBuf> {
        let dir = if self.version.uses_v1_controllers() {
            self.controller_dir("read", controller, rel).ok()?
        } else {
            self.dir_in("read", &self.hierarchies[0], rel).ok()?
        };
        Some(dir.join(name))
    }

    pub(super) fn hierarchies(&self) -> &[Hierarchy] {
        &self.hierarchies
    }

    /// The hierarchy holding `controller` (v1), if it is mounted.
    pub(super) fn controller(&self, controller: &str) -> Option<&Hierarchy> {
        self.hierarchies
            .iter()
            .find(|h| h.create && h.controllers.iter().any(|c| c == controller))
    }

    /// The directory of the cgroup `rel` in `hierarchy`, checked (see [`files::join`]).
    pub(super) fn dir_in(
        &self,
        op: &'static str,
        hierarchy: &Hierarchy,
        rel: &str,
    ) -> Result<PathBuf, CgroupError> {
        let parts = files::parts(op, &hierarchy.dir, rel)?;
        files::join(op, &hierarchy.dir, &parts)
    }

    /// The directory of `rel` in the hierarchy holding `controller`; an error naming the
    /// controller when it is not mounted.
    pub(super) fn controller_dir(
        &self,
        op: &'static str,
        controller: &str,
        rel: &str,
    ) -> Result<PathBuf, CgroupError> {
        let Some(h) = self.controller(controller) else {
            return Err(err(
                op,
                &self.root,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("the {controller} controller is not mounted"),
                ),
            ));
        };
        self.dir_in(op, h, rel)
    }

    /// The v1 directories of `rel` in each hierarchy oxlet limits (cpu, memory, pids),
    /// or the v2 directory.
    fn limited_dirs(&self, op: &'static str, rel: &str) -> Result<Vec<PathBuf>, CgroupError> {
        if !self.version.uses_v1_controllers() {
            return Ok(vec![self.dir_in(op, &self.hierarchies[0], rel)?]);
        }
        ["cpu", "memory", "pids"]
            .iter()
            .filter_map(|c| self.controller(c))
            .map(|h| self.dir_in(op, h, rel))
            .collect()
    }
}

/// The cgroup v1 mounts directly below `root` (and hybrid's `unified`), from the
/// mount table: `… <mount point> … - cgroup <source> rw,cpu,cpuacct`.
fn v1_mounts(mountinfo: &[u8], root: &Path, version: CgroupVersion) -> Vec<Hierarchy> {
    let mut found: Vec<Hierarchy> = Vec::new();
    for m in crate::procfs::parse_mountinfo(mountinfo) {
        if m.point.parent() != Some(root) || found.iter().any(|h| h.dir == m.point) {
            continue;
        }
        let unified = m.fs_type == "cgroup2" && version == CgroupVersion::Hybrid;
        if m.fs_type != "cgroup" && !unified {
            continue;
        }
        found.push(Hierarchy {
            dir: m.point,
            controllers: m.super_options.split(',').map(str::to_string).collect(),
            create: !unified,
            kernel: true,
        });
    }
    found
}

/// A test tree's hierarchies: the directories below `root`, named by their controllers.
fn v1_dirs(root: &Path, version: CgroupVersion) -> Result<Vec<Hierarchy>, CgroupError> {
    Ok(files::subdirs(root)?
        .into_iter()
        .map(|name| {
            let dir = root.join(&name);
            let unified = name == UNIFIED && version == CgroupVersion::Hybrid;
            let controllers = if name == "systemd" {
                vec!["name=systemd".to_string()]
            } else {
                name.split(',').map(str::to_string).collect()
            };
            Hierarchy {
                kernel: is_kernel(&dir),
                dir,
                controllers,
                create: !unified,
            }
        })
        .collect())
}

impl CgroupFs for CgroupTree {
    fn keeps_shares(&self) -> bool {
        self.version() != CgroupVersion::V2
    }

    fn create(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError> {
        if path.is_empty() {
            return Err(err(
                "create",
                &self.root,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the root cgroup is not oxlet's to create",
                ),
            ));
        }
        if self.version.uses_v1_controllers() {
            v1::create(self, path)?;
        } else {
            v2::create(self, path, res)?;
        }
        self.update(path, res)
    }

    fn update(&self, path: &str, res: &ResourceConfig) -> Result<(), CgroupError> {
        if self.version.uses_v1_controllers() {
            v1::update(self, path, res)
        } else {
            v2::update(self, path, res)
        }
    }

    fn exists(&self, path: &str) -> bool {
        self.limited_dirs("exists", path)
            .is_ok_and(|dirs| !dirs.is_empty() && dirs.iter().all(|d| files::is_dir(d)))
    }

    fn remove(&self, path: &str) -> Result<(), CgroupError> {
        if path.is_empty() {
            return Err(err(
                "remove",
                &self.root,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the root cgroup is never removed",
                ),
            ));
        }
        // Every hierarchy: runc creates container cgroups in all of them (freezer,
        // devices, systemd, hybrid's unified …). Try them all, report the first failure.
        let mut first = None;
        for h in &self.hierarchies {
            let result = self
                .dir_in("remove", h, path)
                .and_then(|dir| files::remove_tree(&dir, h.kernel));
            if let Err(e) = result {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn children(&self, path: &str) -> Result<Vec<String>, CgroupError> {
        let mut names = BTreeSet::new();
        for dir in self.limited_dirs("list", path)? {
            names.extend(files::subdirs(&dir)?);
        }
        Ok(names.into_iter().collect())
    }

    fn procs(&self, path: &str) -> Result<Vec<i32>, CgroupError> {
        // kubelet's Pids: every hierarchy, every cgroup below.
        let mut pids = BTreeSet::new();
        for h in &self.hierarchies {
            files::procs_below(&self.dir_in("procs", h, path)?, &mut pids)?;
        }
        Ok(pids.into_iter().collect())
    }

    fn resources(&self, path: &str) -> Result<ResourceConfig, CgroupError> {
        if self.version.uses_v1_controllers() {
            v1::resources(self, path)
        } else {
            v2::resources(self, path)
        }
    }

    fn memory_usage(&self, path: &str) -> Result<u64, CgroupError> {
        let (controller, name) = if self.version.uses_v1_controllers() {
            ("memory", "memory.usage_in_bytes")
        } else {
            ("", "memory.current")
        };
        let dir = if controller.is_empty() {
            self.dir_in("read", &self.hierarchies[0], path)?
        } else {
            self.controller_dir("read", controller, path)?
        };
        let dir = files::existing("read", dir)?;
        let text = files::read_opt(&dir, name)?.ok_or_else(|| {
            err(
                "read",
                &dir.join(name),
                io::Error::new(io::ErrorKind::NotFound, "no memory usage file"),
            )
        })?;
        files::parse_u64(&dir.join(name), &text)
    }

    fn read_qos_file(&self, path: &str, file: QosFile) -> Result<Option<String>, CgroupError> {
        qos_files::read(self, path, file)
    }

    fn write_qos_file(&self, path: &str, file: QosFile, value: &str) -> Result<(), CgroupError> {
        qos_files::write(self, path, file, value)
    }
}

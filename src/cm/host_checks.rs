//! kubelet's start-up checks of the host's cgroups, before oxlet makes any. The cgroup
//! root must already exist, with the controllers kubelet needs on v2 (kubelet's
//! `NewContainerManager`, with `cgroupsPerQOS`: its cgroup manager's `Validate`, then
//! `invalid configuration: …`); kubelet never creates it, so neither does oxlet. On v1
//! the cpu, cpuacct, cpuset and memory controllers must be mounted, and CFS quota is a
//! soft requirement that the node's Ready condition reports (`setupNode`:
//! `validateSystemRequirements`).

use tracing::{info, warn};

use super::driver::CgroupDriver;
use super::fs::{CgroupInvalid, CgroupTree, SystemFeatures};
use super::name::CgroupName;
use super::startup::{CmSettings, CmStartError};
use crate::logging::STARTUP_TARGET;

/// kubelet's soft requirement when CFS quota cannot be set: appended to the Ready
/// condition's message as `WARNING: …`.
pub(crate) const CPU_HARDCAPPING_UNSUPPORTED: &str = "CPU hardcapping unsupported";

/// A cgroup root kubelet would refuse: not there, or (v2) without the controllers it
/// needs. The message is kubelet's, with the setting and the path looked at.
#[derive(Debug)]
pub(crate) struct RootRefused {
    /// The setting's value, as given (`/kubelet`).
    root: String,
    /// Its spelling with the systemd driver (`kubelet.slice`), when it differs.
    spelled: Option<String>,
    /// The name as kubelet prints it (`["kubelet"]`).
    name: String,
    problem: CgroupInvalid,
}

impl std::fmt::Display for RootRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid configuration: {} (--cgroup-root / cgroupRoot {:?}",
            self.problem.sentence(&self.name),
            self.root
        )?;
        if let Some(s) = &self.spelled {
            write!(f, ", {s} with the systemd cgroup driver")?;
        }
        f.write_str(")")?;
        if self.problem.is_missing() {
            f.write_str(
                "; like kubelet, oxlet does not create its cgroup root: it must exist before \
                 oxlet starts, made by the node's service manager (a systemd slice) or its set-up",
            )?;
        } else if matches!(self.problem, CgroupInvalid::MissingControllers { .. }) {
            f.write_str(
                "; like kubelet, oxlet needs them offered there: its parent must enable them in \
                 its cgroup.subtree_control before oxlet starts",
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for RootRefused {}

/// A cgroup name as kubelet prints it (Go's `%q` of its components): `["kubelet"]`,
/// `[]` for the root.
fn kubelet_name(name: &CgroupName) -> String {
    let parts: Vec<String> = name.0.iter().map(|p| format!("{p:?}")).collect();
    format!("[{}]", parts.join(" "))
}

/// Checks the host as kubelet does before it makes a cgroup: the cgroup root (with
/// `cgroupsPerQOS`; `/` always passes), spelled for `driver`, then the mounted
/// controllers. Returns what they allow; says each finding at start.
pub(super) fn check_host(
    opts: &CmSettings,
    tree: &CgroupTree,
    driver: CgroupDriver,
) -> Result<SystemFeatures, CmStartError> {
    if opts.cgroups_per_qos {
        check_root(&opts.cgroup_root, tree, driver)?;
    }
    let features = tree.system_features()?;
    if !features.cpu_hardcapping {
        warn!(
            cpuCFSQuota = opts.cpu_cfs_quota,
            "{CPU_HARDCAPPING_UNSUPPORTED}: the cpu hierarchy has no cpu.cfs_period_us and \
             cpu.cfs_quota_us, so CPU limits cannot be enforced as CFS quota (--cpu-cfs-quota / \
             cpuCFSQuota); the node's Ready condition says so, as kubelet's does"
        );
    }
    Ok(features)
}

/// kubelet's `Validate` of the cgroup root, with its refusal and its start-up line.
fn check_root(
    root: &CgroupName,
    tree: &CgroupTree,
    driver: CgroupDriver,
) -> Result<(), CmStartError> {
    let rel = root.to_path(driver)?;
    let text = root.to_cgroupfs()?;
    let name = kubelet_name(root);
    match tree.validate(&rel) {
        Ok(found) => {
            let dirs: Vec<String> = found.dirs.iter().map(|d| d.display().to_string()).collect();
            let offered = if found.controllers.is_empty() {
                String::new()
            } else {
                format!(", offered {}", found.controllers.join(" "))
            };
            info!(
                target: STARTUP_TARGET,
                cgroupRoot = %name,
                "container manager verified the cgroup root {text:?} exists: {}{offered}",
                dirs.join(", ")
            );
            Ok(())
        }
        Err(problem) => Err(CmStartError::RootRefused(Box::new(RootRefused {
            spelled: (rel != text.trim_start_matches('/')).then(|| rel.clone()),
            root: text,
            name,
            problem,
        }))),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cm::version::CgroupVersion;

    fn write(path: impl AsRef<Path>, text: &str) {
        std::fs::write(path.as_ref(), text).unwrap();
    }

    /// The settings with `root` as the cgroup root (kind's, otherwise).
    fn settings(root: &str) -> CmSettings {
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kind/config.yaml");
        let opts = crate::options::load([
            "oxlet",
            "--config",
            config.to_str().unwrap(),
            &format!("--cgroup-root={root}"),
        ])
        .unwrap_or_else(|e| panic!("{e:?}"));
        opts.cm_settings()
    }

    /// A v2 mount as the kernel shows it: `host` at the root, and `cgroups` below it,
    /// each offered what is given.
    fn v2_tree(host: &str, cgroups: &[(&str, &str)]) -> (tempfile::TempDir, CgroupTree) {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path().join("cgroup.controllers"), &format!("{host}\n"));
        for (cg, offered) in cgroups {
            let d = dir.path().join(cg);
            std::fs::create_dir_all(&d).unwrap();
            write(d.join("cgroup.controllers"), &format!("{offered}\n"));
        }
        let tree = CgroupTree::new(dir.path(), CgroupVersion::V2).unwrap();
        (dir, tree)
    }

    /// A v1 (hybrid) layout, one directory per hierarchy, with the CFS files; `roots`
    /// made in the hierarchies named (all of them for `"*"`).
    fn v1_tree(hierarchies: &[&str], roots: &[(&str, &str)]) -> (tempfile::TempDir, CgroupTree) {
        let dir = tempfile::tempdir().unwrap();
        for h in hierarchies {
            std::fs::create_dir(dir.path().join(h)).unwrap();
        }
        if let Some(cpu) = hierarchies
            .iter()
            .find(|h| h.split(',').any(|c| c == "cpu"))
        {
            write(dir.path().join(cpu).join("cpu.cfs_period_us"), "100000\n");
            write(dir.path().join(cpu).join("cpu.cfs_quota_us"), "-1\n");
        }
        for (root, only) in roots {
            for h in hierarchies.iter().filter(|h| *only == "*" || **h == *only) {
                std::fs::create_dir_all(dir.path().join(h).join(root)).unwrap();
            }
        }
        let tree = CgroupTree::new(dir.path(), CgroupVersion::Hybrid).unwrap();
        (dir, tree)
    }

    const HOST_V1: [&str; 8] = [
        "cpu,cpuacct",
        "cpuset",
        "memory",
        "pids",
        "freezer",
        "devices",
        "systemd",
        "unified",
    ];
    const ALL: &str = "cpuset cpu io memory hugetlb pids rdma misc";

    fn refused(opts: &CmSettings, tree: &CgroupTree, driver: CgroupDriver) -> String {
        let e = check_host(opts, tree, driver).unwrap_err();
        assert!(matches!(e, CmStartError::RootRefused(_)), "{e}");
        e.to_string()
    }

    #[test]
    fn a_missing_root_is_refused_on_v2_with_either_driver() {
        let (dir, tree) = v2_tree(ALL, &[("system.slice", ALL)]);
        let line = refused(&settings("/kubelet"), &tree, CgroupDriver::Systemd);
        let path = dir.path().join("kubelet.slice/cgroup.controllers");
        assert!(
            line.starts_with(&format!(
                "invalid configuration: could not read controllers for cgroup [\"kubelet\"]: {}: ",
                path.display()
            )),
            "{line}"
        );
        assert!(
            line.contains("(--cgroup-root / cgroupRoot \"/kubelet\", kubelet.slice with the systemd cgroup driver)")
                && line.contains("oxlet does not create its cgroup root"),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
        let line = refused(&settings("/kubelet"), &tree, CgroupDriver::Cgroupfs);
        assert!(
            line.contains(&format!(
                "{}: ",
                dir.path().join("kubelet/cgroup.controllers").display()
            )) && line.contains("(--cgroup-root / cgroupRoot \"/kubelet\")"),
            "{line}"
        );
        // Nothing was made.
        assert!(!dir.path().join("kubelet.slice").exists());
        assert!(!dir.path().join("kubelet").exists());
        // The other driver's spelling does not count.
        let (_dir, tree) = v2_tree(ALL, &[("kubelet", ALL)]);
        refused(&settings("/kubelet"), &tree, CgroupDriver::Systemd);
    }

    #[test]
    fn a_missing_root_is_refused_on_v1_naming_each_missing_hierarchy() {
        let (dir, tree) = v1_tree(&HOST_V1, &[("oxlet", "memory")]);
        let line = refused(&settings("/oxlet"), &tree, CgroupDriver::Cgroupfs);
        let missing: Vec<String> = ["cpu,cpuacct", "cpuset", "pids", "systemd"]
            .iter()
            .map(|h| dir.path().join(h).join("oxlet").display().to_string())
            .collect();
        assert!(
            line.starts_with(&format!(
                "invalid configuration: cgroup [\"oxlet\"] has some missing paths: {} (--cgroup-root / cgroupRoot \"/oxlet\");",
                missing.join(", ")
            )),
            "{line}"
        );
        // Hierarchies kubelet does not look at, and hybrid's unified, are not named.
        for h in ["freezer", "devices", "unified", "memory"] {
            assert!(!line.contains(&format!("/{h}/")), "{h}: {line}");
        }
        // With the systemd driver, the slice is looked for.
        let line = refused(&settings("/oxlet"), &tree, CgroupDriver::Systemd);
        assert!(
            line.contains(&dir.path().join("cpuset/oxlet.slice").display().to_string())
                && line.contains(", oxlet.slice with the systemd cgroup driver)"),
            "{line}"
        );
        assert!(!dir.path().join("cpuset/oxlet").exists());
    }

    #[test]
    fn a_v2_root_without_a_needed_controller_is_refused_naming_it() {
        // What systemd alone enables at the root: no cpuset, no hugetlb.
        let (_dir, tree) = v2_tree(ALL, &[("kubelet.slice", "cpu io memory pids")]);
        let line = refused(&settings("/kubelet"), &tree, CgroupDriver::Systemd);
        assert!(
            line.contains("cgroup [\"kubelet\"] has some missing controllers: cpuset, hugetlb (")
                && line.contains("lists \"cpu io memory pids\"")
                && line.contains("its parent must enable them in its cgroup.subtree_control"),
            "{line}"
        );
        // A controller the host lacks is not needed (kubelet intersects with the root's).
        let (_dir, tree) = v2_tree(
            "cpuset cpu io memory pids",
            &[("kubelet.slice", "cpuset cpu memory pids")],
        );
        check_host(&settings("/kubelet"), &tree, CgroupDriver::Systemd).unwrap();
        let (_dir, tree) = v2_tree(ALL, &[("kubelet.slice", "cpuset cpu memory hugetlb")]);
        let line = refused(&settings("/kubelet"), &tree, CgroupDriver::Systemd);
        assert!(
            line.contains("has some missing controllers: pids ("),
            "{line}"
        );
    }

    #[test]
    fn an_existing_root_is_accepted_and_the_root_always_is() {
        let (_dir, tree) = v2_tree(ALL, &[("kubelet.slice", ALL)]);
        let f = check_host(&settings("/kubelet"), &tree, CgroupDriver::Systemd).unwrap();
        assert!(f.cpu_hardcapping);
        let (_dir, tree) = v2_tree(ALL, &[("kubelet", ALL)]);
        check_host(&settings("/kubelet"), &tree, CgroupDriver::Cgroupfs).unwrap();
        let (_dir, tree) = v2_tree(ALL, &[]);
        for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            check_host(&settings("/"), &tree, driver).unwrap();
        }
        let (_dir, tree) = v1_tree(&HOST_V1, &[("oxlet", "*"), ("oxlet.slice", "*")]);
        for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            let f = check_host(&settings("/oxlet"), &tree, driver).unwrap();
            assert!(f.cpu_hardcapping);
            check_host(&settings("/"), &tree, driver).unwrap();
        }
        // Without cgroupsPerQOS kubelet does not look at the root.
        let (_dir, tree) = v2_tree(ALL, &[]);
        let mut opts = settings("/kubelet");
        opts.cgroups_per_qos = false;
        check_host(&opts, &tree, CgroupDriver::Systemd).unwrap();
    }

    #[test]
    fn a_symlinked_root_is_never_followed() {
        let (dir, tree) = v2_tree(ALL, &[("real", ALL)]);
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("kubelet")).unwrap();
        let line = refused(&settings("/kubelet"), &tree, CgroupDriver::Cgroupfs);
        assert!(line.contains("symlink"), "{line}");
    }

    #[test]
    fn v1_needs_cpu_cpuacct_cpuset_and_memory_mounted_and_cfs_quota_is_soft() {
        let (_dir, tree) = v1_tree(&["cpu,cpuacct", "memory", "pids"], &[("oxlet", "*")]);
        let e = check_host(&settings("/oxlet"), &tree, CgroupDriver::Cgroupfs).unwrap_err();
        assert_eq!(
            e.to_string(),
            "system validation failed - Following Cgroup subsystem not mounted: [cpuset]"
        );
        let (dir, tree) = v1_tree(&HOST_V1, &[("oxlet", "*")]);
        std::fs::remove_file(dir.path().join("cpu,cpuacct/cpu.cfs_quota_us")).unwrap();
        let f = check_host(&settings("/oxlet"), &tree, CgroupDriver::Cgroupfs).unwrap();
        assert!(!f.cpu_hardcapping);
    }
}

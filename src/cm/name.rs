//! A cgroup's name independent of the driver (kubelet's `CgroupName`): a list of
//! components such as `["kubepods", "burstable", "pod<uid>"]`, and its spelling for each
//! driver (kubelet's `pkg/kubelet/cm/cgroup_manager_linux.go`).
//!
//! Pod UIDs reach these names, so every component is checked before it is spelled: the
//! spelling is later joined below the cgroup mount by a daemon running as root.

use super::driver::CgroupDriver;
use crate::safe_path;

/// The components of a cgroup name, outermost first; empty is the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CgroupName(pub Vec<String>);

/// The prefix of a pod cgroup's last component (kubelet's `podCgroupNamePrefix`).
pub(crate) const POD_PREFIX: &str = "pod";
/// systemd's unit suffix for the slices the systemd driver names.
const SLICE_SUFFIX: &str = ".slice";

/// A cgroup name that cannot be spelled safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameError {
    /// Empty, `.`, `..`, or containing `/` or NUL: it would not stay one directory.
    #[error("cgroup name component {0:?} is not a single path component")]
    NotAComponent(String),
    /// kubelet forbids `_`: the systemd driver spells `-` as `_`, and must be reversible.
    #[error("cgroup name component {0:?} contains '_' (reserved for the systemd spelling of '-')")]
    Underscore(String),
}

/// Checks one component with kubelet's rule (`NewCgroupName`) and the path rule.
fn check(part: &str) -> Result<&str, NameError> {
    safe_path::component(part).map_err(|_| NameError::NotAComponent(part.to_string()))?;
    if part.contains('_') {
        return Err(NameError::Underscore(part.to_string()));
    }
    Ok(part)
}

impl CgroupName {
    /// The name one level below this one. Unchecked: the spellings below check.
    pub(crate) fn child(&self, part: &str) -> CgroupName {
        let mut parts = self.0.clone();
        parts.push(part.to_string());
        CgroupName(parts)
    }

    /// The name one level below this one, refusing a component that cannot be spelled.
    pub(crate) fn try_child(&self, part: &str) -> Result<CgroupName, NameError> {
        check(part)?;
        Ok(self.child(part))
    }

    /// A pod's cgroup below `parent` (its QoS cgroup): `pod<uid>`. The UID itself must be
    /// a component too, so that it reads back from the name unchanged.
    pub(crate) fn pod(parent: &CgroupName, uid: &str) -> Result<CgroupName, NameError> {
        check(uid)?;
        parent.try_child(&format!("{POD_PREFIX}{uid}"))
    }

    fn checked(&self) -> Result<(), NameError> {
        self.0.iter().try_for_each(|p| check(p).map(|_| ()))
    }

    /// kubelet's `ToCgroupfs`: `/kubepods/burstable/pod<uid>`; the root is `/`.
    pub(crate) fn to_cgroupfs(&self) -> Result<String, NameError> {
        self.checked()?;
        Ok(format!("/{}", self.0.join("/")))
    }

    /// kubelet's `ToSystemd`: each component with `-` spelled `_`, joined by `-` into one
    /// slice and expanded as libcontainer's `ExpandSlice` does, each level prefixed by its
    /// parents: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice`.
    pub(crate) fn to_systemd(&self) -> Result<String, NameError> {
        self.checked()?;
        if self.0.is_empty() {
            return Ok("/".to_string());
        }
        let mut path = String::new();
        let mut prefix = String::new();
        for part in &self.0 {
            let escaped = part.replace('-', "_");
            path.push('/');
            path.push_str(&prefix);
            path.push_str(&escaped);
            path.push_str(SLICE_SUFFIX);
            prefix.push_str(&escaped);
            prefix.push('-');
        }
        Ok(path)
    }

    /// The driver's full name (kubelet's `cgroupManager.Name`), which is also what the
    /// CRI gets as the sandbox's `cgroup_parent` (kubelet's `GetPodCgroupParent`).
    pub(crate) fn driver_name(&self, driver: CgroupDriver) -> Result<String, NameError> {
        match driver {
            CgroupDriver::Cgroupfs => self.to_cgroupfs(),
            CgroupDriver::Systemd => self.to_systemd(),
        }
    }

    /// The path relative to a cgroup mount (the driver's name without the leading `/`;
    /// empty for the root), as [`super::fs::CgroupFs`] takes it.
    pub(crate) fn to_path(&self, driver: CgroupDriver) -> Result<String, NameError> {
        let name = self.driver_name(driver)?;
        Ok(name.trim_start_matches('/').to_string())
    }

    /// kubelet's `ParseCgroupfsToCgroupName`: `/a/b` is `["a", "b"]`, `/` is the root.
    pub(crate) fn parse_cgroupfs(name: &str) -> CgroupName {
        let trimmed = name.strip_prefix('/').unwrap_or(name);
        if trimmed.is_empty() {
            return CgroupName::default();
        }
        CgroupName(trimmed.split('/').map(str::to_string).collect())
    }

    /// kubelet's `ParseSystemdToCgroupName`: the last slice of the path encodes the whole
    /// name, `a-b_c.slice` is `["a", "b-c"]`.
    pub(crate) fn parse_systemd(name: &str) -> CgroupName {
        let base = name.rsplit('/').next().unwrap_or(name);
        let base = base.strip_suffix(SLICE_SUFFIX).unwrap_or(base);
        if base.is_empty() {
            return CgroupName::default();
        }
        CgroupName(base.split('-').map(|p| p.replace('_', "-")).collect())
    }

    /// The driver's spelling read back into a name (kubelet's `cgroupManager.CgroupName`).
    pub(crate) fn parse(driver: CgroupDriver, name: &str) -> CgroupName {
        match driver {
            CgroupDriver::Cgroupfs => CgroupName::parse_cgroupfs(name),
            CgroupDriver::Systemd => CgroupName::parse_systemd(name),
        }
    }
}

/// The pod UID in the base name of a cgroup found below a QoS cgroup (`pod<uid>` or
/// `kubepods-burstable-pod<uid_>.slice`), as kubelet's `GetAllPodsFromCgroups` reads
/// it for orphan cleanup; `None` for anything that is not a pod cgroup of this driver.
pub(crate) fn pod_uid_from_base(driver: CgroupDriver, base: &str) -> Option<String> {
    if driver == CgroupDriver::Systemd && !base.ends_with(SLICE_SUFFIX) {
        return None;
    }
    let name = CgroupName::parse(driver, base);
    let last = name.0.last()?;
    let uid = last.strip_prefix(POD_PREFIX)?;
    // kubelet splits on "pod" and wants exactly two parts.
    if uid.is_empty() || uid.contains(POD_PREFIX) || name.checked().is_err() {
        return None;
    }
    Some(uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(parts: &[&str]) -> CgroupName {
        CgroupName(parts.iter().map(|p| (*p).to_string()).collect())
    }

    const UID: &str = "1234-abcd-5678-efgh";

    #[test]
    fn cgroupfs_names_are_paths() {
        let pod = name(&["kubepods", "burstable", "pod1234-abcd-5678-efgh"]);
        assert_eq!(
            pod.to_cgroupfs().unwrap(),
            "/kubepods/burstable/pod1234-abcd-5678-efgh"
        );
        assert_eq!(CgroupName::default().to_cgroupfs().unwrap(), "/");
        assert_eq!(
            pod.to_path(CgroupDriver::Cgroupfs).unwrap(),
            "kubepods/burstable/pod1234-abcd-5678-efgh"
        );
        assert_eq!(
            CgroupName::default()
                .to_path(CgroupDriver::Cgroupfs)
                .unwrap(),
            ""
        );
    }

    #[test]
    fn systemd_names_are_expanded_slices_with_underscores() {
        // kubelet's own example (cgroup_manager_linux.go).
        let pod = name(&["kubepods", "burstable", "pod1234-abcd-5678-efgh"]);
        assert_eq!(
            pod.to_systemd().unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"
        );
        // Guaranteed pods sit directly under kubepods.
        let guaranteed = CgroupName::pod(&name(&["kubepods"]), UID).unwrap();
        assert_eq!(
            guaranteed.driver_name(CgroupDriver::Systemd).unwrap(),
            "/kubepods.slice/kubepods-pod1234_abcd_5678_efgh.slice"
        );
        assert_eq!(
            name(&["kubepods", "besteffort"])
                .to_path(CgroupDriver::Systemd)
                .unwrap(),
            "kubepods.slice/kubepods-besteffort.slice"
        );
        assert_eq!(CgroupName::default().to_systemd().unwrap(), "/");
    }

    #[test]
    fn the_cri_cgroup_parent_is_the_drivers_full_name() {
        let pod = CgroupName::pod(&name(&["kubepods", "burstable"]), UID).unwrap();
        assert_eq!(
            pod.driver_name(CgroupDriver::Cgroupfs).unwrap(),
            "/kubepods/burstable/pod1234-abcd-5678-efgh"
        );
        assert_eq!(
            pod.driver_name(CgroupDriver::Systemd).unwrap(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice"
        );
    }

    #[test]
    fn spellings_parse_back_to_the_name() {
        let pod = name(&["kubepods", "besteffort", "pod1234-abcd-5678-efgh"]);
        for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            let spelled = pod.driver_name(driver).unwrap();
            assert_eq!(
                CgroupName::parse(driver, &spelled),
                pod,
                "{driver}: {spelled}"
            );
        }
        assert_eq!(CgroupName::parse_cgroupfs("/"), CgroupName::default());
        assert_eq!(CgroupName::parse_cgroupfs("a/b"), name(&["a", "b"]));
        assert_eq!(CgroupName::parse_systemd("/"), CgroupName::default());
        assert_eq!(
            CgroupName::parse_systemd("kubepods-burstable.slice"),
            name(&["kubepods", "burstable"])
        );
    }

    #[test]
    fn pod_uids_are_read_back_from_base_names() {
        assert_eq!(
            pod_uid_from_base(CgroupDriver::Cgroupfs, "pod1234-abcd-5678-efgh").as_deref(),
            Some(UID)
        );
        assert_eq!(
            pod_uid_from_base(
                CgroupDriver::Systemd,
                "kubepods-burstable-pod1234_abcd_5678_efgh.slice"
            )
            .as_deref(),
            Some(UID)
        );
        assert_eq!(
            pod_uid_from_base(CgroupDriver::Systemd, "kubepods-pod1234_abcd.slice").as_deref(),
            Some("1234-abcd")
        );
        // Not pod cgroups: QoS cgroups, container cgroups, other drivers' spellings.
        for (driver, base) in [
            (CgroupDriver::Cgroupfs, "burstable"),
            (CgroupDriver::Cgroupfs, "pod"),
            (CgroupDriver::Cgroupfs, "0123456789abcdef"),
            (CgroupDriver::Systemd, "kubepods-besteffort.slice"),
            (CgroupDriver::Systemd, "cri-containerd-0123abcd.scope"),
            (CgroupDriver::Systemd, "pod1234-abcd"),
            (CgroupDriver::Systemd, "kubepods-pod.slice"),
            (CgroupDriver::Cgroupfs, "podpod1"),
        ] {
            assert_eq!(pod_uid_from_base(driver, base), None, "{driver} {base}");
        }
    }

    #[test]
    fn unsafe_components_are_refused() {
        for bad in ["", ".", "..", "a/b", "/", "x\0y"] {
            let n = name(&["kubepods", bad]);
            for driver in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
                assert_eq!(
                    n.driver_name(driver),
                    Err(NameError::NotAComponent(bad.to_string())),
                    "{bad:?}"
                );
            }
            assert!(
                CgroupName::pod(&name(&["kubepods"]), bad).is_err(),
                "{bad:?}"
            );
            assert!(name(&["kubepods"]).try_child(bad).is_err());
        }
        assert!(CgroupName::pod(&name(&["kubepods"]), "../../etc").is_err());
        assert_eq!(
            name(&["kubepods"]).try_child("a_b"),
            Err(NameError::Underscore("a_b".to_string()))
        );
        let err = name(&["kubepods", ".."]).to_cgroupfs().unwrap_err();
        assert!(err.to_string().contains("\"..\""), "{err}");
    }
}

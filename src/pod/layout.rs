//! Where a pod's files live on the node (kubelet's `kubelet_getters.go` and its pod
//! log directory): below the pods directory, `<uid>/` with `volumes/<plugin>/<name>`,
//! `containers/<name>/`, `volume-subpaths/` and `etc-hosts`; below the pod logs
//! directory, `<namespace>_<name>_<uid>/`. The UID and the names come from pod input,
//! so every path is made through the safe-path helper and stays below its base.

use std::path::{Path, PathBuf};

use crate::safe_path::{self, PathError};

/// A pod's volumes, below its directory.
pub(crate) const VOLUMES_DIR: &str = "volumes";
/// A pod's per-container files (termination messages), below its directory.
pub(crate) const CONTAINERS_DIR: &str = "containers";
/// The pod's managed `/etc/hosts`, in its directory.
pub(crate) const HOSTS_FILE: &str = "etc-hosts";

/// `<pods>/<uid>` (kubelet's `getPodDir`).
pub(crate) fn pod_dir(pods_dir: &Path, uid: &str) -> Result<PathBuf, PathError> {
    safe_path::beneath(pods_dir, &[uid])
}

/// `<pods>/<uid>/volumes` (kubelet's `getPodVolumesDir`).
pub(crate) fn pod_volumes_dir(pods_dir: &Path, uid: &str) -> Result<PathBuf, PathError> {
    safe_path::beneath(pods_dir, &[uid, VOLUMES_DIR])
}

/// `<pods>/<uid>/volumes/<plugin>/<name>` (kubelet's `getPodVolumeDir`).
pub(crate) fn volume_dir(
    pods_dir: &Path,
    uid: &str,
    plugin: &str,
    name: &str,
) -> Result<PathBuf, PathError> {
    safe_path::beneath(pods_dir, &[uid, VOLUMES_DIR, plugin, name])
}

/// `<pods>/<uid>/containers/<name>` (kubelet's `getPodContainerDir`).
pub(crate) fn container_dir(
    pods_dir: &Path,
    uid: &str,
    container: &str,
) -> Result<PathBuf, PathError> {
    safe_path::beneath(pods_dir, &[uid, CONTAINERS_DIR, container])
}

/// `<pod logs dir>/<namespace>_<name>_<uid>`: kubelet's pod log directory. Each part
/// must be one plain path component, so the directory is directly below `pod_logs_dir`.
pub(crate) fn pod_log_dir(
    pod_logs_dir: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Result<PathBuf, PathError> {
    let dir = format!(
        "{}_{}_{}",
        safe_path::component(namespace)?,
        safe_path::component(name)?,
        safe_path::component(uid)?
    );
    safe_path::beneath(pod_logs_dir, &[&dir])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_is_below_its_base_and_pod_input_cannot_leave_it() {
        let pods = Path::new("/var/lib/oxlet/pods");
        assert_eq!(
            volume_dir(pods, "u1", "kubernetes.io~secret", "creds").unwrap(),
            Path::new("/var/lib/oxlet/pods/u1/volumes/kubernetes.io~secret/creds")
        );
        assert_eq!(
            container_dir(pods, "u1", "app").unwrap(),
            Path::new("/var/lib/oxlet/pods/u1/containers/app")
        );
        assert_eq!(
            pod_log_dir(Path::new("/var/log/pods"), "default", "web", "u1").unwrap(),
            Path::new("/var/log/pods/default_web_u1")
        );
        assert!(pod_dir(pods, "..").is_err());
        assert!(volume_dir(pods, "u1", "p", "../../x").is_err());
        assert!(container_dir(pods, "u1", "a/b").is_err());
        assert!(pod_log_dir(Path::new("/var/log/pods"), "a/b", "web", "u1").is_err());
    }
}

//! The directories a node keeps pods' data in, with kubelet's modes (`setupDataDirs`
//! and `makePodDataDirs`): the root dir, `pods/`, each pod's directory and its
//! `volumes/` are 0750, so no local user but root (and root's group) can look inside:
//! Secrets, service account tokens and the pods' emptyDirs live below them.

use std::fs::DirBuilder;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use crate::safe_path::PathError;

/// kubelet's mode for the data directories.
pub(crate) const DATA_DIR_MODE: u32 = 0o750;

/// Why a pod's data directories cannot be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DataDirError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("cannot make pod data directory {}: {source}", .path.display())]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Makes `dir` with [`DATA_DIR_MODE`]; one already there must be a directory (a
/// symlink is refused, never followed).
fn make_dir(dir: &Path) -> io::Result<()> {
    match DirBuilder::new().mode(DATA_DIR_MODE).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if std::fs::symlink_metadata(dir)?.is_dir() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "exists and is not a directory",
                ))
            }
        }
        Err(e) => Err(e),
    }
}

/// The root dir and its `pods/` (kubelet's `setupDataDirs`). A `pods/` left by an
/// older oxlet that other users may read or search is tightened to 0750 minus what
/// was not there: it is oxlet's own, and everything a pod keeps is below it.
pub(crate) fn make_data_dirs(root: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DATA_DIR_MODE)
        .create(root)?;
    let pods = root.join("pods");
    make_dir(&pods)?;
    let mode = std::fs::symlink_metadata(&pods)?.permissions().mode() & 0o7777;
    if mode & 0o007 != 0 {
        std::fs::set_permissions(&pods, std::fs::Permissions::from_mode(mode & !0o007))?;
        tracing::info!(dir = %pods.display(), was = format!("{mode:o}"), now = format!("{:o}", mode & !0o007), "took other users' access away from the pods directory, as kubelet's 0750");
    }
    Ok(())
}

/// `<pods>/<uid>` and its `volumes/` (kubelet's `makePodDataDirs`), before anything
/// of the pod is written there. Runs on every sync: two `mkdir`s that find the
/// directories there.
pub(crate) fn make_pod_data_dirs(pods_dir: &Path, uid: &str) -> Result<(), DataDirError> {
    // The pods directory itself is made at start ([`make_data_dirs`]); these come
    // from pod input and are made one level at a time, never through a symlink.
    for dir in [
        crate::pod::pod_dir(pods_dir, uid)?,
        crate::pod::pod_volumes_dir(pods_dir, uid)?,
    ] {
        make_dir(&dir).map_err(|source| DataDirError::Io { path: dir, source })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn data_dirs_are_made_0750_and_an_open_pods_dir_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("var/lib/oxlet");
        make_data_dirs(&root).unwrap();
        assert_eq!(mode(&root), 0o750);
        assert_eq!(mode(&root.join("pods")), 0o750);
        // An older oxlet's pods dir, open to everyone.
        std::fs::set_permissions(root.join("pods"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        make_data_dirs(&root).unwrap();
        assert_eq!(mode(&root.join("pods")), 0o750);
        // An existing root dir keeps its mode: it may be the admin's choice.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711)).unwrap();
        make_data_dirs(&root).unwrap();
        assert_eq!(mode(&root), 0o711);
    }

    #[test]
    fn pod_data_dirs_are_0750_below_the_pods_dir_only() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        make_data_dirs(tmp.path()).unwrap();
        make_pod_data_dirs(&pods, "uid-1").unwrap();
        assert_eq!(mode(&pods.join("uid-1")), 0o750);
        assert_eq!(mode(&pods.join("uid-1/volumes")), 0o750);
        // Again: nothing changes, nothing fails.
        make_pod_data_dirs(&pods, "uid-1").unwrap();
        assert!(matches!(
            make_pod_data_dirs(&pods, "../x"),
            Err(DataDirError::Path(_))
        ));
        // A symlink where the pod's directory should be is refused, not followed.
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, pods.join("uid-2")).unwrap();
        assert!(matches!(
            make_pod_data_dirs(&pods, "uid-2"),
            Err(DataDirError::Io { .. })
        ));
        assert!(!outside.join("volumes").exists());
    }
}

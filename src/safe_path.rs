//! The one place where paths are built from pod input, and where anything oxlet created is
//! removed.
//!
//! oxlet runs as root and takes pod specs from whoever can write a manifest. A UID, a name
//! or a volume name that reads `..` or `/etc` must never turn `<root>/pods/<uid>` into a
//! path outside oxlet's own directories. So every such path is built here, from parts that
//! are each checked to be one plain path component, and every recursive removal checks
//! that what it removes lies below a root oxlet owns, without following a symlink out
//! and without deleting through a mount point.
//!
//! Paths inside a volume (`subPath`) are opened by the kernel below the volume's
//! descriptor ([`open_beneath`]) and bind-mounted from that descriptor ([`bind_fd`]), so
//! a symlink swapped in after a check cannot redirect them.

mod mounts;
mod open;

pub(crate) use mounts::{bind_fd, detach, mounts_at_or_below};
pub(crate) use open::{BeneathError, make_dirs_beneath, open_beneath, open_dir, read_beneath};

use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

/// A path part taken from pod input that cannot be used as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    /// Not exactly one plain path component.
    #[error(
        "{0:?} is not a single path component (it is empty, '.', '..', or contains '/' or NUL)"
    )]
    NotAComponent(String),
    /// A relative path (such as a `subPath`) that is absolute or climbs out with `..`.
    #[error("{0:?} must be a relative path without '..' components")]
    NotBeneath(String),
}

/// Checks that `part` is one plain path component: non-empty, not `.` or `..`, and free of
/// `/` and NUL. Returns it unchanged.
pub(crate) fn component(part: &str) -> Result<&str, PathError> {
    let plain = !part.is_empty()
        && part != "."
        && part != ".."
        && !part.contains('/')
        && !part.contains('\0');
    if plain {
        Ok(part)
    } else {
        Err(PathError::NotAComponent(part.to_string()))
    }
}

/// `base/part1/part2/…`, each part checked with [`component`]. The result is lexically
/// below `base` whatever the parts say.
pub(crate) fn beneath(base: &Path, parts: &[&str]) -> Result<PathBuf, PathError> {
    let mut path = base.to_path_buf();
    for part in parts {
        path.push(component(part)?);
    }
    Ok(path)
}

/// Checks a relative path from pod input (a `subPath`): not absolute, no `..` component,
/// no NUL. `.` parts and repeated slashes are harmless and allowed, as in kubelet.
pub(crate) fn relative(rel: &str) -> Result<&Path, PathError> {
    let path = Path::new(rel);
    let escapes = rel.contains('\0')
        || path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
    if escapes {
        Err(PathError::NotBeneath(rel.to_string()))
    } else {
        Ok(path)
    }
}

/// The directory below a pod's own directory (`<pods>/<uid>/volume-subpaths`) that holds
/// oxlet's subPath bind mounts, as kubelet names it. Mounts there are oxlet's to detach.
pub(crate) const SUBPATHS_DIR: &str = "volume-subpaths";

/// Why [`remove_beneath`] refused to remove something.
#[derive(Debug)]
pub(crate) struct RemoveRefused {
    pub path: PathBuf,
    pub root: PathBuf,
    pub reason: String,
}

impl fmt::Display for RemoveRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refusing to remove {}: {} (oxlet only removes what lies below {})",
            self.path.display(),
            self.reason,
            self.root.display()
        )
    }
}

impl std::error::Error for RemoveRefused {}

/// Removes `path` (a directory tree, a file or a symlink) if, and only if, it lies strictly
/// below `root` once every symlink in its parent is resolved. A symlink at `path` itself is
/// removed as a link; nothing it points to is touched, and the removal of a tree never
/// follows a symlink inside it. Mounts at or below `path` are never deleted through:
/// oxlet's own subPath mounts (`<root>/<x>/volume-subpaths/…`) are detached first, and any
/// other mount there refuses the removal with nothing removed. Returns `Ok(false)` when
/// there was nothing to remove.
pub(crate) fn remove_beneath(root: &Path, path: &Path) -> io::Result<bool> {
    let refuse = |reason: &str| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            RemoveRefused {
                path: path.to_path_buf(),
                root: root.to_path_buf(),
                reason: reason.to_string(),
            },
        )
    };
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(refuse("it has no parent directory"));
    };
    if !matches!(
        Path::new(name).components().next(),
        Some(Component::Normal(_))
    ) {
        return Err(refuse("its last component is not a plain name"));
    }
    let root = match std::fs::canonicalize(root) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let parent = match std::fs::canonicalize(parent) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !parent.starts_with(&root) {
        return Err(refuse("it is not below the root"));
    }
    let target = parent.join(name);
    let meta = match std::fs::symlink_metadata(&target) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let mounts = mounts_at_or_below(&target)?;
    if let Some(foreign) = mounts.iter().find(|m| !is_subpath_mount(&root, m)) {
        return Err(refuse(&format!(
            "{} below it is a mount point oxlet did not make",
            foreign.display()
        )));
    }
    // Deepest first, so a mount inside another mount is detached before its parent.
    let mut ours = mounts;
    ours.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    ours.dedup();
    for m in &ours {
        detach(m)?;
    }
    if let Some(left) = mounts_at_or_below(&target)?.first() {
        return Err(refuse(&format!(
            "{} below it is still a mount point",
            left.display()
        )));
    }
    if meta.is_dir() {
        std::fs::remove_dir_all(&target)?;
    } else {
        std::fs::remove_file(&target)?;
    }
    Ok(true)
}

/// `<root>/<one part>/volume-subpaths/…`: where oxlet's subPath bind mounts live.
fn is_subpath_mount(root: &Path, mount: &Path) -> bool {
    let Ok(rel) = mount.strip_prefix(root) else {
        return false;
    };
    let mut parts = rel.components();
    matches!(parts.next(), Some(Component::Normal(_)))
        && parts.next() == Some(Component::Normal(SUBPATHS_DIR.as_ref()))
        && parts.next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_plain_names() {
        for good in ["abc", "a.b", "...", "a-b_c", "0"] {
            assert_eq!(component(good), Ok(good));
        }
        for bad in ["", ".", "..", "a/b", "/etc", "a\0b", "../x"] {
            assert!(component(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn beneath_never_leaves_the_base() {
        let base = Path::new("/var/lib/oxlet/pods");
        assert_eq!(
            beneath(base, &["uid", "volumes"]).unwrap(),
            base.join("uid/volumes")
        );
        assert!(beneath(base, &["/etc"]).is_err());
        assert!(beneath(base, &[".."]).is_err());
        assert!(beneath(base, &["uid", "../../.."]).is_err());
    }

    #[test]
    fn relative_paths_stay_relative() {
        for good in ["a", "a/b", "./a", "a//b", "a/./b", "a..b"] {
            assert!(relative(good).is_ok(), "{good:?} refused");
        }
        for bad in ["/a", "..", "a/../b", "a/..", "../a", "a\0"] {
            assert!(relative(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn removes_only_below_the_root_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("pods/a/sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"x").unwrap();

        // A link inside the tree is removed as a link, and what it points to stays.
        std::os::unix::fs::symlink(&outside, root.join("pods/a/sub/link")).unwrap();
        assert!(remove_beneath(&root, &root.join("pods/a")).unwrap());
        assert!(!root.join("pods/a").exists());
        assert!(outside.join("keep").exists());

        // A path whose parent resolves outside the root is refused.
        std::os::unix::fs::symlink(&outside, root.join("pods/escape")).unwrap();
        let err = remove_beneath(&root, &root.join("pods/escape/keep")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(outside.join("keep").exists());

        // `..` tricks and the root itself are refused.
        assert!(remove_beneath(&root, &root.join("pods/..")).is_err());
        assert!(remove_beneath(&root, &root.join("..").join("outside")).is_err());
        assert!(remove_beneath(&root, Path::new("/")).is_err());
        assert!(outside.join("keep").exists());

        // Nothing there: nothing to do.
        assert!(!remove_beneath(&root, &root.join("pods/none")).unwrap());
    }

    #[test]
    fn removal_never_deletes_through_a_mount() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("pods");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"x").unwrap();
        let fd = open_dir(&outside).unwrap();

        // A mount oxlet did not make: refused, and nothing is removed.
        let foreign = root.join("u1/volumes/elsewhere");
        bind_fd(&fd, &foreign).unwrap();
        let err = remove_beneath(&root, &root.join("u1")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("mount point"), "{err}");
        assert!(foreign.join("keep").exists(), "mount still in place");
        assert!(outside.join("keep").exists());
        detach(&foreign).unwrap();

        // oxlet's own subPath mounts are detached, then the tree goes; the source stays.
        let ours = root.join(format!("u2/{SUBPATHS_DIR}/vol/ctr/0"));
        bind_fd(&fd, &ours).unwrap();
        bind_fd(&fd, &root.join(format!("u2/{SUBPATHS_DIR}/vol/ctr/1"))).unwrap();
        assert!(ours.join("keep").exists());
        assert!(remove_beneath(&root, &root.join("u2")).unwrap());
        assert!(!root.join("u2").exists());
        assert!(outside.join("keep").exists());
        assert!(mounts_at_or_below(&root).unwrap().is_empty());
    }
}

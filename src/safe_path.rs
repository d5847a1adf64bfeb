//! The one place where paths are built from pod input, and where anything oxlet created is
//! removed.
//!
//! oxlet runs as root and takes pod specs from whoever can write a manifest. A UID, a name
//! or a volume name that reads `..` or `/etc` must never turn `<root>/pods/<uid>` into a
//! path outside oxlet's own directories. So every such path is built here, from parts that
//! are each checked to be one plain path component, and every recursive removal checks
//! that what it removes lies below a root oxlet owns, without following a symlink out.

use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

/// A path part taken from pod input that cannot be used as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
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
pub fn component(part: &str) -> Result<&str, PathError> {
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
pub fn beneath(base: &Path, parts: &[&str]) -> Result<PathBuf, PathError> {
    let mut path = base.to_path_buf();
    for part in parts {
        path.push(component(part)?);
    }
    Ok(path)
}

/// Checks a relative path from pod input (a `subPath`): not absolute, no `..` component,
/// no NUL. `.` parts and repeated slashes are harmless and allowed, as in kubelet.
pub fn relative(rel: &str) -> Result<&Path, PathError> {
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

/// Why [`remove_beneath`] refused to remove something.
#[derive(Debug)]
pub struct RemoveRefused {
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
/// follows a symlink inside it. Returns `Ok(false)` when there was nothing to remove.
pub fn remove_beneath(root: &Path, path: &Path) -> io::Result<bool> {
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
    if meta.is_dir() {
        std::fs::remove_dir_all(&target)?;
    } else {
        std::fs::remove_file(&target)?;
    }
    Ok(true)
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
}

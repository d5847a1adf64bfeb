//! Mount points below oxlet's directories: binding an opened subPath into place, finding
//! mounts (so a recursive removal never deletes through one), and detaching oxlet's own.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::mount::UnmountFlags;

const MOUNTINFO: &str = "/proc/self/mountinfo";

/// How many stacked mounts one target may carry before oxlet gives up detaching them.
const MAX_STACKED: usize = 16;

/// Every mount point at `path` or below it (one entry per mount, so stacked mounts repeat).
pub(crate) fn mounts_at_or_below(path: &Path) -> io::Result<Vec<PathBuf>> {
    let text = std::fs::read(MOUNTINFO)?;
    Ok(crate::procfs::parse_mountinfo(&text)
        .into_iter()
        .map(|m| m.point)
        .filter(|m| m.starts_with(path))
        .collect())
}

/// Whether `path` is itself a mount point.
pub(super) fn is_mount_point(path: &Path) -> io::Result<bool> {
    Ok(mounts_at_or_below(path)?.iter().any(|m| m == path))
}

/// Detaches every mount stacked on `target` (lazily: a container still using it keeps
/// its own copy). Not mounted is fine.
pub(crate) fn detach(target: &Path) -> io::Result<()> {
    for _ in 0..MAX_STACKED {
        if !is_mount_point(target)? {
            return Ok(());
        }
        match rustix::mount::unmount(target, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other(format!(
        "{} still has mounts after {MAX_STACKED} unmounts",
        target.display()
    )))
}

/// Bind-mounts what `fd` refers to onto `target` (a path under oxlet's own root, made
/// here as a directory or an empty file to match). Mounting the descriptor, not a name,
/// is what keeps a swap of the source after it was opened from mattering.
pub(crate) fn bind_fd(fd: &OwnedFd, target: &Path) -> io::Result<()> {
    let is_dir = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(fd)?.st_mode)
        == rustix::fs::FileType::Directory;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // A mount left from an earlier start of this container is replaced, not reused.
    detach(target)?;
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() == is_dir && !m.file_type().is_symlink() => {}
        Ok(m) if m.is_dir() => std::fs::remove_dir(target)?,
        Ok(_) => std::fs::remove_file(target)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if is_dir {
        match std::fs::create_dir(target) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(target)?;
    }
    let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(rustix::mount::mount_bind(source.as_str(), target)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opened_directory_is_bound_and_detached() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("f"), b"data").unwrap();
        let target = tmp.path().join("t/0");
        let fd = super::super::open::open_dir(&src).unwrap();
        bind_fd(&fd, &target).unwrap();
        assert!(is_mount_point(&target).unwrap());
        assert_eq!(std::fs::read(target.join("f")).unwrap(), b"data");
        // Binding again replaces the earlier mount instead of stacking on it.
        bind_fd(&fd, &target).unwrap();
        assert_eq!(
            mounts_at_or_below(&target).unwrap().len(),
            1,
            "one mount at the target"
        );
        detach(&target).unwrap();
        assert!(!is_mount_point(&target).unwrap());
        assert!(!target.join("f").exists());
        assert!(src.join("f").exists());
    }

    #[test]
    fn an_opened_file_is_bound_on_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        std::fs::create_dir(&vol).unwrap();
        std::fs::write(vol.join("conf"), b"setting").unwrap();
        let base = super::super::open::open_dir(&vol).unwrap();
        let fd = super::super::open::open_beneath(&base, Path::new("conf")).unwrap();
        let target = tmp.path().join("t/0");
        bind_fd(&fd, &target).unwrap();
        assert!(target.is_file());
        assert_eq!(std::fs::read(&target).unwrap(), b"setting");
        // Swapping the name afterwards changes nothing: the mount holds the opened file.
        std::fs::rename(vol.join("conf"), vol.join("old")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", vol.join("conf")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"setting");
        detach(&target).unwrap();
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"",
            "the empty mount point"
        );
    }
}

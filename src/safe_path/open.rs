//! Opening a path from pod input (a `subPath`) inside a volume without ever leaving it.
//!
//! Checking a path and then using it by name is a race a container can win: it owns the
//! volume and can swap a directory for a symlink to `/` in between. So the path is resolved
//! once, by the kernel, relative to a descriptor of the volume (`openat2` with
//! `RESOLVE_BENEATH`), and what is used afterwards is the opened descriptor, never the name.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Why a path could not be opened below its base.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BeneathError {
    /// Resolving it (through a symlink, an absolute link or `..`) would leave the base.
    #[error("it resolves to a place outside the volume")]
    Escapes,
    /// Nothing there.
    #[error("it does not exist")]
    NotFound,
    /// Absolute or with `..`: refused before anything is opened.
    #[error(transparent)]
    Invalid(#[from] super::PathError),
    /// Not a regular file (a directory, a FIFO a reader would hang on, a device).
    #[error("it is not a regular file")]
    NotAFile,
    /// Over the reader's bound.
    #[error("it is larger than {0} bytes")]
    TooLarge(u64),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// `openat2` answers EAGAIN when a concurrent rename might have let `..` escape; retried
/// a few times, as the man page suggests, before giving up.
const EAGAIN_RETRIES: usize = 8;

fn o_path() -> OFlags {
    OFlags::PATH | OFlags::CLOEXEC
}

/// Opens the directory `dir` (a volume's root) as an `O_PATH` descriptor. The volume root
/// itself is oxlet's (emptyDir) or the node admin's choice (hostPath), so it is followed.
pub(crate) fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        dir,
        o_path() | OFlags::DIRECTORY,
        Mode::empty(),
    )?)
}

/// Opens `rel` below the directory `base` as an `O_PATH` descriptor. Symlinks inside are
/// followed only while they stay below `base`; one that leads out (by `..`, by an absolute
/// target, or through `/proc` magic links) is [`BeneathError::Escapes`].
pub(crate) fn open_beneath(base: impl AsFd, rel: &Path) -> Result<OwnedFd, BeneathError> {
    let rel = clean(rel)?;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(base.as_fd(), &rel, o_path(), Mode::empty(), resolve) {
            Ok(fd) => return Ok(fd),
            Err(rustix::io::Errno::AGAIN) if tries < EAGAIN_RETRIES => tries += 1,
            Err(rustix::io::Errno::NOSYS) => return walk_nofollow(base, &rel),
            Err(e) => return Err(classify(e)),
        }
    }
}

/// Reads the regular file `rel` below the directory `dir`, at most `max` bytes: it is
/// opened below `dir` as [`open_beneath`] does, then read through that descriptor, so
/// a file the pod swaps for a symlink out, a FIFO or a huge file is refused, not read.
pub(crate) fn read_beneath(dir: &Path, rel: &Path, max: u64) -> Result<Vec<u8>, BeneathError> {
    use std::io::Read;
    let path_fd = open_beneath(open_dir(dir)?, rel)?;
    let st = rustix::fs::fstat(&path_fd).map_err(io::Error::from)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(BeneathError::NotAFile);
    }
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > max {
        return Err(BeneathError::TooLarge(max));
    }
    // An O_PATH descriptor cannot be read; its /proc link reopens the same inode.
    let proc_link = format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&path_fd)
    );
    let fd = rustix::fs::open(
        proc_link.as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(classify)?;
    let mut out = Vec::new();
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(BeneathError::TooLarge(max));
    }
    Ok(out)
}

/// Creates the directories of `rel` below `base` that do not exist yet (mode 0755, as
/// kubelet's `SafeMakeDir`), each one inside a directory that was itself opened below
/// `base`, so a symlink swapped in along the way cannot redirect the creation.
pub(crate) fn make_dirs_beneath(base: impl AsFd, rel: &Path) -> Result<(), BeneathError> {
    let rel = clean(rel)?;
    let mut dir = rustix::io::dup(base.as_fd()).map_err(io::Error::from)?;
    let mut so_far = PathBuf::new();
    for part in rel.components() {
        so_far.push(part);
        dir = match open_beneath(base.as_fd(), &so_far) {
            Ok(fd) => fd,
            Err(BeneathError::NotFound) => {
                match rustix::fs::mkdirat(&dir, part.as_os_str(), Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(classify(e)),
                }
                open_beneath(base.as_fd(), &so_far)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(())
}

/// The plain components of `rel` (`.` and repeated slashes dropped); refuses the rest.
fn clean(rel: &Path) -> Result<PathBuf, BeneathError> {
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return Err(BeneathError::Escapes),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    Ok(out)
}

fn classify(e: rustix::io::Errno) -> BeneathError {
    match e {
        rustix::io::Errno::XDEV => BeneathError::Escapes,
        rustix::io::Errno::NOENT => BeneathError::NotFound,
        e => BeneathError::Io(e.into()),
    }
}

/// For kernels without `openat2` (before 5.6): one `O_NOFOLLOW` open per component, so
/// no symlink at all is followed; a symlink anywhere in `rel` counts as an escape.
fn walk_nofollow(base: impl AsFd, rel: &Path) -> Result<OwnedFd, BeneathError> {
    let mut dir = rustix::io::dup(base.as_fd()).map_err(io::Error::from)?;
    for part in rel.components() {
        let Component::Normal(part) = part else {
            continue;
        };
        let fd = rustix::fs::openat(&dir, part, o_path() | OFlags::NOFOLLOW, Mode::empty())
            .map_err(classify)?;
        let st = rustix::fs::fstat(&fd).map_err(io::Error::from)?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink {
            return Err(BeneathError::Escapes);
        }
        dir = fd;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// The path a descriptor really names, as the kernel sees it.
    fn real(fd: &OwnedFd) -> PathBuf {
        std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(fd)
        ))
        .unwrap()
    }

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(vol.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"x").unwrap();
        (tmp, vol, outside)
    }

    #[test]
    fn links_inside_the_volume_are_followed_links_out_are_refused() {
        let (_tmp, vol, outside) = setup();
        symlink("a/b", vol.join("inside")).unwrap();
        symlink(&outside, vol.join("abs")).unwrap();
        symlink("../outside", vol.join("up")).unwrap();
        symlink("../../../outside", vol.join("a/b/deep")).unwrap();
        symlink("/proc/self/root/etc", vol.join("magic")).unwrap();
        let base = open_dir(&vol).unwrap();

        let fd = open_beneath(&base, Path::new("inside")).unwrap();
        assert_eq!(real(&fd), vol.join("a/b"));
        let fd = open_beneath(&base, Path::new("./a//b")).unwrap();
        assert_eq!(real(&fd), vol.join("a/b"));
        for bad in ["abs", "abs/secret", "up", "up/secret", "a/b/deep", "magic"] {
            assert!(
                matches!(
                    open_beneath(&base, Path::new(bad)),
                    Err(BeneathError::Escapes)
                ),
                "{bad} was opened"
            );
        }
        assert!(matches!(
            open_beneath(&base, Path::new("../outside")),
            Err(BeneathError::Escapes)
        ));
        assert!(matches!(
            open_beneath(&base, Path::new("missing")),
            Err(BeneathError::NotFound)
        ));
    }

    #[test]
    fn a_bounded_read_takes_regular_files_below_the_base_only() {
        let (_tmp, vol, outside) = setup();
        std::fs::write(vol.join("a/env"), b"K=v\n").unwrap();
        symlink("a/env", vol.join("link")).unwrap();
        symlink(outside.join("secret"), vol.join("out")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            vol.join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        std::fs::write(vol.join("big"), vec![b'x'; 65]).unwrap();
        assert_eq!(
            read_beneath(&vol, Path::new("a/env"), 64).unwrap(),
            b"K=v\n"
        );
        assert_eq!(read_beneath(&vol, Path::new("link"), 64).unwrap(), b"K=v\n");
        let err = |rel: &str| read_beneath(&vol, Path::new(rel), 64).unwrap_err();
        assert!(matches!(err("out"), BeneathError::Escapes));
        assert!(matches!(err("fifo"), BeneathError::NotAFile));
        assert!(matches!(err("a"), BeneathError::NotAFile));
        assert!(matches!(err("big"), BeneathError::TooLarge(64)));
        assert!(matches!(err("nothing"), BeneathError::NotFound));
    }

    #[test]
    fn the_fallback_walk_follows_no_link_at_all() {
        let (_tmp, vol, outside) = setup();
        symlink(&outside, vol.join("abs")).unwrap();
        symlink("a", vol.join("inside")).unwrap();
        let base = open_dir(&vol).unwrap();
        let fd = walk_nofollow(&base, Path::new("a/b")).unwrap();
        assert_eq!(real(&fd), vol.join("a/b"));
        for bad in ["abs", "abs/secret", "inside"] {
            assert!(
                matches!(
                    walk_nofollow(&base, Path::new(bad)),
                    Err(BeneathError::Escapes)
                ),
                "{bad} was opened"
            );
        }
    }

    #[test]
    fn directories_are_made_only_below_the_base() {
        let (_tmp, vol, outside) = setup();
        symlink(&outside, vol.join("abs")).unwrap();
        let base = open_dir(&vol).unwrap();
        make_dirs_beneath(&base, Path::new("a/new/deeper")).unwrap();
        assert!(vol.join("a/new/deeper").is_dir());
        assert!(matches!(
            make_dirs_beneath(&base, Path::new("abs/created")),
            Err(BeneathError::Escapes)
        ));
        assert!(!outside.join("created").exists());
    }
}

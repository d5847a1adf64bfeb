//! The file operations every cgroup layout shares, each one checked: relative paths
//! are plain components, nothing is followed through a symlink, every read is bounded,
//! and removal only ever `rmdir`s cgroups (plain files only in a test tree).

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::CgroupError;
use crate::safe_path;

/// The largest control file read (memory.stat is a few KiB).
pub(super) const MAX_FILE_BYTES: u64 = 64 * 1024;
/// The largest `cgroup.procs` read: about 100k pids.
const MAX_PROCS_BYTES: u64 = 1024 * 1024;
/// How deep a removal or a procs walk goes below the cgroup it starts from.
const MAX_DEPTH: usize = 32;
/// The most entries read from one cgroup directory.
const MAX_ENTRIES: usize = 65_536;

pub(super) fn err(op: &'static str, path: &Path, error: io::Error) -> CgroupError {
    CgroupError {
        op,
        path: path.to_path_buf(),
        error,
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// The components of a cgroup path relative to a hierarchy (`""` is the hierarchy's
/// root): never absolute, and each part one plain component (no `..`, no empty part).
pub(super) fn parts<'a>(
    op: &'static str,
    base: &Path,
    rel: &'a str,
) -> Result<Vec<&'a str>, CgroupError> {
    if rel.is_empty() {
        return Ok(Vec::new());
    }
    let refuse = |why: String| err(op, &base.join(rel.trim_start_matches('/')), invalid(why));
    if rel.starts_with('/') {
        return Err(refuse(format!(
            "cgroup path {rel:?} must be relative to the cgroup mount"
        )));
    }
    rel.split('/')
        .map(|part| {
            safe_path::component(part).map_err(|e| refuse(format!("cgroup path {rel:?}: {e}")))
        })
        .collect()
}

/// `base/parts…`, refusing a symlink or a non-directory at any existing level, so a
/// path never leaves the mount through a link. Levels that do not exist are fine.
pub(super) fn join(op: &'static str, base: &Path, parts: &[&str]) -> Result<PathBuf, CgroupError> {
    let mut path = base.to_path_buf();
    let mut exists = true;
    for part in parts {
        path.push(part);
        if !exists {
            continue;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(err(
                    op,
                    &path,
                    invalid("a symlink in a cgroup path is never followed".into()),
                ));
            }
            Ok(m) if !m.is_dir() => {
                return Err(err(op, &path, invalid("not a directory".into())));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => exists = false,
            Err(e) => return Err(err(op, &path, e)),
        }
    }
    Ok(path)
}

/// `dir`, if the cgroup is there: writing into a missing one must fail, also in a test
/// tree (where [`write()`] would otherwise create the file).
pub(super) fn existing(op: &'static str, dir: PathBuf) -> Result<PathBuf, CgroupError> {
    if is_dir(&dir) {
        Ok(dir)
    } else {
        Err(err(
            op,
            &dir,
            io::Error::new(io::ErrorKind::NotFound, "no such cgroup"),
        ))
    }
}

/// Whether `dir` is a real directory (not a symlink to one).
pub(super) fn is_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_dir())
}

/// Opens `path` read-only, never through a symlink at its last component.
pub(super) fn open_nofollow(path: &Path) -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(path)
}

fn read_limited(path: &Path, limit: u64) -> io::Result<String> {
    let file = open_nofollow(path)?;
    let mut text = String::new();
    file.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(text)
}

/// The text of `dir/name`, or `None` when the file is not there.
pub(super) fn read_opt(dir: &Path, name: &str) -> Result<Option<String>, CgroupError> {
    let path = dir.join(name);
    match read_limited(&path, MAX_FILE_BYTES) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err("read", &path, e)),
    }
}

/// Writes `value` to `dir/name` in one write, as the kernel wants it. The file is
/// created if missing: a test tree has no kernel to provide it, and on cgroupfs a
/// missing file stays an error.
pub(super) fn write(dir: &Path, name: &str, value: &str) -> Result<(), CgroupError> {
    let path = dir.join(name);
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(&path)
        .and_then(|mut f| f.write_all(value.as_bytes()));
    result.map_err(|e| err("write", &path, e))
}

/// A number as the kernel writes it, with `max` (v2, pids) as -1.
pub(super) fn parse_limit(path: &Path, text: &str) -> Result<i64, CgroupError> {
    let text = text.trim();
    if text == "max" {
        return Ok(-1);
    }
    text.parse().map_err(|_| {
        err(
            "parse",
            path,
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{text:?} is not a number"),
            ),
        )
    })
}

/// An unsigned counter such as `memory.current`.
pub(super) fn parse_u64(path: &Path, text: &str) -> Result<u64, CgroupError> {
    let text = text.trim();
    text.parse().map_err(|_| {
        err(
            "parse",
            path,
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{text:?} is not a number"),
            ),
        )
    })
}

/// The value of `key` in a flat-keyed file such as `memory.stat` or `cpu.stat`.
pub(super) fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The names of the real directories (cgroups) directly below `dir`; none if `dir` is
/// missing.
pub(super) fn subdirs(dir: &Path) -> Result<Vec<String>, CgroupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(err("list", dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries.take(MAX_ENTRIES) {
        let entry = entry.map_err(|e| err("list", dir, e))?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if let (true, Some(name)) = (is_dir, entry.file_name().to_str()) {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Adds the pids in `dir/cgroup.procs` and in every cgroup below it to `into`.
pub(super) fn procs_below(dir: &Path, into: &mut BTreeSet<i32>) -> Result<(), CgroupError> {
    procs_walk(dir, 0, into)
}

/// Adds the pids directly in `dir` (not below) to `into`.
fn read_procs(dir: &Path, into: &mut BTreeSet<i32>) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.procs");
    let text = match read_limited(&path, MAX_PROCS_BYTES) {
        Ok(t) => t,
        // A cgroup removed while we walk, or a test tree without the file.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err("read", &path, e)),
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let pid = parse_u64(&path, line)?;
        let pid = i32::try_from(pid).map_err(|_| {
            err(
                "parse",
                &path,
                io::Error::new(io::ErrorKind::InvalidData, "pid out of range"),
            )
        })?;
        into.insert(pid);
    }
    Ok(())
}

fn procs_walk(dir: &Path, depth: usize, into: &mut BTreeSet<i32>) -> Result<(), CgroupError> {
    read_procs(dir, into)?;
    if depth >= MAX_DEPTH {
        return Err(err(
            "walk",
            dir,
            invalid(format!("cgroups nested deeper than {MAX_DEPTH}")),
        ));
    }
    for child in subdirs(dir)? {
        procs_walk(&dir.join(child), depth + 1, into)?;
    }
    Ok(())
}

/// Removes the cgroup `dir` and the cgroups below it, children first. The kernel
/// refuses (`EBUSY`) while a task is inside; so does this, for test trees too. In a test
/// tree (`kernel == false`) the control files are plain files and are unlinked first;
/// on cgroupfs nothing but `rmdir` is ever used. Never crosses into another filesystem.
pub(super) fn remove_tree(dir: &Path, kernel: bool) -> Result<(), CgroupError> {
    let dev = match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => m.dev(),
        Ok(_) => return Err(err("remove", dir, invalid("not a directory".into()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err("remove", dir, e)),
    };
    remove_walk(dir, dev, kernel, 0)
}

fn remove_walk(dir: &Path, dev: u64, kernel: bool, depth: usize) -> Result<(), CgroupError> {
    if depth >= MAX_DEPTH {
        return Err(err(
            "remove",
            dir,
            invalid(format!("cgroups nested deeper than {MAX_DEPTH}")),
        ));
    }
    for child in subdirs(dir)? {
        let path = dir.join(child);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.dev() != dev => {
                return Err(err(
                    "remove",
                    &path,
                    invalid("another filesystem is mounted here".into()),
                ));
            }
            Ok(_) => remove_walk(&path, dev, kernel, depth + 1)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err("remove", &path, e)),
        }
    }
    let mut tasks = BTreeSet::new();
    read_procs(dir, &mut tasks)?;
    if !tasks.is_empty() {
        let pids: Vec<String> = tasks.iter().take(5).map(i32::to_string).collect();
        return Err(err(
            "remove",
            dir,
            io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("tasks still inside (pids {})", pids.join(", ")),
            ),
        ));
    }
    if !kernel {
        unlink_plain_files(dir)?;
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(err("remove", dir, e)),
    }
}

/// A test tree's stand-ins for the kernel's control files: regular files only.
fn unlink_plain_files(dir: &Path) -> Result<(), CgroupError> {
    let entries = std::fs::read_dir(dir).map_err(|e| err("list", dir, e))?;
    for entry in entries.take(MAX_ENTRIES) {
        let entry = entry.map_err(|e| err("list", dir, e))?;
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(|e| err("remove", &path, e))?;
        }
    }
    Ok(())
}

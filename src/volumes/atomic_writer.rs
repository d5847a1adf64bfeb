//! kubelet's atomic writer (`pkg/volume/util/atomic_writer.go`): the files of a projected
//! volume (`downwardAPI`) change all at once, so a reader never sees half an update.
//!
//! Layout in the volume directory:
//! - `..<timestamp>.<n>/`: one complete version of the files;
//! - `..data` → `..<timestamp>.<n>`: the current version, swapped by `rename` of a new link;
//! - `<name>` → `..data/<name>`: each user-visible top-level name, a link through `..data`.
//!
//! Nothing is written when the content and modes are unchanged. Item paths are pod input:
//! they are checked to be relative, without `..`, and bounded as kubelet bounds them.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::safe_path;

/// The link naming the current version.
pub(crate) const DATA_DIR: &str = "..data";
const DATA_TMP: &str = "..data_tmp";
/// kubelet's `maxPathLength` and `maxFileNameLength`.
const MAX_PATH: usize = 4096;
const MAX_NAME: usize = 255;
/// Most files one volume may hold (its items come from one bounded manifest).
const MAX_FILES: usize = 1024;

/// One file of the payload: its bytes, permission bits and, for a token given to
/// the pod's one user (kubelet's `FsUser`), its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
    /// The owner's uid; None (or 0): root's, as the file is made.
    pub fs_user: Option<u32>,
}

/// Relative path (as given by the pod) → file.
pub(crate) type Payload = BTreeMap<String, FileProjection>;

/// Why a volume could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AtomicWriteError {
    #[error("item path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("more than {MAX_FILES} items")]
    TooMany,
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> AtomicWriteError + '_ {
    move |source| AtomicWriteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// kubelet's `validatePath`, plus oxlet's `safe_path::relative`: returns the path's
/// components.
fn validate_path(path: &str) -> Result<Vec<&str>, AtomicWriteError> {
    let bad = |reason| AtomicWriteError::InvalidPath {
        path: path.to_string(),
        reason,
    };
    if path.len() > MAX_PATH {
        return Err(bad("longer than 4096 bytes"));
    }
    if path.starts_with("..") {
        return Err(bad("must not start with '..'"));
    }
    safe_path::relative(path).map_err(|_| bad("must be relative and must not contain '..'"))?;
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.is_empty() {
        return Err(bad("must not be empty"));
    }
    if parts.iter().any(|p| p.len() > MAX_NAME) {
        return Err(bad("has a component longer than 255 bytes"));
    }
    Ok(parts)
}

/// The payload with each path cleaned (`a//./b` → `a/b`), checked.
fn clean(payload: &Payload) -> Result<BTreeMap<String, &FileProjection>, AtomicWriteError> {
    if payload.len() > MAX_FILES {
        return Err(AtomicWriteError::TooMany);
    }
    payload
        .iter()
        .map(|(p, f)| Ok((validate_path(p)?.join("/"), f)))
        .collect()
}

/// The current version's directory name, if `..data` is a link to one.
fn current_version(target: &Path) -> Option<String> {
    let link = std::fs::read_link(target.join(DATA_DIR)).ok()?;
    let name = link.to_str()?.to_string();
    let plain = safe_path::component(&name).is_ok() && name.starts_with("..");
    let is_dir = std::fs::symlink_metadata(target.join(&name)).is_ok_and(|m| m.is_dir());
    (plain && is_dir).then_some(name)
}

/// Regular files below `dir` (symlinks not followed), relative, with their contents and modes.
fn read_version(dir: &Path) -> io::Result<BTreeMap<String, FileProjection>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, rel)) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let meta = entry.path().symlink_metadata()?;
            if meta.is_dir() {
                stack.push((entry.path(), rel));
            } else if meta.is_file() && out.len() < MAX_FILES {
                let data = std::fs::read(entry.path())?;
                let mode = meta.permissions().mode() & 0o7777;
                let owner = std::os::unix::fs::MetadataExt::uid(&meta);
                let fs_user = (owner != 0).then_some(owner);
                out.insert(
                    rel,
                    FileProjection {
                        data,
                        mode,
                        fs_user,
                    },
                );
            }
        }
    }
    Ok(out)
}

/// A fresh version directory `..YYYY_MM_DD_HH_MM_SS.<n>` (kubelet's timestamped name).
fn new_version_dir(target: &Path) -> Result<(String, PathBuf), AtomicWriteError> {
    let stamp = jiff::Timestamp::now()
        .strftime("%Y_%m_%d_%H_%M_%S")
        .to_string();
    let nanos = jiff::Timestamp::now().subsec_nanosecond();
    for n in 0..100 {
        let name = format!("..{stamp}.{}", i64::from(nanos) + n);
        let path = target.join(&name);
        match std::fs::DirBuilder::new().mode(0o755).create(&path) {
            Ok(()) => {
                // The umask may have narrowed it.
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    .map_err(io_err(&path))?;
                return Ok((name, path));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&path)(e)),
        }
    }
    Err(io_err(target)(io::Error::other(
        "no free version directory name",
    )))
}

fn write_files(
    dir: &Path,
    files: &BTreeMap<String, &FileProjection>,
) -> Result<(), AtomicWriteError> {
    for (rel, file) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(io_err(parent))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(file.mode)
            .open(&path)
            .map_err(io_err(&path))?;
        io::Write::write_all(&mut f, &file.data).map_err(io_err(&path))?;
        f.set_permissions(std::fs::Permissions::from_mode(file.mode))
            .map_err(io_err(&path))?;
        if let Some(uid) = file.fs_user.filter(|u| *u != 0) {
            rustix::fs::fchown(&f, Some(rustix::fs::Uid::from_raw(uid)), None)
                .map_err(|e| io_err(&path)(e.into()))?;
        }
    }
    Ok(())
}

fn top_level(paths: impl IntoIterator<Item = impl AsRef<str>>) -> BTreeSet<String> {
    paths
        .into_iter()
        .filter_map(|p| p.as_ref().split('/').next().map(str::to_string))
        .collect()
}

/// Makes `target` (an existing directory of oxlet's) hold exactly `payload`. Returns
/// whether anything changed.
pub(crate) fn write(target: &Path, payload: &Payload) -> Result<bool, AtomicWriteError> {
    let files = clean(payload)?;
    let old = current_version(target);
    let old_files = match &old {
        Some(name) => read_version(&target.join(name)).map_err(io_err(target))?,
        None => BTreeMap::new(),
    };
    let unchanged = old.is_some()
        && old_files.len() == files.len()
        && files.iter().all(|(p, f)| old_files.get(p) == Some(*f));
    if unchanged {
        // The content is current, but a top-level link removed from outside still
        // comes back.
        return make_visible_links(target, &top_level(files.keys()));
    }

    let (name, dir) = new_version_dir(target)?;
    if let Err(e) = write_files(&dir, &files) {
        let _ = safe_path::remove_beneath(target, &dir);
        return Err(e);
    }
    // The swap: a new link renamed over `..data` replaces it in one step.
    let tmp = target.join(DATA_TMP);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&tmp)(e)),
        _ => {}
    }
    std::os::unix::fs::symlink(&name, &tmp).map_err(io_err(&tmp))?;
    let data = target.join(DATA_DIR);
    std::fs::rename(&tmp, &data).map_err(io_err(&data))?;

    let visible = top_level(files.keys());
    make_visible_links(target, &visible)?;
    for gone in top_level(old_files.keys()).difference(&visible) {
        let link = target.join(gone);
        if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(&link).map_err(io_err(&link))?;
        }
    }
    remove_stale_versions(target, &name)?;
    Ok(true)
}

/// The user-visible link of each top-level name into `..data`, where one is missing;
/// true when any was made.
fn make_visible_links(target: &Path, visible: &BTreeSet<String>) -> Result<bool, AtomicWriteError> {
    let mut made = false;
    for top in visible {
        let link = target.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_DIR).join(top), &link)
                .map_err(io_err(&link))?;
            made = true;
        }
    }
    Ok(made)
}

/// Removes every version directory but `keep` (the old one, and any left by a crash).
fn remove_stale_versions(target: &Path, keep: &str) -> Result<(), AtomicWriteError> {
    for entry in std::fs::read_dir(target).map_err(io_err(target))? {
        let entry = entry.map_err(io_err(target))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if name.starts_with("..") && name != keep && is_dir {
            safe_path::remove_beneath(target, &entry.path()).map_err(io_err(&entry.path()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(items: &[(&str, &str, u32)]) -> Payload {
        items
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                        fs_user: None,
                    },
                )
            })
            .collect()
    }

    fn versions(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("..") && n != DATA_DIR)
            .collect();
        v.sort();
        v
    }

    fn read(dir: &Path, p: &str) -> String {
        std::fs::read_to_string(dir.join(p)).unwrap()
    }

    #[test]
    fn writes_a_version_and_links_and_swaps_it() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let first = payload(&[("labels", "a=\"1\"", 0o644), ("sub/name", "p", 0o400)]);
        assert!(write(t, &first).unwrap());
        assert_eq!(read(t, "labels"), "a=\"1\"");
        assert_eq!(read(t, "sub/name"), "p");
        assert_eq!(
            std::fs::read_link(t.join("labels")).unwrap(),
            Path::new("..data/labels")
        );
        assert_eq!(
            std::fs::read_link(t.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        let v1 = versions(t);
        assert_eq!(v1.len(), 1, "{v1:?}");
        assert!(v1[0].starts_with("..20"), "{v1:?}");
        assert_eq!(
            std::fs::read_link(t.join(DATA_DIR)).unwrap(),
            Path::new(&v1[0])
        );
        let mode = |p: &str| std::fs::metadata(t.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("sub/name"), 0o400);
        assert_eq!(mode("labels"), 0o644);

        // Same content: nothing written, same version.
        assert!(!write(t, &first).unwrap());
        assert_eq!(versions(t), v1);

        // A changed value and a removed item: a new version, the old one gone, the
        // link of the removed item gone.
        let second = payload(&[("labels", "a=\"2\"", 0o644)]);
        assert!(write(t, &second).unwrap());
        assert_eq!(read(t, "labels"), "a=\"2\"");
        let v2 = versions(t);
        assert_eq!(v2.len(), 1);
        assert_ne!(v2, v1);
        assert!(std::fs::symlink_metadata(t.join("sub")).is_err());
        assert!(std::fs::symlink_metadata(t.join(DATA_TMP)).is_err());

        // A mode change alone is a change too.
        let third = payload(&[("labels", "a=\"2\"", 0o600)]);
        assert!(write(t, &third).unwrap());
        assert_eq!(mode("labels"), 0o600);
    }

    #[test]
    fn stale_versions_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        std::fs::create_dir(t.join("..2020_01_01_00_00_00.1")).unwrap();
        std::fs::write(t.join("..2020_01_01_00_00_00.1/x"), "old").unwrap();
        assert!(write(t, &payload(&[("x", "new", 0o644)])).unwrap());
        assert_eq!(versions(t).len(), 1);
        assert_eq!(read(t, "x"), "new");
    }

    #[test]
    fn item_paths_are_checked_and_nothing_is_written_for_a_bad_one() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        for bad in [
            "../escape",
            "a/../../b",
            "/etc/passwd",
            "..data",
            "..hidden",
            "",
            ".",
            &"x".repeat(256),
            &"a/".repeat(2100),
        ] {
            let err = write(t, &payload(&[("ok", "1", 0o644), (bad, "x", 0o644)])).unwrap_err();
            assert!(
                matches!(err, AtomicWriteError::InvalidPath { .. }),
                "{bad}: {err}"
            );
        }
        assert_eq!(std::fs::read_dir(t).unwrap().count(), 0);
        // `.` parts and doubled slashes are cleaned, as kubelet's path.Clean does.
        assert!(write(t, &payload(&[("./a//b", "1", 0o644)])).unwrap());
        assert_eq!(read(t, "a/b"), "1");
    }

    #[test]
    fn a_removed_top_level_link_comes_back_though_the_content_is_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let p = payload(&[("a", "1", 0o644), ("dir/b", "2", 0o644)]);
        assert!(write(t, &p).unwrap());
        std::fs::remove_file(t.join("a")).unwrap();
        std::fs::remove_file(t.join("dir")).unwrap();
        assert!(write(t, &p).unwrap(), "the links were made again");
        assert_eq!(read(t, "a"), "1");
        assert_eq!(read(t, "dir/b"), "2");
        assert!(!write(t, &p).unwrap(), "nothing to do");
    }

    #[test]
    fn a_symlink_planted_in_the_version_is_not_followed_when_reading() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let t = &t.join("vol");
        std::fs::create_dir(t).unwrap();
        write(t, &payload(&[("x", "1", 0o644)])).unwrap();
        let v = versions(t).remove(0);
        std::os::unix::fs::symlink(&outside, t.join(&v).join("link")).unwrap();
        std::fs::write(outside.join("keep"), "k").unwrap();
        assert!(write(t, &payload(&[("x", "2", 0o644)])).unwrap());
        assert_eq!(read(&outside, "keep"), "k");
    }
}

//! The agent's locks, so that two agents never manage the same pods or the same
//! runtime (each would kill the other's containers as orphans):
//! - `<root-dir>/oxlet.lock`, always: a second oxlet on the same root dir is refused
//!   at once, naming the holder;
//! - one per external runtime endpoint (`/run/oxlet/locks/`), always: the same for two
//!   oxlets on one containerd with different root dirs. A managed containerd lives
//!   under the root dir, so its lock covers it;
//! - kubelet's `--lock-file`, when given: waited for (`flock`), as kubelet does, so a
//!   new agent can take over from an old one; with `--exit-on-lock-contention` the
//!   holder leaves as soon as another process opens the file (kubelet's inotify watch).
//!
//! Each lock is an exclusive `flock` on a file the agent keeps open; the kernel drops it
//! when the process dies, kill -9 included, so no stale lock ever needs cleaning. The
//! file holds the holder's pid and start time for the message.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rustix::fs::{FlockOperation, flock};
use tracing::info;

use crate::logging::STARTUP_TARGET;
use crate::options::Options;

/// Where the runtime endpoints' locks live.
const RUNTIME_LOCK_DIR: &str = "/run/oxlet/locks";
/// The most of a lock file read for the holder's description.
const MAX_HOLDER_BYTES: u64 = 1024;

/// The locks held; dropping it (the process ending) releases them.
pub(super) struct Held {
    _files: Vec<File>,
    /// `--lock-file`, watched for contention when asked.
    pub lock_file: Option<PathBuf>,
}

/// Opens (or makes, 0600) the lock file at `path` itself: a symbolic link there is
/// refused, never followed (a link to `/etc/shadow` would otherwise have that file
/// truncated when the holder is written), and so is anything but a regular file.
fn open(path: &Path) -> anyhow::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("{}: cannot make its directory", path.display()))?;
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path);
    let file = match file {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            anyhow::bail!(
                "{}: is a symbolic link; a lock file is opened only as itself, never through a link",
                path.display()
            )
        }
        other => other.with_context(|| format!("{}: cannot open the lock file", path.display()))?,
    };
    let kind = file
        .metadata()
        .with_context(|| format!("{}: cannot read the lock file", path.display()))?
        .file_type();
    if !kind.is_file() {
        anyhow::bail!(
            "{}: is not a regular file; refusing to use it as a lock file",
            path.display()
        );
    }
    Ok(file)
}

/// What the holder wrote, on one line (empty if it wrote nothing).
fn holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.rewind();
    let _ = file.take(MAX_HOLDER_BYTES).read_to_string(&mut text);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Writes this process as the holder.
fn claim(file: &mut File, what: &str) {
    let started = jiff::Timestamp::now();
    let text = format!("pid={} started={started} {what}\n", std::process::id());
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = file.write_all(text.as_bytes());
}

/// Takes `path` at once, or fails naming the holder and why it matters.
fn take_now(path: &Path, what: &str, why: &str) -> anyhow::Result<File> {
    let mut file = open(path)?;
    if let Err(e) = flock(&file, FlockOperation::NonBlockingLockExclusive) {
        if e == rustix::io::Errno::WOULDBLOCK {
            let h = holder(&mut file);
            anyhow::bail!(
                "another agent holds {} ({}): {why}; stop it first",
                path.display(),
                if h.is_empty() {
                    "holder unknown".into()
                } else {
                    h
                }
            );
        }
        return Err(e).with_context(|| format!("{}: cannot lock", path.display()));
    }
    claim(&mut file, what);
    Ok(file)
}

/// The lock file of an external runtime endpoint: its socket path, spelled as one
/// file name.
pub(super) fn runtime_lock_path(endpoint: &str) -> Option<PathBuf> {
    let socket = endpoint.strip_prefix("unix://")?;
    let name: String = socket
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(200)
        .collect();
    Some(Path::new(RUNTIME_LOCK_DIR).join(format!("runtime{name}.lock")))
}

/// Takes every lock the options call for; waits for `--lock-file` as kubelet does.
pub(super) async fn acquire(opts: &Options) -> anyhow::Result<Held> {
    let mut files = Vec::new();
    if let Some(path) = &opts.process.lock_file {
        files.push(wait_for(path.clone()).await?);
    }
    let root = opts.process.root_dir.join("oxlet.lock");
    let what = format!("rootDir={}", opts.process.root_dir.display());
    files.push(take_now(
        &root,
        &what,
        "two agents on one root dir would each kill the other's containers",
    )?);
    if opts.runtime.endpoint_explicit
        && let Some(path) = runtime_lock_path(&opts.runtime.endpoint)
    {
        let what = format!("runtime={} {what}", opts.runtime.endpoint);
        files.push(take_now(
            &path,
            &what,
            "two agents on one runtime would each kill the other's containers",
        )?);
    }
    Ok(Held {
        _files: files,
        lock_file: opts.process.lock_file.clone(),
    })
}

/// kubelet's `--lock-file`: an exclusive `flock`, waited for.
async fn wait_for(path: PathBuf) -> anyhow::Result<File> {
    let mut file = open(&path)?;
    if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        info!(target: STARTUP_TARGET, lockFile = %path.display(), holder = %holder(&mut file), "waiting for the lock file's holder to let go");
        file = tokio::task::spawn_blocking(move || {
            flock(&file, FlockOperation::LockExclusive).map(|()| file)
        })
        .await
        .context("the lock file's waiter stopped")?
        .with_context(|| format!("{}: cannot lock", path.display()))?;
    }
    claim(&mut file, "lockFile");
    info!(target: STARTUP_TARGET, lockFile = %path.display(), "acquired the lock file");
    Ok(file)
}

/// Resolves when another process opens `path` (kubelet's
/// `watchForLockfileContention`: a new agent opening the file asks this one to go).
pub(super) async fn contention(path: &Path) -> anyhow::Result<()> {
    use notify::{EventKind, RecursiveMode, Watcher as _, event::AccessKind};
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(e) = res
            && matches!(e.kind, EventKind::Access(AccessKind::Open(_)))
        {
            let _ = tx.try_send(());
        }
    })
    .context("cannot watch the lock file")?;
    watcher
        .watch(path, RecursiveMode::NonRecursive)
        .with_context(|| format!("{}: cannot watch", path.display()))?;
    rx.recv().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_refused_naming_its_holder_and_freed_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/oxlet.lock");
        let first = take_now(&path, "rootDir=/x", "it would fight").unwrap();
        let err = take_now(&path, "rootDir=/x", "it would fight")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("pid={}", std::process::id())),
            "{err}"
        );
        assert!(
            err.contains("rootDir=/x") && err.contains("it would fight"),
            "{err}"
        );
        drop(first);
        take_now(&path, "rootDir=/x", "it would fight").unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_symlink_or_a_fifo_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let link = dir.path().join("oxlet.lock");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = take_now(&link, "rootDir=/x", "it would fight")
            .unwrap_err()
            .to_string();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let fifo = dir.path().join("fifo.lock");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = take_now(&fifo, "rootDir=/x", "it would fight")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn runtime_endpoints_map_to_one_file_name_each() {
        assert_eq!(
            runtime_lock_path("unix:///run/containerd/containerd.sock").unwrap(),
            Path::new("/run/oxlet/locks/runtime_run_containerd_containerd.sock.lock")
        );
        assert_eq!(runtime_lock_path("tcp://x:1"), None);
    }
}

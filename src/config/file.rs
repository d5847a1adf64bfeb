//! The static pod directory source (kubelet's `config/file.go`, `file_linux.go`).
//!
//! Every change re-reads the whole path and sends the complete set of pods: editors
//! replace files by rename and half-written files come and go, so per-event
//! bookkeeping would only add ways to be wrong. inotify (through `notify`) gives low
//! latency; the periodic relist every `check_frequency` is the safety net for
//! anything the watch misses or could not be set up for.
//!
//! A problem is never mistaken for "no pods": a listing that fails sends nothing
//! (the last set stays), a file that cannot be read for lack of descriptors or
//! memory keeps its pod, and a file that turns bad keeps its pod until a periodic
//! relist finds it still bad (as kubelet, whose watch events leave the store alone
//! on a decode error and whose periodic list replaces it).

use std::ops::ControlFlow;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use notify::{EventKind, RecursiveMode, Watcher, event::AccessKind, event::AccessMode};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::SourceSnapshot;
use super::manifest::{decode_static_pod, is_transient_io, read_manifest};
use crate::pod::FILE_SOURCE;

/// How long to wait, after an event saying a file was created or written but not yet
/// closed, for the rest of its burst (`cp` of one or several files), so one relist covers
/// them all and does not read a half-written file. A finished change (a rename into the
/// directory, a closed write, a removal) is relisted at once.
const COALESCE: Duration = Duration::from_millis(1);
/// First and maximum delay between attempts to set up the watch (kubelet: 1s → 20s).
const WATCH_RETRY_MIN: Duration = Duration::from_secs(1);
const WATCH_RETRY_MAX: Duration = Duration::from_secs(20);
/// How soon a listing that failed (no descriptors, a stat error) is tried again.
const SCAN_RETRY: Duration = Duration::from_secs(1);

/// The pods defined at `path` for `node_name`: every good manifest, in file name
/// order. Bad files are logged and skipped; a missing path is an empty set, and so
/// is a path that cannot be listed at all (logged).
#[cfg(test)]
pub(crate) fn list_manifests(path: &Path, node_name: &str) -> Vec<Pod> {
    match scan(
        &normalize(path.to_path_buf()),
        node_name,
        &mut DecodeCache::default(),
        true,
    ) {
        Ok(s) => s.pods,
        Err(e) => {
            warn!("{e}");
            Vec::new()
        }
    }
}

/// What identifies one version of a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    fn of(m: &std::fs::Metadata) -> Self {
        FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// What reading one manifest gave.
enum Load {
    Pod(Box<Pod>),
    /// The file is there but defines no pod: decode, validation or a read error
    /// about the file itself (logged).
    Bad,
    /// The read failed for a reason that says nothing about the file (no
    /// descriptors, no memory; logged): its last pod stays.
    Transient,
    /// Removed between listing and reading.
    Gone,
}

/// One manifest file's history across scans.
#[derive(Debug, Default)]
struct FileState {
    /// The stamp and outcome of the last completed decode, reused while the file is
    /// unchanged, so a burst of N new files costs N decodes rather than N² (every
    /// event relists the whole directory) and a bad file is reported once per change.
    decoded: Option<(FileStamp, Option<Pod>)>,
    /// The pod the file last defined. Kept while the file is unreadable, and while
    /// it is bad until a periodic relist confirms it (kubelet: a watch event that
    /// fails to decode leaves the store alone; the periodic list replaces it).
    current: Option<Pod>,
    /// An earlier scan already found the file bad while it still had a pod.
    bad_seen: bool,
}

/// Per-file state for the scans of one source.
#[derive(Debug, Default)]
struct DecodeCache {
    files: std::collections::HashMap<PathBuf, FileState>,
    /// The current scan met a transient failure (see [`Load::Transient`]).
    transient: bool,
}

impl DecodeCache {
    /// The pod `file` contributes to this scan. `confirm` is set for periodic
    /// relists: only they drop the pod of a file that an earlier scan found bad, so
    /// a truncate-then-rewrite or a half-written file never removes a running pod.
    fn pod(
        &mut self,
        file: &Path,
        stamp: FileStamp,
        node_name: &str,
        confirm: bool,
    ) -> Option<Pod> {
        let state = self.files.entry(file.to_path_buf()).or_default();
        let loaded = match &state.decoded {
            Some((s, Some(pod))) if *s == stamp => Load::Pod(Box::new(pod.clone())),
            Some((s, None)) if *s == stamp => Load::Bad,
            _ => load(file, node_name),
        };
        self.settle(file, Some(stamp), loaded, confirm)
    }

    /// Records what this scan found for `file` (`stamp`: None when it could not be
    /// stat'ed) and returns the pod it contributes.
    fn settle(
        &mut self,
        file: &Path,
        stamp: Option<FileStamp>,
        loaded: Load,
        confirm: bool,
    ) -> Option<Pod> {
        let state = self.files.entry(file.to_path_buf()).or_default();
        match loaded {
            Load::Pod(pod) => {
                let pod = *pod;
                state.decoded = stamp.map(|s| (s, Some(pod.clone())));
                state.current = Some(pod.clone());
                state.bad_seen = false;
                Some(pod)
            }
            Load::Bad => {
                state.decoded = stamp.map(|s| (s, None));
                let prev = state.current.take()?;
                if confirm && state.bad_seen {
                    warn!(path = %file.display(), "static pod manifest is still bad at the periodic relist; removing its pod");
                    state.bad_seen = false;
                    return None;
                }
                if !state.bad_seen {
                    info!(path = %file.display(), "keeping the pod of the bad static pod manifest until a periodic relist confirms it");
                }
                state.bad_seen = true;
                state.current = Some(prev.clone());
                Some(prev)
            }
            Load::Transient => {
                self.transient = true;
                state.current.clone()
            }
            Load::Gone => {
                state.current = None;
                None
            }
        }
    }
}

/// What one listing found.
#[derive(Debug)]
struct Scan {
    pods: Vec<Pod>,
    /// Manifest files considered (hidden files and subdirectories not counted).
    files: usize,
    missing: bool,
    /// Some file could not be read for lack of resources: worth an early retry.
    incomplete: bool,
}

/// Why a listing cannot be trusted; the source then keeps its last set (kubelet
/// returns the error and leaves its store alone). Running out of descriptors must
/// never look like an empty directory.
#[derive(Debug, thiserror::Error)]
enum ScanError {
    #[error("cannot stat static pod path {}: {source}; keeping the last set of static pods", .path.display())]
    Stat {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("static pod path {} is neither a directory nor a regular file; keeping the last set of static pods", .path.display())]
    NotDirOrFile { path: PathBuf },
    #[error("cannot list static pod directory {}: {source}; keeping the last set of static pods", .path.display())]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The blocking task that lists the directory panicked or was cancelled.
    #[error("static pod listing task failed: {0}; keeping the last set of static pods")]
    Task(#[from] tokio::task::JoinError),
}

/// Lists `path` once (`confirm`: this is a periodic relist, see [`DecodeCache::pod`]).
fn scan(
    path: &Path,
    node_name: &str,
    cache: &mut DecodeCache,
    confirm: bool,
) -> Result<Scan, ScanError> {
    cache.transient = false;
    let mut out = scan_path(path, node_name, cache, confirm)?;
    out.incomplete = cache.transient;
    Ok(out)
}

fn scan_path(
    path: &Path,
    node_name: &str,
    cache: &mut DecodeCache,
    confirm: bool,
) -> Result<Scan, ScanError> {
    let mut out = Scan {
        pods: Vec::new(),
        files: 0,
        missing: false,
        incomplete: false,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            out.missing = true;
            cache.files.clear();
            return Ok(out);
        }
        Err(source) => {
            return Err(ScanError::Stat {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if meta.is_file() {
        out.files = 1;
        out.pods
            .extend(cache.pod(path, FileStamp::of(&meta), node_name, confirm));
        cache.files.retain(|f, _| f == path);
        return Ok(out);
    }
    if !meta.is_dir() {
        return Err(ScanError::NotDirOrFile {
            path: path.to_path_buf(),
        });
    }
    let list_err = |source| ScanError::List {
        path: path.to_path_buf(),
        source,
    };
    // kubelet globs `[^.]*` and sorts: hidden files (editor swap files, our own
    // temporaries) never count, and the order is stable. An error part-way through
    // the listing fails the whole scan: a partial list would drop pods.
    let mut names = Vec::new();
    for entry in std::fs::read_dir(path).map_err(list_err)? {
        let name = entry.map_err(list_err)?.file_name();
        if !name.as_encoded_bytes().starts_with(b".") {
            names.push(name);
        }
    }
    names.sort();
    let mut seen = std::collections::HashSet::new();
    for name in names {
        let file = path.join(&name);
        // Follows symlinks, as kubelet's os.Stat does (config managers link files in).
        let meta = match std::fs::metadata(&file) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                // Like an unreadable file: out of resources keeps its pod, anything
                // else (ELOOP, EACCES) is a bad file, kept until a periodic relist.
                warn!(path = %file.display(), "cannot stat static pod manifest: {e}");
                let loaded = if is_transient_io(&e) {
                    Load::Transient
                } else {
                    Load::Bad
                };
                out.pods.extend(cache.settle(&file, None, loaded, confirm));
                seen.insert(file);
                continue;
            }
        };
        if meta.is_dir() {
            debug!(path = %file.display(), "not recursing into subdirectory of the static pod path");
            continue;
        }
        if !meta.is_file() {
            // A FIFO would block a read and a device would never end; never open them.
            warn!(path = %file.display(), "skipping static pod manifest: not a regular file");
            continue;
        }
        out.files += 1;
        out.pods
            .extend(cache.pod(&file, FileStamp::of(&meta), node_name, confirm));
        seen.insert(file);
    }
    cache.files.retain(|f, _| seen.contains(f));
    Ok(out)
}

/// One manifest file to a pod, or a logged reason why not.
fn load(file: &Path, node_name: &str) -> Load {
    let result = read_manifest(file).and_then(|bytes| decode_static_pod(&bytes, file, node_name));
    match result {
        Ok(pod) => Load::Pod(Box::new(pod)),
        // Removed between listing and reading: the next event relists.
        Err(e) if e.is_not_found() => Load::Gone,
        Err(e) if e.is_transient() => {
            warn!("cannot read static pod manifest now, keeping its last pod: {e}");
            Load::Transient
        }
        Err(e) => {
            // The error names the file.
            warn!("skipping static pod manifest: {e}");
            Load::Bad
        }
    }
}

/// `path` without a trailing `/` or `.` components, as kubelet strips them; the
/// manifest paths (and so the UIDs) must not depend on how the flag was spelled.
fn normalize(path: PathBuf) -> PathBuf {
    let clean: PathBuf = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if clean.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        clean
    }
}

/// Why a relist happened, for the timing logs.
#[derive(Debug, Clone, Copy)]
enum Reason {
    Initial,
    Inotify,
    Periodic,
    WatchEstablished,
    /// The previous listing failed.
    Retry,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Initial => "initial",
            Reason::Inotify => "inotify",
            Reason::Periodic => "periodic",
            Reason::WatchEstablished => "watch-established",
            Reason::Retry => "retry",
        }
    }
}

/// What to watch so that changes at `path` show up: the directory itself, or the
/// parent when `path` is a single file (editors replace it by rename, which would
/// orphan a watch on the file's inode) or does not exist yet (so its creation is seen).
#[derive(Debug, Clone, PartialEq, Eq)]
struct WatchTarget {
    dir: PathBuf,
    /// When watching the parent: only events about this path matter.
    only: Option<PathBuf>,
    /// Device and inode of `dir`: a directory deleted and recreated needs a new watch.
    id: Option<(u64, u64)>,
}

fn watch_target(path: &Path) -> WatchTarget {
    let id = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => WatchTarget {
            dir: path.to_path_buf(),
            only: None,
            id: Some((m.dev(), m.ino())),
        },
        _ => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            WatchTarget {
                id: id(&parent),
                dir: parent,
                only: Some(path.to_path_buf()),
            }
        }
    }
}

/// Whether an inotify event can change the pod set. Opens and read-only closes are
/// dropped: our own relist opens every file and would otherwise trigger itself.
fn relevant(event: &notify::Event, target: &WatchTarget) -> bool {
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => {}
        EventKind::Access(_) => return false,
        _ => {}
    }
    if event.need_rescan() || event.paths.is_empty() {
        return true;
    }
    match &target.only {
        // The path itself, or the watched parent going away.
        Some(only) => event
            .paths
            .iter()
            .any(|p| p.starts_with(only) || p == &target.dir),
        None => event.paths.iter().any(|p| {
            // Hidden files directly in the directory never become pods.
            let hidden = p.parent() == Some(target.dir.as_path())
                && p.file_name()
                    .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
            !hidden
        }),
    }
}

/// Whether an event leaves a file that may still be being written: created, or its
/// data changed without the writer having closed it yet.
fn may_be_incomplete(kind: &EventKind) -> bool {
    use notify::event::{CreateKind, ModifyKind};
    matches!(
        kind,
        EventKind::Create(CreateKind::File | CreateKind::Any | CreateKind::Other)
            | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any | ModifyKind::Other)
            | EventKind::Any
            | EventKind::Other
    )
}

/// The watch, re-established when its target changes and retried with back-off when
/// it cannot be set up.
struct WatchState {
    watcher: Option<(notify::RecommendedWatcher, WatchTarget)>,
    events: mpsc::Sender<()>,
    backoff: Duration,
    /// When the failed target may be tried again.
    next_attempt: Option<Instant>,
    /// The target of the last failed attempt: a different target is tried at once.
    failed: Option<WatchTarget>,
    /// Set by the watcher when the watched directory itself was removed or renamed:
    /// the watch is dead even if a new directory at the same path got the same
    /// inode number (filesystems reuse them at once).
    dead: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Set by the watcher, before its wake-up, when a relevant file was created or
    /// written and may not be complete yet (see [`COALESCE`]).
    writing: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl WatchState {
    fn new(events: mpsc::Sender<()>) -> Self {
        WatchState {
            watcher: None,
            events,
            backoff: WATCH_RETRY_MIN,
            next_attempt: None,
            failed: None,
            dead: Default::default(),
            writing: Default::default(),
        }
    }

    /// Makes the watch match the path's current shape; true when a new watch was set
    /// up. `retry_due` says the back-off for a failed target has run out.
    fn ensure(&mut self, path: &Path, retry_due: bool) -> bool {
        let target = watch_target(path);
        let dead = self.dead.swap(false, std::sync::atomic::Ordering::SeqCst);
        if let Some((_, current)) = &self.watcher {
            if *current == target && !dead {
                return false;
            }
            debug!(path = %path.display(), "static pod path changed shape; re-establishing watch");
            self.watcher = None;
        }
        if self.failed.as_ref() == Some(&target) && !retry_due {
            return false;
        }
        match self.start(&target) {
            Ok(w) => {
                debug!(dir = %target.dir.display(), "watching static pod path");
                self.watcher = Some((w, target));
                self.backoff = WATCH_RETRY_MIN;
                self.next_attempt = None;
                self.failed = None;
                true
            }
            Err(e) => {
                if self.failed.as_ref() != Some(&target) {
                    self.backoff = WATCH_RETRY_MIN;
                }
                info!(
                    dir = %target.dir.display(),
                    retryIn = %crate::duration::format_go_duration(self.backoff),
                    "cannot watch static pod path (periodic relist still applies): {e}"
                );
                self.next_attempt = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(WATCH_RETRY_MAX);
                self.failed = Some(target);
                false
            }
        }
    }

    fn start(&self, target: &WatchTarget) -> notify::Result<notify::RecommendedWatcher> {
        let tx = self.events.clone();
        let filter = target.clone();
        let dead = self.dead.clone();
        let writing = self.writing.clone();
        let mut watcher =
            notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                let wake = match res {
                    Ok(event) => {
                        let gone = matches!(
                            event.kind,
                            EventKind::Remove(_)
                                | EventKind::Modify(notify::event::ModifyKind::Name(_))
                        ) && event.paths.iter().any(|p| p == &filter.dir);
                        if gone {
                            dead.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        let relevant = relevant(&event, &filter);
                        if relevant && may_be_incomplete(&event.kind) {
                            writing.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        gone || relevant
                    }
                    // An error from the backend may mean lost events: relist to be safe.
                    Err(_) => true,
                };
                if wake {
                    // Full means a relist is already pending, which will see this change too.
                    let _ = tx.try_send(());
                }
            })?;
        watcher.watch(&target.dir, RecursiveMode::NonRecursive)?;
        Ok(watcher)
    }
}

/// Runs the file source until `cancel` fires or `tx`'s receiver is gone: one snapshot
/// at start, then one after every relevant inotify burst and every `check_frequency`.
pub(crate) async fn run_file_source(
    path: PathBuf,
    check_frequency: Duration,
    node_name: String,
    tx: mpsc::Sender<SourceSnapshot>,
    cancel: CancellationToken,
) {
    let path = normalize(path);
    // Capacity 1: a pending wake-up already covers any number of later events.
    let (event_tx, event_rx) = mpsc::channel::<()>(1);
    let mut watch = WatchState::new(event_tx);
    watch.ensure(&path, true);

    let period = check_frequency.max(Duration::from_millis(10));
    let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);

    let source = FileSource {
        path,
        node_name,
        tx,
        cancel,
        period,
        watch,
        event_rx,
        ticker,
        was_missing: false,
        cache: DecodeCache::default(),
    };
    source.run().await;
}

/// The running file source (kubelet's `sourceFile`): what it lists, where it sends,
/// and what it keeps between relists.
struct FileSource {
    path: PathBuf,
    node_name: String,
    tx: mpsc::Sender<SourceSnapshot>,
    cancel: CancellationToken,
    /// The periodic relist interval (`check_frequency`, at least 10ms).
    period: Duration,
    watch: WatchState,
    /// The watch's wake-ups.
    event_rx: mpsc::Receiver<()>,
    ticker: tokio::time::Interval,
    /// The last listing found no path (logged only when that changes).
    was_missing: bool,
    cache: DecodeCache,
}

impl FileSource {
    /// Relists, then waits for the next reason to, until cancelled or nobody listens.
    async fn run(mut self) {
        let mut reason = Reason::Initial;
        loop {
            let ControlFlow::Continue(retry_scan) = self.relist(reason).await else {
                return;
            };

            // The relist may have seen the directory appear, vanish or be replaced.
            if self.watch.ensure(&self.path, false) {
                // Changes between the last listing and the new watch would otherwise wait
                // for the next periodic relist.
                reason = Reason::WatchEstablished;
                continue;
            }

            let Some(next) = self.wait_for_change(retry_scan).await else {
                return;
            };
            reason = next;
        }
    }

    /// One listing and its snapshot (kubelet's `listConfig`): continues with when to
    /// retry a failed or incomplete one, breaks when cancelled or nobody listens.
    async fn relist(&mut self, reason: Reason) -> ControlFlow<(), Option<Instant>> {
        let started = std::time::Instant::now();
        let confirm = matches!(reason, Reason::Periodic);
        let scanned = self.scan_blocking(confirm).await;
        // After a failed listing: when to try again (sooner than the periodic relist).
        let mut retry_scan = None;
        match scanned {
            Err(e) => {
                // No snapshot: the merger keeps the last set this source sent.
                warn!(reason = reason.as_str(), "{e}");
                retry_scan = Some(Instant::now() + SCAN_RETRY.min(self.period));
            }
            Ok(scanned) => {
                if scanned.incomplete {
                    // A file could not be read for lack of resources: look again soon.
                    retry_scan = Some(Instant::now() + SCAN_RETRY.min(self.period));
                }
                self.log_missing_change(scanned.missing, reason);
                debug!(
                    reason = reason.as_str(),
                    files = scanned.files,
                    pods = scanned.pods.len(),
                    elapsed = %crate::duration::format_go_duration(started.elapsed()),
                    "relisted static pod path"
                );
                let snapshot = SourceSnapshot {
                    source: FILE_SOURCE,
                    pods: scanned.pods,
                };
                tokio::select! {
                    sent = self.tx.send(snapshot) => if sent.is_err() { return ControlFlow::Break(()) },
                    () = self.cancel.cancelled() => return ControlFlow::Break(()),
                }
            }
        }
        ControlFlow::Continue(retry_scan)
    }

    /// Runs [`scan`] on a blocking thread (it reads files), lending it the per-file
    /// cache; a failed task is an error like a failed listing.
    async fn scan_blocking(&mut self, confirm: bool) -> Result<Scan, ScanError> {
        let (path, node) = (self.path.clone(), self.node_name.clone());
        let mut cache = std::mem::take(&mut self.cache);
        // A short-lived helper, awaited at once: the source task owns it.
        let task = tokio::task::spawn_blocking(move || {
            let scanned = scan(&path, &node, &mut cache, confirm);
            (scanned, cache)
        });
        match task.await {
            Ok((s, c)) => {
                self.cache = c;
                s
            }
            Err(e) => {
                // The per-file history went with the task; the next scan rebuilds it.
                self.cache = DecodeCache::default();
                Err(ScanError::Task(e))
            }
        }
    }

    /// Says when the path disappears or appears, once per change rather than per relist.
    fn log_missing_change(&mut self, missing: bool, reason: Reason) {
        if missing != self.was_missing {
            if missing {
                info!(path = %self.path.display(), "static pod path does not exist (yet); no static pods");
            } else if !matches!(reason, Reason::Initial) {
                info!(path = %self.path.display(), "static pod path appeared");
            }
            self.was_missing = missing;
        }
    }

    /// Waits for the next reason to relist: the period, a due retry (`retry_scan`), a
    /// watch event burst, or a watch set up at last. None when cancelled or nobody listens.
    async fn wait_for_change(&mut self, retry_scan: Option<Instant>) -> Option<Reason> {
        loop {
            let retry_at = self
                .watch
                .next_attempt
                .filter(|_| self.watch.watcher.is_none());
            tokio::select! {
                () = self.cancel.cancelled() => return None,
                () = self.tx.closed() => return None,
                _ = self.ticker.tick() => return Some(Reason::Periodic),
                () = async {
                    match retry_scan {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => return Some(Reason::Retry),
                Some(()) = self.event_rx.recv() => {
                    if self.watch.writing.swap(false, std::sync::atomic::Ordering::SeqCst) {
                        tokio::time::sleep(COALESCE).await;
                    }
                    while self.event_rx.try_recv().is_ok() {}
                    return Some(Reason::Inotify);
                }
                () = async {
                    match retry_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {
                    if self.watch.ensure(&self.path, true) {
                        return Some(Reason::WatchEstablished);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::pod_uid;

    fn manifest(name: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: busybox:1.36\n"
        )
    }

    fn scan_ok(path: &Path, cache: &mut DecodeCache, confirm: bool) -> Scan {
        scan(path, "n1", cache, confirm).expect("scan failed")
    }

    fn names(pods: &[Pod]) -> Vec<String> {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn lists_good_files_sorted_skipping_bad_hidden_and_subdirs() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("b.yaml"), manifest("bravo")).unwrap();
        std::fs::write(d.join("a.json"), r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"alpha"},"spec":{"containers":[{"name":"c","image":"x"}]}}"#).unwrap();
        std::fs::write(
            d.join("c.yaml"),
            "kind: Pod\napiVersion: v1\nmetadata:\n  name: [",
        )
        .unwrap();
        std::fs::write(d.join("d.yaml"), manifest("Bad_Name")).unwrap();
        std::fs::write(d.join(".hidden.yaml"), manifest("hidden")).unwrap();
        std::fs::write(d.join("e.bin"), [0u8, 159, 146, 150]).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub").join("s.yaml"), manifest("nested")).unwrap();
        std::fs::write(d.join("z.yaml"), manifest("zulu")).unwrap();

        let pods = list_manifests(d, "n1");
        assert_eq!(names(&pods), ["alpha-n1", "bravo-n1", "zulu-n1"]);
        let s = scan_ok(d, &mut DecodeCache::default(), false);
        assert_eq!(s.files, 6);
        assert!(!s.missing);
    }

    #[test]
    fn missing_path_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let s = scan_ok(&dir.path().join("nope"), &mut DecodeCache::default(), false);
        assert!(s.pods.is_empty());
        assert!(s.missing);
    }

    #[test]
    fn single_file_path_is_the_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("only.yaml");
        std::fs::write(&file, manifest("solo")).unwrap();
        std::fs::write(dir.path().join("other.yaml"), manifest("other")).unwrap();
        assert_eq!(names(&list_manifests(&file, "n1")), ["solo-n1"]);
    }

    #[test]
    fn only_a_file_still_being_written_waits_for_the_rest_of_its_burst() {
        use notify::event::{
            AccessKind, AccessMode, CreateKind, DataChange, MetadataKind, ModifyKind, RemoveKind,
            RenameMode,
        };
        let waits = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Data(DataChange::Content)),
        ];
        for kind in waits {
            assert!(
                may_be_incomplete(&kind),
                "{kind:?} may leave a half-written file"
            );
        }
        let at_once = [
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
        ];
        for kind in at_once {
            assert!(!may_be_incomplete(&kind), "{kind:?} is a finished change");
        }
    }

    #[test]
    fn uid_depends_on_the_file_path_not_the_spelling_of_the_dir() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), manifest("a")).unwrap();
        let plain = list_manifests(dir.path(), "n1");
        let slashed = list_manifests(&PathBuf::from(format!("{}/./", dir.path().display())), "n1");
        assert_eq!(pod_uid(&plain[0]), pod_uid(&slashed[0]));
    }

    async fn next(rx: &mut mpsc::Receiver<SourceSnapshot>, within: Duration) -> SourceSnapshot {
        tokio::time::timeout(within, rx.recv())
            .await
            .expect("no snapshot in time")
            .expect("source ended")
    }

    /// Waits for a snapshot whose pod names equal `want` (relists may send repeats).
    async fn wait_for(rx: &mut mpsc::Receiver<SourceSnapshot>, want: &[&str]) -> Duration {
        let start = std::time::Instant::now();
        loop {
            let s = next(rx, Duration::from_secs(5)).await;
            assert_eq!(s.source, FILE_SOURCE);
            if names(&s.pods) == want {
                return start.elapsed();
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn source_sees_atomic_rename_and_removal_quickly() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        std::fs::write(d.join("a.yaml"), manifest("a")).unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        // A long period: only inotify can explain a fast update.
        let task = tokio::spawn(run_file_source(
            d.clone(),
            Duration::from_secs(600),
            "n1".into(),
            tx,
            cancel.clone(),
        ));
        let first = next(&mut rx, Duration::from_secs(5)).await;
        assert_eq!(names(&first.pods), ["a-n1"]);

        // Editor-style write: hidden temporary, then rename into place.
        std::fs::write(d.join(".b.yaml.tmp"), manifest("b")).unwrap();
        std::fs::rename(d.join(".b.yaml.tmp"), d.join("b.yaml")).unwrap();
        let took = wait_for(&mut rx, &["a-n1", "b-n1"]).await;
        assert!(took < Duration::from_secs(2), "took {took:?}");

        std::fs::remove_file(d.join("a.yaml")).unwrap();
        let took = wait_for(&mut rx, &["b-n1"]).await;
        assert!(took < Duration::from_secs(2), "took {took:?}");

        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("source did not stop on cancel")
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn own_reads_do_not_trigger_relists() {
        // inotify reports our own opens of the directory and files; they must not loop.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), manifest("a")).unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_file_source(
            dir.path().to_path_buf(),
            Duration::from_secs(600),
            "n1".into(),
            tx,
            cancel.clone(),
        ));
        next(&mut rx, Duration::from_secs(5)).await;
        let more = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
        assert!(more.is_err(), "unexpected relist without a change");
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn source_starts_empty_for_missing_dir_and_picks_it_up_later() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("manifests");
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_file_source(
            d.clone(),
            Duration::from_secs(600),
            "n1".into(),
            tx,
            cancel.clone(),
        ));
        let first = next(&mut rx, Duration::from_secs(5)).await;
        assert!(first.pods.is_empty());

        // Created after start: the watch on the parent notices, then moves to the dir.
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("x.yaml"), manifest("x")).unwrap();
        wait_for(&mut rx, &["x-n1"]).await;
        std::fs::write(d.join("w.yaml"), manifest("w")).unwrap();
        wait_for(&mut rx, &["w-n1", "x-n1"]).await;

        // Removed and recreated: the new directory is watched again.
        std::fs::remove_dir_all(&d).unwrap();
        wait_for(&mut rx, &[]).await;
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("z.yaml"), manifest("z")).unwrap();
        wait_for(&mut rx, &["z-n1"]).await;

        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("source did not stop when the receiver went away")
            .unwrap();
    }

    #[tokio::test]
    async fn periodic_relist_works_without_the_watch() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("a").join("b"); // parent missing too: no watch possible
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_file_source(
            d.clone(),
            Duration::from_millis(50),
            "n1".into(),
            tx,
            cancel.clone(),
        ));
        assert!(next(&mut rx, Duration::from_secs(5)).await.pods.is_empty());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("p.yaml"), manifest("p")).unwrap();
        wait_for(&mut rx, &["p-n1"]).await;
        cancel.cancel();
        task.await.unwrap();
    }

    #[test]
    fn decode_cache_reuses_unchanged_files_and_sees_edits_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, manifest("a")).unwrap();
        let mut cache = DecodeCache::default();
        let first = scan_ok(dir.path(), &mut cache, false).pods;
        assert_eq!(cache.files.len(), 1);
        let again = scan_ok(dir.path(), &mut cache, false).pods;
        assert_eq!(first, again);
        // Same path, new content written in place (no rename): a new pod.
        std::fs::write(&file, manifest("a").replace("busybox:1.36", "busybox:1.37")).unwrap();
        let edited = scan_ok(dir.path(), &mut cache, false).pods;
        assert_ne!(edited[0].metadata.uid, first[0].metadata.uid);
        std::fs::remove_file(&file).unwrap();
        assert!(scan_ok(dir.path(), &mut cache, false).pods.is_empty());
        assert!(cache.files.is_empty(), "forgotten files leave the cache");
    }

    fn uids(pods: &[Pod]) -> Vec<String> {
        pods.iter().map(|p| pod_uid(p).to_string()).collect()
    }

    #[test]
    fn bad_edit_keeps_the_pod_until_a_periodic_relist_confirms() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = d.join("a.yaml");
        std::fs::write(&file, manifest("a")).unwrap();
        let mut cache = DecodeCache::default();
        let good = scan_ok(d, &mut cache, false).pods;
        assert_eq!(names(&good), ["a-n1"]);

        // An event-driven relist sees the bad edit: the previous pod stays.
        std::fs::write(&file, "kind: Pod\napiVersion: v1\nmetadata: [").unwrap();
        assert_eq!(scan_ok(d, &mut cache, false).pods, good);
        assert_eq!(scan_ok(d, &mut cache, false).pods, good);
        // The periodic relist confirms it is still bad: now it goes.
        assert!(scan_ok(d, &mut cache, true).pods.is_empty());
        assert!(scan_ok(d, &mut cache, false).pods.is_empty());

        // Fixed, then broken again and first seen by a periodic relist: that one
        // keeps the pod, the next periodic relist drops it.
        std::fs::write(&file, manifest("a")).unwrap();
        assert_eq!(scan_ok(d, &mut cache, false).pods, good);
        std::fs::write(&file, "").unwrap();
        assert_eq!(scan_ok(d, &mut cache, true).pods, good);
        assert!(scan_ok(d, &mut cache, true).pods.is_empty());

        // A file bad from the start never had a pod to keep.
        std::fs::write(d.join("b.yaml"), "not: [a pod").unwrap();
        assert!(scan_ok(d, &mut cache, false).pods.is_empty());

        // A file that cannot be stat'ed (here a symlink loop, ELOOP) is a bad file too.
        std::fs::remove_file(d.join("b.yaml")).unwrap();
        std::fs::write(&file, manifest("a")).unwrap();
        assert_eq!(scan_ok(d, &mut cache, false).pods, good);
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&file, &file).unwrap();
        let s = scan_ok(d, &mut cache, false);
        assert_eq!(s.pods, good);
        assert!(
            !s.incomplete,
            "ELOOP is about the file, not a lack of resources"
        );
        // Seen bad by the relist above: the periodic relist confirms and drops it.
        assert!(scan_ok(d, &mut cache, true).pods.is_empty());
    }

    #[test]
    fn listing_errors_are_errors_not_empty_sets() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("manifests");
        // A symlink loop: stat fails with ELOOP, which is not "not found".
        std::os::unix::fs::symlink(&d, &d).unwrap();
        let err = scan(&d, "n1", &mut DecodeCache::default(), true).unwrap_err();
        assert!(matches!(err, ScanError::Stat { .. }), "{err}");
        assert!(err.to_string().contains("keeping the last set"), "{err}");
        // Neither a directory nor a file.
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = scan(&fifo, "n1", &mut DecodeCache::default(), true).unwrap_err();
        assert!(matches!(err, ScanError::NotDirOrFile { .. }), "{err}");
    }

    fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stat_error_on_the_path_keeps_the_last_set() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("manifests");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("a.yaml"), manifest("a")).unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_file_source(
            d.clone(),
            Duration::from_millis(50),
            "n1".into(),
            tx,
            cancel.clone(),
        ));
        wait_for(&mut rx, &["a-n1"]).await;

        // The path becomes a symlink loop (ELOOP): several periodic relists fail,
        // and none of them may send anything but the last set. The loop is swapped in
        // atomically: between a rename and a new link the path would be missing, for
        // which kubelet (so oxlet) sends an empty set.
        let away = dir.path().join("away");
        std::os::unix::fs::symlink(&d, &away).unwrap();
        let exchange = || {
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &d,
                rustix::fs::CWD,
                &away,
                rustix::fs::RenameFlags::EXCHANGE,
            )
            .unwrap();
        };
        exchange();
        let until = tokio::time::Instant::now() + Duration::from_millis(600);
        while let Ok(Some(s)) = tokio::time::timeout_at(until, rx.recv()).await {
            assert_eq!(names(&s.pods), ["a-n1"], "a failed listing changed the set");
        }

        exchange();
        std::fs::write(d.join("b.yaml"), manifest("b")).unwrap();
        wait_for(&mut rx, &["a-n1", "b-n1"]).await;
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn truncate_then_rewrite_of_identical_content_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.yaml");
        std::fs::write(&file, manifest("a")).unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        // A long period: every relist below is inotify-driven (non-confirming).
        let task = tokio::spawn(run_file_source(
            dir.path().to_path_buf(),
            Duration::from_secs(600),
            "n1".into(),
            tx,
            cancel.clone(),
        ));
        let first = next(&mut rx, Duration::from_secs(5)).await.pods;
        assert_eq!(names(&first), ["a-n1"]);

        // As `cat > file` or a config tool does: truncate, pause, write the same bytes.
        drop(std::fs::File::create(&file).unwrap());
        // The truncation is seen (a relist happens) and changes nothing.
        let during = next(&mut rx, Duration::from_secs(5)).await.pods;
        assert_eq!(uids(&during), uids(&first));
        std::fs::write(&file, manifest("a")).unwrap();
        let mut after = 0;
        while let Ok(Some(s)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
            assert_eq!(s.pods, first, "the rewrite changed the pod");
            after += 1;
        }
        assert!(after >= 1, "the rewrite was not relisted");
        cancel.cancel();
        task.await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fifo_and_device_links_never_freeze_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        mkfifo(&d.join("a-fifo.yaml"));
        std::os::unix::fs::symlink("/dev/zero", d.join("b-zero.yaml")).unwrap();
        std::os::unix::fs::symlink("/dev/urandom", d.join("c-urandom.yaml")).unwrap();
        std::fs::write(d.join("d.yaml"), manifest("good")).unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_file_source(
            d.to_path_buf(),
            Duration::from_millis(100),
            "n1".into(),
            tx,
            cancel.clone(),
        ));
        let took = wait_for(&mut rx, &["good-n1"]).await;
        assert!(took < Duration::from_secs(2), "took {took:?}");
        // And it keeps relisting: periodic snapshots keep coming with the good pod.
        for _ in 0..3 {
            let s = next(&mut rx, Duration::from_secs(2)).await;
            assert_eq!(names(&s.pods), ["good-n1"]);
        }
        cancel.cancel();
        task.await.unwrap();
    }

    const EMFILE_CHILD_ENV: &str = "OXLET_TEST_EMFILE_DIR";

    /// Opens /dev/null until the process runs out of descriptors; the files free them.
    fn exhaust_descriptors() -> Vec<std::fs::File> {
        let mut held = Vec::new();
        loop {
            match std::fs::File::open("/dev/null") {
                Ok(f) => held.push(f),
                Err(e) => {
                    assert_eq!(
                        e.raw_os_error(),
                        Some(rustix::io::Errno::MFILE.raw_os_error())
                    );
                    return held;
                }
            }
        }
    }

    /// Makes every manifest look changed, so the next scan must read it again.
    fn touch_all(d: &Path) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read(&p).unwrap();
            std::fs::write(&p, text).unwrap();
        }
    }

    /// The half of `emfile_never_empties_the_set` that runs with a low descriptor
    /// limit, alone in a child process.
    #[test]
    #[ignore = "run by emfile_never_empties_the_set in a child process"]
    fn emfile_child() {
        let Ok(d) = std::env::var(EMFILE_CHILD_ENV) else {
            return;
        };
        let d = PathBuf::from(d);
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let hard = getrlimit(Resource::Nofile).maximum;
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(64),
                maximum: hard,
            },
        )
        .unwrap();

        let mut cache = DecodeCache::default();
        let before = scan_ok(&d, &mut cache, true).pods.len();
        touch_all(&d);
        let held = exhaust_descriptors();
        // The directory cannot even be opened: an error, not an empty set.
        let dir_scan = scan(&d, "n1", &mut cache, true);
        // One file as the path: it cannot be opened for reading; its pod stays.
        let one = d.join("m00.yaml");
        let mut one_cache = DecodeCache::default();
        drop(held);
        let one_before = scan_ok(&one, &mut one_cache, true).pods;
        touch_all(&d);
        let held = exhaust_descriptors();
        // Two periodic relists: a bad file would lose its pod at the second one.
        let _ = scan(&one, "n1", &mut one_cache, true);
        let one_during = scan(&one, "n1", &mut one_cache, true);
        drop(held);
        let after = scan_ok(&d, &mut cache, true).pods.len();
        println!(
            "EMFILE before={before} dir_error={} file_kept={} after={after}",
            dir_scan.is_err_and(|e| e.to_string().contains("Too many open files")),
            one_during.is_ok_and(|s| s.pods == one_before && one_before.len() == 1 && s.incomplete),
        );
    }

    #[test]
    fn emfile_never_empties_the_set() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..30 {
            std::fs::write(
                dir.path().join(format!("m{i:02}.yaml")),
                manifest(&format!("p{i}")),
            )
            .unwrap();
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "config::file::tests::emfile_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(EMFILE_CHILD_ENV, dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("EMFILE ").map(|(_, r)| r))
            .unwrap_or_else(|| {
                panic!(
                    "child printed no result: {stdout} {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        assert_eq!(line, "before=30 dir_error=true file_kept=true after=30");
    }
}

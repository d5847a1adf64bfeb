//! Reading a container's log as `kubectl logs` shows it (kubelet's
//! `kuberuntime/logs.ReadLogs`): the CRI log format (`<time> <stream> <P|F> <text>`)
//! turned back into the container's output, with kubelet's options (`tailLines`,
//! `sinceTime`, `timestamps`, `limitBytes`, `follow`). A followed log is reopened
//! when rotation replaces the file, and ends once the container has stopped and
//! everything it wrote has been sent.
//!
//! Nothing here holds a thread while it waits: the reader is a stream the response
//! body polls. A regular file is always ready, so each read is a bounded `pread` on
//! the runtime; a followed log at its end waits on its directory's inotify watch
//! (`watch.rs`) or a one-second look, as kubelet's `waitLogs`. The file is opened
//! without following a symlink anywhere below the pod log directory and without
//! blocking on a FIFO, and anything but a regular file is refused.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::watch::{DirWatch, LogWatch};

/// The longest CRI log line read whole; longer ones are cut (the runtime splits
/// lines at 16 KiB, so only a damaged file has one).
const MAX_LINE: usize = 1 << 20;
/// kubelet's `logForceCheckPeriod`: a followed log looks at its file at least this
/// often even without an inotify event (and checks that the container still runs).
const FORCE_CHECK: Duration = Duration::from_secs(1);
/// How much is sent to the client at once.
const CHUNK: usize = 32 * 1024;
/// How much one read takes from the file.
const READ: usize = 64 * 1024;

/// kubelet's log options (`PodLogOptions` as the runtime reads them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogOptions {
    /// The last N lines only.
    pub tail: Option<u64>,
    /// Lines written at or after this time only (nanoseconds since the epoch).
    pub since_nanos: Option<i128>,
    /// Stop after this many bytes of output.
    pub limit_bytes: Option<u64>,
    /// Prefix each line with its RFC 3339 time, nine fractional digits.
    pub timestamps: bool,
    /// Keep sending new lines until the container stops.
    pub follow: bool,
}

/// One parsed CRI log line.
struct Line<'a> {
    time: &'a str,
    partial: bool,
    text: &'a [u8],
}

/// `<time> <stream> <tag> <text>\n`; the tag's first field says partial (P) or full (F).
fn parse(raw: &[u8]) -> Option<Line<'_>> {
    let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
    let mut parts = raw.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?;
    let stream = parts.next()?;
    if stream != b"stdout" && stream != b"stderr" {
        return None;
    }
    let tag = parts.next()?;
    let text = parts.next().unwrap_or_default();
    Some(Line {
        time,
        partial: tag.split(|b| *b == b':').next() == Some(b"P"),
        text,
    })
}

/// A log time in nanoseconds since the epoch.
fn nanos_of(time: &str) -> Option<i128> {
    time.parse::<jiff::Timestamp>()
        .ok()
        .map(jiff::Timestamp::as_nanosecond)
}

/// kubelet's `RFC3339NanoFixed`: always nine fractional digits, UTC.
fn fixed_rfc3339(nanos: i128) -> String {
    let Ok(t) = jiff::Timestamp::from_nanosecond(nanos) else {
        return String::new();
    };
    let dt = t.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second(),
        dt.subsec_nanosecond()
    )
}

/// The offset where the last `n` lines of `f` start (kubelet's
/// `FindTailLineStartIndex`), reading backwards a block at a time.
fn tail_start(f: &mut File, n: u64) -> io::Result<u64> {
    const BLOCK: u64 = 4096;
    let size = f.metadata()?.len();
    if n == 0 {
        return Ok(size);
    }
    let mut end = size;
    let mut newlines = 0u64;
    let mut buf = vec![0u8; BLOCK as usize];
    while end > 0 {
        let start = end.saturating_sub(BLOCK);
        let len = (end - start) as usize;
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut buf[..len])?;
        for i in (0..len).rev() {
            if buf[i] != b'\n' {
                continue;
            }
            // The file's own last newline ends the last line; it does not start one.
            if start + i as u64 + 1 == size {
                continue;
            }
            newlines += 1;
            if newlines == n {
                return Ok(start + i as u64 + 1);
            }
        }
        end = start;
    }
    Ok(0)
}

/// Why a log file could not be opened for reading.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("{path:?} is not below the pod log directory")]
    Outside { path: String },
    #[error("{path:?} is or passes through a symbolic link; not followed")]
    Symlink { path: String },
    #[error("{path:?} is not a regular file ({kind}); not read")]
    NotRegular { path: String, kind: &'static str },
    #[error("failed to open log file {path:?}: {source}")]
    Io { path: String, source: io::Error },
}

/// Opens `path`, a log file below `root` (the pod log directory), for reading: no
/// symlink followed at any step below `root` (`openat2` with `RESOLVE_NO_SYMLINKS`, or
/// one `O_NOFOLLOW` open a step on older kernels), `O_NONBLOCK` so a FIFO cannot hold
/// the open, and only a regular file kept.
pub(crate) fn open_log(root: &Path, path: &Path) -> Result<File, OpenError> {
    let shown = || path.display().to_string();
    let io = |source: io::Error| OpenError::Io {
        path: shown(),
        source,
    };
    let rel = path
        .strip_prefix(root)
        .ok()
        .filter(|r| r.components().all(|c| matches!(c, Component::Normal(_))))
        .filter(|r| r.components().next().is_some())
        .ok_or_else(|| OpenError::Outside { path: shown() })?;
    let base = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    let mut tries = 0;
    let fd = loop {
        match rustix::fs::openat2(&base, rel, flags, Mode::empty(), resolve) {
            Err(rustix::io::Errno::AGAIN) if tries < 8 => tries += 1,
            Err(rustix::io::Errno::NOSYS) => break open_step_by_step(&base, rel, flags),
            r => break r,
        }
    };
    let fd = fd.map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => OpenError::Symlink { path: shown() },
        e => io(e.into()),
    })?;
    let file = File::from(fd);
    let kind = file.metadata().map_err(io)?.file_type();
    if !kind.is_file() {
        return Err(OpenError::NotRegular {
            path: shown(),
            kind: kind_name(&kind),
        });
    }
    Ok(file)
}

/// Kernels before 5.6: each directory opened with `O_NOFOLLOW` inside the one before.
fn open_step_by_step(
    base: impl AsFd,
    rel: &Path,
    last: OFlags,
) -> rustix::io::Result<std::os::fd::OwnedFd> {
    let mut dir = rustix::io::dup(base.as_fd())?;
    let mut parts = rel.components().peekable();
    while let Some(part) = parts.next() {
        let flags = match parts.peek() {
            Some(_) => OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            None => last,
        };
        // O_PATH|O_NOFOLLOW on a symlink opens the link itself: refused below.
        dir = rustix::fs::openat(&dir, part.as_os_str(), flags, Mode::empty())?;
        let st = rustix::fs::fstat(&dir)?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink {
            return Err(rustix::io::Errno::LOOP);
        }
    }
    Ok(dir)
}

fn kind_name(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    match () {
        () if t.is_dir() => "a directory",
        () if t.is_fifo() => "a FIFO",
        () if t.is_socket() => "a socket",
        () if t.is_char_device() || t.is_block_device() => "a device",
        () if t.is_symlink() => "a symbolic link",
        () => "not a file",
    }
}

/// Turns CRI lines into output within the options, and counts what was sent.
struct Writer {
    opts: LogOptions,
    pending: Vec<u8>,
    sent: u64,
}

impl Writer {
    /// Adds one line; false once the byte limit is reached.
    fn line(&mut self, raw: &[u8]) -> bool {
        let Some(line) = parse(raw) else {
            return true;
        };
        let nanos = nanos_of(line.time);
        if let (Some(since), Some(t)) = (self.opts.since_nanos, nanos)
            && t < since
        {
            return true;
        }
        let before = self.pending.len();
        if self.opts.timestamps {
            (self.pending).extend_from_slice(fixed_rfc3339(nanos.unwrap_or_default()).as_bytes());
            self.pending.push(b' ');
        }
        self.pending.extend_from_slice(line.text);
        if !line.partial {
            self.pending.push(b'\n');
        }
        if let Some(limit) = self.opts.limit_bytes {
            let room = limit.saturating_sub(self.sent) as usize;
            self.pending
                .truncate(before + room.min(self.pending.len() - before));
        }
        self.sent += (self.pending.len() - before) as u64;
        !self.full()
    }

    fn full(&self) -> bool {
        self.opts.limit_bytes.is_some_and(|l| self.sent >= l)
    }

    fn take(&mut self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| Bytes::from(std::mem::take(&mut self.pending)))
    }
}

/// What a followed log needs besides the file.
pub(crate) struct Follow {
    /// Whether the container instance still runs (kubelet's `isContainerRunning`).
    pub running: Box<dyn Fn() -> bool + Send + Sync>,
    pub watch: Arc<LogWatch>,
    /// The pod log directory, below which the file is reopened after a rotation.
    pub root: PathBuf,
}

/// Why a followed log stopped (logged at `-v=2` by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Everything was read (not followed).
    Read,
    /// `limitBytes` reached.
    Limit,
    /// The container stopped and all it wrote was sent.
    ContainerStopped,
    /// The file became unreadable (an error, or rotation left something else).
    Failed,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ended::Read => "read to the end",
            Ended::Limit => "limitBytes reached",
            Ended::ContainerStopped => "the container is no longer running",
            Ended::Failed => "the log file could not be read",
        })
    }
}

/// A container log read as a stream of output chunks (see the module doc).
pub(crate) struct LogReader {
    path: PathBuf,
    file: File,
    pos: u64,
    /// Bytes read but not yet a whole line.
    buf: Vec<u8>,
    w: Writer,
    follow: Option<(Follow, DirWatch)>,
    /// The container stopped: one last read to the end, then done.
    finishing: bool,
    ended: Option<Ended>,
}

impl LogReader {
    /// Opens `path` (below `root`) within `opts`; `follow` is given when `opts.follow`.
    /// Blocking for a moment (`tailLines` reads the file's end backwards): call it
    /// where that is allowed.
    pub(crate) fn open(
        root: &Path,
        path: &Path,
        opts: LogOptions,
        follow: Option<Follow>,
    ) -> Result<LogReader, OpenError> {
        let mut file = open_log(root, path)?;
        let pos = match opts.tail {
            Some(n) => tail_start(&mut file, n).map_err(|source| OpenError::Io {
                path: path.display().to_string(),
                source,
            })?,
            None => 0,
        };
        let follow = follow.filter(|_| opts.follow).map(|f| {
            let dir = path.parent().unwrap_or(root);
            let w = f.watch.watch(dir);
            (f, w)
        });
        Ok(LogReader {
            path: path.to_path_buf(),
            file,
            pos,
            buf: Vec::new(),
            w: Writer {
                opts,
                pending: Vec::new(),
                sent: 0,
            },
            follow,
            finishing: false,
            ended: None,
        })
    }

    /// Why the reader stopped, once it has.
    pub(crate) fn ended(&self) -> Option<Ended> {
        self.ended
    }

    /// The next piece of output; `None` once the log is done (see [`Self::ended`]).
    pub(crate) async fn next(&mut self) -> Option<Bytes> {
        loop {
            if self.ended.is_some() {
                return self.w.take();
            }
            if let Some((_, watch)) = self.follow.as_mut() {
                // Before reading: whatever is written from now on wakes the wait below.
                watch.mark_seen();
            }
            let n = match self.fill() {
                Ok(n) => n,
                Err(e) => {
                    tracing::info!(file = %self.path.display(), error = %e, "reading a container log failed");
                    self.ended = Some(Ended::Failed);
                    continue;
                }
            };
            let following = self.follow.is_some() && !self.finishing;
            if !self.lines(n == 0 && !following) {
                self.ended = Some(Ended::Limit);
                continue;
            }
            if self.w.pending.len() >= CHUNK {
                return self.w.take();
            }
            if n > 0 {
                // A big file: let other tasks run between reads.
                tokio::task::consume_budget().await;
                continue;
            }
            if let Some(out) = self.w.take() {
                return Some(out);
            }
            if !following {
                self.ended = Some(match self.finishing {
                    true => Ended::ContainerStopped,
                    false => Ended::Read,
                });
                continue;
            }
            self.wait_for_more().await;
        }
    }

    /// At the end of what is written: reopens after a rotation, marks the end once
    /// the container stopped, or waits for a change.
    async fn wait_for_more(&mut self) {
        let Some((follow, watch)) = self.follow.as_mut() else {
            return;
        };
        match replaced(&follow.root, &self.path, &self.file) {
            Ok(Some(new)) => {
                // As kubelet: a half line left in the old file is not carried over.
                self.file = new;
                self.pos = 0;
                self.buf.clear();
                return;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::info!(file = %self.path.display(), error = %e, "a followed log's new file is refused");
                self.ended = Some(Ended::Failed);
                return;
            }
        }
        if !(follow.running)() {
            // One last read: the container may have written just before it stopped.
            self.finishing = true;
            return;
        }
        watch.changed(FORCE_CHECK).await;
    }

    /// Reads the next bytes at `pos` into `buf`; 0 at the end of the file.
    fn fill(&mut self) -> io::Result<usize> {
        let have = self.buf.len();
        self.buf.resize(have + READ, 0);
        let r = self.file.read_at(&mut self.buf[have..], self.pos);
        let n = *r.as_ref().unwrap_or(&0);
        self.buf.truncate(have + n);
        self.pos += n as u64;
        r
    }

    /// Turns the whole lines in `buf` into output (and at the end, `last`, the rest
    /// too); false once the byte limit is reached.
    fn lines(&mut self, last: bool) -> bool {
        let mut start = 0;
        let mut ok = true;
        while ok {
            let rest = &self.buf[start..];
            let end = match rest.iter().position(|b| *b == b'\n') {
                Some(i) if i < MAX_LINE => i + 1,
                _ if rest.len() >= MAX_LINE => MAX_LINE,
                _ if last && !rest.is_empty() => rest.len(),
                _ => break,
            };
            ok = self.w.line(&self.buf[start..start + end]);
            start += end;
        }
        self.buf.drain(..start);
        if self.buf.capacity() > 2 * READ + MAX_LINE {
            self.buf.shrink_to(READ);
        }
        ok
    }
}

/// The new file at `path` when rotation has replaced the one being read (opened as
/// the first was); `None` while it is the same file or none is there yet.
fn replaced(root: &Path, path: &Path, current: &File) -> Result<Option<File>, OpenError> {
    let Ok(now) = std::fs::symlink_metadata(path) else {
        return Ok(None);
    };
    let Ok(ours) = current.metadata() else {
        return Ok(None);
    };
    if (now.dev(), now.ino()) == (ours.dev(), ours.ino()) {
        return Ok(None);
    }
    open_log(root, path).map(Some)
}

/// The log file of a container instance: `<pod log dir>/<container>/<restarts>.log`.
pub(crate) fn container_log_file(
    pod_log_dir: &Path,
    container: &str,
    restart_count: i32,
) -> Result<PathBuf, crate::safe_path::PathError> {
    crate::safe_path::beneath(pod_log_dir, &[container, &format!("{restart_count}.log")])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const LOG: &str = "2026-11-27T10:00:00.1Z stdout F one\n\
        2026-11-27T10:00:01Z stderr F two\n\
        2026-11-27T10:00:02.000000003Z stdout P thr\n\
        2026-11-27T10:00:02.5Z stdout F ee\n\
        2026-11-27T10:00:03Z stdout F four\n";

    /// Everything a reader sends, and why it ended.
    async fn drain(mut r: LogReader) -> (String, Ended) {
        let mut s = Vec::new();
        while let Some(b) = r.next().await {
            s.extend_from_slice(&b);
        }
        (String::from_utf8(s).unwrap(), r.ended().unwrap())
    }

    fn read(text: &str, opts: LogOptions) -> String {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.log");
        std::fs::write(&p, text).unwrap();
        let r = LogReader::open(dir.path(), &p, opts, None).unwrap();
        futures::executor::block_on(drain(r)).0
    }

    #[test]
    fn lines_come_back_as_written_with_partials_joined() {
        assert_eq!(read(LOG, LogOptions::default()), "one\ntwo\nthree\nfour\n");
        assert_eq!(
            read(
                "2026-11-27T10:00:00Z stdout F no newline",
                LogOptions::default()
            ),
            "no newline\n"
        );
    }

    #[test]
    fn tail_since_limit_and_timestamps() {
        let tail = |n| {
            read(
                LOG,
                LogOptions {
                    tail: Some(n),
                    ..Default::default()
                },
            )
        };
        assert_eq!(tail(1), "four\n");
        assert_eq!(
            tail(2),
            "ee\nfour\n",
            "kubelet counts file lines, a partial is one"
        );
        assert_eq!(tail(0), "");
        assert_eq!(tail(99), "one\ntwo\nthree\nfour\n");
        let since = nanos_of("2026-11-27T10:00:01Z");
        assert_eq!(
            read(
                LOG,
                LogOptions {
                    since_nanos: since,
                    ..Default::default()
                }
            ),
            "two\nthree\nfour\n"
        );
        assert_eq!(
            read(
                LOG,
                LogOptions {
                    limit_bytes: Some(6),
                    ..Default::default()
                }
            ),
            "one\ntw"
        );
        assert_eq!(
            read(
                LOG,
                LogOptions {
                    tail: Some(1),
                    timestamps: true,
                    ..Default::default()
                }
            ),
            "2026-11-27T10:00:03.000000000Z four\n"
        );
    }

    #[test]
    fn a_big_log_comes_whole_in_chunks() {
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("2026-11-27T10:00:00Z stdout F line {i}\n"));
        }
        let out = read(&text, LogOptions::default());
        assert_eq!(out.lines().count(), 20_000);
        assert!(out.ends_with("line 19999\n"));
    }

    #[tokio::test]
    async fn a_followed_log_survives_rotation_and_ends_with_the_container() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("main");
        std::fs::create_dir(&logs).unwrap();
        let p = logs.join("0.log");
        std::fs::write(&p, "2026-11-27T10:00:00Z stdout F before\n").unwrap();
        let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let r2 = running.clone();
        let follow = Follow {
            running: Box::new(move || r2.load(std::sync::atomic::Ordering::SeqCst)),
            watch: LogWatch::new(),
            root: dir.path().to_path_buf(),
        };
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        let mut r = LogReader::open(dir.path(), &p, opts, Some(follow)).unwrap();
        let mut next = async || {
            let b = tokio::time::timeout(Duration::from_millis(900), r.next()).await;
            b.expect("within the second of the forced look: inotify woke it")
                .map(|b| String::from_utf8(b.to_vec()).unwrap())
        };
        assert_eq!(next().await.as_deref(), Some("before\n"));
        let writer = p.clone();
        let script = tokio::spawn(async move {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&writer)
                .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            f.write_all(b"2026-11-27T10:00:01Z stdout F hal").unwrap();
            // Half a line is held back until its newline comes.
            tokio::time::sleep(Duration::from_millis(100)).await;
            f.write_all(b"f\n").unwrap();
        });
        assert_eq!(next().await.as_deref(), Some("half\n"));
        script.await.unwrap();
        // Rotation: the file is renamed away and the runtime opens a new one.
        std::fs::rename(&p, logs.join("0.log.20261127-100002")).unwrap();
        std::fs::write(&p, "2026-11-27T10:00:02Z stdout F after\n").unwrap();
        assert_eq!(next().await.as_deref(), Some("after\n"));
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        let end = tokio::time::timeout(Duration::from_secs(3), r.next()).await;
        assert_eq!(end.unwrap(), None, "the stream ends with the container");
        assert_eq!(r.ended(), Some(Ended::ContainerStopped));
    }

    #[test]
    fn symlinks_and_fifos_are_refused_without_being_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("pods");
        let pod = root.join("ns_p_uid");
        std::fs::create_dir_all(pod.join("main")).unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "2026-11-27T10:00:00Z stdout F secret\n").unwrap();
        std::os::unix::fs::symlink(&secret, pod.join("main/0.log")).unwrap();
        let fifo = pod.join("main/1.log");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // A symlinked directory on the way is refused too.
        std::fs::create_dir_all(dir.path().join("elsewhere")).unwrap();
        std::fs::write(dir.path().join("elsewhere/0.log"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), pod.join("side")).unwrap();
        let open = |p: &Path| LogReader::open(&root, p, LogOptions::default(), None).err();
        let e = open(&pod.join("main/0.log")).expect("a symlink is refused");
        assert!(matches!(e, OpenError::Symlink { .. }), "{e}");
        let e = open(&fifo).expect("a FIFO is refused");
        assert!(
            matches!(e, OpenError::NotRegular { kind: "a FIFO", .. }),
            "{e}"
        );
        let e = open(&pod.join("side/0.log")).expect("a symlinked directory is refused");
        assert!(matches!(e, OpenError::Symlink { .. }), "{e}");
        assert!(matches!(
            open(&dir.path().join("secret")),
            Some(OpenError::Outside { .. })
        ));
        // The step-by-step way (kernels without openat2) refuses them as well.
        let base =
            rustix::fs::open(&root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW;
        for rel in ["ns_p_uid/main/0.log", "ns_p_uid/side/0.log"] {
            let e = open_step_by_step(&base, Path::new(rel), flags).unwrap_err();
            assert_eq!(e, rustix::io::Errno::LOOP, "{rel}");
        }
    }

    #[test]
    fn fixed_timestamps_have_nine_digits() {
        let n = nanos_of("2026-11-27T10:00:02.5Z").unwrap();
        assert_eq!(fixed_rfc3339(n), "2026-11-27T10:00:02.500000000Z");
    }
}

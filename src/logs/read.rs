//! Reading a container's log as `kubectl logs` shows it (kubelet's
//! `kuberuntime/logs.ReadLogs`): the CRI log format (`<time> <stream> <P|F> <text>`)
//! turned back into the container's output, with kubelet's options (`tailLines`,
//! `sinceTime`, `timestamps`, `limitBytes`, `follow`). A followed log is reopened
//! when rotation replaces the file, and ends once the container has stopped and
//! everything it wrote has been sent.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

/// The longest CRI log line read whole; longer ones are cut (the runtime splits
/// lines at 16 KiB, so only a damaged file has one).
const MAX_LINE: usize = 1 << 20;
/// How often a followed log looks for new lines once it has read everything.
const FOLLOW_POLL: Duration = Duration::from_millis(20);
/// How much is sent to the client at once.
const CHUNK: usize = 32 * 1024;

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

/// Turns CRI lines into output within the options, and counts what was sent.
struct Writer<'a> {
    opts: &'a LogOptions,
    out: &'a mpsc::Sender<Bytes>,
    pending: Vec<u8>,
    sent: u64,
}

impl Writer<'_> {
    /// Adds one line; false once the byte limit is reached or the client left.
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
        let mut bytes = Vec::with_capacity(line.text.len() + 32);
        if self.opts.timestamps {
            bytes.extend_from_slice(fixed_rfc3339(nanos.unwrap_or_default()).as_bytes());
            bytes.push(b' ');
        }
        bytes.extend_from_slice(line.text);
        if !line.partial {
            bytes.push(b'\n');
        }
        if let Some(limit) = self.opts.limit_bytes {
            let room = limit.saturating_sub(self.sent) as usize;
            bytes.truncate(room);
        }
        self.sent += bytes.len() as u64;
        self.pending.extend_from_slice(&bytes);
        if self.pending.len() >= CHUNK && !self.flush() {
            return false;
        }
        self.opts.limit_bytes.is_none_or(|l| self.sent < l)
    }

    /// Sends what is pending; false when the client has gone.
    fn flush(&mut self) -> bool {
        if self.pending.is_empty() {
            return true;
        }
        let chunk = Bytes::from(std::mem::take(&mut self.pending));
        self.out.blocking_send(chunk).is_ok()
    }
}

/// Reads complete lines from `reader` until EOF; false to stop reading at all.
/// A line without its newline yet is left unread (its start offset is kept), so
/// a follower picks it up whole later.
fn read_lines(reader: &mut BufReader<File>, w: &mut Writer<'_>, follow: bool) -> io::Result<bool> {
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let start = reader.stream_position()?;
        let n = reader
            .by_ref()
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut raw)?;
        if n == 0 {
            return Ok(true);
        }
        if !raw.ends_with(b"\n") && n < MAX_LINE && follow {
            reader.seek(SeekFrom::Start(start))?;
            return Ok(true);
        }
        if !w.line(&raw) {
            return Ok(false);
        }
    }
}

/// Sends the log at `path` to `out` within `opts`. `running` says whether the
/// container still runs (a followed log ends once it does not and all is read).
/// Blocking: run it on a blocking thread.
pub(crate) fn read_logs(
    path: &Path,
    opts: &LogOptions,
    out: &mpsc::Sender<Bytes>,
    running: &dyn Fn() -> bool,
) -> io::Result<()> {
    let mut f = File::open(path)?;
    if let Some(n) = opts.tail {
        let start = tail_start(&mut f, n)?;
        f.seek(SeekFrom::Start(start))?;
    }
    let mut reader = BufReader::new(f);
    let mut w = Writer {
        opts,
        out,
        pending: Vec::new(),
        sent: 0,
    };
    loop {
        let more = read_lines(&mut reader, &mut w, opts.follow)?;
        if !w.flush() || !more || !opts.follow {
            return Ok(());
        }
        // At the end of what is written: wait for more, a rotation, or the end.
        if let Some(new) = replaced(path, reader.get_ref()) {
            reader = BufReader::new(new);
            continue;
        }
        if !running() {
            // One last read: the container may have written just before it stopped.
            read_lines(&mut reader, &mut w, false)?;
            w.flush();
            return Ok(());
        }
        if out.is_closed() {
            return Ok(());
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// The new file at `path` when rotation has replaced the one being read.
fn replaced(path: &Path, current: &File) -> Option<File> {
    let now = std::fs::metadata(path).ok()?;
    let ours = current.metadata().ok()?;
    if (now.dev(), now.ino()) == (ours.dev(), ours.ino()) {
        return None;
    }
    File::open(path).ok()
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

    fn read(text: &str, opts: LogOptions) -> String {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.log");
        std::fs::write(&p, text).unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        read_logs(&p, &opts, &tx, &|| false).unwrap();
        drop(tx);
        let mut s = Vec::new();
        while let Ok(b) = rx.try_recv() {
            s.extend_from_slice(&b);
        }
        String::from_utf8(s).unwrap()
    }

    #[test]
    fn lines_come_back_as_written_with_partials_joined() {
        assert_eq!(read(LOG, LogOptions::default()), "one\ntwo\nthree\nfour\n");
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
    fn a_followed_log_survives_rotation_and_ends_with_the_container() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.log");
        std::fs::write(&p, "2026-11-27T10:00:00Z stdout F before\n").unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (p2, r2) = (p.clone(), running.clone());
        let reader = std::thread::spawn(move || {
            let opts = LogOptions {
                follow: true,
                ..Default::default()
            };
            read_logs(&p2, &opts, &tx, &|| {
                r2.load(std::sync::atomic::Ordering::SeqCst)
            })
        });
        let recv = |rx: &mut mpsc::Receiver<Bytes>| {
            rx.blocking_recv()
                .map(|b| String::from_utf8(b.to_vec()).unwrap())
        };
        assert_eq!(recv(&mut rx).as_deref(), Some("before\n"));
        // Half a line is held back until its newline comes.
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"2026-11-27T10:00:01Z stdout F hal").unwrap();
        std::thread::sleep(Duration::from_millis(60));
        f.write_all(b"f\n").unwrap();
        assert_eq!(recv(&mut rx).as_deref(), Some("half\n"));
        // Rotation: the file is renamed away and the runtime opens a new one.
        std::fs::rename(&p, dir.path().join("0.log.20261127-100002")).unwrap();
        std::fs::write(&p, "2026-11-27T10:00:02Z stdout F after\n").unwrap();
        assert_eq!(recv(&mut rx).as_deref(), Some("after\n"));
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        reader.join().unwrap().unwrap();
        assert_eq!(recv(&mut rx), None, "the stream ends with the container");
    }

    #[test]
    fn fixed_timestamps_have_nine_digits() {
        let n = nanos_of("2026-11-27T10:00:02.5Z").unwrap();
        assert_eq!(fixed_rfc3339(n), "2026-11-27T10:00:02.500000000Z");
    }
}

//! The write-ahead log: every point the head takes is written here first, one segment
//! file per block window (`wal-<window start ms>`), so that a restart rebuilds the head
//! and a crash loses no point that was written. A segment is deleted once its window
//! is in a block.
//!
//! A segment is a run of checksummed records: a series record gives a series a number
//! (the first time the segment sees it), a samples record carries one round's points of
//! that window. Replay stops at the first bad record, so a torn tail costs only the
//! tail, and the segment is cut back there before it is appended to again.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::codec::{self, DecodeError, Reader};
use super::series::window_start;
use super::{Sample, SeriesKey};

const PREFIX: &str = "wal-";
const SERIES_RECORD: u8 = 1;
const SAMPLES_RECORD: u8 = 2;
/// How often the segments are synced to the disk, so that a machine crash (not just a
/// process crash, which loses nothing written) loses at most this much.
const SYNC_EVERY: Duration = Duration::from_secs(5);
/// A segment larger than this is not replayed (one window at 1 s is a few MiB).
const MAX_SEGMENT_BYTES: u64 = 256 << 20;

/// A segment's window start, if `name` is a segment's name.
pub(super) fn segment_window(name: &str) -> Option<i64> {
    let digits = name.strip_prefix(PREFIX)?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

struct Segment {
    file: File,
    /// The numbers this segment gave its series.
    refs: HashMap<SeriesKey, u64>,
    bytes: u64,
}

/// The open segments, by window start.
pub(super) struct Wal {
    dir: PathBuf,
    block_ms: i64,
    segments: BTreeMap<i64, Segment>,
    last_sync: Instant,
    pub(super) bytes_written: u64,
}

/// What a replay found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replayed {
    pub segments: usize,
    pub points: usize,
    /// Bytes cut off torn or corrupt tails.
    pub torn_bytes: u64,
}

impl Wal {
    /// Opens the log in `dir`, handing every point of the segments at or after
    /// `persisted_until` to `apply` (older segments are already in blocks and are
    /// deleted).
    pub(super) fn open(
        dir: &Path,
        block_ms: i64,
        persisted_until: i64,
        mut apply: impl FnMut(Sample),
    ) -> std::io::Result<(Wal, Replayed)> {
        let mut wal = Wal {
            dir: dir.to_path_buf(),
            block_ms,
            segments: BTreeMap::new(),
            last_sync: Instant::now(),
            bytes_written: 0,
        };
        let mut found = Replayed::default();
        let mut windows: Vec<i64> = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            // Only plain files by this log's names: anything else is not ours.
            let plain = entry.file_type().is_ok_and(|t| t.is_file());
            if let Some(w) = entry.file_name().to_str().and_then(segment_window)
                && plain
            {
                windows.push(w);
            }
        }
        windows.sort_unstable();
        for w in windows {
            let path = wal.path(w);
            if w.saturating_add(block_ms) <= persisted_until {
                std::fs::remove_file(&path)?;
                continue;
            }
            let (seg, points, torn) = replay_segment(&path, &mut apply)?;
            found.segments += 1;
            found.points += points;
            found.torn_bytes += torn;
            wal.segments.insert(w, seg);
        }
        Ok((wal, found))
    }

    fn path(&self, window: i64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{window}"))
    }

    /// Writes `samples` (one round) to their windows' segments and flushes them to
    /// the kernel: one write per segment.
    pub(super) fn log(&mut self, samples: &[&Sample]) -> std::io::Result<()> {
        let mut by_window: BTreeMap<i64, Vec<&Sample>> = BTreeMap::new();
        for s in samples {
            by_window
                .entry(window_start(s.ts_ms, self.block_ms))
                .or_default()
                .push(s);
        }
        for (w, batch) in by_window {
            if !self.segments.contains_key(&w) {
                let seg = self.create(w)?;
                self.segments.insert(w, seg);
            }
            let Some(seg) = self.segments.get_mut(&w) else {
                continue;
            };
            let out = encode_round(seg, &batch);
            seg.file.write_all(&out)?;
            seg.bytes += out.len() as u64;
            self.bytes_written += out.len() as u64;
        }
        if self.last_sync.elapsed() >= SYNC_EVERY {
            self.last_sync = Instant::now();
            for seg in self.segments.values() {
                seg.file.sync_data()?;
            }
        }
        Ok(())
    }

    fn create(&self, window: i64) -> std::io::Result<Segment> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.path(window))?;
        let bytes = file.metadata()?.len();
        Ok(Segment {
            file,
            refs: HashMap::new(),
            bytes,
        })
    }

    /// Deletes the segments of the windows before `end_ms`: they are in blocks now.
    pub(super) fn drop_before(&mut self, end_ms: i64) -> std::io::Result<()> {
        let keep = self
            .segments
            .split_off(&window_start(end_ms, self.block_ms));
        let gone = std::mem::replace(&mut self.segments, keep);
        for w in gone.into_keys() {
            std::fs::remove_file(self.path(w))?;
        }
        Ok(())
    }

    /// The segments' size on disk.
    pub(super) fn disk_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.bytes).sum()
    }
}

/// One round's records for a segment: a series record for each series it has not
/// seen, then one samples record.
fn encode_round(seg: &mut Segment, batch: &[&Sample]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut body = vec![SAMPLES_RECORD];
    codec::put_uvarint(&mut body, batch.len() as u64);
    let base = batch.first().map_or(0, |s| s.ts_ms);
    codec::put_ivarint(&mut body, base);
    for s in batch {
        let next = seg.refs.len() as u64;
        let r = match seg.refs.get(&s.key) {
            Some(r) => *r,
            None => {
                seg.refs.insert(s.key.clone(), next);
                let mut def = vec![SERIES_RECORD];
                codec::put_uvarint(&mut def, next);
                codec::put_key(&mut def, &s.key);
                codec::put_record(&mut out, &def);
                next
            }
        };
        codec::put_uvarint(&mut body, r);
        codec::put_ivarint(&mut body, s.ts_ms - base);
        body.extend_from_slice(&s.value.to_bits().to_le_bytes());
    }
    codec::put_record(&mut out, &body);
    out
}

/// Replays one segment into `apply`, cuts it back to its last good record, and opens
/// it for appending, with the series numbers it already gave.
fn replay_segment(
    path: &Path,
    apply: &mut impl FnMut(Sample),
) -> std::io::Result<(Segment, usize, u64)> {
    let mut file = OpenOptions::new().read(true).append(true).open(path)?;
    let len = file.metadata()?.len();
    let mut bytes = Vec::new();
    if len <= MAX_SEGMENT_BYTES {
        file.read_to_end(&mut bytes)?;
    }
    let mut refs: HashMap<SeriesKey, u64> = HashMap::new();
    let mut by_ref: Vec<SeriesKey> = Vec::new();
    let mut rest = &bytes[..];
    let mut points = 0;
    while let Some((body, after)) = codec::next_record(rest) {
        match apply_record(body, &mut refs, &mut by_ref, apply) {
            Ok(n) => points += n,
            Err(_) => break,
        }
        rest = after;
    }
    let good = (bytes.len() - rest.len()) as u64;
    if good < len {
        file.set_len(good)?;
        file.sync_data()?;
    }
    Ok((
        Segment {
            file,
            refs,
            bytes: good,
        },
        points,
        len - good,
    ))
}

fn apply_record(
    body: &[u8],
    refs: &mut HashMap<SeriesKey, u64>,
    by_ref: &mut Vec<SeriesKey>,
    apply: &mut impl FnMut(Sample),
) -> Result<usize, DecodeError> {
    let mut r = Reader { bytes: body };
    match r.u8()? {
        SERIES_RECORD => {
            let n = r.uvarint()?;
            let key = codec::read_key(&mut r)?;
            if n != by_ref.len() as u64 {
                return Err(DecodeError::Short);
            }
            refs.insert(key.clone(), n);
            by_ref.push(key);
            Ok(0)
        }
        SAMPLES_RECORD => {
            let count = r.uvarint()?;
            let base = r.ivarint()?;
            let mut n = 0;
            for _ in 0..count {
                let key = usize::try_from(r.uvarint()?)
                    .ok()
                    .and_then(|i| by_ref.get(i))
                    .ok_or(DecodeError::Short)?;
                let ts_ms = base.saturating_add(r.ivarint()?);
                let value = f64::from_bits(r.u64_le()?);
                apply(Sample {
                    key: key.clone(),
                    ts_ms,
                    value,
                });
                n += 1;
            }
            Ok(n)
        }
        other => Err(DecodeError::Kind(u64::from(other))),
    }
}

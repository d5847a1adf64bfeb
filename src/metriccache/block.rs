//! Blocks: one file per finished block window (`block-<start>-<end>`, unix ms), written
//! once and never changed, as Prometheus's TSDB blocks are. A block holds each series'
//! chunks of the window as the head compressed them, then an index (each series' key,
//! where its data is, its chunks' time ranges and a checksum of its data), then a
//! fixed footer that locates and checksums the index.
//!
//! A block is written to a temporary name, synced and renamed, so a crash leaves either
//! the whole block or none. A query reads the index and only the series it matches;
//! a checksum that fails skips that series (or the block) and says so.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use super::aggregate::Cut;
use super::codec::{self, DecodeError, Reader};
use super::gorilla::{self, Chunk};
use super::{MetricKind, SeriesKey};

const MAGIC: &[u8; 8] = b"OXMCBLK1";
const END_MAGIC: &[u8; 4] = b"OXE1";
/// The header: the magic, the window's start and end.
const HEADER_BYTES: u64 = 8 + 8 + 8;
/// The footer: the index's offset, length and checksum, and the end magic.
const FOOTER_BYTES: u64 = 8 + 4 + 4 + 4;
/// An index larger than this is not read (a 10 min block of 2 000 series is ~200 KiB).
const MAX_INDEX_BYTES: u64 = 64 << 20;
const PREFIX: &str = "block-";
pub(super) const TMP_SUFFIX: &str = ".tmp";

/// A block on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct BlockMeta {
    pub start: i64,
    pub end: i64,
    pub bytes: u64,
}

impl BlockMeta {
    pub(super) fn file_name(&self) -> String {
        name(self.start, self.end)
    }
}

fn name(start: i64, end: i64) -> String {
    format!("{PREFIX}{start}-{end}")
}

/// A block's window, if `name` is a block's name (or, with `tmp`, a block being written).
pub(super) fn parse_name(name: &str, tmp: bool) -> Option<(i64, i64)> {
    let name = if tmp {
        name.strip_suffix(TMP_SUFFIX)?
    } else {
        name
    };
    let (start, end) = name.strip_prefix(PREFIX)?.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(start) || !digits(end) {
        return None;
    }
    Some((start.parse().ok()?, end.parse().ok()?))
}

/// What is wrong with a block.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BlockError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not a block: {reason}")]
    Format { path: PathBuf, reason: String },
}

/// Which points a query wants.
pub(super) struct Want<'a> {
    pub kind: MetricKind,
    pub labels: &'a [(&'a str, &'a str)],
    pub start_ms: i64,
    pub end_ms: i64,
    pub limit: usize,
    /// Past this, reading stops (and the answer says so).
    pub deadline: Option<std::time::Instant>,
}

impl Want<'_> {
    pub(super) fn matches(&self, key: &SeriesKey) -> bool {
        key.kind == self.kind
            && self
                .labels
                .iter()
                .all(|(n, v)| key.labels.iter().any(|(kn, kv)| kn == n && kv == v))
    }
}

/// Writes the window's series as a block in `dir`.
pub(super) fn write(
    dir: &Path,
    start: i64,
    end: i64,
    series: &[(SeriesKey, Vec<Chunk>)],
) -> Result<BlockMeta, BlockError> {
    let mut out = Vec::with_capacity(64 * 1024);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&start.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    let mut index = Vec::new();
    codec::put_uvarint(&mut index, series.len() as u64);
    for (key, chunks) in series {
        let offset = out.len() as u64;
        for c in chunks {
            out.extend_from_slice(&c.bytes);
        }
        codec::put_key(&mut index, key);
        codec::put_uvarint(&mut index, offset);
        index.extend_from_slice(&crc32fast::hash(&out[offset as usize..]).to_le_bytes());
        codec::put_uvarint(&mut index, chunks.len() as u64);
        for c in chunks {
            codec::put_ivarint(&mut index, c.min_ts);
            codec::put_uvarint(&mut index, (c.max_ts - c.min_ts) as u64);
            codec::put_uvarint(&mut index, u64::from(c.n));
            codec::put_uvarint(&mut index, c.bytes.len() as u64);
        }
    }
    let index_offset = out.len() as u64;
    out.extend_from_slice(&index);
    out.extend_from_slice(&index_offset.to_le_bytes());
    out.extend_from_slice(&(index.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&index).to_le_bytes());
    out.extend_from_slice(END_MAGIC);
    let path = dir.join(name(start, end));
    let tmp = dir.join(format!("{}{TMP_SUFFIX}", name(start, end)));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BlockError::Io { path, source }
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(&out).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(BlockMeta {
        start,
        end,
        bytes: out.len() as u64,
    })
}

/// An open block: its file and its index, checked.
struct Opened {
    file: File,
    path: PathBuf,
    index: Vec<u8>,
}

fn open(path: &Path) -> Result<Opened, BlockError> {
    let io = |source| BlockError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bad = |reason: &str| BlockError::Format {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    if len < HEADER_BYTES + FOOTER_BYTES {
        return Err(bad("shorter than a header and a footer"));
    }
    let mut magic = [0u8; 8];
    file.read_exact_at(&mut magic, 0).map_err(io)?;
    let mut footer = [0u8; FOOTER_BYTES as usize];
    file.read_exact_at(&mut footer, len - FOOTER_BYTES)
        .map_err(io)?;
    if &magic != MAGIC || &footer[16..20] != END_MAGIC {
        return Err(bad("no magic at the start or the end"));
    }
    let index_offset = u64::from_le_bytes(footer[..8].try_into().unwrap_or_default());
    let index_len = u64::from(u32::from_le_bytes(
        footer[8..12].try_into().unwrap_or_default(),
    ));
    let crc = u32::from_le_bytes(footer[12..16].try_into().unwrap_or_default());
    if index_len > MAX_INDEX_BYTES
        || index_offset < HEADER_BYTES
        || index_offset.saturating_add(index_len) != len - FOOTER_BYTES
    {
        return Err(bad("the footer places the index outside the file"));
    }
    let mut index = vec![0u8; index_len as usize];
    file.read_exact_at(&mut index, index_offset).map_err(io)?;
    if crc32fast::hash(&index) != crc {
        return Err(bad("the index's checksum does not match"));
    }
    Ok(Opened {
        file,
        path: path.to_path_buf(),
        index,
    })
}

/// Checks a block found on disk: its header, footer and index.
pub(super) fn check(dir: &Path, start: i64, end: i64) -> Result<BlockMeta, BlockError> {
    let opened = open(&dir.join(name(start, end)))?;
    let bytes = opened.file.metadata().map_or(0, |m| m.len());
    Ok(BlockMeta { start, end, bytes })
}

/// One series' entry in an index.
struct Entry {
    key: SeriesKey,
    offset: u64,
    crc: u32,
    /// `(min_ts, max_ts, points, bytes)` of each chunk.
    chunks: Vec<(i64, i64, u16, usize)>,
}

fn read_entry(r: &mut Reader<'_>) -> Result<Entry, DecodeError> {
    let key = codec::read_key(r)?;
    let offset = r.uvarint()?;
    let crc = u32::from_le_bytes(r.take(4)?.try_into().map_err(|_| DecodeError::Short)?);
    let n = r.uvarint()?;
    let mut chunks = Vec::new();
    for _ in 0..n {
        let min = r.ivarint()?;
        let span = i64::try_from(r.uvarint()?).map_err(|_| DecodeError::Short)?;
        let points = u16::try_from(r.uvarint()?).map_err(|_| DecodeError::Short)?;
        let bytes = usize::try_from(r.uvarint()?).map_err(|_| DecodeError::Short)?;
        chunks.push((min, min.saturating_add(span), points, bytes));
        if chunks.len() > 1 << 16 {
            return Err(DecodeError::TooLong(n));
        }
    }
    Ok(Entry {
        key,
        offset,
        crc,
        chunks,
    })
}

/// Appends the block's points that `want` asks for to `out`. Returns the bound that
/// stopped it, if one did. A series whose data fails its checksum is skipped (in
/// `corrupt`); a broken index is the block's error.
pub(super) fn read_into(
    dir: &Path,
    meta: &BlockMeta,
    want: &Want<'_>,
    out: &mut Vec<(i64, f64)>,
    corrupt: &mut Vec<BlockError>,
) -> Result<Option<Cut>, BlockError> {
    let b = open(&dir.join(meta.file_name()))?;
    let bad = |reason: String| BlockError::Format {
        path: b.path.clone(),
        reason,
    };
    let mut r = Reader { bytes: &b.index };
    let count = r.uvarint().map_err(|e| bad(format!("index: {e}")))?;
    for _ in 0..count {
        let e = read_entry(&mut r).map_err(|e| bad(format!("index: {e}")))?;
        let overlaps = e
            .chunks
            .iter()
            .any(|c| c.1 >= want.start_ms && c.0 <= want.end_ms);
        if !want.matches(&e.key) || !overlaps {
            continue;
        }
        if want
            .deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
        {
            return Ok(Some(Cut::Deadline));
        }
        let total: usize = e.chunks.iter().map(|c| c.3).sum();
        if e.offset.saturating_add(total as u64) > meta.bytes {
            corrupt.push(bad(format!(
                "series {}: data past the file",
                e.key.kind.name()
            )));
            continue;
        }
        let mut data = vec![0u8; total];
        if let Err(source) = b.file.read_exact_at(&mut data, e.offset) {
            corrupt.push(BlockError::Io {
                path: b.path.clone(),
                source,
            });
            continue;
        }
        if crc32fast::hash(&data) != e.crc {
            corrupt.push(bad(format!(
                "series {}: data checksum does not match",
                e.key.kind.name()
            )));
            continue;
        }
        let mut at = 0;
        for (min, max, n, len) in e.chunks {
            let bytes = &data[at..at + len];
            at += len;
            if max < want.start_ms || min > want.end_ms {
                continue;
            }
            for p in
                gorilla::decode(bytes, n).filter(|p| p.0 >= want.start_ms && p.0 <= want.end_ms)
            {
                if out.len() >= want.limit {
                    return Ok(Some(Cut::Points));
                }
                out.push(p);
            }
        }
    }
    Ok(None)
}

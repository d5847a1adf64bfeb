//! The cache's directory: the write-ahead log and the blocks, and the rules that keep
//! them inside the retention and the size cap. Only names this module writes
//! (`wal-<ms>`, `block-<ms>-<ms>`, `block-…tmp`) are ever read or deleted there, and
//! only as plain files; anything else in the directory is left alone.

use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use super::aggregate::Cut;
use super::block::{self, BlockError, BlockMeta, Want};
use super::gorilla::Chunk;
use super::series::window_start;
use super::wal::{Replayed, Wal};
use super::{Sample, SeriesKey};

/// Why the directory could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub(crate) struct OpenError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// What was found on opening.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Opened {
    pub blocks: usize,
    pub wal: Replayed,
    /// Every block window before this is on disk.
    pub persisted_until: i64,
}

pub(super) struct Disk {
    dir: PathBuf,
    block_ms: i64,
    wal: Wal,
    /// Oldest first, never overlapping.
    blocks: Vec<BlockMeta>,
    pub(super) bytes_written: u64,
    /// The log could not be written (said once, until it works again).
    log_failing: bool,
}

fn is_plain_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

impl Disk {
    /// Opens (or makes, 0700) `dir`: checks the blocks, removes writes a crash left
    /// half done, and replays the log into `apply`.
    pub(super) fn open(
        dir: &Path,
        block_ms: i64,
        apply: impl FnMut(Sample),
    ) -> Result<(Disk, Opened), OpenError> {
        let io = |source| OpenError {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        let mut blocks = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let Some(name) = entry.map_err(io)?.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let path = dir.join(&name);
            if block::parse_name(&name, true).is_some() && is_plain_file(&path) {
                // A block whose write a crash cut short: the log still has its points.
                std::fs::remove_file(&path).map_err(io)?;
            } else if let Some((start, end)) = block::parse_name(&name, false) {
                match block::check(dir, start, end) {
                    Ok(meta) => blocks.push(meta),
                    Err(e) => {
                        warn!(error = %e, "metric cache: skipping a block that does not check out");
                    }
                }
            }
        }
        blocks.sort_by_key(|b| b.start);
        let persisted_until = blocks.last().map_or(i64::MIN, |b| b.end);
        let (wal, replayed) = Wal::open(dir, block_ms, persisted_until, apply).map_err(io)?;
        let opened = Opened {
            blocks: blocks.len(),
            wal: replayed,
            persisted_until,
        };
        Ok((
            Disk {
                dir: dir.to_path_buf(),
                block_ms,
                wal,
                blocks,
                bytes_written: 0,
                log_failing: false,
            },
            opened,
        ))
    }

    /// Logs one round. A failing disk is said once and then only when it recovers; the
    /// points stay in memory either way.
    pub(super) fn log(&mut self, samples: &[&Sample]) {
        match self.wal.log(samples) {
            Ok(()) if self.log_failing => {
                self.log_failing = false;
                info!(dir = %self.dir.display(), "metric cache: writing the log works again");
            }
            Ok(()) => {}
            Err(e) if !self.log_failing => {
                self.log_failing = true;
                warn!(dir = %self.dir.display(), error = %e, "metric cache: cannot write the log; new points are kept in memory only until it works again");
            }
            Err(_) => {}
        }
    }

    /// Writes the series' chunks as blocks (one per window they fall in) and deletes
    /// the log of those windows. Returns the points that could not be written.
    pub(super) fn persist(&mut self, end_ms: i64, series: Vec<(SeriesKey, Vec<Chunk>)>) -> usize {
        let mut by_window: std::collections::BTreeMap<i64, Vec<(SeriesKey, Vec<Chunk>)>> =
            Default::default();
        for (key, chunks) in series {
            for c in chunks {
                let list = by_window
                    .entry(window_start(c.min_ts, self.block_ms))
                    .or_default();
                match list.last_mut() {
                    Some((k, cs)) if *k == key => cs.push(c),
                    _ => list.push((key.clone(), vec![c])),
                }
            }
        }
        let mut lost = 0;
        for (start, series) in by_window {
            match block::write(&self.dir, start, start + self.block_ms, &series) {
                Ok(meta) => {
                    self.bytes_written += meta.bytes;
                    tracing::debug!(block = %meta.file_name(), series = series.len(), bytes = meta.bytes, "metric cache: wrote a block");
                    self.blocks.push(meta);
                }
                Err(e) => {
                    let points: usize = series
                        .iter()
                        .flat_map(|(_, cs)| cs.iter().map(|c| usize::from(c.n)))
                        .sum();
                    warn!(error = %e, points, "metric cache: cannot write a block; its points are lost");
                    lost += points;
                }
            }
        }
        self.blocks.sort_by_key(|b| b.start);
        if let Err(e) = self.wal.drop_before(end_ms) {
            warn!(dir = %self.dir.display(), error = %e, "metric cache: cannot delete a persisted log segment");
        }
        lost
    }

    /// Deletes the blocks past the retention, then the oldest while the directory holds
    /// more than `max_bytes`. Returns how many went.
    pub(super) fn enforce_limits(&mut self, oldest_kept_ms: i64, max_bytes: u64) -> usize {
        let mut removed = 0;
        while let Some(first) = self.blocks.first() {
            let total = self.disk_bytes();
            let why = if first.end <= oldest_kept_ms {
                "past the retention"
            } else if total > max_bytes {
                "over the size cap"
            } else {
                break;
            };
            let meta = self.blocks.remove(0);
            let path = self.dir.join(meta.file_name());
            if !is_plain_file(&path) {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    removed += 1;
                    info!(block = %meta.file_name(), reason = why, dirBytes = total, maxBytes = max_bytes, "metric cache: deleted the oldest block");
                }
                Err(e) => {
                    warn!(path = %path.display(), error = %e, "metric cache: cannot delete a block");
                }
            }
        }
        removed
    }

    /// The blocks overlapping `[start_ms, end_ms]`, to be read after the cache's lock
    /// is let go: a block is never changed once written, only deleted.
    pub(super) fn blocks_in(&self, start_ms: i64, end_ms: i64) -> Blocks {
        Blocks {
            dir: self.dir.clone(),
            blocks: self
                .blocks
                .iter()
                .filter(|b| b.end > start_ms && b.start <= end_ms)
                .cloned()
                .collect(),
        }
    }

    /// Blocks and log, in bytes.
    pub(super) fn disk_bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.bytes).sum::<u64>() + self.wal.disk_bytes()
    }

    pub(super) fn blocks(&self) -> usize {
        self.blocks.len()
    }

    pub(super) fn log_bytes_written(&self) -> u64 {
        self.wal.bytes_written
    }
}

/// Some of the directory's blocks, named under the cache's lock and read without it.
pub(super) struct Blocks {
    dir: PathBuf,
    blocks: Vec<BlockMeta>,
}

impl Blocks {
    /// The points of the blocks that `want` asks for, oldest first. Returns the bound
    /// that stopped it, if one did. A block deleted meanwhile (past the retention or
    /// the size cap) is skipped.
    pub(super) fn read_into(&self, want: &Want<'_>, out: &mut Vec<(i64, f64)>) -> Option<Cut> {
        let mut problems: Vec<BlockError> = Vec::new();
        let mut cut = None;
        for meta in &self.blocks {
            #[cfg(test)]
            BEFORE_BLOCK_READ.with_borrow_mut(|f| f.as_mut().map(|f| f()));
            if want
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
            {
                cut = Some(Cut::Deadline);
                break;
            }
            match block::read_into(&self.dir, meta, want, out, &mut problems) {
                Ok(None) => {}
                Ok(Some(c)) => {
                    cut = Some(c);
                    break;
                }
                Err(BlockError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    tracing::debug!(block = %meta.file_name(), "metric cache: a query skipped a block deleted while it read");
                }
                Err(e) => problems.push(e),
            }
        }
        for e in problems {
            warn!(error = %e, "metric cache: a query skipped stored points that do not check out");
        }
        cut
    }
}

#[cfg(test)]
thread_local! {
    /// Called before each block a query reads: what a test does meanwhile.
    pub(super) static BEFORE_BLOCK_READ: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
        const { std::cell::RefCell::new(None) };
}

//! One series in the head (the part of the cache kept in memory): its last minute of
//! points as they came, where a late point can still be slotted in, and the rest in
//! compressed chunks (see [`gorilla`](super::gorilla)). A chunk never crosses a block
//! boundary, so a finished block takes whole chunks, as they are, to disk.

use std::collections::VecDeque;

use super::gorilla::{CHUNK_POINTS, Chunk, ChunkWriter};

/// The start of the block window `ts` falls in.
pub(super) fn window_start(ts: i64, block_ms: i64) -> i64 {
    ts.saturating_sub(ts.rem_euclid(block_ms))
}

/// Why a point was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// Older than the out-of-order window or than what is already on disk.
    TooOld,
    /// The series already has a point at that time.
    Duplicate,
}

#[derive(Debug, Default)]
pub(super) struct Series {
    /// The newest points, sorted by time: those within the out-of-order window of the
    /// newest, uncompressed so that a late point can be inserted.
    recent: VecDeque<(i64, f64)>,
    /// Finished chunks, oldest first.
    chunks: Vec<Chunk>,
    /// The chunk being filled, after the finished ones.
    open: Option<ChunkWriter>,
}

/// Where the cache's rules put a series' limits.
#[derive(Debug, Clone, Copy)]
pub(super) struct SeriesRules {
    /// No point older than this is taken (what is on disk is final).
    pub floor_ms: i64,
    pub out_of_order_ms: i64,
    pub block_ms: i64,
    pub max_points: usize,
}

impl Series {
    /// The newest point's time.
    pub(super) fn newest_ms(&self) -> Option<i64> {
        self.recent
            .back()
            .map(|p| p.0)
            .or_else(|| self.sealed_until())
    }

    /// The newest compressed point's time: nothing at or before it can be added.
    fn sealed_until(&self) -> Option<i64> {
        match &self.open {
            Some(w) => Some(w.last_ts()),
            None => self.chunks.last().map(|c| c.max_ts),
        }
    }

    /// Adds a point unless it is older than the newest by more than the out-of-order
    /// window, older than the floor, or a duplicate; then compresses what has left the
    /// window, and drops the oldest chunk past the point cap (as a retention would).
    pub(super) fn push(&mut self, ts: i64, value: f64, rules: SeriesRules) -> Result<(), Refused> {
        let newest = self.newest_ms().unwrap_or(i64::MIN);
        let oldest_taken = rules
            .floor_ms
            .max(newest.saturating_sub(rules.out_of_order_ms));
        if ts < oldest_taken || self.sealed_until().is_some_and(|s| ts <= s) {
            return Err(Refused::TooOld);
        }
        let at = self.recent.partition_point(|(t, _)| *t < ts);
        if self.recent.get(at).is_some_and(|(t, _)| *t == ts) {
            return Err(Refused::Duplicate);
        }
        self.recent.insert(at, (ts, value));
        let newest = newest.max(ts);
        self.seal_before(newest.saturating_sub(rules.out_of_order_ms), rules.block_ms);
        self.enforce_cap(rules.max_points);
        Ok(())
    }

    /// Compresses the recent points older than `before_ms`.
    fn seal_before(&mut self, before_ms: i64, block_ms: i64) {
        while let Some(&(ts, v)) = self.recent.front().filter(|p| p.0 < before_ms) {
            self.recent.pop_front();
            match &mut self.open {
                Some(w)
                    if w.len() < CHUNK_POINTS
                        && window_start(w.first_ts(), block_ms) == window_start(ts, block_ms) =>
                {
                    w.push(ts, v);
                }
                _ => {
                    if let Some(w) = self.open.take() {
                        self.chunks.push(w.close());
                    }
                    self.open = Some(ChunkWriter::new(ts, v));
                }
            }
        }
    }

    /// Drops the oldest chunks while the series holds more than `max` points.
    fn enforce_cap(&mut self, max: usize) {
        while self.len() > max && !self.chunks.is_empty() {
            self.chunks.remove(0);
        }
    }

    fn len(&self) -> usize {
        self.recent.len()
            + self.open.as_ref().map_or(0, |w| usize::from(w.len()))
            + self.chunks.iter().map(|c| usize::from(c.n)).sum::<usize>()
    }

    /// Takes out every point before `end_ms` (a block boundary) as finished chunks,
    /// oldest first; the series keeps only what is newer.
    pub(super) fn take_before(&mut self, end_ms: i64, block_ms: i64) -> Vec<Chunk> {
        self.seal_before(end_ms, block_ms);
        if self.open.as_ref().is_some_and(|w| w.first_ts() < end_ms) {
            self.chunks.extend(self.open.take().map(ChunkWriter::close));
        }
        let keep = self.chunks.partition_point(|c| c.max_ts < end_ms);
        let rest = self.chunks.split_off(keep);
        std::mem::replace(&mut self.chunks, rest)
    }

    /// Drops the points older than `cutoff_ms` (whole chunks: a chunk goes when its
    /// newest point is past the cutoff).
    pub(super) fn drop_before(&mut self, cutoff_ms: i64) {
        self.chunks.retain(|c| c.max_ts >= cutoff_ms);
        if self.open.as_ref().is_some_and(|w| w.last_ts() < cutoff_ms) {
            self.open = None;
        }
        while self.recent.front().is_some_and(|p| p.0 < cutoff_ms) {
            self.recent.pop_front();
        }
    }

    /// A copy of the chunks and points that overlap `[start_ms, end_ms]`, so a query
    /// can decode them after the cache's lock is let go. Stops copying once it holds
    /// `budget` points (counted whole chunks); the budget is spent by what it copies.
    pub(super) fn copy_range(&self, start_ms: i64, end_ms: i64, budget: &mut usize) -> Copied {
        let mut copied = Copied::default();
        for c in self
            .chunks
            .iter()
            .filter(|c| c.max_ts >= start_ms && c.min_ts <= end_ms)
        {
            if *budget == 0 {
                copied.cut = true;
                return copied;
            }
            *budget = budget.saturating_sub(usize::from(c.n));
            copied.chunks.push(c.clone());
        }
        if let Some(w) = self
            .open
            .as_ref()
            .filter(|w| w.last_ts() >= start_ms && w.first_ts() <= end_ms)
        {
            if *budget == 0 {
                copied.cut = true;
                return copied;
            }
            *budget = budget.saturating_sub(usize::from(w.len()));
            copied.open = Some(w.clone());
        }
        for p in self
            .recent
            .iter()
            .filter(|p| p.0 >= start_ms && p.0 <= end_ms)
        {
            if *budget == 0 {
                copied.cut = true;
                return copied;
            }
            *budget -= 1;
            copied.recent.push(*p);
        }
        copied
    }

    pub(super) fn is_empty(&self) -> bool {
        self.recent.is_empty() && self.open.is_none() && self.chunks.is_empty()
    }

    /// The heap the series takes: its buffers' capacity.
    pub(super) fn heap_bytes(&self) -> usize {
        self.recent.capacity() * std::mem::size_of::<(i64, f64)>()
            + self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.chunks.iter().map(|c| c.bytes.len()).sum::<usize>()
            + self.open.as_ref().map_or(0, ChunkWriter::heap_bytes)
    }
}

/// What a query copied of one series under the cache's lock (see
/// [`Series::copy_range`]), decoded after it.
#[derive(Debug, Default)]
pub(super) struct Copied {
    chunks: Vec<Chunk>,
    open: Option<ChunkWriter>,
    recent: Vec<(i64, f64)>,
    /// The copy stopped at its budget: the series holds more in the range.
    pub cut: bool,
}

impl Copied {
    /// Appends the points in `[start_ms, end_ms]` to `out`, oldest first, stopping when
    /// `out` holds `limit`; false if it stopped early.
    pub(super) fn range_into(
        &self,
        start_ms: i64,
        end_ms: i64,
        out: &mut Vec<(i64, f64)>,
        limit: usize,
    ) -> bool {
        let in_range = |p: &(i64, f64)| p.0 >= start_ms && p.0 <= end_ms;
        let chunks = self.chunks.iter().map(Chunk::points);
        let open = self.open.iter().map(ChunkWriter::points);
        for p in chunks
            .chain(open)
            .flatten()
            .chain(self.recent.iter().copied())
            .filter(in_range)
        {
            if out.len() >= limit {
                return false;
            }
            out.push(p);
        }
        true
    }
}

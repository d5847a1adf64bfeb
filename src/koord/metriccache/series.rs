//! One series: its points, oldest first, in a ring whose length never passes the cap.
//!
//! A point takes 8 bytes: its time as milliseconds after the series' base (u32, so a
//! base lasts 49 days before it is moved up) and its value as an f32 (a 24-bit mantissa:
//! 64 bytes of error on a gigabyte, a thousandth of a core on 4 000 cores). At 1 s
//! resolution and 30 min retention that is 15 KiB a series.

use std::collections::VecDeque;

/// The bytes one point takes in the ring.
pub(super) const POINT_BYTES: usize = std::mem::size_of::<(u32, f32)>();

#[derive(Debug)]
pub(super) struct Series {
    /// Unix ms that offsets count from.
    base_ms: i64,
    points: VecDeque<(u32, f32)>,
    cap: usize,
}

impl Series {
    pub(super) fn new(cap: usize) -> Series {
        Series {
            base_ms: 0,
            points: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    fn newest_ms(&self) -> Option<i64> {
        self.points
            .back()
            .map(|(off, _)| self.base_ms + i64::from(*off))
    }

    /// Appends a point unless it is older than the newest one; then drops what is past
    /// the retention or the cap. False when the point was refused.
    pub(super) fn push(&mut self, ts_ms: i64, value: f64, retention_ms: i64) -> bool {
        match self.newest_ms() {
            Some(newest) if newest > ts_ms => return false,
            None => self.base_ms = ts_ms,
            Some(_) => {}
        }
        self.drop_before(ts_ms.saturating_sub(retention_ms));
        if self.points.len() == self.cap {
            self.points.pop_front();
        }
        let offset = match u32::try_from(ts_ms - self.base_ms) {
            Ok(o) => o,
            Err(_) => {
                self.rebase();
                match u32::try_from(ts_ms - self.base_ms) {
                    Ok(o) => o,
                    // Older points are further back than a u32 reaches: start afresh.
                    Err(_) => {
                        self.points.clear();
                        self.base_ms = ts_ms;
                        0
                    }
                }
            }
        };
        if self.points.len() == self.points.capacity() {
            // Doubling, but never past the cap: a full ring holds exactly `cap` points.
            let want = (self.points.capacity() * 2).max(16).min(self.cap);
            self.points.reserve_exact(want - self.points.len());
        }
        #[allow(
            clippy::cast_possible_truncation,
            reason = "stored as f32 on purpose (see the module doc)"
        )]
        self.points.push_back((offset, value as f32));
        true
    }

    /// Moves the base up to the oldest point.
    fn rebase(&mut self) {
        let Some(&(first, _)) = self.points.front() else {
            return;
        };
        for p in &mut self.points {
            p.0 -= first;
        }
        self.base_ms += i64::from(first);
    }

    /// Drops the points older than `cutoff_ms`.
    pub(super) fn drop_before(&mut self, cutoff_ms: i64) {
        while self
            .points
            .front()
            .is_some_and(|(off, _)| self.base_ms + i64::from(*off) < cutoff_ms)
        {
            self.points.pop_front();
        }
    }

    /// The points in `[start_ms, end_ms]`, as unix ms and values.
    pub(super) fn range(&self, start_ms: i64, end_ms: i64) -> impl Iterator<Item = (i64, f64)> {
        let base = self.base_ms;
        let from = self
            .points
            .partition_point(|(off, _)| base + i64::from(*off) < start_ms);
        self.points
            .range(from..)
            .map(move |(off, v)| (base + i64::from(*off), f64::from(*v)))
            .take_while(move |(t, _)| *t <= end_ms)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.points.capacity() * POINT_BYTES
    }
}

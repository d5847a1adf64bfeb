//! The decaying exponential histogram (koordinator's `pkg/util/histogram`, a port of
//! the VPA recommender's): exponential buckets, samples weighted by 2^(age/halfLife)
//! so that newer samples count more, and percentiles read as bucket upper edges.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Ratio between consecutive bucket sizes.
const RATIO: f64 = 1.05;
/// A bucket lighter than this counts as empty (0.001 × MinSampleWeight 0.1).
pub(crate) const EPSILON: f64 = 1e-4;
/// After this many half-lives past the reference, the reference moves.
const MAX_DECAY_EXPONENT: i64 = 100;
/// The largest weight a checkpoint stores; the others are scaled to it.
const MAX_CHECKPOINT_WEIGHT: f64 = 10000.0;

/// The bucket layout of one resource.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Buckets {
    first: f64,
    count: usize,
}

impl Buckets {
    /// Exponential buckets: the first `first` wide, enough of them to reach `max`.
    pub(crate) fn exponential(max: f64, first: f64) -> Buckets {
        let n = ((max * (RATIO - 1.0) / first + 1.0).ln() / RATIO.ln()).ceil() as usize + 1;
        Buckets { first, count: n }
    }

    /// CPU in cores: first bucket 0.025, up to 1024 cores (158 buckets).
    pub(crate) fn cpu() -> Buckets {
        Buckets::exponential(1024.0, 0.025)
    }

    /// Memory in bytes: first bucket 5 MiB, up to 2^41 B (205 buckets).
    pub(crate) fn memory() -> Buckets {
        Buckets::exponential(2f64.powi(41), 5.0 * 1024.0 * 1024.0)
    }

    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The bucket of `value`: below the first bucket's size is bucket 0, beyond the
    /// last is the last.
    pub(crate) fn find(&self, value: f64) -> usize {
        if value.is_nan() || value < self.first {
            return 0;
        }
        let b = ((value * (RATIO - 1.0) / self.first + 1.0).ln() / RATIO.ln()) as usize;
        b.min(self.count - 1)
    }

    /// Where bucket `b` starts: 0 for bucket 0, then first·(1.05^b − 1)/0.05.
    pub(crate) fn start(&self, b: usize) -> f64 {
        if b == 0 {
            return 0.0;
        }
        self.first * (RATIO.powi(b as i32) - 1.0) / (RATIO - 1.0)
    }
}

/// Why a checkpoint cannot become a histogram.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum HistogramError {
    #[error("totalWeight {0} is negative or not a number")]
    BadTotal(f64),
    #[error("bucket {bucket} is beyond the histogram's {count} buckets")]
    BucketOutOfRange { bucket: u32, count: usize },
    #[error("referenceTimestamp {0:?} is not an RFC 3339 time")]
    BadReference(String),
}

/// koordlet's histogram checkpoint (VPA's `HistogramCheckpoint`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistogramCheckpoint {
    #[serde(rename = "referenceTimestamp")]
    pub reference_timestamp: String,
    #[serde(rename = "bucketWeights", default)]
    pub bucket_weights: BTreeMap<u32, u32>,
    #[serde(rename = "totalWeight")]
    pub total_weight: f64,
}

/// Go's zero time, which is where a fresh histogram's reference starts.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// A histogram whose samples decay with a half-life.
#[derive(Debug, Clone)]
pub(crate) struct DecayingHistogram {
    buckets: Buckets,
    weights: Vec<f64>,
    total: f64,
    min_bucket: usize,
    max_bucket: usize,
    half_life_ms: i64,
    /// Unix ms of the reference; `None` is Go's zero time (before any sample).
    reference_ms: Option<i64>,
}

impl DecayingHistogram {
    pub(crate) fn new(buckets: Buckets, half_life_ms: i64) -> DecayingHistogram {
        DecayingHistogram {
            buckets,
            weights: vec![0.0; buckets.count],
            total: 0.0,
            min_bucket: buckets.count - 1,
            max_bucket: 0,
            half_life_ms: half_life_ms.max(1),
            reference_ms: None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.weights[self.min_bucket] < EPSILON
    }

    #[cfg(test)]
    pub(crate) fn total_weight(&self) -> f64 {
        self.total
    }

    #[cfg(test)]
    pub(crate) fn reference_ms(&self) -> Option<i64> {
        self.reference_ms
    }

    /// Adds `value` with `weight` at `ts_ms`, decayed relative to the reference.
    pub(crate) fn add_sample(&mut self, value: f64, weight: f64, ts_ms: i64) {
        let w = weight.max(0.0) * self.decay_factor(ts_ms);
        let b = self.buckets.find(value);
        self.weights[b] += w;
        self.total += w;
        if b < self.min_bucket && self.weights[b] >= EPSILON {
            self.min_bucket = b;
        }
        if b > self.max_bucket && self.weights[b] >= EPSILON {
            self.max_bucket = b;
        }
    }

    fn decay_factor(&mut self, ts_ms: i64) -> f64 {
        let limit = self
            .reference_ms
            .map(|r| r.saturating_add(MAX_DECAY_EXPONENT * self.half_life_ms));
        if limit.is_none_or(|l| ts_ms > l) {
            self.shift_reference(ts_ms);
        }
        let r = self.reference_ms.unwrap_or(ts_ms);
        ((ts_ms - r) as f64 / self.half_life_ms as f64).exp2()
    }

    /// Moves the reference to `ts_ms` rounded to the half-life (halves up, as Go's
    /// `Time.Round`) and rescales the stored weights so the percentiles stay.
    fn shift_reference(&mut self, ts_ms: i64) {
        let h = self.half_life_ms;
        let new_ref = (ts_ms + h / 2).div_euclid(h) * h;
        if let Some(old) = self.reference_ms {
            let exponent = ((old - new_ref) as f64 / h as f64).round();
            self.scale(exponent.exp2());
        } else {
            // From Go's zero time every weight scales to nothing.
            self.scale(0.0);
        }
        self.reference_ms = Some(new_ref);
    }

    fn scale(&mut self, factor: f64) {
        for w in &mut self.weights {
            *w *= factor;
        }
        self.total *= factor;
        self.update_min_max();
    }

    fn update_min_max(&mut self) {
        let last = self.buckets.count - 1;
        self.min_bucket = last;
        self.max_bucket = 0;
        for (b, w) in self.weights.iter().enumerate() {
            if *w >= EPSILON {
                self.min_bucket = self.min_bucket.min(b);
                self.max_bucket = self.max_bucket.max(b);
            }
        }
    }

    /// The upper edge of the first bucket where the running weight reaches
    /// `p`·total (the last bucket gives its own start); 0 when empty.
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        let threshold = p * self.total;
        let mut sum = 0.0;
        let mut b = self.min_bucket;
        while b < self.max_bucket {
            sum += self.weights[b];
            if sum >= threshold {
                break;
            }
            b += 1;
        }
        if b < self.buckets.count - 1 {
            self.buckets.start(b + 1)
        } else {
            self.buckets.start(b)
        }
    }

    /// The checkpoint: weights scaled so the largest is 10000, rounded, zeros dropped.
    pub(crate) fn checkpoint(&self) -> HistogramCheckpoint {
        let mut bucket_weights = BTreeMap::new();
        let max = (self.min_bucket..=self.max_bucket)
            .map(|b| self.weights[b])
            .fold(0.0, f64::max);
        if max > 0.0 {
            let ratio = MAX_CHECKPOINT_WEIGHT / max;
            for b in self.min_bucket..=self.max_bucket {
                let w = (self.weights[b] * ratio).round() as u32;
                if w > 0 {
                    bucket_weights.insert(b as u32, w);
                }
            }
        }
        HistogramCheckpoint {
            reference_timestamp: match self.reference_ms {
                None => ZERO_TIME.to_string(),
                Some(ms) => jiff::Timestamp::from_millisecond(ms)
                    .map(|t| t.to_string())
                    .unwrap_or_else(|_| ZERO_TIME.to_string()),
            },
            bucket_weights,
            total_weight: self.total,
        }
    }

    /// A histogram from `c`: the stored weights rescaled by totalWeight/Σstored.
    pub(crate) fn restore(
        buckets: Buckets,
        half_life_ms: i64,
        c: &HistogramCheckpoint,
    ) -> Result<DecayingHistogram, HistogramError> {
        if c.total_weight.is_nan() || c.total_weight < 0.0 || c.total_weight.is_infinite() {
            return Err(HistogramError::BadTotal(c.total_weight));
        }
        let mut h = DecayingHistogram::new(buckets, half_life_ms);
        h.reference_ms = if c.reference_timestamp == ZERO_TIME {
            None
        } else {
            let t: jiff::Timestamp = c
                .reference_timestamp
                .parse()
                .map_err(|_| HistogramError::BadReference(c.reference_timestamp.clone()))?;
            Some(t.as_millisecond())
        };
        let mut sum: u64 = 0;
        for (&b, &w) in &c.bucket_weights {
            if b as usize >= buckets.count {
                return Err(HistogramError::BucketOutOfRange {
                    bucket: b,
                    count: buckets.count,
                });
            }
            sum += u64::from(w);
        }
        if sum == 0 {
            return Ok(h);
        }
        let ratio = c.total_weight / sum as f64;
        for (&b, &w) in &c.bucket_weights {
            h.weights[b as usize] += f64::from(w) * ratio;
        }
        h.total += c.total_weight;
        h.update_min_max();
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;
    /// A multiple of both half-lives, so a sample at T0 weighs exactly 1.
    const T0: i64 = 1_700_006_400_000;

    fn cpu() -> DecayingHistogram {
        DecayingHistogram::new(Buckets::cpu(), 12 * HOUR)
    }

    #[test]
    fn bucket_counts_and_edges_are_koordlets() {
        assert_eq!(Buckets::cpu().count(), 158);
        assert_eq!(Buckets::memory().count(), 205);
        let b = Buckets::cpu();
        assert_eq!(b.start(0), 0.0);
        assert!((b.start(1) - 0.025).abs() < 1e-12);
        assert!((b.start(2) - 0.025 * 2.05).abs() < 1e-12);
        assert_eq!(b.find(0.0), 0);
        assert_eq!(b.find(0.024), 0);
        assert_eq!(b.find(0.025), 1);
        assert_eq!(b.find(0.05), 1);
        assert_eq!(b.find(0.0513), 2);
        assert_eq!(b.find(1e9), 157);
        assert_eq!(b.find(f64::NAN), 0);
        // 1 core: log_1.05(1·0.05/0.025 + 1) = log_1.05(3) = 22.5…
        assert_eq!(b.find(1.0), 22);
        let m = Buckets::memory();
        assert_eq!(m.find(5.0 * 1024.0 * 1024.0), 1);
        assert_eq!(m.find(2f64.powi(45)), 204);
    }

    #[test]
    fn empty_histogram_gives_zero() {
        let h = cpu();
        assert!(h.is_empty());
        assert_eq!(h.percentile(0.9), 0.0);
        assert_eq!(h.percentile(1.0), 0.0);
    }

    #[test]
    fn constant_one_core_gives_the_upper_edge_of_its_bucket_at_every_percentile() {
        let mut h = cpu();
        for i in 0..100 {
            h.add_sample(1.0, 1.0, T0 + i * 60_000);
        }
        let edge = Buckets::cpu().start(23);
        for p in [0.0, 0.5, 0.6, 0.9, 0.95, 0.98, 1.0] {
            assert!((h.percentile(p) - edge).abs() < 1e-12, "p{p}");
        }
        assert!(edge > 1.0 && edge < 1.06, "{edge}");
    }

    #[test]
    fn a_90_10_mix_splits_at_p90() {
        let mut h = cpu();
        for _ in 0..90 {
            h.add_sample(1.0, 1.0, T0);
        }
        for _ in 0..10 {
            h.add_sample(4.0, 1.0, T0);
        }
        let b = Buckets::cpu();
        let low = b.start(b.find(1.0) + 1);
        let high = b.start(b.find(4.0) + 1);
        assert!((h.percentile(0.5) - low).abs() < 1e-9);
        assert!((h.percentile(0.9) - low).abs() < 1e-9);
        assert!((h.percentile(0.95) - high).abs() < 1e-9);
        assert!((h.percentile(1.0) - high).abs() < 1e-9);
    }

    #[test]
    fn the_last_bucket_returns_its_own_start() {
        let mut h = cpu();
        h.add_sample(5000.0, 1.0, T0);
        assert_eq!(h.percentile(0.5), Buckets::cpu().start(157));
    }

    #[test]
    fn decay_moves_the_percentile_toward_recent_values() {
        let mut h = cpu();
        // 60 samples of 1 core, then 40 of 4 cores three half-lives later: the
        // new ones weigh 8× each (320 vs 60), so p50 is already the new value.
        for i in 0..60 {
            h.add_sample(1.0, 1.0, T0 + i);
        }
        let b = Buckets::cpu();
        let low = b.start(b.find(1.0) + 1);
        let high = b.start(b.find(4.0) + 1);
        assert!((h.percentile(0.5) - low).abs() < 1e-9);
        for i in 0..40 {
            h.add_sample(4.0, 1.0, T0 + 36 * HOUR + i);
        }
        assert!((h.percentile(0.5) - high).abs() < 1e-9);
        // Without decay, 60 of 100 would keep p50 at the old value; with it, the
        // old samples are 60/(60+320) ≈ 16 %.
        assert!((h.percentile(0.15) - low).abs() < 1e-9);
        assert!((h.percentile(0.17) - high).abs() < 1e-9);
    }

    #[test]
    fn the_reference_shift_keeps_percentiles_and_rescales() {
        let mut h = cpu();
        h.add_sample(1.0, 1.0, T0);
        let r0 = h.reference_ms().unwrap();
        assert_eq!(r0 % (12 * HOUR), 0);
        // The mix 99 half-lives later weighs 2^99 per sample.
        let late = r0 + 99 * 12 * HOUR;
        for i in 0..90 {
            h.add_sample(1.0, 1.0, late + i);
        }
        for i in 0..10 {
            h.add_sample(4.0, 1.0, late + 100 + i);
        }
        assert_eq!(h.reference_ms(), Some(r0));
        let ps = [0.5, 0.9, 0.95, 1.0];
        let before: Vec<f64> = ps.iter().map(|p| h.percentile(*p)).collect();
        // A sample beyond 100 half-lives moves the reference and scales by 2^-101.
        let mut shifted = h.clone();
        shifted.add_sample(1.0, 0.0, r0 + 101 * 12 * HOUR + 1000);
        assert_eq!(shifted.reference_ms(), Some(r0 + 101 * 12 * HOUR));
        let after: Vec<f64> = ps.iter().map(|p| shifted.percentile(*p)).collect();
        assert_eq!(before, after);
        let want = h.total_weight() * 2f64.powi(-101);
        assert!((shifted.total_weight() - want).abs() / want < 1e-12);
        assert!(shifted.total_weight() > 20.0 && shifted.total_weight() < 30.0);
    }

    #[test]
    fn checkpoint_round_trip_keeps_percentiles_and_scales_to_10000() {
        let mut h = cpu();
        for _ in 0..90 {
            h.add_sample(1.0, 1.0, T0);
        }
        for _ in 0..10 {
            h.add_sample(4.0, 1.0, T0);
        }
        let c = h.checkpoint();
        assert_eq!(c.bucket_weights.values().max(), Some(&10000));
        assert_eq!(c.bucket_weights.len(), 2);
        assert_eq!(c.bucket_weights[&22], 10000);
        assert_eq!(c.bucket_weights[&(Buckets::cpu().find(4.0) as u32)], 1111);
        let back = DecayingHistogram::restore(Buckets::cpu(), 12 * HOUR, &c).unwrap();
        for p in [0.5, 0.6, 0.9, 0.95, 0.98, 1.0] {
            assert_eq!(back.percentile(p), h.percentile(p), "p{p}");
        }
        assert_eq!(back.reference_ms(), h.reference_ms());
        assert!((back.total_weight() - h.total_weight()).abs() < 1e-9);
    }

    #[test]
    fn bad_checkpoints_are_refused() {
        let mut c = cpu().checkpoint();
        assert_eq!(c.reference_timestamp, ZERO_TIME);
        c.bucket_weights.insert(158, 1);
        assert_eq!(
            DecayingHistogram::restore(Buckets::cpu(), HOUR, &c).unwrap_err(),
            HistogramError::BucketOutOfRange {
                bucket: 158,
                count: 158
            }
        );
        c.bucket_weights.clear();
        c.total_weight = -1.0;
        assert!(DecayingHistogram::restore(Buckets::cpu(), HOUR, &c).is_err());
        c.total_weight = 1.0;
        c.reference_timestamp = "yesterday".into();
        assert!(DecayingHistogram::restore(Buckets::cpu(), HOUR, &c).is_err());
    }
}

//! Chunks of points compressed as Facebook's Gorilla paper does (the XOR chunks of
//! Prometheus's TSDB, which koordlet stores its series in): timestamps as
//! delta-of-deltas in a few size classes, values as the XOR with the one before, keeping
//! only its meaningful bits. A point collected every second takes about 2 bytes when its
//! value repeats (a pid count, an idle PSI) and about 8 when every bit moves (a CPU rate);
//! values stay exact `f64`s.
//!
//! A chunk holds at most [`CHUNK_POINTS`] points, so a query that needs the newest few
//! decodes one short chunk, not the whole series.

/// Points per chunk (as Prometheus's head chunks).
pub(super) const CHUNK_POINTS: u16 = 120;

/// Bits appended most significant first.
#[derive(Debug, Default, Clone)]
struct BitWriter {
    bytes: Vec<u8>,
    /// Bits used in the last byte (0 = the last byte is full, or there is none).
    used: u8,
}

impl BitWriter {
    fn push_bit(&mut self, bit: bool) {
        if self.used == 0 {
            self.bytes.push(0);
        }
        if bit {
            let last = self.bytes.len() - 1;
            self.bytes[last] |= 0x80 >> self.used;
        }
        self.used = (self.used + 1) % 8;
    }

    /// The low `n` bits of `v` (n ≤ 64).
    fn push_bits(&mut self, v: u64, n: u32) {
        for i in (0..n).rev() {
            self.push_bit((v >> i) & 1 == 1);
        }
    }
}

/// Reads what a [`BitWriter`] wrote; `None` past the end.
struct BitReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl BitReader<'_> {
    fn bit(&mut self) -> Option<bool> {
        let byte = *self.bytes.get(self.pos / 8)?;
        let bit = byte & (0x80 >> (self.pos % 8)) != 0;
        self.pos += 1;
        Some(bit)
    }

    fn bits(&mut self, n: u32) -> Option<u64> {
        let mut v = 0u64;
        for _ in 0..n {
            v = (v << 1) | u64::from(self.bit()?);
        }
        Some(v)
    }
}

/// The delta-of-delta size classes: a prefix of ones ended by a zero, then that many
/// bits of the value (two's complement). The last class is a full 64 bits. The first
/// holds a 1 s collector's jitter of a few milliseconds in 9 bits (Prometheus starts at
/// 14, for scrapes that jitter more).
const DOD_CLASSES: [u32; 4] = [7, 14, 20, 64];

fn push_dod(w: &mut BitWriter, dod: i64) {
    if dod == 0 {
        w.push_bit(false);
        return;
    }
    for (i, bits) in DOD_CLASSES.iter().enumerate() {
        let fits = *bits == 64 || {
            let half = 1i64 << (bits - 1);
            (-half..half).contains(&dod)
        };
        if fits {
            w.push_bits((1 << (i + 1)) - 1, i as u32 + 1);
            if i + 1 < DOD_CLASSES.len() {
                w.push_bit(false);
            }
            w.push_bits(dod as u64 & mask(*bits), *bits);
            return;
        }
    }
}

fn read_dod(r: &mut BitReader<'_>) -> Option<i64> {
    let mut class = 0;
    while class < DOD_CLASSES.len() && r.bit()? {
        class += 1;
    }
    if class == 0 {
        return Some(0);
    }
    let bits = DOD_CLASSES[class - 1];
    let raw = r.bits(bits)?;
    // Sign-extend the value from `bits` bits.
    let shift = 64 - bits;
    Some(((raw << shift) as i64) >> shift)
}

fn mask(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

/// The previous value's meaningful-bit window, which the next XOR may reuse.
#[derive(Debug, Clone, Copy, Default)]
struct XorWindow {
    leading: u32,
    trailing: u32,
}

/// A chunk being appended to: the stream and what the next point is encoded against.
#[derive(Debug, Clone)]
pub(super) struct ChunkWriter {
    bits: BitWriter,
    n: u16,
    first_ts: i64,
    last_ts: i64,
    last_delta: i64,
    last_value: u64,
    window: Option<XorWindow>,
}

impl ChunkWriter {
    /// A chunk whose first point is `(ts, value)`.
    pub(super) fn new(ts: i64, value: f64) -> ChunkWriter {
        let mut bits = BitWriter::default();
        bits.push_bits(ts as u64, 64);
        bits.push_bits(value.to_bits(), 64);
        ChunkWriter {
            bits,
            n: 1,
            first_ts: ts,
            last_ts: ts,
            last_delta: 0,
            last_value: value.to_bits(),
            window: None,
        }
    }

    /// Appends a point no older than the last one.
    pub(super) fn push(&mut self, ts: i64, value: f64) {
        let delta = ts - self.last_ts;
        push_dod(&mut self.bits, delta - self.last_delta);
        self.push_value(value.to_bits());
        self.last_delta = delta;
        self.last_ts = ts;
        self.n += 1;
    }

    fn push_value(&mut self, v: u64) {
        let x = v ^ self.last_value;
        self.last_value = v;
        let w = &mut self.bits;
        if x == 0 {
            w.push_bit(false);
            return;
        }
        w.push_bit(true);
        // 5 bits hold the leading zeros, so at most 31 are counted.
        let (leading, trailing) = (x.leading_zeros().min(31), x.trailing_zeros());
        if let Some(win) = self
            .window
            .filter(|p| leading >= p.leading && trailing >= p.trailing)
        {
            w.push_bit(false);
            let sig = 64 - win.leading - win.trailing;
            w.push_bits(x >> win.trailing, sig);
            return;
        }
        w.push_bit(true);
        let sig = 64 - leading - trailing;
        w.push_bits(u64::from(leading), 5);
        // 6 bits: 64 meaningful bits are written as 0.
        w.push_bits(u64::from(sig % 64), 6);
        w.push_bits(x >> trailing, sig);
        self.window = Some(XorWindow { leading, trailing });
    }

    pub(super) fn len(&self) -> u16 {
        self.n
    }

    pub(super) fn first_ts(&self) -> i64 {
        self.first_ts
    }

    pub(super) fn last_ts(&self) -> i64 {
        self.last_ts
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.bits.bytes.capacity()
    }

    /// The points, oldest first.
    pub(super) fn points(&self) -> ChunkIter<'_> {
        ChunkIter::new(&self.bits.bytes, self.n)
    }

    /// The finished chunk, its buffer trimmed to its length.
    pub(super) fn close(self) -> Chunk {
        Chunk {
            bytes: self.bits.bytes.into_boxed_slice(),
            n: self.n,
            min_ts: self.first_ts,
            max_ts: self.last_ts,
        }
    }
}

/// A closed chunk: its stream and what a query needs to skip it unread.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Chunk {
    pub bytes: Box<[u8]>,
    pub n: u16,
    pub min_ts: i64,
    pub max_ts: i64,
}

impl Chunk {
    pub(super) fn points(&self) -> ChunkIter<'_> {
        ChunkIter::new(&self.bytes, self.n)
    }
}

/// The `n` points of a stored chunk's bytes.
pub(super) fn decode(bytes: &[u8], n: u16) -> ChunkIter<'_> {
    ChunkIter::new(bytes, n)
}

/// The points of a stream; it ends early (and says so in `truncated`) if the stream is
/// shorter than its count, which a checksum makes a can't-happen for stored chunks.
pub(super) struct ChunkIter<'a> {
    r: BitReader<'a>,
    left: u16,
    seen: u16,
    ts: i64,
    delta: i64,
    value: u64,
    window: XorWindow,
}

impl<'a> ChunkIter<'a> {
    fn new(bytes: &'a [u8], n: u16) -> ChunkIter<'a> {
        ChunkIter {
            r: BitReader { bytes, pos: 0 },
            left: n,
            seen: 0,
            ts: 0,
            delta: 0,
            value: 0,
            window: XorWindow::default(),
        }
    }

    fn next_point(&mut self) -> Option<(i64, f64)> {
        if self.seen == 0 {
            self.ts = self.r.bits(64)? as i64;
            self.value = self.r.bits(64)?;
        } else {
            self.delta += read_dod(&mut self.r)?;
            self.ts += self.delta;
            self.value ^= self.read_xor()?;
        }
        self.seen += 1;
        Some((self.ts, f64::from_bits(self.value)))
    }

    fn read_xor(&mut self) -> Option<u64> {
        if !self.r.bit()? {
            return Some(0);
        }
        if self.r.bit()? {
            let leading = self.r.bits(5)? as u32;
            let sig = match self.r.bits(6)? as u32 {
                0 => 64,
                s => s,
            };
            self.window = XorWindow {
                leading,
                trailing: 64u32.checked_sub(leading + sig)?,
            };
        }
        let sig = 64 - self.window.leading - self.window.trailing;
        Some(self.r.bits(sig)? << self.window.trailing)
    }
}

impl Iterator for ChunkIter<'_> {
    type Item = (i64, f64);

    fn next(&mut self) -> Option<(i64, f64)> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let p = self.next_point();
        if p.is_none() {
            self.left = 0;
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(points: &[(i64, f64)]) -> Chunk {
        let mut w = ChunkWriter::new(points[0].0, points[0].1);
        for (t, v) in &points[1..] {
            w.push(*t, *v);
        }
        let open: Vec<_> = w.points().collect();
        let chunk = w.close();
        let closed: Vec<_> = chunk.points().collect();
        assert_eq!(open, closed);
        assert_eq!(closed.len(), points.len());
        for (got, want) in closed.iter().zip(points) {
            assert_eq!(got.0, want.0);
            assert_eq!(got.1.to_bits(), want.1.to_bits());
        }
        chunk
    }

    #[test]
    fn every_delta_class_and_every_value_survive_a_round_trip() {
        // Deltas of each size class, both signs, and the extremes of i64 time.
        let ts = [
            0,
            1000,
            2000 + 63,
            3000 + 63 - 64,
            2000,
            2999,
            4005,
            4005,
            14_000,
            80_000,
            1_000_000,
            900_000_000,
            900_000_001,
            i64::MAX / 4,
        ];
        let values = [
            0.0,
            -0.0,
            1.5,
            1.5,
            f64::MAX,
            f64::MIN_POSITIVE,
            123_456_789.0,
            0.012_345_678_9,
            -7.25,
            f64::INFINITY,
            1e-300,
            2.0,
            2.5,
            3.0,
        ];
        let points: Vec<_> = ts.iter().copied().zip(values).collect();
        round_trip(&points);
        round_trip(&[(i64::MIN / 2, 3.0), (i64::MIN / 2 + 7, 3.0)]);
    }

    #[test]
    fn a_steady_series_compresses_to_about_two_bytes_a_point() {
        // One point a second with a few ms of jitter; a constant value, then a noisy one.
        let constant: Vec<_> = (0..120)
            .map(|i| (1_700_000_000_000 + i * 1000 + (i * 7) % 5, 42.0))
            .collect();
        let c = round_trip(&constant);
        assert!(c.bytes.len() < 2 * 120 + 16, "{} bytes", c.bytes.len());
        let noisy: Vec<_> = (0..120)
            .map(|i| (1_700_000_000_000 + i * 1000, 0.1 + (i as f64).sin() / 97.0))
            .collect();
        let n = round_trip(&noisy);
        assert!(n.bytes.len() <= 10 * 120 + 16, "{} bytes", n.bytes.len());
    }

    #[test]
    fn a_short_stream_ends_the_points_early() {
        let mut w = ChunkWriter::new(0, 1.0);
        w.push(1000, 2.0);
        w.push(2000, 3.5);
        let mut c = w.close();
        c.bytes = c.bytes[..c.bytes.len() - 1].to_vec().into_boxed_slice();
        assert!(c.points().count() < 3);
    }
}

//! The byte encodings the log and the blocks share: LEB128 varints, zigzag, a series
//! key, and checksummed records (`[len u32][crc32 u32][body]`, little endian). Every
//! decoder is bounded: a length past what is left, or past a cap, is an error, never an
//! allocation.

use super::{MetricKind, SeriesKey};

/// The largest record body written or read (a round of samples is a few tens of KiB).
pub(super) const MAX_RECORD_BYTES: usize = 16 << 20;
/// The longest label value taken back from disk.
const MAX_LABEL_BYTES: usize = 4096;

/// What a decoder found wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum DecodeError {
    #[error("ends early")]
    Short,
    #[error("a varint longer than 10 bytes")]
    LongVarint,
    #[error("unknown metric kind code {0}")]
    Kind(u64),
    #[error("a length of {0} bytes is past the limit")]
    TooLong(u64),
    #[error("a label value is not UTF-8")]
    NotUtf8,
}

pub(super) fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn put_ivarint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Reads from a byte slice, front to back.
pub(super) struct Reader<'a> {
    pub bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn uvarint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.bytes.split_first().ok_or(DecodeError::Short)?;
            self.bytes = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(DecodeError::LongVarint)
    }

    pub(super) fn ivarint(&mut self) -> Result<i64, DecodeError> {
        let u = self.uvarint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.bytes.len() {
            return Err(DecodeError::Short);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub(super) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub(super) fn u64_le(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(
            b.try_into().map_err(|_| DecodeError::Short)?,
        ))
    }

    /// A length-prefixed byte string of at most `max` bytes.
    pub(super) fn bytes_max(&mut self, max: usize) -> Result<&'a [u8], DecodeError> {
        let n = self.uvarint()?;
        let n_usize = usize::try_from(n).map_err(|_| DecodeError::TooLong(n))?;
        if n_usize > max {
            return Err(DecodeError::TooLong(n));
        }
        self.take(n_usize)
    }
}

/// A series key: the kind's code, then each label value in the kind's label order.
pub(super) fn put_key(out: &mut Vec<u8>, key: &SeriesKey) {
    out.push(key.kind.code());
    for (_, v) in &key.labels {
        put_uvarint(out, v.len() as u64);
        out.extend_from_slice(v.as_bytes());
    }
}

pub(super) fn read_key(r: &mut Reader<'_>) -> Result<SeriesKey, DecodeError> {
    let code = r.u8()?;
    let kind = MetricKind::from_code(code).ok_or(DecodeError::Kind(u64::from(code)))?;
    let mut labels = Vec::with_capacity(kind.label_names().len());
    for name in kind.label_names() {
        let v = r.bytes_max(MAX_LABEL_BYTES)?;
        let v = std::str::from_utf8(v).map_err(|_| DecodeError::NotUtf8)?;
        labels.push((*name, v.to_string()));
    }
    Ok(SeriesKey::new(kind, labels))
}

/// Frames `body` as a record.
pub(super) fn put_record(out: &mut Vec<u8>, body: &[u8]) {
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    out.extend_from_slice(body);
}

/// The next record's body and the bytes after it; `None` where the records end: at
/// the end, at a torn or oversized record, or at one whose checksum fails. Everything
/// from there on is ignored (a crash can only tear the tail).
pub(super) fn next_record(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    if len > MAX_RECORD_BYTES {
        return None;
    }
    let body = bytes.get(8..8 + len)?;
    (crc32fast::hash(body) == crc).then(|| (body, &bytes[8 + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metriccache::Sample;

    #[test]
    fn varints_keys_and_records_round_trip() {
        let mut out = Vec::new();
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            put_uvarint(&mut out, v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            put_ivarint(&mut out, v);
        }
        let key = Sample::new(
            MetricKind::PodPsi,
            &[
                ("pod_uid", "u-1"),
                ("psi_resource", "cpu"),
                ("psi_precision", "10"),
                ("psi_degree", "some"),
            ],
            0,
            0.0,
        )
        .unwrap()
        .key()
        .clone();
        put_key(&mut out, &key);
        let mut r = Reader { bytes: &out };
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            assert_eq!(r.uvarint().unwrap(), v);
        }
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(r.ivarint().unwrap(), v);
        }
        assert_eq!(read_key(&mut r).unwrap(), key);
        assert!(r.bytes.is_empty());

        let mut log = Vec::new();
        put_record(&mut log, b"one");
        put_record(&mut log, b"two");
        let (a, rest) = next_record(&log).unwrap();
        let (b, rest) = next_record(rest).unwrap();
        assert_eq!((a, b, rest.len()), (&b"one"[..], &b"two"[..], 0));
        // A flipped bit, or a torn tail, ends the records there.
        let mut bad = log.clone();
        bad[9] ^= 1;
        assert!(next_record(&bad).is_none());
        assert!(
            next_record(&log[..log.len() - 1])
                .and_then(|(_, r)| next_record(r))
                .is_none()
        );
    }

    #[test]
    fn decoders_refuse_what_no_encoder_writes() {
        assert_eq!(
            Reader { bytes: &[0xff; 11] }.uvarint(),
            Err(DecodeError::LongVarint)
        );
        assert_eq!(
            read_key(&mut Reader { bytes: &[200] }),
            Err(DecodeError::Kind(200))
        );
        // A label value claiming more bytes than are left, or than the cap.
        assert_eq!(
            read_key(&mut Reader {
                bytes: &[4, 50, b'a']
            }),
            Err(DecodeError::Short)
        );
        let mut huge = vec![4];
        put_uvarint(&mut huge, 1 << 40);
        assert!(matches!(
            read_key(&mut Reader { bytes: &huge }),
            Err(DecodeError::TooLong(_))
        ));
        let mut framed = Vec::new();
        framed.extend_from_slice(&(u32::MAX).to_le_bytes());
        framed.extend_from_slice(&[0; 8]);
        assert!(next_record(&framed).is_none());
    }
}

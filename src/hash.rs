//! FNV-1a hashes, the ones kubelet uses: 128-bit for static pod UIDs, 32-bit for
//! container spec hashes. Deterministic across runs and machines (unlike std's SipHash).
//! And SHA-256 in hex, where kubelet names files or keeps a login by it.

const FNV32_OFFSET: u32 = 0x811c_9dc5;
const FNV32_PRIME: u32 = 0x0100_0193;
const FNV128_OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const FNV128_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

/// An incremental FNV-1a 32-bit hasher.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv32a(u32);

impl Default for Fnv32a {
    fn default() -> Self {
        Fnv32a(FNV32_OFFSET)
    }
}

impl Fnv32a {
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u32::from(*b);
            self.0 = self.0.wrapping_mul(FNV32_PRIME);
        }
    }
    pub(crate) fn finish(self) -> u32 {
        self.0
    }
}

/// An incremental FNV-1a 128-bit hasher.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv128a(u128);

impl Default for Fnv128a {
    fn default() -> Self {
        Fnv128a(FNV128_OFFSET)
    }
}

impl Fnv128a {
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u128::from(*b);
            self.0 = self.0.wrapping_mul(FNV128_PRIME);
        }
    }
    /// The hash as 32 lower-case hex digits (kubelet's static pod UID form).
    pub(crate) fn hex(self) -> String {
        format!("{:032x}", self.0)
    }
}

/// The SHA-256 of `bytes` as 64 lower-case hex digits.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = String::with_capacity(64);
    for b in digest.as_ref() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_hex_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn fnv32a_known_vectors() {
        let mut h = Fnv32a::default();
        h.write(b"");
        assert_eq!(h.finish(), 0x811c9dc5);
        let mut h = Fnv32a::default();
        h.write(b"a");
        assert_eq!(h.finish(), 0xe40c292c);
        let mut h = Fnv32a::default();
        h.write(b"foobar");
        assert_eq!(h.finish(), 0xbf9cf968);
    }

    #[test]
    fn fnv128a_known_vectors() {
        let mut h = Fnv128a::default();
        h.write(b"a");
        assert_eq!(h.hex(), "d228cb696f1a8caf78912b704e4a8964");
        let mut h = Fnv128a::default();
        h.write(b"foobar");
        assert_eq!(h.hex(), "343e1662793c64bf6f0d3597ba446f18");
    }
}

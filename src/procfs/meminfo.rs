//! `/proc/meminfo`: the lines the node status, the machine collector and the metric
//! advisor read.

/// What oxlet reads of `/proc/meminfo`, in bytes; a line that is not there is 0
/// (`MemAvailable`, which kernels before 3.14 lack, is None).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemInfo {
    pub total: u64,
    pub free: u64,
    pub available: Option<u64>,
    pub inactive_file: u64,
    pub swap_total: u64,
    pub swap_free: u64,
}

impl MemInfo {
    /// koordlet's node memory usage: MemTotal − MemAvailable.
    pub(crate) fn used(&self) -> Option<u64> {
        Some(self.total.saturating_sub(self.available?))
    }

    /// Swap in use, as runc reads the root cgroup's: SwapTotal − SwapFree.
    pub(crate) fn swap_used(&self) -> u64 {
        self.swap_total.saturating_sub(self.swap_free)
    }
}

/// `/proc/meminfo` (`Key: value kB`, a few counts without a unit); None without
/// `MemTotal`. A line that is not a number in kB or without a unit, or that overflows
/// in bytes, counts as missing.
pub(crate) fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut m = MemInfo::default();
    let mut total = None;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(bytes) = bytes_of(rest) else {
            continue;
        };
        match key {
            "MemTotal" => total = Some(bytes),
            "MemFree" => m.free = bytes,
            "MemAvailable" => m.available = Some(bytes),
            "Inactive(file)" => m.inactive_file = bytes,
            "SwapTotal" => m.swap_total = bytes,
            "SwapFree" => m.swap_free = bytes,
            _ => {}
        }
    }
    m.total = total?;
    Some(m)
}

/// A value and its unit: `kB` (kibibytes, as the kernel means it) or none.
fn bytes_of(rest: &str) -> Option<u64> {
    let mut words = rest.split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match (words.next(), words.next()) {
        (Some("kB"), None) => value.checked_mul(1024),
        (None, _) => Some(value),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_oxlet_reads_are_read_in_bytes() {
        let text = "MemTotal:        8000000 kB\nMemFree:         1000000 kB\n\
                    MemAvailable:    5000000 kB\nBuffers: 10 kB\nInactive(file):   500000 kB\n\
                    SwapTotal:       2000000 kB\nSwapFree:        1500000 kB\n\
                    HugePages_Total:       0\n";
        let m = parse_meminfo(text).unwrap();
        assert_eq!(m.total, 8_000_000 * 1024);
        assert_eq!(m.free, 1_000_000 * 1024);
        assert_eq!(m.available, Some(5_000_000 * 1024));
        assert_eq!(m.inactive_file, 500_000 * 1024);
        assert_eq!(m.swap_total, 2_000_000 * 1024);
        assert_eq!(m.swap_used(), 500_000 * 1024, "SwapTotal − SwapFree");
        assert_eq!(m.used(), Some(3_000_000 * 1024), "MemTotal − MemAvailable");
    }

    #[test]
    fn mem_total_is_required_and_odd_lines_are_skipped() {
        assert_eq!(parse_meminfo(""), None);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: lots kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: 1 MB\n"), None);
        assert_eq!(
            parse_meminfo("MemTotal: 18446744073709551615 kB\n"),
            None,
            "overflows in bytes"
        );
        let m = parse_meminfo("MemTotal: 10 kB\nweird\nSwapTotal: x kB\n").unwrap();
        assert_eq!((m.total, m.available, m.swap_total), (10_240, None, 0));
        assert_eq!(m.used(), None, "no MemAvailable, no usage");
    }

    #[test]
    fn the_hosts_meminfo_parses() {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        let m = parse_meminfo(&text).unwrap();
        assert!(m.total > 0 && m.total.is_multiple_of(1024), "{m:?}");
        assert!(m.free <= m.total);
    }
}

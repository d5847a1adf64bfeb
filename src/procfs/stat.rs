//! `/proc/stat`: the aggregate `cpu` line and `btime`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `/proc/stat`'s aggregate `cpu` line, in jiffies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CpuJiffies {
    /// user + nice + system + irq + softirq (koordlet's busy time; idle, iowait and
    /// steal excluded).
    pub busy: u64,
}

/// The `cpu` line of `/proc/stat`.
pub(crate) fn parse_cpu_jiffies(text: &str) -> Option<CpuJiffies> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    let mut f = [0u64; 7];
    let mut n = 0;
    for word in line.split_whitespace().skip(1) {
        let v = word.parse().ok()?;
        if let Some(slot) = f.get_mut(n) {
            *slot = v;
        }
        n += 1;
    }
    // user nice system idle iowait irq softirq …
    if n < 7 {
        return None;
    }
    // Saturating: a corrupt or hostile file must not overflow (a panic in a debug build).
    let busy = [f[0], f[1], f[2], f[5], f[6]]
        .into_iter()
        .fold(0u64, u64::saturating_add);
    Some(CpuJiffies { busy })
}

/// `btime`: when the machine booted, in unix seconds.
pub(crate) fn boot_time_secs(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The boot time from `/proc/stat`'s `btime`.
pub(crate) fn parse_boot_time(text: &str) -> Option<SystemTime> {
    // A time past what the clock can hold is no boot time.
    UNIX_EPOCH.checked_add(Duration::from_secs(boot_time_secs(text)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_STAT: &str = "cpu  100 20 30 4000 50 6 7 8 0 0\n\
cpu0 50 10 15 2000 25 3 4 4 0 0\n\
intr 12345\nctxt 999\nbtime 1700000000\nprocesses 4242\nprocs_running 2\n";

    #[test]
    fn busy_jiffies_exclude_idle_iowait_and_steal() {
        let j = parse_cpu_jiffies(PROC_STAT).unwrap();
        // user + nice + system + irq + softirq.
        assert_eq!(j.busy, 100 + 20 + 30 + 6 + 7);
        assert_eq!(
            parse_boot_time(PROC_STAT),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(boot_time_secs(PROC_STAT), Some(1_700_000_000));
        assert!(
            parse_cpu_jiffies("cpu0 1 2 3 4 5 6 7\n").is_none(),
            "no aggregate line"
        );
        assert!(parse_cpu_jiffies("cpu 1 2 3\n").is_none(), "too few fields");
        assert!(parse_cpu_jiffies("cpu 1 x 3 4 5 6 7\n").is_none());
        assert!(parse_cpu_jiffies("cpu 1 2 3 4 5 6 7 x\n").is_none());
        assert!(parse_boot_time("cpu 1 2\n").is_none());
    }

    #[test]
    fn huge_values_neither_overflow_nor_panic() {
        let max = u64::MAX;
        let stat = format!("cpu {max} {max} 1 2 3 {max} {max}\nbtime {max}\n");
        assert_eq!(parse_cpu_jiffies(&stat).unwrap().busy, u64::MAX);
        assert_eq!(parse_boot_time(&stat), None);
    }
}

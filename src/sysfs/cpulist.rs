//! CPU lists as the kernel writes them (`0-3,8,10-11`: `cpuset.cpus`,
//! `/sys/devices/system/cpu/online`, a NUMA node's `cpulist`), parsed into CPU ids
//! and written back. Bounded: ids past [`MAX_CPU`] are refused, so a corrupt or hostile
//! list cannot make a huge vector.

/// The largest CPU id taken (the kernel's `NR_CPUS` ceiling).
pub(crate) const MAX_CPU: usize = 8191;

/// Why a list was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{list:?} is not a CPU list: {reason}")]
pub(crate) struct CpuListError {
    pub list: String,
    pub reason: &'static str,
}

/// The CPU ids of `text`, sorted, without duplicates; an empty text is no CPU.
pub(crate) fn parse_cpu_list(text: &str) -> Result<Vec<usize>, CpuListError> {
    let bad = |reason| CpuListError {
        list: text.chars().take(64).collect(),
        reason,
    };
    // One flag per CPU id: a list that names the same ranges over and over costs no
    // more than one naming each CPU once.
    let mut named = vec![false; MAX_CPU + 1];
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: usize = a
            .trim()
            .parse()
            .map_err(|_| bad("a bound is not a number"))?;
        let b: usize = b
            .trim()
            .parse()
            .map_err(|_| bad("a bound is not a number"))?;
        if a > b {
            return Err(bad("a range runs backwards"));
        }
        if b > MAX_CPU {
            return Err(bad("a CPU id is past 8191"));
        }
        named[a..=b].fill(true);
    }
    Ok((0..=MAX_CPU).filter(|id| named[*id]).collect())
}

/// `ids` as the kernel writes a list: runs of two or more as ranges.
pub(crate) fn format_cpu_list(ids: &[usize]) -> String {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        parts.push(if sorted[i] == start {
            start.to_string()
        } else {
            format!("{start}-{}", sorted[i])
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip_and_bad_ones_are_refused() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            [0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpu_list("3,1,1-2").unwrap(), [1, 2, 3]);
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[5]), "5");
        assert_eq!(format_cpu_list(&[]), "");
        for bad in ["x", "3-1", "0-99999", "1-", "-"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    /// Found by the cgroup fuzz target: a list repeating the whole range made one id per
    /// CPU per repeat (8192 × 2000 from 16 KiB) and sorted them, a second per read.
    #[test]
    fn repeated_ranges_cost_no_more_than_one() {
        let list = vec!["0-8191"; 2000].join(",");
        let started = std::time::Instant::now();
        assert_eq!(parse_cpu_list(&list).unwrap().len(), 8192);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}

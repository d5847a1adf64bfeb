//! How loudly a failed node status update is logged. kubelet logs every failed
//! period at error level; an apiserver outage would then flood the log, so the
//! first failures are warnings, later ones only every [`QUIET_EVERY`]th period (the
//! rest at debug), a failure with a new cause is a warning again, and the recovery
//! gets one line.

/// Failures in a row that are each logged at warning.
const LOUD_FIRST: u32 = 3;
/// After those, one warning per this many failures.
const QUIET_EVERY: u32 = 30;

/// What to log for one outcome.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A failure to log at warning (`n`: failures in a row so far).
    Warn(u32),
    /// A failure to log at debug only.
    Quiet(u32),
    /// Success after `n` failures in a row: one line saying so.
    Recovered(u32),
    /// Success, nothing to say.
    Silent,
}

/// Counts consecutive failures of one loop, and remembers the last one's cause.
#[derive(Debug, Default)]
pub(crate) struct FailureLog {
    in_a_row: u32,
    cause: String,
}

impl FailureLog {
    /// One failure whose cause reads `cause`.
    pub(crate) fn failed(&mut self, cause: &str) -> Verdict {
        self.in_a_row = self.in_a_row.saturating_add(1);
        let n = self.in_a_row;
        let new_cause = self.cause != cause;
        if new_cause {
            self.cause = cause.to_owned();
        }
        if new_cause || n <= LOUD_FIRST || (n - LOUD_FIRST).is_multiple_of(QUIET_EVERY) {
            Verdict::Warn(n)
        } else {
            Verdict::Quiet(n)
        }
    }

    pub(crate) fn succeeded(&mut self) -> Verdict {
        self.cause.clear();
        let n = std::mem::take(&mut self.in_a_row);
        if n == 0 {
            Verdict::Silent
        } else {
            Verdict::Recovered(n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_failures_loud_then_sparse_then_one_recovery_line() {
        let mut log = FailureLog::default();
        assert_eq!(log.succeeded(), Verdict::Silent);
        let verdicts: Vec<Verdict> = (0..64).map(|_| log.failed("refused")).collect();
        let loud: Vec<u32> = verdicts
            .iter()
            .filter_map(|v| match v {
                Verdict::Warn(n) => Some(*n),
                _ => None,
            })
            .collect();
        assert_eq!(loud, vec![1, 2, 3, 33, 63]);
        assert_eq!(verdicts[3], Verdict::Quiet(4));
        assert_eq!(log.succeeded(), Verdict::Recovered(64));
        assert_eq!(log.succeeded(), Verdict::Silent);
        assert_eq!(log.failed("refused"), Verdict::Warn(1));
    }

    #[test]
    fn a_new_cause_is_said_at_once() {
        let mut log = FailureLog::default();
        for _ in 0..5 {
            log.failed("connection refused");
        }
        assert_eq!(log.failed("connection refused"), Verdict::Quiet(6));
        assert_eq!(log.failed("403 forbidden"), Verdict::Warn(7));
        assert_eq!(log.failed("403 forbidden"), Verdict::Quiet(8));
    }
}

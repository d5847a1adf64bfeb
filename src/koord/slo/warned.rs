//! What a watch last warned about, so the same object seen again (a relist, a status
//! heartbeat, an unrelated change) does not warn again about the same unreadable
//! value: it is said at warning level when it first appears or changes, and the
//! caller says its repeats at `-v=4`. The NodeSLO watch keys its skipped strategies
//! and refused host applications by what was wrong; the Node watch its unreadable
//! annotations by field and text.

use std::collections::BTreeSet;

/// The keys warned about at the last reading.
#[derive(Default)]
pub(super) struct Warned(BTreeSet<String>);

impl Warned {
    /// Keeps `now` as what is warned about; for each key, whether it is new (not
    /// warned about at the last reading).
    pub(super) fn renew(&mut self, now: &[String]) -> Vec<bool> {
        let fresh = now.iter().map(|k| !self.0.contains(k)).collect();
        self.0 = now.iter().cloned().collect();
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::Warned;

    /// A relist brings the same NodeSLO back: its skipped values were warned about
    /// and are not again; a value that changes, or comes back after being fixed, is.
    #[test]
    fn a_skipped_value_is_warned_about_once_until_it_changes() {
        let mut w = Warned::default();
        let first = ["CPUEvict/x=1: too big".to_string()];
        assert_eq!(w.renew(&first), [true]);
        assert_eq!(w.renew(&first), [false], "the same NodeSLO seen again");
        let changed = ["CPUEvict/x=2: too big".to_string()];
        assert_eq!(w.renew(&changed), [true]);
        assert_eq!(w.renew(&[]), Vec::<bool>::new(), "fixed");
        assert_eq!(w.renew(&changed), [true], "broken again");
    }
}

//! How many entries each long-lived map of the agent holds, counted on demand.
//!
//! A node agent runs for weeks while pods come and go; every map keyed by a pod or a
//! container must shrink back when they leave. The rooms that own such maps register a
//! count here as they are built; `/debug/census` serves the counts with the runtime's
//! live task count, and the soak harness (`tests/soak.rs`) compares them before and
//! after thousands of pods have passed through. kubelet has no such view; its leak
//! checks read the process from outside.
//!
//! A count holds only a weak reference to its owner: once the owner is dropped the
//! count leaves the census, so nothing here keeps a room alive.

use crate::locks::Locked as _;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

/// A registered count: `None` once its owner is gone.
type Count = Box<dyn Fn() -> Option<usize> + Send + Sync>;

static COUNTS: Mutex<Vec<(&'static str, Count)>> = Mutex::new(Vec::new());

/// Counts `name` as `count(owner)` for as long as `owner` lives.
pub(crate) fn watch<T: Send + Sync + 'static>(
    name: &'static str,
    owner: &Arc<T>,
    count: fn(&T) -> usize,
) {
    let owner: Weak<T> = Arc::downgrade(owner);
    register(name, move || owner.upgrade().map(|o| count(&o)));
}

/// Counts `name` with `count` until it answers `None`.
pub(crate) fn register(
    name: &'static str,
    count: impl Fn() -> Option<usize> + Send + Sync + 'static,
) {
    COUNTS.locked().push((name, Box::new(count)));
}

/// Every live count by name; two owners under one name (tests build several) add up.
pub(crate) fn snapshot() -> BTreeMap<&'static str, usize> {
    let mut counts = COUNTS.locked();
    let mut out = BTreeMap::new();
    counts.retain(|(name, count)| match count() {
        Some(n) => {
            *out.entry(*name).or_insert(0) += n;
            true
        }
        None => false,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_follows_its_owner_and_leaves_with_it() {
        let owner = Arc::new(Mutex::new(vec![1, 2, 3]));
        watch("census test: vec", &owner, |v| v.locked().len());
        assert_eq!(snapshot().get("census test: vec"), Some(&3));
        owner.locked().push(4);
        assert_eq!(snapshot().get("census test: vec"), Some(&4));
        drop(owner);
        assert_eq!(snapshot().get("census test: vec"), None);
    }

    #[test]
    fn owners_under_one_name_add_up() {
        let a = Arc::new(2_usize);
        let b = Arc::new(5_usize);
        watch("census test: sum", &a, |n| *n);
        watch("census test: sum", &b, |n| *n);
        assert_eq!(snapshot().get("census test: sum"), Some(&7));
    }
}

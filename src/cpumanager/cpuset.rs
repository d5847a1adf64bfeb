//! A set of logical CPUs (kubelet's `cpuset.CPUSet`), written the way the kernel and
//! kubelet's checkpoint write it (`0-3,8`).

use std::collections::BTreeSet;
use std::fmt;

/// A sorted set of CPU ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CpuSet(BTreeSet<usize>);

impl CpuSet {
    /// The empty set.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Parses a kernel CPU list (`0-3,8`); an empty text is the empty set.
    pub(crate) fn parse(text: &str) -> Result<Self, crate::cm::CpuListError> {
        crate::cm::parse_cpu_list(text).map(|ids| ids.into_iter().collect())
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The ids, ascending.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }

    pub(crate) fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&other.0).copied().collect())
    }

    pub(crate) fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    pub(crate) fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&other.0).copied().collect())
    }

    pub(crate) fn is_subset_of(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    /// The members that `keep` says yes to.
    pub(crate) fn filter(&self, keep: impl Fn(usize) -> bool) -> CpuSet {
        self.iter().filter(|c| keep(*c)).collect()
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<usize> = self.iter().collect();
        f.write_str(&crate::cm::format_cpu_list(&ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_list_form_both_ways() {
        let s = CpuSet::parse("8,0-3").unwrap();
        assert_eq!(s.to_string(), "0-3,8");
        assert_eq!(s.len(), 5);
        assert_eq!(CpuSet::parse("").unwrap(), CpuSet::new());
        assert!(CpuSet::parse("1.3").is_err());
        let a: CpuSet = [0, 1, 2].into_iter().collect();
        let b: CpuSet = [2, 3].into_iter().collect();
        assert_eq!(a.union(&b).to_string(), "0-3");
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert_eq!(a.intersection(&b).to_string(), "2");
    }
}

//! Where each cgroup lives (kubelet's QoS layout): `<cgroupRoot>/kubepods`, the
//! `burstable` and `besteffort` QoS cgroups below it, and one `pod<uid>` cgroup per
//! pod below its QoS cgroup, Guaranteed pods directly below `kubepods`.

use super::name::{CgroupName, NameError};
use super::qos::QosClass;

/// The names of the node-level cgroups, from `--cgroup-root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QosTree {
    kubepods: CgroupName,
}

impl QosTree {
    /// The tree below `root` (kubelet's `cgroupRoot`, `/` when unset).
    pub(crate) fn new(root: &CgroupName) -> QosTree {
        QosTree {
            kubepods: root.child("kubepods"),
        }
    }

    /// `kubepods`: every pod below it; node allocatable limits it.
    pub(crate) fn kubepods(&self) -> &CgroupName {
        &self.kubepods
    }

    /// The parent of a pod of `class`.
    pub(crate) fn qos(&self, class: QosClass) -> CgroupName {
        match class {
            QosClass::Guaranteed => self.kubepods.clone(),
            QosClass::Burstable => self.kubepods.child("burstable"),
            QosClass::BestEffort => self.kubepods.child("besteffort"),
        }
    }

    /// The pod's own cgroup: `pod<uid>` below its QoS cgroup. The UID comes from the
    /// pod, so it must be one plain component.
    pub(crate) fn pod(&self, class: QosClass, uid: &str) -> Result<CgroupName, NameError> {
        CgroupName::pod(&self.qos(class), uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(n: &CgroupName) -> Vec<&str> {
        n.0.iter().map(String::as_str).collect()
    }

    #[test]
    fn pods_sit_below_their_qos_cgroup() {
        let t = QosTree::new(&CgroupName::default());
        assert_eq!(parts(t.kubepods()), ["kubepods"]);
        assert_eq!(
            parts(&t.pod(QosClass::Guaranteed, "u1").unwrap()),
            ["kubepods", "podu1"]
        );
        assert_eq!(
            parts(&t.pod(QosClass::Burstable, "u2").unwrap()),
            ["kubepods", "burstable", "podu2"]
        );
        assert_eq!(
            parts(&t.pod(QosClass::BestEffort, "u3").unwrap()),
            ["kubepods", "besteffort", "podu3"]
        );
        for bad in ["", "..", "a/b"] {
            assert!(t.pod(QosClass::Burstable, bad).is_err(), "{bad:?}");
        }
        let below = QosTree::new(&CgroupName(vec!["oxt3".into()]));
        assert_eq!(parts(below.kubepods()), ["oxt3", "kubepods"]);
    }
}

//! The rules' parameters from the NodeSLO (koordlet's `runtimehooks/rule` and each
//! plugin's `parseRuleForNodeSLO`), shared by the hook points and the reconciler:
//! read at every hook call, replaced when the NodeSLO changes.

use std::sync::RwLock;

use crate::koordapi::{CpuSuppressPolicy, QosConfig};
use crate::locks::ReadWriteLocked as _;

/// What the NodeSLO decides for the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HookRule {
    /// batchresource's `enableCFSQuota`: BE pods and containers get a CFS quota from
    /// their batch-cpu limits, except while CPU suppress holds the BestEffort cgroup
    /// by CFS quota (a parent's quota must be no less than its children's, so the
    /// pods' quotas are lifted to −1 and their shares share out what is left).
    pub batch_cfs_quota: bool,
}

impl HookRule {
    /// koordlet's `getCPUSuppressPolicy`: `resourceUsedThresholdWithBE.enable` and its
    /// `cpuSuppressPolicy` (koordlet's default is `cpuset`, which leaves the quotas).
    pub(crate) fn from_config(cfg: &QosConfig) -> HookRule {
        HookRule {
            batch_cfs_quota: !(cfg.enable
                && cfg.cpu_suppress_policy == CpuSuppressPolicy::CfsQuota),
        }
    }
}

/// The rule in force, shared.
#[derive(Debug)]
pub(crate) struct SharedRule(RwLock<HookRule>);

impl SharedRule {
    pub(crate) fn new(cfg: &QosConfig) -> SharedRule {
        SharedRule(RwLock::new(HookRule::from_config(cfg)))
    }

    /// The rule now.
    pub(crate) fn get(&self) -> HookRule {
        *self.0.read_locked()
    }

    /// Takes the rule `cfg` makes; returns the old one when it changed.
    pub(crate) fn update(&self, cfg: &QosConfig) -> Option<HookRule> {
        let new = HookRule::from_config(cfg);
        let mut rule = self.0.write_locked();
        (*rule != new).then(|| std::mem::replace(&mut *rule, new))
    }
}

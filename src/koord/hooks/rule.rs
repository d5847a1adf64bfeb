//! The rules' parameters from the NodeSLO and the Node (koordlet's `runtimehooks/rule`
//! and each plugin's `parseRuleForNodeSLO` and `parseRuleForNodeMeta`), shared by the
//! hook points and the reconciler: read at every hook call, replaced when the
//! NodeSLO or the Node changes.

use std::sync::RwLock;

use crate::koordapi::{CpuSuppressPolicy, QosConfig};
use crate::locks::ReadWriteLocked as _;

/// koordlet's `ratioDiffEpsilon`.
const RATIO_EPSILON: f64 = 0.01;

/// What the NodeSLO and the Node decide for the rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HookRule {
    /// batchresource's `enableCFSQuota`: BE pods and containers get a CFS quota from
    /// their batch-cpu limits, except while CPU suppress holds the BestEffort cgroup
    /// by CFS quota (a parent's quota must be no less than its children's, so the
    /// pods' quotas are lifted to −1 and their shares share out what is left).
    pub batch_cfs_quota: bool,
    /// batchresource's `cpuNormalizationRatio`: the Node's
    /// `node.koordinator.sh/cpu-normalization-ratio` (None: not set, koordlet's −1).
    pub cpu_normalization_ratio: Option<f64>,
}

impl HookRule {
    /// koordlet's `getCPUSuppressPolicy`: `resourceUsedThresholdWithBE.enable` and its
    /// `cpuSuppressPolicy` (koordlet's default is `cpuset`, which leaves the quotas).
    pub(crate) fn from_config(cfg: &QosConfig) -> HookRule {
        HookRule {
            batch_cfs_quota: !(cfg.enable
                && cfg.cpu_suppress_policy == CpuSuppressPolicy::CfsQuota),
            cpu_normalization_ratio: None,
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

    /// Takes the rule `cfg` makes (the Node's ratio kept); returns the old one when it
    /// changed.
    pub(crate) fn update(&self, cfg: &QosConfig) -> Option<HookRule> {
        let mut rule = self.0.write_locked();
        let new = HookRule {
            cpu_normalization_ratio: rule.cpu_normalization_ratio,
            ..HookRule::from_config(cfg)
        };
        (*rule != new).then(|| std::mem::replace(&mut *rule, new))
    }

    /// Takes the Node's CPU normalization ratio (koordlet's
    /// `UpdateCPUNormalizationRatio`: a change under 0.01 is none); returns the old
    /// rule when it changed.
    pub(crate) fn update_ratio(&self, ratio: Option<f64>) -> Option<HookRule> {
        let mut rule = self.0.write_locked();
        let changed = match (rule.cpu_normalization_ratio, ratio) {
            (Some(a), Some(b)) => (a - b).abs() >= RATIO_EPSILON,
            (a, b) => a.is_some() != b.is_some(),
        };
        changed.then(|| {
            let old = *rule;
            rule.cpu_normalization_ratio = ratio;
            old
        })
    }
}

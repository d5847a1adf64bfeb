//! koordlet's runtime hooks, in-process: rules that set pod and container cgroup
//! limits at the runtime's hook points, and a reconciler that puts them back.
//!
//! - [`rule`]: what the NodeSLO decides for the rules (`HookRule`), shared by the
//!   hook points and the reconciler, replaced live when the NodeSLO changes.
//! - [`batchresource`]: koordlet's `batchresource` rule (pods labelled
//!   `koordinator.sh/qosClass: BE`: shares, CFS quota and memory limit from their
//!   batch resources, at pod and container level).
//! - [`protocol`]: a rule's values per level, how they go into a CRI request or are
//!   written to a cgroup (only what differs, logged with its cause), and the adapter
//!   that puts a rule at the runtime's hook points (`kuberuntime::RuntimeHook`).
//! - [`reconciler`]: every rule on the QoS, pod and container cgroups every 10 s and
//!   at once on a rule change.

mod batchresource;
mod protocol;
mod reconciler;
mod rule;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::cm::ContainerManager;
use crate::koordapi::QosConfig;
use crate::kuberuntime::{RuntimeHook, RuntimeHooks};
use batchresource::BatchResource;
use protocol::{CgroupRule, RuleHook};
use reconciler::HookReconciler;
use rule::SharedRule;

/// The rules koordlet turns on by default that oxlet has (its other default
/// plugins, GroupIdentity and CPUSetAllocator, need Anolis kernels or the CPU
/// manager), with the rule the NodeSLO makes, shared by the hook points and the
/// reconciler.
#[derive(Clone)]
pub(crate) struct HookSet {
    rules: Vec<Arc<dyn CgroupRule>>,
    rule: Arc<SharedRule>,
    cm: Arc<ContainerManager>,
}

impl HookSet {
    /// The rules with the rule `cfg` makes, until the NodeSLO changes it.
    pub(crate) fn new(cfg: &QosConfig, cm: Arc<ContainerManager>) -> HookSet {
        HookSet {
            rules: vec![Arc::new(BatchResource)],
            rule: Arc::new(SharedRule::new(cfg)),
            cm,
        }
    }

    /// The rules at the runtime's hook points.
    pub(crate) fn runtime_hooks(&self) -> RuntimeHooks {
        let hooks = self.rules.iter().map(|r| {
            Arc::new(RuleHook {
                rule: r.clone(),
                shared: self.rule.clone(),
                cm: self.cm.clone(),
            }) as Arc<dyn RuntimeHook>
        });
        RuntimeHooks::new(hooks.collect())
    }

    /// The reconciler of these rules over the pods `lister` lists.
    pub(crate) fn reconciler(
        &self,
        pods: Arc<crate::pod::PodManager>,
        lister: Box<dyn crate::advisor::TargetLister>,
    ) -> HookReconciler {
        HookReconciler {
            rules: self.rules.clone(),
            rule: self.rule.clone(),
            cm: self.cm.clone(),
            pods,
            lister,
        }
    }
}

//! The koordlet wing, after koordinator's node agent that sits beside kubelet: in
//! oxlet it lives inside the agent and reads its pod state directly, so koordlet's
//! states informer is the pod manager and the node facts. What it reads stands
//! below it: the metric advisor (`crate::advisor`), its metric cache
//! (`crate::metriccache`) and koordinator's API types (`crate::koordapi`).
//!
//! - `qosmanager`: CPU suppress, memory eviction by usage and cgroup reconcile.
//! - `hooks`: koordlet's runtime hook rules, at the runtime's hook points (before a
//!   sandbox runs, a container is created or updated) and in their reconciler.
//! - `prediction`: peak prediction from the cache and the reclaimable resources.
//! - `slo`: koordinator's NodeMetric and NodeSLO, and this node's Node, through the
//!   apiserver (koordlet's states informer).

mod hooks;
mod prediction;
mod qosmanager;
mod slo;

// Peak prediction: the server, its collector and inputs, and what `/debug` serves.
pub(crate) use prediction::{
    PredictServer, PredictionCollector, PredictionConfig, PredictionInputs, ResourceAmount, Served,
    pod_inputs,
};
// The QoS manager, and the runtime hooks it decides.
pub(crate) use hooks::HookSet;
pub(crate) use qosmanager::{QosDeps, QosManager};
// This node's NodeMetric: its status made from the metric cache, and the reporter.
pub(crate) use slo::{NodeMetricReporter, NodeMetricSource, NodeSloWatch, PredictionView};
// koordlet's node informer: what it reads of this node's Node.
pub(crate) use slo::{NodeView, NodeWatch};

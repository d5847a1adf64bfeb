//! koordinator's node-level objects through the apiserver (koordlet's states
//! informer): this node's NodeMetric, whose status oxlet reports from the metric cache,
//! its NodeSLO, whose strategies the QoS manager follows, and what koordlet reads of
//! its Node (`node.rs`, watched by `node_watch.rs`). A refusal by the
//! apiserver (403: no RBAC grant; 404: no CRD) is said once with what to do.

mod access;
mod node;
mod node_watch;
mod nodemetric;
mod report;
mod slo_watch;
mod warned;

pub(crate) use node::NodeInfo;
pub(crate) use node_watch::{NodeView, NodeWatch};
pub(crate) use report::{NodeMetricReporter, NodeMetricSource, PredictionView};
pub(crate) use slo_watch::NodeSloWatch;

#[cfg(test)]
mod tests;

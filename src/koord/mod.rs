//! The node QoS half of the agent, after koordlet (the koordinator node agent that
//! sits beside kubelet): in oxlet it lives inside the agent and reads its pod state
//! directly, so koordlet's states informer is the pod manager and the node facts.
//!
//! - `advisor`: the collectors that sample the node, pods and containers into the
//!   metric cache and publish the latest readings.
//! - `metriccache`: the samples as bounded in-memory time series, and a small
//!   key-value store.
//! - `qosmanager`: CPU suppress, memory eviction by usage and cgroup reconcile.
//! - `hooks`: koordlet's runtime hook rules, at the runtime's hook points (before a
//!   sandbox runs, a container is created or updated) and in their reconciler.
//! - `prediction`: peak prediction from the cache and the reclaimable resources.
//! - `slo`: koordinator's NodeMetric and NodeSLO, and this node's Node, through the
//!   apiserver (koordlet's states informer).
//! - `classes`: koordinator's QoS and priority classes of a pod.
//! - `host_apps`: the NodeSLO's host applications and their cgroups.

mod advisor;
mod classes;
mod hooks;
mod host_apps;
mod metriccache;
mod prediction;
mod qosmanager;
mod slo;

// The metric advisor and its series, for the agent, the server and the stats.
/// The metric advisor's benchmark handle (`benches/advisor.rs`); not an API.
#[doc(hidden)]
pub use advisor::bench as advisor_bench;
pub(crate) use advisor::{
    Advisor, AdvisorDeps, DebugQuery, DebugQueryError, ManagedPods, debug_query,
};
pub(crate) use metriccache::{CacheLimits, MetricCache};
// The advisor's readings of procfs files, for the fuzz targets (`crate::fuzzing`).
pub(crate) use advisor::{memory_from_meminfo, parse_default_route, parse_net_dev};
// The NodeSLO's host applications, for the agent's wiring and the flag check.
pub(crate) use host_apps::{HostApp, QosPaths, from_file as host_apps_from_file};
// The NodeSLO's host applications as the apiserver's NodeSLO carries them (fuzz targets).
pub(crate) use host_apps::parse as parse_host_apps;
// Peak prediction: the server, its collector and inputs, and what `/debug` serves.
pub(crate) use prediction::metrics::{PredictionCollector, PredictionInputs};
pub(crate) use prediction::predictor::ResourceAmount;
pub(crate) use prediction::view::{Served, pod_inputs};
pub(crate) use prediction::{PredictServer, PredictionConfig};
// The QoS manager, its configuration (`--qos-config`), and the runtime hooks it decides.
pub(crate) use hooks::HookSet;
#[cfg(test)]
pub(crate) use qosmanager::config::Strategies;
pub(crate) use qosmanager::config::{QosConfig, load_qos_config, parse as parse_qos_config};
pub(crate) use qosmanager::{QosDeps, QosManager};
// This node's NodeMetric: its status made from the metric cache, and the reporter.
pub(crate) use slo::{NodeMetricReporter, NodeMetricSource, NodeSloWatch, PredictionView};
// koordlet's node informer: what it reads of this node's Node.
pub(crate) use slo::{NodeView, NodeWatch};

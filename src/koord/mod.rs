//! The node QoS half of the agent, after koordlet (the koordinator node agent that
//! sits beside kubelet): in oxlet it lives inside the agent and reads its pod state
//! directly, so koordlet's states informer is the pod manager and the node facts.
//!
//! - `advisor`: the collectors that sample the node, pods and containers into the
//!   metric cache and publish the latest readings.
//! - `metriccache`: the samples as bounded in-memory time series, and a small
//!   key-value store.
//! - `qosmanager`: CPU suppress, memory eviction by usage and cgroup reconcile.
//! - `hooks`: rules the runtime runs before creating and starting a container.
//! - `prediction`: peak prediction from the cache and the reclaimable resources.

pub(crate) mod advisor;
pub(crate) mod hooks;
pub(crate) mod metriccache;
pub(crate) mod prediction;
pub(crate) mod qosmanager;

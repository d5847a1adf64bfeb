//! The node QoS half of the agent, after koordlet (the koordinator node agent that
//! sits beside kubelet): in oxlet it lives inside the agent and reads its pod state
//! directly, so koordlet's states informer is the pod manager and the node facts.
//!
//! - `metriccache`: the samples as bounded in-memory time series, and a small
//!   key-value store.
//! - `prediction`: peak prediction from the cache and the reclaimable resources.

pub(crate) mod metriccache;
pub(crate) mod prediction;

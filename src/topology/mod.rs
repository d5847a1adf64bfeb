//! The topology manager (kubelet's `pkg/kubelet/cm/topologymanager`): the NUMA
//! affinity each resource could have for a container or a pod (its hints), the hint
//! providers that offer them (the CPU, memory and device managers, DRA), and the
//! policies and scopes that merge them into one affinity and admit or refuse a pod.
//!
//! - [`mask`]: a set of NUMA nodes (kubelet's `bitmask.BitMask`).
//! - [`hint`]: a hint, the provider trait, and the admission error a provider returns.

mod hint;
mod mask;

pub(crate) use hint::{AdmitError, HintProvider, Hints, TopologyHint};
pub(crate) use mask::NumaMask;

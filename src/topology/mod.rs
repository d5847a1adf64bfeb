//! The topology manager (kubelet's `pkg/kubelet/cm/topologymanager`): the NUMA
//! affinity each resource could have for a container or a pod (its hints), the hint
//! providers that offer them (the CPU, memory and device managers, DRA), and the
//! policies and scopes that merge them into one affinity and admit or refuse a pod.
//!
//! - [`mask`]: a set of NUMA nodes (kubelet's `bitmask.BitMask`).
//! - [`hint`]: a hint, the provider trait, and the admission error a provider returns.
//! - [`numa`]: the machine's NUMA nodes and distances, from sysfs.
//! - [`settings`]: policy, scope and options as kubelet takes and checks them.
//! - [`policy`]: the merge of hints (the permutation walk and kubelet's comparison).
//! - [`manager`]: admission per scope, the affinity store, the allocation.

mod hint;
mod manager;
mod mask;
mod numa;
mod policy;
mod settings;

pub(crate) use hint::{AdmitError, HintProvider, Hints, TopologyHint};
pub(crate) use manager::TopologyManager;
pub(crate) use mask::NumaMask;
pub(crate) use numa::NumaInfo;
pub(crate) use settings::{PolicyName, PolicyOptions, TopologyError, TopologySettings};

//! The memory manager (kubelet's `pkg/kubelet/cm/memorymanager`): with the Static
//! policy, a Guaranteed pod's containers get their memory and huge pages from a group
//! of NUMA nodes chosen with the topology manager; the choice is kept in
//! `memory_manager_state` in kubelet's checkpoint format.
//!
//! - [`machine`]: each node's memory from sysfs, the reserved memory and its check.
//! - [`state`]: the state and its checkpoint file (kubelet's format and checksum).
//! - [`policy`]: the Static policy's hints and requests.
//! - [`assign`]: the Static policy's allocation and release.
//! - [`manager`]: the manager, its start-up and its hint provider.

mod assign;
mod machine;
mod manager;
mod policy;
mod state;

pub(crate) use machine::{NumaMemory, Reserved};
pub(crate) use manager::{MemoryManager, MemoryManagerError, MemoryManagerSettings};
pub(crate) use state::MemoryBlock;

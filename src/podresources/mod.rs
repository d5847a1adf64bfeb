//! kubelet's pod resources API (`pkg/kubelet/apis/podresources`, v1): a gRPC service
//! on `<root-dir>/pod-resources/kubelet.sock` that monitoring agents and device
//! plugins ask which exclusive CPUs, memory, devices and ResourceClaims each running
//! container holds (`List`, `Get`), and what the node has to give
//! (`GetAllocatableResources`). Root-only socket, a request-rate limit as kubelet's.
//!
//! - `api.rs`: the v1 messages (the wire contract);
//! - `lister.rs`: the answers, from a [`PodResourcesSource`] the resource managers fill;
//! - `server.rs`: the routing and the rate limit, served through `grpc_unix`.

mod api;
mod lister;
mod server;
#[cfg(test)]
mod tests;

pub(crate) use api::{
    AllocatableResourcesResponse, CdiDevice, ClaimResource, ContainerDevices, ContainerMemory,
    DynamicResource, NumaNode, TopologyInfo,
};
pub(crate) use lister::{ContainerAllocations, PodResourcesSource};
pub(crate) use server::serve;

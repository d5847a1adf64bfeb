//! The pod resources API's messages (`k8s.io/kubelet/pkg/apis/podresources/v1`,
//! package `v1`), written out with prost's derive: the field numbers and types are the
//! wire contract monitoring agents and device plugins read.

/// The methods' paths (service `v1.PodResourcesLister`).
pub(super) const LIST: &str = "/v1.PodResourcesLister/List";
pub(super) const GET: &str = "/v1.PodResourcesLister/Get";
pub(super) const GET_ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AllocatableResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AllocatableResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<ContainerDevices>,
    #[prost(int64, repeated, tag = "2")]
    pub cpu_ids: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub memory: Vec<ContainerMemory>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
    /// The pod's own exclusive CPUs (pod-level resources).
    #[prost(int64, repeated, tag = "4")]
    pub cpu_ids: Vec<i64>,
    #[prost(message, repeated, tag = "5")]
    pub memory: Vec<ContainerMemory>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    #[prost(int64, repeated, tag = "3")]
    pub cpu_ids: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    pub memory: Vec<ContainerMemory>,
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ContainerMemory {
    #[prost(string, tag = "1")]
    pub memory_type: String,
    #[prost(uint64, tag = "2")]
    pub size: u64,
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TopologyInfo {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct NumaNode {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// A container's devices from one ResourceClaim (field 1, `class_name`, was removed).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DynamicResource {
    #[prost(string, tag = "2")]
    pub claim_name: String,
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ClaimResource {
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<CdiDevice>,
    #[prost(string, tag = "2")]
    pub driver_name: String,
    #[prost(string, tag = "3")]
    pub pool_name: String,
    #[prost(string, tag = "4")]
    pub device_name: String,
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CdiDevice {
    #[prost(string, tag = "1")]
    pub name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GetPodResourcesRequest {
    #[prost(string, tag = "1")]
    pub pod_name: String,
    #[prost(string, tag = "2")]
    pub pod_namespace: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct GetPodResourcesResponse {
    #[prost(message, optional, tag = "1")]
    pub pod_resources: Option<PodResources>,
}

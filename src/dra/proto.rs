//! kubelet's DRA gRPC contract (`k8s.io/kubelet/pkg/apis/dra/v1/api.proto`), written
//! out by hand for prost: package `k8s.io.kubelet.pkg.apis.dra.v1`, service `DRAPlugin`.
//! The field numbers and types are the wire contract; `v1beta1` carries the same
//! messages under its own package, so one set serves both services.

/// The method paths of each service kubelet speaks, newest first.
pub(super) const V1_PREPARE: &str =
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources";
pub(super) const V1_UNPREPARE: &str =
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources";
pub(super) const V1BETA1_PREPARE: &str =
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources";
pub(super) const V1BETA1_UNPREPARE: &str =
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources";

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct NodePrepareResourcesRequest {
    #[prost(message, repeated, tag = "1")]
    pub claims: Vec<Claim>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct NodePrepareResourcesResponse {
    /// By claim UID.
    #[prost(map = "string, message", tag = "1")]
    pub claims: std::collections::HashMap<String, NodePrepareResourceResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct NodePrepareResourceResponse {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
    #[prost(string, tag = "2")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Device {
    #[prost(string, repeated, tag = "1")]
    pub request_names: Vec<String>,
    #[prost(string, tag = "2")]
    pub pool_name: String,
    #[prost(string, tag = "3")]
    pub device_name: String,
    #[prost(string, repeated, tag = "4")]
    pub cdi_device_ids: Vec<String>,
    /// The share of a device with consumable capacity (`optional string share_id = 5`).
    #[prost(string, optional, tag = "5")]
    pub share_id: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct NodeUnprepareResourcesRequest {
    #[prost(message, repeated, tag = "1")]
    pub claims: Vec<Claim>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct NodeUnprepareResourcesResponse {
    #[prost(map = "string, message", tag = "1")]
    pub claims: std::collections::HashMap<String, NodeUnprepareResourceResponse>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct NodeUnprepareResourceResponse {
    #[prost(string, tag = "1")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Claim {
    #[prost(string, tag = "1")]
    pub namespace: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub name: String,
}

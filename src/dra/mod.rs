//! kubelet's Dynamic Resource Allocation manager (`pkg/kubelet/cm/dra`, resource.k8s.io/v1):
//! DRA drivers register through the plugin watcher (type `DRAPlugin`); before a pod's
//! sandbox is created its ResourceClaims are prepared by their drivers
//! (`NodePrepareResources`, one call per driver), the CDI device IDs the drivers return
//! are kept per claim and handed to each container that names the claim in
//! `resources.claims`; when the last pod using a claim has stopped, the claim is
//! unprepared (`NodeUnprepareResources`). The claims, their pods and devices are
//! checkpointed in `dra_manager_state` (kubelet's format), so a restart can unprepare a
//! pod that ended while oxlet was down. A driver that stays away for 30 s has its
//! ResourceSlices for this node deleted, as kubelet does.

mod client;
mod kube;
mod manager;
mod plugins;
mod proto;
mod state;

#[cfg(test)]
mod driver_tests;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;

use k8s_openapi::api::resource::v1::ResourceClaim;

pub(crate) use kube::KubeClaims;
pub(crate) use manager::DraManager;

/// A boxed future of the apiserver boundary.
pub(crate) type ApiFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ApiError>> + Send + 'a>>;

/// The apiserver's failure at the boundary, as its client words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ApiError(pub String);

/// The apiserver as the DRA manager sees it: the pod's ResourceClaims, and the node's
/// ResourceSlices to delete when a driver is gone.
pub(crate) trait ClaimSource: Send + Sync {
    /// The claim `ns/name`; `None` when it does not exist. An error is the apiserver's
    /// message.
    fn resource_claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> ApiFuture<'a, Option<ResourceClaim>>;
    /// Deletes the ResourceSlices of `node` (of `driver` alone when given), as kubelet's
    /// `DeleteCollection` with the `spec.nodeName` and `spec.driver` field selectors.
    fn delete_resource_slices<'a>(
        &'a self,
        node: &'a str,
        driver: Option<&'a str>,
    ) -> ApiFuture<'a, ()>;
}

/// One prepared device of a pod's claim, for the pod resources API's
/// `dynamic_resources` (kubelet's `pod_resources.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimResources {
    pub claim_name: String,
    pub namespace: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub cdi_ids: Vec<String>,
    /// The claim's requests the device serves (empty: all of them).
    pub requests: Vec<String>,
}

/// Why a claim could not be prepared or unprepared, or a driver registered. The texts
/// are kubelet's: they reach the pod's `FailedPrepareDynamicResources` event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DraError {
    #[error("prepare dynamic resources: {0}")]
    Prepare(Box<DraError>),
    #[error("unprepare dynamic resources: {0}")]
    Unprepare(Box<DraError>),
    #[error("pod \"{pod}\": ResourceClaim not created yet")]
    ClaimNotCreated { pod: String },
    #[error("pod \"{pod}\", spec.resourceClaim {claim:?}: none of the supported fields are set")]
    Unsupported { pod: String, claim: String },
    #[error("fetch ResourceClaim {claim}: {message}")]
    Fetch { claim: String, message: String },
    #[error("ResourceClaim {namespace}/{claim} was not created for pod {pod} (pod is not owner)")]
    NotOwner {
        namespace: String,
        claim: String,
        pod: String,
    },
    #[error("pod {pod} ({pod_uid}) is not allowed to use ResourceClaim {claim} ({claim_uid})")]
    NotReserved {
        pod: String,
        pod_uid: String,
        claim: String,
        claim_uid: String,
    },
    #[error("ResourceClaim {claim}: not allocated")]
    NotAllocated { claim: String },
    #[error("DRA driver name is empty")]
    DriverNameEmpty,
    #[error("DRA driver {driver} is not registered")]
    DriverNotRegistered { driver: String },
    #[error(
        "old ResourceClaim with same name {claim} and different UID {uid} still exists (previous pod force-deleted?!)"
    )]
    UidChanged { claim: String, uid: String },
    /// `what`: "ResourceClaim cache" before the calls, "ResourceClaim state" after.
    #[error("checkpoint {what}: {message}")]
    Checkpoint { what: &'static str, message: String },
    /// A call that failed as a whole: gRPC's `rpc error: code = ... desc = ...`.
    #[error("{call}: {message}")]
    Rpc { call: &'static str, message: String },
    #[error("{call} returned result for unknown claim UID {uid}")]
    UnknownClaim { call: &'static str, uid: String },
    #[error("{call} failed for ResourceClaim {claim}: {message}")]
    ClaimFailed {
        call: &'static str,
        claim: String,
        message: String,
    },
    #[error("{call} skipped {count} ResourceClaims")]
    Skipped { call: &'static str, count: usize },
    #[error(
        "invalid supported gRPC versions of DRA driver plugin {driver} at endpoint {endpoint}: {reason}"
    )]
    Versions {
        driver: String,
        endpoint: String,
        reason: String,
    },
    #[error("endpoint {endpoint} already registered for DRA driver plugin {driver}")]
    EndpointTaken { endpoint: String, driver: String },
    #[error(
        "create gRPC connection to DRA driver {driver} plugin at endpoint {endpoint}: {message}"
    )]
    Connect {
        driver: String,
        endpoint: String,
        message: String,
    },
    /// The checkpoint could not be read at start.
    #[error("create ResourceClaim cache: {0}")]
    Cache(String),
    #[error("internal error: {0}")]
    Internal(String),
}

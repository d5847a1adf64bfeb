//! The client of one device plugin (kubelet's plugin client and endpoint): the calls
//! kubelet makes on the plugin's socket.

use std::path::Path;
use std::time::Duration;

use tonic::transport::Channel;

use super::api;
use crate::grpc_unix;

/// kubelet's dial timeout for a plugin's socket.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
/// A bound on the calls kubelet makes while admitting a pod or starting a container.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to one plugin's socket.
pub(super) struct PluginClient {
    channel: Channel,
}

impl PluginClient {
    pub(super) async fn connect(socket: &Path) -> Result<Self, grpc_unix::GrpcError> {
        let channel = grpc_unix::connect(socket, DIAL_TIMEOUT).await?;
        Ok(Self { channel })
    }

    pub(super) async fn options(&self) -> Result<api::DevicePluginOptions, tonic::Status> {
        grpc_unix::unary(&self.channel, api::GET_OPTIONS, api::Empty {}, CALL_TIMEOUT).await
    }

    pub(super) async fn list_and_watch(
        &self,
    ) -> Result<tonic::Streaming<api::ListAndWatchResponse>, tonic::Status> {
        grpc_unix::server_streaming(&self.channel, api::LIST_AND_WATCH, api::Empty {}).await
    }

    pub(super) async fn allocate(
        &self,
        ids: Vec<String>,
    ) -> Result<api::AllocateResponse, tonic::Status> {
        let req = api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest { devices_ids: ids }],
        };
        grpc_unix::unary(&self.channel, api::ALLOCATE, req, CALL_TIMEOUT).await
    }

    pub(super) async fn pre_start(&self, ids: Vec<String>) -> Result<(), tonic::Status> {
        let req = api::PreStartContainerRequest { devices_ids: ids };
        let _: api::PreStartContainerResponse =
            grpc_unix::unary(&self.channel, api::PRE_START, req, CALL_TIMEOUT).await?;
        Ok(())
    }

    pub(super) async fn preferred(
        &self,
        available: Vec<String>,
        must_include: Vec<String>,
        size: usize,
    ) -> Result<Vec<String>, tonic::Status> {
        let req = api::PreferredAllocationRequest {
            container_requests: vec![api::ContainerPreferredAllocationRequest {
                available_device_ids: available,
                must_include_device_ids: must_include,
                allocation_size: i32::try_from(size).unwrap_or(i32::MAX),
            }],
        };
        let resp: api::PreferredAllocationResponse =
            grpc_unix::unary(&self.channel, api::GET_PREFERRED, req, CALL_TIMEOUT).await?;
        Ok(resp
            .container_responses
            .into_iter()
            .next()
            .map(|c| c.device_ids)
            .unwrap_or_default())
    }
}

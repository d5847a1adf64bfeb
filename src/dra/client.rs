//! One registered plugin of a DRA driver: a gRPC channel to its unix socket (dialled on
//! first use, as gRPC's `NewClient` does) and the two calls, each bounded by kubelet's
//! 45 s client call timeout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;

use super::DraError;
use super::proto;

/// kubelet's `defaultClientCallTimeout`: half its pod sync retry period.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(45);

/// The gRPC service a plugin was chosen to be spoken to with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Service {
    V1,
    V1Beta1,
}

impl Service {
    /// The registration's name of the service (`<package>.<service>`).
    pub(super) fn name(self) -> &'static str {
        match self {
            Service::V1 => "v1.DRAPlugin",
            Service::V1Beta1 => "v1beta1.DRAPlugin",
        }
    }
}

#[derive(Clone)]
pub(super) struct PluginClient {
    pub driver: String,
    pub endpoint: PathBuf,
    pub service: Service,
    channel: Channel,
    timeout: Duration,
}

impl PluginClient {
    /// A client for `endpoint`; nothing is dialled until the first call.
    pub(super) fn new(
        driver: &str,
        endpoint: &Path,
        service: Service,
        timeout: Duration,
    ) -> Result<Self, DraError> {
        let connect_error = |message: String| DraError::Connect {
            driver: driver.to_owned(),
            endpoint: endpoint.display().to_string(),
            message,
        };
        let uri = format!("unix://{}", endpoint.display());
        let channel = Endpoint::from_shared(uri)
            .map_err(|e| connect_error(e.to_string()))?
            .connect_lazy();
        Ok(PluginClient {
            driver: driver.to_owned(),
            endpoint: endpoint.to_owned(),
            service,
            channel,
            timeout,
        })
    }

    pub(super) async fn prepare(
        &self,
        req: proto::NodePrepareResourcesRequest,
    ) -> Result<proto::NodePrepareResourcesResponse, DraError> {
        let path = match self.service {
            Service::V1 => proto::V1_PREPARE,
            Service::V1Beta1 => proto::V1BETA1_PREPARE,
        };
        self.unary("NodePrepareResources", path, req).await
    }

    pub(super) async fn unprepare(
        &self,
        req: proto::NodeUnprepareResourcesRequest,
    ) -> Result<proto::NodeUnprepareResourcesResponse, DraError> {
        let path = match self.service {
            Service::V1 => proto::V1_UNPREPARE,
            Service::V1Beta1 => proto::V1BETA1_UNPREPARE,
        };
        self.unary("NodeUnprepareResources", path, req).await
    }

    async fn unary<Req, Resp>(
        &self,
        call: &'static str,
        path: &'static str,
        req: Req,
    ) -> Result<Resp, DraError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        tracing::trace!(
            driverName = %self.driver,
            endpoint = %self.endpoint.display(),
            "Calling {call} rpc"
        );
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let attempt = async {
            grpc.ready().await.map_err(|e| {
                tonic::Status::unavailable(format!("connection error: {}", chain(&e)))
            })?;
            let codec = ProstCodec::<Req, Resp>::default();
            grpc.unary(
                tonic::Request::new(req),
                PathAndQuery::from_static(path),
                codec,
            )
            .await
        };
        let started = std::time::Instant::now();
        let (answer, code) = match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(resp)) => (Ok(resp.into_inner()), tonic::Code::Ok),
            Ok(Err(status)) => (
                Err(rpc_error(status.code(), status.message())),
                status.code(),
            ),
            Err(_) => (
                Err(rpc_error(
                    tonic::Code::DeadlineExceeded,
                    "context deadline exceeded",
                )),
                tonic::Code::DeadlineExceeded,
            ),
        };
        crate::metrics::dra_grpc_call(&self.driver, path, go_code(code), started.elapsed());
        tracing::trace!(
            driverName = %self.driver,
            endpoint = %self.endpoint.display(),
            ok = answer.is_ok(),
            "Done calling {call} rpc"
        );
        answer.map_err(|message| DraError::Rpc { call, message })
    }
}

/// gRPC-Go's text of a failed call.
fn rpc_error(code: tonic::Code, message: &str) -> String {
    format!("rpc error: code = {} desc = {message}", go_code(code))
}

/// gRPC-Go's names of the codes (`codes.Code.String`).
fn go_code(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

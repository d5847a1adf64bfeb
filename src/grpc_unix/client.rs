//! The client side: a channel to a socket, and the two call shapes the plugin
//! protocols use.

use std::path::Path;
use std::time::Duration;

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use super::GrpcError;

/// Dials the unix socket at `path` (absolute), giving up after `timeout`.
pub(crate) async fn connect(path: &Path, timeout: Duration) -> Result<Channel, GrpcError> {
    let err = |reason: String| GrpcError::Connect {
        path: path.to_path_buf(),
        reason,
    };
    let uri = format!("unix://{}", path.display());
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|e| err(e.to_string()))?
        .connect_timeout(timeout);
    match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(err(error_chain(&e))),
        Err(_) => Err(err(format!("no answer within {timeout:?}"))),
    }
}

/// One request, one answer, on the method at `path` (`/package.Service/Method`),
/// bounded by `timeout`.
pub(crate) async fn unary<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    req: Req,
    timeout: Duration,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    let call = async {
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("service was not ready: {e}")))?;
        let path = PathAndQuery::from_static(path);
        grpc.unary(
            tonic::Request::new(req),
            path,
            tonic_prost::ProstCodec::default(),
        )
        .await
    };
    match tokio::time::timeout(timeout, call).await {
        Ok(resp) => resp.map(tonic::Response::into_inner),
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "no answer within {timeout:?}"
        ))),
    }
}

/// One request, a stream of answers (a device plugin's `ListAndWatch`); the stream
/// ends when the server ends it or the connection drops.
pub(crate) async fn server_streaming<Req, Resp>(
    channel: &Channel,
    path: &'static str,
    req: Req,
) -> Result<tonic::Streaming<Resp>, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("service was not ready: {e}")))?;
    let path = PathAndQuery::from_static(path);
    let resp = grpc
        .server_streaming(
            tonic::Request::new(req),
            path,
            tonic_prost::ProstCodec::default(),
        )
        .await?;
    Ok(resp.into_inner())
}

/// An error with its causes, one line (tonic's transport errors say little alone).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

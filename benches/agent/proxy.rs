//! A gRPC pass-through proxy on a unix socket in front of containerd's CRI socket. It
//! forwards every request byte for byte and keeps the bodies of the calls named in
//! [`RECORDED`], so the fair floor can replay exactly what oxlet sent.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::transport::Channel;
use tower::ServiceExt;

pub(crate) const RUN_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/RunPodSandbox";
pub(crate) const CREATE_CONTAINER: &str = "/runtime.v1.RuntimeService/CreateContainer";
/// The calls whose request bodies are kept.
const RECORDED: [&str; 2] = [RUN_POD_SANDBOX, CREATE_CONTAINER];

type Captured = Arc<Mutex<Vec<(String, Bytes)>>>;
type BoxError = Box<dyn Error + Send + Sync>;

pub(crate) struct CaptureProxy {
    pub(crate) socket: PathBuf,
    captured: Captured,
    task: tokio::task::JoinHandle<()>,
}

impl CaptureProxy {
    /// Listens on `socket` and forwards to `upstream` (a channel to containerd).
    pub(crate) fn start(socket: &Path, upstream: Channel) -> CaptureProxy {
        let listener = tokio::net::UnixListener::bind(socket)
            .unwrap_or_else(|e| panic!("binding {}: {e}", socket.display()));
        let captured = Captured::default();
        let task = tokio::spawn(serve(listener, upstream, captured.clone()));
        CaptureProxy {
            socket: socket.to_path_buf(),
            captured,
            task,
        }
    }

    /// The decoded requests of `path` received so far, oldest first.
    pub(crate) fn requests<M: prost::Message + Default>(&self, path: &str) -> Vec<M> {
        self.captured
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, body)| decode_unary(body))
            .collect()
    }
}

impl Drop for CaptureProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A unary gRPC body: one frame of a compressed flag (1 byte), a big-endian length
/// (4 bytes) and the protobuf message.
fn decode_unary<M: prost::Message + Default>(body: &[u8]) -> M {
    assert!(body.len() >= 5, "a gRPC frame has a 5-byte header");
    assert_eq!(body[0], 0, "oxlet sends uncompressed requests");
    let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    M::decode(&body[5..5 + len]).expect("a valid protobuf request")
}

async fn serve(listener: tokio::net::UnixListener, upstream: Channel, captured: Captured) {
    while let Ok((stream, _)) = listener.accept().await {
        let (upstream, captured) = (upstream.clone(), captured.clone());
        let svc =
            hyper::service::service_fn(move |req| forward(req, upstream.clone(), captured.clone()));
        tokio::spawn(async move {
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// Collects the (unary) request body, records it if wanted, and sends it on; the
/// response, streamed or not, trailers included, goes back as it comes.
async fn forward(
    req: hyper::Request<Incoming>,
    upstream: Channel,
    captured: Captured,
) -> Result<hyper::Response<tonic::body::Body>, BoxError> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await?.to_bytes();
    let path = parts.uri.path().to_string();
    if RECORDED.contains(&path.as_str()) {
        captured.lock().unwrap().push((path, bytes.clone()));
    }
    let req = hyper::Request::from_parts(parts, tonic::body::Body::new(Full::new(bytes)));
    Ok(upstream.oneshot(req).await?)
}

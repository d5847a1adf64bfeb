//! The pod resources socket: gRPC over a Unix socket only root can reach, the three
//! methods routed by path, and kubelet's rate limit (100 requests a second, bursts of
//! 10; past it `ResourceExhausted` "rejected by rate limit").

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tonic::codegen::{Body as HttpBody, StdError, http};
use tracing::{info, warn};

use crate::locks::Locked as _;

use super::api::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, GetPodResourcesRequest,
    ListPodResourcesRequest, ListPodResourcesResponse, SERVICE,
};
use super::lister::{self, PodResourcesSource};

/// The socket's directory below the root dir, and its name (kubelet's).
pub(crate) const SOCKET_DIR: &str = "pod-resources";
pub(crate) const SOCKET_NAME: &str = "kubelet.sock";

/// kubelet's `DefaultQPS` and `DefaultBurstTokens`.
const QPS: f64 = 100.0;
const BURST: f64 = 10.0;
/// The largest request taken: the requests are empty or two names.
const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// The largest answer sent (kubelet's `DefaultMaxMsgSize`, 16 MiB).
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// A token bucket (`rate.Limiter` with kubelet's numbers).
#[derive(Debug)]
struct RateLimit {
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    fn new() -> Self {
        Self {
            tokens: BURST,
            at: Instant::now(),
        }
    }

    /// Takes a token if one is there.
    fn allow(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * QPS;
        self.tokens = (self.tokens + refill).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The service: the source of answers and the shared rate limit.
#[derive(Clone)]
struct Lister {
    source: Arc<dyn PodResourcesSource>,
    limit: Arc<Mutex<RateLimit>>,
}

impl tonic::server::NamedService for Lister {
    const NAME: &'static str = SERVICE;
}

type Body = tonic::body::Body;

impl<B> tower::Service<http::Request<B>> for Lister
where
    B: HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.route(req).await) })
    }
}

impl Lister {
    /// The method by its path, after the rate limit.
    async fn route<B>(self, req: http::Request<B>) -> http::Response<Body>
    where
        B: HttpBody<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string();
        if !self.limit.locked().allow() {
            let status = tonic::Status::resource_exhausted("rejected by rate limit");
            return status.into_http();
        }
        let source = self.source;
        match method.as_str() {
            "List" => {
                unary(req, move |_: ListPodResourcesRequest| {
                    Ok::<ListPodResourcesResponse, tonic::Status>(lister::list(source.as_ref()))
                })
                .await
            }
            "Get" => {
                unary(req, move |r: GetPodResourcesRequest| {
                    lister::get(source.as_ref(), &r)
                        .map_err(|e| tonic::Status::unknown(e.to_string()))
                })
                .await
            }
            "GetAllocatableResources" => {
                unary(req, move |_: AllocatableResourcesRequest| {
                    Ok::<AllocatableResourcesResponse, tonic::Status>(lister::allocatable(
                        source.as_ref(),
                    ))
                })
                .await
            }
            _ => tonic::Status::unimplemented(format!("unknown method {method}")).into_http(),
        }
    }
}

/// One unary call: the request decoded (bounded), `answer` asked, the reply encoded.
async fn unary<B, Req, Resp>(
    req: http::Request<B>,
    answer: impl FnOnce(Req) -> Result<Resp, tonic::Status> + Send + 'static,
) -> http::Response<Body>
where
    B: HttpBody<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
{
    let codec = tonic_prost::ProstCodec::<Resp, Req>::default();
    let mut grpc = tonic::server::Grpc::new(codec)
        .max_decoding_message_size(MAX_REQUEST_BYTES)
        .max_encoding_message_size(MAX_RESPONSE_BYTES);
    let answer = std::sync::Mutex::new(Some(answer));
    let svc = tower::service_fn(move |r: tonic::Request<Req>| {
        let f = answer.locked().take();
        async move {
            let f = f.ok_or_else(|| tonic::Status::internal("answered twice"))?;
            f(r.into_inner()).map(tonic::Response::new)
        }
    });
    grpc.unary(svc, req).await
}

/// Serves the pod resources API on `<root_dir>/pod-resources/kubelet.sock` until
/// `cancel`; the directory is root's alone, and a socket left by an earlier run is
/// replaced (only a socket: any other file there is an error).
pub(crate) async fn serve(
    root_dir: &Path,
    source: Arc<dyn PodResourcesSource>,
    cancel: CancellationToken,
) -> std::io::Result<()> {
    let path = bind_path(root_dir)?;
    let listener = tokio::net::UnixListener::bind(&path)?;
    restrict(&path, 0o600)?;
    info!(path = %path.display(), "serving the pod resources API");
    let lister = Lister {
        source,
        limit: Arc::new(Mutex::new(RateLimit::new())),
    };
    let incoming = futures::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(s, _)| s);
        Some((conn, l))
    });
    let result = tonic::transport::Server::builder()
        .add_service(lister)
        .serve_with_incoming_shutdown(incoming, cancel.cancelled_owned())
        .await;
    if let Err(e) = result {
        warn!(path = %path.display(), err = %e, "the pod resources API stopped");
    }
    Ok(())
}

/// The socket's path, its directory made root's alone, an old socket removed.
fn bind_path(root_dir: &Path) -> std::io::Result<PathBuf> {
    let dir = root_dir.join(SOCKET_DIR);
    std::fs::create_dir_all(&dir)?;
    restrict(&dir, 0o700)?;
    let path = dir.join(SOCKET_NAME);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
            std::fs::remove_file(&path)?;
        }
        Ok(_) => {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a socket; not removing it",
                path.display()
            )));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(path)
}

fn restrict(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// A client for the tests: a channel to the socket at `path`.
#[cfg(test)]
pub(super) async fn test_client(path: PathBuf) -> tonic::client::Grpc<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let path = path.clone();
            async move {
                let s = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
        .await
        .expect("connect to the pod resources socket");
    tonic::client::Grpc::new(channel)
}

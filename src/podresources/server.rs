//! The pod resources socket: gRPC over a Unix socket only root can reach, the three
//! methods routed by path, and kubelet's rate limit (100 requests a second, bursts of
//! 10; past it `ResourceExhausted` "rejected by rate limit").

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::grpc_unix;
use crate::locks::Locked as _;

use super::api::{
    AllocatableResourcesRequest, AllocatableResourcesResponse, GET, GET_ALLOCATABLE,
    GetPodResourcesRequest, LIST, ListPodResourcesRequest, ListPodResourcesResponse,
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

/// Why the pod resources API could not be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PodResourcesError {
    /// The socket's directory could not be made root's alone.
    #[error("preparing {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The socket could not be bound or served.
    #[error(transparent)]
    Grpc(#[from] grpc_unix::GrpcError),
}

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

/// The three methods, each call first past the rate limit (kubelet's interceptor).
fn router(source: Arc<dyn PodResourcesSource>) -> grpc_unix::Router {
    let limit = Mutex::new(RateLimit::new());
    let (s1, s2, s3) = (source.clone(), source.clone(), source);
    grpc_unix::Router::new()
        .message_limits(MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES)
        .guard(move || {
            if limit.locked().allow() {
                Ok(())
            } else {
                Err(tonic::Status::resource_exhausted("rejected by rate limit"))
            }
        })
        .unary(LIST, move |_: ListPodResourcesRequest| {
            let answer: ListPodResourcesResponse = lister::list(s1.as_ref());
            std::future::ready(Ok(answer))
        })
        .unary(GET, move |r: GetPodResourcesRequest| {
            let answer = lister::get(s2.as_ref(), &r);
            std::future::ready(answer.map_err(|e| tonic::Status::unknown(e.to_string())))
        })
        .unary(GET_ALLOCATABLE, move |_: AllocatableResourcesRequest| {
            let answer: AllocatableResourcesResponse = lister::allocatable(s3.as_ref());
            std::future::ready(Ok(answer))
        })
}

/// Serves the pod resources API on `<root_dir>/pod-resources/kubelet.sock` until
/// `cancel`; the directory is root's alone, and a socket left by an earlier run is
/// replaced (only a socket: any other file there is an error).
pub(crate) async fn serve(
    root_dir: &Path,
    source: Arc<dyn PodResourcesSource>,
    cancel: CancellationToken,
) -> Result<(), PodResourcesError> {
    let dir = root_dir.join(SOCKET_DIR);
    private_dir(&dir).map_err(|source| PodResourcesError::Dir {
        path: dir.clone(),
        source,
    })?;
    let path = dir.join(SOCKET_NAME);
    let listener = grpc_unix::listen(&path)?;
    info!(path = %path.display(), "serving the pod resources API");
    grpc_unix::serve(listener, &path, router(source), cancel).await?;
    Ok(())
}

/// Makes `dir` (mode 0700).
fn private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

//! The server side: a [`Router`] from method paths to handlers, and a socket to serve
//! it on.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;

use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;
use tonic_prost::ProstCodec;

use super::GrpcError;

type Handler = Arc<
    dyn Fn(http::Request<Body>, Limits) -> BoxFuture<'static, http::Response<Body>> + Send + Sync,
>;
type Guard = Arc<dyn Fn() -> Result<(), tonic::Status> + Send + Sync>;

/// The largest request decoded and answer encoded (`None`: tonic's defaults).
#[derive(Clone, Copy, Default)]
struct Limits {
    request: Option<usize>,
    response: Option<usize>,
}

/// Method paths (`/v1beta1.Registration/Register`) to their handlers; any other path
/// answers `Unimplemented`. One router may carry several services (a plugin serves
/// its registration service and its device plugin service on one socket).
#[derive(Clone, Default)]
pub(crate) struct Router {
    routes: BTreeMap<&'static str, Handler>,
    limits: Limits,
    guard: Option<Guard>,
}

impl Router {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Bounds the size of each request decoded and each answer encoded, in bytes.
    pub(crate) fn message_limits(mut self, request: usize, response: usize) -> Self {
        self.limits = Limits {
            request: Some(request),
            response: Some(response),
        };
        self
    }

    /// A check every call passes before its method runs (a rate limit, as gRPC's
    /// unary interceptors); its `Err` is the call's answer.
    pub(crate) fn guard(
        mut self,
        check: impl Fn() -> Result<(), tonic::Status> + Send + Sync + 'static,
    ) -> Self {
        self.guard = Some(Arc::new(check));
        self
    }

    /// Adds a method answering one message with one message.
    pub(crate) fn unary<Req, Resp, F, Fut>(mut self, path: &'static str, handler: F) -> Self
    where
        Req: prost::Message + Default + Send + 'static,
        Resp: prost::Message + Send + 'static,
        F: Fn(Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, tonic::Status>> + Send + 'static,
    {
        let h: Handler = Arc::new(move |req, limits: Limits| {
            let f = handler.clone();
            let svc = tower::service_fn(move |r: tonic::Request<Req>| {
                let fut = f(r.into_inner());
                async move { fut.await.map(tonic::Response::new) }
            });
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::<Resp, Req>::default());
                if let Some(n) = limits.request {
                    grpc = grpc.max_decoding_message_size(n);
                }
                if let Some(n) = limits.response {
                    grpc = grpc.max_encoding_message_size(n);
                }
                grpc.unary(svc, req).await
            })
        });
        self.routes.insert(path, h);
        self
    }
}

/// A status as the whole answer to a call.
fn status_response(status: tonic::Status) -> http::Response<Body> {
    let (parts, ()) = status.into_http::<()>().into_parts();
    http::Response::from_parts(parts, Body::empty())
}

impl tower::Service<http::Request<Body>> for Router {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let Some(h) = self.routes.get(req.uri().path()) else {
            let status =
                tonic::Status::unimplemented(format!("unknown method {}", req.uri().path()));
            return Box::pin(async move { Ok(status_response(status)) });
        };
        if let Some(Err(status)) = self.guard.as_ref().map(|g| g()) {
            return Box::pin(async move { Ok(status_response(status)) });
        }
        let fut = h(req, self.limits);
        Box::pin(async move { Ok(fut.await) })
    }
}

/// Binds the unix socket at `path` (mode 0600). A stale socket left there (ours from
/// a previous run, or a plugin's that died) is removed first; anything else in its
/// place is refused, never removed.
pub(crate) fn listen(path: &Path) -> Result<UnixListener, GrpcError> {
    let err = |reason: String| GrpcError::Listen {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path)
                .map_err(|e| err(format!("removing the stale socket: {e}")))?;
        }
        Ok(_) => return Err(err("a file that is not a socket is in the way".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e.to_string())),
    }
    let listener = UnixListener::bind(path).map_err(|e| err(e.to_string()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| err(format!("setting the socket's mode: {e}")))?;
    Ok(listener)
}

/// Serves `router` on `listener` until `cancel`, then removes the socket at `path`.
pub(crate) async fn serve(
    listener: UnixListener,
    path: &Path,
    router: Router,
    cancel: CancellationToken,
) -> Result<(), GrpcError> {
    let incoming = futures::stream::unfold(listener, |l| async move {
        let conn = l.accept().await.map(|(stream, _)| stream);
        Some((conn, l))
    });
    let result = tonic::transport::Server::builder()
        .serve_with_incoming_shutdown(router, incoming, cancel.cancelled_owned())
        .await;
    let _ = std::fs::remove_file(path);
    result.map_err(|e| GrpcError::Serve {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

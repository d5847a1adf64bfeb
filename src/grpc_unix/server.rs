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

type Handler =
    Arc<dyn Fn(http::Request<Body>) -> BoxFuture<'static, http::Response<Body>> + Send + Sync>;

/// Method paths (`/v1beta1.Registration/Register`) to their handlers; any other path
/// answers `Unimplemented`. One router may carry several services (a plugin serves
/// its registration service and its device plugin service on one socket).
#[derive(Clone, Default)]
pub(crate) struct Router {
    routes: BTreeMap<&'static str, Handler>,
}

impl Router {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Adds a method answering one message with one message.
    pub(crate) fn unary<Req, Resp, F, Fut>(mut self, path: &'static str, handler: F) -> Self
    where
        Req: prost::Message + Default + Send + 'static,
        Resp: prost::Message + Send + 'static,
        F: Fn(Req) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, tonic::Status>> + Send + 'static,
    {
        let h: Handler = Arc::new(move |req| {
            let f = handler.clone();
            let svc = tower::service_fn(move |r: tonic::Request<Req>| {
                let fut = f(r.into_inner());
                async move { fut.await.map(tonic::Response::new) }
            });
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::<Resp, Req>::default());
                grpc.unary(svc, req).await
            })
        });
        self.routes.insert(path, h);
        self
    }
}

impl tower::Service<http::Request<Body>> for Router {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self.routes.get(req.uri().path()) {
            Some(h) => {
                let fut = h(req);
                Box::pin(async move { Ok(fut.await) })
            }
            None => {
                let status =
                    tonic::Status::unimplemented(format!("unknown method {}", req.uri().path()));
                let (parts, ()) = status.into_http::<()>().into_parts();
                Box::pin(async move { Ok(http::Response::from_parts(parts, Body::empty())) })
            }
        }
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

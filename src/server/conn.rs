//! Serving HTTP/1 connections with bounds, so that slow or idle clients cannot pile up
//! descriptors or tasks: a handshake and header-read timeout, an idle timeout, and
//! caps on handshakes and on connections per client ([`super::admission`]).
//!
//! kubelet's Go servers rely on `http.Server` timeouts (IdleTimeout 90 s); axum's `serve`
//! sets none, so each connection is driven here with hyper directly.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::admission::{Admission, Refusal, Slot};
use super::serving::Tls;
use crate::locks::Locked as _;

/// A client must send a complete request head within this time (also the longest a
/// kept-alive connection may wait for its next request: hyper runs one timer for both).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection on which no byte moved either way for this long is closed
/// (kubelet's `IdleTimeout`); catches stalled bodies and clients that stop reading.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Request heads larger than this are refused (hyper's minimum buffer is 8 KiB).
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long shutdown waits for open requests to finish.
const DRAIN: Duration = Duration::from_secs(1);

/// The bounds one server applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Also the longest a TLS handshake may take.
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// Connections in all, past their handshake.
    pub max_connections: usize,
    /// TLS handshakes in flight, in all and from one client address; past either,
    /// the oldest is dropped for the new one.
    pub max_handshakes: usize,
    pub max_handshakes_per_client: usize,
    /// Authenticated connections one client address may hold.
    pub max_connections_per_client: usize,
    /// Connections without an authenticated user, in all and per client address.
    pub max_unauthenticated: usize,
    pub max_unauthenticated_per_client: usize,
}

impl Limits {
    /// The default timeouts and a connection cap that leaves most descriptors to pods:
    /// a quarter of `open_files` per server (two servers run), between 64 and 10000;
    /// a quarter of that for handshakes in flight and for unauthenticated
    /// connections, a quarter of those per client, and three quarters of the cap
    /// for one authenticated client (so the apiserver cannot lock out
    /// metrics-server, nor the reverse).
    pub(crate) fn for_open_files(open_files: u64) -> Limits {
        let max = (open_files / 4).clamp(64, 10_000) as usize;
        let quarter = max / 4;
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            max_connections: max,
            max_handshakes: quarter,
            max_handshakes_per_client: quarter / 4,
            max_connections_per_client: max * 3 / 4,
            max_unauthenticated: quarter,
            max_unauthenticated_per_client: quarter / 4,
        }
    }
}

/// Milliseconds since `base` of the last byte read or written.
struct Activity {
    base: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last_ms
            .store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn last(&self) -> Instant {
        self.base + Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// The most encrypted bytes a TLS connection holds for a client that is not reading
/// (rustls' send buffer limit).
const TLS_SEND_BUFFER: usize = 256 * 1024;

/// The end of an `AsyncWrite` impl for a wrapper whose `inner` stream does the
/// writing: whether it writes vectored, flush and shutdown, passed through as they are.
macro_rules! passed_through_write_tail {
    () => {
        fn is_write_vectored(&self) -> bool {
            self.inner.is_write_vectored()
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    };
}
pub(super) use passed_through_write_tail;

/// A stream that records when bytes last moved: a TCP connection, or a stream
/// handed over by an upgrade.
pub(super) struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S> Tracked<S> {
    pub(super) fn new(inner: S) -> Tracked<S> {
        Tracked {
            inner,
            activity: Arc::new(Activity {
                base: Instant::now(),
                last_ms: AtomicU64::new(0),
            }),
        }
    }

    /// When a byte last moved either way, readable while the stream is in use.
    pub(super) fn last_activity(&self) -> impl Fn() -> Instant + Send + 'static {
        let activity = self.activity.clone();
        move || activity.last()
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }
    /// Passed through: TLS writes its records as one `writev`, and without this each
    /// 16 KiB record would be a `send` of its own (eight times the syscalls, and as
    /// many wake-ups of the reader).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }
    passed_through_write_tail!();
}

/// How long a connection may idle: the server's idle timeout, or while a handler
/// serves a long-lived stream on it (a followed log), `streamingConnectionIdleTimeout`,
/// as kubelet keeps such a response open for its own write timeout (4 h) rather than
/// the keep-alive idle cut.
#[derive(Clone)]
pub(super) struct IdleLimit {
    inner: Arc<IdleState>,
}

struct IdleState {
    default: Duration,
    /// The stream's limit and what it serves, while one runs.
    stream: std::sync::Mutex<Option<(Duration, &'static str)>>,
    changed: Notify,
}

impl IdleLimit {
    fn new(default: Duration) -> IdleLimit {
        IdleLimit {
            inner: Arc::new(IdleState {
                default,
                stream: std::sync::Mutex::new(None),
                changed: Notify::new(),
            }),
        }
    }

    /// Puts the connection under `timeout` until the guard is dropped; `what` names
    /// the stream in the log line that says why it was closed.
    pub(super) fn stream(&self, timeout: Duration, what: &'static str) -> IdleGuard {
        *self.inner.stream.locked() = Some((timeout, what));
        self.inner.changed.notify_one();
        IdleGuard {
            limit: self.clone(),
        }
    }

    fn current(&self) -> (Duration, Option<&'static str>) {
        match *self.inner.stream.locked() {
            Some((d, what)) => (d, Some(what)),
            None => (self.inner.default, None),
        }
    }
}

/// Holds a connection under a stream's idle timeout; back to the server's when dropped.
pub(super) struct IdleGuard {
    limit: IdleLimit,
}

impl Drop for IdleGuard {
    fn drop(&mut self) {
        *self.limit.inner.stream.locked() = None;
        self.limit.inner.changed.notify_one();
    }
}

/// What a handler may learn about the connection its request came on: the client
/// certificate it presented, and the connection's slot under the caps, which a
/// stream that outlives the HTTP exchange (exec, port-forward) keeps.
#[derive(Clone)]
pub(super) struct ConnInfo {
    pub peer: SocketAddr,
    /// The chain a client presented, leaf first (TLS with a client CA only); the
    /// handshake checked only that the client holds its key.
    pub client_cert: Option<Arc<[CertificateDer<'static>]>>,
    pub slot: Arc<Slot>,
    /// Where a stream that outlives its request runs.
    pub tasks: ConnTasks,
    /// The connection's idle limit, which a long-lived response raises.
    pub idle: IdleLimit,
}

/// The server's own tasks: a stream an upgrade hands off (exec, port-forward) runs
/// here, so it ends when the server stops and the server's drain waits for it, as it
/// does for connections.
#[derive(Clone)]
pub(super) struct ConnTasks {
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl ConnTasks {
    /// Runs `work` until it ends or the server stops.
    pub(super) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let cancel = self.cancel.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = work => {}
            }
        });
    }
}

/// Accepts connections until `cancel` fires and serves `router` on each, within `limits`.
/// A plain connection is taken or closed at once; a TLS one first shakes hands
/// (bounded in time and number), then is taken by its client's count or the
/// unauthenticated budget ([`super::admission`]). A refused connection is closed at
/// once, so a flood costs a descriptor for a moment, never a pile of them.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<Tls>,
    cancel: CancellationToken,
) {
    let admission = Admission::new(limits);
    let refusals = Arc::new(Refusals::default());
    let conns = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and the like: back off instead of spinning on the error.
                tracing::warn!(error = %e, "HTTP server: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = Conn {
            router: router.clone(),
            limits,
            tasks: ConnTasks {
                tracker: conns.clone(),
                cancel: cancel.clone(),
            },
            peer,
        };
        let Some(tls) = &tls else {
            match admission.admit(peer.ip(), true) {
                Ok(slot) => {
                    conns.spawn(conn.plain(stream, slot));
                }
                Err(why) => refusals.note(peer, why, limits),
            }
            continue;
        };
        let handshake = admission.handshake(peer.ip());
        let (admission, refusals, tls) = (admission.clone(), refusals.clone(), tls.clone());
        // Tracked so shutdown can wait for open requests to finish. Connections are
        // short-lived helpers of this server task: it drains them before it ends, so
        // the agent's task tree waits for them through it.
        conns.spawn(async move {
            let Some((stream, certs)) = conn.handshake(stream, &tls, handshake).await else {
                return;
            };
            let trusted = match (&tls.client_cas, &certs) {
                (Some(cas), Some(chain)) => cas.verify(chain).is_ok_and(|u| u.is_some()),
                _ => false,
            };
            match admission.admit(peer.ip(), trusted) {
                Ok(slot) => conn.tls(stream, certs, slot).await,
                Err(why) => refusals.note(peer, why, limits),
            }
        });
    }
    conns.close();
    if tokio::time::timeout(DRAIN, conns.wait()).await.is_err() {
        tracing::debug!("HTTP server: some connections still open at shutdown; dropping them");
    }
}

/// Refused connections, told at most every 10 s with how many there were: at -v=0
/// when the server's cap is reached (the node needs a higher open-file limit), at
/// -v=2 when a client met its own share.
#[derive(Default)]
struct Refusals {
    since_told: std::sync::Mutex<(u64, Option<Instant>)>,
}

impl Refusals {
    fn note(&self, peer: SocketAddr, why: Refusal, limits: Limits) {
        use crate::locks::Locked as _;
        let mut s = self.since_told.locked();
        s.0 += 1;
        if s.1.is_some_and(|t| t.elapsed() < Duration::from_secs(10)) {
            return;
        }
        let (refused, reason) = (s.0, why.reason());
        *s = (0, Some(Instant::now()));
        drop(s);
        let (max, per_client, unauthenticated) = (
            limits.max_connections,
            limits.max_connections_per_client,
            limits.max_unauthenticated,
        );
        if why == Refusal::Full {
            tracing::warn!(%peer, reason, refused, max, "HTTP server: closing new connections");
        } else {
            tracing::info!(%peer, reason, refused, perClient = per_client, unauthenticated, "HTTP server: closing new connections");
        }
    }
}

/// Serves one plain connection on `io` as [`serve`] serves an accepted one, until the
/// client has left: the fuzz targets send request bytes through it (`crate::fuzzing`).
pub(crate) async fn serve_io<S>(router: Router, io: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let limits = Limits::for_open_files(1024);
    let peer = SocketAddr::from(([127, 0, 0, 1], 0));
    let Ok(slot) = Admission::new(limits).admit(peer.ip(), true) else {
        return;
    };
    let conn = Conn {
        router,
        limits,
        tasks: ConnTasks {
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
        },
        peer,
    };
    let io = Tracked::new(io);
    let activity = io.activity.clone();
    conn.http(TokioIo::new(io), activity, None, slot).await;
}

/// One accepted connection and what serving it needs.
struct Conn {
    router: Router,
    limits: Limits,
    tasks: ConnTasks,
    peer: SocketAddr,
}

/// A TLS connection past its handshake.
type TlsConn = tokio_rustls::server::TlsStream<Tracked<TcpStream>>;

impl Conn {
    async fn plain(self, stream: TcpStream, slot: Arc<Slot>) {
        let io = Tracked::new(stream);
        let activity = io.activity.clone();
        self.http(TokioIo::new(io), activity, None, slot).await;
    }

    /// The TLS handshake, within the header-read timeout (so a client that stalls in
    /// it is cut like one that stalls in its request head) and until a newer
    /// handshake needs its place; then the client's chain, if it sent one.
    async fn handshake(
        &self,
        stream: TcpStream,
        tls: &Tls,
        place: super::admission::Handshake,
    ) -> Option<(TlsConn, Option<Arc<[CertificateDer<'static>]>>)> {
        let peer = self.peer;
        let handshake = tokio::time::timeout(
            self.limits.header_read_timeout,
            tls.acceptor.accept(Tracked::new(stream)),
        );
        let done = tokio::select! {
            r = handshake => r,
            () = place.close.cancelled() => {
                tracing::debug!(%peer, "TLS handshake dropped: newer handshakes needed its place");
                return None;
            }
        };
        match done {
            Ok(Ok(mut stream)) => {
                // rustls' default (64 KiB) splits a stream copy's 128 KiB into two
                // writes; two copies' worth still bounds what a slow client can make
                // oxlet hold.
                stream.get_mut().1.set_buffer_limit(Some(TLS_SEND_BUFFER));
                let certs = (stream.get_ref().1.peer_certificates())
                    .filter(|c| !c.is_empty())
                    .map(|c| c.iter().map(|c| c.clone().into_owned()).collect());
                Some((stream, certs))
            }
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                None
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake took too long; closing");
                None
            }
        }
    }

    async fn tls(
        self,
        stream: TlsConn,
        certs: Option<Arc<[CertificateDer<'static>]>>,
        slot: Arc<Slot>,
    ) {
        let activity = stream.get_ref().0.activity.clone();
        self.http(TokioIo::new(stream), activity, certs, slot).await;
    }

    /// Serves HTTP/1 on `io` until the client leaves, the connection idles out, an
    /// upgrade takes it over, or shutdown drains it.
    async fn http<I>(
        self,
        io: I,
        activity: Arc<Activity>,
        client_cert: Option<Arc<[CertificateDer<'static>]>>,
        slot: Arc<Slot>,
    ) where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let closed = slot.closed().clone();
        let idle = IdleLimit::new(self.limits.idle_timeout);
        let info = ConnInfo {
            peer: self.peer,
            client_cert,
            slot,
            tasks: self.tasks.clone(),
            idle: idle.clone(),
        };
        let router = self.router;
        let service =
            hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                info.slot.requested();
                req.extensions_mut().insert(info.clone());
                let mut router = router.clone();
                async move { tower::Service::call(&mut router, req).await }
            });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout)
            .max_buf_size(MAX_HEAD_BYTES);
        let conn = builder.serve_connection(io, service).with_upgrades();
        tokio::pin!(conn);
        let mut draining = false;
        let peer = self.peer;
        loop {
            let (limit, stream) = idle.current();
            let idle_deadline = activity.last() + limit;
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "HTTP connection ended");
                    }
                    break;
                }
                () = self.tasks.cancel.cancelled(), if !draining => {
                    conn.as_mut().graceful_shutdown();
                    draining = true;
                }
                () = closed.cancelled() => {
                    tracing::debug!(%peer, "closing a connection that sent no request: the unauthenticated budget needed its place");
                    break;
                }
                // A stream began or ended: the deadline is computed again.
                () = idle.inner.changed.notified() => {}
                () = tokio::time::sleep_until(idle_deadline) => {
                    if activity.last() + limit > Instant::now() {
                        continue;
                    }
                    match stream {
                        Some(what) => tracing::info!(%peer, stream = what, idle = %crate::duration::format_go_duration(limit), "closing a stream idle for streamingConnectionIdleTimeout"),
                        None => tracing::debug!(%peer, "HTTP connection idle too long; closing"),
                    }
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn server(limits: Limits) -> (std::net::SocketAddr, CancellationToken) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let router = Router::new().route(
            "/x",
            get(|| async { "x" }).post(|body: String| async move { body }),
        );
        tokio::spawn(serve(l, router, limits, None, cancel.clone()));
        (addr, cancel)
    }

    fn limits(max: usize) -> Limits {
        Limits {
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(600),
            max_connections: max,
            max_handshakes: max,
            max_handshakes_per_client: max,
            max_connections_per_client: max,
            max_unauthenticated: max,
            max_unauthenticated_per_client: max,
        }
    }

    /// A tracked socket writes slices in one call (what TLS relies on to send its
    /// records together) and still counts the write as activity.
    #[tokio::test]
    async fn vectored_writes_pass_through_and_count_as_activity() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), l.accept());
        let mut tracked = Tracked::new(client.unwrap());
        assert!(tracked.is_write_vectored());
        let last = tracked.last_activity();
        let before = last();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let slices = [io::IoSlice::new(b"ab"), io::IoSlice::new(b"cd")];
        let n = tracked.write_vectored(&slices).await.unwrap();
        assert_eq!(n, 4);
        assert!(last() > before);
        drop(tracked);
        let mut got = String::new();
        accepted.unwrap().0.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, "abcd");
    }

    /// Reads until EOF; returns the bytes and whether EOF came before `within`.
    async fn read_to_eof(s: &mut TcpStream, within: Duration) -> (String, bool) {
        let mut buf = Vec::new();
        let r = tokio::time::timeout(within, s.read_to_end(&mut buf)).await;
        (String::from_utf8_lossy(&buf).into_owned(), r.is_ok())
    }

    #[test]
    fn cap_follows_open_files() {
        let l = Limits::for_open_files(1024);
        assert_eq!(l.max_connections, 256);
        assert_eq!((l.max_handshakes, l.max_handshakes_per_client), (64, 16));
        assert_eq!(
            (l.max_unauthenticated, l.max_unauthenticated_per_client),
            (64, 16)
        );
        assert_eq!(l.max_connections_per_client, 192);
        assert_eq!(Limits::for_open_files(20_000).max_connections, 5000);
        assert_eq!(Limits::for_open_files(100).max_connections, 64);
        assert_eq!(Limits::for_open_files(1_000_000).max_connections, 10_000);
    }

    #[tokio::test]
    async fn serves_a_request() {
        let (addr, cancel) = server(limits(4)).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /x HTTP/1.0\r\n\r\n").await.unwrap();
        let (body, eof) = read_to_eof(&mut s, Duration::from_secs(2)).await;
        assert!(
            eof && body.starts_with("HTTP/1.0 200") && body.ends_with('x'),
            "{body}"
        );
        cancel.cancel();
    }

    #[tokio::test]
    async fn slow_headers_are_cut() {
        let (addr, cancel) = server(limits(4)).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let t = Instant::now();
        let mut cut = false;
        for b in b"GET /x HTTP/1.1\r\nHost: a\r\n" {
            if s.write_all(&[*b]).await.is_err() {
                cut = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (body, eof) = read_to_eof(&mut s, Duration::from_secs(2)).await;
        assert!(cut || eof, "connection still open after {:?}", t.elapsed());
        assert!(!body.contains(" 200 "), "{body}");
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        cancel.cancel();
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_and_slots_come_back() {
        let (addr, cancel) = server(limits(2)).await;
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        let _ = c.write_all(b"GET /x HTTP/1.0\r\n\r\n").await;
        let (body, eof) = read_to_eof(&mut c, Duration::from_millis(200)).await;
        assert!(eof && body.is_empty(), "third connection served: {body:?}");
        // The two idle ones are cut by the header-read timeout; then a slot is free.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut d = TcpStream::connect(addr).await.unwrap();
        d.write_all(b"GET /x HTTP/1.0\r\n\r\n").await.unwrap();
        let (body, _) = read_to_eof(&mut d, Duration::from_secs(2)).await;
        assert!(body.starts_with("HTTP/1.0 200"), "{body}");
        cancel.cancel();
    }

    /// A response that marks its connection as a stream: quiet past the server's idle
    /// timeout it lives on, and it is closed after the stream's own idle timeout.
    #[tokio::test]
    async fn a_quiet_stream_lives_by_its_own_idle_timeout() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let cancel = CancellationToken::new();
        let handler = |axum::Extension(info): axum::Extension<ConnInfo>| async move {
            let guard = info.idle.stream(Duration::from_millis(1500), "test stream");
            let pieces = futures::stream::unfold((0, guard), |(i, g)| async move {
                match i {
                    0 => {}
                    1 => tokio::time::sleep(Duration::from_millis(1000)).await,
                    _ => futures::future::pending::<()>().await,
                }
                Some((Ok::<_, io::Error>(format!("piece{i}\n")), (i + 1, g)))
            });
            axum::body::Body::from_stream(pieces)
        };
        let router = Router::new().route("/s", get(handler));
        tokio::spawn(serve(l, router, limits(4), None, cancel.clone()));
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /s HTTP/1.0\r\n\r\n").await.unwrap();
        let t = Instant::now();
        let (body, eof) = read_to_eof(&mut s, Duration::from_secs(5)).await;
        let took = t.elapsed();
        assert!(eof, "the quiet stream was never closed: {body}");
        assert!(
            body.contains("piece1"),
            "cut by the 600ms idle timeout: {body}"
        );
        assert!(
            took >= Duration::from_millis(2400) && took < Duration::from_millis(3500),
            "closed after {took:?}, not 1.5s after its last piece"
        );
        cancel.cancel();
    }

    #[tokio::test]
    async fn a_stalled_body_is_cut_by_the_idle_timeout() {
        let mut l = limits(4);
        l.header_read_timeout = Duration::from_secs(10);
        let (addr, cancel) = server(l).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nab")
            .await
            .unwrap();
        let t = Instant::now();
        let (_, eof) = read_to_eof(&mut s, Duration::from_secs(3)).await;
        assert!(eof, "stalled connection not closed");
        assert!(
            t.elapsed() >= Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        cancel.cancel();
    }
}

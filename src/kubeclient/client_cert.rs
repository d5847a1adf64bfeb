//! The client certificate the apiserver clients present, swappable while they run
//! (kubelet's `certificate/transport.go` `updateTransport`): a rustls
//! [`ResolvesClientCert`] reads a shared [`CertSlot`] at every TLS handshake, and the
//! HTTP service drops its connection pool when the slot changes, so every request
//! after a rotation goes out on a new connection with the new certificate. Requests
//! already in flight (a watch) keep their connection, and the old certificate, until
//! they end; kubelet closes those too.
//!
//! kube-rs builds its rustls config privately, so the clients of a rotating
//! certificate get their own HTTP stack here: kube's TLS config (CA, server name,
//! `insecure-skip-tls-verify`) with our resolver, a connect timeout, and kube's
//! base-URI, auth and header layers.

use crate::locks::{Locked as _, ReadWriteLocked as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ClientBuilder, ConfigExt as _};
use tokio_rustls::rustls::client::ResolvesClientCert;
use tokio_rustls::rustls::client::Resumption;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{ClientConfig, SignatureScheme};

/// Why a certificate-and-key PEM cannot be presented.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityError {
    #[error("holds no PEM CERTIFICATE")]
    NoCertificate,
    #[error("holds no PEM private key")]
    NoKey,
    #[error("the private key cannot be used: {0}")]
    Key(#[source] tokio_rustls::rustls::Error),
}

/// The certificate and key the clients present; shared by the clients' resolver and
/// the rotation task that replaces them.
#[derive(Debug, Clone)]
pub(crate) struct CertSlot {
    inner: Arc<SlotInner>,
}

#[derive(Debug)]
struct SlotInner {
    current: RwLock<Arc<CertifiedKey>>,
    /// Bumped on every swap; the HTTP service compares it to drop its pool.
    generation: AtomicU64,
    provider: Arc<CryptoProvider>,
}

impl CertSlot {
    /// A slot holding the pair in `pem` (certificate chain then key, kind's layout).
    pub(crate) fn new(
        pem: &[u8],
        provider: Arc<CryptoProvider>,
    ) -> Result<CertSlot, IdentityError> {
        let key = certified_key(pem, &provider)?;
        Ok(CertSlot {
            inner: Arc::new(SlotInner {
                current: RwLock::new(Arc::new(key)),
                generation: AtomicU64::new(0),
                provider,
            }),
        })
    }

    /// Presents the pair in `pem` on every new connection from now on.
    pub(crate) fn replace(&self, pem: &[u8]) -> Result<(), IdentityError> {
        let key = certified_key(pem, &self.inner.provider)?;
        *self.inner.current.write_locked() = Arc::new(key);
        self.inner.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// The leaf certificate presented now (DER).
    #[cfg(test)]
    pub(crate) fn current_leaf(&self) -> Option<CertificateDer<'static>> {
        self.current().cert.first().cloned()
    }

    fn current(&self) -> Arc<CertifiedKey> {
        self.inner.current.read_locked().clone()
    }

    fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::SeqCst)
    }
}

fn certified_key(pem: &[u8], provider: &CryptoProvider) -> Result<CertifiedKey, IdentityError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .map_while(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(IdentityError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|_| IdentityError::NoKey)?;
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(IdentityError::Key)?;
    Ok(CertifiedKey::new(chain, signer))
}

/// Hands rustls whatever the slot holds at handshake time.
#[derive(Debug)]
pub(crate) struct SlotResolver(pub CertSlot);

impl ResolvesClientCert for SlotResolver {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// kube's TLS config for `config`, presenting the slot's certificate.
pub(crate) fn tls_config(
    config: &kube::Config,
    slot: &CertSlot,
) -> Result<ClientConfig, kube::Error> {
    let mut tls = config.rustls_client_config()?;
    tls.client_auth_cert_resolver = Arc::new(SlotResolver(slot.clone()));
    Ok(tls)
}

/// The crypto provider kube's TLS config uses (the slot signs with the same one).
pub(crate) fn provider(config: &kube::Config) -> Result<Arc<CryptoProvider>, kube::Error> {
    Ok(config.rustls_client_config()?.crypto_provider().clone())
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// A hyper client whose pool is replaced when the slot's certificate changes.
#[derive(Clone)]
struct RotatingHttp {
    connect: Arc<dyn Fn() -> Https + Send + Sync>,
    slot: CertSlot,
    current: Arc<Mutex<(u64, HyperClient<Https, Body>)>>,
}

impl RotatingHttp {
    fn new(connect: Arc<dyn Fn() -> Https + Send + Sync>, slot: CertSlot) -> RotatingHttp {
        let client = HyperClient::builder(TokioExecutor::new()).build(connect());
        RotatingHttp {
            current: Arc::new(Mutex::new((slot.generation(), client))),
            connect,
            slot,
        }
    }

    /// The client for the slot's current certificate: after a swap a new pool and a
    /// new connector, so neither an idle connection nor a resumed TLS session (which
    /// keeps the identity of the handshake it resumes) carries the old certificate.
    fn client(&self) -> HyperClient<Https, Body> {
        let generation = self.slot.generation();
        let mut current = self.current.locked();
        if current.0 != generation {
            *current = (
                generation,
                HyperClient::builder(TokioExecutor::new()).build((self.connect)()),
            );
        }
        current.1.clone()
    }
}

impl tower::Service<hyper::Request<Body>> for RotatingHttp {
    type Response = hyper::Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // hyper's legacy client is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: hyper::Request<Body>) -> Self::Future {
        let client = self.client();
        Box::pin(async move { client.request(req).await })
    }
}

/// The HTTP stack kube's client runs on, boxed so the caller can add layers.
pub(crate) type Stack =
    tower::util::BoxService<hyper::Request<Body>, hyper::Response<Incoming>, tower::BoxError>;

/// A kube client builder for `config` whose certificate is the slot's.
pub(crate) fn builder(
    config: &kube::Config,
    slot: &CertSlot,
) -> Result<ClientBuilder<Stack>, kube::Error> {
    let tls = tls_config(config, slot)?;
    let server_name = match &config.tls_server_name {
        Some(name) => Some(
            ServerName::try_from(name.clone()).map_err(|e| kube::Error::Service(Box::new(e)))?,
        ),
        None => None,
    };
    let connect_timeout = config.connect_timeout;
    let connect = move || {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(connect_timeout);
        let mut tls = tls.clone();
        // A fresh session cache per certificate (see `RotatingHttp::client`).
        tls.resumption = Resumption::default();
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let builder = match &server_name {
            Some(name) => builder.with_server_name_resolver(
                hyper_rustls::FixedServerNameResolver::new(name.clone()),
            ),
            None => builder,
        };
        builder.enable_http1().wrap_connector(http)
    };
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(RotatingHttp::new(Arc::new(connect), slot.clone()));
    Ok(ClientBuilder::new(
        tower::util::BoxService::new(service),
        config.default_namespace.clone(),
    ))
}

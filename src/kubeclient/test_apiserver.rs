//! A small real HTTPS server for the client tests: a CA made for the test, a server
//! certificate for 127.0.0.1, client certificates checked against the CA, bearer
//! tokens checked against one expected token. It answers `/version` to an
//! authenticated request, 401 to anything else, and never answers `/stall`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig, crypto::ring};

/// A test PKI: the CA, the server's certificate, and one client certificate in kind's
/// shape (CN `system:node:<name>`, O `system:nodes`).
pub(super) struct Pki {
    pub ca_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    /// The CA, to sign further client certificates.
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    pub(super) fn new() -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "kubernetes");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);

        let server_key = KeyPair::generate().unwrap();
        let mut server =
            CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
        server
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server.signed_by(&server_key, &issuer).unwrap();

        let client_key = KeyPair::generate().unwrap();
        let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
        client
            .distinguished_name
            .push(DnType::CommonName, "system:node:kind-control-plane");
        client
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client.signed_by(&client_key, &issuer).unwrap();

        Pki {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
            issuer,
        }
    }

    /// Another client certificate and key (PEM) for `cn`, signed by the CA.
    pub(super) fn client_pair(&self, cn: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// How a request proved who it is, as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Auth {
    Token,
    ClientCert,
    None,
}

/// One request the server saw.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub at: Instant,
    pub path: String,
    pub auth: Auth,
    /// The leaf client certificate of the connection (DER), if one was presented.
    pub client_cert: Option<Vec<u8>>,
}

/// The running server; stops when dropped.
pub(super) struct TestApiserver {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    _tasks: JoinSet<()>,
}

impl TestApiserver {
    /// Serves on 127.0.0.1 with `pki`'s server certificate; `token` is the one bearer
    /// token accepted.
    pub(super) async fn start(pki: &Pki, token: &str) -> TestApiserver {
        let provider = Arc::new(ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap())
            .unwrap();
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider.clone())
            .allow_unauthenticated()
            .build()
            .unwrap();
        let chain = vec![CertificateDer::from_pem_slice(pki.server_cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(pki.server_key_pem.as_bytes()).unwrap();
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = JoinSet::new();
        let bearer = format!("Bearer {token}");
        let log = seen.clone();
        // The accept loop; each connection is served in the same set, so dropping the
        // server stops them all.
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let bearer = bearer.clone();
                let log = log.clone();
                conns.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let client_cert = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| c.to_vec());
                    let has_cert = client_cert.is_some();
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let auth = if has_cert {
                            Auth::ClientCert
                        } else if req
                            .headers()
                            .get("authorization")
                            .is_some_and(|v| v == bearer.as_str())
                        {
                            Auth::Token
                        } else {
                            Auth::None
                        };
                        let path = req.uri().path().to_string();
                        log.lock().unwrap().push(Seen {
                            at: Instant::now(),
                            path: path.clone(),
                            auth: auth.clone(),
                            client_cert: client_cert.clone(),
                        });
                        async move { Ok::<_, std::convert::Infallible>(answer(&path, &auth).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        TestApiserver {
            url,
            seen,
            _tasks: tasks,
        }
    }

    pub(super) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn answer(path: &str, auth: &Auth) -> Response<Full<Bytes>> {
    let json = |status: StatusCode, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    };
    if *auth == Auth::None {
        return json(
            StatusCode::UNAUTHORIZED,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#.into(),
        );
    }
    match path {
        "/version" => json(
            StatusCode::OK,
            r#"{"major":"1","minor":"33","gitVersion":"v1.33.1","gitCommit":"test","gitTreeState":"clean","buildDate":"2025-05-15T00:00:00Z","goVersion":"go1.24.2","compiler":"gc","platform":"linux/amd64"}"#.into(),
        ),
        "/stall" => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            json(StatusCode::OK, "{}".into())
        }
        _ => json(
            StatusCode::NOT_FOUND,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"NotFound","code":404}"#.into(),
        ),
    }
}

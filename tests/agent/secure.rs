//! Clients of oxlet's secure port for tests and benches: a CA for client
//! certificates, a TLS client that trusts oxlet's self-signed pair, WebSocket channel
//! streams (`v4.channel.k8s.io`, as kubectl speaks them) and exec over them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, crypto};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use super::{Oxlet, free_port};
use crate::common::Testbed;

/// How long the secure port may take to come up.
const START: Duration = Duration::from_secs(30);

/// A CA for client certificates.
pub struct Ca {
    pub pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    pub fn new(cn: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = p.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: rcgen::Issuer::new(p, key),
        }
    }

    /// A serving certificate for `localhost` and 127.0.0.1: (cert PEM, key PEM).
    pub fn serving(&self) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "configured-serving");
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A client certificate for `cn` in the groups `orgs`: (cert PEM, key PEM).
    pub fn client(&self, cn: &str, orgs: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A TLS client of oxlet's secure port: trusts the self-signed pair oxlet made,
/// and presents `cert` when given.
pub struct Client {
    pub port: u16,
    config: Arc<ClientConfig>,
}

impl Client {
    pub fn new(ox: &Oxlet, port: u16, cert: Option<&(String, String)>) -> Client {
        let serving = std::fs::read(ox.root.join("pki/kubelet.crt")).unwrap();
        Client::trusting(&serving, port, cert)
    }

    /// A client that trusts the CA certificates in `trusted` (PEM).
    pub fn trusting(trusted: &[u8], port: u16, cert: Option<&(String, String)>) -> Client {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(trusted) {
            roots.add(c.unwrap()).unwrap();
        }
        let b = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match cert {
            Some((c, k)) => {
                let chain = CertificateDer::pem_slice_iter(c.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                b.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(k.as_bytes()).unwrap())
                    .unwrap()
            }
            None => b.with_no_client_auth(),
        };
        Client {
            port,
            config: Arc::new(config),
        }
    }

    /// A client that takes any serving certificate, presenting none: anonymous, as
    /// curl -k is (for the `/debug/*` views of an oxlet that runs the flag defaults).
    pub fn any_server(port: u16) -> Client {
        let provider = Arc::new(crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
            .with_no_client_auth();
        Client {
            port,
            config: Arc::new(config),
        }
    }

    pub async fn connect(
        &self,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        // As Go's clients (kubectl, the apiserver): no Nagle delay.
        tcp.set_nodelay(true)?;
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
    }

    /// A request with extra header lines; (status, body). HTTP/1.0, so the body
    /// ends with the connection.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &str,
    ) -> std::io::Result<(u16, String)> {
        let (code, body) = self.request_bytes(method, path, headers).await?;
        Ok((code, String::from_utf8_lossy(&body).into_owned()))
    }

    /// As [`request`](Self::request), the body as bytes (a binary answer).
    pub async fn request_bytes(
        &self,
        method: &str,
        path: &str,
        headers: &str,
    ) -> std::io::Result<(u16, Vec<u8>)> {
        let mut s = self.connect().await?;
        s.write_all(
            format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\n{headers}\r\n").as_bytes(),
        )
        .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        let split = buf.windows(4).position(|w| w == b"\r\n\r\n");
        let (head, body) = match split {
            Some(i) => (&buf[..i], buf[i + 4..].to_vec()),
            None => (&buf[..], Vec::new()),
        };
        let code = String::from_utf8_lossy(head)
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        Ok((code, body))
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        self.request("GET", path, "").await.unwrap()
    }
}

/// Takes any serving certificate (its signatures still checked): for a test's GET of
/// the `/debug/*` views, where who serves is not what is tested.
#[derive(Debug)]
struct AnyServer(Arc<crypto::CryptoProvider>);

impl tokio_rustls::rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: tokio_rustls::rustls::pki_types::UnixTime,
    ) -> Result<tokio_rustls::rustls::client::danger::ServerCertVerified, tokio_rustls::rustls::Error>
    {
        Ok(tokio_rustls::rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &tokio_rustls::rustls::DigitallySignedStruct,
    ) -> Result<
        tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
        tokio_rustls::rustls::Error,
    > {
        crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<tokio_rustls::rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Starts oxlet with its secure port on a free port and `flags`; returns the port.
pub fn start_secure(bed: &Testbed, flags: &[&str]) -> (Oxlet, u16) {
    let port = free_port();
    let mut args = vec![format!("--port={port}")];
    args.extend(flags.iter().map(std::string::ToString::to_string));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    (Oxlet::start(bed, &refs), port)
}

pub async fn wait_serving(client: &Client) {
    let t = Instant::now();
    while client.connect().await.is_err() {
        assert!(t.elapsed() < START, "the secure port never came up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads `from` into `seen` until it holds `want`; the stream must not end first.
pub async fn read_until(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    seen: &mut String,
    want: &str,
) {
    let mut buf = [0u8; 4096];
    while !seen.contains(want) {
        let n = tokio::time::timeout(Duration::from_secs(10), from.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{want:?} did not come: {seen:?}"))
            .unwrap();
        assert!(n > 0, "the stream ended before {want:?}: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

/// What one exec over the WebSocket channel protocol returned.
#[derive(Debug, Default)]
pub struct ExecResult {
    pub stdout: String,
    pub stderr: String,
    /// The error channel's Status document, if one came.
    pub status: Option<serde_json::Value>,
}

pub type ChannelSocket =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// A WebSocket to `path` speaking `v4.channel.k8s.io`, which the server must accept.
pub async fn channel_socket(client: &Client, path: &str) -> ChannelSocket {
    let url = format!("wss://localhost:{}{path}", client.port);
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "v4.channel.k8s.io".parse().unwrap(),
    );
    let tls = client.connect().await.unwrap();
    let (ws, resp) = tokio_tungstenite::client_async(req, tls)
        .await
        .expect("websocket upgrade");
    assert_eq!(
        resp.headers()
            .get("Sec-WebSocket-Protocol")
            .map(|v| v.to_str().unwrap()),
        Some("v4.channel.k8s.io")
    );
    ws
}

/// Runs `cmd` in the pod's `main` container over `v4.channel.k8s.io` as anonymous.
pub async fn exec_ws(port: u16, ox: &Oxlet, pod: &str, cmd: &[&str]) -> ExecResult {
    let client = Client::new(ox, port, None);
    let mut query: Vec<String> = cmd
        .iter()
        .map(|c| format!("command={}", percent(c)))
        .collect();
    query.extend(["output=1".into(), "error=1".into()]);
    let path = format!("/exec/default/{pod}/main?{}", query.join("&"));
    let mut ws = channel_socket(&client, &path).await;
    let mut out = ExecResult::default();
    while let Some(msg) = tokio::time::timeout(Duration::from_secs(20), ws.next())
        .await
        .unwrap()
    {
        let Ok(Message::Binary(data)) = msg else {
            continue;
        };
        let Some((&channel, rest)) = data.split_first() else {
            continue;
        };
        let text = String::from_utf8_lossy(rest).into_owned();
        match channel {
            1 => out.stdout.push_str(&text),
            2 => out.stderr.push_str(&text),
            3 if !rest.is_empty() => out.status = serde_json::from_slice(rest).ok(),
            _ => {}
        }
    }
    let _ = ws.close(None).await;
    out
}

pub fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

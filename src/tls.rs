//! TLS for kubelet's own HTTPS checks: httpGet probes and lifecycle hooks with
//! `scheme: HTTPS`.
//!
//! kubelet dials these with `InsecureSkipVerify`: a pod's serving certificate is
//! usually self-signed or issued for a name other than the pod IP, and a probe asks
//! "does it answer?", not "is it who it says?". oxlet does the same: the handshake
//! is real (so a plain-HTTP server on an HTTPS probe fails, as in kubelet), but the
//! certificate chain and name are not checked. [`connect_verified`] is the other
//! kind, for the manifest URL: Go's default client verifies against the system's
//! trusted roots, and so does kubelet's HTTP source.

use std::io;
use std::sync::{Arc, OnceLock};

use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::crypto::{self, CryptoProvider};
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// The handshake-signature half of a rustls certificate verifier whose `self.0` is the
/// crypto provider: the signatures are checked as rustls' own verifiers check them,
/// whatever the verifier decides about the certificate itself. Server and client
/// verifiers are different traits with these three methods alike.
macro_rules! handshake_signatures_checked_by_provider {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
            dss: &tokio_rustls::rustls::DigitallySignedStruct,
        ) -> Result<
            tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
            tokio_rustls::rustls::Error,
        > {
            tokio_rustls::rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
            dss: &tokio_rustls::rustls::DigitallySignedStruct,
        ) -> Result<
            tokio_rustls::rustls::client::danger::HandshakeSignatureValid,
            tokio_rustls::rustls::Error,
        > {
            tokio_rustls::rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<tokio_rustls::rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    };
}
pub(crate) use handshake_signatures_checked_by_provider;

/// Accepts any server certificate (kubelet's `InsecureSkipVerify`), while still
/// checking that the handshake signatures are valid for the certificate presented.
#[derive(Debug)]
struct SkipVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    handshake_signatures_checked_by_provider!();
}

/// One client configuration for every check, built on first use.
fn connector() -> TlsConnector {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let provider = Arc::new(crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SkipVerify(provider)))
            .with_no_client_auth();
        Arc::new(config)
    });
    TlsConnector::from(config.clone())
}

/// The TLS handshake over `tcp`, sending `host` as SNI when it is a DNS name (an IP
/// address is sent as no SNI, as Go does).
pub(crate) async fn connect(tcp: TcpStream, host: &str) -> io::Result<TlsStream<TcpStream>> {
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    connector().connect(name, tcp).await
}

/// Where Go looks for the system's trusted roots on Linux, first found wins.
const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// A verifying client configuration, built on first use from the first system
/// bundle found (none found: no roots, so every handshake fails as untrusted).
fn verified_connector() -> TlsConnector {
    use tokio_rustls::rustls::RootCertStore;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        if let Some(bundle) = SYSTEM_ROOTS
            .iter()
            .find(|p| std::path::Path::new(p).is_file())
            && let Ok(certs) = CertificateDer::pem_file_iter(bundle)
        {
            roots.add_parsable_certificates(certs.flatten());
        }
        let provider = Arc::new(crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    });
    TlsConnector::from(config.clone())
}

/// The TLS handshake over `tcp` with the server's chain and name verified against
/// the system's trusted roots.
pub(crate) async fn connect_verified(
    tcp: TcpStream,
    host: &str,
) -> io::Result<TlsStream<TcpStream>> {
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    verified_connector().connect(name, tcp).await
}

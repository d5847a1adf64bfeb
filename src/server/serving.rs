//! The secure port's TLS and who a client is (kubelet's `--tls-cert-file` and
//! `--tls-private-key-file`, or the self-signed pair it makes in `--cert-dir`; its x509
//! authenticator over `--client-ca-file`).
//!
//! Without a configured pair, kubelet makes a CA `<host>-ca@<unix time>` and a serving
//! certificate `<host>@<unix time>` for the host name, `localhost`, 127.0.0.1 and the
//! node's addresses, valid a year, and writes both certificates (the serving one first)
//! to `kubelet.crt` and the key to `kubelet.key`. A pair already there is used as it is.
//! The key is readable by root alone.
//!
//! With `serverTLSBootstrap` no pair is made: the slot starts empty (or with the
//! configured pair) and the serving certificate manager fills it with an issued
//! certificate; until then handshakes fail, as kubelet's do.

use crate::locks::ReadWriteLocked as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::sync::RwLock;
use tokio_rustls::rustls::DistinguishedName;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::server::danger::{ClientCertVerified, ClientCertVerifier};

use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{RootCertStore, ServerConfig, crypto};

use crate::options::{Serving, TlsVersion};

/// The self-signed pair's file names in the cert dir (kubelet's).
pub(crate) const SELF_SIGNED_CERT: &str = "kubelet.crt";
pub(crate) const SELF_SIGNED_KEY: &str = "kubelet.key";

/// A serving certificate chain and its key, as PEM.
#[derive(Clone)]
pub(crate) struct ServingPair {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

/// Why the secure port cannot serve: names the file or setting and the reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServingError {
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error("cannot make the self-signed serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ServingError + '_ {
    move |source| ServingError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The configured pair (`tlsCertFile`, `tlsPrivateKeyFile`).
pub(crate) fn load_pair(cert: &Path, key: &Path) -> Result<ServingPair, ServingError> {
    Ok(ServingPair {
        cert_pem: std::fs::read(cert).map_err(io_err(cert))?,
        key_pem: std::fs::read(key).map_err(io_err(key))?,
    })
}

/// The self-signed pair in `cert_dir`, made first when either file is missing.
pub(crate) fn self_signed_pair(
    cert_dir: &Path,
    host: &str,
    ips: &[IpAddr],
) -> Result<ServingPair, ServingError> {
    let (cert, key) = (
        cert_dir.join(SELF_SIGNED_CERT),
        cert_dir.join(SELF_SIGNED_KEY),
    );
    if cert.is_file() && key.is_file() {
        return load_pair(&cert, &key);
    }
    let pair = make_self_signed(host, ips)?;
    std::fs::create_dir_all(cert_dir).map_err(io_err(cert_dir))?;
    write_file(&cert, &pair.cert_pem, 0o644)?;
    write_file(&key, &pair.key_pem, 0o600)?;
    tracing::info!(cert = %cert.display(), key = %key.display(), host, "made a self-signed serving certificate, as kubelet does without tlsCertFile");
    Ok(pair)
}

/// Writes `bytes` to a new file with `mode` (replacing one there).
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ServingError> {
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(bytes).map_err(io_err(path))
}

/// kubelet's `GenerateSelfSignedCertKey`: a CA and a serving certificate it signs.
fn make_self_signed(host: &str, ips: &[IpAddr]) -> Result<ServingPair, ServingError> {
    let now = jiff::Timestamp::now();
    let date = now.to_zoned(jiff::tz::TimeZone::UTC).date();
    let (y, m, d) = (
        i32::from(date.year()),
        date.month().unsigned_abs(),
        date.day().min(28).unsigned_abs(),
    );
    let valid = |p: &mut rcgen::CertificateParams| {
        p.not_before = rcgen::date_time_ymd(y, m, d);
        p.not_after = rcgen::date_time_ymd(y + 1, m, d);
    };
    let stamp = now.as_second();
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{host}-ca@{stamp}"));
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    valid(&mut ca);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate()?;
    let mut names = vec![host.to_string(), "localhost".to_string()];
    names.extend(
        std::iter::once(IpAddr::from([127, 0, 0, 1]))
            .chain(ips.iter().copied())
            .map(|ip| ip.to_string()),
    );
    let mut leaf = rcgen::CertificateParams::new(names)?;
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{host}@{stamp}"));
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    valid(&mut leaf);
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(ServingPair {
        cert_pem: format!("{}{}", cert.pem(), ca_cert.pem()).into_bytes(),
        key_pem: key.serialize_pem().into_bytes(),
    })
}

/// The server's TLS set-up: `pair` (None: nothing to present until the slot is
/// filled), and with `client_ca` a client certificate requested but not verified in
/// the handshake (kubelet's `tls.RequestClientCert`): the authenticator verifies it
/// against the current CAs, so a certificate from another CA is a 401, not a failed
/// handshake. A client without one still connects (anonymous, or a bearer token).
pub(crate) fn server_config(
    pair: Option<&ServingPair>,
    request_client_cert: bool,
    choice: &TlsChoice,
) -> Result<(Arc<ServerConfig>, Arc<ServingSlot>), ServingError> {
    let invalid = |what: &str, reason: String| ServingError::Invalid {
        what: what.to_string(),
        reason,
    };
    let mut provider = crypto::ring::default_provider();
    // Go's servers choose by their own preference, AES-128-GCM first where the CPU
    // has AES instructions (crypto/tls since Go 1.17); so does this one.
    provider
        .cipher_suites
        .sort_by_key(|s| !format!("{:?}", s.suite()).contains("AES_128_GCM"));
    if !choice.cipher_suites.is_empty() {
        // Go configures only TLS 1.2's suites; TLS 1.3's are always on.
        provider.cipher_suites.retain(|s| {
            s.version() == &tokio_rustls::rustls::version::TLS13
                || choice
                    .cipher_suites
                    .iter()
                    .any(|n| same_suite(n, s.suite()))
        });
    }
    let provider = Arc::new(provider);
    let versions: &[&tokio_rustls::rustls::SupportedProtocolVersion] = match choice.min_version {
        Some(TlsVersion::Tls13) => &[&tokio_rustls::rustls::version::TLS13],
        _ => tokio_rustls::rustls::DEFAULT_VERSIONS,
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| invalid("tlsCipherSuites", e.to_string()))?;
    let builder = match request_client_cert {
        true => builder.with_client_cert_verifier(Arc::new(RequestClientCert(provider.clone()))),
        false => builder.with_no_client_auth(),
    };
    let current = match pair {
        Some(pair) => Some(Presented {
            key: certified_key(pair, &provider)?,
            not_after: None,
        }),
        None => None,
    };
    let slot = Arc::new(ServingSlot {
        current: RwLock::new(current),
        provider,
    });
    let mut config = builder.with_cert_resolver(slot.clone());
    config.ignore_client_order = true;
    Ok((Arc::new(config), slot))
}

/// `pair` as rustls presents it: the chain and a signing key, checked to match.
fn certified_key(
    pair: &ServingPair,
    provider: &crypto::CryptoProvider,
) -> Result<Arc<CertifiedKey>, ServingError> {
    let invalid = |what: &str, reason: String| ServingError::Invalid {
        what: what.to_string(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&pair.cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid("tlsCertFile", e.to_string()))?;
    if certs.is_empty() {
        return Err(invalid("tlsCertFile", "no PEM CERTIFICATE".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(&pair.key_pem)
        .map_err(|e| invalid("tlsPrivateKeyFile", e.to_string()))?;
    let certified = CertifiedKey::from_der(certs, key, provider)
        .map_err(|e| invalid("tlsCertFile", e.to_string()))?;
    Ok(Arc::new(certified))
}

/// The serving certificate handshakes present, replaceable while serving: kubelet
/// reloads `tlsCertFile`/`tlsPrivateKeyFile` when they change on disk
/// (`ReloadKubeletServerCertificateFile`), and a rotated certificate goes in the same way.
#[derive(Debug)]
pub(crate) struct ServingSlot {
    current: RwLock<Option<Presented>>,
    provider: Arc<crypto::CryptoProvider>,
}

/// What the slot holds: the chain and key, and for an issued certificate the end of
/// its life, after which it is no longer presented.
#[derive(Debug, Clone)]
struct Presented {
    key: Arc<CertifiedKey>,
    not_after: Option<std::time::SystemTime>,
}

impl ServingSlot {
    /// Presents `pair` from the next handshake on; a pair that does not load (or whose
    /// key does not match) is refused and the current one stays.
    pub(crate) fn replace(&self, pair: &ServingPair) -> Result<(), ServingError> {
        self.put(pair, None)
    }

    /// As [`replace`](Self::replace), for a certificate the serving certificate manager
    /// obtained (`pem`: the certificate, then its key): once it expires it is no
    /// longer presented, as client-go's `Current` returns nothing for an expired one.
    pub(crate) fn replace_issued(&self, pem: &[u8]) -> Result<(), ServingError> {
        let leaf = crate::kubeclient::cert_info(pem);
        let not_after = leaf
            .map(|c| c.not_after.into())
            .ok_or_else(|| ServingError::Invalid {
                what: "serving certificate".into(),
                reason: "no readable PEM CERTIFICATE".into(),
            })?;
        let pair = ServingPair {
            cert_pem: pem.to_vec(),
            key_pem: pem.to_vec(),
        };
        self.put(&pair, Some(not_after))
    }

    fn put(
        &self,
        pair: &ServingPair,
        not_after: Option<std::time::SystemTime>,
    ) -> Result<(), ServingError> {
        let key = certified_key(pair, &self.provider)?;
        *self.current.write_locked() = Some(Presented { key, not_after });
        Ok(())
    }

    /// The certificate to present now, if any.
    fn current(&self) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read_locked().clone()?;
        match current.not_after {
            Some(end) if end <= std::time::SystemTime::now() => None,
            _ => Some(current.key),
        }
    }
}

impl ResolvesServerCert for ServingSlot {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current();
        if current.is_none() {
            tracing::debug!(
                "no serving certificate available for the kubelet (serverTLSBootstrap: none issued yet, or it expired); refusing the handshake"
            );
        }
        current
    }
}

/// What a pair's files look like on disk, to notice a change without reading them.
fn stamp(cert: &Path, key: &Path) -> Option<[(u64, i64, u64); 2]> {
    use std::os::unix::fs::MetadataExt as _;
    let of = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.ino(), m.mtime_nsec() + m.mtime() * 1_000_000_000, m.len()))
    };
    Some([of(cert)?, of(key)?])
}

/// Reloads the configured pair into `slot` whenever its files change, checked every
/// `every`, until cancelled. A pair that does not load is logged and the old one kept.
/// The files are looked at now, when the task is made, so a change made before it
/// first runs is not missed.
pub(crate) fn reload_pair(
    slot: Arc<ServingSlot>,
    cert: PathBuf,
    key: PathBuf,
    every: std::time::Duration,
    cancel: tokio_util::sync::CancellationToken,
) -> impl Future<Output = ()> + Send {
    let seen = stamp(&cert, &key);
    watch_pair(slot, cert, key, every, cancel, seen)
}

async fn watch_pair(
    slot: Arc<ServingSlot>,
    cert: PathBuf,
    key: PathBuf,
    every: std::time::Duration,
    cancel: tokio_util::sync::CancellationToken,
    mut seen: Option<[(u64, i64, u64); 2]>,
) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let now = stamp(&cert, &key);
        if now.is_none() || now == seen {
            continue;
        }
        seen = now;
        match load_pair(&cert, &key).and_then(|p| slot.replace(&p)) {
            Ok(()) => {
                tracing::info!(cert = %cert.display(), "reloaded the serving certificate: its files changed");
            }
            Err(e) => {
                tracing::warn!(cert = %cert.display(), error = %e, "the serving certificate's files changed but do not load; keeping the current one");
            }
        }
    }
}

/// `tlsMinVersion` and `tlsCipherSuites` (Go's names, already checked).
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsChoice {
    pub min_version: Option<TlsVersion>,
    pub cipher_suites: Vec<String>,
}

/// Whether Go's suite name `go` is rustls' `suite` (Go drops TLS 1.3's `13` and
/// has short aliases for the ChaCha20 suites).
fn same_suite(go: &str, suite: tokio_rustls::rustls::CipherSuite) -> bool {
    let ours = format!("{suite:?}").replace("TLS13_", "TLS_");
    ours == go || ours == format!("{go}_SHA256")
}

/// The acceptor for `serving`: its configured pair, or the self-signed one in
/// `cert_dir` for `host` and `ips` (none with `serverTLSBootstrap`: the slot waits
/// for an issued one), asking for client certificates when `clientCAFile` is set;
/// and the CAs those are verified against, read from that file.
pub(crate) fn acceptor(
    serving: &Serving,
    cert_dir: &Path,
    host: &str,
    ips: &[IpAddr],
) -> Result<(Tls, Arc<ServingSlot>), ServingError> {
    let pair = match (&serving.tls_cert_file, &serving.tls_private_key_file) {
        (Some(cert), Some(key)) => Some(load_pair(cert, key)?),
        (None, None) if serving.server_tls_bootstrap => None,
        (None, None) => Some(self_signed_pair(cert_dir, host, ips)?),
        _ => {
            return Err(ServingError::Invalid {
                what: "tlsCertFile/tlsPrivateKeyFile".into(),
                reason: "both or neither must be set".into(),
            });
        }
    };
    let client_cas = match &serving.client_ca_file {
        Some(p) => Some(Arc::new(ClientCas::from_file(p)?)),
        None => None,
    };
    let choice = TlsChoice {
        min_version: serving.tls_min_version,
        cipher_suites: serving.tls_cipher_suites.clone(),
    };
    let (config, slot) = server_config(pair.as_ref(), client_cas.is_some(), &choice)?;
    let tls = Tls {
        acceptor: tokio_rustls::TlsAcceptor::from(config),
        client_cas,
    };
    Ok((tls, slot))
}

/// The secure port's TLS: the acceptor, and the client CAs (`clientCAFile`) a
/// client certificate is verified against after the handshake.
#[derive(Clone)]
pub(crate) struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub client_cas: Option<Arc<ClientCas>>,
}

/// kubelet's `tls.RequestClientCert`: asks for a client certificate and takes any
/// that parses, checking in the handshake only that the client holds its key (the
/// handshake signature). Whether the chain leads to a trusted CA is the
/// authenticator's question ([`ClientCas::verify`]), so an untrusted certificate is
/// a 401 as in kubelet. No CA names are sent as hints: they would go stale when the
/// CA file is replaced, and Go's clients send their certificate when none are named.
#[derive(Debug)]
struct RequestClientCert(Arc<crypto::CryptoProvider>);

impl ClientCertVerifier for RequestClientCert {
    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, tokio_rustls::rustls::Error> {
        // Go's handshake refuses a certificate it cannot parse; so does this one.
        for c in std::iter::once(end_entity).chain(intermediates) {
            if x509_parser::parse_x509_certificate(c.as_ref()).is_err() {
                return Err(tokio_rustls::rustls::Error::InvalidCertificate(
                    tokio_rustls::rustls::CertificateError::BadEncoding,
                ));
            }
        }
        Ok(ClientCertVerified::assertion())
    }

    crate::tls::handshake_signatures_checked_by_provider!();
}

/// Why a client certificate names no user: kubelet's x509 authenticator error
/// ("verifying certificate ... failed"), a 401 unless a bearer token authenticates.
#[derive(Debug, thiserror::Error)]
#[error("verifying certificate {subject} failed: {reason}")]
pub(crate) struct UntrustedCert {
    subject: String,
    reason: tokio_rustls::rustls::Error,
}

/// The CAs in `clientCAFile`, replaceable while serving: kubelet reads the file as
/// dynamic CA content and verifies each request's certificate against what it holds
/// now, so a replaced CA takes effect without a restart.
pub(crate) struct ClientCas {
    file: PathBuf,
    verifier: RwLock<Arc<dyn ClientCertVerifier>>,
}

impl ClientCas {
    /// The CAs in `file`, which must hold at least one PEM certificate.
    pub(crate) fn from_file(file: &Path) -> Result<ClientCas, ServingError> {
        let pem = std::fs::read(file).map_err(io_err(file))?;
        Ok(ClientCas {
            file: file.to_path_buf(),
            verifier: RwLock::new(verifier_for(&pem)?),
        })
    }

    /// The user a certificate chain (leaf first) names, when it leads to one of the
    /// current CAs with a valid signature at each step, is within its validity
    /// period and may be used for client authentication (webpki, as Go's `Verify`
    /// with `ExtKeyUsageClientAuth`). Ok(None): a trusted certificate with no CN.
    pub(crate) fn verify(
        &self,
        chain: &[CertificateDer<'_>],
    ) -> Result<Option<User>, UntrustedCert> {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return Ok(None);
        };
        let verifier = self.verifier.read_locked().clone();
        match verifier.verify_client_cert(leaf, intermediates, UnixTime::now()) {
            Ok(_) => Ok(user_of(Some(chain))),
            Err(reason) => Err(UntrustedCert {
                subject: user_of(Some(chain))
                    .map(|u| format!("CN={}", u.name))
                    .unwrap_or_default(),
                reason,
            }),
        }
    }

    /// Reads the file again; a file that does not load leaves the current CAs.
    fn reload(&self) -> Result<(), ServingError> {
        let pem = std::fs::read(&self.file).map_err(io_err(&self.file))?;
        *self.verifier.write_locked() = verifier_for(&pem)?;
        Ok(())
    }
}

/// A webpki verifier for the CA certificates in `pem`.
fn verifier_for(pem: &[u8]) -> Result<Arc<dyn ClientCertVerifier>, ServingError> {
    let invalid = |reason: String| ServingError::Invalid {
        what: "clientCAFile".into(),
        reason,
    };
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        roots
            .add(c.map_err(|e| invalid(e.to_string()))?)
            .map_err(|e| invalid(e.to_string()))?;
    }
    let provider = Arc::new(crypto::ring::default_provider());
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| invalid(e.to_string()))
}

/// Reloads `cas` whenever its file changes (checked every `every`), until cancelled.
/// A file that does not load is logged and the current CAs kept.
pub(crate) fn reload_client_cas(
    cas: Arc<ClientCas>,
    every: std::time::Duration,
    cancel: tokio_util::sync::CancellationToken,
) -> impl Future<Output = ()> + Send {
    let mut seen = stamp(&cas.file, &cas.file);
    async move {
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            let now = stamp(&cas.file, &cas.file);
            if now.is_none() || now == seen {
                continue;
            }
            seen = now;
            match cas.reload() {
                Ok(()) => {
                    tracing::info!(file = %cas.file.display(), "reloaded the client CA bundle: its file changed");
                }
                Err(e) => {
                    tracing::warn!(file = %cas.file.display(), error = %e, "the client CA file changed but does not load; keeping the current CAs");
                }
            }
        }
    }
}

/// Who a request comes from: kubelet's `user.Info`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct User {
    pub name: String,
    /// The user's UID, when the authenticator knows one (a TokenReview's answer).
    pub uid: String,
    pub groups: Vec<String>,
    /// What else the authenticator said (a service account token's pod and node).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// kubelet's x509 user conversion: a certificate names the user (its CN; Go's
/// `pkix.Name` keeps the last CN when there are several) and the groups (each O).
/// `None`: no certificate, or one with no CN. This reads names only: whether the
/// certificate is trusted is [`ClientCas::verify`]'s question.
pub(crate) fn user_of(peer: Option<&[CertificateDer<'_>]>) -> Option<User> {
    let leaf = peer?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .filter_map(|a| a.as_str().ok())
        .last()
        .filter(|n| !n.is_empty())?
        .to_string();
    let groups = (subject.iter_organization())
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    Some(User {
        name,
        groups,
        ..User::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_rustls::rustls::pki_types::ServerName;
    use tokio_rustls::rustls::{ClientConfig, SignatureScheme};

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_self_signed_pair_is_made_once_with_a_root_only_key() {
        let dir = tempfile::tempdir().unwrap();
        let pki = dir.path().join("pki");
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        let first = self_signed_pair(&pki, "node1", &[ip]).unwrap();
        assert_eq!(mode(&pki.join(SELF_SIGNED_KEY)), 0o600);
        assert_eq!(mode(&pki.join(SELF_SIGNED_CERT)), 0o644);
        let again = self_signed_pair(&pki, "node1", &[ip]).unwrap();
        assert_eq!(first.cert_pem, again.cert_pem);
        let text = String::from_utf8(first.cert_pem.clone()).unwrap();
        assert_eq!(text.matches("BEGIN CERTIFICATE").count(), 2, "leaf and CA");
        let der = CertificateDer::pem_slice_iter(&first.cert_pem)
            .next()
            .unwrap()
            .unwrap();
        let (_, leaf) = x509_parser::parse_x509_certificate(der.as_ref()).unwrap();
        let cn = leaf.subject().iter_common_name().next().unwrap();
        assert!(cn.as_str().unwrap().starts_with("node1@"));
        let sans = format!(
            "{:?}",
            leaf.subject_alternative_name().unwrap().unwrap().value
        );
        for want in ["node1", "localhost", "127.0.0.1", "10.0.0.7"] {
            assert!(
                sans.contains(want) || sans.contains("10, 0, 0, 7"),
                "{want} in {sans}"
            );
        }
        assert!(server_config(Some(&first), false, &TlsChoice::default()).is_ok());
    }

    /// The configured pair reloads when its files change; a pair that does not load
    /// is refused and the one in use stays.
    #[tokio::test]
    async fn a_changed_pair_is_presented_from_the_next_handshake() {
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = self_signed_pair(a_dir.path(), "node1", &[]).unwrap();
        let b = self_signed_pair(b_dir.path(), "node1", &[]).unwrap();
        let files = tempfile::tempdir().unwrap();
        let (cert, key) = (files.path().join("tls.crt"), files.path().join("tls.key"));
        std::fs::write(&cert, &a.cert_pem).unwrap();
        std::fs::write(&key, &a.key_pem).unwrap();
        let (server, slot) = server_config(Some(&a), false, &TlsChoice::default()).unwrap();
        assert_eq!(handshake(server.clone(), &a.cert_pem, None).await, Ok(None));
        assert!(handshake(server.clone(), &b.cert_pem, None).await.is_err());

        let cancel = tokio_util::sync::CancellationToken::new();
        let every = std::time::Duration::from_millis(20);
        let task = tokio::spawn(reload_pair(
            slot.clone(),
            cert.clone(),
            key.clone(),
            every,
            cancel.clone(),
        ));
        std::fs::write(&cert, &b.cert_pem).unwrap();
        std::fs::write(&key, &b.key_pem).unwrap();
        let t = std::time::Instant::now();
        while handshake(server.clone(), &b.cert_pem, None).await.is_err() {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(5),
                "never reloaded"
            );
            tokio::time::sleep(every).await;
        }
        // A certificate with another pair's key is refused; B stays.
        let mixed = ServingPair {
            cert_pem: a.cert_pem.clone(),
            key_pem: b.key_pem.clone(),
        };
        assert!(slot.replace(&mixed).is_err());
        std::fs::write(&cert, &a.cert_pem).unwrap();
        tokio::time::sleep(every * 5).await;
        assert_eq!(handshake(server.clone(), &b.cert_pem, None).await, Ok(None));
        cancel.cancel();
        task.await.unwrap();
    }

    /// `serverTLSBootstrap`: nothing is presented before a certificate is issued, an
    /// issued one from the next handshake on, and none once it has expired.
    #[tokio::test]
    async fn an_issued_certificate_is_presented_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let ca = self_signed_pair(dir.path(), "node1", &[]).unwrap();
        let (server, slot) = server_config(None, false, &TlsChoice::default()).unwrap();
        assert!(handshake(server.clone(), &ca.cert_pem, None).await.is_err());

        let issued = |from: i64, to: i64| {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
            let now = time::OffsetDateTime::now_utc();
            p.not_before = now + time::Duration::seconds(from);
            p.not_after = now + time::Duration::seconds(to);
            let cert = p.self_signed(&key).unwrap();
            format!("{}{}", cert.pem(), key.serialize_pem())
        };
        let good = issued(-60, 3600);
        slot.replace_issued(good.as_bytes()).unwrap();
        assert_eq!(
            handshake(server.clone(), good.as_bytes(), None).await,
            Ok(None)
        );
        assert!(slot.current().is_some());
        slot.replace_issued(issued(-120, -60).as_bytes()).unwrap();
        assert!(slot.current().is_none());
        assert!(slot.replace_issued(b"no pem").is_err());
    }

    /// One handshake over a pipe; the chain the client presented (as the server
    /// holds it), or the handshake's error.
    async fn handshake(
        server: Arc<ServerConfig>,
        server_ca: &[u8],
        client_pair: Option<(&str, &str)>,
    ) -> Result<Option<Vec<CertificateDer<'static>>>, String> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(server_ca) {
            let _ = roots.add(c.unwrap());
        }
        let provider = Arc::new(crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match client_pair {
            // Not `with_client_auth_cert`, which refuses a key that does not match:
            // the server must be the one to refuse it.
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .map(Result::unwrap)
                    .collect();
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
                let signer = crypto::ring::sign::any_supported_type(&key).unwrap();
                let certified = CertifiedKey::new(chain, signer);
                builder.with_client_cert_resolver(Arc::new(Presents(Arc::new(certified))))
            }
            None => builder.with_no_client_auth(),
        };
        let (a, b) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(server);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let serve = tokio::spawn(async move {
            let mut tls = acceptor.accept(a).await.map_err(|e| e.to_string())?;
            let chain = (tls.get_ref().1.peer_certificates())
                .map(|c| c.iter().map(|c| c.clone().into_owned()).collect());
            let _ = tls.write_all(b"ok").await;
            Ok::<_, String>(chain)
        });
        let name = ServerName::try_from("localhost").unwrap();
        if let Ok(mut tls) = connector.connect(name, b).await {
            let mut buf = [0u8; 2];
            let _ = tls.read_exact(&mut buf).await;
        }
        serve.await.unwrap()
    }

    /// A client that presents its certificate whatever the server asks.
    #[derive(Debug)]
    struct Presents(Arc<CertifiedKey>);

    impl tokio_rustls::rustls::client::ResolvesClientCert for Presents {
        fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
            Some(self.0.clone())
        }

        fn has_certs(&self) -> bool {
            true
        }
    }

    /// A test CA that signs client certificates.
    struct TestCa {
        pem: String,
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    }

    impl TestCa {
        fn new() -> TestCa {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            let pem = p.self_signed(&key).unwrap().pem();
            TestCa {
                pem,
                issuer: rcgen::Issuer::new(p, key),
            }
        }

        /// A certificate for `cn` in `org`, for `usage`, valid from `from` to `to`
        /// seconds from now: (cert PEM, key PEM).
        fn sign(
            &self,
            cn: &str,
            org: Option<&str>,
            usage: rcgen::ExtendedKeyUsagePurpose,
            (from, to): (i64, i64),
        ) -> (String, String) {
            let key = rcgen::KeyPair::generate().unwrap();
            let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name.push(rcgen::DnType::CommonName, cn);
            if let Some(o) = org {
                p.distinguished_name
                    .push(rcgen::DnType::OrganizationName, o);
            }
            p.extended_key_usages = vec![usage];
            let now = time::OffsetDateTime::now_utc();
            p.not_before = now + time::Duration::seconds(from);
            p.not_after = now + time::Duration::seconds(to);
            let cert = p.signed_by(&key, &self.issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        }

        fn client(&self, cn: &str, org: Option<&str>) -> (String, String) {
            let usage = rcgen::ExtendedKeyUsagePurpose::ClientAuth;
            self.sign(cn, org, usage, (-60, 3600))
        }
    }

    fn user(name: &str, groups: &[&str]) -> User {
        User {
            name: name.into(),
            groups: groups.iter().map(ToString::to_string).collect(),
            ..User::default()
        }
    }

    /// kubelet's `RequestClientCert`: every well-formed certificate gets through
    /// the handshake, and the authenticator's verification against the CA file
    /// decides (a 401 for the untrusted, not a failed handshake); the file reloads.
    #[tokio::test]
    async fn client_certificates_are_verified_after_the_handshake() {
        let dir = tempfile::tempdir().unwrap();
        let pair = self_signed_pair(dir.path(), "node1", &[]).unwrap();
        let (ca, other_ca) = (TestCa::new(), TestCa::new());
        let ca_file = dir.path().join("client-ca.crt");
        std::fs::write(&ca_file, &ca.pem).unwrap();
        let cas = ClientCas::from_file(&ca_file).unwrap();
        let (server, _) = server_config(Some(&pair), true, &TlsChoice::default()).unwrap();
        let chain = async |pair: Option<&(String, String)>| {
            let pair = pair.map(|(c, k)| (c.as_str(), k.as_str()));
            handshake(server.clone(), &pair_pem(&dir), pair).await
        };
        let alice = ca.client("alice", Some("dev"));
        let alice_chain = chain(Some(&alice)).await.unwrap().unwrap();
        assert_eq!(
            cas.verify(&alice_chain).unwrap(),
            Some(user("alice", &["dev"]))
        );
        // No certificate: the connection stands, with no user (anonymous or a token).
        assert_eq!(chain(None).await, Ok(None));
        // Another CA's certificate connects, and is not trusted.
        let mallory = other_ca.client("mallory", Some("system:masters"));
        let mallory_chain = chain(Some(&mallory)).await.unwrap().unwrap();
        let e = cas.verify(&mallory_chain).unwrap_err().to_string();
        assert!(
            e.starts_with("verifying certificate CN=mallory failed"),
            "{e}"
        );
        // Expired, not yet valid, or not for client auth: not trusted either.
        let server_auth = rcgen::ExtendedKeyUsagePurpose::ServerAuth;
        let client_auth = rcgen::ExtendedKeyUsagePurpose::ClientAuth;
        for (cert, why) in [
            (
                ca.sign("old", None, client_auth.clone(), (-7200, -3600)),
                "expired",
            ),
            (
                ca.sign("early", None, client_auth, (3600, 7200)),
                "not yet valid",
            ),
            (
                ca.sign("srv", None, server_auth, (-60, 3600)),
                "serverAuth only",
            ),
        ] {
            let c = chain(Some(&cert)).await.unwrap().unwrap();
            assert!(cas.verify(&c).is_err(), "{why} was trusted");
        }
        // A certificate with someone else's key does not get through the handshake.
        let stolen = (alice.0.clone(), mallory.1.clone());
        assert!(chain(Some(&stolen)).await.is_err());

        // The CA file replaced: the new CA's certificates are trusted, the old one's
        // no longer; a file that does not load keeps the CAs in use.
        std::fs::write(&ca_file, &other_ca.pem).unwrap();
        cas.reload().unwrap();
        assert!(cas.verify(&alice_chain).is_err());
        assert!(cas.verify(&mallory_chain).unwrap().is_some());
        std::fs::write(&ca_file, "not pem").unwrap();
        assert!(cas.reload().is_err());
        assert!(cas.verify(&mallory_chain).unwrap().is_some());
    }

    fn pair_pem(dir: &tempfile::TempDir) -> Vec<u8> {
        std::fs::read(dir.path().join(SELF_SIGNED_CERT)).unwrap()
    }

    /// The reload task notices a replaced CA file by itself.
    #[tokio::test]
    async fn the_client_ca_file_reloads_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (TestCa::new(), TestCa::new());
        let file = dir.path().join("ca.crt");
        std::fs::write(&file, &a.pem).unwrap();
        let cas = Arc::new(ClientCas::from_file(&file).unwrap());
        let der = |pem: &str| {
            vec![
                CertificateDer::from_pem_slice(pem.as_bytes())
                    .unwrap()
                    .into_owned(),
            ]
        };
        let of_b = der(&b.client("bob", None).0);
        assert!(cas.verify(&of_b).is_err());
        let cancel = tokio_util::sync::CancellationToken::new();
        let every = std::time::Duration::from_millis(20);
        let task = tokio::spawn(reload_client_cas(cas.clone(), every, cancel.clone()));
        std::fs::write(&file, &b.pem).unwrap();
        let t = std::time::Instant::now();
        while cas.verify(&of_b).is_err() {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(5),
                "never reloaded"
            );
            tokio::time::sleep(every).await;
        }
        cancel.cancel();
        task.await.unwrap();
    }

    /// Go's `pkix.Name` keeps the last CN of a subject with several; so does the
    /// x509 user. (rcgen writes one value per name type, so the second CN is an O
    /// whose type is rewritten to CN: the same length, still DER.)
    #[test]
    fn the_user_is_the_last_common_name() {
        let ca = TestCa::new();
        let (pem, _) = ca.client("first", Some("second"));
        let mut der = CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec();
        let org = [0x06, 0x03, 0x55, 0x04, 0x0a];
        let at = der.windows(5).position(|w| w == org).unwrap();
        der[at + 4] = 0x03;
        let certs = [CertificateDer::from(der)];
        assert_eq!(user_of(Some(&certs)), Some(user("second", &[])));
        let (pem, _) = ca.client("", Some("g"));
        let certs = [CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()];
        assert_eq!(user_of(Some(&certs)), None, "an empty CN names no user");
    }

    #[test]
    fn a_bad_pair_or_ca_names_the_setting() {
        let bad = ServingPair {
            cert_pem: b"nothing".to_vec(),
            key_pem: b"nothing".to_vec(),
        };
        let e = server_config(Some(&bad), false, &TlsChoice::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("tlsCertFile") || e.starts_with("tlsPrivateKeyFile"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ca.crt");
        std::fs::write(
            &file,
            "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = ClientCas::from_file(&file).err().unwrap().to_string();
        assert!(e.starts_with("clientCAFile"), "{e}");
    }
}

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
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;

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
/// filled), and with `client_ca` (PEM) client certificates verified against it; a
/// client without one still connects (anonymous, or a bearer token), as kubelet's
/// `tls.VerifyClientCertIfGiven`.
pub(crate) fn server_config(
    pair: Option<&ServingPair>,
    client_ca: Option<&[u8]>,
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
    let builder = match client_ca {
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem) {
                let c = c.map_err(|e| invalid("clientCAFile", e.to_string()))?;
                roots
                    .add(c)
                    .map_err(|e| invalid("clientCAFile", e.to_string()))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| invalid("clientCAFile", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
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
/// for an issued one), with client certificates checked against `clientCAFile` when
/// set.
pub(crate) fn acceptor(
    serving: &Serving,
    cert_dir: &Path,
    host: &str,
    ips: &[IpAddr],
) -> Result<(tokio_rustls::TlsAcceptor, Arc<ServingSlot>), ServingError> {
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
    let ca = match &serving.client_ca_file {
        Some(p) => Some(std::fs::read(p).map_err(io_err(p))?),
        None => None,
    };
    let choice = TlsChoice {
        min_version: serving.tls_min_version,
        cipher_suites: serving.tls_cipher_suites.clone(),
    };
    let (config, slot) = server_config(pair.as_ref(), ca.as_deref(), &choice)?;
    Ok((tokio_rustls::TlsAcceptor::from(config), slot))
}

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct User {
    pub name: String,
    pub groups: Vec<String>,
}

/// kubelet's x509 authenticator: a client certificate the handshake verified names
/// the user (its CN) and the groups (each O). `None`: no certificate.
pub(crate) fn user_of(peer: Option<&[CertificateDer<'_>]>) -> Option<User> {
    let leaf = peer?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .find_map(|a| a.as_str().ok())?
        .to_string();
    let groups = (subject.iter_organization())
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    Some(User { name, groups })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_rustls::rustls::ClientConfig;
    use tokio_rustls::rustls::pki_types::ServerName;

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
        assert!(server_config(Some(&first), None, &TlsChoice::default()).is_ok());
    }

    /// A CA and a client certificate it signs for `cn` in groups `orgs`.
    fn client(cn: &str, orgs: &[&str]) -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        let cert = p.signed_by(&key, &issuer).unwrap();
        (ca_cert.pem(), cert.pem(), key.serialize_pem())
    }

    /// One handshake over a pipe; the user the server sees, or the handshake's error.
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
        let (server, slot) = server_config(Some(&a), None, &TlsChoice::default()).unwrap();
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
        let (server, slot) = server_config(None, None, &TlsChoice::default()).unwrap();
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

    async fn handshake(
        server: Arc<ServerConfig>,
        server_ca: &[u8],
        client_pair: Option<(&str, &str)>,
    ) -> Result<Option<User>, String> {
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
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    CertificateDer::pem_slice_iter(cert.as_bytes())
                        .map(Result::unwrap)
                        .collect(),
                    PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
                )
                .unwrap(),
            None => builder.with_no_client_auth(),
        };
        let (a, b) = tokio::io::duplex(64 * 1024);
        let acceptor = tokio_rustls::TlsAcceptor::from(server);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let serve = tokio::spawn(async move {
            let mut tls = acceptor.accept(a).await.map_err(|e| e.to_string())?;
            let user = user_of(tls.get_ref().1.peer_certificates());
            let _ = tls.write_all(b"ok").await;
            Ok::<_, String>(user)
        });
        let name = ServerName::try_from("localhost").unwrap();
        if let Ok(mut tls) = connector.connect(name, b).await {
            let mut buf = [0u8; 2];
            let _ = tls.read_exact(&mut buf).await;
        }
        serve.await.unwrap()
    }

    #[tokio::test]
    async fn client_certificates_name_the_user_and_anonymous_still_connects() {
        let dir = tempfile::tempdir().unwrap();
        let pair = self_signed_pair(dir.path(), "node1", &[]).unwrap();
        // (rcgen keeps one value per name type, so one group here.)
        let (ca, cert, key) = client("alice", &["dev"]);
        let (server, _) =
            server_config(Some(&pair), Some(ca.as_bytes()), &TlsChoice::default()).unwrap();
        let user = handshake(server.clone(), &pair.cert_pem, Some((&cert, &key))).await;
        assert_eq!(
            user,
            Ok(Some(User {
                name: "alice".into(),
                groups: vec!["dev".into()],
            }))
        );
        // No certificate: the connection stands, with no user (anonymous or a token).
        assert_eq!(
            handshake(server.clone(), &pair.cert_pem, None).await,
            Ok(None)
        );
        // A certificate from another CA is refused in the handshake.
        let (_, other_cert, other_key) = client("mallory", &[]);
        let refused = handshake(server, &pair.cert_pem, Some((&other_cert, &other_key))).await;
        assert!(refused.is_err(), "{refused:?}");
    }

    #[test]
    fn a_bad_pair_or_ca_names_the_setting() {
        let bad = ServingPair {
            cert_pem: b"nothing".to_vec(),
            key_pem: b"nothing".to_vec(),
        };
        let e = server_config(Some(&bad), None, &TlsChoice::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("tlsCertFile") || e.starts_with("tlsPrivateKeyFile"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let good = self_signed_pair(dir.path(), "n", &[]).unwrap();
        let e = server_config(
            Some(&good),
            Some(b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"),
            &TlsChoice::default(),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.starts_with("clientCAFile"), "{e}");
    }
}

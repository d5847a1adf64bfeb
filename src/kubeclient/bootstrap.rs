//! `--bootstrap-kubeconfig`: kubelet's `LoadClientCert` (`certificate/bootstrap`).
//! When `--kubeconfig` is missing, unreadable or its client certificate has expired,
//! a node key and CSR are made and sent with the bootstrap credentials; the issued
//! certificate goes into the cert dir's store and a new `--kubeconfig` is written that
//! names the store's current pair, as kubelet writes it. A valid kubeconfig is used as
//! it is, without any request.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;

use super::KubeconfigError;
use super::cert_store::{CertStore, StoreError};
use super::csr::{self, CsrError, Signer, Template};
use super::kubeconfig;

/// kubelet's bound on waiting for the bootstrap certificate.
pub(crate) const BOOTSTRAP_WAIT: Duration = Duration::from_secs(3600);

/// Why the bootstrap failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BootstrapError {
    #[error("cannot bootstrap a client certificate")]
    Kubeconfig(#[from] KubeconfigError),
    #[error("bootstrap kubeconfig {}: cannot build a client", file.display())]
    Client {
        file: PathBuf,
        #[source]
        source: kube::Error,
    },
    #[error("cannot bootstrap a client certificate with {}", file.display())]
    Obtain {
        file: PathBuf,
        #[source]
        source: ObtainError,
    },
    #[error("kubeconfig {}: cannot write it", file.display())]
    Write {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a certificate says about itself, for logs and deadlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CertInfo {
    pub subject: String,
    pub not_before: jiff::Timestamp,
    pub not_after: jiff::Timestamp,
}

/// The first certificate in `pem` (a certificate-and-key file is fine), or None.
pub(crate) fn cert_info(pem: &[u8]) -> Option<CertInfo> {
    all_certs(pem).next()
}

fn all_certs(pem: &[u8]) -> impl Iterator<Item = CertInfo> + '_ {
    csr::certificate_blocks(pem).filter_map(|p| {
        let cert = p.parse_x509().ok()?;
        let v = cert.validity();
        Some(CertInfo {
            subject: cert.subject().to_string(),
            not_before: jiff::Timestamp::from_second(v.not_before.timestamp()).ok()?,
            not_after: jiff::Timestamp::from_second(v.not_after.timestamp()).ok()?,
        })
    })
}

/// kubelet's `isClientConfigStillValid`: the file loads, its user has a client
/// certificate, and no certificate in it has expired.
pub(crate) async fn still_valid(kubeconfig: &Path, now: jiff::Timestamp) -> bool {
    let config = match kubeconfig::load(kubeconfig).await {
        Ok(c) => c,
        Err(e) => {
            if kubeconfig.exists() {
                tracing::warn!(error = %e, "the kubeconfig cannot be used; bootstrapping a new client certificate");
            }
            return false;
        }
    };
    let certs: Vec<CertInfo> = kubeconfig::client_certificate_pem(&config)
        .map(|p| all_certs(&p).collect())
        .unwrap_or_default();
    if certs.is_empty() {
        tracing::warn!(kubeconfig = %kubeconfig.display(), "the kubeconfig has no readable client certificate; bootstrapping one");
        return false;
    }
    if let Some(old) = certs.iter().find(|c| c.not_after <= now) {
        tracing::warn!(kubeconfig = %kubeconfig.display(), subject = old.subject, notAfter = %old.not_after, "the kubeconfig's client certificate has expired; bootstrapping a new one");
        return false;
    }
    true
}

/// The inputs of one bootstrap.
#[derive(Debug, Clone)]
pub(crate) struct Bootstrap {
    pub kubeconfig: PathBuf,
    pub bootstrap_kubeconfig: PathBuf,
    pub cert_dir: PathBuf,
    pub node_name: String,
    /// How long to wait for the certificate ([`BOOTSTRAP_WAIT`]).
    pub wait: Duration,
}

impl Bootstrap {
    /// Leaves a usable `--kubeconfig` behind, or says why not. Returns whether a new
    /// certificate was requested.
    pub(crate) async fn run(&self) -> Result<bool, BootstrapError> {
        if still_valid(&self.kubeconfig, jiff::Timestamp::now()).await {
            return Ok(false);
        }
        let boot = kubeconfig::load(&self.bootstrap_kubeconfig).await?;
        let client =
            kube::Client::try_from(boot.clone()).map_err(|source| BootstrapError::Client {
                file: self.bootstrap_kubeconfig.clone(),
                source,
            })?;
        let store = CertStore::new(&self.cert_dir);
        let template = Template::client(&self.node_name);
        let file = obtain(&client, &store, &template, Signer::Client, self.wait)
            .await
            .map_err(|source| BootstrapError::Obtain {
                file: self.bootstrap_kubeconfig.clone(),
                source,
            })?;
        write_kubeconfig(&self.kubeconfig, &boot, &store.current_path())?;
        tracing::info!(
            kubeconfig = %self.kubeconfig.display(),
            certificate = %file.display(),
            "bootstrapped a client certificate and wrote the kubeconfig"
        );
        Ok(true)
    }
}

/// Why a new certificate was not obtained and stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ObtainError {
    #[error(transparent)]
    Csr(#[from] CsrError),
    #[error("the issued certificate cannot be used: {0}")]
    Issued(#[from] IssuedError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A new key, a CSR for `template` to `signer` sent with `client`, the issued
/// certificate stored with the key. Returns the new pair file. Shared by the
/// bootstrap, the client certificate's rotation and the serving certificate's.
pub(crate) async fn obtain(
    client: &kube::Client,
    store: &CertStore,
    template: &Template,
    signer: Signer,
    wait: Duration,
) -> Result<PathBuf, ObtainError> {
    let request = csr::node_request(template)?;
    let cert = csr::request_certificate(client, &request.csr_pem, signer, wait).await?;
    check_issued(&cert, &request.key_pem, &template.node)?;
    Ok(store.update(&cert, request.key_pem.as_bytes(), jiff::Timestamp::now())?)
}

/// Why an issued certificate is not stored.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IssuedError {
    #[error("status.certificate holds no PEM CERTIFICATE")]
    NoCertificate,
    #[error("status.certificate: {0}")]
    Unparsable(String),
    #[error("the node key: {0}")]
    Key(String),
    #[error("it is not for the key the request was made with")]
    OtherKey,
    #[error("it names {names:?}, not {want:?}")]
    OtherNode { names: String, want: String },
}

/// Before an issued certificate is stored: it is a certificate (kubelet's
/// `tls.X509KeyPair` check) for the key the request was made with, and it names this
/// node (`system:node:<node>`), so a signer's mistake never becomes the node's identity.
fn check_issued(cert_pem: &[u8], key_pem: &str, node: &str) -> Result<(), IssuedError> {
    let pem = csr::certificate_blocks(cert_pem)
        .next()
        .ok_or(IssuedError::NoCertificate)?;
    let cert = pem
        .parse_x509()
        .map_err(|e| IssuedError::Unparsable(e.to_string()))?;
    let key = rcgen::KeyPair::from_pem(key_pem).map_err(|e| IssuedError::Key(e.to_string()))?;
    if cert.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
        return Err(IssuedError::OtherKey);
    }
    let want = format!("system:node:{node}");
    let names: Vec<&str> = (cert.subject().iter_common_name())
        .filter_map(|a| a.as_str().ok())
        .collect();
    if names != [want.as_str()] {
        return Err(IssuedError::OtherNode {
            names: names.join(","),
            want,
        });
    }
    Ok(())
}

/// kubelet's `writeKubeconfigFromBootstrapping`: the bootstrap's server and CA, and a
/// user whose certificate and key are both the store's current pair. Written to a
/// temporary file beside it and renamed, so a reader never sees half of it.
pub(crate) fn write_kubeconfig(
    path: &Path,
    boot: &kube::Config,
    pair: &Path,
) -> Result<(), BootstrapError> {
    let write_err = |source| BootstrapError::Write {
        file: path.to_path_buf(),
        source,
    };
    let text = kubeconfig_yaml(boot, pair);
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(write_err)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", fastrand::u64(..)));
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(write_err(e));
    }
    Ok(())
}

fn kubeconfig_yaml(boot: &kube::Config, pair: &Path) -> String {
    // JSON strings are YAML strings: quoting without a serializer.
    let q = |s: &str| serde_json::Value::from(s).to_string();
    let server = boot.cluster_url.to_string();
    let server = server.trim_end_matches('/');
    let mut cluster = format!("    server: {}\n", q(server));
    if let Some(roots) = boot.root_cert.as_ref().filter(|r| !r.is_empty()) {
        let pem: String = roots.iter().map(|der| pem_cert(der)).collect();
        let data = base64::engine::general_purpose::STANDARD.encode(pem);
        cluster.push_str(&format!("    certificate-authority-data: {data}\n"));
    }
    if boot.accept_invalid_certs {
        cluster.push_str("    insecure-skip-tls-verify: true\n");
    }
    let pair = q(&pair.to_string_lossy());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: default-cluster\n  cluster:\n{cluster}\
         contexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n\
         current-context: default-context\n\
         users:\n- name: default-auth\n  user:\n    client-certificate: {pair}\n    client-key: {pair}\n"
    )
}

fn pem_cert(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CA and a leaf for `system:node:n1` valid from `from` to `to` (seconds from now).
    fn leaf(from: i64, to: i64) -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now + time::Duration::seconds(from);
        p.not_after = now + time::Duration::seconds(to);
        let cert = p.signed_by(&key, &issuer).unwrap();
        (ca_cert.pem(), cert.pem(), key.serialize_pem())
    }

    #[test]
    fn an_issued_certificate_must_match_the_key_and_the_node() {
        let (_, cert, key) = leaf(-60, 3600);
        assert_eq!(check_issued(cert.as_bytes(), &key, "n1"), Ok(()));
        let err = check_issued(cert.as_bytes(), &key, "n2")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"system:node:n1\", not \"system:node:n2\""),
            "{err}"
        );
        let (_, _, other_key) = leaf(-60, 3600);
        let err = check_issued(cert.as_bytes(), &other_key, "n1").unwrap_err();
        assert_eq!(err, IssuedError::OtherKey);
        assert!(err.to_string().contains("not for the key"), "{err}");
        let err = check_issued(b"no pem here", &key, "n1").unwrap_err();
        assert_eq!(err, IssuedError::NoCertificate);
        assert!(err.to_string().contains("no PEM CERTIFICATE"), "{err}");
    }

    #[tokio::test]
    async fn the_written_kubeconfig_loads_and_names_the_current_pair() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = leaf(-60, 3600);
        let ca_file = dir.path().join("ca.crt");
        std::fs::write(&ca_file, &ca).unwrap();
        let boot_path = dir.path().join("bootstrap.conf");
        std::fs::write(
            &boot_path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: ca.crt\n\
             users:\n- name: u\n  user:\n    token: abc.def\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
        )
        .unwrap();
        let boot = kubeconfig::load(&boot_path).await.unwrap();
        let store = CertStore::new(&dir.path().join("pki"));
        store
            .update(cert.as_bytes(), key.as_bytes(), jiff::Timestamp::now())
            .unwrap();
        let out = dir.path().join("kubelet.conf");
        write_kubeconfig(&out, &boot, &store.current_path()).unwrap();
        let loaded = kubeconfig::load(&out).await.unwrap();
        assert_eq!(loaded.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(loaded.root_cert, boot.root_cert);
        let current = store.current_path().to_string_lossy().into_owned();
        assert_eq!(
            loaded.auth_info.client_certificate.as_deref(),
            Some(&*current)
        );
        assert_eq!(loaded.auth_info.client_key.as_deref(), Some(&*current));
        let info = cert_info(&kubeconfig::client_certificate_pem(&loaded).unwrap()).unwrap();
        assert_eq!(info.subject, "CN=system:node:n1");
        assert!(still_valid(&out, jiff::Timestamp::now()).await);
        // Valid until its not-after, then not.
        let later = info.not_after + jiff::SignedDuration::from_secs(1);
        assert!(!still_valid(&out, later).await);
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&out).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    }

    #[tokio::test]
    async fn missing_tokens_only_and_expired_kubeconfigs_are_not_valid() {
        let dir = tempfile::tempdir().unwrap();
        let now = jiff::Timestamp::now();
        assert!(!still_valid(&dir.path().join("none"), now).await);
        let token_only = dir.path().join("token.conf");
        std::fs::write(
            &token_only,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\n\
             users:\n- name: u\n  user:\n    token: abc\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n",
        )
        .unwrap();
        assert!(!still_valid(&token_only, now).await);
        let (_, cert, key) = leaf(-7200, -3600);
        let pair = dir.path().join("pair.pem");
        std::fs::write(&pair, format!("{cert}{key}")).unwrap();
        let expired = dir.path().join("expired.conf");
        std::fs::write(
            &expired,
            format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\n\
             users:\n- name: u\n  user:\n    client-certificate: {p}\n    client-key: {p}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n", p = pair.display()),
        )
        .unwrap();
        assert!(!still_valid(&expired, now).await);
    }
}

//! Reading `--kubeconfig` into a kube-rs [`Config`], with the checks client-go makes
//! done first, so that a broken file is one error naming the file, the field and why
//! (kube-rs's own errors name neither).
//!
//! The shape is kind's `/etc/kubernetes/kubelet.conf`: one cluster (`server` plus
//! `certificate-authority-data` or a `certificate-authority` file), one user
//! (`client-certificate`/`client-key`, as data or files; kind points both at
//! `/var/lib/kubelet/pki/kubelet-client-current.pem`, which holds the certificate and the
//! key), or a bearer `token`/`tokenFile`, and `current-context`. Relative file paths are
//! relative to the kubeconfig's directory, as in client-go.

use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use kube::config::{AuthInfo, Cluster, Config, KubeConfigOptions, Kubeconfig};
use tokio_rustls::rustls::pki_types::pem::{self, SectionKind};

/// The most a kubeconfig, or a file it names (CA bundle, certificate, key, token),
/// may hold: real ones are a few KiB.
pub(crate) const MAX_FILE_BYTES: u64 = 1 << 20;

/// Why a kubeconfig cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KubeconfigError {
    /// The file as a whole: unreadable, too large, not a kubeconfig.
    #[error("kubeconfig {}: {reason}", file.display())]
    File { file: PathBuf, reason: String },
    /// One field of it (`clusters[kind].cluster.server`, ...).
    #[error("kubeconfig {}: field {field}: {reason}", file.display())]
    Field {
        file: PathBuf,
        field: String,
        reason: String,
    },
}

/// Why a file or a `-data` field the kubeconfig names cannot be used; becomes the
/// reason of a [`KubeconfigError`].
#[derive(Debug, thiserror::Error)]
enum Reason {
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    #[error("is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge,
    #[error("is not UTF-8 text")]
    NotUtf8,
    #[error("is not valid base64: {0}")]
    Base64(base64::DecodeError),
    #[error("is not valid PEM: {0:?}")]
    Pem(pem::Error),
    #[error("holds no PEM CERTIFICATE")]
    NoCertificate,
    #[error("holds no PEM private key")]
    NoKey,
    /// A named file's reason, with its path.
    #[error("{0}: {1}")]
    InFile(String, Box<Reason>),
}

/// Reads and checks the kubeconfig at `path` and turns its current context into a
/// kube-rs config.
pub(crate) async fn load(path: &Path) -> Result<Config, KubeconfigError> {
    let file_err = |reason: String| KubeconfigError::File {
        file: path.to_path_buf(),
        reason,
    };
    let text = read_bounded(path).map_err(|r| file_err(r.to_string()))?;
    let mut kubeconfig = Kubeconfig::from_yaml(&text).map_err(|e| file_err(format!("{e}")))?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    absolutize(&mut kubeconfig, dir);
    check(path, &kubeconfig)?;
    inline_padded_token_files(&mut kubeconfig);
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| file_err(format!("{e}")))
}

/// Reads at most [`MAX_FILE_BYTES`] of a file as UTF-8.
fn read_bounded(path: &Path) -> Result<String, Reason> {
    let bytes = read_bytes_bounded(path)?;
    String::from_utf8(bytes).map_err(|_| Reason::NotUtf8)
}

fn read_bytes_bounded(path: &Path) -> Result<Vec<u8>, Reason> {
    let file = std::fs::File::open(path).map_err(Reason::Read)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(Reason::Read)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(Reason::TooLarge);
    }
    Ok(bytes)
}

/// client-go resolves a kubeconfig's relative file references against its directory.
fn absolutize(kubeconfig: &mut Kubeconfig, dir: &Path) {
    let fix = |p: &mut Option<String>| {
        if let Some(s) = p.as_mut()
            && !s.is_empty()
            && Path::new(s.as_str()).is_relative()
        {
            *s = dir.join(s.as_str()).to_string_lossy().into_owned();
        }
    };
    for named in &mut kubeconfig.clusters {
        if let Some(c) = named.cluster.as_mut() {
            fix(&mut c.certificate_authority);
        }
    }
    for named in &mut kubeconfig.auth_infos {
        if let Some(a) = named.auth_info.as_mut() {
            fix(&mut a.client_certificate);
            fix(&mut a.client_key);
            fix(&mut a.token_file);
        }
    }
}

/// client-go trims the whitespace around a `tokenFile`'s token (`echo token > file`
/// leaves a newline); kube-rs sends it as is, which is no valid header. Such a file's
/// trimmed token is used as a static token instead: read once at start, where client-go
/// re-reads the file every minute. A file without whitespace stays a `tokenFile`, which
/// kube-rs re-reads.
fn inline_padded_token_files(kubeconfig: &mut Kubeconfig) {
    for named in &mut kubeconfig.auth_infos {
        let Some(a) = named.auth_info.as_mut() else {
            continue;
        };
        if a.token.is_some() {
            continue;
        }
        let Some(bytes) = a.token_file.as_deref().and_then(|p| read_named(p).ok()) else {
            continue;
        };
        let raw = String::from_utf8_lossy(&bytes);
        if raw.trim() != raw {
            a.token = Some(raw.trim().to_string().into());
            a.token_file = None;
        }
    }
}

/// The checks, in the order a reader follows the file: the current context, its
/// cluster, its user.
fn check(file: &Path, kc: &Kubeconfig) -> Result<(), KubeconfigError> {
    let field_err = |field: String, reason: String| KubeconfigError::Field {
        file: file.to_path_buf(),
        field,
        reason,
    };
    let current = kc
        .current_context
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| field_err("current-context".into(), "is not set".into()))?;
    let context = kc
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| {
            field_err(
                "current-context".into(),
                format!("names context {current:?}, which is not in contexts"),
            )
        })?;
    let cluster_name = &context.cluster;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| &c.name == cluster_name)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| {
            field_err(
                format!("contexts[{current}].context.cluster"),
                format!("names cluster {cluster_name:?}, which is not in clusters"),
            )
        })?;
    check_cluster(
        cluster,
        &format!("clusters[{cluster_name}].cluster"),
        &field_err,
    )?;
    if let Some(user) = context.user.as_deref().filter(|u| !u.is_empty()) {
        let auth = kc
            .auth_infos
            .iter()
            .find(|a| a.name == user)
            .and_then(|a| a.auth_info.as_ref())
            .ok_or_else(|| {
                field_err(
                    format!("contexts[{current}].context.user"),
                    format!("names user {user:?}, which is not in users"),
                )
            })?;
        check_user(auth, &format!("users[{user}].user"), &field_err)?;
    }
    Ok(())
}

type FieldErr<'a> = &'a dyn Fn(String, String) -> KubeconfigError;

fn check_cluster(c: &Cluster, at: &str, field_err: FieldErr) -> Result<(), KubeconfigError> {
    let server = c.server.as_deref().unwrap_or_default();
    if server.is_empty() {
        return Err(field_err(format!("{at}.server"), "is not set".into()));
    }
    match server.parse::<hyper::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("https" | "http")) && uri.host().is_some() => {}
        _ => {
            return Err(field_err(
                format!("{at}.server"),
                format!("{server:?} is not an https:// or http:// URL"),
            ));
        }
    }
    // client-go: the data wins over the file when both are given.
    if let Some(data) = c
        .certificate_authority_data
        .as_deref()
        .filter(|d| !d.is_empty())
    {
        let pem = decode_base64(data)
            .map_err(|r| field_err(format!("{at}.certificate-authority-data"), r.to_string()))?;
        pem_sections(&pem, &[SectionKind::Certificate])
            .map_err(|r| field_err(format!("{at}.certificate-authority-data"), r.to_string()))?;
    } else if let Some(path) = c.certificate_authority.as_deref().filter(|p| !p.is_empty()) {
        let field = format!("{at}.certificate-authority");
        let pem = read_named(path).map_err(|r| field_err(field.clone(), r.to_string()))?;
        pem_sections(&pem, &[SectionKind::Certificate])
            .map_err(|r| field_err(field, format!("{path}: {r}")))?;
    }
    Ok(())
}

const KEY_KINDS: &[SectionKind] = &[
    SectionKind::PrivateKey,
    SectionKind::RsaPrivateKey,
    SectionKind::EcPrivateKey,
];

fn check_user(a: &AuthInfo, at: &str, field_err: FieldErr) -> Result<(), KubeconfigError> {
    let cert = material(
        a.client_certificate_data.as_deref(),
        a.client_certificate.as_deref(),
        at,
        "client-certificate",
        field_err,
    )?;
    let key_data = a
        .client_key_data
        .as_ref()
        .map(secrecy::ExposeSecret::expose_secret);
    let key = material(
        key_data,
        a.client_key.as_deref(),
        at,
        "client-key",
        field_err,
    )?;
    match (cert, key) {
        (None, None) => {}
        (Some((field, _)), None) => {
            return Err(field_err(
                format!("{at}.client-key"),
                format!("is not set, but {field} is"),
            ));
        }
        (None, Some((field, _))) => {
            return Err(field_err(
                format!("{at}.client-certificate"),
                format!("is not set, but {field} is"),
            ));
        }
        (Some((cert_field, cert)), Some((key_field, key))) => {
            pem_sections(&cert, &[SectionKind::Certificate])
                .map_err(|r| field_err(cert_field, r.to_string()))?;
            let keys = pem_sections(&key, KEY_KINDS)
                .map_err(|r| field_err(key_field.clone(), r.to_string()))?;
            if keys > 1 {
                return Err(field_err(
                    key_field,
                    "holds more than one private key".into(),
                ));
            }
        }
    }
    if a.token.is_none()
        && let Some(path) = a.token_file.as_deref().filter(|p| !p.is_empty())
    {
        let field = format!("{at}.tokenFile");
        let token = read_named(path).map_err(|r| field_err(field.clone(), r.to_string()))?;
        if String::from_utf8_lossy(&token).trim().is_empty() {
            return Err(field_err(field, format!("{path} is empty")));
        }
    }
    Ok(())
}

/// The bytes of a `-data` field (base64) or of the file it falls back to; with the
/// name of the field they came from, for messages.
fn material(
    data: Option<&str>,
    path: Option<&str>,
    at: &str,
    name: &str,
    field_err: FieldErr,
) -> Result<Option<(String, Vec<u8>)>, KubeconfigError> {
    if let Some(data) = data.filter(|d| !d.is_empty()) {
        let field = format!("{at}.{name}-data");
        let bytes = decode_base64(data).map_err(|r| field_err(field.clone(), r.to_string()))?;
        return Ok(Some((field, bytes)));
    }
    if let Some(path) = path.filter(|p| !p.is_empty()) {
        let field = format!("{at}.{name}");
        let bytes = read_named(path).map_err(|r| field_err(field.clone(), r.to_string()))?;
        return Ok(Some((format!("{field} ({path})"), bytes)));
    }
    Ok(None)
}

fn read_named(path: &str) -> Result<Vec<u8>, Reason> {
    read_bytes_bounded(Path::new(path)).map_err(|r| Reason::InFile(path.to_string(), Box::new(r)))
}

fn decode_base64(data: &str) -> Result<Vec<u8>, Reason> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(Reason::Base64)
}

/// How many PEM sections of the wanted kinds `bytes` holds; at least one, or why not.
/// Sections of other kinds are allowed (kind's combined file holds a certificate
/// and a key, and both fields point at it).
fn pem_sections(bytes: &[u8], wanted: &[SectionKind]) -> Result<usize, Reason> {
    let mut reader = Cursor::new(bytes);
    let mut found = 0;
    loop {
        match pem::from_buf(&mut reader) {
            Ok(Some((kind, _))) if wanted.contains(&kind) => found += 1,
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => return Err(Reason::Pem(e)),
        }
    }
    if found == 0 {
        return Err(if wanted.contains(&SectionKind::Certificate) {
            Reason::NoCertificate
        } else {
            Reason::NoKey
        });
    }
    Ok(found)
}

/// The client certificate PEM a loaded config's user presents (`-data` or the file),
/// or None when it has none (a token user). For the bootstrap's validity check.
pub(crate) fn client_certificate_pem(config: &Config) -> Option<Vec<u8>> {
    let a = &config.auth_info;
    if let Some(data) = a
        .client_certificate_data
        .as_deref()
        .filter(|d| !d.is_empty())
    {
        return decode_base64(data).ok();
    }
    let path = a.client_certificate.as_deref().filter(|p| !p.is_empty())?;
    read_named(path).ok()
}

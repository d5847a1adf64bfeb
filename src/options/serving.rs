//! The secure port's settings (kubelet's `port`, TLS, `authentication` and
//! `authorization` fields) and their checks. The server reads them from `Options`.

use std::path::PathBuf;
use std::time::Duration;

use super::settings::InvalidValue;

/// kubelet's `authorization.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthorizationMode {
    /// Every authenticated request is allowed (kubelet's flag default).
    AlwaysAllow,
    /// A SubjectAccessReview per request, cached (kubelet's config-file default).
    Webhook,
}

impl AuthorizationMode {
    /// kubelet's name for the mode, as the config file and `--authorization-mode` spell it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AuthorizationMode::AlwaysAllow => "AlwaysAllow",
            AuthorizationMode::Webhook => "Webhook",
        }
    }
}

/// The TLS versions rustls speaks; kubelet's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TlsVersion {
    Tls12,
    Tls13,
}

/// What the secure server is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Serving {
    /// `enableServer`: false serves no secure port at all.
    pub enable: bool,
    /// `port` (0: off).
    pub port: u16,
    /// `tlsCertFile` / `tlsPrivateKeyFile`; both None: a self-signed pair in the cert dir.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// `serverTLSBootstrap` (`--rotate-server-certificates`): the serving certificate
    /// comes from the `kubernetes.io/kubelet-serving` signer and is rotated; no
    /// self-signed pair is made.
    pub server_tls_bootstrap: bool,
    /// `tlsMinVersion` (None: rustls' default, TLS 1.2).
    pub tls_min_version: Option<TlsVersion>,
    /// `tlsCipherSuites`, Go's names (empty: rustls' defaults).
    pub tls_cipher_suites: Vec<String>,
    /// `authentication.x509.clientCAFile` (None: client certificates are not asked for).
    pub client_ca_file: Option<PathBuf>,
    /// `authentication.anonymous.enabled`.
    pub anonymous: bool,
    /// `authentication.webhook.enabled` and `cacheTTL`: bearer tokens through TokenReview.
    pub token_webhook: bool,
    pub token_webhook_cache_ttl: Duration,
    /// `authorization.mode` and the webhook's `cacheAuthorizedTTL` / `cacheUnauthorizedTTL`.
    pub authorization_mode: AuthorizationMode,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
    /// `streamingConnectionIdleTimeout`: an exec, attach or port-forward stream on
    /// which nothing moved for this long is closed.
    pub streaming_idle_timeout: Duration,
}

impl Serving {
    /// Zero values, before the table's defaults are applied.
    pub(crate) fn blank() -> Serving {
        Serving {
            enable: false,
            port: 0,
            tls_cert_file: None,
            tls_private_key_file: None,
            server_tls_bootstrap: false,
            tls_min_version: None,
            tls_cipher_suites: Vec::new(),
            client_ca_file: None,
            anonymous: false,
            token_webhook: false,
            token_webhook_cache_ttl: Duration::ZERO,
            authorization_mode: AuthorizationMode::AlwaysAllow,
            authorized_ttl: Duration::ZERO,
            unauthorized_ttl: Duration::ZERO,
            streaming_idle_timeout: Duration::ZERO,
        }
    }

    /// Whether a secure server is to run.
    pub(crate) fn enabled(&self) -> bool {
        self.enable && self.port != 0
    }
}

/// Go's TLS cipher suite names that rustls implements (TLS 1.3's suites are not
/// configurable in Go, and kubelet's list only ever holds TLS 1.2 ones and these).
pub(crate) const CIPHER_SUITES: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// kubelet's `tlsMinVersion` names; the two below TLS 1.2 are refused because
/// rustls does not speak them.
pub(super) fn tls_version(s: &str) -> Result<Option<TlsVersion>, InvalidValue> {
    match s {
        "" => Ok(None),
        "VersionTLS12" => Ok(Some(TlsVersion::Tls12)),
        "VersionTLS13" => Ok(Some(TlsVersion::Tls13)),
        "VersionTLS10" | "VersionTLS11" => {
            Err("oxlet's TLS supports only VersionTLS12 and VersionTLS13".into())
        }
        _ => Err("must be one of VersionTLS12, VersionTLS13".into()),
    }
}

/// Every name must be a suite oxlet's TLS implements (Go's insecure and CBC suites are not).
pub(super) fn cipher_suites(items: &[&str]) -> Result<Vec<String>, InvalidValue> {
    for s in items {
        if !CIPHER_SUITES.contains(s) {
            return Err(format!(
                "{s:?} is not a cipher suite oxlet supports (supported: {})",
                CIPHER_SUITES.join(", ")
            )
            .into());
        }
    }
    Ok(items.iter().map(std::string::ToString::to_string).collect())
}

pub(super) fn authorization_mode(s: &str) -> Result<AuthorizationMode, InvalidValue> {
    match s {
        "AlwaysAllow" => Ok(AuthorizationMode::AlwaysAllow),
        "Webhook" => Ok(AuthorizationMode::Webhook),
        _ => Err("must be AlwaysAllow or Webhook".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kubelets() {
        assert_eq!(
            tls_version("VersionTLS13").unwrap(),
            Some(TlsVersion::Tls13)
        );
        assert!(tls_version("VersionTLS11").unwrap_err().0.contains("only"));
        assert!(tls_version("tls12").is_err());
        assert_eq!(
            authorization_mode("Webhook").unwrap(),
            AuthorizationMode::Webhook
        );
        assert!(authorization_mode("RBAC").is_err());
        assert!(cipher_suites(&["TLS_RSA_WITH_AES_128_CBC_SHA"]).is_err());
        assert_eq!(
            cipher_suites(&["TLS_AES_128_GCM_SHA256"]).unwrap(),
            ["TLS_AES_128_GCM_SHA256"]
        );
    }
}

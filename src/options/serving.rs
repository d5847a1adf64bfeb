//! The secure port's settings (kubelet's `port`, TLS, `authentication` and
//! `authorization` fields) and their checks. The server reads them from `Options`.

use std::path::PathBuf;
use std::time::Duration;

use super::settings::{
    InvalidValue, Kind, Setting, list_items, non_negative_duration, opt_path, parse_bool, port,
    positive_duration, row,
};

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

/// The secure port and its TLS (kubelet's API with TLS, authentication and authorization).
pub(super) const TLS: &[Setting] = &[
    row(
        "enable-server",
        Some("enableServer"),
        Kind::Bool,
        "true",
        "true|false",
        "Serve the secure port",
        |o, i| parse_bool(i.text).map(|b| o.serving.enable = b),
    ),
    row(
        "port",
        Some("port"),
        Kind::Int,
        "10250",
        "PORT",
        "Secure API port (0 disables)",
        |o, i| port(i.text).map(|p| o.serving.port = p),
    ),
    row(
        "tls-cert-file",
        Some("tlsCertFile"),
        Kind::Path,
        "",
        "PATH",
        "Serving certificate of the secure port, CA certificates after it (empty: a self-signed \
         one in --cert-dir)",
        |o, i| {
            o.serving.tls_cert_file = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "tls-private-key-file",
        Some("tlsPrivateKeyFile"),
        Kind::Path,
        "",
        "PATH",
        "Key of --tls-cert-file",
        |o, i| {
            o.serving.tls_private_key_file = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "rotate-server-certificates",
        Some("serverTLSBootstrap"),
        Kind::Bool,
        "false",
        "true|false",
        "Request the serving certificate from the apiserver (signer \
         kubernetes.io/kubelet-serving, the node's addresses as names) and rotate it, instead of \
         a self-signed one",
        |o, i| parse_bool(i.text).map(|b| o.serving.server_tls_bootstrap = b),
    ),
    row(
        "tls-min-version",
        Some("tlsMinVersion"),
        Kind::Text,
        "",
        "VersionTLS12|VersionTLS13",
        "Lowest TLS version the secure port accepts (empty: TLS 1.2)",
        |o, i| tls_version(i.text).map(|v| o.serving.tls_min_version = v),
    ),
    row(
        "tls-cipher-suites",
        Some("tlsCipherSuites"),
        Kind::List,
        "",
        "NAME,...",
        "TLS cipher suites the secure port offers, Go's names (empty: the defaults)",
        |o, i| cipher_suites(&list_items(i.text)).map(|v| o.serving.tls_cipher_suites = v),
    ),
];

/// The secure port's authentication and authorization.
pub(super) const AUTH: &[Setting] = &[
    row(
        "client-ca-file",
        Some("authentication.x509.clientCAFile"),
        Kind::Path,
        "",
        "PATH",
        "CA bundle client certificates are verified against; a verified certificate's CN is the \
         user, its O values the groups",
        |o, i| {
            o.serving.client_ca_file = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "anonymous-auth",
        Some("authentication.anonymous.enabled"),
        Kind::Bool,
        "true",
        "true|false",
        "Requests with no credentials are served as system:anonymous (group \
         system:unauthenticated), not refused with 401",
        |o, i| parse_bool(i.text).map(|b| o.serving.anonymous = b),
    )
    .config_default("false"),
    row(
        "authentication-token-webhook",
        Some("authentication.webhook.enabled"),
        Kind::Bool,
        "false",
        "true|false",
        "Check bearer tokens with a TokenReview to the apiserver",
        |o, i| parse_bool(i.text).map(|b| o.serving.token_webhook = b),
    )
    .config_default("true"),
    row(
        "authentication-token-webhook-cache-ttl",
        Some("authentication.webhook.cacheTTL"),
        Kind::Duration,
        "2m0s",
        "DURATION",
        "How long a TokenReview's answer is kept",
        |o, i| non_negative_duration(i.text).map(|d| o.serving.token_webhook_cache_ttl = d),
    ),
    row(
        "authorization-mode",
        Some("authorization.mode"),
        Kind::Text,
        "AlwaysAllow",
        "AlwaysAllow|Webhook",
        "How requests to the secure port are authorized (Webhook: a SubjectAccessReview to the \
         apiserver)",
        |o, i| authorization_mode(i.text).map(|m| o.serving.authorization_mode = m),
    )
    .config_default("Webhook"),
    row(
        "authorization-webhook-cache-authorized-ttl",
        Some("authorization.webhook.cacheAuthorizedTTL"),
        Kind::Duration,
        "5m0s",
        "DURATION",
        "How long an allowing SubjectAccessReview is kept",
        |o, i| non_negative_duration(i.text).map(|d| o.serving.authorized_ttl = d),
    ),
    row(
        "authorization-webhook-cache-unauthorized-ttl",
        Some("authorization.webhook.cacheUnauthorizedTTL"),
        Kind::Duration,
        "30s",
        "DURATION",
        "How long a denying SubjectAccessReview is kept",
        |o, i| non_negative_duration(i.text).map(|d| o.serving.unauthorized_ttl = d),
    ),
];

/// Streams' idle timeout.
pub(super) const STREAMING: &[Setting] = &[row(
    "streaming-connection-idle-timeout",
    Some("streamingConnectionIdleTimeout"),
    Kind::Duration,
    "4h0m0s",
    "DURATION",
    "An exec, attach or port-forward stream or a followed log idle this long is closed",
    |o, i| positive_duration(i.text).map(|d| o.serving.streaming_idle_timeout = d),
)];

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

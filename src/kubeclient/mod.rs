//! The apiserver clients, built once at start from `--kubeconfig`, as kubelet's
//! `buildKubeletClientConfig` and `kubeletDeps` do:
//!
//! - the main client, throttled by `kubeAPIQPS`/`kubeAPIBurst` (a token bucket, like
//!   client-go's), for pods, mirror pods, pod status and everything else;
//! - the heartbeat client for node status and the lease: never throttled (a burst of
//!   pod traffic must not delay a renewal), and with a timeout of
//!   `min(nodeStatusUpdateFrequency, nodeLeaseDurationSeconds)`, so one hung request
//!   cannot outlive the lease it is meant to renew.
//!
//! Without `--kubeconfig` none of this is built and oxlet stays standalone.

mod bootstrap;
mod cert_store;
mod client_cert;
mod csr;
mod kubeconfig;
mod ratelimit;
mod relist;
mod rotation;
#[cfg(test)]
mod rotation_tests;
mod serving_cert;

#[cfg(test)]
mod test_apiserver;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Duration;

use kube::client::ClientBuilder;

pub(crate) use bootstrap::{BOOTSTRAP_WAIT, Bootstrap, cert_info};
pub(crate) use kubeconfig::KubeconfigError;
// The kubeconfig reader, the CSR verdict and the certificate checks, for the fuzz
// targets (`crate::fuzzing`).
pub(crate) use csr::{Template, certificate_blocks, issued as issued_certificate};
pub(crate) use kubeconfig::load as load_kubeconfig;
use ratelimit::RateLimitLayer;
pub(crate) use ratelimit::TokenBucket;
// Watches that list again after any failure, as client-go's reflector.
pub(crate) use relist::relisting_watcher;
pub(crate) use rotation::deadline as rotation_deadline;
// Client certificate rotation, for the agent to run beside the clients.
pub(crate) use rotation::{ROTATION_WAIT, Rotation};
// `serverTLSBootstrap`: the serving certificate, requested and rotated.
pub(crate) use serving_cert::{Install, ServingRotation};

/// The settings the clients are built with (from `Options`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientSettings {
    /// `kubeAPIQPS` (0: client-go's default of 5).
    pub qps: u32,
    /// `kubeAPIBurst` (0: client-go's default of 10).
    pub burst: u32,
    /// `nodeStatusUpdateFrequency`.
    pub node_status_update_frequency: Duration,
    /// `nodeLeaseDurationSeconds`.
    pub node_lease_duration: Duration,
}

impl ClientSettings {
    /// The heartbeat client's whole-request timeout: the status update period, but
    /// never longer than the lease (kubelet's `server.go`).
    pub(crate) fn heartbeat_timeout(&self) -> Duration {
        self.node_status_update_frequency
            .min(self.node_lease_duration)
    }
}

/// The clients of one kubeconfig.
#[derive(Clone)]
pub(crate) struct ApiClients {
    /// Throttled; for everything but heartbeats.
    pub main: kube::Client,
    /// Unthrottled, with a timeout under the lease duration; for node status and the lease.
    pub heartbeat: kube::Client,
    /// Throttled by a bucket of its own (`kubeAPIQPS`/`kubeAPIBurst` again); for the
    /// secure port's TokenReviews and SubjectAccessReviews, so clients sending
    /// random tokens slow their own reviews, never the pod status writes.
    pub reviews: kube::Client,
    /// The apiserver's URL, for logs.
    pub server: String,
    /// The certificate both clients present, when it rotates (`rotateCertificates`).
    pub cert_slot: Option<client_cert::CertSlot>,
}

/// Why the clients could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    /// The kubeconfig was read but kube-rs could not build a client from it (TLS set-up).
    #[error("kubeconfig {}: cannot build a client: {source}", file.display())]
    Build {
        file: std::path::PathBuf,
        #[source]
        source: kube::Error,
    },
}

/// Reads `--kubeconfig` and builds both clients. No request is made.
pub(crate) async fn build(
    path: &Path,
    settings: ClientSettings,
) -> Result<ApiClients, ClientError> {
    let config = kubeconfig::load(path).await?;
    let server = config.cluster_url.to_string();
    let build_err = |source| ClientError::Build {
        file: path.to_path_buf(),
        source,
    };
    let main = ClientBuilder::try_from(config.clone())
        .map_err(build_err)?
        .with_layer(&RateLimitLayer::new(settings.qps, settings.burst))
        .build();
    let reviews = ClientBuilder::try_from(config.clone())
        .map_err(build_err)?
        .with_layer(&RateLimitLayer::new(settings.qps, settings.burst))
        .build();
    let heartbeat = ClientBuilder::try_from(config)
        .map_err(build_err)?
        .with_layer(&tower::timeout::TimeoutLayer::new(
            settings.heartbeat_timeout(),
        ))
        .build();
    Ok(ApiClients {
        main,
        heartbeat,
        reviews,
        server,
        cert_slot: None,
    })
}

/// [`build`], but when the kubeconfig's client certificate is `cert_dir`'s current
/// pair ([`rotation::applies`]) both clients present it from one [`CertSlot`] that
/// rotation replaces; otherwise exactly [`build`].
///
/// [`CertSlot`]: client_cert::CertSlot
pub(crate) async fn build_rotating(
    path: &Path,
    settings: ClientSettings,
    cert_dir: &Path,
) -> Result<ApiClients, ClientError> {
    let config = kubeconfig::load(path).await?;
    if !rotation::applies(&config, cert_dir) {
        return build(path, settings).await;
    }
    let build_err = |source| ClientError::Build {
        file: path.to_path_buf(),
        source,
    };
    let pem = kubeconfig::client_certificate_pem(&config).unwrap_or_default();
    let provider = client_cert::provider(&config).map_err(build_err)?;
    let slot = client_cert::CertSlot::new(&pem, provider).map_err(|e| {
        ClientError::Kubeconfig(KubeconfigError::Field {
            file: path.to_path_buf(),
            field: "users[].user.client-certificate".into(),
            reason: e.to_string(),
        })
    })?;
    let main = client_cert::builder(&config, &slot)
        .map_err(build_err)?
        .with_layer(&RateLimitLayer::new(settings.qps, settings.burst))
        .build();
    let reviews = client_cert::builder(&config, &slot)
        .map_err(build_err)?
        .with_layer(&RateLimitLayer::new(settings.qps, settings.burst))
        .build();
    let heartbeat = client_cert::builder(&config, &slot)
        .map_err(build_err)?
        .with_layer(&tower::timeout::TimeoutLayer::new(
            settings.heartbeat_timeout(),
        ))
        .build();
    Ok(ApiClients {
        main,
        heartbeat,
        reviews,
        server: config.cluster_url.to_string(),
        cert_slot: Some(slot),
    })
}

/// The client certificate the kubeconfig at `path` presents, for the start-up log:
/// its subject and not-after, and the file it is read from.
pub(crate) async fn client_certificate_in_use(
    path: &Path,
) -> Option<(bootstrap::CertInfo, String)> {
    let config = kubeconfig::load(path).await.ok()?;
    let pem = kubeconfig::client_certificate_pem(&config)?;
    let file = config
        .auth_info
        .client_certificate
        .clone()
        .unwrap_or_else(|| "client-certificate-data".into());
    Some((bootstrap::cert_info(&pem)?, file))
}

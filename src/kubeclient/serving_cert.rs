//! `serverTLSBootstrap`: kubelet's serving certificate manager
//! (`NewKubeletServerCertificateManager`). Instead of a self-signed pair, the secure
//! port presents a certificate from the `kubernetes.io/kubelet-serving` signer for
//! `system:node:<node>`, naming the node's addresses, kept in the cert dir's
//! `kubelet-server` store. It is renewed as the client certificate is (at 70–90 % of
//! its life, backing off after failures), and at once when it no longer names the
//! node's addresses. Until the first one is issued, handshakes fail, as kubelet's do
//! ("no serving certificate available for the kubelet").

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::NodeAddress;
use tokio_util::sync::CancellationToken;

use super::bootstrap::{self, CertInfo};
use super::cert_store::CertStore;
use super::csr::{Signer, Template};
use super::rotation::{self, Renewal, RotationError};

/// Why a pair could not be put in front of handshakes (the server's reason).
pub(crate) type InstallError = Box<dyn std::error::Error + Send + Sync>;
/// Puts a pair (PEM: the certificate, then its key) in front of new handshakes; the
/// server stops presenting it once it expires. The server gives it; this floor does
/// not know the server.
pub(crate) type Install = Arc<dyn Fn(&[u8]) -> Result<(), InstallError> + Send + Sync>;

/// The serving certificate's renewal.
#[derive(Clone)]
pub(crate) struct ServingRotation {
    pub cert_dir: PathBuf,
    /// What each request names: the node and its addresses.
    pub template: Template,
    /// The main client: the CSR goes out with the node's client credentials.
    pub client: kube::Client,
    /// How long one CSR is waited on (client-go's 15 minutes).
    pub wait: Duration,
    pub install: Install,
}

impl ServingRotation {
    /// None when the node has no address to name (kubelet requests nothing then).
    pub(crate) fn new(
        cert_dir: PathBuf,
        node: &str,
        addresses: &[NodeAddress],
        client: kube::Client,
        install: Install,
    ) -> Option<ServingRotation> {
        Some(ServingRotation {
            cert_dir,
            template: Template::serving(node, addresses)?,
            client,
            wait: rotation::ROTATION_WAIT,
            install,
        })
    }

    /// The names each request carries, for the start-up log.
    pub(crate) fn names(&self) -> String {
        let ips = self.template.ips.iter().map(ToString::to_string);
        let names: Vec<String> = self.template.dns_names.iter().cloned().chain(ips).collect();
        names.join(",")
    }

    /// Puts the stored pair to use now, as kubelet's manager starts from the store's
    /// current pair, and says what it is; None when there is none yet. (An expired
    /// pair is installed too, and not presented: client-go's `Current` returns
    /// nothing once expired.)
    pub(crate) fn install_stored(&self) -> Result<Option<CertInfo>, RotationError> {
        let store = self.store();
        let (pem, info) = match rotation::current(&store) {
            Ok(found) => found,
            Err(RotationError::NoCurrent { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let file = store.current_path();
        (self.install)(&pem).map_err(|source| RotationError::Install { file, source })?;
        Ok(Some(info))
    }

    /// Runs until `cancel`: request the first certificate, then renew it.
    pub(crate) async fn run(self, cancel: CancellationToken) -> crate::tasks::TaskResult {
        rotation::keep_renewed(&self, fastrand::f64(), cancel).await
    }
}

impl Renewal for ServingRotation {
    const KIND: &'static str = "serving";
    const USERS: &'static str = "new TLS handshakes on the secure port";
    const REQUEST_WHEN_MISSING: bool = true;

    fn store(&self) -> CertStore {
        CertStore::serving(&self.cert_dir)
    }

    fn outdated(&self, pem: &[u8]) -> bool {
        !self.template.satisfied_by(pem)
    }

    async fn renew(&self) -> Result<PathBuf, RotationError> {
        let store = self.store();
        let file = bootstrap::obtain(
            &self.client,
            &store,
            &self.template,
            Signer::Serving,
            self.wait,
        )
        .await
        .map_err(RotationError::Obtain)?;
        let (pem, _) = rotation::current(&store)?;
        (self.install)(&pem).map_err(|source| RotationError::Install {
            file: file.clone(),
            source,
        })?;
        Ok(file)
    }
}

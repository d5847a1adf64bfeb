//! `rotateCertificates`: client-go's certificate manager for the kubelet client
//! certificate (`util/certificate/certificate_manager.go`). A task sleeps until the
//! rotation deadline, a jittered 70–90 % of the current certificate's lifetime, then
//! makes a new key and CSR, waits for the certificate, stores it (new pair file, the
//! `-current` link swapped) and puts it in the clients' [`CertSlot`], so the running
//! clients present it on their next connection. The CSR goes out with the current
//! certificate, or, once that has expired, with `--bootstrap-kubeconfig` when given
//! (kubelet's `newClientsetFn`). Failures back off 2 s doubling to 32 s, then retry
//! every 32 s, as client-go's `ExponentialBackoff` then `PollInfinite`.
//!
//! It applies only to a kubeconfig whose client certificate is the cert dir's
//! `kubelet-client-current.pem` (what the bootstrap writes and kind's kubelet.conf
//! names): a certificate from anywhere else is not oxlet's to replace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::bootstrap::{self, BootstrapError, CertInfo};
use super::cert_store::{CURRENT, CertStore, StoreError};
use super::client_cert::{CertSlot, IdentityError};
use super::kubeconfig;

/// client-go's `certificateWaitTimeout` for a rotation's CSR.
pub(crate) const ROTATION_WAIT: Duration = Duration::from_secs(15 * 60);
/// client-go's back-off: 2 s, doubling, jitter 0.1, five steps; then every 32 s.
const BACKOFF_INITIAL: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(32);

/// Why one rotation failed (retried after a back-off).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RotationError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cert dir {}: {CURRENT} is missing", dir.display())]
    NoCurrent { dir: PathBuf },
    #[error("cert dir {}: {CURRENT} holds no readable certificate", dir.display())]
    Unreadable { dir: PathBuf },
    #[error("cannot request a new client certificate")]
    Obtain(#[source] BootstrapError),
    #[error("bootstrap kubeconfig {}: cannot build a client", file.display())]
    BootstrapClient {
        file: PathBuf,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::KubeconfigError),
    #[error("the new certificate {}: cannot present it", file.display())]
    Identity {
        file: PathBuf,
        #[source]
        source: IdentityError,
    },
}

/// client-go's `nextRotationDeadline`: `not_before` plus 70–90 % of the lifetime;
/// `r` in [0, 1) is the random draw.
pub(crate) fn deadline(cert: &CertInfo, r: f64) -> jiff::Timestamp {
    let total = cert
        .not_after
        .duration_since(cert.not_before)
        .as_secs_f64()
        .max(0.0);
    let share = 0.7 + 0.2 * r.clamp(0.0, 1.0);
    let offset = jiff::SignedDuration::try_from_secs_f64(total * share).unwrap_or_default();
    cert.not_before
        .checked_add(offset)
        .unwrap_or(cert.not_after)
}

/// Which credentials send the CSR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credentials {
    /// The current certificate: still valid.
    Current,
    /// `--bootstrap-kubeconfig`: the current certificate has expired.
    Bootstrap,
    /// The current certificate has expired and there is no bootstrap: tried anyway
    /// (the apiserver will likely refuse it), loudly.
    Expired,
}

/// kubelet's `newClientsetFn` with client-go's `Current()` (nil once expired).
pub(crate) fn credentials(
    not_after: jiff::Timestamp,
    now: jiff::Timestamp,
    has_bootstrap: bool,
) -> Credentials {
    match (now < not_after, has_bootstrap) {
        (true, _) => Credentials::Current,
        (false, true) => Credentials::Bootstrap,
        (false, false) => Credentials::Expired,
    }
}

/// The wait after `failures` failed attempts in a row (1 for the first failure):
/// 2 s doubling to 32 s, jittered up to 10 % with `r` in [0, 1).
pub(crate) fn backoff(failures: u32, r: f64) -> Duration {
    let base = BACKOFF_INITIAL
        .saturating_mul(1u32 << failures.saturating_sub(1).min(5))
        .min(BACKOFF_MAX);
    base.mul_f64(1.0 + 0.1 * r.clamp(0.0, 1.0))
}

/// Whether the kubeconfig's client certificate is the cert dir's current link (the
/// only certificate rotation may replace).
pub(crate) fn applies(config: &kube::Config, cert_dir: &Path) -> bool {
    let a = &config.auth_info;
    if a.client_certificate_data
        .as_deref()
        .is_some_and(|d| !d.is_empty())
    {
        return false;
    }
    let Some(file) = a.client_certificate.as_deref().map(Path::new) else {
        return false;
    };
    let same_dir = |p: &Path| std::fs::canonicalize(p).ok();
    file.file_name().is_some_and(|n| n == CURRENT)
        && file.parent().and_then(same_dir).is_some()
        && file.parent().and_then(same_dir) == same_dir(cert_dir)
}

/// The rotation task's inputs.
#[derive(Clone)]
pub(crate) struct Rotation {
    pub cert_dir: PathBuf,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub node_name: String,
    /// The clients' certificate, replaced after each rotation.
    pub slot: CertSlot,
    /// A client presenting the slot's certificate (the main client).
    pub client: kube::Client,
    /// How long one CSR is waited on ([`ROTATION_WAIT`]).
    pub wait: Duration,
    /// The random draw of the first deadline (so the start-up log names the deadline
    /// the task keeps); each new certificate gets a fresh one.
    pub jitter: f64,
}

impl Rotation {
    /// The current certificate, from the store.
    fn current(&self) -> Result<(Vec<u8>, CertInfo), RotationError> {
        let store = CertStore::new(&self.cert_dir);
        let pem = store
            .read_current()?
            .ok_or_else(|| RotationError::NoCurrent {
                dir: self.cert_dir.clone(),
            })?;
        let info = bootstrap::cert_info(&pem).ok_or_else(|| RotationError::Unreadable {
            dir: self.cert_dir.clone(),
        })?;
        Ok((pem, info))
    }

    /// When the current certificate is due, for the start-up log.
    pub(crate) fn next_deadline(&self) -> Option<(CertInfo, jiff::Timestamp)> {
        let (_, info) = self.current().ok()?;
        let at = deadline(&info, self.jitter);
        Some((info, at))
    }

    /// Runs until `cancel`: sleep to the deadline, rotate, retry on failure.
    pub(crate) async fn run(self, cancel: CancellationToken) -> crate::tasks::TaskResult {
        let mut failures = 0u32;
        let mut jitter = self.jitter;
        loop {
            let wait = match self.current() {
                Ok((_, info)) if failures == 0 => {
                    let at = deadline(&info, jitter);
                    let now = jiff::Timestamp::now();
                    if info.not_after <= now {
                        tracing::error!(
                            subject = info.subject,
                            notAfter = %info.not_after,
                            "the client certificate has EXPIRED; the apiserver will refuse oxlet until it is rotated"
                        );
                    }
                    tracing::info!(
                        subject = info.subject,
                        notAfter = %info.not_after,
                        rotationDeadline = %at,
                        "waiting for the client certificate's rotation deadline"
                    );
                    until(at, now)
                }
                Ok(_) => backoff(failures, fastrand::f64()),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let retry = backoff(failures, fastrand::f64());
                    tracing::warn!(error = %error_chain(&e), retryIn = ?retry, "cannot read the current client certificate");
                    retry
                }
            };
            tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                () = tokio::time::sleep(wait) => {}
            }
            let attempt = tokio::select! {
                () = cancel.cancelled() => return Ok(()),
                r = self.rotate_once(jiff::Timestamp::now()) => r,
            };
            match attempt {
                Ok(file) => {
                    failures = 0;
                    jitter = fastrand::f64();
                    tracing::info!(certificate = %file.display(), "rotated the client certificate; new connections present it");
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %error_chain(&e), failures, "cannot rotate the client certificate; retrying after a back-off");
                }
            }
        }
    }

    /// One rotation: which client, the CSR, the store, the slot.
    async fn rotate_once(&self, now: jiff::Timestamp) -> Result<PathBuf, RotationError> {
        let (_, info) = self.current()?;
        let choice = credentials(info.not_after, now, self.bootstrap_kubeconfig.is_some());
        let client = match (choice, &self.bootstrap_kubeconfig) {
            (Credentials::Bootstrap, Some(boot)) => {
                tracing::warn!(bootstrapKubeconfig = %boot.display(), notAfter = %info.not_after, "the client certificate has expired; requesting a new one with the bootstrap credentials");
                let config = kubeconfig::load(boot).await?;
                kube::Client::try_from(config).map_err(|source| RotationError::BootstrapClient {
                    file: boot.clone(),
                    source,
                })?
            }
            (Credentials::Expired, _) => {
                tracing::error!(notAfter = %info.not_after, "the client certificate has EXPIRED and there is no --bootstrap-kubeconfig; requesting a new one with it anyway");
                self.client.clone()
            }
            _ => self.client.clone(),
        };
        let store = CertStore::new(&self.cert_dir);
        let file = bootstrap::obtain(&client, &store, &self.node_name, self.wait)
            .await
            .map_err(RotationError::Obtain)?;
        let (pem, _) = self.current()?;
        self.slot
            .replace(&pem)
            .map_err(|source| RotationError::Identity {
                file: file.clone(),
                source,
            })?;
        Ok(file)
    }
}

/// The time from `now` to `at`, zero when past.
fn until(at: jiff::Timestamp, now: jiff::Timestamp) -> Duration {
    Duration::try_from(at.duration_since(now)).unwrap_or_default()
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

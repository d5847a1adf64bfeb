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

use super::bootstrap::{self, CertInfo, ObtainError};
use super::cert_store::{CURRENT, CertStore, StoreError};
use super::client_cert::{CertSlot, IdentityError};
use super::csr::{Signer, Template};
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
    #[error("cert dir {}: {name} is missing", dir.display())]
    NoCurrent { dir: PathBuf, name: String },
    #[error("cert dir {}: {name} holds no readable certificate", dir.display())]
    Unreadable { dir: PathBuf, name: String },
    #[error("cannot obtain a new certificate")]
    Obtain(#[source] ObtainError),
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
    #[error("the serving certificate {}: cannot serve it", file.display())]
    Install {
        file: PathBuf,
        #[source]
        source: super::serving_cert::InstallError,
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
    /// When the current certificate is due, for the start-up log.
    pub(crate) fn next_deadline(&self) -> Option<(CertInfo, jiff::Timestamp)> {
        let (_, info) = current(&Renewal::store(self)).ok()?;
        let at = deadline(&info, self.jitter);
        Some((info, at))
    }

    /// Runs until `cancel`: sleep to the deadline, rotate, retry on failure.
    pub(crate) async fn run(self, cancel: CancellationToken) -> crate::tasks::TaskResult {
        let jitter = self.jitter;
        keep_renewed(&self, jitter, cancel).await
    }
}

impl Renewal for Rotation {
    const KIND: &'static str = "client";
    const USERS: &'static str = "new apiserver connections";
    const REQUEST_WHEN_MISSING: bool = false;

    fn store(&self) -> CertStore {
        CertStore::new(&self.cert_dir)
    }

    /// One rotation: which client, the CSR, the store, the slot.
    async fn renew(&self) -> Result<PathBuf, RotationError> {
        let now = jiff::Timestamp::now();
        let (_, info) = current(&self.store())?;
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
        let store = self.store();
        let template = Template::client(&self.node_name);
        let file = bootstrap::obtain(&client, &store, &template, Signer::Client, self.wait)
            .await
            .map_err(RotationError::Obtain)?;
        let (pem, _) = current(&store)?;
        self.slot
            .replace(&pem)
            .map_err(|source| RotationError::Identity {
                file: file.clone(),
                source,
            })?;
        Ok(file)
    }
}

/// One certificate kept renewed from one store: client-go's certificate manager,
/// whose loop ([`keep_renewed`]) is the same for the client and the serving
/// certificate; what differs is here.
pub(crate) trait Renewal {
    /// "client" or "serving", for logs.
    const KIND: &'static str;
    /// Who presents a new certificate, for logs.
    const USERS: &'static str;
    /// Whether a store without a current pair (or with one that holds no readable
    /// certificate) is a reason to request one now (the serving certificate's first
    /// request) rather than an error to retry.
    const REQUEST_WHEN_MISSING: bool;

    fn store(&self) -> CertStore;

    /// client-go's `certSatisfiesTemplate` failing: the current certificate no longer
    /// names what a request would, so it is renewed now, whatever its deadline.
    fn outdated(&self, _pem: &[u8]) -> bool {
        false
    }

    /// One renewal: a CSR, the store, and the new certificate put to use.
    fn renew(&self) -> impl Future<Output = Result<PathBuf, RotationError>> + Send;
}

/// The current pair and what it says, from `store`.
pub(crate) fn current(store: &CertStore) -> Result<(Vec<u8>, CertInfo), RotationError> {
    let missing = || RotationError::NoCurrent {
        dir: store.dir().to_path_buf(),
        name: store.current_name(),
    };
    let pem = store.read_current()?.ok_or_else(missing)?;
    let info = bootstrap::cert_info(&pem).ok_or_else(|| RotationError::Unreadable {
        dir: store.dir().to_path_buf(),
        name: store.current_name(),
    })?;
    Ok((pem, info))
}

/// How long to wait before the next renewal when the last one did not fail, and why.
pub(super) fn plan<R: Renewal>(
    r: &R,
    jitter: f64,
    now: jiff::Timestamp,
) -> Result<Duration, RotationError> {
    let kind = R::KIND;
    let (pem, info) = match current(&r.store()) {
        Err(e @ (RotationError::NoCurrent { .. } | RotationError::Unreadable { .. }))
            if R::REQUEST_WHEN_MISSING =>
        {
            tracing::info!(reason = %e, "no usable {kind} certificate; requesting one");
            return Ok(Duration::ZERO);
        }
        other => other?,
    };
    if info.not_after <= now {
        tracing::error!(subject = info.subject, notAfter = %info.not_after, "the {kind} certificate has EXPIRED; {} fail until it is rotated", R::USERS);
    }
    if r.outdated(&pem) {
        tracing::info!(subject = info.subject, notAfter = %info.not_after, "the {kind} certificate does not name what a new request would (the node's name or addresses changed); requesting a new one now");
        return Ok(Duration::ZERO);
    }
    let at = deadline(&info, jitter);
    tracing::info!(subject = info.subject, notAfter = %info.not_after, rotationDeadline = %at, "waiting for the {kind} certificate's rotation deadline");
    Ok(until(at, now))
}

/// client-go's manager loop, until `cancel`: sleep to the deadline (or not at all when
/// the certificate is missing or outdated), renew, and back off after a failure.
pub(crate) async fn keep_renewed<R: Renewal>(
    r: &R,
    mut jitter: f64,
    cancel: CancellationToken,
) -> crate::tasks::TaskResult {
    let kind = R::KIND;
    let mut failures = 0u32;
    loop {
        let wait = if failures > 0 {
            backoff(failures, fastrand::f64())
        } else {
            match plan(r, jitter, jiff::Timestamp::now()) {
                Ok(wait) => wait,
                Err(e) => {
                    failures = 1;
                    let retry = backoff(failures, fastrand::f64());
                    let retry_in = crate::duration::format_go_duration(retry);
                    tracing::warn!(error = %error_chain(&e), retryIn = retry_in, "cannot read the current {kind} certificate");
                    retry
                }
            }
        };
        tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            () = tokio::time::sleep(wait) => {}
        }
        let attempt = tokio::select! {
            () = cancel.cancelled() => return Ok(()),
            r = r.renew() => r,
        };
        match attempt {
            Ok(file) => {
                failures = 0;
                jitter = fastrand::f64();
                tracing::info!(certificate = %file.display(), "rotated the {kind} certificate; {} present it", R::USERS);
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::warn!(error = %error_chain(&e), failures, "cannot rotate the {kind} certificate; retrying after a back-off");
            }
        }
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

//! Making a container's image present (kubelet's `pkg/kubelet/images`): the pull
//! policy, the reference check, ImagePullBackOff, and how many pulls run at once
//! (`serializeImagePulls`, `maxParallelImagePulls`). A pull has no deadline (kubelet
//! puts none on it); it ends when the sync that waits for it is dropped.

use std::time::Duration;

use k8s_cri::v1 as cri;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::credentials::{
    self, Credential, CredentialPlugins, Keyring, Login, LoginSource, NodeKeyring,
};
use crate::cri::Cri;
use crate::cri::CriError;
use crate::duration::format_go_duration;
use crate::events::EventType::{Normal, Warning};
use crate::events::{EventRecorder, ObjectRef, reason};
use crate::pod::{ImagePullPolicy, WaitingReason, pod_ref, pod_uid};

use super::pull_records::{
    Access, Check, PullCredentials, PullRecords, SecretCoordinates, ServiceAccountCoordinates,
};

/// How soon a pod whose pull failed is synced again: kubelet's pod worker retries a
/// failed sync after its 10 s `backOffPeriod`, whatever the image back-off, so a
/// sync lands inside a longer back-off and shows ImagePullBackOff (waiting exactly
/// for the back-off's end would only ever show ErrImagePull).
const RETRY_PERIOD: Duration = Duration::from_secs(10);

/// Why a container's image is not there: the waiting reason, kubelet's message,
/// and when to try again if the image is in back-off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub(crate) struct ImageError {
    pub reason: WaitingReason,
    pub message: String,
    pub retry_after: Option<Duration>,
}

/// How many pulls may run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PullLimit {
    /// `serializeImagePulls: true` (kubelet's default): one at a time.
    Serial,
    /// Not serialized: at most this many (`maxParallelImagePulls`), or no limit.
    Parallel(Option<usize>),
}

impl PullLimit {
    /// The limit the two KubeletConfiguration fields give (validated by the options).
    pub(crate) fn from_settings(serialize: bool, max_parallel: Option<usize>) -> PullLimit {
        if serialize {
            PullLimit::Serial
        } else {
            PullLimit::Parallel(max_parallel)
        }
    }
}

/// Pulls images for pod workers, within the pull limit, with per pod+image back-off.
#[derive(Debug)]
pub(crate) struct ImagePuller {
    /// None: no limit.
    slots: Option<Semaphore>,
    backoff: Backoff,
    events: EventRecorder,
    /// The node's own registry logins (its docker config files).
    node_keyring: Arc<NodeKeyring>,
    /// Which credentials pulled each image, and the policy that checks them; None:
    /// any pod may use any present image (no records are kept).
    records: Option<Arc<PullRecords>>,
    /// The credential provider plugins, when configured.
    plugins: Option<Arc<CredentialPlugins>>,
}

impl Default for ImagePuller {
    fn default() -> Self {
        ImagePuller::new(PullLimit::Serial)
    }
}

/// The runtime's own words for a failure, without oxlet's "CRI call failed" frame.
pub(crate) fn runtime_reason(e: &CriError) -> String {
    match e {
        CriError::Status { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

impl ImagePuller {
    pub(crate) fn new(limit: PullLimit) -> Self {
        let slots = match limit {
            PullLimit::Serial => Some(1),
            PullLimit::Parallel(n) => n,
        };
        ImagePuller {
            slots: slots.map(|n| Semaphore::new(n.max(1))),
            backoff: Backoff::default(),
            events: EventRecorder::log_only(),
            node_keyring: Arc::new(NodeKeyring::empty()),
            records: None,
            plugins: None,
        }
    }

    /// Keeps pull records and checks a pod's credentials before it uses a present
    /// image (`imagePullCredentialsVerificationPolicy`).
    pub(crate) fn with_pull_records(mut self, records: Arc<PullRecords>) -> Self {
        self.records = Some(records);
        self
    }

    /// The credential provider plugins asked for the images they match.
    pub(crate) fn with_credential_plugins(
        mut self,
        plugins: Option<Arc<CredentialPlugins>>,
    ) -> Self {
        self.plugins = plugins;
        self
    }

    /// Where the node's registry logins are read (kubelet's docker config search path).
    pub(crate) fn with_node_keyring(mut self, keyring: NodeKeyring) -> Self {
        self.node_keyring = Arc::new(keyring);
        self
    }

    /// Forgets the back-off of a pod that is gone.
    pub(crate) fn forget_pod(&self, uid: &str) {
        self.backoff.forget_prefix(&format!("{uid}_"));
    }

    /// Housekeeping of back-off entries.
    /// Where pull events go (kubelet's image manager records them).
    pub(crate) fn with_events(mut self, events: EventRecorder) -> Self {
        self.events = events;
        self
    }

    pub(crate) fn gc_backoff(&self) {
        self.backoff.gc();
    }

    /// Makes sure the container's image is present per its pull policy (kubelet's
    /// `EnsureImageExists`); returns the image reference to run. `pull_secrets` are the
    /// pod's `imagePullSecrets` that could be fetched.
    pub(crate) async fn ensure_image(
        &self,
        cri: &dyn Cri,
        pod: &Pod,
        c: &Container,
        sandbox_config: &cri::PodSandboxConfig,
        pull_secrets: &[&Secret],
    ) -> Result<String, ImageError> {
        let image = c.image.as_deref().unwrap_or("");
        let pod_ref = pod_ref(pod);
        let uid = pod_uid(pod);
        let obj = ObjectRef::container(pod, &c.name);
        let event = |kind, reason, msg: &str| self.events.event(&obj, kind, reason, msg);
        let err = |reason, message: String| ImageError {
            reason,
            message,
            retry_after: None,
        };
        if let Err(e) = crate::pod::check_image_ref(image) {
            let msg = format!("Failed to apply default image tag {image:?}: {e}");
            warn!(pod = %pod_ref, podUID = %uid, container = %c.name, image, message = %msg, "invalid image name");
            event(Warning, reason::INSPECT_FAILED, &msg);
            // kubelet's startContainer adds `Error: <err>` for every EnsureImageExists failure.
            event(Warning, reason::FAILED, "Error: InvalidImageName");
            return Err(err(WaitingReason::InvalidImageName, msg));
        }
        let policy = ImagePullPolicy::of(c);
        let present = match cri.image_status(image).await {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("Failed to inspect image {image:?}: {}", runtime_reason(&e));
                warn!(pod = %pod_ref, podUID = %uid, container = %c.name, image, message = %msg, "cannot inspect image");
                event(Warning, reason::INSPECT_FAILED, &msg);
                event(Warning, reason::FAILED, "Error: ImageInspectError");
                return Err(err(WaitingReason::ImageInspectError, msg));
            }
        };
        // kubelet says the same whether the image is absent or present but not this
        // pod's to use: a pod must not learn that another pod's private image is here.
        let never_pull = || {
            let msg = format!("Container image {image:?} is not present with pull policy of Never");
            warn!(pod = %pod_ref, podUID = %uid, container = %c.name, image, "{msg}");
            event(Warning, reason::ERR_IMAGE_NEVER_PULL, &msg);
            event(Warning, reason::FAILED, "Error: ErrImageNeverPull");
            err(WaitingReason::ErrImageNeverPull, msg)
        };
        match (policy, present) {
            (ImagePullPolicy::Never, None) => return Err(never_pull()),
            (ImagePullPolicy::Never | ImagePullPolicy::IfNotPresent, Some(img)) => {
                match self.present_access(pod, image, &img.id, pull_secrets).await {
                    Ok(msg) => {
                        event(Normal, reason::PULLED, &msg);
                        return Ok(img.id);
                    }
                    Err(cause) => {
                        info!(pod = %pod_ref, podUID = %uid, container = %c.name, image, imageRef = %img.id, policy = self.verify_policy(), cause, "image present but this pod's pull credentials must be verified first: pulling it with them");
                        if policy == ImagePullPolicy::Never {
                            return Err(never_pull());
                        }
                    }
                }
            }
            _ => {}
        }
        self.pull_image(cri, pod, c, sandbox_config, pull_secrets)
            .await
    }

    /// The name of the credential verification policy in force, for the log.
    fn verify_policy(&self) -> &'static str {
        self.records
            .as_ref()
            .map_or("NeverVerify", |r| r.policy().name())
    }

    /// Whether the pod may use the present `image` without pulling it (kubelet's
    /// `MustAttemptImagePull` with the pod's matching pull secrets): `Ok` with the
    /// Pulled event's message, or `Err` with why it must pull.
    async fn present_access(
        &self,
        pod: &Pod,
        image: &str,
        image_ref: &str,
        pull_secrets: &[&Secret],
    ) -> Result<String, &'static str> {
        let Some(records) = &self.records else {
            return Ok(format!(
                "Container image {image:?} already present on machine"
            ));
        };
        let access = match records.check(image, image_ref) {
            Check::Decided(access) => access,
            Check::Needs(known) => {
                let (secrets, service_account) = self.credentials(pod, image, pull_secrets).await;
                records.match_credentials(
                    image,
                    image_ref,
                    &known,
                    &secrets,
                    service_account.as_ref(),
                )
            }
        };
        debug!(pod = %pod_ref(pod), image, imageRef = image_ref, access = access.name(), "image pull credentials checked");
        match access {
            Access::MustPull(cause) => Err(cause),
            _ => Ok(format!(
                "Container image {image:?} already present on machine and can be accessed by the pod"
            )),
        }
    }

    /// What the records know of the pod's matching logins: its pull secrets'
    /// coordinates with each login's hash, and the service account a credential plugin
    /// was asked for. A pull secret that does not parse gives none; the pull then fails
    /// with its reason, as kubelet's keyring does.
    async fn credentials(
        &self,
        pod: &Pod,
        image: &str,
        pull_secrets: &[&Secret],
    ) -> (Vec<SecretCoordinates>, Option<ServiceAccountCoordinates>) {
        let logins = self
            .logins(pod, image, pull_secrets)
            .await
            .unwrap_or_default();
        let mut secrets = Vec::new();
        let mut service_account = None;
        for l in &logins {
            match &l.source {
                LoginSource::Secret {
                    namespace,
                    name,
                    uid,
                } => secrets.push(SecretCoordinates {
                    uid: uid.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    credential_hash: l.credential.hash(),
                }),
                LoginSource::ServiceAccount {
                    namespace,
                    name,
                    uid,
                } => {
                    service_account = Some(ServiceAccountCoordinates {
                        uid: uid.clone(),
                        namespace: namespace.clone(),
                        name: name.clone(),
                    });
                }
                LoginSource::Node => {}
            }
        }
        (secrets, service_account)
    }

    /// The pull itself, within the back-off and the pull limit, with its events and
    /// its pull record (kubelet's `pullImage`).
    async fn pull_image(
        &self,
        cri: &dyn Cri,
        pod: &Pod,
        c: &Container,
        sandbox_config: &cri::PodSandboxConfig,
        pull_secrets: &[&Secret],
    ) -> Result<String, ImageError> {
        let image = c.image.as_deref().unwrap_or("");
        let (pod_ref, uid) = (pod_ref(pod), pod_uid(pod));
        let obj = ObjectRef::container(pod, &c.name);
        let event = |kind, reason, msg: &str| self.events.event(&obj, kind, reason, msg);
        let key = format!("{uid}_{image}");
        // Counted from the failed pull, not from now: from now it would never end.
        if let Some(left) = self.backoff.remaining_since_update(&key) {
            let msg = format!("Back-off pulling image {image:?}");
            event(Normal, reason::BACK_OFF, &msg);
            event(Warning, reason::FAILED, "Error: ImagePullBackOff");
            return Err(ImageError {
                reason: WaitingReason::ImagePullBackOff,
                message: msg,
                retry_after: Some(left.min(RETRY_PERIOD)),
            });
        }
        let asked = tokio::time::Instant::now();
        // Waiting for a slot is cancelled with the sync, like the pull itself.
        let _slot = match &self.slots {
            Some(s) => Some(s.acquire().await.expect("never closed")),
            None => None,
        };
        let started = tokio::time::Instant::now();
        event(Normal, reason::PULLING, &format!("Pulling image {image:?}"));
        let intent = self.records.as_ref().map(|r| (r, r.record_intent(image)));
        if let Some((_, Err(e))) = &intent {
            warn!(image, error = %e, "failed to record image pull intent");
        }
        crate::metrics::pull_started(uid);
        let pulled = self
            .pull(cri, pod, image, pull_secrets, sandbox_config)
            .await;
        crate::metrics::pull_finished(uid);
        match pulled {
            Ok((image_ref, login)) => {
                if let Some((records, Ok(()))) = intent {
                    records.record_pulled(image, &image_ref, Some(&credentials_of(login.as_ref())));
                }
                let pulled = started.elapsed();
                let size = match cri.image_status(&image_ref).await {
                    Ok(Some(i)) => i.size,
                    _ => 0,
                };
                crate::metrics::image_pulled(size, asked.elapsed());
                debug!(pod = %pod_ref, podUID = %uid, container = %c.name, image, imageRef = %image_ref, "image pulled");
                let msg = format!(
                    "Successfully pulled image {image:?} in {} ({} including waiting). Image size: {size} bytes.",
                    format_go_duration(truncate_ms(pulled)),
                    format_go_duration(truncate_ms(asked.elapsed()))
                );
                event(Normal, reason::PULLED, &msg);
                Ok(image_ref)
            }
            Err(failure) => {
                if let Some((records, Ok(()))) = intent {
                    records.record_failed(image);
                }
                let failed_at = tokio::time::Instant::now();
                self.backoff.next(&key, failed_at);
                let msg = format!("Failed to pull image {image:?}: {failure}");
                warn!(pod = %pod_ref, podUID = %uid, container = %c.name, image, "{msg}");
                event(Warning, reason::FAILED, &msg);
                event(Warning, reason::FAILED, "Error: ErrImagePull");
                // The first failure reports ErrImagePull; retries wait out the back-off.
                Err(ImageError {
                    reason: WaitingReason::ErrImagePull,
                    message: msg,
                    retry_after: self.backoff.current(&key).map(|d| d.min(RETRY_PERIOD)),
                })
            }
        }
    }

    /// The logins that match `image`'s repository: the pod's pull secrets first,
    /// then the node's docker config, then the credential provider plugins' (kubelet's
    /// union keyring).
    async fn logins(
        &self,
        pod: &Pod,
        image: &str,
        pull_secrets: &[&Secret],
    ) -> Result<Vec<Login>, credentials::DockerConfigError> {
        let repository = crate::pod::image_repository(image);
        let pod_ring = credentials::keyring_from_secrets(pull_secrets)?;
        let plugin_ring = match &self.plugins {
            Some(p) => p.keyring(&repository, pod).await,
            None => Keyring::default(),
        };
        let node_ring = self.node_keyring.keyring();
        Ok(credentials::lookup(
            &[&pod_ring, &node_ring, &plugin_ring],
            &repository,
        ))
    }

    /// kubelet's `pullImage` with its keyring: no login matches the repository, one pull
    /// without; else each login in turn until one is accepted. Returns the image
    /// reference and the login that was accepted (None: none was needed).
    async fn pull(
        &self,
        cri: &dyn Cri,
        pod: &Pod,
        image: &str,
        pull_secrets: &[&Secret],
        sandbox_config: &cri::PodSandboxConfig,
    ) -> Result<(String, Option<Login>), PullFailure> {
        let repository = crate::pod::image_repository(image);
        let logins = self.logins(pod, image, pull_secrets).await?;
        let sandbox = || Some(sandbox_config.clone());
        if logins.is_empty() {
            debug!(pod = %pod_ref(pod), image, repository = %repository, "no registry login matches: pulling anonymously");
            return match cri.pull_image(image, None, sandbox()).await {
                Ok(r) => Ok((r, None)),
                Err(e) => Err(PullFailure::Refused(vec![e])),
            };
        }
        info!(pod = %pod_ref(pod), image, repository = %repository, logins = logins.len(), "pulling with the registry logins that match (the pod's imagePullSecrets first, then the node's docker config, then the credential provider plugins')");
        let mut refusals = Vec::new();
        for login in logins {
            match cri
                .pull_image(image, Some(auth_config(&login.credential)), sandbox())
                .await
            {
                Ok(r) => return Ok((r, Some(login))),
                Err(e) => refusals.push(e),
            }
        }
        Err(PullFailure::Refused(refusals))
    }
}

/// What the pull records keep of the login a pull used (kubelet's
/// `trackedToImagePullCreds`): none or the node's own make the image every pod's.
fn credentials_of(login: Option<&Login>) -> PullCredentials {
    let Some(login) = login else {
        return PullCredentials::node_wide();
    };
    match &login.source {
        LoginSource::Secret {
            namespace,
            name,
            uid,
        } => PullCredentials {
            kubernetes_secrets: vec![SecretCoordinates {
                uid: uid.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                credential_hash: login.credential.hash(),
            }],
            ..Default::default()
        },
        LoginSource::ServiceAccount {
            namespace,
            name,
            uid,
        } => PullCredentials {
            kubernetes_service_accounts: vec![ServiceAccountCoordinates {
                uid: uid.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
            }],
            ..Default::default()
        },
        LoginSource::Node => PullCredentials::node_wide(),
    }
}

/// Why a pull did not happen; shown after kubelet's `Failed to pull image "…": `.
#[derive(Debug, thiserror::Error)]
enum PullFailure {
    /// A pull secret does not parse: no pull was tried.
    #[error(transparent)]
    Secrets(#[from] credentials::DockerConfigError),
    /// The runtime refused each try (one per login, or one without): its own words, or
    /// every refusal as kubelet's aggregate error prints them (`[a, b]`).
    #[error("{}", refusals_text(.0))]
    Refused(Vec<CriError>),
}

fn refusals_text(refusals: &[CriError]) -> String {
    match refusals {
        [one] => runtime_reason(one),
        many => format!(
            "[{}]",
            many.iter()
                .map(runtime_reason)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The CRI form of a login: user name and password, as kubelet sends them.
fn auth_config(login: &Credential) -> cri::AuthConfig {
    cri::AuthConfig {
        username: login.username.clone(),
        password: login.password.clone(),
        ..Default::default()
    }
}

/// Go's `Duration.Truncate(time.Millisecond)`, as kubelet prints pull times.
fn truncate_ms(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
#[path = "pull_tests.rs"]
mod tests;

//! kubelet's image pull manager (`pkg/kubelet/images/pullmanager`, the
//! KubeletEnsureSecretPulledImages feature, beta and on since 1.35): which credentials
//! pulled each image, so that a pod whose credentials were never checked against a
//! private image does not get it from the node's cache.
//!
//! Two kinds of record, one JSON file each under `<root-dir>/image_manager/`, named
//! `sha256-<hex of the key>` and readable by root alone, in kubelet's own format
//! (`kubelet.config.k8s.io/v1alpha1`), so the records carry over between kubelet and
//! oxlet:
//! - `pulling/`: an `ImagePullIntent` per image being pulled. One left over from a
//!   crash means the agent pulled that image, even if it never learnt with what.
//! - `pulled/`: an `ImagePulledRecord` per image ID: for each repository that resolved
//!   to it, the pull secrets (coordinates and a hash of the login) and service accounts
//!   that pulled it, or `nodePodsAccessible` when it was pulled with no login or with
//!   the node's own.
//!
//! The policy (`imagePullCredentialsVerificationPolicy`) says which present images
//! need the check at all.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use k8s_cri::v1 as cri;
use serde::{Deserialize, Serialize};
use tracing::{debug, warn};

use crate::locks::Locked as _;

/// The API group and kinds of kubelet's record files.
const API_VERSION: &str = "kubelet.config.k8s.io/v1alpha1";
const INTENT_KIND: &str = "ImagePullIntent";
const PULLED_KIND: &str = "ImagePulledRecord";
/// A record file larger than this is not one oxlet wrote (a record with a thousand
/// secrets is about 250 KiB).
const RECORD_LIMIT: u64 = 1 << 20;
/// At most this many secrets or service accounts are kept per repository; beyond,
/// a pod that pulled is not recorded, so it is checked again next time (kubelet stops
/// adding while it matches at 100, oxlet bounds every write).
const CREDENTIALS_PER_IMAGE: usize = 1000;

/// `imagePullCredentialsVerificationPolicy`: which present images need their
/// credentials verified before a pod may use them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VerifyPolicy {
    /// Any pod may use any present image (kubelet before 1.33).
    NeverVerify,
    /// Images the agent did not pull (preloaded) are not verified; kubelet's default.
    NeverVerifyPreloadedImages,
    /// Only the listed images are exempt.
    NeverVerifyAllowlistedImages(Allowlist),
    AlwaysVerify,
}

impl VerifyPolicy {
    pub(crate) const DEFAULT: &str = "NeverVerifyPreloadedImages";

    /// The policy named `name` with `allowlist` (`preloadedImagesVerificationAllowlist`),
    /// checked as kubelet validates its configuration.
    pub(crate) fn parse(
        name: &str,
        allowlist: &[String],
    ) -> Result<VerifyPolicy, VerifyPolicyError> {
        let policy = match name {
            "NeverVerify" => VerifyPolicy::NeverVerify,
            "" | "NeverVerifyPreloadedImages" => VerifyPolicy::NeverVerifyPreloadedImages,
            "NeverVerifyAllowlistedImages" => {
                VerifyPolicy::NeverVerifyAllowlistedImages(Allowlist::parse(allowlist)?)
            }
            "AlwaysVerify" => VerifyPolicy::AlwaysVerify,
            other => return Err(VerifyPolicyError::Unsupported(other.to_string())),
        };
        if !allowlist.is_empty() && !matches!(policy, VerifyPolicy::NeverVerifyAllowlistedImages(_))
        {
            return Err(VerifyPolicyError::AllowlistWithoutPolicy);
        }
        Ok(policy)
    }

    /// The allowlist as written (empty but for NeverVerifyAllowlistedImages).
    pub(crate) fn allowlist(&self) -> &[String] {
        match self {
            VerifyPolicy::NeverVerifyAllowlistedImages(list) => &list.patterns,
            _ => &[],
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            VerifyPolicy::NeverVerify => "NeverVerify",
            VerifyPolicy::NeverVerifyPreloadedImages => "NeverVerifyPreloadedImages",
            VerifyPolicy::NeverVerifyAllowlistedImages(_) => "NeverVerifyAllowlistedImages",
            VerifyPolicy::AlwaysVerify => "AlwaysVerify",
        }
    }

    /// Whether a present image (`repository`, normalized, no tag) needs its credentials
    /// checked; `pulled_by_agent`: a record or an intent says the agent pulled it.
    fn requires_verification(&self, repository: &str, pulled_by_agent: bool) -> bool {
        match self {
            VerifyPolicy::NeverVerify => false,
            VerifyPolicy::NeverVerifyPreloadedImages => pulled_by_agent,
            VerifyPolicy::NeverVerifyAllowlistedImages(list) => !list.matches(repository),
            VerifyPolicy::AlwaysVerify => true,
        }
    }
}

/// Why the verification policy or its allowlist is refused, in kubelet's
/// configuration validation's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum VerifyPolicyError {
    #[error("unsupported value of imagePullCredentialsVerificationPolicy: {0:?}")]
    Unsupported(String),
    #[error(
        "can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVerificationPolicy` is not \"NeverVerifyAllowlistedImages\""
    )]
    AllowlistWithoutPolicy,
    #[error("leading/trailing spaces are not allowed: {0}")]
    Spaces(String),
    #[error("at least registry hostname is required")]
    NoRegistry,
    #[error("the supplied pattern is too short: {0}")]
    TooShort(String),
    #[error("not a valid wildcard pattern, only patterns ending with '/*' are allowed: {0}")]
    Wildcard(String),
    #[error("failed to parse as an image name: {0}")]
    ImageName(crate::pod::InvalidImageRef),
    #[error("neither tag nor digest is accepted in an image reference: {0}")]
    TagOrDigest(String),
}

/// `preloadedImagesVerificationAllowlist`: repositories without tag or digest, or a
/// prefix ending in a whole path segment `/*`. Both sides are normalized
/// (`busybox` is `docker.io/library/busybox`), as kubelet 1.36 compares them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Allowlist {
    /// As written, for `/configz`.
    patterns: Vec<String>,
    exact: HashSet<String>,
    prefixes: Vec<String>,
}

impl Allowlist {
    fn parse(patterns: &[String]) -> Result<Allowlist, VerifyPolicyError> {
        use VerifyPolicyError as E;
        let mut list = Allowlist::default();
        for p in patterns {
            if p.trim() != p {
                return Err(E::Spaces(p.clone()));
            }
            let (stem, wildcard) = match p.strip_suffix("/*") {
                Some(stem) => (stem, true),
                None => (p.as_str(), false),
            };
            if stem.is_empty() {
                return Err(if wildcard {
                    E::NoRegistry
                } else {
                    E::TooShort(p.clone())
                });
            }
            if stem.contains('*') {
                return Err(E::Wildcard(p.clone()));
            }
            if wildcard {
                list.prefixes.push(format!("{stem}/"));
                continue;
            }
            crate::pod::check_image_ref(stem).map_err(E::ImageName)?;
            let repository = crate::pod::image_repository(stem);
            if crate::pod::image_repository(&format!("{stem}:x")) != repository
                || stem.contains('@')
                || has_tag(stem)
            {
                return Err(E::TagOrDigest(p.clone()));
            }
            list.exact.insert(repository);
        }
        list.patterns = patterns.to_vec();
        Ok(list)
    }

    fn matches(&self, repository: &str) -> bool {
        self.exact.contains(repository) || self.prefixes.iter().any(|p| repository.starts_with(p))
    }
}

/// A tag: a ':' after the last '/' (one before it is a port).
fn has_tag(image: &str) -> bool {
    let last = image.rsplit('/').next().unwrap_or(image);
    last.contains(':')
}

/// The pull secret a login came from, with a hash of the login itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SecretCoordinates {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub credential_hash: String,
}

/// The service account a credential plugin was given the token of.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceAccountCoordinates {
    pub uid: String,
    pub namespace: String,
    pub name: String,
}

/// What pulled an image (kubelet's `ImagePullCredentials`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PullCredentials {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_secrets: Vec<SecretCoordinates>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_service_accounts: Vec<ServiceAccountCoordinates>,
    /// Pulled with no login or the node's own: every pod on the node may use it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub node_pods_accessible: bool,
}

impl PullCredentials {
    pub(crate) fn node_wide() -> PullCredentials {
        PullCredentials {
            node_pods_accessible: true,
            ..Default::default()
        }
    }

    /// Adds `new` (kubelet's `pulledRecordMergeNewCreds`); whether anything changed.
    fn merge(&mut self, new: &PullCredentials) -> bool {
        if self.node_pods_accessible {
            return false;
        }
        if new.node_pods_accessible {
            *self = PullCredentials::node_wide();
            return true;
        }
        let mut changed = false;
        for s in &new.kubernetes_secrets {
            let same = |c: &SecretCoordinates| {
                c.uid == s.uid && c.namespace == s.namespace && c.name == s.name
            };
            match self.kubernetes_secrets.iter().position(same) {
                Some(i) if self.kubernetes_secrets[i].credential_hash == s.credential_hash => {}
                Some(i) => {
                    self.kubernetes_secrets[i]
                        .credential_hash
                        .clone_from(&s.credential_hash);
                    changed = true;
                }
                None if self.kubernetes_secrets.len() < CREDENTIALS_PER_IMAGE => {
                    self.kubernetes_secrets.push(s.clone());
                    changed = true;
                }
                None => {}
            }
        }
        for a in &new.kubernetes_service_accounts {
            if !self.kubernetes_service_accounts.contains(a)
                && self.kubernetes_service_accounts.len() < CREDENTIALS_PER_IMAGE
            {
                self.kubernetes_service_accounts.push(a.clone());
                changed = true;
            }
        }
        self.kubernetes_secrets.sort();
        self.kubernetes_service_accounts.sort();
        changed
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IntentFile {
    kind: String,
    api_version: String,
    image: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PulledFile {
    kind: String,
    api_version: String,
    last_updated_time: jiff::Timestamp,
    image_ref: String,
    #[serde(default)]
    credential_mapping: BTreeMap<String, PullCredentials>,
}

/// Why a present image may or may not be used without a pull; said in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// The policy does not ask for a check here.
    NotVerified,
    /// Pulled with no login or the node's own.
    NodeWide,
    /// One of the pod's pull secrets (same coordinates or same login) pulled it.
    SecretMatches,
    /// The pod's service account pulled it through a credential plugin.
    ServiceAccountMatches,
    /// Must be pulled with the pod's own credentials first.
    MustPull(&'static str),
}

impl Access {
    /// The decision's name, for the log.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Access::NotVerified => "not verified (the policy exempts it)",
            Access::NodeWide => "node-wide (pulled with no login or the node's own)",
            Access::SecretMatches => "one of the pod's pull secrets pulled it",
            Access::ServiceAccountMatches => "the pod's service account pulled it",
            Access::MustPull(cause) => cause,
        }
    }
}

/// What [`PullRecords::check`] found.
#[derive(Debug)]
pub(crate) enum Check {
    /// Decided without the pod's credentials.
    Decided(Access),
    /// Only a pod whose credentials are among these may use the image.
    Needs(PullCredentials),
}

/// The records and the policy; one per node, shared by the puller and the image GC.
#[derive(Debug)]
pub(crate) struct PullRecords {
    pulling: PathBuf,
    pulled: PathBuf,
    policy: VerifyPolicy,
    /// Pulls in flight per image; the files are read and written under this lock.
    intents: Mutex<HashMap<String, u32>>,
}

impl PullRecords {
    /// Opens (creating, 0700) `<root_dir>/image_manager/{pulling,pulled}`.
    pub(crate) fn open(root_dir: &Path, policy: VerifyPolicy) -> std::io::Result<PullRecords> {
        use std::os::unix::fs::DirBuilderExt as _;
        let base = root_dir.join("image_manager");
        let records = PullRecords {
            pulling: base.join("pulling"),
            pulled: base.join("pulled"),
            policy,
            intents: Mutex::default(),
        };
        for dir in [&records.pulling, &records.pulled] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        Ok(records)
    }

    pub(crate) fn policy(&self) -> &VerifyPolicy {
        &self.policy
    }

    /// Notes that `image` is about to be pulled (kubelet's `RecordPullIntent`).
    pub(crate) fn record_intent(&self, image: &str) -> std::io::Result<()> {
        let mut intents = self.intents.locked();
        let body = serde_json::to_vec(&IntentFile {
            kind: INTENT_KIND.into(),
            api_version: API_VERSION.into(),
            image: image.into(),
        })
        .expect("serializable");
        crate::private_file::write_atomically(&self.pulling.join(file_name(image)), &body)?;
        *intents.entry(image.to_string()).or_default() += 1;
        Ok(())
    }

    /// `image` was pulled as `image_ref` with `credentials` (None: unknown, so every
    /// pod is checked next time); the intent ends.
    pub(crate) fn record_pulled(
        &self,
        image: &str,
        image_ref: &str,
        credentials: Option<&PullCredentials>,
    ) {
        let mut intents = self.intents.locked();
        if let Err(e) = self.merge_pulled(image, image_ref, credentials) {
            warn!(image, imageRef = image_ref, error = %e, "failed to write image pulled record");
            return;
        }
        self.end_intent(&mut intents, image);
    }

    /// The pull of `image` failed; the intent ends.
    pub(crate) fn record_failed(&self, image: &str) {
        let mut intents = self.intents.locked();
        self.end_intent(&mut intents, image);
    }

    fn end_intent(&self, intents: &mut HashMap<String, u32>, image: &str) {
        let left = intents.get(image).copied().unwrap_or(0);
        if left > 1 {
            intents.insert(image.to_string(), left - 1);
            return;
        }
        match std::fs::remove_file(self.pulling.join(file_name(image))) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                warn!(image, error = %e, "failed to remove image pull intent");
                return;
            }
        }
        intents.remove(image);
    }

    /// Writes the pulled record of `image_ref` with `credentials` merged in, if that
    /// changes it (kubelet's `writePulledRecordIfChanged`).
    fn merge_pulled(
        &self,
        image: &str,
        image_ref: &str,
        credentials: Option<&PullCredentials>,
    ) -> std::io::Result<()> {
        let repository = crate::pod::image_repository(image);
        let existing = self.read_pulled(image_ref).unwrap_or_else(|e| {
            debug!(imageRef = image_ref, error = %e, "unreadable image pulled record: writing a new one");
            None
        });
        let mut record = existing.unwrap_or_else(|| PulledFile {
            kind: PULLED_KIND.into(),
            api_version: API_VERSION.into(),
            last_updated_time: jiff::Timestamp::now(),
            image_ref: image_ref.into(),
            credential_mapping: BTreeMap::new(),
        });
        let is_new = record.credential_mapping.is_empty() && !self.pulled_exists(image_ref);
        let changed = match (credentials, record.credential_mapping.get_mut(&repository)) {
            (None, _) => false,
            (Some(c), Some(known)) => known.merge(c),
            (Some(c), None) => {
                let mut fresh = PullCredentials::default();
                let changed = fresh.merge(c);
                if changed {
                    record.credential_mapping.insert(repository, fresh);
                }
                changed
            }
        };
        if !changed && !is_new {
            return Ok(());
        }
        record.last_updated_time = jiff::Timestamp::now();
        let body = serde_json::to_vec(&record).expect("serializable");
        crate::private_file::write_atomically(&self.pulled.join(file_name(image_ref)), &body)
    }

    fn pulled_exists(&self, image_ref: &str) -> bool {
        self.pulled.join(file_name(image_ref)).exists()
    }

    fn read_pulled(&self, image_ref: &str) -> std::io::Result<Option<PulledFile>> {
        let record: Option<PulledFile> = read_json(&self.pulled.join(file_name(image_ref)))?;
        // A file of another image (a hash collision, a hand-made file) is no record.
        Ok(record.filter(|r| r.image_ref == image_ref && r.kind == PULLED_KIND))
    }

    fn intent_exists(&self, image: &str) -> std::io::Result<bool> {
        let intent: Option<IntentFile> = read_json(&self.pulling.join(file_name(image)))?;
        Ok(intent.is_some_and(|i| i.image == image))
    }

    /// The first half of kubelet's `MustAttemptImagePull` for the present `image`
    /// (resolved to `image_ref`): what the policy and the records decide without the
    /// pod's credentials, or the credentials known to have pulled it, which the pod's
    /// must then match ([`match_credentials`](Self::match_credentials)). Split so that
    /// the pod's logins (its secrets parsed, credential plugins asked) are looked up
    /// only when a check needs them.
    pub(crate) fn check(&self, image: &str, image_ref: &str) -> Check {
        let repository = crate::pod::image_repository(image);
        let intents = self.intents.locked();
        let (record, pulled_by_agent) = match self.read_pulled(image_ref) {
            Ok(Some(r)) => (Some(r), true),
            Ok(None) => {
                let intent = intents.get(image).is_some_and(|n| *n > 0)
                    || self.intent_exists(image).unwrap_or(true);
                (None, intent)
            }
            Err(e) => {
                warn!(image, imageRef = image_ref, error = %e, "Unable to access cache records about image pulls");
                return Check::Decided(Access::MustPull("its pull records cannot be read"));
            }
        };
        drop(intents);
        if !self
            .policy
            .requires_verification(&repository, pulled_by_agent)
        {
            return Check::Decided(Access::NotVerified);
        }
        let Some(mut record) = record else {
            return Check::Decided(Access::MustPull(
                "no record says with what credentials it was pulled",
            ));
        };
        let Some(known) = record.credential_mapping.remove(&repository) else {
            return Check::Decided(Access::MustPull(
                "it was never pulled under this name with known credentials",
            ));
        };
        if known.node_pods_accessible {
            return Check::Decided(Access::NodeWide);
        }
        Check::Needs(known)
    }

    /// The second half: whether one of the pod's matching pull secrets (same
    /// coordinates or same login) or its service account is among the `known` ones.
    pub(crate) fn match_credentials(
        &self,
        image: &str,
        image_ref: &str,
        known: &PullCredentials,
        secrets: &[SecretCoordinates],
        service_account: Option<&ServiceAccountCoordinates>,
    ) -> Access {
        let matched = secrets.iter().find(|s| {
            known.kubernetes_secrets.iter().any(|k| {
                (!k.credential_hash.is_empty() && k.credential_hash == s.credential_hash)
                    || (k.uid == s.uid && k.namespace == s.namespace && k.name == s.name)
            })
        });
        if let Some(s) = matched {
            // A new secret with a known login, or a known secret with a new login: kept,
            // so it matches next time too (kubelet writes it while matching).
            let creds = PullCredentials {
                kubernetes_secrets: vec![s.clone()],
                ..Default::default()
            };
            let _intents = self.intents.locked();
            if let Err(e) = self.merge_pulled(image, image_ref, Some(&creds)) {
                warn!(image, imageRef = image_ref, error = %e, "failed to write an image pulled record");
            }
            return Access::SecretMatches;
        }
        if service_account.is_some_and(|a| known.kubernetes_service_accounts.contains(a)) {
            return Access::ServiceAccountMatches;
        }
        Access::MustPull("none of the pod's credentials pulled it")
    }

    /// Both halves at once, with the pod's credentials at hand.
    #[cfg(test)]
    pub(crate) fn access(
        &self,
        image: &str,
        image_ref: &str,
        secrets: &[SecretCoordinates],
        service_account: Option<&ServiceAccountCoordinates>,
    ) -> Access {
        match self.check(image, image_ref) {
            Check::Decided(a) => a,
            Check::Needs(known) => {
                self.match_credentials(image, image_ref, &known, secrets, service_account)
            }
        }
    }

    /// Turns the intents a previous run left into records of the images the runtime
    /// has (kubelet's `initialize`): pulled by the agent, with credentials unknown, so
    /// every pod that wants one is checked.
    pub(crate) fn recover_intents(&self, images: &[cri::Image]) {
        let mut intents = self.intents.locked();
        let left = match self.list_intents() {
            Ok(l) => l,
            Err(e) => {
                warn!(dir = %self.pulling.display(), error = %e, "there were errors listing ImagePullIntents, continuing with an incomplete records list");
                return;
            }
        };
        for image in left {
            let Some(found) = images
                .iter()
                .find(|i| i.repo_tags.contains(&image) || i.repo_digests.contains(&image))
            else {
                continue;
            };
            if let Err(e) = self.merge_pulled(&image, &found.id, None) {
                warn!(imageRef = %found.id, error = %e, "failed to write an image pull record");
                continue;
            }
            intents.remove(&image);
            let _ = std::fs::remove_file(self.pulling.join(file_name(&image)));
            debug!(image, imageRef = %found.id, "a pull intent from before the restart became a pulled record with unknown credentials");
        }
    }

    fn list_intents(&self) -> std::io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.pulling)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !name.starts_with("sha256-") || name.ends_with(".tmp") {
                continue;
            }
            if let Ok(Some(intent)) = read_json::<IntentFile>(&path) {
                out.push(intent.image);
            }
        }
        Ok(out)
    }

    /// Removes the records of images the runtime no longer has, last written before
    /// `until` (kubelet's `PruneUnknownRecords`, after an image GC pass).
    pub(crate) fn prune(&self, present: &HashSet<String>, until: jiff::Timestamp) -> usize {
        let _intents = self.intents.locked();
        let Ok(entries) = std::fs::read_dir(&self.pulled) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let is_record = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("sha256-") && !n.ends_with(".tmp"));
            let Ok(Some(record)) = read_json::<PulledFile>(&path) else {
                continue;
            };
            if !is_record
                || record.last_updated_time >= until
                || present.contains(&record.image_ref)
                || path.file_name() != Some(file_name(&record.image_ref).as_ref())
            {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                removed += 1;
            }
        }
        removed
    }
}

/// A record file decoded, `None` when it does not exist.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    let Some(body) = crate::private_file::read_bounded(path, RECORD_LIMIT)? else {
        return Ok(None);
    };
    serde_json::from_slice(&body).map(Some).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// kubelet's `cacheFilename`: `sha256-` and the hex SHA-256 of the key.
fn file_name(key: &str) -> String {
    format!("sha256-{}", crate::hash::sha256_hex(key.as_bytes()))
}

#[cfg(test)]
#[path = "pull_records_tests.rs"]
mod tests;

//! Images: pulls, credential providers, pull credential checks and garbage collection.

use std::path::PathBuf;

use super::Options;
use super::settings::{
    Input, InvalidValue,
    Kind::{Bool, Duration, Int, List, Path, Text},
    Setting, int_within, list_items, non_negative_duration, opt_path, parse_bool, parse_int, row,
};

/// How images are pulled, checked and collected (read by `agent/runtime.rs` and `agent/node.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ImageOptions {
    /// `--image-credential-provider-config`: the CredentialProviderConfig file or dir.
    pub(crate) credential_provider_config: Option<PathBuf>,
    /// `--image-credential-provider-bin-dir`: where the provider binaries are.
    pub(crate) credential_provider_bin_dir: Option<PathBuf>,
    /// `serializeImagePulls`: one image pull at a time.
    pub(crate) serialize_pulls: bool,
    /// `maxParallelImagePulls` (None: no limit) when pulls are not serialized.
    pub(crate) max_parallel_pulls: Option<usize>,
    /// `imagePullCredentialsVerificationPolicy` with its allowlist
    /// (`preloadedImagesVerificationAllowlist`).
    pub(crate) pull_verification: crate::images::VerifyPolicy,
    /// The image GC policy (`imageGCHighThresholdPercent`,
    /// `imageGCLowThresholdPercent`, `imageMinimumGCAge`, `imageMaximumGCAge`).
    pub(crate) gc: crate::images::Policy,
}

impl ImageOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        ImageOptions {
            credential_provider_config: None,
            credential_provider_bin_dir: None,
            serialize_pulls: false,
            max_parallel_pulls: None,
            pull_verification: crate::images::VerifyPolicy::NeverVerifyPreloadedImages,
            gc: crate::images::Policy::default(),
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for ImageOptions {
    fn default() -> Self {
        super::Options::default().images
    }
}

/// The credential provider plugins.
pub(super) const CREDENTIAL_PROVIDERS: &[Setting] = &[
    row(
        "image-credential-provider-config",
        None,
        Path,
        "",
        "PATH",
        "The CredentialProviderConfig file, or a directory of them, naming the credential \
         provider plugins asked for registry logins (empty: none)",
        |o, i| {
            o.images.credential_provider_config = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "image-credential-provider-bin-dir",
        None,
        Path,
        "",
        "PATH",
        "The directory of the credential provider plugin binaries",
        |o, i| {
            o.images.credential_provider_bin_dir = opt_path(i.text);
            Ok(())
        },
    ),
];

/// Image pulls and their credential checks.
pub(super) const PULLS: &[Setting] = &[
    row(
        "serialize-image-pulls",
        Some("serializeImagePulls"),
        Bool,
        "true",
        "true|false",
        "Pull images one at a time",
        |o, i| parse_bool(i.text).map(|b| o.images.serialize_pulls = b),
    ),
    row(
        "",
        Some("maxParallelImagePulls"),
        Int,
        "",
        "N",
        "Most image pulls at once when not serialized (unset: no limit); config file only",
        set_max_parallel_image_pulls,
    ),
    row(
        "",
        Some("imagePullCredentialsVerificationPolicy"),
        Text,
        crate::images::VerifyPolicy::DEFAULT,
        "POLICY",
        "Which present images a pod must prove its pull credentials for: NeverVerify, \
         NeverVerifyPreloadedImages (those the agent pulled), NeverVerifyAllowlistedImages (all \
         but the allowlist's) or AlwaysVerify; config file only",
        set_pull_verification,
    ),
    row(
        "",
        Some("preloadedImagesVerificationAllowlist"),
        List,
        "",
        "IMAGE|PREFIX/*,...",
        "Repositories (no tag) exempt from the check under NeverVerifyAllowlistedImages; config \
         file only",
        set_preloaded_allowlist,
    ),
];

/// Image garbage collection (kubelet's ImageGCPolicy); each row's check reads the rows above it.
pub(super) const GC: &[Setting] = &[
    row(
        "image-gc-high-threshold",
        Some("imageGCHighThresholdPercent"),
        Int,
        "85",
        "PERCENT",
        "Image filesystem usage at which unused images are removed (100 turns the periodic image \
         GC off)",
        |o, i| int_within(i.text, 0, 100).map(|n| o.images.gc.high_percent = n),
    ),
    row(
        "image-gc-low-threshold",
        Some("imageGCLowThresholdPercent"),
        Int,
        "80",
        "PERCENT",
        "Image filesystem usage the image GC frees down to; less than the high threshold",
        set_image_gc_low,
    ),
    row(
        "minimum-image-ttl-duration",
        Some("imageMinimumGCAge"),
        Duration,
        "2m0s",
        "DURATION",
        "Minimum age of an unused image before it is garbage-collected",
        |o, i| non_negative_duration(i.text).map(|d| o.images.gc.min_age = d),
    ),
];

/// The image GC's age limit (its check reads imageMinimumGCAge).
pub(super) const MAX_GC_AGE: &[Setting] = &[row(
    "",
    Some("imageMaximumGCAge"),
    Duration,
    "",
    "DURATION",
    "Unused images older than this are removed whatever the usage (unset or 0s: off); more \
         than imageMinimumGCAge; config file only",
    set_image_max_gc_age,
)];

/// kubelet's validation: within 0..=100 and below the high threshold (its row comes first).
fn set_image_gc_low(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let low: u8 = int_within(i.text, 0, 100)?;
    if low >= o.images.gc.high_percent {
        return Err(format!(
            "must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {}",
            o.images.gc.high_percent
        )
        .into());
    }
    o.images.gc.low_percent = low;
    Ok(())
}

/// kubelet's validation: zero (off) or more than the minimum age (its row comes first).
fn set_image_max_gc_age(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let max = if i.text.is_empty() {
        std::time::Duration::ZERO
    } else {
        non_negative_duration(i.text)?
    };
    if !max.is_zero() && max <= o.images.gc.min_age {
        return Err(format!(
            "must be greater than imageMinimumGCAge {}",
            crate::duration::format_go_duration(o.images.gc.min_age)
        )
        .into());
    }
    o.images.gc.max_age = max;
    Ok(())
}

/// kubelet's validation: nil or at least 1, and more than 1 only when pulls are
/// not serialized (the serializeImagePulls row comes first, so its value is final).
fn set_max_parallel_image_pulls(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    if i.text.is_empty() {
        o.images.max_parallel_pulls = None;
        return Ok(());
    }
    let n = parse_int(i.text)?;
    if n < 1 {
        return Err("must be a positive number".into());
    }
    if o.images.serialize_pulls && n > 1 {
        return Err("cannot be larger than 1 unless serializeImagePulls is false".into());
    }
    o.images.max_parallel_pulls = Some(usize::try_from(n).unwrap_or(usize::MAX));
    Ok(())
}

/// One of kubelet's four policies (the allowlist row comes next and completes it).
fn set_pull_verification(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.images.pull_verification =
        crate::images::VerifyPolicy::parse(i.text, &[]).map_err(|e| InvalidValue(e.to_string()))?;
    Ok(())
}

/// Only with NeverVerifyAllowlistedImages, each a repository or `prefix/*`, as
/// kubelet validates them.
fn set_preloaded_allowlist(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let items: Vec<String> = list_items(i.text).into_iter().map(str::to_string).collect();
    let name = o.images.pull_verification.name();
    o.images.pull_verification = crate::images::VerifyPolicy::parse(name, &items)
        .map_err(|e| InvalidValue(e.to_string()))?;
    Ok(())
}

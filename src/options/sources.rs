//! The static pod sources: the manifest directory and the manifest URL.

use std::path::PathBuf;

use super::Options;
use super::settings::{
    Input, InvalidValue,
    Kind::{Duration, Multimap, Path, Text},
    Setting, multimap, opt_path, positive_duration, row,
};

/// The file and HTTP pod sources (read by `agent/sources.rs`).
#[derive(Debug, Clone)]
pub(crate) struct SourceOptions {
    /// The static pod directory (None = file source off).
    pub(crate) static_pod_path: Option<PathBuf>,
    pub(crate) file_check_frequency: std::time::Duration,
    // HTTP source: the manifest URL.
    /// `staticPodURL` (None: HTTP source off).
    pub(crate) manifest_url: Option<String>,
    /// `staticPodURLHeader`: request headers, each name with its values in order.
    pub(crate) manifest_url_header: std::collections::BTreeMap<String, Vec<String>>,
    /// `httpCheckFrequency`: how often the manifest URL is polled.
    pub(crate) http_check_frequency: std::time::Duration,
}

impl SourceOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        SourceOptions {
            static_pod_path: None,
            file_check_frequency: std::time::Duration::ZERO,
            manifest_url: None,
            manifest_url_header: std::collections::BTreeMap::new(),
            http_check_frequency: std::time::Duration::ZERO,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for SourceOptions {
    fn default() -> Self {
        super::Options::default().sources
    }
}

/// The file source's directory.
pub(super) const STATIC_POD_PATH: &[Setting] = &[row(
    "pod-manifest-path",
    Some("staticPodPath"),
    Path,
    "",
    "PATH",
    "Directory of static pod manifests (empty: file source off)",
    |o, i| {
        o.sources.static_pod_path = opt_path(i.text);
        Ok(())
    },
)];

/// How often the file source looks.
pub(super) const FILE_CHECK: &[Setting] = &[row(
    "file-check-frequency",
    Some("fileCheckFrequency"),
    Duration,
    "20s",
    "DURATION",
    "How often to re-read the static pod directory",
    |o, i| positive_duration(i.text).map(|d| o.sources.file_check_frequency = d),
)];

/// HTTP source: the manifest URL.
pub(super) const HTTP: &[Setting] = &[
    row(
        "manifest-url",
        Some("staticPodURL"),
        Text,
        "",
        "URL",
        "URL of static pods (one Pod or a PodList), polled every http-check-frequency (empty: \
         HTTP source off)",
        set_manifest_url,
    ),
    row(
        "manifest-url-header",
        Some("staticPodURLHeader"),
        Multimap,
        "",
        "KEY:VALUE,...",
        "Headers sent with the manifest URL request; repeat the flag or the key for more values",
        set_manifest_url_header,
    ),
    row(
        "http-check-frequency",
        Some("httpCheckFrequency"),
        Duration,
        "20s",
        "DURATION",
        "How often the manifest URL is polled",
        |o, i| positive_duration(i.text).map(|d| o.sources.http_check_frequency = d),
    ),
];

/// An `http://` or `https://` URL with a host ("" turns the source off), so a typo
/// fails at start rather than at every poll.
fn set_manifest_url(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    if i.text.is_empty() {
        o.sources.manifest_url = None;
        return Ok(());
    }
    let uri: hyper::Uri = i
        .text
        .parse()
        .map_err(|e| InvalidValue(format!("not a URL: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none_or(str::is_empty) {
        return Err("must be an http:// or https:// URL with a host".into());
    }
    o.sources.manifest_url = Some(i.text.to_string());
    Ok(())
}

/// Each name and value must be a valid HTTP header name and value.
fn set_manifest_url_header(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let map = multimap(i.text)?;
    for (k, values) in &map {
        hyper::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| InvalidValue(format!("{k:?} is not a valid HTTP header name")))?;
        for v in values {
            hyper::header::HeaderValue::from_str(v).map_err(|_| {
                InvalidValue(format!("{k}: {v:?} is not a valid HTTP header value"))
            })?;
        }
    }
    o.sources.manifest_url_header = map;
    Ok(())
}

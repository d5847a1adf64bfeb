//! The container runtime: the CRI endpoint, a managed containerd and its pod network,
//! the runtime's cgroup and the CRI calls' timeout.

use std::path::PathBuf;

use super::Options;
use super::settings::{
    DEFAULT_RUNTIME_ENDPOINT, ENDPOINT_REASON, Input, InvalidValue,
    Kind::{Duration, Path, Text},
    Setting, opt_path, positive_duration, row,
};

/// The CRI endpoint and a managed containerd (read by `agent/runtime.rs`).
#[derive(Debug, Clone)]
pub(crate) struct RuntimeOptions {
    /// The CRI endpoint, e.g. `unix:///run/containerd/containerd.sock`.
    pub(crate) endpoint: String,
    /// True when the endpoint was given explicitly (flag or config file): never
    /// start a managed containerd then.
    pub(crate) endpoint_explicit: bool,
    /// `--containerd-binary`: the containerd a managed runtime runs (None: the one in PATH).
    pub(crate) containerd_binary: Option<PathBuf>,
    /// `--pod-cidr` / `podCIDR`: the pods' addresses in standalone mode; a managed
    /// containerd's CNI subnet (None: [`crate::containerd::CniSettings`]'s default).
    pub(crate) pod_cidr: Option<String>,
    /// `--managed-cni-bridge`: the Linux bridge a managed containerd's pods attach to.
    pub(crate) managed_cni_bridge: String,
    /// `--runtime-cgroups`: the runtime's cgroup, the Summary API's `runtime` system container.
    pub(crate) cgroups: Option<String>,
    /// `runtimeRequestTimeout`: CRI calls but the long-running ones.
    pub(crate) request_timeout: std::time::Duration,
}

impl RuntimeOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        RuntimeOptions {
            endpoint: String::new(),
            endpoint_explicit: false,
            containerd_binary: None,
            pod_cidr: None,
            managed_cni_bridge: String::new(),
            cgroups: None,
            request_timeout: std::time::Duration::ZERO,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for RuntimeOptions {
    fn default() -> Self {
        super::Options::default().runtime
    }
}

/// The CRI endpoint and a managed containerd.
pub(super) const RUNTIME: &[Setting] = &[
    row(
        "container-runtime-endpoint",
        Some("containerRuntimeEndpoint"),
        Text,
        DEFAULT_RUNTIME_ENDPOINT,
        "URL",
        "CRI endpoint (unix:// socket)",
        set_endpoint,
    ),
    row(
        "containerd-binary",
        None,
        Path,
        "",
        "PATH",
        "The containerd a managed runtime runs; its release decides its config format (empty: \
         containerd in PATH)",
        |o, i| {
            o.runtime.containerd_binary = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "pod-cidr",
        Some("podCIDR"),
        Text,
        "",
        "CIDR",
        "The pods' addresses: handed to the runtime at start, and a managed containerd's CNI \
         subnet (empty: 10.88.0.0/16); the Node's spec.podCIDRs replace it",
        set_pod_cidr,
    ),
    row(
        "managed-cni-bridge",
        None,
        Text,
        "oxlet0",
        "NAME",
        "The Linux bridge a managed containerd's pods attach to",
        set_managed_cni_bridge,
    ),
    row(
        "runtime-cgroups",
        None,
        Text,
        "",
        "CGROUP",
        "The container runtime's cgroup, reported as the Summary API's runtime system container \
         (empty: none)",
        |o, i| {
            o.runtime.cgroups = Some(i.text.to_string()).filter(|c| !c.is_empty());
            Ok(())
        },
    ),
];

/// CRI calls' timeout.
pub(super) const REQUEST_TIMEOUT: &[Setting] = &[row(
    "runtime-request-timeout",
    Some("runtimeRequestTimeout"),
    Duration,
    "2m0s",
    "DURATION",
    "Timeout for CRI requests, except long-running ones",
    |o, i| positive_duration(i.text).map(|d| o.runtime.request_timeout = d),
)];

/// Given explicitly (flag or config file), the endpoint means "never start a
/// managed containerd in its place".
fn set_endpoint(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.runtime.endpoint = unix_endpoint(i.text)?;
    o.runtime.endpoint_explicit = i.explicit;
    Ok(())
}

/// kubelet passes `podCIDR` on to the runtime unchecked; oxlet writes it into a
/// managed containerd's CNI config, so it must be a CIDR (`10.244.1.0/24`).
fn set_pod_cidr(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let text = i.text.trim();
    if text.is_empty() {
        o.runtime.pod_cidr = None;
        return Ok(());
    }
    let bad = || InvalidValue::from("must be a CIDR (an address, '/', a prefix length)");
    let (addr, len) = text.split_once('/').ok_or_else(bad)?;
    let addr: std::net::IpAddr = addr.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(InvalidValue(format!("prefix length {len} is over {max}")));
    }
    o.runtime.pod_cidr = Some(text.to_string());
    Ok(())
}

/// A Linux interface name: 1 to 15 bytes (IFNAMSIZ - 1), no '/', ':' or space.
fn set_managed_cni_bridge(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let name = i.text;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty()
        || name.len() > 15
        || !name.chars().all(allowed)
        || name == "."
        || name == ".."
    {
        return Err("must be an interface name: 1 to 15 of a-z, A-Z, 0-9, '-', '_', '.'".into());
    }
    o.runtime.managed_cni_bridge = name.to_string();
    Ok(())
}

/// `unix://` followed by an absolute path (kubelet's other schemes are not supported).
fn unix_endpoint(e: &str) -> Result<String, InvalidValue> {
    match e.strip_prefix("unix://") {
        Some(path) if path.starts_with('/') && path.len() > 1 => Ok(e.to_string()),
        _ => Err(ENDPOINT_REASON.into()),
    }
}

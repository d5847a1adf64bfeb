//! The pods the node runs: how many, how often they are synced, and their
//! environment (seccomp, sysctls, DNS, user namespaces).

use std::net::IpAddr;
use std::path::PathBuf;

use super::Options;
use super::settings::{
    Input, InvalidValue,
    Kind::{Bool, Duration, Int, List, Path, Text},
    Setting, ip, list_items, opt_path, parse_bool, parse_int, positive_duration, row,
};

/// The pods' capacity, sync and environment (read by `agent/runtime.rs`).
#[derive(Debug, Clone)]
pub(crate) struct PodOptions {
    pub(crate) sync_frequency: std::time::Duration,
    pub(crate) max_pods: u32,
    /// `userNamespaces.idsPerPod`: the IDs each `hostUsers: false` pod gets (None:
    /// kubelet's 65536).
    pub(crate) userns_ids_per_pod: Option<u32>,
    /// `seccompDefault`: RuntimeDefault seccomp for containers that set no profile.
    pub(crate) seccomp_default: bool,
    /// `allowedUnsafeSysctls`: names or patterns (`net.core.*`), checked at start.
    pub(crate) allowed_unsafe_sysctls: Vec<String>,
    /// `clusterDNS`: the nameservers of ClusterFirst pods.
    pub(crate) cluster_dns: Vec<IpAddr>,
    /// `clusterDomain`, without a trailing dot; empty when unset.
    pub(crate) cluster_domain: String,
    /// `resolvConf`; None ("") gives host-DNS pods no host settings.
    pub(crate) resolv_conf: Option<PathBuf>,
}

impl PodOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        PodOptions {
            sync_frequency: std::time::Duration::ZERO,
            max_pods: 0,
            userns_ids_per_pod: None,
            seccomp_default: false,
            allowed_unsafe_sysctls: Vec::new(),
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: None,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for PodOptions {
    fn default() -> Self {
        super::Options::default().pods
    }
}

/// The sync loop's period.
pub(super) const SYNC: &[Setting] = &[row(
    "sync-frequency",
    Some("syncFrequency"),
    Duration,
    "1m0s",
    "DURATION",
    "Maximum period between syncs of running pods",
    |o, i| positive_duration(i.text).map(|d| o.pods.sync_frequency = d),
)];

/// User namespaces and the pod count.
pub(super) const CAPACITY: &[Setting] = &[
    row(
        "",
        Some("userNamespaces.idsPerPod"),
        Int,
        "",
        "N",
        "IDs each `hostUsers: false` pod gets, a multiple of 65536 (unset: 65536); the kubelet \
         user's subordinate range, or the default one, must hold maxPods such blocks; config file \
         only",
        set_userns_ids_per_pod,
    ),
    row(
        "max-pods",
        Some("maxPods"),
        Int,
        "110",
        "N",
        "Maximum number of pods on this node",
        |o, i| max_pods(i.text).map(|n| o.pods.max_pods = n),
    ),
];

/// Security context defaults, sysctls, DNS and /etc/hosts.
pub(super) const SECURITY_AND_DNS: &[Setting] = &[
    row(
        "seccomp-default",
        Some("seccompDefault"),
        Bool,
        "false",
        "true|false",
        "Run containers that ask for no seccomp profile with RuntimeDefault",
        |o, i| parse_bool(i.text).map(|b| o.pods.seccomp_default = b),
    ),
    row(
        "allowed-unsafe-sysctls",
        Some("allowedUnsafeSysctls"),
        List,
        "",
        "NAME|PATTERN,...",
        "Unsafe sysctls or patterns (ending in *) pods may set, beyond the safe ones",
        set_allowed_unsafe_sysctls,
    ),
    row(
        "cluster-dns",
        Some("clusterDNS"),
        List,
        "",
        "IP,...",
        "DNS server IPs for pods with dnsPolicy ClusterFirst",
        set_cluster_dns,
    ),
    row(
        "cluster-domain",
        Some("clusterDomain"),
        Text,
        "",
        "DOMAIN",
        "Cluster domain, searched by ClusterFirst pods and used in /etc/hosts",
        |o, i| {
            o.pods.cluster_domain = i.text.trim_end_matches('.').to_string();
            Ok(())
        },
    ),
    row(
        "resolv-conf",
        Some("resolvConf"),
        Path,
        "/etc/resolv.conf",
        "PATH",
        "Resolver configuration the pods' DNS is based on (empty: no host DNS)",
        |o, i| {
            o.pods.resolv_conf = opt_path(i.text);
            Ok(())
        },
    ),
];

/// kubelet's checks of `userNamespaces.idsPerPod` (its Linux config validation).
fn set_userns_ids_per_pod(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    const UNIT: i64 = 65536;
    if i.text.is_empty() {
        o.pods.userns_ids_per_pod = None;
        return Ok(());
    }
    let n = parse_int(i.text)?;
    if n < UNIT {
        return Err(format!("must not be less than {UNIT}").into());
    }
    if n % UNIT != 0 {
        return Err(format!("must be a multiple of {UNIT}").into());
    }
    let n = u32::try_from(n).map_err(|_| format!("must not be more than {}", u32::MAX))?;
    o.pods.userns_ids_per_pod = Some(n);
    Ok(())
}

/// kubelet refuses, at start, patterns that are malformed or not known to be
/// namespaced (`sysctl.NewAllowlist`).
fn set_allowed_unsafe_sysctls(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let items: Vec<String> = list_items(i.text).into_iter().map(str::to_string).collect();
    crate::podenv::Allowlist::new(&items).map_err(|e| InvalidValue(e.to_string()))?;
    o.pods.allowed_unsafe_sysctls = items;
    Ok(())
}

/// Each must be an IP address (kubelet's flag is an IP list).
fn set_cluster_dns(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.pods.cluster_dns = list_items(i.text)
        .into_iter()
        .map(|s| ip(s).map_err(|e| InvalidValue(format!("{s:?}: {e}"))))
        .collect::<Result<_, _>>()?;
    Ok(())
}

/// kubelet's `maxPods` is an `int32` that must not be negative.
fn max_pods(s: &str) -> Result<u32, InvalidValue> {
    match parse_int(s)? {
        n if n < 0 => Err("must be greater than or equal to 0".into()),
        n => u32::try_from(n)
            .ok()
            .filter(|&n| n <= i32::MAX as u32)
            .ok_or_else(|| format!("must be at most {}", i32::MAX).into()),
    }
}

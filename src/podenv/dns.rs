//! A pod's DNS settings (kubelet's `pkg/kubelet/network/dns`): the policy picks the
//! base (cluster DNS, the host's resolv.conf, or nothing), `spec.dnsConfig` is merged
//! in, and the result is cut to what resolvers accept. containerd writes it to the
//! sandbox's resolv.conf, so every value from the pod is checked to be one word.

use std::io::Read;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Pod, PodDNSConfig};
use tracing::{error, warn};

use crate::pod::{is_dns1123_subdomain, pod_ref, pod_uid};

/// kubelet's `defaultDNSOptions` for cluster DNS.
const CLUSTER_OPTIONS: &str = "ndots:5";
/// Largest resolv.conf read (kubelet's `maxResolveConfLength`).
const MAX_RESOLV_CONF: u64 = 10 << 20;
/// `MaxDNSNameservers`.
pub(crate) const MAX_NAMESERVERS: usize = 3;
/// `MaxDNSSearchPathsExpanded` and `MaxDNSSearchListCharsExpanded`.
pub(crate) const MAX_SEARCHES: usize = 32;
pub(crate) const MAX_SEARCH_CHARS: usize = 2048;
/// A search path longer than a DNS subdomain makes some resolvers abort.
const MAX_SEARCH_LEN: usize = 253;

/// Why a pod's DNS settings cannot be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DnsError {
    #[error("cannot read the resolver configuration {path} (--resolv-conf): {source}")]
    ResolvConf {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the resolver configuration {path} (--resolv-conf) is larger than 10 MiB")]
    ResolvConfTooLarge { path: PathBuf },
    #[error("{field}: {reason}")]
    Spec { field: String, reason: String },
}

impl DnsError {
    /// Only reading the host's file can succeed on a retry; a bad spec stays bad.
    pub(crate) fn retryable(&self) -> bool {
        !matches!(self, DnsError::Spec { .. })
    }
}

/// The node's DNS settings (kubelet's `dns.Configurer`).
#[derive(Debug, Clone, Default)]
pub(crate) struct DnsConfigurer {
    /// `clusterDNS`.
    pub cluster_dns: Vec<IpAddr>,
    /// `clusterDomain` (empty: none).
    pub cluster_domain: String,
    /// `resolvConf` (None: no host DNS, lookups go to the node itself).
    pub resolv_conf: Option<PathBuf>,
    /// The node's IPs, for the localhost nameserver when `resolvConf` is "".
    pub node_ips: Vec<IpAddr>,
}

/// The policies, with ClusterFirst on a host-network pod already turned into Default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DnsType {
    Cluster,
    Host,
    None,
}

fn dns_type(pod: &Pod) -> Result<DnsType, DnsError> {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    match spec.and_then(|s| s.dns_policy.as_deref()) {
        Some("None") => Ok(DnsType::None),
        Some("ClusterFirstWithHostNet") => Ok(DnsType::Cluster),
        None | Some("ClusterFirst") if !host_network => Ok(DnsType::Cluster),
        None | Some("ClusterFirst" | "Default") => Ok(DnsType::Host),
        Some(other) => Err(spec_error(
            "spec.dnsPolicy",
            format!(
                "{other:?} is not supported: must be one of \"ClusterFirst\", \"ClusterFirstWithHostNet\", \"Default\", \"None\""
            ),
        )),
    }
}

fn spec_error(field: impl Into<String>, reason: impl Into<String>) -> DnsError {
    DnsError::Spec {
        field: field.into(),
        reason: reason.into(),
    }
}

/// kubelet's `parseResolvConf`: nameservers accumulate, the last `search` and the
/// last `options` line win, trailing dots of search paths are dropped.
pub(crate) fn parse_resolv_conf(text: &str) -> cri::DnsConfig {
    let mut dns = cri::DnsConfig::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => dns.servers.extend(words.next().map(str::to_string)),
            Some("search") => {
                // The root domain `.` adds nothing; one trailing dot is dropped so the
                // same domain counts once against the limits.
                dns.searches = words
                    .filter(|w| *w != ".")
                    .map(|w| w.strip_suffix('.').unwrap_or(w).to_string())
                    .collect();
            }
            // Every `options` line counts, as for the resolver; a later option
            // replaces an earlier one of the same name.
            Some("options") => {
                for w in words {
                    let name = w.split_once(':').map_or(w, |(n, _)| n);
                    dns.options
                        .retain(|o| o.split_once(':').map_or(o.as_str(), |(n, _)| n) != name);
                    dns.options.push(w.to_string());
                }
            }
            _ => {}
        }
    }
    dns
}

fn read_resolv_conf(path: &Path) -> Result<cri::DnsConfig, DnsError> {
    let io = |source| DnsError::ResolvConf {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_RESOLV_CONF + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_RESOLV_CONF {
        return Err(DnsError::ResolvConfTooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(parse_resolv_conf(&text))
}

/// Keeps the first of each.
fn omit_duplicates(items: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|s| seen.insert(s.clone()))
        .collect()
}

/// One word: no whitespace or control characters, since each lands in resolv.conf.
fn one_word(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The API server's `validatePodDNSConfig`, which pods from files never went
/// through: at most 3 nameservers, each an IP; at most 32 search paths of DNS
/// names in 2048 characters; option names given, and every value one word.
fn validate(policy_none: bool, cfg: Option<&PodDNSConfig>) -> Result<(), DnsError> {
    let servers = cfg
        .and_then(|c| c.nameservers.as_deref())
        .unwrap_or_default();
    if policy_none && servers.is_empty() {
        return Err(spec_error(
            "spec.dnsConfig.nameservers",
            "must provide at least one DNS nameserver when dnsPolicy is set to None",
        ));
    }
    let Some(cfg) = cfg else { return Ok(()) };
    if servers.len() > MAX_NAMESERVERS {
        return Err(spec_error(
            "spec.dnsConfig.nameservers",
            format!("must not have more than {MAX_NAMESERVERS} nameservers: {servers:?}"),
        ));
    }
    for (i, s) in servers.iter().enumerate() {
        if s.parse::<IpAddr>().is_err() {
            return Err(spec_error(
                format!("spec.dnsConfig.nameservers[{i}]"),
                format!("{s:?} must be a valid IP address"),
            ));
        }
    }
    let searches = cfg.searches.as_deref().unwrap_or_default();
    if searches.len() > MAX_SEARCHES {
        return Err(spec_error(
            "spec.dnsConfig.searches",
            format!("must not have more than {MAX_SEARCHES} search paths"),
        ));
    }
    if searches.join(" ").len() > MAX_SEARCH_CHARS {
        return Err(spec_error(
            "spec.dnsConfig.searches",
            format!(
                "must not have more than {MAX_SEARCH_CHARS} characters (including spaces) in the search list"
            ),
        ));
    }
    for (i, s) in searches.iter().enumerate() {
        if !is_dns1123_subdomain(s.strip_suffix('.').unwrap_or(s)) {
            return Err(spec_error(
                format!("spec.dnsConfig.searches[{i}]"),
                format!("{s:?} must be a DNS subdomain (lower-case letters, digits, '-' and '.')"),
            ));
        }
    }
    for (i, o) in cfg.options.iter().flatten().enumerate() {
        let name = o.name.as_deref().unwrap_or("");
        if name.is_empty() {
            return Err(spec_error(
                format!("spec.dnsConfig.options[{i}].name"),
                "Required value",
            ));
        }
        // An empty value is the bare option (kubelet's mergeDNSOptions).
        let bad_value = o
            .value
            .as_deref()
            .is_some_and(|v| !v.is_empty() && !one_word(v));
        if !one_word(name) || bad_value {
            return Err(spec_error(
                format!("spec.dnsConfig.options[{i}]"),
                "name and value must be single words without whitespace",
            ));
        }
    }
    Ok(())
}

/// kubelet's `mergeDNSOptions`: an option given by the pod replaces the same-named
/// one; order is kept (kubelet's order is a map's, so any order is its order).
fn merge_options(existing: Vec<String>, extra: &PodDNSConfig) -> Vec<String> {
    let mut opts: Vec<(String, Option<String>)> = existing
        .into_iter()
        .map(|o| match o.split_once(':') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (o, None),
        })
        .collect();
    for o in extra.options.iter().flatten() {
        let name = o.name.clone().unwrap_or_default();
        let value = o.value.clone().filter(|v| !v.is_empty());
        match opts.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => opts.push((name, value)),
        }
    }
    opts.into_iter()
        .map(|(n, v)| match v {
            Some(v) if !v.is_empty() => format!("{n}:{v}"),
            _ => n,
        })
        .collect()
}

/// kubelet's `formDNSConfigFitsLimits`: at most 3 nameservers; search paths cut to
/// 32, to 253 characters each and to 2048 in all. Cuts are warnings, as kubelet's
/// `DNSConfigForming` events are.
fn fit_limits(mut dns: cri::DnsConfig, pod: &Pod) -> cri::DnsConfig {
    let (pod, uid) = (pod_ref(pod), pod_uid(pod));
    if dns.servers.len() > MAX_NAMESERVERS {
        dns.servers.truncate(MAX_NAMESERVERS);
        warn!(
            %pod,
            podUID = uid,
            event = "DNSConfigForming",
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
            dns.servers.join(" ")
        );
    }
    let mut cut = dns.searches.len() > MAX_SEARCHES;
    dns.searches.truncate(MAX_SEARCHES);
    let before = dns.searches.len();
    dns.searches.retain(|s| s.len() <= MAX_SEARCH_LEN);
    cut |= dns.searches.len() != before;
    while dns.searches.join(" ").len() > MAX_SEARCH_CHARS {
        dns.searches.pop();
        cut = true;
    }
    if cut {
        warn!(
            %pod,
            podUID = uid,
            event = "DNSConfigForming",
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            dns.searches.join(" ")
        );
    }
    dns
}

impl DnsConfigurer {
    /// The host's settings: `resolvConf` parsed, or nothing when it is "".
    fn host_dns(&self) -> Result<cri::DnsConfig, DnsError> {
        match &self.resolv_conf {
            Some(path) => read_resolv_conf(path),
            None => Ok(cri::DnsConfig::default()),
        }
    }

    /// `<ns>.svc.<domain> svc.<domain> <domain>`, then the host's, each once.
    fn cluster_searches(&self, host: Vec<String>, namespace: &str) -> Vec<String> {
        if self.cluster_domain.is_empty() {
            return host;
        }
        let d = &self.cluster_domain;
        let mut all = vec![
            format!("{namespace}.svc.{d}"),
            format!("svc.{d}"),
            d.clone(),
        ];
        all.extend(host);
        omit_duplicates(all)
    }

    /// The warning kubelet records as a `MissingClusterDNS` event when a
    /// `ClusterFirst` pod falls back to the host's DNS because no `--cluster-dns` is set.
    pub(crate) fn missing_cluster_dns(&self, pod: &Pod) -> Option<String> {
        (self.cluster_dns.is_empty() && dns_type(pod).ok()? == DnsType::Cluster).then(|| {
            let who = format!("{}({})", crate::pod::pod_full_name(pod), pod_uid(pod));
            format!(
                "pod: {who:?}. kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy."
            )
        })
    }

    /// kubelet's `GetPodDNS`.
    pub(crate) fn pod_dns(&self, pod: &Pod) -> Result<cri::DnsConfig, DnsError> {
        let spec = pod.spec.as_ref();
        let extra = spec.and_then(|s| s.dns_config.as_ref());
        let kind = dns_type(pod)?;
        validate(kind == DnsType::None, extra)?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut dns = match kind {
            DnsType::None => cri::DnsConfig::default(),
            _ => self.host_dns()?,
        };
        let mut host_like = kind == DnsType::Host;
        if kind == DnsType::Cluster {
            if self.cluster_dns.is_empty() {
                // The runtime manager records kubelet's MissingClusterDNS event when it
                // creates the sandbox (`missing_cluster_dns`); this runs on every sync.
                host_like = true;
            } else {
                dns.servers = self.cluster_dns.iter().map(IpAddr::to_string).collect();
                dns.searches = self.cluster_searches(std::mem::take(&mut dns.searches), namespace);
                dns.options = vec![CLUSTER_OPTIONS.to_string()];
            }
        }
        if host_like && self.resolv_conf.is_none() {
            // No host DNS: the node's own resolver (bind's documented default).
            dns.servers = self
                .node_ips
                .iter()
                .map(|ip| if ip.is_ipv6() { "::1" } else { "127.0.0.1" }.to_string())
                .collect();
            if dns.servers.is_empty() {
                dns.servers.push("127.0.0.1".into());
            }
            dns.searches = vec![".".into()];
        }
        if let Some(extra) = extra {
            dns.servers = omit_duplicates(
                dns.servers
                    .into_iter()
                    .chain(extra.nameservers.iter().flatten().cloned())
                    .collect(),
            );
            dns.searches = omit_duplicates(
                dns.searches
                    .into_iter()
                    .chain(extra.searches.iter().flatten().cloned())
                    .collect(),
            );
            dns.options = merge_options(dns.options, extra);
        }
        Ok(fit_limits(dns, pod))
    }

    /// kubelet's `CheckLimitsForResolvConf`, once at start: a host search line the
    /// pods' limits will cut is worth a warning before any pod is cut.
    pub(crate) fn check_resolv_conf(&self) {
        let Some(path) = &self.resolv_conf else {
            return;
        };
        let host = match read_resolv_conf(path) {
            Ok(h) => h,
            Err(e) => {
                error!(event = "CheckLimitsForResolvConf", error = %e, "cannot check the limits of resolv.conf");
                return;
            }
        };
        let limit = MAX_SEARCHES - if self.cluster_domain.is_empty() { 0 } else { 3 };
        let path = path.display();
        if host.searches.len() > limit {
            warn!(
                event = "CheckLimitsForResolvConf",
                "Resolv.conf file '{path}' contains search line consisting of more than {limit} domains!"
            );
        } else if host.searches.iter().any(|s| s.len() > MAX_SEARCH_LEN) {
            warn!(
                event = "CheckLimitsForResolvConf",
                "Resolv.conf file {path:?} contains a search path which length is more than allowed {MAX_SEARCH_LEN} chars!"
            );
        } else if host.searches.join(" ").len() > MAX_SEARCH_CHARS {
            warn!(
                event = "CheckLimitsForResolvConf",
                "Resolv.conf file '{path}' contains search line which length is more than allowed {MAX_SEARCH_CHARS} chars!"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        let mut base = serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        });
        for (k, v) in json.as_object().unwrap() {
            base["spec"][k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn host_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn configurer(path: &Path, cluster: &[&str]) -> DnsConfigurer {
        DnsConfigurer {
            cluster_dns: cluster.iter().map(|s| s.parse().unwrap()).collect(),
            cluster_domain: "cluster.local".into(),
            resolv_conf: Some(path.to_path_buf()),
            node_ips: vec!["10.0.0.1".parse().unwrap()],
        }
    }

    const HOST: &str = "# comment\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nsearch old.example\nsearch corp.example. lab.example\noptions ndots:2 edns0\n";

    #[test]
    fn resolv_conf_is_parsed_as_kubelet_does() {
        let dns = parse_resolv_conf(HOST);
        assert_eq!(dns.servers, vec!["10.0.0.2", "10.0.0.3"]);
        assert_eq!(dns.searches, vec!["corp.example", "lab.example"]);
        assert_eq!(dns.options, vec!["ndots:2", "edns0"]);
        // Every options line counts (a later one replaces the same name); `.` is no
        // search domain, and only one trailing dot goes.
        let dns = parse_resolv_conf(
            "options ndots:2 rotate\noptions timeout:3 ndots:1\nsearch a.example . b.example..\n",
        );
        assert_eq!(dns.options, vec!["rotate", "timeout:3", "ndots:1"]);
        assert_eq!(dns.searches, vec!["a.example", "b.example."]);
    }

    #[test]
    fn a_dns_config_option_with_an_empty_value_is_the_bare_option() {
        let (_d, path) = host_file(HOST);
        let c = configurer(&path, &["10.96.0.10"]);
        let p = pod(serde_json::json!({
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["1.2.3.4"], "options": [{"name": "attempts", "value": ""}, {"name": "ndots", "value": "3"}]},
        }));
        let dns = c.pod_dns(&p).unwrap();
        assert_eq!(dns.options, vec!["attempts", "ndots:3"]);
    }

    #[test]
    fn missing_cluster_dns_is_kubelets_warning_for_cluster_first_pods_only() {
        let (_d, path) = host_file(HOST);
        let none = configurer(&path, &[]);
        assert_eq!(
            none.missing_cluster_dns(&pod(serde_json::json!({})))
                .as_deref(),
            Some(
                "pod: \"web_shop(u1)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy."
            )
        );
        let host = pod(serde_json::json!({"dnsPolicy": "Default"}));
        assert_eq!(none.missing_cluster_dns(&host), None);
        let on_host_net = pod(serde_json::json!({"hostNetwork": true}));
        assert_eq!(none.missing_cluster_dns(&on_host_net), None);
        let with = configurer(&path, &["10.96.0.10"]);
        assert_eq!(with.missing_cluster_dns(&pod(serde_json::json!({}))), None);
    }

    #[test]
    fn cluster_first_uses_cluster_dns_and_the_cluster_search_paths() {
        let (_d, path) = host_file(HOST);
        let c = configurer(&path, &["10.96.0.10"]);
        let dns = c.pod_dns(&pod(serde_json::json!({}))).unwrap();
        assert_eq!(dns.servers, vec!["10.96.0.10"]);
        assert_eq!(
            dns.searches,
            vec![
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "lab.example"
            ]
        );
        assert_eq!(dns.options, vec!["ndots:5"]);
        // The same for ClusterFirstWithHostNet on the host network.
        let hn =
            pod(serde_json::json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"}));
        assert_eq!(c.pod_dns(&hn).unwrap(), dns);
    }

    #[test]
    fn default_and_host_network_cluster_first_use_the_hosts_settings() {
        let (_d, path) = host_file(HOST);
        let c = configurer(&path, &["10.96.0.10"]);
        let host = parse_resolv_conf(HOST);
        assert_eq!(
            c.pod_dns(&pod(serde_json::json!({"dnsPolicy": "Default"})))
                .unwrap(),
            host
        );
        let hn = pod(serde_json::json!({"hostNetwork": true, "dnsPolicy": "ClusterFirst"}));
        assert_eq!(c.pod_dns(&hn).unwrap(), host);
        // Without clusterDNS, ClusterFirst falls back to Default.
        let none = configurer(&path, &[]);
        assert_eq!(none.pod_dns(&pod(serde_json::json!({}))).unwrap(), host);
    }

    #[test]
    fn no_resolv_conf_means_the_nodes_own_resolver() {
        let c = DnsConfigurer {
            resolv_conf: None,
            node_ips: vec!["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()],
            ..Default::default()
        };
        let dns = c
            .pod_dns(&pod(serde_json::json!({"dnsPolicy": "Default"})))
            .unwrap();
        assert_eq!(dns.servers, vec!["127.0.0.1", "::1"]);
        assert_eq!(dns.searches, vec!["."]);
    }

    #[test]
    fn none_uses_only_dns_config_and_requires_a_nameserver() {
        let (_d, path) = host_file(HOST);
        let c = configurer(&path, &["10.96.0.10"]);
        let p = pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.2.3.4"], "searches": ["ns1.svc.cluster-domain.example", "my.dns.search.suffix"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
        }}));
        let dns = c.pod_dns(&p).unwrap();
        assert_eq!(dns.servers, vec!["1.2.3.4"]);
        assert_eq!(
            dns.searches,
            vec!["ns1.svc.cluster-domain.example", "my.dns.search.suffix"]
        );
        assert_eq!(dns.options, vec!["ndots:2", "edns0"]);
        let e = c
            .pod_dns(&pod(serde_json::json!({"dnsPolicy": "None"})))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.dnsConfig.nameservers: must provide at least one DNS nameserver when dnsPolicy is set to None"
        );
        assert!(!e.retryable());
    }

    #[test]
    fn dns_config_is_merged_into_cluster_settings_replacing_options() {
        let (_d, path) = host_file(HOST);
        let c = configurer(&path, &["10.96.0.10"]);
        let p = pod(serde_json::json!({"dnsConfig": {
            "nameservers": ["10.96.0.10", "8.8.8.8"], "searches": ["cluster.local", "extra.example"],
            "options": [{"name": "ndots", "value": "1"}, {"name": "timeout", "value": "3"}],
        }}));
        let dns = c.pod_dns(&p).unwrap();
        assert_eq!(dns.servers, vec!["10.96.0.10", "8.8.8.8"]);
        assert_eq!(dns.searches.last().unwrap(), "extra.example");
        assert_eq!(
            dns.searches
                .iter()
                .filter(|s| *s == "cluster.local")
                .count(),
            1
        );
        assert_eq!(dns.options, vec!["ndots:1", "timeout:3"]);
    }

    #[test]
    fn bad_dns_config_is_refused_naming_the_field() {
        let (_d, path) = host_file(HOST);
        let c = configurer(&path, &["10.96.0.10"]);
        let cases = [
            (
                serde_json::json!({"nameservers": ["1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"]}),
                "spec.dnsConfig.nameservers:",
            ),
            (
                serde_json::json!({"nameservers": ["not-an-ip"]}),
                "spec.dnsConfig.nameservers[0]:",
            ),
            (
                serde_json::json!({"searches": ["ok.example", "bad\nnameserver 6.6.6.6"]}),
                "spec.dnsConfig.searches[1]:",
            ),
            (
                serde_json::json!({"options": [{"name": "ndots", "value": "1 rotate"}]}),
                "spec.dnsConfig.options[0]:",
            ),
            (
                serde_json::json!({"options": [{"value": "1"}]}),
                "spec.dnsConfig.options[0].name:",
            ),
        ];
        for (cfg, field) in cases {
            let e = c
                .pod_dns(&pod(serde_json::json!({"dnsConfig": cfg})))
                .unwrap_err();
            assert!(e.to_string().starts_with(field), "{e}");
        }
        let e = c
            .pod_dns(&pod(serde_json::json!({"dnsPolicy": "Cluster"})))
            .unwrap_err();
        assert!(e.to_string().starts_with("spec.dnsPolicy:"), "{e}");
    }

    #[test]
    fn merged_settings_are_cut_to_the_resolver_limits() {
        let many: String = (0..40).map(|i| format!(" d{i}.example")).collect();
        let (_d, path) = host_file(&format!(
            "nameserver 1.1.1.1\nnameserver 1.1.1.2\nnameserver 1.1.1.3\nsearch{many}\n"
        ));
        let c = configurer(&path, &[]);
        let p = pod(
            serde_json::json!({"dnsPolicy": "Default", "dnsConfig": {"nameservers": ["9.9.9.9"]}}),
        );
        let dns = c.pod_dns(&p).unwrap();
        assert_eq!(dns.servers, vec!["1.1.1.1", "1.1.1.2", "1.1.1.3"]);
        assert_eq!(dns.searches.len(), MAX_SEARCHES);
        let long = "a".repeat(250);
        let (_d2, path) = host_file(&format!(
            "search {}\n",
            (0..12)
                .map(|i| format!("{long}{i:02}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        let c = configurer(&path, &[]);
        let dns = c
            .pod_dns(&pod(serde_json::json!({"dnsPolicy": "Default"})))
            .unwrap();
        assert!(dns.searches.join(" ").len() <= MAX_SEARCH_CHARS);
        assert_eq!(dns.searches.len(), 8);
    }

    #[test]
    fn an_unreadable_resolv_conf_is_an_error_naming_the_file() {
        let c = DnsConfigurer {
            resolv_conf: Some("/nonexistent/resolv.conf".into()),
            ..Default::default()
        };
        let e = c
            .pod_dns(&pod(serde_json::json!({"dnsPolicy": "Default"})))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("/nonexistent/resolv.conf (--resolv-conf)"),
            "{e}"
        );
        assert!(e.retryable());
        // A None pod never reads it.
        let p = pod(
            serde_json::json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.2.3.4"]}}),
        );
        assert!(c.pod_dns(&p).is_ok());
    }
}

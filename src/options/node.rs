//! The node's identity: its name, addresses, provider ID, labels and taints, and
//! whether it registers.

use std::net::IpAddr;

use super::Options;
use super::settings::{
    Input, InvalidValue,
    Kind::{Bool, List, Map, Text},
    NODE_NAME_REASON, Setting, parse_bool, row,
};

/// Who the node is and how it registers (read by `agent/node.rs`).
#[derive(Debug, Clone)]
pub(crate) struct NodeOptions {
    /// The node name: `--hostname-override`, else the host name, lower-cased.
    pub(crate) name: String,
    // Cluster mode: node registration and status.
    /// `--node-ip`: the node's InternalIPs, one per family, primary first (empty:
    /// detected; `0.0.0.0` or `::` alone: detected, preferring that family).
    pub(crate) ips: Vec<IpAddr>,
    /// `--provider-id` / `providerID`: the Node's `spec.providerID`.
    pub(crate) provider_id: String,
    /// `--node-labels`, checked against kubelet's allowed `kubernetes.io` labels.
    pub(crate) labels: std::collections::BTreeMap<String, String>,
    /// `--register-with-taints`.
    pub(crate) register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// `registerNode`: false never creates the Node, only updates an existing one.
    pub(crate) register: bool,
}

impl NodeOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        NodeOptions {
            name: String::new(),
            ips: Vec::new(),
            provider_id: String::new(),
            labels: std::collections::BTreeMap::new(),
            register_with_taints: Vec::new(),
            register: false,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for NodeOptions {
    fn default() -> Self {
        super::Options::default().node
    }
}

/// The node's name.
pub(super) const HOSTNAME: &[Setting] = &[row(
    "hostname-override",
    None,
    Text,
    "",
    "NAME",
    "Node name to use instead of the host name",
    set_node_name,
)];

/// Cluster mode: node registration.
pub(super) const REGISTRATION: &[Setting] = &[
    row(
        "provider-id",
        Some("providerID"),
        Text,
        "",
        "ID",
        "The Node's spec.providerID, set when the node registers (kind: \
         kind://docker/<cluster>/<node>)",
        |o, i| {
            o.node.provider_id = i.text.to_string();
            Ok(())
        },
    ),
    row(
        "node-ip",
        None,
        Text,
        "",
        "IP[,IP]",
        "The node's InternalIP, or a dual-stack pair (one per family, the first primary); empty: \
         the host's first global IPv4 address, else its IPv6 one; '::' prefers IPv6",
        |o, i| node_ips(i.text).map(|ips| o.node.ips = ips),
    ),
    row(
        "node-labels",
        None,
        Map('='),
        "",
        "KEY=VALUE,...",
        "Labels the Node is registered with; kubernetes.io and k8s.io labels only from kubelet's \
         allowed set",
        |o, i| crate::status::node_labels(i.text).map(|l| o.node.labels = l),
    ),
    row(
        "register-with-taints",
        None,
        List,
        "",
        "KEY=VALUE:EFFECT,...",
        "Taints the Node is registered with",
        |o, i| crate::status::node_taints(i.text).map(|t| o.node.register_with_taints = t),
    ),
];

/// Whether the Node is created.
pub(super) const REGISTER: &[Setting] = &[row(
    "register-node",
    Some("registerNode"),
    Bool,
    "true",
    "true|false",
    "Create the Node object in the apiserver (false: only update an existing one)",
    |o, i| parse_bool(i.text).map(|b| o.node.register = b),
)];

/// kubelet: trimmed and lower-cased; blank means "use the host name". Kept
/// even when invalid, so the host name is not read in its place.
fn set_node_name(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.node.name = i.text.trim().to_lowercase();
    if o.node.name.is_empty() || crate::pod::is_dns1123_subdomain(&o.node.name) {
        Ok(())
    } else {
        Err(NODE_NAME_REASON.into())
    }
}

/// kubelet's `ParseNodeIPArgument` (no cloud provider, so dual-stack is allowed):
/// one address, or two of different families, neither of them unspecified.
fn node_ips(s: &str) -> Result<Vec<IpAddr>, InvalidValue> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut ips = Vec::new();
    for part in s.split(',').map(str::trim) {
        ips.push(
            part.parse::<IpAddr>()
                .map_err(|_| format!("could not parse {part:?}"))?,
        );
    }
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv6() != b.is_ipv6() => {
            if a.is_unspecified() || b.is_unspecified() {
                Err("dual-stack node IP cannot include '0.0.0.0' or '::'".into())
            } else {
                Ok(ips)
            }
        }
        _ => Err("must contain either a single IP or a dual-stack pair of IPs".into()),
    }
}

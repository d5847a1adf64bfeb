//! The listeners besides the secure port's TLS and auth: addresses, the read-only
//! and healthz ports, the node log query.

use std::net::IpAddr;

use super::settings::{
    Kind::{Bool, Int, Text},
    Setting, ip, parse_bool, port, row,
};

/// Where the servers listen (read by `agent/servers.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ServerOptions {
    /// Where the read-only and secure ports listen.
    pub(crate) address: IpAddr,
    /// 0 disables.
    pub(crate) read_only_port: u16,
    pub(crate) healthz_bind_address: IpAddr,
    /// 0 disables.
    pub(crate) healthz_port: u16,
    /// `enableSystemLogQuery`: `/logs/?query=…` reads the journal, with the
    /// `NodeLogQuery` gate on too (see [`super::Options::node_log_query`]).
    pub(crate) system_log_query: bool,
}

impl ServerOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        ServerOptions {
            address: IpAddr::from([0, 0, 0, 0]),
            read_only_port: 0,
            healthz_bind_address: IpAddr::from([0, 0, 0, 0]),
            healthz_port: 0,
            system_log_query: false,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for ServerOptions {
    fn default() -> Self {
        super::Options::default().servers
    }
}

/// Where the read-only and secure ports listen.
pub(super) const ADDRESS: &[Setting] = &[row(
    "address",
    Some("address"),
    Text,
    "0.0.0.0",
    "IP",
    "IP address the read-only and secure ports listen on",
    |o, i| ip(i.text).map(|a| o.servers.address = a),
)];

/// The node log query.
pub(super) const SYSTEM_LOG_QUERY: &[Setting] = &[row(
    "",
    Some("enableSystemLogQuery"),
    Bool,
    "false",
    "true|false",
    "With the NodeLogQuery feature gate on too, /logs/?query=SERVICE|FILE answers from the \
         journal (journalctl) or a file below /var/log, as kubelet's node log query; config file \
         only",
    |o, i| parse_bool(i.text).map(|b| o.servers.system_log_query = b),
)];

/// The read-only port and healthz.
pub(super) const PORTS: &[Setting] = &[
    row(
        "read-only-port",
        Some("readOnlyPort"),
        Int,
        "10255",
        "PORT",
        "Read-only API port (0 disables; KubeletConfiguration default is 0)",
        |o, i| port(i.text).map(|p| o.servers.read_only_port = p),
    )
    .config_default("0"),
    row(
        "healthz-bind-address",
        Some("healthzBindAddress"),
        Text,
        "127.0.0.1",
        "IP",
        "IP address the healthz server listens on",
        |o, i| ip(i.text).map(|a| o.servers.healthz_bind_address = a),
    ),
    row(
        "healthz-port",
        Some("healthzPort"),
        Int,
        "10248",
        "PORT",
        "Healthz port (0 disables)",
        |o, i| port(i.text).map(|p| o.servers.healthz_port = p),
    ),
];

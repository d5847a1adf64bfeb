//! The apiserver clients: kubeconfig, client certificates, rate limits, events.

use std::path::PathBuf;

use super::settings::{
    Kind::{Bool, Int, Path},
    Setting, non_negative_i32, opt_path, parse_bool, row,
};

/// The apiserver clients' settings (read by `agent/cluster.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ClusterOptions {
    /// `--kubeconfig`: the apiserver's kubeconfig; None runs standalone.
    pub(crate) kubeconfig: Option<PathBuf>,
    /// `--bootstrap-kubeconfig`: credentials for the client certificate CSR when
    /// `--kubeconfig` is missing or expired; None: no bootstrap.
    pub(crate) bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir`: where the client certificate pairs are kept; None: `<root-dir>/pki`.
    pub(crate) cert_dir: Option<PathBuf>,
    /// `rotateCertificates`: renew the cert dir's client certificate before it expires.
    pub(crate) rotate_certificates: bool,
    /// `kubeAPIQPS` / `kubeAPIBurst`: the main apiserver client's token bucket.
    pub(crate) kube_api_qps: u32,
    pub(crate) kube_api_burst: u32,
    /// `eventRecordQPS` / `eventBurst`: the event writer's token bucket.
    pub(crate) event_record_qps: u32,
    pub(crate) event_burst: u32,
}

impl ClusterOptions {
    /// Zero values, before the table's defaults are applied.
    pub(super) fn blank() -> Self {
        ClusterOptions {
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            cert_dir: None,
            rotate_certificates: false,
            kube_api_qps: 0,
            kube_api_burst: 0,
            event_record_qps: 0,
            event_burst: 0,
        }
    }
}

/// The flags' defaults (no config file), as `Options::default()` has them.
impl Default for ClusterOptions {
    fn default() -> Self {
        super::Options::default().cluster
    }
}

/// The apiserver clients (kubelet's buildKubeletClientConfig).
pub(super) const API_CLIENT: &[Setting] = &[
    row(
        "kubeconfig",
        None,
        Path,
        "",
        "PATH",
        "kubeconfig of the apiserver to talk to (empty: standalone, no apiserver)",
        |o, i| {
            o.cluster.kubeconfig = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "kube-api-qps",
        Some("kubeAPIQPS"),
        Int,
        "50",
        "QPS",
        "Requests per second to the apiserver (0: client-go's default of 5)",
        |o, i| non_negative_i32(i.text).map(|n| o.cluster.kube_api_qps = n),
    ),
    row(
        "kube-api-burst",
        Some("kubeAPIBurst"),
        Int,
        "100",
        "N",
        "Requests to the apiserver allowed in a burst",
        |o, i| non_negative_i32(i.text).map(|n| o.cluster.kube_api_burst = n),
    ),
];

/// The event writer's own token bucket (kubelet's event client), the client
/// certificate bootstrap (kubelet's LoadClientCert) and its rotation (client-go's
/// certificate manager).
pub(super) const EVENTS_AND_CERTS: &[Setting] = &[
    row(
        "event-qps",
        Some("eventRecordQPS"),
        Int,
        "50",
        "QPS",
        "Events written to the apiserver per second (0: client-go's default of 5)",
        |o, i| non_negative_i32(i.text).map(|n| o.cluster.event_record_qps = n),
    ),
    row(
        "event-burst",
        Some("eventBurst"),
        Int,
        "100",
        "N",
        "Events written to the apiserver in a burst",
        |o, i| non_negative_i32(i.text).map(|n| o.cluster.event_burst = n),
    ),
    row(
        "bootstrap-kubeconfig",
        None,
        Path,
        "",
        "PATH",
        "kubeconfig used to request a client certificate when --kubeconfig is missing or its \
         certificate has expired; --kubeconfig is then written",
        |o, i| {
            o.cluster.bootstrap_kubeconfig = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "cert-dir",
        None,
        Path,
        "",
        "PATH",
        "Directory of the client certificate pairs (empty: <root-dir>/pki)",
        |o, i| {
            o.cluster.cert_dir = opt_path(i.text);
            Ok(())
        },
    ),
    row(
        "rotate-certificates",
        Some("rotateCertificates"),
        Bool,
        "false",
        "true|false",
        "Request a new client certificate before the current one expires (for a kubeconfig naming \
         <cert-dir>/kubelet-client-current.pem)",
        |o, i| parse_bool(i.text).map(|b| o.cluster.rotate_certificates = b),
    ),
];

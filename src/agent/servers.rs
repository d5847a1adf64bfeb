//! The HTTP servers: the secure port (kubelet's whole API, over TLS, behind its
//! authentication and authorization), the read-only port (kubelet's read-only API,
//! stats, metrics and oxlet's debug endpoints) and the healthz port, each a critical task.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tracing::info;

use super::Shared;
use super::node::NodeViews;
use super::runtime::Runtime;
use crate::koord::Served;
use crate::logging::STARTUP_TARGET;
use crate::options::{Options, PodOptions};
use crate::server::{self, Health, Limits, Views};
use crate::syncloop::{SyncLoop, stall_threshold};
use crate::tasks::Tasks;

/// How often a configured serving pair's files are checked for a change (kubelet's
/// dynamic certificate content re-checks once a minute besides its file watch).
const CERT_RELOAD_CHECK: std::time::Duration = std::time::Duration::from_secs(60);
/// How often `clientCAFile` is checked for a change: kubelet's dynamic CA content
/// watches the file (and re-reads it each minute); a stat every few seconds gives
/// the same reach without a watch.
const CLIENT_CA_RELOAD_CHECK: std::time::Duration = std::time::Duration::from_secs(3);

/// The node's log directory `/logs/` serves (kubelet's, fixed).
const NODE_LOG_DIR: &str = "/var/log";

/// The servers' connection bounds, from the open-file limit in force.
pub(super) fn limits() -> Limits {
    Limits::for_open_files(crate::rlimit::open_files_limit())
}

/// kubelet's healthz checks, on the sync loop's monitor.
pub(super) fn health(pods: &PodOptions, sync_loop: &SyncLoop) -> Health {
    Health {
        syncloop: sync_loop.monitor.clone(),
        stall_threshold: stall_threshold(pods.sync_frequency),
    }
}

/// What the koordlet side shows: the predictions (None: off) and the NodeMetric status.
pub(super) struct KoordViews {
    pub prediction: Option<Served>,
    pub node_metric: Arc<crate::koord::NodeMetricSource>,
}

/// What the read-only port shows: the shared state, what the node side measures, the
/// health checks, `/configz`, the predictions and the NodeMetric status.
pub(super) fn views(
    opts: &Options,
    rt: &Runtime,
    shared: &Shared,
    node: NodeViews,
    health: &Health,
    koord: KoordViews,
) -> Views {
    Views {
        eviction: node.eviction,
        pods: shared.pods.clone(),
        statuses: shared.statuses.clone(),
        health: health.clone(),
        cache: shared.metric_cache.clone(),
        readings: shared.readings.clone(),
        pod_cache: shared.pod_cache.clone(),
        volumes: node.volumes,
        configz: Arc::new(crate::options::kubelet_configuration(opts, &rt.endpoint)),
        prediction: koord.prediction,
        node_metric: koord.node_metric,
        cgroups: Arc::new(crate::stats::ExtrasCache::new(
            super::node::host_cgroup_tree("/metrics/cadvisor's cgroup families"),
        )),
        machine: Arc::new(crate::stats::MachineReader::new(std::path::Path::new("/"))),
    }
}

/// What the secure port needs beyond the views: the runtime, the apiserver client
/// (serving certificate requests) and the one its webhooks ask.
pub(super) struct SecureParts<'a> {
    pub rt: &'a Runtime,
    pub client: Option<kube::Client>,
    /// The reviews' own rate-limited client.
    pub reviews: Option<kube::Client>,
    /// The node's addresses, as its status reports them: the names a
    /// `serverTLSBootstrap` certificate is requested for.
    pub addresses: Vec<k8s_openapi::api::core::v1::NodeAddress>,
}

/// Builds the secure port's TLS and auth, binds it, and serves it. Errors name the
/// setting at fault.
async fn start_secure(
    opts: &Options,
    views: &Views,
    parts: SecureParts<'_>,
    limits: Limits,
    tasks: &Tasks,
) -> anyhow::Result<()> {
    let serving = &opts.serving;
    let cert_dir = opts
        .cluster
        .cert_dir
        .clone()
        .unwrap_or_else(|| opts.process.root_dir.join("pki"));
    let ips: Vec<std::net::IpAddr> = (opts.node.ips.iter())
        .filter(|ip| !ip.is_unspecified())
        .copied()
        .collect();
    let (tls, slot) = server::acceptor(serving, &cert_dir, &opts.node.name, &ips)
        .context("cannot set up the secure port's TLS")?;
    let auth = server::Auth::new(
        &opts.node.name,
        serving,
        parts.reviews.clone(),
        tls.client_cas.clone(),
    )?;
    if let Some(cas) = tls.client_cas.clone() {
        tasks.spawn_critical("client-ca-reload", move |cancel| {
            // Made here, so the file is looked at now, right after it was loaded.
            let watch = server::reload_client_cas(cas, CLIENT_CA_RELOAD_CHECK, cancel);
            async move {
                watch.await;
                Ok(())
            }
        });
    }
    if serving.server_tls_bootstrap {
        let client = parts.client.clone().ok_or_else(|| {
            anyhow::anyhow!("serverTLSBootstrap (--rotate-server-certificates) requests the serving certificate from the apiserver, and needs --kubeconfig")
        })?;
        start_serving_rotation(
            opts,
            cert_dir,
            &parts.addresses,
            client,
            slot.clone(),
            tasks,
        )?;
    }
    if let (Some(cert), Some(key)) = (&serving.tls_cert_file, &serving.tls_private_key_file) {
        let (cert, key) = (cert.clone(), key.clone());
        tasks.spawn_critical("serving-cert-reload", move |cancel| {
            // Made here, so the files are looked at now, right after they were loaded.
            let watch = server::reload_pair(slot, cert, key, CERT_RELOAD_CHECK, cancel);
            async move {
                watch.await;
                Ok(())
            }
        });
    }
    let addr = SocketAddr::new(opts.servers.address, serving.port);
    let l = server::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (--port)"))?;
    info!(
        target: STARTUP_TARGET,
        %addr,
        authorization = serving.authorization_mode.as_str(),
        anonymous = serving.anonymous,
        tokenWebhook = serving.token_webhook,
        clientCA = serving.client_ca_file.is_some(),
        "serving the kubelet API on the secure port"
    );
    if serves_exec_to_anyone(opts, addr) {
        tracing::warn!(
            %addr,
            anonymousAuth = serving.anonymous,
            authorizationMode = serving.authorization_mode.as_str(),
            "the secure port serves exec, attach, port-forward and run to anonymous users on a non-loopback address: anyone who reaches it can run commands in every pod; listen on loopback (--address=127.0.0.1), or turn anonymous requests off (--anonymous-auth=false) or authorize them (--authorization-mode=Webhook)"
        );
    }
    let cri: Arc<dyn crate::cri::Cri> = Arc::new(parts.rt.cri.clone());
    let checkpoints = server::Checkpoints {
        pods: views.pods.clone(),
        pod_cache: views.pod_cache.clone(),
        cri: cri.clone(),
        dir: opts.process.root_dir.join("checkpoints"),
    };
    let router = server::secure_router(server::Secure {
        streaming: server::Streaming {
            pods: views.pods.clone(),
            pod_cache: views.pod_cache.clone(),
            cri,
            idle_timeout: serving.streaming_idle_timeout,
            run_timeout: opts.runtime.request_timeout,
            slots: server::stream_slots(server::MAX_STREAMS),
        },
        logs: server::ContainerLogs {
            pods: views.pods.clone(),
            pod_cache: views.pod_cache.clone(),
            pod_logs_dir: opts.logs.pod_logs_dir.clone(),
            follows: server::Follows::new(
                server::MAX_FOLLOWED_LOGS,
                serving.streaming_idle_timeout,
            ),
        },
        node_logs: server::NodeLogs {
            dir: std::path::PathBuf::from(NODE_LOG_DIR),
            query: node_log_query(opts),
        },
        checkpoints,
        auth: Arc::new(auth),
        handlers: opts.handlers,
        zpages: Arc::new(server::Zpages::new(
            opts.process.started,
            opts.process.flag_values.clone(),
        )),
        views: views.clone(),
    });
    tasks.spawn_critical("secure-server", move |cancel| async move {
        server::serve(l, router, limits, Some(tls), cancel).await;
        Ok(())
    });
    Ok(())
}

/// The journal `/logs/?query=` reads, when kubelet's `NodeLogQuery` gate and
/// `enableSystemLogQuery` are both on; with only the setting, kubelet says at start
/// that the gate is off, and so does oxlet.
fn node_log_query(opts: &Options) -> Option<Arc<dyn server::Journalctl>> {
    if opts.node_log_query() {
        info!(
            "/logs/ answers node log queries from the journal (NodeLogQuery gate and enableSystemLogQuery on)"
        );
        return Some(Arc::new(server::SystemJournal));
    }
    if opts.servers.system_log_query {
        info!(
            feature = crate::options::NODE_LOG_QUERY_GATE,
            "Feature not enabled: enableSystemLogQuery is set, but without the gate /logs/ ignores queries"
        );
    }
    None
}

/// Whether anyone who reaches `addr` may exec, attach, port-forward and run: anonymous
/// requests on, every request authorized, the debugging handlers on, and an address
/// other than loopback (kubelet's flag defaults on 0.0.0.0). A webhook may allow
/// `system:anonymous` too, but only the apiserver knows; that case is not said.
fn serves_exec_to_anyone(opts: &Options, addr: SocketAddr) -> bool {
    let s = &opts.serving;
    s.anonymous
        && s.authorization_mode == crate::options::AuthorizationMode::AlwaysAllow
        && opts.handlers.debugging
        && !addr.ip().to_canonical().is_loopback()
}

/// `serverTLSBootstrap`: the stored serving certificate is presented now, and a
/// task requests the first one (when there is none) and rotates it.
fn start_serving_rotation(
    opts: &Options,
    cert_dir: std::path::PathBuf,
    addresses: &[k8s_openapi::api::core::v1::NodeAddress],
    client: kube::Client,
    slot: Arc<server::ServingSlot>,
    tasks: &Tasks,
) -> anyhow::Result<()> {
    let install: crate::kubeclient::Install =
        Arc::new(move |pem: &[u8]| slot.replace_issued(pem).map_err(Into::into));
    let node = &opts.node.name;
    let Some(rotation) =
        crate::kubeclient::ServingRotation::new(cert_dir, node, addresses, client, install)
    else {
        anyhow::bail!(
            "serverTLSBootstrap: node {node} has no address to name in a serving certificate"
        );
    };
    match rotation.install_stored() {
        Ok(Some(cert)) if cert.not_after <= jiff::Timestamp::now() => {
            tracing::warn!(subject = cert.subject, notAfter = %cert.not_after, "serverTLSBootstrap: the stored serving certificate has expired; requesting a new one (TLS handshakes fail until it is issued)");
        }
        Ok(Some(cert)) => {
            info!(target: STARTUP_TARGET, subject = cert.subject, notAfter = %cert.not_after, names = rotation.names(), "serverTLSBootstrap: serving the stored serving certificate; it is renewed before it expires");
        }
        Ok(None) => {
            info!(target: STARTUP_TARGET, signer = "kubernetes.io/kubelet-serving", names = rotation.names(), "serverTLSBootstrap: no serving certificate yet; requesting one (TLS handshakes fail until it is issued)");
        }
        Err(e) => {
            tracing::warn!(error = %e, "serverTLSBootstrap: the stored serving certificate cannot be served; TLS handshakes fail until a new one is issued");
        }
    }
    // Restarting: a failed or panicked pass must never end rotation for good.
    tasks.spawn_restarting(
        "serving-cert-rotation",
        crate::tasks::Backoff::default(),
        move |cancel| rotation.clone().run(cancel),
    );
    Ok(())
}

/// Binds and serves the secure port, the read-only port, then the healthz port (a
/// port of 0 is off); a port that cannot be bound fails the start.
pub(super) async fn start(
    opts: &Options,
    views: Views,
    secure: SecureParts<'_>,
    health: Health,
    limits: Limits,
    tasks: &Tasks,
) -> anyhow::Result<()> {
    if opts.serving.enabled() {
        start_secure(opts, &views, secure, limits, tasks).await?;
    }
    if opts.servers.read_only_port != 0 {
        let addr = SocketAddr::new(opts.servers.address, opts.servers.read_only_port);
        let l = server::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (--read-only-port)"))?;
        info!(target: STARTUP_TARGET, %addr, maxConnections = limits.max_connections, "serving the read-only API");
        let router = server::read_only_router(views);
        tasks.spawn_critical("read-only-server", move |cancel| async move {
            server::serve(l, router, limits, None, cancel).await;
            Ok(())
        });
    }
    if opts.servers.healthz_port != 0 {
        let addr = SocketAddr::new(opts.servers.healthz_bind_address, opts.servers.healthz_port);
        let l = server::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (--healthz-port)"))?;
        let router = server::healthz_router(health);
        tasks.spawn_critical("healthz-server", move |cancel| async move {
            server::serve(l, router, limits, None, cancel).await;
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> Options {
        crate::options::load(std::iter::once("oxlet").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn exec_for_anyone_is_only_anonymous_always_allow_off_loopback() {
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 10250);
        // kubelet's flag defaults: anonymous on, AlwaysAllow, 0.0.0.0.
        let defaults = opts(&[]);
        assert!(serves_exec_to_anyone(&defaults, at("0.0.0.0")));
        assert!(serves_exec_to_anyone(&defaults, at("::")));
        assert!(serves_exec_to_anyone(&defaults, at("192.0.2.7")));
        // run-example.sh's loopback, in each spelling.
        for ip in ["127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"] {
            assert!(!serves_exec_to_anyone(&defaults, at(ip)), "{ip}");
        }
        for args in [
            &["--anonymous-auth=false"][..],
            &["--authorization-mode=Webhook"][..],
            &["--enable-debugging-handlers=false"][..],
        ] {
            assert!(
                !serves_exec_to_anyone(&opts(args), at("0.0.0.0")),
                "{args:?}"
            );
        }
    }
}

//! The HTTP servers: the read-only port (kubelet's read-only API, stats, metrics and
//! oxlet's debug endpoints) and the healthz port, each a critical task.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tracing::info;

use super::Shared;
use super::node::NodeViews;
use super::runtime::Runtime;
use crate::koord::Served;
use crate::logging::STARTUP_TARGET;
use crate::options::Options;
use crate::server::{self, Health, Limits, Views};
use crate::syncloop::{SyncLoop, stall_threshold};
use crate::tasks::Tasks;

/// The servers' connection bounds, from the open-file limit in force.
pub(super) fn limits() -> Limits {
    Limits::for_open_files(crate::rlimit::open_files_limit())
}

/// kubelet's healthz checks, on the sync loop's monitor.
pub(super) fn health(opts: &Options, sync_loop: &SyncLoop) -> Health {
    Health {
        syncloop: sync_loop.monitor.clone(),
        stall_threshold: stall_threshold(opts.sync_frequency),
    }
}

/// What the read-only port shows: the shared state, what the node side measures, the
/// health checks, `/configz` and the predictions.
pub(super) fn views(
    opts: &Options,
    rt: &Runtime,
    shared: &Shared,
    node: NodeViews,
    health: &Health,
    prediction: Option<Served>,
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
        prediction,
    }
}

/// Binds and serves the read-only port, then the healthz port (a port of 0 is off);
/// a port that cannot be bound fails the start.
pub(super) async fn start(
    opts: &Options,
    views: Views,
    health: Health,
    limits: Limits,
    tasks: &Tasks,
) -> anyhow::Result<()> {
    if opts.read_only_port != 0 {
        let addr = SocketAddr::new(opts.address, opts.read_only_port);
        let l = server::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (--read-only-port)"))?;
        info!(target: STARTUP_TARGET, %addr, maxConnections = limits.max_connections, "serving the read-only API");
        let router = server::read_only_router(views);
        tasks.spawn_critical("read-only-server", move |cancel| async move {
            server::serve(l, router, limits, cancel).await;
            Ok(())
        });
    }
    if opts.healthz_port != 0 {
        let addr = SocketAddr::new(opts.healthz_bind_address, opts.healthz_port);
        let l = server::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr} (--healthz-port)"))?;
        let router = server::healthz_router(health);
        tasks.spawn_critical("healthz-server", move |cancel| async move {
            server::serve(l, router, limits, cancel).await;
            Ok(())
        });
    }
    Ok(())
}

//! Wiring: connects (or starts) the runtime, then runs the sources, the merger, the
//! PLEG, the sync loop and the HTTP servers as tasks under one cancellation token.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::merge::{PodConfig, run_merger};
use crate::config::options::{DEFAULT_RUNTIME_ENDPOINT, Options};
use crate::config::{FILE_SOURCE, file::run_file_source};
use crate::logging::STARTUP_TARGET;
use crate::pleg::{EVENT_CHANNEL_CAPACITY, GenericPleg, PlegStats, PodCache};
use crate::runtime::containerd::{
    CniSettings, ContainerdLayout, ManagedContainerd, import_images, probe_cri,
};
use crate::runtime::sandbox::{SandboxEnv, host_dns};
use crate::runtime::{RemoteRuntime, RuntimeManager};
use crate::server::{self, Views};
use crate::status::StatusManager;
use crate::syncloop::pod_manager::PodManager;
use crate::syncloop::pod_syncer::Syncer;
use crate::syncloop::pod_workers::PodWorkers;
use crate::syncloop::work_queue::WorkQueue;
use crate::syncloop::{LoopInputs, RuntimeHealth, SyncLoop, run_runtime_health};

/// How long to wait for a runtime to answer at start (kubelet waits 30 s).
const RUNTIME_WAIT: Duration = Duration::from_secs(30);

/// The node's primary IPv4 address (the first global one), or loopback.
pub fn detect_host_ip() -> String {
    std::process::Command::new("ip")
        .args(["-o", "-4", "addr", "show", "scope", "global"])
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout).lines().find_map(|l| {
                let mut words = l.split_whitespace();
                words.find(|w| *w == "inet")?;
                words.next()?.split('/').next().map(str::to_string)
            })
        })
        .unwrap_or_else(|| "127.0.0.1".to_string())
}

/// kubelet sets its own oom_score_adj to -999; a sandbox without CAP_SYS_RESOURCE
/// cannot, and that must not stop the agent.
fn set_own_oom_score_adj() {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "-999") {
        warn!(error = %e, "cannot set oom_score_adj to -999; going on");
    }
}

fn socket_path(endpoint: &str) -> PathBuf {
    PathBuf::from(endpoint.trim_start_matches("unix://"))
}

/// The runtime oxlet talks to, and the containerd it supervises (if any).
pub struct Runtime {
    pub cri: RemoteRuntime,
    pub runtime_name: String,
    pub managed: Option<ManagedContainerd>,
}

/// Connects to the configured runtime; without an explicit endpoint and with nothing
/// answering at the default socket, starts a managed containerd under `--root-dir`.
pub async fn connect_runtime(opts: &Options) -> anyhow::Result<Runtime> {
    let timeout = opts.runtime_request_timeout;
    let mut managed = None;
    let endpoint = if opts.runtime_endpoint_explicit {
        opts.container_runtime_endpoint.clone()
    } else {
        let default_up = socket_path(DEFAULT_RUNTIME_ENDPOINT).exists()
            && probe_cri(DEFAULT_RUNTIME_ENDPOINT, Duration::from_secs(2))
                .await
                .is_ok();
        if default_up {
            DEFAULT_RUNTIME_ENDPOINT.to_string()
        } else {
            let layout = ContainerdLayout::new(opts.root_dir.join("containerd"));
            info!(target: STARTUP_TARGET, root = %opts.root_dir.display(), "no container runtime answers at {DEFAULT_RUNTIME_ENDPOINT}; starting a managed containerd");
            let m = ManagedContainerd::start(&layout, &CniSettings::default())
                .await
                .context("cannot start managed containerd")?;
            info!(target: STARTUP_TARGET, endpoint = %m.endpoint(), "managed containerd is up");
            let ep = m.endpoint();
            managed = Some(m);
            ep
        }
    };
    // Wait like kubelet (30 s), but never longer than one runtime request may take.
    let deadline = tokio::time::Instant::now() + RUNTIME_WAIT.min(timeout);
    let (cri, version) = loop {
        match RemoteRuntime::connect(&endpoint, Duration::from_secs(5), timeout).await {
            Ok(ok) => break ok,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                bail!("container runtime at {endpoint} is not answering: {e}")
            }
            Err(e) => {
                warn!(error = %e, "waiting for the container runtime");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    info!(target: STARTUP_TARGET, endpoint = %endpoint, runtime = %version.runtime_name, version = %version.runtime_version, apiVersion = %version.runtime_api_version, "connected to container runtime");
    let images = opts.root_dir.join("images");
    if images.is_dir() {
        // Each archive is imported on its own; `import_images` logs successes and
        // failures, and a broken archive is skipped.
        import_images(&socket_path(&endpoint), &images).await;
    }
    Ok(Runtime {
        cri,
        runtime_name: version.runtime_name,
        managed,
    })
}

/// A running agent: its shared state, for the server, runonce and tests.
pub struct Agent {
    pub pods: Arc<PodManager>,
    pub statuses: Arc<StatusManager>,
    pub tracker: TaskTracker,
}

/// Starts every task of the agent; they stop when `cancel` fires.
pub async fn start(
    opts: &Options,
    rt: &Runtime,
    cancel: CancellationToken,
) -> anyhow::Result<Agent> {
    let host_ip = detect_host_ip();
    let runtime = Arc::new(RuntimeManager::new(
        rt.cri.clone(),
        SandboxEnv {
            pod_logs_dir: opts.pod_logs_dir.clone(),
            host_dns: host_dns(),
            pods_dir: opts.root_dir.join("pods"),
        },
        host_ip.clone(),
    ));
    let cache = Arc::new(PodCache::default());
    let statuses = Arc::new(StatusManager::default());
    let pods = Arc::new(PodManager::default());
    let queue = Arc::new(WorkQueue::default());
    let pleg_stats = Arc::new(PlegStats::default());
    let health = Arc::new(RuntimeHealth::default());
    health.set(true);
    let tracker = TaskTracker::new();

    // Sources → merger → sync loop.
    let mut sources = Vec::new();
    let (snap_tx, snap_rx) = mpsc::channel(16);
    if let Some(path) = opts.static_pod_path.clone() {
        sources.push(FILE_SOURCE);
        tracker.spawn(run_file_source(
            path,
            opts.file_check_frequency,
            opts.node_name.clone(),
            snap_tx.clone(),
            cancel.clone(),
        ));
    }
    drop(snap_tx);
    let (update_tx, update_rx) = mpsc::channel(50);
    tracker.spawn(run_merger(PodConfig::new(&sources), snap_rx, update_tx));

    let (pleg_tx, pleg_rx) = mpsc::channel(EVENT_CHANNEL_CAPACITY);
    let mut pleg = GenericPleg::new(runtime.clone(), cache.clone(), pleg_tx, pleg_stats.clone());
    // One relist before the loop starts, so PLEG health and the cache are warm.
    pleg.relist().await;
    tracker.spawn(pleg.run(cancel.clone()));
    tracker.spawn(run_runtime_health(
        runtime.clone(),
        health.clone(),
        cancel.clone(),
    ));

    let syncer = Arc::new(Syncer {
        runtime: runtime.clone(),
        cache,
        statuses: statuses.clone(),
        pods: pods.clone(),
        runtime_name: rt.runtime_name.clone(),
        startup: Default::default(),
    });
    let workers = PodWorkers::new(syncer, queue.clone(), opts.sync_frequency, cancel.clone());
    let sync_loop = SyncLoop::new(
        pods.clone(),
        workers,
        statuses.clone(),
        runtime,
        queue,
        pleg_stats,
        health,
        opts.max_pods,
        sources,
    );
    tracker.spawn(sync_loop.run(LoopInputs::new(update_rx, pleg_rx), cancel.clone()));

    if !opts.runonce {
        let views = Views {
            pods: pods.clone(),
            statuses: statuses.clone(),
        };
        if opts.read_only_port != 0 {
            let addr = SocketAddr::new(opts.address, opts.read_only_port);
            let l = server::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--read-only-port)"))?;
            info!(target: STARTUP_TARGET, %addr, "serving the read-only API");
            tracker.spawn(server::serve(
                l,
                server::read_only_router(views),
                cancel.clone(),
            ));
        }
        if opts.healthz_port != 0 {
            let addr = SocketAddr::new(opts.healthz_bind_address, opts.healthz_port);
            let l = server::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--healthz-port)"))?;
            tracker.spawn(server::serve(l, server::healthz_router(), cancel.clone()));
        }
    }
    tracker.close();
    Ok(Agent {
        pods,
        statuses,
        tracker,
    })
}

/// Logs the start-up summary (shown at every verbosity).
pub fn log_summary(opts: &Options) {
    info!(
        target: STARTUP_TARGET,
        node = %opts.node_name,
        staticPodPath = %opts.static_pod_path.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_else(|| "(none)".into()),
        rootDir = %opts.root_dir.display(),
        podLogsDir = %opts.pod_logs_dir.display(),
        maxPods = opts.max_pods,
        syncFrequency = %crate::config::duration::format_go_duration(opts.sync_frequency),
        fileCheckFrequency = %crate::config::duration::format_go_duration(opts.file_check_frequency),
        runonce = opts.runonce,
        "starting oxlet {}",
        env!("CARGO_PKG_VERSION")
    );
    for item in &opts.unimplemented {
        warn!("{item} is accepted but not implemented by oxlet yet; ignoring it");
    }
    for w in &opts.warnings {
        warn!("{w}");
    }
}

/// Runs the agent until SIGTERM / SIGINT; containers keep running.
pub async fn run(opts: Options) -> anyhow::Result<i32> {
    log_summary(&opts);
    set_own_oom_score_adj();
    let rt = connect_runtime(&opts).await?;
    let cancel = CancellationToken::new();
    let agent = start(&opts, &rt, cancel.clone()).await?;
    let code = if opts.runonce {
        crate::runonce::run(&agent, &cancel).await
    } else {
        wait_for_signal().await;
        info!(target: STARTUP_TARGET, "shutting down; containers keep running");
        0
    };
    cancel.cancel();
    if tokio::time::timeout(Duration::from_secs(3), agent.tracker.wait())
        .await
        .is_err()
    {
        warn!("some tasks did not stop within 3s");
    }
    if let Some(m) = rt.managed {
        m.stop().await;
    }
    Ok(code)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => info!(target: STARTUP_TARGET, "received SIGTERM"),
        _ = int.recv() => info!(target: STARTUP_TARGET, "received SIGINT"),
    }
}

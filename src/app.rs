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

use crate::config::file::run_file_source;
use crate::config::merge::{PodConfig, run_merger};
use crate::containerd::{
    CniSettings, ContainerdLayout, ManagedContainerd, import_images, probe_cri, supervise,
};
use crate::logging::STARTUP_TARGET;
use crate::options::{DEFAULT_RUNTIME_ENDPOINT, Options};
use crate::pleg::{EVENT_CHANNEL_CAPACITY, GenericPleg, PlegStats, PodCache};
use crate::pod::FILE_SOURCE;
use crate::runtime::sandbox::{SandboxEnv, host_dns};
use crate::runtime::{RemoteRuntime, RuntimeManager};
use crate::runtime_choice::{self, RuntimeChoice};
use crate::server::healthz::Health;
use crate::server::{self, Views};
use crate::status::StatusManager;
use crate::syncloop::monitor::stall_threshold;
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
    /// The CRI endpoint connected to.
    pub endpoint: String,
    pub managed: Option<ManagedContainerd>,
}

/// Which runtime this start uses: the explicit endpoint; else what `--root-dir` was
/// run with before (so a system containerd that is slow at boot never flips a node to
/// the managed one, nor the reverse); else the default socket if it answers, else managed.
async fn choose_runtime(opts: &Options) -> anyhow::Result<RuntimeChoice> {
    let recorded = runtime_choice::load(&opts.root_dir)?;
    let requested = if opts.runtime_endpoint_explicit {
        RuntimeChoice::Endpoint(opts.container_runtime_endpoint.clone())
    } else if recorded == Some(RuntimeChoice::Endpoint(DEFAULT_RUNTIME_ENDPOINT.into())) {
        RuntimeChoice::Endpoint(DEFAULT_RUNTIME_ENDPOINT.into())
    } else if recorded == Some(RuntimeChoice::Managed) {
        RuntimeChoice::Managed
    } else {
        let default_up = socket_path(DEFAULT_RUNTIME_ENDPOINT).exists()
            && probe_cri(DEFAULT_RUNTIME_ENDPOINT, Duration::from_secs(2))
                .await
                .is_ok();
        if default_up {
            RuntimeChoice::Endpoint(DEFAULT_RUNTIME_ENDPOINT.into())
        } else {
            info!(target: STARTUP_TARGET, "no container runtime answers at {DEFAULT_RUNTIME_ENDPOINT}");
            RuntimeChoice::Managed
        }
    };
    runtime_choice::check(&opts.root_dir, recorded.as_ref(), &requested)?;
    Ok(requested)
}

/// Connects to the configured runtime, or starts a managed containerd under
/// `--root-dir` (see [`choose_runtime`]), and records the choice.
pub async fn connect_runtime(opts: &Options) -> anyhow::Result<Runtime> {
    let timeout = opts.runtime_request_timeout;
    let choice = choose_runtime(opts).await?;
    let mut managed = None;
    let endpoint = match &choice {
        RuntimeChoice::Endpoint(e) => e.clone(),
        RuntimeChoice::Managed => {
            let layout = ContainerdLayout::new(opts.root_dir.join("containerd"));
            info!(target: STARTUP_TARGET, root = %opts.root_dir.display(), "starting a managed containerd");
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
    runtime_choice::save(&opts.root_dir, &choice)?;
    Ok(Runtime {
        cri,
        runtime_name: version.runtime_name,
        endpoint,
        managed,
    })
}

/// Imports the archives in `<root-dir>/images` (k3s's convention). Each archive is
/// imported on its own; `import_images` logs successes and failures, and a broken
/// archive is skipped.
pub async fn import_root_images(opts: &Options, rt: &Runtime) {
    let images = opts.root_dir.join("images");
    if images.is_dir() {
        import_images(&socket_path(&rt.endpoint), &images).await;
    }
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
    let limits = server::Limits::for_open_files(crate::rlimit::open_files_limit());
    let host_ip = detect_host_ip();
    let runtime = Arc::new(RuntimeManager::new(
        Arc::new(rt.cri.clone()),
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
    let mut pleg = GenericPleg::new(runtime.reader(), cache.clone(), pleg_tx, pleg_stats.clone());
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
    let health = Health {
        syncloop: sync_loop.monitor.clone(),
        stall_threshold: stall_threshold(opts.sync_frequency),
    };
    tracker.spawn(sync_loop.run(LoopInputs::new(update_rx, pleg_rx), cancel.clone()));

    if !opts.runonce {
        let views = Views {
            pods: pods.clone(),
            statuses: statuses.clone(),
            health: health.clone(),
        };
        if opts.read_only_port != 0 {
            let addr = SocketAddr::new(opts.address, opts.read_only_port);
            let l = server::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--read-only-port)"))?;
            info!(target: STARTUP_TARGET, %addr, maxConnections = limits.max_connections, "serving the read-only API");
            tracker.spawn(server::serve(
                l,
                server::read_only_router(views),
                limits,
                cancel.clone(),
            ));
        }
        if opts.healthz_port != 0 {
            let addr = SocketAddr::new(opts.healthz_bind_address, opts.healthz_port);
            let l = server::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--healthz-port)"))?;
            tracker.spawn(server::serve(
                l,
                server::healthz_router(health),
                limits,
                cancel.clone(),
            ));
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
        syncFrequency = %crate::options::duration::format_go_duration(opts.sync_frequency),
        fileCheckFrequency = %crate::options::duration::format_go_duration(opts.file_check_frequency),
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

/// SIGTERM and SIGINT, listened for from the first instant of [`run`], so that a stop
/// during start-up (a slow runtime, a long image import) is honoured at once.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next signal's name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Sets RLIMIT_NOFILE to `maxOpenFiles` (or the hard limit if that is lower) and logs it.
fn apply_max_open_files(wanted: u64) {
    match crate::rlimit::raise_open_files(wanted) {
        Ok(r) if r.capped => {
            warn!(
                maxOpenFiles = wanted,
                soft = r.soft,
                hard = r.hard,
                "cannot set RLIMIT_NOFILE to maxOpenFiles; raised the soft limit to the hard limit instead"
            )
        }
        Ok(r) => {
            info!(target: STARTUP_TARGET, soft = r.soft, hard = r.hard, "set RLIMIT_NOFILE to maxOpenFiles")
        }
        Err(e) => warn!(error = %e, maxOpenFiles = wanted, "cannot set RLIMIT_NOFILE; going on"),
    }
}

/// Runs the agent until SIGTERM / SIGINT; containers keep running. A signal during
/// start-up stops it there, with exit code 0, and stops a managed containerd.
pub async fn run(opts: Options) -> anyhow::Result<i32> {
    let mut signals = Signals::install().context("cannot listen for SIGTERM/SIGINT")?;
    log_summary(&opts);
    set_own_oom_score_adj();
    apply_max_open_files(opts.max_open_files);
    // Cut short here, a half-started managed containerd is killed with its handle.
    let mut rt = tokio::select! {
        rt = connect_runtime(&opts) => rt?,
        sig = signals.recv() => {
            info!(target: STARTUP_TARGET, "received {sig} while connecting to the runtime; exiting");
            return Ok(0);
        }
    };
    // The supervisor owns the managed containerd and stops it once the agent has stopped.
    // Its handle is awaited below, so it is tracked.
    let runtime_cancel = CancellationToken::new();
    let supervisor = rt
        .managed
        .take()
        .map(|m| tokio::spawn(supervise(m, runtime_cancel.clone())));
    let result = run_agent(&opts, &rt, &mut signals).await;
    runtime_cancel.cancel();
    if let Some(s) = supervisor {
        let _ = s.await;
    }
    result
}

/// Everything after the runtime is up: image import, the agent's tasks, then waiting
/// for a signal (or for `--runonce` to finish).
async fn run_agent(opts: &Options, rt: &Runtime, signals: &mut Signals) -> anyhow::Result<i32> {
    tokio::select! {
        _ = import_root_images(opts, rt) => {}
        sig = signals.recv() => {
            info!(target: STARTUP_TARGET, "received {sig} while importing images; exiting");
            return Ok(0);
        }
    }
    let cancel = CancellationToken::new();
    let started = tokio::select! {
        a = start(opts, rt, cancel.clone()) => Some(a?),
        sig = signals.recv() => {
            info!(target: STARTUP_TARGET, "received {sig} during start-up; exiting");
            None
        }
    };
    let code = match &started {
        None => 0,
        Some(agent) if opts.runonce => tokio::select! {
            code = crate::runonce::run(agent, &cancel) => code,
            sig = signals.recv() => {
                info!(target: STARTUP_TARGET, "received {sig}; stopping runonce");
                0
            }
        },
        Some(_) => {
            let sig = signals.recv().await;
            info!(target: STARTUP_TARGET, "received {sig}");
            info!(target: STARTUP_TARGET, "shutting down; containers keep running");
            0
        }
    };
    cancel.cancel();
    if let Some(agent) = started
        && tokio::time::timeout(Duration::from_secs(3), agent.tracker.wait())
            .await
            .is_err()
    {
        warn!("some tasks did not stop within 3s");
    }
    Ok(code)
}

//! Wiring: connects (or starts) the runtime, then runs the sources, the merger, the
//! PLEG, the sync loop and the HTTP servers as named tasks in one task tree
//! (`crate::tasks`): a critical task's end stops the agent with a non-zero code.
//!
//! This file is the room's face ([`run`]) and the order of start-up ([`start`]). The
//! wings wire one side each: `runtime` (the CRI runtime, the PLEG, the sync loop and
//! its pod workers), `node` (container manager, image GC, volume stats, eviction, the
//! node shutdown manager, node status), `koordlet` (metric advisor, prediction, QoS manager, runtime hooks),
//! `sources` (static pods, manifest URL, apiserver, the merger), `servers` (read-only
//! and healthz ports), `cluster` (the apiserver clients and what writes through them)
//! and `process` (signals, limits, the start-up summary).

mod cluster;
mod koordlet;
mod lock;
mod node;
mod process;
mod resources;
mod runonce;
mod runtime;
mod runtime_choice;
mod servers;
mod sources;
mod timeline_cmd;

pub use timeline_cmd::timeline_command;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tracing::{info, warn};

use crate::contracts::LatestReadings;
use crate::contracts::{NodeShutdownState, RuntimeHealth};
use crate::events::EventRecorder;
use crate::kubeclient::ApiClients;
use crate::logging::STARTUP_TARGET;
use crate::metriccache::MetricCache;
use crate::options::Options;
use crate::pleg::{PlegStats, PodCache};
use crate::pod::PodManager;
use crate::prober::ProbeResults;
use crate::status::{PressureSource, StatusManager};
use crate::syncloop::{LoopInputs, PodWorkers, Syncer};
use crate::tasks::Tasks;
use process::Signals;
use runtime::Runtime;

/// How long the agent's tasks get to stop after the signal.
const AGENT_STOP: Duration = Duration::from_secs(3);
/// How long the managed containerd's supervisor gets to stop it (its own grace is 5 s).
const RUNTIME_STOP: Duration = Duration::from_secs(15);

/// The pod workers, as the node side and the status writer see them.
type Workers = PodWorkers<Syncer>;

/// A running agent: its shared state, for the server, runonce and tests.
struct Agent {
    pods: Arc<PodManager>,
    statuses: Arc<StatusManager>,
}

/// The state the wings share: made once in [`start`], read by the tasks they spawn.
struct Shared {
    events: EventRecorder,
    pods: Arc<PodManager>,
    statuses: Arc<StatusManager>,
    /// What the PLEG last saw of each pod.
    pod_cache: Arc<PodCache>,
    pleg_stats: Arc<PlegStats>,
    // The node QoS half: the metric advisor writes these, the server,
    // prediction and the QoS manager read them.
    metric_cache: Arc<MetricCache>,
    readings: Arc<LatestReadings>,
    runtime_health: Arc<RuntimeHealth>,
    /// The eviction manager sets it; admission and the node status read it.
    pressure: Arc<PressureSource>,
    /// The node shutdown manager sets it; admission and the node status read it.
    shutdown: Arc<NodeShutdownState>,
    /// The NodeSLO's host applications: `--node-slo-file`'s, then the cluster's.
    host_apps: tokio::sync::watch::Sender<Vec<crate::koordapi::HostApp>>,
    /// What each pod was admitted (or resized) at: the pods the sync loop runs and
    /// the eviction manager and the QoS manager weigh.
    allocation: Arc<crate::syncloop::AllocationManager>,
    /// The CPU, memory, topology, device and DRA managers.
    resources: Arc<crate::resourcemanager::ResourceManagers>,
}

impl Shared {
    /// Everything empty, the runtime taken as healthy until its check says otherwise.
    fn new(
        events: EventRecorder,
        metric_cache: Arc<MetricCache>,
        host_apps: Vec<crate::koordapi::HostApp>,
        runtime_health: Arc<RuntimeHealth>,
        allocation: Arc<crate::syncloop::AllocationManager>,
        resources: Arc<crate::resourcemanager::ResourceManagers>,
    ) -> Self {
        runtime_health.set(true);
        Shared {
            events,
            pods: Arc::default(),
            statuses: Arc::default(),
            pod_cache: Arc::default(),
            pleg_stats: Arc::default(),
            metric_cache,
            readings: Arc::default(),
            runtime_health,
            pressure: Arc::default(),
            shutdown: Arc::default(),
            host_apps: tokio::sync::watch::Sender::new(host_apps),
            allocation,
            resources,
        }
    }
}

/// Starts every task of the agent in `tasks`; they stop when it is shut down. With
/// `api` (cluster mode, `--kubeconfig`), the apiserver tasks start too. The steps
/// run in the order the agent's tasks are spawned.
async fn start(
    opts: &Options,
    rt: &Runtime,
    api: Option<&ApiClients>,
    tasks: &Tasks,
) -> anyhow::Result<Agent> {
    let events = cluster::spawn_event_sink(opts, api, tasks);
    process::set_metrics_node_name(opts);
    process::spawn_heap_trimmer(tasks);
    let limits = servers::limits();
    let host = node::start_host(opts, rt, &events, tasks).await?;
    let resource_managers = resources::resource_managers(opts, &host, api, tasks)?;
    // Bounded: a worker waits for the loop rather than an update being lost.
    let (probe_results, probe_rx) = ProbeResults::new(256);
    let probe_results = Arc::new(probe_results);
    crate::census::watch("probe results", &probe_results, ProbeResults::len);
    let dns = runtime::dns(&opts.pods, &host.info);
    let qos = koordlet::qos_config(opts)?;
    let hooks = koordlet::runtime_hooks(&qos, &host);
    let runtime_health = Arc::new(RuntimeHealth::default());
    let manager = runtime::manager(
        opts,
        rt,
        &host,
        runtime::ManagerInputs {
            dns,
            events: &events,
            probes: &probe_results,
            objects: cluster::object_manager(api, &opts.node.name),
            hooks: hooks.runtime_hooks(),
            runtime_state: runtime_health.clone(),
            grants: resource_managers.clone(),
        },
    )?;
    runtime::spawn_log_rotation(&opts.logs, rt, tasks);
    let allocation = runtime::allocation_manager(opts, &host, &events)?;
    let shared = Shared::new(
        events,
        koordlet::open_metric_cache(opts),
        koordlet::file_host_apps(opts),
        runtime_health,
        allocation,
        resource_managers,
    );
    crate::census::watch(
        "metric cache series",
        &shared.metric_cache,
        MetricCache::series_count,
    );
    let node_view = api.map(|a| koordlet::spawn_node_watch(opts, &a.main, tasks));
    let prediction =
        koordlet::spawn_prediction(opts, &shared, &host.allocatable, node_view.clone(), tasks);
    let node_metric = koordlet::node_metric_source(&shared, prediction.as_ref());
    let sources = sources::start(opts, api, tasks);
    let pleg_events = runtime::start_pleg(&manager, &shared, tasks, opts.evented_pleg()).await;
    // The handlers' features are known before the first pod syncs.
    crate::syncloop::check_runtime(&manager, &shared.runtime_health).await;
    runtime::spawn_runtime_health(&manager, &shared, tasks);
    let syncer = runtime::syncer(rt, &manager, &host, &shared, probe_results, tasks);
    koordlet::spawn_metric_advisor(opts, rt, &host, &shared, tasks);
    // The sync loop wakes the mirror pod reconciler when static or mirror pods change.
    let mirror_wake = Arc::new(tokio::sync::Notify::new());
    let (sources_ready, sources_ready_rx) = tokio::sync::watch::channel(false);
    resources::set_active_pods(&shared, sources_ready_rx.clone());
    resources::spawn(opts, &shared.resources, rt, tasks);
    let sync_loop = runtime::sync_loop(
        &opts.pods,
        &host,
        &shared,
        runtime::LoopParts {
            syncer,
            runtime: manager,
            sources: sources.names,
            mirror_hook: api.map(|_| mirror_wake.clone()),
            sources_ready,
        },
        tasks,
    );
    let health = servers::health(&opts.pods, &sync_loop);
    let inputs = LoopInputs::new(sources.updates, pleg_events).with_probes(probe_rx);
    let workers = sync_loop.workers.clone();
    let disk_reclaimers = node::spawn_image_gc(opts, rt, &sync_loop, &shared.events, tasks);
    let qos_updates =
        api.map(|a| koordlet::spawn_node_slo_watch(opts, &a.main, &qos, &shared, tasks));
    let feeds = koordlet::ClusterFeeds {
        slo: qos_updates,
        node: node_view,
    };
    koordlet::spawn_hook_reconciler(&hooks, &feeds, &host, &shared, tasks);
    koordlet::spawn_qos_manager(qos, feeds, opts, &host, &shared, &sync_loop, tasks);
    runtime::spawn_sync_loop(sync_loop, inputs, tasks);
    if !opts.process.runonce {
        let reclaim = node::Reclaim {
            workers: &workers,
            reclaimers: disk_reclaimers,
        };
        let node_views = node::spawn_eviction(opts, &host, &shared, reclaim, tasks);
        node::spawn_node_shutdown(opts, &shared, &workers, tasks);
        let koord = servers::KoordViews {
            prediction,
            node_metric: node_metric.clone(),
        };
        let views = servers::views(opts, rt, &shared, node_views, &health, koord);
        let secure = servers::SecureParts {
            rt,
            client: api.map(|a| a.main.clone()),
            reviews: api.map(|a| a.reviews.clone()),
            addresses: crate::status::node_addresses(&host.info),
        };
        servers::start(opts, views, secure, health, limits, tasks).await?;
    }
    if let Some(api) = api {
        cluster::spawn_status_writer(
            opts,
            api,
            &shared,
            workers,
            (mirror_wake, sources_ready_rx),
            tasks,
        );
        node::spawn_node_status(opts, rt, api, &host, &shared, tasks);
        koordlet::spawn_node_metric_reporter(opts, &api.main, &node_metric, tasks);
    }
    Ok(Agent {
        pods: shared.pods,
        statuses: shared.statuses,
    })
}

/// Runs the agent until SIGTERM / SIGINT; containers keep running. A signal during
/// start-up stops it there, with exit code 0, and stops a managed containerd.
pub async fn run(opts: Options) -> anyhow::Result<i32> {
    let mut signals = Signals::install().context("cannot listen for SIGTERM/SIGINT")?;
    process::log_summary(&opts);
    if opts.process.exit_on_lock_contention && opts.process.lock_file.is_none() {
        anyhow::bail!("cannot exit on lock file contention: no --lock-file given");
    }
    let locks = lock::acquire(&opts).await?;
    if opts.process.task_cpu_accounting {
        crate::tasks::enable_cpu_accounting();
    }
    process::set_own_oom_score_adj();
    process::apply_max_open_files(opts.process.max_open_files);
    let api = cluster::api_clients(&opts).await?;
    // Cut short here, a half-started managed containerd is killed with its handle.
    let mut rt = tokio::select! {
        rt = runtime::connect_runtime(&opts) => rt?,
        sig = signals.recv() => {
            info!(target: STARTUP_TARGET, "received {sig} while connecting to the runtime; exiting");
            return Ok(0);
        }
    };
    // One task tree: the supervisor owns the managed containerd in the root scope and
    // stops it only after the agent's scope has stopped.
    let tasks = Tasks::new();
    let counted = tasks.clone();
    crate::census::register("task tree", move || Some(counted.len()));
    runtime::spawn_supervisor(&mut rt, &tasks);
    let agent = tasks.child();
    if let Some(api) = &api {
        cluster::start_cert_rotation(&opts, api, &agent);
    }
    let contended = async {
        match locks.lock_file.as_deref() {
            Some(path) if opts.process.exit_on_lock_contention => lock::contention(path).await,
            _ => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        r = run_agent(&opts, &rt, api.as_ref(), &mut signals, &agent) => r,
        r = contended => {
            r?;
            info!(target: STARTUP_TARGET, "another process opened the lock file; exiting (--exit-on-lock-contention)");
            Ok(0)
        }
    };
    if !tasks.shutdown(RUNTIME_STOP).await {
        warn!(
            "the managed containerd's supervisor did not stop within {}",
            crate::duration::format_go_duration(RUNTIME_STOP)
        );
    }
    match tasks.failure() {
        Some(failure) => Err(failure.into()),
        None => result,
    }
}

/// Everything after the runtime is up: image import, the agent's tasks, then waiting
/// for a signal (or for `--runonce` to finish, or for a critical task to fail).
async fn run_agent(
    opts: &Options,
    rt: &Runtime,
    api: Option<&ApiClients>,
    signals: &mut Signals,
    tasks: &Tasks,
) -> anyhow::Result<i32> {
    tokio::select! {
        () = runtime::import_root_images(opts, rt) => {}
        _ = tasks.failed() => return Ok(1),
        sig = signals.recv() => {
            info!(target: STARTUP_TARGET, "received {sig} while importing images; exiting");
            return Ok(0);
        }
    }
    let started = tokio::select! {
        a = start(opts, rt, api, tasks) => Some(a?),
        _ = tasks.failed() => None,
        sig = signals.recv() => {
            info!(target: STARTUP_TARGET, "received {sig} during start-up; exiting");
            None
        }
    };
    let token = tasks.token();
    let code = match &started {
        None if tasks.failure().is_some() => 1,
        None => 0,
        Some(agent) => tokio::select! {
            biased;
            // The caller turns the failure into the error (and the exit code).
            _ = tasks.failed() => 1,
            code = runonce::run(&agent.pods, &agent.statuses, &token), if opts.process.runonce => code,
            sig = signals.recv() => {
                if opts.process.runonce {
                    info!(target: STARTUP_TARGET, "received {sig}; stopping runonce");
                } else {
                    info!(target: STARTUP_TARGET, "received {sig}");
                    info!(target: STARTUP_TARGET, "shutting down; containers keep running");
                }
                0
            }
        },
    };
    if !tasks.shutdown(AGENT_STOP).await {
        warn!(
            "some tasks did not stop within {}",
            crate::duration::format_go_duration(AGENT_STOP)
        );
    }
    Ok(code)
}

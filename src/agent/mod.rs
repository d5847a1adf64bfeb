//! Wiring: connects (or starts) the runtime, then runs the sources, the merger, the
//! PLEG, the sync loop and the HTTP servers as named tasks in one task tree
//! (`crate::tasks`): a critical task's end stops the agent with a non-zero code.

mod runonce;
mod runtime_choice;

use crate::prober::{ProbeManager, ProbeResults, StartupProbeGate, WorkerDeps};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::mpsc;
use tracing::{debug, info, trace, warn};

use crate::cm::allocatable::NodeAllocatable;
use crate::config::apiserver::run_api_source;
use crate::config::file::run_file_source;
use crate::config::http::{UrlSource, run_http_source};
use crate::config::merge::{PodConfig, run_merger};
use crate::containerd::{
    CniSettings, ContainerdLayout, ManagedContainerd, import_images, probe_cri, supervise,
};
use crate::events::{EventRecorder, EventType};
use crate::kubeclient::ApiClients;
use crate::logging::STARTUP_TARGET;
use crate::node::NodeInfo;
use crate::options::{DEFAULT_RUNTIME_ENDPOINT, Options};
use crate::pleg::{EVENT_CHANNEL_CAPACITY, GenericPleg, PlegStats, PodCache};
use crate::pod::{FILE_SOURCE, HTTP_SOURCE};
use crate::runtime::images::PullLimit;
use crate::runtime::sandbox::SandboxEnv;
use crate::runtime::{RemoteRuntime, RuntimeManager};
use crate::server::healthz::Health;
use crate::server::{self, Views};
use crate::status::StatusManager;
use crate::syncloop::admission::AdmissionChain;
use crate::syncloop::monitor::stall_threshold;
use crate::syncloop::pod_manager::PodManager;
use crate::syncloop::pod_syncer::Syncer;
use crate::syncloop::work_queue::WorkQueue;
use crate::syncloop::{LoopInputs, RuntimeHealth, SyncLoop, SyncLoopDeps, run_runtime_health};
use crate::tasks::{Backoff, Tasks};
use runtime_choice::RuntimeChoice;

/// How long to wait for a runtime to answer at start (kubelet waits 30 s).
const RUNTIME_WAIT: Duration = Duration::from_secs(30);

/// kubelet sets its own oom_score_adj to -999; a sandbox without CAP_SYS_RESOURCE
/// cannot, and that must not stop the agent.
fn set_own_oom_score_adj() {
    let own = crate::cm::qos::KUBELET_OOM_SCORE_ADJ.to_string();
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", own) {
        warn!(error = %e, "cannot set oom_score_adj to -999; going on");
    }
}

/// The lowest `oom_score_adj` oxlet may give a container: its own, unless it may lower
/// values (CAP_SYS_RESOURCE, checked by the kernel when it set its own to -999).
fn own_oom_score_adj() -> i64 {
    std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or(0)
}

fn socket_path(endpoint: &str) -> PathBuf {
    PathBuf::from(endpoint.trim_start_matches("unix://"))
}

/// The runtime oxlet talks to, and the containerd it supervises (if any).
pub(crate) struct Runtime {
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
pub(crate) async fn connect_runtime(opts: &Options) -> anyhow::Result<Runtime> {
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
pub(crate) async fn import_root_images(opts: &Options, rt: &Runtime) {
    let images = opts.root_dir.join("images");
    if images.is_dir() {
        import_images(&socket_path(&rt.endpoint), &images).await;
    }
}

/// A running agent: its shared state, for the server, runonce and tests.
pub(crate) struct Agent {
    pub pods: Arc<PodManager>,
    pub statuses: Arc<StatusManager>,
}

/// How long the agent's tasks get to stop after the signal.
const AGENT_STOP: Duration = Duration::from_secs(3);
/// How long the managed containerd's supervisor gets to stop it (its own grace is 5 s).
const RUNTIME_STOP: Duration = Duration::from_secs(15);

/// The container log manager (kubelet's: no rotation with a negative max size).
/// Issue 13 part A: kubelet's metrics live in process-wide registries
/// (`crate::metrics`); at start only the node name is set, nothing runs on its own.
fn spawn_metrics(opts: &Options) {
    crate::metrics::set_node_name(&opts.node_name);
}

fn spawn_log_rotation(opts: &Options, rt: &Runtime, tasks: &Tasks) {
    let Some(policy) = crate::runtime::logs::RotatePolicy::new(
        opts.container_log_max_size,
        opts.container_log_max_files,
    ) else {
        info!(target: STARTUP_TARGET, "container log rotation is off (containerLogMaxSize is negative)");
        return;
    };
    let logs = Arc::new(crate::runtime::logs::LogManager::new(
        Arc::new(rt.cri.clone()),
        opts.pod_logs_dir.clone(),
        policy,
        opts.container_log_max_workers,
        opts.container_log_monitor_interval,
    ));
    tasks.spawn_restarting("container-log-manager", Backoff::default(), move |cancel| {
        let logs = logs.clone();
        async move {
            logs.run(cancel).await;
            Ok(())
        }
    });
}

/// Peak prediction (issue 13 part D): koordlet's predict server, trained from the
/// metric cache every `OXLET_TEST_PREDICTION_PERIOD_MS` (test-only) or koordlet's
/// minute; None with `--enable-prediction=false`.
fn spawn_prediction(
    opts: &Options,
    cache: &Arc<crate::koord::metriccache::MetricCache>,
    pods: &Arc<PodManager>,
    statuses: &Arc<StatusManager>,
    allocatable: &NodeAllocatable,
    tasks: &Tasks,
) -> Option<crate::koord::prediction::view::Served> {
    use crate::koord::prediction::{Config, PredictServer};
    if !opts.prediction {
        info!(target: STARTUP_TARGET, "prediction is off (--enable-prediction=false)");
        return None;
    }
    let mut cfg = Config::default();
    if let Some(ms) = std::env::var("OXLET_TEST_PREDICTION_PERIOD_MS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|ms| *ms > 0)
    {
        cfg.training_interval_ms = ms;
    }
    let interval = Duration::from_millis(cfg.training_interval_ms.unsigned_abs());
    let dir = opts
        .prediction_checkpoint_dir
        .clone()
        .unwrap_or_else(|| opts.root_dir.join("prediction-checkpoints"));
    let server = Arc::new(PredictServer::new(cfg, dir));
    let (s, c, pm) = (server.clone(), cache.clone(), pods.clone());
    tasks.spawn_restarting("prediction", Backoff::default(), move |cancel| {
        let (s, cache, pods) = (s.clone(), c.clone(), pm.clone());
        async move {
            s.run(cache, pods, interval, cancel).await;
            Ok(())
        }
    });
    let amount = crate::koord::prediction::predictor::Amount {
        cpu_milli: allocatable.allocatable.cpu_milli,
        memory_bytes: allocatable.allocatable.memory_bytes,
    };
    // The gauges on /metrics, computed from the same models at scrape time.
    let (p, st) = (pods.clone(), statuses.clone());
    let inputs: crate::koord::prediction::metrics::Inputs = Arc::new(move || {
        let pods = p
            .all()
            .iter()
            .map(|pod| {
                let phase = st.get(crate::pod::pod_uid(pod)).and_then(|s| s.phase);
                crate::koord::prediction::view::pod_input(pod, phase.as_deref())
            })
            .collect();
        (pods, amount)
    });
    match crate::koord::prediction::metrics::PredictionCollector::new(
        server.clone(),
        opts.node_name.clone(),
        inputs,
    )
    .and_then(|c| crate::metrics::register(Box::new(c)))
    {
        Ok(()) => {}
        Err(e) => warn!(error = %e, "cannot register the prediction gauges"),
    }
    Some(crate::koord::prediction::view::Served {
        server,
        allocatable: amount,
    })
}

/// Starts every task of the agent in `tasks`; they stop when it is shut down. With
/// `api` (cluster mode, `--kubeconfig`), the apiserver tasks start too.
pub(crate) async fn start(
    opts: &Options,
    rt: &Runtime,
    api: Option<&ApiClients>,
    tasks: &Tasks,
) -> anyhow::Result<Agent> {
    let events = spawn_event_sink(opts, api, tasks);
    spawn_metrics(opts);
    let limits = server::Limits::for_open_files(crate::rlimit::open_files_limit());
    // The root dir holds the pods' ephemeral storage: its filesystem is the capacity.
    if let Err(e) = std::fs::create_dir_all(&opts.root_dir) {
        warn!(dir = %opts.root_dir.display(), error = %e, "cannot create the root dir");
    }
    let node = NodeInfo::gather(&opts.node_name, opts.max_pods, &opts.root_dir);
    debug!(node = ?node, "node facts");
    let allocatable = crate::cm::startup::node_allocatable(opts, &node);
    info!(target: STARTUP_TARGET, "node {allocatable}");
    allocatable.validate()?;
    let cm = crate::cm::startup::start(opts, &rt.cri, allocatable.kubepods).await?;
    if opts.enforce_node_allocatable.pods && opts.cgroups_per_qos {
        // kubelet's enforceNodeAllocatableCgroups, once `kubepods` is limited.
        events.event(
            &crate::events::ObjectRef::node(&opts.node_name),
            EventType::Normal,
            crate::events::reason::NODE_ALLOCATABLE_ENFORCED,
            "Updated Node Allocatable limit across pods",
        );
    }
    let (c, oom_min) = (cm.clone(), own_oom_score_adj());
    tasks.spawn_restarting("container-manager", Backoff::default(), move |cancel| {
        let run = c.clone().run(cancel);
        async move {
            run.await;
            Ok(())
        }
    });
    // Bounded: a worker waits for the loop rather than an update being lost.
    let (probe_results, probe_rx) = ProbeResults::new(256);
    let probe_results = Arc::new(probe_results);
    let pulls = PullLimit::from_settings(opts.serialize_image_pulls, opts.max_parallel_image_pulls);
    let dns = crate::runtime::dns::DnsConfigurer {
        cluster_dns: opts.cluster_dns.clone(),
        cluster_domain: opts.cluster_domain.clone(),
        resolv_conf: opts.resolv_conf.clone(),
        node_ips: node.internal_ip().parse().into_iter().collect(),
    };
    dns.check_resolv_conf();
    let qos = qos_config(opts)?;
    let runtime = Arc::new(
        RuntimeManager::new(
            Arc::new(rt.cri.clone()),
            SandboxEnv {
                pod_logs_dir: opts.pod_logs_dir.clone(),
                dns: dns.clone(),
                pods_dir: opts.root_dir.join("pods"),
                cgroups: cm.clone(),
                node_memory_bytes: allocatable.capacity.memory_bytes,
                min_oom_score_adj: oom_min,
                cfs_period_us: opts.cpu_cfs_quota.then(|| {
                    i64::try_from(opts.cpu_cfs_quota_period.as_micros()).unwrap_or(i64::MAX)
                }),
                security: crate::runtime::security::SecuritySettings {
                    seccomp_root: opts.root_dir.join("seccomp"),
                    seccomp_default: opts.seccomp_default,
                },
                allocatable: allocatable.allocatable,
            },
            node.internal_ip().to_string(),
        )
        .with_events(events.clone())
        .with_image_pulls(pulls)
        .with_log_symlinks(opts.container_log_symlink_dir.clone())
        .with_startup_gate(Arc::new(StartupProbeGate(probe_results.clone())))
        .with_objects(object_manager(api))
        .with_container_hooks(crate::koord::hooks::rules(&qos)),
    );
    spawn_log_rotation(opts, rt, tasks);
    let cache = Arc::new(PodCache::default());
    let statuses = Arc::new(StatusManager::default());
    let pods = Arc::new(PodManager::default());
    let queue = Arc::new(WorkQueue::default());
    let pleg_stats = Arc::new(PlegStats::default());
    // The node QoS half (issue 13): the metric advisor writes these, the server,
    // prediction and the QoS manager read them.
    let metric_cache = Arc::new(crate::koord::metriccache::MetricCache::default());
    let readings = Arc::new(crate::stats::readings::LatestReadings::default());
    let prediction = spawn_prediction(opts, &metric_cache, &pods, &statuses, &allocatable, tasks);
    let health = Arc::new(RuntimeHealth::default());
    health.set(true);
    // Issue 12: the eviction manager sets it; admission and the node status read it.
    let pressure = Arc::new(crate::status::node::conditions::PressureSource::default());
    let runtime_health = health.clone();

    // Sources → merger → sync loop. A source is restarted if it ends; the merger and
    // the sync loop own their channels and cannot be, so their end stops the agent.
    let mut sources = Vec::new();
    let (snap_tx, snap_rx) = mpsc::channel(16);
    if let Some(path) = opts.static_pod_path.clone() {
        sources.push(FILE_SOURCE);
        let (freq, node, tx) = (
            opts.file_check_frequency,
            opts.node_name.clone(),
            snap_tx.clone(),
        );
        tasks.spawn_restarting("file-source", Backoff::default(), move |cancel| {
            let source = run_file_source(path.clone(), freq, node.clone(), tx.clone(), cancel);
            async move {
                source.await;
                Ok(())
            }
        });
    }
    if let Some(url) = opts.manifest_url.clone() {
        sources.push(HTTP_SOURCE);
        let (freq, headers, node, tx) = (
            opts.http_check_frequency,
            opts.manifest_url_header.clone(),
            opts.node_name.clone(),
            snap_tx.clone(),
        );
        tasks.spawn_restarting("http-source", Backoff::default(), move |cancel| {
            let source = UrlSource::new(url.clone(), headers.clone(), node.clone());
            let run = run_http_source(source, freq, tx.clone(), cancel);
            async move {
                run.await;
                Ok(())
            }
        });
    }
    spawn_api_source(opts, api, &snap_tx, &mut sources, tasks);
    drop(snap_tx);
    let (update_tx, update_rx) = mpsc::channel(50);
    let config = PodConfig::new(&sources);
    let no_sources = sources.is_empty();
    tasks.spawn_critical("config-merger", move |cancel| async move {
        // With no source the merger has nothing to do; the channel stays open so the
        // sync loop (housekeeping, resyncs) runs on, as kubelet's does.
        let open = no_sources.then(|| update_tx.clone());
        run_merger(config, snap_rx, update_tx).await;
        if open.is_some() {
            cancel.cancelled().await;
        }
        Ok(())
    });

    let (pleg_tx, pleg_rx) = mpsc::channel(EVENT_CHANNEL_CAPACITY);
    let mut pleg = GenericPleg::new(
        runtime.reader(),
        cache.clone(),
        pleg_tx.clone(),
        pleg_stats.clone(),
    );
    // One relist before the loop starts, so PLEG health and the cache are warm.
    pleg.relist().await;
    // A restarted PLEG starts from an empty record: its first relist reports every
    // container once, which only wakes each pod's worker.
    let mut first = Some(pleg);
    let (reader, pleg_cache, stats) = (runtime.reader(), cache.clone(), pleg_stats.clone());
    tasks.spawn_restarting("pleg", Backoff::default(), move |cancel| {
        let pleg = first.take().unwrap_or_else(|| {
            GenericPleg::new(
                reader.clone(),
                pleg_cache.clone(),
                pleg_tx.clone(),
                stats.clone(),
            )
        });
        async move {
            pleg.run(cancel).await;
            Ok(())
        }
    });
    let (rm, h) = (runtime.clone(), health.clone());
    tasks.spawn_restarting("runtime-health", Backoff::default(), move |cancel| {
        let check = run_runtime_health(rm.clone(), h.clone(), cancel);
        async move {
            check.await;
            Ok(())
        }
    });

    let probes = Arc::new(ProbeManager::new(
        WorkerDeps {
            results: probe_results,
            statuses: statuses.clone(),
            cri: Arc::new(rt.cri.clone()),
            events: events.clone(),
        },
        tasks.child(),
    ));
    let syncer = Arc::new(Syncer {
        runtime: runtime.clone(),
        cache: cache.clone(),
        statuses: statuses.clone(),
        pods: pods.clone(),
        runtime_name: rt.runtime_name.clone(),
        startup: Default::default(),
        probes: probes.clone(),
        cm: cm.clone(),
    });
    spawn_metric_advisor(
        opts,
        rt,
        &cm,
        &pods,
        &cache,
        &metric_cache,
        &readings,
        tasks,
    );
    // The sync loop wakes the mirror pod reconciler when static or mirror pods change.
    let mirror_wake = Arc::new(tokio::sync::Notify::new());
    let sync_loop = SyncLoop::new(SyncLoopDeps {
        pods: pods.clone(),
        syncer,
        statuses: statuses.clone(),
        runtime,
        queue,
        pleg: pleg_stats.clone(),
        health,
        resync: opts.sync_frequency,
        admission: admission_chain(
            opts.max_pods,
            &allocatable,
            &opts.allowed_unsafe_sysctls,
            &pressure,
        ),
        sources,
        tasks: tasks.clone(),
        mirror_hook: api.map(|_| mirror_wake.clone()),
    });
    let health = Health {
        syncloop: sync_loop.monitor.clone(),
        stall_threshold: stall_threshold(opts.sync_frequency),
    };
    let inputs = LoopInputs::new(update_rx, pleg_rx).with_probes(probe_rx);
    let workers = sync_loop.workers.clone();
    let disk_reclaimers = spawn_image_gc(opts, rt, &sync_loop, &events, tasks);
    spawn_qos_manager(
        qos,
        &opts.node_name,
        &metric_cache,
        &pods,
        &sync_loop,
        &events,
        &allocatable,
        tasks,
    );
    tasks.spawn_critical("sync-loop", move |cancel| async move {
        sync_loop.run(inputs, cancel).await;
        Ok(())
    });

    if !opts.runonce {
        let volumes = spawn_volume_stats(opts, &pods, tasks);
        let eviction = spawn_eviction_manager(
            opts,
            (&allocatable, cm.kubepods_path()),
            &readings,
            &volumes,
            &pods,
            &workers,
            &events,
            &pressure,
            disk_reclaimers,
            tasks,
        );
        let views = Views {
            eviction,
            pods: pods.clone(),
            statuses: statuses.clone(),
            health: health.clone(),
            cache: metric_cache.clone(),
            readings: readings.clone(),
            pod_cache: cache.clone(),
            volumes,
            configz: Arc::new(crate::options::configz::kubelet_config(opts, &rt.endpoint)),
            prediction: prediction.clone(),
        };
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
    }
    if let Some(api) = api {
        spawn_status_writer(
            opts,
            api,
            &statuses,
            &pods,
            workers.clone(),
            cache,
            mirror_wake,
            tasks,
        );
        spawn_node_status(
            opts,
            rt,
            api,
            &node,
            &allocatable,
            &pleg_stats,
            &runtime_health,
            &events,
            &pressure,
            tasks,
        );
    }
    Ok(Agent { pods, statuses })
}

/// Measures each pod's volumes and logs on kubelet's volume stats cadence (issue 13
/// item 3); the walk blocks, so it runs on a blocking thread.
fn spawn_volume_stats(
    opts: &Options,
    pods: &Arc<PodManager>,
    tasks: &Tasks,
) -> Arc<crate::stats::volumes::VolumeUsage> {
    use crate::stats::volumes::{Dirs, TICK, VolumeUsage, refresh_period};
    let usage = Arc::new(VolumeUsage::default());
    if let Err(e) = crate::stats::log_metrics::LogMetrics::new(usage.clone())
        .and_then(|c| crate::metrics::register(Box::new(c)))
    {
        warn!(error = %e, "cannot register the container log usage gauge");
    }
    let dirs = Dirs {
        pods: opts.root_dir.join("pods"),
        pod_logs: opts.pod_logs_dir.clone(),
    };
    let period = refresh_period(opts.volume_stats_agg_period);
    if period.is_zero() {
        info!(
            "volumeStatsAggPeriod is 0: pod volumes and logs are not measured, so local storage limits are not enforced"
        );
        return usage;
    }
    let tick = period.min(TICK);
    let (u, pods) = (usage.clone(), pods.clone());
    tasks.spawn_restarting("volume-stats", Backoff::default(), move |cancel| {
        let (u, pods, dirs) = (u.clone(), pods.clone(), dirs.clone());
        async move {
            loop {
                let (u, all, dirs) = (u.clone(), pods.all(), dirs.clone());
                let round = tokio::task::spawn_blocking(move || {
                    crate::tasks::cpu::metered_sync("volume-stats/walk", || {
                        u.refresh_due(&all, &dirs, period)
                    })
                });
                match round.await {
                    Ok(n) if n > 0 => trace!(pods = n, "measured pod volumes and logs"),
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "volume stats round failed"),
                }
                tokio::select! {
                    () = cancel.cancelled() => return Ok(()),
                    () = tokio::time::sleep(tick) => {}
                }
            }
        }
    });
    usage
}

/// Issue 12 part 3: the image GC loop (kubelet's, every 5 minutes; none when the
/// high threshold is 100) and the node-level disk reclaim steps the eviction manager
/// runs before evicting: dead containers, then unused images.
fn spawn_image_gc(
    opts: &Options,
    rt: &Runtime,
    sync_loop: &SyncLoop,
    events: &EventRecorder,
    tasks: &Tasks,
) -> Vec<Arc<dyn crate::eviction::reclaim::DiskReclaimer>> {
    use crate::runtime::gc::DeadContainers;
    use crate::runtime::image_gc::{ImageGcManager, UnusedImages, gc_period};
    use crate::syncloop::pod_workers::Lifecycle;
    let runtime = sync_loop.runtime.clone();
    let images = Arc::new(ImageGcManager::new(
        Arc::new(rt.cri.clone()),
        opts.image_gc,
        events.clone(),
        &opts.node_name,
    ));
    if images.policy().periodic_gc_enabled() {
        let m = images.clone();
        tasks.spawn_restarting("image-gc", Backoff::default(), move |cancel| {
            let m = m.clone();
            async move {
                m.run(gc_period(), cancel).await;
                Ok(())
            }
        });
    } else {
        info!(target: STARTUP_TARGET, "imageGCHighThresholdPercent is 100: image garbage collection is off");
    }
    let (pods, workers) = (sync_loop.pods.clone(), sync_loop.workers.clone());
    // kubelet's ShouldPodRuntimeBeRemoved: terminated, or no longer known at all.
    let done = Arc::new(move |uid: &str| match workers.lifecycle(uid) {
        Some(Lifecycle::Syncing | Lifecycle::Terminating) => false,
        Some(Lifecycle::Terminated | Lifecycle::Finished) => true,
        None => !pods.contains(uid),
    });
    vec![
        Arc::new(DeadContainers::new(
            runtime,
            done,
            vec![opts.pod_logs_dir.clone()],
        )),
        Arc::new(UnusedImages(images)),
    ]
}

/// The eviction manager (issue 12, kubelet's eviction manager): observes the signals
/// every monitoring period, drives the pressure conditions and evicts through the
/// pod workers. The disk reclaimers and the memcg notifier are plugged in here.
#[allow(
    clippy::too_many_arguments,
    reason = "the wiring of one task from start()'s locals"
)]
fn spawn_eviction_manager(
    opts: &Options,
    (allocatable, kubepods): (&NodeAllocatable, Option<String>),
    readings: &Arc<crate::stats::readings::LatestReadings>,
    volumes: &Arc<crate::stats::volumes::VolumeUsage>,
    pods: &Arc<PodManager>,
    workers: &crate::syncloop::pod_workers::PodWorkers<Syncer>,
    events: &EventRecorder,
    pressure: &Arc<crate::status::node::conditions::PressureSource>,
    reclaimers: Vec<Arc<dyn crate::eviction::reclaim::DiskReclaimer>>,
    tasks: &Tasks,
) -> Arc<crate::eviction::manager::StatusView> {
    use crate::eviction::config::EvictionConfig;
    use crate::eviction::manager::{Manager, ManagerDeps, StatusView};
    let mut cfg = EvictionConfig::new(
        &opts.eviction_hard,
        &opts.eviction_soft,
        &opts.eviction_soft_grace_period,
        &opts.eviction_minimum_reclaim,
    );
    cfg.transition_period = opts.eviction_pressure_transition_period;
    cfg.max_pod_grace_seconds = opts.eviction_max_pod_grace_period;
    if opts.enforce_node_allocatable.pods {
        cfg.enforce_pod_allocatable();
    }
    let status = Arc::new(StatusView::default());
    let target = Arc::new(crate::eviction::target::WorkerTarget {
        pods: pods.clone(),
        workers: workers.clone(),
        events: events.clone(),
    });
    // kubelet's `pods` system container: its capacity is the kubepods limit.
    let allocatable_memory = cfg
        .allocatable_memory
        .then_some(allocatable.kubepods.memory_limit)
        .flatten()
        .filter(|l| *l > 0);
    let (readings, volumes, pressure, s) = (
        readings.clone(),
        volumes.clone(),
        pressure.clone(),
        status.clone(),
    );
    let root_dir = opts.root_dir.clone();
    let notifiers = memcg_notifiers(allocatable_memory.and(kubepods));
    tasks.spawn_restarting("eviction-manager", Backoff::default(), move |cancel| {
        let manager = Manager::new(ManagerDeps {
            cfg: cfg.clone(),
            readings: readings.clone(),
            volumes: volumes.clone(),
            allocatable_memory,
            root_dir: root_dir.clone(),
            reclaimers: reclaimers.clone(),
            reclaim_settle: crate::eviction::manager::RECLAIM_SETTLE,
            notifiers: notifiers.clone(),
            target: target.clone(),
            pressure: pressure.clone(),
            status: s.clone(),
        });
        async move {
            manager.run(cancel).await;
            Ok(())
        }
    });
    status
}

/// The host's cgroup tree, its version detected, for the readers beside the container
/// manager; None (with a warning naming `who` is off) when it cannot be read.
fn host_cgroup_tree(who: &str) -> Option<crate::cm::fs::CgroupTree> {
    let tree = crate::cm::version::detect(std::path::Path::new(crate::cm::fs::HOST_MOUNT))
        .map_err(|e| e.to_string())
        .and_then(|v| crate::cm::fs::CgroupTree::host(v).map_err(|e| e.to_string()));
    match tree {
        Ok(t) => Some(t),
        Err(e) => {
            warn!(error = %e, "{who} is off: cannot read the host's cgroups");
            None
        }
    }
}

/// kubelet's `kernelMemcgNotification`: a notifier on the root memory cgroup for
/// `memory.available` and, when `kubepods` is given (pods' allocatable enforced), one on
/// it for `allocatableMemory.available` (cgroup v1 only; on v2 kubelet has none
/// either), so memory pressure is seen between cycles.
fn memcg_notifiers(
    kubepods: Option<String>,
) -> Vec<(
    crate::eviction::threshold::Signal,
    Arc<dyn crate::eviction::reclaim::ThresholdNotifier>,
)> {
    use crate::eviction::memcg::MemcgNotifier;
    use crate::eviction::threshold::Signal;
    let Some(tree) = host_cgroup_tree("the memory threshold notification") else {
        return Vec::new();
    };
    let mut out: Vec<(Signal, Arc<dyn crate::eviction::reclaim::ThresholdNotifier>)> = Vec::new();
    match MemcgNotifier::node(tree.clone()) {
        Ok(n) => out.push((Signal::MemoryAvailable, Arc::new(n))),
        Err(e) => {
            info!(target: STARTUP_TARGET, reason = %e, "eviction manager: no memory threshold notification; the 10 s cycle alone sees memory pressure");
            return out;
        }
    }
    if let Some(path) = kubepods {
        match MemcgNotifier::allocatable(tree, &path) {
            Ok(n) => out.push((Signal::AllocatableMemoryAvailable, Arc::new(n))),
            Err(e) => {
                warn!(error = %e, "eviction manager: no allocatable memory threshold notification");
            }
        }
    }
    out
}

/// `--node-slo-file`, read once at start (checked when the flag was parsed).
fn qos_config(opts: &Options) -> anyhow::Result<crate::koord::qosmanager::config::QosConfig> {
    Ok(match &opts.node_slo_file {
        Some(path) => crate::koord::qosmanager::config::load(path)?,
        None => Default::default(),
    })
}

/// The node QoS manager (issue 13, koordlet's qosmanager): CPU suppress, memory
/// eviction by usage and cgroup reconcile, every second, each off unless the node
/// SLO config turns it on. Evictions go through the pod workers.
#[allow(
    clippy::too_many_arguments,
    reason = "the wiring of one task from start()'s locals"
)]
fn spawn_qos_manager(
    cfg: crate::koord::qosmanager::config::QosConfig,
    node_name: &str,
    cache: &Arc<crate::koord::metriccache::MetricCache>,
    pods: &Arc<PodManager>,
    sync_loop: &SyncLoop,
    events: &EventRecorder,
    allocatable: &crate::cm::allocatable::NodeAllocatable,
    tasks: &Tasks,
) {
    use crate::koord::qosmanager::{QosDeps, QosManager, evict::WorkerEvictor};
    let any_strategy = cfg.strategies.cpu_suppress || cfg.strategies.memory_evict;
    if !cfg.cpu_suppress_on() && !cfg.memory_evict_on() && !cfg.cgroup_reconcile_on() {
        if any_strategy && !cfg.enable {
            info!(target: STARTUP_TARGET, "node QoS manager off: --node-slo-file turns strategies on but resourceUsedThresholdWithBE.enable is false");
        } else {
            info!(target: STARTUP_TARGET, "node QoS manager off (no strategy enabled by --node-slo-file)");
        }
    } else {
        info!(target: STARTUP_TARGET, cpuSuppress = cfg.cpu_suppress_on(), memoryEvict = cfg.memory_evict_on(), cgroupReconcile = cfg.cgroup_reconcile_on(), config = ?cfg, "node QoS manager on");
    }
    let evictor = Arc::new(WorkerEvictor {
        workers: sync_loop.workers.clone(),
        events: events.clone(),
    });
    let (cache, pods, cm) = (cache.clone(), pods.clone(), sync_loop.cm.clone());
    let (capacity, allocatable) = (allocatable.capacity, allocatable.allocatable);
    let node_name = node_name.to_string();
    tasks.spawn_restarting("qos-manager", Backoff::default(), move |cancel| {
        let qm = QosManager::new(QosDeps {
            cfg: cfg.clone(),
            cache: cache.clone(),
            pods: pods.clone(),
            cm: cm.clone(),
            evictor: evictor.clone(),
            capacity,
            allocatable,
            node_name: node_name.clone(),
        });
        async move {
            qm.run(cancel).await;
            Ok(())
        }
    });
}

/// The metric advisor (issue 13, koordlet's metricsadvisor): samples the node, the
/// pods and their containers into the metric cache and the latest readings.
#[allow(clippy::too_many_arguments)]
fn spawn_metric_advisor(
    opts: &Options,
    rt: &Runtime,
    cm: &Arc<crate::cm::manager::ContainerManager>,
    pods: &Arc<PodManager>,
    pod_cache: &Arc<PodCache>,
    metric_cache: &Arc<crate::koord::metriccache::MetricCache>,
    readings: &Arc<crate::stats::readings::LatestReadings>,
    tasks: &Tasks,
) {
    use crate::koord::advisor::{Advisor, AdvisorDeps, ManagedPods};
    let Some(tree) = host_cgroup_tree("the metric advisor") else {
        return;
    };
    let (cm, pods, pod_cache) = (cm.clone(), pods.clone(), pod_cache.clone());
    let (cache, readings) = (metric_cache.clone(), readings.clone());
    let (node_name, root_dir, cri) = (
        opts.node_name.clone(),
        opts.root_dir.clone(),
        Arc::new(rt.cri.clone()),
    );
    tasks.spawn_restarting("metric-advisor", Backoff::default(), move |cancel| {
        let advisor = Advisor::new(AdvisorDeps {
            cache: cache.clone(),
            readings: readings.clone(),
            node_name: node_name.clone(),
            proc_root: "/proc".into(),
            cgroups: tree.clone(),
            kubepods: cm.kubepods_path(),
            lister: Box::new(ManagedPods::new(
                pods.clone(),
                pod_cache.clone(),
                cm.clone(),
            )),
            root_dir: root_dir.clone(),
            cri: cri.clone(),
        });
        async move {
            advisor.run(cancel).await;
            Ok(())
        }
    });
}

/// The apiserver pod source (cluster mode only): its first list is part of
/// sources-ready, so housekeeping never kills pods the apiserver still wants.
fn spawn_api_source(
    opts: &Options,
    api: Option<&ApiClients>,
    snapshots: &mpsc::Sender<crate::config::SourceSnapshot>,
    sources: &mut Vec<&'static str>,
    tasks: &Tasks,
) {
    let Some(api) = api else { return };
    sources.push(crate::pod::API_SOURCE);
    let (client, node, tx) = (api.main.clone(), opts.node_name.clone(), snapshots.clone());
    tasks.spawn_restarting("api-source", Backoff::default(), move |cancel| {
        let run = run_api_source(client.clone(), node.clone(), tx.clone(), cancel);
        async move {
            run.await;
            Ok(())
        }
    });
}

/// kubelet's admission handlers that oxlet has: sysctls, `maxPods`, then the pod's
/// requests against allocatable.
fn admission_chain(
    max_pods: u32,
    allocatable: &NodeAllocatable,
    unsafe_sysctls: &[String],
    pressure: &Arc<crate::status::node::conditions::PressureSource>,
) -> AdmissionChain {
    // kubelet's order: the sysctl allowlist, then the predicate handler (pods and
    // resource fit), so a pod failing both is rejected as SysctlForbidden.
    let mut chain = AdmissionChain::default();
    // kubelet's eviction manager is the first admit handler.
    chain.push(Box::new(crate::eviction::admission::PressureAdmission {
        pressure: pressure.clone(),
    }));
    chain.push(Box::new(
        crate::syncloop::sysctl_admission::SysctlAdmission::for_node(unsafe_sysctls),
    ));
    chain.push(Box::new(crate::syncloop::admission::MaxPods {
        capacity: max_pods,
    }));
    chain.push(Box::new(crate::cm::fit::ResourceFit {
        allocatable: allocatable.allocatable,
    }));
    chain
}

/// Node registration, node status and the node lease (cluster mode only), as two
/// restarting tasks on the heartbeat client: an absent apiserver only delays them.
#[allow(
    clippy::too_many_arguments,
    reason = "the wiring of one task from start()'s locals"
)]
fn spawn_node_status(
    opts: &Options,
    rt: &Runtime,
    api: &ApiClients,
    node: &NodeInfo,
    allocatable: &NodeAllocatable,
    pleg: &Arc<PlegStats>,
    health: &Arc<RuntimeHealth>,
    events: &EventRecorder,
    pressure: &Arc<crate::status::node::conditions::PressureSource>,
    tasks: &Tasks,
) {
    use crate::status::lease::LeaseController;
    use crate::status::node::{NodeStatusDeps, NodeStatusTask, register::Registration};
    crate::status::node::log_start(node);
    let (owner_tx, owner_rx) = tokio::sync::watch::channel(None);
    let quick = Backoff {
        initial: Duration::from_millis(200),
        max: Duration::from_secs(7),
    };
    let (client, name, duration) = (
        api.heartbeat.clone(),
        node.name.clone(),
        opts.node_lease_duration,
    );
    tasks.spawn_restarting("node-lease", quick, move |cancel| {
        let lease = LeaseController::new(client.clone(), &name, duration, owner_rx.clone());
        async move {
            lease.run(cancel).await;
            Ok(())
        }
    });
    let (api_client, info, alloc, node_ip, cri) = (
        api.heartbeat.clone(),
        node.clone(),
        *allocatable,
        opts.node_ip,
        rt.cri.clone(),
    );
    let registration = Registration {
        labels: opts.node_labels.clone(),
        taints: opts.register_with_taints.clone(),
        create: opts.register_node,
    };
    let (health, pleg, pressure) = (health.clone(), pleg.clone(), pressure.clone());
    let events = events.clone();
    let (update_frequency, report_frequency) = (
        opts.node_status_update_frequency,
        opts.node_status_report_frequency,
    );
    let deps = move || NodeStatusDeps {
        client: api_client.clone(),
        info: info.clone(),
        allocatable: alloc,
        node_ip,
        registration: registration.clone(),
        cri: cri.clone(),
        runtime_health: health.clone(),
        pleg: pleg.clone(),
        pressure: pressure.clone(),
        update_frequency,
        report_frequency,
        owner: owner_tx.clone(),
        events: events.clone(),
    };
    tasks.spawn_restarting("node-status", quick, move |cancel| {
        let task = NodeStatusTask::new(deps());
        async move {
            task.run(cancel).await;
            Ok(())
        }
    });
}

/// Logs the start-up summary (shown at every verbosity).
pub(crate) fn log_summary(opts: &Options) {
    info!(
        target: STARTUP_TARGET,
        node = %opts.node_name,
        staticPodPath = %opts.static_pod_path.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_else(|| "(none)".into()),
        rootDir = %opts.root_dir.display(),
        podLogsDir = %opts.pod_logs_dir.display(),
        maxPods = opts.max_pods,
        syncFrequency = %crate::duration::format_go_duration(opts.sync_frequency),
        fileCheckFrequency = %crate::duration::format_go_duration(opts.file_check_frequency),
        staticPodURL = opts.manifest_url.as_deref().unwrap_or("(none)"),
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
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next signal's name.
    pub(crate) async fn recv(&mut self) -> &'static str {
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
            );
        }
        Ok(r) => {
            info!(target: STARTUP_TARGET, soft = r.soft, hard = r.hard, "set RLIMIT_NOFILE to maxOpenFiles");
        }
        Err(e) => warn!(error = %e, maxOpenFiles = wanted, "cannot set RLIMIT_NOFILE; going on"),
    }
}

/// Runs the agent until SIGTERM / SIGINT; containers keep running. A signal during
/// start-up stops it there, with exit code 0, and stops a managed containerd.
pub async fn run(opts: Options) -> anyhow::Result<i32> {
    let mut signals = Signals::install().context("cannot listen for SIGTERM/SIGINT")?;
    log_summary(&opts);
    if opts.task_cpu_accounting {
        crate::tasks::cpu::enable();
    }
    set_own_oom_score_adj();
    apply_max_open_files(opts.max_open_files);
    let api = api_clients(&opts).await?;
    // Cut short here, a half-started managed containerd is killed with its handle.
    let mut rt = tokio::select! {
        rt = connect_runtime(&opts) => rt?,
        sig = signals.recv() => {
            info!(target: STARTUP_TARGET, "received {sig} while connecting to the runtime; exiting");
            return Ok(0);
        }
    };
    // One task tree: the supervisor owns the managed containerd in the root scope and
    // stops it only after the agent's scope has stopped.
    let tasks = Tasks::new();
    if let Some(m) = rt.managed.take() {
        tasks.spawn_critical("containerd-supervisor", move |cancel| async move {
            supervise(m, cancel).await;
            Ok(())
        });
    }
    let agent = tasks.child();
    if let Some(api) = &api {
        start_cert_rotation(&opts, api, &agent);
    }
    let result = run_agent(&opts, &rt, api.as_ref(), &mut signals, &agent).await;
    if !tasks.shutdown(RUNTIME_STOP).await {
        warn!("the managed containerd's supervisor did not stop within {RUNTIME_STOP:?}");
    }
    match tasks.failure() {
        Some(failure) => Err(failure.into()),
        None => result,
    }
}

/// The apiserver clients when `--kubeconfig` is given (kubelet, too, refuses to start
/// with a kubeconfig it cannot use); None runs standalone.
async fn api_clients(opts: &Options) -> anyhow::Result<Option<ApiClients>> {
    let Some(path) = &opts.kubeconfig else {
        return Ok(None);
    };
    let settings = crate::kubeclient::ClientSettings {
        qps: opts.kube_api_qps,
        burst: opts.kube_api_burst,
        node_status_update_frequency: opts.node_status_update_frequency,
        node_lease_duration: opts.node_lease_duration,
    };
    let cert_dir = opts
        .cert_dir
        .clone()
        .unwrap_or_else(|| opts.root_dir.join("pki"));
    if let Some(boot) = &opts.bootstrap_kubeconfig {
        crate::kubeclient::Bootstrap {
            kubeconfig: path.clone(),
            bootstrap_kubeconfig: boot.clone(),
            cert_dir: cert_dir.clone(),
            node_name: opts.node_name.clone(),
            wait: crate::kubeclient::bootstrap::WAIT,
        }
        .run()
        .await?;
    }
    let clients = if opts.rotate_certificates {
        crate::kubeclient::build_rotating(path, settings, &cert_dir).await?
    } else {
        crate::kubeclient::build(path, settings).await?
    };
    if let Some((cert, file)) = crate::kubeclient::client_certificate_in_use(path).await {
        info!(
            target: STARTUP_TARGET,
            subject = cert.subject,
            notAfter = %cert.not_after,
            file,
            "the apiserver clients present this client certificate"
        );
    }
    info!(
        target: STARTUP_TARGET,
        server = %clients.server,
        kubeAPIQPS = settings.qps,
        kubeAPIBurst = settings.burst,
        heartbeatTimeout = ?settings.heartbeat_timeout(),
        "apiserver clients built from {}: pods bound to this node, node status and lease, pod statuses, mirror pods and events go through the apiserver",
        path.display()
    );
    Ok(Some(clients))
}

/// `rotateCertificates`: the task that renews the cert dir's client certificate
/// before it expires, when the clients present it (see `kubeclient::rotation`).
fn start_cert_rotation(opts: &Options, api: &ApiClients, tasks: &Tasks) {
    let Some(slot) = api.cert_slot.clone() else {
        if opts.rotate_certificates {
            info!(target: STARTUP_TARGET, "rotateCertificates is set, but the kubeconfig's client certificate is not <cert-dir>/kubelet-client-current.pem; it is not rotated");
        }
        return;
    };
    let rotation = crate::kubeclient::rotation::Rotation {
        cert_dir: opts
            .cert_dir
            .clone()
            .unwrap_or_else(|| opts.root_dir.join("pki")),
        bootstrap_kubeconfig: opts.bootstrap_kubeconfig.clone(),
        node_name: opts.node_name.clone(),
        slot,
        client: api.main.clone(),
        wait: crate::kubeclient::rotation::WAIT,
        jitter: fastrand::f64(),
    };
    if let Some((cert, at)) = rotation.next_deadline() {
        info!(target: STARTUP_TARGET, subject = cert.subject, notAfter = %cert.not_after, rotationDeadline = %at, "client certificate rotation is on");
    }
    // Restarting: a failed or panicked pass must never end rotation for good.
    tasks.spawn_restarting("cert-rotation", Backoff::default(), move |cancel| {
        rotation.clone().run(cancel)
    });
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
        () = import_root_images(opts, rt) => {}
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
            code = runonce::run(&agent.pods, &agent.statuses, &token), if opts.runonce => code,
            sig = signals.recv() => {
                if opts.runonce {
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
        warn!("some tasks did not stop within {AGENT_STOP:?}");
    }
    Ok(code)
}

/// The reconcile period of the status writer and mirror pods: kubelet's 10 s, or
/// `OXLET_TEST_STATUS_PERIOD_MS` (test-only: integration tests shorten it).
fn status_period() -> Duration {
    std::env::var("OXLET_TEST_STATUS_PERIOD_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(
            crate::status::apiserver::RECONCILE_PERIOD,
            Duration::from_millis,
        )
}

/// Cluster mode: the pod status writer and the mirror pods, each a restarting task on
/// the main client. A pod may be finally deleted once its worker finished, or when it
/// has no worker and nothing of it runs.
#[allow(
    clippy::too_many_arguments,
    reason = "the wiring of two tasks from start()'s locals"
)]
fn spawn_status_writer(
    opts: &Options,
    api: &ApiClients,
    statuses: &Arc<StatusManager>,
    pods: &Arc<PodManager>,
    workers: crate::syncloop::pod_workers::PodWorkers<Syncer>,
    cache: Arc<PodCache>,
    mirror_wake: Arc<tokio::sync::Notify>,
    tasks: &Tasks,
) {
    use crate::status::apiserver::StatusWriter;
    use crate::status::mirror::MirrorPods;
    use crate::syncloop::pod_workers::Lifecycle;
    let period = status_period();
    let finished: crate::status::apiserver::Finished =
        Arc::new(move |uid: &str| match workers.lifecycle(uid) {
            Some(l) => l == Lifecycle::Finished,
            None => cache.get(uid).is_none_or(|p| {
                !p.containers
                    .iter()
                    .any(|c| c.state == crate::runtime::types::ContainerState::Running)
                    && !p.sandboxes.iter().any(|s| s.ready)
            }),
        });
    let (client, s, p) = (api.main.clone(), statuses.clone(), pods.clone());
    let mirror_created = Arc::new(tokio::sync::Notify::new());
    let created = mirror_created.clone();
    tasks.spawn_restarting("pod-status-writer", Backoff::default(), move |cancel| {
        let writer = StatusWriter::new(
            client.clone(),
            s.clone(),
            p.clone(),
            finished.clone(),
            period,
        )
        .with_mirror_created(created.clone());
        async move {
            writer.run(cancel).await;
            Ok(())
        }
    });
    let mirrors = Arc::new(
        MirrorPods::new(
            api.main.clone(),
            pods.clone(),
            opts.node_name.clone(),
            period,
        )
        .with_wake(mirror_wake)
        .with_created_hook(mirror_created),
    );
    tasks.spawn_restarting("mirror-pods", Backoff::default(), move |cancel| {
        let m = mirrors.clone();
        async move {
            m.run(cancel).await;
            Ok(())
        }
    });
}

/// The ConfigMap, Secret and token managers of cluster mode (issue 11 part E), on the
/// main client; `None` without an apiserver, so these volumes and env vars keep failing
/// with a clear error as in standalone mode.
fn object_manager(api: Option<&ApiClients>) -> Option<Arc<crate::objects::ObjectManager>> {
    let source = crate::objects::KubeObjects::new(api?.main.clone());
    Some(Arc::new(crate::objects::ObjectManager::new(Arc::new(
        source,
    ))))
}

/// The event recorder: log-only standalone; with an apiserver, its queue is drained by
/// the event sink (kubelet's `makeEventRecorder`). Records the node's `Starting`.
fn spawn_event_sink(opts: &Options, api: Option<&ApiClients>, tasks: &Tasks) -> EventRecorder {
    let recorder = match api {
        None => EventRecorder::log_only(),
        Some(api) => {
            let (recorder, queue) = EventRecorder::queued(crate::events::MAX_QUEUED_EVENTS);
            let queue = Arc::new(tokio::sync::Mutex::new(queue));
            let settings = crate::events::SinkSettings::new(
                opts.event_record_qps,
                opts.event_burst,
                opts.node_name.clone(),
            );
            let client = api.main.clone();
            tasks.spawn_restarting("event-sink", Backoff::default(), move |cancel| {
                let (client, settings, queue) = (client.clone(), settings.clone(), queue.clone());
                async move {
                    let mut queue = queue.lock_owned().await;
                    crate::events::run_sink(client, settings, &mut queue, cancel).await;
                    Ok(())
                }
            });
            recorder
        }
    };
    let node = crate::events::ObjectRef::node(&opts.node_name);
    let starting = crate::events::reason::STARTING;
    recorder.event(&node, EventType::Normal, starting, "Starting kubelet.");
    recorder
}

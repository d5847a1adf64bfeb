//! koordlet's side of the node: the node SLO config and the runtime hooks
//! with their reconciler, the metric advisor filling the metric cache, peak prediction trained
//! from it, and the node QoS manager.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::Shared;
use super::node::{Host, host_cgroup_tree};
use super::runtime::Runtime;
use crate::cm::NodeAllocatable;
use crate::koord::{
    HookSet, NodeMetricReporter, NodeMetricSource, NodeSloWatch, NodeView, NodeWatch,
    PredictServer, PredictionCollector, PredictionConfig, PredictionInputs, PredictionView,
    ResourceAmount, Served, pod_inputs,
};
use crate::koordapi::QosConfig;
use crate::logging::STARTUP_TARGET;
use crate::options::Options;
use crate::syncloop::SyncLoop;
use crate::tasks::{Backoff, Tasks};

/// `--node-slo-file`, read once at start (checked when the flag was parsed).
pub(super) fn qos_config(opts: &Options) -> anyhow::Result<QosConfig> {
    Ok(match &opts.koordlet.node_slo_file {
        Some(path) => crate::koordapi::load_qos_config(path)?,
        None => Default::default(),
    })
}

/// koordlet's runtime hooks with the rule the node SLO config makes (its NodeSLO
/// changes it later), which the runtime manager runs before RunPodSandbox,
/// CreateContainer and StartContainer.
pub(super) fn runtime_hooks(cfg: &QosConfig, host: &Host) -> HookSet {
    HookSet::new(cfg, host.cm.clone())
}

/// koordlet's runtime hooks reconciler: the rules put back on the QoS, pod and
/// container cgroups every 10 s, and at once when `feeds` (this node's NodeSLO, its
/// Node's CPU normalization ratio) change a rule.
pub(super) fn spawn_hook_reconciler(
    hooks: &HookSet,
    feeds: &ClusterFeeds,
    host: &Host,
    shared: &Shared,
    tasks: &Tasks,
) {
    use crate::advisor::ManagedPods;
    let (hooks, cm, feeds) = (hooks.clone(), host.cm.clone(), feeds.clone());
    let (pods, pod_cache) = (shared.pods.clone(), shared.pod_cache.clone());
    tasks.spawn_restarting(
        "runtime-hooks-reconciler",
        Backoff::default(),
        move |cancel| {
            let lister = ManagedPods::new(pods.clone(), pod_cache.clone(), cm.clone());
            let reconciler = hooks.reconciler(pods.clone(), Box::new(lister));
            let (updates, node) = (feeds.slo.clone(), feeds.node.clone());
            async move {
                reconciler.run(updates, node, cancel).await;
                Ok(())
            }
        },
    );
}

/// Peak prediction: koordlet's predict server, trained from the
/// metric cache every `OXLET_TEST_PREDICTION_PERIOD_MS` (test-only) or koordlet's
/// minute; None with `--enable-prediction=false`. The prod predictor is capped by
/// what `node` reads of the Node (cluster mode), else by the allocatable at start.
pub(super) fn spawn_prediction(
    opts: &Options,
    shared: &Shared,
    allocatable: &NodeAllocatable,
    node: Option<NodeView>,
    tasks: &Tasks,
) -> Option<Served> {
    if !opts.koordlet.prediction {
        info!(target: STARTUP_TARGET, "prediction is off (--enable-prediction=false)");
        return None;
    }
    let mut cfg = PredictionConfig::default();
    if let Some(ms) = std::env::var("OXLET_TEST_PREDICTION_PERIOD_MS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|ms| *ms > 0)
    {
        cfg.training_interval_ms = ms;
    }
    let interval = Duration::from_millis(cfg.training_interval_ms.unsigned_abs());
    let dir = opts
        .koordlet
        .prediction_checkpoint_dir
        .clone()
        .unwrap_or_else(|| opts.process.root_dir.join("prediction-checkpoints"));
    let server = Arc::new(PredictServer::new(cfg, dir));
    crate::census::watch("prediction models", &server, PredictServer::model_count);
    let (s, c, pm) = (
        server.clone(),
        shared.metric_cache.clone(),
        shared.pods.clone(),
    );
    tasks.spawn_restarting("prediction", Backoff::default(), move |cancel| {
        let (s, cache, pods) = (s.clone(), c.clone(), pm.clone());
        async move {
            s.run(cache, pods, interval, cancel).await;
            Ok(())
        }
    });
    let served = Served {
        server,
        allocatable: ResourceAmount {
            cpu_milli: allocatable.allocatable.cpu_milli,
            memory_bytes: allocatable.allocatable.memory_bytes,
        },
        node,
    };
    register_prediction_gauges(opts, shared, &served);
    Some(served)
}

/// What this node's NodeMetric status is made of (served at
/// `/debug/koord/nodemetric`, and reported in cluster mode).
/// `OXLET_TEST_NODEMETRIC_MIN_REPORT_MS` (test-only) lowers koordlet's 30 s floor
/// on the report interval.
pub(super) fn node_metric_source(
    shared: &Shared,
    prediction: Option<&Served>,
) -> Arc<NodeMetricSource> {
    let min_report = std::env::var("OXLET_TEST_NODEMETRIC_MIN_REPORT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    let (st, served) = (shared.statuses.clone(), prediction.cloned());
    let view: PredictionView =
        Arc::new(move |measured: &[Arc<k8s_openapi::api::core::v1::Pod>]| {
            served.as_ref().and_then(|s| s.prod(measured, &st))
        });
    Arc::new(NodeMetricSource::new(
        shared.metric_cache.clone(),
        shared.pods.clone(),
        shared.host_apps.subscribe(),
        view,
        min_report,
    ))
}

/// koordlet's NodeSLO informer (cluster mode): this node's NodeSLO's strategies, with
/// `base`'s switches (the file's), handed to the QoS manager as they change; `base`
/// applies until the first NodeSLO.
pub(super) fn spawn_node_slo_watch(
    opts: &Options,
    client: &kube::Client,
    base: &QosConfig,
    shared: &Shared,
    tasks: &Tasks,
) -> tokio::sync::watch::Receiver<QosConfig> {
    let (tx, rx) = tokio::sync::watch::channel(base.clone());
    let (client, node_name, strategies) = (client.clone(), opts.node.name.clone(), base.strategies);
    let host_apps = shared.host_apps.clone();
    tasks.spawn_restarting("node-slo-watch", Backoff::default(), move |cancel| {
        let watch = NodeSloWatch {
            client: client.clone(),
            node_name: node_name.clone(),
            strategies,
            tx: tx.clone(),
            host_apps: host_apps.clone(),
        };
        async move {
            watch.run(cancel).await;
            Ok(())
        }
    });
    rx
}

/// koordlet's node informer (cluster mode): this node's Node, watched, and what
/// koordlet reads of it (batch allocatable, raw allocatable, reservation, CPU
/// normalization ratio) handed to the QoS manager and the predictor as it changes.
pub(super) fn spawn_node_watch(opts: &Options, client: &kube::Client, tasks: &Tasks) -> NodeView {
    let (tx, rx) = tokio::sync::watch::channel(None);
    let (client, node_name) = (client.clone(), opts.node.name.clone());
    tasks.spawn_restarting("node-watch", Backoff::default(), move |cancel| {
        let watch = NodeWatch {
            client: client.clone(),
            node_name: node_name.clone(),
            tx: tx.clone(),
        };
        async move {
            watch.run(cancel).await;
            Ok(())
        }
    });
    rx
}

/// What the QoS manager and the runtime hooks follow in cluster mode: this node's
/// NodeSLO's configurations and its Node (both None standalone).
#[derive(Clone)]
pub(super) struct ClusterFeeds {
    pub slo: Option<tokio::sync::watch::Receiver<QosConfig>>,
    pub node: Option<NodeView>,
}

/// koordlet's NodeMetric report (cluster mode): this node's NodeMetric's status from
/// the metric cache every report interval.
pub(super) fn spawn_node_metric_reporter(
    opts: &Options,
    client: &kube::Client,
    source: &Arc<NodeMetricSource>,
    tasks: &Tasks,
) {
    let (client, source, node_name) = (client.clone(), source.clone(), opts.node.name.clone());
    tasks.spawn_restarting("node-metric-report", Backoff::default(), move |cancel| {
        let reporter = NodeMetricReporter {
            source: source.clone(),
            client: client.clone(),
            node_name: node_name.clone(),
        };
        async move {
            reporter.run(cancel).await;
            Ok(())
        }
    });
}

/// The gauges on /metrics, computed from the same models at scrape time.
fn register_prediction_gauges(opts: &Options, shared: &Shared, served: &Served) {
    let (p, st, sv) = (shared.pods.clone(), shared.statuses.clone(), served.clone());
    let inputs: PredictionInputs = Arc::new(move || {
        let pods = pod_inputs(&p, &st).into_iter().map(|(_, i)| i).collect();
        (pods, sv.allocatable())
    });
    match PredictionCollector::new(served.server.clone(), opts.node.name.clone(), inputs)
        .and_then(|c| crate::metrics::register(Box::new(c)))
    {
        Ok(()) => {}
        Err(e) => warn!(error = %e, "cannot register the prediction gauges"),
    }
}

/// The metric advisor (koordlet's metricsadvisor): samples the node, the
/// pods and their containers into the metric cache and the latest readings.
pub(super) fn spawn_metric_advisor(
    opts: &Options,
    rt: &Runtime,
    host: &Host,
    shared: &Shared,
    tasks: &Tasks,
) {
    use crate::advisor::{Advisor, AdvisorDeps, ManagedPods};
    let Some(tree) = host_cgroup_tree("the metric advisor") else {
        return;
    };
    let (cm, pods, pod_cache) = (
        host.cm.clone(),
        shared.pods.clone(),
        shared.pod_cache.clone(),
    );
    let (cache, readings) = (shared.metric_cache.clone(), shared.readings.clone());
    let runtime_cgroup = opts.runtime.cgroups.clone();
    let best_effort = host.cm.qos_cgroup_path(crate::cm::QosClass::BestEffort);
    let page_cache = opts.koordlet.pagecache_collector;
    let host_apps = shared.host_apps.subscribe();
    let qos_paths = crate::koordapi::QosPaths {
        kubepods: host.cm.kubepods_path(),
        burstable: host.cm.qos_cgroup_path(crate::cm::QosClass::Burstable),
        best_effort: best_effort.clone(),
    };
    let (node_name, root_dir, cri) = (
        opts.node.name.clone(),
        opts.process.root_dir.clone(),
        Arc::new(rt.cri.clone()),
    );
    tasks.spawn_restarting("metric-advisor", Backoff::default(), move |cancel| {
        let advisor = Advisor::new(AdvisorDeps {
            cache: cache.clone(),
            readings: readings.clone(),
            node_name: node_name.clone(),
            proc_root: "/proc".into(),
            sys_root: "/sys".into(),
            cgroups: tree.clone(),
            kubepods: cm.kubepods_path(),
            runtime_cgroup: runtime_cgroup.clone(),
            lister: Box::new(ManagedPods::new(
                pods.clone(),
                pod_cache.clone(),
                cm.clone(),
            )),
            best_effort: best_effort.clone(),
            page_cache,
            host_apps: host_apps.clone(),
            qos_paths: qos_paths.clone(),
            root_dir: root_dir.clone(),
            cri: cri.clone(),
        });
        async move {
            advisor.run(cancel).await;
            Ok(())
        }
    });
}

/// The node QoS manager (koordlet's qosmanager): CPU suppress, memory
/// eviction by usage and cgroup reconcile, every second, each off unless the node
/// SLO config turns it on. Evictions go through the pod workers.
pub(super) fn spawn_qos_manager(
    cfg: QosConfig,
    feeds: ClusterFeeds,
    opts: &Options,
    host: &Host,
    shared: &Shared,
    sync_loop: &SyncLoop,
    tasks: &Tasks,
) {
    use crate::koord::{QosDeps, QosManager};
    let ClusterFeeds { slo: updates, node } = feeds;
    let any_strategy =
        cfg.strategies.cpu_suppress || cfg.strategies.memory_evict || cfg.strategies.cpu_evict;
    if updates.is_some() {
        info!(target: STARTUP_TARGET, "node QoS manager follows this node's NodeSLO (until one is read, --node-slo-file's thresholds)");
    } else if !cfg.cpu_suppress_on()
        && !cfg.memory_evict_on()
        && !cfg.cpu_evict_on()
        && !cfg.cgroup_reconcile_on()
    {
        if any_strategy && !cfg.enable {
            info!(target: STARTUP_TARGET, "node QoS manager off: --node-slo-file turns strategies on but resourceUsedThresholdWithBE.enable is false");
        } else {
            info!(target: STARTUP_TARGET, "node QoS manager off (no strategy enabled by --node-slo-file)");
        }
    } else {
        info!(target: STARTUP_TARGET, cpuSuppress = cfg.cpu_suppress_on(), cpuSuppressPolicy = cfg.cpu_suppress_policy.name(), memoryEvict = cfg.memory_evict_on(), cpuEvict = cfg.cpu_evict_on(), cgroupReconcile = cfg.cgroup_reconcile_on(), cpuSuppressThresholdPercent = cfg.cpu_suppress_threshold_percent, memoryEvictThresholdPercent = cfg.memory_evict.map_or(-1, |m| m.threshold_percent), memoryEvictLowerPercent = cfg.memory_evict.map_or(-1, |m| m.lower_percent), "node QoS manager on");
    }
    let evictor = Arc::new(crate::syncloop::WorkerEvictor {
        pods: shared.pods.clone(),
        workers: sync_loop.workers.clone(),
        events: shared.events.clone(),
        allocation: shared.allocation.clone(),
    });
    let (cache, pods, cm) = (
        shared.metric_cache.clone(),
        shared.pods.clone(),
        sync_loop.cm.clone(),
    );
    let pod_cache = shared.pod_cache.clone();
    let (capacity, allocatable) = (host.allocatable.capacity, host.allocatable.allocatable);
    let node_name = opts.node.name.clone();
    tasks.spawn_restarting("qos-manager", Backoff::default(), move |cancel| {
        let qm = QosManager::new(QosDeps {
            cfg: updates
                .as_ref()
                .map_or_else(|| cfg.clone(), |rx| rx.borrow().clone()),
            updates: updates.clone(),
            cache: cache.clone(),
            pods: pods.clone(),
            cm: cm.clone(),
            evictor: evictor.clone(),
            lister: Box::new(crate::advisor::ManagedPods::new(
                pods.clone(),
                pod_cache.clone(),
                cm.clone(),
            )),
            capacity,
            allocatable,
            node: node.clone(),
            node_name: node_name.clone(),
        });
        async move {
            qm.run(cancel).await;
            Ok(())
        }
    });
}

/// The metric cache, on disk under `--tsdb-path` (koordlet's TSDB): the points from
/// before a restart are replayed. A directory that cannot be used is said once, and the
/// cache is kept in memory (30 minutes) instead: the node runs on without history.
pub(super) fn open_metric_cache(opts: &Options) -> Arc<crate::metriccache::MetricCache> {
    use crate::metriccache::{CacheLimits, MetricCache};
    let dir = opts
        .koordlet
        .tsdb_path
        .clone()
        .unwrap_or_else(|| opts.process.root_dir.join("metric-cache"));
    let limits = CacheLimits {
        retention: opts.koordlet.tsdb_retention,
        max_disk_bytes: opts.koordlet.tsdb_max_bytes,
        ..CacheLimits::ON_DISK
    };
    match MetricCache::open(&dir, limits) {
        Ok((cache, found)) => {
            info!(target: STARTUP_TARGET, dir = %dir.display(), blocks = found.blocks, logSegments = found.wal.segments, pointsReplayed = found.wal.points, tornBytes = found.wal.torn_bytes, retention = %crate::duration::format_go_duration(limits.retention), maxBytes = limits.max_disk_bytes, "metric cache opened on disk");
            Arc::new(cache)
        }
        Err(e) => {
            warn!(target: STARTUP_TARGET, error = %e, "metric cache: cannot use its directory; keeping the last 30 minutes in memory only");
            Arc::new(MetricCache::default())
        }
    }
}

/// `--node-slo-file`'s host applications (checked when the flag was parsed; none
/// without the file).
pub(super) fn file_host_apps(opts: &Options) -> Vec<crate::koordapi::HostApp> {
    let Some(path) = &opts.koordlet.node_slo_file else {
        return Vec::new();
    };
    match crate::koordapi::host_apps_from_file(path) {
        Ok((apps, _)) => apps,
        Err(e) => {
            warn!(error = %e, "host applications not read");
            Vec::new()
        }
    }
}

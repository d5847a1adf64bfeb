//! The node side: the root dir, the node's facts and allocatable, the container
//! manager, image GC and disk reclaim, volume stats, the eviction manager, the node
//! shutdown manager and, in cluster mode, the node's registration, status and lease.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, trace, warn};

use super::runtime::Runtime;
use super::{Shared, Workers};
use crate::cm::{ContainerManager, NodeAllocatable};
use crate::contracts::DiskReclaimer;
use crate::contracts::Signal;
use crate::events::{EventRecorder, EventType};
use crate::eviction::{StatusView, ThresholdNotifier};
use crate::kubeclient::ApiClients;
use crate::logging::STARTUP_TARGET;
use crate::node::NodeInfo;
use crate::options::Options;
use crate::stats::VolumeUsage;
use crate::syncloop::SyncLoop;
use crate::tasks::{Backoff, Tasks};

/// The node as the agent found it at start: its facts, its allocatable, and the
/// container manager running on it.
pub(super) struct Host {
    pub info: NodeInfo,
    pub allocatable: NodeAllocatable,
    pub cm: Arc<ContainerManager>,
    /// Each container's `memory.oom.group` and swap on this host.
    pub memory: crate::cm::MemoryPolicy,
}

/// What must be up before the runtime manager: the root dir, the node's facts and
/// allocatable, and the container manager with its task.
pub(super) async fn start_host(
    opts: &Options,
    rt: &Runtime,
    events: &EventRecorder,
    tasks: &Tasks,
) -> anyhow::Result<Host> {
    // The root dir holds the pods' ephemeral storage: its filesystem is the capacity.
    if let Err(e) = crate::volumes::make_data_dirs(&opts.process.root_dir) {
        warn!(dir = %opts.process.root_dir.display(), error = %e, "cannot create the root dir");
    }
    let node = NodeInfo::gather(
        &opts.node.name,
        opts.pods.max_pods,
        &opts.process.root_dir,
        &opts.node.ips,
    );
    debug!(node = %node.name, kernelVersion = %node.kernel_version, osImage = %node.os_image, architecture = node.architecture, machineID = %node.machine_id, bootID = %node.boot_id, addresses = node.addresses.len(), "node facts");
    let cm_settings = opts.cm_settings();
    let allocatable = crate::cm::node_allocatable(&cm_settings, &node);
    info!(target: STARTUP_TARGET, "node {allocatable}");
    allocatable.validate()?;
    let cm = crate::cm::start(&cm_settings, &rt.cri, allocatable.kubepods).await?;
    let memory = crate::cm::MemoryPolicy::detect(
        &cm_settings.memory,
        cm_settings.fail_swap_on,
        node.capacity.memory_bytes,
        node.swap_capacity_bytes,
    );
    if opts.cm.enforce_node_allocatable.pods && opts.cm.cgroups_per_qos {
        // kubelet's enforceNodeAllocatableCgroups, once `kubepods` is limited.
        events.event(
            &crate::events::ObjectRef::node(&opts.node.name),
            EventType::Normal,
            crate::events::reason::NODE_ALLOCATABLE_ENFORCED,
            "Updated Node Allocatable limit across pods",
        );
    }
    let c = cm.clone();
    tasks.spawn_restarting("container-manager", Backoff::default(), move |cancel| {
        let run = c.clone().run(cancel);
        async move {
            run.await;
            Ok(())
        }
    });
    Ok(Host {
        info: node,
        allocatable,
        cm,
        memory,
    })
}

/// The image GC loop (kubelet's, every 5 minutes; none when the
/// high threshold is 100) and the node-level disk reclaim steps the eviction manager
/// runs before evicting: dead containers, then unused images.
pub(super) fn spawn_image_gc(
    opts: &Options,
    rt: &Runtime,
    sync_loop: &SyncLoop,
    events: &EventRecorder,
    tasks: &Tasks,
) -> Vec<Arc<dyn DiskReclaimer>> {
    use crate::images::{ImageGcManager, UnusedImages, gc_period};
    use crate::kuberuntime::DeadContainers;
    use crate::syncloop::Lifecycle;
    let runtime = sync_loop.runtime.clone();
    let mut gc = ImageGcManager::new(
        Arc::new(rt.cri.clone()),
        opts.images.gc,
        events.clone(),
        &opts.node.name,
    );
    if let Some(records) = runtime.pull_records() {
        // Intents a crash left become records once the runtime says what it has.
        let (cri, r) = (rt.cri.clone(), records.clone());
        tasks.spawn_pass("pull-records", async move {
            let images = cri.list_images().await?;
            r.recover_intents(&images);
            Ok(())
        });
        gc = gc.with_pull_records(records);
    }
    let images = Arc::new(gc);
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
            vec![opts.logs.pod_logs_dir.clone()],
        )),
        Arc::new(UnusedImages(images)),
    ]
}

/// What the eviction manager acts through: the pod workers it evicts with, and the
/// node-level disk reclaim it runs before evicting (see [`spawn_image_gc`]).
pub(super) struct Reclaim<'a> {
    pub workers: &'a Workers,
    pub reclaimers: Vec<Arc<dyn DiskReclaimer>>,
}

/// What the node side measures and decides, for the read-only server.
pub(super) struct NodeViews {
    pub volumes: Arc<VolumeUsage>,
    pub eviction: Arc<StatusView>,
}

/// Local storage and memory pressure (not with `--runonce`): the volume stats, then
/// the eviction manager that reads them.
pub(super) fn spawn_eviction(
    opts: &Options,
    host: &Host,
    shared: &Shared,
    reclaim: Reclaim<'_>,
    tasks: &Tasks,
) -> NodeViews {
    let volumes = spawn_volume_stats(opts, shared, tasks);
    let eviction = spawn_eviction_manager(opts, host, shared, &volumes, reclaim, tasks);
    NodeViews { volumes, eviction }
}

/// Measures each pod's volumes and logs on kubelet's volume stats cadence; the walk
/// blocks, so it runs on a blocking thread.
fn spawn_volume_stats(opts: &Options, shared: &Shared, tasks: &Tasks) -> Arc<VolumeUsage> {
    use crate::stats::{Dirs, VOLUME_STATS_TICK, volume_stats_period};
    let usage = Arc::new(VolumeUsage::default());
    crate::census::watch("volume usage: pods", &usage, |u| u.census().0);
    crate::census::watch("volume usage: last tries", &usage, |u| u.census().1);
    if let Err(e) = crate::stats::LogMetrics::new(usage.clone())
        .and_then(|c| crate::metrics::register(Box::new(c)))
    {
        warn!(error = %e, "cannot register the container log usage gauge");
    }
    let dirs = Dirs {
        pods: opts.process.root_dir.join("pods"),
        pod_logs: opts.logs.pod_logs_dir.clone(),
    };
    let period = volume_stats_period(opts.status.volume_stats_agg_period);
    if period.is_zero() {
        info!(
            "volumeStatsAggPeriod is 0: pod volumes and logs are not measured, so local storage limits are not enforced"
        );
        return usage;
    }
    let tick = period.min(VOLUME_STATS_TICK);
    let (u, pods) = (usage.clone(), shared.pods.clone());
    tasks.spawn_restarting("volume-stats", Backoff::default(), move |cancel| {
        let (u, pods, dirs) = (u.clone(), pods.clone(), dirs.clone());
        async move {
            loop {
                let (u, all, dirs) = (u.clone(), pods.all(), dirs.clone());
                let round = tokio::task::spawn_blocking(move || {
                    crate::tasks::metered_sync("volume-stats/walk", || {
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

/// The eviction manager (kubelet's): observes the signals
/// every monitoring period, drives the pressure conditions and evicts through the
/// pod workers. The disk reclaimers and the memcg notifier are plugged in here.
fn spawn_eviction_manager(
    opts: &Options,
    host: &Host,
    shared: &Shared,
    volumes: &Arc<VolumeUsage>,
    reclaim: Reclaim<'_>,
    tasks: &Tasks,
) -> Arc<StatusView> {
    use crate::eviction::{EvictionConfig, Manager, ManagerDeps};
    let kubepods = host.cm.kubepods_path();
    let mut cfg = EvictionConfig::new(
        &opts.eviction.hard,
        &opts.eviction.soft,
        &opts.eviction.soft_grace_period,
        &opts.eviction.minimum_reclaim,
    );
    cfg.transition_period = opts.eviction.pressure_transition_period;
    cfg.max_pod_grace_seconds = opts.eviction.max_pod_grace_period;
    if opts.cm.enforce_node_allocatable.pods {
        cfg.enforce_pod_allocatable();
    }
    let status = Arc::new(StatusView::default());
    let target = Arc::new(crate::syncloop::WorkerEvictor {
        pods: shared.pods.clone(),
        workers: reclaim.workers.clone(),
        events: shared.events.clone(),
        allocation: shared.allocation.clone(),
    });
    // kubelet's `pods` system container: its capacity is the kubepods limit.
    let allocatable_memory = cfg
        .allocatable_memory
        .then_some(host.allocatable.kubepods.memory_limit)
        .flatten()
        .filter(|l| *l > 0);
    let (readings, volumes, pressure, s) = (
        shared.readings.clone(),
        volumes.clone(),
        shared.pressure.clone(),
        status.clone(),
    );
    let (root_dir, reclaimers) = (opts.process.root_dir.clone(), reclaim.reclaimers);
    let notifiers = memcg_notifiers(allocatable_memory.and(kubepods));
    tasks.spawn_restarting("eviction-manager", Backoff::default(), move |cancel| {
        let manager = Manager::new(ManagerDeps {
            cfg: cfg.clone(),
            readings: readings.clone(),
            volumes: volumes.clone(),
            allocatable_memory,
            root_dir: root_dir.clone(),
            reclaimers: reclaimers.clone(),
            reclaim_settle: crate::eviction::RECLAIM_SETTLE,
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

/// kubelet's node shutdown manager (not with `--runonce`), when the settings give it
/// budgets: a delay lock from logind on the system bus, and the pods stopped by
/// priority when logind announces a shutdown. Without budgets it is off, as kubelet's.
pub(super) fn spawn_node_shutdown(
    opts: &Options,
    shared: &Shared,
    workers: &Workers,
    tasks: &Tasks,
) {
    use crate::nodeshutdown::{LOGIND_DROP_IN_DIR, Manager, ManagerDeps, SystemLogind};
    let groups = opts.shutdown_groups();
    if groups.is_empty() {
        info!(
            "graceful node shutdown is off (no shutdownGracePeriod or shutdownGracePeriodByPodPriority): a node shutdown does not wait for the pods"
        );
        return;
    }
    let budgets: Vec<String> = groups
        .iter()
        .map(|g| format!("{}s from priority {}", g.seconds, g.priority))
        .collect();
    info!(target: STARTUP_TARGET, budgets = %budgets.join(", "), total = %crate::duration::format_go_duration(crate::nodeshutdown::period_requested(&groups)), "graceful node shutdown: on logind's PrepareForShutdown, pods are stopped by priority, lowest first, each group within its budget");
    let pods: Arc<dyn crate::contracts::PodTerminator> = Arc::new(crate::syncloop::WorkerEvictor {
        pods: shared.pods.clone(),
        workers: workers.clone(),
        events: shared.events.clone(),
        allocation: shared.allocation.clone(),
    });
    let (state, events, node_name) = (
        shared.shutdown.clone(),
        shared.events.clone(),
        opts.node.name.clone(),
    );
    let times = crate::nodeshutdown::ShutdownTimes::new(&opts.process.root_dir);
    tasks.spawn_restarting("node-shutdown", Backoff::default(), move |cancel| {
        let manager = Manager::new(ManagerDeps {
            logind: SystemLogind::new(LOGIND_DROP_IN_DIR.into()),
            groups: groups.clone(),
            state: state.clone(),
            pods: pods.clone(),
            events: events.clone(),
            node_name: node_name.clone(),
            sigusr1: true,
            times: Some(times.clone()),
        });
        async move {
            manager.run(cancel).await;
            Ok(())
        }
    });
}

/// The host's cgroup tree, its version detected, for the readers beside the container
/// manager; None (with a warning naming `who` is off) when it cannot be read.
pub(super) fn host_cgroup_tree(who: &str) -> Option<crate::cm::CgroupTree> {
    let tree = crate::cm::detect_cgroup_version(std::path::Path::new(crate::cm::HOST_MOUNT))
        .map_err(|e| e.to_string())
        .and_then(|v| crate::cm::CgroupTree::host(v).map_err(|e| e.to_string()));
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
fn memcg_notifiers(kubepods: Option<String>) -> Vec<(Signal, Arc<dyn ThresholdNotifier>)> {
    use crate::eviction::MemcgNotifier;
    let Some(tree) = host_cgroup_tree("the memory threshold notification") else {
        return Vec::new();
    };
    let mut out: Vec<(Signal, Arc<dyn ThresholdNotifier>)> = Vec::new();
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

/// Node registration, node status and the node lease (cluster mode only), as two
/// restarting tasks on the heartbeat client: an absent apiserver only delays them.
pub(super) fn spawn_node_status(
    opts: &Options,
    rt: &Runtime,
    api: &ApiClients,
    host: &Host,
    shared: &Shared,
    tasks: &Tasks,
) {
    use crate::status::{LeaseController, NodeStatusDeps, NodeStatusTask, Registration};
    let node = &host.info;
    crate::status::log_node_start(node);
    let (owner_tx, owner_rx) = tokio::sync::watch::channel(None);
    let quick = Backoff {
        initial: Duration::from_millis(200),
        max: Duration::from_secs(7),
    };
    let (client, name, duration) = (
        api.heartbeat.clone(),
        node.name.clone(),
        opts.status.lease_duration,
    );
    tasks.spawn_restarting("node-lease", quick, move |cancel| {
        let lease = LeaseController::new(client.clone(), &name, duration, owner_rx.clone());
        async move {
            lease.run(cancel).await;
            Ok(())
        }
    });
    let (api_client, info, alloc, cri, pod_cidr) = (
        api.heartbeat.clone(),
        node.clone(),
        host.allocatable,
        rt.cri.clone(),
        rt.pod_cidr.clone(),
    );
    let registration = Registration {
        labels: opts.node.labels.clone(),
        taints: opts.node.register_with_taints.clone(),
        create: opts.node.register,
        provider_id: opts.node.provider_id.clone(),
    };
    let (health, pleg, pressure, shutdown) = (
        shared.runtime_health.clone(),
        shared.pleg_stats.clone(),
        shared.pressure.clone(),
        shared.shutdown.clone(),
    );
    let events = shared.events.clone();
    let (update_frequency, report_frequency) =
        (opts.status.update_frequency, opts.status.report_frequency);
    let kubelet_port = i32::from(opts.serving.port);
    let soft_requirements = host.cm.soft_requirements();
    let extended: Arc<dyn crate::contracts::ExtendedResourceSource> = shared.resources.clone();
    let deps = move || NodeStatusDeps {
        client: api_client.clone(),
        info: info.clone(),
        allocatable: alloc,
        extended: Some(extended.clone()),
        kubelet_port,
        registration: registration.clone(),
        cri: cri.clone(),
        pod_cidr: pod_cidr.clone(),
        runtime_health: health.clone(),
        pleg: pleg.clone(),
        pressure: pressure.clone(),
        shutdown: shutdown.clone(),
        soft_requirements,
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

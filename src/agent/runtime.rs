//! The runtime side: which CRI runtime to talk to (an endpoint, or a managed
//! containerd under `--root-dir`), the runtime manager and its container log manager,
//! the PLEG and the runtime health check, and the sync loop with its pod workers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::sync::{Notify, mpsc};
use tracing::{error, info, warn};

use super::node::Host;
use super::runtime_choice::{self, RuntimeChoice};
use super::{Shared, process};
use crate::allocation::ResourceState;
use crate::containerd::{
    CniSettings, ContainerdBinary, ContainerdLayout, Launch, ManagedContainerd, import_images,
    probe_cri, supervise,
};
use crate::contracts::AdmissionChain;
use crate::cri::{PodCidr, RemoteRuntime};
use crate::events::EventRecorder;
use crate::images::PullLimit;
use crate::kuberuntime::RuntimeHooks;
use crate::kuberuntime::RuntimeManager;
use crate::kuberuntime::SandboxEnv;
use crate::logging::STARTUP_TARGET;
use crate::node::NodeInfo;
use crate::objects::ObjectManager;
use crate::options::{
    ContainerLogOptions, DEFAULT_RUNTIME_ENDPOINT, ImageOptions, Options, PodOptions,
    RuntimeOptions,
};
use crate::pleg::{
    EVENT_CHANNEL_CAPACITY, EventedPleg, GenericPleg, PlegChoice, PodLifecycleEvent, Stream,
    choose_pleg,
};
use crate::podenv::DnsConfigurer;
use crate::prober::{ProbeManager, ProbeResults, StartupProbeGate, WorkerDeps};
use crate::syncloop::AllocationManager;
use crate::syncloop::{LoopInputs, SyncLoop, SyncLoopDeps, Syncer, WorkQueue, run_runtime_health};
use crate::tasks::{Backoff, Tasks};

/// How long to wait for a runtime to answer at start (kubelet waits 30 s).
const RUNTIME_WAIT: Duration = Duration::from_secs(30);

/// The socket file of a `unix://` endpoint.
fn socket_path(endpoint: &str) -> PathBuf {
    PathBuf::from(endpoint.trim_start_matches("unix://"))
}

/// The runtime oxlet talks to, and the containerd it supervises (if any).
pub(super) struct Runtime {
    pub cri: RemoteRuntime,
    /// The pod CIDR the runtime was handed: `--pod-cidr` at start, then the Node's.
    pub pod_cidr: Arc<PodCidr>,
    pub runtime_name: String,
    /// The CRI endpoint connected to.
    pub endpoint: String,
    pub managed: Option<ManagedContainerd>,
    /// The `ctr` that imports image archives: the managed containerd's own release's, else PATH's.
    pub ctr: PathBuf,
}

/// Which runtime this start uses: the explicit endpoint; else what `--root-dir` was
/// run with before (so a system containerd that is slow at boot never flips a node to
/// the managed one, nor the reverse); else the default socket if it answers, else managed.
async fn choose_runtime(opts: &Options) -> anyhow::Result<RuntimeChoice> {
    let recorded = runtime_choice::load(&opts.process.root_dir)?;
    let requested = if opts.runtime.endpoint_explicit {
        RuntimeChoice::Endpoint(opts.runtime.endpoint.clone())
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
    runtime_choice::check(&opts.process.root_dir, recorded.as_ref(), &requested)?;
    Ok(requested)
}

/// The managed containerd's pod network: `--managed-cni-bridge`, and `--pod-cidr`
/// (kubelet's standalone pod addresses) or the default subnet.
fn managed_pod_network(runtime: &RuntimeOptions) -> CniSettings {
    let default = CniSettings::default();
    let (subnet, from) = match &runtime.pod_cidr {
        Some(cidr) => (cidr.clone(), "--pod-cidr"),
        None => (default.subnet, "the default"),
    };
    let bridge = Some(runtime.managed_cni_bridge.clone())
        .filter(|b| !b.is_empty())
        .unwrap_or(default.bridge);
    info!(target: STARTUP_TARGET, bridge = %bridge, subnet = %subnet, subnetFrom = from, "managed containerd pod network");
    CniSettings { bridge, subnet }
}

/// Connects to the configured runtime, or starts a managed containerd under
/// `--root-dir` (see [`choose_runtime`]), and records the choice.
pub(super) async fn connect_runtime(opts: &Options) -> anyhow::Result<Runtime> {
    let timeout = opts.runtime.request_timeout;
    let choice = choose_runtime(opts).await?;
    let mut managed = None;
    let endpoint = match &choice {
        RuntimeChoice::Endpoint(e) => e.clone(),
        RuntimeChoice::Managed => {
            let layout = ContainerdLayout::new(opts.process.root_dir.join("containerd"));
            info!(target: STARTUP_TARGET, root = %opts.process.root_dir.display(), "starting a managed containerd");
            let binary = ContainerdBinary::locate(opts.runtime.containerd_binary.as_deref())
                .await
                .context("cannot start managed containerd")?;
            info!(target: STARTUP_TARGET, binary = %binary.path.display(), version = %binary.version, configVersion = binary.config_format().number(), "managed containerd release");
            let launch = Launch::new(binary, layout, managed_pod_network(&opts.runtime));
            let m = ManagedContainerd::start(&launch)
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
    runtime_choice::save(&opts.process.root_dir, &choice)?;
    let pod_cidr = Arc::new(PodCidr::new(cri.clone()));
    if let Some(cidr) = &opts.runtime.pod_cidr {
        // kubelet's updatePodCIDR at start: a failure is logged, never fatal.
        if let Err(e) = pod_cidr.update(cidr).await {
            error!(error = %e, podCIDR = %cidr, "Pod CIDR update failed");
        }
    }
    let ctr = managed.as_ref().map_or_else(
        || PathBuf::from("ctr"),
        |m| m.launch().binary.sibling("ctr"),
    );
    Ok(Runtime {
        cri,
        pod_cidr,
        runtime_name: version.runtime_name,
        endpoint,
        managed,
        ctr,
    })
}

/// The managed containerd's supervisor, when oxlet started one: it owns it from now on,
/// as a critical task in `tasks` (the root scope, which stops after the agent's).
pub(super) fn spawn_supervisor(rt: &mut Runtime, tasks: &Tasks) {
    if let Some(m) = rt.managed.take() {
        tasks.spawn_critical("containerd-supervisor", move |cancel| async move {
            supervise(m, cancel).await;
            Ok(())
        });
    }
}

/// Imports the archives in `<root-dir>/images` (k3s's convention). Each archive is
/// imported on its own; `import_images` logs successes and failures, and a broken
/// archive is skipped.
pub(super) async fn import_root_images(opts: &Options, rt: &Runtime) {
    let images = opts.process.root_dir.join("images");
    if images.is_dir() {
        import_images(&rt.ctr, &socket_path(&rt.endpoint), &images).await;
    }
}

/// The pods' DNS settings from the flags and the node's address; `--resolv-conf` is
/// checked here, once, so a bad one is reported at start.
pub(super) fn dns(pods: &PodOptions, node: &NodeInfo) -> DnsConfigurer {
    let dns = DnsConfigurer {
        cluster_dns: pods.cluster_dns.clone(),
        cluster_domain: pods.cluster_domain.clone(),
        resolv_conf: pods.resolv_conf.clone(),
        node_ips: (node.internal_ips().iter())
            .filter_map(|ip| ip.parse().ok())
            .collect(),
    };
    dns.check_resolv_conf();
    dns
}

/// What the runtime manager gets beside the options and the host: the parts other
/// wings make for it.
pub(super) struct ManagerInputs<'a> {
    pub dns: DnsConfigurer,
    pub events: &'a EventRecorder,
    /// The prober's results: a container's start waits on its startup probe.
    pub probes: &'a Arc<ProbeResults>,
    /// Cluster mode's ConfigMap, Secret and token managers.
    pub objects: Option<Arc<ObjectManager>>,
    /// koordlet's hooks before RunPodSandbox and CreateContainer/StartContainer.
    pub hooks: RuntimeHooks,
    /// The runtime check's findings: the handlers' features a container's mounts need.
    pub runtime_state: Arc<crate::contracts::RuntimeHealth>,
    /// The resource managers: each container's cpuset, devices and CDI devices.
    pub grants: Arc<crate::resourcemanager::ResourceManagers>,
}

/// kubelet's kuberuntime manager on the CRI client: sandboxes, containers and images,
/// with the pod environment the flags and the node give.
pub(super) fn manager(
    opts: &Options,
    rt: &Runtime,
    host: &Host,
    inputs: ManagerInputs<'_>,
) -> anyhow::Result<Arc<RuntimeManager>> {
    let pulls =
        PullLimit::from_settings(opts.images.serialize_pulls, opts.images.max_parallel_pulls);
    let pull_records = crate::images::PullRecords::open(
        &opts.process.root_dir,
        opts.images.pull_verification.clone(),
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "open the image pull records in {}: {e}",
            opts.process.root_dir.join("image_manager").display()
        )
    })?;
    let plugins = credential_plugins(&opts.images, inputs.objects.as_ref())?;
    // kubelet's actuated resources: what each container was last given, so a
    // restarted agent neither re-applies a resize nor misses one.
    let actuated = crate::allocation::ResourceState::open(
        &opts.process.root_dir,
        crate::allocation::ACTUATED_STATE_FILE,
    )
    .map_err(|e| anyhow::anyhow!("open the actuated pod resources: {e}"))?;
    info!(file = %opts.process.root_dir.join(crate::allocation::ACTUATED_STATE_FILE).display(), pods = actuated.uids().len(), "read back the resources the runtime was last given");
    let ids_per_pod = opts
        .pods
        .userns_ids_per_pod
        .unwrap_or(crate::kuberuntime::USERNS_IDS_PER_POD);
    let manager = RuntimeManager::new(
        Arc::new(rt.cri.clone()),
        SandboxEnv {
            pod_logs_dir: opts.logs.pod_logs_dir.clone(),
            dns: inputs.dns,
            pods_dir: opts.process.root_dir.join("pods"),
            cgroups: host.cm.clone(),
            node_memory_bytes: host.allocatable.capacity.memory_bytes,
            min_oom_score_adj: process::own_oom_score_adj(),
            memory: host.memory,
            cfs_period_us: opts.cm.cpu_cfs_quota.then(|| {
                i64::try_from(opts.cm.cpu_cfs_quota_period.as_micros()).unwrap_or(i64::MAX)
            }),
            security: crate::podenv::SecuritySettings {
                seccomp_root: opts.process.root_dir.join("seccomp"),
                seccomp_default: opts.pods.seccomp_default,
            },
            allocatable: host.allocatable.allocatable,
        },
        host.info.internal_ip().to_string(),
    )
    .with_events(inputs.events.clone())
    .with_image_pulls(
        pulls,
        crate::credentials::NodeKeyring::new(&opts.process.root_dir),
        plugins,
    )
    .with_pull_records(Arc::new(pull_records))
    .with_log_symlinks(opts.logs.symlink_dir.clone())
    .with_startup_gate(Arc::new(StartupProbeGate(inputs.probes.clone())))
    .with_objects(inputs.objects)
    .with_runtime_hooks(inputs.hooks)
    .with_resource_grants(inputs.grants)
    .with_runtime_state(inputs.runtime_state)
    .with_actuated(Arc::new(actuated))
    .with_pod_cgroups(host.cm.clone())
    .with_host_ips(host.info.internal_ips())
    .with_user_namespaces(ids_per_pod, opts.pods.max_pods)
    .map_err(|e| anyhow::anyhow!("create user namespace manager: {e}"))?;
    Ok(Arc::new(manager))
}

/// The credential provider plugins of `--image-credential-provider-config`, checked
/// as kubelet checks them: a bad config, bin dir or binary stops the start. Token-mode
/// providers ask the apiserver through the object manager (none in standalone mode).
fn credential_plugins(
    images: &ImageOptions,
    objects: Option<&Arc<ObjectManager>>,
) -> anyhow::Result<Option<Arc<crate::credentials::CredentialPlugins>>> {
    let (config, bin_dir) = (
        &images.credential_provider_config,
        &images.credential_provider_bin_dir,
    );
    if config.is_none() && bin_dir.is_none() {
        return Ok(None);
    }
    let accounts = objects.map(|o| o.clone() as Arc<dyn crate::credentials::ServiceAccounts>);
    let plugins = crate::credentials::CredentialPlugins::load(
        config.as_deref().unwrap_or(std::path::Path::new("")),
        bin_dir.as_deref().unwrap_or(std::path::Path::new("")),
        accounts,
    )
    .map_err(|e| anyhow::anyhow!("Failed to register CRI auth plugins: {e}"))?;
    Ok(Some(Arc::new(plugins)))
}

/// The container log manager (kubelet's: no rotation with a negative max size).
pub(super) fn spawn_log_rotation(settings: &ContainerLogOptions, rt: &Runtime, tasks: &Tasks) {
    let Some(policy) = crate::logs::RotatePolicy::new(settings.max_size, settings.max_files) else {
        info!(target: STARTUP_TARGET, "container log rotation is off (containerLogMaxSize is negative)");
        return;
    };
    let logs = Arc::new(crate::logs::LogManager::new(
        Arc::new(rt.cri.clone()),
        settings.pod_logs_dir.clone(),
        policy,
        settings.max_workers,
        settings.monitor_interval,
    ));
    crate::census::watch(
        "container log paths",
        &logs,
        crate::logs::LogManager::kept_paths,
    );
    tasks.spawn_restarting("container-log-manager", Backoff::default(), move |cancel| {
        let logs = logs.clone();
        async move {
            logs.run(cancel).await;
            Ok(())
        }
    });
}

/// The PLEG, warmed by one relist and then run as a restarting task; returns the
/// channel its events reach the sync loop on. The evented PLEG runs when the runtime
/// serves `GetContainerEvents` (containerd 1.7 and later), else the generic one; the
/// start-up line says which, and why.
pub(super) async fn start_pleg(
    runtime: &Arc<RuntimeManager>,
    shared: &Shared,
    tasks: &Tasks,
    evented_gate: bool,
) -> mpsc::Receiver<PodLifecycleEvent> {
    let (pleg_tx, pleg_rx) = mpsc::channel(EVENT_CHANNEL_CAPACITY);
    let (reader, cache, stats) = (
        runtime.reader(),
        shared.pod_cache.clone(),
        shared.pleg_stats.clone(),
    );
    let make = move || {
        GenericPleg::new(
            reader.clone(),
            cache.clone(),
            pleg_tx.clone(),
            stats.clone(),
        )
    };
    let mut pleg = make();
    // One relist before the loop starts, so PLEG health and the cache are warm.
    pleg.relist().await;
    // Which PLEG runs is found in its task (up to a second's wait for the runtime to
    // refuse the event stream), so the loop does not wait for it. A restarted PLEG starts
    // from an empty record: its first relist reports every container once, which only
    // wakes each pod's worker. An evented one subscribes again.
    let mut first = Some(pleg);
    let evented: Arc<std::sync::OnceLock<bool>> = Arc::default();
    let reader = runtime.reader();
    tasks.spawn_restarting("pleg", Backoff::default(), move |cancel| {
        let pleg = first.take().unwrap_or_else(&make);
        let (reader, evented) = (reader.clone(), evented.clone());
        async move {
            // The evented PLEG's stream, or None for the generic one.
            let stream = match evented.get() {
                None => {
                    let choice = choose_pleg(&reader, evented_gate).await;
                    info!(target: STARTUP_TARGET, pleg = choice.name(), reason = choice.reason().as_str(), "starting the pod lifecycle event generator");
                    let stream = match choice {
                        PlegChoice::Evented(stream) => Some(stream),
                        PlegChoice::Generic(_) | PlegChoice::GateOff => None,
                    };
                    let _ = evented.set(stream.is_some());
                    stream
                }
                Some(true) => Some(Stream::resubscribe()),
                Some(false) => None,
            };
            match stream {
                Some(stream) => EventedPleg::new(pleg, stream).run(cancel).await,
                None => pleg.run(cancel).await,
            }
            Ok(())
        }
    });
    pleg_rx
}

/// The runtime health check, which keeps the shared runtime health the sync loop and
/// the node status read.
pub(super) fn spawn_runtime_health(runtime: &Arc<RuntimeManager>, shared: &Shared, tasks: &Tasks) {
    let (rm, h) = (runtime.clone(), shared.runtime_health.clone());
    tasks.spawn_restarting("runtime-health", Backoff::default(), move |cancel| {
        let check = run_runtime_health(rm.clone(), h.clone(), cancel);
        async move {
            check.await;
            Ok(())
        }
    });
}

/// kubelet's allocation manager over its checkpoint in the root dir; a file that
/// cannot be read back stops the start, naming it, as kubelet does.
pub(super) fn allocation_manager(
    opts: &Options,
    host: &Host,
    events: &EventRecorder,
) -> anyhow::Result<Arc<AllocationManager>> {
    let state = ResourceState::open(
        &opts.process.root_dir,
        crate::allocation::ALLOCATED_STATE_FILE,
    )?;
    Ok(Arc::new(AllocationManager::new(
        state,
        host.allocatable.allocatable,
        host.memory,
        events.clone(),
    )))
}

/// The pod syncer the pod workers call, with the prober whose workers run in a scope
/// of their own.
pub(super) fn syncer(
    rt: &Runtime,
    runtime: &Arc<RuntimeManager>,
    host: &Host,
    shared: &Shared,
    probe_results: Arc<ProbeResults>,
    tasks: &Tasks,
) -> Arc<Syncer> {
    let probes = Arc::new(ProbeManager::new(
        WorkerDeps {
            results: probe_results,
            statuses: shared.statuses.clone(),
            cri: Arc::new(rt.cri.clone()),
            events: shared.events.clone(),
        },
        tasks.child(),
    ));
    let syncer = Arc::new(Syncer {
        runtime: runtime.clone(),
        cache: shared.pod_cache.clone(),
        statuses: shared.statuses.clone(),
        pods: shared.pods.clone(),
        runtime_name: rt.runtime_name.clone(),
        startup: Default::default(),
        probes,
        cm: host.cm.clone(),
        allocation: shared.allocation.clone(),
        grants: Some(shared.resources.clone()),
    });
    count_in_census(&syncer);
    syncer
}

/// The per-pod maps the pod syncer reaches, in the census (`/debug/census`): each
/// must shrink back as pods leave.
fn count_in_census(syncer: &Arc<Syncer>) {
    use crate::census::watch;
    watch("pod manager: pods", syncer, |s| s.pods.len());
    watch("pod manager: mirror pods", syncer, |s| {
        s.pods.mirror_count()
    });
    watch("status manager: statuses", syncer, |s| {
        s.statuses.census().0
    });
    watch("status manager: unwritten", syncer, |s| {
        s.statuses.census().1
    });
    watch("pod cache", syncer, |s| s.cache.len());
    watch("startup tracker", syncer, |s| s.startup.len());
    watch("probe workers", syncer, |s| s.probes.worker_count());
    watch("crash back-off entries", syncer, |s| s.runtime.census().0);
    watch("waiting reasons", syncer, |s| s.runtime.census().1);
    watch("containers being removed", syncer, |s| s.runtime.census().2);
    watch("pod cgroups", syncer, |s| s.cm.pod_count());
}

/// What the sync loop is made of beside the shared state.
pub(super) struct LoopParts {
    pub syncer: Arc<Syncer>,
    pub runtime: Arc<RuntimeManager>,
    /// Every configured pod source; housekeeping waits until each has reported.
    pub sources: Vec<&'static str>,
    /// Woken when static or mirror pods change (cluster mode: the mirror pods).
    pub mirror_hook: Option<Arc<Notify>>,
    /// Told `true` once every source has reported (the mirror pods wait for it).
    pub sources_ready: tokio::sync::watch::Sender<bool>,
}

/// The sync loop, its pod workers (in a scope of `tasks` of their own) and kubelet's
/// admission chain; not yet running.
pub(super) fn sync_loop(
    pods: &PodOptions,
    host: &Host,
    shared: &Shared,
    parts: LoopParts,
    tasks: &Tasks,
) -> SyncLoop {
    let queue = Arc::new(WorkQueue::default());
    crate::census::watch("work queue", &queue, WorkQueue::len);
    SyncLoop::new(SyncLoopDeps {
        pods: shared.pods.clone(),
        syncer: parts.syncer,
        statuses: shared.statuses.clone(),
        runtime: parts.runtime,
        queue,
        pleg: shared.pleg_stats.clone(),
        health: shared.runtime_health.clone(),
        resync: pods.sync_frequency,
        admission: admission_chain(pods, host, shared),
        sources: parts.sources,
        tasks: tasks.clone(),
        mirror_hook: parts.mirror_hook,
        sources_ready: parts.sources_ready,
    })
}

/// kubelet's admission handlers that oxlet has: eviction pressure, sysctls, `maxPods`,
/// the pod's requests against allocatable, then the node shutdown.
fn admission_chain(pods: &PodOptions, host: &Host, shared: &Shared) -> AdmissionChain {
    // kubelet's order: the sysctl allowlist, then the predicate handler (pods and
    // resource fit), so a pod failing both is rejected as SysctlForbidden.
    let mut chain = AdmissionChain::default();
    // kubelet's eviction manager is the first admit handler.
    chain.push(Box::new(crate::eviction::PressureAdmission {
        pressure: shared.pressure.clone(),
    }));
    chain.push(Box::new(crate::syncloop::SysctlAdmission::for_node(
        &pods.allowed_unsafe_sysctls,
    )));
    // kubelet's resource allocation handler: the topology manager over the CPU,
    // memory and device managers.
    chain.push(Box::new(crate::resourcemanager::ResourceAdmission(
        shared.resources.clone(),
    )));
    chain.push(Box::new(crate::syncloop::MaxPods {
        capacity: pods.max_pods,
    }));
    chain.push(Box::new(crate::cm::ResourceFit {
        allocatable: host.allocatable.allocatable,
        extended: Some(shared.resources.clone()),
    }));
    // Then kubelet's node shutdown manager: no pod starts while the node shuts down.
    chain.push(Box::new(crate::nodeshutdown::ShutdownAdmission {
        state: shared.shutdown.clone(),
    }));
    chain
}

/// The sync loop as a critical task: it owns its channels and cannot be restarted.
pub(super) fn spawn_sync_loop(sync_loop: SyncLoop, inputs: LoopInputs, tasks: &Tasks) {
    tasks.spawn_critical("sync-loop", move |cancel| async move {
        sync_loop.run(inputs, cancel).await;
        Ok(())
    });
}

//! The resource managers' wing: the CPU, memory, topology and device managers and,
//! in cluster mode, the DRA manager, built from the options; then their tasks: the
//! device plugin registration server, the plugin watcher on `plugins_registry/`, the
//! CPU manager's reconcile loop, the pod resources API, and the DRA manager's slice
//! wipe and claim reconcile.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::cpumanager::{CpuManagerPolicy, CpuManagerSettings, CpuSet};
use crate::dra::{DraManager, KubeClaims};
use crate::kubeclient::ApiClients;
use crate::memorymanager::MemoryManagerSettings;
use crate::options::Options;
use crate::pluginwatcher::PluginWatcher;
use crate::resourcemanager::{ActivePods, DraPlugins, ResourceManagerSettings, ResourceManagers};
use crate::tasks::{Backoff, Tasks};
use crate::topology::TopologySettings;

use super::node::Host;
use super::runtime::Runtime;

/// How often the DRA manager unprepares the claims of pods that are gone (kubelet's
/// `draManagerReconcilePeriod` default).
const DRA_RECONCILE: Duration = Duration::from_secs(60);

/// The managers' settings from the options: the CPU reservation is kube-reserved plus
/// system-reserved cpu; the memory the `Static` policy's `reservedMemory` must add up
/// to is what node allocatable holds back (kube-reserved, system-reserved and the hard
/// eviction threshold).
fn settings(opts: &Options, host: &Host) -> anyhow::Result<ResourceManagerSettings> {
    let r = &opts.resource_managers;
    let reserved_millicpu = opts.cm.kube_reserved.cpu_milli.unwrap_or(0)
        + opts.cm.system_reserved.cpu_milli.unwrap_or(0);
    let reserved_cpus = match &r.reserved_cpus {
        Some(text) => Some(CpuSet::parse(text).map_err(|e| {
            anyhow::anyhow!("invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) {text}, error: {e}")
        })?),
        None => None,
    };
    let held_back =
        host.allocatable.capacity.memory_bytes - host.allocatable.allocatable.memory_bytes;
    Ok(ResourceManagerSettings {
        root_dir: opts.process.root_dir.clone(),
        sys_root: "/sys".into(),
        cpu: CpuManagerSettings {
            policy: CpuManagerPolicy::parse(&r.cpu_policy)?,
            options: r.cpu_policy_options.clone(),
            reserved_system_cpus: reserved_cpus,
            reserved_millicpu: u64::try_from(reserved_millicpu.max(0)).unwrap_or(0),
            state_dir: opts.process.root_dir.clone(),
        },
        memory: MemoryManagerSettings {
            policy: r.memory_policy.clone(),
            reserved: (r.reserved_memory.iter())
                .map(|(node, limits)| {
                    let l = limits
                        .iter()
                        .map(|(k, v)| (k.clone(), u64::try_from(*v).unwrap_or(0)));
                    (*node, l.collect())
                })
                .collect(),
            state_dir: opts.process.root_dir.clone(),
        },
        memory_node_reserved: BTreeMap::from([(
            "memory".to_string(),
            u64::try_from(held_back.max(0)).unwrap_or(0),
        )]),
        topology: TopologySettings {
            policy: r.topology_policy.clone(),
            scope: r.topology_scope.clone(),
            options: r.topology_policy_options.clone(),
        },
    })
}

/// Builds the managers; a refused setting or state file stops the start.
pub(super) fn resource_managers(
    opts: &Options,
    host: &Host,
    api: Option<&ApiClients>,
    tasks: &Tasks,
) -> anyhow::Result<Arc<ResourceManagers>> {
    let s = settings(opts, host)?;
    let dra = match api {
        Some(a) => Some(Arc::new(
            DraManager::new(
                &opts.process.root_dir,
                &opts.node.name,
                Arc::new(KubeClaims::new(a.main.clone())),
                tasks.clone(),
            )
            .context("failed to initialize the DRA manager")?,
        )),
        None => None,
    };
    Ok(Arc::new(ResourceManagers::new(&s, dra, tasks)?))
}

/// Tells the managers where the active pods are: the pod manager's pods not finished
/// (kubelet's `GetActivePods`), trusted for forgetting once every source is ready.
pub(super) fn set_active_pods(shared: &super::Shared, ready: tokio::sync::watch::Receiver<bool>) {
    let (pods, statuses) = (shared.pods.clone(), shared.statuses.clone());
    let terminal = move |uid: &str| {
        statuses
            .read(uid, |s| {
                (s.phase.as_deref())
                    .and_then(|p| p.parse::<crate::pod::Phase>().ok())
                    .is_some_and(crate::pod::Phase::is_terminal)
            })
            .unwrap_or(false)
    };
    shared.resources.set_active_pods(ActivePods {
        pods: Box::new(move || {
            (pods.all().into_iter())
                .filter(|p| !crate::pod::is_api_mirror(p) && !terminal(crate::pod::pod_uid(p)))
                .collect()
        }),
        sources_ready: Box::new(move || *ready.borrow()),
    });
}

/// Starts the managers' tasks, each restarted after a back-off if it ends early.
pub(super) fn spawn(opts: &Options, rm: &Arc<ResourceManagers>, rt: &Runtime, tasks: &Tasks) {
    let devices = rm.devices().clone();
    tasks.spawn_restarting("device-manager", Backoff::default(), move |cancel| {
        let devices = devices.clone();
        async move { Ok(devices.run(cancel).await?) }
    });
    let registry = opts.process.root_dir.join("plugins_registry");
    let (rm2, dra_handler) = (rm.clone(), rm.dra().cloned());
    tasks.spawn_restarting("plugin-watcher", Backoff::default(), move |cancel| {
        let mut watcher = PluginWatcher::new(&registry);
        rm2.devices().handle_watched_plugins(&mut watcher);
        if let Some(dra) = &dra_handler {
            watcher.add_handler(
                crate::pluginwatcher::DRA_PLUGIN,
                Arc::new(DraPlugins(dra.clone())),
            );
        }
        async move {
            watcher.run(cancel).await;
            Ok(())
        }
    });
    if let Some(dra) = rm.dra() {
        spawn_dra(dra, rm, tasks);
    }
    if rm.reconciles_cpusets() {
        let (managers, cri) = (rm.clone(), Arc::new(rt.cri.clone()));
        let period = opts.resource_managers.cpu_reconcile_period;
        tasks.spawn_restarting("cpu-manager-reconcile", Backoff::default(), move |cancel| {
            let (managers, cri) = (managers.clone(), cri.clone());
            async move {
                crate::resourcemanager::reconcile_cpusets(managers, cri, period, cancel).await;
                Ok(())
            }
        });
    }
    let (root, source) = (opts.process.root_dir.clone(), rm.clone());
    tasks.spawn_restarting("pod-resources-api", Backoff::default(), move |cancel| {
        let (root, source) = (root.clone(), source.clone());
        async move { Ok(crate::podresources::serve(&root, source, cancel).await?) }
    });
}

/// The DRA manager's slice wipe at start and its periodic reconcile of ended pods.
fn spawn_dra(dra: &Arc<DraManager>, rm: &Arc<ResourceManagers>, tasks: &Tasks) {
    let (wipe, token) = (dra.clone(), tasks.token());
    tasks.track("dra-wipe-slices", async move {
        tokio::select! {
            () = token.cancelled() => {}
            () = wipe.wipe_resource_slices() => {}
        }
    });
    let (dra, rm) = (dra.clone(), rm.clone());
    tasks.spawn_restarting("dra-reconcile", Backoff::default(), move |cancel| {
        let (dra, rm) = (dra.clone(), rm.clone());
        async move {
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return Ok(()),
                    () = tokio::time::sleep(DRA_RECONCILE) => {}
                }
                if let Some(active) = rm.active_pod_uids_when_ready() {
                    let active: HashSet<String> = active.into_iter().collect();
                    dra.reconcile(&active).await;
                }
            }
        }
    });
}

//! The CPU manager's reconcile loop (kubelet's `reconcileState`): every
//! `cpuManagerReconcilePeriod`, and at once when the shared pool changes, each running
//! container's `cpuset.cpus` is made what the CPU manager says: its exclusive CPUs, or
//! the shared pool as it is now. Only what changed is written (kubelet's
//! `lastUpdateState`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_cri::v1 as cri;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::managers::ResourceManagers;
use crate::cri::{Cri, Lookup};

/// How often the loop checks whether the shared pool changed between periods.
const POOL_CHECK: Duration = Duration::from_secs(1);

/// Runs until `cancel`; under the `none` policy it only waits for it (no cpuset is
/// the CPU manager's to keep).
pub(crate) async fn reconcile_cpusets(
    managers: Arc<ResourceManagers>,
    cri: Arc<dyn Cri>,
    period: Duration,
    cancel: CancellationToken,
) {
    if !managers.reconciles_cpusets() {
        cancel.cancelled().await;
        return;
    }
    let mut applied: HashMap<String, String> = HashMap::new();
    let mut since = Duration::ZERO;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(POOL_CHECK) => {}
        }
        since += POOL_CHECK;
        let pool_changed = managers.cpu.take_changes();
        if !pool_changed && since < period {
            continue;
        }
        since = Duration::ZERO;
        managers.remove_stale();
        reconcile_once(&managers, cri.as_ref(), &mut applied).await;
    }
}

/// One pass over the runtime's running containers.
async fn reconcile_once(
    managers: &ResourceManagers,
    cri: &dyn Cri,
    applied: &mut HashMap<String, String>,
) {
    let filter = cri::ContainerFilter {
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    let containers = match cri.list_containers(Some(filter)).await {
        Ok(c) => c,
        Err(e) => {
            warn!(err = %e, "cpu manager reconcile: cannot list the runtime's containers");
            return;
        }
    };
    let mut seen = HashMap::with_capacity(containers.len());
    for c in containers {
        let (Some(uid), Some(name)) = (
            c.labels.lookup(crate::kuberuntime::POD_UID_LABEL),
            c.labels.lookup(crate::kuberuntime::CONTAINER_NAME_LABEL),
        ) else {
            continue;
        };
        let Some(want) = managers.cpu.cpuset_for(uid, name).map(|s| s.to_string()) else {
            continue;
        };
        if applied.get(&c.id) == Some(&want) {
            seen.insert(c.id.clone(), want);
            continue;
        }
        let resources = cri::LinuxContainerResources {
            cpuset_cpus: want.clone(),
            ..Default::default()
        };
        match cri.update_container_resources(&c.id, resources).await {
            Ok(()) => {
                info!(podUID = %uid, container = %name, containerID = %c.id, cpuset = %want,
                    "cpu manager reconcile: updated the container's cpuset");
                seen.insert(c.id.clone(), want);
            }
            Err(e) => {
                warn!(podUID = %uid, container = %name, containerID = %c.id, err = %e,
                    "cpu manager reconcile: failed to update the container's cpuset");
            }
        }
    }
    debug!(containers = seen.len(), "cpu manager reconcile done");
    *applied = seen;
}

//! The DRA manager: the claim info cache (kubelet's `claiminfo.go`) and the prepare and
//! unprepare passes of `manager.go`. A pod's claims are checked first without touching
//! the cache (so a pod that cannot be prepared can still be deleted without an
//! unprepare call to a driver that never saw it), then recorded with the pod and
//! checkpointed, then the unprepared ones are sent to their drivers, one call per driver.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::ResourceClaim;
use tracing::{debug, info};

use super::client::{CALL_TIMEOUT, PluginClient};
use super::plugins::{Plugins, WIPING_DELAY};
use super::proto;
use super::state::{self, ClaimInfoState, Device, DriverState};
use super::{ApiError, ClaimResources, ClaimSource, DraError};
use crate::locks::Locked as _;
use crate::tasks::Tasks;

/// A claim in the cache: its checkpointed state, and whether its drivers prepared it
/// since this process started (a claim read back from the checkpoint is prepared again,
/// as kubelet does; drivers make that idempotent).
struct ClaimInfo {
    state: ClaimInfoState,
    prepared: bool,
}

/// The cache, keyed by namespace and claim name.
type Cache = BTreeMap<(String, String), ClaimInfo>;

pub(crate) struct DraManager {
    plugins: Plugins,
    api: Arc<dyn ClaimSource>,
    state_file: PathBuf,
    cache: Mutex<Cache>,
    call_timeout: Duration,
}

/// A pod's identity as the manager's messages name it.
struct PodId<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
}

impl<'a> PodId<'a> {
    fn of(pod: &'a Pod) -> Self {
        let m = &pod.metadata;
        PodId {
            namespace: m.namespace.as_deref().unwrap_or("default"),
            name: m.name.as_deref().unwrap_or(""),
            uid: m.uid.as_deref().unwrap_or(""),
        }
    }

    fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A claim checked for the pod, ready to be recorded.
struct Checked {
    info: ClaimInfoState,
    plugins: HashMap<String, PluginClient>,
}

/// kubelet's `resourceclaim.Name`: the claim a pod's entry names, or the one generated
/// from its template (in `status.resourceClaimStatuses`); whether its owner must be
/// checked. `None`: no claim was generated on purpose.
fn claim_name(pod: &Pod, pc: &PodResourceClaim) -> Result<Option<(String, bool)>, DraError> {
    if let Some(name) = &pc.resource_claim_name {
        return Ok(Some((name.clone(), false)));
    }
    if pc.resource_claim_template_name.is_some() {
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref());
        return match statuses.into_iter().flatten().find(|s| s.name == pc.name) {
            Some(s) => Ok(s.resource_claim_name.clone().map(|n| (n, true))),
            None => Err(DraError::ClaimNotCreated {
                pod: PodId::of(pod).key(),
            }),
        };
    }
    Err(DraError::Unsupported {
        pod: PodId::of(pod).key(),
        claim: pc.name.clone(),
    })
}

fn pod_claims(pod: &Pod) -> &[PodResourceClaim] {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or_default()
}

/// kubelet's `newClaimInfoFromClaim`: an allocated claim's drivers, no devices yet.
fn info_of(claim: &ResourceClaim) -> Result<ClaimInfoState, DraError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    let Some(allocation) = allocation else {
        return Err(DraError::NotAllocated { claim: name });
    };
    let results = allocation.devices.as_ref().and_then(|d| d.results.as_ref());
    Ok(ClaimInfoState {
        claim_uid: claim.metadata.uid.clone().unwrap_or_default(),
        claim_name: name,
        namespace: claim.metadata.namespace.clone().unwrap_or_default(),
        pod_uids: BTreeSet::new(),
        driver_state: results
            .into_iter()
            .flatten()
            .map(|r| (r.driver.clone(), DriverState::default()))
            .collect(),
    })
}

/// kubelet's `IsForPod`: a generated claim is the pod's (same namespace, the pod its
/// controller).
fn check_owner(pod: &PodId<'_>, claim: &ResourceClaim) -> Result<(), DraError> {
    let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    let owned = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == pod.uid);
    if ns != pod.namespace || !owned {
        return Err(DraError::NotOwner {
            namespace: ns.to_owned(),
            claim: claim.metadata.name.clone().unwrap_or_default(),
            pod: pod.key(),
        });
    }
    Ok(())
}

/// kubelet's `IsReservedForPod`.
fn reserved_for(pod: &PodId<'_>, claim: &ResourceClaim) -> bool {
    let reserved = claim.status.as_ref().and_then(|s| s.reserved_for.as_ref());
    reserved.into_iter().flatten().any(|r| r.uid == pod.uid)
}

fn wire_claim(info: &ClaimInfoState) -> proto::Claim {
    proto::Claim {
        namespace: info.namespace.clone(),
        uid: info.claim_uid.clone(),
        name: info.claim_name.clone(),
    }
}

fn name_of<'c>(claims: &'c [proto::Claim], uid: &str) -> Option<&'c str> {
    claims
        .iter()
        .find(|c| c.uid == uid)
        .map(|c| c.name.as_str())
}

impl DraManager {
    /// The manager of the node `node_name`, its cache read back from
    /// `root_dir/dra_manager_state`; the wipes of a gone driver's slices run in `tasks`.
    pub(crate) fn new(
        root_dir: &Path,
        node_name: &str,
        api: Arc<dyn ClaimSource>,
        tasks: Tasks,
    ) -> Result<Self, DraError> {
        Self::with_timings(root_dir, node_name, api, WIPING_DELAY, CALL_TIMEOUT, tasks)
    }

    /// [`Self::new`] with the wiping delay and call timeout tests shorten.
    pub(super) fn with_timings(
        root_dir: &Path,
        node_name: &str,
        api: Arc<dyn ClaimSource>,
        wiping_delay: Duration,
        call_timeout: Duration,
        tasks: Tasks,
    ) -> Result<Self, DraError> {
        let state_file = root_dir.join(state::STATE_FILE);
        let cache_error = |e: &dyn std::fmt::Display| DraError::Cache(e.to_string());
        // kubelet's checkpoint manager makes its directory.
        std::fs::create_dir_all(root_dir).map_err(|e| cache_error(&e))?;
        let entries = state::load(&state_file).map_err(|e| cache_error(&e))?;
        let cache: Cache = entries
            .into_iter()
            .map(|s| {
                let key = (s.namespace.clone(), s.claim_name.clone());
                (
                    key,
                    ClaimInfo {
                        state: s,
                        prepared: false,
                    },
                )
            })
            .collect();
        if !cache.is_empty() {
            info!(
                claims = cache.len(),
                "Read back the DRA manager's ResourceClaims from its checkpoint"
            );
        }
        Ok(DraManager {
            plugins: Plugins::new(node_name, api.clone(), wiping_delay, tasks),
            api,
            state_file,
            cache: Mutex::new(cache),
            call_timeout,
        })
    }

    /// The plugin watcher's check of a new `DRAPlugin` socket.
    pub(crate) fn validate_plugin(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), DraError> {
        self.plugins.validate(name, endpoint, versions).map(|_| ())
    }

    /// The plugin watcher's registration of a driver's plugin.
    pub(crate) async fn register_plugin(
        &self,
        name: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<(), DraError> {
        self.plugins
            .register(name, endpoint, versions, self.call_timeout)
    }

    /// The plugin watcher saw the driver's registration socket go: its plugins are
    /// forgotten, and its ResourceSlices deleted unless it is back within 30 s.
    pub(crate) fn deregister_plugin(&self, name: &str) {
        self.plugins.deregister(name, None);
    }

    /// At start: delete this node's ResourceSlices, which no registered driver backs yet.
    /// Retries for a long while; run it in the background.
    pub(crate) async fn wipe_resource_slices(&self) {
        self.plugins.wipe_all().await;
    }

    /// kubelet's `PrepareResources`, before the pod's sandbox is created.
    pub(crate) async fn prepare_resources(&self, pod: &Pod) -> Result<(), DraError> {
        let started = std::time::Instant::now();
        let result = self.prepare(pod).await;
        crate::metrics::dra_operation("PrepareResources", started.elapsed(), result.is_ok());
        self.publish_claims_in_use();
        result.map_err(|e| DraError::Prepare(Box::new(e)))
    }

    /// kubelet's claims-in-use collector: the prepared claims, per driver they use
    /// and in all.
    fn publish_claims_in_use(&self) {
        let (per_driver, total) = claims_in_use(&self.cache.locked());
        crate::metrics::dra_claims_in_use(&per_driver, total);
    }

    async fn prepare(&self, pod: &Pod) -> Result<(), DraError> {
        let checked = self.check_claims(pod).await?;
        let batches = self.record(pod, &checked)?;
        let mut done = Vec::new();
        for (plugin, claims) in batches.into_values() {
            let answer = plugin
                .prepare(proto::NodePrepareResourcesRequest {
                    claims: claims.clone(),
                })
                .await?;
            self.take_devices(&plugin.driver, &claims, answer)?;
            done.extend(claims);
        }
        let mut cache = self.cache.locked();
        for c in &done {
            let key = (c.namespace.clone(), c.name.clone());
            let info = cache.get_mut(&key).ok_or_else(|| {
                DraError::Internal(format!(
                    "unable to get claim info for ResourceClaim {} in namespace {}",
                    c.name, c.namespace
                ))
            })?;
            info.prepared = true;
        }
        self.sync(&cache, "ResourceClaim state")?;
        drop(cache);
        if !done.is_empty() {
            let pod_id = PodId::of(pod);
            info!(pod = %pod_id.key(), podUID = %pod_id.uid, claims = done.len(), "Prepared the pod's ResourceClaims");
        }
        Ok(())
    }

    /// The validation pass: every claim fetched and checked, its drivers registered.
    async fn check_claims(&self, pod: &Pod) -> Result<Vec<Checked>, DraError> {
        let id = PodId::of(pod);
        let mut out = Vec::new();
        for pc in pod_claims(pod) {
            debug!(pod = %id.key(), podUID = %id.uid, podClaim = %pc.name, "Processing resource");
            let Some((name, check_owner_too)) = claim_name(pod, pc)? else {
                continue;
            };
            let claim = match self.api.resource_claim(id.namespace, &name).await {
                Ok(Some(c)) => c,
                Ok(None) => {
                    return Err(DraError::Fetch {
                        message: format!("resourceclaims.resource.k8s.io {name:?} not found"),
                        claim: name,
                    });
                }
                Err(ApiError(message)) => {
                    return Err(DraError::Fetch {
                        claim: name,
                        message,
                    });
                }
            };
            if check_owner_too {
                check_owner(&id, &claim)?;
            }
            if !reserved_for(&id, &claim) {
                return Err(DraError::NotReserved {
                    pod: id.name.to_owned(),
                    pod_uid: id.uid.to_owned(),
                    claim: name,
                    claim_uid: claim.metadata.uid.clone().unwrap_or_default(),
                });
            }
            let info = info_of(&claim)?;
            let mut plugins = HashMap::new();
            for driver in info.driver_state.keys() {
                plugins.insert(driver.clone(), self.plugins.get(driver)?);
            }
            out.push(Checked { info, plugins });
        }
        Ok(out)
    }

    /// Records the pod with each claim and checkpoints; the claims still to prepare,
    /// by driver.
    fn record(
        &self,
        pod: &Pod,
        checked: &[Checked],
    ) -> Result<HashMap<String, (PluginClient, Vec<proto::Claim>)>, DraError> {
        let id = PodId::of(pod);
        let mut batches: HashMap<String, (PluginClient, Vec<proto::Claim>)> = HashMap::new();
        let mut cache = self.cache.locked();
        for c in checked {
            let key = (c.info.namespace.clone(), c.info.claim_name.clone());
            let entry = cache.entry(key).or_insert_with(|| ClaimInfo {
                state: c.info.clone(),
                prepared: false,
            });
            if entry.state.claim_uid != c.info.claim_uid {
                return Err(DraError::UidChanged {
                    claim: c.info.claim_name.clone(),
                    uid: entry.state.claim_uid.clone(),
                });
            }
            entry.state.pod_uids.insert(id.uid.to_owned());
            if entry.prepared {
                debug!(pod = %id.key(), claim = %c.info.claim_name, "Resources already prepared");
                continue;
            }
            let wire = wire_claim(&entry.state);
            for (driver, plugin) in &c.plugins {
                let batch = batches
                    .entry(driver.clone())
                    .or_insert_with(|| (plugin.clone(), Vec::new()));
                batch.1.push(wire.clone());
            }
        }
        self.sync(&cache, "ResourceClaim cache")?;
        Ok(batches)
    }

    /// A driver's answer: each claim's devices kept, any failure returned.
    fn take_devices(
        &self,
        driver: &str,
        claims: &[proto::Claim],
        answer: proto::NodePrepareResourcesResponse,
    ) -> Result<(), DraError> {
        const CALL: &str = "NodePrepareResources";
        let count = answer.claims.len();
        for (uid, result) in answer.claims {
            let Some(name) = name_of(claims, &uid) else {
                return Err(DraError::UnknownClaim { call: CALL, uid });
            };
            if !result.error.is_empty() {
                return Err(DraError::ClaimFailed {
                    call: CALL,
                    claim: name.to_owned(),
                    message: result.error,
                });
            }
            let ns = claims
                .iter()
                .find(|c| c.uid == uid)
                .map(|c| c.namespace.clone());
            let mut cache = self.cache.locked();
            let key = (ns.unwrap_or_default(), name.to_owned());
            let Some(info) = cache.get_mut(&key) else {
                return Err(DraError::Internal(format!(
                    "unable to get claim info for ResourceClaim {} in namespace {}",
                    key.1, key.0
                )));
            };
            // Set, not appended: a claim read back from the checkpoint is prepared again.
            let devices = result.devices.into_iter().map(|d| Device {
                pool_name: d.pool_name,
                device_name: d.device_name,
                share_id: d.share_id,
                request_names: d.request_names,
                cdi_device_ids: d.cdi_device_ids,
            });
            info.state.driver_state.insert(
                driver.to_owned(),
                DriverState {
                    devices: devices.collect(),
                },
            );
        }
        if claims.len() != count {
            return Err(DraError::Skipped {
                call: CALL,
                count: claims.len().saturating_sub(count),
            });
        }
        Ok(())
    }

    fn sync(&self, cache: &Cache, what: &'static str) -> Result<(), DraError> {
        let entries: Vec<ClaimInfoState> = cache.values().map(|c| c.state.clone()).collect();
        state::store(&self.state_file, &entries).map_err(|e| DraError::Checkpoint {
            what,
            message: e.to_string(),
        })
    }

    /// kubelet's `UnprepareResources`, after the pod's containers have all stopped and
    /// before its final status is written. Idempotent.
    pub(crate) async fn unprepare_resources(&self, pod: &Pod) -> Result<(), DraError> {
        let id = PodId::of(pod);
        let mut names = self.claim_names_of(id.uid);
        if names.is_empty() {
            // The checkpoint may be gone: the names the pod gives.
            for pc in pod_claims(pod) {
                if let Some((name, _)) =
                    claim_name(pod, pc).map_err(|e| DraError::Unprepare(Box::new(e)))?
                {
                    names.push(name);
                }
            }
        }
        let started = std::time::Instant::now();
        let result = self.unprepare_claims(id.uid, id.namespace, &names).await;
        crate::metrics::dra_operation("UnprepareResources", started.elapsed(), result.is_ok());
        self.publish_claims_in_use();
        result.map_err(|e| DraError::Unprepare(Box::new(e)))
    }

    /// kubelet's reconcile loop: the claims of pods no longer active are unprepared
    /// (a pod that ended while oxlet was down, or whose unprepare failed). Call it
    /// periodically once the pod sources are ready.
    pub(crate) async fn reconcile(&self, active: &HashSet<String>) {
        let mut inactive: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
        for info in self.cache.locked().values() {
            for uid in info.state.pod_uids.iter().filter(|u| !active.contains(*u)) {
                let e = inactive
                    .entry(uid.clone())
                    .or_insert_with(|| (info.state.namespace.clone(), Vec::new()));
                e.1.push(info.state.claim_name.clone());
            }
        }
        for (uid, (ns, names)) in inactive {
            if let Err(e) = self.unprepare_claims(&uid, &ns, &names).await {
                info!(podUID = %uid, err = %e, "Unpreparing pod resources in reconcile loop failed, will retry");
            }
        }
        self.publish_claims_in_use();
    }

    #[cfg(test)]
    /// What the claims-in-use gauge is set from: per driver, and in all.
    pub(crate) fn claims_in_use_now(&self) -> (BTreeMap<String, usize>, usize) {
        claims_in_use(&self.cache.locked())
    }

    #[cfg(test)]
    /// kubelet's `PodMightNeedToUnprepareResources`: the pod is still with a claim.
    pub(crate) fn pod_might_need_to_unprepare(&self, pod_uid: &str) -> bool {
        self.cache
            .locked()
            .values()
            .any(|c| c.state.pod_uids.contains(pod_uid))
    }

    fn claim_names_of(&self, pod_uid: &str) -> Vec<String> {
        let cache = self.cache.locked();
        let with_pod = cache
            .values()
            .filter(|c| c.state.pod_uids.contains(pod_uid));
        with_pod.map(|c| c.state.claim_name.clone()).collect()
    }

    async fn unprepare_claims(
        &self,
        pod_uid: &str,
        ns: &str,
        names: &[String],
    ) -> Result<(), DraError> {
        const CALL: &str = "NodeUnprepareResources";
        let mut batches: BTreeMap<String, Vec<proto::Claim>> = BTreeMap::new();
        let mut last_users = Vec::new();
        {
            let mut cache = self.cache.locked();
            for name in names {
                let Some(info) = cache.get_mut(&(ns.to_owned(), name.clone())) else {
                    continue;
                };
                if info.state.pod_uids.len() > 1 {
                    // Checkpointed with the rest once the calls succeed.
                    info.state.pod_uids.remove(pod_uid);
                    continue;
                }
                last_users.push(name.clone());
                for driver in info.state.driver_state.keys() {
                    batches
                        .entry(driver.clone())
                        .or_default()
                        .push(wire_claim(&info.state));
                }
            }
        }
        for (driver, claims) in batches {
            let plugin = self.plugins.get(&driver)?;
            let answer = plugin
                .unprepare(proto::NodeUnprepareResourcesRequest {
                    claims: claims.clone(),
                })
                .await?;
            let count = answer.claims.len();
            for (uid, result) in answer.claims {
                let Some(name) = name_of(&claims, &uid) else {
                    return Err(DraError::UnknownClaim { call: CALL, uid });
                };
                if !result.error.is_empty() {
                    return Err(DraError::ClaimFailed {
                        call: CALL,
                        claim: name.to_owned(),
                        message: result.error,
                    });
                }
            }
            if claims.len() != count {
                return Err(DraError::Skipped {
                    call: CALL,
                    count: claims.len().saturating_sub(count),
                });
            }
        }
        let mut cache = self.cache.locked();
        for name in &last_users {
            cache.remove(&(ns.to_owned(), name.clone()));
        }
        self.sync(&cache, "ResourceClaim state")?;
        drop(cache);
        if !last_users.is_empty() {
            info!(podUID = %pod_uid, claims = last_users.len(), "Unprepared the pod's ResourceClaims");
        }
        Ok(())
    }

    /// kubelet's `GetResources`: the CDI device IDs of the claims (and their requests)
    /// the container names in `resources.claims`, for the CRI's `ContainerConfig.cdi_devices`.
    pub(crate) fn container_cdi_devices(
        &self,
        pod: &Pod,
        container: &Container,
    ) -> Result<Vec<String>, DraError> {
        let mut wanted: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let claims = container.resources.as_ref().and_then(|r| r.claims.as_ref());
        for c in claims.into_iter().flatten() {
            wanted
                .entry(c.name.as_str())
                .or_default()
                .push(c.request.as_deref().unwrap_or(""));
        }
        let ns = PodId::of(pod).namespace;
        let mut out = Vec::new();
        for pc in pod_claims(pod) {
            let Some(requests) = wanted.get(pc.name.as_str()) else {
                continue;
            };
            let Some((name, _)) = claim_name(pod, pc)? else {
                continue;
            };
            let cache = self.cache.locked();
            let Some(info) = cache.get(&(ns.to_owned(), name.clone())) else {
                return Err(DraError::Internal(format!(
                    "unable to get claim info for ResourceClaim {name} in namespace {ns}"
                )));
            };
            for request in requests {
                out.extend(cdi_ids(&info.state, request));
            }
        }
        Ok(out)
    }

    /// Every prepared device of the pod's claims, for the pod resources API.
    pub(crate) fn pod_claims(&self, pod_uid: &str) -> Vec<ClaimResources> {
        let cache = self.cache.locked();
        let mut out = Vec::new();
        for info in cache
            .values()
            .filter(|c| c.state.pod_uids.contains(pod_uid))
        {
            for (driver, ds) in &info.state.driver_state {
                out.extend(ds.devices.iter().map(|d| ClaimResources {
                    claim_name: info.state.claim_name.clone(),
                    namespace: info.state.namespace.clone(),
                    driver: driver.clone(),
                    pool: d.pool_name.clone(),
                    device: d.device_name.clone(),
                    cdi_ids: d.cdi_device_ids.clone(),
                    requests: d.request_names.clone(),
                }));
            }
        }
        out
    }
}

/// kubelet's `cdiDevicesAsList`: a device serves the request when it names it, names
/// none, or no request is asked for.
/// The prepared claims per driver with a result in them, and how many are prepared.
fn claims_in_use(cache: &Cache) -> (BTreeMap<String, usize>, usize) {
    let mut per_driver = BTreeMap::new();
    let mut total = 0;
    for info in cache.values().filter(|c| c.prepared) {
        total += 1;
        for driver in info.state.driver_state.keys() {
            *per_driver.entry(driver.clone()).or_default() += 1;
        }
    }
    (per_driver, total)
}

fn cdi_ids<'s>(info: &'s ClaimInfoState, request: &'s str) -> impl Iterator<Item = String> + 's {
    info.driver_state
        .values()
        .flat_map(|ds| ds.devices.iter())
        .filter(move |d| {
            request.is_empty()
                || d.request_names.is_empty()
                || d.request_names.iter().any(|r| r == request)
        })
        .flat_map(|d| d.cdi_device_ids.iter().cloned())
}

//! Node registration and node status (kubelet's `kubelet_node_status.go`): register
//! or adopt the Node, then compute its status every `nodeStatusUpdateFrequency`
//! and PATCH it when it changed or `nodeStatusReportFrequency` has passed, with a
//! fast first status at start (sent again the moment the node turns Ready, without
//! asking the apiserver in between). The Node is read every period, so one deleted while
//! oxlet runs is registered again even when nothing is due to be sent (kubelet does
//! not re-register; users asked for it). Everything goes through the heartbeat
//! client; an absent apiserver only delays reports, it never stops the agent.

mod conditions;
mod failures;
mod labels;
mod register;
mod setters;

use std::sync::Arc;
use std::time::Duration;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::cm::NodeAllocatable;
use crate::contracts::{NodeShutdownState, RuntimeHealth};
use crate::cri::CriRead as _;
use crate::cri::{PodCidr, RemoteRuntime};
use crate::events::{EventRecorder, EventType, ObjectRef};
use crate::node::NodeInfo;
use crate::pleg::PlegStats;
use crate::status::lease::NodeRef;
pub(crate) use conditions::{Pressure, PressureSource};
use failures::{FailureLog, Verdict};
pub(crate) use labels::{node_labels, node_taints};
pub(crate) use register::Registration;
pub(crate) use setters::addresses as node_addresses;

/// kubelet's `nodeStatusUpdateRetry`.
const UPDATE_RETRIES: usize = 5;
/// Registration back-off: 100 ms doubling to 7 s (kubelet's).
const REGISTER_RETRY: crate::tasks::Backoff = crate::tasks::Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(7),
};
/// `fastStatusUpdateOnce`: poll this often until Ready, for at most the grace.
const FAST_POLL: Duration = Duration::from_millis(100);
const FAST_GRACE: Duration = Duration::from_secs(120);

/// Everything the status is computed from.
pub(crate) struct NodeStatusDeps {
    pub client: kube::Client,
    pub info: NodeInfo,
    pub allocatable: NodeAllocatable,
    /// The device plugins' resources (None: no device manager).
    pub extended: Option<Arc<dyn crate::contracts::ExtendedResourceSource>>,
    /// The secure port, advertised as `daemonEndpoints.kubeletEndpoint.Port`.
    pub kubelet_port: i32,
    pub registration: Registration,
    pub cri: RemoteRuntime,
    /// The pod CIDR the runtime has; the Node's `spec.podCIDRs` replace it.
    pub pod_cidr: Arc<PodCidr>,
    pub runtime_health: Arc<RuntimeHealth>,
    pub pleg: Arc<PlegStats>,
    pub pressure: Arc<PressureSource>,
    /// Set while the node shuts down: Ready goes False, and its change is sent at once.
    pub shutdown: Arc<NodeShutdownState>,
    /// What the host lacks that the container manager only warns about (kubelet's
    /// soft requirements), noted on the Ready condition's message.
    pub soft_requirements: Option<&'static str>,
    pub update_frequency: Duration,
    pub report_frequency: Duration,
    /// Where the Node's name and UID are published (the lease's owner).
    pub owner: watch::Sender<Option<NodeRef>>,
    /// The node's condition events (NodeReady, NodeHasSufficientMemory, ...).
    pub events: EventRecorder,
}

/// Why one status update failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpdateError {
    #[error("node {0:?} not found in the apiserver")]
    NodeGone(String),
    #[error("updating node status: {0}")]
    Api(#[from] kube::Error),
}

/// The registering and reporting loop of one node.
pub(crate) struct NodeStatusTask {
    deps: NodeStatusDeps,
    api: Api<Node>,
    /// The last status sent, and when.
    last: Option<(NodeStatus, Instant)>,
    /// Consecutive failed periods, for rate-limited warnings.
    failures: FailureLog,
}

impl NodeStatusTask {
    pub(crate) fn new(deps: NodeStatusDeps) -> Self {
        let api = Api::all(deps.client.clone());
        NodeStatusTask {
            deps,
            api,
            last: None,
            failures: FailureLog::default(),
        }
    }

    /// Registers, retrying with back-off until it succeeds or `cancel`.
    async fn register(&self, cancel: &CancellationToken) -> Option<Node> {
        let mut backoff = REGISTER_RETRY.initial;
        loop {
            match register::register(&self.api, &self.deps.info, &self.deps.registration).await {
                Ok(node) => {
                    let uid = node.metadata.uid.clone().unwrap_or_default();
                    self.deps.owner.send_replace(Some(NodeRef {
                        name: self.deps.info.name.clone(),
                        uid,
                    }));
                    return Some(node);
                }
                Err(e) => {
                    warn!(error = %e, retryIn = %crate::duration::format_go_duration(backoff), "unable to register node with API server");
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return None,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = REGISTER_RETRY.after(backoff);
        }
    }

    /// The status as of now, heartbeats set to now, transitions kept from the last sent.
    async fn compute(&self) -> NodeStatus {
        let d = &self.deps;
        let version = d.cri.version().await.unwrap_or_else(|e| {
            debug!(error = %e, "CRI Version failed; reporting no runtime version");
            cri::VersionResponse::default()
        });
        let images = match d.cri.list_images().await {
            Ok(list) => setters::images(list),
            Err(e) => {
                debug!(error = %e, "CRI ListImages failed; keeping the last image list");
                self.last
                    .as_ref()
                    .and_then(|(s, _)| s.images.clone())
                    .unwrap_or_default()
            }
        };
        let errs = self.not_ready();
        let previous = self
            .last
            .as_ref()
            .and_then(|(s, _)| s.conditions.clone())
            .unwrap_or_default();
        let extended = d.extended.as_ref().map(|e| e.extended_resources());
        let (capacity, allocatable) = setters::with_extended(
            setters::resources(&d.allocatable.capacity),
            setters::resources(&d.allocatable.allocatable),
            extended.as_ref(),
        );
        NodeStatus {
            addresses: Some(setters::addresses(&d.info)),
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            node_info: Some(setters::node_info(&d.info, &version)),
            daemon_endpoints: Some(setters::daemon_endpoints(d.kubelet_port)),
            runtime_handlers: setters::runtime_handlers(&d.runtime_health.handlers()),
            features: setters::features(d.runtime_health.supplemental_groups_policy()),
            declared_features: Some(setters::declared_features()),
            images: Some(images),
            conditions: Some(conditions::with_times(
                conditions::warn_soft_requirements(
                    conditions::desired(d.pressure.get(), &errs),
                    d.soft_requirements,
                ),
                &previous,
                jiff::Timestamp::now(),
            )),
            ..Default::default()
        }
    }

    /// Whether `status` must be sent: it changed beyond heartbeats, or the report
    /// period has passed (kubelet's `nodeStatusHasChanged` + report frequency).
    fn due(&self, status: &NodeStatus) -> bool {
        let Some((last, at)) = &self.last else {
            return true;
        };
        let strip = |s: &NodeStatus| NodeStatus {
            conditions: None,
            ..s.clone()
        };
        at.elapsed() >= self.deps.report_frequency
            || strip(last) != strip(status)
            || conditions::changed(
                last.conditions.as_deref().unwrap_or_default(),
                status.conditions.as_deref().unwrap_or_default(),
            )
    }

    /// kubelet's GET at the start of `tryUpdateNodeStatus`: a 404 means the Node was
    /// deleted; a Node recreated by someone else gets its new UID published (the lease's
    /// owner reference follows); its pod CIDRs go to the runtime. Returns whether those
    /// changed.
    async fn check_node(&self) -> Result<bool, UpdateError> {
        match self.api.get_opt(&self.deps.info.name).await? {
            None => Err(UpdateError::NodeGone(self.deps.info.name.clone())),
            Some(node) => {
                let cidr_changed = self.follow_pod_cidr(&node).await;
                let uid = node.metadata.uid.unwrap_or_default();
                self.deps.owner.send_if_modified(|owner| match owner {
                    Some(o) if o.uid != uid => {
                        o.uid = uid;
                        true
                    }
                    _ => false,
                });
                Ok(cidr_changed)
            }
        }
    }

    /// kubelet's pod CIDR step of `tryUpdateNodeStatus`: the CIDRs the node IPAM
    /// controller put in the Node's spec go to the runtime (its CNI config template
    /// reads them). Returns whether they changed (the status is then sent, as
    /// kubelet's `podCIDRChanged`); a failure is logged and tried again next period.
    async fn follow_pod_cidr(&self, node: &Node) -> bool {
        let Some(spec) = &node.spec else {
            return false;
        };
        let cidrs = match (&spec.pod_cidrs, &spec.pod_cidr) {
            (Some(list), _) if !list.is_empty() => list.join(","),
            // An apiserver fills podCIDRs from podCIDR; one that did not still means it.
            (_, Some(one)) if !one.is_empty() => one.clone(),
            _ => return false,
        };
        match self.deps.pod_cidr.update(&cidrs).await {
            Ok(changed) => changed,
            Err(e) => {
                error!(error = %e, podCIDR = %cidrs, "Error updating pod CIDR");
                // kubelet's: it may have changed, so send the status anyway.
                true
            }
        }
    }

    /// One update: GET the Node, compute, and PATCH when due; up to 5 tries. Returns
    /// whether the node is Ready as sent (or would be).
    async fn update(&mut self) -> Result<bool, UpdateError> {
        let mut last_err = None;
        for _ in 0..UPDATE_RETRIES {
            let cidr_changed = match self.check_node().await {
                Ok(changed) => changed,
                Err(UpdateError::Api(e)) => {
                    debug!(error = %e, "error getting the node, will retry");
                    last_err = Some(e);
                    continue;
                }
                Err(gone) => return Err(gone),
            };
            let status = self.compute().await;
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if !cidr_changed && !self.due(&status) {
                return Ok(ready);
            }
            let patch = serde_json::json!({ "status": status });
            match self
                .api
                .patch_status(
                    &self.deps.info.name,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.record_transitions(&status);
                    self.last = Some((status, Instant::now()));
                    return Ok(ready);
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Err(UpdateError::NodeGone(self.deps.info.name.clone()));
                }
                Err(e) => {
                    debug!(error = %e, "error updating node status, will retry");
                    last_err = Some(e);
                }
            }
        }
        Err(last_err.map_or_else(
            || UpdateError::NodeGone(self.deps.info.name.clone()),
            UpdateError::Api,
        ))
    }

    /// kubelet's `recordNodeStatusEvent` for each condition that `sent` changed
    /// against the status sent before (all pressure ones after a registration).
    fn record_transitions(&self, sent: &NodeStatus) {
        let before = self
            .last
            .as_ref()
            .and_then(|(s, _)| s.conditions.as_deref())
            .unwrap_or_default();
        let node = ObjectRef::node(&self.deps.info.name);
        let now = sent.conditions.as_deref().unwrap_or_default();
        for reason in conditions::transition_events(before, now) {
            let message = format!("Node {} status is now: {reason}", self.deps.info.name);
            self.deps
                .events
                .event(&node, EventType::Normal, reason, message);
        }
    }

    /// Registers, sends the fast first status, then updates periodically until `cancel`.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        if self.register(&cancel).await.is_none() || !self.fast_status(&cancel).await {
            return;
        }
        // kubelet's shutdown manager syncs the node status as soon as a shutdown starts.
        let mut shutdown = self.deps.shutdown.watch();
        loop {
            // kubelet's jitter: up to 4 % of the period.
            let jitter = self.deps.update_frequency.mul_f64(0.04 * rand_fraction());
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(self.deps.update_frequency + jitter) => {}
                Ok(()) = shutdown.changed() => {
                    info!(shuttingDown = *shutdown.borrow_and_update(), "node shutdown state changed: updating the node status now");
                }
            }
            let mut result = self.update().await;
            if let Err(UpdateError::NodeGone(name)) = &result {
                if !self.register_again(name.clone(), &cancel).await {
                    return;
                }
                result = self.update().await;
            }
            self.log_outcome(result.err());
        }
    }

    /// kubelet's `fastStatusUpdateOnce`: the first status at once, then the status
    /// again as soon as the node turns Ready, for at most [`FAST_GRACE`]. Readiness is
    /// polled every 100 ms from what oxlet knows (runtime, PLEG, network, shutdown), as
    /// kubelet reads its Node from the informer cache: the apiserver is asked only when
    /// there is something to send, or a status period has passed (kubelet's periodic
    /// sync runs beside its fast one). A Node found deleted is registered again.
    /// Returns false when cancelled.
    async fn fast_status(&mut self, cancel: &CancellationToken) -> bool {
        let until = Instant::now() + FAST_GRACE;
        let mut send = true;
        let mut sent_at = Instant::now();
        loop {
            if send {
                sent_at = Instant::now();
                match self.update().await {
                    Ok(true) => {
                        info!("fast updating node status as it just became ready");
                        return true;
                    }
                    Ok(false) => {}
                    Err(UpdateError::NodeGone(name)) => {
                        if !self.register_again(name, cancel).await {
                            return false;
                        }
                        continue;
                    }
                    Err(e) => {
                        // kubelet falls back to its periodic sync; so does oxlet.
                        self.log_outcome(Some(e));
                        return true;
                    }
                }
            }
            if Instant::now() >= until {
                error!(grace = %crate::duration::format_go_duration(FAST_GRACE), "Node not becoming ready in time after startup");
                return true;
            }
            tokio::select! {
                () = cancel.cancelled() => return false,
                () = tokio::time::sleep(FAST_POLL) => {}
            }
            send = self.not_ready().is_empty() || sent_at.elapsed() >= self.deps.update_frequency;
        }
    }

    /// Why the node is not Ready, by what oxlet itself knows (no apiserver request).
    fn not_ready(&self) -> Vec<String> {
        let d = &self.deps;
        conditions::not_ready_errors(
            d.runtime_health.is_up(),
            d.pleg.healthy().err().map(|e| e.to_string()),
            d.runtime_health.network_error(),
            d.shutdown.is_shutting_down(),
        )
    }

    /// The Node `name` was deleted: registered again, its status to be sent anew.
    /// Returns false when cancelled first.
    async fn register_again(&mut self, name: String, cancel: &CancellationToken) -> bool {
        warn!(node = %name, "the Node object was deleted; registering it again");
        self.last = None;
        self.register(cancel).await.is_some()
    }

    /// One line per period outcome, rate-limited (see [`failures`]).
    fn log_outcome(&mut self, error: Option<UpdateError>) {
        match error {
            None => {
                if let Verdict::Recovered(n) = self.failures.succeeded() {
                    warn!(failures = n, "node status updates work again");
                }
            }
            Some(e) => match self.failures.failed(&e.to_string()) {
                Verdict::Warn(n) => {
                    warn!(error = %e, failuresInARow = n, "unable to update node status, will retry");
                }
                _ => debug!(error = %e, "unable to update node status, will retry"),
            },
        }
    }
}

/// A fraction in [0, 1) from the clock, enough for jitter.
fn rand_fraction() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

/// Logged once at start: the node's registration settings.
pub(crate) fn log_node_start(info: &NodeInfo) {
    info!(target: crate::logging::STARTUP_TARGET, node = %info.name, "starting node registration, node status and the node lease");
}

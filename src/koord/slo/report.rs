//! koordlet's NodeMetric report: a watch on this node's NodeMetric keeps its spec (the
//! collect policy), and every report interval the status made from the metric cache
//! is written through the status subresource (an Update, retried on a conflict, as
//! koordlet's `statusUpdater` does). Without a NodeMetric (koord-manager creates one
//! per node) a round is skipped and said so; while the apiserver refuses the watch
//! (403: no RBAC grant; 404: no CRD) the round is skipped quietly, the refusal
//! having been said once. Standalone, the same status is served at
//! `/debug/koord/nodemetric`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::access::{Access, Refusal};
use super::nodemetric::{
    MEMORY_POLICY, MEMORY_WITH_PAGE_CACHE, MIN_REPORT, ProdPrediction, ReportPolicy, build_status,
};
use crate::koordapi::HostApp;
use crate::koordapi::{NodeMetric, NodeMetricSpec, NodeMetricStatus};
use crate::locks::Locked as _;
use crate::metriccache::{MetricCache, now_ms};
use crate::pod::PodManager;

/// Conflicts retried per round (client-go's `retry.DefaultBackoff`: 4 steps).
const CONFLICT_RETRIES: usize = 4;

/// The prod classes' reclaimable resources and peak now, for the pods given (those
/// with metrics); None before prediction has synced, or with prediction off.
pub(crate) type PredictionView = Arc<dyn Fn(&[Arc<Pod>]) -> ProdPrediction + Send + Sync>;

/// What the status is made of, and the spec the report follows.
pub(crate) struct NodeMetricSource {
    cache: Arc<MetricCache>,
    pods: Arc<PodManager>,
    /// The NodeSLO's host applications (the file's until a NodeSLO says otherwise).
    host_apps: watch::Receiver<Vec<HostApp>>,
    prediction: PredictionView,
    /// This node's NodeMetric's spec as last seen (None: none seen yet).
    spec: Mutex<Option<NodeMetricSpec>>,
    min_report: Duration,
}

impl NodeMetricSource {
    /// `min_report` lowers koordlet's 30 s floor on the interval (tests only).
    pub(crate) fn new(
        cache: Arc<MetricCache>,
        pods: Arc<PodManager>,
        host_apps: watch::Receiver<Vec<HostApp>>,
        prediction: PredictionView,
        min_report: Option<Duration>,
    ) -> NodeMetricSource {
        NodeMetricSource {
            cache,
            pods,
            host_apps,
            prediction,
            spec: Mutex::new(None),
            min_report: min_report.unwrap_or(MIN_REPORT),
        }
    }

    /// The policy of the spec seen last (koordlet's defaults before any).
    pub(crate) fn policy(&self) -> ReportPolicy {
        ReportPolicy::of(self.spec.locked().as_ref(), self.min_report)
    }

    /// The status koordlet would report now.
    pub(crate) fn status(&self) -> NodeMetricStatus {
        let pods: Vec<_> = (self.pods.all().into_iter())
            .filter(|p| !crate::pod::is_mirror(p))
            .collect();
        let host_apps = self.host_apps.borrow().clone();
        build_status(
            &self.cache,
            &pods,
            &host_apps,
            &self.policy(),
            &*self.prediction,
            now_ms(),
        )
    }

    /// Keeps `spec` (None: the NodeMetric is gone); says so when the policy changes
    /// (every status written comes back through the watch, unchanged).
    fn set_spec(&self, spec: Option<NodeMetricSpec>) {
        let policy = ReportPolicy::of(spec.as_ref(), self.min_report);
        let mut kept = self.spec.locked();
        let changed = kept.is_some() != spec.is_some()
            || ReportPolicy::of(kept.as_ref(), self.min_report) != policy;
        *kept = spec;
        drop(kept);
        if !changed {
            return;
        }
        if policy.memory_policy != MEMORY_POLICY && policy.memory_policy != MEMORY_WITH_PAGE_CACHE {
            warn!(nodeMemoryCollectPolicy = %policy.memory_policy, using = MEMORY_POLICY, "NodeMetric asks for a memory collect policy oxlet does not record; reporting memory without page cache");
        }
        info!(
            seen = self.spec.locked().is_some(),
            reportInterval = %crate::duration::format_go_duration(policy.report),
            aggregateDuration = %crate::duration::format_go_duration(policy.aggregate),
            "NodeMetric collect policy"
        );
    }
}

/// Reports `source`'s status into this node's NodeMetric.
pub(crate) struct NodeMetricReporter {
    pub source: Arc<NodeMetricSource>,
    pub client: kube::Client,
    pub node_name: String,
}

impl NodeMetricReporter {
    /// Watches the NodeMetric and reports every interval, until cancelled.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let api: Api<NodeMetric> = Api::all(self.client.clone());
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", self.node_name));
        // Any failure lists again (a new cluster has no history to resume from).
        let mut events = std::pin::pin!(crate::kubeclient::relisting_watcher(api.clone(), config));
        let mut next = tokio::time::Instant::now() + self.source.policy().report;
        let mut watch_access = Access::new("NodeMetric watch", &self.node_name);
        let mut write_access = Access::new("NodeMetric status write", &self.node_name);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                event = events.next() => {
                    match event {
                        Some(Ok(Event::Apply(m) | Event::InitApply(m))) => self.source.set_spec(Some(m.spec)),
                        Some(Ok(Event::Delete(_))) => self.source.set_spec(None),
                        Some(Ok(Event::InitDone)) => watch_access.served(),
                        Some(Ok(Event::Init)) => {}
                        Some(Err(e)) => match Refusal::of_watch(&e) {
                            Some(refusal) => watch_access.refuse(refusal, &e),
                            None => debug!(error = %e, "NodeMetric watch failed; retrying"),
                        },
                        None => return,
                    }
                    // A shorter interval takes effect now, not after the old one.
                    next = next.min(tokio::time::Instant::now() + self.source.policy().report);
                }
                () = tokio::time::sleep_until(next) => {
                    self.report(&api, watch_access.refused(), &mut write_access).await;
                    next = tokio::time::Instant::now() + self.source.policy().report;
                }
            }
        }
    }

    /// One round: the status written over the NodeMetric's, retried on a conflict.
    /// `watch_refused`: why the NodeMetric watch is refused, if it is (then no
    /// NodeMetric was seen because none could be, and that was said already).
    async fn report(
        &self,
        api: &Api<NodeMetric>,
        watch_refused: Option<Refusal>,
        access: &mut Access,
    ) {
        if self.source.spec.locked().is_none() {
            if watch_refused.is_some() {
                debug!(node = %self.node_name, "the NodeMetric watch is refused by the apiserver; skipping this report");
            } else {
                warn!(node = %self.node_name, "no NodeMetric for this node yet (koord-manager creates it); skipping this report");
            }
            return;
        }
        let status = self.source.status();
        let pods = status.pods_metric.len();
        for attempt in 1..=CONFLICT_RETRIES {
            let mut current = match api.get(&self.node_name).await {
                Ok(m) => m,
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    warn!(node = %self.node_name, "NodeMetric is gone; skipping this report");
                    return;
                }
                Err(e) if Refusal::of_client(&e) == Some(Refusal::Forbidden) => {
                    access.refuse(Refusal::Forbidden, &e);
                    return;
                }
                Err(e) => {
                    warn!(node = %self.node_name, error = %e, "cannot read the NodeMetric; skipping this report");
                    return;
                }
            };
            current.status = Some(status.clone());
            match api
                .replace_status(&self.node_name, &PostParams::default(), &current)
                .await
            {
                Ok(_) => {
                    access.served();
                    info!(node = %self.node_name, pods, "NodeMetric status reported");
                    return;
                }
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < CONFLICT_RETRIES => {
                    debug!(node = %self.node_name, attempt, "NodeMetric status conflicted; retrying");
                    tokio::time::sleep(Duration::from_millis(10 * 5u64.pow(attempt as u32 - 1)))
                        .await;
                }
                Err(e) if Refusal::of_client(&e) == Some(Refusal::Forbidden) => {
                    access.refuse(Refusal::Forbidden, &e);
                    return;
                }
                Err(e) => {
                    warn!(node = %self.node_name, error = %e, "cannot write the NodeMetric status; trying again next interval");
                    return;
                }
            }
        }
    }
}

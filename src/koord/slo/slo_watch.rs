//! koordlet's NodeSLO informer: a watch on this node's NodeSLO (koord-manager names
//! it after the node) turns its `resourceUsedThresholdWithBE` into the QoS manager's
//! configuration, with the strategies of `--node-slo-file`, and hands it over at once;
//! no restart. A NodeSLO with a field oxlet cannot use is refused, naming the field,
//! and the last good configuration stays; with no NodeSLO the file's applies. While the
//! apiserver refuses the watch (403, 404) the file's applies too, and the watch retries.

use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::access::{Access, Refusal};
use super::types::NodeSLO;
use crate::koord::host_apps::{self, HostApp};
use crate::koord::qosmanager::config::QosConfig;

/// Watches the NodeSLO and sends each configuration it makes.
pub(crate) struct NodeSloWatch {
    pub client: kube::Client,
    pub node_name: String,
    /// `--node-slo-file`'s configuration (or the defaults): the strategies, and what
    /// applies while there is no NodeSLO.
    pub base: QosConfig,
    pub tx: watch::Sender<QosConfig>,
    /// Where the NodeSLO's host applications go (the metric advisor), and
    /// `--node-slo-file`'s, kept when the NodeSLO is deleted.
    pub host_apps: watch::Sender<Vec<HostApp>>,
    pub base_host_apps: Vec<HostApp>,
}

impl NodeSloWatch {
    /// Runs until cancelled.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let api: Api<NodeSLO> = Api::all(self.client.clone());
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", self.node_name));
        // Any failure lists again (a new cluster has no history to resume from).
        let mut events = std::pin::pin!(crate::kubeclient::relisting_watcher(api, config));
        let mut access = Access::new("NodeSLO watch", &self.node_name);
        loop {
            let event = tokio::select! {
                () = cancel.cancelled() => return,
                event = events.next() => event,
            };
            match event {
                Some(Ok(Event::Apply(slo) | Event::InitApply(slo))) => self.apply(&slo),
                Some(Ok(Event::Delete(_))) => {
                    info!(node = %self.node_name, "NodeSLO deleted; the QoS manager goes back to --node-slo-file's thresholds");
                    self.send(self.base.clone());
                    self.send_host_apps(self.base_host_apps.clone());
                }
                Some(Ok(Event::InitDone)) => access.served(),
                Some(Ok(Event::Init)) => {}
                Some(Err(e)) => match Refusal::of_watch(&e) {
                    Some(refusal) => access.refuse(refusal, &e),
                    None => debug!(error = %e, "NodeSLO watch failed; retrying"),
                },
                None => return,
            }
        }
    }

    fn apply(&self, slo: &NodeSLO) {
        let (apps, errors) = host_apps::parse(slo.spec.host_applications.as_deref());
        for e in &errors {
            warn!(node = %self.node_name, error = %e, "NodeSLO host application refused; the others are kept");
        }
        self.send_host_apps(apps);
        let thresholds = slo.spec.resource_used_threshold_with_be.as_ref();
        let qos = slo.spec.resource_qos_strategy.as_ref();
        match QosConfig::from_slo(thresholds, self.base.strategies)
            .and_then(|c| c.with_resource_qos(qos))
        {
            Ok(cfg) if *self.tx.borrow() == cfg => {
                debug!(node = %self.node_name, "NodeSLO seen again; nothing changed");
            }
            Ok(cfg) => {
                info!(
                    node = %self.node_name,
                    enable = cfg.enable,
                    cpuSuppressThresholdPercent = cfg.cpu_suppress_threshold_percent,
                    memoryEvictThresholdPercent = cfg.memory_evict_threshold_percent,
                    "NodeSLO read; the QoS manager follows its thresholds"
                );
                self.send(cfg);
            }
            Err(e) => {
                warn!(node = %self.node_name, error = %e, "NodeSLO refused; the QoS manager keeps its last configuration");
            }
        }
    }

    fn send_host_apps(&self, apps: Vec<HostApp>) {
        self.host_apps.send_if_modified(|now| {
            let changed = *now != apps;
            *now = apps;
            changed
        });
    }

    fn send(&self, cfg: QosConfig) {
        self.tx.send_if_modified(|now| {
            let changed = *now != cfg;
            *now = cfg;
            changed
        });
    }
}

//! koordlet's NodeSLO informer: a watch on this node's NodeSLO (koord-manager names
//! it after the node) turns its strategies into the QoS manager's configuration, with
//! the switches of `--node-slo-file`, and hands it over at once; no restart. A value
//! out of koordinator's range drops only its strategy, named with the field, the
//! value and the range (`crate::koordapi`'s check); the others apply, and the same
//! skipped value is warned about once, not again at each relist. Until a NodeSLO
//! is seen the file's configuration applies; once one is, it stays when the NodeSLO
//! is deleted, as koordlet's informer keeps its last object. While the apiserver
//! refuses the watch (403, 404) the configuration in force stays too, and the watch
//! retries.

use futures::StreamExt as _;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::access::{Access, Refusal};
use super::warned::Warned;
use crate::koordapi::{
    HostApp, Kept, NodeSLO, QosConfig, Strategies, parse_host_apps, qos_config_from_spec,
};

/// Watches the NodeSLO and sends each configuration it makes.
pub(crate) struct NodeSloWatch {
    pub client: kube::Client,
    pub node_name: String,
    /// `--node-slo-file`'s switches (koordlet's feature gates), which no NodeSLO sets.
    pub strategies: Strategies,
    /// The configuration in force: what a dropped strategy keeps is read here.
    pub tx: watch::Sender<QosConfig>,
    /// Where the NodeSLO's host applications go (the metric advisor).
    pub host_apps: watch::Sender<Vec<HostApp>>,
}

impl NodeSloWatch {
    /// Runs until cancelled.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut warned = (Warned::default(), Warned::default());
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
                Some(Ok(Event::Apply(slo) | Event::InitApply(slo))) => {
                    self.apply(&slo, &mut warned);
                }
                Some(Ok(Event::Delete(_))) => {
                    info!(node = %self.node_name, "NodeSLO deleted; the last one applied is kept, as koordlet keeps it");
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

    fn apply(&self, slo: &NodeSLO, warned: &mut (Warned, Warned)) {
        self.apply_host_apps(slo.spec.host_applications.as_ref(), &mut warned.1);
        let prev = self.tx.borrow().clone();
        let (cfg, skipped) = qos_config_from_spec(&slo.spec, &prev, self.strategies);
        let keys: Vec<String> = (skipped.iter())
            .map(|s| {
                format!(
                    "{}/{}={}: {}",
                    s.strategy, s.error.field, s.error.value, s.error.reason
                )
            })
            .collect();
        for (s, fresh) in skipped.iter().zip(warned.0.renew(&keys)) {
            if !fresh {
                debug!(node = %self.node_name, strategy = s.strategy, field = s.error.field, "NodeSLO strategy still skipped (warned when first seen)");
                continue;
            }
            warn!(
                node = %self.node_name,
                strategy = s.strategy,
                field = s.error.field,
                value = %s.error.value,
                reason = %s.error.reason,
                then = s.kept.says(),
                "NodeSLO strategy skipped"
            );
        }
        if cfg == prev {
            debug!(node = %self.node_name, "NodeSLO seen again; nothing changed");
            return;
        }
        info!(
            node = %self.node_name,
            enable = cfg.enable,
            cpuSuppressThresholdPercent = cfg.cpu_suppress_threshold_percent,
            memoryEvictThresholdPercent = cfg.memory_evict.map_or(-1, |m| m.threshold_percent),
            skipped = skipped.len(),
            "NodeSLO read; the QoS manager follows its strategies"
        );
        self.send(cfg);
    }

    /// The NodeSLO's host applications, each checked on its own; a `hostApplications`
    /// that is no list keeps the previous ones.
    fn apply_host_apps(&self, raw: Option<&Value>, warned: &mut Warned) {
        let list = match raw {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => Some(a.as_slice()),
            Some(_) => {
                warn!(
                    node = %self.node_name,
                    strategy = "hostApplications",
                    field = "hostApplications",
                    reason = "is not a list",
                    then = Kept::Previous.says(),
                    "NodeSLO strategy skipped"
                );
                return;
            }
        };
        let (apps, errors) = parse_host_apps(list);
        let keys: Vec<String> = errors.iter().map(ToString::to_string).collect();
        for (e, fresh) in errors.iter().zip(warned.renew(&keys)) {
            if !fresh {
                debug!(node = %self.node_name, error = %e, "NodeSLO host application still refused (warned when first seen)");
                continue;
            }
            warn!(node = %self.node_name, error = %e, "NodeSLO host application refused; the others are kept");
        }
        self.send_host_apps(apps);
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

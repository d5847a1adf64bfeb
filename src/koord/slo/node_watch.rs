//! koordlet's node informer (`states_node.go`): a watch on this node's own Node
//! (field selector `metadata.name`), listed again after any failure with the
//! relisting watcher's back-off (0.8 s doubling to 30 s). What koordlet reads of it
//! ([`NodeInfo`]) is published on a `watch` channel each time it changes; a deleted
//! Node keeps its last reading, as koordlet's informer (no delete handler) keeps its
//! last object. A node's identity may get and watch its own Node (the Node
//! authorizer's rules), so no RBAC grant is needed.

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::access::Refusal;
use super::node::{CPU_NORMALIZATION_RATIO, Dropped, NodeInfo};
use super::warned::Warned;

/// What the QoS manager and the predictor read of the Node: None until it is read
/// (and always in standalone mode).
pub(crate) type NodeView = watch::Receiver<Option<NodeInfo>>;

/// Watches this node's Node and sends what koordlet reads of it.
pub(crate) struct NodeWatch {
    pub client: kube::Client,
    pub node_name: String,
    pub tx: watch::Sender<Option<NodeInfo>>,
}

impl NodeWatch {
    /// Runs until cancelled.
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let api: Api<Node> = Api::all(self.client.clone());
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", self.node_name));
        let mut events = std::pin::pin!(crate::kubeclient::relisting_watcher(api, config));
        let mut said = Warned::default();
        let mut failing = false;
        loop {
            let event = tokio::select! {
                () = cancel.cancelled() => return,
                event = events.next() => event,
            };
            match event {
                Some(Ok(Event::Apply(node) | Event::InitApply(node))) => {
                    self.apply(&node, &mut said);
                }
                Some(Ok(Event::Delete(_))) => {
                    info!(node = %self.node_name, "Node deleted; koordlet's reading of it (batch allocatable, annotations) is kept, as koordlet keeps it");
                }
                Some(Ok(Event::InitDone)) => {
                    if std::mem::take(&mut failing) {
                        info!(node = %self.node_name, "the Node watch is served again");
                    }
                }
                Some(Ok(Event::Init)) => {}
                Some(Err(e)) => {
                    // A refusal is said once until served again; a dropped connection
                    // (an apiserver restart) only at -v=4.
                    if Refusal::of_watch(&e).is_some() && !std::mem::replace(&mut failing, true) {
                        warn!(node = %self.node_name, error = %e, "the apiserver refuses this node's Node watch; koordlet's reading of the Node keeps its last value; retrying");
                    } else {
                        debug!(node = %self.node_name, error = %e, "Node watch failed; retrying");
                    }
                }
                None => return,
            }
        }
    }

    fn apply(&self, node: &Node, said: &mut Warned) {
        let (mut info, dropped) = NodeInfo::from_node(node);
        warn_new(said, &self.node_name, &dropped);
        // An unreadable ratio keeps the one in force: koordlet's batchresource fails
        // its rule update on it and keeps the last ratio (the other annotations read
        // as absent when unreadable, as koordlet's callers read them).
        if dropped.iter().any(|d| d.field == CPU_NORMALIZATION_RATIO) {
            info.cpu_normalization_ratio =
                (self.tx.borrow().as_ref()).and_then(|n| n.cpu_normalization_ratio);
        }
        self.tx.send_if_modified(|now| {
            if now.as_ref() == Some(&info) {
                return false;
            }
            info!(
                node = %self.node_name,
                batchCpu = info.batch_cpu.unwrap_or(-1),
                batchMemory = info.batch_memory.unwrap_or(-1),
                rawAllocatable = info.raw_allocatable.is_some(),
                reservedCpuMilli = info.reserved_cpu_milli(),
                cpuNormalizationRatio = info.cpu_normalization_ratio.unwrap_or(-1.0),
                "Node read; the QoS manager and the predictor follow it"
            );
            *now = Some(info);
            true
        });
    }
}

/// Warns of each dropped field not said with the same text at the last reading (a
/// Node update, every status heartbeat, would otherwise warn again); forgets those
/// that are readable again.
fn warn_new(said: &mut Warned, node: &str, dropped: &[Dropped]) {
    let keys: Vec<String> = (dropped.iter())
        .map(|d| format!("{}={}", d.field, d.value))
        .collect();
    for (d, fresh) in dropped.iter().zip(said.renew(&keys)) {
        if fresh {
            warn!(node, field = %d.field, value = %d.value, reason = %d.error, "a Node annotation or allocatable entry cannot be read; ignored, as koordlet ignores it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_annotation_is_said_once_per_text() {
        let d = |v: &str| Dropped {
            field: super::super::node::RESERVATION.into(),
            value: v.into(),
            error: super::super::node::NodeFieldError::NotANumber(v.into()),
        };
        let keys = |ds: &[Dropped]| -> Vec<String> {
            ds.iter()
                .map(|d| format!("{}={}", d.field, d.value))
                .collect()
        };
        let mut said = Warned::default();
        warn_new(&mut said, "n", &[d("x")]);
        assert_eq!(said.renew(&keys(&[d("x")])), [false], "the same text again");
        warn_new(&mut said, "n", &[]);
        assert_eq!(
            said.renew(&keys(&[d("x")])),
            [true],
            "readable again: a later bad text warns"
        );
    }
}

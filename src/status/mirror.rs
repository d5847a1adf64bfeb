//! Mirror pods (kubelet's `pod/mirror_client.go` and the mirror-pod steps of its
//! `SyncPod`/`HandlePodCleanups`): the apiserver's copy of each static pod, so the
//! cluster sees it. A reconciler: on each pass (on a poke and every period) it lists
//! the node's pods once and makes the mirror pods match the static pods:
//! created when missing, replaced when their `kubernetes.io/config.mirror` no longer
//! matches the static pod's hash or they are being deleted, deleted when their
//! static pod is gone. Nothing is created while the Node object does not exist,
//! since every mirror pod is owned by it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::apiserver::{config_hash, mirror_hash};
use crate::pod::PodManager;
use crate::pod::{CONFIG_MIRROR_ANNOTATION, is_static_pod, pod_full_name, pod_ref};

/// How many pods one pass reads from the node's list (the node's pod limit is far lower).
const MAX_LISTED: u32 = 5000;

/// Why a pass or one mirror pod failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MirrorError {
    #[error("{action} {target}: {source}")]
    Api {
        action: &'static str,
        target: String,
        #[source]
        source: kube::Error,
    },
}

fn api_err(action: &'static str, target: String) -> impl FnOnce(kube::Error) -> MirrorError {
    move |source| MirrorError::Api {
        action,
        target,
        source,
    }
}

/// What one pass did, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct PassReport {
    pub created: usize,
    pub deleted: usize,
    /// The Node object does not exist yet: nothing was created.
    pub no_node: bool,
}

/// The mirror pod reconciler of one node.
pub(crate) struct MirrorPods {
    client: kube::Client,
    pods: Arc<PodManager>,
    node_name: String,
    period: Duration,
    /// Shared with the sync loop, which pokes it when static or mirror pods change.
    wake: Arc<Notify>,
    /// Notified after a pass created a mirror pod, so the status writer writes its
    /// static pod's status at once (kubelet's syncPod does right after the create).
    created: Option<Arc<Notify>>,
    /// `true` once every pod source has reported (None: from the start). Until then an
    /// orphan may be a static pod not read yet, so orphans are left (kubelet's
    /// HandlePodCleanups waits for sourcesReady the same way).
    sources_ready: Option<watch::Receiver<bool>>,
}

impl MirrorPods {
    pub(crate) fn new(
        client: kube::Client,
        pods: Arc<PodManager>,
        node_name: String,
        period: Duration,
    ) -> Self {
        MirrorPods {
            client,
            pods,
            node_name,
            period,
            wake: Arc::new(Notify::new()),
            created: None,
            sources_ready: None,
        }
    }

    /// `created` is notified after each pass that created a mirror pod.
    pub(crate) fn with_created_hook(mut self, created: Arc<Notify>) -> Self {
        self.created = Some(created);
        self
    }

    /// Orphaned mirror pods are deleted only once `ready` says every source reported.
    pub(crate) fn with_sources_ready(mut self, ready: watch::Receiver<bool>) -> Self {
        self.sources_ready = Some(ready);
        self
    }

    /// Passes run on `wake` too (the sync loop's mirror hook), not only every period.
    pub(crate) fn with_wake(mut self, wake: Arc<Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// Asks for a pass now (the static pods or the mirror pods changed).
    #[cfg(test)]
    pub(crate) fn poke(&self) {
        self.wake.notify_one();
    }

    /// Runs passes until cancelled; a failed pass is logged and retried on the next.
    pub(crate) async fn run(&self, cancel: CancellationToken) {
        let mut ready = self.sources_ready.clone();
        loop {
            let result = self.pass().await;
            if let (Ok(r), Some(created)) = (&result, &self.created)
                && r.created > 0
            {
                created.notify_one();
            }
            match result {
                Ok(r) if r.created + r.deleted > 0 => {
                    debug!(
                        created = r.created,
                        deleted = r.deleted,
                        "mirror pods reconciled"
                    );
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "mirror pod pass failed; retrying"),
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = self.wake.notified() => {}
                // Every source has reported: the orphans left so far are due now.
                Some(()) = became_ready(ready.as_mut()) => {}
                () = tokio::time::sleep(self.period) => {}
            }
        }
    }

    /// One reconcile pass. Errors about one mirror pod are logged and the pass goes on;
    /// only failing to read the node or its pods ends it early.
    pub(crate) async fn pass(&self) -> Result<PassReport, MirrorError> {
        let mut report = PassReport::default();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = nodes
            .get_opt(&self.node_name)
            .await
            .map_err(api_err("get node", self.node_name.clone()))?;
        let all: Api<Pod> = Api::all(self.client.clone());
        let listed = all
            .list(
                &ListParams::default()
                    .fields(&format!("spec.nodeName={}", self.node_name))
                    .limit(MAX_LISTED),
            )
            .await
            .map_err(api_err("list pods of node", self.node_name.clone()))?;
        let mut mirrors: HashMap<String, Pod> = listed
            .items
            .into_iter()
            .filter(|p| mirror_hash(p).is_some())
            .map(|p| (pod_full_name(&p), p))
            .collect();
        for pod in self.pods.all().iter().filter(|p| is_static_pod(p)) {
            let existing = mirrors.remove(&pod_full_name(pod));
            if let Some(m) = &existing {
                let current = mirror_hash(m) == Some(config_hash(pod))
                    && m.metadata.deletion_timestamp.is_none();
                if current {
                    continue;
                }
                match self.delete(m).await {
                    Ok(()) => report.deleted += 1,
                    Err(e) => {
                        warn!(pod = %pod_ref(pod), error = %e, "cannot delete the outdated mirror pod");
                        continue;
                    }
                }
            }
            let Some(node) = &node else {
                report.no_node = true;
                continue;
            };
            match self.create(pod, node).await {
                Ok(()) => report.created += 1,
                Err(e) => warn!(pod = %pod_ref(pod), error = %e, "cannot create the mirror pod"),
            }
        }
        // What is left has no static pod any more (kubelet's orphaned mirror pods),
        // or one whose source has not reported yet.
        let ready = self.sources_ready.as_ref().is_none_or(|r| *r.borrow());
        if !ready && !mirrors.is_empty() {
            debug!(
                orphans = mirrors.len(),
                "orphaned mirror pods wait until every pod source has reported"
            );
            mirrors.clear();
        }
        for m in mirrors.values() {
            match self.delete(m).await {
                Ok(()) => report.deleted += 1,
                Err(e) => {
                    warn!(pod = %pod_ref(m), error = %e, "cannot delete the orphaned mirror pod");
                }
            }
        }
        if report.no_node {
            debug!(node = %self.node_name, "no Node object yet; mirror pods wait for it");
        }
        Ok(report)
    }

    async fn create(&self, pod: &Pod, node: &Node) -> Result<(), MirrorError> {
        let mirror = mirror_of(pod, node);
        let ns = mirror.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        match api.create(&PostParams::default(), &mirror).await {
            Ok(_) => {
                info!(pod = %pod_ref(pod), "mirror pod created");
                Ok(())
            }
            // Created meanwhile (by an earlier pass whose answer was lost): the next
            // pass compares it like any other.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(api_err("create mirror pod", pod_ref(pod))(e)),
        }
    }

    /// kubelet's `DeleteMirrorPod`: grace 0, with the mirror pod's UID as precondition,
    /// so a mirror pod re-created meanwhile is not deleted by mistake.
    async fn delete(&self, mirror: &Pod) -> Result<(), MirrorError> {
        let ns = mirror.metadata.namespace.as_deref().unwrap_or("default");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: mirror.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        let name = mirror.metadata.name.as_deref().unwrap_or("");
        match api.delete(name, &params).await {
            Ok(_) => {
                info!(pod = %pod_ref(mirror), "mirror pod deleted");
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(api_err("delete mirror pod", pod_ref(mirror))(e)),
        }
    }
}

/// Resolves when the sources' readiness changes; never without a receiver, and None
/// once its sender is gone.
async fn became_ready(ready: Option<&mut watch::Receiver<bool>>) -> Option<()> {
    match ready {
        Some(r) => r.changed().await.ok(),
        None => std::future::pending().await,
    }
}

/// The mirror pod of `pod` (kubelet's `CreateMirrorPod`): its name, namespace, labels
/// and spec; its annotations plus `kubernetes.io/config.mirror` = its hash; owned by
/// the Node.
pub(crate) fn mirror_of(pod: &Pod, node: &Node) -> Pod {
    let mut annotations: BTreeMap<String, String> =
        pod.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(
        CONFIG_MIRROR_ANNOTATION.to_string(),
        config_hash(pod).to_string(),
    );
    Pod {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: Some(
                pod.metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
            ),
            labels: pod.metadata.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node.metadata.name.clone().unwrap_or_default(),
                uid: node.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: pod.spec.clone(),
        status: None,
    }
}

#[cfg(test)]
#[path = "mirror_tests.rs"]
mod tests;

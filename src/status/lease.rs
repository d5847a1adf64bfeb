//! The node lease (kubelet's `nodelease` with component-helpers' lease controller):
//! a `coordination.k8s.io/v1` Lease in `kube-node-lease`, named and held by the
//! node, renewed every quarter of its duration so the node controller knows the
//! node is alive even when its status does not change. Created when missing (and
//! again if deleted), owned by the Node once its UID is known; a failed renewal
//! backs off from 200 ms doubling to 7 s, and nothing here panics or stops the agent.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::tasks::Backoff;

/// kubelet's lease namespace.
pub(crate) const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Retries after a failed renewal: 200 ms doubling to kubelet's `maxBackoff` of 7 s.
const RETRY: Backoff = Backoff {
    initial: Duration::from_millis(200),
    max: Duration::from_secs(7),
};
/// Conflicts retried at once before the attempt counts as failed.
const CONFLICT_RETRIES: usize = 5;

/// The Node the lease belongs to: its name and UID (for the owner reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeRef {
    pub name: String,
    pub uid: String,
}

/// Renews one node's lease.
pub(crate) struct LeaseController {
    api: Api<Lease>,
    node: String,
    duration_secs: i32,
    owner: watch::Receiver<Option<NodeRef>>,
}

impl LeaseController {
    /// `owner` carries the Node's UID once it is registered (and again when it is
    /// registered anew).
    pub(crate) fn new(
        client: kube::Client,
        node: &str,
        duration: Duration,
        owner: watch::Receiver<Option<NodeRef>>,
    ) -> Self {
        LeaseController {
            api: Api::namespaced(client, LEASE_NAMESPACE),
            node: node.into(),
            duration_secs: i32::try_from(duration.as_secs()).unwrap_or(i32::MAX).max(1),
            owner,
        }
    }

    /// kubelet's renew interval: a quarter of the lease duration.
    pub(crate) fn renew_interval(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.duration_secs).unwrap_or(1) * 250)
    }

    fn owner_refs(&self) -> Option<Vec<OwnerReference>> {
        let owner = self.owner.borrow().clone()?;
        Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: owner.name,
            uid: owner.uid,
            ..Default::default()
        }])
    }

    /// Sets holder, duration, renew time and (when known) the owner on `lease`.
    fn fill(&self, lease: &mut Lease) {
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.node.clone());
        spec.lease_duration_seconds = Some(self.duration_secs);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        if let Some(refs) = self.owner_refs() {
            lease.metadata.owner_references = Some(refs);
        }
    }

    /// One renewal: GET, then PUT with a fresh renew time (optimistic locking); a
    /// missing lease is created, a conflict re-reads and tries again.
    pub(crate) async fn renew_once(&self) -> Result<Lease, kube::Error> {
        let mut last = None;
        for _ in 0..CONFLICT_RETRIES {
            let result = match self.api.get_opt(&self.node).await? {
                None => {
                    let mut lease = Lease {
                        metadata: ObjectMeta {
                            name: Some(self.node.clone()),
                            namespace: Some(LEASE_NAMESPACE.into()),
                            ..Default::default()
                        },
                        spec: None,
                    };
                    self.fill(&mut lease);
                    let r = self.api.create(&PostParams::default(), &lease).await;
                    if r.is_ok() {
                        info!(node = %self.node, "created the node lease");
                    }
                    r
                }
                Some(mut lease) => {
                    self.fill(&mut lease);
                    self.api
                        .replace(&self.node, &PostParams::default(), &lease)
                        .await
                }
            };
            match result {
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    debug!(node = %self.node, "lease conflict; reading it again");
                    last = Some(kube::Error::Api(e));
                }
                other => return other,
            }
        }
        Err(last.unwrap_or_else(|| kube::Error::Service("lease conflict retries exhausted".into())))
    }

    /// Renews until `cancel`: every [`Self::renew_interval`], or sooner after a failure
    /// (200 ms doubling to 7 s).
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut backoff = RETRY.initial;
        loop {
            let wait = match self.renew_once().await {
                Ok(_) => {
                    backoff = RETRY.initial;
                    self.renew_interval()
                }
                Err(e) => {
                    warn!(node = %self.node, error = %e, retryIn = %crate::duration::format_go_duration(backoff), "failed to renew the node lease");
                    let w = backoff;
                    backoff = RETRY.after(backoff);
                    w
                }
            };
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn server() -> (tempfile::TempDir, testapi::TestApiServer, kube::Client) {
        let dir = tempfile::tempdir().unwrap();
        let srv = testapi::TestApiServer::start(dir.path()).await.unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(srv.kubeconfig()).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(cfg).unwrap();
        (dir, srv, client)
    }

    #[tokio::test]
    async fn creates_renews_and_recreates_the_lease() {
        let (_d, srv, client) = server().await;
        let (tx, rx) = watch::channel(None);
        let c = LeaseController::new(client, "n1", Duration::from_secs(40), rx);
        assert_eq!(c.renew_interval(), Duration::from_secs(10));
        let first = c.renew_once().await.unwrap();
        let spec = first.spec.clone().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert!(first.metadata.owner_references.is_none());
        tx.send_replace(Some(NodeRef {
            name: "n1".into(),
            uid: "u-1".into(),
        }));
        let second = c.renew_once().await.unwrap();
        assert!(second.spec.unwrap().renew_time.unwrap().0 >= spec.renew_time.unwrap().0);
        let stored: Lease = srv.get(LEASE_NAMESPACE, "n1").unwrap().unwrap();
        let owner = &stored.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "n1", "u-1")
        );
        assert!(srv.remove::<Lease>(LEASE_NAMESPACE, "n1").unwrap());
        c.renew_once().await.unwrap();
        assert!(srv.get::<Lease>(LEASE_NAMESPACE, "n1").unwrap().is_some());
    }

    #[tokio::test]
    async fn a_conflicting_write_is_retried_with_a_fresh_read() {
        let (_d, srv, client) = server().await;
        let (_tx, rx) = watch::channel(None);
        let c = LeaseController::new(client, "n2", Duration::from_secs(40), rx);
        c.renew_once().await.unwrap();
        // Another writer bumps the resourceVersion between our GET and PUT: simulate
        // by replacing it directly and then renewing from a stale copy.
        let stale: Lease = srv.get(LEASE_NAMESPACE, "n2").unwrap().unwrap();
        let mut other = stale.clone();
        other.spec.as_mut().unwrap().holder_identity = Some("someone-else".into());
        srv.put(&other).unwrap();
        let mut from_stale = stale.clone();
        c.fill(&mut from_stale);
        let err = c
            .api
            .replace("n2", &PostParams::default(), &from_stale)
            .await
            .unwrap_err();
        assert!(
            matches!(err, kube::Error::Api(ref e) if e.code == 409),
            "{err}"
        );
        let renewed = c.renew_once().await.unwrap();
        assert_eq!(renewed.spec.unwrap().holder_identity.as_deref(), Some("n2"));
    }
}

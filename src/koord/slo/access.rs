//! When the apiserver will not serve this node's koordinator objects: a 403 (RBAC
//! grants a kubelet's identity, `system:node:<name>`, nothing of slo.koordinator.sh
//! until `deploy/koordlet-rbac.yaml` is applied; the Node authorizer does not cover
//! it) or a 404 (koordinator's CRDs are not installed). Each watch and write keeps
//! one [`Access`]: a refusal is said once at warning level with what to do, its
//! repeats only at -v=4 (every retry would otherwise warn, with back-off, forever),
//! and the recovery is said at info.

use kube::runtime::watcher;
use tracing::{debug, info, warn};

/// Why the apiserver would not serve a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// 403: no RBAC grant for this node's identity.
    Forbidden,
    /// 404 on a collection: the resource is not served (no CRD).
    NotServed,
}

impl Refusal {
    fn of_code(code: u16) -> Option<Refusal> {
        match code {
            403 => Some(Refusal::Forbidden),
            404 => Some(Refusal::NotServed),
            _ => None,
        }
    }

    /// The refusal in a watch's error (its list or its watch request).
    pub(super) fn of_watch(e: &watcher::Error) -> Option<Refusal> {
        match e {
            watcher::Error::InitialListFailed(e)
            | watcher::Error::WatchStartFailed(e)
            | watcher::Error::WatchFailed(e) => Refusal::of_client(e),
            watcher::Error::WatchError(s) => Refusal::of_code(s.code),
            watcher::Error::NoResourceVersion => None,
        }
    }

    /// The 403 in a client error. A 404 on a named object means the object is gone,
    /// not the resource, so only a watch's list says [`Refusal::NotServed`].
    pub(super) fn of_client(e: &kube::Error) -> Option<Refusal> {
        match e {
            kube::Error::Api(s) => Refusal::of_code(s.code),
            _ => None,
        }
    }
}

/// One watch's or write's refusals, said once each.
pub(super) struct Access {
    /// What is refused, as the log says it (`NodeSLO watch`).
    what: &'static str,
    node: String,
    refused: Option<Refusal>,
}

impl Access {
    pub(super) fn new(what: &'static str, node: &str) -> Access {
        Access {
            what,
            node: node.to_owned(),
            refused: None,
        }
    }

    /// The refusal in force (None: served, or never asked yet).
    pub(super) fn refused(&self) -> Option<Refusal> {
        self.refused
    }

    /// Says `refusal`: at warning level the first time in a row, at -v=4 after.
    pub(super) fn refuse(&mut self, refusal: Refusal, error: &dyn std::fmt::Display) {
        let first = self.refused != Some(refusal);
        self.refused = Some(refusal);
        let (node, what) = (&self.node, self.what);
        match (refusal, first) {
            (Refusal::Forbidden, true) => warn!(
                node = %node, access = what, error = %error,
                "the apiserver refuses this node's {what} (403): RBAC does not grant it to the node's identity (group system:nodes) on slo.koordinator.sh; apply deploy/koordlet-rbac.yaml (kubectl apply -f deploy/koordlet-rbac.yaml); retrying"
            ),
            (Refusal::NotServed, true) => warn!(
                node = %node, access = what, error = %error,
                "the apiserver does not serve this node's {what} (404): install koordinator's CRDs (slo.koordinator.sh NodeSLO and NodeMetric); retrying"
            ),
            (_, false) => debug!(
                node = %node, access = what, error = %error,
                "{what} still refused by the apiserver; retrying"
            ),
        }
    }

    /// The request was served: says so if it had been refused.
    pub(super) fn served(&mut self) {
        if let Some(was) = self.refused.take() {
            let was = match was {
                Refusal::Forbidden => "403",
                Refusal::NotServed => "404",
            };
            info!(node = %self.node, access = self.what, was, "the apiserver serves this node's {} again", self.what);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }))
    }

    #[test]
    fn a_403_or_404_in_a_watch_is_a_refusal() {
        let list = watcher::Error::InitialListFailed(api(403));
        assert_eq!(Refusal::of_watch(&list), Some(Refusal::Forbidden));
        let start = watcher::Error::WatchStartFailed(api(404));
        assert_eq!(Refusal::of_watch(&start), Some(Refusal::NotServed));
        assert_eq!(
            Refusal::of_watch(&watcher::Error::InitialListFailed(api(500))),
            None
        );
        assert_eq!(Refusal::of_watch(&watcher::Error::NoResourceVersion), None);
    }

    #[test]
    fn a_refusal_is_kept_until_served() {
        let mut a = Access::new("NodeSLO watch", "n1");
        assert_eq!(a.refused(), None);
        a.refuse(Refusal::Forbidden, &"403");
        a.refuse(Refusal::Forbidden, &"403");
        assert_eq!(a.refused(), Some(Refusal::Forbidden));
        a.refuse(Refusal::NotServed, &"404");
        assert_eq!(a.refused(), Some(Refusal::NotServed));
        a.served();
        assert_eq!(a.refused(), None);
    }
}

//! Pod admission (kubelet's `lifecycle.PodAdmitHandler`): the additions handler asks
//! an ordered chain of handlers whether a new pod may run here; the first rejection
//! wins. `agent/runtime.rs` builds kubelet's order: the sysctl allowlist
//! (`sysctl_admission.rs`), `maxPods`, then resource fit (`cm::fit`); the eviction
//! manager (pressure) will add its handler to the same chain.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::OUT_OF_PODS;

/// What a handler sees (kubelet's `PodAdmitAttributes`): the pod asking, and the
/// pods already admitted and not finished.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PodAdmitAttributes<'a> {
    pub pod: &'a Pod,
    pub other_pods: &'a [Arc<Pod>],
}

/// Why a pod may not run here: kubelet's `PodAdmitResult` with `admit: false`. The
/// reason (e.g. `OutOfpods`) and message go into the rejected pod's status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub(crate) struct Rejection {
    pub reason: String,
    pub message: String,
}

/// One admission check. Handlers must be quick and must not block: they run inside
/// the sync loop, once per added pod.
pub(crate) trait PodAdmitHandler: Send + Sync {
    /// A short name for logs.
    fn name(&self) -> &'static str;
    /// `Ok` admits; `Err` rejects with kubelet's reason and message.
    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection>;
}

/// The handlers, asked in order (kubelet's `admitHandlers`).
#[derive(Default)]
pub(crate) struct AdmissionChain {
    handlers: Vec<Box<dyn PodAdmitHandler>>,
}

impl std::fmt::Debug for AdmissionChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.handlers.iter().map(|h| h.name()).collect();
        f.debug_struct("AdmissionChain")
            .field("handlers", &names)
            .finish()
    }
}

impl AdmissionChain {
    /// A chain with only the `maxPods` check (the agent's is built in `agent/runtime.rs`).
    #[cfg(test)]
    pub(crate) fn standard(max_pods: u32) -> Self {
        let mut chain = AdmissionChain::default();
        chain.push(Box::new(MaxPods { capacity: max_pods }));
        chain
    }

    /// Appends a handler; it is asked after those already in the chain.
    pub(crate) fn push(&mut self, handler: Box<dyn PodAdmitHandler>) {
        self.handlers.push(handler);
    }

    /// Asks each handler in order; the first rejection is the answer (kubelet's
    /// `canAdmitPod`).
    pub(crate) fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
        self.handlers.iter().try_for_each(|h| h.admit(attrs))
    }
}

/// The node's pod capacity (`maxPods`): the pods part of kubelet's resource-fit
/// predicate, with its reason and message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MaxPods {
    pub capacity: u32,
}

impl PodAdmitHandler for MaxPods {
    fn name(&self) -> &'static str {
        "maxPods"
    }

    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
        let used = attrs.other_pods.len();
        if used < self.capacity as usize {
            return Ok(());
        }
        Err(Rejection {
            reason: OUT_OF_PODS.to_string(),
            message: format!(
                "Node didn't have enough resource: pods, requested: 1, used: {used}, capacity: {}",
                self.capacity
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fake::support::pod;

    fn pods(n: usize) -> Vec<Arc<Pod>> {
        (0..n)
            .map(|i| Arc::new(pod(&format!("p{i}"), &[], &["app"], "Always")))
            .collect()
    }

    /// Rejects every pod with its own reason, and counts how often it was asked.
    struct Refuse(&'static str, std::sync::atomic::AtomicUsize);

    impl PodAdmitHandler for Refuse {
        fn name(&self) -> &'static str {
            self.0
        }
        fn admit(&self, _: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(Rejection {
                reason: self.0.into(),
                message: format!("refused by {}", self.0),
            })
        }
    }

    #[test]
    fn max_pods_admits_below_capacity_and_rejects_at_it_with_kubelets_message() {
        let new = pod("new", &[], &["app"], "Always");
        let handler = MaxPods { capacity: 2 };
        let others = pods(1);
        let attrs = PodAdmitAttributes {
            pod: &new,
            other_pods: &others,
        };
        assert_eq!(handler.admit(&attrs), Ok(()));
        let others = pods(2);
        let attrs = PodAdmitAttributes {
            pod: &new,
            other_pods: &others,
        };
        assert_eq!(
            handler.admit(&attrs),
            Err(Rejection {
                reason: "OutOfpods".into(),
                message:
                    "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"
                        .into(),
            })
        );
        let none = MaxPods { capacity: 0 };
        assert!(
            none.admit(&PodAdmitAttributes {
                pod: &new,
                other_pods: &[],
            })
            .is_err()
        );
    }

    #[test]
    fn the_first_rejection_wins_and_later_handlers_are_not_asked() {
        let new = pod("new", &[], &["app"], "Always");
        let mut chain = AdmissionChain::standard(1);
        chain.push(Box::new(Refuse("First", Default::default())));
        chain.push(Box::new(Refuse("Second", Default::default())));
        let others = pods(0);
        let attrs = PodAdmitAttributes {
            pod: &new,
            other_pods: &others,
        };
        // maxPods admits (0 < 1); the first refusing handler answers.
        assert_eq!(chain.admit(&attrs).unwrap_err().reason, "First");
        let others = pods(1);
        let attrs = PodAdmitAttributes {
            pod: &new,
            other_pods: &others,
        };
        // maxPods now rejects first.
        assert_eq!(chain.admit(&attrs).unwrap_err().reason, "OutOfpods");
        assert_eq!(
            format!("{chain:?}"),
            r#"AdmissionChain { handlers: ["maxPods", "First", "Second"] }"#
        );
    }

    #[test]
    fn an_empty_chain_admits_and_handlers_run_in_order() {
        let new = pod("new", &[], &["app"], "Always");
        let attrs = PodAdmitAttributes {
            pod: &new,
            other_pods: &[],
        };
        assert_eq!(AdmissionChain::default().admit(&attrs), Ok(()));
        let first = Arc::new(Refuse("A", Default::default()));
        struct Shared(Arc<Refuse>);
        impl PodAdmitHandler for Shared {
            fn name(&self) -> &'static str {
                self.0.name()
            }
            fn admit(&self, a: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
                self.0.admit(a)
            }
        }
        let second = Arc::new(Refuse("B", Default::default()));
        let mut chain = AdmissionChain::default();
        chain.push(Box::new(Shared(first.clone())));
        chain.push(Box::new(Shared(second.clone())));
        assert_eq!(chain.admit(&attrs).unwrap_err().reason, "A");
        assert_eq!(first.1.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(second.1.load(std::sync::atomic::Ordering::Relaxed), 0);
    }
}

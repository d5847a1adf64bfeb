//! `maxPods`, the sync loop's own admission handler (the pods part of kubelet's
//! resource-fit predicate). The chain and its trait are in `contracts::admission`.

use super::OUT_OF_PODS;
use crate::contracts::{PodAdmitAttributes, PodAdmitHandler, Rejection};

#[cfg(test)]
impl crate::contracts::AdmissionChain {
    /// A chain with only the `maxPods` check (the agent's is built in `agent/runtime.rs`).
    pub(crate) fn standard(max_pods: u32) -> Self {
        let mut chain = Self::default();
        chain.push(Box::new(MaxPods { capacity: max_pods }));
        chain
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
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::contracts::AdmissionChain;
    use crate::cri::support::pod;

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

//! Resource-fit admission (the resources part of kubelet's `GeneralPredicates`
//! in `lifecycle/predicate.go`): a pod whose requests do not fit what is left of
//! the node's allocatable is rejected with `OutOfcpu`, `OutOfmemory` or
//! `OutOfephemeral-storage`. The pods part (`OutOfpods`) is the `maxPods`
//! handler; add this one after it (`AdmissionChain::standard(max_pods)` then
//! [`AdmissionChain::push`]), so the reasons come in kubelet's order.
//!
//! [`AdmissionChain::push`]: crate::contracts::AdmissionChain::push

use super::allocatable::NodeResources;
use super::resources::{PodResources, pod_requests};
use crate::contracts::{PodAdmitAttributes, PodAdmitHandler, Rejection};

/// kubelet's reason when admission fails for a reason it did not expect.
const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";

/// The check, against the node's allocatable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResourceFit {
    pub allocatable: NodeResources,
}

impl PodAdmitHandler for ResourceFit {
    fn name(&self) -> &'static str {
        "resourceFit"
    }

    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
        let wanted = pod_requests(attrs.pod).map_err(|e| Rejection {
            reason: UNEXPECTED_ADMISSION_ERROR.to_string(),
            message: format!("cannot read the pod's resource requests: {e}"),
        })?;
        // The pods already admitted; one whose requests cannot be read (manifest
        // validation refuses those) counts nothing.
        let mut used = PodResources::default();
        for p in attrs.other_pods {
            if let Ok(r) = pod_requests(p) {
                used.cpu_milli = Some(sum(used.cpu_milli, r.cpu_milli));
                used.memory_bytes = Some(sum(used.memory_bytes, r.memory_bytes));
                used.ephemeral_storage_bytes =
                    Some(sum(used.ephemeral_storage_bytes, r.ephemeral_storage_bytes));
            }
        }
        let a = &self.allocatable;
        // The scheduler's order: cpu, memory, ephemeral-storage; the first wins.
        for (name, requested, used, capacity) in [
            ("cpu", wanted.cpu_milli, used.cpu_milli, a.cpu_milli),
            (
                "memory",
                wanted.memory_bytes,
                used.memory_bytes,
                a.memory_bytes,
            ),
            (
                "ephemeral-storage",
                wanted.ephemeral_storage_bytes,
                used.ephemeral_storage_bytes,
                a.ephemeral_storage_bytes,
            ),
        ] {
            let requested = requested.unwrap_or(0);
            let used = used.unwrap_or(0);
            // Only a positive request is checked, as the scheduler's `fitsRequest`.
            if requested > 0 && requested > capacity.saturating_sub(used) {
                return Err(Rejection {
                    reason: format!("OutOf{name}"),
                    message: format!(
                        "Node didn't have enough resource: {name}, requested: {requested}, \
                         used: {used}, capacity: {capacity}"
                    ),
                });
            }
        }
        Ok(())
    }
}

fn sum(a: Option<i64>, b: Option<i64>) -> i64 {
    a.unwrap_or(0).saturating_add(b.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::cm::resources::tests::{container, pod_of};
    use crate::contracts::AdmissionChain;

    const MI: i64 = 1 << 20;

    fn fit() -> ResourceFit {
        ResourceFit {
            allocatable: NodeResources {
                cpu_milli: 2000,
                memory_bytes: 1024 * MI,
                ephemeral_storage_bytes: 10 * 1024 * MI,
                pods: 110,
            },
        }
    }

    fn asking(reqs: &[(&str, &str)]) -> Pod {
        pod_of(vec![container("app", reqs, &[])], vec![])
    }

    fn admit(h: &ResourceFit, new: &Pod, others: &[Arc<Pod>]) -> Result<(), Rejection> {
        h.admit(&PodAdmitAttributes {
            pod: new,
            other_pods: others,
        })
    }

    #[test]
    fn out_of_cpu_with_kubelets_message() {
        let others = vec![Arc::new(asking(&[("cpu", "600m")]))];
        assert_eq!(admit(&fit(), &asking(&[("cpu", "1400m")]), &others), Ok(()));
        assert_eq!(
            admit(&fit(), &asking(&[("cpu", "1500m")]), &others),
            Err(Rejection {
                reason: "OutOfcpu".into(),
                message: "Node didn't have enough resource: cpu, requested: 1500, used: 600, capacity: 2000"
                    .into(),
            })
        );
    }

    #[test]
    fn out_of_memory_and_ephemeral_storage_in_bytes() {
        let others = vec![
            Arc::new(asking(&[("memory", "512Mi")])),
            Arc::new(asking(&[("memory", "256Mi"), ("ephemeral-storage", "9Gi")])),
        ];
        assert_eq!(
            admit(&fit(), &asking(&[("memory", "300Mi")]), &others),
            Err(Rejection {
                reason: "OutOfmemory".into(),
                message: format!(
                    "Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                    300 * MI,
                    768 * MI,
                    1024 * MI
                ),
            })
        );
        assert_eq!(
            admit(&fit(), &asking(&[("memory", "256Mi")]), &others),
            Ok(())
        );
        let err = admit(&fit(), &asking(&[("ephemeral-storage", "2Gi")]), &others).unwrap_err();
        assert_eq!(err.reason, "OutOfephemeral-storage");
        assert_eq!(
            err.message,
            format!(
                "Node didn't have enough resource: ephemeral-storage, requested: {}, used: {}, capacity: {}",
                2048 * MI,
                9216 * MI,
                10240 * MI
            )
        );
    }

    #[test]
    fn cpu_is_reported_before_memory_and_zero_requests_always_fit() {
        let full = vec![Arc::new(asking(&[("cpu", "2"), ("memory", "1Gi")]))];
        let err = admit(&fit(), &asking(&[("cpu", "1m"), ("memory", "1")]), &full).unwrap_err();
        assert_eq!(err.reason, "OutOfcpu");
        // A BestEffort pod asks for nothing and fits a full node.
        assert_eq!(admit(&fit(), &asking(&[]), &full), Ok(()));
    }

    #[test]
    fn limits_only_count_as_requests_and_overhead_counts() {
        let mut p = pod_of(vec![container("app", &[], &[("cpu", "1500m")])], vec![]);
        let others = vec![Arc::new(asking(&[("cpu", "400m")]))];
        assert_eq!(admit(&fit(), &p, &others), Ok(()));
        p.spec.as_mut().unwrap().overhead = Some(
            [(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("200m".into()),
            )]
            .into(),
        );
        assert_eq!(admit(&fit(), &p, &others).unwrap_err().reason, "OutOfcpu");
    }

    #[test]
    fn unreadable_requests_are_an_unexpected_admission_error() {
        let bad = asking(&[("ephemeral-storage", "lots")]);
        let err = admit(&fit(), &bad, &[]).unwrap_err();
        assert_eq!(err.reason, "UnexpectedAdmissionError");
        assert!(
            err.message.contains("resources.requests.ephemeral-storage"),
            "{err}"
        );
        // As another pod, it counts nothing.
        assert_eq!(
            admit(&fit(), &asking(&[("cpu", "2")]), &[Arc::new(bad)]),
            Ok(())
        );
    }

    #[test]
    fn in_the_chain_after_max_pods() {
        let mut chain = AdmissionChain::standard(1);
        chain.push(Box::new(fit()));
        let others = vec![Arc::new(asking(&[("cpu", "2")]))];
        let attrs = PodAdmitAttributes {
            pod: &asking(&[("cpu", "1")]),
            other_pods: &others,
        };
        // Both would refuse: maxPods, asked first, answers.
        assert_eq!(chain.admit(&attrs).unwrap_err().reason, "OutOfpods");
        let mut chain = AdmissionChain::standard(2);
        chain.push(Box::new(fit()));
        assert_eq!(chain.admit(&attrs).unwrap_err().reason, "OutOfcpu");
    }
}

//! Resource-fit admission (the resources part of kubelet's `GeneralPredicates`
//! in `lifecycle/predicate.go`): a pod whose requests do not fit what is left of
//! the node's allocatable is rejected with `OutOfcpu`, `OutOfmemory` or
//! `OutOfephemeral-storage`. The pods part (`OutOfpods`) is the `maxPods`
//! handler; add this one after it (`AdmissionChain::standard(max_pods)` then
//! [`AdmissionChain::push`]), so the reasons come in kubelet's order.
//!
//! [`AdmissionChain::push`]: crate::contracts::AdmissionChain::push

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::allocatable::NodeResources;
use super::resources::{PodResources, pod_requests};
use crate::contracts::{
    ExtendedResourceSource, ExtendedResources, PodAdmitAttributes, PodAdmitHandler, Rejection,
};

/// kubelet's reason when admission fails for a reason it did not expect.
const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";

/// The check, against the node's allocatable and, with device plugins, their
/// resources.
#[derive(Clone)]
pub(crate) struct ResourceFit {
    pub allocatable: NodeResources,
    /// The device plugin resources (None: no device manager).
    pub extended: Option<Arc<dyn ExtendedResourceSource>>,
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
                return Err(out_of(name, requested, used, capacity));
            }
        }
        match &self.extended {
            Some(source) => fits_extended(attrs, &source.extended_resources()),
            None => Ok(()),
        }
    }
}

/// kubelet's `InsufficientResource` rejection.
fn out_of(name: &str, requested: i64, used: i64, capacity: i64) -> Rejection {
    Rejection {
        reason: format!("OutOf{name}"),
        message: format!(
            "Node didn't have enough resource: {name}, requested: {requested}, \
             used: {used}, capacity: {capacity}"
        ),
    }
}

/// The device plugin resources' part: a resource the node does not know is left out
/// (kubelet's `removeMissingExtendedResources`: it may be a cluster-level resource);
/// a known one's allocatable is never less than what pods hold of it.
fn fits_extended(
    attrs: &PodAdmitAttributes<'_>,
    node: &ExtendedResources,
) -> Result<(), Rejection> {
    let wanted = extended_requests(attrs.pod);
    if wanted.is_empty() {
        return Ok(());
    }
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    for p in attrs.other_pods {
        for (name, n) in extended_requests(p) {
            *used.entry(name).or_default() += n;
        }
    }
    for (name, requested) in wanted {
        let Some(&allocatable) = node.allocatable.get(&name) else {
            continue;
        };
        let held = node.allocated.get(&name).copied().unwrap_or(0);
        let capacity = allocatable.max(held);
        let used = used.get(&name).copied().unwrap_or(0);
        if requested > 0 && requested > capacity.saturating_sub(used) {
            return Err(out_of(&name, requested, used, capacity));
        }
    }
    Ok(())
}

/// kubelet's `IsExtendedResourceName`: a qualified name outside `kubernetes.io/`, not
/// a quota name (`requests.`) and not a huge page size.
pub(crate) fn is_extended_resource(name: &str) -> bool {
    name.contains('/')
        && !name.contains("kubernetes.io/")
        && !name.starts_with("requests.")
        && !name.starts_with("hugepages-")
}

/// The pod's extended resource requests (kubelet's `PodRequests` for scalar
/// resources): its regular containers and sidecars together, or its largest init
/// container with the sidecars started before it, whichever is more.
pub(crate) fn extended_requests(pod: &Pod) -> BTreeMap<String, i64> {
    let Some(spec) = pod.spec.as_ref() else {
        return BTreeMap::new();
    };
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    let mut sidecars: BTreeMap<String, i64> = BTreeMap::new();
    let mut init_peak: BTreeMap<String, i64> = BTreeMap::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_extended(c);
        if c.restart_policy.as_deref() == Some("Always") {
            add_into(&mut sidecars, &own);
        } else {
            let mut with_sidecars = sidecars.clone();
            add_into(&mut with_sidecars, &own);
            for (k, v) in with_sidecars {
                let e = init_peak.entry(k).or_default();
                *e = (*e).max(v);
            }
        }
    }
    for c in &spec.containers {
        add_into(&mut total, &container_extended(c));
    }
    add_into(&mut total, &sidecars);
    for (k, v) in init_peak {
        let e = total.entry(k).or_default();
        *e = (*e).max(v);
    }
    total.retain(|_, v| *v > 0);
    total
}

fn add_into(into: &mut BTreeMap<String, i64>, from: &BTreeMap<String, i64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

/// One container's extended requests (a limit alone counts as the request).
fn container_extended(c: &Container) -> BTreeMap<String, i64> {
    let r = c.resources.as_ref();
    let mut out = BTreeMap::new();
    for map in [
        r.and_then(|r| r.limits.as_ref()),
        r.and_then(|r| r.requests.as_ref()),
    ] {
        for (name, q) in map.into_iter().flatten() {
            if is_extended_resource(name) {
                let n = crate::quantity::bytes(q).unwrap_or(0);
                out.insert(name.clone(), n);
            }
        }
    }
    out
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
            extended: None,
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

    struct Widgets(ExtendedResources);
    impl ExtendedResourceSource for Widgets {
        fn extended_resources(&self) -> ExtendedResources {
            self.0.clone()
        }
    }

    #[test]
    fn device_plugin_resources_fit_as_kubelets_predicate_and_unknown_ones_are_left_out() {
        let node = ExtendedResources {
            allocatable: [("example.com/widget".to_string(), 2)].into(),
            allocated: [("example.com/widget".to_string(), 3)].into(),
            ..Default::default()
        };
        let h = ResourceFit {
            extended: Some(Arc::new(Widgets(node))),
            ..fit()
        };
        let one = asking(&[("example.com/widget", "1")]);
        let others: Vec<Arc<Pod>> = vec![Arc::new(one.clone()), Arc::new(one.clone())];
        // Pods hold 3 though 2 are healthy: the third still fits (capacity 3).
        admit(&h, &one, &others).unwrap();
        let three: Vec<Arc<Pod>> = (0..3).map(|_| Arc::new(one.clone())).collect();
        let r = admit(&h, &one, &three).unwrap_err();
        assert_eq!(r.reason, "OutOfexample.com/widget");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: example.com/widget, requested: 1, used: 3, capacity: 3"
        );
        // A resource the node does not know may be a cluster-level one: not checked.
        admit(&h, &asking(&[("example.com/gadget", "5")]), &three).unwrap();
    }

    #[test]
    fn extended_requests_take_the_larger_of_init_and_regular_containers() {
        let mut p = pod_of(
            vec![container("app", &[("example.com/w", "1")], &[])],
            vec![container("init", &[("example.com/w", "3")], &[])],
        );
        assert_eq!(extended_requests(&p)["example.com/w"], 3);
        p.spec.as_mut().unwrap().containers[0] =
            container("app", &[("example.com/w", "4"), ("cpu", "1")], &[]);
        assert_eq!(extended_requests(&p).len(), 1);
        assert_eq!(extended_requests(&p)["example.com/w"], 4);
        assert!(!is_extended_resource("hugepages-2Mi") && !is_extended_resource("cpu"));
        assert!(!is_extended_resource("kubernetes.io/batch-cpu"));
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

//! The pod's QoS class from its containers' CPU and memory requests and limits.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity;

fn value(name: &str, q: &Quantity) -> Option<i64> {
    if name == "cpu" {
        quantity::milli_cpu(q).ok()
    } else {
        quantity::bytes(q).ok()
    }
}

/// `Guaranteed`, `Burstable` or `BestEffort` (kubelet's `GetPodQOS`).
pub(crate) fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return "BestEffort";
    };
    let mut any = false;
    let mut guaranteed = true;
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let empty = BTreeMap::new();
        let res = c.resources.as_ref();
        let limits = res.and_then(|r| r.limits.as_ref()).unwrap_or(&empty);
        let requests = res.and_then(|r| r.requests.as_ref()).unwrap_or(&empty);
        for name in ["cpu", "memory"] {
            let limit = limits
                .get(name)
                .and_then(|q| value(name, q))
                .filter(|v| *v > 0);
            let request = requests
                .get(name)
                .and_then(|q| value(name, q))
                .filter(|v| *v > 0);
            if limit.is_some() || request.is_some() {
                any = true;
            }
            match (request, limit) {
                (_, None) => guaranteed = false,
                (Some(r), Some(l)) if r != l => guaranteed = false,
                _ => {}
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};

    fn pod(reqs: &[(&str, &str)], lims: &[(&str, &str)]) -> Pod {
        let m = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect()
            })
        };
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "a".into(),
                    resources: Some(ResourceRequirements {
                        requests: m(reqs),
                        limits: m(lims),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn classes() {
        assert_eq!(qos_class(&pod(&[], &[])), "BestEffort");
        assert_eq!(qos_class(&pod(&[("cpu", "100m")], &[])), "Burstable");
        assert_eq!(
            qos_class(&pod(&[], &[("cpu", "1"), ("memory", "64Mi")])),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(
                &[("cpu", "1000m"), ("memory", "64Mi")],
                &[("cpu", "1"), ("memory", "64Mi")]
            )),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(
                &[("cpu", "500m")],
                &[("cpu", "1"), ("memory", "64Mi")]
            )),
            "Burstable"
        );
    }
}

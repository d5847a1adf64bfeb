//! kubelet's eviction texts (`evictionMessage` in helpers.go): the pod's status
//! message, the event's annotations, and quantities printed as Go's
//! `resource.Quantity` prints them (`100Mi`, `1536`, `5k`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::rank::{PodStats, container_request};
use super::signals::Observations;
use crate::contracts::Signal;

/// The annotations kubelet sets on the eviction event.
pub(crate) const OFFENDING_CONTAINERS: &str = "offending_containers";
pub(crate) const OFFENDING_CONTAINERS_USAGE: &str = "offending_containers_usage";
pub(crate) const STARVED_RESOURCE: &str = "starved_resource";

/// The resource a signal is about (kubelet's `signalToResource`).
pub(crate) fn resource(signal: Signal) -> &'static str {
    match signal {
        Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
        Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
            "ephemeral-storage"
        }
        Signal::NodeFsInodesFree | Signal::ImageFsInodesFree | Signal::ContainerFsInodesFree => {
            "inodes"
        }
        Signal::PidAvailable => "pids",
    }
}

/// Whether the resource's quantities are binary (bytes) or decimal (counts), as
/// kubelet creates them.
fn binary(resource: &str) -> bool {
    matches!(resource, "memory" | "ephemeral-storage")
}

pub(crate) use crate::quantity::canonical as quantity;

/// The pod's eviction message and the event annotations.
pub(crate) fn eviction_message(
    signal: Signal,
    threshold_amount: i64,
    observations: &Observations,
    pod: &Pod,
    stats: Option<&PodStats>,
) -> (String, BTreeMap<String, String>) {
    let res = resource(signal);
    let bin = binary(res);
    let mut message = format!("The node was low on resource: {res}. ");
    if let Some(o) = observations.get(&signal) {
        message += &format!(
            "Threshold quantity: {}, available: {}. ",
            quantity(threshold_amount, bin),
            quantity(o.available, bin)
        );
    }
    let mut annotations = BTreeMap::new();
    let Some(stats) = stats else {
        return (message, annotations);
    };
    let usages: &[(String, u64)] = match res {
        "memory" => &stats.container_memory,
        // Logs plus the writable layer, as kubelet.
        "ephemeral-storage" => &stats.container_disk,
        _ => &[],
    };
    let (mut containers, mut usage) = (Vec::new(), Vec::new());
    for c in pod.spec.iter().flat_map(|s| &s.containers) {
        let Some((_, used)) = usages.iter().find(|(n, _)| *n == c.name) else {
            continue;
        };
        let used = i64::try_from(*used).unwrap_or(i64::MAX);
        let request = container_request(pod, &c.name, res);
        if used > request {
            let u = quantity(used, true);
            message += &format!(
                "Container {} was using {u}, request is {}, has larger consumption of {res}. ",
                c.name,
                quantity(request, true)
            );
            containers.push(c.name.clone());
            usage.push(u);
        }
    }
    annotations.insert(OFFENDING_CONTAINERS.into(), containers.join(","));
    annotations.insert(OFFENDING_CONTAINERS_USAGE.into(), usage.join(","));
    annotations.insert(STARVED_RESOURCE.into(), res.into());
    (message, annotations)
}

/// kubelet's admission message (`nodeConditionMessageFmt`).
pub(crate) fn node_condition_message(conditions: &[&str]) -> String {
    format!("The node had condition: [{}]. ", conditions.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction::signals::Observation;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::time::SystemTime;

    #[test]
    fn quantities_print_as_go_prints_them() {
        assert_eq!(quantity(100 << 20, true), "100Mi");
        assert_eq!(quantity(90 << 20, true), "90Mi");
        assert_eq!(quantity(1536, true), "1536");
        assert_eq!(quantity(0, true), "0");
        assert_eq!(quantity(1000, true), "1k");
        assert_eq!(quantity(-(2 << 30), true), "-2Gi");
        assert_eq!(quantity(5000, false), "5k");
        assert_eq!(quantity(4_194_304, false), "4194304");
        assert_eq!(quantity(1234, false), "1234");
    }

    fn pod() -> Pod {
        let c = |name: &str, req: Option<&str>| Container {
            name: name.into(),
            resources: req.map(|r| ResourceRequirements {
                requests: Some([("memory".to_string(), Quantity(r.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        Pod {
            spec: Some(PodSpec {
                containers: vec![c("x", None), c("y", Some("1Gi"))],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn kubelets_memory_message_names_containers_over_their_request() {
        let obs: Observations = [(
            Signal::MemoryAvailable,
            Observation {
                available: 90 << 20,
                capacity: 1 << 30,
                time: SystemTime::UNIX_EPOCH,
            },
        )]
        .into();
        let stats = PodStats {
            container_memory: vec![("x".into(), 200 << 20), ("y".into(), 1 << 20)],
            ..Default::default()
        };
        let (m, a) = eviction_message(
            Signal::MemoryAvailable,
            100 << 20,
            &obs,
            &pod(),
            Some(&stats),
        );
        assert_eq!(
            m,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi. Container x was using 200Mi, request is 0, has larger consumption of memory. "
        );
        assert_eq!(a[OFFENDING_CONTAINERS], "x");
        assert_eq!(a[OFFENDING_CONTAINERS_USAGE], "200Mi");
        assert_eq!(a[STARVED_RESOURCE], "memory");
    }

    #[test]
    fn without_stats_or_observation_the_message_is_shorter() {
        let (m, a) = eviction_message(
            Signal::PidAvailable,
            100,
            &Observations::new(),
            &pod(),
            None,
        );
        assert_eq!(m, "The node was low on resource: pids. ");
        assert!(a.is_empty());
        assert_eq!(
            node_condition_message(&["MemoryPressure", "DiskPressure"]),
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
    }
}

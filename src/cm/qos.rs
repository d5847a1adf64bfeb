//! QoS classes and OOM score adjustments: the one place that decides a pod's
//! class, for its status (`qosClass`), its cgroup parent and its containers'
//! `oom_score_adj` (kubelet's `v1qos.GetPodQOS` and `qos.GetContainerOOMScoreAdjust`).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity;

/// kubelet's three QoS classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    /// The API's spelling (`status.qosClass`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }

    /// The pod's class (kubelet's `ComputePodQOS`). A pod with `spec.resources`
    /// (pod-level resources, beta and on by default since 1.34) is classed by them
    /// alone, as kubelet 1.36 does: Guaranteed when its cpu and memory requests equal
    /// their limits, both set; BestEffort when neither is set; Burstable otherwise.
    /// Without them: over regular and init containers, cpu and memory only, positive
    /// quantities only. Guaranteed when every container limits both and the summed
    /// requests equal the summed limits; BestEffort when nothing is requested or
    /// limited. A request left out defaults to the limit, as the API's defaulting does
    /// for static pods.
    pub(crate) fn of(pod: &Pod) -> QosClass {
        let Some(spec) = pod.spec.as_ref() else {
            return QosClass::BestEffort;
        };
        if let Some(level) = spec.resources.as_ref() {
            return Self::of_pod_level(level);
        }
        let mut requests: BTreeMap<&str, i64> = BTreeMap::new();
        let mut limits: BTreeMap<&str, i64> = BTreeMap::new();
        let mut guaranteed = true;
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let mut limited = 0;
            for name in ["cpu", "memory"] {
                if let Some(l) = positive(container_resource(c, "limits", name), name) {
                    *limits.entry(name).or_default() += l;
                    limited += 1;
                }
                let request = container_resource(c, "requests", name)
                    .or(container_resource(c, "limits", name));
                if let Some(r) = positive(request, name) {
                    *requests.entry(name).or_default() += r;
                }
            }
            if limited < 2 {
                guaranteed = false;
            }
        }
        if requests.is_empty() && limits.is_empty() {
            return QosClass::BestEffort;
        }
        if guaranteed && requests == limits {
            QosClass::Guaranteed
        } else {
            QosClass::Burstable
        }
    }
}

impl QosClass {
    /// kubelet's `resourceQOS` over the pod's own requirements.
    fn of_pod_level(level: &ResourceRequirements) -> QosClass {
        let get = |m: Option<&BTreeMap<String, Quantity>>, name| {
            positive(m.and_then(|m| m.get(name)), name).unwrap_or(0)
        };
        let (requests, limits) = (level.requests.as_ref(), level.limits.as_ref());
        let mut class = None;
        for name in ["cpu", "memory"] {
            let limit = get(limits, name);
            let request = match requests.and_then(|m| m.get(name)) {
                Some(_) => get(requests, name),
                None => limit,
            };
            if request != limit {
                return QosClass::Burstable;
            }
            let this = if limit == 0 {
                QosClass::BestEffort
            } else {
                QosClass::Guaranteed
            };
            if *class.get_or_insert(this) != this {
                return QosClass::Burstable;
            }
        }
        class.unwrap_or(QosClass::BestEffort)
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A container's `requests` or `limits` entry.
pub(crate) fn container_resource<'a>(
    c: &'a Container,
    which: &str,
    name: &str,
) -> Option<&'a Quantity> {
    let r = c.resources.as_ref()?;
    let m = if which == "requests" {
        r.requests.as_ref()
    } else {
        r.limits.as_ref()
    };
    m?.get(name)
}

/// The value of a quantity (millicores for cpu, units otherwise) when it parses
/// and is above zero; what QoS counts.
fn positive(q: Option<&Quantity>, name: &str) -> Option<i64> {
    let q = q?;
    let v = if name == "cpu" {
        quantity::milli_cpu(q)
    } else {
        quantity::bytes(q)
    };
    v.ok().filter(|v| *v > 0)
}

/// A container's memory request in bytes (defaulted from its limit), 0 if none.
fn memory_request(c: &Container) -> i64 {
    container_resource(c, "requests", "memory")
        .or(container_resource(c, "limits", "memory"))
        .and_then(|q| quantity::bytes(q).ok())
        .unwrap_or(0)
        .max(0)
}

/// kubelet's own adjustment (`KubeletOOMScoreAdj`).
pub(crate) const KUBELET_OOM_SCORE_ADJ: i64 = -999;
/// Guaranteed and node-critical containers: killed last.
pub(crate) const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// BestEffort containers: killed first.
pub(crate) const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// kubelet's `types.IsNodeCriticalPod`: a critical pod (static, or priority at
/// least system-critical) whose priority class is `system-node-critical`.
fn is_node_critical(pod: &Pod) -> bool {
    crate::pod::is_critical_pod(pod)
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            == Some("system-node-critical")
}

/// The `oom_score_adj` for `container` of `pod` on a node with `memory_capacity`
/// bytes (kubelet's `GetContainerOOMScoreAdjust`): node-critical and Guaranteed
/// −997, BestEffort 1000, Burstable `1000 − 1000 × request / capacity` kept in
/// 3..=999, where the request includes the container's share of a pod-level memory
/// request no container claims; a sidecar (restartable init container) scores no
/// higher than the regular container with the smallest memory request.
pub(crate) fn container_oom_score_adj(
    pod: &Pod,
    container: &Container,
    memory_capacity: i64,
) -> i64 {
    if is_node_critical(pod) {
        return GUARANTEED_OOM_SCORE_ADJ;
    }
    match QosClass::of(pod) {
        QosClass::Guaranteed => return GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => return BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {}
    }
    let capacity = memory_capacity.max(1);
    // With a pod-level memory request, what no container requests is shared among
    // the containers (0 otherwise).
    let share = super::resources::unrequested_pod_memory_per_container(pod);
    let scaled =
        |request: i64| 1000 - request.saturating_add(share).saturating_mul(1000) / capacity;
    let mut adj = scaled(memory_request(container));
    let spec = pod.spec.as_ref();
    let is_sidecar = spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|inits| {
            inits
                .iter()
                .any(|i| i.name == container.name && i.restart_policy.as_deref() == Some("Always"))
        });
    if is_sidecar
        && let Some(min_regular) = spec.and_then(|s| s.containers.iter().map(memory_request).min())
    {
        adj = adj.min(scaled(min_regular));
    }
    // A Guaranteed pod using all memory scores about 3: keep Burstable above it,
    // and below BestEffort.
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
        return 1000 + GUARANTEED_OOM_SCORE_ADJ;
    }
    if adj == BEST_EFFORT_OOM_SCORE_ADJ {
        return adj - 1;
    }
    adj
}

/// `score` raised to `min`, the lowest adjustment this host lets oxlet set
/// (without CAP_SYS_RESOURCE a process may not go below its own).
pub(crate) fn clamp_oom_score_adj(score: i64, min: i64) -> i64 {
    score.max(min).min(BEST_EFFORT_OOM_SCORE_ADJ)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn container(name: &str, reqs: &[(&str, &str)], lims: &[(&str, &str)]) -> Container {
        let m = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect()
            })
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: m(reqs),
                limits: m(lims),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod_of(containers: Vec<Container>, inits: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: (!inits.is_empty()).then_some(inits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(reqs: &[(&str, &str)], lims: &[(&str, &str)]) -> Pod {
        pod_of(vec![container("a", reqs, lims)], vec![])
    }

    #[test]
    fn classes() {
        let class = |p: &Pod| QosClass::of(p).as_str();
        assert_eq!(class(&pod(&[], &[])), "BestEffort");
        assert_eq!(class(&Pod::default()), "BestEffort");
        assert_eq!(class(&pod(&[("cpu", "100m")], &[])), "Burstable");
        assert_eq!(
            class(&pod(&[], &[("cpu", "1"), ("memory", "64Mi")])),
            "Guaranteed"
        );
        assert_eq!(
            class(&pod(
                &[("cpu", "1000m"), ("memory", "64Mi")],
                &[("cpu", "1"), ("memory", "64Mi")]
            )),
            "Guaranteed"
        );
        assert_eq!(
            class(&pod(
                &[("cpu", "500m")],
                &[("cpu", "1"), ("memory", "64Mi")]
            )),
            "Burstable"
        );
        // Only cpu and memory count; zero quantities do not.
        assert_eq!(
            class(&pod(&[("ephemeral-storage", "1Gi")], &[])),
            "BestEffort"
        );
        assert_eq!(class(&pod(&[("cpu", "0")], &[])), "BestEffort");
        // An init container without limits makes a pod Burstable.
        let g = container("a", &[], &[("cpu", "1"), ("memory", "64Mi")]);
        let p = pod_of(vec![g.clone()], vec![container("i", &[("cpu", "1m")], &[])]);
        assert_eq!(class(&p), "Burstable");
        let p = pod_of(vec![g.clone()], vec![g]);
        assert_eq!(class(&p), "Guaranteed");
    }

    const GI: i64 = 1 << 30;

    #[test]
    fn oom_score_adj_follows_kubelets_policy() {
        let cap = 10 * GI;
        let g = pod(&[], &[("cpu", "1"), ("memory", "1Gi")]);
        let c = &g.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_oom_score_adj(&g, c, cap), -997);
        let be = pod(&[], &[]);
        let c = &be.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_oom_score_adj(&be, c, cap), 1000);
        // Burstable: 1000 - 1000 * 1Gi / 10Gi = 900.
        let b = pod(&[("memory", "1Gi")], &[]);
        let c = &b.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_oom_score_adj(&b, c, cap), 900);
        // No memory request: 1000 becomes 999, below BestEffort.
        let b = pod(&[("cpu", "100m")], &[]);
        let c = &b.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_oom_score_adj(&b, c, cap), 999);
        // Requesting all the memory (or more): 3, above Guaranteed.
        let b = pod(&[("memory", "20Gi")], &[]);
        let c = &b.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_oom_score_adj(&b, c, cap), 3);
    }

    #[test]
    fn node_critical_static_pods_score_as_guaranteed() {
        let mut p = pod(&[("memory", "1Gi")], &[]);
        p.spec.as_mut().unwrap().priority_class_name = Some("system-node-critical".into());
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        // Not static, no priority: not critical.
        assert_eq!(container_oom_score_adj(&p, &c, 10 * GI), 900);
        p.metadata.annotations = Some(
            [(
                crate::pod::CONFIG_SOURCE_ANNOTATION.to_string(),
                "file".to_string(),
            )]
            .into(),
        );
        assert_eq!(container_oom_score_adj(&p, &c, 10 * GI), -997);
        p.spec.as_mut().unwrap().priority_class_name = Some("system-cluster-critical".into());
        assert_eq!(container_oom_score_adj(&p, &c, 10 * GI), 900);
    }

    #[test]
    fn sidecars_score_no_higher_than_the_smallest_regular_container() {
        let mut sidecar = container("side", &[("memory", "100Mi")], &[]);
        sidecar.restart_policy = Some("Always".into());
        let p = pod_of(
            vec![
                container("big", &[("memory", "4Gi")], &[]),
                container("small", &[("memory", "1Gi")], &[]),
            ],
            vec![sidecar.clone()],
        );
        // Alone it would score 1000 - 1000*100Mi/10Gi = 991; the smallest regular
        // container (1Gi) scores 900.
        assert_eq!(container_oom_score_adj(&p, &sidecar, 10 * GI), 900);
        // A plain init container keeps its own score.
        let mut init = sidecar;
        init.restart_policy = None;
        let p = pod_of(
            vec![container("small", &[("memory", "1Gi")], &[])],
            vec![init.clone()],
        );
        assert_eq!(container_oom_score_adj(&p, &init, 10 * GI), 991);
    }

    #[test]
    fn clamp_keeps_what_the_host_allows() {
        assert_eq!(clamp_oom_score_adj(-997, -999), -997);
        assert_eq!(clamp_oom_score_adj(-997, 0), 0);
        assert_eq!(clamp_oom_score_adj(900, 0), 900);
        assert_eq!(clamp_oom_score_adj(1000, 0), 1000);
    }
}

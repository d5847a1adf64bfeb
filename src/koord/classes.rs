//! koordinator's classes of a pod (`apis/extension`): its QoS class from the
//! `koordinator.sh/qosClass` label, else from its Kubernetes QoS class (Guaranteed is
//! LSR, Burstable LS, BestEffort BE); its priority class from its label or
//! spec.priority, else from its koordinator QoS class (LSE, LSR, LS and SYSTEM are
//! prod, BE is batch).

use k8s_openapi::api::core::v1::Pod;

use crate::cm::QosClass;
use crate::koord::prediction::model::PriorityClass;

/// koordinator's pod QoS label.
pub(crate) const KOORD_QOS_LABEL: &str = "koordinator.sh/qosClass";
/// koordinator's extended resources for batch (BE) pods: CPU in millicores, memory in
/// bytes.
pub(crate) const BATCH_CPU: &str = "kubernetes.io/batch-cpu";
pub(crate) const BATCH_MEMORY: &str = "kubernetes.io/batch-memory";

/// `GetPodBEMilliCPURequest`: the batch CPU requests of the pod's containers and its
/// sidecars (restartable init containers), in millicores; a missing or unreadable one
/// counts 0.
pub(crate) fn batch_milli_cpu_request(pod: &Pod) -> i64 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .filter_map(|c| crate::cm::container_resource(c, "requests", BATCH_CPU))
        .filter_map(|q| crate::quantity::bytes(q).ok())
        .map(|m| m.max(0))
        .sum()
}

/// koordinator's QoS classes; `None` is the empty class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KoordQos {
    Lse,
    Lsr,
    Ls,
    Be,
    System,
    None,
}

impl KoordQos {
    pub(crate) fn name(self) -> &'static str {
        match self {
            KoordQos::Lse => "LSE",
            KoordQos::Lsr => "LSR",
            KoordQos::Ls => "LS",
            KoordQos::Be => "BE",
            KoordQos::System => "SYSTEM",
            KoordQos::None => "",
        }
    }

    /// The pod's label (`GetPodQoSClassRaw`): a label naming no class is `None`.
    pub(crate) fn of_label(pod: &Pod) -> Option<KoordQos> {
        let v = pod.metadata.labels.as_ref()?.get(KOORD_QOS_LABEL)?;
        Some(
            [
                KoordQos::Lse,
                KoordQos::Lsr,
                KoordQos::Ls,
                KoordQos::Be,
                KoordQos::System,
            ]
            .into_iter()
            .find(|q| q.name() == v)
            .unwrap_or(KoordQos::None),
        )
    }
}

impl std::fmt::Display for KoordQos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `GetPodQoSClassWithDefault`: the label's class, else the Kubernetes class's.
pub(crate) fn koord_qos_with_default(pod: &Pod) -> KoordQos {
    match KoordQos::of_label(pod) {
        Some(q) if q != KoordQos::None => q,
        _ => match QosClass::of(pod) {
            QosClass::Guaranteed => KoordQos::Lsr,
            QosClass::Burstable => KoordQos::Ls,
            QosClass::BestEffort => KoordQos::Be,
        },
    }
}

/// `GetPodPriorityClassWithDefault`: the label's or spec.priority's class, else the
/// one koordinator derives from the QoS class.
pub(crate) fn koord_priority_with_default(pod: &Pod) -> &'static str {
    match PriorityClass::of_pod(pod) {
        PriorityClass::None => match koord_qos_with_default(pod) {
            KoordQos::Lse | KoordQos::Lsr | KoordQos::Ls | KoordQos::System => {
                PriorityClass::Prod.name()
            }
            KoordQos::Be => PriorityClass::Batch.name(),
            KoordQos::None => PriorityClass::None.name(),
        },
        c => c.name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: &[(&str, &str)], priority: Option<i32>, cpu: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": labels.iter().cloned().collect::<std::collections::BTreeMap<_, _>>()},
            "spec": {"priority": priority, "containers": [{"name": "c", "resources":
                cpu.map(|c| serde_json::json!({"limits": {"cpu": c, "memory": "1Gi"}})).unwrap_or_default()}]},
        }))
        .unwrap()
    }

    #[test]
    fn classes_follow_labels_then_kubernetes_qos_then_koordinators_mapping() {
        let g = pod(&[], None, Some("1"));
        assert_eq!(koord_qos_with_default(&g), KoordQos::Lsr);
        assert_eq!(koord_priority_with_default(&g), "koord-prod");
        let be = pod(&[], None, None);
        assert_eq!(koord_qos_with_default(&be), KoordQos::Be);
        assert_eq!(koord_priority_with_default(&be), "koord-batch");
        let labelled = pod(&[(KOORD_QOS_LABEL, "BE")], Some(9500), Some("1"));
        assert_eq!(koord_qos_with_default(&labelled), KoordQos::Be);
        assert_eq!(koord_priority_with_default(&labelled), "koord-prod");
        let unknown = pod(&[(KOORD_QOS_LABEL, "GOLD")], Some(5500), None);
        assert_eq!(KoordQos::of_label(&unknown), Some(KoordQos::None));
        assert_eq!(koord_qos_with_default(&unknown), KoordQos::Be);
        assert_eq!(koord_priority_with_default(&unknown), "koord-batch");
        assert_eq!(KoordQos::of_label(&g), None);
    }
}

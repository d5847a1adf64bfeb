//! koordinator's classes of a pod (`apis/extension`): its QoS class from the
//! `koordinator.sh/qosClass` label, else from its Kubernetes QoS class (Guaranteed is
//! LSR, Burstable LS, BestEffort BE); its priority class from its label (when it has
//! one, whatever it says) or spec.priority, else from its koordinator QoS class (LSE,
//! LSR, LS and SYSTEM are prod, BE is batch). Kept below the koordlet rooms that read
//! them: prediction groups its models by the priority class, the QoS manager picks
//! its victims by both.

use k8s_openapi::api::core::v1::Pod;

use crate::cm::QosClass;

/// koordinator's label naming a pod's priority class.
pub(crate) const PRIORITY_CLASS_LABEL: &str = "koordinator.sh/priority-class";
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

/// koordinator's priority classes, in koordlet's order; `None` is the empty class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PriorityClass {
    Prod,
    Mid,
    Batch,
    Free,
    None,
}

impl PriorityClass {
    pub(crate) const ALL: [PriorityClass; 5] = [
        PriorityClass::Prod,
        PriorityClass::Mid,
        PriorityClass::Batch,
        PriorityClass::Free,
        PriorityClass::None,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            PriorityClass::Prod => "koord-prod",
            PriorityClass::Mid => "koord-mid",
            PriorityClass::Batch => "koord-batch",
            PriorityClass::Free => "koord-free",
            PriorityClass::None => "",
        }
    }

    /// The class's prediction model UID: `__node-<class>__` (`__node-__` for none).
    pub(crate) fn uid(self) -> String {
        format!("__node-{}__", self.name())
    }

    /// From spec.priority: prod 9000–9999, mid 7000–7999, batch 5000–5999, free 3000–3999.
    fn of_priority(p: i32) -> PriorityClass {
        match p {
            9000..=9999 => PriorityClass::Prod,
            7000..=7999 => PriorityClass::Mid,
            5000..=5999 => PriorityClass::Batch,
            3000..=3999 => PriorityClass::Free,
            _ => PriorityClass::None,
        }
    }

    /// `GetPodPriorityClassRaw`: the `koordinator.sh/priority-class` label when the pod
    /// has one (a name of no class is `None`, spec.priority is not asked then), else
    /// from spec.priority (none is `None`).
    pub(crate) fn raw(pod: &Pod) -> PriorityClass {
        let label = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PRIORITY_CLASS_LABEL));
        if let Some(v) = label {
            return (PriorityClass::ALL.into_iter())
                .find(|c| *c != PriorityClass::None && c.name() == v)
                .unwrap_or(PriorityClass::None);
        }
        (pod.spec.as_ref().and_then(|s| s.priority))
            .map_or(PriorityClass::None, PriorityClass::of_priority)
    }

    /// `GetPodPriorityClassWithDefault`: the raw class, else the one koordinator
    /// derives from the QoS class (what koordlet groups and filters pods by).
    pub(crate) fn with_default(pod: &Pod) -> PriorityClass {
        match PriorityClass::raw(pod) {
            PriorityClass::None => match koord_qos_with_default(pod) {
                KoordQos::Lse | KoordQos::Lsr | KoordQos::Ls | KoordQos::System => {
                    PriorityClass::Prod
                }
                KoordQos::Be => PriorityClass::Batch,
                KoordQos::None => PriorityClass::None,
            },
            c => c,
        }
    }

    /// Classes whose peaks the prod reclaimable predictor treats as unreclaimable.
    pub(crate) fn is_reclaimable(self) -> bool {
        matches!(self, PriorityClass::Prod | PriorityClass::None)
    }
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
        assert_eq!(PriorityClass::with_default(&g), PriorityClass::Prod);
        let be = pod(&[], None, None);
        assert_eq!(koord_qos_with_default(&be), KoordQos::Be);
        assert_eq!(PriorityClass::with_default(&be), PriorityClass::Batch);
        let labelled = pod(&[(KOORD_QOS_LABEL, "BE")], Some(9500), Some("1"));
        assert_eq!(koord_qos_with_default(&labelled), KoordQos::Be);
        assert_eq!(PriorityClass::with_default(&labelled), PriorityClass::Prod);
        let unknown = pod(&[(KOORD_QOS_LABEL, "GOLD")], Some(5500), None);
        assert_eq!(KoordQos::of_label(&unknown), Some(KoordQos::None));
        assert_eq!(koord_qos_with_default(&unknown), KoordQos::Be);
        assert_eq!(PriorityClass::with_default(&unknown), PriorityClass::Batch);
        assert_eq!(KoordQos::of_label(&g), None);
    }

    #[test]
    fn priority_classes_come_from_the_label_then_the_priority_then_the_qos() {
        let class =
            |labels: &[(&str, &str)], priority| PriorityClass::raw(&pod(labels, priority, None));
        let label = |v| [(PRIORITY_CLASS_LABEL, v)];
        assert_eq!(
            class(&label("koord-batch"), Some(9500)),
            PriorityClass::Batch
        );
        // A label naming no class wins over spec.priority: the raw class is none.
        assert_eq!(class(&label("bogus"), Some(9500)), PriorityClass::None);
        for (p, want) in [
            (9000, PriorityClass::Prod),
            (9999, PriorityClass::Prod),
            (10000, PriorityClass::None),
            (7000, PriorityClass::Mid),
            (5999, PriorityClass::Batch),
            (3000, PriorityClass::Free),
            (2999, PriorityClass::None),
        ] {
            assert_eq!(class(&[], Some(p)), want, "priority {p}");
        }
        assert_eq!(class(&[], None), PriorityClass::None);
        // Without a raw class, the QoS decides: an unlabelled BestEffort pod is batch,
        // a Guaranteed one prod, a bogus label on a Burstable one prod too.
        assert_eq!(
            PriorityClass::with_default(&pod(&[], None, None)),
            PriorityClass::Batch
        );
        assert_eq!(
            PriorityClass::with_default(&pod(&[], None, Some("1"))),
            PriorityClass::Prod
        );
        let bogus = pod(&label("bogus"), Some(5500), Some("1"));
        assert_eq!(PriorityClass::with_default(&bogus), PriorityClass::Prod);
        assert_eq!(PriorityClass::None.uid(), "__node-__");
        assert_eq!(PriorityClass::Prod.uid(), "__node-koord-prod__");
    }
}

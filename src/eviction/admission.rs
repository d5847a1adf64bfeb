//! Admission under node pressure (kubelet's eviction manager `Admit`): critical pods
//! always; under memory pressure alone, pods that are not BestEffort and BestEffort
//! pods that tolerate the memory-pressure taint; under any other pressure, no pod.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::messages::node_condition_message;
use crate::cm::QosClass;
use crate::contracts::{PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::pod::is_critical;
use crate::status::PressureSource;

const MEMORY_PRESSURE_TAINT: &str = "node.kubernetes.io/memory-pressure";

/// The handler, reading the conditions the manager last set.
pub(crate) struct PressureAdmission {
    pub pressure: Arc<PressureSource>,
}

/// Whether the pod tolerates `node.kubernetes.io/memory-pressure:NoSchedule`
/// (kubelet's `TolerationsTolerateTaint`).
fn tolerates_memory_pressure(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.tolerations.iter().flatten())
        .any(|t| {
            let effect_ok = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "NoSchedule");
            let key = t.key.as_deref().unwrap_or("");
            let exists = t.operator.as_deref() == Some("Exists");
            let key_ok = key == MEMORY_PRESSURE_TAINT || (key.is_empty() && exists);
            let value_ok = exists || t.value.as_deref().unwrap_or("").is_empty();
            effect_ok && key_ok && value_ok
        })
}

impl PodAdmitHandler for PressureAdmission {
    fn name(&self) -> &'static str {
        "eviction"
    }

    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
        let p = self.pressure.get();
        let mut conditions = Vec::new();
        if p.memory {
            conditions.push("MemoryPressure");
        }
        if p.disk {
            conditions.push("DiskPressure");
        }
        if p.pid {
            conditions.push("PIDPressure");
        }
        if conditions.is_empty() || is_critical(attrs.pod) {
            return Ok(());
        }
        if conditions == ["MemoryPressure"]
            && (QosClass::of(attrs.pod) != QosClass::BestEffort
                || tolerates_memory_pressure(attrs.pod))
        {
            return Ok(());
        }
        Err(Rejection {
            reason: crate::events::reason::EVICTED.into(),
            message: node_condition_message(&conditions),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Pressure;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements, Toleration};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn pod(burstable: bool, priority: i32, tolerations: Vec<Toleration>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                priority: Some(priority),
                tolerations: Some(tolerations),
                containers: vec![Container {
                    name: "c".into(),
                    resources: burstable.then(|| ResourceRequirements {
                        requests: Some([("memory".to_string(), Quantity("1Mi".into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn admit(p: Pressure, pod: &Pod) -> Result<(), Rejection> {
        let source = Arc::new(PressureSource::default());
        source.set(p);
        PressureAdmission { pressure: source }.admit(&PodAdmitAttributes {
            pod,
            other_pods: &[],
        })
    }

    const MEM: Pressure = Pressure {
        memory: true,
        disk: false,
        pid: false,
    };

    #[test]
    fn no_pressure_admits_all() {
        assert_eq!(admit(Pressure::default(), &pod(false, 0, vec![])), Ok(()));
    }

    #[test]
    fn memory_pressure_rejects_best_effort_with_kubelets_message() {
        assert_eq!(
            admit(MEM, &pod(false, 0, vec![])),
            Err(Rejection {
                reason: "Evicted".into(),
                message: "The node had condition: [MemoryPressure]. ".into(),
            })
        );
        assert_eq!(admit(MEM, &pod(true, 0, vec![])), Ok(()));
        // Critical pods always.
        assert_eq!(admit(MEM, &pod(false, 2_000_000_000, vec![])), Ok(()));
    }

    #[test]
    fn best_effort_tolerating_the_memory_pressure_taint_is_admitted() {
        let t = |key: Option<&str>, op: &str, effect: Option<&str>| Toleration {
            key: key.map(Into::into),
            operator: Some(op.into()),
            effect: effect.map(Into::into),
            ..Default::default()
        };
        let ok = |tol| admit(MEM, &pod(false, 0, vec![tol])).is_ok();
        assert!(ok(t(
            Some(MEMORY_PRESSURE_TAINT),
            "Exists",
            Some("NoSchedule")
        )));
        assert!(ok(t(Some(MEMORY_PRESSURE_TAINT), "Equal", None)));
        assert!(ok(t(None, "Exists", None)));
        assert!(!ok(t(
            Some(MEMORY_PRESSURE_TAINT),
            "Exists",
            Some("NoExecute")
        )));
        assert!(!ok(t(Some("other"), "Exists", None)));
    }

    #[test]
    fn disk_or_pid_pressure_rejects_every_non_critical_pod() {
        let all = Pressure {
            memory: true,
            disk: true,
            pid: true,
        };
        assert_eq!(
            admit(all, &pod(true, 0, vec![])).unwrap_err().message,
            "The node had condition: [MemoryPressure DiskPressure PIDPressure]. "
        );
        let disk = Pressure {
            disk: true,
            ..Default::default()
        };
        assert!(admit(disk, &pod(true, 0, vec![])).is_err());
        assert_eq!(admit(disk, &pod(true, 2_000_000_000, vec![])), Ok(()));
    }
}

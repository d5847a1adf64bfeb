//! The node QoS runtime hook rules (koordlet's runtimehooks plugins, in-process).
//!
//! - [`BatchResource`] (koordlet's `batchresource`): a BestEffort container that
//!   asks for koordinator's batch resources gets CPU shares, a CFS quota and a
//!   memory limit from them, so that what CPU suppress holds back is shared out by
//!   request. It runs only while CPU suppress is on.

use std::sync::Arc;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cm::{DEFAULT_CPU_PERIOD_US, MAX_SHARES, MIN_SHARES, QosClass};
use crate::koord::qosmanager::config::QosConfig;
use crate::kuberuntime::{ContainerHook, ContainerHooks, HookError};

/// koordinator's extended resources for batch (BestEffort) pods; CPU in millicores.
pub(crate) const BATCH_CPU: &str = "kubernetes.io/batch-cpu";
pub(crate) const BATCH_MEMORY: &str = "kubernetes.io/batch-memory";

/// The rules the config turns on.
pub(crate) fn hook_rules(cfg: &QosConfig) -> ContainerHooks {
    let mut rules: Vec<Arc<dyn ContainerHook>> = Vec::new();
    if cfg.cpu_suppress_on() {
        rules.push(Arc::new(BatchResource));
    }
    ContainerHooks::new(rules)
}

/// See the module doc.
pub(crate) struct BatchResource;

/// A batch resource of the container, as a plain integer (`batch-cpu` is counted in
/// millicores, `batch-memory` in bytes, as koordinator writes them).
fn amount(c: &Container, which: &str, name: &str) -> Result<Option<i64>, HookError> {
    let Some(q) = crate::cm::container_resource(c, which, name) else {
        return Ok(None);
    };
    crate::quantity::bytes(q)
        .map(Some)
        .map_err(|e| HookError(format!("resources.{which}[{name}]: {e}")))
}

impl ContainerHook for BatchResource {
    fn name(&self) -> &'static str {
        "batchresource"
    }

    fn pre_create_container(
        &self,
        pod: &Pod,
        c: &Container,
        r: &mut cri::LinuxContainerResources,
    ) -> Result<bool, HookError> {
        if QosClass::of(pod) != QosClass::BestEffort {
            return Ok(false);
        }
        let mut changed = false;
        if let Some(req) = amount(c, "requests", BATCH_CPU)? {
            // koordlet: shares = request × 1024 / 1000, clamped to [2, 262144].
            r.cpu_shares = (req.saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES);
            changed = true;
        }
        if let Some(limit) = amount(c, "limits", BATCH_CPU)? {
            r.cpu_period = DEFAULT_CPU_PERIOD_US;
            r.cpu_quota = limit.saturating_mul(DEFAULT_CPU_PERIOD_US / 1000).max(1000);
            changed = true;
        }
        if let Some(limit) = amount(c, "limits", BATCH_MEMORY)? {
            r.memory_limit_in_bytes = limit;
            changed = true;
        }
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::koord::qosmanager::config::Strategies;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn container(req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let m = |l: &[(&str, &str)]| {
            Some(
                l.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: m(req),
                limits: m(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(c: &Container) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![c.clone()],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn config(c: &Container) -> cri::ContainerConfig {
        cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_shares: 2,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            metadata: Some(cri::ContainerMetadata {
                name: c.name.clone(),
                attempt: 0,
            }),
            ..Default::default()
        }
    }

    fn on() -> QosConfig {
        QosConfig {
            enable: true,
            strategies: Strategies {
                cpu_suppress: true,
                ..Default::default()
            },
            ..QosConfig::default()
        }
    }

    #[test]
    fn batch_resources_set_a_best_effort_containers_shares_quota_and_memory() {
        let c = container(
            &[(BATCH_CPU, "500"), (BATCH_MEMORY, "64Mi")],
            &[(BATCH_CPU, "1500"), (BATCH_MEMORY, "128Mi")],
        );
        let mut cfg = config(&c);
        hook_rules(&on()).pre_create(&pod(&c), &c, &mut cfg);
        let r = cfg.linux.unwrap().resources.unwrap();
        assert_eq!(r.cpu_shares, 512);
        assert_eq!((r.cpu_period, r.cpu_quota), (100_000, 150_000));
        assert_eq!(r.memory_limit_in_bytes, 128 << 20);
    }

    #[test]
    fn only_best_effort_pods_and_only_while_suppress_is_on() {
        let c = container(&[(BATCH_CPU, "500")], &[]);
        let mut cfg = config(&c);
        hook_rules(&QosConfig::default()).pre_create(&pod(&c), &c, &mut cfg);
        assert_eq!(
            cfg.linux
                .as_ref()
                .unwrap()
                .resources
                .as_ref()
                .unwrap()
                .cpu_shares,
            2
        );
        let burstable = container(&[(BATCH_CPU, "500"), ("cpu", "100m")], &[]);
        let mut cfg = config(&burstable);
        hook_rules(&on()).pre_create(&pod(&burstable), &burstable, &mut cfg);
        assert_eq!(
            cfg.linux
                .as_ref()
                .unwrap()
                .resources
                .as_ref()
                .unwrap()
                .cpu_shares,
            2
        );
        // A bad quantity is the rule's error; the container keeps what it had.
        let bad = container(&[(BATCH_CPU, "lots")], &[]);
        let mut cfg = config(&bad);
        hook_rules(&on()).pre_create(&pod(&bad), &bad, &mut cfg);
        assert_eq!(cfg.linux.unwrap().resources.unwrap().cpu_shares, 2);
    }
}

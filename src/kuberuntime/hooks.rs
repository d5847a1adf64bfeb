//! The runtime's hook point (koordlet's runtime hooks, run in-process): rules that
//! may change a container's resources before `CreateContainer`, and act before
//! `StartContainer`. Rules run sorted by name; a failing rule is logged and the
//! container goes on without it (koordlet's default failure policy `Ignore`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{info, warn};

use crate::pod::{pod_ref, pod_uid};
use k8s_cri::v1 as cri;

/// A rule that failed, with why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HookError(pub String);

/// One rule.
pub(crate) trait ContainerHook: Send + Sync {
    /// Its name (rules run in name order).
    fn name(&self) -> &'static str;
    /// Before `CreateContainer`: may change the container's resources. Returns
    /// whether it changed anything.
    fn pre_create_container(
        &self,
        pod: &Pod,
        container: &Container,
        resources: &mut cri::LinuxContainerResources,
    ) -> Result<bool, HookError>;
    /// Before `StartContainer` of the created container `id`.
    fn pre_start_container(
        &self,
        _pod: &Pod,
        _container: &Container,
        _id: &str,
    ) -> Result<(), HookError> {
        Ok(())
    }
}

/// The rules, sorted by name.
#[derive(Clone, Default)]
pub(crate) struct ContainerHooks(Vec<Arc<dyn ContainerHook>>);

impl std::fmt::Debug for ContainerHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|h| h.name()))
            .finish()
    }
}

impl ContainerHooks {
    pub(crate) fn new(mut rules: Vec<Arc<dyn ContainerHook>>) -> Self {
        rules.sort_by_key(|r| r.name());
        ContainerHooks(rules)
    }

    /// Runs every rule's `pre_create_container` on `config`'s Linux resources.
    pub(crate) fn pre_create(&self, pod: &Pod, c: &Container, config: &mut cri::ContainerConfig) {
        let Some(res) = config.linux.as_mut().and_then(|l| l.resources.as_mut()) else {
            return;
        };
        for rule in &self.0 {
            match rule.pre_create_container(pod, c, res) {
                Ok(true) => {
                    info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %c.name, hook = rule.name(), cpuShares = res.cpu_shares, cpuQuota = res.cpu_quota, memoryLimit = res.memory_limit_in_bytes, "runtime hook changed the container's resources");
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %c.name, hook = rule.name(), error = %e, "runtime hook failed before create; ignored");
                }
            }
        }
    }

    /// Runs every rule's `pre_start_container`.
    pub(crate) fn pre_start(&self, pod: &Pod, c: &Container, id: &str) {
        for rule in &self.0 {
            if let Err(e) = rule.pre_start_container(pod, c, id) {
                warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %c.name, containerID = %id, hook = rule.name(), error = %e, "runtime hook failed before start; ignored");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Rule(&'static str, Arc<Mutex<Vec<&'static str>>>, bool);

    impl ContainerHook for Rule {
        fn name(&self) -> &'static str {
            self.0
        }
        fn pre_create_container(
            &self,
            _: &Pod,
            _: &Container,
            r: &mut cri::LinuxContainerResources,
        ) -> Result<bool, HookError> {
            self.1.lock().unwrap().push(self.0);
            if self.2 {
                return Err(HookError("boom".into()));
            }
            r.cpu_shares += 1;
            Ok(true)
        }
    }

    #[test]
    fn rules_run_by_name_and_a_failure_is_ignored() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let hooks = ContainerHooks::new(vec![
            Arc::new(Rule("b", log.clone(), false)),
            Arc::new(Rule("a-fails", log.clone(), true)),
            Arc::new(Rule("c", log.clone(), false)),
        ]);
        let mut config = cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                resources: Some(cri::LinuxContainerResources {
                    cpu_shares: 2,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        hooks.pre_create(&Pod::default(), &Container::default(), &mut config);
        assert_eq!(*log.lock().unwrap(), ["a-fails", "b", "c"]);
        assert_eq!(config.linux.unwrap().resources.unwrap().cpu_shares, 4);
    }
}

//! The runtime's hook points (koordlet's runtime hooks, run in-process), one per
//! koordlet stage oxlet has: `PreRunPodSandbox` (the pod's cgroup exists by then),
//! `PreCreateContainer` and `PreUpdateContainerResources` (rules may change the
//! container's CRI resources) and `PreStartContainer`. Rules run sorted by name; a
//! failing rule is logged and the pod or container goes on without it (koordlet's
//! default failure policy `Ignore`).
//!
//! Like kubelet, oxlet calls the CRI's `UpdateContainerResources` only to actuate an
//! in-place pod resize (`resize.rs`); `pre_update` runs on what that call sends.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use tracing::{info, warn};

use crate::pod::{pod_ref, pod_uid};
use k8s_cri::v1 as cri;

/// A rule that failed, with why.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HookError(pub String);

/// One rule; a stage it does not act on is left at its default (nothing).
pub(crate) trait RuntimeHook: Send + Sync {
    /// Its name (rules run in name order).
    fn name(&self) -> &'static str;
    /// Before `RunPodSandbox`, with the pod's cgroup made: may set the pod cgroup's
    /// limits itself. Returns whether it changed anything.
    fn pre_run_pod_sandbox(&self, _pod: &Pod) -> Result<bool, HookError> {
        Ok(false)
    }
    /// Before `CreateContainer`: may change the container's resources. Returns
    /// whether it changed anything.
    fn pre_create_container(
        &self,
        _pod: &Pod,
        _container: &Container,
        _resources: &mut cri::LinuxContainerResources,
    ) -> Result<bool, HookError> {
        Ok(false)
    }
    /// Before `UpdateContainerResources`: may change the resources sent.
    fn pre_update_container_resources(
        &self,
        _pod: &Pod,
        _container: &Container,
        _resources: &mut cri::LinuxContainerResources,
    ) -> Result<bool, HookError> {
        Ok(false)
    }
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
pub(crate) struct RuntimeHooks(Vec<Arc<dyn RuntimeHook>>);

impl std::fmt::Debug for RuntimeHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|h| h.name()))
            .finish()
    }
}

/// A container-resources stage: which rule method, and its name for the logs.
type ResourcesStage = fn(
    &dyn RuntimeHook,
    &Pod,
    &Container,
    &mut cri::LinuxContainerResources,
) -> Result<bool, HookError>;

impl RuntimeHooks {
    pub(crate) fn new(mut rules: Vec<Arc<dyn RuntimeHook>>) -> Self {
        rules.sort_by_key(|r| r.name());
        RuntimeHooks(rules)
    }

    /// Runs every rule's `pre_run_pod_sandbox`.
    pub(crate) fn pre_run_pod_sandbox(&self, pod: &Pod) {
        for rule in &self.0 {
            if let Err(e) = rule.pre_run_pod_sandbox(pod) {
                warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), hook = rule.name(), stage = "PreRunPodSandbox", error = %e, "runtime hook failed before the sandbox; ignored");
            }
        }
    }

    /// Runs every rule's `pre_create_container` on `config`'s Linux resources.
    pub(crate) fn pre_create(&self, pod: &Pod, c: &Container, config: &mut cri::ContainerConfig) {
        let Some(res) = config.linux.as_mut().and_then(|l| l.resources.as_mut()) else {
            return;
        };
        self.run_resources_stage("PreCreateContainer", pod, c, res, |r, p, c, res| {
            r.pre_create_container(p, c, res)
        });
    }

    /// Runs every rule's `pre_update_container_resources` on the resources an
    /// `UpdateContainerResources` call would send.
    pub(crate) fn pre_update(
        &self,
        pod: &Pod,
        c: &Container,
        res: &mut cri::LinuxContainerResources,
    ) {
        self.run_resources_stage(
            "PreUpdateContainerResources",
            pod,
            c,
            res,
            |r, p, c, res| r.pre_update_container_resources(p, c, res),
        );
    }

    fn run_resources_stage(
        &self,
        stage: &'static str,
        pod: &Pod,
        c: &Container,
        res: &mut cri::LinuxContainerResources,
        call: ResourcesStage,
    ) {
        for rule in &self.0 {
            match call(rule.as_ref(), pod, c, res) {
                Ok(true) => {
                    info!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %c.name, hook = rule.name(), stage, cpuShares = res.cpu_shares, cpuQuota = res.cpu_quota, memoryLimit = res.memory_limit_in_bytes, "runtime hook changed the container's resources");
                }
                Ok(false) => {}
                Err(e) => {
                    warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), container = %c.name, hook = rule.name(), stage, error = %e, "runtime hook failed; ignored");
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

    impl Rule {
        fn bump(&self, r: &mut cri::LinuxContainerResources) -> Result<bool, HookError> {
            self.1.lock().unwrap().push(self.0);
            if self.2 {
                return Err(HookError("boom".into()));
            }
            r.cpu_shares += 1;
            Ok(true)
        }
    }

    impl RuntimeHook for Rule {
        fn name(&self) -> &'static str {
            self.0
        }
        fn pre_run_pod_sandbox(&self, _: &Pod) -> Result<bool, HookError> {
            self.1.lock().unwrap().push(self.0);
            Ok(true)
        }
        fn pre_create_container(
            &self,
            _: &Pod,
            _: &Container,
            r: &mut cri::LinuxContainerResources,
        ) -> Result<bool, HookError> {
            self.bump(r)
        }
        fn pre_update_container_resources(
            &self,
            _: &Pod,
            _: &Container,
            r: &mut cri::LinuxContainerResources,
        ) -> Result<bool, HookError> {
            self.bump(r).map(|_| {
                r.cpu_quota = 5000;
                true
            })
        }
    }

    fn rules(log: &Arc<Mutex<Vec<&'static str>>>) -> RuntimeHooks {
        RuntimeHooks::new(vec![
            Arc::new(Rule("b", log.clone(), false)),
            Arc::new(Rule("a-fails", log.clone(), true)),
            Arc::new(Rule("c", log.clone(), false)),
        ])
    }

    #[test]
    fn rules_run_by_name_and_a_failure_is_ignored() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let hooks = rules(&log);
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

    #[test]
    fn the_sandbox_and_update_stages_run_each_rule_once() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let hooks = rules(&log);
        hooks.pre_run_pod_sandbox(&Pod::default());
        assert_eq!(*log.lock().unwrap(), ["a-fails", "b", "c"]);
        log.lock().unwrap().clear();
        let mut res = cri::LinuxContainerResources {
            cpu_shares: 2,
            ..Default::default()
        };
        hooks.pre_update(&Pod::default(), &Container::default(), &mut res);
        assert_eq!(*log.lock().unwrap(), ["a-fails", "b", "c"]);
        assert_eq!((res.cpu_shares, res.cpu_quota), (4, 5000));
    }
}

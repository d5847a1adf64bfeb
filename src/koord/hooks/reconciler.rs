//! koordlet's runtime hooks reconciler (`runtimehooks/reconciler`): every rule put
//! back on the QoS cgroups, on each running pod's cgroup and on its running
//! containers' cgroups, every 10 s and at once when the NodeSLO or the Node (its CPU
//! normalization ratio, koordlet's `ruleUpdateCbForNodeMeta`) changes a rule. It
//! covers pods that were running before oxlet started, and repairs what was changed
//! from outside; a value the cgroup already holds is never written.
//!
//! Pods come from the pod manager and the PLEG cache (the metric advisor's
//! [`ManagedPods`](crate::advisor::ManagedPods): each pod with a ready sandbox,
//! its cgroup from the container manager, its running containers' cgroups from
//! their runtime IDs, each checked to be one path component).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::protocol::{Cause, CgroupRule, Pass, Target, apply};
use super::rule::{HookRule, SharedRule};
use crate::advisor::{PodTarget, TargetLister};
use crate::cm::{ContainerManager, QosClass};
use crate::koord::slo::NodeView;
use crate::koordapi::{QosConfig, next_update};
use crate::pod::{PodManager, pod_ref, pod_uid};

/// koordlet's `RuntimeHookReconcileInterval`.
pub(crate) const RECONCILE_INTERVAL: Duration = Duration::from_secs(10);

/// The Node's CPU normalization ratio each time the Node changes; pending forever
/// without a Node watch (standalone mode) or once it has ended.
async fn next_ratio(node: &mut Option<NodeView>) -> Option<f64> {
    loop {
        let Some(rx) = node.as_mut() else {
            return std::future::pending().await;
        };
        if rx.changed().await.is_ok() {
            return rx
                .borrow_and_update()
                .as_ref()
                .and_then(|n| n.cpu_normalization_ratio);
        }
        *node = None;
    }
}

/// See the module doc.
pub(crate) struct HookReconciler {
    pub rules: Vec<Arc<dyn CgroupRule>>,
    /// The rule in force, which the hook points read too.
    pub rule: Arc<SharedRule>,
    pub cm: Arc<ContainerManager>,
    pub pods: Arc<PodManager>,
    pub lister: Box<dyn TargetLister>,
}

impl HookReconciler {
    /// Reconciles at once, then every [`RECONCILE_INTERVAL`] and whenever `updates`
    /// (this node's NodeSLO) or `node` (its Node) changes the rule, until cancelled.
    pub(crate) async fn run(
        self,
        mut updates: Option<watch::Receiver<QosConfig>>,
        mut node: Option<NodeView>,
        cancel: CancellationToken,
    ) {
        if let Some(rx) = node.as_mut() {
            let ratio = rx
                .borrow_and_update()
                .as_ref()
                .and_then(|n| n.cpu_normalization_ratio);
            self.take_ratio(ratio);
        }
        let mut tick = tokio::time::interval(RECONCILE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                cfg = next_update(&mut updates) => {
                    if self.take_config(&cfg) {
                        self.reconcile(Cause::RuleChanged);
                    }
                }
                ratio = next_ratio(&mut node) => {
                    if self.take_ratio(ratio) {
                        self.reconcile(Cause::RuleChanged);
                    }
                }
                _ = tick.tick() => {
                    self.reconcile(Cause::Drift);
                }
            }
        }
    }

    /// Takes the rule a new configuration makes; says so and returns true when it
    /// changed.
    pub(crate) fn take_config(&self, cfg: &QosConfig) -> bool {
        let Some(old) = self.rule.update(cfg) else {
            return false;
        };
        let new = self.rule.get();
        info!(
            batchCfsQuota = new.batch_cfs_quota,
            wasBatchCfsQuota = old.batch_cfs_quota,
            enable = cfg.enable,
            "runtime hook rule changed by the NodeSLO (batch pods get a CFS quota unless CPU suppress holds BestEffort by CFS quota); reconciling now"
        );
        true
    }

    /// Takes the Node's CPU normalization ratio; says so and returns true when it
    /// changed the rule.
    pub(crate) fn take_ratio(&self, ratio: Option<f64>) -> bool {
        let Some(old) = self.rule.update_ratio(ratio) else {
            return false;
        };
        info!(
            cpuNormalizationRatio = ratio.unwrap_or(-1.0),
            was = old.cpu_normalization_ratio.unwrap_or(-1.0),
            "runtime hook rule changed by the Node (batch CFS quotas are divided by its CPU normalization ratio above 1); reconciling now"
        );
        true
    }

    /// One pass over every level: the QoS cgroups, then each pod and its containers.
    /// Returns how many cgroup values it wrote.
    pub(crate) fn reconcile(&self, cause: Cause) -> usize {
        let rule = self.rule.get();
        let mut written = self.reconcile_qos(rule, cause);
        for target in self.lister.list() {
            let Some(pod) = self.pods.get(&target.uid) else {
                continue;
            };
            for r in &self.rules {
                written += self.reconcile_pod(r.as_ref(), &pod, &target, rule, cause);
            }
        }
        debug!(written, "runtime hooks reconciler: pass done");
        written
    }

    fn reconcile_qos(&self, rule: HookRule, cause: Cause) -> usize {
        let mut written = 0;
        for class in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            let Some(path) = self.cm.qos_cgroup_path(class) else {
                return 0;
            };
            for r in &self.rules {
                let Some(want) = r.kube_qos(class, rule) else {
                    continue;
                };
                let t = Target {
                    pod: None,
                    container: None,
                    level: "kubeqos",
                    path: &path,
                };
                match apply(&self.cm, &t, r.name(), want, Pass::All, cause) {
                    Ok(n) => written += n,
                    Err(e) => {
                        warn!(cgroup = %path, hook = r.name(), error = %e, "runtime hooks reconciler: cannot set a QoS cgroup; next round tries again");
                    }
                }
            }
        }
        written
    }

    /// The pod's looser values, its containers', then its tighter values; returns
    /// how many it wrote.
    fn reconcile_pod(
        &self,
        r: &dyn CgroupRule,
        pod: &Pod,
        target: &PodTarget,
        rule: HookRule,
        cause: Cause,
    ) -> usize {
        let fail = |what: &str, e: &dyn std::fmt::Display| {
            warn!(pod = %pod_ref(pod), podUID = %pod_uid(pod), hook = r.name(), error = %e, "runtime hooks reconciler: cannot {what}; next round tries again");
        };
        let pod_want = match r.pod(pod, rule) {
            Ok(w) => w,
            Err(e) => {
                fail("compute the pod's values", &e);
                return 0;
            }
        };
        let set = |t: &Target<'_>, want, pass| match apply(&self.cm, t, r.name(), want, pass, cause)
        {
            Ok(n) => n,
            Err(e) => {
                fail("set a cgroup", &e);
                0
            }
        };
        let pod_target = target.cgroup.as_deref().map(|path| Target {
            pod: Some(pod),
            container: None,
            level: "pod",
            path,
        });
        let set_pod = |pass| match (pod_want, &pod_target) {
            (Some(want), Some(t)) => set(t, want, pass),
            _ => 0,
        };
        let mut written = set_pod(Pass::Looser);
        for c in &target.containers {
            let Some(spec) = container_spec(pod, &c.name) else {
                continue;
            };
            let want = match r.container(pod, spec, rule) {
                Ok(Some(w)) => w,
                Ok(None) => continue,
                Err(e) => {
                    fail("compute a container's values", &e);
                    return written;
                }
            };
            let t = Target {
                pod: Some(pod),
                container: Some(&c.name),
                level: "container",
                path: &c.cgroup,
            };
            written += set(&t, want, Pass::All);
        }
        written + set_pod(Pass::Tighter)
    }
}

/// The named container's spec, init containers included (as koordlet's reconciler).
fn container_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

//! The runtime read back from CRI objects: pods grouped by their UID label, and one
//! pod's full status. Holds only the read-only CRI view, so its users (the PLEG) can
//! look at the runtime but never change it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use futures::future::join_all;
use k8s_cri::v1 as cri;

use super::labels;
use super::termination;
use super::types::*;
use crate::cri::CriError;
use crate::cri::CriRead;
use crate::cri::Lookup;

/// The pod a container event names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EventPod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
}

/// A read-only view of the runtime.
#[derive(Clone)]
pub(crate) struct RuntimeReader {
    cri: Arc<dyn CriRead>,
    /// `<root-dir>/pods` and the pod log dir: where termination messages are read from.
    dirs: Arc<(PathBuf, PathBuf)>,
}

impl RuntimeReader {
    pub(crate) fn new(cri: Arc<dyn CriRead>, pods_dir: PathBuf, logs_dir: PathBuf) -> Self {
        RuntimeReader {
            cri,
            dirs: Arc::new((pods_dir, logs_dir)),
        }
    }

    /// The runtime's container event stream (see [`CriRead::container_events`]).
    pub(crate) async fn container_events(&self) -> Result<crate::cri::ContainerEvents, CriError> {
        self.cri.container_events().await
    }

    /// The pod a container event is about, as (UID, name, namespace), from the pod UID
    /// label of the sandbox the event carries; None for a sandbox oxlet did not make.
    pub(crate) fn event_pod(event: &cri::ContainerEventResponse) -> Option<EventPod> {
        let sandbox = event.pod_sandbox_status.as_ref()?;
        let uid = sandbox.labels.get(labels::POD_UID_LABEL)?;
        let md = sandbox.metadata.as_ref()?;
        Some(EventPod {
            uid: uid.clone(),
            name: md.name.clone(),
            namespace: md.namespace.clone(),
        })
    }

    /// Every pod in the runtime, grouped by pod UID label (two list calls).
    pub(crate) async fn get_pods(&self) -> Result<Vec<RuntimePod>, CriError> {
        let (sandboxes, containers) = tokio::try_join!(
            self.cri.list_pod_sandbox(None),
            self.cri.list_containers(None)
        )?;
        let mut pods: HashMap<String, RuntimePod> = HashMap::new();
        for sb in sandboxes {
            let Some(uid) = sb.labels.lookup(labels::POD_UID_LABEL).map(str::to_string) else {
                continue;
            };
            let md = sb.metadata.clone().unwrap_or_default();
            let pod = pods.entry(uid.clone()).or_insert_with(|| RuntimePod {
                uid,
                name: md.name.clone(),
                namespace: md.namespace.clone(),
                ..Default::default()
            });
            pod.sandboxes.push(RuntimeSandbox {
                id: sb.id,
                ready: sb.state == cri::PodSandboxState::SandboxReady as i32,
                attempt: md.attempt,
                created_at: sb.created_at,
            });
        }
        for c in containers {
            let info = labels::container_info(c.labels.as_slice(), c.annotations.as_slice());
            if info.pod_uid.is_empty() {
                continue;
            }
            let pod = pods
                .entry(info.pod_uid.clone())
                .or_insert_with(|| RuntimePod {
                    uid: info.pod_uid.clone(),
                    name: info.pod_name.clone(),
                    namespace: info.pod_namespace.clone(),
                    ..Default::default()
                });
            pod.containers.push(RuntimeContainer {
                id: c.id,
                sandbox_id: c.pod_sandbox_id,
                name: info.container_name,
                state: ContainerState::from_cri(c.state),
                hash: info.hash,
                created_at: c.created_at,
            });
        }
        let mut pods: Vec<RuntimePod> = pods.into_values().collect();
        for p in &mut pods {
            p.sandboxes.sort_by_key(|x| std::cmp::Reverse(x.created_at));
            p.containers
                .sort_by_key(|x| std::cmp::Reverse(x.created_at));
        }
        Ok(pods)
    }

    /// Full status of one pod: every sandbox and container, newest first.
    pub(crate) async fn get_pod_status(
        &self,
        uid: &str,
        name: &str,
        namespace: &str,
    ) -> Result<PodRuntimeStatus, CriError> {
        let selector = HashMap::from([(labels::POD_UID_LABEL.to_string(), uid.to_string())]);
        let (sandboxes, containers) = tokio::try_join!(
            self.cri.list_pod_sandbox(Some(cri::PodSandboxFilter {
                label_selector: selector.clone(),
                ..Default::default()
            })),
            self.cri.list_containers(Some(cri::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
        )?;
        let sb_statuses =
            join_all(sandboxes.iter().map(|s| self.cri.pod_sandbox_status(&s.id))).await;
        let mut status = PodRuntimeStatus {
            uid: uid.to_string(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            ..Default::default()
        };
        for s in sb_statuses {
            let s = match s {
                Ok(s) => s,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            let host_network = s
                .linux
                .as_ref()
                .and_then(|l| l.namespaces.as_ref())
                .and_then(|n| n.options.as_ref())
                .map(|o| o.network == cri::NamespaceMode::Node as i32)
                .unwrap_or(false);
            let mut ips = Vec::new();
            if let Some(net) = &s.network {
                if !net.ip.is_empty() {
                    ips.push(net.ip.clone());
                }
                ips.extend(net.additional_ips.iter().map(|i| i.ip.clone()));
            }
            status.sandboxes.push(SandboxStatus {
                id: s.id,
                ready: s.state == cri::PodSandboxState::SandboxReady as i32,
                attempt: s.metadata.map(|m| m.attempt).unwrap_or(0),
                created_at: s.created_at,
                ips,
                host_network,
            });
        }
        status
            .sandboxes
            .sort_by_key(|x| std::cmp::Reverse(x.created_at));
        if let Some(newest) = status.sandboxes.first().filter(|s| s.ready) {
            status.ips = newest.ips.clone();
        }
        let c_statuses =
            join_all(containers.iter().map(|c| self.cri.container_status(&c.id))).await;
        for cs in c_statuses {
            let cs = match cs {
                Ok(cs) => cs,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            let info = labels::container_info(&cs.labels, &cs.annotations);
            let message = self.message_of(&cs);
            status.containers.push(ContainerStatus {
                id: cs.id,
                name: info.container_name,
                state: ContainerState::from_cri(cs.state),
                created_at: cs.created_at,
                started_at: cs.started_at,
                finished_at: cs.finished_at,
                exit_code: cs.exit_code,
                image: cs.image.map(|i| i.image).unwrap_or_default(),
                image_ref: cs.image_ref,
                reason: cs.reason,
                message,
                hash: info.hash,
                restart_count: info.restart_count,
                is_init: info.is_init,
                user: cs.user.and_then(|u| u.linux).map(|l| ContainerUser {
                    uid: l.uid,
                    gid: l.gid,
                    supplemental_groups: l.supplemental_groups,
                }),
                resources: (cs.resources.and_then(|r| r.linux))
                    .map(|l| RuntimeResources::from_cri(&l)),
            });
        }
        status
            .containers
            .sort_by_key(|x| std::cmp::Reverse(x.created_at));
        Ok(status)
    }

    /// The runtime's message, followed for an exited container by its termination
    /// message (kubelet's `getContainerStatuses`): the file, or the log's tail under
    /// `FallbackToLogsOnError` after a non-zero exit of a container that did run.
    fn message_of(&self, cs: &cri::ContainerStatus) -> String {
        let mut message = cs.message.clone();
        if ContainerState::from_cri(cs.state) != ContainerState::Exited {
            return message;
        }
        let path = cs
            .annotations
            .get(labels::TERMINATION_MESSAGE_PATH_ANNOTATION)
            .map_or(termination::DEFAULT_PATH, String::as_str);
        let fallback = cs
            .annotations
            .get(labels::TERMINATION_MESSAGE_POLICY_ANNOTATION)
            .is_some_and(|p| p == termination::POLICY_FALLBACK)
            && cs.exit_code != 0
            && cs.reason != "ContainerCannotRun";
        let (pods_dir, logs_dir) = &*self.dirs;
        let t = termination::exited_message(pods_dir, logs_dir, cs, path, fallback);
        if !t.is_empty() {
            if !message.is_empty() {
                message.push_str(": ");
            }
            message.push_str(&t);
        }
        message
    }
}

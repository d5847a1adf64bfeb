//! Pod helpers every room may use: the names kubelet logs a pod by, its UID,
//! the source names and the `kubernetes.io/config.*` annotations (kubelet's
//! `pkg/kubelet/types`), whether a pod is a mirror or a critical one, and the
//! phases, reasons and policies as enums (`enums`), whether an exited container
//! restarts (`restart`), and the pod manager
//! (`manager`: kubelet's `pkg/kubelet/pod`, the desired pods every room reads). No
//! logic of its own beyond reading a pod's metadata and spec and keeping that set.

use k8s_openapi::api::core::v1::Pod;

mod enums;
mod image_ref;
mod layout;
mod manager;
mod names;
mod restart;
pub(crate) use enums::{
    ImagePullPolicy, Phase, ProbeKind, RestartPolicy, TerminatedReason, WaitingReason,
};
pub(crate) use image_ref::{
    InvalidImageRef, check as check_image_ref, repository as image_repository,
};
pub(crate) use layout::{
    HOSTS_FILE, VOLUMES_DIR, container_dir, pod_dir, pod_log_dir, pod_volumes_dir, volume_dir,
};
pub(crate) use manager::{PodManager, is_api_mirror};
pub(crate) use names::{is_dns1123_label, is_dns1123_subdomain};
#[cfg(test)]
pub(crate) use restart::restart_on;
pub(crate) use restart::{
    RULE_ACTION_RESTART, RULE_OPERATORS, container_should_restart, is_container_restartable,
    restarts_without_exit_code,
};

/// The source name of the static pod directory (kubelet's `kubetypes.FileSource`).
pub(crate) const FILE_SOURCE: &str = "file";
/// The source name of the manifest URL (kubelet's `kubetypes.HTTPSource`).
pub(crate) const HTTP_SOURCE: &str = "http";
/// The source name of the apiserver (kubelet's `kubetypes.ApiserverSource`).
pub(crate) const API_SOURCE: &str = "api";

/// Annotation naming the source a pod came from.
pub(crate) const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation holding the static pod's hash (equal to its UID).
pub(crate) const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Annotation holding when the merger first saw the pod (RFC 3339 with nanoseconds).
pub(crate) const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Annotation marking a mirror pod (cluster mode).
pub(crate) const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// `namespace/name` of a pod, the form every log line uses.
pub(crate) fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The pod's UID, or "" when it has none.
pub(crate) fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// kubelet's internal "full name": `<name>_<namespace>`.
pub(crate) fn pod_full_name(pod: &Pod) -> String {
    format!(
        "{}_{}",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("default")
    )
}

/// The source a pod came from, from its `kubernetes.io/config.source` annotation.
pub(crate) fn pod_source(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .map(String::as_str)
}

/// Static pods are those not from the apiserver.
pub(crate) fn is_static_pod(pod: &Pod) -> bool {
    matches!(pod_source(pod), Some(s) if s != API_SOURCE)
}

/// Whether the pod shares the node's network namespace.
pub(crate) fn is_host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// Whether `pod` is a mirror pod: the apiserver's copy of a static pod, marked with
/// `kubernetes.io/config.mirror` (kubelet's `IsMirrorPod`). It is never run itself.
pub(crate) fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION))
}

/// kubelet's `SystemCriticalPriority`.
pub(crate) const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// kubelet's `IsCriticalPod`, exactly: static, mirror, or a priority at least
/// system-critical.
pub(crate) fn is_critical_pod(pod: &Pod) -> bool {
    is_static_pod(pod)
        || is_mirror(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority)
            .is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// Pods a node agent never evicts: [`is_critical_pod`], and also a pod whose
/// priority class is system-node- or system-cluster-critical, for pods whose
/// priority no admission filled in.
pub(crate) fn is_critical(pod: &Pod) -> bool {
    is_critical_pod(pod)
        || pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
            .is_some_and(|c| c == "system-node-critical" || c == "system-cluster-critical")
}

//! Pod helpers every room may use: the names kubelet logs a pod by, its UID,
//! the source names and the `kubernetes.io/config.*` annotations (kubelet's
//! `pkg/kubelet/types`), and the phases, reasons and policies as enums (`enums`).
//! No logic of its own beyond reading a pod's metadata.

use k8s_openapi::api::core::v1::Pod;

mod enums;
pub use enums::{
    ImagePullPolicy, Phase, RestartPolicy, TerminatedReason, UnknownValue, WaitingReason,
};

/// The source name of the static pod directory (kubelet's `kubetypes.FileSource`).
pub const FILE_SOURCE: &str = "file";
/// The source name of the manifest URL (kubelet's `kubetypes.HTTPSource`).
pub const HTTP_SOURCE: &str = "http";
/// The source name of the apiserver (kubelet's `kubetypes.ApiserverSource`).
pub const API_SOURCE: &str = "api";

/// Annotation naming the source a pod came from.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation holding the static pod's hash (equal to its UID).
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Annotation holding when the merger first saw the pod (RFC 3339 with nanoseconds).
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Annotation marking a mirror pod (cluster mode).
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// `namespace/name` of a pod, the form every log line uses.
pub fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The pod's UID, or "" when it has none.
pub fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// kubelet's internal "full name": `<name>_<namespace>`.
pub fn pod_full_name(pod: &Pod) -> String {
    format!(
        "{}_{}",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("default")
    )
}

/// The source a pod came from, from its `kubernetes.io/config.source` annotation.
pub fn pod_source(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .map(String::as_str)
}

/// Static pods are those not from the apiserver.
pub fn is_static_pod(pod: &Pod) -> bool {
    matches!(pod_source(pod), Some(s) if s != API_SOURCE)
}

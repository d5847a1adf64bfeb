//! Pod configuration: command line and config file (`options`), pod sources
//! (`file`), and the merger that turns per-source snapshots into ADD / UPDATE /
//! DELETE / REMOVE / RECONCILE updates (`merge`). Never touches the runtime.

pub mod duration;
pub mod file;
pub mod flags;
pub mod kubelet_config;
pub mod manifest;
pub mod merge;
pub mod options;

use k8s_openapi::api::core::v1::Pod;

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

/// What a source sends: its complete current set of pods (kubelet's `SET`).
#[derive(Debug, Clone)]
pub struct SourceSnapshot {
    pub source: &'static str,
    pub pods: Vec<Pod>,
}

/// The kind of a merged update, in kubelet's emission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PodOperation {
    /// Pods gone from their source: terminate them now.
    Remove,
    /// Pods new to the node.
    Add,
    /// Pods whose spec, labels or annotations changed.
    Update,
    /// Pods changed and marked for graceful deletion (`deletionTimestamp`).
    Delete,
    /// Only the status changed.
    Reconcile,
}

impl PodOperation {
    pub fn as_str(self) -> &'static str {
        match self {
            PodOperation::Remove => "REMOVE",
            PodOperation::Add => "ADD",
            PodOperation::Update => "UPDATE",
            PodOperation::Delete => "DELETE",
            PodOperation::Reconcile => "RECONCILE",
        }
    }
}

/// One merged update for the sync loop.
#[derive(Debug, Clone)]
pub struct PodUpdate {
    pub op: PodOperation,
    pub source: &'static str,
    pub pods: Vec<Pod>,
}

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

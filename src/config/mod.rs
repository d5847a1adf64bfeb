//! kubelet's `pkg/kubelet/config`: the pod sources (`file`, `http`, `apiserver`), static pod manifests (`manifest`), and the merger that turns
//! per-source snapshots into ADD / UPDATE / DELETE / REMOVE / RECONCILE updates
//! (`merge`). Never touches the runtime.

mod apiserver;
mod file;
mod http;
mod manifest;
mod merge;

// The sources' tasks and the merger, for the agent to start.
pub(crate) use apiserver::run_api_source;
pub(crate) use file::run_file_source;
pub(crate) use http::{UrlSource, run_http_source};
pub(crate) use merge::{PodConfig, run_merger};
// The manifest decoders whole, for the fuzz targets (`crate::fuzzing`).
pub(crate) use manifest::{decode_static_pod, decode_url_pods};

use k8s_openapi::api::core::v1::Pod;

/// What a source sends: its complete current set of pods (kubelet's `SET`).
#[derive(Debug, Clone)]
pub(crate) struct SourceSnapshot {
    pub source: &'static str,
    pub pods: Vec<Pod>,
}

/// The kind of a merged update, in kubelet's emission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum PodOperation {
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
    pub(crate) fn as_str(self) -> &'static str {
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
pub(crate) struct PodUpdate {
    pub op: PodOperation,
    pub source: &'static str,
    pub pods: Vec<Pod>,
}

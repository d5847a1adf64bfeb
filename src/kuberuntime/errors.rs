//! The errors of a pod sync (kubelet's `pkg/kubelet/container/sync_result.go`: the
//! kinds of failure a `SyncPod` or `KillPod` reports, `ErrCreatePodSandbox`,
//! `ErrKillContainer`, `ErrRunContainer` and the rest), as the pod worker reads them.

use std::time::Duration;

use super::sandbox;
use crate::cri::CriError;
use crate::pod::WaitingReason;

/// A sync failure that is not a per-container back-off. It reaches the pod worker
/// whole, so the worker can tell what kind it is (`retryable`, `back_off`,
/// `waiting_reason`) rather than read a message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    #[error("failed to create pod sandbox: {0}")]
    CreateSandbox(CriError),
    /// No user namespace for a `hostUsers: false` pod (kubelet's sandbox config error).
    #[error("failed to create pod sandbox: {0}")]
    UserNamespace(super::userns::UsernsError),
    /// kubelet's `LookupRuntimeHandler` failing: the pod's RuntimeClass is not there.
    #[error("failed to create pod sandbox: {0}")]
    RuntimeClass(crate::objects::ObjectError),
    #[error("failed to kill pod: {}", join(.0))]
    KillContainers(Vec<StopError>),
    #[error("failed to kill pod: {0}")]
    StopSandbox(CriError),
    #[error(transparent)]
    Cri(#[from] CriError),
    /// Containers that could not start; `retry_after` is the soonest end of a
    /// back-off other containers of the same sync are in.
    #[error("{}", join(.errors))]
    Containers {
        errors: Vec<ContainerStartError>,
        retry_after: Option<Duration>,
    },
    #[error("pod directories: {0}")]
    Path(#[from] crate::safe_path::PathError),
    /// kubelet's `makePodDataDirs` failing: nothing of the pod is written yet.
    #[error("unable to make pod data directories: {0}")]
    DataDirs(crate::volumes::DataDirError),
    /// kubelet's `WaitForAttachAndMount` failing: the pod gets no sandbox yet.
    #[error("unable to attach or mount volumes: unmounted volumes=[{}]", .0.join(" "))]
    UnmountedVolumes(Vec<String>),
    /// kubelet's `CreatePodSandboxConfigError`: DNS settings or host name.
    #[error("failed to make the pod sandbox config: {0}")]
    SandboxConfig(sandbox::SandboxConfigError),
    /// kubelet's `NetworkNotReadyErrorMsg`: the runtime's network is not ready and the
    /// pod is not on the host network, so it waits.
    #[error("network is not ready: {0}")]
    NetworkNotReady(String),
    /// An in-place resize that could not be carried out (kubelet's `doPodResizeAction`
    /// failing): the pod's `PodResizeInProgress` condition shows it with reason
    /// `Error` and this message; the next sync tries again.
    #[error("{0}")]
    Resize(super::resize::ResizeError),
    /// kubelet's `PrepareDynamicResources` failing: the pod's claims are not prepared
    /// (a driver is missing or refused), so it gets no sandbox yet; retried.
    #[error("failed to prepare dynamic resources: {0}")]
    PrepareResources(crate::contracts::GrantError),
}

impl From<sandbox::SandboxConfigError> for SyncError {
    fn from(e: sandbox::SandboxConfigError) -> Self {
        match e {
            sandbox::SandboxConfigError::Path(p) => SyncError::Path(p),
            other => SyncError::SandboxConfig(other),
        }
    }
}

impl From<crate::volumes::DataDirError> for SyncError {
    fn from(e: crate::volumes::DataDirError) -> Self {
        match e {
            crate::volumes::DataDirError::Path(p) => SyncError::Path(p),
            other => SyncError::DataDirs(other),
        }
    }
}

impl SyncError {
    /// False when trying the same pod again cannot succeed: its directories would
    /// leave their base (the pod's UID or names are unsafe, and a pod never changes
    /// its UID).
    pub(crate) fn retryable(&self) -> bool {
        match self {
            SyncError::Path(_) => false,
            SyncError::SandboxConfig(e) => e.retryable(),
            _ => true,
        }
    }

    /// When the runtime wants the pod synced again regardless of this failure
    /// (a crash-loop or image back-off of another container ends then).
    pub(crate) fn back_off(&self) -> Option<Duration> {
        match self {
            SyncError::Containers { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The message of a resize that failed (for `PodResizeInProgress`, reason `Error`).
    pub(crate) fn resize_error(&self) -> Option<String> {
        match self {
            SyncError::Resize(e) => Some(e.to_string()),
            _ => None,
        }
    }

    /// The waiting reason the failure shows (the first failed container's).
    pub(crate) fn waiting_reason(&self) -> Option<WaitingReason> {
        match self {
            SyncError::Containers { errors, .. } => errors.first().map(|e| e.reason),
            _ => None,
        }
    }
}

/// One container that could not be started, with the waiting reason it now shows.
#[derive(Debug, thiserror::Error)]
#[error("{container}: {reason}: {message}")]
pub(crate) struct ContainerStartError {
    pub container: String,
    pub reason: WaitingReason,
    pub message: String,
}

/// One container that could not be stopped.
#[derive(Debug, thiserror::Error)]
#[error("{container}: {source}")]
pub(crate) struct StopError {
    pub container: String,
    pub source: CriError,
}

/// `a; b; c`, the form a list of failures is logged in.
fn join<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

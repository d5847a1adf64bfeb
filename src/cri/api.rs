//! The CRI boundary: the runtime and image calls oxlet makes, as traits, so the
//! runtime manager, the PLEG and the sync loop can run against the real client
//! ([`super::RemoteRuntime`]) or, in unit tests, the in-memory fake (`fake.rs`).
//!
//! [`CriRead`] only looks; [`Cri`] also changes things. The PLEG holds a `CriRead`,
//! so it cannot mutate containers by construction. Methods return boxed futures so
//! the traits are object-safe: the manager holds one `Arc<dyn Cri>` and nothing
//! above it becomes generic.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_cri::v1 as cri;

use super::listing::{ListedContainer, ListedSandbox};
use super::remote::CriError;

/// A CRI call's result, boxed so the traits stay object-safe.
pub(crate) type CriFuture<'a, T> = BoxFuture<'a, Result<T, CriError>>;

/// The runtime's container events (`GetContainerEvents`), until the stream ends or fails.
pub(crate) type ContainerEvents = BoxStream<'static, Result<cri::ContainerEventResponse, CriError>>;

/// What one `ExecSync` returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ExecOutput {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit_code: i32,
}

/// A streaming session the runtime serves itself (kubelet asks for its URL, then
/// proxies the client's upgraded connection to it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StreamRequest {
    Exec(cri::ExecRequest),
    Attach(cri::AttachRequest),
    PortForward(cri::PortForwardRequest),
}

/// The read-only CRI calls: listing and inspecting, never changing.
pub(crate) trait CriRead: Send + Sync {
    fn version(&self) -> CriFuture<'_, cri::VersionResponse>;
    fn status(&self) -> CriFuture<'_, cri::StatusResponse>;
    fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> CriFuture<'_, Vec<ListedSandbox>>;
    fn pod_sandbox_status<'a>(&'a self, id: &'a str) -> CriFuture<'a, cri::PodSandboxStatus>;
    fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> CriFuture<'_, Vec<ListedContainer>>;
    fn container_status<'a>(&'a self, id: &'a str) -> CriFuture<'a, cri::ContainerStatus>;
    /// The image's status, or None when it is not present.
    fn image_status<'a>(&'a self, image: &'a str) -> CriFuture<'a, Option<cri::Image>>;
    /// The image filesystems' use (`ImageFsInfo`), for the node's `imageFs` stats.
    fn image_fs_info(&self) -> CriFuture<'_, Vec<cri::FilesystemUsage>>;
    /// The runtime's sandbox (pause) image, from its verbose `Status` (containerd's
    /// `config.sandboxImage`); None when the runtime does not say. The image GC keeps it,
    /// as kubelet keeps `--pod-infra-container-image`.
    fn sandbox_image(&self) -> CriFuture<'_, Option<String>>;
    /// Every image the runtime has (`ListImages`), for the image GC.
    fn list_images(&self) -> CriFuture<'_, Vec<cri::Image>>;
    /// The containers' stats (`ListContainerStats`): the metric advisor reads each
    /// container's writable layer for the summary's `rootfs`, the eviction manager for
    /// ephemeral-storage limits.
    fn list_container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> CriFuture<'_, Vec<cri::ContainerStats>>;
    /// Subscribe to the runtime's container events (CRI `GetContainerEvents`, which
    /// kubelet's evented PLEG reads). No deadline: containerd 1.7 and 2.x answer the call
    /// only with the first event, so this resolves then; 1.6 answers `Unimplemented` at once.
    fn container_events(&self) -> CriFuture<'_, ContainerEvents>;
}

/// Every CRI call oxlet makes: the reads plus the ones that change the runtime.
pub(crate) trait Cri: CriRead {
    /// Returns the new sandbox's ID. `runtime_handler` names the runtime to run it
    /// with ("" is the runtime's default).
    fn run_pod_sandbox<'a>(
        &'a self,
        config: cri::PodSandboxConfig,
        runtime_handler: &'a str,
    ) -> CriFuture<'a, String>;
    fn stop_pod_sandbox<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()>;
    fn remove_pod_sandbox<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()>;
    /// Returns the new container's ID.
    fn create_container<'a>(
        &'a self,
        sandbox_id: &'a str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> CriFuture<'a, String>;
    fn start_container<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()>;
    /// SIGTERM, then SIGKILL after `timeout_secs`.
    fn stop_container<'a>(&'a self, id: &'a str, timeout_secs: i64) -> CriFuture<'a, ()>;
    fn remove_container<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()>;
    /// Pulls the image; returns its reference.
    fn pull_image<'a>(
        &'a self,
        image: &'a str,
        auth: Option<cri::AuthConfig>,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> CriFuture<'a, String>;
    /// Runs `cmd` in the container and waits for it, at most `timeout` (exec probes).
    fn exec_sync<'a>(
        &'a self,
        id: &'a str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> CriFuture<'a, ExecOutput>;
    /// Changes a running container's Linux resources in place
    /// (`UpdateContainerResources`): kubelet calls it only to actuate a pod resize.
    fn update_container_resources<'a>(
        &'a self,
        id: &'a str,
        resources: cri::LinuxContainerResources,
    ) -> CriFuture<'a, ()>;
    /// Asks the runtime to reopen the container's log file (after log rotation
    /// renamed it away).
    fn reopen_container_log<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()>;
    /// Removes the image (by ID or reference); a missing image is not an error.
    fn remove_image<'a>(&'a self, image: &'a str) -> CriFuture<'a, ()>;
    /// The URL of the runtime's streaming server for one exec, attach or
    /// port-forward session (`Exec`, `Attach`, `PortForward`).
    fn stream_url(&self, req: StreamRequest) -> CriFuture<'_, String>;
    /// Checkpoints the running container to the archive `location`
    /// (`CheckpointContainer`), within `timeout` (None: the runtime request timeout).
    fn checkpoint_container<'a>(
        &'a self,
        id: &'a str,
        location: &'a str,
        timeout: Option<Duration>,
    ) -> CriFuture<'a, ()>;
}

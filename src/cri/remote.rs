//! The one CRI client: every call to containerd goes through [`RemoteRuntime`], which
//! bounds it by `runtimeRequestTimeout` and logs it with its latency at `-v=6`. It
//! implements the [`Cri`] boundary traits.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint};

use futures::StreamExt as _;

use super::api::{ContainerEvents, Cri, CriFuture, CriRead, ExecOutput};
use super::listing::{ListedContainer, ListedContainers, ListedSandbox, ListedSandboxes};

/// The largest answer oxlet decodes (a listing of thousands of containers fits).
const MAX_DECODING: usize = 16 * 1024 * 1024;

/// A failed CRI call, naming the call.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("invalid CRI endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("cannot connect to the container runtime at {endpoint}: {reason}")]
    Connect { endpoint: String, reason: String },
    #[error("CRI {call} timed out after {timeout:?}")]
    Timeout {
        call: &'static str,
        timeout: Duration,
    },
    #[error("CRI {call} failed: {code:?}: {message}")]
    Status {
        call: &'static str,
        code: tonic::Code,
        message: String,
    },
}

impl CriError {
    /// The gRPC code, when the runtime answered with one.
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
    /// True when the runtime reported the object as missing.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }
}

/// Runtime and image services over one gRPC channel (a unix socket).
#[derive(Clone)]
pub(crate) struct RemoteRuntime {
    endpoint: String,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    /// The same channel, for the two listings decoded into `runtime::listing`'s types.
    lean: tonic::client::Grpc<Channel>,
    timeout: Duration,
}

impl std::fmt::Debug for RemoteRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRuntime")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// `endpoint` as tonic dials it.
fn parse_endpoint(endpoint: &str) -> Result<Endpoint, CriError> {
    Endpoint::from_shared(endpoint.to_string()).map_err(|e| CriError::Endpoint {
        endpoint: endpoint.to_string(),
        reason: e.to_string(),
    })
}

impl RemoteRuntime {
    /// A client that dials `endpoint` only at its first call (the fuzz targets' servers
    /// hold one they never call). Needs a tokio runtime.
    pub(crate) fn lazy(endpoint: &str, request_timeout: Duration) -> Result<Self, CriError> {
        let channel = parse_endpoint(endpoint)?.connect_lazy();
        Ok(RemoteRuntime::on(endpoint, channel, request_timeout))
    }

    /// The clients of one channel to `endpoint`.
    fn on(endpoint: &str, channel: Channel, timeout: Duration) -> RemoteRuntime {
        RemoteRuntime {
            endpoint: endpoint.to_string(),
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_DECODING),
            images: ImageServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_DECODING),
            lean: tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_DECODING),
            timeout,
        }
    }

    /// Connects (bounded by `connect_timeout`) and checks the runtime answers `Version`.
    pub(crate) async fn connect(
        endpoint: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<(Self, cri::VersionResponse), CriError> {
        if !endpoint.starts_with("unix://") {
            return Err(CriError::Endpoint {
                endpoint: endpoint.to_string(),
                reason: "only unix:// endpoints are supported".into(),
            });
        }
        let ep = parse_endpoint(endpoint)?;
        let channel = tokio::time::timeout(connect_timeout, ep.connect())
            .await
            .map_err(|_| CriError::Connect {
                endpoint: endpoint.to_string(),
                reason: format!("no answer within {connect_timeout:?}"),
            })?
            .map_err(|e| CriError::Connect {
                endpoint: endpoint.to_string(),
                reason: error_chain(&e),
            })?;
        let rt = RemoteRuntime::on(endpoint, channel, request_timeout);
        let version = tokio::time::timeout(connect_timeout, rt.version())
            .await
            .map_err(|_| CriError::Connect {
                endpoint: endpoint.to_string(),
                reason: format!("Version did not answer within {connect_timeout:?}"),
            })??;
        Ok((rt, version))
    }

    /// Every image the runtime has (CRI `ListImages`), for the node status.
    pub(crate) async fn list_images(&self) -> Result<Vec<cri::Image>, CriError> {
        let mut c = self.images.clone();
        let req = cri::ListImagesRequest { filter: None };
        Ok(self.call("ListImages", c.list_images(req)).await?.images)
    }

    /// The runtime's own configuration (CRI `RuntimeConfig`, kubelet asks it once at
    /// start for the cgroup driver). Runtimes older than the call answer `Unimplemented`.
    pub(crate) async fn runtime_config(&self) -> Result<cri::RuntimeConfigResponse, CriError> {
        let mut c = self.runtime.clone();
        self.call(
            "RuntimeConfig",
            c.runtime_config(cri::RuntimeConfigRequest {}),
        )
        .await
    }

    /// Hands the runtime the node's pod CIDR (CRI `UpdateRuntimeConfig`), as kubelet's
    /// `updatePodCIDR`: a runtime with a CNI config template (containerd's
    /// `conf_template`) writes its pod network from it; others ignore it.
    pub(crate) async fn update_pod_cidr(&self, cidr: &str) -> Result<(), CriError> {
        let mut c = self.runtime.clone();
        let req = cri::UpdateRuntimeConfigRequest {
            runtime_config: Some(cri::RuntimeConfig {
                network_config: Some(cri::NetworkConfig {
                    pod_cidr: cidr.to_string(),
                }),
            }),
        };
        self.call("UpdateRuntimeConfig", c.update_runtime_config(req))
            .await
            .map(|_| ())
    }

    /// `Status` with `verbose: true`: the runtime adds free-form details (containerd
    /// puts its CRI plugin configuration as JSON under `info["config"]`).
    pub(crate) async fn verbose_status(&self) -> Result<cri::StatusResponse, CriError> {
        let mut c = self.runtime.clone();
        self.call("Status", c.status(cri::StatusRequest { verbose: true }))
            .await
    }

    /// A RuntimeService call whose answer decodes into a lean type of its own
    /// (`runtime::listing`); the request is the generated one.
    async fn lean_unary<Req, Resp>(
        &self,
        method: &'static str,
        path: &'static str,
        req: Req,
    ) -> Result<tonic::Response<Resp>, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = self.lean.clone();
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unknown(format!("service was not ready: {e}")))?;
        let mut req = tonic::Request::new(req);
        req.extensions_mut()
            .insert(tonic::GrpcMethod::new("runtime.v1.RuntimeService", method));
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
        grpc.unary(req, path, tonic_prost::ProstCodec::default())
            .await
    }

    async fn call<T, Fut>(&self, name: &'static str, fut: Fut) -> Result<T, CriError>
    where
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call_within(name, Some(self.timeout), fut).await
    }

    /// A call bounded by `deadline`, or by nothing but the caller dropping it
    /// (PullImage: kubelet puts no deadline on pulls, a big image takes its time).
    async fn call_within<T, Fut>(
        &self,
        name: &'static str,
        deadline: Option<Duration>,
        fut: Fut,
    ) -> Result<T, CriError>
    where
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let start = Instant::now();
        let res = match deadline {
            Some(d) => tokio::time::timeout(d, fut).await,
            None => Ok(fut.await),
        };
        let latency = start.elapsed();
        crate::metrics::cri_call(name, latency, matches!(res, Ok(Ok(_))));
        match res {
            Err(_) => {
                tracing::trace!(call = name, latency = %crate::duration::format_go_duration(latency), "CRI call timed out");
                Err(CriError::Timeout {
                    call: name,
                    timeout: deadline.unwrap_or(self.timeout),
                })
            }
            Ok(Err(status)) => {
                tracing::trace!(call = name, latency = %crate::duration::format_go_duration(latency), code = ?status.code(), "CRI call failed");
                Err(CriError::Status {
                    call: name,
                    code: status.code(),
                    message: status.message().to_string(),
                })
            }
            Ok(Ok(resp)) => {
                tracing::trace!(call = name, latency = %crate::duration::format_go_duration(latency), "CRI call");
                Ok(resp.into_inner())
            }
        }
    }

    /// `ExecSync`'s own deadline is the exec timeout plus the request timeout, so a
    /// slow command fails with the runtime's `DeadlineExceeded`, as kubelet sees it.
    fn stretched(&self, extra: Duration) -> RemoteRuntime {
        RemoteRuntime {
            timeout: self.timeout + extra,
            ..self.clone()
        }
    }
}

impl CriRead for RemoteRuntime {
    fn version(&self) -> CriFuture<'_, cri::VersionResponse> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            self.call(
                "Version",
                c.version(cri::VersionRequest {
                    version: "v1".into(),
                }),
            )
            .await
        })
    }

    fn status(&self) -> CriFuture<'_, cri::StatusResponse> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            self.call("Status", c.status(cri::StatusRequest { verbose: false }))
                .await
        })
    }

    fn pod_sandbox_status<'a>(&'a self, id: &'a str) -> CriFuture<'a, cri::PodSandboxStatus> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            };
            self.call("PodSandboxStatus", c.pod_sandbox_status(req))
                .await?
                .status
                .ok_or(CriError::Status {
                    call: "PodSandboxStatus",
                    code: tonic::Code::Internal,
                    message: "empty status".into(),
                })
        })
    }

    fn list_pod_sandbox(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> CriFuture<'_, Vec<ListedSandbox>> {
        Box::pin(async move {
            let req = cri::ListPodSandboxRequest { filter };
            let call = self.lean_unary::<_, ListedSandboxes>(
                "ListPodSandbox",
                "/runtime.v1.RuntimeService/ListPodSandbox",
                req,
            );
            Ok(self.call("ListPodSandbox", call).await?.items)
        })
    }

    fn list_containers(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> CriFuture<'_, Vec<ListedContainer>> {
        Box::pin(async move {
            let req = cri::ListContainersRequest { filter };
            let call = self.lean_unary::<_, ListedContainers>(
                "ListContainers",
                "/runtime.v1.RuntimeService/ListContainers",
                req,
            );
            Ok(self.call("ListContainers", call).await?.containers)
        })
    }

    fn container_status<'a>(&'a self, id: &'a str) -> CriFuture<'a, cri::ContainerStatus> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            };
            self.call("ContainerStatus", c.container_status(req))
                .await?
                .status
                .ok_or(CriError::Status {
                    call: "ContainerStatus",
                    code: tonic::Code::Internal,
                    message: "empty status".into(),
                })
        })
    }

    fn image_status<'a>(&'a self, image: &'a str) -> CriFuture<'a, Option<cri::Image>> {
        Box::pin(async move {
            let mut c = self.images.clone();
            let req = cri::ImageStatusRequest {
                image: Some(image_spec(image)),
                verbose: false,
            };
            Ok(self.call("ImageStatus", c.image_status(req)).await?.image)
        })
    }

    fn list_images(&self) -> CriFuture<'_, Vec<cri::Image>> {
        Box::pin(RemoteRuntime::list_images(self))
    }

    fn sandbox_image(&self) -> CriFuture<'_, Option<String>> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let resp = self
                .call("Status", c.status(cri::StatusRequest { verbose: true }))
                .await?;
            Ok(sandbox_image_of(&resp.info))
        })
    }

    fn image_fs_info(&self) -> CriFuture<'_, Vec<cri::FilesystemUsage>> {
        Box::pin(async move {
            let mut c = self.images.clone();
            let resp = self
                .call("ImageFsInfo", c.image_fs_info(cri::ImageFsInfoRequest {}))
                .await?;
            Ok(resp.image_filesystems)
        })
    }

    fn list_container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> CriFuture<'_, Vec<cri::ContainerStats>> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::ListContainerStatsRequest { filter };
            Ok(self
                .call("ListContainerStats", c.list_container_stats(req))
                .await?
                .stats)
        })
    }

    fn container_events(&self) -> CriFuture<'_, ContainerEvents> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::GetEventsRequest {};
            let stream = self
                .call_within("GetContainerEvents", None, c.get_container_events(req))
                .await?;
            let events = stream.map(|item| {
                item.map_err(|status| CriError::Status {
                    call: "GetContainerEvents",
                    code: status.code(),
                    message: status.message().to_string(),
                })
            });
            Ok(events.boxed())
        })
    }
}

impl Cri for RemoteRuntime {
    fn run_pod_sandbox<'a>(
        &'a self,
        config: cri::PodSandboxConfig,
        runtime_handler: &'a str,
    ) -> CriFuture<'a, String> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: runtime_handler.to_string(),
            };
            let start = Instant::now();
            let res = self.call("RunPodSandbox", c.run_pod_sandbox(req)).await;
            crate::metrics::run_podsandbox(runtime_handler, start.elapsed(), res.is_ok());
            Ok(res?.pod_sandbox_id)
        })
    }

    fn stop_pod_sandbox<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            };
            self.call("StopPodSandbox", c.stop_pod_sandbox(req))
                .await
                .map(|_| ())
        })
    }

    fn remove_pod_sandbox<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            };
            self.call("RemovePodSandbox", c.remove_pod_sandbox(req))
                .await
                .map(|_| ())
        })
    }

    fn create_container<'a>(
        &'a self,
        sandbox_id: &'a str,
        config: cri::ContainerConfig,
        sandbox_config: cri::PodSandboxConfig,
    ) -> CriFuture<'a, String> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            };
            Ok(self
                .call("CreateContainer", c.create_container(req))
                .await?
                .container_id)
        })
    }

    fn start_container<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::StartContainerRequest {
                container_id: id.to_string(),
            };
            self.call("StartContainer", c.start_container(req))
                .await
                .map(|_| ())
        })
    }

    /// The call's own deadline is stretched by the grace period so a long grace is
    /// not cut short.
    fn stop_container<'a>(&'a self, id: &'a str, timeout_secs: i64) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::StopContainerRequest {
                container_id: id.to_string(),
                timeout: timeout_secs,
            };
            let grace = Duration::from_secs(timeout_secs.max(0) as u64);
            self.stretched(grace)
                .call("StopContainer", c.stop_container(req))
                .await
                .map(|_| ())
        })
    }

    fn remove_container<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::RemoveContainerRequest {
                container_id: id.to_string(),
            };
            self.call("RemoveContainer", c.remove_container(req))
                .await
                .map(|_| ())
        })
    }

    fn remove_image<'a>(&'a self, image: &'a str) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.images.clone();
            let req = cri::RemoveImageRequest {
                image: Some(image_spec(image)),
            };
            self.call("RemoveImage", c.remove_image(req))
                .await
                .map(|_| ())
        })
    }

    fn stream_url(&self, req: super::api::StreamRequest) -> CriFuture<'_, String> {
        self.streaming_url(req)
    }

    fn checkpoint_container<'a>(
        &'a self,
        id: &'a str,
        location: &'a str,
        timeout: Option<Duration>,
    ) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::CheckpointContainerRequest {
                container_id: id.to_string(),
                location: location.to_string(),
                timeout: timeout.map_or(0, |t| i64::try_from(t.as_secs()).unwrap_or(i64::MAX)),
            };
            let deadline = Some(timeout.unwrap_or(self.timeout));
            let call = c.checkpoint_container(req);
            self.call_within("CheckpointContainer", deadline, call)
                .await
                .map(|_| ())
        })
    }

    fn update_container_resources<'a>(
        &'a self,
        id: &'a str,
        resources: cri::LinuxContainerResources,
    ) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::UpdateContainerResourcesRequest {
                container_id: id.to_string(),
                linux: Some(resources),
                ..Default::default()
            };
            self.call(
                "UpdateContainerResources",
                c.update_container_resources(req),
            )
            .await
            .map(|_| ())
        })
    }

    fn reopen_container_log<'a>(&'a self, id: &'a str) -> CriFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::ReopenContainerLogRequest {
                container_id: id.to_string(),
            };
            self.call("ReopenContainerLog", c.reopen_container_log(req))
                .await
                .map(|_| ())
        })
    }

    fn pull_image<'a>(
        &'a self,
        image: &'a str,
        auth: Option<cri::AuthConfig>,
        sandbox_config: Option<cri::PodSandboxConfig>,
    ) -> CriFuture<'a, String> {
        Box::pin(async move {
            let mut c = self.images.clone();
            let req = cri::PullImageRequest {
                image: Some(image_spec(image)),
                auth,
                sandbox_config,
            };
            let res = self.call_within("PullImage", None, c.pull_image(req));
            Ok(res.await?.image_ref)
        })
    }

    fn exec_sync<'a>(
        &'a self,
        id: &'a str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> CriFuture<'a, ExecOutput> {
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let req = cri::ExecSyncRequest {
                container_id: id.to_string(),
                cmd,
                timeout: timeout.as_secs().try_into().unwrap_or(i64::MAX),
            };
            let resp = self
                .stretched(timeout)
                .call("ExecSync", c.exec_sync(req))
                .await?;
            Ok(ExecOutput {
                stdout: resp.stdout,
                stderr: resp.stderr,
                exit_code: resp.exit_code,
            })
        })
    }
}

impl RemoteRuntime {
    /// `Exec`, `Attach` or `PortForward`: the streaming URL the runtime answers.
    fn streaming_url(&self, req: super::api::StreamRequest) -> CriFuture<'_, String> {
        use super::api::StreamRequest;
        Box::pin(async move {
            let mut c = self.runtime.clone();
            let url = match req {
                StreamRequest::Exec(r) => self.call("Exec", c.exec(r)).await?.url,
                StreamRequest::Attach(r) => self.call("Attach", c.attach(r)).await?.url,
                StreamRequest::PortForward(r) => {
                    self.call("PortForward", c.port_forward(r)).await?.url
                }
            };
            Ok(url)
        })
    }
}

/// An `ImageSpec` naming `image`.
pub(crate) fn image_spec(image: &str) -> cri::ImageSpec {
    cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// The whole `source()` chain of an error, so "transport error" says why.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// containerd's verbose status carries its CRI config as JSON under `config`, with the
/// sandbox image as `sandboxImage`; bounded, as the runtime's answer is input too.
fn sandbox_image_of(info: &std::collections::HashMap<String, String>) -> Option<String> {
    let config = info.get("config").filter(|c| c.len() <= 1 << 20)?;
    let v: serde_json::Value = serde_json::from_str(config).ok()?;
    v.get("sandboxImage")?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod sandbox_image_tests {
    #[test]
    fn the_sandbox_image_comes_from_containerds_config() {
        let mut info = std::collections::HashMap::new();
        assert_eq!(super::sandbox_image_of(&info), None);
        info.insert(
            "config".to_string(),
            r#"{"sandboxImage":"localhost/oxlet/pause:1","other":1}"#.to_string(),
        );
        assert_eq!(
            super::sandbox_image_of(&info).as_deref(),
            Some("localhost/oxlet/pause:1")
        );
        info.insert("config".to_string(), "not json".to_string());
        assert_eq!(super::sandbox_image_of(&info), None);
    }
}

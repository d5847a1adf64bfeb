//! The pod resources API over its real socket, read by a gRPC client.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio_util::sync::CancellationToken;

use super::api::*;
use super::lister::{ContainerAllocations, PodResourcesSource};
use super::server::{SOCKET_DIR, SOCKET_NAME, serve};
use crate::grpc_unix;

const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

struct OnePod(Arc<Pod>);

impl PodResourcesSource for OnePod {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        vec![self.0.clone()]
    }
    fn container(&self, _pod: &Pod, c: &Container) -> ContainerAllocations {
        match c.name.as_str() {
            "app" => ContainerAllocations {
                cpu_ids: vec![1],
                devices: vec![ContainerDevices {
                    resource_name: "example.com/widget".into(),
                    device_ids: vec!["w0".into()],
                    topology: None,
                }],
                ..Default::default()
            },
            _ => ContainerAllocations::default(),
        }
    }
    fn allocatable(&self) -> AllocatableResourcesResponse {
        AllocatableResourcesResponse {
            cpu_ids: vec![1],
            ..Default::default()
        }
    }
}

fn pod() -> Pod {
    let c = |name: &str, restart: Option<&str>| Container {
        name: name.into(),
        restart_policy: restart.map(str::to_string),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: Some(vec![c("setup", None), c("proxy", Some("Always"))]),
            containers: vec![c("app", None)],
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn call<Req, Resp>(
    channel: &tonic::transport::Channel,
    method: &'static str,
    req: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    grpc_unix::unary(channel, method, req, TIMEOUT).await
}

#[tokio::test]
async fn list_get_and_allocatable_answer_over_the_socket_and_the_rate_limit_holds() {
    let dir = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let source: Arc<dyn PodResourcesSource> = Arc::new(OnePod(Arc::new(pod())));
    let root = dir.path().to_path_buf();
    let stop = cancel.clone();
    let server = tokio::spawn(async move { serve(&root, source, stop).await });
    let path = dir.path().join(SOCKET_DIR).join(SOCKET_NAME);
    for _ in 0..100 {
        if path.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join(SOCKET_DIR))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o700,
        "the socket's directory is root's alone"
    );
    let client = &grpc_unix::connect(&path, TIMEOUT).await.unwrap();

    let list: ListPodResourcesResponse = call(client, LIST, ListPodResourcesRequest {})
        .await
        .unwrap();
    let p = &list.pod_resources[0];
    assert_eq!((p.name.as_str(), p.namespace.as_str()), ("web", "default"));
    // The sidecar, then the regular container; a plain init container is left out.
    let names: Vec<&str> = p.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["proxy", "app"]);
    assert_eq!(p.containers[1].cpu_ids, [1]);
    assert_eq!(p.containers[1].devices[0].device_ids, ["w0"]);

    let get = GetPodResourcesRequest {
        pod_name: "nope".into(),
        pod_namespace: "default".into(),
    };
    let err = call::<_, GetPodResourcesResponse>(client, GET, get)
        .await
        .unwrap_err();
    assert_eq!(err.message(), "pod nope in namespace default not found");
    let get = GetPodResourcesRequest {
        pod_name: "web".into(),
        pod_namespace: "default".into(),
    };
    let one: GetPodResourcesResponse = call(client, GET, get).await.unwrap();
    assert_eq!(one.pod_resources.unwrap().containers.len(), 2);
    let alloc: AllocatableResourcesResponse =
        call(client, GET_ALLOCATABLE, AllocatableResourcesRequest {})
            .await
            .unwrap();
    assert_eq!(alloc.cpu_ids, [1]);

    // A burst past kubelet's 10 tokens is refused as kubelet's limiter refuses it.
    let mut refused = 0;
    for _ in 0..30 {
        if let Err(e) =
            call::<_, ListPodResourcesResponse>(client, LIST, ListPodResourcesRequest {}).await
        {
            assert_eq!(e.code(), tonic::Code::ResourceExhausted);
            assert_eq!(e.message(), "rejected by rate limit");
            refused += 1;
        }
    }
    assert!(refused > 0, "a burst of 30 must hit the limit");
    cancel.cancel();
    server.await.unwrap().unwrap();
}

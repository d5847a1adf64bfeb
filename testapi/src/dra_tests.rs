//! resource.k8s.io/v1 over HTTP: a claim created, read, listed and watched, its status
//! written through the subresource only, the node authorizer's answers for a node's
//! identity, and the test driver's registration socket.

use std::path::Path;

use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

use crate::TestApiServer;

/// One request with bearer `token`; the status and the body as JSON (or text).
pub(crate) async fn call(
    server: &TestApiServer,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "testapi")
        .header("authorization", format!("Bearer {token}"));
    if body.is_some() {
        let ct = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        req = req.header("content-type", ct);
    }
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let resp = send
        .send_request(req.body(Full::new(bytes::Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let raw = resp.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&raw).into_owned();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

const CLAIMS: &str = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims";

fn claim_body(name: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
}

#[tokio::test]
async fn claims_are_created_read_listed_watched_and_their_status_is_a_subresource() {
    let dir = tempfile_dir();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    let token = server.token().to_owned();
    let (code, created) = call(&server, &token, "POST", CLAIMS, Some(claim_body("c1"))).await;
    assert_eq!(code, 201, "{created}");
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (code, bad) = call(&server, &token, "POST", CLAIMS, Some(json!({"metadata": {"name": "c2"}, "spec": {"devices": {"requests": [{"name": "gpu"}]}}}))).await;
    assert_eq!(code, 422);
    assert!(
        bad["message"]
            .as_str()
            .unwrap()
            .contains("exactly one of `exactly` or `firstAvailable` is required"),
        "{bad}"
    );

    let (code, got) = call(&server, &token, "GET", &format!("{CLAIMS}/c1"), None).await;
    assert_eq!(
        (code, got["spec"]["devices"]["requests"][0]["name"].as_str()),
        (200, Some("gpu"))
    );
    let (_, list) = call(&server, &token, "GET", CLAIMS, None).await;
    assert_eq!(list["kind"], "ResourceClaimList");
    assert_eq!(list["items"].as_array().unwrap().len(), 1);

    // Status through the main resource is dropped; through the subresource it is kept.
    let status = json!({"allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "dev-0"}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]});
    let mut with_status = got.clone();
    with_status["status"] = status.clone();
    let (code, put) = call(
        &server,
        &token,
        "PUT",
        &format!("{CLAIMS}/c1"),
        Some(with_status.clone()),
    )
    .await;
    assert_eq!(code, 200, "{put}");
    assert!(
        put.get("status")
            .is_none_or(|s| s.get("allocation").is_none()),
        "{put}"
    );
    with_status["metadata"]["resourceVersion"] = put["metadata"]["resourceVersion"].clone();
    let (code, put) = call(
        &server,
        &token,
        "PUT",
        &format!("{CLAIMS}/c1/status"),
        Some(with_status),
    )
    .await;
    assert_eq!(code, 200, "{put}");
    assert_eq!(put["status"]["reservedFor"][0]["uid"], "u1");
    let claim: ResourceClaim = server.get("default", "c1").unwrap().unwrap();
    assert_eq!(
        claim
            .status
            .unwrap()
            .allocation
            .unwrap()
            .devices
            .unwrap()
            .results
            .unwrap()[0]
            .device,
        "dev-0"
    );

    let (code, events) = call(
        &server,
        &token,
        "GET",
        &format!("{CLAIMS}?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
        None,
    )
    .await;
    assert_eq!(code, 200);
    let text = events
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| events.to_string());
    let types: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    // The main resource's write changed nothing (its status dropped): one event, the status's.
    assert_eq!(types, ["MODIFIED"], "{text}");
}

pub(crate) fn tempfile_dir() -> TempDir {
    TempDir::new()
}

/// A temporary directory removed on drop (testapi has no tempfile dependency).
pub(crate) struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> Self {
        let p = std::env::temp_dir().join(format!("testapi-dra-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pod(name: &str, node: &str, claims: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}], "resourceClaims": claims}})).unwrap()
}

#[tokio::test]
async fn a_node_reads_only_its_pods_claims_and_writes_only_its_slices() {
    let dir = tempfile_dir();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    server.add_node_token("node-n1", "n1").unwrap();
    let admin = server.token().to_owned();
    for name in ["mine", "theirs"] {
        assert_eq!(
            call(&server, &admin, "POST", CLAIMS, Some(claim_body(name)))
                .await
                .0,
            201
        );
    }
    server
        .put(&pod(
            "p1",
            "n1",
            json!([{"name": "a", "resourceClaimName": "mine"}]),
        ))
        .unwrap();
    server
        .put(&pod(
            "p2",
            "n2",
            json!([{"name": "a", "resourceClaimName": "theirs"}]),
        ))
        .unwrap();

    assert_eq!(
        call(&server, "node-n1", "GET", &format!("{CLAIMS}/mine"), None)
            .await
            .0,
        200
    );
    let (code, refused) = call(&server, "node-n1", "GET", &format!("{CLAIMS}/theirs"), None).await;
    assert_eq!(code, 403);
    assert_eq!(
        refused["message"],
        "resourceclaims.resource.k8s.io \"theirs\" is forbidden: User \"system:node:n1\" cannot get resource \"resourceclaims\" in API group \"resource.k8s.io\" in the namespace \"default\": no relationship found between node 'n1' and this object"
    );
    assert_eq!(
        call(&server, "node-n1", "GET", CLAIMS, None).await.0,
        403,
        "no list of claims"
    );
    assert_eq!(
        call(&server, &admin, "GET", &format!("{CLAIMS}/theirs"), None)
            .await
            .0,
        200
    );

    let slices = "/apis/resource.k8s.io/v1/resourceslices";
    let slice = |name: &str, node: &str| json!({"metadata": {"name": name}, "spec": {"driver": "gpu.example.com", "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}});
    assert_eq!(
        call(&server, "node-n1", "POST", slices, Some(slice("s1", "n1")))
            .await
            .0,
        201
    );
    assert_eq!(
        call(&server, "node-n1", "POST", slices, Some(slice("s2", "n2")))
            .await
            .0,
        403
    );
    assert_eq!(
        call(&server, &admin, "POST", slices, Some(slice("s2", "n2")))
            .await
            .0,
        201
    );
    assert_eq!(
        call(&server, "node-n1", "DELETE", &format!("{slices}/s2"), None)
            .await
            .0,
        403
    );
    assert_eq!(
        call(&server, "node-n1", "DELETE", slices, None).await.0,
        403,
        "a wipe names the node"
    );
    let (code, wiped) = call(
        &server,
        "node-n1",
        "DELETE",
        &format!("{slices}?fieldSelector=spec.nodeName%3Dn1%2Cspec.driver%3Dgpu.example.com"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{wiped}");
    let left: Vec<ResourceSlice> = server.list(None).unwrap();
    let names: Vec<_> = left
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    assert_eq!(names, ["s2"]);
}

#[tokio::test]
async fn allocation_generates_the_templates_claim_and_reserves_it() {
    let dir = tempfile_dir();
    let server = TestApiServer::start(dir.path()).await.unwrap();
    let admin = server.token().to_owned();
    let template = json!({"metadata": {"name": "gpu"}, "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}});
    let (code, t) = call(
        &server,
        &admin,
        "POST",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates",
        Some(template),
    )
    .await;
    assert_eq!(code, 201, "{t}");
    let p = server
        .put(&pod(
            "p1",
            "n1",
            json!([{"name": "g", "resourceClaimTemplateName": "gpu"}]),
        ))
        .unwrap();
    let claims = server
        .handle()
        .allocate_claims("default", "p1", "gpu.example.com", "n1", &["dev-3"])
        .unwrap();
    let claim = &claims[0];
    let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        (p.metadata.uid.as_deref().unwrap(), Some(true))
    );
    let status = claim.status.as_ref().unwrap();
    assert_eq!(
        status.reserved_for.as_ref().unwrap()[0].uid,
        p.metadata.uid.clone().unwrap()
    );
    let result = &status
        .allocation
        .as_ref()
        .unwrap()
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        (result.request.as_str(), result.device.as_str()),
        ("gpu", "dev-3")
    );
    let p: Pod = server.get("default", "p1").unwrap().unwrap();
    let st = &p.status.unwrap().resource_claim_statuses.unwrap()[0];
    assert_eq!(
        (st.name.as_str(), st.resource_claim_name.as_deref()),
        ("g", claim.metadata.name.as_deref())
    );
}

#[tokio::test]
async fn the_test_driver_registers_and_prepares_through_cdi() {
    use crate::dra_driver::{DriverConfig, GET_INFO, NOTIFY_STATUS, TestDraDriver, wire};
    let dir = tempfile_dir();
    let server = TestApiServer::start(&dir.path().join("api")).await.unwrap();
    let host = dir.path().join("host-file");
    std::fs::write(&host, "hello").unwrap();
    let config = DriverConfig::under(dir.path(), "gpu.example.com", "n1", &host, 2);
    let driver = TestDraDriver::start(config, Some(server.handle()))
        .await
        .unwrap();
    let slice: ResourceSlice = server.get("", "n1-gpu-example-com").unwrap().unwrap();
    assert_eq!(slice.spec.devices.unwrap().len(), 2);

    let grpc = |path: &Path| {
        let uri = format!("unix://{}", path.display());
        tonic::client::Grpc::new(
            tonic::transport::Endpoint::from_shared(uri)
                .unwrap()
                .connect_lazy(),
        )
    };
    let mut reg = grpc(&driver.registration_socket());
    reg.ready().await.unwrap();
    let info: wire::PluginInfo = reg
        .unary(
            tonic::Request::new(wire::InfoRequest {}),
            tonic::codegen::http::uri::PathAndQuery::from_static(GET_INFO),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (info.r#type.as_str(), info.name.as_str()),
        ("DRAPlugin", "gpu.example.com")
    );
    assert_eq!(Path::new(&info.endpoint), driver.endpoint());
    assert_eq!(info.supported_versions, ["v1.DRAPlugin"]);
    reg.ready().await.unwrap();
    let _: wire::RegistrationStatusResponse = reg
        .unary(
            tonic::Request::new(wire::RegistrationStatus {
                plugin_registered: true,
                error: String::new(),
            }),
            tonic::codegen::http::uri::PathAndQuery::from_static(NOTIFY_STATUS),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(driver.registration_status(), Some((true, String::new())));
}

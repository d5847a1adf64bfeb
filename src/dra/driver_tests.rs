//! The manager as the agent runs it: [`KubeClaims`] over a node's own kube client
//! against the test apiserver (the node authorizer's rules applied), the test DRA driver
//! on real unix sockets: registered, a template's claim prepared with its CDI spec
//! written, the CDI IDs handed to the container, unprepared when the pod is done, and
//! the node's slices wiped through the apiserver.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use serde_json::json;
use testapi::TestApiServer;
use testapi::dra_driver::{DriverConfig, TestDraDriver};

use super::{DraManager, KubeClaims};

const DRIVER: &str = "dongle.test.oxlet.dev";

async fn node_client(server: &TestApiServer, node: &str) -> kube::Client {
    let file = server
        .add_node_token(&format!("token-{node}"), node)
        .unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(file).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn a_templates_claim_is_prepared_by_the_driver_and_unprepared_through_the_apiserver() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(&dir.path().join("api")).await.unwrap();
    let host = dir.path().join("dongle");
    std::fs::write(&host, "dongle").unwrap();
    let mut config = DriverConfig::under(dir.path(), DRIVER, "n1", &host, 2);
    config.cdi_dir = dir.path().join("var-run-cdi");
    let driver = TestDraDriver::start(config.clone(), Some(server.handle()))
        .await
        .unwrap();

    let template: ResourceClaimTemplate = serde_json::from_value(json!({"metadata": {"name": "dongle", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "one", "exactly": {"deviceClassName": "dongle"}}]}}}})).unwrap();
    server.put(&template).unwrap();
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p1", "namespace": "default"},
        "spec": {"nodeName": "n1", "resourceClaims": [{"name": "d", "resourceClaimTemplateName": "dongle"}],
            "containers": [{"name": "c", "image": "i", "resources": {"claims": [{"name": "d"}]}}]}})).unwrap();
    server.put(&pod).unwrap();
    server
        .handle()
        .allocate_claims("default", "p1", DRIVER, "n1", &["dev-1"])
        .unwrap();
    let pod: Pod = server.get("default", "p1").unwrap().unwrap();

    let client = node_client(&server, "n1").await;
    let m = DraManager::new(
        &dir.path().join("root"),
        "n1",
        Arc::new(KubeClaims::new(client)),
        crate::tasks::Tasks::new(),
    )
    .unwrap();
    m.register_plugin(DRIVER, &driver.endpoint(), &["v1.DRAPlugin".to_owned()])
        .await
        .unwrap();
    m.prepare_resources(&pod).await.unwrap();

    let claim_name = pod
        .status
        .as_ref()
        .unwrap()
        .resource_claim_statuses
        .as_ref()
        .unwrap()[0]
        .resource_claim_name
        .clone()
        .unwrap();
    let claim: ResourceClaim = server.get("default", &claim_name).unwrap().unwrap();
    let uid = claim.metadata.uid.unwrap();
    let spec_file = config.cdi_dir.join(format!("{DRIVER}-{uid}.json"));
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&spec_file).unwrap()).unwrap();
    assert_eq!(
        spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"],
        host.display().to_string()
    );
    let ids = m
        .container_cdi_devices(&pod, &pod.spec.as_ref().unwrap().containers[0])
        .unwrap();
    assert_eq!(ids, [format!("{DRIVER}/claim={uid}-dev-1")]);
    assert_eq!(driver.prepare_calls(), 1);

    m.unprepare_resources(&pod).await.unwrap();
    assert_eq!(driver.unprepare_calls(), 1);
    assert!(!spec_file.exists());

    // The node may wipe its own slices (the driver published one).
    assert_eq!(server.list::<ResourceSlice>(None).unwrap().len(), 1);
    m.wipe_resource_slices().await;
    assert!(server.list::<ResourceSlice>(None).unwrap().is_empty());
}

#[tokio::test]
async fn another_nodes_pods_claim_is_refused_by_the_node_authorizer() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestApiServer::start(&dir.path().join("api")).await.unwrap();
    let claim: ResourceClaim = serde_json::from_value(json!({"metadata": {"name": "theirs", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "one", "exactly": {"deviceClassName": "dongle"}}]}}})).unwrap();
    server.put(&claim).unwrap();
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p1", "namespace": "default"},
        "spec": {"nodeName": "n2", "resourceClaims": [{"name": "d", "resourceClaimName": "theirs"}],
            "containers": [{"name": "c", "image": "i"}]}}))
        .unwrap();
    let pod = server.put(&pod).unwrap();
    let client = node_client(&server, "n1").await;
    let m = DraManager::new(
        &dir.path().join("root"),
        "n1",
        Arc::new(KubeClaims::new(client)),
        crate::tasks::Tasks::new(),
    )
    .unwrap();
    let err = m.prepare_resources(&pod).await.unwrap_err().to_string();
    assert!(
        err.starts_with("prepare dynamic resources: fetch ResourceClaim theirs: "),
        "{err}"
    );
    assert!(
        err.contains("no relationship found between node 'n1' and this object"),
        "{err}"
    );
}

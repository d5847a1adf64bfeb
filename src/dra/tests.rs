//! The manager with a fake apiserver boundary (claims read straight from the test
//! apiserver's store, slice deletions recorded) and the real test DRA driver over unix
//! sockets: the checks and their texts, a claim prepared once for two pods and
//! unprepared after the last, the checkpoint across a restart, CDI IDs per container.

use std::collections::HashSet;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::{Value, json};
use testapi::dra_driver::{DriverConfig, TestDraDriver};
use testapi::{ApiHandle, TestApiServer};

use super::{ApiError, ApiFuture, ClaimSource, DraError, DraManager};

const DRIVER: &str = "gpu.test.oxlet.dev";

/// The fake boundary: claims from the store without HTTP; slice wipes recorded.
struct Fake {
    api: ApiHandle,
    wiped: Mutex<Vec<(String, Option<String>)>>,
}

impl ClaimSource for Fake {
    fn resource_claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> ApiFuture<'a, Option<ResourceClaim>> {
        Box::pin(async move { self.api.get(ns, name).map_err(|e| ApiError(e.to_string())) })
    }

    fn delete_resource_slices<'a>(
        &'a self,
        node: &'a str,
        driver: Option<&'a str>,
    ) -> ApiFuture<'a, ()> {
        self.wiped
            .lock()
            .unwrap()
            .push((node.to_owned(), driver.map(str::to_owned)));
        Box::pin(async { Ok(()) })
    }
}

struct Bed {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    server: TestApiServer,
    driver: TestDraDriver,
    fake: Arc<Fake>,
}

impl Bed {
    async fn new() -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let server = TestApiServer::start(&dir.path().join("api")).await.unwrap();
        let host = dir.path().join("host-file");
        std::fs::write(&host, "device").unwrap();
        let config = DriverConfig::under(dir.path(), DRIVER, "n1", &host, 4);
        let driver = TestDraDriver::start(config, Some(server.handle()))
            .await
            .unwrap();
        let fake = Arc::new(Fake {
            api: server.handle(),
            wiped: Mutex::new(Vec::new()),
        });
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        Bed {
            root,
            _dir: dir,
            server,
            driver,
            fake,
        }
    }

    fn manager(&self) -> DraManager {
        DraManager::with_timings(
            &self.root,
            "n1",
            self.fake.clone(),
            Duration::from_millis(200),
            Duration::from_secs(5),
            crate::tasks::Tasks::new(),
        )
        .unwrap()
    }

    async fn registered(&self) -> DraManager {
        let m = self.manager();
        m.register_plugin(
            DRIVER,
            &self.driver.endpoint(),
            &["v1.DRAPlugin".to_owned()],
        )
        .await
        .unwrap();
        m
    }

    fn put_pod(&self, name: &str, claims: Value, containers: Value) -> Pod {
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": containers, "resourceClaims": claims}}))
            .unwrap();
        self.server.put(&pod).unwrap()
    }

    fn put_claim(&self, name: &str, requests: &[&str]) {
        let reqs: Vec<Value> = requests
            .iter()
            .map(|r| json!({"name": r, "exactly": {"deviceClassName": "gpu"}}))
            .collect();
        let claim: ResourceClaim =
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": reqs}}}))
            .unwrap();
        self.server.put(&claim).unwrap();
    }

    /// Pod `p1` with claim `c` allocated `dev-0`, which the driver refuses to prepare
    /// ("device busy") once.
    fn pod_whose_claim_fails(&self) -> Pod {
        self.put_claim("c", &["gpu"]);
        self.put_pod(
            "p1",
            json!([{"name": "g", "resourceClaimName": "c"}]),
            one_container(json!([])),
        );
        let pod = self.allocate("p1", &["dev-0"]);
        self.driver.fail_claim("c", "device busy");
        pod
    }

    fn allocate(&self, pod: &str, devices: &[&str]) -> Pod {
        self.server
            .handle()
            .allocate_claims("default", pod, DRIVER, "n1", devices)
            .unwrap();
        self.server.get("default", pod).unwrap().unwrap()
    }
}

fn one_container(claims: Value) -> Value {
    json!([{"name": "c", "image": "i", "resources": {"claims": claims}}])
}

#[tokio::test]
async fn unallocated_unreserved_and_driverless_claims_are_refused_with_kubelets_words() {
    let bed = Bed::new().await;
    let m = bed.manager();
    bed.put_claim("shared", &["gpu"]);
    let pod = bed.put_pod(
        "p1",
        json!([{"name": "g", "resourceClaimName": "shared"}]),
        one_container(json!([])),
    );
    let uid = pod.metadata.uid.clone().unwrap();
    let claim_uid = bed
        .server
        .get::<ResourceClaim>("default", "shared")
        .unwrap()
        .unwrap()
        .metadata
        .uid
        .unwrap();
    assert_eq!(
        m.prepare_resources(&pod).await.unwrap_err().to_string(),
        format!(
            "prepare dynamic resources: pod p1 ({uid}) is not allowed to use ResourceClaim shared ({claim_uid})"
        )
    );
    // Reserved but not allocated.
    let mut claim: ResourceClaim = bed.server.get("default", "shared").unwrap().unwrap();
    claim.status = Some(
        serde_json::from_value(
            json!({"reservedFor": [{"resource": "pods", "name": "p1", "uid": uid}]}),
        )
        .unwrap(),
    );
    bed.server.put(&claim).unwrap();
    assert_eq!(
        m.prepare_resources(&pod).await.unwrap_err().to_string(),
        "prepare dynamic resources: ResourceClaim shared: not allocated"
    );
    // Allocated, and the driver is not registered.
    let pod = bed.allocate("p1", &["dev-0"]);
    let err = m.prepare_resources(&pod).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("prepare dynamic resources: DRA driver {DRIVER} is not registered")
    );
    assert!(
        !m.pod_might_need_to_unprepare(&uid),
        "nothing recorded for a pod that failed the checks"
    );
    // A template's claim not generated yet.
    let generated = bed.put_pod(
        "p2",
        json!([{"name": "g", "resourceClaimTemplateName": "t"}]),
        one_container(json!([])),
    );
    assert_eq!(
        m.prepare_resources(&generated).await.unwrap_err(),
        DraError::Prepare(Box::new(DraError::ClaimNotCreated {
            pod: "default/p2".into()
        }))
    );
    let missing = bed.put_pod(
        "p3",
        json!([{"name": "g", "resourceClaimName": "nope"}]),
        one_container(json!([])),
    );
    assert_eq!(
        m.prepare_resources(&missing).await.unwrap_err().to_string(),
        "prepare dynamic resources: fetch ResourceClaim nope: resourceclaims.resource.k8s.io \"nope\" not found"
    );
    assert_eq!(bed.driver.prepare_calls(), 0);
}

#[tokio::test]
async fn a_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod() {
    let bed = Bed::new().await;
    let m = bed.registered().await;
    bed.put_claim("shared", &["gpu"]);
    let claims = json!([{"name": "g", "resourceClaimName": "shared"}]);
    bed.put_pod("p1", claims.clone(), one_container(json!([{"name": "g"}])));
    bed.put_pod("p2", claims, one_container(json!([{"name": "g"}])));
    let p1 = bed.allocate("p1", &["dev-1"]);
    let p2 = bed.allocate("p2", &[]);
    m.prepare_resources(&p1).await.unwrap();
    m.prepare_resources(&p2).await.unwrap();
    m.prepare_resources(&p1).await.unwrap();
    assert_eq!(
        bed.driver.prepare_calls(),
        1,
        "one NodePrepareResources for the claim"
    );
    let claim_uid = bed
        .server
        .get::<ResourceClaim>("default", "shared")
        .unwrap()
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let spec = bed.driver.cdi_spec(&claim_uid);
    assert!(spec.exists());
    let cdi = m
        .container_cdi_devices(&p2, &p2.spec.as_ref().unwrap().containers[0])
        .unwrap();
    assert_eq!(cdi, [format!("{DRIVER}/claim={claim_uid}-dev-1")]);

    m.unprepare_resources(&p1).await.unwrap();
    assert_eq!(bed.driver.unprepare_calls(), 0, "p2 still uses the claim");
    assert!(spec.exists());
    m.unprepare_resources(&p2).await.unwrap();
    assert_eq!(bed.driver.unprepare_calls(), 1);
    assert!(!spec.exists(), "the driver removed its CDI spec");
    m.unprepare_resources(&p2).await.unwrap();
    assert_eq!(bed.driver.unprepare_calls(), 1, "idempotent");
    assert!(!m.pod_might_need_to_unprepare(p2.metadata.uid.as_deref().unwrap()));
}

#[tokio::test]
async fn the_checkpoint_survives_a_restart_and_unprepares_a_pod_gone_meanwhile() {
    let bed = Bed::new().await;
    bed.put_claim("c", &["gpu"]);
    bed.put_pod(
        "p1",
        json!([{"name": "g", "resourceClaimName": "c"}]),
        one_container(json!([{"name": "g"}])),
    );
    let p1 = bed.allocate("p1", &["dev-2"]);
    let uid = p1.metadata.uid.clone().unwrap();
    {
        let m = bed.registered().await;
        m.prepare_resources(&p1).await.unwrap();
    }
    let file = bed.root.join("dra_manager_state");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(r#"\"DeviceName\":\"dev-2\""#) && text.contains(&uid),
        "{text}"
    );

    // Restarted: the pod's devices are known again, and its end is carried out.
    let m = bed.registered().await;
    assert!(m.pod_might_need_to_unprepare(&uid));
    let devices = m.pod_claims(&uid);
    assert_eq!(devices.len(), 1);
    assert_eq!(
        (
            devices[0].claim_name.as_str(),
            devices[0].device.as_str(),
            devices[0].driver.as_str()
        ),
        ("c", "dev-2", DRIVER)
    );
    assert_eq!(devices[0].requests, ["gpu"]);
    m.reconcile(&HashSet::new()).await;
    assert_eq!(bed.driver.unprepare_calls(), 1);
    assert!(m.pod_claims(&uid).is_empty());
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains(r#"\"Entries\":[]"#)
    );
}

#[tokio::test]
async fn each_container_gets_the_cdi_ids_of_the_requests_it_names() {
    let bed = Bed::new().await;
    let m = bed.registered().await;
    bed.put_claim("two", &["a", "b"]);
    let containers = json!([
        {"name": "both", "image": "i", "resources": {"claims": [{"name": "g"}]}},
        {"name": "only-b", "image": "i", "resources": {"claims": [{"name": "g", "request": "b"}]}},
        {"name": "none", "image": "i"},
    ]);
    bed.put_pod(
        "p1",
        json!([{"name": "g", "resourceClaimName": "two"}]),
        containers,
    );
    let pod = bed.allocate("p1", &["dev-0", "dev-3"]);
    m.prepare_resources(&pod).await.unwrap();
    let uid = bed
        .server
        .get::<ResourceClaim>("default", "two")
        .unwrap()
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let cs = &pod.spec.as_ref().unwrap().containers;
    let id = |d: &str| format!("{DRIVER}/claim={uid}-{d}");
    assert_eq!(
        m.container_cdi_devices(&pod, &cs[0]).unwrap(),
        [id("dev-0"), id("dev-3")]
    );
    assert_eq!(
        m.container_cdi_devices(&pod, &cs[1]).unwrap(),
        [id("dev-3")]
    );
    assert!(m.container_cdi_devices(&pod, &cs[2]).unwrap().is_empty());
    let spec: Value =
        serde_json::from_str(&std::fs::read_to_string(bed.driver.cdi_spec(&uid)).unwrap()).unwrap();
    assert_eq!(spec["devices"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_failed_claim_is_reported_and_prepared_again_next_time() {
    let bed = Bed::new().await;
    let m = bed.registered().await;
    let pod = bed.pod_whose_claim_fails();
    assert_eq!(
        m.prepare_resources(&pod).await.unwrap_err().to_string(),
        "prepare dynamic resources: NodePrepareResources failed for ResourceClaim c: device busy"
    );
    assert!(
        m.pod_might_need_to_unprepare(pod.metadata.uid.as_deref().unwrap()),
        "recorded before the call"
    );
    m.prepare_resources(&pod).await.unwrap();
    assert_eq!(bed.driver.prepare_calls(), 2);
}

#[tokio::test]
async fn registration_follows_kubelets_version_rules_and_a_gone_driver_loses_its_slices() {
    let bed = Bed::new().await;
    let m = bed.manager();
    let endpoint = bed.driver.endpoint();
    let err = m
        .validate_plugin(DRIVER, &endpoint, &["v2.DRAPlugin".to_owned()])
        .unwrap_err();
    assert!(err.to_string().starts_with(&format!("invalid supported gRPC versions of DRA driver plugin {DRIVER} at endpoint {}: none of services", endpoint.display())), "{err}");
    m.register_plugin(DRIVER, &endpoint, &["v1.DRAPlugin".to_owned()])
        .await
        .unwrap();
    let again = m
        .register_plugin(DRIVER, &endpoint, &["v1.DRAPlugin".to_owned()])
        .await
        .unwrap_err();
    assert_eq!(
        again.to_string(),
        format!(
            "endpoint {} already registered for DRA driver plugin {DRIVER}",
            endpoint.display()
        )
    );

    // Gone and back within the delay: nothing is wiped.
    m.deregister_plugin(DRIVER);
    m.register_plugin(DRIVER, &endpoint, &["v1.DRAPlugin".to_owned()])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(bed.fake.wiped.lock().unwrap().is_empty());
    // Gone for good: the node's slices of the driver are deleted after the delay.
    m.deregister_plugin(DRIVER);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        *bed.fake.wiped.lock().unwrap(),
        [("n1".to_owned(), Some(DRIVER.to_owned()))]
    );
    m.wipe_resource_slices().await;
    assert_eq!(
        bed.fake.wiped.lock().unwrap().last().unwrap(),
        &("n1".to_owned(), None)
    );
}

#[tokio::test]
async fn prepares_unprepares_and_driver_calls_reach_kubelets_metrics() {
    let op = |name: &str, error: bool| {
        format!(
            "dra_operations_duration_seconds_count{{is_error=\"{error}\",operation_name=\"{name}\"}}"
        )
    };
    let series = [
        op("PrepareResources", false),
        op("PrepareResources", true),
        op("UnprepareResources", false),
        format!(
            "dra_grpc_operations_duration_seconds_count{{driver_name=\"{DRIVER}\",grpc_status_code=\"OK\",method_name=\"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources\"}}"
        ),
    ];
    let before: Vec<f64> = series.iter().map(|s| crate::metrics::sample(s)).collect();
    let delta = |i: usize| crate::metrics::sample(&series[i]) - before[i];
    let bed = Bed::new().await;
    let m = bed.registered().await;
    let pod = bed.pod_whose_claim_fails();
    m.prepare_resources(&pod).await.unwrap_err();
    assert!(delta(1) >= 1.0, "a failed prepare is is_error=\"true\"");
    assert!(delta(3) >= 1.0, "the driver answered the call: code OK");
    assert_eq!(m.claims_in_use_now(), (Default::default(), 0));
    m.prepare_resources(&pod).await.unwrap();
    assert!(delta(0) >= 1.0);
    assert!(delta(3) >= 2.0);
    let (per_driver, total) = m.claims_in_use_now();
    assert_eq!((per_driver.get(DRIVER), total), (Some(&1), 1));
    m.unprepare_resources(&pod).await.unwrap();
    assert!(delta(2) >= 1.0);
    assert_eq!(m.claims_in_use_now(), (Default::default(), 0));
}

//! koordlet's NodeMetric through the apiserver: the test apiserver serves koordinator's
//! CRD (created as a cluster admin would, through `apiextensions.k8s.io`), oxlet
//! watches this node's NodeMetric and writes its status from the metric cache on a
//! real containerd; a CPU-burning pod shows in it. Read back with kube-rs as a dynamic
//! object, as koord-manager and kubectl would.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

const NODE: &str = "testnode";
const WAIT: Duration = Duration::from_secs(60);

/// koordinator's NodeMetric CRD, in the shape `config/crd/bases` ships (its schema
/// cut down to preserving what it is given).
fn node_metric_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "nodemetrics.slo.koordinator.sh"},
        "spec": {
            "group": "slo.koordinator.sh",
            "names": {"kind": "NodeMetric", "listKind": "NodeMetricList", "plural": "nodemetrics", "singular": "nodemetric"},
            "scope": "Cluster",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    }))
    .unwrap()
}

fn node_metric_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("slo.koordinator.sh", "v1alpha1", "NodeMetric"),
        "nodemetrics",
    )
}

/// A quantity's value in cores or bytes (`1500m`, `2`, `3Mi`, `1k`).
fn value(q: &Value) -> f64 {
    let s = q.as_str().unwrap_or_else(|| panic!("not a quantity: {q}"));
    let (num, mult) = [
        ("m", 1e-3),
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("k", 1e3),
    ]
    .iter()
    .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n, *m)))
    .unwrap_or((s, 1.0));
    num.parse::<f64>().unwrap() * mult
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_metric_status_shows_a_cpu_burning_pod() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let client = client_of(&server).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .create(&PostParams::default(), &node_metric_crd())
        .await
        .unwrap();
    let established = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        established
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    // koord-manager creates one per node, naming its collect policy.
    let metrics: Api<DynamicObject> = Api::all_with(client.clone(), &node_metric_resource());
    let mut nm = DynamicObject::new(NODE, &node_metric_resource());
    nm.data = json!({"spec": {"metricCollectPolicy": {"reportIntervalSeconds": 2, "aggregateDurationSeconds": 60}}});
    metrics.create(&PostParams::default(), &nm).await.unwrap();

    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_NODEMETRIC_MIN_REPORT_MS".into(), "1000".into()));
    ox.spawn(&[&format!("--kubeconfig={}", server.kubeconfig().display())]);
    let burner = api_pod("burner", NODE, "while :; do :; done", 1);
    server.put(&burner).unwrap();

    // The status shows the burner near one core, the node at least that, and both
    // with memory; the report follows the spec's 2 s interval.
    let t = Instant::now();
    let (pod, node) = loop {
        let got = metrics.get(NODE).await.unwrap();
        let status = got.data.get("status").cloned().unwrap_or(Value::Null);
        let pod = status["podsMetric"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["name"] == "burner").cloned());
        if let Some(pod) = pod.filter(|p| value(&p["podUsage"]["resources"]["cpu"]) >= 0.5) {
            break (pod, status["nodeMetric"].clone());
        }
        assert!(
            t.elapsed() < WAIT,
            "no burner in {status:#}\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(
        (pod["namespace"].as_str(), pod["qos"].as_str()),
        (Some("default"), Some("BE"))
    );
    assert_eq!(pod["priority"], "koord-batch");
    assert!(
        value(&pod["podUsage"]["resources"]["memory"]) > 0.0,
        "{pod}"
    );
    let node_cpu = value(&node["nodeUsage"]["resources"]["cpu"]);
    assert!(node_cpu >= 0.5, "{node}");
    assert!(
        value(&node["nodeUsage"]["resources"]["memory"]) > 0.0,
        "{node}"
    );
    // The default windows (5m, 10m, 30m) are not half covered yet: empty aggregations.
    let durations: Vec<&str> = node["aggregatedNodeUsages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["duration"].as_str().unwrap())
        .collect();
    assert_eq!(durations, ["5m0s", "10m0s", "30m0s"]);
    assert_eq!(node["aggregatedNodeUsages"][0]["usage"]["p90"], json!({}));
    // The spec was kept, and the read-only port serves the same report.
    let got = metrics.get(NODE).await.unwrap();
    assert_eq!(
        got.data["spec"]["metricCollectPolicy"]["reportIntervalSeconds"],
        2
    );
    let (code, body) = ox.get("/debug/koord/nodemetric").await.unwrap();
    assert_eq!(code, 200);
    let local: Value = serde_json::from_str(&body).unwrap();
    assert!(
        local["podsMetric"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "burner")
    );
    assert!(ox.log().contains("NodeMetric status reported"));
}

//! koordlet's side in a cluster: the test apiserver serves koordinator's CRDs (created
//! as a cluster admin would, through `apiextensions.k8s.io`); on a real containerd
//! oxlet writes its NodeMetric's status from the metric cache, where a CPU-burning
//! pod shows, and follows its NodeSLO's thresholds as they change, without a restart;
//! a bad value drops its strategy alone, and a deleted NodeSLO stays applied.
//! Objects are written and read back with kube-rs as dynamic objects, as
//! koord-manager and kubectl would. oxlet runs with a node's identity
//! (`system:node:testnode`), which the test apiserver, as a real one, refuses
//! slo.koordinator.sh until the repo's `deploy/koordlet-rbac.yaml` is applied: each
//! test applies that file, so they prove it is enough. oxlet also reads its own Node
//! (koordlet's node informer), which the node identity may without that file.

mod agent;
mod common;

use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

const NODE: &str = "testnode";
const WAIT: Duration = Duration::from_secs(60);

/// One of koordinator's cluster-scoped CRDs in the shape `config/crd/bases` ships (its
/// schema cut down to preserving what it is given).
fn koord_crd(kind: &str, plural: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.slo.koordinator.sh")},
        "spec": {
            "group": "slo.koordinator.sh",
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural, "singular": kind.to_lowercase()},
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

fn koord_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("slo.koordinator.sh", "v1alpha1", kind),
        plural,
    )
}

/// The bearer token of the node's identity.
const NODE_TOKEN: &str = "node-token-testnode";

/// A kubeconfig of this node's identity (`system:node:testnode`, group
/// `system:nodes`), as a kubelet's client certificate gives it.
fn node_kubeconfig(server: &testapi::TestApiServer) -> String {
    let path = server.add_node_token(NODE_TOKEN, NODE).unwrap();
    format!("--kubeconfig={}", path.display())
}

/// Applies the repo's `deploy/koordlet-rbac.yaml` as a cluster admin would: each
/// document created as written.
async fn apply_koordlet_rbac(client: &kube::Client) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/koordlet-rbac.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    assert_eq!(docs.len(), 2, "a ClusterRole and its binding");
    let pp = PostParams::default();
    for doc in docs {
        match doc["kind"].as_str() {
            Some("ClusterRole") => {
                let role: ClusterRole = serde_json::from_value(doc).unwrap();
                Api::<ClusterRole>::all(client.clone())
                    .create(&pp, &role)
                    .await
                    .unwrap();
            }
            Some("ClusterRoleBinding") => {
                let binding: ClusterRoleBinding = serde_json::from_value(doc).unwrap();
                Api::<ClusterRoleBinding>::all(client.clone())
                    .create(&pp, &binding)
                    .await
                    .unwrap();
            }
            kind => panic!("unexpected {kind:?} in {}", path.display()),
        }
    }
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
        .create(
            &PostParams::default(),
            &koord_crd("NodeMetric", "nodemetrics"),
        )
        .await
        .unwrap();
    let established = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        established
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );
    // koord-manager creates one per node, naming its collect policy.
    let resource = koord_resource("NodeMetric", "nodemetrics");
    let metrics: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut nm = DynamicObject::new(NODE, &resource);
    nm.data = json!({"spec": {"metricCollectPolicy": {"reportIntervalSeconds": 2, "aggregateDurationSeconds": 60}}});
    metrics.create(&PostParams::default(), &nm).await.unwrap();
    apply_koordlet_rbac(&client).await;

    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_NODEMETRIC_MIN_REPORT_MS".into(), "1000".into()));
    ox.spawn(&[&node_kubeconfig(&server)]);
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
    let (code, body) = ox.debug_get("/debug/koord/nodemetric").await.unwrap();
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

/// The test apiserver serving koordinator's NodeSLO CRD, a client of it, and oxlet
/// running against it: no `--node-slo-file`, so koordlet's gates (CPU suppress on)
/// and no thresholds until a NodeSLO is written.
async fn start_with_node_slo_crd(
    bed: &Testbed,
    dir: &std::path::Path,
) -> (testapi::TestApiServer, kube::Client, Oxlet) {
    let server = testapi::TestApiServer::start(dir).await.unwrap();
    let client = client_of(&server).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &koord_crd("NodeSLO", "nodeslos"))
        .await
        .unwrap();
    apply_koordlet_rbac(&client).await;
    let mut ox = Oxlet::new(bed);
    ox.spawn(&[&node_kubeconfig(&server)]);
    ox.wait_up(Duration::from_secs(30)).await;
    (server, client, ox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_slo_change_turns_cpu_suppress_on_and_off_without_a_restart() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, client, ox) = start_with_node_slo_crd(&bed, dir.path()).await;
    let burn = pod_yaml("burn", "while true; do :; done", "").replace(
        "    command:",
        "    resources:\n      requests: {cpu: 100m}\n    command:",
    );
    write_manifest(&ox.manifests, "burn.yaml", &burn);
    ox.wait_running("burn", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ox.best_effort_quota(), -1, "no NodeSLO: nothing enabled");

    // koord-manager writes this node's NodeSLO: a 10 % threshold with one core busy.
    let resource = koord_resource("NodeSLO", "nodeslos");
    let slos: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut slo = DynamicObject::new(NODE, &resource);
    slo.data = json!({"spec": {
        "resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressThresholdPercent": 10,
            "cpuSuppressPolicy": "cfsQuota", "memoryAllocatableEvictThresholdPercent": 110},
        "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": true, "groupIdentity": -1}}},
        "cpuBurstStrategy": {"policy": "none"}}});
    slos.create(&PostParams::default(), &slo).await.unwrap();
    ox.wait_best_effort_quota("suppressed after the NodeSLO", |q| q > 0 && q <= 2000)
        .await;

    // An out-of-range CPU suppress value drops that strategy alone, named with its
    // field, value and range; CPU suppress keeps its running values.
    let mut bad = slos.get(NODE).await.unwrap();
    bad.data["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] = json!(150);
    slos.replace(NODE, &PostParams::default(), &bad)
        .await
        .unwrap();
    let line = skip_logged(&ox, "BECPUSuppress", "cpuSuppressThresholdPercent", 150).await;
    assert!(line.contains("reason=\"is not in [0, 100]\""), "{line}");
    assert!(ox.best_effort_quota() > 0);

    // Turned off: the quota is lifted.
    let mut off = slos.get(NODE).await.unwrap();
    off.data["spec"]["resourceUsedThresholdWithBE"] = json!({"enable": false});
    slos.replace(NODE, &PostParams::default(), &off)
        .await
        .unwrap();
    ox.wait_best_effort_quota("lifted after enable: false", |q| q == -1)
        .await;
    assert!(ox.log().contains("QoS manager configuration changed"));
    // One process all along: one start-up line in the log.
    assert_eq!(
        ox.log()
            .matches("starting the pod lifecycle event generator")
            .count(),
        1
    );
}

/// Waits for the warning that a NodeSLO strategy was skipped and checks it names the
/// strategy, the `resourceUsedThresholdWithBE` field and the value; returns the line.
async fn skip_logged(ox: &Oxlet, strategy: &str, field: &str, value: i64) -> String {
    const SKIPPED: &str = "NodeSLO strategy skipped";
    ox.wait_logged(SKIPPED, 1, Duration::from_secs(10)).await;
    let line = (ox
        .log()
        .lines()
        .find(|l| l.contains(SKIPPED))
        .map(str::to_owned))
    .unwrap();
    let names = [
        format!("strategy=\"{strategy}\""),
        format!("field=\"resourceUsedThresholdWithBE.{field}\""),
        format!("value=\"{value}\""),
    ];
    assert!(
        line.starts_with('W') && names.iter().all(|n| line.contains(n.as_str())),
        "{line}"
    );
    line
}

/// This node's NodeSLO with CPU suppress on at `percent`.
fn node_slo_with_threshold(percent: u32) -> DynamicObject {
    let mut slo = DynamicObject::new(NODE, &koord_resource("NodeSLO", "nodeslos"));
    slo.data = json!({"spec": {"resourceUsedThresholdWithBE": {
        "enable": true, "cpuSuppressThresholdPercent": percent,
        "cpuSuppressPolicy": "cfsQuota", "memoryAllocatableEvictThresholdPercent": 110}}});
    slo
}

/// The apiserver is replaced by a new, empty cluster on the same address and token
/// (its resource versions start over). The NodeSLO watch, whose last version is now
/// from the future, lists afresh as client-go's reflector does, and the new cluster's
/// NodeSLO is followed; kube-runtime alone would retry the old version forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_slo_in_a_new_cluster_on_the_same_address_is_followed() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut server, client, ox) = start_with_node_slo_crd(&bed, dir.path()).await;
    let resource = koord_resource("NodeSLO", "nodeslos");
    let slos: Api<DynamicObject> = Api::all_with(client, &resource);
    slos.create(&PostParams::default(), &node_slo_with_threshold(11))
        .await
        .unwrap();
    ox.wait_logged("cpuSuppressThresholdPercent=11", 1, WAIT)
        .await;
    // The watch's version runs far ahead of anything the new cluster reaches soon.
    for i in 0..300 {
        let mut slo = slos.get(NODE).await.unwrap();
        slo.metadata.labels = Some([("bump".to_owned(), i.to_string())].into());
        slos.replace(NODE, &PostParams::default(), &slo)
            .await
            .unwrap();
    }
    let old_version = server.resource_version();

    let port = server.addr().port();
    server.stop().await.unwrap();
    let fresh = dir.path().join("new-cluster");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::copy(dir.path().join("token"), fresh.join("token")).unwrap();
    let server = testapi::TestApiServer::start_on(&fresh, port)
        .await
        .unwrap();
    // The same node identity and grant in the new cluster.
    server.add_node_token(NODE_TOKEN, NODE).unwrap();
    let client = client_of(&server).await;
    apply_koordlet_rbac(&client).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &koord_crd("NodeSLO", "nodeslos"))
        .await
        .unwrap();
    let slos: Api<DynamicObject> = Api::all_with(client, &resource);
    slos.create(&PostParams::default(), &node_slo_with_threshold(37))
        .await
        .unwrap();
    // Each failed relist while the cluster was replaced (the stop, the start, a list
    // before the CRD existed) doubles client-go's back-off, up to 30 s with a jitter
    // of 1.0: one pause can reach 60 s on a loaded machine (it did in the test pool).
    // Typically the new NodeSLO is seen within 2 s.
    let followed = tokio::time::timeout(Duration::from_secs(150), async {
        while !ox.log().contains("cpuSuppressThresholdPercent=37") {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    if followed.is_err() {
        // Once in a loaded test pool the new cluster's NodeSLO was not seen in 150 s;
        // what the watch said is what tells why.
        let log = ox.log();
        let watch: Vec<&str> = (log.lines())
            .filter(|l| l.contains("NodeSLO") || l.contains("nodeslo") || l.contains("list"))
            .collect();
        panic!(
            "the new cluster's NodeSLO was not followed within 150 s; the watch's lines:\n{}",
            watch.join("\n")
        );
    }
    assert!(
        server.resource_version() < old_version,
        "the new cluster's versions stayed below the old watch's ({} vs {old_version}), \
         so the test showed what it means to",
        server.resource_version()
    );
}

/// The pod cgroup's CFS quota (v1) of the static pod `p`.
fn pod_quota(ox: &Oxlet, p: &k8s_openapi::api::core::v1::Pod) -> i64 {
    let path = ox.cgroup_file(
        "cpu",
        &format!("kubepods/besteffort/pod{}/cpu.cfs_quota_us", uid(p)),
    );
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Waits up to 30 s until the pod cgroup's quota is `want`.
async fn wait_pod_quota(ox: &Oxlet, p: &k8s_openapi::api::core::v1::Pod, what: &str, want: i64) {
    let t = Instant::now();
    while pod_quota(ox, p) != want {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{what}: quota {}\n{}",
            pod_quota(ox, p),
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_slo_change_turns_the_batch_cfs_quota_off_and_on_without_a_restart() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, client, ox) = start_with_node_slo_crd(&bed, dir.path()).await;
    let batch = with_metadata(
        &pod_yaml("batch", "sleep 3600", ""),
        "labels: {koordinator.sh/qosClass: BE}",
    )
    .replace(
            "    command:",
            "    resources:\n      requests: {kubernetes.io/batch-cpu: \"500\"}\n      limits: {kubernetes.io/batch-cpu: \"1500\"}\n    command:",
        );
    write_manifest(&ox.manifests, "batch.yaml", &batch);
    let p = ox.wait_running("batch", Duration::from_secs(30)).await;
    // No NodeSLO: CPU suppress is off, the batch pod has its quota (1500m).
    wait_pod_quota(&ox, &p, "no NodeSLO", 150_000).await;

    // koord-manager turns CPU suppress on with the cfsQuota policy: the BestEffort
    // cgroup's quota is now CPU suppress's, and the batch pods' quotas are lifted.
    let resource = koord_resource("NodeSLO", "nodeslos");
    let slos: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut slo = DynamicObject::new(NODE, &resource);
    slo.data = json!({"spec": {"resourceUsedThresholdWithBE": {"enable": true, "cpuSuppressPolicy": "cfsQuota"}}});
    slos.create(&PostParams::default(), &slo).await.unwrap();
    wait_pod_quota(&ox, &p, "after enable: true", -1).await;
    assert!(
        ox.log()
            .contains("runtime hook rule changed by the NodeSLO")
    );

    // Off again: the pod's quota comes back.
    let mut off = slos.get(NODE).await.unwrap();
    off.data["spec"]["resourceUsedThresholdWithBE"] = json!({"enable": false});
    slos.replace(NODE, &PostParams::default(), &off)
        .await
        .unwrap();
    wait_pod_quota(&ox, &p, "after enable: false", 150_000).await;
    assert_eq!(
        ox.log()
            .matches("starting the pod lifecycle event generator")
            .count(),
        1,
        "one process all along"
    );
}

/// The warning lines (klog's `W` severity) of oxlet's log that contain `text`.
fn warnings(ox: &Oxlet, text: &str) -> usize {
    let log = ox.log();
    log.lines()
        .filter(|l| l.starts_with('W') && l.contains(text))
        .count()
}

/// Without the grant, the node's identity gets RBAC's 403 on slo.koordinator.sh:
/// oxlet says so once per watch, with what to do, however often it retries (the
/// repeats only at -v=4), and blames no missing NodeMetric. Once
/// `deploy/koordlet-rbac.yaml` is applied the watches recover on their own: the
/// NodeSLO's thresholds apply and the NodeMetric gets its status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_rbac_grant_the_refusal_is_said_once_and_the_grant_heals_it() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = testapi::TestApiServer::start(dir.path()).await.unwrap();
    let client = client_of(&server).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (kind, plural) in [("NodeSLO", "nodeslos"), ("NodeMetric", "nodemetrics")] {
        crds.create(&PostParams::default(), &koord_crd(kind, plural))
            .await
            .unwrap();
    }
    let metric = koord_resource("NodeMetric", "nodemetrics");
    let metrics: Api<DynamicObject> = Api::all_with(client.clone(), &metric);
    let mut nm = DynamicObject::new(NODE, &metric);
    nm.data = json!({"spec": {"metricCollectPolicy": {"reportIntervalSeconds": 1}}});
    metrics.create(&PostParams::default(), &nm).await.unwrap();

    let mut ox = Oxlet::new(&bed);
    ox.env
        .push(("OXLET_TEST_NODEMETRIC_MIN_REPORT_MS".into(), "1000".into()));
    ox.spawn(&[&node_kubeconfig(&server)]);
    // The NodeSLO watch is refused again and again (client-go's back-off: about
    // 0.8, 1.6, 3.2 s between its lists).
    let refused_lists = || {
        server
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/nodeslos") && r.status == 403)
            .count()
    };
    ox.poll(
        "four refused NodeSLO lists",
        Duration::from_secs(60),
        || (refused_lists() >= 4).then_some(()),
    )
    .await;
    let slo_refused = "refuses this node's NodeSLO watch (403)";
    let metric_refused = "refuses this node's NodeMetric watch (403)";
    assert_eq!(warnings(&ox, slo_refused), 1, "{}", tail(&ox.log(), 30));
    assert_eq!(warnings(&ox, metric_refused), 1, "{}", tail(&ox.log(), 30));
    let log = ox.log();
    assert!(log.contains("apply deploy/koordlet-rbac.yaml"));
    // The apiserver's own words are in the warning.
    assert!(
        log.contains("cannot list resource")
            && log.contains("in API group")
            && log.contains("at the cluster scope"),
        "{}",
        tail(&log, 30)
    );
    // The repeats are said at -v=4 (the harness runs oxlet at -v=4).
    assert!(log.contains("NodeSLO watch still refused by the apiserver"));
    assert!(
        !log.contains("no NodeMetric for this node yet"),
        "a refused watch is not a missing NodeMetric"
    );

    // koord-manager's NodeSLO, then the grant.
    let slos: Api<DynamicObject> =
        Api::all_with(client.clone(), &koord_resource("NodeSLO", "nodeslos"));
    slos.create(&PostParams::default(), &node_slo_with_threshold(23))
        .await
        .unwrap();
    apply_koordlet_rbac(&client).await;
    // The back-off has grown to a few seconds; its next list gets through.
    ox.wait_logged("cpuSuppressThresholdPercent=23", 1, Duration::from_secs(90))
        .await;
    ox.wait_logged(
        "the apiserver serves this node's NodeSLO watch again",
        1,
        Duration::from_secs(10),
    )
    .await;
    let t = Instant::now();
    loop {
        let got = metrics.get(NODE).await.unwrap();
        if got.data["status"]["nodeMetric"]["nodeUsage"].is_object() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "no NodeMetric status: {}\n{}",
            got.data,
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        ox.log()
            .contains("the apiserver serves this node's NodeMetric watch again")
    );
    // Still one warning each, for the whole refusal.
    assert_eq!(warnings(&ox, slo_refused), 1);
    assert_eq!(warnings(&ox, metric_refused), 1);
}

/// koordlet drops only the strategy a bad value is in: a NodeSLO whose memory eviction
/// threshold is out of the CRD's range still turns CPU suppress on. Deleting the
/// NodeSLO keeps the last one applied, as koordlet's informer keeps its last object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_strategy_drops_alone_and_a_deleted_node_slo_stays_applied() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, client, ox) = start_with_node_slo_crd(&bed, dir.path()).await;
    write_manifest(
        &ox.manifests,
        "idle.yaml",
        &pod_yaml("idle", "sleep 3600", ""),
    );
    ox.wait_running("idle", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(ox.best_effort_quota(), -1, "no NodeSLO: nothing enabled");

    let slos: Api<DynamicObject> =
        Api::all_with(client.clone(), &koord_resource("NodeSLO", "nodeslos"));
    let mut slo = node_slo_with_threshold(10);
    slo.data["spec"]["resourceUsedThresholdWithBE"]["memoryEvictThresholdPercent"] = json!(150);
    slos.create(&PostParams::default(), &slo).await.unwrap();
    ox.wait_best_effort_quota("suppressed by the NodeSLO's other strategies", |q| q > 0)
        .await;
    skip_logged(&ox, "BEMemoryEvict", "memoryEvictThresholdPercent", 150).await;
    let log = ox.log();
    assert!(log.contains("cpuSuppressThresholdPercent=10"));

    // Deleted: the last NodeSLO stays in force, the quota with it.
    let changes = ox
        .log()
        .matches("QoS manager configuration changed")
        .count();
    slos.delete(NODE, &Default::default()).await.unwrap();
    ox.wait_logged("NodeSLO deleted; the last one applied is kept", 1, WAIT)
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(ox.best_effort_quota() > 0, "{}", tail(&ox.log(), 20));
    assert_eq!(
        ox.log()
            .matches("QoS manager configuration changed")
            .count(),
        changes,
        "{}",
        tail(&ox.log(), 20)
    );
}

/// Merges `annotations` into this node's Node, as koord-manager (or an admin) does;
/// a null value removes one.
async fn annotate_node(nodes: &Api<Node>, annotations: Value) {
    let patch = json!({"metadata": {"annotations": annotations}});
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

const NODE_READ: &str = "Node read; the QoS manager and the predictor follow it";
const NODE_FIELD_DROPPED: &str = "a Node annotation or allocatable entry cannot be read";

/// koordlet's node informer: oxlet, with the node's identity and no grant beyond the
/// Node authorizer's, watches its own Node and follows its annotations without a
/// restart. `node.koordinator.sh/raw-allocatable` caps the predictor (the node
/// allocatable on `/stats/predictions`); `node.koordinator.sh/reservation` raises
/// the system's floor in CPU suppress (the BestEffort quota falls to its minimum,
/// and rises again when the reservation goes); an unreadable annotation is one
/// warning naming it and the reason, not repeated as the Node changes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_annotations_reach_the_predictor_and_cpu_suppress_without_a_restart() {
    let bed = Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (_server, client, ox) = start_with_node_slo_crd(&bed, dir.path()).await;
    ox.wait_logged(NODE_READ, 1, WAIT).await;
    let nodes: Api<Node> = Api::all(client.clone());

    // The raw allocatable comes before the Node's own allocatable.
    annotate_node(
        &nodes,
        json!({"node.koordinator.sh/raw-allocatable": r#"{"cpu":"1500m","memory":"1Gi"}"#}),
    )
    .await;
    let node = ox
        .wait_for_json("/stats/predictions", WAIT, |doc| {
            let a = &doc["node"]["allocatable"];
            (a["cpuMilli"] == 1500).then(|| a.clone())
        })
        .await;
    assert_eq!(node["memoryBytes"], 1 << 30, "{node}");

    // CPU suppress at 100 % on a quiet node: well above the 2 ms minimum.
    let slos: Api<DynamicObject> =
        Api::all_with(client.clone(), &koord_resource("NodeSLO", "nodeslos"));
    slos.create(&PostParams::default(), &node_slo_with_threshold(100))
        .await
        .unwrap();
    ox.wait_best_effort_quota("suppressed at 100 %", |q| q > 2000)
        .await;
    // A reservation of 1000 CPUs is more than the node has: nothing is left to
    // BestEffort, so the quota is the minimum.
    annotate_node(
        &nodes,
        json!({"node.koordinator.sh/reservation": r#"{"resources":{"cpu":"1000"}}"#}),
    )
    .await;
    ox.wait_best_effort_quota("the reservation takes every CPU", |q| q == 2000)
        .await;

    // An unreadable ratio: one warning naming the annotation and the reason.
    annotate_node(
        &nodes,
        json!({"node.koordinator.sh/cpu-normalization-ratio": "fast"}),
    )
    .await;
    ox.wait_logged(NODE_FIELD_DROPPED, 1, WAIT).await;
    let log = ox.log();
    let line = log
        .lines()
        .find(|l| l.contains(NODE_FIELD_DROPPED))
        .unwrap();
    assert!(
        line.starts_with('W')
            && line.contains(r#"field="node.koordinator.sh/cpu-normalization-ratio""#)
            && line.contains("is not a number"),
        "{line}"
    );
    // Another change to the Node (the reservation goes) does not say it again, and
    // the BestEffort quota rises again.
    annotate_node(&nodes, json!({"node.koordinator.sh/reservation": null})).await;
    ox.wait_best_effort_quota("the reservation is gone", |q| q > 2000)
        .await;
    assert_eq!(ox.log().matches(NODE_FIELD_DROPPED).count(), 1);
    // The raw allocatable still holds: the bad ratio dropped itself alone.
    let (code, body) = ox.get("/stats/predictions").await.unwrap();
    assert_eq!(code, 200);
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["node"]["allocatable"]["cpuMilli"], 1500);
    assert_eq!(
        ox.log().matches("refuses this node's Node watch").count(),
        0
    );
}

//! `--resize`: in-place resize in cluster mode. A running pod's CPU limit is changed
//! through `pods/resize` in the in-repo test apiserver, and timed until the apiserver's
//! copy of its status reports the new limit (`containerStatuses[].resources`), against
//! the floor: the CRI's `UpdateContainerResources` alone, on a bare container of the
//! same containerd, alternating with them.

use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testapi::TestApiServer;

use crate::agent::{Oxlet, api_pod, client_of, container_status, is_running, resize_pod};
use crate::common::Testbed;
use crate::floor::{floor_pod, wait_sandboxes};
use crate::stats::{dist, ms, pct, sorted};
use crate::{Plan, RESTING, WAIT, run, write_report};

/// The two CPU limits the pod goes back and forth between, in millicores.
const LIMITS: [i64; 2] = [300, 200];

/// The container's CPU limit as the apiserver's copy of the status reports it.
fn reported_limit(server: &TestApiServer) -> Option<String> {
    let p = server.get::<Pod>("default", "resized").ok()??;
    let r = container_status(&p, "main")?.resources.clone()?;
    Some(r.limits?.get("cpu")?.0.clone())
}

/// The one container of the bare pod `name` (made by `floor_pod`).
async fn floor_container(bed: &Testbed, name: &str) -> String {
    let mut client = bed.cri().await;
    let sandboxes = client
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .items;
    let sandbox = sandboxes
        .iter()
        .find(|s| s.metadata.as_ref().is_some_and(|m| m.name == name))
        .expect("the floor sandbox")
        .id
        .clone();
    let containers = client
        .list_containers(cri::ListContainersRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .containers;
    containers
        .into_iter()
        .find(|c| c.pod_sandbox_id == sandbox)
        .expect("the floor container")
        .id
}

/// One bare `UpdateContainerResources` with the CPU limit `milli`.
async fn floor_update(bed: &Testbed, id: &str, milli: i64) -> Duration {
    let mut client = bed.cri().await;
    let t = Instant::now();
    client
        .update_container_resources(cri::UpdateContainerResourcesRequest {
            container_id: id.to_owned(),
            linux: Some(cri::LinuxContainerResources {
                cpu_period: 100_000,
                cpu_quota: milli * 100,
                cpu_shares: 102,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("UpdateContainerResources");
    t.elapsed()
}

/// One resize through the apiserver, timed until its status reports the new limit.
async fn resize(api: &Api<Pod>, server: &TestApiServer, ox: &Oxlet, milli: i64) -> Duration {
    let want = format!("{milli}m");
    let patch = json!({"spec": {"containers": [
        {"name": "main", "resources": {"limits": {"cpu": want}}}
    ]}});
    let t = Instant::now();
    resize_pod(api, "resized", patch).await;
    ox.poll(&format!("the status reports {want}"), WAIT, || {
        (reported_limit(server).as_deref() == Some(want.as_str())).then_some(())
    })
    .await;
    t.elapsed()
}

pub(crate) async fn run(plan: &Plan) {
    let bed = Testbed::start().await;
    let dir = bed.base_dir().join("apiserver");
    std::fs::create_dir_all(&dir).unwrap();
    let server = TestApiServer::start(&dir).await.unwrap();
    let kubeconfig = format!("--kubeconfig={}", server.kubeconfig().display());
    let mut ox = run::start(&bed, "oxlet-resize", run::this_binary(), &[kubeconfig]).await;
    // The bench polls the in-process apiserver's store, not oxlet: 2 ms costs nothing.
    ox.poll = Duration::from_millis(2);
    let api: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let mut pod = api_pod("resized", "testnode", RESTING, 1);
    pod.spec.as_mut().unwrap().containers[0].resources = Some(
        serde_json::from_value(json!({
            "requests": {"cpu": "100m"}, "limits": {"cpu": format!("{}m", LIMITS[1])}
        }))
        .unwrap(),
    );
    api.create(&PostParams::default(), &pod).await.unwrap();
    ox.poll("the pod Running", WAIT, || {
        server
            .get::<Pod>("default", "resized")
            .unwrap()
            .filter(is_running)
    })
    .await;
    floor_pod(&bed, "floor-resize").await;
    let floor_id = floor_container(&bed, "floor-resize").await;

    let reps = plan.resize_reps;
    eprintln!("bench: in-place resize x{reps}");
    let (mut floor, mut took) = (Vec::new(), Vec::new());
    for i in 0..reps {
        let milli = LIMITS[i % 2];
        floor.push(ms(floor_update(&bed, &floor_id, milli).await));
        took.push(ms(resize(&api, &server, &ox, milli).await));
    }
    let (floor, took) = (sorted(floor), sorted(took));
    let bare = pct(&floor, 0.5);
    println!("\n## In-place resize (ms)\n");
    println!("| measure | p50 | p90 | p99 | ratio to the floor p50 |");
    println!("|---|---|---|---|---|");
    for (what, v) in [
        (
            format!("floor: UpdateContainerResources alone ({reps})"),
            &floor,
        ),
        (
            format!("pods/resize patch → the apiserver's status reports the new limit ({reps})"),
            &took,
        ),
    ] {
        let p50 = pct(v, 0.5);
        println!(
            "| {what} | {p50:.1} | {:.1} | {:.1} | {:.2} |",
            pct(v, 0.9),
            pct(v, 0.99),
            p50 / bare
        );
    }
    write_report(
        "resize.json",
        &json!({"floor_ms": dist(&floor), "resize_ms": dist(&took)}),
    );
    let _ = api.delete("resized", &DeleteParams::default()).await;
    ox.poll("the pod gone from the apiserver", WAIT, || {
        server
            .get::<Pod>("default", "resized")
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    crate::floor::remove_all_sandboxes(&bed).await;
    wait_sandboxes(&bed, 0).await;
    run::stop(ox, &bed).await;
}

//! Cluster mode: pods created in the in-repo test apiserver, timed until the
//! apiserver's copy says Running (what a client of the cluster sees), alternating
//! with the bare floor; then an at-rest window with 110 apiserver pods.

use std::collections::HashMap;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use testapi::TestApiServer;

use crate::agent::{Oxlet, api_pod, client_of, is_running};
use crate::common::Testbed;
use crate::floor::{floor_pod, remove_all_sandboxes, wait_sandboxes};
use crate::stats::{Footprint, footprint, ms, sorted};
use crate::{Plan, RESTING, WAIT, run};

/// When each pod was first Running in the apiserver, as a watch reports it: no
/// polling load on the 2 cores.
struct RunningWatch {
    rx: tokio::sync::watch::Receiver<HashMap<String, Instant>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningWatch {
    fn start(api: Api<Pod>) -> RunningWatch {
        let (tx, rx) = tokio::sync::watch::channel(HashMap::new());
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(ev) = events.next().await {
                let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev else {
                    continue;
                };
                if !is_running(&p) {
                    continue;
                }
                let name = p.metadata.name.unwrap_or_default();
                tx.send_if_modified(|m| {
                    let new = !m.contains_key(&name);
                    m.entry(name).or_insert_with(Instant::now);
                    new
                });
            }
        });
        RunningWatch { rx, task }
    }

    /// When `name` was first seen Running.
    async fn running(&mut self, name: &str) -> Instant {
        let seen = tokio::time::timeout(WAIT, self.rx.wait_for(|m| m.contains_key(name)))
            .await
            .unwrap_or_else(|_| panic!("{name} not Running in the apiserver after {WAIT:?}"))
            .expect("the watch runs");
        seen[name]
    }
}

impl Drop for RunningWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) struct ClusterResult {
    pub(crate) floor: Vec<f64>,
    /// Created → oxlet's startup log line.
    pub(crate) logged: Vec<f64>,
    /// Created → the apiserver's status says Running (watch).
    pub(crate) seen: Vec<f64>,
    pub(crate) rest: Footprint,
    pub(crate) rest_pods: usize,
}

async fn create(api: &Api<Pod>, name: &str) {
    api.create(
        &PostParams::default(),
        &api_pod(name, "testnode", RESTING, 1),
    )
    .await
    .unwrap_or_else(|e| panic!("creating {name}: {e}"));
}

/// Deletes the pods (gracefully, as a client would) and waits until they are gone
/// from the apiserver and containerd.
async fn delete_all(api: &Api<Pod>, server: &TestApiServer, bed: &Testbed, ox: &Oxlet) {
    for p in server.list::<Pod>(Some("default")).unwrap() {
        let name = p.metadata.name.unwrap_or_default();
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    ox.poll("apiserver pods gone", WAIT, || {
        server
            .list::<Pod>(Some("default"))
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
    wait_sandboxes(bed, 0).await;
}

pub(crate) async fn run(bed: &Testbed, plan: &Plan) -> ClusterResult {
    let dir = bed.base_dir().join("apiserver");
    std::fs::create_dir_all(&dir).unwrap();
    let server = TestApiServer::start(&dir).await.unwrap();
    let kubeconfig = format!("--kubeconfig={}", server.kubeconfig().display());
    let ox = run::start(bed, "oxlet-api", run::this_binary(), &[kubeconfig]).await;
    let api: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let mut watch = RunningWatch::start(api.clone());

    eprintln!("bench: cluster mode, single pod x{}", plan.api_reps);
    let (mut floor, mut logged, mut seen) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..plan.api_reps {
        floor.push(ms(floor_pod(bed, &format!("floor-api{i}")).await));
        remove_all_sandboxes(bed).await;
        wait_sandboxes(bed, 0).await;
        let name = format!("api-single{i}");
        let t0 = jiff::Timestamp::now();
        let t = Instant::now();
        create(&api, &name).await;
        seen.push(ms(watch.running(&name).await - t));
        if let Some((ms, _)) = run::startups(&ox.log(), t0, std::slice::from_ref(&name)).pop() {
            logged.push(ms);
        }
        delete_all(&api, &server, bed, &ox).await;
    }

    let n = plan.rest_pods;
    eprintln!("bench: cluster mode, at rest with {n} pods");
    for i in 0..n {
        create(&api, &format!("api-rest{i}")).await;
    }
    for i in 0..n {
        watch.running(&format!("api-rest{i}")).await;
    }
    tokio::time::sleep(plan.settle).await;
    let rest = footprint(&ox, bed.containerd_pid(), plan.window).await;
    delete_all(&api, &server, bed, &ox).await;
    drop(watch);
    run::stop(ox, bed).await;
    ClusterResult {
        floor: sorted(floor),
        logged: sorted(logged),
        seen: sorted(seen),
        rest,
        rest_pods: n,
    }
}

//! Apiserver outages: the test apiserver stopped for a while with a full node, then
//! back with its state, and once as a new, empty cluster. No pod may be killed for the
//! outage; what changed during it (a pod deleted, every pod's readiness) must reach
//! both sides afterwards, paced by the client's QPS limit.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node as NodeObject, Pod};
use testapi::TestApiServer;

use crate::agent::{Oxlet, tail};
use crate::common::Testbed;
use crate::footprint::cri_client;
use crate::kit::*;

/// kubelet's defaults for `kubeAPIQPS` and `kubeAPIBurst`, which oxlet's are too.
const QPS: usize = 50;
const BURST: usize = 100;
const STATICS: usize = 5;

/// The apiserver's view: every API pod Running, with every container's readiness as
/// `ready`.
fn api_statuses_are(server: &TestApiServer, names: &[String], ready: bool) -> bool {
    names.iter().all(|n| {
        server
            .get::<Pod>("default", n)
            .ok()
            .flatten()
            .is_some_and(|p| {
                let s = p.status.unwrap_or_default();
                s.phase.as_deref() == Some("Running")
                    && s.container_statuses
                        .is_some_and(|c| !c.is_empty() && c.iter().all(|c| c.ready == ready))
            })
    })
}

/// Which pods are not yet Running and Ready, in oxlet's view and in the apiserver's.
fn explain_unready(server: &TestApiServer, names: &[String], shown: &BTreeMap<String, Pod>) {
    let here: Vec<&String> = shown
        .iter()
        .filter(|(_, p)| !running_ready(p))
        .map(|(n, _)| n)
        .collect();
    let there: Vec<&String> = names
        .iter()
        .filter(|n| !api_statuses_are(server, std::slice::from_ref(*n), true))
        .collect();
    eprintln!(
        "soak: {} pods shown; not Running and Ready: in oxlet {here:?}, in the apiserver {there:?}",
        shown.len()
    );
}

/// The most requests oxlet sent in any one second after `from`, and their total.
fn busiest_second(server: &TestApiServer, from: Instant) -> (usize, usize) {
    let times: Vec<Instant> = server
        .requests()
        .into_iter()
        .filter(|r| r.authenticated && r.at >= from)
        .map(|r| r.at)
        .collect();
    let mut most = 0;
    let mut start = 0;
    for (end, t) in times.iter().enumerate() {
        while *t - times[start] >= Duration::from_secs(1) {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    (most, times.len())
}

async fn sandbox_ready(socket: &std::path::Path, uid: &str) -> bool {
    let Some(mut c) = cri_client(socket).await else {
        return true;
    };
    let filter = k8s_cri::v1::PodSandboxFilter {
        label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        state: Some(k8s_cri::v1::PodSandboxStateValue { state: 0 }),
        ..Default::default()
    };
    c.list_pod_sandbox(k8s_cri::v1::ListPodSandboxRequest {
        filter: Some(filter),
    })
    .await
    .is_ok_and(|r| !r.into_inner().items.is_empty())
}

/// Each outage of `lengths`, then a new cluster.
pub(crate) async fn apiserver_outages(scale: Scale) {
    // With the 5 static pods, kubelet's maxPods (110): more are refused at admission.
    let api_pods = scale.pick(105, 20);
    let lengths: Vec<Duration> = scale
        .pick(vec![5, 60, 300], vec![5, 10])
        .into_iter()
        .map(Duration::from_secs)
        .collect();
    let (bed, mut server, flags) = cluster_bed().await;
    let ox = cluster_oxlet(&bed, &server, &[]);
    ox.wait_up(Duration::from_secs(120)).await;
    let mut names = Vec::new();
    for i in 0..api_pods {
        let kind = if i % 2 == 0 { Kind::Probed } else { Kind::Idle };
        let p = pod(&format!("a{i:03}"), kind, true, &flags);
        names.push(p.metadata.name.clone().unwrap());
        add(&ox, &server, &p);
    }
    for i in 0..STATICS {
        add(
            &ox,
            &server,
            &pod(&format!("s{i}"), Kind::Idle, false, &flags),
        );
    }
    let total = api_pods + STATICS;
    let mut polls = 0_u32;
    let (pods, took) = until(
        &ox,
        "every pod Running and Ready",
        Duration::from_secs(600),
        async || {
            polls += 1;
            let pods = shown(&ox).await;
            let done = pods.len() == total
                && pods.values().all(running_ready)
                && api_statuses_are(&server, &names, true);
            // Every 50th poll (10 s): who is still missing.
            if !done && polls.is_multiple_of(50) {
                explain_unready(&server, &names, &pods);
            }
            done.then_some(pods)
        },
    )
    .await;
    eprintln!("soak: {total} pods Running and Ready in {took:?}");
    let mut before: BTreeMap<String, Vec<(String, i32)>> = pods
        .iter()
        .map(|(n, p)| (n.clone(), containers_of(p)))
        .collect();
    let mut report = Report::new(
        &format!("Apiserver outages: {api_pods} API pods (half probed) and {STATICS} static pods"),
        &[
            "outage",
            "pods killed",
            "deleted pod stopped",
            "readiness written",
            "lease renewed",
            "Node Ready",
            "busiest second (limit)",
            "requests in 60 s",
        ],
    );
    for length in &lengths {
        // Deleted while the apiserver is away, and every probed pod NotReady meanwhile.
        let victim = names.remove(0);
        let victim_uid = crate::agent::uid(&pods[&victim]);
        before.remove(&victim);
        server.stop().await.unwrap();
        std::fs::remove_file(flags.join("up")).unwrap();
        assert!(server.remove::<Pod>("default", &victim).unwrap());
        tokio::time::sleep(*length).await;
        let (killed, back_wall) = (killed_pods(&ox, &before).await, jiff::Timestamp::now());
        server.restart().await.unwrap();
        let back = Instant::now();
        let probed: Vec<String> = names
            .iter()
            .filter(|n| n[1..].parse::<usize>().is_ok_and(|i| i % 2 == 0))
            .cloned()
            .collect();
        until(
            &ox,
            "the pod deleted in the outage stopped",
            Duration::from_secs(60),
            async || (!sandbox_ready(&bed_socket(&bed), &victim_uid).await).then_some(()),
        )
        .await;
        let stopped = back.elapsed();
        until(
            &ox,
            "NotReady written for every probed pod",
            Duration::from_secs(120),
            async || api_statuses_are(&server, &probed, false).then_some(()),
        )
        .await;
        let unready = back.elapsed();
        until(
            &ox,
            "the lease renewed",
            Duration::from_secs(60),
            async || lease_renewed_after(&server, back_wall).then_some(()),
        )
        .await;
        let leased = back.elapsed();
        until(&ox, "the Node Ready", Duration::from_secs(60), async || {
            node_ready(&server)
                .is_some_and(|(s, _)| s == "True")
                .then_some(())
        })
        .await;
        let ready = back.elapsed();
        std::fs::write(flags.join("up"), b"up\n").unwrap();
        until(
            &ox,
            "every pod Ready again, on both sides",
            Duration::from_secs(120),
            async || {
                let pods = shown(&ox).await;
                (pods.values().all(running_ready) && api_statuses_are(&server, &names, true))
                    .then_some(())
            },
        )
        .await;
        let settle = Duration::from_secs(60).saturating_sub(back.elapsed());
        tokio::time::sleep(settle).await;
        let (busiest, sent) = busiest_second(&server, back);
        report.row(vec![
            format!("{length:?}"),
            killed.to_string(),
            secs(stopped),
            secs(unready),
            secs(leased),
            secs(ready),
            format!("{busiest} ({})", QPS + BURST),
            sent.to_string(),
        ]);
        assert_eq!(
            killed,
            0,
            "pods were killed during the outage\n{}",
            tail(&ox.log(), 60)
        );
        assert!(
            busiest <= QPS + BURST,
            "{busiest} requests in one second after the outage, more than the limits allow"
        );
    }
    let killed = killed_pods(&ox, &before).await;
    assert_eq!(
        killed,
        0,
        "pods restarted after the outages\n{}",
        tail(&ox.log(), 60)
    );
    new_cluster(&bed, &ox, server, &names, &mut report).await;
    report.finish(scale, &release(&bed));
}

fn bed_socket(bed: &Testbed) -> std::path::PathBuf {
    bed.socket().to_path_buf()
}

/// Pods of `before` no longer on the same containers, unrestarted.
async fn killed_pods(ox: &Oxlet, before: &BTreeMap<String, Vec<(String, i32)>>) -> usize {
    let now = shown(ox).await;
    before
        .iter()
        .filter(|(n, c)| now.get(*n).map(containers_of).as_ref() != Some(*c))
        .count()
}

/// The apiserver comes back empty, as a new cluster on the same address and token
/// would: the Node and its lease are registered again, the static pods get their
/// mirror pods back and run on, and the API pods, which the new cluster does not
/// have, are stopped.
async fn new_cluster(
    bed: &Testbed,
    ox: &Oxlet,
    mut server: TestApiServer,
    api_names: &[String],
    report: &mut Report,
) {
    let port = server.addr().port();
    server.stop().await.unwrap();
    let fresh = bed.base_dir().join("apiserver-new");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::copy(bed.base_dir().join("apiserver/token"), fresh.join("token")).unwrap();
    let statics_before: Vec<(String, Vec<(String, i32)>)> = shown(ox)
        .await
        .into_iter()
        .filter(|(n, _)| n.starts_with('s'))
        .map(|(n, p)| (n, containers_of(&p)))
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let server = TestApiServer::start_on(&fresh, port).await.unwrap();
    let t0 = Instant::now();
    until(
        ox,
        "the Node registered with the new cluster",
        Duration::from_secs(120),
        async || {
            server
                .get::<NodeObject>("", NODE)
                .ok()
                .flatten()
                .map(|_| ())
        },
    )
    .await;
    let registered = t0.elapsed();
    until(
        ox,
        "a lease in the new cluster",
        Duration::from_secs(120),
        async || {
            server
                .get::<Lease>("kube-node-lease", NODE)
                .ok()
                .flatten()
                .map(|_| ())
        },
    )
    .await;
    let leased = t0.elapsed();
    until(
        ox,
        "the static pods' mirror pods in the new cluster",
        Duration::from_secs(120),
        async || {
            (0..STATICS)
                .all(|i| {
                    server
                        .get::<Pod>("default", &format!("s{i}-{NODE}"))
                        .ok()
                        .flatten()
                        .is_some()
                })
                .then_some(())
        },
    )
    .await;
    let mirrored = t0.elapsed();
    until(
        ox,
        "the old cluster's pods stopped",
        Duration::from_secs(180),
        async || {
            let pods = shown(ox).await;
            api_names
                .iter()
                .all(|n| !pods.contains_key(n))
                .then_some(())
        },
    )
    .await;
    let stopped = t0.elapsed();
    let now = shown(ox).await;
    let statics_kept = statics_before
        .iter()
        .filter(|(n, c)| now.get(n).map(containers_of).as_ref() == Some(c))
        .count();
    report.note(format!(
        "a new, empty cluster on the same address: Node registered after {}, lease after {}, {STATICS} mirror pods after {}, the {} API pods it does not have stopped after {}; {statics_kept} of {STATICS} static pods ran on unrestarted",
        secs(registered),
        secs(leased),
        secs(mirrored),
        api_names.len(),
        secs(stopped)
    ));
    assert_eq!(statics_kept, STATICS, "{}", tail(&ox.log(), 60));
}

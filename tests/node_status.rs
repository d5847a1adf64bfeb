//! Node registration, node status and the lease on a real containerd, with the real
//! oxlet binary against the in-repo test apiserver: the node registers with the
//! capacity oxlet measured and Ready, the lease is renewed every quarter of its
//! duration, a deleted Node is registered again (with the default report
//! frequency, so only the periodic GET can notice; and deleted 0.1 s, 1 s and 60 s
//! after registering, without more requests than kubelet's), and after an apiserver outage the
//! lease and the status catch up; and the pod CIDR, from the flag and then the Node, goes
//! to the runtime once per change.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use testapi::TestApiServer;
use tokio::time::Instant;

const NODE: &str = "testnode";

fn ready(n: &Node) -> Option<(String, String)> {
    let c = n
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn renew_time(api: &TestApiServer) -> Option<jiff::Timestamp> {
    let l: Lease = api.get("kube-node-lease", NODE).ok()??;
    Some(l.spec?.renew_time?.0)
}

/// The `capacity: cpu=..m memory=.. ephemeral-storage=.. pods=..` oxlet logs at start.
fn logged_capacity(log: &str) -> Option<(i64, i64, i64, i64)> {
    let line = log.lines().find(|l| l.contains("capacity: cpu="))?;
    let cap = line.split("capacity: ").nth(1)?.split(';').next()?;
    let field = |k: &str| -> Option<i64> {
        cap.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{k}=")))?
            .trim_end_matches('m')
            .parse()
            .ok()
    };
    Some((
        field("cpu")?,
        field("memory")?,
        field("ephemeral-storage")?,
        field("pods")?,
    ))
}

fn bytes(q: &str) -> i64 {
    let (n, mult) = [
        ("Ki", 1i64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ]
    .iter()
    .find_map(|(s, m)| q.strip_suffix(s).map(|n| (n, *m)))
    .unwrap_or((q, 1));
    n.parse::<i64>().unwrap() * mult
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_registers_leases_reregisters_and_catches_up_after_an_outage() {
    let bed = Testbed::start().await;
    let mut api = TestApiServer::start(&bed.base_dir().join("apiserver"))
        .await
        .unwrap();
    let config = bed.base_dir().join("kubelet-config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeLeaseDurationSeconds: 2\nnodeStatusReportFrequency: 1s\n",
    )
    .unwrap();
    let secure_port = free_port();
    let ox = Oxlet::start(
        &bed,
        &[
            &format!("--kubeconfig={}", api.kubeconfig().display()),
            &format!("--config={}", config.display()),
            &format!("--port={secure_port}"),
            "--node-status-update-frequency=1s",
            "--node-labels=pool=edge",
            "--register-with-taints=dedicated=test:NoSchedule",
        ],
    );

    // Registered, Ready with kubelet's reason, capacity = what oxlet measured.
    let node = ox
        .poll("the node to be Ready", Duration::from_secs(30), || {
            let n: Node = api.get("", NODE).ok()??;
            (ready(&n)? == ("True".into(), "KubeletReady".into())).then_some(n)
        })
        .await;
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], NODE);
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["pool"], "edge");
    assert_eq!(
        node.spec.as_ref().unwrap().taints.as_ref().unwrap()[0].key,
        "dedicated"
    );
    let status = node.status.clone().unwrap();
    let cap = status.capacity.unwrap();
    let (cpu_milli, mem, eph, pods) = logged_capacity(&ox.log()).expect("capacity logged");
    assert_eq!(cap["cpu"].0, (cpu_milli / 1000).to_string());
    assert_eq!(bytes(&cap["memory"].0), mem);
    assert_eq!(bytes(&cap["ephemeral-storage"].0), eph);
    assert_eq!(cap["pods"].0, pods.to_string());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let host_kb: i64 = meminfo
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        mem,
        host_kb * 1024,
        "memory capacity is the host's MemTotal"
    );
    let info = status.node_info.unwrap();
    assert!(
        info.container_runtime_version.starts_with("containerd://"),
        "{}",
        info.container_runtime_version
    );
    assert_eq!(info.kubelet_version, "v1.36.0");
    assert_eq!(
        status
            .daemon_endpoints
            .unwrap()
            .kubelet_endpoint
            .unwrap()
            .port,
        i32::from(secure_port),
        "the secure port it serves on"
    );
    assert!(status.images.unwrap().iter().any(|i| {
        i.names
            .iter()
            .flatten()
            .any(|n| n.contains("localhost/oxlet/busybox"))
    }));

    // The lease: held by the node, owned by the Node, renewed every 0.25 × 2 s.
    let lease: Lease = ox
        .poll("the lease", Duration::from_secs(10), || {
            let l: Lease = api.get("kube-node-lease", NODE).ok()??;
            l.metadata.owner_references.is_some().then_some(l)
        })
        .await;
    let spec = lease.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some(NODE));
    assert_eq!(spec.lease_duration_seconds, Some(2));
    assert_eq!(
        lease.metadata.owner_references.unwrap()[0].uid,
        node.metadata.uid.clone().unwrap()
    );
    let mut renewals = Vec::new();
    let mut last = renew_time(&api);
    let t = Instant::now();
    while renewals.len() < 6 && t.elapsed() < Duration::from_secs(10) {
        let now = renew_time(&api);
        if now != last {
            renewals.push(now.unwrap());
            last = now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(renewals.len() >= 6, "renewals: {renewals:?}");
    let gaps: Vec<f64> = renewals
        .windows(2)
        .map(|w| (w[1] - w[0]).total(jiff::Unit::Millisecond).unwrap())
        .collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    eprintln!("lease renew gaps (ms): {gaps:?}, mean {mean:.0}");
    assert!(
        (400.0..700.0).contains(&mean),
        "renew interval ≈ 500 ms, got {gaps:?}"
    );

    // An outage: lease and status catch up once the apiserver is back.
    api.stop().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stopped_at = jiff::Timestamp::now();
    api.restart().await.unwrap();
    ox.poll(
        "the lease to be renewed after the outage",
        Duration::from_secs(15),
        || (renew_time(&api)? > stopped_at).then_some(()),
    )
    .await;
    ox.poll(
        "a fresh heartbeat after the outage",
        Duration::from_secs(15),
        || {
            let n: Node = api.get("", NODE).ok()??;
            let c = n
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (c.last_heartbeat_time?.0 > stopped_at && c.status == "True").then_some(())
        },
    )
    .await;
}

/// A bed, a test apiserver and an oxlet in cluster mode updating its node status
/// every second, with `extra` flags (dropped oxlet first, as bound).
async fn node_with_a_status_every_second(extra: &[&str]) -> (Testbed, TestApiServer, Oxlet) {
    let bed = Testbed::start().await;
    let api = TestApiServer::start(&bed.base_dir().join("apiserver"))
        .await
        .unwrap();
    let kubeconfig = format!("--kubeconfig={}", api.kubeconfig().display());
    let mut flags = vec![kubeconfig.as_str(), "--node-status-update-frequency=1s"];
    flags.extend_from_slice(extra);
    let ox = Oxlet::start(&bed, &flags);
    (bed, api, ox)
}

/// With the default `nodeStatusReportFrequency` (5 min) nothing is due to be sent
/// after the first status, so only the periodic GET notices a deleted Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_is_registered_again_with_the_default_report_frequency() {
    let (_bed, api, ox) = node_with_a_status_every_second(&[]).await;
    let node = ox
        .poll("the node to be Ready", Duration::from_secs(30), || {
            let n: Node = api.get("", NODE).ok()??;
            (ready(&n)?.0 == "True").then_some(n)
        })
        .await;
    ox.poll(
        "the lease owned by the Node",
        Duration::from_secs(15),
        || {
            let l: Lease = api.get("kube-node-lease", NODE).ok()??;
            (l.metadata.owner_references?[0].uid == node.metadata.uid.clone()?).then_some(())
        },
    )
    .await;
    // Let the first status settle so nothing is due any more.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(api.remove::<Node>("", NODE).unwrap());
    let again = ox
        .poll(
            "the node to be registered again",
            Duration::from_secs(15),
            || {
                let n: Node = api.get("", NODE).ok()??;
                (ready(&n)?.0 == "True").then_some(n)
            },
        )
        .await;
    assert_ne!(again.metadata.uid, node.metadata.uid);
    assert!(
        ox.log()
            .contains("the Node object was deleted; registering it again")
    );
    let new_uid = again.metadata.uid.clone().unwrap();
    ox.poll(
        "the lease's owner to be the new Node",
        Duration::from_secs(15),
        || {
            let l: Lease = api.get("kube-node-lease", NODE).ok()??;
            (l.metadata.owner_references?[0].uid == new_uid).then_some(())
        },
    )
    .await;
}

/// The requests oxlet made about its own Node (`/api/v1/nodes/<name>` and below)
/// among `log`, and the index of the POST that registered it again (None: not yet).
fn node_requests(log: &[testapi::RequestRecord]) -> (usize, Option<usize>) {
    let own = format!("/api/v1/nodes/{NODE}");
    let about = log.iter().filter(|r| r.path.starts_with(&own)).count();
    let post = log
        .iter()
        .position(|r| r.method == "POST" && r.path == "/api/v1/nodes");
    (about, post)
}

/// A Node deleted 0.1 s, 1 s and 60 s after it was registered is registered again
/// each time, and meanwhile oxlet asks about it no faster than kubelet would: a GET
/// (up to 5 on errors) and a PATCH per status period (10 s here, the default); the
/// fast first status polls what oxlet knows, not the apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_at_any_moment_is_registered_again_without_hammering() {
    let bed = Testbed::start().await;
    let api = TestApiServer::start(&bed.base_dir().join("apiserver"))
        .await
        .unwrap();
    let kubeconfig = format!("--kubeconfig={}", api.kubeconfig().display());
    let ox = Oxlet::start(&bed, &[kubeconfig.as_str()]);
    let registered = || {
        let n: Node = api.get("", NODE).ok()??;
        n.metadata.uid
    };
    let mut uid = ox
        .poll("the node to be registered", Duration::from_secs(30), || {
            registered()
        })
        .await;
    for after in [
        Duration::from_millis(100),
        Duration::from_secs(1),
        Duration::from_secs(60),
    ] {
        tokio::time::sleep(after).await;
        let from = api.requests().len();
        let deleted = Instant::now();
        assert!(api.remove::<Node>("", NODE).unwrap());
        let again = ox
            .poll(
                "the node to be registered again",
                Duration::from_secs(25),
                || registered().filter(|u| *u != uid),
            )
            .await;
        let took = deleted.elapsed();
        let log = api.requests();
        let (_, post) = node_requests(&log[from..]);
        let post = post.expect("the registering POST");
        let (about, _) = node_requests(&log[from..from + post]);
        // kubelet's bound: 5 GETs and a PATCH per 10 s period begun, and one more.
        let periods = took.as_secs() / 10 + 1;
        assert!(
            about as u64 <= 6 * periods + 1,
            "deleted {after:?} after registering: {about} requests about the Node in {took:?}"
        );
        eprintln!(
            "deleted {after:?} after registering: registered again in {took:?}, {about} requests between"
        );
        uid = again;
    }
    let warned = ox
        .log()
        .matches("the Node object was deleted; registering it again")
        .count();
    assert_eq!(warned, 3, "one warning per deletion");
}

/// Whether containerd says its network is ready (CRI `Status`, `NetworkReady`).
async fn network_ready(bed: &Testbed) -> bool {
    let status = bed.runtime_status().await;
    (status.status.iter().flat_map(|s| &s.conditions))
        .any(|c| c.r#type == "NetworkReady" && c.status)
}

/// kubelet's network readiness: while the runtime says its network is not ready (no CNI
/// config yet, as on a kind node before its CNI is installed), the node is NotReady
/// with kubelet's message, a pod off the host network waits (kubelet's "network is not
/// ready" error and NetworkNotReady event) while a host-network pod runs, and a Node
/// deleted meanwhile is registered again within a status period with no more requests
/// than kubelet's. Once the CNI config is back the node turns Ready at once (the fast
/// status sends it) and the waiting pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_the_runtime_network_is_ready_the_node_is_not_ready_and_pods_wait() {
    let bed = Testbed::start().await;
    let conf_dir = bed.layout().cni_conf_dir.clone();
    let mut saved = Vec::new();
    for e in std::fs::read_dir(&conf_dir).unwrap().flatten() {
        saved.push((e.path(), std::fs::read(e.path()).unwrap()));
        std::fs::remove_file(e.path()).unwrap();
    }
    let t = Instant::now();
    while network_ready(&bed).await {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "containerd still says NetworkReady"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let api = TestApiServer::start(&bed.base_dir().join("apiserver"))
        .await
        .unwrap();
    let kubeconfig = format!("--kubeconfig={}", api.kubeconfig().display());
    let ox = Oxlet::start(&bed, &[kubeconfig.as_str()]);
    write_manifest(
        &ox.manifests,
        "net.yaml",
        &pod_yaml("net", "sleep 3600", ""),
    );
    write_manifest(
        &ox.manifests,
        "host.yaml",
        &pod_yaml("host", "sleep 3600", "  hostNetwork: true\n"),
    );
    let not_ready = || {
        let n: Node = api.get("", NODE).ok()??;
        let (status, _) = ready(&n)?;
        let message = n
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "Ready")?
            .message?;
        (status == "False").then_some((n.metadata.uid?, message))
    };
    let (uid, message) = ox
        .poll(
            "the node registered NotReady",
            Duration::from_secs(30),
            not_ready,
        )
        .await;
    assert!(
        message.starts_with("container runtime network not ready: NetworkReady=false reason:"),
        "{message}"
    );
    ox.wait_running("host", Duration::from_secs(30)).await;
    ox.wait_logged(
        "network is not ready: container runtime network not ready",
        1,
        Duration::from_secs(30),
    )
    .await;
    assert!(ox.log().contains("NetworkNotReady"), "the pod's event");
    let pods = ox.pods().await;
    assert!(!is_running(find(&pods, "net").expect("the pod is known")));

    // Deleted while NotReady: registered again within a status period (10 s), asked
    // about no more than kubelet's 5 GETs and a PATCH per period meanwhile.
    let from = api.requests().len();
    let deleted = Instant::now();
    assert!(api.remove::<Node>("", NODE).unwrap());
    ox.poll("the node registered again", Duration::from_secs(25), || {
        not_ready().filter(|(u, _)| *u != uid)
    })
    .await;
    let took = deleted.elapsed();
    let log = api.requests();
    let post = node_requests(&log[from..]).1.expect("the registering POST");
    let (about, _) = node_requests(&log[from..from + post]);
    assert!(
        about as u64 <= 6 * (took.as_secs() / 10 + 1) + 1,
        "{about} requests about the Node in {took:?}"
    );

    // The CNI config is back: Ready within the runtime check's 5 s and a poll.
    for (path, body) in &saved {
        std::fs::write(path, body).unwrap();
    }
    let back = Instant::now();
    ox.poll("the node Ready", Duration::from_secs(20), || {
        let n: Node = api.get("", NODE).ok()??;
        (ready(&n)?.0 == "True").then_some(())
    })
    .await;
    assert!(
        back.elapsed() < Duration::from_secs(9),
        "Ready after {:?}",
        back.elapsed()
    );
    ox.wait_running("net", Duration::from_secs(40)).await;
}

/// kind's dual-stack flags (`--node-ip=<v4>,<v6>`): the Node lists both InternalIPs,
/// primary first, then its host name; pods' `hostIPs` have both (`hostIP` the
/// primary), a host-network pod's `podIPs` too, and the downward API's
/// `status.hostIPs` is the pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_node_ip_gives_the_node_and_pods_both_families() {
    let bed = Testbed::start().await;
    let api = TestApiServer::start(&bed.base_dir().join("apiserver"))
        .await
        .unwrap();
    let kubeconfig = format!("--kubeconfig={}", api.kubeconfig().display());
    let ox = Oxlet::start(
        &bed,
        &[
            kubeconfig.as_str(),
            "--node-ip=172.18.0.2,fc00:f853:ccd:e793::2",
        ],
    );
    let report = "echo ips=$HOST_IPS; sleep 3600";
    let env = "    env:\n    - name: HOST_IPS\n      valueFrom: {fieldRef: {fieldPath: status.hostIPs}}\n";
    write_manifest(
        &ox.manifests,
        "net.yaml",
        &format!("{}{env}", pod_yaml("net", report, "")),
    );
    write_manifest(
        &ox.manifests,
        "host.yaml",
        &pod_yaml("host", "sleep 3600", "  hostNetwork: true\n"),
    );
    let addresses = ox
        .poll("the node's addresses", Duration::from_secs(30), || {
            let n: Node = api.get("", NODE).ok()??;
            let list = n.status?.addresses?;
            Some(
                list.into_iter()
                    .map(|a| (a.type_, a.address))
                    .collect::<Vec<_>>(),
            )
        })
        .await;
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        addresses,
        [
            pair("InternalIP", "172.18.0.2"),
            pair("InternalIP", "fc00:f853:ccd:e793::2"),
            pair("Hostname", NODE),
        ]
    );
    let both = ["172.18.0.2", "fc00:f853:ccd:e793::2"];
    let net = ox.wait_running("net", Duration::from_secs(30)).await;
    let host = ox.wait_running("host", Duration::from_secs(30)).await;
    for p in [&net, &host] {
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.host_ip.as_deref(), Some(both[0]));
        let host_ips: Vec<&str> = (status.host_ips.iter().flatten())
            .map(|h| h.ip.as_str())
            .collect();
        assert_eq!(host_ips, both);
    }
    let pod_ips: Vec<&str> = (host.status.as_ref().unwrap().pod_ips.iter().flatten())
        .map(|p| p.ip.as_str())
        .collect();
    assert_eq!(pod_ips, both, "a host-network pod has the node's addresses");
    let log = ox.main_log_once(&net, "ips=").await;
    assert!(
        log.contains("ips=172.18.0.2,fc00:f853:ccd:e793::2"),
        "{log}"
    );
}

/// The Ready condition's last heartbeat: when a status was last sent.
fn heartbeat(n: &Node) -> Option<jiff::Timestamp> {
    let status = n.status.as_ref()?;
    let ready = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    Some(ready.last_heartbeat_time.as_ref()?.0)
}

/// Lines of oxlet's log handing `cidr` to the runtime.
fn pod_cidr_updates(log: &str, cidr: &str) -> usize {
    log.lines()
        .filter(|l| {
            l.contains("Updating Pod CIDR") && l.contains(&format!("newPodCIDR=\"{cidr}\""))
        })
        .count()
}

/// kubelet's `updatePodCIDR`: `--pod-cidr` goes to the runtime at start; the Node's
/// `spec.podCIDRs`, once the node IPAM controller sets them, replace it; each change is
/// sent once, however many periods see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_pod_cidrs_are_handed_to_the_runtime_once_per_change() {
    let (_bed, api, ox) = node_with_a_status_every_second(&["--pod-cidr=10.244.9.0/24"]).await;
    ox.wait_logged("newPodCIDR=\"10.244.9.0/24\"", 1, Duration::from_secs(30))
        .await;
    let mut node = ox
        .poll("the node to be Ready", Duration::from_secs(30), || {
            let n: Node = api.get("", NODE).ok()??;
            (ready(&n)?.0 == "True").then_some(n)
        })
        .await;

    // The controller assigns one range, then (dual-stack) two.
    for (cidrs, joined, original) in [
        (vec!["10.244.3.0/24"], "10.244.3.0/24", "10.244.9.0/24"),
        (
            vec!["10.244.4.0/24", "fd00:10:244:4::/64"],
            "10.244.4.0/24,fd00:10:244:4::/64",
            "10.244.3.0/24",
        ),
    ] {
        let sent_before = heartbeat(&node);
        let spec = node.spec.get_or_insert_with(Default::default);
        spec.pod_cidr = Some(cidrs[0].to_string());
        spec.pod_cidrs = Some(cidrs.iter().map(ToString::to_string).collect());
        api.put(&node).unwrap();
        let new = format!("newPodCIDR=\"{joined}\"");
        ox.wait_logged(&new, 1, Duration::from_secs(15)).await;
        let log = ox.log();
        let line = log.lines().find(|l| l.contains(&new)).unwrap();
        assert!(
            line.contains(&format!("originalPodCIDR=\"{original}\"")),
            "{line}"
        );
        // A changed CIDR sends the status at once (kubelet's podCIDRChanged), though
        // the 5 min report period is far off.
        node = ox
            .poll(
                "a status sent for the new CIDR",
                Duration::from_secs(5),
                || {
                    let n: Node = api.get("", NODE).ok()??;
                    (heartbeat(&n) > sent_before).then_some(n)
                },
            )
            .await;
        // Three more periods see the same CIDRs: nothing more is sent.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(pod_cidr_updates(&ox.log(), joined), 1, "{}", ox.log());
    }
    assert_eq!(pod_cidr_updates(&ox.log(), "10.244.9.0/24"), 1);
}

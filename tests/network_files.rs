//! What a container sees of the network set-up, on a real containerd: sysctls
//! (the safe ones set inside, the rest refused at admission with `SysctlForbidden`),
//! `/etc/resolv.conf` for each DNS policy, `/etc/hosts` as kubelet writes it (and the
//! node's file for host-network pods), `hostAliases`, and the pod's host name.

mod agent;
mod common;

use std::path::Path;
use std::time::Duration;

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

const START: Duration = Duration::from_secs(30);

/// A pod whose one container sleeps, with `spec` lines added (indented by two).
fn sleeper(name: &str, spec: &str) -> String {
    pod_yaml(name, "sleep 3600", spec)
}

/// Runs `cmd` in the pod's running container; its stdout.
async fn exec(bed: &Testbed, pod: &Pod, cmd: &[&str]) -> String {
    let id = cri_containers(bed, &uid(pod))
        .await
        .into_iter()
        .find(|c| c.state == RUNNING)
        .expect("a running container")
        .id;
    let r = bed
        .cri()
        .await
        .exec_sync(cri::ExecSyncRequest {
            container_id: id,
            cmd: cmd.iter().map(ToString::to_string).collect(),
            timeout: 5,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.exit_code,
        0,
        "{cmd:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    String::from_utf8(r.stdout).unwrap()
}

async fn cat(bed: &Testbed, pod: &Pod, file: &str) -> String {
    exec(bed, pod, &["cat", file]).await
}

fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod IP")
}

/// kubelet's managed hosts file for one pod IP, without hostAliases.
fn managed_hosts(ip: &str, names: &str) -> String {
    format!(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
         {ip}\t{names}\n"
    )
}

const ALIASES: &str = "  hostAliases:\n  - ip: 10.1.2.3\n    hostnames: [foo.local, bar.local]\n  - ip: 10.1.2.4\n    hostnames: [baz.local]\n";
const ALIAS_LINES: &str =
    "\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n10.1.2.4\tbaz.local\n";

/// A resolv.conf for `--resolv-conf`, so what the pods get does not depend on the host.
fn host_resolv_conf(dir: &Path) -> String {
    let path = dir.join("host-resolv.conf");
    std::fs::write(
        &path,
        "# test host\nnameserver 10.0.0.2\nsearch corp.example\noptions edns0\n",
    )
    .unwrap();
    format!("--resolv-conf={}", path.display())
}

const HOST_RESOLV: &str = "search corp.example\nnameserver 10.0.0.2\noptions edns0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_sysctls_are_forbidden_and_allowed_ones_are_set_inside() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &["--allowed-unsafe-sysctls=kernel.msg*"]);
    let sysctls = |list: &str| format!("  securityContext:\n    sysctls:\n{list}");
    write_manifest(
        &ox.manifests,
        "safe.yaml",
        &sleeper(
            "safe",
            &sysctls(
                "    - {name: kernel.shm_rmid_forced, value: \"1\"}\n    - {name: net/ipv4/ip_unprivileged_port_start, value: \"2000\"}\n    - {name: kernel.msgmax, value: \"65536\"}\n",
            ),
        ),
    );
    write_manifest(
        &ox.manifests,
        "unsafe.yaml",
        &sleeper(
            "unsafe",
            &sysctls("    - {name: net.core.somaxconn, value: \"1024\"}\n"),
        ),
    );
    write_manifest(
        &ox.manifests,
        "hostnet.yaml",
        &sleeper(
            "hostnet",
            &format!(
                "  hostNetwork: true\n{}",
                sysctls("    - {name: net.ipv4.ip_unprivileged_port_start, value: \"2000\"}\n")
            ),
        ),
    );
    let rejected = |name: &'static str| {
        move |pods: &[Pod]| {
            find(pods, name)
                .filter(|p| phase(p) == "Failed")
                .and_then(|p| p.status.clone())
        }
    };
    let st = ox
        .wait_for("unsafe rejected", START, rejected("unsafe"))
        .await;
    assert_eq!(st.reason.as_deref(), Some("SysctlForbidden"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: forbidden sysctl: \"net.core.somaxconn\" not allowlisted")
    );
    let st = ox
        .wait_for("hostnet rejected", START, rejected("hostnet"))
        .await;
    assert_eq!(st.reason.as_deref(), Some("SysctlForbidden"));
    assert_eq!(
        st.message.as_deref(),
        Some(
            "Pod was rejected: forbidden sysctl: \"net.ipv4.ip_unprivileged_port_start\" not allowed with host net enabled"
        )
    );
    let safe = ox.wait_running("safe", START).await;
    for (file, want) in [
        ("/proc/sys/kernel/shm_rmid_forced", "1"),
        ("/proc/sys/net/ipv4/ip_unprivileged_port_start", "2000"),
        ("/proc/sys/kernel/msgmax", "65536"),
    ] {
        assert_eq!(cat(&bed, &safe, file).await.trim(), want, "{file}");
    }
    // Nothing of the rejected pods reached the runtime.
    let pods = ox.pods().await;
    for name in ["unsafe", "hostnet"] {
        let p = find(&pods, name).unwrap();
        assert!(cri_sandboxes(&bed, &uid(p)).await.is_empty(), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolv_conf_hosts_and_hostname_follow_each_dns_policy() {
    let bed = Testbed::start().await;
    let resolv = host_resolv_conf(bed.base_dir());
    let ox = Oxlet::start(
        &bed,
        &[
            "--cluster-dns=10.96.0.10",
            "--cluster-domain=cluster.local",
            &resolv,
        ],
    );
    let m = &ox.manifests;
    write_manifest(
        m,
        "cf.yaml",
        &sleeper(
            "cf",
            &format!("  hostname: web-0\n  subdomain: web\n{ALIASES}"),
        ),
    );
    write_manifest(m, "def.yaml", &sleeper("def", "  dnsPolicy: Default\n"));
    write_manifest(
        m,
        "none.yaml",
        &sleeper(
            "none",
            "  dnsPolicy: None\n  dnsConfig:\n    nameservers: [1.2.3.4]\n    searches: [ns1.svc.cluster-domain.example, my.dns.search.suffix]\n    options:\n    - {name: ndots, value: \"2\"}\n    - {name: edns0}\n",
        ),
    );
    write_manifest(
        m,
        "hn.yaml",
        &sleeper("hn", &format!("  hostNetwork: true\n{ALIASES}")),
    );
    write_manifest(
        m,
        "hnc.yaml",
        &sleeper(
            "hnc",
            "  hostNetwork: true\n  dnsPolicy: ClusterFirstWithHostNet\n",
        ),
    );

    // ClusterFirst: cluster DNS, the cluster's search paths then the host's, ndots:5;
    // /etc/hosts with the pod IP under its FQDN; the hostname from spec.hostname.
    let cf = ox.wait_running("cf", START).await;
    let cluster_resolv = "search default.svc.cluster.local svc.cluster.local cluster.local corp.example\nnameserver 10.96.0.10\noptions ndots:5\n";
    assert_eq!(cat(&bed, &cf, "/etc/resolv.conf").await, cluster_resolv);
    let ip = pod_ip(&cf);
    assert_eq!(
        cat(&bed, &cf, "/etc/hosts").await,
        managed_hosts(&ip, "web-0.web.default.svc.cluster.local\tweb-0") + ALIAS_LINES
    );
    assert_eq!(exec(&bed, &cf, &["hostname"]).await.trim(), "web-0");
    assert_eq!(cat(&bed, &cf, "/etc/hostname").await.trim(), "web-0");
    // The file lives in the pod directory.
    let on_disk = ox.root.join("pods").join(uid(&cf)).join("etc-hosts");
    assert_eq!(
        std::fs::read_to_string(&on_disk).unwrap(),
        cat(&bed, &cf, "/etc/hosts").await
    );

    // Default: the host's settings; the hostname is the pod's name.
    let def = ox.wait_running("def", START).await;
    assert_eq!(cat(&bed, &def, "/etc/resolv.conf").await, HOST_RESOLV);
    let name = def.metadata.name.clone().unwrap();
    assert_eq!(
        cat(&bed, &def, "/etc/hosts").await,
        managed_hosts(&pod_ip(&def), &name)
    );
    assert_eq!(exec(&bed, &def, &["hostname"]).await.trim(), name);

    // None: only dnsConfig.
    let none = ox.wait_running("none", START).await;
    assert_eq!(
        cat(&bed, &none, "/etc/resolv.conf").await,
        "search ns1.svc.cluster-domain.example my.dns.search.suffix\nnameserver 1.2.3.4\noptions ndots:2 edns0\n"
    );

    // Host network: ClusterFirst becomes Default; the node's hosts file and name.
    let hn = ox.wait_running("hn", START).await;
    assert_eq!(cat(&bed, &hn, "/etc/resolv.conf").await, HOST_RESOLV);
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    assert_eq!(
        cat(&bed, &hn, "/etc/hosts").await,
        format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}{ALIAS_LINES}")
    );
    let node_name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        exec(&bed, &hn, &["hostname"]).await.trim(),
        node_name.trim()
    );
    // ClusterFirstWithHostNet keeps cluster DNS on the host network.
    let hnc = ox.wait_running("hnc", START).await;
    assert_eq!(cat(&bed, &hnc, "/etc/resolv.conf").await, cluster_resolv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_first_without_cluster_dns_falls_back_to_default_with_a_warning() {
    let bed = Testbed::start().await;
    let resolv = host_resolv_conf(bed.base_dir());
    let ox = Oxlet::start(&bed, &[&resolv]);
    write_manifest(&ox.manifests, "cf.yaml", &sleeper("cf", ""));
    // A container that mounts its own /etc/hosts keeps it.
    let own = bed.base_dir().join("own-hosts");
    std::fs::write(&own, "10.9.9.9\town\n").unwrap();
    write_manifest(
        &ox.manifests,
        "own.yaml",
        &format!(
            "{}    volumeMounts:\n    - {{name: h, mountPath: /etc/hosts}}\n  volumes:\n  - name: h\n    hostPath: {{path: {}, type: File}}\n",
            sleeper("own", ""),
            own.display()
        ),
    );
    // dnsPolicy None without a nameserver never gets a sandbox; the log names the field.
    write_manifest(
        &ox.manifests,
        "bad.yaml",
        &sleeper("bad", "  dnsPolicy: None\n"),
    );
    let cf = ox.wait_running("cf", START).await;
    let own_pod = ox.wait_running("own", START).await;
    assert_eq!(cat(&bed, &own_pod, "/etc/hosts").await, "10.9.9.9\town\n");
    assert_eq!(cat(&bed, &cf, "/etc/resolv.conf").await, HOST_RESOLV);
    let log = ox.log();
    assert!(
        log.contains("MissingClusterDNS")
            && log.contains(
                "kubelet does not have ClusterDNS IP configured and cannot create Pod using"
            ),
        "{}",
        tail(&log, 40)
    );
    let pods = ox.pods().await;
    let bad = find(&pods, "bad").expect("bad pod listed");
    assert!(cri_sandboxes(&bed, &uid(bad)).await.is_empty());
    assert!(
        log.contains("spec.dnsConfig.nameservers: must provide at least one DNS nameserver when dnsPolicy is set to None"),
        "{}",
        tail(&log, 40)
    );
    eprintln!(
        "bad pod status: {}",
        serde_json::to_string(&bad.status).unwrap()
    );
    // No cluster domain: the managed hosts file has the short name only.
    let name = cf.metadata.name.clone().unwrap();
    assert_eq!(
        cat(&bed, &cf, "/etc/hosts").await,
        managed_hosts(&pod_ip(&cf), &name)
    );
}

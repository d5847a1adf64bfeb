//! Kind's exact kubelet configuration. The command line is put together the
//! way systemd does it on a kind node (the drop-in's `ExecStart` with the variables of
//! its `Environment=` lines and of `kubeadm-flags.env`), and oxlet is run with it, with
//! the files it names (`tests/data/kind/`). Only the host paths are moved into a
//! temporary directory, and the runtime socket points at nothing, so oxlet stops at
//! the runtime: after the options, the config file and the kubeconfig were read.

mod agent;
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kind");

/// The data file standing for a node path the drop-in names.
fn data_file(node_path: &str) -> &'static str {
    match node_path {
        "/var/lib/kubelet/kubeadm-flags.env" => "kubeadm-flags.env",
        "/etc/default/kubelet" => "default-kubelet",
        other => panic!("the drop-in names {other}, which tests/data/kind lacks"),
    }
}

/// `KEY=VALUE` pairs of the drop-in's `Environment="..."` lines and of its
/// `EnvironmentFile=` files, in the drop-in's order.
fn environment() -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let dropin = std::fs::read_to_string(format!("{DATA}/10-kubeadm.conf")).unwrap();
    for line in dropin.lines() {
        if let Some(rest) = line.strip_prefix("Environment=") {
            let (k, v) = rest.trim_matches('"').split_once('=').unwrap();
            env.insert(k.to_string(), v.to_string());
        } else if let Some(file) = line.strip_prefix("EnvironmentFile=") {
            // `-`: optional, as both of kind's are.
            let file = data_file(file.trim_start_matches('-'));
            let text = std::fs::read_to_string(format!("{DATA}/{file}")).unwrap();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let (k, v) = line.split_once('=').unwrap();
                env.insert(k.to_string(), v.trim_matches('"').to_string());
            }
        }
    }
    env
}

/// The arguments of the drop-in's last `ExecStart=`, variables expanded as systemd
/// does for `$VAR` (split on whitespace; unset is empty).
fn kind_args() -> Vec<String> {
    let env = environment();
    let dropin = std::fs::read_to_string(format!("{DATA}/10-kubeadm.conf")).unwrap();
    let exec = dropin
        .lines()
        .filter_map(|l| l.strip_prefix("ExecStart="))
        .next_back()
        .unwrap();
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/bin/kubelet"));
    words
        .flat_map(|w| match w.strip_prefix('$') {
            Some(var) => env
                .get(var)
                .map(|v| v.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
            None => vec![w.to_string()],
        })
        .collect()
}

/// kind's kubelet.conf with a CA and a kubelet-client-current.pem made here.
fn write_kubeconfig(dir: &Path) -> std::path::PathBuf {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "system:node:kind-control-plane");
    let cert = params.signed_by(&key, &issuer).unwrap();
    let pem = dir.join("kubelet-client-current.pem");
    std::fs::write(&pem, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
    let text = std::fs::read_to_string(format!("{DATA}/kubelet.conf"))
        .unwrap()
        .replace(
            "CA_DATA",
            &base64::engine::general_purpose::STANDARD.encode(ca_cert.pem()),
        )
        .replace(
            "/var/lib/kubelet/pki/kubelet-client-current.pem",
            &pem.display().to_string(),
        );
    let path = dir.join("kubelet.conf");
    std::fs::write(&path, text).unwrap();
    path
}

/// kind's config.yaml with its runtime endpoint pointing at `endpoint`, written in `dir`.
fn write_config(dir: &Path, endpoint: &str) -> std::path::PathBuf {
    let kind = std::fs::read_to_string(format!("{DATA}/config.yaml")).unwrap();
    let line = "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n";
    assert!(kind.contains(line), "{kind}");
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        kind.replace(line, &format!("containerRuntimeEndpoint: {endpoint}\n")),
    )
    .unwrap();
    path
}

/// Runs oxlet with kind's arguments, host paths moved under `dir` and the config file's
/// runtime endpoint pointing at nothing; exit code and stderr.
fn run_kind(dir: &Path, kubeconfig: &Path) -> (i32, String) {
    let sock = dir.join("none.sock");
    let config = write_config(dir, &format!("unix://{}", sock.display()));
    let args: Vec<String> = kind_args()
        .into_iter()
        .map(|a| match a.split_once('=') {
            Some(("--kubeconfig", _)) => format!("--kubeconfig={}", kubeconfig.display()),
            Some(("--config", _)) => format!("--config={}", config.display()),
            _ => a,
        })
        // The test's own: state under the temporary directory, a short runtime wait.
        .chain([
            format!("--root-dir={}", dir.join("root").display()),
            "--runtime-request-timeout=2s".to_string(),
        ])
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_oxlet"))
        .args(&args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kinds_flags_config_and_kubeconfig_are_accepted() {
    let args = kind_args();
    assert_eq!(
        args,
        [
            "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--config=/var/lib/kubelet/config.yaml",
            "--node-ip=172.18.0.2",
            "--node-labels=",
            "--provider-id=kind://docker/kind/kind-control-plane",
            "--runtime-cgroups=/system.slice/containerd.service",
        ]
    );
    // kubeadm merged the instance config's endpoint into config.yaml.
    let instance = std::fs::read_to_string(format!("{DATA}/instance-config.yaml")).unwrap();
    let config = std::fs::read_to_string(format!("{DATA}/config.yaml")).unwrap();
    let endpoint = instance
        .trim()
        .strip_prefix("containerRuntimeEndpoint: ")
        .unwrap()
        .trim_matches('"');
    assert!(
        config.contains(&format!("containerRuntimeEndpoint: {endpoint}\n")),
        "{config}"
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(dir.path());
    let (code, err) = run_kind(dir.path(), &kubeconfig);

    // It got past the options and the kubeconfig (the bootstrap kubeconfig, which
    // `kubeadm init` never writes, is not needed while kubelet.conf is valid), and
    // stopped at the missing runtime the config file names.
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("none.sock"), "{err}");
    assert!(
        err.contains(&format!(
            "apiserver clients built from {}",
            kubeconfig.display()
        )),
        "{err}"
    );
    // Every setting oxlet lacks is named once, flags first, in order.
    let unimplemented: Vec<&str> = err
        .lines()
        .filter_map(|l| {
            // klog's warning: `W… file.rs:N] "<what> is accepted …"`.
            l.starts_with('W')
                .then_some(l.split_once("] \"")?.1)?
                .strip_suffix(" is accepted but not implemented by oxlet yet; ignoring it\"")
        })
        .map(|s| s.rsplit(": ").next().unwrap_or(s))
        .collect();
    // None: every flag and field of kind v0.32's node is read. (This list only shrinks.)
    assert_eq!(unimplemented, Vec::<&str>::new(), "{err}");
    assert!(!err.contains("unknown config field"), "{err}");
}

/// kind's kubeconfig with its client certificate file gone: a warning naming the
/// kubeconfig, the field and the missing file, then (kind passes
/// --bootstrap-kubeconfig) one error naming the missing bootstrap kubeconfig, before
/// anything starts.
#[test]
fn kinds_kubeconfig_with_missing_client_pem_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(dir.path());
    let pem = dir.path().join("kubelet-client-current.pem");
    std::fs::remove_file(&pem).unwrap();
    let (code, err) = run_kind(dir.path(), &kubeconfig);
    assert_eq!(code, 1, "{err}");
    let want = format!(
        "kubeconfig {}: field users[system:node:kind-control-plane].user.client-certificate: {}: cannot read: No such file or directory",
        kubeconfig.display(),
        pem.display()
    );
    // kind passes --bootstrap-kubeconfig: as kubelet, oxlet then bootstraps a new
    // certificate, and the missing bootstrap file is the error.
    assert!(err.contains(&format!("] \"the kubeconfig cannot be used; bootstrapping a new client certificate\" err=\"{want}")), "want {want}\n{err}");
    assert!(
        err.contains("\"command failed\" err=\"cannot bootstrap a client certificate: kubeconfig /etc/kubernetes/bootstrap-kubelet.conf: cannot read: No such file or directory"),
        "{err}"
    );
    assert!(!err.contains("none.sock"), "{err}");
}

/// With kind's config file, kubeconfig and flags, on a real containerd: refused on this
/// cgroup v1 host, as kubelet 1.36 refuses it (`failCgroupV1` defaults to true); with
/// that one setting turned off, oxlet runs a static pod as it does standalone. Only what
/// this test machine differs in is overridden by later flags: its containerd uses the
/// cgroupfs driver (kind's use systemd), the test bed's own socket, directories, ports
/// and cgroup root, and the runtime's cgroup (kind's `/system.slice/containerd.service`
/// is a cgroup the test bed's containerd is moved into here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_settings_run_a_static_pod_on_containerd() {
    let bed = common::Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(dir.path());
    let config = write_config(dir.path(), &bed.endpoint());
    let kind = |a: String| match a.split_once('=') {
        Some(("--kubeconfig", _)) => format!("--kubeconfig={}", kubeconfig.display()),
        Some(("--config", _)) => format!("--config={}", config.display()),
        _ => a,
    };

    // As kind runs it: refused, naming the setting.
    let refused = Command::new(env!("CARGO_BIN_EXE_oxlet"))
        .args(kind_args().into_iter().map(kind))
        .args([
            format!("--root-dir={}", dir.path().join("root").display()),
            "--cgroup-driver=cgroupfs".to_string(),
            "--read-only-port=0".to_string(),
            "--port=0".to_string(),
            "--healthz-port=0".to_string(),
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "configured not to run on a host using cgroup v1 (--fail-cgroupv1 / failCgroupV1)"
        ),
        "{err}"
    );

    let (_runtime_dir, runtime_cgroup) = common::own_test_cgroup("oxlet-runtime-");
    let runtime_cgroup = runtime_cgroup.trim_start_matches('/').to_string();
    common::move_into_cgroup(&runtime_cgroup, bed.containerd_pid());
    let args: Vec<String> = kind_args()
        .into_iter()
        .map(kind)
        .chain([
            "--cgroup-driver=cgroupfs".to_string(),
            format!("--runtime-cgroups=/{runtime_cgroup}"),
        ])
        .collect();
    let extra: Vec<&str> = args.iter().map(String::as_str).collect();
    let ox = agent::Oxlet::start(&bed, &extra);
    agent::write_manifest(
        &ox.manifests,
        "web.yaml",
        &agent::pod_yaml("web", "sleep 3600", "  hostNetwork: true\n"),
    );
    ox.wait_running("web", Duration::from_secs(30)).await;
    let log = ox.log();
    assert!(
        log.contains(&format!(
            "apiserver clients built from {}",
            kubeconfig.display()
        )),
        "{}",
        agent::tail(&log, 40)
    );
    assert!(
        !log.contains("unknown config field"),
        "{}",
        agent::tail(&log, 40)
    );

    // The runtime's system container, measured from its cgroup.
    let runtime = ox
        .wait_for_json("/stats/summary", Duration::from_secs(20), |summary| {
            summary["node"]["systemContainers"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == "runtime")
                .filter(|c| c["memory"]["usageBytes"].as_u64().is_some_and(|b| b > 0))
                .cloned()
        })
        .await;
    assert!(runtime["startTime"].is_string(), "{runtime}");
    assert!(
        runtime["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{runtime}"
    );
    drop(ox);
    drop(bed);
    common::remove_cgroup_tree(&runtime_cgroup);
}

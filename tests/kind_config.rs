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

/// `KEY=VALUE` pairs of the drop-in's `Environment="..."` lines and of the env file.
fn environment() -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let dropin = std::fs::read_to_string(format!("{DATA}/10-kubeadm.conf")).unwrap();
    for line in dropin.lines() {
        if let Some(rest) = line.strip_prefix("Environment=") {
            let (k, v) = rest.trim_matches('"').split_once('=').unwrap();
            env.insert(k.to_string(), v.to_string());
        }
    }
    let flags = std::fs::read_to_string(format!("{DATA}/kubeadm-flags.env")).unwrap();
    for line in flags.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line.split_once('=').unwrap();
        env.insert(k.to_string(), v.trim_matches('"').to_string());
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

/// Runs oxlet with kind's arguments, host paths moved under `dir`; exit code and stderr.
fn run_kind(dir: &Path, kubeconfig: &Path) -> (i32, String) {
    let sock = dir.join("none.sock");
    let args: Vec<String> = kind_args()
        .into_iter()
        .map(|a| match a.split_once('=') {
            Some(("--kubeconfig", _)) => format!("--kubeconfig={}", kubeconfig.display()),
            Some(("--config", _)) => format!("--config={DATA}/config.yaml"),
            Some(("--container-runtime-endpoint", _)) => {
                format!("--container-runtime-endpoint=unix://{}", sock.display())
            }
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
            "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
            "--node-ip=172.18.0.2",
            "--node-labels=",
            "--pod-infra-container-image=registry.k8s.io/pause:3.10",
            "--provider-id=kind://docker/kind/kind-control-plane",
            "--fail-swap-on=false",
            "--cgroup-root=/kubelet",
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(dir.path());
    let (code, err) = run_kind(dir.path(), &kubeconfig);

    // It got past the options and the kubeconfig, and stopped at the missing runtime.
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
            l.split_once("WARN ")?
                .1
                .strip_suffix(" is accepted but not implemented by oxlet yet; ignoring it")
        })
        .map(|s| s.rsplit(": ").next().unwrap_or(s))
        .collect();
    assert_eq!(
        unimplemented,
        ["flag --pod-infra-container-image", "flag --fail-swap-on",],
        "{err}"
    );
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
    assert!(err.contains(&format!("WARN the kubeconfig cannot be used; bootstrapping a new client certificate error={want}")), "want {want}\n{err}");
    assert!(
        err.contains("oxlet: error: cannot bootstrap a client certificate: kubeconfig /etc/kubernetes/bootstrap-kubelet.conf: cannot read: No such file or directory"),
        "{err}"
    );
    assert!(!err.contains("none.sock"), "{err}");
}

/// With kind's config file, kubeconfig and flags, on a real containerd, oxlet runs a
/// static pod as it does standalone. Only what this test machine differs in is
/// overridden by later flags: its containerd uses the cgroupfs driver (kind's use
/// systemd), and the test bed's own socket, directories, ports and cgroup root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kind_settings_run_a_static_pod_on_containerd() {
    let bed = common::Testbed::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(dir.path());
    let kind: Vec<String> = kind_args()
        .into_iter()
        .filter_map(|a| match a.split_once('=') {
            Some(("--kubeconfig", _)) => Some(format!("--kubeconfig={}", kubeconfig.display())),
            Some(("--config", _)) => Some(format!("--config={DATA}/config.yaml")),
            // The bed's socket and the test's cgroup root (set by the harness) stay.
            Some(("--container-runtime-endpoint" | "--cgroup-root", _)) => None,
            _ => Some(a),
        })
        .chain(["--cgroup-driver=cgroupfs".to_string()])
        .collect();
    let extra: Vec<&str> = kind.iter().map(String::as_str).collect();
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
}

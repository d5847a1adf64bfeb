//! The command line as a user meets it: bad values stop oxlet before anything starts,
//! with one clear line and exit code 1.

use std::process::Command;

fn oxlet(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oxlet"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn out_of_range_port_is_rejected() {
    let (code, err) = oxlet(&["--read-only-port=99999"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--read-only-port") && err.contains("99999"),
        "{err}"
    );
}

#[test]
fn unknown_flag_is_rejected_and_kubelet_flag_is_accepted() {
    let (code, err) = oxlet(&["--no-such-flag"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no-such-flag"), "{err}");
    // A kubelet flag oxlet does not implement passes parsing; the bad port still fails
    // validation, which proves parsing went on.
    let (code, err) = oxlet(&["--fail-swap-on=false", "--healthz-port=70000"]);
    assert_eq!(code, 1);
    assert!(err.contains("--healthz-port"), "{err}");
    assert!(!err.contains("fail-swap-on"), "{err}");
}

#[test]
fn config_file_of_the_wrong_kind_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "apiVersion: v1\nkind: Pod\n").unwrap();
    let (code, err) = oxlet(&[&format!("--config={}", path.display())]);
    assert_eq!(code, 1);
    assert!(
        err.contains("config.yaml") && err.contains("KubeletConfiguration"),
        "{err}"
    );
    std::fs::write(
        &path,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfileCheckFrequency: -1s\n",
    )
    .unwrap();
    let (code, err) = oxlet(&[&format!("--config={}", path.display())]);
    assert_eq!(code, 1);
    assert!(
        err.contains("fileCheckFrequency") && err.contains("-1s"),
        "{err}"
    );
}

#[test]
fn explicit_endpoint_that_does_not_answer_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let (code, err) = oxlet(&[
        &format!("--container-runtime-endpoint=unix://{}", sock.display()),
        &format!("--root-dir={}", dir.path().display()),
        "--runtime-request-timeout=2s",
        "--read-only-port=0",
        "--healthz-port=0",
        "--port=0",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("none.sock"), "{err}");
}

//! kubelet's node log query on a kind-shaped node, for real: oxlet runs as kind's
//! `kubelet.service` in the guest (systemd 252, journald, containerd 2.x) with the
//! `NodeLogQuery` gate and `enableSystemLogQuery` on, and `/logs/?query=…` on the
//! secure port answers from the guest's journal, as kubelet's does.
//!
//! kind's configuration asks for webhook authentication, which needs an apiserver: the
//! test's own configuration is kind's with anonymous requests and `AlwaysAllow`
//! instead, the secure port bound to the guest's loopback (the guest's network is
//! private anyway). Requests go over ssh with `openssl s_client` (in the image with
//! ca-certificates), as HTTP/1.0, so the whole answer (status, body) is seen.
//!
//! Run: `bash scripts/vm/build-image.sh && cargo test --test vm_node_logs -- --nocapture`.

mod vm;

use std::time::{Duration, Instant};

use vm::Vm;
use vm::kind::{kubelet_log, poll};

/// oxlet instead of the kubelet, in static-pod mode (no kubeconfig), the secure port on
/// loopback, `-v=2` so its decisions are in the journal.
const OXLET_DROPIN: &str = r#"[Service]
Environment="KUBELET_KUBECONFIG_ARGS="
ExecStart=
ExecStart=/mnt/oxlet/oxlet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS --cgroup-driver=systemd --address=127.0.0.1 --read-only-port=0 -v=2
"#;

/// The line oxlet logs at start when the query is on: the journal's own proof.
const START_LINE: &str = "answers node log queries from the journal";
/// A file below the guest's /var/log, and what it holds.
const FILE: &str = "oxlet-query-test.log";
const FILE_TEXT: &str = "a line in a file below /var/log\n";

/// kind's configuration with authentication that works without an apiserver, and the
/// node log query on.
fn config() -> String {
    let kind = vm::kind::kind_config();
    let replace = |text: String, from: &str, to: &str| {
        assert!(text.contains(from), "kind's config.yaml has no {from:?}");
        text.replace(from, to)
    };
    let c = replace(
        kind,
        "  anonymous:\n    enabled: false",
        "  anonymous:\n    enabled: true",
    );
    let c = replace(
        c,
        "    enabled: true\n  x509:\n    clientCAFile: /etc/kubernetes/pki/ca.crt\n",
        "    enabled: false\n",
    );
    let c = replace(c, "  mode: Webhook", "  mode: AlwaysAllow");
    format!("{c}enableSystemLogQuery: true\nfeatureGates:\n  NodeLogQuery: true\n")
}

/// `GET path` on the secure port: the status and the body.
fn get(vm: &Vm, path: &str) -> (u16, String) {
    let out = vm.ssh(&format!(
        "printf '%s\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' 'GET {path} HTTP/1.0' | openssl s_client -quiet -connect 127.0.0.1:10250 2>/dev/null"
    ));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer to GET {path}: {text:?}"));
    eprintln!(
        "vm_node_logs: GET {path} -> {status} ({} bytes)",
        body.len()
    );
    (status, body.to_string())
}

/// The guest's clock as RFC 3339, `offset_secs` from now.
fn guest_time(vm: &Vm, offset_secs: i64) -> String {
    vm.ssh_ok(&format!(
        "date -u -d @$(( $(date +%s) + {offset_secs} )) +%Y-%m-%dT%H:%M:%SZ"
    ))
    .trim()
    .to_string()
}

/// Checks reported together, each PASS or FAIL with what was seen.
#[derive(Default)]
struct Checks(Vec<(String, bool, String)>);

impl Checks {
    fn check(&mut self, what: &str, ok: bool, seen: &str) {
        eprintln!(
            "vm_node_logs: {} {what} seen={seen:?}",
            if ok { "PASS" } else { "FAIL" }
        );
        self.0.push((what.into(), ok, seen.into()));
    }

    fn finish(self) {
        let failed: Vec<String> = (self.0.iter().filter(|(_, ok, _)| !ok))
            .map(|(what, _, seen)| format!("  FAIL {what}: saw {seen:?}"))
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}

/// Journal queries: kubelet's unit with a tail and a pattern, containerd's with a
/// pattern, and a `sinceTime` window on either side of oxlet's start.
fn check_journal(vm: &Vm, c: &mut Checks, before_start: &str) {
    let (status, body) = get(vm, "/logs/?query=kubelet&tailLines=5");
    let lines = body.lines().filter(|l| !l.trim().is_empty()).count();
    c.check(
        "?query=kubelet&tailLines=5 is 200 with 1 to 5 journal lines of oxlet's",
        status == 200 && (1..=5).contains(&lines) && body.contains("oxlet["),
        &body,
    );
    let (status, body) = get(vm, "/logs/?query=kubelet&pattern=node%20log%20queries");
    c.check(
        "?query=kubelet&pattern= finds oxlet's own start line in the journal",
        status == 200 && body.contains(START_LINE) && body.contains("oxlet["),
        &body,
    );
    let (status, body) = get(vm, "/logs/?query=containerd&pattern=successfully%20booted");
    c.check(
        "?query=containerd&pattern= finds containerd's start line",
        status == 200 && body.contains("containerd successfully booted"),
        &body,
    );
    let (_, body) = get(
        vm,
        &format!("/logs/?query=kubelet&sinceTime={before_start}&pattern=node%20log%20queries"),
    );
    c.check(
        "a sinceTime before oxlet's start has its start line",
        body.contains(START_LINE),
        &body,
    );
    let future = guest_time(vm, 86_400);
    let (status, body) = get(vm, &format!("/logs/?query=kubelet&sinceTime={future}"));
    c.check(
        "a sinceTime a day ahead has none of oxlet's lines",
        status == 200 && !body.contains("oxlet["),
        &body,
    );
}

/// kubelet's refusals, word for word, and files below /var/log.
fn check_refusals_and_files(vm: &Vm, c: &mut Checks) {
    let (status, body) = get(vm, "/logs/?query=kubelet&tailLines=foo");
    c.check(
        "a bad tailLines is kubelet's 400",
        status == 400
            && body
                == "tailLines: Invalid value: \"foo\": strconv.Atoi: parsing \"foo\": invalid syntax\n",
        &body,
    );
    let (status, body) = get(vm, "/logs/?query=kubelet&boot=1");
    c.check(
        "boot=1 is kubelet's 406",
        status == 406 && body == "boot: Invalid value: 1: must be less than 1\n",
        &body,
    );
    let (status, body) = get(vm, "/logs/syslog?query=kubelet");
    c.check(
        "a path with a query is kubelet's 406",
        status == 406 && body == "path not allowed in query mode\n",
        &body,
    );
    let (status, body) = get(vm, &format!("/logs/?query=/{FILE}"));
    c.check(
        "?query=/<file> serves the file below /var/log",
        status == 200 && body == FILE_TEXT,
        &body,
    );
    let (status, body) = get(vm, "/logs/?query=oxlet-query-test");
    c.check(
        "a service journald does not know is read from /var/log/<service>.log",
        status == 200 && body == FILE_TEXT,
        &body,
    );
    let (status, body) = get(vm, "/logs/?query=/oxlet-escape");
    c.check(
        "a symlink out of /var/log is kubelet's 406, not the file it points at",
        status == 406
            && body.contains("stat /var/log/oxlet-escape: no such file or directory")
            && !body.contains("root:"),
        &body,
    );
}

#[test]
fn node_log_query_reads_the_guests_journal() {
    let started = Instant::now();
    let vm = vm::kind::boot_kind_node();
    vm.write_file(&format!("/var/log/{FILE}"), FILE_TEXT.as_bytes(), 0o644);
    vm.ssh_ok("ln -sf /etc/shadow /var/log/oxlet-escape");
    let before_start = guest_time(&vm, -1);
    vm::kind::start_oxlet_with_dropin(&vm, OXLET_DROPIN, &config());
    // journald may take a moment to have oxlet's first lines.
    let logged = poll(Duration::from_secs(120), || {
        let out = vm.ssh("journalctl -u kubelet --no-pager");
        String::from_utf8_lossy(&out.stdout)
            .contains(START_LINE)
            .then_some(())
    });
    if logged.is_none() {
        panic!(
            "oxlet did not log that the query is on:\n{}",
            kubelet_log(&vm, 60)
        );
    }
    let mut checks = Checks::default();
    check_journal(&vm, &mut checks, &before_start);
    check_refusals_and_files(&vm, &mut checks);
    vm.poweroff_and_report("vm_node_logs", started);
    checks.finish();
}

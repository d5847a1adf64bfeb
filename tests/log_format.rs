//! oxlet's log as kubelet 1.36 writes its own: the real binary, started against a
//! runtime that does not answer (so it logs its start, warnings and the error it stops
//! on), once in klog's text format and once with `--logging-format=json`. Every line
//! it prints is read back strictly: klog's header and `key=value` pairs, or a JSON
//! object with component-base's keys.

use std::process::{Command, Stdio};

/// Runs oxlet to its exit with `extra` flags: (exit code, pid, stderr).
/// No port opened, a short wait for the runtime, and `-v=4`.
const QUIET: &str =
    "--runtime-request-timeout=2s --read-only-port=0 --healthz-port=0 --port=0 -v=4";

fn run(extra: &[&str]) -> (i32, u32, String) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let child = Command::new(env!("CARGO_BIN_EXE_oxlet"))
        .arg(format!("--root-dir={}", state.display()))
        .arg(format!(
            "--container-runtime-endpoint=unix://{}/none.sock",
            state.display()
        ))
        .args(QUIET.split(' '))
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
    (
        out.status.code().unwrap_or(-1),
        pid,
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The parts of a klog header: `Lmmdd hh:mm:ss.uuuuuu pid file:line] `.
#[derive(Debug)]
struct Header<'a> {
    severity: char,
    pid: u32,
    file: &'a str,
    body: &'a str,
}

/// klog's header, strictly: the shape `^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +\d+ [^ :]+:\d+\] `
/// with the pid right-aligned in seven columns and a real month, day and time.
fn header(line: &str) -> Option<Header<'_>> {
    let b = line.as_bytes();
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        let s = line.get(r)?;
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())?
    };
    let severity = *b.first()? as char;
    if !"IWEF".contains(severity) {
        return None;
    }
    let (month, day) = (digits(1..3)?, digits(3..5)?);
    let (hour, minute, second) = (digits(6..8)?, digits(9..11)?, digits(12..14)?);
    digits(15..21)?;
    let punctuation = [
        (5, b' '),
        (8, b':'),
        (11, b':'),
        (14, b'.'),
        (21, b' '),
        (29, b' '),
    ];
    if punctuation.iter().any(|&(i, c)| b.get(i) != Some(&c))
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let pid: u32 = line.get(22..29)?.trim_start().parse().ok()?;
    let (location, body) = line.get(30..)?.split_once("] ")?;
    let (file, line_no) = location.rsplit_once(':')?;
    let valid_file = !file.is_empty() && !file.contains([' ', ':', '/']);
    (valid_file && line_no.parse::<u32>().is_ok()).then_some(Header {
        severity,
        pid,
        file,
        body,
    })
}

/// The length of the Go-quoted string `s` starts with, escapes included.
fn quoted_len(s: &str) -> Option<usize> {
    let mut chars = s.char_indices();
    if chars.next()?.1 != '"' {
        return None;
    }
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next()?;
            }
            '"' => return Some(i + 1),
            c if c.is_control() => return None,
            _ => {}
        }
    }
    None
}

/// The keys of a klog body: `"message" key=value ...`, each value Go-quoted, a
/// number or boolean, or the opening `<` of a multi-line value (its lines follow).
/// None if the body is not that.
fn klog_keys(body: &str) -> Option<(Vec<&str>, bool)> {
    let mut rest = &body[quoted_len(body)?..];
    let mut keys = Vec::new();
    let mut opens_block = false;
    while !rest.is_empty() {
        let (key, value) = rest.strip_prefix(' ')?.split_once('=')?;
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        keys.push(key);
        let end = if value.starts_with('"') {
            quoted_len(value)?
        } else if value == "<" {
            opens_block = true;
            1
        } else {
            let end = value.find(' ').unwrap_or(value.len());
            let bare = &value[..end];
            let number = bare.parse::<f64>().is_ok();
            (number || bare == "true" || bare == "false").then_some(end)?
        };
        rest = &value[end..];
    }
    Some((keys, opens_block))
}

#[test]
fn every_line_is_klogs_text_format() {
    let (code, pid, err) = run(&[]);
    assert_eq!(code, 1, "{err}");
    let mut lines = err.lines();
    let mut severities = String::new();
    let mut failed = None;
    while let Some(line) = lines.next() {
        let h = header(line).unwrap_or_else(|| panic!("not a klog header: {line:?}\n{err}"));
        assert_eq!(h.pid, pid, "{line}");
        assert!(h.file.ends_with(".rs"), "{line}");
        let (keys, opens_block) =
            klog_keys(h.body).unwrap_or_else(|| panic!("not klog's key=value: {line:?}"));
        if opens_block {
            // A multi-line value: tab-indented lines, then ` >` (and maybe more pairs).
            for more in lines.by_ref() {
                if !more.starts_with('\t') {
                    assert!(more.starts_with(" >"), "{more:?}");
                    break;
                }
            }
        }
        if h.body.starts_with("\"command failed\"") {
            failed = Some((h.severity, keys));
        }
        severities.push(h.severity);
    }
    assert!(
        severities.contains('I') && severities.contains('W'),
        "{err}"
    );
    // kubelet's end on an error: `E… "command failed" err="…"`, the error first.
    let (severity, keys) = failed.unwrap_or_else(|| panic!("no \"command failed\" line:\n{err}"));
    assert_eq!(
        (severity, keys.first().copied()),
        ('E', Some("err")),
        "{err}"
    );
    assert!(err.contains("none.sock"), "{err}");
}

#[test]
fn every_line_is_a_json_object_with_component_bases_keys() {
    let (code, _, err) = run(&["--logging-format=json"]);
    assert_eq!(code, 1, "{err}");
    let mut verbosities = Vec::new();
    let mut failed = None;
    for line in err.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}\n{err}"));
        // ts, caller and msg first, in that order.
        assert!(line.starts_with("{\"ts\":"), "{line}");
        let caller_at = line.find(",\"caller\":").expect("caller");
        assert!(caller_at < line.find(",\"msg\":").expect("msg"), "{line}");
        let ts = v["ts"].as_f64().unwrap_or_else(|| panic!("ts: {line}"));
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as f64;
        assert!(ts <= now_ms && now_ms - ts < 120_000.0, "ts in ms: {line}");
        let caller = v["caller"].as_str().expect("caller");
        let (file, line_no) = caller.rsplit_once(':').expect("file:line");
        assert!(
            file.ends_with(".rs") && line_no.parse::<u32>().is_ok(),
            "{line}"
        );
        assert!(v["msg"].is_string(), "{line}");
        // Only an error line has no `v`.
        if let Some(n) = v.get("v") {
            verbosities.push(n.as_u64().unwrap_or_else(|| panic!("v: {line}")));
        }
        if v["msg"] == "command failed" {
            failed = Some(v.clone());
        }
    }
    // Every line but the one error line says its `-v`: 0 for the start-up summary and
    // the warnings.
    assert!(verbosities.contains(&0), "{err}");
    assert_eq!(verbosities.len() + 1, err.lines().count(), "{err}");
    // An error line: no `v`, the error under `err`, last.
    let failed = failed.unwrap_or_else(|| panic!("no command failed line:\n{err}"));
    assert!(failed.get("v").is_none(), "{failed}");
    assert!(
        failed["err"].as_str().unwrap().contains("none.sock"),
        "{failed}"
    );
    let line = err
        .lines()
        .find(|l| l.contains("\"command failed\""))
        .unwrap();
    assert!(
        line.ends_with(&format!(",\"err\":{}}}", failed["err"])),
        "{line}"
    );
}

/// component-base's registry holds text and json; anything else stops oxlet before it
/// logs, with kubelet's words, whether the flag or the config file names it.
#[test]
fn an_unknown_format_is_refused_with_kubelets_message() {
    let want = "initialize logging: logging.format: Invalid value: \"xml\": Unsupported log format";
    let (code, _, err) = run(&["--logging-format=xml"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err.lines().next(),
        Some(format!("oxlet: error: {want}").as_str()),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nlogging:\n  format: xml\n",
    )
    .unwrap();
    let (code, _, err) = run(&[&format!("--config={}", config.display())]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(want), "{err}");
}

#[test]
fn the_header_reader_is_strict() {
    let good = "I1202 03:45:26.508123    1234 node.rs:12] \"started\" pod=\"a/b\" n=2";
    let h = header(good).unwrap();
    assert_eq!((h.severity, h.pid, h.file), ('I', 1234, "node.rs"));
    assert_eq!(klog_keys(h.body).unwrap().0, ["pod", "n"]);
    for bad in [
        "2026-12-02T03:45:26Z  INFO oxlet: started",
        "X1202 03:45:26.508123    1234 node.rs:12] \"m\"",
        "I1302 03:45:26.508123    1234 node.rs:12] \"m\"",
        "I1202 03:45:26.5081    1234 node.rs:12] \"m\"",
        "I1202 03:45:26.508123 1234 node.rs:12] \"m\"",
        "I1202 03:45:26.508123    1234 src/node.rs:12] \"m\"",
        "I1202 03:45:26.508123    1234 node.rs] \"m\"",
    ] {
        assert!(header(bad).is_none(), "{bad}");
    }
    for bad in [
        "started",
        "\"m\" pod=a/b",
        "\"m\" pod=\"a",
        "\"m\"pod=\"a\"",
    ] {
        assert!(klog_keys(bad).is_none(), "{bad}");
    }
}

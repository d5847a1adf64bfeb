//! The docs' log excerpts, kept true. One pod's life as `docs/walkthrough.md` tells
//! it (a manifest written, Running, a failed liveness probe and a restart, deletion)
//! runs on a real containerd with oxlet at `-v=6`. Every line of every ```` ```log ````
//! block in `docs/walkthrough.md` and `docs/logging.md` must then be in that log, at the
//! verbosity the block names (` ```log v=2 `), and every line of a
//! ```` ```timeline ```` block in the pod's `oxlet timeline`. A line that stops being
//! printed, or moves to another `-v`, fails here.
//!
//! oxlet runs with `--logging-format=json`, whose lines carry the `-v` each is shown
//! from (`v`); each is turned back into the body of its klog text line (the message
//! Go-quoted, then `key=value`), which is what the docs show.
//!
//! Lines are compared with what varies from run to run taken out: the time stamp,
//! runs of 12 or more hex digits (IDs, UIDs) and every number. `…` stands for left-out
//! lines and is skipped. Set `OXLET_WALKTHROUGH_OUT=<dir>` to keep the run's log and
//! timeline there (how the excerpts were taken).

mod agent;
mod common;

use std::path::Path;
use std::time::Duration;

use agent::*;
use common::Testbed;

/// The walkthrough's pod, as `docs/walkthrough.md` shows it.
const WEB: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
spec:
  terminationGracePeriodSeconds: 5
  containers:
    - name: httpd
      image: localhost/oxlet/busybox:1
      imagePullPolicy: IfNotPresent
      command: ["sh", "-c", "touch /tmp/healthy; sleep 6; rm /tmp/healthy; exec httpd -f -p 8080"]
      livenessProbe:
        exec:
          command: ["cat", "/tmp/healthy"]
        periodSeconds: 1
        failureThreshold: 3
      lifecycle:
        preStop:
          exec:
            command: ["sleep", "1"]
"#;

/// A line with what varies taken out: the test bed's name, IDs, durations, numbers.
fn shape(line: &str) -> String {
    let line = same_uuids(&same_testbed(line.trim()));
    let mut out = String::new();
    let mut word = String::new();
    for c in line.chars().chain(std::iter::once(' ')) {
        // `.` and `µ` stay inside a word, so `187.57ms` and `820.4µs` are one.
        if c.is_ascii_alphanumeric() || c == '.' || c == 'µ' {
            word.push(c);
            continue;
        }
        out.push_str(&word_shape(&word));
        word.clear();
        out.push(c);
    }
    out.trim_end().to_string()
}

/// One word's shape: `ID` for 12 or more hex digits at its end, `DUR` for a Go duration, and
/// every run of digits `N`.
fn word_shape(word: &str) -> String {
    // A UID or ID, or one glued to a prefix (`pod<uid>` in a cgroup path).
    let hex_tail = word
        .chars()
        .rev()
        .take_while(char::is_ascii_hexdigit)
        .count();
    if hex_tail >= 12 {
        return format!("{}ID", &word[..word.len() - hex_tail]);
    }
    if is_duration(word) {
        return "DUR".into();
    }
    let mut out = String::new();
    let mut in_number = false;
    for c in word.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

/// `187.57ms`, `1m0s`, `820µs`: numbers each followed by a unit.
fn is_duration(word: &str) -> bool {
    let mut rest = word;
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ns", "µs", "us", "ms", "s", "m", "h"]
            .into_iter()
            .find(|u| rest.starts_with(u))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
        parts += 1;
    }
    parts > 0
}

/// An apiserver pod's UID is random: every UUID (`8-4-4-4-12` hex digits) is `UUID`.
fn same_uuids(line: &str) -> String {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let b = line.as_bytes();
    let uuid_at = |i: usize| {
        let mut j = i;
        for (n, len) in GROUPS.iter().enumerate() {
            if n > 0 {
                if b.get(j) != Some(&b'-') {
                    return None;
                }
                j += 1;
            }
            let hex = b.get(j..j + len)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            j += len;
        }
        Some(j)
    };
    let (mut out, mut i) = (String::new(), 0);
    while i < b.len() {
        match uuid_at(i) {
            Some(end) => {
                out.push_str("UUID");
                i = end;
            }
            None => {
                let c = line[i..].chars().next().unwrap();
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

/// Each test bed's directory ends in 6 random characters: one name for them all.
fn same_testbed(line: &str) -> String {
    const BED: &str = "oxlet-testbed-";
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find(BED) {
        out.push_str(&rest[..i + BED.len()]);
        out.push('*');
        let tail = &rest[i + BED.len()..];
        let skip = tail
            .char_indices()
            .take_while(|(_, c)| c.is_ascii_alphanumeric())
            .count();
        rest = &tail[skip..];
    }
    out.push_str(rest);
    out
}

/// A JSON object's members in the order the line holds them.
struct Ordered(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(member) = m.next_entry()? {
                    out.push(member);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Members)
    }
}

/// Go's `strconv.Quote` for the text the docs hold.
fn go_quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON line as the lines of its klog text body, each `(-v, shape)`: the message
/// quoted, an error line's `err` first, a multi-line value as klog's `=<` block.
/// An error line (no `v`) shows at every `-v`.
fn printed(line: &str) -> Vec<(u8, String)> {
    let Ok(Ordered(members)) = serde_json::from_str::<Ordered>(line) else {
        return Vec::new();
    };
    let get = |k: &str| members.iter().find(|(key, _)| key == k).map(|(_, v)| v);
    let v = get("v").and_then(serde_json::Value::as_u64).unwrap_or(0) as u8;
    let msg = get("msg").and_then(serde_json::Value::as_str).unwrap_or("");
    let mut fields: Vec<&(String, serde_json::Value)> = members
        .iter()
        .filter(|(k, _)| !["ts", "caller", "msg", "v"].contains(&k.as_str()))
        .collect();
    if get("v").is_none() {
        fields.sort_by_key(|(k, _)| k != "err");
    }
    let mut text = go_quote(msg);
    for (k, value) in fields {
        match value.as_str() {
            Some(s) if s.contains('\n') => {
                text.push_str(&format!(" {k}=<\n"));
                for l in s.strip_suffix('\n').unwrap_or(s).split('\n') {
                    text.push_str(&format!("\t{l}\n"));
                }
                text.push_str(" >");
            }
            Some(s) => text.push_str(&format!(" {k}={}", go_quote(s))),
            None => text.push_str(&format!(" {k}={value}")),
        }
    }
    text.lines().map(|l| (v, shape(l))).collect()
}

/// The checked blocks of a doc: (info string, lines).
fn blocks(doc: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in doc.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) if info.starts_with("log") || info.starts_with("timeline") => {
                current = Some((info.trim().to_string(), Vec::new()));
            }
            (Some(_), Some(_)) => out.extend(current.take()),
            (Some((_, lines)), None) if !line.trim().is_empty() && line.trim() != "…" => {
                lines.push(line.to_string());
            }
            _ => {}
        }
    }
    out
}

/// What a doc's blocks claim that the run did not print.
fn missing(doc_path: &Path, log: &[(u8, String)], timeline: &[String]) -> Vec<String> {
    let doc = std::fs::read_to_string(doc_path).unwrap();
    let mut out = Vec::new();
    for (info, lines) in blocks(&doc) {
        let want_v = info
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .map(|v| v.parse::<u8>().expect("v=N"));
        for line in lines {
            let found = if info.starts_with("timeline") {
                let s = shape(&line);
                timeline.contains(&s)
            } else {
                let s = shape(&line);
                log.iter()
                    .any(|(v, l)| *l == s && want_v.is_none_or(|w| w == *v))
            };
            if !found {
                out.push(format!("{} ({info}): {line}", doc_path.display()));
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_log_excerpts_are_what_oxlet_prints() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    ox.spawn(&["-v=6", "--logging-format=json"]);
    ox.wait_up(Duration::from_secs(30)).await;
    write_manifest(&ox.manifests, "web.yaml", WEB);
    // Running, then killed by its liveness probe and started again.
    ox.wait_for("web restarted", Duration::from_secs(60), |pods| {
        let p = find(pods, "web")?;
        let c = container_status(p, "httpd")?;
        (c.restart_count >= 1 && is_running(p)).then_some(())
    })
    .await;
    std::fs::remove_file(ox.manifests.join("web.yaml")).unwrap();
    ox.wait_logged("pod terminated", 1, Duration::from_secs(60))
        .await;
    let timeline_text = ox.timeline("default/web-testnode");
    let log_text = ox.log();
    if let Ok(dir) = std::env::var("OXLET_WALKTHROUGH_OUT") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join("oxlet.log"), &log_text).unwrap();
        std::fs::write(Path::new(&dir).join("timeline.txt"), &timeline_text).unwrap();
    }
    // One oxlet per runtime: this one goes before the resize story's starts.
    ox.sigterm();
    let (resize_log, resize_timeline) = resize_story(&bed).await;
    if let Ok(dir) = std::env::var("OXLET_WALKTHROUGH_OUT") {
        std::fs::write(Path::new(&dir).join("resize.log"), &resize_log).unwrap();
        std::fs::write(
            Path::new(&dir).join("resize-timeline.txt"),
            &resize_timeline,
        )
        .unwrap();
    }
    let log: Vec<(u8, String)> = (log_text.lines().chain(resize_log.lines()))
        .flat_map(printed)
        .collect();
    let timeline: Vec<String> = (timeline_text.lines().chain(resize_timeline.lines()))
        .map(shape)
        .collect();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut gone = Vec::new();
    for doc in ["walkthrough.md", "logging.md"] {
        gone.extend(missing(&docs.join(doc), &log, &timeline));
    }
    // What the PLEG said, so a missing exit line shows why it was not printed.
    let pleg: Vec<&str> = log_text
        .lines()
        .filter(|l| l.contains("\"caller\":\"pleg/") && !l.contains("\"v\":6"))
        .collect();
    assert!(
        gone.is_empty(),
        "documented lines this run did not print (at that -v):\n{}\n\nthe PLEG's lines:\n{}",
        gone.join("\n"),
        pleg.join("\n")
    );
}

/// The walkthrough's resize section: pod `web` from the test apiserver, its CPU limit
/// raised through `pods/resize`, on its own oxlet at `-v=6`. Returns its log and the
/// pod's timeline.
async fn resize_story(bed: &Testbed) -> (String, String) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::Api;
    let dir = bed.base_dir().join("resize-apiserver");
    std::fs::create_dir_all(&dir).unwrap();
    let server = testapi::TestApiServer::start(&dir).await.unwrap();
    let mut ox = Oxlet::in_dir(&bed.base_dir().join("resize"), Some(bed.endpoint()));
    let kubeconfig = format!("--kubeconfig={}", server.kubeconfig().display());
    ox.spawn(&["-v=6", "--logging-format=json", &kubeconfig]);
    ox.wait_up(Duration::from_secs(30)).await;
    let mut pod = api_pod("web", "testnode", "exec httpd -f -p 8080", 5);
    pod.spec.as_mut().unwrap().containers[0].resources = Some(
        serde_json::from_value(serde_json::json!({
            "requests": {"cpu": "100m", "memory": "32Mi"},
            "limits": {"cpu": "200m", "memory": "64Mi"},
        }))
        .unwrap(),
    );
    server.put(&pod).unwrap();
    ox.wait_api_running("web", Duration::from_secs(30)).await;
    let pods: Api<Pod> = Api::namespaced(client_of(&server).await, "default");
    let patch = serde_json::json!({"spec": {"containers": [
        {"name": "main", "resources": {"limits": {"cpu": "500m"}}}
    ]}});
    resize_pod(&pods, "web", patch).await;
    ox.wait_logged("pod resize completed", 1, Duration::from_secs(30))
        .await;
    (ox.log(), ox.timeline("default/web"))
}

#[test]
fn uuids_are_one_shape() {
    assert_eq!(
        shape("pod=\"default/web\" podUID=\"93f8e378-0834-4374-a409-759e0ba3f5ad\""),
        shape("pod=\"default/web\" podUID=\"0af1c2d3-1111-4a2b-8c3d-000000000001\"")
    );
    // A cgroup path glues it to `pod`.
    assert_eq!(
        same_uuids("burstable/pod93f8e378-0834-4374-a409-759e0ba3f5ad"),
        "burstable/podUUID"
    );
}

#[test]
fn shapes_leave_out_what_varies() {
    assert_eq!(
        shape("started container container=httpd containerID=8850d18b39d646acc0a39806e24c45af"),
        "started container container=httpd containerID=ID"
    );
    assert_eq!(
        shape("back-off 10s restarting failed container (9s left) after 1.5s"),
        "back-off DUR restarting failed container (DUR left) after DUR"
    );
    assert_eq!(
        shape("latency=820.437µs ip=10.0.0.2"),
        "latency=DUR ip=N.N.N.N"
    );
    assert_eq!(
        shape("cgroup=kubepods/podc365a7a069731e60c40cd513a24a35bf"),
        "cgroup=kubepods/poID"
    );
    assert_eq!(
        shape("cgroup=oxtest-oxlet-testbed-uOlSAF/kubepods"),
        shape("cgroup=oxtest-oxlet-testbed-Ra5vLk/kubepods")
    );
    assert_eq!(
        printed(
            r#"{"ts":1.5,"caller":"events/mod.rs:1","msg":"Event: Started container","v":3,"pod":"a/b"}"#
        ),
        [(3, "\"Event: Started container\" pod=\"a/b\"".to_string())]
    );
    assert_eq!(
        printed(r#"{"ts":1.5,"caller":"x/y.rs:2","msg":"probe ran","v":4,"output":"no\n","n":1}"#),
        [
            (4, "\"probe ran\" output=<".to_string()),
            (4, "no".to_string()),
            (4, "> n=N".to_string())
        ]
    );
    assert_eq!(
        printed(r#"{"ts":1.5,"caller":"x/y.rs:2","msg":"failed","pod":"a/b","err":"gone"}"#),
        [(0, "\"failed\" err=\"gone\" pod=\"a/b\"".to_string())]
    );
}

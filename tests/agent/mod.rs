//! Running the real `oxlet` binary against a test bed: start it, read `/pods`, write
//! manifests atomically, kill it with SIGKILL or SIGTERM. Used with `mod common;`.
#![allow(dead_code)]
#![allow(unreachable_pub)] // shared by several test binaries: `pub` is the helpers' API

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{ContainerStateWaiting, Pod};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::Testbed;

pub mod secure;

/// An oxlet process and the directories it uses.
pub struct Oxlet {
    child: Option<Child>,
    pub manifests: PathBuf,
    pub root: PathBuf,
    pub logs: PathBuf,
    /// `--container-log-symlink-dir`: the legacy log links, kept out of /var/log/containers.
    pub links: PathBuf,
    pub port: u16,
    /// The secure port (`--port`): the harness's free one, or the last `--port=` a
    /// test passed. oxlet's `/debug/*` views are served there alone.
    pub secure_port: u16,
    pub log_file: PathBuf,
    /// None: no `--container-runtime-endpoint`, so oxlet manages its own containerd.
    endpoint: Option<String>,
    /// A managed containerd's own pod network (dropped after the process is killed).
    network: Option<crate::common::NetworkSlot>,
    starts: u32,
    /// How often `wait_for` polls `/pods` (benchmarks poll faster).
    pub poll: Duration,
    /// Extra environment for the process (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// `--cgroup-root`: one per test dir, so concurrent tests never share (or clean
    /// up) each other's pod cgroups. Made before each start (oxlet, as kubelet, never
    /// creates it) and removed with the test dir.
    pub cgroup_root: String,
    /// The oxlet binary to run: this build's unless a benchmark compares another.
    pub binary: PathBuf,
    /// The long flags the binary lists in its `--help` (None: pass every flag). An
    /// older build lacks newer flags and would refuse to start with them.
    pub known_flags: Option<Vec<String>>,
}

pub use crate::common::free_port;

/// Writes a manifest the way editors and config tools do: a hidden temp file, then rename.
pub fn write_manifest(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// A one-container busybox pod manifest.
/// The name is quoted: YAML 1.1, as kubelet reads it, takes a plain `n` or `y` for
/// a boolean.
pub fn pod_yaml(name: &str, command: &str, extra_spec: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: "{name}"
spec:
  terminationGracePeriodSeconds: 1
{extra_spec}  containers:
  - name: main
    image: localhost/oxlet/busybox:1
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "{command}"]
"#
    )
}

/// Adds `field` (one `key: value` line) to the manifest's metadata, failing the
/// test if `yaml` has no `metadata:` line: a silent no-op would test another pod.
pub fn with_metadata(yaml: &str, field: &str) -> String {
    assert!(yaml.contains("metadata:\n"), "no metadata in:\n{yaml}");
    yaml.replacen("metadata:\n", &format!("metadata:\n  {field}\n"), 1)
}

impl Oxlet {
    /// Polls `check` every 50 ms until it returns Some (e.g. an object in the test
    /// apiserver); fails after `limit`, showing the tail of oxlet's log.
    pub async fn poll<T>(
        &self,
        what: &str,
        limit: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let every = Duration::from_millis(50);
        self.poll_every(what, limit, every, async || check()).await
    }

    /// Polls the async `check` every 200 ms until it returns Some (e.g. a file in a
    /// container); fails after `limit`, showing the tail of oxlet's log.
    pub async fn eventually<T>(
        &self,
        what: &str,
        limit: Duration,
        check: impl AsyncFnMut() -> Option<T>,
    ) -> T {
        let every = Duration::from_millis(200);
        self.poll_every(what, limit, every, check).await
    }

    async fn poll_every<T>(
        &self,
        what: &str,
        limit: Duration,
        every: Duration,
        mut check: impl AsyncFnMut() -> Option<T>,
    ) -> T {
        let t = std::time::Instant::now();
        loop {
            if let Some(v) = check().await {
                return v;
            }
            assert!(
                t.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}\n{}",
                tail(&self.log(), 60)
            );
            tokio::time::sleep(every).await;
        }
    }

    /// Starts oxlet on the bed's containerd with a fresh manifest directory.
    pub fn start(bed: &Testbed, extra: &[&str]) -> Oxlet {
        let mut o = Oxlet::new(bed);
        o.spawn(extra);
        o
    }

    /// Prepares the directories without starting the process.
    pub fn new(bed: &Testbed) -> Oxlet {
        Oxlet::in_dir(&bed.base_dir().join("oxlet"), Some(bed.endpoint()))
    }

    /// Prepares `base` for an oxlet with the given runtime endpoint (None: managed).
    pub fn in_dir(base: &Path, endpoint: Option<String>) -> Oxlet {
        let manifests = base.join("manifests");
        std::fs::create_dir_all(&manifests).unwrap();
        Oxlet {
            cgroup_root: crate::common::cgroup_root_for(base),
            child: None,
            manifests,
            root: base.join("root"),
            logs: base.join("pod-logs"),
            links: base.join("containers"),
            port: free_port(),
            secure_port: free_port(),
            log_file: base.join("oxlet.log"),
            network: endpoint
                .is_none()
                .then(|| crate::common::NetworkSlot::claim(base)),
            endpoint,
            starts: 0,
            poll: Duration::from_millis(50),
            env: Vec::new(),
            binary: PathBuf::from(env!("CARGO_BIN_EXE_oxlet")),
            known_flags: None,
        }
    }

    /// A managed containerd's pod network (None with a test bed's runtime).
    pub fn managed_network(&self) -> Option<&crate::common::NetworkSlot> {
        self.network.as_ref()
    }

    /// Copies the test images into `<root-dir>/images/`, which a managed containerd
    /// imports at start; returns that dir.
    pub fn copy_images_to_root(&self) -> PathBuf {
        let dir = self.root.join("images");
        std::fs::create_dir_all(&dir).unwrap();
        let images = crate::common::test_images_dir();
        for f in ["oxlet-busybox.tar", "oxlet-pause.tar"] {
            std::fs::copy(images.join(f), dir.join(f)).unwrap();
        }
        dir
    }

    /// Drops the long flags `known_flags` does not list; short ones (`-v=4`) stay.
    fn supported<'a>(&self, args: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        args.into_iter()
            .filter(|a| {
                let Some(name) = a.strip_prefix("--") else {
                    return true;
                };
                let name = name.split('=').next().unwrap_or(name);
                self.known_flags
                    .as_ref()
                    .is_none_or(|k| k.iter().any(|f| f == name))
            })
            .map(str::to_string)
            .collect()
    }

    fn args(&self) -> Vec<String> {
        // A managed runtime runs the test beds' containerd release.
        let runtime = match &self.endpoint {
            Some(e) => format!("--container-runtime-endpoint={e}"),
            None => crate::common::containerd_binary_flag(),
        };
        let mut args = vec![runtime];
        if let Some(net) = &self.network {
            args.push(format!("--pod-cidr={}", net.subnet()));
            args.push(format!("--managed-cni-bridge={}", net.bridge()));
        }
        args.extend([
            format!("--pod-manifest-path={}", self.manifests.display()),
            format!("--root-dir={}", self.root.display()),
            format!("--pod-logs-dir={}", self.logs.display()),
            format!("--container-log-symlink-dir={}", self.links.display()),
            format!("--read-only-port={}", self.port),
            "--healthz-port=0".into(),
            // The secure port, with the flag defaults (anonymous, AlwaysAllow) on
            // loopback: where a test reads the `/debug/*` views. A test's own --port wins.
            // With a test's config file the port is off unless the test names one: the
            // file's own authentication (a webhook, a client CA path) decides what the
            // port needs, and kubelet, as oxlet, refuses to start without it.
            format!("--port={}", self.secure_port),
            "--hostname-override=testnode".into(),
            "--file-check-frequency=2s".into(),
            // The test machines' disks may be under kubelet's default nodefs/imagefs
            // Thresholds, and the eviction manager would then evict and
            // refuse the tests' pods: only the memory default is kept. A test's own
            // --eviction-hard comes later and wins.
            "--eviction-hard=memory.available<100Mi".into(),
            format!("--cgroup-root={}", self.cgroup_root),
            // These machines run cgroup v1 (hybrid), which kubelet (1.35+) and oxlet
            // refuse by default.
            "--fail-cgroupv1=false".into(),
            "-v=4".into(),
        ]);
        self.supported(args.iter().map(String::as_str))
    }

    /// (Re)starts the process with the same directories.
    pub fn spawn(&mut self, extra: &[&str]) {
        self.starts += 1;
        crate::common::create_cgroup_root(&self.cgroup_root);
        if let Some(port) = extra
            .iter()
            .rev()
            .find_map(|a| a.strip_prefix("--port=")?.parse().ok())
        {
            self.secure_port = port;
        }
        let config_port_off = ["--port=0"];
        let config_port_off: &[&str] = if own_config_without_port(extra) {
            self.secure_port = 0;
            &config_port_off
        } else {
            &[]
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_file)
            .unwrap();
        let child = Command::new(&self.binary)
            .args(self.args())
            .args(self.supported(config_port_off.iter().copied()))
            .args(self.supported(extra.iter().copied()))
            .env("NO_COLOR", "1")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("starting oxlet");
        self.child = Some(child);
    }

    /// Runs oxlet to completion with extra args (e.g. `--runonce`); returns status and stdout.
    pub fn run_to_end(&self, extra: &[&str]) -> (ExitStatus, String) {
        crate::common::create_cgroup_root(&self.cgroup_root);
        let port_off: &[&str] = if own_config_without_port(extra) {
            &["--port=0"]
        } else {
            &[]
        };
        let out = Command::new(&self.binary)
            .args(self.args())
            .args(self.supported(port_off.iter().copied()))
            .args(self.supported(extra.iter().copied()))
            .stderr(Stdio::inherit())
            .output()
            .expect("running oxlet");
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// Waits for a spawned oxlet to exit by itself (e.g. refusing to start).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let c = self.child.as_mut().expect("spawned");
        let t = Instant::now();
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                return status;
            }
            assert!(t.elapsed() < timeout, "oxlet still runs after {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until oxlet serves its read-only API (start-up is over).
    pub async fn wait_up(&self, timeout: Duration) {
        let t = Instant::now();
        while self.get("/pods").await.is_none() {
            assert!(
                t.elapsed() < timeout,
                "oxlet not up after {timeout:?}\n{}",
                tail(&self.log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(std::process::Child::id)
            .unwrap_or(0)
    }

    /// SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM; returns the exit status and how long it took.
    pub fn sigterm(&mut self) -> (ExitStatus, Duration) {
        let mut c = self.child.take().expect("oxlet is running");
        let t = Instant::now();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(c.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return (st, t.elapsed());
            }
            if t.elapsed() > Duration::from_secs(20) {
                c.kill().unwrap();
                panic!("oxlet did not stop within 20s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_file).unwrap_or_default()
    }

    /// `/sys/fs/cgroup/<controller>/<cgroup root>/<rel>`: a file of this oxlet's
    /// cgroup tree (v1).
    pub fn cgroup_file(&self, controller: &str, rel: &str) -> PathBuf {
        Path::new("/sys/fs/cgroup")
            .join(controller)
            .join(self.cgroup_root.trim_start_matches('/'))
            .join(rel)
    }

    /// The BestEffort QoS cgroup's CFS quota (`-1`: none), which CPU suppress sets.
    pub fn best_effort_quota(&self) -> i64 {
        let path = self.cgroup_file("cpu", "kubepods/besteffort/cpu.cfs_quota_us");
        std::fs::read_to_string(path)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    /// Waits up to 20 s until the BestEffort quota satisfies `want`; fails the test
    /// with `what`, the quota and the log's tail.
    pub async fn wait_best_effort_quota(&self, what: &str, want: impl Fn(i64) -> bool) {
        let t = Instant::now();
        loop {
            let q = self.best_effort_quota();
            if want(q) {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{what}: quota {q}\n{}",
                tail(&self.log(), 30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `oxlet timeline <pod>` against this oxlet's secure port: what it printed.
    pub fn timeline(&self, pod: &str) -> String {
        let out = Command::new(&self.binary)
            .args([
                "timeline",
                &format!("--server=https://127.0.0.1:{}", self.secure_port),
                "--insecure-skip-tls-verify",
                pod,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "oxlet timeline {pod}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// GET a path on the read-only port; None while oxlet is not listening yet.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_string()))
    }

    /// GET a path on the secure port, anonymously and taking any serving certificate
    /// (`curl -k`): oxlet's `/debug/*` views are served there alone. None while oxlet
    /// is not listening yet, or with the secure port off.
    pub async fn debug_get(&self, path: &str) -> Option<(u16, String)> {
        if self.secure_port == 0 {
            return None;
        }
        secure::Client::any_server(self.secure_port)
            .request("GET", path, "")
            .await
            .ok()
    }

    /// Polls the JSON document at `path` until `check` finds what it wants; fails the test
    /// with the last document and the log's tail.
    pub async fn wait_for_json<T>(
        &self,
        path: &str,
        timeout: Duration,
        check: impl Fn(&serde_json::Value) -> Option<T>,
    ) -> T {
        let t = Instant::now();
        loop {
            let doc = match self.get(path).await {
                Some((200, body)) => serde_json::from_str(&body).unwrap_or_default(),
                _ => serde_json::Value::Null,
            };
            if let Some(v) = check(&doc) {
                return v;
            }
            assert!(
                t.elapsed() < timeout,
                "{path} never held what was wanted within {timeout:?}: {doc}\n{}",
                tail(&self.log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The pods on `/pods` (empty while oxlet is not up).
    pub async fn pods(&self) -> Vec<Pod> {
        let Some((200, body)) = self.get("/pods").await else {
            return Vec::new();
        };
        let list: serde_json::Value = serde_json::from_str(&body).expect("/pods is JSON");
        assert_eq!(list["kind"], "PodList");
        serde_json::from_value(list["items"].clone()).expect("/pods items are Pods")
    }

    /// Waits until `check` holds for the pod list, or fails the test with the log.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&[Pod]) -> Option<T>,
    ) -> T {
        let t = Instant::now();
        loop {
            let pods = self.pods().await;
            if let Some(v) = check(&pods) {
                return v;
            }
            if t.elapsed() > timeout {
                panic!(
                    "timed out after {timeout:?} waiting for {what}\npods: {}\n--- oxlet log (tail) ---\n{}",
                    serde_json::to_string_pretty(&pods).unwrap(),
                    tail(&self.log(), 60)
                );
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Waits until oxlet's log holds `line` at least `times` times, or fails the test
    /// with the log's tail.
    pub async fn wait_logged(&self, line: &str, times: usize, timeout: Duration) {
        let t = Instant::now();
        while self.log().matches(line).count() < times {
            assert!(
                t.elapsed() < timeout,
                "{line:?} not logged {times} times within {timeout:?}\n{}",
                tail(&self.log(), 40)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until pod `name`'s container `main` waits with `reason` (a static pod's
    /// name is without its node suffix); returns the waiting state.
    pub async fn wait_main_waiting(
        &self,
        name: &str,
        reason: &str,
        timeout: Duration,
    ) -> ContainerStateWaiting {
        self.wait_for(&format!("{name} waiting {reason}"), timeout, |pods| {
            named(pods, name)
                .or_else(|| find(pods, name))
                .and_then(main_waiting)
                .filter(|w| w.reason.as_deref() == Some(reason))
                .cloned()
        })
        .await
    }

    /// Waits for the apiserver pod named exactly `name` to be Running; returns it.
    pub async fn wait_api_running(&self, name: &str, timeout: Duration) -> Pod {
        self.wait_for(&format!("{name} Running"), timeout, |pods| {
            named(pods, name).filter(|p| is_running(p)).cloned()
        })
        .await
    }

    /// Waits for the apiserver's copy of pod `name` to reach `phase` (what the status
    /// writer sent, not oxlet's own view); returns it.
    pub async fn wait_api_phase(
        &self,
        pods: &kube::api::Api<Pod>,
        name: &str,
        phase_wanted: &str,
        within: Duration,
    ) -> Pod {
        let t = Instant::now();
        loop {
            let p = pods.get(name).await.unwrap();
            if phase(&p) == phase_wanted {
                return p;
            }
            assert!(
                t.elapsed() < within,
                "{name} not {phase_wanted} after {within:?}: {:?}\n{}",
                p.status,
                tail(&self.log(), 60)
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// The raw CRI log file of the pod's container `main` (attempt 0), once `want` is
    /// in it (15 s at most); returns its text.
    pub async fn main_log_once(&self, pod: &Pod, want: &str) -> String {
        let file = self
            .logs
            .join(format!(
                "{}_{}_{}",
                pod.metadata.namespace.as_deref().unwrap_or("default"),
                pod.metadata.name.as_deref().unwrap(),
                uid(pod)
            ))
            .join("main")
            .join("0.log");
        let t = Instant::now();
        loop {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if text.contains(want) {
                return text;
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "no {want:?} in {}: {text}",
                file.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the named pod to be Running with every container running; returns it.
    pub async fn wait_running(&self, name: &str, timeout: Duration) -> Pod {
        self.wait_for(&format!("{name} Running"), timeout, |pods| {
            find(pods, name).filter(|p| is_running(p)).cloned()
        })
        .await
    }
}

/// Whether a test passes its own config file and no `--port` (see [`Oxlet::args`]).
fn own_config_without_port(extra: &[&str]) -> bool {
    extra.iter().any(|a| a.starts_with("--config"))
        && !extra.iter().any(|a| a.starts_with("--port"))
}

/// The long flags (without `--`) that `binary --help` lists.
pub fn flags_of(binary: &Path) -> Vec<String> {
    let out = Command::new(binary)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("running {} --help: {e}", binary.display()));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let mut flags: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter_map(|w| w.strip_prefix("--"))
        .filter(|f| f.starts_with(|c: char| c.is_ascii_alphanumeric()))
        .map(str::to_string)
        .collect();
    flags.sort();
    flags.dedup();
    flags
}

impl Drop for Oxlet {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // A managed containerd's test dir has no bed whose drop would do it: its
        // containerd, shims and containers (oxlet's SIGKILL leaves them running), the
        // mounts below the root dir, then the pod cgroups.
        if self.endpoint.is_none() {
            crate::common::teardown_dir(&self.root);
            crate::common::remove_cgroup_tree(self.cgroup_root.trim_start_matches('/'));
        }
    }
}

/// A `/proc/meminfo` field (e.g. `"MemTotal:"`) in bytes.
pub fn meminfo(field: &str) -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/meminfo"));
    kb * 1024
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The pod whose name starts with `name-` (static pods get the node name appended).
pub fn find<'a>(pods: &'a [Pod], name: &str) -> Option<&'a Pod> {
    pods.iter().find(|p| {
        p.metadata
            .name
            .as_deref()
            .is_some_and(|n| n == format!("{name}-testnode"))
    })
}

/// The pod named exactly `name` (apiserver pods keep their name; `find` is for static pods).
pub fn named<'a>(pods: &'a [Pod], name: &str) -> Option<&'a Pod> {
    pods.iter()
        .find(|p| p.metadata.name.as_deref() == Some(name))
}

pub fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

pub fn is_running(p: &Pod) -> bool {
    let cs = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    phase(p) == "Running"
        && !cs.is_empty()
        && cs
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// The container status of `container` in pod `p`, if it has one yet (a pod is on
/// `/pods` before its first status is generated).
/// The waiting state of a pod's container `main`, if it waits.
pub fn main_waiting(p: &Pod) -> Option<&ContainerStateWaiting> {
    container_status(p, "main")?
        .state
        .as_ref()?
        .waiting
        .as_ref()
}

pub fn container_status<'a>(
    p: &'a Pod,
    container: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)
}

/// The pod's condition of type `kind`, if it has one.
pub fn pod_condition<'a>(
    p: &'a Pod,
    kind: &str,
) -> Option<&'a k8s_openapi::api::core::v1::PodCondition> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

/// The container status of `container` in pod `p`.
pub fn container<'a>(
    p: &'a Pod,
    container: &str,
) -> &'a k8s_openapi::api::core::v1::ContainerStatus {
    container_status(p, container).unwrap_or_else(|| panic!("no status for container {container}"))
}

/// The runtime's ID of `container` in pod `p`: its `containerID` without the
/// `<runtime>://` scheme.
pub fn runtime_id(p: &Pod, container: &str) -> String {
    let id = self::container(p, container)
        .container_id
        .as_deref()
        .unwrap_or_else(|| panic!("no containerID for container {container}"));
    id.split_once("://").map_or(id, |(_, id)| id).to_string()
}

/// Runs `cmd` under `sh -c` in container `id` (CRI `ExecSync`, 5 s at most).
pub async fn exec_sync_sh(bed: &Testbed, id: &str, cmd: &str) -> cri::ExecSyncResponse {
    let mut c = bed.cri().await;
    c.exec_sync(cri::ExecSyncRequest {
        container_id: id.to_string(),
        cmd: vec!["sh".into(), "-c".into(), cmd.into()],
        timeout: 5,
    })
    .await
    .unwrap()
    .into_inner()
}

/// [`exec_sync_sh`] that must exit 0; returns its stdout.
pub async fn exec_sh(bed: &Testbed, id: &str, cmd: &str) -> String {
    let r = exec_sync_sh(bed, id, cmd).await;
    assert_eq!(
        r.exit_code,
        0,
        "{cmd}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// CRI containers of a pod (by UID label), any state.
pub async fn cri_containers(bed: &Testbed, uid: &str) -> Vec<cri::Container> {
    let mut c = bed.cri().await;
    let filter = cri::ContainerFilter {
        label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        ..Default::default()
    };
    c.list_containers(cri::ListContainersRequest {
        filter: Some(filter),
    })
    .await
    .unwrap()
    .into_inner()
    .containers
}

/// CRI sandboxes of a pod (by UID label), any state.
pub async fn cri_sandboxes(bed: &Testbed, uid: &str) -> Vec<cri::PodSandbox> {
    let mut c = bed.cri().await;
    let filter = cri::PodSandboxFilter {
        label_selector: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        ..Default::default()
    };
    c.list_pod_sandbox(cri::ListPodSandboxRequest {
        filter: Some(filter),
    })
    .await
    .unwrap()
    .into_inner()
    .items
}

pub const RUNNING: i32 = cri::ContainerState::ContainerRunning as i32;

/// A pod bound to `node`, for the test apiserver; `script` runs under `sh -c`.
pub fn api_pod(name: &str, node: &str, script: &str, grace: i64) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [{
                "name": "main", "image": "localhost/oxlet/busybox:1",
                "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", script],
            }],
        },
    }))
    .unwrap()
}

/// An API pod that writes 4 MiB into an emptyDir whose `sizeLimit` is 1Mi, then sleeps:
/// the local storage eviction's subject.
pub fn empty_dir_filler(name: &str, node: &str) -> Pod {
    let mut filler = api_pod(
        name,
        node,
        "dd if=/dev/zero of=/scratch/blob bs=1M count=4 && sleep 3600",
        1,
    );
    let spec = filler.spec.as_mut().unwrap();
    spec.volumes = Some(vec![
        serde_json::from_value(serde_json::json!({
            "name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}
        }))
        .unwrap(),
    ]);
    spec.containers[0].volume_mounts = Some(vec![
        serde_json::from_value(serde_json::json!({"name": "scratch", "mountPath": "/scratch"}))
            .unwrap(),
    ]);
    filler
}

/// A test apiserver with its state in `dir`, and oxlet running against it.
pub async fn start_with_apiserver(
    bed: &Testbed,
    dir: &std::path::Path,
) -> (testapi::TestApiServer, Oxlet) {
    let server = testapi::TestApiServer::start(dir).await.unwrap();
    let ox = Oxlet::start(
        bed,
        &[&format!("--kubeconfig={}", server.kubeconfig().display())],
    );
    (server, ox)
}

/// A kube client for the test apiserver, from its kubeconfig.
pub async fn client_of(server: &testapi::TestApiServer) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Sends `patch` (a strategic merge) to pod `name`'s `resize` subresource, the one way
/// a real apiserver takes a resize; the pod as the apiserver stored it.
pub async fn resize_pod(pods: &kube::api::Api<Pod>, name: &str, patch: serde_json::Value) -> Pod {
    let params = kube::api::PatchParams::default();
    pods.patch_subresource("resize", name, &params, &kube::api::Patch::Strategic(patch))
        .await
        .unwrap_or_else(|e| panic!("resizing {name}: {e}"))
}

//! The fair floor: exactly the CRI requests oxlet sends for the measured pod, captured
//! once through [`CaptureProxy`] and replayed straight through the CRI. The bare floor
//! shows the machine's limit; this one what containerd costs for kubelet's semantics
//! (oxlet's pod cgroup, mounts, labels, security context, DNS...).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;

use crate::ablation::Without;
use crate::agent::pod_yaml;
use crate::common::Testbed;
use crate::floor::{remove_all_sandboxes, run_batch, wait_sandboxes};
use crate::proxy::{CREATE_CONTAINER, CaptureProxy, RUN_POD_SANDBOX};
use crate::{RESTING, WAIT, run};

/// oxlet's labels start with this; the replay renames them (`bench.` + key), since
/// oxlet groups runtime objects into pods by `io.kubernetes.pod.uid` (src/kuberuntime/
/// reader.rs, labels.rs) and would otherwise adopt or kill the replayed pods.
const KUBE_PREFIX: &str = "io.kubernetes.";

pub(crate) struct FairFloor {
    sandbox: cri::RunPodSandboxRequest,
    container: cri::CreateContainerRequest,
    /// The capture oxlet's `--cgroup-root`: every replayed pod cgroup lies below it.
    cgroup_root: String,
    /// Pod cgroup parents the replays made (runc creates them), to remove.
    made: Mutex<Vec<String>>,
    logs: PathBuf,
    n: AtomicU32,
    /// The capture oxlet's dirs: the container's mounts point at files in its root
    /// dir (the pod's etc-hosts, the termination-log), so it stays until the end.
    dir: tempfile::TempDir,
}

/// Starts an oxlet of `binary` (with `extra` flags, as the measured runs) through the
/// capture proxy, waits until the single-pod manifest runs, keeps its RunPodSandbox
/// and CreateContainer requests, stops that oxlet and removes its sandbox.
pub(crate) async fn capture(bed: &Testbed, binary: &Path, extra: &[String]) -> FairFloor {
    // Its own dir below /tmp gives it its own cgroup root, which the measured oxlet's
    // orphan cleanup never scans (and test sweeps keep while the dir exists).
    let dir = tempfile::Builder::new()
        .prefix("oxbench-fair-")
        .tempdir_in("/tmp")
        .unwrap();
    let upstream = tonic::transport::Endpoint::from_shared(bed.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let proxy = CaptureProxy::start(&dir.path().join("cri.sock"), upstream);
    let endpoint = format!("unix://{}", proxy.socket.display());
    let (mut ox, mut flags) = run::prepare(dir.path(), endpoint, binary);
    flags.extend_from_slice(extra);
    crate::agent::write_manifest(
        &ox.manifests,
        "capture.yaml",
        &pod_yaml("capture", RESTING, ""),
    );
    ox.spawn(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    ox.wait_running("capture", WAIT).await;
    let sandbox: Vec<cri::RunPodSandboxRequest> = proxy.requests(RUN_POD_SANDBOX);
    let container: Vec<cri::CreateContainerRequest> = proxy.requests(CREATE_CONTAINER);
    let (status, _) = ox.sigterm();
    assert!(status.success(), "the capture oxlet exited with {status}");
    drop(proxy);
    remove_all_sandboxes(bed).await;
    wait_sandboxes(bed, 0).await;
    let logs = bed.base_dir().join("fair-pods");
    std::fs::create_dir_all(&logs).unwrap();
    FairFloor {
        sandbox: sandbox.last().cloned().expect("oxlet sent RunPodSandbox"),
        container: container
            .last()
            .cloned()
            .expect("oxlet sent CreateContainer"),
        cgroup_root: ox.cgroup_root.clone(),
        made: Mutex::default(),
        logs,
        n: AtomicU32::new(0),
        dir,
    }
}

/// Renames oxlet's label keys and rewrites values naming the captured pod.
fn relabel(labels: &mut HashMap<String, String>, swaps: &[(&str, &str)]) {
    *labels = std::mem::take(labels)
        .into_iter()
        .map(|(k, v)| {
            let k = if k.starts_with(KUBE_PREFIX) {
                format!("bench.{k}")
            } else {
                k
            };
            let v = swaps
                .iter()
                .find(|(old, _)| *old == v)
                .map_or(v, |(_, new)| (*new).to_string());
            (k, v)
        })
        .collect();
}

impl FairFloor {
    /// The captured requests made unique for pod `name`: sandbox name and uid, log
    /// directory (created), the `pod<uid>` part of the cgroup parent, and labels.
    fn requests(&self, name: &str) -> (cri::PodSandboxConfig, cri::ContainerConfig) {
        let mut sb = self.sandbox.config.clone().expect("a sandbox config");
        let mut c = self.container.config.clone().expect("a container config");
        let md = sb.metadata.as_mut().expect("sandbox metadata");
        let uid = format!(
            "fair-{}-{}",
            std::process::id(),
            self.n.fetch_add(1, Ordering::Relaxed)
        );
        let (old_name, old_uid) = (
            std::mem::replace(&mut md.name, name.to_string()),
            md.uid.clone(),
        );
        md.uid.clone_from(&uid);
        let log_dir = self.logs.join(format!("{}_{name}_{uid}", md.namespace));
        // The container's log path is relative to the sandbox's dir (`main/0.log`).
        let c_log = log_dir.join(&c.log_path);
        std::fs::create_dir_all(c_log.parent().unwrap_or(&log_dir)).unwrap();
        sb.log_directory = log_dir.to_string_lossy().into_owned();
        let linux = sb.linux.as_mut().expect("a linux sandbox config");
        let parent = linux
            .cgroup_parent
            .replace(&format!("pod{old_uid}"), &format!("pod{uid}"));
        assert!(
            parent != linux.cgroup_parent && parent.starts_with(&format!("{}/", self.cgroup_root)),
            "cgroup parent {} not below {} or without pod{old_uid}",
            linux.cgroup_parent,
            self.cgroup_root
        );
        self.made.lock().unwrap().push(parent.clone());
        linux.cgroup_parent = parent;
        let swaps = [(old_uid.as_str(), uid.as_str()), (old_name.as_str(), name)];
        relabel(&mut sb.labels, &swaps);
        relabel(&mut c.labels, &swaps);
        (sb, c)
    }

    /// One replayed pod: RunPodSandbox + CreateContainer + StartContainer, timed as the
    /// bare floor is (from before its config is made).
    pub(crate) async fn pod(&self, bed: &Testbed, name: &str) -> Duration {
        self.pod_without(bed, name, Without::Nothing).await
    }

    /// [`FairFloor::pod`] with one semantic taken out of the requests (the ablation).
    pub(crate) async fn pod_without(
        &self,
        bed: &Testbed,
        name: &str,
        without: Without,
    ) -> Duration {
        let mut client = bed.cri().await;
        let t = Instant::now();
        let (mut sb, mut c) = self.requests(name);
        without.apply(&mut sb, &mut c);
        let handler = self.sandbox.runtime_handler.clone();
        crate::floor::start_pod(&mut client, sb, c, handler).await;
        t.elapsed()
    }

    /// `n` replayed pods with `in_flight` at a time; returns the wall time.
    pub(crate) async fn batch(&self, bed: &Testbed, n: usize, in_flight: usize) -> Duration {
        run_batch(n, in_flight, |i| async move {
            self.pod(bed, &format!("fair-b{i}")).await
        })
        .await
    }

    /// Removes every sandbox, then the pod cgroups the replays made.
    pub(crate) async fn remove_all(&self, bed: &Testbed) {
        remove_all_sandboxes(bed).await;
        wait_sandboxes(bed, 0).await;
        let made = std::mem::take(&mut *self.made.lock().unwrap());
        for parent in made {
            remove_pod_cgroup(&self.cgroup_root, &parent);
        }
    }

    /// Removes the capture oxlet's whole cgroup tree (and, on drop, its dirs).
    pub(crate) fn finish(self) {
        let name = self.cgroup_root.trim_start_matches('/');
        crate::common::remove_cgroup_tree(name);
        drop(self.dir);
    }
}

/// Removes `parent` (a `.../pod<uid>` cgroup, empty once its sandbox is gone) and
/// what runc left below it, in every cgroup v1 hierarchy; never outside `root`.
fn remove_pod_cgroup(root: &str, parent: &str) {
    let last = parent.rsplit('/').next().unwrap_or("");
    assert!(
        parent.starts_with(&format!("{root}/"))
            && last.starts_with("pod")
            && !parent.contains(".."),
        "refusing to remove cgroup {parent} (not a pod cgroup below {root})"
    );
    let Ok(mounts) = std::fs::read_dir("/sys/fs/cgroup") else {
        return;
    };
    for m in mounts.flatten() {
        let mount = m.path();
        if mount.is_symlink() || !mount.is_dir() {
            continue;
        }
        let dir = mount.join(parent.trim_start_matches('/'));
        if dir.is_dir() {
            remove_dirs_below(&dir);
        }
    }
}

/// `rmdir` of `dir` and its subdirectories, deepest first (cgroups go with rmdir).
fn remove_dirs_below(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_dirs_below(&e.path());
        }
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        eprintln!("bench: removing cgroup {}: {e}", dir.display());
    }
}

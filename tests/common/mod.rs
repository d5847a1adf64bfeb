//! The real-runtime test bed: one private containerd per [`Testbed`], with the local test
//! images imported and its own pod network, torn down completely when it is dropped.
//!
//! Use from an integration test with `mod common;`. Tests FAIL (never skip) when
//! containerd, runc or the CNI plugins are missing: `scripts/install-deps.sh` installs them.
//!
//! Isolation between test beds running at once (in one process or several):
//! - a base dir `/tmp/oxlet-testbed-XXXXXX` per bed (short: unix socket paths < 108 bytes);
//! - a network slot `n` per bed, claimed under a lock in [`SLOT_DIR`]: bridge `oxt<n>`,
//!   pod subnet `10.234.<n>.0/24`;
//! - every claim (slot file, `<base>/owner`) records the owner's pid and start time, so a
//!   later run can tell leftovers of dead test processes from beds that are still in use,
//!   and [`sweep_leftovers`] removes only the former.
#![allow(dead_code)] // each test binary uses its own subset
#![allow(unreachable_pub)] // shared by several test binaries: `pub` is the helpers' API

pub mod dbus;
pub mod registry;

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant};

use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ImageSpec, ImageStatusRequest, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, ListPodSandboxRequest, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, RemovePodSandboxRequest, StopPodSandboxRequest,
};
use oxlet::containerd::{
    CNI_BIN_DIR, CniSettings, ContainerdBinary, ContainerdLayout, Launch, ManagedContainerd,
    find_in_path, import_images,
};
use tonic::transport::{Channel, Endpoint};

/// The test images (built by `scripts/build-images.sh`).
pub const BUSYBOX_IMAGE: &str = "localhost/oxlet/busybox:1";
pub const PAUSE_IMAGE: &str = "localhost/oxlet/pause:1";
/// Every test bed's base dir starts with this (sweeps recognise leftovers by it).
pub const BASE_PREFIX: &str = "oxlet-testbed-";
/// Network slot claims (and their lock); on the host, shared by all test processes.
pub const SLOT_DIR: &str = "/run/oxlet-testbed";
/// Bridge names are `oxt<slot>`.
pub const BRIDGE_PREFIX: &str = "oxt";
/// Pod subnets are `10.234.<slot>.0/24`: addresses only our own pods ever have.
pub const SUBNET_PREFIX: [u8; 2] = [10, 234];
const SLOTS: u32 = 256;

/// A free loopback port for a server a test starts later (bound, then released).
///
/// Not one the kernel picks for `bind(0)`: that is the ephemeral range, where every
/// outgoing connection (probes, watches, gRPC) also takes its source port, so a port
/// released here could be someone's source port by the time oxlet binds it (CI saw
/// oxlet refuse to start for that). Below the range only listeners live; this process
/// never hands out one port twice, and its pid spreads processes apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let high = ephemeral_range_start().clamp(LOW + 1_000, 65_535);
    let span = high - LOW;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let port = u16::try_from(LOW + offset).expect("below 65536");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{high}");
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_range_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// Build the test images once per process into `target/test-images`; returns that dir.
///
/// The script itself serialises concurrent builders (flock) and renames complete archives
/// into place, so test processes racing here never import half-written files.
pub fn test_images_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = root.join("target/test-images");
        let out = Command::new("bash")
            .arg(root.join("scripts/build-images.sh"))
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .expect("running scripts/build-images.sh");
        assert!(
            out.status.success(),
            "scripts/build-images.sh failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .clone()
}

/// Where the time of [`Testbed::start`] went.
#[derive(Debug, Clone, Copy)]
pub struct StartTimings {
    pub containerd: Duration,
    pub images: Duration,
    pub total: Duration,
}

/// One private containerd with the test images imported and its own pod network.
pub struct Testbed {
    base: PathBuf,
    launch: Launch,
    slot: u32,
    containerd: Option<ManagedContainerd>,
    containerd_pid: u32,
    timings: StartTimings,
}

impl Testbed {
    /// Start a test bed. Panics (so the test fails) if a needed binary is missing or
    /// containerd does not come up.
    pub async fn start() -> Testbed {
        Testbed::start_with(None, containerd_binary().clone()).await
    }

    /// A test bed running `binary` (another containerd release than the others').
    pub async fn start_on(binary: ContainerdBinary) -> Testbed {
        Testbed::start_with(None, binary).await
    }

    /// A test bed whose containerd root (content store and snapshots: the image
    /// filesystem) is a tmpfs of `mib` MiB, small enough for a test to fill. The mount
    /// is below the bed's dir, so the teardown unmounts it with the rest.
    pub async fn start_with_small_image_fs(mib: u64) -> Testbed {
        Testbed::start_with(Some(mib), containerd_binary().clone()).await
    }

    async fn start_with(image_fs_mib: Option<u64>, binary: ContainerdBinary) -> Testbed {
        let started = Instant::now();
        check_prerequisites();
        sweep_once();
        let images = test_images_dir();

        let base = tempfile::Builder::new()
            .prefix(BASE_PREFIX)
            .tempdir_in("/tmp")
            .expect("creating the test bed dir in /tmp")
            .keep();
        // Written whole (a rename): another process's sweep reading it half-written would
        // take the bed for a dead one's and tear it down.
        fs::write(base.join("owner.new"), my_identity()).expect("writing the owner file");
        fs::rename(base.join("owner.new"), base.join("owner")).expect("writing the owner file");
        let slot = claim_slot(&base);
        let cni = CniSettings {
            bridge: bridge_name(slot),
            subnet: format!("{}.{}.{slot}.0/24", SUBNET_PREFIX[0], SUBNET_PREFIX[1]),
        };
        let mut layout = ContainerdLayout::new(&base);
        // The bed's own CDI dir: a test's DRA driver writes its specs there, never in
        // the host's /etc/cdi.
        layout.cdi_spec_dirs = vec![base.join("cdi")];
        let launch = Launch::new(binary, layout, cni);

        // From here on, a panic must still clean up: build the bed first, then fill it.
        let mut bed = Testbed {
            base,
            launch,
            slot,
            containerd: None,
            containerd_pid: 0,
            timings: StartTimings {
                containerd: Duration::ZERO,
                images: Duration::ZERO,
                total: Duration::ZERO,
            },
        };
        if let Some(mib) = image_fs_mib {
            fs::create_dir_all(&bed.launch.layout.root).expect("creating the containerd root");
            let ok = Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={mib}m,mode=0700"),
                    "oxtest-imagefs",
                ])
                .arg(&bed.launch.layout.root)
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "test bed: mounting a {mib} MiB tmpfs at {}",
                bed.launch.layout.root.display()
            );
        }
        let t = Instant::now();
        let containerd = ManagedContainerd::start(&bed.launch)
            .await
            .unwrap_or_else(|e| panic!("test bed: starting containerd failed: {e}"));
        bed.containerd_pid = containerd.pid();
        bed.containerd = Some(containerd);
        bed.timings.containerd = t.elapsed();

        let t = Instant::now();
        let results = import_images(
            &bed.launch.binary.sibling("ctr"),
            &bed.launch.layout.socket,
            &images,
        )
        .await;
        for (file, r) in &results {
            if let Err(e) = r {
                panic!("test bed: importing {} failed: {e}", file.display());
            }
        }
        assert!(
            results.len() >= 2,
            "test bed: expected the two test images in {}, found {}",
            images.display(),
            results.len()
        );
        bed.wait_images_visible().await;
        bed.timings.images = t.elapsed();
        bed.timings.total = started.elapsed();
        eprintln!(
            "testbed {}: bridge {} subnet {}; containerd {:?}, images {:?}, total {:?}",
            bed.base.display(),
            bed.launch.cni.bridge,
            bed.launch.cni.subnet,
            bed.timings.containerd,
            bed.timings.images,
            bed.timings.total
        );
        bed
    }

    /// The CRI plugin learns of imported images from containerd events, asynchronously:
    /// wait until it reports both, or the first RunPodSandbox may race it.
    async fn wait_images_visible(&self) {
        let mut images = self.images().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        for image in [PAUSE_IMAGE, BUSYBOX_IMAGE] {
            loop {
                let status = images
                    .image_status(ImageStatusRequest {
                        image: Some(ImageSpec {
                            image: image.to_string(),
                            ..Default::default()
                        }),
                        verbose: false,
                    })
                    .await
                    .unwrap_or_else(|e| panic!("test bed: ImageStatus {image}: {e}"));
                if status.into_inner().image.is_some() {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "test bed: the CRI does not see {image} after import"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Stop containerd (SIGTERM) and start it again on the same state, as after a node
    /// agent or runtime restart; running containers stay up through it. Clients made
    /// before reconnect by themselves.
    pub async fn restart_containerd(&mut self) {
        if let Some(c) = self.containerd.take() {
            c.stop().await;
        }
        let c = ManagedContainerd::start(&self.launch)
            .await
            .unwrap_or_else(|e| panic!("test bed: restarting containerd failed: {e}"));
        self.containerd_pid = c.pid();
        self.containerd = Some(c);
    }

    /// SIGKILL containerd, as a crash or the OOM killer would, then start it again on
    /// the same state, as its service manager would. Returns how long the start took.
    pub async fn kill_containerd(&mut self) -> Duration {
        if let Some(pid) = rustix::process::Pid::from_raw(self.containerd_pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        if let Some(c) = self.containerd.take() {
            // Reaps the killed process (it is gone, so nothing is waited for).
            c.stop().await;
        }
        let t = std::time::Instant::now();
        let c = ManagedContainerd::start(&self.launch)
            .await
            .unwrap_or_else(|e| panic!("test bed: restarting containerd failed: {e}"));
        self.containerd_pid = c.pid();
        self.containerd = Some(c);
        t.elapsed()
    }

    /// The CRI endpoint, `unix://<socket>`.
    pub fn endpoint(&self) -> String {
        self.launch.layout.endpoint()
    }

    /// containerd's gRPC socket (for `ctr -a`).
    pub fn socket(&self) -> &Path {
        &self.launch.layout.socket
    }

    /// The bed's private dir; put pod log dirs and other scratch files here.
    pub fn base_dir(&self) -> &Path {
        &self.base
    }

    /// The `ctr` of the bed's containerd release.
    pub fn ctr(&self) -> PathBuf {
        self.launch.binary.sibling("ctr")
    }

    pub fn layout(&self) -> &ContainerdLayout {
        &self.launch.layout
    }

    /// The one CDI spec dir this bed's containerd reads (none on 1.6, which has no CDI).
    pub fn cdi_dir(&self) -> &Path {
        &self.launch.layout.cdi_spec_dirs[0]
    }

    /// The bed's own bridge and pod subnet.
    pub fn cni(&self) -> &CniSettings {
        &self.launch.cni
    }

    /// The containerd release this bed runs, (major, minor).
    pub fn containerd_release(&self) -> (u32, u32) {
        self.launch.binary.release
    }

    pub fn containerd_pid(&self) -> u32 {
        self.containerd_pid
    }

    pub fn timings(&self) -> StartTimings {
        self.timings
    }

    async fn channel(&self) -> Channel {
        Endpoint::from_shared(self.endpoint())
            .expect("a valid endpoint")
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.endpoint()))
    }

    /// A connected CRI runtime client.
    pub async fn cri(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel().await)
    }

    /// containerd's CRI `Status`: its conditions, handlers and features.
    pub async fn runtime_status(&self) -> k8s_cri::v1::StatusResponse {
        self.cri()
            .await
            .status(k8s_cri::v1::StatusRequest { verbose: false })
            .await
            .expect("CRI Status")
            .into_inner()
    }

    /// What containerd's default runtime handler says it supports (CRI `Status`):
    /// recursive read-only mounts, user namespaces. Printed, since tests branch on it.
    pub async fn default_handler_features(&self) -> k8s_cri::v1::RuntimeHandlerFeatures {
        let status = self.runtime_status().await;
        eprintln!("runtime handlers: {:?}", status.runtime_handlers);
        (status.runtime_handlers.iter())
            .find(|h| h.name.is_empty())
            .and_then(|h| h.features)
            .unwrap_or_default()
    }

    /// A connected CRI image client.
    pub async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel().await)
    }

    /// A minimal sandbox config: pod `default/<name>` with a unique uid, logs under the
    /// bed's dir, host network or the bed's pod network.
    pub fn sandbox_config(&self, name: &str, host_network: bool) -> PodSandboxConfig {
        static N: AtomicU32 = AtomicU32::new(0);
        let uid = format!(
            "{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let log_directory = self.base.join("pods").join(&uid);
        fs::create_dir_all(&log_directory).expect("creating the pod log dir");
        let network = if host_network {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        };
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.to_string(),
                uid,
                namespace: "default".to_string(),
                attempt: 0,
            }),
            // As kubelet does: only pods with their own network get a hostname. runc refuses
            // a hostname without a private UTS namespace, which host-network pods lack.
            hostname: if host_network {
                String::new()
            } else {
                name.to_string()
            },
            log_directory: log_directory.to_string_lossy().into_owned(),
            labels: HashMap::from([("oxlet.test/bed".to_string(), self.slot.to_string())]),
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: network as i32,
                        pid: NamespaceMode::Container as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// A busybox container config running `command`; its log goes to `<name>.log` in the
/// sandbox's log directory.
pub fn busybox_container(name: &str, command: &[&str]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: BUSYBOX_IMAGE.to_string(),
            ..Default::default()
        }),
        command: command
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
        log_path: format!("{name}.log"),
        ..Default::default()
    }
}

impl Drop for Testbed {
    /// Tear everything down, also after a failed assertion. Runs on its own thread with its
    /// own runtime: Drop may run inside a (possibly current-thread) tokio runtime, where
    /// blocking on async work would deadlock.
    fn drop(&mut self) {
        let containerd = self.containerd.take();
        let base = self.base.clone();
        let endpoint = self.endpoint();
        let bridge = self.launch.cni.bridge.clone();
        let slot = self.slot;
        let result = std::thread::Builder::new()
            .name("testbed-cleanup".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("building the cleanup runtime");
                rt.block_on(async {
                    if containerd.is_some() {
                        remove_all_sandboxes(&endpoint).await;
                    }
                    if let Some(c) = containerd {
                        c.stop().await;
                    }
                });
                teardown_dir(&base);
                remove_cgroup_tree(cgroup_root_for(&base).trim_start_matches('/'));
                delete_link(&bridge);
                release_slot(slot);
            })
            .map(std::thread::JoinHandle::join);
        if !matches!(result, Ok(Ok(()))) {
            eprintln!("testbed {}: cleanup thread failed", self.base.display());
        }
    }
}

/// Stop and remove every pod sandbox (their containers go with them). Best effort, bounded.
async fn remove_all_sandboxes(endpoint: &str) {
    let work = async {
        let channel = Endpoint::from_shared(endpoint.to_string())
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        let mut cri = RuntimeServiceClient::new(channel);
        let list = cri
            .list_pod_sandbox(ListPodSandboxRequest { filter: None })
            .await
            .map_err(|e| e.to_string())?
            .into_inner();
        for sb in list.items {
            let id = sb.id;
            if let Err(e) = cri
                .stop_pod_sandbox(StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await
            {
                eprintln!("testbed cleanup: StopPodSandbox {id}: {}", e.message());
            }
            if let Err(e) = cri
                .remove_pod_sandbox(RemovePodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                })
                .await
            {
                eprintln!("testbed cleanup: RemovePodSandbox {id}: {}", e.message());
            }
        }
        Ok::<(), String>(())
    };
    match tokio::time::timeout(Duration::from_secs(60), work).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("testbed cleanup: removing sandboxes: {e}"),
        Err(_) => eprintln!("testbed cleanup: removing sandboxes timed out"),
    }
}

/// The environment variable naming the containerd binary the test beds (and the oxlets
/// the tests start with a managed runtime) run; unset: the `containerd` in PATH.
pub const CONTAINERD_ENV: &str = "OXLET_TEST_CONTAINERD";

/// The containerd the test beds run ([`CONTAINERD_ENV`], else PATH's), with its release;
/// its `ctr` and shim are the ones beside it.
pub fn containerd_binary() -> &'static ContainerdBinary {
    static BINARY: OnceLock<ContainerdBinary> = OnceLock::new();
    BINARY.get_or_init(|| {
        let explicit = std::env::var_os(CONTAINERD_ENV).map(PathBuf::from);
        // Its own thread and runtime: the caller may be inside a test's runtime.
        let binary = std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime to read the containerd release")
                    .block_on(ContainerdBinary::locate(explicit.as_deref()))
            })
            .join()
            .expect("reading the containerd release")
        });
        let binary = binary.unwrap_or_else(|e| {
            panic!(
                "test bed: {e}; run scripts/install-test-deps.sh as root, or set {CONTAINERD_ENV}"
            )
        });
        eprintln!(
            "testbed: containerd {} ({})",
            binary.version,
            binary.path.display()
        );
        binary
    })
}

/// `--containerd-binary` for an oxlet the test starts with a managed runtime, so that it
/// runs the same release as the test beds.
pub fn containerd_binary_flag() -> String {
    format!("--containerd-binary={}", containerd_binary().path.display())
}

fn check_prerequisites() {
    let mut missing = Vec::new();
    for bin in ["runc", "ip"] {
        if find_in_path(bin).is_none() {
            missing.push(format!("{bin} (in PATH)"));
        }
    }
    let binary = containerd_binary();
    for tool in ["containerd-shim-runc-v2", "ctr"] {
        if !binary.sibling(tool).is_file() {
            missing.push(format!(
                "{tool} (beside {} or in PATH)",
                binary.path.display()
            ));
        }
    }
    for plugin in ["bridge", "host-local", "loopback"] {
        let p = Path::new(CNI_BIN_DIR).join(plugin);
        if !p.exists() {
            missing.push(p.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "the real-runtime test bed needs {}; run scripts/install-test-deps.sh as root \
         (containerd runc containernetworking-plugins busybox-static iproute2)",
        missing.join(", ")
    );
}

// ---- owners: pid plus start time, so a reused pid is not mistaken for the owner ----------

fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces;
    // starttime is field 22 overall, the 20th after ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn my_identity() -> String {
    let pid = std::process::id();
    format!("{pid} {}\n", start_time(pid).unwrap_or(0))
}

/// Whether the owner recorded in `text` ("pid starttime") is still running.
fn owner_alive(text: &str) -> bool {
    let mut it = text.split_whitespace();
    let (Some(Ok(pid)), Some(Ok(st))) = (
        it.next().map(str::parse::<u32>),
        it.next().map(str::parse::<u64>),
    ) else {
        return false;
    };
    start_time(pid) == Some(st)
}

// ---- network slots ---------------------------------------------------------------------

fn bridge_name(slot: u32) -> String {
    format!("{BRIDGE_PREFIX}{slot}")
}

fn slot_file(slot: u32) -> PathBuf {
    Path::new(SLOT_DIR).join(format!("slot-{slot}"))
}

fn lock_slots() -> fs::File {
    fs::create_dir_all(SLOT_DIR).expect("creating the slot dir");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(Path::new(SLOT_DIR).join("lock"))
        .expect("opening the slot lock");
    f.lock().expect("locking the slot dir");
    f
}

/// Whether a route into 10.234.<slot>.0/24 exists already (someone else's network).
fn subnet_routed(slot: u32) -> bool {
    let Ok(routes) = fs::read_to_string("/proc/net/route") else {
        return false;
    };
    routes.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let Some(dest) = f.get(1).and_then(|d| u32::from_str_radix(d, 16).ok()) else {
            return false;
        };
        // /proc/net/route holds addresses in host (little-endian) byte order.
        let b = dest.to_le_bytes();
        b[0] == SUBNET_PREFIX[0] && b[1] == SUBNET_PREFIX[1] && u32::from(b[2]) == slot
    })
}

/// Claim a free slot: no live owner, no existing route. Starts at a pid-derived slot so
/// that concurrent processes spread out.
fn claim_slot(base: &Path) -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let _lock = lock_slots();
    let start = (std::process::id() * 7 + COUNTER.fetch_add(1, Ordering::Relaxed)) % SLOTS;
    for i in 0..SLOTS {
        let slot = (start + i) % SLOTS;
        let taken = fs::read_to_string(slot_file(slot)).is_ok_and(|t| owner_alive(&t));
        if taken || subnet_routed(slot) {
            continue;
        }
        let mut f = fs::File::create(slot_file(slot)).expect("writing a slot file");
        writeln!(f, "{}{}", my_identity(), base.display()).expect("writing a slot file");
        return slot;
    }
    panic!("test bed: all {SLOTS} network slots in {SLOT_DIR} are in use");
}

fn release_slot(slot: u32) {
    let _lock = lock_slots();
    let _ = fs::remove_file(slot_file(slot));
}

/// A network slot for an oxlet that runs its own (managed) containerd: a bridge and
/// subnet no other test shares (`--managed-cni-bridge`, `--pod-cidr`). A managed
/// containerd killed with its oxlet leaves its pods' network namespaces pinned in
/// /run/netns, still holding their addresses; in a shared subnet the next test's pods
/// would be handed the same addresses and their probes answered by the dead ones. On
/// drop the slot's namespaces and bridge go and the claim is released (and the sweep
/// does the same for a test that died).
pub struct NetworkSlot(u32);

impl NetworkSlot {
    pub fn claim(base: &Path) -> NetworkSlot {
        sweep_once();
        NetworkSlot(claim_slot(base))
    }

    pub fn bridge(&self) -> String {
        bridge_name(self.0)
    }

    pub fn subnet(&self) -> String {
        format!("{}.{}.{}.0/24", SUBNET_PREFIX[0], SUBNET_PREFIX[1], self.0)
    }
}

impl Drop for NetworkSlot {
    fn drop(&mut self) {
        remove_netns_of_slots(&[self.0]);
        delete_link(&bridge_name(self.0));
        release_slot(self.0);
    }
}

// ---- teardown helpers ------------------------------------------------------------------

fn delete_link(name: &str) {
    let _ = Command::new("ip")
        .args(["link", "del", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Undo `\040`-style escapes of /proc/self/mountinfo.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 4])
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points at or under `dir`, deepest (latest mounted) first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape_mount(m)))
        .filter(|m| m.starts_with(dir))
        .collect();
    v.reverse();
    v
}

/// Every live (non-zombie) process id with its parent's.
fn process_table() -> Vec<(u32, u32)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
            let state = *fields.first()?;
            let ppid = fields.get(1)?.parse().ok()?;
            let flags: u64 = fields.get(6)?.parse().ok()?;
            // Zombies and exiting tasks are past killing. A killed pid-namespace init stays
            // "exiting" until all its namespace's tasks are reaped, and PID 1 here reaps
            // orphans only now and then: waiting for it would take seconds.
            const PF_EXITING: u64 = 0x4;
            (state != "Z" && state != "X" && flags & PF_EXITING == 0).then_some((pid, ppid))
        })
        .collect()
}

/// Container init pids recorded by the shims (`<state>/io.containerd.runtime.v2.task/<ns>/<id>/init.pid`),
/// kept only while that pid still sits in a cgroup named after the container (pid reuse).
fn recorded_init_pids(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let tasks = dir.join("state/io.containerd.runtime.v2.task");
    for ns in fs::read_dir(&tasks).into_iter().flatten().flatten() {
        for task in fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            let id = task.file_name().to_string_lossy().into_owned();
            let Some(pid) = fs::read_to_string(task.path().join("init.pid"))
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
            else {
                continue;
            };
            if fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(&id)) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Processes that belong to the bed in `dir`: everything started with the dir on its
/// command line (containerd `--config`, shims `-address`), all their descendants (the
/// containers), and container inits whose shim is already gone. (A container's
/// `/proc/<pid>/root` cannot identify it: in its own mount namespace it reads `/`.)
fn processes_of(dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let needle = dir.to_string_lossy().into_owned();
    let table = process_table();
    let mut found: Vec<u32> = table
        .iter()
        .map(|&(pid, _)| pid)
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                c.split(|&b| b == 0)
                    .any(|arg| String::from_utf8_lossy(arg).contains(&needle))
            })
        })
        .collect();
    found.extend(
        recorded_init_pids(dir)
            .into_iter()
            .filter(|pid| table.iter().any(|&(p, _)| p == *pid)),
    );
    // Descendants, to a fixed point.
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for &(pid, ppid) in &table {
            if ppid == parent && pid != me && !found.contains(&pid) {
                found.push(pid);
            }
        }
        i += 1;
    }
    found
}

fn kill_processes_of(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let pids = processes_of(dir);
        if pids.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            eprintln!(
                "testbed cleanup: processes of {} survive SIGKILL: {pids:?}",
                dir.display()
            );
            return;
        }
        eprintln!(
            "testbed cleanup: killing processes left in {}: {pids:?}",
            dir.display()
        );
        for pid in pids {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kill what still runs from `dir`, unmount what is mounted under it, remove it.
pub fn teardown_dir(dir: &Path) {
    kill_processes_of(dir);
    for m in mounts_under(dir) {
        let ok = Command::new("umount")
            .arg("-l")
            .arg(&m)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("testbed cleanup: umount {} failed", m.display());
        }
    }
    if let Err(e) = fs::remove_dir_all(dir)
        && dir.exists()
    {
        eprintln!("testbed cleanup: removing {}: {e}", dir.display());
    }
}

/// Network namespaces (CRI pins them in /run/netns) whose pod address lies in one of
/// `slots`' subnets: leftovers of sandboxes that were never removed.
fn netns_of_slots(slots: &[u32]) -> Vec<String> {
    let Ok(entries) = fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for e in entries.filter_map(std::result::Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(out) = Command::new("ip")
            .args(["-n", &name, "-4", "-o", "addr", "show"])
            .stderr(Stdio::null())
            .output()
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let ours = slots
            .iter()
            .any(|s| text.contains(&format!(" {}.{}.{s}.", SUBNET_PREFIX[0], SUBNET_PREFIX[1])));
        if ours {
            found.push(name);
        }
    }
    found
}

/// Unpins the network namespaces of `slots` ([`netns_of_slots`]).
fn remove_netns_of_slots(slots: &[u32]) {
    for ns in netns_of_slots(slots) {
        eprintln!("testbed cleanup: removing leftover netns {ns}");
        let _ = Command::new("ip")
            .args(["netns", "delete", &ns])
            .stderr(Stdio::null())
            .status();
    }
}

/// [`sweep_leftovers`], once per test process (before its first bed or network slot).
fn sweep_once() {
    static SWEEP: Once = Once::new();
    SWEEP.call_once(sweep_leftovers);
}

/// Remove what earlier, dead test processes left behind: their containerds, shims and
/// containers, mounts and dirs under `/tmp/oxlet-testbed-*`, `oxt*` bridges, pinned pod
/// network namespaces and slot claims. Beds of live processes are left alone. Runs once
/// per process at the first [`Testbed::start`]; safe to call any time.
pub fn sweep_leftovers() {
    // Dirs whose owner is gone (a dir without an owner file may be one being created: give
    // it a minute).
    if let Ok(entries) = fs::read_dir("/tmp") {
        for e in entries.filter_map(std::result::Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(BASE_PREFIX) {
                continue;
            }
            let dir = e.path();
            let stale = match fs::read_to_string(dir.join("owner")) {
                Ok(owner) => !owner_alive(&owner),
                Err(_) => fs::metadata(&dir)
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(60)),
            };
            if stale {
                eprintln!("testbed sweep: removing leftover {}", dir.display());
                teardown_dir(&dir);
            }
        }
    }
    // Cgroup roots (`--cgroup-root=/oxtest-<dir name>`) of test dirs that are gone.
    for name in cgroup_roots_of_tests() {
        let dir = name.strip_prefix(CGROUP_ROOT_PREFIX).unwrap_or(&name);
        if !Path::new("/tmp").join(dir).exists() {
            eprintln!("testbed sweep: removing leftover cgroup tree /{name}");
            remove_cgroup_tree(&name);
        }
    }
    // containerds/shims whose dir is already gone but which still run.
    if let Ok(entries) = fs::read_dir("/proc") {
        for pid in entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
            let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let is_runtime = args.first().is_some_and(|a| a.contains("containerd"));
            let dir = args.iter().find_map(|a| {
                let i = a.find(&format!("/tmp/{BASE_PREFIX}"))?;
                let rest = &a[i..];
                let end = rest[5..].find('/').map_or(rest.len(), |j| j + 5);
                Some(PathBuf::from(&rest[..end]))
            });
            if let (true, Some(dir)) = (is_runtime, dir)
                && !dir.exists()
            {
                eprintln!("testbed sweep: killing leftover {pid} ({})", args.join(" "));
                if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                }
            }
        }
    }
    // Slots whose owner is gone: their netns, bridge and claim.
    let _lock = lock_slots();
    let mut dead = Vec::new();
    for slot in 0..SLOTS {
        let claimed_alive = fs::read_to_string(slot_file(slot)).is_ok_and(|t| owner_alive(&t));
        if !claimed_alive {
            dead.push(slot);
        }
    }
    remove_netns_of_slots(&dead);
    let links = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for line in links.lines() {
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        let Some(slot) = name
            .strip_prefix(BRIDGE_PREFIX)
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if dead.contains(&slot) {
            eprintln!("testbed sweep: deleting leftover bridge {name}");
            delete_link(name);
        }
    }
    for slot in dead {
        let _ = fs::remove_file(slot_file(slot));
    }
}

/// The cgroup mount points: each v1 hierarchy (`/sys/fs/cgroup/<controller>`) or, on a
/// pure v2 host, the mount itself.
fn cgroup_mounts() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    fs::read_dir(root)
        .map(|d| {
            d.filter_map(std::result::Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_dir() && !p.is_symlink())
                .collect()
        })
        .unwrap_or_default()
}

/// Test cgroup roots found below the cgroup mounts (oxlet runs in tests with
/// `--cgroup-root=/<test dir name>`).
fn cgroup_roots_of_tests() -> Vec<String> {
    let mut names: Vec<String> = cgroup_mounts()
        .iter()
        .filter_map(|m| fs::read_dir(m).ok())
        .flatten()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(CGROUP_ROOT_PREFIX))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Test cgroup roots are `/oxtest-<the test's dir below /tmp>`: unique per test, and
/// a sweep can tell a leftover (its dir is gone) from one in use.
pub const CGROUP_ROOT_PREFIX: &str = "oxtest-";

/// The `--cgroup-root` for a test whose files live below `/tmp/<dir>/…`.
pub fn cgroup_root_for(path: &Path) -> String {
    let dir = path
        .strip_prefix("/tmp")
        .ok()
        .and_then(|rest| rest.components().next())
        .and_then(|c| c.as_os_str().to_str())
        .unwrap_or_else(|| panic!("{} is not below /tmp", path.display()));
    format!("/{CGROUP_ROOT_PREFIX}{dir}")
}

/// A cgroup path of the test's own, `/oxtest-<a new dir below /tmp>`, with that dir,
/// which must live as long as the cgroup: another test process's sweep takes an
/// `oxtest-` cgroup whose dir is gone for a leftover and removes it.
pub fn own_test_cgroup(prefix: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("creating a dir in /tmp for a test cgroup");
    let cgroup = cgroup_root_for(dir.path());
    (dir, cgroup)
}

/// Removes the cgroup tree `/<name>` from every hierarchy: kills what is left inside,
/// then removes the cgroups deepest first (a cgroup directory goes with `rmdir`).
/// Makes the top-level cgroup `name` in the hierarchies the stats are read from (v1:
/// cpu, cpuacct, memory and pids; cpuset would want its cpus and mems set first) and
/// moves `pid` into it (remove it with [`remove_cgroup_tree`] once `pid` is gone).
pub fn move_into_cgroup(name: &str, pid: u32) {
    assert!(!name.is_empty() && !name.contains('/'), "{name:?}");
    let v1 = ["cpu", "cpuacct", "memory", "pids"];
    let stats = cgroup_mounts().into_iter().filter(|m| {
        m.join("cgroup.controllers").exists()
            || m.file_name()
                .is_some_and(|n| v1.contains(&n.to_string_lossy().as_ref()))
    });
    for mount in stats {
        let dir = mount.join(name);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        fs::write(dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", dir.display()));
    }
}

/// Makes the cgroup root `root` (a `--cgroup-root`, `/oxtest-<dir>`) before oxlet
/// starts, as a node's service manager would: oxlet, as kubelet, refuses to start
/// without it. v1: the cgroup in every hierarchy, its cpuset given the mount's cpus
/// and memory nodes (a new v1 cpuset has none). v2: the root's controllers enabled
/// for its children first (kind's `create-kubelet-cgroup-v2` does the same), so the
/// new cgroup is offered what kubelet needs. Already there is fine;
/// [`remove_cgroup_tree`] takes it away again.
pub fn create_cgroup_root(root: &str) {
    let name = root.trim_start_matches('/');
    assert!(
        !name.is_empty() && !name.contains('/') && name != "." && name != "..",
        "{root:?}"
    );
    for mount in cgroup_mounts() {
        let v2 = mount.join("cgroup.controllers").exists();
        if v2 && mount != Path::new("/sys/fs/cgroup") {
            // Hybrid's `unified`: neither kubelet nor oxlet looks there.
            continue;
        }
        if v2 {
            let offered = fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
            for c in offered.split_whitespace() {
                if let Err(e) = fs::write(mount.join("cgroup.subtree_control"), format!("+{c}")) {
                    eprintln!("enabling the {c} controller at {}: {e}", mount.display());
                }
            }
        }
        let dir = mount.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("creating the cgroup root {}: {e}", dir.display()),
        }
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let own = fs::read_to_string(dir.join(file)).unwrap_or_default();
            let parent = fs::read_to_string(mount.join(file)).unwrap_or_default();
            if !v2 && own.trim().is_empty() && !parent.trim().is_empty() {
                fs::write(dir.join(file), parent.trim())
                    .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()));
            }
        }
    }
}

pub fn remove_cgroup_tree(name: &str) {
    assert!(
        !name.is_empty() && !name.contains('/') && name != "." && name != "..",
        "{name:?}"
    );
    for mount in cgroup_mounts() {
        let top = mount.join(name);
        if !top.is_dir() {
            continue;
        }
        let mut dirs = Vec::new();
        let mut stack = vec![top];
        while let Some(d) = stack.pop() {
            if let Ok(entries) = fs::read_dir(&d) {
                for e in entries.filter_map(std::result::Result::ok) {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
            }
            dirs.push(d);
        }
        for d in dirs.iter().rev() {
            for _ in 0..50 {
                let procs = fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                let pids: Vec<i32> = procs
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    if let Some(p) = rustix::process::Pid::from_raw(pid) {
                        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Err(e) = fs::remove_dir(d)
                && d.exists()
            {
                eprintln!("testbed cleanup: removing cgroup {}: {e}", d.display());
            }
        }
    }
}

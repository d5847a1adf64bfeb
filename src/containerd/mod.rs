//! oxlet's managed containerd (as k3s does it).
//!
//! When oxlet is started without `--container-runtime-endpoint` and nothing answers at the
//! default socket, it runs a containerd of its own under `<root-dir>/containerd`: its own
//! root, state, sockets, runc root and CNI config, so it never shares state with another
//! containerd on the machine. The integration test bed uses the same code, one containerd
//! per test bed.
//!
//! Settings here are the ones this kind of machine needs (see `shared/TESTBED.md`):
//! `restrict_oom_score_adj` (no CAP_SYS_RESOURCE), an explicit `default_runtime_name`, a local
//! sandbox image (no registry), and a bridge + host-local CNI config (loopback alone is rejected).
//!
//! It talks to the CRI client only to learn that containerd answers ([`probe_cri`]);
//! it decides nothing about pods. [`supervise`] keeps it running, [`import_images`]
//! loads image archives into it.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod binary;
mod config;
mod images;
mod supervisor;

pub use binary::{ConfigFormat, ContainerdBinary};
pub use config::{ConfigInputs, render_cni_conflist, render_config, write_config};
pub use images::{ImportError, import_images};
pub use supervisor::{
    RESTART_BACKOFF_INITIAL, RESTART_BACKOFF_MAX, RESTART_BACKOFF_RESET, next_backoff, supervise,
};

use k8s_cri::v1::VersionResponse;
use tokio::process::{Child, Command};

use crate::cri::{CriError, RemoteRuntime};

/// The CRI sandbox ("pause") image: a local ref, built by `scripts/build-images.sh`.
pub const DEFAULT_SANDBOX_IMAGE: &str = "localhost/oxlet/pause:1";
/// Where Debian's containernetworking-plugins put the CNI binaries.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// The containerd namespace the CRI plugin uses; images must be imported into it.
pub const CRI_NAMESPACE: &str = "k8s.io";
/// How long [`ManagedContainerd::start`] waits for the CRI to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`ManagedContainerd::stop`] waits after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(5);
/// Name of the CNI config file written into the layout's conf dir.
pub const CNI_CONFLIST_NAME: &str = "10-oxlet.conflist";

/// containerd refuses unix socket paths longer than this (it checks against the BSD limit,
/// stricter than Linux's 108).
pub const MAX_SOCKET_PATH: usize = 104;

const POLL: Duration = Duration::from_millis(50);
const LOG_TAIL_LINES: usize = 25;

/// The pod network of a managed containerd. Configurable so that parallel test beds (and an
/// oxlet beside a test bed) never share a bridge or a subnet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniSettings {
    /// Linux bridge name (at most 15 bytes, the kernel's IFNAMSIZ - 1).
    pub bridge: String,
    /// IPv4 subnet in CIDR form; the bridge gets its first address as the pods' gateway.
    pub subnet: String,
}

impl Default for CniSettings {
    fn default() -> Self {
        CniSettings {
            bridge: "oxlet0".to_string(),
            subnet: "10.88.0.0/16".to_string(),
        }
    }
}

/// Every path a managed containerd uses, all under one base directory, so that one
/// `rm -rf` (after unmounting) removes all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerdLayout {
    /// The base directory (oxlet: `<root-dir>/containerd`).
    pub base: PathBuf,
    /// containerd's TOML config, rewritten at every start.
    pub config: PathBuf,
    /// containerd `root` (content store, snapshots, metadata DB).
    pub root: PathBuf,
    /// containerd `state` (sockets of shims, rootfs mounts, fifos).
    pub state: PathBuf,
    /// The gRPC (CRI) socket.
    pub socket: PathBuf,
    /// The ttrpc socket (shims call back on it).
    pub ttrpc_socket: PathBuf,
    /// containerd's stdout and stderr, appended.
    pub log: PathBuf,
    /// CNI config dir (holds [`CNI_CONFLIST_NAME`]).
    pub cni_conf_dir: PathBuf,
    /// host-local IPAM allocations.
    pub cni_data_dir: PathBuf,
    /// runc's state root (`--root`), so `runc list` of other runtimes never sees ours.
    pub runc_root: PathBuf,
    /// The `opt` plugin's dir (default `/opt/containerd`, which we must not touch).
    pub opt_dir: PathBuf,
    /// The registry hosts dir (the CRI's `registry.config_path`; kind's
    /// `/etc/containerd/certs.d`): `<host[:port]>/hosts.toml` with a registry's CA,
    /// mirrors or plain HTTP, read at each pull.
    pub certs_dir: PathBuf,
    /// Where CDI specs are read (DRA drivers and device plugins write them): containerd's
    /// own defaults `/etc/cdi` and `/var/run/cdi`, where drivers on a node expect them.
    /// Those under `base` are created with the layout; the others are the host's.
    pub cdi_spec_dirs: Vec<PathBuf>,
}

impl ContainerdLayout {
    /// All paths derived from `base`. Keep `base` short: containerd refuses socket paths
    /// over [`MAX_SOCKET_PATH`] (104) bytes, and the ttrpc socket is `base` + 22 bytes.
    pub fn new(base: impl Into<PathBuf>) -> Self {
        let base = base.into();
        ContainerdLayout {
            config: base.join("config.toml"),
            root: base.join("root"),
            state: base.join("state"),
            socket: base.join("containerd.sock"),
            ttrpc_socket: base.join("containerd.sock.ttrpc"),
            log: base.join("containerd.log"),
            cni_conf_dir: base.join("cni/net.d"),
            cni_data_dir: base.join("cni/ipam"),
            runc_root: base.join("runc"),
            opt_dir: base.join("opt"),
            certs_dir: base.join("certs.d"),
            cdi_spec_dirs: vec![PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")],
            base,
        }
    }

    /// The CRI endpoint, `unix://<socket>`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Create the directories containerd and CNI expect to exist before start. The
    /// root (images, snapshots) and state (sockets, task bundles) are 0711 as
    /// containerd makes them: other users may pass through, not list.
    pub fn create_dirs(&self) -> io::Result<()> {
        for dir in [
            &self.base,
            &self.root,
            &self.state,
            &self.cni_conf_dir,
            &self.cni_data_dir,
            &self.runc_root,
            &self.opt_dir,
            &self.certs_dir,
        ] {
            fs::create_dir_all(dir)?;
        }
        for dir in self
            .cdi_spec_dirs
            .iter()
            .filter(|d| d.starts_with(&self.base))
        {
            fs::create_dir_all(dir)?;
        }
        for dir in [&self.root, &self.state] {
            let mode = <fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o711);
            fs::set_permissions(dir, mode)?;
        }
        Ok(())
    }
}

/// Why a managed containerd could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    #[error(
        "containerd binary not found in PATH; install the containerd package, or pass --containerd-binary or --container-runtime-endpoint"
    )]
    BinaryNotFound,
    #[error("cannot tell which containerd release {} is: `--version` printed {output:?}", binary.display())]
    UnknownVersion { binary: PathBuf, output: String },
    #[error("socket path {} is longer than containerd accepts ({MAX_SOCKET_PATH} bytes); use a shorter --root-dir", .0.display())]
    SocketPathTooLong(PathBuf),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("containerd exited during start-up ({status}); last lines of {}:\n{tail}", log.display())]
    ExitedEarly {
        status: ExitStatus,
        log: PathBuf,
        tail: String,
    },
    #[error("containerd did not answer a CRI Version call on {} within {timeout:?} (last error: {last_error}); last lines of {}:\n{tail}", socket.display(), log.display())]
    StartTimeout {
        socket: PathBuf,
        timeout: Duration,
        last_error: String,
        log: PathBuf,
        tail: String,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ContainerdError {
    let context = context.into();
    move |source| ContainerdError::Io { context, source }
}

/// The first executable file called `name` in `$PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| {
            fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// One CRI `Version` call through the one client (`RemoteRuntime`), bounded by
/// `timeout`: whether a runtime answers at `endpoint`.
pub async fn probe_cri(endpoint: &str, timeout: Duration) -> Result<VersionResponse, CriError> {
    let connect = RemoteRuntime::connect(endpoint, timeout, timeout);
    match tokio::time::timeout(timeout, connect).await {
        Ok(res) => res.map(|(_, version)| version),
        Err(_) => Err(CriError::Connect {
            endpoint: endpoint.to_string(),
            reason: format!("no answer within {timeout:?}"),
        }),
    }
}

/// The last `n` lines of a (possibly large) log file; "" if unreadable.
pub fn log_tail(path: &Path, n: usize) -> String {
    const MAX: u64 = 64 * 1024;
    let Ok(mut f) = fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX && f.seek(SeekFrom::Start(len - MAX)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    if f.read_to_end(&mut buf).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A containerd process oxlet started and owns.
///
/// It dies with oxlet: the child gets SIGKILL as its parent-death signal, and is killed if
/// this value is dropped. Containers do not die with it (their shims are separate
/// processes), just as with a system containerd.
///
/// The parent-death signal follows the *thread* that spawned the child (prctl semantics):
/// call [`ManagedContainerd::start`] from a thread that lives as long as containerd should
/// (a runtime's worker or main thread, a test's own thread), never from `spawn_blocking`.
#[derive(Debug)]
pub struct ManagedContainerd {
    child: Child,
    pid: u32,
    launch: Launch,
}

/// Everything a managed containerd is started from, kept so that a restart starts the
/// same binary with the same config.
#[derive(Debug, Clone)]
pub struct Launch {
    pub binary: ContainerdBinary,
    pub layout: ContainerdLayout,
    pub cni: CniSettings,
    /// The CRI sandbox ("pause") image.
    pub sandbox_image: String,
}

impl Launch {
    /// `binary` on `layout` and `cni`, with the default sandbox image.
    pub fn new(binary: ContainerdBinary, layout: ContainerdLayout, cni: CniSettings) -> Self {
        Launch {
            binary,
            layout,
            cni,
            sandbox_image: DEFAULT_SANDBOX_IMAGE.to_string(),
        }
    }

    /// The inputs of this launch's containerd config.
    pub fn config_inputs(&self) -> ConfigInputs<'_> {
        ConfigInputs {
            format: self.binary.config_format(),
            release: self.binary.release,
            layout: &self.layout,
            cni: &self.cni,
            sandbox_image: &self.sandbox_image,
        }
    }
}

impl ManagedContainerd {
    /// Write the config in the format `launch.binary` reads and start it; returns once
    /// the CRI answers a `Version` call.
    pub async fn start(launch: &Launch) -> Result<Self, ContainerdError> {
        let started = Instant::now();
        let layout = &launch.layout;
        for socket in [&layout.socket, &layout.ttrpc_socket] {
            if socket.as_os_str().len() > MAX_SOCKET_PATH {
                return Err(ContainerdError::SocketPathTooLong(socket.clone()));
            }
        }
        write_config(&launch.config_inputs()).map_err(io_err(format!(
            "writing containerd config under {}",
            layout.base.display()
        )))?;
        let child = spawn(launch)?;
        let pid = child.id().unwrap_or(0);
        tracing::debug!(
            pid,
            binary = %launch.binary.path.display(),
            version = %launch.binary.version,
            config = %layout.config.display(),
            "spawned managed containerd"
        );
        let mut managed = ManagedContainerd {
            child,
            pid,
            launch: launch.clone(),
        };
        managed.wait_ready(started).await?;
        Ok(managed)
    }

    /// Poll until the CRI answers, containerd exits, or [`START_TIMEOUT`] passes.
    async fn wait_ready(&mut self, started: Instant) -> Result<(), ContainerdError> {
        let layout = &self.launch.layout;
        let endpoint = layout.endpoint();
        let deadline = started + START_TIMEOUT;
        let mut last_error = String::from("socket not created yet");
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(ContainerdError::ExitedEarly {
                    status,
                    log: layout.log.clone(),
                    tail: log_tail(&layout.log, LOG_TAIL_LINES),
                });
            }
            if layout.socket.exists() {
                match probe_cri(&endpoint, Duration::from_secs(2)).await {
                    Ok(v) => {
                        tracing::info!(
                            pid = self.pid,
                            endpoint = %endpoint,
                            runtime = %format!("{} {}", v.runtime_name, v.runtime_version),
                            configVersion = self.launch.binary.config_format().number(),
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "managed containerd is ready"
                        );
                        return Ok(());
                    }
                    Err(e) => last_error = e.to_string(),
                }
            }
            if Instant::now() >= deadline {
                let _ = self.child.start_kill();
                return Err(ContainerdError::StartTimeout {
                    socket: layout.socket.clone(),
                    timeout: START_TIMEOUT,
                    last_error,
                    log: layout.log.clone(),
                    tail: log_tail(&layout.log, LOG_TAIL_LINES),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The CRI endpoint, `unix://<socket>`.
    pub fn endpoint(&self) -> String {
        self.launch.layout.endpoint()
    }

    /// The gRPC socket path (for `ctr -a`).
    pub fn socket(&self) -> &Path {
        &self.launch.layout.socket
    }

    /// The layout this containerd runs with.
    pub fn layout(&self) -> &ContainerdLayout {
        &self.launch.layout
    }

    /// What this containerd was started from.
    pub fn launch(&self) -> &Launch {
        &self.launch
    }

    /// containerd's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Wait until containerd exits on its own (for a supervisor's `select!`).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// SIGTERM, up to [`STOP_GRACE`] for a clean exit, then SIGKILL. Running containers
    /// stay up (their shims outlive containerd).
    ///
    /// Polls `try_wait` rather than awaiting the child, so this also works from another
    /// tokio runtime than the one that started containerd (e.g. in a `Drop` helper thread).
    pub async fn stop(mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if self.poll_exit(STOP_GRACE).await {
            return;
        }
        tracing::warn!(
            pid = self.pid,
            "managed containerd ignored SIGTERM for {}; killing it",
            crate::duration::format_go_duration(STOP_GRACE)
        );
        let _ = self.child.start_kill();
        self.poll_exit(Duration::from_secs(5)).await;
    }

    async fn poll_exit(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    tracing::debug!(pid = self.pid, %status, "managed containerd exited");
                    return true;
                }
                Ok(None) => {}
                Err(_) => return true, // already reaped
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Start `launch.binary` on its config, output appended to the layout's log. Its PATH
/// starts with the binary's own dir, so the shim it runs is of the same release.
fn spawn(launch: &Launch) -> Result<Child, ContainerdError> {
    let layout = &launch.layout;
    let binary = &launch.binary.path;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&layout.log)
        .map_err(io_err(format!("opening {}", layout.log.display())))?;
    let log_err = log
        .try_clone()
        .map_err(io_err(format!("opening {}", layout.log.display())))?;

    let mut cmd = Command::new(binary);
    cmd.arg("--config")
        .arg(&layout.config)
        .env("PATH", path_with_first(binary.parent()))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Its own process group: a Ctrl-C meant for oxlet must not reach containerd
        // directly; oxlet decides when it stops.
        .process_group(0)
        .kill_on_drop(true);
    let parent = rustix::process::getpid();
    // SAFETY: only async-signal-safe raw syscalls (prctl, getppid) run between fork and exec.
    // (One of the three places oxlet allows `unsafe`: `pre_exec` has no safe form.)
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The parent may have died before prctl took effect: ESRCH, an
            // error that allocates nothing (nothing may, between fork and exec).
            if rustix::process::getppid() != Some(parent) {
                return Err(rustix::io::Errno::SRCH.into());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(io_err(format!("spawning {}", binary.display())))
}

/// This process's PATH with `dir` first (when it is not there already).
fn path_with_first(dir: Option<&Path>) -> OsString {
    let current = std::env::var_os("PATH").unwrap_or_default();
    let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) else {
        return current;
    };
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&current).collect();
    if dirs.first().map(PathBuf::as_path) == Some(dir) {
        return current;
    }
    dirs.insert(0, dir.to_path_buf());
    std::env::join_paths(dirs).unwrap_or(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> ContainerdLayout {
        ContainerdLayout::new("/var/lib/oxlet/containerd")
    }

    #[test]
    fn root_and_state_are_passable_not_listable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let layout = ContainerdLayout::new(dir.path().join("c"));
        layout.create_dirs().unwrap();
        for d in [&layout.root, &layout.state] {
            let mode = fs::metadata(d).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o711, "{}", d.display());
        }
    }

    #[test]
    fn layout_paths_live_under_base() {
        let l = layout();
        assert_eq!(
            l.socket,
            Path::new("/var/lib/oxlet/containerd/containerd.sock")
        );
        assert_eq!(
            l.endpoint(),
            "unix:///var/lib/oxlet/containerd/containerd.sock"
        );
        for p in [
            &l.config,
            &l.root,
            &l.state,
            &l.ttrpc_socket,
            &l.log,
            &l.cni_conf_dir,
            &l.cni_data_dir,
            &l.runc_root,
            &l.opt_dir,
        ] {
            assert!(p.starts_with(&l.base), "{} not under base", p.display());
            assert_ne!(p, &l.base);
        }
    }

    #[test]
    fn conflist_is_bridge_host_local_and_loopback() {
        let l = layout();
        let cni = CniSettings {
            bridge: "oxt7".into(),
            subnet: "10.234.7.0/24".into(),
        };
        let v: serde_json::Value =
            serde_json::from_str(&render_cni_conflist(&l, &cni)).expect("valid JSON");
        let plugins = v["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 2);
        assert_eq!(plugins[0]["type"], "bridge");
        assert_eq!(plugins[0]["bridge"], "oxt7");
        assert_eq!(plugins[0]["isGateway"], true);
        assert_eq!(plugins[0]["ipMasq"], false);
        assert_eq!(plugins[0]["ipam"]["type"], "host-local");
        assert_eq!(
            plugins[0]["ipam"]["ranges"][0][0]["subnet"],
            "10.234.7.0/24"
        );
        assert_eq!(
            plugins[0]["ipam"]["dataDir"],
            "/var/lib/oxlet/containerd/cni/ipam"
        );
        assert_eq!(plugins[1]["type"], "loopback");
    }

    #[test]
    fn default_cni_settings() {
        let d = CniSettings::default();
        assert_eq!(d.bridge, "oxlet0");
        assert_eq!(d.subnet, "10.88.0.0/16");
    }

    #[test]
    fn tail_of_log() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        fs::write(&p, text).unwrap();
        assert_eq!(log_tail(&p, 2), "line 98\nline 99");
        assert_eq!(log_tail(&dir.path().join("missing"), 2), "");
    }
}

//! The VM test bed's harness: a kind-shaped host (Debian 12, systemd 252 as PID 1,
//! cgroup v2 only) booted under qemu, driven over ssh. The machines this project runs on
//! are cgroup v1 without systemd, so the systemd cgroup driver can only be seen working
//! against a real systemd here.
//!
//! - The image comes from `scripts/vm/build-image.sh` (a cache dir per recipe); the
//!   harness never builds it (minutes of debootstrap), it fails naming the command.
//! - qemu runs with `-snapshot` (the cached image is never written), software emulation
//!   by default (KVM hangs on these machines; `OXLET_VM_ACCEL=kvm` asks for it), and
//!   user-mode networking with `restrict=on`: the guest reaches nothing, the host reaches
//!   the guest's ssh through one loopback forward.
//! - A read-only 9p share (mounted at `/mnt/oxlet` by the image's fstab) carries what the
//!   host built: the oxlet binary, containerd 2.x and the test image archives.
//! - Everything is emulated: assert behaviour, never timings, and wait generously.
//!
//! Use from an integration test with `mod vm;` (test binaries with `test = false`, run by name).
#![allow(dead_code)] // a test binary uses its own subset
#![allow(unreachable_pub)] // the harness's API, for the VM test binaries

use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

pub mod kind;

/// The tag the image's fstab mounts at `/mnt/oxlet`.
const SHARE_TAG: &str = "oxlet";
/// Where the share appears in the guest.
pub const SHARE_MOUNT: &str = "/mnt/oxlet";
/// An ssh command's default limit: guest commands are slow under emulation.
const SSH_TIMEOUT: Duration = Duration::from_secs(180);

/// A duration from the environment variable `name` in seconds, else `default`.
fn env_secs(name: &str, default: u64) -> Duration {
    let secs = std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

/// The repository's root (where `scripts/` is).
pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The built image: the directory `scripts/vm/build-image.sh --check` names (it waits
/// for a build under way). Panics with the command to run when there is none.
pub fn image_dir() -> PathBuf {
    let script = repo().join("scripts/vm/build-image.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("--check")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "the VM image is missing (as root: bash scripts/vm/build-image.sh): {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// What the host hands the guest through the read-only share: files and directories
/// copied (hard-linked where possible) into a staging directory under their share names.
#[derive(Default)]
pub struct Share {
    entries: Vec<(String, PathBuf)>,
}

impl Share {
    /// An empty share.
    pub fn new() -> Share {
        Share::default()
    }

    /// `src` (a file, or a directory of files) appears as `<SHARE_MOUNT>/<name>`; a
    /// name may hold a folder (`containerd/ctr`).
    pub fn add(mut self, name: &str, src: impl Into<PathBuf>) -> Share {
        let src = src.into();
        assert!(
            src.exists(),
            "{} is missing; the VM test shares it with the guest as {SHARE_MOUNT}/{name}",
            src.display()
        );
        self.entries.push((name.to_string(), src));
        self
    }

    /// Copies every entry into `dir`. Symlinks cannot be shared (they would point at
    /// host paths), so their targets are copied.
    fn stage(&self, dir: &Path) {
        for (name, src) in &self.entries {
            stage_path(src, &dir.join(name));
        }
    }
}

/// Hard-links `src` to `dst` (the same file system: no copy of a large binary), else
/// copies it; a directory's files one by one.
fn stage_path(src: &Path, dst: &Path) {
    if src.is_dir() {
        fs::create_dir_all(dst).unwrap();
        for entry in fs::read_dir(src).unwrap() {
            let entry = entry.unwrap();
            if !entry.file_name().to_string_lossy().starts_with('.') {
                stage_path(&entry.path(), &dst.join(entry.file_name()));
            }
        }
        return;
    }
    let src = fs::canonicalize(src).unwrap();
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    if fs::hard_link(&src, dst).is_err() {
        fs::copy(&src, dst)
            .unwrap_or_else(|e| panic!("cannot copy {} into the share: {e}", src.display()));
    }
}

/// A port on host loopback for a forward, below the ephemeral range (a port released
/// there could become some connection's source port before qemu binds it).
fn free_port() -> u16 {
    let start = 20_000 + (std::process::id() % 5_000) as u16;
    (start..30_000)
        .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("no free loopback port in 20000..30000 for the guest's ssh")
}

/// A booted guest. Dropping it kills qemu and removes its temporary files.
pub struct Vm {
    qemu: Option<Child>,
    /// Staging share, console log, qemu's stderr, known_hosts.
    tmp: tempfile::TempDir,
    key: PathBuf,
    ssh_port: u16,
    /// Wall time from qemu's start to the first ssh command that answered.
    pub boot_time: Duration,
}

impl Vm {
    /// Boots the cached image with `share` on `/mnt/oxlet` and waits (up to
    /// `OXLET_VM_BOOT_TIMEOUT` seconds, 600 by default) for ssh to answer.
    pub fn boot(share: &Share) -> Vm {
        let image = image_dir();
        let qemu_bin = std::env::var("OXLET_VM_QEMU").unwrap_or("qemu-system-x86_64".into());
        let tmp = tempfile::Builder::new()
            .prefix("oxlet-vm-")
            .tempdir()
            .unwrap();
        let staged = tmp.path().join("share");
        fs::create_dir(&staged).unwrap();
        share.stage(&staged);
        let ssh_port = free_port();
        let host_key = fs::read_to_string(image.join("host_key.pub")).unwrap();
        fs::write(
            tmp.path().join("known_hosts"),
            format!("[127.0.0.1]:{ssh_port} {}\n", host_key.trim()),
        )
        .unwrap();
        let args = qemu_args(&image, &staged, tmp.path(), ssh_port);
        let stderr = fs::File::create(tmp.path().join("qemu.stderr")).unwrap();
        let started = Instant::now();
        let qemu = Command::new(&qemu_bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            // qemu's -snapshot overlay goes to TMPDIR: keep it in our temp dir.
            .env("TMPDIR", tmp.path())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {qemu_bin}: {e} (install qemu-system-x86 with scripts/install-test-deps.sh)")
            });
        eprintln!(
            "vm: booting image={} qemu_pid={} ssh=127.0.0.1:{ssh_port} console={}",
            image.display(),
            qemu.id(),
            tmp.path().join("console.log").display()
        );
        let mut vm = Vm {
            qemu: Some(qemu),
            tmp,
            key: image.join("id_ed25519"),
            ssh_port,
            boot_time: Duration::ZERO,
        };
        vm.wait_for_ssh(env_secs("OXLET_VM_BOOT_TIMEOUT", 600));
        vm.boot_time = started.elapsed();
        eprintln!("vm: ssh answered boot_time={:?}", vm.boot_time);
        vm
    }

    /// Retries a trivial command until it succeeds; qemu exiting or the limit passing is
    /// a failure that shows the console's tail.
    fn wait_for_ssh(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.qemu_exited() {
                panic!(
                    "qemu exited while booting ({status}); its stderr:\n{}\nconsole:\n{}",
                    self.qemu_stderr(),
                    self.console_tail(60)
                );
            }
            let out = self.ssh_with_timeout("true", Duration::from_secs(30));
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the guest's ssh did not answer within {limit:?}; last ssh error: {}\nconsole:\n{}",
                String::from_utf8_lossy(&out.stderr).trim(),
                self.console_tail(60)
            );
            std::thread::sleep(Duration::from_secs(3));
        }
    }

    fn qemu_exited(&mut self) -> Option<ExitStatus> {
        self.qemu.as_mut().and_then(|q| q.try_wait().ok().flatten())
    }

    fn qemu_stderr(&self) -> String {
        fs::read_to_string(self.tmp.path().join("qemu.stderr")).unwrap_or_default()
    }

    /// The guest's serial console so far (kernel and systemd messages).
    pub fn console(&self) -> String {
        let log = fs::read(self.tmp.path().join("console.log")).unwrap_or_default();
        String::from_utf8_lossy(&log).into_owned()
    }

    /// The last `n` lines of the guest's serial console.
    pub fn console_tail(&self, n: usize) -> String {
        let log = self.console();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The ssh command line for `cmd` (run by the guest's shell as root).
    fn ssh_command(&self, cmd: &str) -> Command {
        let mut c = self.ssh_to_guest(&[]);
        c.args(["--", cmd]);
        c
    }

    /// ssh to the guest with the harness's options, then `extra`, then the destination.
    fn ssh_to_guest(&self, extra: &[&str]) -> Command {
        let mut c = Command::new("ssh");
        c.arg("-i")
            .arg(&self.key)
            .args(["-p", &self.ssh_port.to_string()])
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}",
                self.tmp.path().join("known_hosts").display()
            ))
            .args([
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=20",
                "-o",
                "LogLevel=ERROR",
                "-o",
                "ServerAliveInterval=15",
            ])
            .args(extra)
            .arg("root@127.0.0.1");
        c
    }

    /// The guest's `127.0.0.1:<port>` forwarded to the host's (an ssh remote forward:
    /// the guest reaches nothing else), for as long as the returned value lives.
    pub fn forward_to_host(&self, port: u16) -> RemoteForward {
        let spec = format!("127.0.0.1:{port}:127.0.0.1:{port}");
        let child = self
            .ssh_to_guest(&["-N", "-o", "ExitOnForwardFailure=yes", "-R", &spec])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run ssh: {e} (install openssh-client)"));
        RemoteForward(child)
    }

    /// Runs `cmd` in the guest with the default limit (180 s).
    pub fn ssh(&self, cmd: &str) -> Output {
        self.ssh_with_timeout(cmd, SSH_TIMEOUT)
    }

    /// Runs `cmd` in the guest; past `limit` the ssh client is killed and the output
    /// says so (exit status from the kill, a note on stderr).
    pub fn ssh_with_timeout(&self, cmd: &str, limit: Duration) -> Output {
        let mut child = self
            .ssh_command(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run ssh: {e} (install openssh-client)"));
        run_with_timeout(&mut child, limit, cmd)
    }

    /// Runs `cmd` and returns its stdout; a non-zero exit fails the test with its
    /// output.
    pub fn ssh_ok(&self, cmd: &str) -> String {
        let out = self.ssh(cmd);
        assert!(
            out.status.success(),
            "guest command failed ({}): {cmd}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Writes `contents` to `path` in the guest (its directory made first), with `mode`.
    pub fn write_file(&self, path: &str, contents: &[u8], mode: u32) {
        let cmd = format!(
            "mkdir -p \"$(dirname '{path}')\" && cat > '{path}.tmp' && chmod {mode:o} '{path}.tmp' && mv '{path}.tmp' '{path}'"
        );
        let mut child = self
            .ssh_command(&cmd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run ssh");
        let mut stdin = child.stdin.take().unwrap();
        let data = contents.to_vec();
        let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &data));
        let out = run_with_timeout(&mut child, SSH_TIMEOUT, &cmd);
        writer.join().unwrap().expect("writing to ssh's stdin");
        assert!(
            out.status.success(),
            "cannot write {path} in the guest: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }

    /// Copies the host file `local` to `remote` in the guest, keeping its mode.
    pub fn copy_in(&self, local: &Path, remote: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let data =
            fs::read(local).unwrap_or_else(|e| panic!("cannot read {}: {e}", local.display()));
        let mode = fs::metadata(local).unwrap().permissions().mode() & 0o7777;
        self.write_file(remote, &data, mode);
    }

    /// The end of a test: a clean power-off, then `test`'s timings (boot, power-off,
    /// all since `started`) on stderr.
    pub fn poweroff_and_report(self, test: &str, started: Instant) {
        let boot = self.boot_time;
        let off = self.poweroff();
        eprintln!(
            "{test}: boot_to_ssh={boot:?} poweroff={off:?} total={:?}",
            started.elapsed()
        );
    }

    /// A clean power-off: `systemctl poweroff`, then qemu's exit (up to
    /// `OXLET_VM_POWEROFF_TIMEOUT` s, 300 by default). Returns how long it took; qemu
    /// still running at the limit is killed and fails the test.
    pub fn poweroff(self) -> Duration {
        self.poweroff_with_console().0
    }

    /// [`Vm::poweroff`], also returning the whole serial console: what the guest said
    /// while it went down (journald forwards there when a test asks it to) is only
    /// readable once qemu has exited, and dropping the `Vm` removes the file.
    pub fn poweroff_with_console(mut self) -> (Duration, String) {
        let started = Instant::now();
        // The connection drops as the guest goes down: its status says nothing.
        let _ = self.ssh_with_timeout("systemctl poweroff", Duration::from_secs(60));
        let limit = env_secs("OXLET_VM_POWEROFF_TIMEOUT", 300);
        while started.elapsed() < limit {
            if let Some(status) = self.qemu_exited() {
                self.qemu = None;
                let took = started.elapsed();
                eprintln!("vm: powered off status={status} took={took:?}");
                return (took, self.console());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let tail = self.console_tail(40);
        drop(self);
        panic!("the guest did not power off within {limit:?}; console:\n{tail}");
    }
}

/// An ssh remote forward into the guest ([`Vm::forward_to_host`]); dropping it ends it.
pub struct RemoteForward(Child);

impl Drop for RemoteForward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// qemu's arguments: TCG unless asked for KVM, the image as a snapshot, user-mode
/// networking with restrict=on and the ssh forward, the read-only share, the serial
/// console in a file.
fn qemu_args(image: &Path, share: &Path, tmp: &Path, ssh_port: u16) -> Vec<String> {
    let accel = match std::env::var("OXLET_VM_ACCEL").as_deref() {
        Ok("kvm") => "pc,accel=kvm",
        _ => "pc,accel=tcg",
    };
    let cpu = match accel {
        "pc,accel=kvm" => "host",
        _ => "qemu64",
    };
    let smp = std::env::var("OXLET_VM_SMP").unwrap_or("2".into());
    let mem = std::env::var("OXLET_VM_MEM").unwrap_or("2048".into());
    let p = |p: &Path| p.display().to_string();
    vec![
        "-machine".into(),
        accel.into(),
        "-cpu".into(),
        cpu.into(),
        "-smp".into(),
        smp,
        "-m".into(),
        mem,
        "-display".into(),
        "none".into(),
        "-monitor".into(),
        "none".into(),
        "-no-reboot".into(),
        "-snapshot".into(),
        "-kernel".into(),
        p(&image.join("vmlinuz")),
        "-initrd".into(),
        p(&image.join("initrd.img")),
        "-append".into(),
        "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=-1".into(),
        "-drive".into(),
        format!("file={},format=raw,if=virtio", p(&image.join("rootfs.img"))),
        "-nic".into(),
        format!("user,model=virtio-net-pci,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22"),
        "-virtfs".into(),
        format!(
            "local,path={},mount_tag={SHARE_TAG},security_model=none,readonly=on",
            p(share)
        ),
        "-serial".into(),
        format!("file:{}", p(&tmp.join("console.log"))),
    ]
}

/// Waits for `child` (stdout and stderr piped) up to `limit`, reading both pipes on
/// threads so a chatty command cannot block on a full pipe; kills it at the limit.
fn run_with_timeout(child: &mut Child, limit: Duration, what: &str) -> Output {
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            timed_out = true;
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = err.join().unwrap();
    if timed_out {
        stderr.extend_from_slice(format!("\nvm: timed out after {limit:?}: {what}\n").as_bytes());
    }
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr,
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if let Some(mut q) = self.qemu.take() {
            if std::thread::panicking() {
                eprintln!(
                    "vm: the test failed; the guest's console, last lines:\n{}",
                    self.console_tail(40)
                );
            }
            let _ = q.kill();
            let _ = q.wait();
        }
    }
}

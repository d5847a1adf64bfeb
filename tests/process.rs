//! The oxlet process itself, run as the real binary: its managed containerd is supervised
//! (restarted with back-off when it dies), the runtime choice is recorded under
//! `--root-dir`, SIGTERM works from the first instant, RLIMIT_NOFILE is raised, the HTTP
//! servers are bounded, and `/healthz` reports kubelet's checks.

mod agent;
mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;
use k8s_cri::v1 as cri;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const START: Duration = Duration::from_secs(60);

fn no_system_containerd() {
    assert!(
        !Path::new("/run/containerd/containerd.sock").exists(),
        "this test needs the default containerd socket to be absent (a system containerd runs here)"
    );
}

fn short_tempdir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap()
}

/// Pids of processes whose command line contains `needle` (e.g. a managed containerd's
/// config path, which is unique to its root dir).
fn pids_with_cmdline(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) && !cmd.contains("cargo") {
            out.push(pid);
        }
    }
    out
}

fn managed_containerd_pids(root: &Path) -> Vec<u32> {
    let config = root.join("containerd/config.toml");
    pids_with_cmdline(&format!("--config {}", config.display()))
}

async fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let t = Instant::now();
    while !check() {
        assert!(t.elapsed() < timeout, "timed out after {timeout:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn sandboxes(socket: &Path) -> Option<Vec<cri::PodSandbox>> {
    let ep =
        tonic::transport::Endpoint::from_shared(format!("unix://{}", socket.display())).ok()?;
    let channel = tokio::time::timeout(Duration::from_secs(1), ep.connect())
        .await
        .ok()?
        .ok()?;
    let r = cri::runtime_service_client::RuntimeServiceClient::new(channel)
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter: None })
        .await
        .ok()?;
    Some(r.into_inner().items)
}

/// Removes every manifest of a managed oxlet, waits until its containerd runs no
/// sandbox, and stops it, so a managed test leaves no pods behind.
async fn drain_managed(ox: &mut Oxlet) {
    for e in std::fs::read_dir(&ox.manifests).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    let socket = ox.root.join("containerd/containerd.sock");
    let t = Instant::now();
    while sandboxes(&socket).await.is_none_or(|s| !s.is_empty()) {
        assert!(
            t.elapsed() < START,
            "pods not removed\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = ox.sigterm();
    assert!(status.success());
}

/// Runs oxlet to the end; returns its exit code and stderr.
fn run_oxlet(args: &[String]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oxlet"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The flags every run here passes; the cgroup root they name is made first (oxlet,
/// as kubelet, refuses to start without it).
fn base_args(root: &Path, port: u16) -> Vec<String> {
    let cgroup_root = common::cgroup_root_for(root);
    common::create_cgroup_root(&cgroup_root);
    vec![
        format!("--root-dir={}", root.display()),
        format!("--read-only-port={port}"),
        "--healthz-port=0".into(),
        "--port=0".into(),
        "--hostname-override=testnode".into(),
        "--pod-logs-dir=/tmp/oxlet-process-test-logs".into(),
        "--container-log-symlink-dir=/tmp/oxlet-process-test-links".into(),
        format!("--cgroup-root={cgroup_root}"),
        // These machines run cgroup v1, which oxlet refuses by default, as kubelet.
        "--fail-cgroupv1=false".into(),
        "-v=2".into(),
    ]
}

/// Spawns oxlet with a soft RLIMIT_NOFILE of 512 (so raising it is observable) and its
/// log in `log`.
fn spawn_low_nofile(args: &[String], log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxlet"));
    cmd.args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    // SAFETY: only the async-signal-safe setrlimit/getrlimit syscalls run before exec.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            let mut l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            l.current = Some(512);
            rustix::process::setrlimit(rustix::process::Resource::Nofile, l)?;
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

/// (soft, hard) "Max open files" of a running process.
fn open_files_limits(pid: u32) -> Option<(String, String)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut words = line["Max open files".len()..].split_whitespace();
    Some((words.next()?.to_string(), words.next()?.to_string()))
}

fn sigterm_and_wait(child: &mut Child) -> (i32, Duration) {
    let t = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return (st.code().unwrap_or(-1), t.elapsed());
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("oxlet did not stop within 10s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_limit_is_raised_and_sigterm_works_before_the_runtime_answers() {
    let dir = short_tempdir("oxr-");
    let sock = dir.path().join("silent.sock");
    // A socket that accepts and never answers: oxlet waits for the runtime.
    let _silent = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .map(|m| m.to_string())
        .unwrap_or_else(|| "unlimited".into());
    for (extra, want) in [
        // 1000000 is above the hard limit here, so the soft limit goes up to the hard one.
        (None, (hard.clone(), hard.clone())),
        (
            Some("--max-open-files=4000"),
            ("4000".into(), "4000".into()),
        ),
    ] {
        let mut args = base_args(&dir.path().join("root"), 0);
        args.push(format!(
            "--container-runtime-endpoint=unix://{}",
            sock.display()
        ));
        args.extend(extra.map(String::from));
        let log = dir.path().join("oxlet.log");
        let mut child = spawn_low_nofile(&args, &log);
        let pid = child.id();
        let t = Instant::now();
        let mut seen = None;
        while t.elapsed() < Duration::from_secs(10) {
            seen = open_files_limits(pid);
            if seen.as_ref() == Some(&want) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            seen.as_ref(),
            Some(&want),
            "{extra:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(
            text.contains("RLIMIT_NOFILE"),
            "the limit is logged: {text}"
        );
        // Still waiting for the silent runtime: SIGTERM must end it at once, cleanly.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (code, took) = sigterm_and_wait(&mut child);
        let text = std::fs::read_to_string(&log).unwrap();
        eprintln!("SIGTERM while waiting for the runtime: exit {code} after {took:?}");
        assert_eq!(code, 0, "{text}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(text.contains("received SIGTERM"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_startup_and_image_import_stops_promptly_leaving_no_containerd() {
    no_system_containerd();
    let images = common::test_images_dir();

    // 1. While the managed containerd is starting.
    let base = short_tempdir("oxs-");
    let mut ox = Oxlet::in_dir(base.path(), None);
    ox.spawn(&[]);
    let root = ox.root.clone();
    wait_until(
        "oxlet spawns its containerd",
        Duration::from_secs(20),
        || !managed_containerd_pids(&root).is_empty(),
    )
    .await;
    let (status, took) = ox.sigterm();
    eprintln!("SIGTERM while containerd starts: {status} after {took:?}");
    assert!(status.success(), "{}", tail(&ox.log(), 20));
    assert!(took < Duration::from_secs(2), "{took:?}");
    wait_until("no managed containerd left", Duration::from_secs(2), || {
        managed_containerd_pids(&root).is_empty()
    })
    .await;

    // 2. While a slow image directory is imported (many archives, one ctr run each).
    let base = short_tempdir("oxs-");
    let mut ox = Oxlet::in_dir(base.path(), None);
    let image_dir = ox.root.join("images");
    std::fs::create_dir_all(&image_dir).unwrap();
    for i in 0..40 {
        std::fs::copy(
            images.join("oxlet-busybox.tar"),
            image_dir.join(format!("busybox-{i:02}.tar")),
        )
        .unwrap();
    }
    ox.spawn(&[]);
    ox.wait_logged("imported image archive", 1, START).await;
    let root = ox.root.clone();
    assert!(!managed_containerd_pids(&root).is_empty());
    let (status, took) = ox.sigterm();
    let log = ox.log();
    eprintln!("SIGTERM during image import: {status} after {took:?}");
    assert!(status.success(), "{}", tail(&log, 20));
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(
        log.contains("received SIGTERM while importing images"),
        "{}",
        tail(&log, 20)
    );
    assert!(
        log.matches("imported image archive").count() < 40,
        "the import was not cut short"
    );
    assert!(
        managed_containerd_pids(&root).is_empty(),
        "managed containerd left behind"
    );
    assert!(pids_with_cmdline(&image_dir.display().to_string()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_managed_containerd_is_restarted_and_pods_carry_on() {
    no_system_containerd();
    let base = short_tempdir("oxk-");
    let mut ox = Oxlet::in_dir(base.path(), None);
    ox.copy_images_to_root();
    let host = "  hostNetwork: true\n";
    write_manifest(&ox.manifests, "a.yaml", &pod_yaml("a", "sleep 3600", host));
    ox.spawn(&[]);
    let before = ox.wait_running("a", START).await;
    let started_at = container(&before, "main")
        .state
        .as_ref()
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.clone());

    let old = managed_containerd_pids(&ox.root);
    assert_eq!(old.len(), 1, "{old:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(old[0] as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let t = Instant::now();
    loop {
        let log = ox.log();
        if log.contains("managed containerd restarted") {
            assert!(
                log.contains("managed containerd exited; restarting it after a back-off of 1s"),
                "{}",
                tail(&log, 30)
            );
            break;
        }
        assert!(t.elapsed() < START, "not restarted\n{}", tail(&log, 40));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "managed containerd restarted {:?} after kill -9",
        t.elapsed()
    );
    let new = managed_containerd_pids(&ox.root);
    assert_eq!(new.len(), 1, "{new:?}");
    assert_ne!(new, old);

    // The pod's container survived (its shim outlives containerd) and stays Running.
    let after = ox.wait_running("a", START).await;
    assert_eq!(uid(&after), uid(&before));
    assert_eq!(container(&after, "main").restart_count, 0);
    let started_after = container(&after, "main")
        .state
        .as_ref()
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.clone());
    assert_eq!(started_after, started_at, "the container was restarted");

    // The sync loop carries on: a pod added now starts.
    write_manifest(&ox.manifests, "b.yaml", &pod_yaml("b", "sleep 3600", host));
    ox.wait_running("b", START).await;
    eprintln!("pod b Running {:?} after kill -9", t.elapsed());
    let (code, body) = ox.get("/healthz").await.unwrap();
    assert_eq!((code, body.as_str()), (200, "ok"));

    drain_managed(&mut ox).await;
    assert!(managed_containerd_pids(&ox.root).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_while_an_external_runtime_is_down_and_is_not_restarted() {
    let mut bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let t = Instant::now();
    while ox.get("/healthz").await.map(|r| r.0) != Some(200) {
        assert!(t.elapsed() < START, "{}", tail(&ox.log(), 30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, body) = ox.get("/healthz?verbose").await.unwrap();
    assert_eq!(code, 200);
    assert_eq!(
        body,
        "[+]ping ok\n[+]log ok\n[+]syncloop ok\nhealthz check passed\n"
    );
    assert_eq!(
        ox.get("/healthz/syncloop").await.unwrap(),
        (200, "ok".into())
    );

    // The external containerd dies: oxlet must not restart it, and /healthz says so.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(bed.containerd_pid() as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let t = Instant::now();
    let want = "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n";
    loop {
        let r = ox.get("/healthz").await;
        if r.as_ref().is_some_and(|r| r.0 == 500) {
            assert_eq!(r.unwrap().1, want);
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "healthz still {r:?}\n{}",
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, body) = ox.get("/healthz/syncloop").await.unwrap();
    assert_eq!(code, 500);
    assert!(body.contains("container runtime is down"), "{body}");
    assert!(
        !ox.log().contains("restarting it"),
        "an external runtime was restarted"
    );

    bed.restart_containerd().await;
    let t = Instant::now();
    while ox.get("/healthz").await != Some((200, "ok".into())) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "healthz did not recover\n{}",
            tail(&ox.log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_connections_do_not_affect_pods_and_slow_headers_are_cut() {
    // This test process needs ~2100 descriptors.
    let mut l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    l.current = l.maximum;
    rustix::process::setrlimit(rustix::process::Resource::Nofile, l).unwrap();

    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    let host = "  hostNetwork: true\n";
    write_manifest(&ox.manifests, "a.yaml", &pod_yaml("a", "sleep 3600", host));
    ox.wait_running("a", START).await;

    let t = Instant::now();
    let mut idle = Vec::with_capacity(2000);
    for _ in 0..2000 {
        idle.push(
            tokio::net::TcpStream::connect(("127.0.0.1", ox.port))
                .await
                .unwrap(),
        );
    }
    eprintln!("opened 2000 idle connections in {:?}", t.elapsed());
    // A slow client: one header byte every 300 ms.
    let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", ox.port))
        .await
        .unwrap();
    let slow_started = Instant::now();
    let slow_task = tokio::spawn(async move {
        for b in b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n" {
            if slow.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut buf)).await;
        (
            slow_started.elapsed(),
            String::from_utf8_lossy(&buf).into_owned(),
        )
    });

    assert_eq!(ox.get("/healthz").await, Some((200, "ok".into())));
    assert!(find(&ox.pods().await, "a").is_some());
    write_manifest(&ox.manifests, "b.yaml", &pod_yaml("b", "sleep 3600", host));
    ox.wait_running("b", START).await;
    eprintln!(
        "pod b Running with 2000 idle connections open, {:?} after opening them",
        t.elapsed()
    );

    // The server accepted every idle connection and cuts each after the header-read
    // timeout (5 s), so their descriptors come back.
    let mut cut = 0;
    for mut s in idle {
        let mut buf = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            cut += 1;
        }
    }
    assert_eq!(cut, 2000);
    let (took, response) = slow_task.await.unwrap();
    eprintln!("slow-header client cut after {took:?}");
    assert!(
        response.is_empty(),
        "the slow client was served: {response}"
    );
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "{took:?}"
    );
    assert_eq!(ox.get("/healthz").await, Some((200, "ok".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_dir_refuses_to_switch_runtimes() {
    no_system_containerd();
    let bed = Testbed::start().await;
    let port = free_port();

    // External first, then managed (no endpoint flag): refused.
    let root: PathBuf = bed.base_dir().join("r1");
    let mut args = base_args(&root, port);
    args.push(format!("--container-runtime-endpoint={}", bed.endpoint()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxlet"))
        .args(&args)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let record = root.join("container-runtime");
    wait_until("the choice is recorded", START, || record.exists()).await;
    let (code, _) = sigterm_and_wait(&mut child);
    assert_eq!(code, 0);
    let (code, err) = run_oxlet(&base_args(&root, port));
    assert_eq!(code, 1, "{err}");
    let want = format!(
        "{}: this --root-dir was last run with the container runtime at {ep}, but this start \
         would use the managed containerd; its pods would be orphaned. Start oxlet with \
         --container-runtime-endpoint={ep} as before, or, to switch runtimes on purpose, stop \
         the pods of the old runtime and delete {}",
        record.display(),
        record.display(),
        ep = bed.endpoint()
    );
    assert!(err.contains(&want), "{err}");
    assert!(managed_containerd_pids(&root).is_empty(), "started anyway");

    // Managed first, then an external endpoint: refused.
    let base = short_tempdir("oxc-");
    let root = base.path().join("root");
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxlet"))
        .args(base_args(&root, port))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let record = root.join("container-runtime");
    wait_until("the choice is recorded", START, || record.exists()).await;
    let (code, _) = sigterm_and_wait(&mut child);
    assert_eq!(code, 0);
    let mut args = base_args(&root, port);
    args.push(format!("--container-runtime-endpoint={}", bed.endpoint()));
    let (code, err) = run_oxlet(&args);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("was last run with the managed containerd")
            && err.contains(&format!(
                "would use the container runtime at {}",
                bed.endpoint()
            ))
            && err.contains("Start oxlet without --container-runtime-endpoint as before"),
        "{err}"
    );
    // The documented override: delete the record, and the new choice is taken.
    std::fs::remove_file(&record).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxlet"))
        .args(&args)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the new choice is recorded", START, || record.exists()).await;
    let (code, _) = sigterm_and_wait(&mut child);
    assert_eq!(code, 0);
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        format!("endpoint {}\n", bed.endpoint())
    );
}

/// The locks: a second oxlet on the same root dir, or on the same runtime with another
/// root dir, is refused at once naming the holder; with kubelet's `--lock-file` and
/// `--exit-on-lock-contention`, a new oxlet opening the lock file makes the old one
/// leave (exit 0) and takes over once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_is_refused_and_the_lock_file_hands_over() {
    let bed = Testbed::start().await;
    let lock_file = bed.base_dir().join("kubelet.lock");
    let lock_flags = [
        format!("--lock-file={}", lock_file.display()),
        "--exit-on-lock-contention".to_string(),
    ];
    let lock_flags: Vec<&str> = lock_flags.iter().map(String::as_str).collect();
    let mut first = Oxlet::start(&bed, &lock_flags);
    first.wait_up(START).await;
    let holder = format!("pid={}", first.pid());

    let mut same_root = Oxlet::new(&bed);
    let before = same_root.log().len();
    same_root.spawn(&[]);
    assert!(!same_root.wait_exit(START).success());
    let said = same_root.log()[before..].to_string();
    assert!(
        said.contains("oxlet.lock") && said.contains(&holder) && said.contains("one root dir"),
        "{said}"
    );

    let mut same_runtime = Oxlet::in_dir(&bed.base_dir().join("other"), Some(bed.endpoint()));
    same_runtime.spawn(&[]);
    assert!(!same_runtime.wait_exit(START).success());
    let said = same_runtime.log();
    assert!(
        said.contains(&holder) && said.contains("one runtime"),
        "{said}"
    );

    // The first is still serving.
    assert!(first.get("/pods").await.is_some());
    // A new agent with the lock file: the first leaves, the new one comes up.
    let mut second = Oxlet::new(&bed);
    second.spawn(&lock_flags);
    assert!(first.wait_exit(START).success());
    second.wait_up(START).await;
    assert!(
        first
            .log()
            .contains("another process opened the lock file; exiting"),
        "{}",
        tail(&first.log(), 20)
    );
}

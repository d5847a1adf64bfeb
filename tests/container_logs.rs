//! Container log rotation and the legacy log symlinks on a real containerd: a container
//! writing a few MiB at a steady rate with `--container-log-max-size=1Mi`,
//! `--container-log-max-files=3` and `containerLogMonitorInterval: 3s` (kubelet's
//! minimum, from a config file) keeps at most three log files, none much over 1 MiB,
//! with no line lost across a rotation; its `<pod>_<ns>_<container>-<id>.log` link in
//! `--container-log-symlink-dir` exists while it runs and is gone with the pod.

mod agent;
mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use agent::*;
use common::Testbed;

const START: Duration = Duration::from_secs(30);
const MIB: u64 = 1 << 20;
/// Lines the container writes, each about 1 KiB: about 4 MiB in all.
const LINES: u32 = 4000;

/// 40 lines of 1 KiB every 0.1 s: about 400 KiB/s, so that a 3 s check catches the log
/// about every MiB and the test takes about ten seconds.
fn writer_pod() -> String {
    let script = format!(
        "P=$(printf %01000d 0); i=0; while [ $i -lt {LINES} ]; do i=$((i+1)); echo L$i $P; \
         if [ $((i % 40)) -eq 0 ]; then usleep 100000; fi; done; sleep 3600"
    );
    pod_yaml("writer", &script, "")
}

/// The files of the container's log directory (current, rotated, compressed).
fn log_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The files a reader sees as logs: no `.tmp`, no original whose `.gz` is written.
fn in_use(files: &[String]) -> Vec<String> {
    files
        .iter()
        .filter(|f| !f.ends_with(".tmp") && !files.contains(&format!("{f}.gz")))
        .cloned()
        .collect()
}

/// One file's text, gunzipped if compressed.
fn read_log(path: &Path) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut s = String::new();
        flate2::read::GzDecoder::new(&bytes[..]).read_to_string(&mut s)?;
        Ok(s)
    } else {
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// The line numbers in CRI-format log text (`<time> stdout F L<n> 000…`).
fn line_numbers(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(4, ' ');
            let (_, _, tag, msg) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
            assert_eq!(tag, "F", "a 1 KiB line is written whole: {l:.80}");
            msg.strip_prefix('L')?.split(' ').next()?.parse().ok()
        })
        .collect()
}

/// Each kept file's name and uncompressed size, and the line numbers in them all.
type Snapshot = (Vec<(String, u64)>, BTreeSet<u32>);

/// Every kept file's sizes (uncompressed) and the line numbers in them, read at a moment
/// when no rotation moved a file under the reader (else None).
fn snapshot(dir: &Path) -> Option<Snapshot> {
    let before = log_files(dir);
    let files = in_use(&before);
    let mut sizes = Vec::new();
    let mut lines = BTreeSet::new();
    for f in &files {
        let text = read_log(&dir.join(f)).ok()?;
        sizes.push((f.clone(), text.len() as u64));
        for n in line_numbers(&text) {
            // Twice only if a rename happened between two reads (checked below).
            if !lines.insert(n) {
                return None;
            }
        }
    }
    (log_files(dir) == before).then_some((sizes, lines))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chatty_container_keeps_three_log_files_and_its_symlink_while_it_runs() {
    let bed = Testbed::start().await;
    let mut ox = Oxlet::new(&bed);
    let base = ox.root.parent().unwrap().to_path_buf();
    let config = base.join("kubelet-config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         containerLogMonitorInterval: 3s\n",
    )
    .unwrap();
    let links = ox.links.clone();
    ox.spawn(&[
        &format!("--config={}", config.display()),
        "--container-log-max-size=1Mi",
        "--container-log-max-files=3",
    ]);
    write_manifest(&ox.manifests, "writer.yaml", &writer_pod());
    let pod = ox.wait_running("writer", START).await;
    let name = pod.metadata.name.clone().unwrap();
    let id = container(&pod, "main")
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let dir = ox
        .logs
        .join(format!("default_{name}_{}", uid(&pod)))
        .join("main");

    // The legacy link, kubelet's name, to the current log.
    let link = links.join(format!("{name}_default_main-{id}.log"));
    assert_eq!(
        std::fs::read_link(&link).unwrap_or_else(|e| panic!(
            "{}: {e}\n{:?}",
            link.display(),
            log_files(&links)
        )),
        dir.join("0.log")
    );

    // While it writes: never more than three files in use.
    let t = Instant::now();
    let mut most = 0;
    let mut rotations = BTreeSet::new();
    let lines = loop {
        let files = in_use(&log_files(&dir));
        assert!(files.len() <= 3, "more than max-files logs: {files:?}");
        most = most.max(files.len());
        rotations.extend(files.iter().filter(|f| *f != "0.log").cloned());
        if let Some((sizes, lines)) = snapshot(&dir)
            && lines.last() == Some(&LINES)
        {
            break (sizes, lines);
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the writer did not finish: {files:?}\n{}",
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (sizes, seen) = lines;
    eprintln!(
        "after {:?}: {} rotated names seen, at most {most} files; kept {sizes:?}",
        t.elapsed(),
        rotations.len()
    );
    assert!(rotations.len() >= 3, "rotated several times: {rotations:?}");
    assert_eq!(most, 3, "max-files reached");
    // Nothing lost between the oldest kept line and the last: rotation drops no line.
    let first = *seen.first().unwrap();
    assert_eq!(
        seen.len() as u32,
        LINES - first + 1,
        "lines from {first} to {LINES} all kept"
    );
    for (f, size) in &sizes {
        // 1 MiB, plus what 3 s of writing adds before the next check (about 1.2 MiB).
        assert!(*size <= 5 * MIB / 2, "{f} is {size} bytes");
    }
    let gz = sizes.iter().filter(|(f, _)| f.ends_with(".gz")).count();
    assert!(
        gz <= 1,
        "only the older rotated file is compressed: {sizes:?}"
    );
    assert_eq!(std::fs::read_link(&link).unwrap(), dir.join("0.log"));

    // Gone with the pod: the link and the logs.
    std::fs::remove_file(ox.manifests.join("writer.yaml")).unwrap();
    let t = Instant::now();
    while link.symlink_metadata().is_ok() || dir.exists() {
        assert!(
            t.elapsed() < START,
            "the link or the log dir outlived the pod: {:?}\n{}",
            log_files(&links),
            tail(&ox.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The IDs in the link names of `dir` (kubelet's `<pod>_<ns>_<container>-<id>.log`).
fn linked_ids(dir: &Path) -> BTreeSet<String> {
    log_files(dir)
        .iter()
        .filter_map(|n| Some(n.rsplit('-').next()?.strip_suffix(".log")?.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn links_follow_a_crash_loop_and_gc_removes_only_oxlets_dangling_links() {
    let bed = Testbed::start().await;
    let ox = Oxlet::start(&bed, &[]);
    std::fs::create_dir_all(&ox.links).unwrap();
    // Left behind by an oxlet that died: a link into the pod logs dir whose log and
    // container are gone. Not oxlet's: a regular file and a dangling link elsewhere.
    let stale = ox.links.join("gone_default_c-0123456789ab.log");
    std::os::unix::fs::symlink(ox.logs.join("default_gone_u/c/0.log"), &stale).unwrap();
    let file = ox.links.join("file_default_c-0123456789ab.log");
    std::fs::write(&file, "not a link").unwrap();
    let foreign = ox.links.join("foreign_default_c-0123456789ab.log");
    std::os::unix::fs::symlink("/nonexistent/0.log", &foreign).unwrap();

    write_manifest(
        &ox.manifests,
        "crash.yaml",
        &pod_yaml("crash", "exit 1", ""),
    );
    let pod = ox
        .wait_for("crash restarted", START, |pods| {
            find(pods, "crash")
                .filter(|p| container_status(p, "main").is_some_and(|c| c.restart_count >= 2))
                .cloned()
        })
        .await;
    assert!(
        stale.symlink_metadata().is_err(),
        "the stale link is collected"
    );
    assert!(
        file.is_file() && foreign.is_symlink(),
        "what is not oxlet's stays"
    );
    // One link per container the runtime keeps (the dead instances beyond one are
    // removed with their links); read twice, as a removal may fall between the reads.
    let t = Instant::now();
    loop {
        let ids: BTreeSet<String> = cri_containers(&bed, &uid(&pod))
            .await
            .into_iter()
            .map(|c| c.id)
            .collect();
        let linked: BTreeSet<String> = linked_ids(&ox.links)
            .into_iter()
            .filter(|id| id != "0123456789ab")
            .collect();
        if !linked.is_empty() && linked.is_subset(&ids) {
            break;
        }
        assert!(t.elapsed() < START, "{linked:?} ⊄ {ids:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    std::fs::remove_file(ox.manifests.join("crash.yaml")).unwrap();
    let t = Instant::now();
    while linked_ids(&ox.links).len() > 1 {
        assert!(
            t.elapsed() < START,
            "links outlived the pod: {:?}\n{}",
            log_files(&ox.links),
            tail(&ox.log(), 80)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

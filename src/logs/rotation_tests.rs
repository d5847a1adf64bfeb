use std::io::Read;
use std::sync::Arc;

use super::*;
use crate::cri::CriRead;
use crate::cri::support::{FakeNode, pod};

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn unused_are_temporary_files_and_files_already_compressed() {
    let all = names(&[
        "0.log.20260101-000000",
        "0.log.20260101-000000.gz",
        "0.log.20260102-000000",
        "0.log.20260102-000000.tmp",
        "0.log.20260103-000000",
    ]);
    let (in_use, unused) = split_unused(&all);
    assert_eq!(
        in_use,
        names(&[
            "0.log.20260101-000000.gz",
            "0.log.20260102-000000",
            "0.log.20260103-000000"
        ])
    );
    assert_eq!(
        unused,
        names(&["0.log.20260101-000000", "0.log.20260102-000000.tmp"])
    );
}

#[test]
fn excess_keeps_the_newest_max_files_minus_two() {
    let all = names(&["a.1", "a.2", "a.3", "a.4"]);
    assert_eq!(excess(&all, 3), &all[..3]);
    assert_eq!(excess(&all, 5), &all[..1]);
    assert_eq!(excess(&all, 6), &[] as &[String]);
    assert_eq!(excess(&all, 2), &all[..]);
    assert!(
        RotatePolicy::new(-1, 5).is_none(),
        "negative size: no rotation"
    );
}

/// A running container `app` of pod `p` on a fake node, and its log path.
async fn running(node: &FakeNode) -> (String, PathBuf) {
    let p = pod("p", &[], &["app"], "Always");
    node.sync(&p).await.unwrap();
    let id = node.fake.container_id("p", "app").unwrap();
    let st = node.fake.container_status(&id).await.unwrap();
    let log = PathBuf::from(st.log_path);
    assert!(log.is_file(), "the fake creates the log as containerd does");
    (id, log)
}

fn manager(node: &FakeNode, max_size: u64, max_files: usize) -> LogManager {
    LogManager::new(
        node.fake.clone() as Arc<dyn Cri>,
        node.dir.path().join("logs"),
        RotatePolicy {
            max_size,
            max_files,
        },
        1,
        Duration::from_secs(10),
    )
}

fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn a_full_log_is_rotated_old_files_compressed_or_removed_and_the_log_reopened() {
    let node = FakeNode::new();
    let (_, log) = running(&node).await;
    let dir = log.parent().unwrap();
    let w = |name: &str, body: &str| std::fs::write(dir.join(name), body).unwrap();
    w("0.log.20200101-000000.gz", "oldest");
    w("0.log.20200102-000000", "older");
    w("0.log.20200102-000000.gz", "older, compressed");
    w("0.log.20200103-000000", "newest rotated");
    w("0.log.20200104-000000.tmp", "half-compressed");
    std::fs::write(&log, "x".repeat(2048)).unwrap();

    let m = manager(&node, 1024, 3);
    m.rotate_logs().await.unwrap();

    let files = dir_names(dir);
    assert_eq!(files.len(), 3, "{files:?}");
    assert_eq!(files[0], "0.log");
    assert_eq!(std::fs::metadata(&log).unwrap().len(), 0, "reopened empty");
    assert_eq!(files[1], "0.log.20200103-000000.gz");
    let mut gz = flate2::read::GzDecoder::new(std::fs::File::open(dir.join(&files[1])).unwrap());
    let mut text = String::new();
    gz.read_to_string(&mut text).unwrap();
    assert_eq!(text, "newest rotated");
    assert!(files[2].starts_with("0.log.") && !files[2].ends_with(".gz"));
    assert_eq!(
        std::fs::read_to_string(dir.join(&files[2])).unwrap(),
        "x".repeat(2048),
        "the newest rotated file stays uncompressed"
    );
    assert_eq!(node.fake.calls_of("ReopenContainerLog"), vec!["p/app"]);
}

#[tokio::test]
async fn a_log_below_the_size_is_left_alone() {
    let node = FakeNode::new();
    let (_, log) = running(&node).await;
    std::fs::write(&log, "short").unwrap();
    manager(&node, 1024, 3).rotate_logs().await.unwrap();
    assert_eq!(dir_names(log.parent().unwrap()), vec!["0.log"]);
    assert!(node.fake.calls_of("ReopenContainerLog").is_empty());
}

/// The runtime is asked a container's log path once while it runs; a container
/// that stopped is forgotten, so its ID asked again would be asked anew.
#[tokio::test]
async fn a_log_path_is_asked_once_per_running_container() {
    let node = FakeNode::new();
    let (id, log) = running(&node).await;
    std::fs::write(&log, "short").unwrap();
    let m = manager(&node, 1024, 3);
    let asked = || node.fake.calls_of("ContainerStatus").len();
    let before = asked();
    m.rotate_logs().await.unwrap();
    m.rotate_logs().await.unwrap();
    assert_eq!(asked() - before, 1, "the second pass used the kept path");
    node.fake.exit_container(&id, 0);
    m.rotate_logs().await.unwrap();
    assert!(
        m.paths().is_empty(),
        "a stopped container's path is dropped"
    );
}

#[tokio::test]
async fn a_failed_reopen_renames_the_log_back() {
    let node = FakeNode::new();
    let (_, log) = running(&node).await;
    std::fs::write(&log, "y".repeat(100)).unwrap();
    node.fake
        .fail_next("ReopenContainerLog", None, 1, tonic::Code::Unavailable);
    let m = manager(&node, 10, 3);
    m.rotate_logs().await.unwrap();
    assert_eq!(dir_names(log.parent().unwrap()), vec!["0.log"]);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "y".repeat(100));
    // The next round succeeds.
    m.rotate_logs().await.unwrap();
    assert_eq!(dir_names(log.parent().unwrap()).len(), 2);
}

#[tokio::test]
async fn a_missing_log_is_reopened() {
    let node = FakeNode::new();
    let (_, log) = running(&node).await;
    std::fs::remove_file(&log).unwrap();
    manager(&node, 1024, 3).rotate_logs().await.unwrap();
    assert!(log.is_file());
    assert_eq!(node.fake.calls_of("ReopenContainerLog"), vec!["p/app"]);
}

#[test]
fn log_paths_outside_the_pod_logs_dir_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("logs");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(root.join("ns_p_u/c")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("ns_p_u/link")).unwrap();
    assert!(LogPath::check(&root, &root.join("ns_p_u/c/0.log")).is_ok());
    for bad in [
        root.join("ns_p_u/link/0.log"),
        root.join("ns_p_u/c/../../../outside/0.log"),
        outside.join("0.log"),
        root.join("0.log"),
        PathBuf::from("ns_p_u/c/0.log"),
    ] {
        assert!(
            matches!(LogPath::check(&root, &bad), Err(LogError::Outside { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn remove_all_takes_the_log_and_its_rotated_files_only() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("logs");
    let dir = root.join("ns_p_u/c");
    std::fs::create_dir_all(&dir).unwrap();
    for n in [
        "0.log",
        "0.log.20200101-000000.gz",
        "0.log.20200102-000000",
        "1.log",
    ] {
        std::fs::write(dir.join(n), "").unwrap();
    }
    assert_eq!(remove_container_logs(&root, &dir.join("0.log")).unwrap(), 3);
    assert_eq!(dir_names(&dir), vec!["1.log"]);
    assert_eq!(
        remove_container_logs(&root, &root.join("gone/c/0.log")).unwrap(),
        0
    );
}

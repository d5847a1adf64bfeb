use std::sync::Arc;

use super::*;
use crate::cri::support::{FakeNode, pod};

const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn of<'a>(pod: &'a str, container: &'a str) -> LinkOf<'a> {
    LinkOf {
        pod,
        namespace: "default",
        container,
        id: ID,
    }
}

#[test]
fn names_are_kubelets_and_cut_to_255_bytes() {
    assert_eq!(
        link_name(of("web", "nginx")),
        format!("web_default_nginx-{ID}.log")
    );
    let long = "a".repeat(253);
    let name = link_name(of(&long, "c"));
    assert_eq!(name.len(), 255);
    assert!(name.ends_with(".log"));
    assert!(name.starts_with(&"a".repeat(251)));
    assert_eq!(container_id_of(&link_name(of("web", "nginx"))), Some(ID));
    assert_eq!(
        container_id_of("web_default_nginx-abc.log"),
        None,
        "too short"
    );
    assert_eq!(container_id_of("web_default_nginx-abcdefgh.txt"), None);
}

#[test]
fn a_link_is_made_only_to_an_existing_log_below_the_pod_logs_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let (links, root) = (tmp.path().join("containers"), tmp.path().join("pods"));
    let log = root.join("default_web_u/nginx/0.log");
    assert!(
        create_log_link(&links, &root, of("web", "nginx"), &log)
            .unwrap()
            .is_none()
    );
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, "hello").unwrap();
    let link = create_log_link(&links, &root, of("web", "nginx"), &log)
        .unwrap()
        .unwrap();
    assert_eq!(std::fs::read_to_string(&link).unwrap(), "hello");
    assert!(matches!(
        create_log_link(&links, &root, of("web", "x"), &root.join("../etc/passwd")),
        Err(SymlinkError::Outside { .. })
    ));
    assert!(matches!(
        create_log_link(&links, &root, of("../x", "y/z"), &log),
        Err(SymlinkError::Name(_))
    ));
    assert!(remove_log_link(&links, &root, of("web", "nginx")).unwrap());
    assert!(
        !link.exists() && log.exists(),
        "the link goes, the log stays"
    );
}

#[test]
fn only_links_into_the_pod_logs_dir_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let (links, root) = (tmp.path().join("containers"), tmp.path().join("pods"));
    std::fs::create_dir_all(&links).unwrap();
    let name = link_name(of("web", "nginx"));
    // A regular file and a link elsewhere with the same name shape: not oxlet's.
    std::fs::write(links.join(&name), "someone else's").unwrap();
    assert!(!remove_log_link(&links, &root, of("web", "nginx")).unwrap());
    assert!(links.join(&name).is_file());
    std::fs::remove_file(links.join(&name)).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", links.join(&name)).unwrap();
    assert!(!remove_log_link(&links, &root, of("web", "nginx")).unwrap());
    assert!(links.join(&name).is_symlink());
}

#[tokio::test]
async fn gc_removes_dangling_links_unless_the_container_still_runs() {
    let node = FakeNode::new();
    let p = pod("web", &[], &["app"], "Always");
    node.sync(&p).await.unwrap();
    let id = node.fake.container_id("web", "app").unwrap();
    let root = node.dir.path().join("logs");
    let links = node.dir.path().join("containers");
    std::fs::create_dir_all(&links).unwrap();
    let running = links.join(link_name(LinkOf {
        id: &id,
        ..of("web", "app")
    }));
    let gone = links.join(link_name(of("old", "app")));
    let alive = links.join(link_name(of("other", "app")));
    let foreign = links.join(link_name(of("foreign", "app")));
    std::os::unix::fs::symlink(root.join("default_web_u/app/9.log"), &running).unwrap();
    std::os::unix::fs::symlink(root.join("default_old_u/app/0.log"), &gone).unwrap();
    std::fs::create_dir_all(root.join("x")).unwrap();
    std::fs::write(root.join("x/0.log"), "").unwrap();
    std::os::unix::fs::symlink(root.join("x/0.log"), &alive).unwrap();
    std::os::unix::fs::symlink("/nonexistent/0.log", &foreign).unwrap();

    let cri = node.fake.clone() as Arc<dyn CriRead>;
    remove_dangling_log_links(&links, &root, cri.as_ref()).await;
    assert!(
        running.is_symlink(),
        "its container still runs (rotation window)"
    );
    assert!(!gone.is_symlink(), "dangling, container unknown");
    assert!(alive.is_symlink(), "its log exists");
    assert!(foreign.is_symlink(), "points outside the pod logs dir");

    node.fake.exit_container(&id, 0);
    remove_dangling_log_links(&links, &root, cri.as_ref()).await;
    assert!(!running.is_symlink(), "dangling and its container exited");
}

#[tokio::test]
async fn the_manager_links_a_started_container_and_unlinks_it_with_its_rotated_logs() {
    let node = FakeNode::new();
    let links = node.dir.path().join("containers");
    let manager = FakeNode::manager_over(&node.fake, &node.dir).with_log_symlinks(links.clone());
    let p = pod("web", &[], &["app"], "Always");
    let status = manager
        .get_pod_status("uid-web", "web", "default")
        .await
        .unwrap();
    manager.sync_pod(&p, &status).await.unwrap();
    let id = node.fake.container_id("web", "app").unwrap();
    let link = links.join(format!("web_default_app-{id}.log"));
    let log = std::fs::read_link(&link).expect("linked on start");
    assert!(log.starts_with(node.dir.path().join("logs")) && log.is_file());
    let rotated = log.with_file_name("0.log.20200101-000000.gz");
    std::fs::write(&rotated, "").unwrap();

    manager.remove_pod("uid-web", "default/web").await.unwrap();
    assert!(
        link.symlink_metadata().is_err(),
        "unlinked with the container"
    );
    assert!(!rotated.exists() && !log.exists());
}

use super::*;
use crate::cri::FakeRuntime;
use k8s_cri::v1 as cri;

const MIB: u64 = 1024 * 1024;

fn manager(fake: &Arc<FakeRuntime>, policy: Policy) -> ImageGcManager {
    ImageGcManager::new(fake.clone(), policy, EventRecorder::log_only(), "node-a")
}

fn no_min_age() -> Policy {
    Policy {
        min_age: Duration::ZERO,
        ..Policy::default()
    }
}

/// A container (not started: it still holds its image, as in kubelet) using `image`.
async fn container_using(fake: &FakeRuntime, pod: &str, image: &str) -> String {
    let sandbox = cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: pod.into(),
            uid: format!("uid-{pod}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        ..Default::default()
    };
    let sb = fake.run_pod_sandbox(sandbox.clone(), "").await.unwrap();
    let config = cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: "c".into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    fake.create_container(&sb, config, sandbox).await.unwrap()
}

#[tokio::test]
async fn unused_images_go_least_recently_used_first_and_in_use_or_pinned_stay() {
    let fake = Arc::new(FakeRuntime::new());
    let m = manager(&fake, no_min_age());
    let old = fake.add_image_sized("old:1", 10 * MIB, false);
    let t0 = Instant::now();
    m.detect(t0).await.unwrap();
    let used = fake.add_image_sized("used:1", 20 * MIB, false);
    let pinned = fake.add_image_sized("pause:1", MIB, true);
    let newer = fake.add_image_sized("newer:1", 30 * MIB, false);
    let c = container_using(&fake, "web", "used:1").await;
    let t1 = t0 + Duration::from_secs(10);
    m.detect(t1).await.unwrap();
    // "used" was used at t1; once its container is gone it is the most recently used.
    fake.remove_container(&c).await.unwrap();
    let t2 = t1 + Duration::from_secs(10);
    let order: Vec<String> = m
        .eviction_order(t2)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.id)
        .collect();
    // Never used: first seen first (old, then newer); then used (last used t1).
    assert_eq!(order, vec![old.clone(), newer.clone(), used.clone()]);
    assert!(!order.contains(&pinned));

    // A container again: in use, so never a candidate.
    container_using(&fake, "web2", "used:1").await;
    let cands = m.eviction_order(t2).await.unwrap();
    assert_eq!(cands.len(), 2);
    // 35 MiB to free: old (10) is not enough, old + newer (40) is; then it stops.
    let freed = m.free_space(35 * MIB, t2, &cands).await.unwrap();
    assert_eq!(
        freed,
        Freed {
            bytes: 40 * MIB,
            removed: 2
        }
    );
    let mut left = fake.image_ids();
    left.sort();
    let mut want = vec![used, pinned];
    want.sort();
    assert_eq!(left, want);
}

#[tokio::test]
async fn the_gc_stops_once_enough_is_freed() {
    let fake = Arc::new(FakeRuntime::new());
    let m = manager(&fake, no_min_age());
    let a = fake.add_image_sized("a:1", 10 * MIB, false);
    let t0 = Instant::now();
    m.detect(t0).await.unwrap();
    let b = fake.add_image_sized("b:1", 10 * MIB, false);
    let t1 = t0 + Duration::from_secs(1);
    let cands = m.eviction_order(t1).await.unwrap();
    let freed = m.free_space(5 * MIB, t1, &cands).await.unwrap();
    assert_eq!(
        freed,
        Freed {
            bytes: 10 * MIB,
            removed: 1
        }
    );
    assert_eq!(
        fake.image_ids(),
        vec![b],
        "the older one ({a}) went, the other stays"
    );
}

#[tokio::test]
async fn images_younger_than_the_minimum_age_are_kept() {
    let fake = Arc::new(FakeRuntime::new());
    let m = manager(&fake, Policy::default());
    let id = fake.add_image_sized("young:1", 10 * MIB, false);
    let t0 = Instant::now();
    let cands = m.eviction_order(t0).await.unwrap();
    let at = t0 + Duration::from_secs(119);
    let freed = m.free_space(u64::MAX, at, &cands).await.unwrap();
    assert_eq!(freed, Freed::default());
    assert_eq!(fake.image_ids(), vec![id]);
    let at = t0 + Duration::from_secs(120);
    let freed = m.free_space(u64::MAX, at, &cands).await.unwrap();
    assert_eq!(freed.removed, 1);
    assert!(fake.image_ids().is_empty());
}

#[test]
fn the_amount_to_free_is_kubelets() {
    let p = Policy::default();
    let cap = 1000 * MIB;
    // 84 % used: below the high threshold.
    let s = FsSpace {
        capacity: cap,
        available: 160 * MIB,
    };
    assert_eq!(amount_to_free(s, p).unwrap(), None);
    // 85 % used: free down to 80 % (available 200 MiB).
    let s = FsSpace {
        capacity: cap,
        available: 150 * MIB,
    };
    assert_eq!(amount_to_free(s, p).unwrap(), Some(50 * MIB));
    // Available larger than capacity is clamped (usage 0 %).
    let s = FsSpace {
        capacity: cap,
        available: 2 * cap,
    };
    assert_eq!(amount_to_free(s, p).unwrap(), None);
    // Full: free 20 % of capacity.
    let s = FsSpace {
        capacity: cap,
        available: 0,
    };
    assert_eq!(amount_to_free(s, p).unwrap(), Some(200 * MIB));
    assert!(matches!(
        amount_to_free(
            FsSpace {
                capacity: 0,
                available: 0
            },
            p
        ),
        Err(ImageGcError::InvalidCapacity)
    ));
    // Integer percent as kubelet: 84.9 % used counts as 84 %.
    let s = FsSpace {
        capacity: 1000,
        available: 151,
    };
    assert_eq!(usage_percent(s), 85, "100 - 151*100/1000 = 100 - 15");
    let s = FsSpace {
        capacity: 1000,
        available: 160,
    };
    assert_eq!(usage_percent(s), 84);
}

#[test]
fn a_high_threshold_of_100_turns_the_periodic_gc_off() {
    assert!(Policy::default().periodic_gc_enabled());
    let off = Policy {
        high_percent: 100,
        ..Policy::default()
    };
    assert!(!off.periodic_gc_enabled());
}

#[tokio::test]
async fn over_the_threshold_without_enough_eligible_is_an_error_naming_both_amounts() {
    let fake = Arc::new(FakeRuntime::new());
    let m = manager(&fake, no_min_age());
    fake.add_image_sized("a:1", 10 * MIB, false);
    let t0 = Instant::now();
    let cands = m.eviction_order(t0).await.unwrap();
    let now = t0 + Duration::from_secs(1);
    let space = FsSpace {
        capacity: 1000 * MIB,
        available: 100 * MIB,
    };
    let err = m.collect_with(space, now, &cands).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Failed to garbage collect required amount of images. Attempted to free {} bytes, but only found {} bytes eligible to free.",
            100 * MIB,
            10 * MIB
        )
    );
    assert!(fake.image_ids().is_empty(), "what could go went");

    // Below the high threshold nothing is removed.
    let b = fake.add_image_sized("b:1", 10 * MIB, false);
    let cands = m.eviction_order(now).await.unwrap();
    let space = FsSpace {
        capacity: 1000 * MIB,
        available: 500 * MIB,
    };
    let freed = m
        .collect_with(space, now + Duration::from_secs(1), &cands)
        .await
        .unwrap();
    assert_eq!(freed, Freed::default());
    assert_eq!(fake.image_ids(), vec![b]);
}

#[tokio::test]
async fn a_failed_removal_is_reported_and_the_others_still_go() {
    let fake = Arc::new(FakeRuntime::new());
    let m = manager(&fake, no_min_age());
    fake.add_image_sized("a:1", 10 * MIB, false);
    let b = fake.add_image_sized("b:1", 10 * MIB, false);
    let t0 = Instant::now();
    let cands = m.eviction_order(t0).await.unwrap();
    fake.fail_next("RemoveImage", None, 1, tonic::Code::Unavailable);
    let err = m
        .free_space(u64::MAX, t0 + Duration::from_secs(1), &cands)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ImageGcError::Deletion { freed, .. } if freed == 10 * MIB),
        "{err}"
    );
    // The first (a) failed and stays; b went.
    assert_eq!(fake.image_ids().len(), 1);
    assert!(!fake.image_ids().contains(&b));
}

#[tokio::test]
async fn delete_unused_ignores_thresholds_but_not_use_pins_or_age() {
    let fake = Arc::new(FakeRuntime::new());
    let m = Arc::new(manager(&fake, no_min_age()));
    fake.add_image_sized("a:1", 10 * MIB, false);
    fake.add_image_sized("b:1", 20 * MIB, false);
    let used = fake.add_image_sized("used:1", 5 * MIB, false);
    let pinned = fake.add_image_sized("pause:1", MIB, true);
    container_using(&fake, "web", "used:1").await;
    let step = UnusedImages(m.clone());
    assert_eq!(step.name(), "deleteUnusedImages");
    let got = step.reclaim().await.unwrap();
    assert_eq!(
        got,
        Reclaimed {
            bytes: 30 * MIB,
            removed: 2
        }
    );
    let mut left = fake.image_ids();
    left.sort();
    let mut want = vec![used, pinned];
    want.sort();
    assert_eq!(left, want);

    // With the default minimum age, a fresh image stays.
    let fake = Arc::new(FakeRuntime::new());
    let m = Arc::new(manager(&fake, Policy::default()));
    fake.add_image_sized("fresh:1", 10 * MIB, false);
    let got = UnusedImages(m).reclaim().await.unwrap();
    assert_eq!(got, Reclaimed::default());
    assert_eq!(fake.image_ids().len(), 1);
}

#[tokio::test]
async fn images_unused_past_the_maximum_age_go_whatever_the_usage() {
    let fake = Arc::new(FakeRuntime::new());
    let policy = Policy {
        min_age: Duration::ZERO,
        max_age: Duration::from_secs(60),
        ..Policy::default()
    };
    let m = manager(&fake, policy);
    fake.add_image_sized("a:1", 10 * MIB, false);
    let kept = fake.add_image_sized("b:1", 10 * MIB, false);
    let c = container_using(&fake, "web", "b:1").await;
    let t0 = m.began;
    m.detect(t0 + Duration::from_secs(30)).await.unwrap();
    fake.remove_container(&c).await.unwrap();
    // Before the GC has run for max_age, nothing goes by age.
    let mut freed = Freed::default();
    let at = t0 + Duration::from_secs(60);
    let cands = m.eviction_order(at).await.unwrap();
    let left = m.free_old(cands, at, &mut freed).await.unwrap();
    assert_eq!((left.len(), freed.removed), (2, 0));
    // After it: a (never used) goes; b, last used at 30 s, is unused for just 60 s.
    let at = t0 + Duration::from_secs(90);
    let cands = m.eviction_order(at).await.unwrap();
    let left = m.free_old(cands, at, &mut freed).await.unwrap();
    assert_eq!(
        freed,
        Freed {
            bytes: 10 * MIB,
            removed: 1
        }
    );
    assert_eq!(left.len(), 1);
    assert_eq!(fake.image_ids(), vec![kept]);
}

#[tokio::test]
async fn images_gone_from_the_runtime_are_forgotten() {
    let fake = Arc::new(FakeRuntime::new());
    let m = manager(&fake, Policy::default());
    let id = fake.add_image_sized("a:1", 10 * MIB, false);
    m.detect(Instant::now()).await.unwrap();
    assert!(m.records().contains_key(&id));
    fake.remove_image(&id).await.unwrap();
    m.detect(Instant::now()).await.unwrap();
    assert!(m.records().is_empty());
}

#[tokio::test]
async fn the_runtimes_sandbox_image_is_never_removed() {
    let fake = Arc::new(FakeRuntime::new());
    let m = Arc::new(manager(&fake, no_min_age()));
    fake.add_image_sized("a:1", 10 * MIB, false);
    // Not pinned (containerd 1.6 does not pin it), and no container uses it.
    let pause = fake.add_image_sized("localhost/oxlet/pause:1", MIB, false);
    fake.set_sandbox_image("localhost/oxlet/pause:1");
    let got = UnusedImages(m).reclaim().await.unwrap();
    assert_eq!(got.removed, 1);
    assert_eq!(fake.image_ids(), vec![pause]);
}

//! Peak prediction with the real oxlet binary on a real containerd: a checkpoint
//! left by a previous run is restored and served on `/stats/predictions`, while a
//! corrupt checkpoint, a `.tmp` leftover and an unknown UID's checkpoint are deleted
//! (the corrupt one named in the log), and files that are not checkpoints stay.

mod agent;
mod common;

use std::time::Duration;

use agent::*;
use common::Testbed;

/// `/stats/predictions` once `ready` holds (within 20 s).
async fn predictions_when(
    o: &Oxlet,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let t = std::time::Instant::now();
    loop {
        if let Some((200, body)) = o.get("/stats/predictions").await {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if ready(&v) {
                return v;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no predictions\n{}",
            tail(&o.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn checkpoints_are_restored_served_and_corrupt_ones_removed() {
    let bed = Testbed::start().await;
    let mut o = Oxlet::new(&bed);
    o.env
        .push(("OXLET_TEST_PREDICTION_PERIOD_MS".into(), "300".into()));
    let dir = o.root.join("prediction-checkpoints");
    std::fs::create_dir_all(&dir).unwrap();
    let now = jiff::Timestamp::now().to_string();
    // CPU all in bucket 22 (1 core's: upper edge 1.0357… cores), memory in bucket 0
    // (upper edge 5 MiB).
    let node = format!(
        r#"{{"UID":"__node__","CPU":{{"referenceTimestamp":"{now}","bucketWeights":{{"22":10000}},"totalWeight":3}},"Memory":{{"referenceTimestamp":"{now}","bucketWeights":{{"0":10000}},"totalWeight":3}},"LastUpdated":"{now}"}}"#
    );
    std::fs::write(dir.join("__node__"), &node).unwrap();
    std::fs::write(dir.join("__node__.tmp"), "half written").unwrap();
    // A known UID whose file is corrupt.
    std::fs::write(dir.join("__node-sys__"), "{garbage").unwrap();
    std::fs::write(
        dir.join("gone-pod-uid"),
        node.replace("__node__", "gone-pod-uid"),
    )
    .unwrap();
    std::fs::write(dir.join("keep me.txt"), "not a checkpoint").unwrap();

    o.spawn(&[]);
    o.wait_up(Duration::from_secs(30)).await;
    let doc = predictions_when(&o, |v| {
        v["hasSynced"] == true && v["models"]["__node__"].is_object()
    })
    .await;
    let m = &doc["models"]["__node__"];
    for p in ["p60", "p90", "p95", "p98", "max"] {
        assert_eq!(m["cpuMilli"][p], 1035, "{p}: {doc}");
        assert_eq!(m["memoryBytes"][p], 5 * 1024 * 1024, "{p}: {doc}");
    }
    assert!(doc["modelCount"].as_u64().unwrap() >= 1, "{doc}");
    assert!(doc["node"]["reclaimable"].is_object(), "{doc}");
    // Not restored (no sys model: the cache has no node samples in this test).
    assert!(doc["models"]["__node-sys__"].is_null(), "{doc}");
    assert!(!dir.join("__node-sys__").exists());
    assert!(!dir.join("__node__.tmp").exists());
    assert!(!dir.join("gone-pod-uid").exists());
    assert!(dir.join("keep me.txt").exists());
    assert!(dir.join("__node__").exists());
    let log = o.log();
    assert!(
        log.lines()
            .any(|l| l.contains("__node-sys__") && l.contains("cannot be decoded")),
        "{}",
        tail(&log, 40)
    );
}

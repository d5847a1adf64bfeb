use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::super::encode;
use crate::metrics::kubelet_families::Kubelet;

fn text(k: &Kubelet) -> String {
    encode(&k.registry.gather())
}

/// A pod whose containers are given as JSON.
fn pod(containers: Value, init: Value, pod_level: Option<Value>) -> Pod {
    let mut spec = json!({ "containers": containers, "initContainers": init });
    if let Some(r) = pod_level {
        spec["resources"] = r;
    }
    serde_json::from_value(json!({ "metadata": { "name": "p" }, "spec": spec })).unwrap()
}

/// One regular container `c` with `requirement: { resource: quantity }` (nothing when
/// `quantity` is `None`).
fn one(resource: &str, requirement: &str, quantity: Option<&str>) -> Pod {
    let mut resources = json!({});
    if let Some(q) = quantity {
        resources[requirement] = json!({ resource: q });
    }
    pod(
        json!([{ "name": "c", "resources": resources }]),
        json!([]),
        None,
    )
}

/// Every series of the requested-resizes counter, as (labels line, value).
fn requested(k: &Kubelet) -> Vec<(String, f64)> {
    text(k)
        .lines()
        .filter_map(|l| l.strip_prefix("kubelet_container_requested_resizes_total{"))
        .map(|l| {
            let (labels, v) = l.rsplit_once(' ').unwrap();
            (labels.trim_end_matches('}').to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn families_have_kubelets_help_and_type() {
    let k = Kubelet::new().unwrap();
    k.resize.set_gauges(1, 0, 0);
    k.resize.observe_duration(Duration::from_millis(5), true);
    k.resize.infeasible.with_label_values(&["static_pod"]).inc();
    k.resize
        .deferred_accepted
        .with_label_values(&["pod_updated"])
        .inc();
    k.resize
        .requested
        .with_label_values(&["cpu", "limits", "add"])
        .inc();
    let t = text(&k);
    for (name, kind, help) in [
        (
            "kubelet_container_requested_resizes_total",
            "counter",
            "Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.",
        ),
        (
            "kubelet_pod_resize_duration_milliseconds",
            "histogram",
            "Duration in milliseconds to actuate a pod resize",
        ),
        (
            "kubelet_pod_pending_resizes",
            "gauge",
            "Number of pending resizes for pods.",
        ),
        (
            "kubelet_pod_infeasible_resizes_total",
            "counter",
            "Number of infeasible resizes for pods.",
        ),
        (
            "kubelet_pod_in_progress_resizes",
            "gauge",
            "Number of in-progress resizes for pods.",
        ),
        (
            "kubelet_pod_deferred_accepted_resizes_total",
            "counter",
            "Cumulative number of resizes that were accepted after being deferred.",
        ),
    ] {
        assert!(
            t.contains(&format!(
                "# HELP {name} [ALPHA] {help}\n# TYPE {name} {kind}\n"
            )),
            "{name} in\n{t}"
        );
    }
    assert!(t.contains("kubelet_pod_infeasible_resizes_total{reason_detail=\"static_pod\"} 1\n"));
    assert!(t.contains(
        "kubelet_pod_deferred_accepted_resizes_total{retry_trigger=\"pod_updated\"} 1\n"
    ));
    assert!(t.contains(
        "kubelet_container_requested_resizes_total{operation=\"add\",requirement=\"limits\",resource=\"cpu\"} 1\n"
    ));
}

/// The cpu cases' memory counterparts (`1` and `1000m` become `1Gi` and its bytes).
fn mem(cpu: &'static str) -> &'static str {
    match cpu {
        "500m" => "256Mi",
        "2" => "1Gi",
        "1500m" => "768Mi",
        "1" => "1Gi",
        "1000m" => "1073741824",
        other => other,
    }
}

#[test]
fn each_requirement_is_added_removed_increased_or_decreased_by_value() {
    let cases: &[(Option<&str>, Option<&str>, Option<&str>)] = &[
        (None, Some("500m"), Some("add")),
        (Some("500m"), None, Some("remove")),
        (Some("500m"), Some("0"), Some("remove")),
        (Some("500m"), Some("2"), Some("increase")),
        (Some("2"), Some("1500m"), Some("decrease")),
        (Some("1"), Some("1000m"), None),
        (None, Some("0"), None),
    ];
    for (resource, requirement) in [
        ("cpu", "requests"),
        ("cpu", "limits"),
        ("memory", "requests"),
        ("memory", "limits"),
    ] {
        for (was, now, op) in cases {
            let q =
                |x: &Option<&'static str>| x.map(|v| if resource == "memory" { mem(v) } else { v });
            let k = Kubelet::new().unwrap();
            let asks = k.resize.count_requested(
                &one(resource, requirement, q(was)),
                &one(resource, requirement, q(now)),
            );
            let want: Vec<(String, f64)> = op
                .map(|op| {
                    let labels = format!(
                        "operation=\"{op}\",requirement=\"{requirement}\",resource=\"{resource}\""
                    );
                    vec![(labels, 1.0)]
                })
                .into_iter()
                .flatten()
                .collect();
            assert_eq!(
                requested(&k),
                want,
                "{resource} {requirement}: {was:?} -> {now:?}"
            );
            assert_eq!(
                asks,
                op.is_some(),
                "{resource} {requirement}: {was:?} -> {now:?}"
            );
        }
    }
}

#[test]
fn every_changed_requirement_of_every_resizable_container_counts_once() {
    let k = Kubelet::new().unwrap();
    let c = |name: &str, cpu: &str, mem: &str| {
        json!({ "name": name, "resources": {
            "requests": { "cpu": cpu, "memory": mem },
            "limits": { "cpu": cpu, "memory": mem } } })
    };
    let sidecar = |cpu: &str| {
        let mut s = c("sidecar", cpu, "64Mi");
        s["restartPolicy"] = json!("Always");
        s
    };
    let old = pod(
        json!([c("a", "1", "1Gi"), c("b", "1", "1Gi")]),
        json!([c("setup", "1", "1Gi"), sidecar("100m")]),
        None,
    );
    // a: cpu up (requests and limits); b: unchanged; the sidecar's cpu down; the
    // plain init container is not resizable, so its change is not counted.
    let new = pod(
        json!([c("a", "2", "1Gi"), c("b", "1000m", "1024Mi")]),
        json!([c("setup", "3", "3Gi"), sidecar("50m")]),
        None,
    );
    assert!(k.resize.count_requested(&old, &new));
    let mut got = requested(&k);
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let series = |op: &str, req: &str| {
        (
            format!("operation=\"{op}\",requirement=\"{req}\",resource=\"cpu\""),
            1.0,
        )
    };
    assert_eq!(
        got,
        vec![
            series("decrease", "limits"),
            series("decrease", "requests"),
            series("increase", "limits"),
            series("increase", "requests"),
        ]
    );
}

#[test]
fn a_pod_level_change_asks_for_a_resize_but_is_not_counted() {
    let k = Kubelet::new().unwrap();
    let containers = json!([{ "name": "c" }]);
    let at = |cpu: &str| Some(json!({ "requests": { "cpu": cpu } }));
    let old = pod(containers.clone(), json!([]), at("1"));
    assert!(!k.resize.count_requested(&old, &old.clone()));
    assert!(
        !k.resize
            .count_requested(&old, &pod(containers.clone(), json!([]), at("1000m")))
    );
    assert!(
        k.resize
            .count_requested(&old, &pod(containers.clone(), json!([]), at("2")))
    );
    assert!(
        k.resize
            .count_requested(&old, &pod(containers, json!([]), None))
    );
    assert!(requested(&k).is_empty());
}

#[test]
fn durations_fall_in_kubelets_millisecond_buckets() {
    let k = Kubelet::new().unwrap();
    k.resize
        .observe_duration(Duration::from_micros(1_500_900), true);
    k.resize.observe_duration(Duration::from_millis(20), false);
    let t = text(&k);
    let mut les = Vec::new();
    let prefix = "kubelet_pod_resize_duration_milliseconds_bucket{success=\"true\",le=\"";
    for rest in t.lines().filter_map(|l| l.strip_prefix(prefix)) {
        les.push(rest.split('"').next().unwrap().to_string());
    }
    let want: Vec<String> = [
        "10", "50", "100", "500", "1000", "2000", "5000", "10000", "20000", "30000", "60000",
        "120000", "300000", "600000", "+Inf",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    assert_eq!(les, want);
    for line in [
        "kubelet_pod_resize_duration_milliseconds_bucket{success=\"true\",le=\"1000\"} 0\n",
        "kubelet_pod_resize_duration_milliseconds_bucket{success=\"true\",le=\"2000\"} 1\n",
        // Whole milliseconds, as kubelet's `time.Since(start).Milliseconds()`.
        "kubelet_pod_resize_duration_milliseconds_sum{success=\"true\"} 1500\n",
        "kubelet_pod_resize_duration_milliseconds_bucket{success=\"false\",le=\"10\"} 0\n",
        "kubelet_pod_resize_duration_milliseconds_bucket{success=\"false\",le=\"50\"} 1\n",
        "kubelet_pod_resize_duration_milliseconds_count{success=\"false\"} 1\n",
    ] {
        assert!(t.contains(line), "{line} in\n{t}");
    }
}

#[test]
fn pending_reasons_with_no_pod_are_not_rendered_and_in_progress_always_is() {
    let k = Kubelet::new().unwrap();
    let t = text(&k);
    assert!(!t.contains("kubelet_pod_pending_resizes"), "{t}");
    assert!(t.contains("\nkubelet_pod_in_progress_resizes 0\n"), "{t}");

    k.resize.set_gauges(2, 1, 3);
    let t = text(&k);
    assert!(t.contains("kubelet_pod_pending_resizes{reason=\"deferred\"} 2\n"));
    assert!(t.contains("kubelet_pod_pending_resizes{reason=\"infeasible\"} 1\n"));
    assert!(t.contains("\nkubelet_pod_in_progress_resizes 3\n"));

    k.resize.set_gauges(0, 1, 0);
    let t = text(&k);
    assert!(!t.contains("reason=\"deferred\""), "{t}");
    assert!(t.contains("kubelet_pod_pending_resizes{reason=\"infeasible\"} 1\n"));
    assert!(t.contains("\nkubelet_pod_in_progress_resizes 0\n"));

    k.resize.set_gauges(0, 0, 0);
    assert!(!text(&k).contains("kubelet_pod_pending_resizes"));
}

#[test]
fn the_functions_record_in_the_served_registry() {
    let old = one("cpu", "requests", Some("100m"));
    let new = one("cpu", "requests", Some("200m"));
    assert!(super::super::resize_requested(&old, &new));
    super::super::infeasible_resize("swap_limitation");
    super::super::deferred_resize_accepted("periodic_retry");
    super::super::pod_resize_duration(Duration::from_millis(7), true);
    let t = super::super::render_kubelet();
    for prefix in [
        "kubelet_container_requested_resizes_total{operation=\"increase\",requirement=\"requests\",resource=\"cpu\"} ",
        "kubelet_pod_infeasible_resizes_total{reason_detail=\"swap_limitation\"} ",
        "kubelet_pod_deferred_accepted_resizes_total{retry_trigger=\"periodic_retry\"} ",
        "kubelet_pod_resize_duration_milliseconds_bucket{success=\"true\",le=\"10\"} ",
    ] {
        assert!(t.lines().any(|l| l.starts_with(prefix)), "{prefix} in\n{t}");
    }
}

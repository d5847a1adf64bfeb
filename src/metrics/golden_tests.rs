//! The golden list: every family on `/metrics` and `/metrics/probes` with kubelet's
//! name, type, labels and buckets, written from kubelet's sources (not from ours).

use prometheus::proto::{MetricFamily, MetricType};

use super::buckets;
use super::kubelet_families::Kubelet;
use super::probe_families::Probes;

const C: MetricType = MetricType::COUNTER;
const G: MetricType = MetricType::GAUGE;
const H: MetricType = MetricType::HISTOGRAM;

/// (name, type, label names sorted).
const KUBELET_FAMILIES: &[(&str, MetricType, &[&str])] = &[
    (
        "dra_grpc_operations_duration_seconds",
        H,
        &["driver_name", "grpc_status_code", "method_name"],
    ),
    (
        "dra_operations_duration_seconds",
        H,
        &["is_error", "operation_name"],
    ),
    ("dra_resource_claims_in_use", G, &["driver_name"]),
    ("kubelet_active_pods", G, &["static"]),
    (
        "kubelet_cgroup_manager_duration_seconds",
        H,
        &["operation_type"],
    ),
    ("kubelet_cgroup_version", G, &[]),
    (
        "kubelet_container_aligned_compute_resources_count",
        C,
        &["boundary", "scope"],
    ),
    (
        "kubelet_container_aligned_compute_resources_failure_count",
        C,
        &["boundary", "scope"],
    ),
    (
        "kubelet_container_log_filesystem_used_bytes",
        G,
        &["container", "namespace", "pod", "uid"],
    ),
    (
        "kubelet_container_requested_resizes_total",
        C,
        &["operation", "requirement", "resource"],
    ),
    ("kubelet_containers_per_pod_count", H, &[]),
    ("kubelet_cpu_manager_allocation_per_numa", G, &["numa_node"]),
    ("kubelet_cpu_manager_exclusive_cpu_allocation_count", G, &[]),
    ("kubelet_cpu_manager_pinning_errors_total", C, &[]),
    ("kubelet_cpu_manager_pinning_requests_total", C, &[]),
    ("kubelet_cpu_manager_shared_pool_size_millicores", G, &[]),
    ("kubelet_desired_pods", G, &["static"]),
    (
        "kubelet_device_plugin_alloc_duration_seconds",
        H,
        &["resource_name"],
    ),
    (
        "kubelet_device_plugin_registration_total",
        C,
        &["resource_name"],
    ),
    ("kubelet_evented_pleg_connection_error_count", C, &[]),
    ("kubelet_evented_pleg_connection_latency_seconds", H, &[]),
    ("kubelet_evented_pleg_connection_success_count", C, &[]),
    ("kubelet_evictions", C, &["eviction_signal"]),
    ("kubelet_graceful_shutdown_end_time_seconds", G, &[]),
    ("kubelet_graceful_shutdown_start_time_seconds", G, &[]),
    (
        "kubelet_http_inflight_requests",
        G,
        &["long_running", "method", "path", "server_type"],
    ),
    (
        "kubelet_http_requests_duration_seconds",
        H,
        &["long_running", "method", "path", "server_type"],
    ),
    (
        "kubelet_http_requests_total",
        C,
        &["long_running", "method", "path", "server_type"],
    ),
    ("kubelet_image_garbage_collected_total", C, &["reason"]),
    (
        "kubelet_image_pull_duration_seconds",
        H,
        &["image_size_in_bytes"],
    ),
    ("kubelet_managed_ephemeral_containers", G, &[]),
    ("kubelet_memory_manager_pinning_errors_total", C, &[]),
    ("kubelet_memory_manager_pinning_requests_total", C, &[]),
    ("kubelet_mirror_pods", G, &[]),
    ("kubelet_node_name", G, &["node"]),
    ("kubelet_pleg_discard_events", C, &[]),
    ("kubelet_pleg_last_seen_seconds", G, &[]),
    ("kubelet_pleg_relist_duration_seconds", H, &[]),
    ("kubelet_pleg_relist_interval_seconds", H, &[]),
    (
        "kubelet_pod_deferred_accepted_resizes_total",
        C,
        &["retry_trigger"],
    ),
    ("kubelet_pod_in_progress_resizes", G, &[]),
    (
        "kubelet_pod_infeasible_resizes_total",
        C,
        &["reason_detail"],
    ),
    ("kubelet_pod_pending_resizes", G, &["reason"]),
    ("kubelet_pod_resize_duration_milliseconds", H, &["success"]),
    (
        "kubelet_pod_resources_endpoint_errors_get",
        C,
        &["server_api_version"],
    ),
    (
        "kubelet_pod_resources_endpoint_errors_get_allocatable",
        C,
        &["server_api_version"],
    ),
    (
        "kubelet_pod_resources_endpoint_errors_list",
        C,
        &["server_api_version"],
    ),
    (
        "kubelet_pod_resources_endpoint_requests_get",
        C,
        &["server_api_version"],
    ),
    (
        "kubelet_pod_resources_endpoint_requests_get_allocatable",
        C,
        &["server_api_version"],
    ),
    (
        "kubelet_pod_resources_endpoint_requests_list",
        C,
        &["server_api_version"],
    ),
    (
        "kubelet_pod_resources_endpoint_requests_total",
        C,
        &["server_api_version"],
    ),
    ("kubelet_pod_start_duration_seconds", H, &[]),
    ("kubelet_pod_start_sli_duration_seconds", H, &[]),
    ("kubelet_pod_start_total_duration_seconds", H, &[]),
    ("kubelet_pod_status_sync_duration_seconds", H, &[]),
    (
        "kubelet_pod_worker_duration_seconds",
        H,
        &["operation_type"],
    ),
    ("kubelet_pod_worker_start_duration_seconds", H, &[]),
    ("kubelet_preemptions", C, &["preemption_signal"]),
    ("kubelet_restarted_pods_total", C, &["static"]),
    (
        "kubelet_run_podsandbox_duration_seconds",
        H,
        &["runtime_handler"],
    ),
    (
        "kubelet_run_podsandbox_errors_total",
        C,
        &["runtime_handler"],
    ),
    ("kubelet_running_containers", G, &["container_state"]),
    ("kubelet_running_pods", G, &[]),
    (
        "kubelet_runtime_operations_duration_seconds",
        H,
        &["operation_type"],
    ),
    (
        "kubelet_runtime_operations_errors_total",
        C,
        &["operation_type"],
    ),
    ("kubelet_runtime_operations_total", C, &["operation_type"]),
    (
        "kubelet_started_containers_errors_total",
        C,
        &["code", "container_type"],
    ),
    ("kubelet_started_containers_total", C, &["container_type"]),
    ("kubelet_started_pods_errors_total", C, &[]),
    ("kubelet_started_pods_total", C, &[]),
    ("kubelet_topology_manager_admission_duration_ms", H, &[]),
    ("kubelet_topology_manager_admission_errors_total", C, &[]),
    ("kubelet_topology_manager_admission_requests_total", C, &[]),
    (
        "kubelet_working_pods",
        G,
        &["config", "lifecycle", "static"],
    ),
    (
        "kubernetes_build_info",
        G,
        &[
            "buildDate",
            "compiler",
            "gitCommit",
            "gitTreeState",
            "gitVersion",
            "goVersion",
            "major",
            "minor",
            "platform",
        ],
    ),
];

const PROBE_FAMILIES: &[(&str, MetricType, &[&str])] = &[
    (
        "prober_probe_duration_seconds",
        H,
        &["container", "namespace", "pod", "probe_type"],
    ),
    (
        "prober_probe_total",
        C,
        &[
            "container",
            "namespace",
            "pod",
            "pod_uid",
            "probe_type",
            "result",
        ],
    ),
    ("process_start_time_seconds", G, &[]),
];

/// Gives every labelled family one series, so each shows up in `gather`.
fn touch_all(k: &Kubelet) {
    for v in [
        &k.pod_worker_duration,
        &k.cgroup_manager_duration,
        &k.runtime_operations_duration,
        &k.run_podsandbox_duration,
        &k.image_pull_duration,
        &k.resize.duration,
        &k.rm.device_plugin_alloc_duration,
    ] {
        v.with_label_values(&["x"]).observe(1.0);
    }
    k.rm.dra_operations
        .with_label_values(&["x", "y"])
        .observe(1.0);
    k.rm.dra_grpc_operations
        .with_label_values(&["x", "y", "z"])
        .observe(1.0);
    for v in [&k.rm.aligned, &k.rm.aligned_failures] {
        v.with_label_values(&["x", "y"]).inc();
    }
    let p = &k.rm.pod_resources;
    for v in [
        &p.total,
        &p.list,
        &p.get,
        &p.get_allocatable,
        &p.list_errors,
        &p.get_errors,
        &p.get_allocatable_errors,
    ] {
        v.with_label_values(&["v1"]).inc();
    }
    for v in [&k.pod_start_sli_duration, &k.pod_start_total_duration] {
        v.with_label_values(&[] as &[&str]).observe(1.0);
    }
    for v in [
        &k.runtime_operations,
        &k.runtime_operations_errors,
        &k.evictions,
        &k.image_garbage_collected,
        &k.preemptions,
        &k.run_podsandbox_errors,
        &k.started_containers,
        &k.resize.infeasible,
        &k.resize.deferred_accepted,
        &k.rm.device_plugin_registrations,
    ] {
        v.with_label_values(&["x"]).inc();
    }
    k.resize.requested.with_label_values(&["x", "y", "z"]).inc();
    k.started_containers_errors
        .with_label_values(&["x", "y"])
        .inc();
    for v in [
        &k.node_name,
        &k.running_containers,
        &k.desired_pods,
        &k.active_pods,
        &k.resize.pending,
        &k.rm.cpu_allocation_per_numa,
    ] {
        v.with_label_values(&["x"]).set(1.0);
    }
    k.working_pods.with_label_values(&["x", "y", "z"]).set(1.0);
    let http = ["GET", "metrics", "readonly", "false"];
    k.http_requests.with_label_values(&http).inc();
    k.http_inflight.with_label_values(&http).set(0.0);
    k.http_requests_duration
        .with_label_values(&http)
        .observe(0.1);
    for h in [
        &k.containers_per_pod,
        &k.pod_start_duration,
        &k.pod_worker_start_duration,
        &k.pod_status_sync_duration,
        &k.pleg_relist_duration,
        &k.pleg_relist_interval,
    ] {
        h.observe(1.0);
    }
}

fn shape(fams: &[MetricFamily]) -> Vec<(String, MetricType, Vec<String>)> {
    fams.iter()
        .map(|f| {
            let mut labels: Vec<String> = f.get_metric()[0]
                .get_label()
                .iter()
                .map(|l| l.name().to_string())
                .collect();
            labels.sort();
            (f.name().to_string(), f.get_field_type(), labels)
        })
        .collect()
}

fn want(list: &[(&str, MetricType, &[&str])]) -> Vec<(String, MetricType, Vec<String>)> {
    list.iter()
        .map(|(n, t, l)| {
            (
                n.to_string(),
                *t,
                l.iter().map(ToString::to_string).collect(),
            )
        })
        .collect()
}

fn bounds(f: &MetricFamily) -> Vec<f64> {
    f.get_metric()[0]
        .get_histogram()
        .get_bucket()
        .iter()
        .map(prometheus::proto::Bucket::upper_bound)
        .collect()
}

#[test]
fn kubelet_families_match_kubelets_names_types_labels_and_buckets() {
    let k = Kubelet::new().unwrap();
    touch_all(&k);
    // The log usage gauge is a collector the agent registers (as kubelet does).
    let usage = std::sync::Arc::new(crate::stats::VolumeUsage::default());
    usage.set(
        "u",
        crate::stats::PodUsage {
            container_logs: vec![("c".into(), Default::default())],
            ..Default::default()
        },
    );
    k.registry
        .register(Box::new(crate::stats::LogMetrics::new(usage).unwrap()))
        .unwrap();
    let fams = k.registry.gather();
    assert_eq!(shape(&fams), want(KUBELET_FAMILIES));
    for f in &fams {
        assert!(
            f.help().starts_with("[ALPHA] "),
            "{}: {}",
            f.name(),
            f.help()
        );
        if f.get_field_type() != H {
            continue;
        }
        let want: Vec<f64> = match f.name() {
            "kubelet_pod_start_duration_seconds"
            | "kubelet_pod_start_sli_duration_seconds"
            | "kubelet_pod_start_total_duration_seconds" => buckets::POD_START.to_vec(),
            "kubelet_runtime_operations_duration_seconds" => buckets::runtime_ops(),
            "kubelet_image_pull_duration_seconds" => buckets::IMAGE_PULL.to_vec(),
            "kubelet_pod_status_sync_duration_seconds" => buckets::STATUS_SYNC.to_vec(),
            "kubelet_containers_per_pod_count" => buckets::containers_per_pod(),
            "kubelet_pod_resize_duration_milliseconds" => buckets::POD_RESIZE_MS.to_vec(),
            "kubelet_topology_manager_admission_duration_ms" => buckets::topology_admission_ms(),
            _ => buckets::DEF.to_vec(),
        };
        assert_eq!(bounds(f), want, "{}", f.name());
    }
}

#[test]
fn probe_families_match_kubelets() {
    let p = Probes::new().unwrap();
    p.total
        .with_label_values(&["Readiness", "successful", "c", "p", "n", "u"])
        .inc();
    p.duration
        .with_label_values(&["Readiness", "c", "p", "n"])
        .observe(0.1);
    let fams = p.registry.gather();
    assert_eq!(shape(&fams), want(PROBE_FAMILIES));
    assert!(fams[1].help().starts_with("[BETA] "));
    assert_eq!(bounds(&fams[0]), buckets::DEF);
}

#[test]
fn rendered_text_is_sorted_and_typed() {
    let k = Kubelet::new().unwrap();
    touch_all(&k);
    let mut buf = Vec::new();
    prometheus::Encoder::encode(
        &prometheus::TextEncoder::new(),
        &k.registry.gather(),
        &mut buf,
    )
    .unwrap();
    let text = String::from_utf8(buf).unwrap();
    let types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect();
    let names: Vec<&str> = types.iter().map(|t| t.split(' ').next().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(types.contains(&"kubelet_pleg_discard_events counter"));
    assert!(text.contains(
        "# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox\n"
    ));
}

#[test]
fn resource_manager_families_have_kubelets_help_and_type() {
    let k = Kubelet::new().unwrap();
    touch_all(&k);
    let text = super::encode(&k.registry.gather());
    for (name, kind, help) in [
        (
            "kubelet_cpu_manager_pinning_requests_total",
            "counter",
            "The number of cpu core allocations which required pinning.",
        ),
        (
            "kubelet_cpu_manager_shared_pool_size_millicores",
            "gauge",
            "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
        ),
        (
            "kubelet_memory_manager_pinning_errors_total",
            "counter",
            "The number of memory pages allocations which required pinning that failed.",
        ),
        (
            "kubelet_topology_manager_admission_duration_ms",
            "histogram",
            "Duration in milliseconds to serve a pod admission request.",
        ),
        (
            "kubelet_container_aligned_compute_resources_failure_count",
            "counter",
            "Cumulative number of failures to allocate aligned compute resources to containers by alignment type.",
        ),
        (
            "kubelet_pod_resources_endpoint_requests_get_allocatable",
            "counter",
            "Number of requests to the PodResource GetAllocatableResources endpoint. Broken down by server api version.",
        ),
        (
            "kubelet_device_plugin_registration_total",
            "counter",
            "Cumulative number of device plugin registrations. Broken down by resource name.",
        ),
        (
            "dra_grpc_operations_duration_seconds",
            "histogram",
            "Duration in seconds of the DRA gRPC operations",
        ),
    ] {
        assert!(
            text.contains(&format!(
                "# HELP {name} [ALPHA] {help}\n# TYPE {name} {kind}\n"
            )),
            "{name}"
        );
    }
}

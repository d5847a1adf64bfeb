//! kubelet's Prometheus metrics: the kubelet registry served on `/metrics` and the
//! probes registry served on `/metrics/probes`.
//!
//! Both registries are process-wide statics, as kubelet's `legacyregistry`: the events
//! they count happen deep in the CRI client, the PLEG, the pod workers and the probers,
//! and threading a handle through every one of them would touch every constructor for
//! no gain (there is one agent per process). Tests that need isolation build their own
//! [`kubelet_families::Kubelet`] or [`probe_families::Probes`].

mod buckets;
mod http;
mod kubelet_families;
mod probe_families;
mod process;
mod resize;
mod resource_managers;
mod startup;

use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use prometheus::core::Collector;
use prometheus::{Encoder, TextEncoder};

use kubelet_families::Kubelet;
use probe_families::Probes;

// The servers' side: the exposition (gzip when asked) and the read-only server's HTTP metrics.
pub(crate) use http::{exposition, track_readonly, track_readwrite};
// What callers record through the registries' families.
pub(crate) use kubelet_families::WorkingPods;
pub(crate) use probe_families::{ProbeOutcome, ProbeSeries};
// `/proc/self/stat`'s parser, for the fuzz targets (`crate::fuzzing`).
pub(crate) use process::parse as parse_process_stat;
// The resource managers' label values and the pod resources API's calls.
pub(crate) use resource_managers::{
    ALIGN_SCOPE_CONTAINER, ALIGN_SCOPE_POD, ALIGNED_NUMA_NODE, ALIGNED_PHYSICAL_CPU,
    ALIGNED_UNCORE_CACHE, PodResourcesCall,
};
// Pod startup latency: pull windows and the one-time observations.
pub(crate) use startup::{
    forget_pod_pulls, pod_first_seen, pod_running, pull_finished, pull_started, status_synced,
};

/// The text exposition format kubelet serves.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

static KUBELET: LazyLock<Kubelet> = LazyLock::new(|| {
    let k = Kubelet::new().expect("kubelet metric families are constants (golden test)");
    k.registry
        .register(Box::new(
            process::Process::new(true).expect("constant process families"),
        ))
        .expect("process families registered once");
    k
});
static PROBES: LazyLock<Probes> =
    LazyLock::new(|| Probes::new().expect("probe metric families are constants (golden test)"));

/// The kubelet registry's families.
pub(crate) fn kubelet() -> &'static Kubelet {
    &KUBELET
}

/// The probes registry's families.
pub(crate) fn probes() -> &'static Probes {
    &PROBES
}

/// Adds a collector to the kubelet registry (`/metrics`), as kubelet's
/// `legacyregistry.CustomMustRegister`: for families owned elsewhere (prediction).
pub(crate) fn register(c: Box<dyn Collector>) -> prometheus::Result<()> {
    KUBELET.registry.register(c)
}

/// The text format of `families` (sorted by name by the registry's `gather`).
fn encode(families: &[prometheus::proto::MetricFamily]) -> String {
    let mut buf = Vec::new();
    // Encoding into a Vec fails only on a malformed family, which the registry rejects
    // at registration; an empty answer is the safe fallback.
    if TextEncoder::new().encode(families, &mut buf).is_err() {
        return String::new();
    }
    String::from_utf8(buf).unwrap_or_default()
}

/// `/metrics`.
pub(crate) fn render_kubelet() -> String {
    encode(&KUBELET.registry.gather())
}

/// `/metrics/probes`.
pub(crate) fn render_probes() -> String {
    encode(&PROBES.registry.gather())
}

/// kubelet's `kubelet_node_name{node}`, always 1.
pub(crate) fn set_node_name(node: &str) {
    KUBELET.node_name.with_label_values(&[node]).set(1.0);
}

/// One CRI call, as kubelet's instrumented runtime service records it.
pub(crate) fn cri_call(method: &str, took: Duration, ok: bool) {
    let op = kubelet_families::cri_operation(method);
    let k = kubelet();
    k.runtime_operations.with_label_values(&[op]).inc();
    k.runtime_operations_duration
        .with_label_values(&[op])
        .observe(took.as_secs_f64());
    if !ok {
        k.runtime_operations_errors.with_label_values(&[op]).inc();
    }
}

/// One RunPodSandbox, by runtime handler.
pub(crate) fn run_podsandbox(handler: &str, took: Duration, ok: bool) {
    let k = kubelet();
    k.run_podsandbox_duration
        .with_label_values(&[handler])
        .observe(took.as_secs_f64());
    if !ok {
        k.run_podsandbox_errors.with_label_values(&[handler]).inc();
    }
}

/// Times one cgroup manager operation (`create`, `update`, `destroy`), as kubelet's
/// cgroup manager does for each call, failed or not.
pub(crate) fn cgroup_op<T>(operation: &str, op: impl FnOnce() -> T) -> T {
    let start = std::time::Instant::now();
    let out = op();
    KUBELET
        .cgroup_manager_duration
        .with_label_values(&[operation])
        .observe(start.elapsed().as_secs_f64());
    out
}

/// A successful image pull of `size` bytes (0: unknown), queue wait included.
pub(crate) fn image_pulled(size: u64, took: Duration) {
    KUBELET
        .image_pull_duration
        .with_label_values(&[kubelet_families::image_size_class(size)])
        .observe(took.as_secs_f64());
}

/// The eviction manager evicted a pod for `signal` (e.g. `memory.available`).
pub(crate) fn evicted(signal: &str) {
    KUBELET.evictions.with_label_values(&[signal]).inc();
}

/// The image GC removed an image, for `reason` (`space` or `age`).
pub(crate) fn image_garbage_collected(reason: &str) {
    KUBELET
        .image_garbage_collected
        .with_label_values(&[reason])
        .inc();
}

/// A pod update from `old` to `new` (kubelet's `recordResizeOperations`, in
/// `HandlePodUpdates`): counts in `kubelet_container_requested_resizes_total` each cpu
/// and memory request and limit that was added, removed, increased or decreased on a
/// regular container or a sidecar (quantities by value: `1` and `1000m` are no change;
/// other init containers are not resizable, and kubelet 1.36 counts no pod-level
/// change). True when the update asks for a resize: a container's requirement or the
/// pod-level `spec.resources` changed.
pub(crate) fn resize_requested(old: &Pod, new: &Pod) -> bool {
    KUBELET.resize.count_requested(old, new)
}

/// One resize actuated by the runtime manager (kubelet's `doPodResizeAction`, timed
/// from its start whether it succeeded or not), in whole milliseconds.
pub(crate) fn pod_resize_duration(took: Duration, success: bool) {
    KUBELET.resize.observe_duration(took, success);
}

/// A resize found infeasible, once per evaluation that finds it so (kubelet counts it
/// again each time the pod's resize is looked at). kubelet's `reason_detail` values:
/// `static_pod` (resize of a static pod), `swap_limitation` (a memory request change
/// on a container with swap and no restart policy for memory),
/// `guaranteed_pod_cpu_manager_static_policy` and
/// `guaranteed_pod_memory_manager_static_policy` (a Guaranteed pod's cpu or memory
/// under the static CPU or memory manager), `insufficient_node_allocatable` (the pod's
/// new requests exceed the node's allocatable: "not enough capacity"), and
/// `feature_gate_off` (InPlacePodVerticalScaling, or
/// InPlacePodLevelResourcesVerticalScaling for a pod-level change, off).
pub(crate) fn infeasible_resize(reason_detail: &str) {
    KUBELET
        .resize
        .infeasible
        .with_label_values(&[reason_detail])
        .inc();
}

/// A resize that was Deferred was allocated on a retry, by what triggered the retry:
/// `pod_resized`, `pod_updated`, `pods_added`, `pods_removed`, `pod_terminated` or
/// `periodic_retry` (kubelet's trigger reasons).
pub(crate) fn deferred_resize_accepted(trigger: &str) {
    KUBELET
        .resize
        .deferred_accepted
        .with_label_values(&[trigger])
        .inc();
}

/// The pods whose `PodResizePending` condition says Deferred or Infeasible, and those
/// with `PodResizeInProgress`, counted over every pod (kubelet's status manager
/// recounts its resize conditions when a pending condition first appears, when one
/// clears, when an in-progress one is set or cleared, and when a pod's statuses are
/// dropped). A reason with no pod is not rendered, as kubelet's; the in-progress gauge
/// always is (0 until a resize starts).
pub(crate) fn set_resize_gauges(deferred: usize, infeasible: usize, in_progress: usize) {
    KUBELET.resize.set_gauges(deferred, infeasible, in_progress);
}

/// Pod start SLI and total: `total` from creation to all containers seen running,
/// `pulling` from the first pull's start to the last pull's end.
pub(crate) fn pod_started(total: Duration, pulling: Option<Duration>) {
    let k = kubelet();
    k.pod_start_total_duration
        .with_label_values(&[] as &[&str])
        .observe(total.as_secs_f64());
    k.pod_start_sli_duration
        .with_label_values(&[] as &[&str])
        .observe(kubelet_families::pod_start_sli(total, pulling).as_secs_f64());
}

/// The static CPU policy is asked for exclusive CPUs (kubelet counts it once a
/// Guaranteed container with whole CPUs reaches the allocation, before it can fail).
pub(crate) fn cpu_pinning_requested() {
    KUBELET.rm.cpu_pinning_requests.inc();
}

/// An exclusive CPU allocation failed.
pub(crate) fn cpu_pinning_failed() {
    KUBELET.rm.cpu_pinning_errors.inc();
}

/// The CPU manager's pools after a change: CPUs in the shared pool (reserved ones
/// excluded), CPUs held exclusively, and exclusive CPUs per NUMA node.
pub(crate) fn cpu_pools(
    shared_cpus: usize,
    exclusive_cpus: usize,
    per_numa: &std::collections::BTreeMap<usize, usize>,
) {
    KUBELET
        .rm
        .set_cpu_pools(shared_cpus, exclusive_cpus, per_numa);
}

/// The static memory policy is asked to pin a Guaranteed container's memory.
pub(crate) fn memory_pinning_requested() {
    KUBELET.rm.memory_pinning_requests.inc();
}

/// A memory pinning failed.
pub(crate) fn memory_pinning_failed() {
    KUBELET.rm.memory_pinning_errors.inc();
}

/// One topology manager admission (kubelet's `Admit`): counted, timed in whole
/// milliseconds, and counted again as an error when refused.
pub(crate) fn topology_admission(took: Duration, admitted: bool) {
    let rm = &KUBELET.rm;
    rm.topology_admission_requests.inc();
    rm.topology_admission_took(took);
    if !admitted {
        rm.topology_admission_errors.inc();
    }
}

/// Compute resources allocated aligned at `boundary` for a container or a pod
/// (`scope`): [`ALIGN_SCOPE_CONTAINER`] or [`ALIGN_SCOPE_POD`], [`ALIGNED_NUMA_NODE`],
/// [`ALIGNED_PHYSICAL_CPU`] or [`ALIGNED_UNCORE_CACHE`].
pub(crate) fn aligned_compute(scope: &str, boundary: &str) {
    KUBELET
        .rm
        .aligned
        .with_label_values(&[scope, boundary])
        .inc();
}

/// An alignment that was guaranteed could not be given.
pub(crate) fn aligned_compute_failed(scope: &str, boundary: &str) {
    KUBELET
        .rm
        .aligned_failures
        .with_label_values(&[scope, boundary])
        .inc();
}

/// Makes an alignment series exist at 0 (kubelet's managers do at start, so
/// dashboards see the series before the first pod).
pub(crate) fn aligned_compute_series(scope: &str, boundary: &str, failures_too: bool) {
    let rm = &KUBELET.rm;
    rm.aligned.with_label_values(&[scope, boundary]).inc_by(0.0);
    if failures_too {
        rm.aligned_failures
            .with_label_values(&[scope, boundary])
            .inc_by(0.0);
    }
}

/// One pod resources API request (`server_api_version="v1"`), and whether it failed.
pub(crate) fn pod_resources_request(call: PodResourcesCall, ok: bool) {
    KUBELET.rm.pod_resources_call(call, ok);
}

/// A device plugin called `Register` for `resource` (counted before the request is
/// checked, as kubelet does).
pub(crate) fn device_plugin_registration(resource: &str) {
    KUBELET
        .rm
        .device_plugin_registrations
        .with_label_values(&[resource])
        .inc();
}

/// One `Allocate` call to the device plugin of `resource`, failed or not.
pub(crate) fn device_plugin_allocation(resource: &str, took: Duration) {
    KUBELET
        .rm
        .device_plugin_alloc_duration
        .with_label_values(&[resource])
        .observe(took.as_secs_f64());
}

/// One `PrepareResources` or `UnprepareResources` of a pod's claims.
pub(crate) fn dra_operation(operation: &str, took: Duration, ok: bool) {
    KUBELET.rm.dra_operation(operation, took, ok);
}

/// One gRPC call to a DRA driver: the full method path and gRPC-Go's code name.
pub(crate) fn dra_grpc_call(driver: &str, method: &str, code: &str, took: Duration) {
    KUBELET
        .rm
        .dra_grpc_operations
        .with_label_values(&[driver, method, code])
        .observe(took.as_secs_f64());
}

/// The prepared ResourceClaims now: per driver, and in all.
pub(crate) fn dra_claims_in_use(
    per_driver: &std::collections::BTreeMap<String, usize>,
    total: usize,
) {
    KUBELET.rm.set_claims_in_use(per_driver, total);
}

#[cfg(test)]
mod golden_tests;

/// The value of one series (`name{labels}` as rendered, or a bare name) in the
/// kubelet registry's exposition now; 0 when it is not rendered. For the rooms'
/// tests, which compare it before and after what must move it.
#[cfg(test)]
pub(crate) fn sample(series: &str) -> f64 {
    render_kubelet()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

//! The families kubelet registers in its legacy registry (`pkg/kubelet/metrics`,
//! `pkg/kubelet/server/metrics`), with kubelet's names, labels, buckets and HELP, and the
//! small functions the agent calls where kubelet records each one.

use std::collections::HashMap;
use std::time::Duration;

use prometheus::{
    Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, Opts, Registry,
};

use super::buckets;
use super::resize::ResizeFamilies;
use super::resource_managers::ResourceManagerFamilies;

/// Every kubelet family, registered in one registry.
pub(crate) struct Kubelet {
    pub registry: Registry,
    pub node_name: GaugeVec,
    pub containers_per_pod: Histogram,
    pub pod_worker_duration: HistogramVec,
    pub pod_start_duration: Histogram,
    pub pod_start_sli_duration: HistogramVec,
    pub pod_start_total_duration: HistogramVec,
    #[allow(
        dead_code,
        reason = "registered so the name exists; oxlet's cgroup layer is not timed yet"
    )]
    pub cgroup_manager_duration: HistogramVec,
    pub pod_worker_start_duration: Histogram,
    #[allow(
        dead_code,
        reason = "registered so the name exists; the status writer does not time changes yet"
    )]
    pub pod_status_sync_duration: Histogram,
    pub pleg_relist_duration: Histogram,
    pub pleg_discard_events: Counter,
    pub pleg_relist_interval: Histogram,
    pub pleg_last_seen: Gauge,
    pub evented_pleg_conn_errors: Counter,
    pub evented_pleg_conn_successes: Counter,
    pub evented_pleg_conn_latency: Histogram,
    pub runtime_operations: CounterVec,
    pub runtime_operations_duration: HistogramVec,
    pub runtime_operations_errors: CounterVec,
    pub evictions: CounterVec,
    pub image_garbage_collected: CounterVec,
    #[allow(
        dead_code,
        reason = "registered so the name exists; oxlet has no critical-pod preemption"
    )]
    pub preemptions: CounterVec,
    pub running_pods: Gauge,
    pub running_containers: GaugeVec,
    pub desired_pods: GaugeVec,
    pub active_pods: GaugeVec,
    pub mirror_pods: Gauge,
    pub working_pods: GaugeVec,
    pub restarted_pods: CounterVec,
    pub run_podsandbox_duration: HistogramVec,
    pub run_podsandbox_errors: CounterVec,
    pub started_pods: Counter,
    pub started_pods_errors: Counter,
    pub started_containers: CounterVec,
    pub started_containers_errors: CounterVec,
    pub image_pull_duration: HistogramVec,
    pub cgroup_version: Gauge,
    pub http_requests: CounterVec,
    pub http_requests_duration: HistogramVec,
    pub http_inflight: GaugeVec,
    pub graceful_shutdown_start: Gauge,
    pub graceful_shutdown_end: Gauge,
    pub managed_ephemeral_containers: Gauge,
    pub resize: ResizeFamilies,
    pub rm: ResourceManagerFamilies,
}

/// The HTTP request families' labels (kubelet's server metrics).
pub(crate) const HTTP_LABELS: &[&str] = &["method", "path", "server_type", "long_running"];

fn alpha(help: &str) -> String {
    format!("[ALPHA] {help}")
}

pub(super) fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, alpha(help))
}

pub(super) fn hopts(name: &str, help: &str, b: &[f64]) -> HistogramOpts {
    HistogramOpts::new(name, alpha(help)).buckets(b.to_vec())
}

/// Registers `m` in `r` and hands it back.
pub(super) fn register<M: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    m: M,
) -> prometheus::Result<M> {
    r.register(Box::new(m.clone()))?;
    Ok(m)
}

/// The node's name, as a series whose value is always 1.
fn node_name_family(r: &Registry) -> prometheus::Result<GaugeVec> {
    register(
        r,
        GaugeVec::new(
            opts(
                "kubelet_node_name",
                "The node's name. The count is always 1.",
            ),
            &["node"],
        )?,
    )
}

/// How long pods take to start and sync (kubelet registers the cgroup manager's
/// timings among them).
struct PodSyncFamilies {
    containers_per_pod: Histogram,
    pod_worker_duration: HistogramVec,
    pod_start_duration: Histogram,
    pod_start_sli_duration: HistogramVec,
    pod_start_total_duration: HistogramVec,
    cgroup_manager_duration: HistogramVec,
    pod_worker_start_duration: Histogram,
    pod_status_sync_duration: Histogram,
}

impl PodSyncFamilies {
    /// Builds and registers the group's families, in kubelet's order.
    fn register(r: &Registry) -> prometheus::Result<Self> {
        let pod_start_help = "Duration in seconds to start a pod, excluding time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch";
        let pod_total_help = "Duration in seconds to start a pod since creation, including time to pull images and run init containers, measured from pod creation timestamp to when all its containers are reported as started and observed via watch";
        Ok(PodSyncFamilies {
            containers_per_pod: register(
                r,
                Histogram::with_opts(hopts(
                    "kubelet_containers_per_pod_count",
                    "The number of containers per pod.",
                    &buckets::containers_per_pod(),
                ))?,
            )?,
            pod_worker_duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_pod_worker_duration_seconds",
                        "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                        buckets::DEF,
                    ),
                    &["operation_type"],
                )?,
            )?,
            pod_start_duration: register(
                r,
                Histogram::with_opts(hopts(
                    "kubelet_pod_start_duration_seconds",
                    "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                    buckets::POD_START,
                ))?,
            )?,
            pod_start_sli_duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_pod_start_sli_duration_seconds",
                        pod_start_help,
                        buckets::POD_START,
                    ),
                    &[],
                )?,
            )?,
            pod_start_total_duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_pod_start_total_duration_seconds",
                        pod_total_help,
                        buckets::POD_START,
                    ),
                    &[],
                )?,
            )?,
            cgroup_manager_duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_cgroup_manager_duration_seconds",
                        "Duration in seconds for cgroup manager operations. Broken down by method.",
                        buckets::DEF,
                    ),
                    &["operation_type"],
                )?,
            )?,
            pod_worker_start_duration: register(
                r,
                Histogram::with_opts(hopts(
                    "kubelet_pod_worker_start_duration_seconds",
                    "Duration in seconds from kubelet seeing a pod to starting a worker.",
                    buckets::DEF,
                ))?,
            )?,
            pod_status_sync_duration: register(
                r,
                Histogram::with_opts(hopts(
                    "kubelet_pod_status_sync_duration_seconds",
                    "Duration in seconds to sync a pod status update. Measures time from detection of a change to pod status until the API is successfully updated for that pod, even if multiple intevening changes to pod status occur.",
                    buckets::STATUS_SYNC,
                ))?,
            )?,
        })
    }
}

/// The pod lifecycle event generator's relists.
struct PlegFamilies {
    pleg_relist_duration: Histogram,
    pleg_discard_events: Counter,
    pleg_relist_interval: Histogram,
    pleg_last_seen: Gauge,
    evented_pleg_conn_errors: Counter,
    evented_pleg_conn_successes: Counter,
    evented_pleg_conn_latency: Histogram,
}

impl PlegFamilies {
    /// Builds and registers the group's families, in kubelet's order.
    fn register(r: &Registry) -> prometheus::Result<Self> {
        Ok(PlegFamilies {
            pleg_relist_duration: register(
                r,
                Histogram::with_opts(hopts(
                    "kubelet_pleg_relist_duration_seconds",
                    "Duration in seconds for relisting pods in PLEG.",
                    buckets::DEF,
                ))?,
            )?,
            pleg_discard_events: register(
                r,
                Counter::with_opts(opts(
                    "kubelet_pleg_discard_events",
                    "The number of discard events in PLEG.",
                ))?,
            )?,
            pleg_relist_interval: register(
                r,
                Histogram::with_opts(hopts(
                    "kubelet_pleg_relist_interval_seconds",
                    "Interval in seconds between relisting in PLEG.",
                    buckets::DEF,
                ))?,
            )?,
            pleg_last_seen: register(
                r,
                Gauge::with_opts(opts(
                    "kubelet_pleg_last_seen_seconds",
                    "Timestamp in seconds when PLEG was last seen active.",
                ))?,
            )?,
            evented_pleg_conn_errors: register(
                r,
                Counter::with_opts(opts(
                    "kubelet_evented_pleg_connection_error_count",
                    "The number of errors encountered during the establishment of streaming connection with the CRI runtime.",
                ))?,
            )?,
            evented_pleg_conn_successes: register(
                r,
                Counter::with_opts(opts(
                    "kubelet_evented_pleg_connection_success_count",
                    "The number of times a streaming client was obtained to receive CRI Events.",
                ))?,
            )?,
            evented_pleg_conn_latency: register(
                r,
                Histogram::with_opts(hopts(
                    "kubelet_evented_pleg_connection_latency_seconds",
                    "The latency of streaming connection with the CRI runtime, measured in seconds.",
                    buckets::DEF,
                ))?,
            )?,
        })
    }
}

/// The CRI operations, their durations and errors.
struct RuntimeFamilies {
    runtime_operations: CounterVec,
    runtime_operations_duration: HistogramVec,
    runtime_operations_errors: CounterVec,
}

impl RuntimeFamilies {
    /// Builds and registers the group's families, in kubelet's order.
    fn register(r: &Registry) -> prometheus::Result<Self> {
        Ok(RuntimeFamilies {
            runtime_operations: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_runtime_operations_total",
                        "Cumulative number of runtime operations by operation type.",
                    ),
                    &["operation_type"],
                )?,
            )?,
            runtime_operations_duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_runtime_operations_duration_seconds",
                        "Duration in seconds of runtime operations. Broken down by operation type.",
                        &buckets::runtime_ops(),
                    ),
                    &["operation_type"],
                )?,
            )?,
            runtime_operations_errors: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_runtime_operations_errors_total",
                        "Cumulative number of runtime operation errors by operation type.",
                    ),
                    &["operation_type"],
                )?,
            )?,
        })
    }
}

/// What the kubelet takes back from pods and images: evictions, image garbage
/// collection, preemptions.
struct ReclaimFamilies {
    evictions: CounterVec,
    image_garbage_collected: CounterVec,
    preemptions: CounterVec,
}

impl ReclaimFamilies {
    /// Builds and registers the group's families, in kubelet's order.
    fn register(r: &Registry) -> prometheus::Result<Self> {
        Ok(ReclaimFamilies {
            evictions: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_evictions",
                        "Cumulative number of pod evictions by eviction signal",
                    ),
                    &["eviction_signal"],
                )?,
            )?,
            image_garbage_collected: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_image_garbage_collected_total",
                        "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
                    ),
                    &["reason"],
                )?,
            )?,
            preemptions: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_preemptions",
                        "Cumulative number of pod preemptions by preemption resource",
                    ),
                    &["preemption_signal"],
                )?,
            )?,
        })
    }
}

/// Housekeeping's and the PLEG's tallies of pods and containers.
struct PodCountFamilies {
    running_pods: Gauge,
    running_containers: GaugeVec,
    desired_pods: GaugeVec,
    active_pods: GaugeVec,
    mirror_pods: Gauge,
    working_pods: GaugeVec,
    restarted_pods: CounterVec,
}

impl PodCountFamilies {
    /// Builds and registers the group's families, in kubelet's order.
    fn register(r: &Registry) -> prometheus::Result<Self> {
        Ok(PodCountFamilies {
            running_pods: register(
                r,
                Gauge::with_opts(opts(
                    "kubelet_running_pods",
                    "Number of pods that have a running pod sandbox",
                ))?,
            )?,
            running_containers: register(
                r,
                GaugeVec::new(
                    opts(
                        "kubelet_running_containers",
                        "Number of containers currently running",
                    ),
                    &["container_state"],
                )?,
            )?,
            desired_pods: register(
                r,
                GaugeVec::new(
                    opts(
                        "kubelet_desired_pods",
                        "The number of pods the kubelet is being instructed to run. static is true if the pod is not from the apiserver.",
                    ),
                    &["static"],
                )?,
            )?,
            active_pods: register(
                r,
                GaugeVec::new(
                    opts(
                        "kubelet_active_pods",
                        "The number of pods the kubelet considers active and which are being considered when admitting new pods. static is true if the pod is not from the apiserver.",
                    ),
                    &["static"],
                )?,
            )?,
            mirror_pods: register(
                r,
                Gauge::with_opts(opts(
                    "kubelet_mirror_pods",
                    "The number of mirror pods the kubelet will try to create (one per admitted static pod)",
                ))?,
            )?,
            working_pods: register(
                r,
                GaugeVec::new(
                    opts(
                        "kubelet_working_pods",
                        "Number of pods the kubelet is actually running, broken down by lifecycle phase, whether the pod is desired, orphaned, or runtime only (also orphaned), and whether the pod is static. An orphaned pod has been removed from local configuration or force deleted in the API and consumes resources that are not otherwise visible.",
                    ),
                    &["lifecycle", "config", "static"],
                )?,
            )?,
            restarted_pods: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_restarted_pods_total",
                        "Number of pods that have been restarted because they were deleted and recreated with the same UID while the kubelet was watching them (common for static pods, extremely uncommon for API pods)",
                    ),
                    &["static"],
                )?,
            )?,
        })
    }
}

/// Sandboxes, pods and containers started (and their errors), and image pulls.
struct StartFamilies {
    run_podsandbox_duration: HistogramVec,
    run_podsandbox_errors: CounterVec,
    started_pods: Counter,
    started_pods_errors: Counter,
    started_containers: CounterVec,
    started_containers_errors: CounterVec,
    image_pull_duration: HistogramVec,
}

impl StartFamilies {
    /// Builds and registers the group's families, in kubelet's order.
    fn register(r: &Registry) -> prometheus::Result<Self> {
        Ok(StartFamilies {
            run_podsandbox_duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_run_podsandbox_duration_seconds",
                        "Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
                        buckets::DEF,
                    ),
                    &["runtime_handler"],
                )?,
            )?,
            run_podsandbox_errors: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_run_podsandbox_errors_total",
                        "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
                    ),
                    &["runtime_handler"],
                )?,
            )?,
            started_pods: register(
                r,
                Counter::with_opts(opts(
                    "kubelet_started_pods_total",
                    "Cumulative number of pods started",
                ))?,
            )?,
            started_pods_errors: register(
                r,
                Counter::with_opts(opts(
                    "kubelet_started_pods_errors_total",
                    "Cumulative number of errors when starting pods",
                ))?,
            )?,
            started_containers: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_started_containers_total",
                        "Cumulative number of containers started",
                    ),
                    &["container_type"],
                )?,
            )?,
            started_containers_errors: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_started_containers_errors_total",
                        "Cumulative number of errors when starting containers",
                    ),
                    &["container_type", "code"],
                )?,
            )?,
            image_pull_duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_image_pull_duration_seconds",
                        "Duration in seconds to pull an image.",
                        buckets::IMAGE_PULL,
                    ),
                    &["image_size_in_bytes"],
                )?,
            )?,
        })
    }
}

/// The cgroup version of the host.
fn cgroup_version_family(r: &Registry) -> prometheus::Result<Gauge> {
    register(
        r,
        Gauge::with_opts(opts(
            "kubelet_cgroup_version",
            "cgroup version on the hosts.",
        ))?,
    )
}

/// The node shutdown manager's times, the ephemeral container count, and
/// component-base's build info.
struct NodeFamilies {
    graceful_shutdown_start: Gauge,
    graceful_shutdown_end: Gauge,
    managed_ephemeral_containers: Gauge,
}

/// component-base's `kubernetes_build_info` labels, in its order.
const BUILD_INFO_LABELS: &[&str] = &[
    "major",
    "minor",
    "gitVersion",
    "gitCommit",
    "gitTreeState",
    "buildDate",
    "goVersion",
    "compiler",
    "platform",
];

/// Go's `GOOS/GOARCH` of this build (component-base's `platform` label).
fn go_platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// The build info's values: the Kubernetes release followed (as the Node's
/// `kubeletVersion`), no git stamp (oxlet embeds none: Kubernetes' unstamped
/// defaults), no Go version (there is no Go in oxlet), `rustc` as the compiler.
fn build_info_values() -> [String; 9] {
    let version = crate::version::KUBERNETES;
    let mut parts = version.trim_start_matches('v').split('.');
    let major = parts.next().unwrap_or_default().to_string();
    let minor = parts.next().unwrap_or_default().to_string();
    [
        major,
        minor,
        version.to_string(),
        String::new(),
        String::new(),
        "1970-01-01T00:00:00Z".to_string(),
        String::new(),
        "rustc".to_string(),
        go_platform(),
    ]
}

impl NodeFamilies {
    fn register(r: &Registry) -> prometheus::Result<Self> {
        let gauge = |name: &str, help: &str| register(r, Gauge::with_opts(opts(name, help))?);
        // Set once here; nothing changes it.
        let build_info = register(
            r,
            GaugeVec::new(
                opts(
                    "kubernetes_build_info",
                    "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
                ),
                BUILD_INFO_LABELS,
            )?,
        )?;
        let values = build_info_values();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        build_info.with_label_values(&values).set(1.0);
        Ok(NodeFamilies {
            // kubelet's help says "start" for both.
            graceful_shutdown_start: gauge(
                "kubelet_graceful_shutdown_start_time_seconds",
                "Last graceful shutdown start time since unix epoch in seconds",
            )?,
            graceful_shutdown_end: gauge(
                "kubelet_graceful_shutdown_end_time_seconds",
                "Last graceful shutdown start time since unix epoch in seconds",
            )?,
            managed_ephemeral_containers: gauge(
                "kubelet_managed_ephemeral_containers",
                "Current number of ephemeral containers in pods managed by this kubelet.",
            )?,
        })
    }
}

/// The kubelet server's requests (kubelet's `pkg/kubelet/server/metrics`).
struct HttpFamilies {
    http_requests: CounterVec,
    http_requests_duration: HistogramVec,
    http_inflight: GaugeVec,
}

impl HttpFamilies {
    /// Builds and registers the group's families, in kubelet's order.
    fn register(r: &Registry) -> prometheus::Result<Self> {
        Ok(HttpFamilies {
            http_requests: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_http_requests_total",
                        "Number of the http requests received since the server started",
                    ),
                    HTTP_LABELS,
                )?,
            )?,
            http_requests_duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_http_requests_duration_seconds",
                        "Duration in seconds to serve http requests",
                        buckets::DEF,
                    ),
                    HTTP_LABELS,
                )?,
            )?,
            http_inflight: register(
                r,
                GaugeVec::new(
                    opts(
                        "kubelet_http_inflight_requests",
                        "Number of the inflight http requests",
                    ),
                    HTTP_LABELS,
                )?,
            )?,
        })
    }
}

impl Kubelet {
    /// Builds and registers every family. The names and labels are constants, so an
    /// error here is a programming error caught by the golden test.
    pub(crate) fn new() -> prometheus::Result<Kubelet> {
        let r = Registry::new();
        let node_name = node_name_family(&r)?;
        let pods = PodSyncFamilies::register(&r)?;
        let pleg = PlegFamilies::register(&r)?;
        let runtime = RuntimeFamilies::register(&r)?;
        let reclaim = ReclaimFamilies::register(&r)?;
        let counts = PodCountFamilies::register(&r)?;
        let starts = StartFamilies::register(&r)?;
        let cgroup_version = cgroup_version_family(&r)?;
        let http = HttpFamilies::register(&r)?;
        let node = NodeFamilies::register(&r)?;
        let resize = ResizeFamilies::register(&r)?;
        let rm = ResourceManagerFamilies::register(&r)?;
        let k = Kubelet {
            graceful_shutdown_start: node.graceful_shutdown_start,
            graceful_shutdown_end: node.graceful_shutdown_end,
            managed_ephemeral_containers: node.managed_ephemeral_containers,
            node_name,
            containers_per_pod: pods.containers_per_pod,
            pod_worker_duration: pods.pod_worker_duration,
            pod_start_duration: pods.pod_start_duration,
            pod_start_sli_duration: pods.pod_start_sli_duration,
            pod_start_total_duration: pods.pod_start_total_duration,
            cgroup_manager_duration: pods.cgroup_manager_duration,
            pod_worker_start_duration: pods.pod_worker_start_duration,
            pod_status_sync_duration: pods.pod_status_sync_duration,
            pleg_relist_duration: pleg.pleg_relist_duration,
            pleg_discard_events: pleg.pleg_discard_events,
            pleg_relist_interval: pleg.pleg_relist_interval,
            pleg_last_seen: pleg.pleg_last_seen,
            evented_pleg_conn_errors: pleg.evented_pleg_conn_errors,
            evented_pleg_conn_successes: pleg.evented_pleg_conn_successes,
            evented_pleg_conn_latency: pleg.evented_pleg_conn_latency,
            runtime_operations: runtime.runtime_operations,
            runtime_operations_duration: runtime.runtime_operations_duration,
            runtime_operations_errors: runtime.runtime_operations_errors,
            evictions: reclaim.evictions,
            image_garbage_collected: reclaim.image_garbage_collected,
            preemptions: reclaim.preemptions,
            running_pods: counts.running_pods,
            running_containers: counts.running_containers,
            desired_pods: counts.desired_pods,
            active_pods: counts.active_pods,
            mirror_pods: counts.mirror_pods,
            working_pods: counts.working_pods,
            restarted_pods: counts.restarted_pods,
            run_podsandbox_duration: starts.run_podsandbox_duration,
            run_podsandbox_errors: starts.run_podsandbox_errors,
            started_pods: starts.started_pods,
            started_pods_errors: starts.started_pods_errors,
            started_containers: starts.started_containers,
            started_containers_errors: starts.started_containers_errors,
            image_pull_duration: starts.image_pull_duration,
            cgroup_version,
            http_requests: http.http_requests,
            http_requests_duration: http.http_requests_duration,
            http_inflight: http.http_inflight,
            resize,
            rm,
            registry: r,
        };
        // kubelet adds 0 to both series at the first housekeeping; oxlet has no
        // housekeeping-time restart detection, so both series exist from the start.
        for s in ["true", ""] {
            k.restarted_pods.with_label_values(&[s]).inc_by(0.0);
        }
        Ok(k)
    }

    /// One relist's container counts by state. A state with no containers this relist
    /// is not written, so it keeps its last value (kubelet's quirk: it never resets a
    /// vanished state).
    pub(crate) fn set_running(&self, pods: usize, states: &HashMap<&'static str, i64>) {
        self.running_pods.set(pods as f64);
        for (state, n) in states.iter().filter(|(_, n)| **n > 0) {
            self.running_containers
                .with_label_values(&[*state])
                .set(*n as f64);
        }
    }
}

/// Pod workers by (lifecycle, config, static), kubelet's `SyncKnownPods` tally.
#[derive(Debug, Default)]
pub(crate) struct WorkingPods(HashMap<(&'static str, &'static str, bool), usize>);

impl WorkingPods {
    pub(crate) fn add(&mut self, lifecycle: &'static str, config: &'static str, is_static: bool) {
        *self.0.entry((lifecycle, config, is_static)).or_default() += 1;
    }
}

fn static_label(is_static: bool) -> &'static str {
    if is_static { "true" } else { "" }
}

impl Kubelet {
    /// Housekeeping's tallies: desired and active pods as (API, static), mirror pods,
    /// and the ephemeral containers of the desired pods.
    pub(crate) fn set_pod_counts(
        &self,
        desired: (usize, usize),
        active: (usize, usize),
        mirrors: usize,
        ephemeral_containers: usize,
    ) {
        (self.managed_ephemeral_containers).set(ephemeral_containers as f64);
        for (vec, (api, stat)) in [(&self.desired_pods, desired), (&self.active_pods, active)] {
            vec.with_label_values(&[""]).set(api as f64);
            vec.with_label_values(&["true"]).set(stat as f64);
        }
        self.mirror_pods.set(mirrors as f64);
    }

    /// Every (lifecycle, config, static) combination is written, zeros included, so a
    /// bucket that empties reads 0 (kubelet writes them all each housekeeping).
    pub(crate) fn set_working(&self, w: &WorkingPods) {
        for lifecycle in ["sync", "terminating", "terminated"] {
            for config in ["desired", "orphan", "runtime_only"] {
                for is_static in [false, true] {
                    let n =
                        w.0.get(&(lifecycle, config, is_static))
                            .copied()
                            .unwrap_or(0);
                    self.working_pods
                        .with_label_values(&[lifecycle, config, static_label(is_static)])
                        .set(n as f64);
                }
            }
        }
    }
}

/// kubelet's `operation_type` for a CRI method (`ListPodSandbox` → `list_podsandbox`).
pub(crate) fn cri_operation(method: &str) -> &'static str {
    match method {
        "Version" => "version",
        "Status" => "status",
        "RuntimeConfig" => "runtime_config",
        "CreateContainer" => "create_container",
        "StartContainer" => "start_container",
        "StopContainer" => "stop_container",
        "RemoveContainer" => "remove_container",
        "ListContainers" => "list_containers",
        "ContainerStatus" => "container_status",
        "UpdateContainerResources" => "update_container",
        "ReopenContainerLog" => "reopen_container_log",
        "ExecSync" => "exec_sync",
        "Exec" => "exec",
        "Attach" => "attach",
        "PortForward" => "port_forward",
        "RunPodSandbox" => "run_podsandbox",
        "StopPodSandbox" => "stop_podsandbox",
        "RemovePodSandbox" => "remove_podsandbox",
        "PodSandboxStatus" => "podsandbox_status",
        "ListPodSandbox" => "list_podsandbox",
        "ContainerStats" => "container_stats",
        "ListContainerStats" => "list_container_stats",
        "PodSandboxStats" => "podsandbox_stats",
        "ListPodSandboxStats" => "list_podsandbox_stats",
        "UpdatePodSandboxResources" => "update_podsandbox_resources",
        "UpdateRuntimeConfig" => "update_runtime_config",
        "CheckpointContainer" => "checkpoint_container",
        "GetContainerEvents" => "get_container_events",
        "ListMetricDescriptors" => "list_metric_descriptors",
        "ListPodSandboxMetrics" => "list_podsandbox_metrics",
        "ListImages" => "list_images",
        "ImageStatus" => "image_status",
        "PullImage" => "pull_image",
        "RemoveImage" => "remove_image",
        "ImageFsInfo" => "image_fs_info",
        _ => "unknown",
    }
}

/// kubelet's image size class (binary units, lower bound exclusive; 0 is unknown).
pub(crate) fn image_size_class(bytes: u64) -> &'static str {
    const MB: u64 = 1024 * 1024;
    const GB: u64 = 1024 * MB;
    const CLASSES: &[(u64, &str)] = &[
        (100 * GB, "GT100GB"),
        (60 * GB, "60GB-100GB"),
        (40 * GB, "40GB-60GB"),
        (30 * GB, "30GB-40GB"),
        (20 * GB, "20GB-30GB"),
        (10 * GB, "10GB-20GB"),
        (5 * GB, "5GB-10GB"),
        (GB, "1GB-5GB"),
        (500 * MB, "500MB-1GB"),
        (100 * MB, "100MB-500MB"),
        (10 * MB, "10MB-100MB"),
        (0, "0-10MB"),
    ];
    if bytes == 0 {
        return "N/A";
    }
    CLASSES
        .iter()
        .find(|(lower, _)| bytes > *lower)
        .map_or("N/A", |(_, l)| l)
}

/// Pod start SLI: time from creation to all containers seen running, minus the time
/// spent pulling images (first pull start to last pull end), never negative.
pub(crate) fn pod_start_sli(total: Duration, pulling: Option<Duration>) -> Duration {
    total.saturating_sub(pulling.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_size_classes_are_kubelets() {
        const MB: u64 = 1024 * 1024;
        assert_eq!(image_size_class(0), "N/A");
        assert_eq!(image_size_class(1), "0-10MB");
        assert_eq!(image_size_class(10 * MB), "0-10MB");
        assert_eq!(image_size_class(10 * MB + 1), "10MB-100MB");
        assert_eq!(image_size_class(600 * MB), "500MB-1GB");
        assert_eq!(image_size_class(1024 * MB), "500MB-1GB");
        assert_eq!(image_size_class(1024 * MB + 1), "1GB-5GB");
        assert_eq!(image_size_class(200 * 1024 * MB), "GT100GB");
    }

    #[test]
    fn cri_operations_use_kubelets_names() {
        assert_eq!(cri_operation("RunPodSandbox"), "run_podsandbox");
        assert_eq!(cri_operation("ListPodSandbox"), "list_podsandbox");
        assert_eq!(cri_operation("PodSandboxStatus"), "podsandbox_status");
        assert_eq!(
            cri_operation("UpdateContainerResources"),
            "update_container"
        );
        assert_eq!(cri_operation("PullImage"), "pull_image");
    }

    #[test]
    fn running_containers_never_reset_a_vanished_state() {
        let k = Kubelet::new().unwrap();
        let first = HashMap::from([("running", 2), ("exited", 1)]);
        k.set_running(1, &first);
        let second = HashMap::from([("running", 1)]);
        k.set_running(1, &second);
        let v = |s: &str| k.running_containers.with_label_values(&[s]).get();
        assert_eq!(v("running"), 1.0);
        assert_eq!(
            v("exited"),
            1.0,
            "a state that fell to 0 keeps its last value"
        );
    }

    #[test]
    fn working_pods_write_every_combination() {
        let k = Kubelet::new().unwrap();
        let mut w = WorkingPods::default();
        w.add("sync", "desired", true);
        w.add("sync", "desired", true);
        w.add("terminating", "orphan", false);
        k.set_working(&w);
        let v = |l: &str, c: &str, s: &str| k.working_pods.with_label_values(&[l, c, s]).get();
        assert_eq!(v("sync", "desired", "true"), 2.0);
        assert_eq!(v("terminating", "orphan", ""), 1.0);
        k.set_working(&WorkingPods::default());
        assert_eq!(
            v("sync", "desired", "true"),
            0.0,
            "an emptied bucket reads 0"
        );
        let fams = k.registry.gather();
        let f = fams
            .iter()
            .find(|f| f.name() == "kubelet_working_pods")
            .unwrap();
        assert_eq!(f.get_metric().len(), 18);
        k.set_pod_counts((2, 1), (1, 1), 1, 3);
        assert_eq!(k.managed_ephemeral_containers.get(), 3.0);
        assert_eq!(k.desired_pods.with_label_values(&[""]).get(), 2.0);
        assert_eq!(k.desired_pods.with_label_values(&["true"]).get(), 1.0);
        assert_eq!(k.mirror_pods.get(), 1.0);
    }

    #[test]
    fn sli_excludes_pull_time() {
        let s = pod_start_sli(Duration::from_secs(10), Some(Duration::from_secs(7)));
        assert_eq!(s, Duration::from_secs(3));
        assert_eq!(
            pod_start_sli(Duration::from_secs(2), Some(Duration::from_secs(5))),
            Duration::ZERO
        );
        assert_eq!(
            pod_start_sli(Duration::from_secs(2), None),
            Duration::from_secs(2)
        );
    }
}

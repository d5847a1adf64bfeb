//! kubelet's resource manager families (`pkg/kubelet/metrics`): the CPU manager's
//! pinning and pools, the memory manager's pinning, the topology manager's admissions
//! and the alignment they guarantee, the pod resources API's requests, the device
//! plugins' registrations and `Allocate` calls, and DRA's prepare/unprepare work, its
//! driver calls and the ResourceClaims in use. Every one is registered at start, as
//! kubelet registers them (the gates that guard some are on by default in 1.36).

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus::{Counter, CounterVec, Gauge, GaugeVec, Histogram, HistogramVec, Registry};

use super::buckets;
use super::kubelet_families::{hopts, opts, register};

/// The `scope` label of the alignment counters: one container, or the whole pod.
pub(crate) const ALIGN_SCOPE_CONTAINER: &str = "container";
pub(crate) const ALIGN_SCOPE_POD: &str = "pod";
/// The `boundary` label: the NUMA node (topology manager), the physical core and the
/// uncore (L3) cache (CPU manager).
pub(crate) const ALIGNED_NUMA_NODE: &str = "numa_node";
pub(crate) const ALIGNED_PHYSICAL_CPU: &str = "physical_cpu";
pub(crate) const ALIGNED_UNCORE_CACHE: &str = "uncore_cache";
/// The `driver_name` of the claims in use by any driver.
pub(crate) const DRA_ANY_DRIVER: &str = "<any>";

/// The pod resources API's calls, each with its request and error counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodResourcesCall {
    List,
    Get,
    GetAllocatable,
}

/// The resource manager families, registered in the kubelet registry.
pub(crate) struct ResourceManagerFamilies {
    pub cpu_pinning_requests: Counter,
    pub cpu_pinning_errors: Counter,
    pub cpu_shared_pool_millicores: Gauge,
    pub cpu_exclusive_count: Gauge,
    pub cpu_allocation_per_numa: GaugeVec,
    pub memory_pinning_requests: Counter,
    pub memory_pinning_errors: Counter,
    pub topology_admission_requests: Counter,
    pub topology_admission_errors: Counter,
    pub topology_admission_duration: Histogram,
    pub aligned: CounterVec,
    pub aligned_failures: CounterVec,
    pub pod_resources: PodResourcesFamilies,
    pub device_plugin_registrations: CounterVec,
    pub device_plugin_alloc_duration: HistogramVec,
    pub dra_operations: HistogramVec,
    pub dra_grpc_operations: HistogramVec,
    pub dra_claims_in_use: GaugeVec,
}

/// The pod resources API's seven counters, by `server_api_version`.
pub(crate) struct PodResourcesFamilies {
    pub total: CounterVec,
    pub list: CounterVec,
    pub get: CounterVec,
    pub get_allocatable: CounterVec,
    pub list_errors: CounterVec,
    pub get_errors: CounterVec,
    pub get_allocatable_errors: CounterVec,
}

fn counter(r: &Registry, name: &str, help: &str) -> prometheus::Result<Counter> {
    register(r, Counter::with_opts(opts(name, help))?)
}

fn counter_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<CounterVec> {
    register(r, CounterVec::new(opts(name, help), labels)?)
}

fn gauge(r: &Registry, name: &str, help: &str) -> prometheus::Result<Gauge> {
    register(r, Gauge::with_opts(opts(name, help))?)
}

fn histogram_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> prometheus::Result<HistogramVec> {
    register(
        r,
        HistogramVec::new(hopts(name, help, buckets::DEF), labels)?,
    )
}

impl PodResourcesFamilies {
    fn register(r: &Registry) -> prometheus::Result<Self> {
        let v = &["server_api_version"];
        let by = "Broken down by server api version.";
        let c = |name: &str, help: String| counter_vec(r, name, &help, v);
        Ok(PodResourcesFamilies {
            total: c(
                "kubelet_pod_resources_endpoint_requests_total",
                format!("Cumulative number of requests to the PodResource endpoint. {by}"),
            )?,
            list: c(
                "kubelet_pod_resources_endpoint_requests_list",
                format!("Number of requests to the PodResource List endpoint. {by}"),
            )?,
            get_allocatable: c(
                "kubelet_pod_resources_endpoint_requests_get_allocatable",
                format!(
                    "Number of requests to the PodResource GetAllocatableResources endpoint. {by}"
                ),
            )?,
            list_errors: c(
                "kubelet_pod_resources_endpoint_errors_list",
                format!(
                    "Number of requests to the PodResource List endpoint which returned error. {by}"
                ),
            )?,
            get_allocatable_errors: c(
                "kubelet_pod_resources_endpoint_errors_get_allocatable",
                format!(
                    "Number of requests to the PodResource GetAllocatableResources endpoint which returned error. {by}"
                ),
            )?,
            get: c(
                "kubelet_pod_resources_endpoint_requests_get",
                format!("Number of requests to the PodResource Get endpoint. {by}"),
            )?,
            get_errors: c(
                "kubelet_pod_resources_endpoint_errors_get",
                format!(
                    "Number of requests to the PodResource Get endpoint which returned error. {by}"
                ),
            )?,
        })
    }

    /// The request and error counters of `call`.
    fn of(&self, call: PodResourcesCall) -> (&CounterVec, &CounterVec) {
        match call {
            PodResourcesCall::List => (&self.list, &self.list_errors),
            PodResourcesCall::Get => (&self.get, &self.get_errors),
            PodResourcesCall::GetAllocatable => {
                (&self.get_allocatable, &self.get_allocatable_errors)
            }
        }
    }
}

impl ResourceManagerFamilies {
    /// Builds and registers the group's families with kubelet's names, HELP and labels.
    pub(super) fn register(r: &Registry) -> prometheus::Result<Self> {
        let align_labels = &["scope", "boundary"];
        let claims_help = "The number of ResourceClaims that are currently in use on the node, by driver name (driver_name label value) and across all drivers (special value <any> for driver_name). Note that the sum of all by-driver counts is not the total number of in-use ResourceClaims because the same ResourceClaim might use devices from different drivers. Instead, use the count for the <any> driver_name.";
        let dra_ops_help = "Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops. Identified by the name of the operation (PrepareResources or UnprepareResources) and separated by the success of the operation. The number of failed operations is provided through the histogram's overall count.";
        let f = ResourceManagerFamilies {
            device_plugin_registrations: counter_vec(
                r,
                "kubelet_device_plugin_registration_total",
                "Cumulative number of device plugin registrations. Broken down by resource name.",
                &["resource_name"],
            )?,
            device_plugin_alloc_duration: histogram_vec(
                r,
                "kubelet_device_plugin_alloc_duration_seconds",
                "Duration in seconds to serve a device plugin Allocation request. Broken down by resource name.",
                &["resource_name"],
            )?,
            pod_resources: PodResourcesFamilies::register(r)?,
            cpu_pinning_requests: counter(
                r,
                "kubelet_cpu_manager_pinning_requests_total",
                "The number of cpu core allocations which required pinning.",
            )?,
            cpu_pinning_errors: counter(
                r,
                "kubelet_cpu_manager_pinning_errors_total",
                "The number of cpu core allocations which required pinning failed.",
            )?,
            cpu_shared_pool_millicores: gauge(
                r,
                "kubelet_cpu_manager_shared_pool_size_millicores",
                "The size of the shared CPU pool for non-guaranteed QoS pods, in millicores.",
            )?,
            cpu_exclusive_count: gauge(
                r,
                "kubelet_cpu_manager_exclusive_cpu_allocation_count",
                "The total number of CPUs exclusively allocated to containers running on this node",
            )?,
            cpu_allocation_per_numa: register(
                r,
                GaugeVec::new(
                    opts(
                        "kubelet_cpu_manager_allocation_per_numa",
                        "Number of CPUs allocated per NUMA node",
                    ),
                    &["numa_node"],
                )?,
            )?,
            memory_pinning_requests: counter(
                r,
                "kubelet_memory_manager_pinning_requests_total",
                "The number of memory pages allocations which required pinning.",
            )?,
            memory_pinning_errors: counter(
                r,
                "kubelet_memory_manager_pinning_errors_total",
                "The number of memory pages allocations which required pinning that failed.",
            )?,
            topology_admission_requests: counter(
                r,
                "kubelet_topology_manager_admission_requests_total",
                "The number of admission requests where resources have to be aligned.",
            )?,
            topology_admission_errors: counter(
                r,
                "kubelet_topology_manager_admission_errors_total",
                "The number of admission request failures where resources could not be aligned.",
            )?,
            topology_admission_duration: register(
                r,
                Histogram::with_opts(hopts(
                    "kubelet_topology_manager_admission_duration_ms",
                    "Duration in milliseconds to serve a pod admission request.",
                    &buckets::topology_admission_ms(),
                ))?,
            )?,
            aligned: counter_vec(
                r,
                "kubelet_container_aligned_compute_resources_count",
                "Cumulative number of aligned compute resources allocated to containers by alignment type.",
                align_labels,
            )?,
            aligned_failures: counter_vec(
                r,
                "kubelet_container_aligned_compute_resources_failure_count",
                "Cumulative number of failures to allocate aligned compute resources to containers by alignment type.",
                align_labels,
            )?,
            dra_operations: histogram_vec(
                r,
                "dra_operations_duration_seconds",
                dra_ops_help,
                &["operation_name", "is_error"],
            )?,
            dra_grpc_operations: histogram_vec(
                r,
                "dra_grpc_operations_duration_seconds",
                "Duration in seconds of the DRA gRPC operations",
                &["driver_name", "method_name", "grpc_status_code"],
            )?,
            dra_claims_in_use: register(
                r,
                GaugeVec::new(
                    opts("dra_resource_claims_in_use", claims_help),
                    &["driver_name"],
                )?,
            )?,
        };
        // kubelet's claim collector always reports the count over all drivers.
        f.dra_claims_in_use
            .with_label_values(&[DRA_ANY_DRIVER])
            .set(0.0);
        Ok(f)
    }

    /// The CPU manager's pools: the shared pool's CPUs (reserved ones excluded), the
    /// CPUs held exclusively, and those per NUMA node (every node of the machine).
    pub(super) fn set_cpu_pools(
        &self,
        shared_cpus: usize,
        exclusive_cpus: usize,
        per_numa: &BTreeMap<usize, usize>,
    ) {
        self.cpu_shared_pool_millicores
            .set((shared_cpus * 1000) as f64);
        self.cpu_exclusive_count.set(exclusive_cpus as f64);
        for (node, n) in per_numa {
            self.cpu_allocation_per_numa
                .with_label_values(&[&node.to_string()])
                .set(*n as f64);
        }
    }

    /// One pod resources API request, and whether it failed.
    pub(super) fn pod_resources_call(&self, call: PodResourcesCall, ok: bool) {
        let v = ["v1"];
        let (requests, errors) = self.pod_resources.of(call);
        self.pod_resources.total.with_label_values(&v).inc();
        requests.with_label_values(&v).inc();
        if !ok {
            errors.with_label_values(&v).inc();
        }
    }

    /// The ResourceClaims prepared now, per driver, and over all drivers; a driver
    /// with none is not reported (kubelet's collector lists current drivers only).
    pub(super) fn set_claims_in_use(&self, per_driver: &BTreeMap<String, usize>, total: usize) {
        self.dra_claims_in_use.reset();
        self.dra_claims_in_use
            .with_label_values(&[DRA_ANY_DRIVER])
            .set(total as f64);
        for (driver, n) in per_driver {
            self.dra_claims_in_use
                .with_label_values(&[driver])
                .set(*n as f64);
        }
    }

    /// One DRA `PrepareResources` or `UnprepareResources` of a pod.
    pub(super) fn dra_operation(&self, operation: &str, took: Duration, ok: bool) {
        self.dra_operations
            .with_label_values(&[operation, if ok { "false" } else { "true" }])
            .observe(took.as_secs_f64());
    }

    /// The topology manager's admission time, in whole milliseconds as kubelet observes it.
    pub(super) fn topology_admission_took(&self, took: Duration) {
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        self.topology_admission_duration.observe(ms as f64);
    }
}

#[cfg(test)]
#[path = "resource_managers_tests.rs"]
mod tests;

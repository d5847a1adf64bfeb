use std::collections::BTreeMap;
use std::time::Duration;

use prometheus::Registry;

use super::*;

fn families() -> (Registry, ResourceManagerFamilies) {
    let r = Registry::new();
    let f = ResourceManagerFamilies::register(&r).unwrap();
    (r, f)
}

fn render(r: &Registry) -> String {
    super::super::encode(&r.gather())
}

#[test]
fn pod_resources_calls_count_the_total_the_call_and_its_errors() {
    let (r, f) = families();
    f.pod_resources_call(PodResourcesCall::List, true);
    f.pod_resources_call(PodResourcesCall::Get, false);
    f.pod_resources_call(PodResourcesCall::GetAllocatable, true);
    let text = render(&r);
    for line in [
        "kubelet_pod_resources_endpoint_requests_total{server_api_version=\"v1\"} 3",
        "kubelet_pod_resources_endpoint_requests_list{server_api_version=\"v1\"} 1",
        "kubelet_pod_resources_endpoint_requests_get{server_api_version=\"v1\"} 1",
        "kubelet_pod_resources_endpoint_errors_get{server_api_version=\"v1\"} 1",
        "kubelet_pod_resources_endpoint_requests_get_allocatable{server_api_version=\"v1\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing in\n{text}");
    }
    assert!(!text.contains("kubelet_pod_resources_endpoint_errors_list{"));
}

#[test]
fn claims_in_use_always_has_any_and_forgets_a_driver_with_none() {
    let (r, f) = families();
    assert!(render(&r).contains("dra_resource_claims_in_use{driver_name=\"<any>\"} 0"));
    let per = BTreeMap::from([("gpu.example.com".to_string(), 2)]);
    f.set_claims_in_use(&per, 2);
    let text = render(&r);
    assert!(text.contains("dra_resource_claims_in_use{driver_name=\"gpu.example.com\"} 2"));
    assert!(text.contains("dra_resource_claims_in_use{driver_name=\"<any>\"} 2"));
    f.set_claims_in_use(&BTreeMap::new(), 0);
    let text = render(&r);
    assert!(!text.contains("gpu.example.com"), "{text}");
    assert!(text.contains("dra_resource_claims_in_use{driver_name=\"<any>\"} 0"));
}

#[test]
fn dra_operations_say_is_error_true_for_a_failure() {
    let (r, f) = families();
    f.dra_operation("PrepareResources", Duration::from_millis(5), true);
    f.dra_operation("UnprepareResources", Duration::from_millis(5), false);
    let text = render(&r);
    assert!(text.contains(
        "dra_operations_duration_seconds_count{is_error=\"false\",operation_name=\"PrepareResources\"} 1"
    ));
    assert!(text.contains(
        "dra_operations_duration_seconds_count{is_error=\"true\",operation_name=\"UnprepareResources\"} 1"
    ));
}

#[test]
fn cpu_pools_are_in_millicores_and_per_numa_node() {
    let (r, f) = families();
    f.set_cpu_pools(13, 2, &BTreeMap::from([(0, 2), (1, 0)]));
    let text = render(&r);
    assert!(text.contains("kubelet_cpu_manager_shared_pool_size_millicores 13000\n"));
    assert!(text.contains("kubelet_cpu_manager_exclusive_cpu_allocation_count 2\n"));
    assert!(text.contains("kubelet_cpu_manager_allocation_per_numa{numa_node=\"0\"} 2\n"));
    assert!(text.contains("kubelet_cpu_manager_allocation_per_numa{numa_node=\"1\"} 0\n"));
}

#[test]
fn topology_admission_is_observed_in_whole_milliseconds() {
    let (r, f) = families();
    f.topology_admission_took(Duration::from_micros(2900));
    let text = render(&r);
    assert!(text.contains("kubelet_topology_manager_admission_duration_ms_sum 2\n"));
    assert!(
        text.contains("kubelet_topology_manager_admission_duration_ms_bucket{le=\"0.05\"} 0\n")
    );
    assert!(text.contains("kubelet_topology_manager_admission_duration_ms_bucket{le=\"3.2\"} 1\n"));
}

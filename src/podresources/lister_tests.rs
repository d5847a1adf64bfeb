//! The answers' metrics, asked of the lister directly (the socket is `tests.rs`'s).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::*;

struct NoPods;

impl PodResourcesSource for NoPods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        Vec::new()
    }
    fn container(&self, _pod: &Pod, _c: &Container) -> ContainerAllocations {
        ContainerAllocations::default()
    }
    fn allocatable(&self) -> AllocatableResourcesResponse {
        AllocatableResourcesResponse::default()
    }
}

#[test]
fn each_answer_counts_kubelets_v1_request_and_error_series() {
    let v1 =
        |name: &str| format!("kubelet_pod_resources_endpoint_{name}{{server_api_version=\"v1\"}}");
    let series = [
        v1("requests_total"),
        v1("requests_list"),
        v1("requests_get"),
        v1("errors_get"),
        v1("requests_get_allocatable"),
    ];
    let before: Vec<f64> = series.iter().map(|s| crate::metrics::sample(s)).collect();
    let delta = |i: usize| crate::metrics::sample(&series[i]) - before[i];
    list(&NoPods);
    assert!(delta(1) >= 1.0, "List counts a list request");
    let missing = GetPodResourcesRequest {
        pod_name: "web".into(),
        pod_namespace: "default".into(),
    };
    get(&NoPods, &missing).unwrap_err();
    assert!(delta(2) >= 1.0, "Get counts a get request");
    assert!(delta(3) >= 1.0, "and an error for a pod not found");
    allocatable(&NoPods);
    assert!(delta(4) >= 1.0);
    assert!(delta(0) >= 3.0, "every call counts in the total");
}

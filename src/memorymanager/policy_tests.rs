//! The Static policy's request arithmetic (kubelet's `getPodRequestedResources`).

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

fn c(name: &str, memory: &str, sidecar: bool) -> Container {
    Container {
        name: name.into(),
        restart_policy: sidecar.then(|| "Always".to_string()),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("memory".to_string(), Quantity(memory.into())),
                ("cpu".to_string(), Quantity("1".into())),
            ])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn pod_requests_take_the_larger_of_long_running_and_init_peaks() {
    let mut p = Pod {
        spec: Some(PodSpec {
            init_containers: Some(vec![c("side", "1Mi", true), c("init", "10Mi", false)]),
            containers: vec![c("a", "2Mi", false), c("b", "3Mi", false)],
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        pod_requested(&p).unwrap()["memory"],
        11 << 20,
        "sidecar 1Mi + init 10Mi"
    );
    p.spec.as_mut().unwrap().init_containers = Some(vec![c("side", "1Mi", true)]);
    assert_eq!(
        pod_requested(&p).unwrap()["memory"],
        6 << 20,
        "apps 5Mi + sidecar 1Mi"
    );
    assert!(
        !requested(&p, &c("x", "1Mi", false))
            .unwrap()
            .contains_key("cpu")
    );
}

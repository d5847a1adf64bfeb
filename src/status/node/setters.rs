//! The parts of the Node's status, each built by a pure function from fixed
//! inputs (kubelet's `nodestatus/setters.go`), so every field is tested without an
//! apiserver or a runtime. The conditions are in `conditions`.

use std::collections::BTreeMap;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, NodeAddress, NodeDaemonEndpoints, NodeFeatures,
    NodeRuntimeHandler, NodeRuntimeHandlerFeatures, NodeSwapStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cm::NodeResources;
use crate::node::{AddressType, NodeInfo};

/// kubelet's `nodeStatusMaxImages`.
pub(crate) const MAX_IMAGES: usize = 50;
/// kubelet's `maxNamesPerImageInNodeStatus`.
pub(crate) const MAX_NAMES_PER_IMAGE: usize = 5;

/// The `InternalIP`s (`--node-ip`'s, one per family, else the detected one), then
/// `Hostname`, as kubelet lists them.
pub(crate) fn addresses(info: &NodeInfo) -> Vec<NodeAddress> {
    let mut out = Vec::new();
    for a in &info.addresses {
        let type_ = match a.kind {
            AddressType::InternalIP => "InternalIP",
            AddressType::Hostname => "Hostname",
        };
        out.push(NodeAddress {
            type_: type_.into(),
            address: a.address.clone(),
        });
    }
    if !out.iter().any(|a| a.type_ == "Hostname") {
        out.push(NodeAddress {
            type_: "Hostname".into(),
            address: info.name.clone(),
        });
    }
    out
}

pub(crate) use crate::quantity::binary_si;

/// Millicores as Kubernetes writes them: whole cores plain ("4"), else "1500m".
pub(crate) fn cpu(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// `capacity` or `allocatable`: cpu, memory, pods, ephemeral-storage.
pub(crate) fn resources(r: &NodeResources) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".into(), Quantity(cpu(r.cpu_milli))),
        ("memory".into(), Quantity(binary_si(r.memory_bytes))),
        ("pods".into(), Quantity(r.pods.to_string())),
        (
            "ephemeral-storage".into(),
            Quantity(binary_si(r.ephemeral_storage_bytes)),
        ),
    ])
}

/// The device plugins' resources added to `capacity` and `allocatable` (kubelet's
/// `MachineInfo` setter): each registered resource's devices and healthy devices, and
/// zero for a resource whose plugin is gone, so the scheduler stops counting on it.
pub(crate) fn with_extended(
    mut capacity: BTreeMap<String, Quantity>,
    mut allocatable: BTreeMap<String, Quantity>,
    extended: Option<&crate::contracts::ExtendedResources>,
) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let Some(e) = extended else {
        return (capacity, allocatable);
    };
    for (name, n) in &e.capacity {
        capacity.insert(name.clone(), Quantity(n.to_string()));
    }
    for (name, n) in &e.allocatable {
        allocatable.insert(name.clone(), Quantity(n.to_string()));
    }
    for name in &e.removed {
        capacity.insert(name.clone(), Quantity("0".into()));
        allocatable.insert(name.clone(), Quantity("0".into()));
    }
    (capacity, allocatable)
}

/// `nodeInfo`; `runtime` is the CRI `Version` answer (`<runtime>://<version>`).
/// `swap.capacity` only on a node with swap, as kubelet (NodeSwap) reports it.
pub(crate) fn node_info(info: &NodeInfo, runtime: &cri::VersionResponse) -> NodeSystemInfo {
    NodeSystemInfo {
        machine_id: info.machine_id.clone(),
        system_uuid: info.system_uuid.clone(),
        boot_id: info.boot_id.clone(),
        kernel_version: info.kernel_version.clone(),
        os_image: info.os_image.clone(),
        operating_system: info.operating_system.into(),
        architecture: info.architecture.into(),
        container_runtime_version: format!(
            "{}://{}",
            runtime.runtime_name, runtime.runtime_version
        ),
        kubelet_version: crate::version::KUBERNETES.into(),
        kube_proxy_version: String::new(),
        swap: (info.swap_capacity_bytes > 0).then(|| NodeSwapStatus {
            capacity: i64::try_from(info.swap_capacity_bytes).ok(),
        }),
        ..Default::default()
    }
}

/// kubelet's `RuntimeHandlers` setter: each handler the runtime's status lists, with
/// whether it supports recursive read-only mounts and user namespaces (none from a
/// runtime older than CRI 1.30's handler list; the field is then left out).
pub(crate) fn runtime_handlers(
    handlers: &[crate::contracts::RuntimeHandlerFeatures],
) -> Option<Vec<NodeRuntimeHandler>> {
    let list: Vec<NodeRuntimeHandler> = (handlers.iter())
        .map(|h| NodeRuntimeHandler {
            name: Some(h.name.clone()),
            features: Some(NodeRuntimeHandlerFeatures {
                recursive_read_only_mounts: Some(h.recursive_read_only_mounts),
                user_namespaces: Some(h.user_namespaces),
            }),
        })
        .collect();
    (!list.is_empty()).then_some(list)
}

/// kubelet's `RuntimeFeatures` setter: `features.supplementalGroupsPolicy` as the
/// runtime's status says it (left out when the runtime sends no features, as 1.6 and
/// 1.7 do).
pub(crate) fn features(supplemental_groups_policy: Option<bool>) -> Option<NodeFeatures> {
    supplemental_groups_policy.map(|supported| NodeFeatures {
        supplemental_groups_policy: Some(supported),
    })
}

/// kubelet's declared features (NodeDeclaredFeatures, beta and on in 1.36): what the
/// apiserver's NodeDeclaredFeatureValidator and the scheduler match pods against, by
/// the names kubelet's feature registry gives them, sorted. Of 1.36's, oxlet does the
/// pod-level resize (`InPlacePodLevelResourcesVerticalScaling`, on by default); the
/// others are off by default or are managers oxlet does not have.
pub(crate) fn declared_features() -> Vec<String> {
    vec!["InPlacePodLevelResourcesVerticalScaling".to_owned()]
}

/// `daemonEndpoints.kubeletEndpoint.Port`.
pub(crate) fn daemon_endpoints(port: i32) -> NodeDaemonEndpoints {
    NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint { port }),
    }
}

/// The images: the [`MAX_IMAGES`] largest (kubelet sorts by size, descending), each
/// with its repo tags then repo digests, at most [`MAX_NAMES_PER_IMAGE`] names.
/// Images without a name are left out, as kubelet does.
pub(crate) fn images(mut list: Vec<cri::Image>) -> Vec<ContainerImage> {
    list.sort_by_key(|img| std::cmp::Reverse(img.size));
    list.into_iter()
        .filter_map(|img| {
            let names: Vec<String> = img
                .repo_digests
                .iter()
                .chain(img.repo_tags.iter())
                .take(MAX_NAMES_PER_IMAGE)
                .cloned()
                .collect();
            (!names.is_empty()).then(|| ContainerImage {
                names: Some(names),
                size_bytes: Some(i64::try_from(img.size).unwrap_or(i64::MAX)),
            })
        })
        .take(MAX_IMAGES)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{Capacity, NodeAddress as Addr};

    fn info() -> NodeInfo {
        NodeInfo {
            name: "node-a".into(),
            addresses: vec![
                Addr {
                    kind: AddressType::InternalIP,
                    address: "10.0.0.5".into(),
                },
                Addr {
                    kind: AddressType::Hostname,
                    address: "node-a".into(),
                },
            ],
            capacity: Capacity {
                cpu_cores: 2,
                memory_bytes: 0,
                pods: 110,
                ephemeral_storage_bytes: 0,
            },
            swap_capacity_bytes: 0,
            machine_id: "m1".into(),
            system_uuid: "u1".into(),
            boot_id: "b1".into(),
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            operating_system: "linux",
            architecture: "amd64",
        }
    }

    #[test]
    fn addresses_are_the_internal_ips_then_the_host_name() {
        let pairs = |a: Vec<NodeAddress>| {
            a.into_iter()
                .map(|a| (a.type_, a.address))
                .collect::<Vec<_>>()
        };
        let a = addresses(&info());
        assert_eq!(
            pairs(a),
            [
                ("InternalIP".into(), "10.0.0.5".into()),
                ("Hostname".into(), "node-a".into())
            ]
        );
        let mut dual = info();
        dual.addresses.insert(
            1,
            crate::node::NodeAddress {
                kind: AddressType::InternalIP,
                address: "fd00::5".into(),
            },
        );
        let a = pairs(addresses(&dual));
        assert_eq!(a.len(), 3);
        assert_eq!(a[1], ("InternalIP".into(), "fd00::5".into()));
        let mut bare = info();
        bare.addresses.clear();
        let a = addresses(&bare);
        assert_eq!(
            (a[0].type_.as_str(), a[0].address.as_str()),
            ("Hostname", "node-a")
        );
    }

    #[test]
    fn quantities_are_canonical() {
        assert_eq!(binary_si(16_741_343_232), "16348968Ki");
        assert_eq!(binary_si(2 << 30), "2Gi");
        assert_eq!(binary_si(1536), "1536");
        assert_eq!(binary_si(0), "0");
        assert_eq!(cpu(2000), "2");
        assert_eq!(cpu(1500), "1500m");
        let r = resources(&NodeResources {
            cpu_milli: 4000,
            memory_bytes: 8 << 30,
            ephemeral_storage_bytes: 1 << 20,
            pods: 110,
        });
        assert_eq!(r["cpu"].0, "4");
        assert_eq!(r["memory"].0, "8Gi");
        assert_eq!(r["pods"].0, "110");
        assert_eq!(r["ephemeral-storage"].0, "1Mi");
    }

    #[test]
    fn runtime_handlers_are_listed_with_their_features_or_left_out() {
        assert_eq!(runtime_handlers(&[]), None);
        let listed = runtime_handlers(&[crate::contracts::RuntimeHandlerFeatures {
            name: "runc".into(),
            recursive_read_only_mounts: true,
            user_namespaces: false,
        }])
        .unwrap();
        assert_eq!(
            serde_json::to_value(&listed).unwrap(),
            serde_json::json!([{"name": "runc", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}}])
        );
    }

    #[test]
    fn node_info_names_the_runtime_and_version() {
        let v = cri::VersionResponse {
            runtime_name: "containerd".into(),
            runtime_version: "1.6.20~ds1".into(),
            ..Default::default()
        };
        let n = node_info(&info(), &v);
        assert_eq!(n.container_runtime_version, "containerd://1.6.20~ds1");
        assert_eq!(n.kubelet_version, "v1.36.0");
        assert_eq!(
            (
                n.machine_id.as_str(),
                n.system_uuid.as_str(),
                n.boot_id.as_str()
            ),
            ("m1", "u1", "b1")
        );
        assert_eq!(
            (n.operating_system.as_str(), n.architecture.as_str()),
            ("linux", "amd64")
        );
        assert_eq!(n.os_image, "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(n.swap, None, "no swap on the node: no nodeInfo.swap");
        let with_swap = NodeInfo {
            swap_capacity_bytes: 2 << 30,
            ..info()
        };
        let swap = node_info(&with_swap, &v).swap.unwrap();
        assert_eq!(swap.capacity, Some(2 << 30));
        assert_eq!(
            daemon_endpoints(10250).kubelet_endpoint.unwrap().port,
            10250
        );
    }

    #[test]
    fn images_are_the_largest_fifty_with_five_names() {
        let img = |i: u64, names: usize| cri::Image {
            id: format!("sha256:{i}"),
            repo_tags: (0..names).map(|n| format!("r/i{i}:{n}")).collect(),
            repo_digests: vec![format!("r/i{i}@sha256:{i}")],
            size: i,
            ..Default::default()
        };
        let mut list: Vec<_> = (1..=60).map(|i| img(i, 1)).collect();
        list.push(img(1000, 9));
        list.push(cri::Image {
            size: 5000,
            ..Default::default()
        });
        let out = images(list);
        assert_eq!(out.len(), 50);
        assert_eq!(out[0].size_bytes, Some(1000));
        assert_eq!(out[0].names.as_ref().unwrap().len(), 5);
        assert_eq!(out[0].names.as_ref().unwrap()[0], "r/i1000@sha256:1000");
        assert_eq!(out[1].size_bytes, Some(60));
        assert_eq!(out[49].size_bytes, Some(12));
    }
}

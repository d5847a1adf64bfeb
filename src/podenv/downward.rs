//! The downward API: the values of `fieldRef` and `resourceFieldRef`, shared by env vars
//! and `downwardAPI` volumes (kubelet's `podFieldSelectorRuntimeValue`,
//! `fieldpath.ExtractFieldPathAsString` and
//! `resource.ExtractResourceValueByContainerNameAndNodeAllocatable`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::cm::NodeResources;
use crate::quantity::{self, QuantityError};

/// Facts about the pod's surroundings that env vars may reference.
#[derive(Debug, Clone, Default)]
pub(crate) struct PodEnv {
    pub pod_ips: Vec<String>,
    /// The node's InternalIPs, primary first.
    pub host_ips: Vec<String>,
    /// Node allocatable: a `resourceFieldRef` to a limit the container does not set
    /// reads this instead, as in kubelet.
    pub allocatable: NodeResources,
    /// The ConfigMaps and Secrets the pod references, fetched for this sync (None
    /// without an apiserver).
    pub objects: Option<std::sync::Arc<crate::objects::PodObjects>>,
    /// `<root-dir>/pods`, below which the pod's emptyDirs hold the env files a
    /// `fileKeyRef` reads.
    pub pods_dir: std::path::PathBuf,
}

/// Why a downward-API value cannot be produced (the container's
/// `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DownwardError {
    /// kubelet's wording.
    #[error("unsupported fieldPath: {0}")]
    FieldPath(String),
    #[error("unsupported container resource : {0}")]
    Resource(String),
    #[error("resourceFieldRef {resource}: divisor: {reason}")]
    Divisor { resource: String, reason: String },
    #[error("resourceFieldRef {resource}: {source}")]
    Quantity {
        resource: String,
        #[source]
        source: QuantityError,
    },
    #[error("resourceFieldRef: container {0:?} not found in the pod")]
    NoContainer(String),
    #[error("mode: {0:#o} must be a number between 0 and 0777 (octal)")]
    Mode(i32),
}

/// kubelet's `FormatMap`: `key="value"` lines in key order, values quoted as Go's `%q`.
pub(crate) fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", crate::klog::go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The key of `metadata.labels['k']` / `metadata.annotations['k']`.
fn subscript<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)?.strip_suffix("']")
}

/// kubelet's `ExtractFieldPathAsString`: the metadata fields a `downwardAPI` volume may
/// use (env vars add the `spec` and `status` ones, see [`env_field`]).
pub(crate) fn metadata_field(pod: &Pod, path: &str) -> Result<String, DownwardError> {
    let m = &pod.metadata;
    let value = match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(m.labels.as_ref()),
        "metadata.annotations" => format_map(m.annotations.as_ref()),
        _ => if let Some(k) = subscript(path, "metadata.labels['") {
            m.labels.as_ref().and_then(|l| l.get(k).cloned())
        } else if let Some(k) = subscript(path, "metadata.annotations['") {
            m.annotations.as_ref().and_then(|a| a.get(k).cloned())
        } else {
            return Err(DownwardError::FieldPath(path.to_string()));
        }
        .unwrap_or_default(),
    };
    Ok(value)
}

/// kubelet's `podFieldSelectorRuntimeValue`: an env var's `fieldRef`.
pub(crate) fn env_field(pod: &Pod, path: &str, env: &PodEnv) -> Result<String, DownwardError> {
    let spec = pod.spec.as_ref();
    Ok(match path {
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => env.host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => env.host_ips.join(","),
        "status.podIP" => env.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => env.pod_ips.join(","),
        _ => return metadata_field(pod, path),
    })
}

/// The container named `name` among the pod's containers and init containers.
pub(crate) fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
}

/// kubelet's `ExtractResourceValueByContainerNameAndNodeAllocatable`: a request or limit
/// of `container` divided by the divisor (default 1) and rounded up; a limit the
/// container does not set is node allocatable; a request it does not set is its limit
/// (the API's defaulting), else 0.
pub(crate) fn resource_value(
    container: &Container,
    sel: &ResourceFieldSelector,
    allocatable: &NodeResources,
) -> Result<String, DownwardError> {
    let resource = sel.resource.as_str();
    let (which, name) = resource
        .split_once('.')
        .ok_or_else(|| DownwardError::Resource(resource.to_string()))?;
    let (node, is_cpu) = match name {
        "cpu" => (allocatable.cpu_milli, true),
        "memory" => (allocatable.memory_bytes, false),
        "ephemeral-storage" => (allocatable.ephemeral_storage_bytes, false),
        _ => return Err(DownwardError::Resource(resource.to_string())),
    };
    let parse = |q: &Quantity| {
        if is_cpu {
            quantity::milli_cpu(q)
        } else {
            quantity::bytes(q)
        }
        .map_err(|source| DownwardError::Quantity {
            resource: resource.to_string(),
            source,
        })
    };
    let res = container.resources.as_ref();
    let limit = res.and_then(|r| r.limits.as_ref()?.get(name));
    let request = res.and_then(|r| r.requests.as_ref()?.get(name));
    let value = match which {
        "limits" => limit.map(parse).transpose()?.unwrap_or(node),
        "requests" => request.or(limit).map(parse).transpose()?.unwrap_or(0),
        _ => return Err(DownwardError::Resource(resource.to_string())),
    };
    let bad_divisor = |reason: String| DownwardError::Divisor {
        resource: resource.to_string(),
        reason,
    };
    let divisor = sel
        .divisor
        .as_ref()
        .map(parse)
        .transpose()
        .map_err(|e| bad_divisor(e.to_string()))?;
    // A zero divisor is the API's "unset": 1 (one core for cpu, in millicores here).
    let divisor = match divisor {
        None | Some(0) if is_cpu => 1000,
        None | Some(0) => 1,
        Some(d) if d < 0 => return Err(bad_divisor("must be greater than 0".to_string())),
        Some(d) => d,
    };
    Ok(ceil_div(value, divisor).to_string())
}

/// `ceil(a / d)` for `d > 0`, as kubelet's `math.Ceil` over floats.
fn ceil_div(a: i64, d: i64) -> i64 {
    let q = a.div_euclid(d);
    if a.rem_euclid(d) == 0 { q } else { q + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_string())
    }

    fn container(reqs: &[(&str, &str)], lims: &[(&str, &str)]) -> Container {
        let map = |v: &[(&str, &str)]| {
            Some(
                v.iter()
                    .map(|(k, val)| (k.to_string(), q(val)))
                    .collect::<BTreeMap<_, _>>(),
            )
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: map(reqs),
                limits: map(lims),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sel(resource: &str, divisor: Option<&str>) -> ResourceFieldSelector {
        ResourceFieldSelector {
            resource: resource.into(),
            divisor: divisor.map(q),
            container_name: None,
        }
    }

    const NODE: NodeResources = NodeResources {
        cpu_milli: 2000,
        memory_bytes: 4 << 30,
        ephemeral_storage_bytes: 10 << 30,
        pods: 110,
    };

    fn value(c: &Container, r: &str, d: Option<&str>) -> String {
        resource_value(c, &sel(r, d), &NODE).unwrap()
    }

    #[test]
    fn resource_values_round_up_and_default_to_allocatable() {
        let c = container(&[("cpu", "250m"), ("memory", "64Mi")], &[("cpu", "1500m")]);
        // kubelet: ceil(1500m / 1) = 2 cores; in millicores with divisor 1m.
        assert_eq!(value(&c, "limits.cpu", None), "2");
        assert_eq!(value(&c, "limits.cpu", Some("1m")), "1500");
        assert_eq!(value(&c, "requests.cpu", None), "1");
        assert_eq!(value(&c, "requests.cpu", Some("1m")), "250");
        assert_eq!(value(&c, "requests.memory", Some("1Mi")), "64");
        assert_eq!(value(&c, "requests.memory", None), "67108864");
        // No memory limit: node allocatable.
        assert_eq!(value(&c, "limits.memory", Some("1Mi")), "4096");
        assert_eq!(value(&c, "limits.memory", Some("1Gi")), "4");
        assert_eq!(value(&c, "limits.memory", Some("3Gi")), "2");
        assert_eq!(value(&c, "limits.ephemeral-storage", Some("1Gi")), "10");
        assert_eq!(value(&c, "requests.ephemeral-storage", None), "0");
        // A request unset but a limit set: the request is the limit.
        let c = container(&[], &[("memory", "100M")]);
        assert_eq!(value(&c, "requests.memory", Some("1M")), "100");
        let none = container(&[], &[]);
        assert_eq!(value(&none, "limits.cpu", Some("1m")), "2000");
        assert_eq!(value(&none, "requests.cpu", None), "0");
    }

    #[test]
    fn bad_resource_fields_are_errors() {
        let c = container(&[], &[]);
        let err = |r: &str, d: Option<&str>| resource_value(&c, &sel(r, d), &NODE).unwrap_err();
        assert_eq!(
            err("limits.gpu", None).to_string(),
            "unsupported container resource : limits.gpu"
        );
        assert!(matches!(
            err("memory", None),
            DownwardError::Resource(ref r) if r == "memory"
        ));
        assert!(matches!(
            err("limits.memory", Some("-1")),
            DownwardError::Divisor { .. }
        ));
        assert!(matches!(
            err("limits.memory", Some("lots")),
            DownwardError::Divisor { .. }
        ));
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                uid: Some("u-1".into()),
                labels: Some(BTreeMap::from([
                    ("app".to_string(), "web".to_string()),
                    ("tier".to_string(), "a\"b\\c\nd".to_string()),
                ])),
                annotations: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("node1".into()),
                service_account_name: Some("sa".into()),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn field_paths_as_kubelet() {
        let p = pod();
        let env = PodEnv {
            pod_ips: vec!["10.0.0.5".into(), "fd00::5".into()],
            host_ips: vec!["192.168.1.2".into(), "fd00::2".into()],
            allocatable: NODE,
            ..Default::default()
        };
        let f = |path: &str| env_field(&p, path, &env).unwrap();
        assert_eq!(f("metadata.name"), "p");
        assert_eq!(f("metadata.namespace"), "ns");
        assert_eq!(f("metadata.uid"), "u-1");
        assert_eq!(f("metadata.labels['app']"), "web");
        assert_eq!(f("metadata.labels['missing']"), "");
        assert_eq!(f("metadata.annotations['k']"), "v");
        assert_eq!(f("spec.nodeName"), "node1");
        assert_eq!(f("spec.serviceAccountName"), "sa");
        assert_eq!(f("status.podIP"), "10.0.0.5");
        assert_eq!(f("status.podIPs"), "10.0.0.5,fd00::5");
        assert_eq!(f("status.hostIP"), "192.168.1.2");
        assert_eq!(f("status.hostIPs"), "192.168.1.2,fd00::2");
        assert_eq!(
            f("metadata.labels"),
            "app=\"web\"\ntier=\"a\\\"b\\\\c\\nd\""
        );
        assert_eq!(
            env_field(&p, "spec.hostname", &env)
                .unwrap_err()
                .to_string(),
            "unsupported fieldPath: spec.hostname"
        );
        // Volumes only take the metadata fields.
        assert!(metadata_field(&p, "spec.nodeName").is_err());
        assert_eq!(crate::klog::go_quote("\u{1}é"), "\"\\x01é\"");
        // As Go's strconv.Quote: non-printing spaces and format characters escaped,
        // and above U+FFFF with \U and eight digits.
        assert_eq!(crate::klog::go_quote("a\u{a0}b"), "\"a\\u00a0b\"");
        assert_eq!(crate::klog::go_quote("x\u{200b}y"), "\"x\\u200by\"");
        assert_eq!(crate::klog::go_quote("\u{e0041}"), "\"\\U000e0041\"");
        assert_eq!(crate::klog::go_quote("日本 ✓ 😀"), "\"日本 ✓ 😀\"");
    }
}

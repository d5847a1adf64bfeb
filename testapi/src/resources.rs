//! The resources this server serves, their discovery documents, and the strict decode:
//! a body is decoded through its k8s-openapi type and any field the type does not know is
//! refused, naming the field (the real server's `fieldValidation=Strict`).

use k8s_openapi::api::{
    authentication::v1::TokenRequest, certificates::v1::CertificateSigningRequest,
    coordination::v1::Lease, core::v1 as core, events::v1 as events, node::v1::RuntimeClass,
    rbac::v1 as rbac, resource::v1 as resource, storage::v1::StorageClass,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use crate::status::ApiError;

#[derive(Debug)]
pub(crate) struct Def {
    pub group: &'static str,
    pub version: &'static str,
    /// The URL segment (`pods`); also the store's resource id, prefixed by the group if any.
    pub name: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Whether a `status` subresource exists, so the main resource ignores status writes.
    pub status: bool,
    /// The field selectors the resource indexes beyond `metadata.name`/`metadata.namespace`.
    pub fields: &'static [&'static str],
    pub short: &'static [&'static str],
    pub check: fn(&Value) -> Result<(), ApiError>,
}

impl Def {
    pub(crate) fn id(&self) -> String {
        if self.group.is_empty() {
            self.name.to_owned()
        } else {
            format!("{}/{}", self.group, self.name)
        }
    }

    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub(crate) static RESOURCES: &[Def] = &[
    Def {
        group: "",
        version: "v1",
        name: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        status: true,
        fields: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        short: &["po"],
        check: strict::<core::Pod>,
    },
    Def {
        group: "",
        version: "v1",
        name: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        status: true,
        fields: &["spec.unschedulable"],
        short: &["no"],
        check: strict::<core::Node>,
    },
    Def {
        group: "",
        version: "v1",
        name: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        status: false,
        fields: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        short: &["ev"],
        check: strict::<core::Event>,
    },
    Def {
        group: "",
        version: "v1",
        name: "configmaps",
        singular: "configmap",
        kind: "ConfigMap",
        namespaced: true,
        status: false,
        fields: &[],
        short: &["cm"],
        check: strict::<core::ConfigMap>,
    },
    Def {
        group: "",
        version: "v1",
        name: "secrets",
        singular: "secret",
        kind: "Secret",
        namespaced: true,
        status: false,
        fields: &["type"],
        short: &[],
        check: strict::<core::Secret>,
    },
    Def {
        group: "",
        version: "v1",
        name: "serviceaccounts",
        singular: "serviceaccount",
        kind: "ServiceAccount",
        namespaced: true,
        status: false,
        fields: &[],
        short: &["sa"],
        check: strict::<core::ServiceAccount>,
    },
    Def {
        group: "coordination.k8s.io",
        version: "v1",
        name: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        status: false,
        fields: &[],
        short: &[],
        check: strict::<Lease>,
    },
    Def {
        group: "events.k8s.io",
        version: "v1",
        name: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        status: false,
        fields: &[],
        short: &["ev"],
        check: strict::<events::Event>,
    },
    Def {
        group: "apiextensions.k8s.io",
        version: "v1",
        name: "customresourcedefinitions",
        singular: "customresourcedefinition",
        kind: "CustomResourceDefinition",
        namespaced: false,
        status: true,
        fields: &[],
        short: &["crd", "crds"],
        check: strict::<CustomResourceDefinition>,
    },
    Def {
        group: "",
        version: "v1",
        name: "persistentvolumes",
        singular: "persistentvolume",
        kind: "PersistentVolume",
        namespaced: false,
        status: true,
        fields: &[],
        short: &["pv"],
        check: strict::<core::PersistentVolume>,
    },
    Def {
        group: "",
        version: "v1",
        name: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        status: true,
        fields: &[],
        short: &["pvc"],
        check: strict::<core::PersistentVolumeClaim>,
    },
    Def {
        group: "storage.k8s.io",
        version: "v1",
        name: "storageclasses",
        singular: "storageclass",
        kind: "StorageClass",
        namespaced: false,
        status: false,
        fields: &[],
        short: &["sc"],
        check: strict::<StorageClass>,
    },
    Def {
        group: "node.k8s.io",
        version: "v1",
        name: "runtimeclasses",
        singular: "runtimeclass",
        kind: "RuntimeClass",
        namespaced: false,
        status: false,
        fields: &[],
        short: &[],
        check: strict::<RuntimeClass>,
    },
    Def {
        group: "certificates.k8s.io",
        version: "v1",
        name: "certificatesigningrequests",
        singular: "certificatesigningrequest",
        kind: "CertificateSigningRequest",
        namespaced: false,
        status: true,
        fields: &["spec.signerName"],
        short: &["csr"],
        check: strict::<CertificateSigningRequest>,
    },
    Def {
        group: "resource.k8s.io",
        version: "v1",
        name: "resourceclaims",
        singular: "resourceclaim",
        kind: "ResourceClaim",
        namespaced: true,
        status: true,
        fields: &[],
        short: &[],
        check: strict::<resource::ResourceClaim>,
    },
    Def {
        group: "resource.k8s.io",
        version: "v1",
        name: "resourceclaimtemplates",
        singular: "resourceclaimtemplate",
        kind: "ResourceClaimTemplate",
        namespaced: true,
        status: false,
        fields: &[],
        short: &[],
        check: strict::<resource::ResourceClaimTemplate>,
    },
    Def {
        group: "resource.k8s.io",
        version: "v1",
        name: "deviceclasses",
        singular: "deviceclass",
        kind: "DeviceClass",
        namespaced: false,
        status: false,
        fields: &[],
        short: &[],
        check: strict::<resource::DeviceClass>,
    },
    Def {
        group: "resource.k8s.io",
        version: "v1",
        name: "resourceslices",
        singular: "resourceslice",
        kind: "ResourceSlice",
        namespaced: false,
        status: false,
        fields: &["spec.nodeName", "spec.driver"],
        short: &[],
        check: strict::<resource::ResourceSlice>,
    },
    Def {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        name: "clusterroles",
        singular: "clusterrole",
        kind: "ClusterRole",
        namespaced: false,
        status: false,
        fields: &[],
        short: &[],
        check: strict::<rbac::ClusterRole>,
    },
    Def {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        name: "clusterrolebindings",
        singular: "clusterrolebinding",
        kind: "ClusterRoleBinding",
        namespaced: false,
        status: false,
        fields: &[],
        short: &[],
        check: strict::<rbac::ClusterRoleBinding>,
    },
];

/// The built-in resources, then `custom` (those of the CustomResourceDefinitions stored).
fn all<'a>(custom: &'a [&'static Def]) -> impl Iterator<Item = &'static Def> + 'a {
    RESOURCES.iter().chain(custom.iter().copied())
}

pub(crate) fn find(
    custom: &[&'static Def],
    group: &str,
    version: &str,
    name: &str,
) -> Option<&'static Def> {
    all(custom).find(|d| d.group == group && d.version == version && d.name == name)
}

pub(crate) fn by_id(custom: &[&'static Def], id: &str) -> Option<&'static Def> {
    all(custom).find(|d| d.id() == id)
}

/// A custom resource's body: any JSON object (the server keeps what it is given, as a
/// CRD with `x-kubernetes-preserve-unknown-fields` does; schemas are not checked).
pub(crate) fn any_object(v: &Value) -> Result<(), ApiError> {
    if v.is_object() {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "the body of the request could not be decoded: not a JSON object",
        ))
    }
}

/// The TokenRequest body of `serviceaccounts/token`, strictly decoded like the rest.
pub(crate) fn check_token_request(v: &Value) -> Result<(), ApiError> {
    strict::<TokenRequest>(v)
}

/// Decode through `T`, then report the first input field the round trip dropped.
fn strict<T: DeserializeOwned + Serialize>(input: &Value) -> Result<(), ApiError> {
    let typed: T = serde_json::from_value(input.clone()).map_err(|e| {
        ApiError::bad_request(format!("the body of the request could not be decoded: {e}"))
    })?;
    let back = serde_json::to_value(&typed)
        .map_err(|e| ApiError::new(500, "InternalError", format!("re-encoding: {e}")))?;
    match unknown_field(input, &back, "") {
        Some(field) => Err(ApiError::bad_request(format!(
            "strict decoding error: unknown field \"{field}\""
        ))),
        None => Ok(()),
    }
}

fn unknown_field(input: &Value, known: &Value, path: &str) -> Option<String> {
    match (input, known) {
        (Value::Object(i), Value::Object(k)) => i.iter().find_map(|(name, v)| {
            let sub = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            match k.get(name) {
                None if !v.is_null() => Some(sub),
                None => None,
                Some(kv) => unknown_field(v, kv, &sub),
            }
        }),
        (Value::Array(i), Value::Array(k)) => i
            .iter()
            .zip(k)
            .enumerate()
            .find_map(|(n, (iv, kv))| unknown_field(iv, kv, &format!("{path}[{n}]"))),
        _ => None,
    }
}

pub(crate) fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0-testapi", "gitCommit": "testapi",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
        "compiler": "gc", "platform": "linux/amd64",
    })
}

pub(crate) fn api_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

/// Each named group with its versions in the order first seen (the first preferred).
fn groups(custom: &[&'static Def]) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
    for d in all(custom).filter(|d| !d.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == d.group) {
            Some((_, versions)) if !versions.contains(&d.version) => versions.push(d.version),
            Some(_) => {}
            None => out.push((d.group, vec![d.version])),
        }
    }
    out
}

fn group_doc(group: &str, versions: &[&str]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
}

pub(crate) fn api_group_list(custom: &[&'static Def]) -> Value {
    let groups: Vec<Value> = groups(custom)
        .iter()
        .map(|(g, versions)| group_doc(g, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn api_group(custom: &[&'static Def], group: &str) -> Option<Value> {
    let groups = groups(custom);
    let (g, versions) = groups.iter().find(|(g, _)| *g == group)?;
    let mut doc = group_doc(g, versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

pub(crate) fn resource_list(custom: &[&'static Def], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for d in all(custom).filter(|d| d.group == group && d.version == version) {
        resources.push(json!({
            "name": d.name, "singularName": d.singular, "namespaced": d.namespaced, "kind": d.kind,
            "verbs": VERBS, "shortNames": d.short,
        }));
        if d.status {
            resources.push(json!({"name": format!("{}/status", d.name), "singularName": "", "namespaced": d.namespaced, "kind": d.kind, "verbs": ["get", "patch", "update"]}));
        }
        // The pod subresources a user writes through, listed as the real server lists them.
        if d.name == "pods" && d.group.is_empty() {
            for sub in ["ephemeralcontainers", "resize"] {
                resources.push(json!({"name": format!("pods/{sub}"), "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get", "patch", "update"]}));
            }
        }
        if d.name == "serviceaccounts" {
            resources.push(json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true, "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}));
        }
        if d.name == "certificatesigningrequests" {
            resources.push(json!({"name": "certificatesigningrequests/approval", "singularName": "", "namespaced": false, "kind": "CertificateSigningRequest", "verbs": ["get", "patch", "update"]}));
        }
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    (!resources.is_empty()).then(|| json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_decoding_names_the_unknown_field() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolcy": "Never"}]}});
        let e = strict::<core::Pod>(&pod).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "strict decoding error: unknown field \"spec.containers[0].imagePullPolcy\""
        );
        let good = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}, "ports": [{"containerPort": 80}]}], "nodeName": "n", "tolerations": []}});
        strict::<core::Pod>(&good).unwrap();
        let typo = json!({"metadata": {"name": "p"}, "spex": {}});
        assert!(
            strict::<core::Pod>(&typo)
                .unwrap_err()
                .message
                .contains("\"spex\"")
        );
    }

    #[test]
    fn strict_decoding_refuses_wrong_types() {
        let cm = json!({"metadata": {"name": "c"}, "data": {"k": 1}});
        let e = strict::<core::ConfigMap>(&cm).unwrap_err();
        assert_eq!(e.reason, "BadRequest");
    }

    #[test]
    fn discovery_lists_status_subresources() {
        let v1 = resource_list(&[], "", "v1").unwrap();
        let names: Vec<&str> = v1["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"pods/status")
                && names.contains(&"pods/resize")
                && names.contains(&"serviceaccounts/token"),
            "{names:?}"
        );
        assert!(resource_list(&[], "apps", "v1").is_none());
        assert_eq!(api_group_list(&[])["groups"].as_array().unwrap().len(), 8);
        let dra = resource_list(&[], "resource.k8s.io", "v1").unwrap();
        let dra: Vec<&str> = dra["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            dra,
            [
                "resourceclaims",
                "resourceclaims/status",
                "resourceclaimtemplates",
                "deviceclasses",
                "resourceslices"
            ]
        );
        assert!(resource_list(&[], "node.k8s.io", "v1").is_some());
    }
}

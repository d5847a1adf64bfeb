//! Registration (kubelet's `registerWithAPIServer`/`tryRegisterWithAPIServer`):
//! create the Node, or adopt the one that exists and reconcile the labels kubelet
//! owns. "Already exists" is the normal case on every restart, never an error.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tracing::info;

use crate::node::NodeInfo;

/// What the Node is registered with (from the settings).
#[derive(Debug, Clone, Default)]
pub(crate) struct Registration {
    /// `--node-labels`.
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints`.
    pub taints: Vec<Taint>,
    /// `registerNode`: false only adopts an existing Node.
    pub create: bool,
    /// `--provider-id` / `providerID`: the Node's `spec.providerID` (kind passes
    /// `kind://docker/<cluster>/<node>`); empty leaves it unset.
    pub provider_id: String,
}

/// Why one registration attempt failed; the caller retries.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegisterError {
    #[error("node {0:?} is not registered and registerNode is false")]
    NotRegistered(String),
    #[error("node {node:?}: {source}")]
    Api {
        node: String,
        #[source]
        source: kube::Error,
    },
}

/// The labels kubelet owns and keeps up to date on an existing Node
/// (`updateDefaultLabels`).
pub(crate) fn default_labels(info: &NodeInfo) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("kubernetes.io/hostname".into(), info.name.clone()),
        ("kubernetes.io/os".into(), info.operating_system.into()),
        ("kubernetes.io/arch".into(), info.architecture.into()),
    ])
}

/// kubelet's `initialNode`: the default labels, then `--node-labels`, the taints.
pub(crate) fn initial_node(info: &NodeInfo, reg: &Registration) -> Node {
    let mut labels = default_labels(info);
    labels.extend(reg.labels.clone());
    Node {
        metadata: ObjectMeta {
            name: Some(info.name.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!reg.taints.is_empty()).then(|| reg.taints.clone()),
            provider_id: (!reg.provider_id.is_empty()).then(|| reg.provider_id.clone()),
            ..Default::default()
        }),
        status: None,
    }
}

/// The label changes an existing Node needs so the default labels match (None: none).
pub(crate) fn label_patch(
    existing: &Node,
    wanted: &BTreeMap<String, String>,
) -> Option<BTreeMap<String, String>> {
    let have = existing.metadata.labels.clone().unwrap_or_default();
    let missing: BTreeMap<_, _> = wanted
        .iter()
        .filter(|(k, v)| have.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!missing.is_empty()).then_some(missing)
}

/// One attempt: create (unless `reg.create` is false), or GET the existing Node and
/// reconcile its default labels. Returns the Node as stored.
pub(crate) async fn register(
    api: &Api<Node>,
    info: &NodeInfo,
    reg: &Registration,
) -> Result<Node, RegisterError> {
    let err = |source| RegisterError::Api {
        node: info.name.clone(),
        source,
    };
    if reg.create {
        match api
            .create(&PostParams::default(), &initial_node(info, reg))
            .await
        {
            Ok(node) => {
                info!(node = %info.name, "successfully registered node");
                return Ok(node);
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(err(e)),
        }
    }
    let Some(existing) = api.get_opt(&info.name).await.map_err(err)? else {
        return Err(RegisterError::NotRegistered(info.name.clone()));
    };
    let node = match label_patch(&existing, &default_labels(info)) {
        Some(labels) => {
            let patch = serde_json::json!({"metadata": {"labels": labels}});
            api.patch(&info.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(err)?
        }
        None => existing,
    };
    info!(node = %info.name, "node was previously registered; adopting it");
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{AddressType, Capacity, NodeAddress};

    pub(crate) fn info(name: &str) -> NodeInfo {
        NodeInfo {
            addresses: vec![NodeAddress {
                kind: AddressType::Hostname,
                address: name.into(),
            }],
            ..NodeInfo::with_capacity(
                name,
                Capacity {
                    cpu_cores: 1,
                    memory_bytes: 1 << 30,
                    pods: 10,
                    ephemeral_storage_bytes: 1 << 30,
                },
            )
        }
    }

    async fn server() -> (tempfile::TempDir, testapi::TestApiServer, Api<Node>) {
        let dir = tempfile::tempdir().unwrap();
        let srv = testapi::TestApiServer::start(dir.path()).await.unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(srv.kubeconfig()).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        (dir, srv, Api::all(kube::Client::try_from(cfg).unwrap()))
    }

    #[tokio::test]
    async fn creates_then_adopts_idempotently() {
        let (_d, srv, api) = server().await;
        let reg = Registration {
            labels: BTreeMap::from([("role".into(), "edge".into())]),
            taints: crate::status::node_taints("dedicated=gpu:NoSchedule").unwrap(),
            create: true,
            provider_id: "kind://docker/kind/n1".into(),
        };
        let n = register(&api, &info("n1"), &reg).await.unwrap();
        let labels = n.metadata.labels.clone().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["role"], "edge");
        let spec = n.spec.clone().unwrap();
        assert_eq!(spec.taints.unwrap()[0].key, "dedicated");
        assert_eq!(spec.provider_id.as_deref(), Some("kind://docker/kind/n1"));
        // Again: 409 → adopt, same UID.
        let again = register(&api, &info("n1"), &reg).await.unwrap();
        assert_eq!(again.metadata.uid, n.metadata.uid);
        // A default label changed by someone is reconciled; others are kept.
        let mut edited: Node = srv.get("", "n1").unwrap().unwrap();
        let l = edited.metadata.labels.as_mut().unwrap();
        l.insert("kubernetes.io/arch".into(), "s390x".into());
        l.insert("team".into(), "a".into());
        srv.put(&edited).unwrap();
        let fixed = register(&api, &info("n1"), &reg).await.unwrap();
        let l = fixed.metadata.labels.unwrap();
        assert_eq!(
            (l["kubernetes.io/arch"].as_str(), l["team"].as_str()),
            ("amd64", "a")
        );
        // Deleted: registered again, with a new UID.
        assert!(srv.remove::<Node>("", "n1").unwrap());
        let back = register(&api, &info("n1"), &reg).await.unwrap();
        assert_ne!(back.metadata.uid, n.metadata.uid);
    }

    #[tokio::test]
    async fn register_node_false_only_adopts() {
        let (_d, _srv, api) = server().await;
        let reg = Registration::default();
        let e = register(&api, &info("n2"), &reg).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "node \"n2\" is not registered and registerNode is false"
        );
        let create = Registration {
            create: true,
            ..Default::default()
        };
        register(&api, &info("n2"), &create).await.unwrap();
        assert!(register(&api, &info("n2"), &reg).await.is_ok());
    }
}

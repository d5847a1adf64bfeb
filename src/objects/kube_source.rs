//! The [`ObjectSource`] of the agent: kube-rs on the main (throttled) client.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Secret, ServiceAccount,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, PostParams};

use super::{ObjectError, ObjectFuture, ObjectSource};

pub(crate) struct KubeObjects {
    client: kube::Client,
}

impl KubeObjects {
    pub(crate) fn new(client: kube::Client) -> Self {
        KubeObjects { client }
    }
}

fn api_error(kind: &'static str, ns: &str, name: &str, e: kube::Error) -> ObjectError {
    ObjectError::Api {
        kind,
        namespace: ns.to_string(),
        name: name.to_string(),
        message: e.to_string(),
    }
}

impl ObjectSource for KubeObjects {
    fn config_map<'a>(&'a self, ns: &'a str, name: &'a str) -> ObjectFuture<'a, Option<ConfigMap>> {
        Box::pin(async move {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), ns);
            (api.get_opt(name).await).map_err(|e| api_error("configmaps", ns, name, e))
        })
    }

    fn secret<'a>(&'a self, ns: &'a str, name: &'a str) -> ObjectFuture<'a, Option<Secret>> {
        Box::pin(async move {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
            (api.get_opt(name).await).map_err(|e| api_error("secrets", ns, name, e))
        })
    }

    fn claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> ObjectFuture<'a, Option<PersistentVolumeClaim>> {
        Box::pin(async move {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
            (api.get_opt(name).await).map_err(|e| api_error("persistentvolumeclaims", ns, name, e))
        })
    }

    fn volume<'a>(&'a self, name: &'a str) -> ObjectFuture<'a, Option<PersistentVolume>> {
        Box::pin(async move {
            let api: Api<PersistentVolume> = Api::all(self.client.clone());
            (api.get_opt(name).await).map_err(|e| api_error("persistentvolumes", "", name, e))
        })
    }

    fn node<'a>(&'a self, name: &'a str) -> ObjectFuture<'a, Option<Node>> {
        Box::pin(async move {
            let api: Api<Node> = Api::all(self.client.clone());
            (api.get_opt(name).await).map_err(|e| api_error("nodes", "", name, e))
        })
    }

    fn runtime_class<'a>(&'a self, name: &'a str) -> ObjectFuture<'a, Option<RuntimeClass>> {
        Box::pin(async move {
            let api: Api<RuntimeClass> = Api::all(self.client.clone());
            (api.get_opt(name).await).map_err(|e| api_error(super::RUNTIME_CLASSES, "", name, e))
        })
    }

    fn service_account<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> ObjectFuture<'a, Option<ServiceAccount>> {
        Box::pin(async move {
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
            (api.get_opt(name).await).map_err(|e| api_error("serviceaccounts", ns, name, e))
        })
    }

    fn token<'a>(
        &'a self,
        ns: &'a str,
        sa: &'a str,
        request: &'a TokenRequest,
    ) -> ObjectFuture<'a, TokenRequest> {
        Box::pin(async move {
            let api: Api<ServiceAccount> = Api::namespaced(self.client.clone(), ns);
            let body = request.clone();
            api.create_subresource("token", sa, &PostParams::default(), &body)
                .await
                .map_err(|e| ObjectError::Token {
                    namespace: ns.to_string(),
                    name: sa.to_string(),
                    message: e.to_string(),
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;
    use testapi::TestApiServer;

    use super::*;
    use crate::objects::token::bound_request;
    use crate::objects::{ObjectManager, PodObjects, TokenWant};
    use crate::status::client_of;

    fn obj<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test]
    async fn gets_objects_and_requests_bound_tokens_from_an_apiserver() {
        let dir = tempfile::tempdir().unwrap();
        let server = TestApiServer::start(dir.path()).await.unwrap();
        let source = KubeObjects::new(client_of(&server).await);
        server
            .put::<ConfigMap>(&obj(
                json!({"metadata": {"name": "cm", "namespace": "ns"}, "data": {"a": "1"}}),
            ))
            .unwrap();
        server
            .put::<Secret>(&obj(
                json!({"metadata": {"name": "s", "namespace": "ns"}, "data": {"k": "dg=="}}),
            ))
            .unwrap();
        let cm = source.config_map("ns", "cm").await.unwrap().unwrap();
        assert_eq!(cm.data.unwrap()["a"], "1");
        let s = source.secret("ns", "s").await.unwrap().unwrap();
        assert_eq!(s.data.unwrap()["k"].0, b"v");
        // Not found is None here; elsewhere in the namespace, too.
        assert!(source.config_map("ns", "nope").await.unwrap().is_none());
        assert!(source.secret("other", "s").await.unwrap().is_none());

        // Through the manager: not found becomes kubelet's (the apiserver's) message.
        let pod: Pod = obj(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "will-be-replaced"},
            "spec": {"containers": [{"name": "c", "image": "i", "envFrom": [
                {"configMapRef": {"name": "nope"}}, {"secretRef": {"name": "s"}}]}],
                "volumes": [{"name": "t", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": 7200}}]}}]},
        }));
        let pod = server.put(&pod).unwrap();
        let manager = ObjectManager::new(std::sync::Arc::new(KubeObjects::new(
            client_of(&server).await,
        )));
        let got = manager.resolve(&pod).await;
        let err = PodObjects::config_map(Some(&got), "ns", "nope", false).unwrap_err();
        assert_eq!(err.to_string(), "configmaps \"nope\" not found");
        assert!(
            PodObjects::config_map(Some(&got), "ns", "nope", true)
                .unwrap()
                .is_none()
        );
        assert!(
            PodObjects::secret(Some(&got), "ns", "s", false)
                .unwrap()
                .is_some()
        );
        let want = TokenWant {
            audience: Some("vault".into()),
            expiration_seconds: 7200,
        };
        let token = got.tokens[&want].as_ref().unwrap();
        assert!(token.starts_with("testapi-ns-default-"), "{token}");

        // The TokenRequest itself: bound to the pod by name and UID, with the audience
        // and expiry asked for; the answer carries them back.
        let answer = source
            .token("ns", "default", &bound_request(&pod, &want))
            .await
            .unwrap();
        let spec = answer.spec.unwrap();
        assert_eq!(spec.audiences, Some(vec!["vault".to_string()]));
        assert_eq!(spec.expiration_seconds, Some(7200));
        let bound = spec.bound_object_ref.unwrap();
        assert_eq!(bound.kind.as_deref(), Some("Pod"));
        assert_eq!(bound.name.as_deref(), Some("p"));
        assert_eq!(bound.uid, pod.metadata.uid);
        let status = answer.status.unwrap();
        let lifetime =
            status.expiration_timestamp.unwrap().0.as_second() - jiff::Timestamp::now().as_second();
        assert!((7100..=7200).contains(&lifetime), "{lifetime}");
        // A token for another pod UID is refused by the apiserver: the binding is real.
        let mut stale = pod.clone();
        stale.metadata.uid = Some("someone-else".into());
        let err = source
            .token("ns", "default", &bound_request(&stale, &want))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        assert!(
            err.to_string()
                .starts_with("cannot request a token for service account ns/default:"),
            "{err}"
        );
    }
}

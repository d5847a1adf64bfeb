//! The [`ObjectSource`] of the agent: kube-rs on the main (throttled) client.

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
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

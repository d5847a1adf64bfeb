//! The [`ClaimSource`] of the agent: kube-rs on the main (throttled) client.

use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams};

use super::{ApiError, ApiFuture, ClaimSource};

pub(crate) struct KubeClaims {
    client: kube::Client,
}

impl KubeClaims {
    pub(crate) fn new(client: kube::Client) -> Self {
        KubeClaims { client }
    }
}

impl ClaimSource for KubeClaims {
    fn resource_claim<'a>(
        &'a self,
        ns: &'a str,
        name: &'a str,
    ) -> ApiFuture<'a, Option<ResourceClaim>> {
        Box::pin(async move {
            let api: Api<ResourceClaim> = Api::namespaced(self.client.clone(), ns);
            api.get_opt(name).await.map_err(|e| ApiError(e.to_string()))
        })
    }

    fn delete_resource_slices<'a>(
        &'a self,
        node: &'a str,
        driver: Option<&'a str>,
    ) -> ApiFuture<'a, ()> {
        Box::pin(async move {
            let api: Api<ResourceSlice> = Api::all(self.client.clone());
            let mut fields = format!("spec.nodeName={node}");
            if let Some(d) = driver {
                fields.push_str(&format!(",spec.driver={d}"));
            }
            let lp = ListParams::default().fields(&fields);
            match api.delete_collection(&DeleteParams::default(), &lp).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(ApiError(e.to_string())),
            }
        })
    }
}

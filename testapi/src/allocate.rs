//! What the scheduler and the resourceclaim controller do for a pod with claims, for
//! tests: each template's claim created (owned by the pod, its name in
//! `status.resourceClaimStatuses`), each claim allocated (one device per request, from
//! the devices given, in order) and reserved for the pod.

use k8s_openapi::api::core::v1::{Pod, PodResourceClaimStatus};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult, ResourceClaim,
    ResourceClaimConsumerReference, ResourceClaimStatus, ResourceClaimTemplate,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::{ApiError, ApiHandle, Error};

impl ApiHandle {
    /// Allocates the claims of pod `ns/pod` as the scheduler would, on `driver`'s
    /// `pool`, handing out `devices` in order (one per request; a claim already
    /// allocated keeps its devices and is only reserved). Returns the pod's claims.
    pub fn allocate_claims(
        &self,
        ns: &str,
        pod: &str,
        driver: &str,
        pool: &str,
        devices: &[&str],
    ) -> Result<Vec<ResourceClaim>, Error> {
        let mut p: Pod = self
            .get(ns, pod)?
            .ok_or_else(|| Error::Api(ApiError::not_found("pods", pod)))?;
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let claims = p
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.clone())
            .unwrap_or_default();
        let mut statuses = Vec::new();
        let mut out = Vec::new();
        let mut free = devices.iter();
        for pc in claims {
            let name = match (&pc.resource_claim_name, &pc.resource_claim_template_name) {
                (Some(n), _) => n.clone(),
                (None, Some(t)) => {
                    let generated = format!("{pod}-{}-{}", pc.name, suffix());
                    self.generate(ns, t, &generated, pod, &uid)?;
                    statuses.push(PodResourceClaimStatus {
                        name: pc.name.clone(),
                        resource_claim_name: Some(generated.clone()),
                    });
                    generated
                }
                (None, None) => continue,
            };
            let mut claim: ResourceClaim = self
                .get(ns, &name)?
                .ok_or_else(|| Error::Api(ApiError::not_found("resourceclaims", &name)))?;
            let status = claim
                .status
                .get_or_insert_with(ResourceClaimStatus::default);
            if status.allocation.is_none() {
                let requests = claim
                    .spec
                    .as_ref()
                    .and_then(|s| s.devices.as_ref())
                    .and_then(|d| d.requests.clone());
                let mut results = Vec::new();
                for r in requests.unwrap_or_default() {
                    let device = free.next().ok_or_else(|| {
                        Error::Api(ApiError::bad_request(
                            "cannot allocate all claims: no device left",
                        ))
                    })?;
                    results.push(DeviceRequestAllocationResult {
                        request: r.name,
                        driver: driver.to_owned(),
                        pool: pool.to_owned(),
                        device: (*device).to_owned(),
                        ..Default::default()
                    });
                }
                status.allocation = Some(AllocationResult {
                    devices: Some(DeviceAllocationResult {
                        results: Some(results),
                        config: None,
                    }),
                    ..Default::default()
                });
            }
            let reserved = status.reserved_for.get_or_insert_with(Vec::new);
            if !reserved.iter().any(|r| r.uid == uid) {
                reserved.push(ResourceClaimConsumerReference {
                    api_group: None,
                    resource: "pods".into(),
                    name: pod.to_owned(),
                    uid: uid.clone(),
                });
            }
            out.push(self.put(&claim)?);
        }
        if !statuses.is_empty() {
            p.status
                .get_or_insert_with(Default::default)
                .resource_claim_statuses = Some(statuses);
            self.put(&p)?;
        }
        Ok(out)
    }

    /// The resourceclaim controller's claim for a pod's template entry.
    fn generate(
        &self,
        ns: &str,
        template: &str,
        name: &str,
        pod: &str,
        uid: &str,
    ) -> Result<(), Error> {
        let t: ResourceClaimTemplate = self
            .get(ns, template)?
            .ok_or_else(|| Error::Api(ApiError::not_found("resourceclaimtemplates", template)))?;
        let claim = ResourceClaim {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(ns.to_owned()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: pod.to_owned(),
                    uid: uid.to_owned(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: t.spec.and_then(|s| s.spec),
            status: None,
        };
        self.put(&claim)?;
        Ok(())
    }
}

fn suffix() -> String {
    (0..5)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

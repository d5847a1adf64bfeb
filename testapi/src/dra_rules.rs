//! resource.k8s.io/v1 as a kubelet meets it: what the real server's validation refuses of
//! ResourceClaims, their templates, DeviceClasses and ResourceSlices (required fields,
//! DNS names, exactly one of the alternatives), and the node authorizer's rules for a
//! node's identity (`system:node:<name>`): a node gets a ResourceClaim only when a pod
//! bound to it references the claim, may write ResourceSlices only of its own
//! `spec.nodeName`, reads DeviceClasses and slices, and nothing else of the group.

use hyper::Method;
use serde_json::Value;

use crate::http::{Shared, Target};
use crate::status::ApiError;

/// `IsDNS1123Label`.
fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `IsDNS1123Subdomain`.
fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A ResourceClaim's or a template's `spec.devices` (the claim spec at `at`).
fn check_claim_spec(spec: &Value, at: &str) -> Result<(), String> {
    let requests = spec.pointer("/devices/requests").and_then(Value::as_array);
    let mut seen = Vec::new();
    for (i, r) in requests.into_iter().flatten().enumerate() {
        let path = format!("{at}.devices.requests[{i}]");
        let name = text(r, "/name");
        if name.is_empty() {
            return Err(format!("{path}.name: Required value"));
        }
        if !dns_label(name) {
            return Err(format!(
                "{path}.name: Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
            ));
        }
        if seen.contains(&name) {
            return Err(format!("{path}.name: Duplicate value: {name:?}"));
        }
        seen.push(name);
        let alternatives = ["exactly", "firstAvailable"]
            .iter()
            .filter(|k| r.get(**k).is_some_and(|v| !v.is_null()))
            .count();
        if alternatives != 1 {
            return Err(format!(
                "{path}: Required value: exactly one of `exactly` or `firstAvailable` is required"
            ));
        }
        if r.get("exactly").is_some_and(|e| !e.is_null())
            && text(r, "/exactly/deviceClassName").is_empty()
        {
            return Err(format!("{path}.exactly.deviceClassName: Required value"));
        }
    }
    Ok(())
}

/// What `ValidateResourceClaim` and its status update refuse that a kubelet meets.
pub(crate) fn check_claim(claim: &Value) -> Result<(), String> {
    check_claim_spec(claim.get("spec").unwrap_or(&Value::Null), "spec")?;
    let results = claim
        .pointer("/status/allocation/devices/results")
        .and_then(Value::as_array);
    for (i, r) in results.into_iter().flatten().enumerate() {
        let path = format!("status.allocation.devices.results[{i}]");
        for field in ["request", "driver", "pool", "device"] {
            if text(r, &format!("/{field}")).is_empty() {
                return Err(format!("{path}.{field}: Required value"));
            }
        }
        let driver = text(r, "/driver");
        if !dns_subdomain(driver) {
            return Err(format!(
                "{path}.driver: Invalid value: {driver:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ));
        }
    }
    let reserved = claim
        .pointer("/status/reservedFor")
        .and_then(Value::as_array);
    let reserved = reserved.map_or(&[][..], Vec::as_slice);
    if reserved.len() > 256 {
        return Err(format!(
            "status.reservedFor: Too many: {}: must have at most 256 items",
            reserved.len()
        ));
    }
    if !reserved.is_empty()
        && claim
            .pointer("/status/allocation")
            .is_none_or(Value::is_null)
    {
        return Err(
            "status.reservedFor: Forbidden: may not be specified when `allocated` is not set"
                .into(),
        );
    }
    for (i, r) in reserved.iter().enumerate() {
        for field in ["resource", "name", "uid"] {
            if text(r, &format!("/{field}")).is_empty() {
                return Err(format!("status.reservedFor[{i}].{field}: Required value"));
            }
        }
    }
    Ok(())
}

pub(crate) fn check_template(t: &Value) -> Result<(), String> {
    check_claim_spec(t.pointer("/spec/spec").unwrap_or(&Value::Null), "spec.spec")
}

/// `ValidateResourceSlice`: a driver, a pool with a name and generation, and exactly one
/// of the node selections.
pub(crate) fn check_slice(s: &Value) -> Result<(), String> {
    let driver = text(s, "/spec/driver");
    if driver.is_empty() {
        return Err("spec.driver: Required value".into());
    }
    if !dns_subdomain(driver) {
        return Err(format!(
            "spec.driver: Invalid value: {driver:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ));
    }
    if text(s, "/spec/pool/name").is_empty() {
        return Err("spec.pool.name: Required value".into());
    }
    let selections = [
        "nodeName",
        "nodeSelector",
        "allNodes",
        "perDeviceNodeSelection",
    ];
    let set = selections
        .iter()
        .filter(|k| match s.pointer(&format!("/spec/{k}")) {
            None | Some(Value::Null | Value::Bool(false)) => false,
            Some(Value::String(v)) => !v.is_empty(),
            Some(_) => true,
        })
        .count();
    if set != 1 {
        return Err("spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required".into());
    }
    Ok(())
}

/// The claims a pod references: by name, or generated and named in its status.
fn pod_claim_names(pod: &Value) -> Vec<String> {
    let statuses = pod
        .pointer("/status/resourceClaimStatuses")
        .and_then(Value::as_array);
    let generated = |name: &str| {
        statuses
            .into_iter()
            .flatten()
            .find(|s| text(s, "/name") == name)
            .map(|s| text(s, "/resourceClaimName").to_owned())
    };
    let claims = pod
        .pointer("/spec/resourceClaims")
        .and_then(Value::as_array);
    claims
        .into_iter()
        .flatten()
        .filter_map(
            |c| match c.get("resourceClaimName").and_then(Value::as_str) {
                Some(n) => Some(n.to_owned()),
                None => generated(text(c, "/name")),
            },
        )
        .filter(|n| !n.is_empty())
        .collect()
}

/// The node authorizer (and NodeRestriction) for `node` on a resource.k8s.io request.
/// `body` is the request's object, if any; `fields` its field selector.
pub(crate) fn authorize(
    shared: &Shared,
    node: &str,
    method: &Method,
    t: &Target,
    body: Option<&Value>,
    fields: Option<&str>,
    watch: bool,
) -> Result<(), ApiError> {
    let verb = crate::rbac::verb(method, t.name.is_some(), watch);
    let name = t.name.clone().unwrap_or_default();
    let refuse = |why: &str| {
        let scope =
            t.ns.as_ref()
                .map(|ns| format!(" in the namespace \"{ns}\""))
                .unwrap_or_default();
        ApiError::forbidden(
            &format!("{}.{}", t.def.name, t.def.group),
            &name,
            &format!(
                "User \"system:node:{node}\" cannot {verb} resource \"{}\" in API group \"{}\"{scope}: {why}",
                t.def.name, t.def.group
            ),
        )
    };
    match (t.def.name, verb) {
        ("deviceclasses" | "resourceslices", "get" | "list" | "watch") => Ok(()),
        ("resourceclaims", "get") if t.sub.is_none() => {
            let ns = t.ns.clone().unwrap_or_default();
            let (pods, _) = shared.store.list("pods", Some(&ns), None)?;
            let referenced = pods.iter().any(|(_, p)| {
                text(p, "/spec/nodeName") == node && pod_claim_names(p).contains(&name)
            });
            if referenced {
                Ok(())
            } else {
                Err(refuse(&format!(
                    "no relationship found between node '{node}' and this object"
                )))
            }
        }
        ("resourceslices", "create" | "update" | "patch" | "delete") => {
            let stored = t.name.as_ref().and_then(|_| shared.store.get(&t.key()));
            let owners = [stored.as_ref(), body].into_iter().flatten();
            for obj in owners {
                if text(obj, "/spec/nodeName") != node {
                    return Err(refuse(
                        "can only create, update and delete ResourceSlices of its own node (spec.nodeName)",
                    ));
                }
            }
            Ok(())
        }
        ("resourceslices", "deletecollection") => {
            let own = format!("spec.nodeName={node}");
            if fields.is_some_and(|f| f.split(',').any(|r| r == own)) {
                Ok(())
            } else {
                Err(refuse(
                    "can only delete ResourceSlices of its own node (fieldSelector spec.nodeName)",
                ))
            }
        }
        _ => Err(refuse("not allowed for a node")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claims_need_named_requests_with_one_alternative() {
        let claim = |requests: Value| json!({"metadata": {"name": "c"}, "spec": {"devices": {"requests": requests}}});
        check_claim(&claim(
            json!([{"name": "gpu", "exactly": {"deviceClassName": "dc"}}]),
        ))
        .unwrap();
        assert_eq!(
            check_claim(&claim(json!([{"exactly": {"deviceClassName": "dc"}}]))).unwrap_err(),
            "spec.devices.requests[0].name: Required value"
        );
        assert!(
            check_claim(&claim(
                json!([{"name": "Gpu", "exactly": {"deviceClassName": "dc"}}])
            ))
            .unwrap_err()
            .contains("RFC 1123 label")
        );
        assert_eq!(
            check_claim(&claim(json!([{"name": "gpu"}]))).unwrap_err(),
            "spec.devices.requests[0]: Required value: exactly one of `exactly` or `firstAvailable` is required"
        );
        let reserved_unallocated = json!({"spec": {}, "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}});
        assert!(
            check_claim(&reserved_unallocated)
                .unwrap_err()
                .starts_with("status.reservedFor: Forbidden")
        );
        let bad_result = json!({"spec": {}, "status": {"allocation": {"devices": {"results": [{"request": "r", "driver": "d.example.com", "pool": "p"}]}}}});
        assert_eq!(
            check_claim(&bad_result).unwrap_err(),
            "status.allocation.devices.results[0].device: Required value"
        );
    }

    #[test]
    fn slices_name_a_driver_a_pool_and_one_node_selection() {
        let good = json!({"spec": {"driver": "dra.example.com", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n1"}});
        check_slice(&good).unwrap();
        let mut both = good.clone();
        both["spec"]["allNodes"] = json!(true);
        assert!(
            check_slice(&both)
                .unwrap_err()
                .starts_with("spec: Required value: exactly one of")
        );
        let mut no_driver = good.clone();
        no_driver["spec"]["driver"] = json!("");
        assert_eq!(
            check_slice(&no_driver).unwrap_err(),
            "spec.driver: Required value"
        );
    }

    #[test]
    fn a_pods_claims_by_name_and_generated() {
        let pod = json!({"spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "shared"}, {"name": "b", "resourceClaimTemplateName": "t"}, {"name": "c", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x1"}]}});
        assert_eq!(pod_claim_names(&pod), vec!["shared", "p-b-x1"]);
    }
}

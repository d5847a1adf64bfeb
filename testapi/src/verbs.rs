//! The writes: create, update (PUT), patch and delete, with what the server owns in metadata,
//! the status subresource's rules, pod graceful deletion and finalizers, and TokenRequest.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};

use crate::http::{
    Body, Query, Shared, Target, json_body, new_uid, now, respond, timestamp, unsupported_media,
};
use crate::patch;
use crate::resources;
use crate::status::ApiError;

use hyper::Response;

/// Check `kind`/`apiVersion` if given, then the fields, then fill in what the server owns.
fn decode(t: &Target, body: &mut Value) -> Result<(), ApiError> {
    let def = t.def;
    for (field, want) in [
        ("kind", def.kind.to_owned()),
        ("apiVersion", def.api_version()),
    ] {
        match body.get(field).and_then(Value::as_str) {
            None | Some("") => {}
            Some(got) if got == want => {}
            Some(got) => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({got}) does not match the expected API version ({want})"
                )));
            }
        }
    }
    (def.check)(body)?;
    crate::validate::admit(def.name, body)?;
    body["kind"] = Value::String(def.kind.to_owned());
    body["apiVersion"] = Value::String(def.api_version());
    if !body.get("metadata").is_some_and(Value::is_object) {
        body["metadata"] = json!({});
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.' || b == b':'
        })
        && name.as_bytes()[0].is_ascii_alphanumeric()
}

pub(crate) fn create(
    shared: &Shared,
    t: &Target,
    mut body: Value,
) -> Result<Response<Body>, ApiError> {
    decode(t, &mut body)?;
    let meta = &mut body["metadata"];
    if let (Some(url_ns), Some(ns)) = (&t.ns, meta.get("namespace").and_then(Value::as_str))
        && ns != url_ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let name = match (
        meta.get("name").and_then(Value::as_str),
        meta.get("generateName").and_then(Value::as_str),
    ) {
        (Some(n), _) if !n.is_empty() => n.to_owned(),
        (_, Some(g)) if !g.is_empty() => format!(
            "{g}{}",
            (0..5)
                .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
                .collect::<String>()
        ),
        _ => {
            return Err(ApiError::invalid(
                t.def.name,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
    };
    if !valid_name(&name) {
        return Err(ApiError::invalid(
            t.def.name,
            &name,
            format!(
                "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'"
            ),
        ));
    }
    let m = meta
        .as_object_mut()
        .expect("decode made metadata an object");
    for server_owned in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        m.remove(server_owned);
    }
    m.insert("name".into(), Value::String(name.clone()));
    if let Some(ns) = &t.ns {
        m.insert("namespace".into(), Value::String(ns.clone()));
    }
    m.insert("uid".into(), Value::String(new_uid()));
    m.insert("creationTimestamp".into(), Value::String(timestamp(now())));
    match t.def.name {
        // The server resets what a client may not set on create.
        "pods" => {
            let class = (body
                .pointer("/spec/runtimeClassName")
                .and_then(Value::as_str))
            .and_then(|n| {
                shared.store.get(&(
                    "node.k8s.io/runtimeclasses".to_owned(),
                    String::new(),
                    n.to_owned(),
                ))
            });
            crate::pod_rules::admit_runtime_class(&mut body, class.as_ref())
                .map_err(|m| ApiError::forbidden(t.def.name, &name, &m))?;
            crate::pod_rules::on_create(&mut body);
        }
        "nodes" if t.def.group.is_empty() => {
            crate::node_rules::check(&body).map_err(|m| ApiError::invalid(t.def.name, &name, m))?
        }
        "certificatesigningrequests" => {
            body.as_object_mut().expect("object").remove("status");
        }
        // Served at once, as the real server does when the names do not conflict.
        "customresourcedefinitions" => body["status"] = crate::custom::established_status(&body),
        // A custom resource with a status subresource starts without one.
        _ if t.def.status && crate::resources::by_id(&[], &t.def.id()).is_none() => {
            body.as_object_mut().expect("object").remove("status");
        }
        _ => {}
    }
    let key = (t.def.id(), t.ns.clone().unwrap_or_default(), name.clone());
    let (obj, ()) = shared.store.mutate(&key, |old, _| match old {
        Some(_) => Err(ApiError::already_exists(t.def.name, &name)),
        None => Ok((Some(body), ())),
    })?;
    Ok(respond(201, &obj.unwrap_or(Value::Null)))
}

fn conflict_rv(t: &Target, name: &str) -> ApiError {
    ApiError::conflict(
        t.def.name,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )
}

/// Removed for good once being deleted with no finalizers left and no grace outstanding.
fn finished(obj: &Value) -> bool {
    let m = &obj["metadata"];
    m.get("deletionTimestamp").is_some_and(|d| !d.is_null())
        && m.get("finalizers")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        && m.get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
}

/// The `pods/ephemeralcontainers` subresource: only `spec.ephemeralContainers` is taken,
/// and only by adding; the ones there stay as they are (the apiserver's
/// `ValidatePodEphemeralContainersUpdate`).
fn with_ephemeral_containers(
    t: &Target,
    name: &str,
    old: &Value,
    new: &Value,
) -> Result<Value, ApiError> {
    let list = |v: &Value| {
        v.pointer("/spec/ephemeralContainers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (before, after) = (list(old), list(new));
    for e in &before {
        if !after.contains(e) {
            let which = e["name"].as_str().unwrap_or("");
            return Err(ApiError::invalid(
                t.def.name,
                name,
                format!(
                    "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"{which}\" may not be changed"
                ),
            ));
        }
    }
    let mut o = old.clone();
    o["spec"]["ephemeralContainers"] = Value::Array(after);
    Ok(o)
}

/// Write `new` over `old` the way the target allows: the main resource keeps the status of
/// resources that have a status subresource, `status`/`approval` change only the status, and
/// the server-owned metadata always stays.
fn merge_write(
    t: &Target,
    name: &str,
    old: &Value,
    mut new: Value,
) -> Result<Option<Value>, ApiError> {
    let meta_old = &old["metadata"];
    let uid = meta_old.get("uid").cloned().unwrap_or(Value::Null);
    match new.pointer("/metadata/uid") {
        Some(u) if !u.is_null() && u.as_str() != Some("") && *u != uid => {
            return Err(ApiError::conflict(
                t.def.name,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                    u.as_str().unwrap_or(""),
                    uid.as_str().unwrap_or("")
                ),
            ));
        }
        _ => {}
    }
    match new
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        Some(rv) if !rv.is_empty() && rv != meta_old["resourceVersion"].as_str().unwrap_or("") => {
            return Err(conflict_rv(t, name));
        }
        _ => {}
    }
    let is_pod = t.def.name == "pods" && t.def.group.is_empty();
    let mut out = match t.sub.as_deref() {
        Some("status") => {
            let mut o = old.clone();
            o["status"] = new.get("status").cloned().unwrap_or(json!({}));
            if is_pod {
                crate::pod_rules::check_status_update(old, &o)
                    .map_err(|m| ApiError::invalid(t.def.name, name, m))?;
            }
            o
        }
        Some("ephemeralcontainers") => with_ephemeral_containers(t, name, old, &new)?,
        Some("resize") => {
            let mut o = crate::resize::take_resize(old, &new);
            crate::resize::check_resize(old, &o)
                .map_err(|m| ApiError::invalid(t.def.name, name, m))?;
            o["metadata"]["generation"] = json!(crate::pod_rules::generation_after(old, &o));
            o
        }
        Some("approval") => {
            let mut o = old.clone();
            o["status"]["conditions"] = new
                .pointer("/status/conditions")
                .cloned()
                .unwrap_or(json!([]));
            o
        }
        _ => {
            let ephemeral = |v: &Value| v.pointer("/spec/ephemeralContainers").cloned();
            if t.def.name == "pods" && ephemeral(old) != ephemeral(&new) {
                return Err(ApiError::invalid(
                    t.def.name,
                    name,
                    "spec.ephemeralContainers: Forbidden: ephemeral containers are changed through the pods/ephemeralcontainers subresource only",
                ));
            }
            if t.def.status {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        new.as_object_mut().expect("object").remove("status");
                    }
                }
            }
            if is_pod {
                crate::pod_update::check_update(old, &new)
                    .map_err(|m| ApiError::invalid(t.def.name, name, m))?;
                new["metadata"]["generation"] =
                    json!(crate::pod_rules::generation_after(old, &new));
            }
            new
        }
    };
    if t.def.name == "nodes" && t.def.group.is_empty() {
        crate::node_rules::check_update(old, &out)
            .map_err(|m| ApiError::invalid(t.def.name, name, m))?;
    }
    let m = out["metadata"]
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
    for owned in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
        "name",
        "namespace",
    ] {
        match meta_old.get(owned) {
            Some(v) => m.insert(owned.into(), v.clone()),
            None => m.remove(owned),
        };
    }
    out["kind"] = Value::String(t.def.kind.to_owned());
    out["apiVersion"] = Value::String(t.def.api_version());
    Ok(if finished(&out) { None } else { Some(out) })
}

pub(crate) fn update(
    shared: &Shared,
    t: &Target,
    mut body: Value,
) -> Result<Response<Body>, ApiError> {
    decode(t, &mut body)?;
    let name = t.name.clone().unwrap_or_default();
    if let Some(n) = body.pointer("/metadata/name").and_then(Value::as_str)
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    let (obj, ()) = shared.store.mutate(&t.key(), |old, _| {
        let old = old.ok_or_else(|| ApiError::not_found(t.def.name, &name))?;
        Ok((merge_write(t, &name, old, body)?, ()))
    })?;
    Ok(respond(200, &obj.unwrap_or(Value::Null)))
}

pub(crate) fn patch_object(
    shared: &Shared,
    t: &Target,
    ct: Option<&str>,
    raw: &[u8],
) -> Result<Response<Body>, ApiError> {
    let kind = match ct {
        Some(
            k @ ("application/merge-patch+json"
            | "application/strategic-merge-patch+json"
            | "application/json-patch+json"),
        ) => k,
        _ => return Err(unsupported_media(ct)),
    };
    let p: Value = serde_json::from_slice(raw)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let name = t.name.clone().unwrap_or_default();
    let (obj, ()) = shared.store.mutate(&t.key(), |old, _| {
        let old = old.ok_or_else(|| ApiError::not_found(t.def.name, &name))?;
        let mut new = old.clone();
        match kind {
            "application/merge-patch+json" => patch::merge(&mut new, &p),
            "application/strategic-merge-patch+json" => patch::strategic(&mut new, &p, "")?,
            _ => patch::json_patch(&mut new, &p)?,
        }
        (t.def.check)(&new)?;
        crate::validate::admit(t.def.name, &mut new)?;
        Ok((merge_write(t, &name, old, new)?, ()))
    })?;
    Ok(respond(200, &obj.unwrap_or(Value::Null)))
}

pub(crate) fn delete(
    shared: &Shared,
    t: &Target,
    ct: Option<&str>,
    raw: &[u8],
    q: &Query,
) -> Result<Response<Body>, ApiError> {
    let opts = if raw.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        json_body(ct, raw)?
    };
    let grace_q = q
        .get("gracePeriodSeconds")
        .map(|g| {
            g.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g:?}")))
        })
        .transpose()?;
    let grace_opt = opts
        .get("gracePeriodSeconds")
        .and_then(Value::as_i64)
        .or(grace_q);
    let name = t.name.clone().unwrap_or_default();
    let is_pod = t.def.name == "pods" && t.def.group.is_empty();
    let (obj, ()) = shared.store.mutate(&t.key(), |old, _| {
        let old = old.ok_or_else(|| ApiError::not_found(t.def.name, &name))?;
        let meta = &old["metadata"];
        if let Some(uid) = opts.pointer("/preconditions/uid").and_then(Value::as_str)
            && Some(uid) != meta["uid"].as_str()
        {
            return Err(ApiError::conflict(t.def.name, &name, &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", meta["uid"].as_str().unwrap_or(""))));
        }
        if let Some(rv) = opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str)
            && Some(rv) != meta["resourceVersion"].as_str()
        {
            return Err(ApiError::conflict(t.def.name, &name, &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}", meta["resourceVersion"].as_str().unwrap_or(""))));
        }
        // kubelet's pods: the spec's grace unless the request says otherwise; an unbound or
        // finished pod goes at once.
        let grace = if is_pod {
            let spec = old.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
            let phase = old.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
            let unbound = old.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").is_empty();
            if unbound || matches!(phase, "Succeeded" | "Failed") { 0 } else { grace_opt.unwrap_or(spec).max(0) }
        } else {
            0
        };
        let mut new = old.clone();
        if meta.get("deletionTimestamp").is_some_and(|d| !d.is_null()) {
            // Already being deleted: only a shorter grace changes anything.
            let current = meta.get("deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0);
            if grace >= current {
                return Ok((Some(old.clone()), ()));
            }
        }
        let when = now().checked_add(jiff::SignedDuration::from_secs(grace)).unwrap_or_else(|_| now());
        new["metadata"]["deletionTimestamp"] = Value::String(timestamp(when));
        new["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        if is_pod && grace > 0 {
            return Ok((Some(new), ()));
        }
        Ok((if finished(&new) { None } else { Some(new) }, ()))
    })?;
    let obj = obj.unwrap_or(Value::Null);
    if is_pod {
        return Ok(respond(200, &obj));
    }
    Ok(respond(
        200,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "kind": t.def.name, "uid": obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null)},
        }),
    ))
}

/// `DELETE` on a collection (`deletecollection`): every object the selectors match is
/// deleted as a single delete would (at once unless finalizers hold it); the answer is
/// the list of what was deleted. Not for pods (their graceful deletion is per pod).
pub(crate) fn delete_collection(
    shared: &Shared,
    t: &Target,
    labels: &crate::selectors::Selector,
    fields: &crate::selectors::Selector,
) -> Result<Response<Body>, ApiError> {
    let (items, _) = shared.store.list(&t.def.id(), t.ns.as_deref(), None)?;
    let mut deleted = Vec::new();
    for (key, obj) in items {
        if !labels.matches_labels(&obj) || !fields.matches_fields(&obj) {
            continue;
        }
        let (_, gone) = shared.store.mutate(&key, |old, _| {
            let Some(old) = old else {
                return Ok((None, None));
            };
            let mut new = old.clone();
            if new["metadata"]
                .get("deletionTimestamp")
                .is_none_or(Value::is_null)
            {
                new["metadata"]["deletionTimestamp"] = Value::String(timestamp(now()));
                new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            }
            let keep = if finished(&new) {
                None
            } else {
                Some(new.clone())
            };
            Ok((keep, Some(new)))
        })?;
        deleted.extend(gone);
    }
    Ok(respond(
        200,
        &json!({"kind": format!("{}List", t.def.kind), "apiVersion": t.def.api_version(), "metadata": {}, "items": deleted}),
    ))
}

/// `serviceaccounts/<name>/token`: a TokenRequest answered with an opaque token and its expiry.
pub(crate) fn token_request(
    shared: &Shared,
    t: &Target,
    body: &Value,
) -> Result<Response<Body>, ApiError> {
    resources::check_token_request(body)?;
    let ns = t.ns.clone().unwrap_or_default();
    let sa = t.name.clone().unwrap_or_default();
    // Every namespace of a real cluster has its `default` service account.
    if sa != "default"
        && shared
            .store
            .get(&("serviceaccounts".into(), ns.clone(), sa.clone()))
            .is_none()
    {
        return Err(ApiError::not_found("serviceaccounts", &sa));
    }
    let mut spec = body.get("spec").cloned().unwrap_or(json!({}));
    let asked = spec
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(3600);
    if asked < 600 {
        return Err(ApiError::invalid(
            "serviceaccounts",
            &sa,
            format!(
                "spec.expirationSeconds: Invalid value: {asked}: may not specify a duration less than 10 minutes"
            ),
        ));
    }
    let max = *shared
        .token_max
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let secs = max.map_or(asked, |m| {
        asked.min(i64::try_from(m.as_secs()).unwrap_or(i64::MAX))
    });
    if let Some(bound) = spec.get("boundObjectRef").filter(|b| b["kind"] == "Pod") {
        let pod_name = bound["name"].as_str().unwrap_or("");
        let pod = shared
            .store
            .get(&("pods".into(), ns.clone(), pod_name.to_owned()))
            .ok_or_else(|| ApiError::not_found("pods", pod_name))?;
        if let Some(uid) = bound["uid"].as_str().filter(|u| !u.is_empty())
            && Some(uid) != pod.pointer("/metadata/uid").and_then(Value::as_str)
        {
            return Err(ApiError::conflict(
                "pods",
                pod_name,
                &format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in record"
                ),
            ));
        }
        // A token bound to a pod is what a node asks for: NodeRestriction's audience rule.
        let audiences: Vec<&str> = (spec.get("audiences").and_then(Value::as_array))
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let rules = shared
            .reviews
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        crate::reviews::check_node_audience(&rules, &pod, node, &sa, &audiences)?;
    }
    spec["expirationSeconds"] = json!(secs);
    if spec
        .get("audiences")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec["audiences"] = json!(["https://kubernetes.default.svc.cluster.local"]);
    }
    let n = shared.issued.fetch_add(1, Ordering::SeqCst);
    let expires = now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| now());
    Ok(respond(
        201,
        &json!({
            "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": sa, "namespace": ns, "creationTimestamp": timestamp(now())},
            "spec": spec,
            "status": {"token": format!("testapi-{ns}-{sa}-{n}-{:016x}", fastrand::u64(..)), "expirationTimestamp": timestamp(expires)},
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_only_without_finalizers_or_grace() {
        assert!(finished(
            &json!({"metadata": {"deletionTimestamp": "t", "deletionGracePeriodSeconds": 0}})
        ));
        assert!(!finished(
            &json!({"metadata": {"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30}})
        ));
        assert!(!finished(
            &json!({"metadata": {"deletionTimestamp": "t", "finalizers": ["f"]}})
        ));
        assert!(!finished(&json!({"metadata": {}})));
    }
}

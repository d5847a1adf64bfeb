//! The `pods/resize` subresource as 1.36's `podResizeStrategy` serves it. From the request
//! only the containers' and init containers' `resources` and `resizePolicy` and the
//! pod-level `spec.resources` are taken (`dropNonResizeUpdates`; the rest of the body,
//! metadata and status included, is ignored), then `ValidatePodResize` decides: requests
//! within limits, no static or Windows pod, the same QoS class, a running pod's node
//! reporting container resources (the version-skew guard), no request or limit removed,
//! only cpu and memory changed, sidecars only (non-sidecar init containers keep theirs).
//! Memory limits may go down or be added under any `resizePolicy` (allowed since 1.35),
//! and pod-level resources are resizable (`InPlacePodLevelResourcesVerticalScaling`,
//! beta and on in 1.36) under the containers' rules. Unscheduled and finished pods are
//! not refused: the real validation does not look at either.

use serde_json::{Value, json};

use crate::pod_rules::{qos_class, quantity_milli};
use crate::pod_update::{items, semantic, set_or_remove, spec_of};

const CONTAINER_LISTS: [&str; 2] = ["containers", "initContainers"];

/// `dropNonResizeUpdates`: `old` with the resize fields of `new`. When containers were
/// added, removed, reordered or renamed the new spec is taken whole, for
/// [`check_resize`] to refuse.
pub(crate) fn take_resize(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    let (before, after) = (spec_of(old), spec_of(new));
    let names = |s: &Value, list: &str| -> Vec<Value> {
        items(s, list)
            .iter()
            .map(|c| c.get("name").cloned().unwrap_or(Value::Null))
            .collect()
    };
    if CONTAINER_LISTS
        .iter()
        .any(|l| names(&before, l) != names(&after, l))
    {
        out["spec"] = after;
        return out;
    }
    for list in CONTAINER_LISTS {
        for (i, c) in items(&after, list).iter().enumerate() {
            let target = &mut out["spec"][list][i];
            for field in ["resources", "resizePolicy"] {
                set_or_remove(target, field, c.get(field));
            }
        }
    }
    set_or_remove(&mut out["spec"], "resources", after.get("resources"));
    out
}

/// `ValidatePodResize` on the pod after [`take_resize`] against the stored one; the first
/// failure, worded as the real server's.
pub(crate) fn check_resize(old: &Value, new: &Value) -> Result<(), String> {
    let (before, after) = (spec_of(old), spec_of(new));
    requests_within_limits(&after)?;
    if old
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some()
    {
        return Err("[]: Forbidden: static pods cannot be resized".into());
    }
    if before.pointer("/os/name").and_then(Value::as_str) == Some("windows") {
        return Err("[]: Forbidden: windows pods cannot be resized".into());
    }
    // The stored class (`GetPodQOS`) against the one the new resources make.
    let stored = old.pointer("/status/qosClass").and_then(Value::as_str);
    if stored.unwrap_or_else(|| qos_class(&before)) != qos_class(&after) {
        return Err(format!(
            "spec: Invalid value: {:?}: Pod QOS Class may not change as a result of resizing",
            stored.unwrap_or("")
        ));
    }
    if !node_reports_resources(old) {
        return Err("spec: Forbidden: Pod running on node without support for resize".into());
    }
    let mutable_only = "spec: Forbidden: only cpu and memory resources are mutable";
    let shape = |s: &Value, l: &str| items(s, l).len();
    if CONTAINER_LISTS
        .iter()
        .any(|l| shape(&before, l) != shape(&after, l))
    {
        return Err(mutable_only.into());
    }
    for (i, (o, n)) in pairs(&before, &after, "initContainers") {
        if is_sidecar(o) {
            nothing_removed(
                o.get("resources"),
                n.get("resources"),
                &format!("spec.initContainers[{i}].resources"),
            )?;
        }
    }
    for (i, (o, n)) in pairs(&before, &after, "containers") {
        nothing_removed(
            o.get("resources"),
            n.get("resources"),
            &format!("spec.containers[{i}].resources"),
        )?;
    }
    nothing_removed(
        before.get("resources"),
        after.get("resources"),
        "spec.resources",
    )?;
    for (_, (o, n)) in pairs(&before, &after, "containers") {
        if semantic(&cpu_memory_from(n, o)) != semantic(o) {
            return Err(mutable_only.into());
        }
    }
    for (_, (o, n)) in pairs(&before, &after, "initContainers") {
        if !is_sidecar(o) && semantic(n) != semantic(o) {
            return Err(
                "spec: Forbidden: resources for non-sidecar init containers are immutable".into(),
            );
        }
        if semantic(&cpu_memory_from(n, o)) != semantic(o) {
            return Err(
                "spec: Forbidden: only cpu and memory resources for sidecar containers are mutable"
                    .into(),
            );
        }
    }
    let mut rest = after.clone();
    for list in CONTAINER_LISTS {
        set_or_remove(&mut rest, list, before.get(list));
    }
    let pod_level = cpu_memory_resources(after.get("resources"), before.get("resources"));
    set_or_remove(&mut rest, "resources", pod_level.as_ref());
    if semantic(&rest) != semantic(&before) {
        return Err(mutable_only.into());
    }
    Ok(())
}

/// The same-index pairs of the list `list` in `old` and `new` specs, with their index.
fn pairs<'a>(old: &'a Value, new: &'a Value, list: &str) -> Vec<(usize, (&'a Value, &'a Value))> {
    items(old, list)
        .iter()
        .zip(items(new, list))
        .enumerate()
        .collect()
}

/// A restartable init container: a sidecar, resizable as a regular container.
fn is_sidecar(c: &Value) -> bool {
    c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
}

/// `isPodResizeRequestSupported`: the first running container's status must carry its
/// resources, the sign that its node's kubelet can resize; with nothing running yet the
/// server cannot tell and allows it.
fn node_reports_resources(old: &Value) -> bool {
    let statuses = old
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    match statuses
        .into_iter()
        .flatten()
        .find(|s| s.pointer("/state/running").is_some_and(|r| !r.is_null()))
    {
        Some(s) => s.get("resources").is_some_and(|r| !r.is_null()),
        None => true,
    }
}

/// `validateContainerResize`: no request or limit that was set may go.
fn nothing_removed(old: Option<&Value>, new: Option<&Value>, path: &str) -> Result<(), String> {
    for (kind, word) in [("requests", "requests"), ("limits", "limits")] {
        let names = |r: Option<&Value>| -> Vec<String> {
            r.and_then(|r| r.get(kind))
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        let now = names(new);
        if names(old).iter().any(|n| !now.contains(n)) {
            return Err(format!(
                "{path}.{kind}: Forbidden: resource {word} cannot be removed"
            ));
        }
    }
    Ok(())
}

/// `container` (new) with its cpu and memory amounts put back to `old`'s
/// (`dropCPUMemoryResourcesFromContainer`): equal to `old` only when nothing else changed.
fn cpu_memory_from(container: &Value, old: &Value) -> Value {
    let mut c = container.clone();
    let resources = cpu_memory_resources(container.get("resources"), old.get("resources"));
    set_or_remove(&mut c, "resources", resources.as_ref());
    c
}

/// `new`'s requests and limits with cpu and memory as in `old`; a list `old` lacks is
/// dropped, as upstream's munging drops it.
fn cpu_memory_resources(new: Option<&Value>, old: Option<&Value>) -> Option<Value> {
    let mut out = json!({});
    for kind in ["requests", "limits"] {
        let Some(before) = old.and_then(|o| o.get(kind)).and_then(Value::as_object) else {
            continue;
        };
        let mut list = new
            .and_then(|n| n.get(kind))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for name in ["cpu", "memory"] {
            match before.get(name) {
                Some(q) => list.insert(name.to_owned(), q.clone()),
                None => list.remove(name),
            };
        }
        out[kind] = Value::Object(list);
    }
    Some(out)
}

/// Each request no more than its limit, for every container, init container and the pod
/// level (`ValidateResourceRequirements`).
fn requests_within_limits(spec: &Value) -> Result<(), String> {
    let mut owners: Vec<(String, Option<&Value>)> =
        vec![("spec.resources".into(), spec.get("resources"))];
    for list in CONTAINER_LISTS {
        for (i, c) in items(spec, list).iter().enumerate() {
            owners.push((format!("spec.{list}[{i}].resources"), c.get("resources")));
        }
    }
    for (path, resources) in owners {
        let Some(r) = resources else { continue };
        let requests = r.get("requests").and_then(Value::as_object);
        for (name, asked) in requests.into_iter().flatten() {
            let Some(limit) = r.pointer(&format!("/limits/{name}")) else {
                continue;
            };
            if quantity_milli(asked) > quantity_milli(limit) {
                let text = |q: &Value| q.as_str().map_or_else(|| q.to_string(), str::to_owned);
                return Err(format!(
                    "{path}.requests: Invalid value: {:?}: must be less than or equal to {name} limit of {}",
                    text(asked),
                    text(limit)
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: Value) -> Value {
        let mut p = json!({
            "metadata": {"name": "p", "generation": 1, "labels": {"a": "b"}},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "busybox:1", "resources": resources,
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]}]},
        });
        let qos = qos_class(&p["spec"]);
        p["status"] = json!({"phase": "Running", "qosClass": qos});
        p
    }

    fn burstable() -> Value {
        pod(
            json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}}),
        )
    }

    fn resize(old: &Value, resources: Value) -> Result<Value, String> {
        let mut body = old.clone();
        body["spec"]["containers"][0]["resources"] = resources;
        let out = take_resize(old, &body);
        check_resize(old, &out).map(|()| out)
    }

    #[test]
    fn cpu_and_memory_change_and_nothing_else_is_taken() {
        let old = burstable();
        let mut body = old.clone();
        body["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("1");
        body["spec"]["containers"][0]["image"] = json!("other:2");
        body["spec"]["activeDeadlineSeconds"] = json!(5);
        body["metadata"]["labels"] = json!({"x": "y"});
        body["status"]["phase"] = json!("Failed");
        let out = take_resize(&old, &body);
        assert_eq!(check_resize(&old, &out), Ok(()));
        assert_eq!(
            out["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "1"
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "busybox:1");
        assert!(out["spec"].get("activeDeadlineSeconds").is_none());
        assert_eq!(out["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(out["status"]["phase"], "Running");
        // Memory limits may go down and requests up, under NotRequired too.
        assert!(resize(&old, json!({"requests": {"cpu": "200m", "memory": "100Mi"}, "limits": {"cpu": "500m", "memory": "100Mi"}})).is_ok());
    }

    #[test]
    fn the_qos_class_may_not_change() {
        let old = burstable();
        assert_eq!(
            resize(&old, json!({"requests": {"cpu": "500m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}})),
            Err("spec: Invalid value: \"Burstable\": Pod QOS Class may not change as a result of resizing".into())
        );
        let best_effort = pod(json!({}));
        assert!(
            resize(&best_effort, json!({"requests": {"cpu": "100m"}}))
                .unwrap_err()
                .contains("Pod QOS Class may not change")
        );
    }

    #[test]
    fn requests_and_limits_may_not_be_removed_and_stay_ordered() {
        let old = burstable();
        assert_eq!(
            resize(
                &old,
                json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "500m"}})
            ),
            Err(
                "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed"
                    .into()
            )
        );
        assert_eq!(
            resize(&old, json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "500m", "memory": "128Mi"}})),
            Err("spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed".into())
        );
        assert_eq!(
            resize(&old, json!({"requests": {"cpu": "2", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}})),
            Err("spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 500m".into())
        );
        // A memory limit where there was none keeps the pod Burstable: allowed.
        let open = pod(json!({"requests": {"memory": "64Mi"}}));
        assert!(
            resize(
                &open,
                json!({"requests": {"memory": "64Mi"}, "limits": {"memory": "512Mi"}})
            )
            .is_ok()
        );
    }

    #[test]
    fn only_cpu_and_memory_and_only_sidecars() {
        let old = burstable();
        assert_eq!(
            resize(
                &old,
                json!({"requests": {"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "1Gi"}, "limits": {"cpu": "500m", "memory": "128Mi"}})
            ),
            Err("spec: Forbidden: only cpu and memory resources are mutable".into())
        );
        let mut policy = old.clone();
        policy["spec"]["containers"][0]["resizePolicy"][0]["restartPolicy"] =
            json!("RestartContainer");
        assert_eq!(
            check_resize(&old, &take_resize(&old, &policy)),
            Err("spec: Forbidden: only cpu and memory resources are mutable".into())
        );
        let mut with_init = burstable();
        let init = json!({"name": "i", "image": "busybox:1", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}});
        with_init["spec"]["initContainers"] = json!([init.clone()]);
        let mut grown = with_init.clone();
        grown["spec"]["initContainers"][0]["resources"]["limits"]["cpu"] = json!("300m");
        assert_eq!(
            check_resize(&with_init, &take_resize(&with_init, &grown)),
            Err("spec: Forbidden: resources for non-sidecar init containers are immutable".into())
        );
        with_init["spec"]["initContainers"][0]["restartPolicy"] = json!("Always");
        grown["spec"]["initContainers"][0]["restartPolicy"] = json!("Always");
        assert_eq!(
            check_resize(&with_init, &take_resize(&with_init, &grown)),
            Ok(())
        );
        let mut renamed = old.clone();
        renamed["spec"]["containers"][0]["name"] = json!("d");
        assert_eq!(
            check_resize(&old, &take_resize(&old, &renamed)),
            Err("spec: Forbidden: only cpu and memory resources are mutable".into())
        );
    }

    #[test]
    fn static_windows_and_unsupported_nodes_are_refused() {
        let mut mirror = burstable();
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        assert_eq!(
            resize(
                &mirror,
                mirror["spec"]["containers"][0]["resources"].clone()
            ),
            Err("[]: Forbidden: static pods cannot be resized".into())
        );
        let mut windows = burstable();
        windows["spec"]["os"] = json!({"name": "windows"});
        assert_eq!(
            resize(&windows, json!({})),
            Err("[]: Forbidden: windows pods cannot be resized".into())
        );
        let mut running = burstable();
        running["status"]["containerStatuses"] = json!([{"name": "c", "state": {"running": {}}}]);
        let same = running["spec"]["containers"][0]["resources"].clone();
        assert_eq!(
            resize(&running, same.clone()),
            Err("spec: Forbidden: Pod running on node without support for resize".into())
        );
        running["status"]["containerStatuses"][0]["resources"] = same.clone();
        assert!(resize(&running, same).is_ok());
    }

    #[test]
    fn pod_level_resources_resize_under_the_same_rules() {
        let mut old = pod(json!({}));
        old["spec"]["resources"] = json!({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}});
        old["status"]["qosClass"] = json!(qos_class(&old["spec"]));
        let mut body = old.clone();
        body["spec"]["resources"]["limits"]["cpu"] = json!("3");
        let out = take_resize(&old, &body);
        assert_eq!(check_resize(&old, &out), Ok(()));
        assert_eq!(out["spec"]["resources"]["limits"]["cpu"], "3");
        body["spec"]["resources"] = json!({"requests": {"cpu": "1"}});
        assert_eq!(
            check_resize(&old, &take_resize(&old, &body)),
            Err("spec.resources.limits: Forbidden: resource limits cannot be removed".into())
        );
        body["spec"]["resources"] =
            json!({"requests": {"cpu": "1", "hugepages-2Mi": "2Mi"}, "limits": {"cpu": "2"}});
        assert_eq!(
            check_resize(&old, &take_resize(&old, &body)),
            Err("spec: Forbidden: only cpu and memory resources are mutable".into())
        );
    }
}

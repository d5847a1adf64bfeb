//! A plain pod update (PUT or PATCH on the pod itself) may change only what 1.36's
//! `ValidatePodUpdate` lets it: container and init container images, a shorter or new
//! `activeDeadlineSeconds`, added tolerations (and any toleration's `tolerationSeconds`),
//! removed scheduling gates, `terminationGracePeriodSeconds` from negative to 1, and, while
//! the pod is still gated, additions to its node selector and required node affinity.
//! Anything else in the spec (resources included: those go through `pods/resize`) is
//! refused with the real server's `spec: Forbidden: pod updates may not change fields
//! other than ...` (without the spec diff the real one appends).
//!
//! Specs are compared as the apiserver's semantic equality does: absent, null, empty lists
//! and empty maps are alike, and resource quantities compare by value (`1000m` is `1`).

use serde_json::{Map, Value, json};

/// `updatablePodSpecFields`, joined as the real message joins them.
const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// `ValidatePodUpdate`'s spec rules on `new` against `old` (whole pods); the first
/// failure, worded as the real server's.
pub(crate) fn check_update(old: &Value, new: &Value) -> Result<(), String> {
    let (o, n) = (spec_of(old), spec_of(new));
    for list in ["containers", "initContainers"] {
        container_updates(&o, &n, list)?;
    }
    active_deadline(&o, &n)?;
    only_added_tolerations(&o, &n)?;
    only_deleted_gates(&o, &n)?;
    if semantic(&o) == semantic(&n) {
        return Ok(());
    }
    let mut munged = n.clone();
    for list in ["containers", "initContainers"] {
        let before = items(&o, list);
        for (i, c) in array_mut(&mut munged, list).iter_mut().enumerate() {
            set_or_remove(c, "image", before.get(i).and_then(|b| b.get("image")));
        }
    }
    for field in ["activeDeadlineSeconds", "schedulingGates", "tolerations"] {
        set_or_remove(&mut munged, field, o.get(field));
    }
    let grace = |s: &Value| {
        s.get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
    };
    if grace(&o).is_some_and(|g| g < 0) && grace(&munged) == Some(1) {
        set_or_remove(
            &mut munged,
            "terminationGracePeriodSeconds",
            o.get("terminationGracePeriodSeconds"),
        );
    }
    if !items(&o, "schedulingGates").is_empty() {
        gated_scheduling_changes(&o, &mut munged)?;
    }
    if semantic(&munged) != semantic(&o) {
        return Err(format!(
            "spec: Forbidden: pod updates may not change fields other than {UPDATABLE}"
        ));
    }
    Ok(())
}

/// `ValidateContainerUpdates`: the same number of containers, each with an image.
fn container_updates(old: &Value, new: &Value, list: &str) -> Result<(), String> {
    let (before, after) = (items(old, list), items(new, list));
    if before.len() != after.len() {
        return Err(format!(
            "spec.{list}: Forbidden: pod updates may not add or remove containers"
        ));
    }
    for (i, c) in after.iter().enumerate() {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        if image.is_empty() {
            return Err(format!("spec.{list}[{i}].image: Required value"));
        }
        if image.trim() != image {
            return Err(format!(
                "spec.{list}[{i}].image: Invalid value: {image:?}: must not have leading or trailing whitespace"
            ));
        }
    }
    Ok(())
}

/// `activeDeadlineSeconds` may be set where it was not, or lowered; never raised or
/// removed.
fn active_deadline(old: &Value, new: &Value) -> Result<(), String> {
    let deadline = |s: &Value| s.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match (deadline(old), deadline(new)) {
        (_, Some(n)) if !(0..=i64::from(i32::MAX)).contains(&n) => Err(format!(
            "spec.activeDeadlineSeconds: Invalid value: {n}: must be between 0 and 2147483647, inclusive"
        )),
        (Some(o), Some(n)) if o < n => Err(format!(
            "spec.activeDeadlineSeconds: Invalid value: {n}: must be less than or equal to previous value"
        )),
        (Some(_), None) => Err(
            "spec.activeDeadlineSeconds: Invalid value: \"null\": must not update from a positive integer to nil value"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// `validateOnlyAddedTolerations`: every old toleration is still there, but for its
/// `tolerationSeconds`.
fn only_added_tolerations(old: &Value, new: &Value) -> Result<(), String> {
    let without_seconds = |t: &Value| {
        let mut t = semantic(t);
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    let after: Vec<Value> = items(new, "tolerations")
        .iter()
        .map(without_seconds)
        .collect();
    for t in items(old, "tolerations") {
        if !after.contains(&without_seconds(t)) {
            return Err(
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
                    .into(),
            );
        }
    }
    Ok(())
}

/// `validateOnlyDeletedSchedulingGates`: no gate the old spec lacked.
fn only_deleted_gates(old: &Value, new: &Value) -> Result<(), String> {
    let name = |g: &Value| {
        g.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let before: Vec<String> = items(old, "schedulingGates").iter().map(name).collect();
    for (i, g) in items(new, "schedulingGates").iter().enumerate() {
        if !before.contains(&name(g)) {
            return Err(format!(
                "spec.schedulingGates[{i}].name: Forbidden: only deletion is allowed, but found new scheduling gate '{}'",
                name(g)
            ));
        }
    }
    Ok(())
}

/// A gated pod's node selector may gain keys and its required node affinity terms may
/// gain expressions; checked, then taken back from `old` in `munged` so the final
/// comparison ignores them.
fn gated_scheduling_changes(old: &Value, munged: &mut Value) -> Result<(), String> {
    let selector = |s: &Value| s.get("nodeSelector").cloned().unwrap_or(json!({}));
    let (before, after) = (selector(old), selector(munged));
    if semantic(&before) != semantic(&after) {
        let kept = before
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| after.get(k) == Some(v));
        if !kept {
            return Err(format!(
                "spec.nodeSelector: Invalid value: {}: only additions to spec.nodeSelector are allowed (no mutations or deletions)",
                go_map(&after)
            ));
        }
        set_or_remove(munged, "nodeSelector", old.get("nodeSelector"));
    }
    let affinity = |s: &Value| s.pointer("/affinity/nodeAffinity").cloned();
    let (before, after) = (affinity(old), affinity(munged));
    if semantic(&before.clone().unwrap_or(Value::Null))
        == semantic(&after.clone().unwrap_or(Value::Null))
    {
        return Ok(());
    }
    node_affinity_additions(before.as_ref(), after.as_ref())?;
    let other_affinity = munged
        .get("affinity")
        .and_then(Value::as_object)
        .is_some_and(|a| a.keys().any(|k| k != "nodeAffinity"));
    match (before, old.get("affinity")) {
        (None, None) if !other_affinity => set_or_remove(munged, "affinity", None),
        (before, _) => {
            if !munged.get("affinity").is_some_and(Value::is_object) {
                munged["affinity"] = json!({});
            }
            set_or_remove(&mut munged["affinity"], "nodeAffinity", before.as_ref());
        }
    }
    Ok(())
}

/// `validateNodeAffinityMutation`: with required terms there before, the same number of
/// terms, each keeping all its old expressions and fields.
fn node_affinity_additions(before: Option<&Value>, after: Option<&Value>) -> Result<(), String> {
    const TERMS: &str = "/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
    let terms = |a: Option<&Value>| {
        a.and_then(|a| a.pointer(TERMS))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (old_terms, new_terms) = (terms(before), terms(after));
    let path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    if old_terms.is_empty() {
        return Ok(());
    }
    if old_terms.len() != new_terms.len() {
        return Err(format!(
            "{path}: Invalid value: {}: no additions/deletions to non-empty NodeSelectorTerms list are allowed",
            Value::Array(new_terms)
        ));
    }
    for (i, (o, n)) in old_terms.iter().zip(&new_terms).enumerate() {
        let kept = ["matchExpressions", "matchFields"].iter().all(|k| {
            let now = items(n, k);
            items(o, k).iter().all(|e| now.contains(e))
        });
        if !kept {
            return Err(format!(
                "{path}[{i}]: Invalid value: {n}: only additions are allowed (no mutations or deletions)"
            ));
        }
    }
    Ok(())
}

/// A map as Go's `%#v` prints a `map[string]string`.
fn go_map(v: &Value) -> String {
    let pairs: Vec<String> = (v.as_object().into_iter().flatten())
        .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or("")))
        .collect();
    format!("map[string]string{{{}}}", pairs.join(", "))
}

pub(crate) fn spec_of(pod: &Value) -> Value {
    pod.get("spec").cloned().unwrap_or(json!({}))
}

/// The list `field` of `v`, empty when absent.
pub(crate) fn items<'a>(v: &'a Value, field: &str) -> &'a [Value] {
    v.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn array_mut<'a>(v: &'a mut Value, field: &str) -> &'a mut [Value] {
    match v.get_mut(field).and_then(Value::as_array_mut) {
        Some(a) => a.as_mut_slice(),
        None => &mut [],
    }
}

/// `field` of the object `v` becomes `value`, or goes when `value` is None.
pub(crate) fn set_or_remove(v: &mut Value, field: &str, value: Option<&Value>) {
    let Some(m) = v.as_object_mut() else {
        return;
    };
    match value {
        Some(x) => m.insert(field.to_owned(), x.clone()),
        None => m.remove(field),
    };
}

/// `v` as semantic equality sees it: nulls, empty lists and empty maps dropped, and the
/// quantities of `requests`, `limits` and `overhead` as numbers of thousandths.
pub(crate) fn semantic(v: &Value) -> Value {
    normalize(v, "")
}

fn normalize(v: &Value, key: &str) -> Value {
    match v {
        Value::Object(m) => {
            let quantities = matches!(key, "requests" | "limits" | "overhead");
            let out: Map<String, Value> = m
                .iter()
                .filter_map(|(k, x)| {
                    let x = match (quantities, crate::pod_rules::quantity_milli(x)) {
                        (true, Some(q)) => json!(q.to_string()),
                        _ => normalize(x, k),
                    };
                    (!is_empty(&x)).then(|| (k.clone(), x))
                })
                .collect();
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| normalize(x, key)).collect()),
        other => other.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    fn base() -> Value {
        json!({"nodeName": "n", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}],
            "containers": [{"name": "c", "image": "busybox:1",
                "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}}]})
    }

    fn changed(f: impl FnOnce(&mut Value)) -> Result<(), String> {
        let mut s = base();
        f(&mut s);
        check_update(&pod(base()), &pod(s))
    }

    #[test]
    fn the_allowed_changes_pass() {
        assert_eq!(changed(|_| {}), Ok(()));
        assert_eq!(
            changed(|s| s["containers"][0]["image"] = json!("busybox:2")),
            Ok(())
        );
        assert_eq!(changed(|s| s["activeDeadlineSeconds"] = json!(30)), Ok(()));
        assert_eq!(
            changed(|s| {
                s["tolerations"][0]["tolerationSeconds"] = json!(99);
                s["tolerations"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"key": "other", "operator": "Exists"}));
            }),
            Ok(())
        );
        // The same quantity written another way is no change.
        assert_eq!(
            changed(|s| s["containers"][0]["resources"]["limits"]["cpu"] = json!("1000m")),
            Ok(())
        );
        assert_eq!(changed(|s| s["nodeSelector"] = json!({})), Ok(()));
    }

    #[test]
    fn resources_and_other_fields_are_refused_with_the_fixed_text() {
        let want =
            format!("spec: Forbidden: pod updates may not change fields other than {UPDATABLE}");
        assert_eq!(
            changed(|s| s["containers"][0]["resources"]["limits"]["cpu"] = json!("2")),
            Err(want.clone())
        );
        assert_eq!(
            changed(|s| s["terminationGracePeriodSeconds"] = json!(1)),
            Err(want.clone())
        );
        assert_eq!(
            changed(|s| s["nodeSelector"] = json!({"a": "b"})),
            Err(want)
        );
        assert!(
            UPDATABLE.starts_with("`spec.containers[*].image`,`spec.initContainers[*].image`,")
        );
    }

    #[test]
    fn each_rule_has_its_own_refusal() {
        assert_eq!(
            changed(|s| s["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "d", "image": "x"}))),
            Err("spec.containers: Forbidden: pod updates may not add or remove containers".into())
        );
        assert_eq!(
            changed(|s| s["containers"][0]["image"] = json!("")),
            Err("spec.containers[0].image: Required value".into())
        );
        let mut with_deadline = base();
        with_deadline["activeDeadlineSeconds"] = json!(30);
        let raise = |v: Value| {
            let mut s = with_deadline.clone();
            s["activeDeadlineSeconds"] = v;
            check_update(&pod(with_deadline.clone()), &pod(s))
        };
        assert_eq!(raise(json!(20)), Ok(()));
        assert_eq!(
            raise(json!(40)),
            Err("spec.activeDeadlineSeconds: Invalid value: 40: must be less than or equal to previous value".into())
        );
        assert!(
            raise(Value::Null)
                .unwrap_err()
                .contains("must not update from a positive integer to nil value")
        );
        assert_eq!(
            changed(|s| s["tolerations"] = json!([])),
            Err("spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds".into())
        );
        assert_eq!(
            changed(|s| s["schedulingGates"] = json!([{"name": "g"}])),
            Err("spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new scheduling gate 'g'".into())
        );
    }

    #[test]
    fn negative_grace_may_become_one() {
        let mut old = base();
        old["terminationGracePeriodSeconds"] = json!(-1);
        let mut new = old.clone();
        new["terminationGracePeriodSeconds"] = json!(1);
        assert_eq!(check_update(&pod(old.clone()), &pod(new)), Ok(()));
        let mut two = old.clone();
        two["terminationGracePeriodSeconds"] = json!(2);
        assert!(check_update(&pod(old), &pod(two)).is_err());
    }

    #[test]
    fn a_gated_pod_gains_node_selector_and_affinity_and_drops_gates() {
        let mut gated = base();
        gated["schedulingGates"] = json!([{"name": "a"}, {"name": "b"}]);
        gated["nodeSelector"] = json!({"zone": "x"});
        let term = json!({"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]});
        gated["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}});
        let mut next = gated.clone();
        next["schedulingGates"] = json!([{"name": "b"}]);
        next["nodeSelector"]["disk"] = json!("ssd");
        next["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "k2", "operator": "Exists"}));
        assert_eq!(check_update(&pod(gated.clone()), &pod(next)), Ok(()));
        let mut changed_key = gated.clone();
        changed_key["nodeSelector"] = json!({"zone": "y"});
        assert_eq!(
            check_update(&pod(gated.clone()), &pod(changed_key)),
            Err("spec.nodeSelector: Invalid value: map[string]string{\"zone\":\"y\"}: only additions to spec.nodeSelector are allowed (no mutations or deletions)".into())
        );
        let mut dropped = gated.clone();
        dropped["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": []}]}}});
        assert!(
            check_update(&pod(gated.clone()), &pod(dropped))
                .unwrap_err()
                .ends_with("only additions are allowed (no mutations or deletions)")
        );
        // Not gated: the node selector is as immutable as the rest.
        let mut ungated = base();
        ungated["nodeSelector"] = json!({"zone": "x"});
        let mut more = ungated.clone();
        more["nodeSelector"]["disk"] = json!("ssd");
        assert!(check_update(&pod(ungated), &pod(more)).is_err());
    }
}

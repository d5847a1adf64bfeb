//! What the real apiserver refuses of a write to a Node, as `ValidateNode` and
//! `ValidateNodeUpdate` do for what a kubelet sends when it registers and updates its
//! status: capacity and allocatable quantities are not negative, and whole numbers for
//! integer resources (`pods`, extended resources); no address is listed twice; taints
//! have a key, a known effect and no key/effect pair twice; and `podCIDR`, `podCIDRs`
//! and `providerID` change only from unset. Status writes are checked on the object they
//! make (the old spec with the new status), as the status strategy does. Refusals are 422
//! Invalid with the real server's field paths and words.
//!
//! Not checked: the NodeRestriction admission plugin (a node may not change its taints,
//! nor labels outside kubelet's set). This server has one identity, so it cannot tell a
//! node's write from an administrator's.

use serde_json::Value;

/// The node-level resources counted in whole units (`IsIntegerResourceName`'s list).
const INTEGER_RESOURCES: [&str; 1] = ["pods"];
/// `validateNodeTaints`' effects.
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// `ValidateNode`: what a Node must be, created or updated.
pub(crate) fn check(node: &Value) -> Result<(), String> {
    for list in ["capacity", "allocatable"] {
        let resources = node
            .pointer(&format!("/status/{list}"))
            .and_then(Value::as_object);
        for (name, value) in resources.into_iter().flatten() {
            check_quantity(&format!("status.{list}.{name}"), name, value)?;
        }
    }
    let addresses = node.pointer("/status/addresses").and_then(Value::as_array);
    let mut seen = Vec::new();
    for (i, a) in addresses.into_iter().flatten().enumerate() {
        let key = (a.get("type"), a.get("address"));
        if seen.contains(&key) {
            return Err(format!("status.addresses[{i}]: Duplicate value: {a}"));
        }
        seen.push(key);
    }
    check_taints(node)
}

/// `ValidateNodeUpdate`: `check`, and the fields that are set once.
pub(crate) fn check_update(old: &Value, new: &Value) -> Result<(), String> {
    check(new)?;
    for (field, said) in [
        ("podCIDR", "podCIDR"),
        ("podCIDRs", "podCIDR"),
        ("providerID", "providerID"),
    ] {
        let was = old.pointer(&format!("/spec/{field}")).filter(|v| !unset(v));
        let now = new.pointer(&format!("/spec/{field}"));
        if let Some(was) = was
            && now != Some(was)
        {
            return Err(format!(
                "spec.{field}: Forbidden: node updates may not change {said} except from \"\" to valid"
            ));
        }
    }
    Ok(())
}

fn unset(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// `ValidateResourceQuantityValue`: not negative; whole for integer resources.
fn check_quantity(path: &str, name: &str, value: &Value) -> Result<(), String> {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let (negative, magnitude) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(&text)),
    };
    let Some(milli) = crate::pod_rules::quantity_milli(&Value::String(magnitude.to_owned())) else {
        return Err(format!(
            "{path}: Invalid value: {text:?}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        ));
    };
    if negative && milli != 0 {
        return Err(format!(
            "{path}: Invalid value: {text:?}: must be greater than or equal to 0"
        ));
    }
    let integer = INTEGER_RESOURCES.contains(&name) || extended(name);
    if integer && milli % 1000 != 0 {
        return Err(format!(
            "{path}: Invalid value: {text:?}: must be an integer"
        ));
    }
    Ok(())
}

/// `IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io`, and not a
/// request quota (`requests.`).
fn extended(name: &str) -> bool {
    let Some((domain, _)) = name.split_once('/') else {
        return false;
    };
    !(domain == "kubernetes.io"
        || domain.ends_with(".kubernetes.io")
        || name.starts_with("requests."))
}

/// `validateNodeTaints`: each taint's key and effect, each key/effect pair once.
fn check_taints(node: &Value) -> Result<(), String> {
    let taints = node.pointer("/spec/taints").and_then(Value::as_array);
    let mut seen = Vec::new();
    for (i, t) in taints.into_iter().flatten().enumerate() {
        let path = format!("spec.taints[{i}]");
        let key = t.get("key").and_then(Value::as_str).unwrap_or_default();
        if key.is_empty() {
            return Err(format!("{path}.key: Required value"));
        }
        let effect = t.get("effect").and_then(Value::as_str).unwrap_or_default();
        if effect.is_empty() {
            return Err(format!("{path}.effect: Required value"));
        }
        if !TAINT_EFFECTS.contains(&effect) {
            let list: Vec<String> = TAINT_EFFECTS.iter().map(|e| format!("{e:?}")).collect();
            return Err(format!(
                "{path}.effect: Unsupported value: {effect:?}: supported values: {}",
                list.join(", ")
            ));
        }
        if seen.contains(&(key, effect)) {
            return Err(format!(
                "{path}: Duplicate value: {t}: taints must be unique by key and effect pair"
            ));
        }
        seen.push((key, effect));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(status: Value, spec: Value) -> Value {
        json!({"metadata": {"name": "n"}, "spec": spec, "status": status})
    }

    #[test]
    fn a_kubelets_status_passes_and_bad_quantities_do_not() {
        let good = node(
            json!({
                "capacity": {"cpu": "2", "memory": "4041800Ki", "pods": "110", "example.com/dongle": "3"},
                "allocatable": {"cpu": "1900m", "memory": "3Gi", "pods": "110", "ephemeral-storage": "0"},
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n"}],
            }),
            json!({"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]}),
        );
        check(&good).unwrap();
        let refused = |status: Value| check(&node(status, json!({}))).unwrap_err();
        assert_eq!(
            refused(json!({"capacity": {"cpu": "-1"}})),
            "status.capacity.cpu: Invalid value: \"-1\": must be greater than or equal to 0"
        );
        assert_eq!(
            refused(json!({"allocatable": {"pods": "1500m"}})),
            "status.allocatable.pods: Invalid value: \"1500m\": must be an integer"
        );
        assert_eq!(
            refused(json!({"allocatable": {"example.com/dongle": "0.5"}})),
            "status.allocatable.example.com/dongle: Invalid value: \"0.5\": must be an integer"
        );
        assert!(refused(json!({"capacity": {"memory": "lots"}})).contains("regular expression"));
        let twice = json!({"type": "InternalIP", "address": "10.0.0.1"});
        assert_eq!(
            refused(json!({"addresses": [twice, {"type": "Hostname", "address": "n"}, twice]})),
            "status.addresses[2]: Duplicate value: {\"address\":\"10.0.0.1\",\"type\":\"InternalIP\"}"
        );
    }

    #[test]
    fn taints_and_set_once_fields_are_checked() {
        let with_spec = |spec: Value| node(json!({}), spec);
        let err = check(&with_spec(
            json!({"taints": [{"key": "a", "effect": "Sometimes"}]}),
        ));
        assert!(
            err.unwrap_err()
                .starts_with("spec.taints[0].effect: Unsupported value: \"Sometimes\"")
        );
        let err = check(&with_spec(json!({"taints": [
            {"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "x", "effect": "NoSchedule"}]})));
        assert!(
            err.unwrap_err()
                .ends_with("taints must be unique by key and effect pair")
        );
        assert_eq!(
            check(&with_spec(json!({"taints": [{"effect": "NoSchedule"}]}))).unwrap_err(),
            "spec.taints[0].key: Required value"
        );

        let old = with_spec(json!({"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}));
        let unset = with_spec(json!({}));
        check_update(&unset, &old).unwrap();
        check_update(&old, &old).unwrap();
        let moved = with_spec(json!({"podCIDR": "10.244.2.0/24", "podCIDRs": ["10.244.1.0/24"]}));
        assert_eq!(
            check_update(&old, &moved).unwrap_err(),
            "spec.podCIDR: Forbidden: node updates may not change podCIDR except from \"\" to valid"
        );
        let kind = with_spec(json!({"providerID": "kind://docker/kind/n"}));
        check_update(&unset, &kind).unwrap();
        assert!(check_update(&kind, &with_spec(json!({"providerID": "x"}))).is_err());
    }
}

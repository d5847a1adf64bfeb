//! What the real apiserver's pod registry does that a kubelet's writes meet: a new pod
//! gets `metadata.generation` 1 and its `status.qosClass` (`PrepareForCreate` with
//! `ComputePodQOS`, pod-level resources first); a spec change moves the generation on
//! (`PrepareForUpdate`); and a status update is validated as `ValidatePodStatusUpdate`
//! does in 1.36 for what a kubelet writes: the QoS class is immutable, condition types
//! other than kubelet's own are qualified names, observed generations are not
//! negative, the node name cannot change there, and a terminated container comes back
//! only where its restart rules and policy (else the pod's) allow it. Refusals are 422
//! Invalid with the real server's field paths and words.
//!
//! Not checked, as the real server does not either: container statuses naming
//! containers the spec lacks (upstream's own comment says so), and a phase leaving
//! Failed or Succeeded (kubelet guards that itself).

use serde_json::{Value, json};

/// The RuntimeClass admission plugin on a new pod naming `class` (the stored
/// RuntimeClass, None when there is none): the class must exist; its
/// `overhead.podFixed` becomes `spec.overhead` (a pod that sets another is refused);
/// its `scheduling` node selector and tolerations are merged in. Errors are 403
/// Forbidden messages, as the plugin's.
pub(crate) fn admit_runtime_class(body: &mut Value, class: Option<&Value>) -> Result<(), String> {
    let Some(name) = body
        .pointer("/spec/runtimeClassName")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return Ok(());
    };
    let Some(class) = class else {
        return Err(format!("pod rejected: RuntimeClass {name:?} not found"));
    };
    if let Some(fixed) = class.pointer("/overhead/podFixed") {
        match body.pointer("/spec/overhead") {
            Some(set) if set != fixed => {
                return Err(
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                );
            }
            _ => body["spec"]["overhead"] = fixed.clone(),
        }
    }
    if let Some(selector) = class
        .pointer("/scheduling/nodeSelector")
        .and_then(Value::as_object)
    {
        let spec = &mut body["spec"];
        if !spec.get("nodeSelector").is_some_and(Value::is_object) {
            spec["nodeSelector"] = json!({});
        }
        for (k, v) in selector {
            match spec["nodeSelector"].get(k) {
                Some(mine) if mine != v => {
                    return Err(format!(
                        "pod rejected: conflict: runtimeClass.scheduling.nodeSelector[{k}] = {v}; pod.spec.nodeSelector[{k}] = {mine}"
                    ));
                }
                _ => spec["nodeSelector"][k] = v.clone(),
            }
        }
    }
    if let Some(tolerations) = class
        .pointer("/scheduling/tolerations")
        .and_then(Value::as_array)
    {
        let spec = &mut body["spec"];
        if !spec.get("tolerations").is_some_and(Value::is_array) {
            spec["tolerations"] = json!([]);
        }
        let list = spec["tolerations"]
            .as_array_mut()
            .expect("made an array above");
        for t in tolerations {
            if !list.contains(t) {
                list.push(t.clone());
            }
        }
    }
    Ok(())
}

/// A new pod's server-set fields.
pub(crate) fn on_create(body: &mut Value) {
    body["metadata"]["generation"] = json!(1);
    let qos = qos_class(body.get("spec").unwrap_or(&Value::Null));
    body["status"] = json!({"phase": "Pending", "qosClass": qos});
}

/// The generation after an update from `old` to `new`: one more when the spec changed.
pub(crate) fn generation_after(old: &Value, new: &Value) -> i64 {
    let g = old
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if old.get("spec") == new.get("spec") {
        g
    } else {
        g + 1
    }
}

/// `ValidatePodStatusUpdate`'s checks on `new` (the whole pod after the write) against
/// `old`; the first failure, worded as the real server's.
pub(crate) fn check_status_update(old: &Value, new: &Value) -> Result<(), String> {
    let qos = |p: &Value| {
        p.pointer("/status/qosClass")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    if qos(new) != qos(old) {
        return Err(format!(
            "status.qosClass: Invalid value: {:?}: field is immutable",
            qos(new)
        ));
    }
    if new.pointer("/spec/nodeName") != old.pointer("/spec/nodeName") {
        return Err("status.nodeName: Forbidden: may not be changed directly".into());
    }
    if let Some(g) = new
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        && g < 0
    {
        return Err(format!(
            "status.observedGeneration: Invalid value: {g}: must be a non-negative integer"
        ));
    }
    let conditions = new.pointer("/status/conditions").and_then(Value::as_array);
    for (i, c) in conditions.into_iter().flatten().enumerate() {
        if let Some(g) = c.get("observedGeneration").and_then(Value::as_i64)
            && g < 0
        {
            return Err(format!(
                "status.conditions[{i}].observedGeneration: Invalid value: {g}: must be a non-negative integer"
            ));
        }
        let kind = c.get("type").and_then(Value::as_str).unwrap_or("");
        if !matches!(kind, "PodScheduled" | "Ready" | "Initialized") && !is_qualified_name(kind) {
            return Err(format!(
                "status.conditions[{i}].Type: Invalid value: {kind:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
            ));
        }
    }
    for (list, field) in [
        ("containers", "containerStatuses"),
        ("initContainers", "initContainerStatuses"),
    ] {
        check_transitions(old, new, list, field)?;
    }
    Ok(())
}

/// `ValidateContainerStateTransition` with ContainerRestartRules on.
fn check_transitions(old: &Value, new: &Value, list: &str, field: &str) -> Result<(), String> {
    let statuses = |p: &Value| {
        p.pointer(&format!("/status/{field}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (before, after) = (statuses(old), statuses(new));
    let spec = old.get("spec").cloned().unwrap_or(Value::Null);
    let containers = spec
        .get(list)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, o) in before.iter().enumerate() {
        let Some(code) = o
            .pointer("/state/terminated/exitCode")
            .and_then(Value::as_i64)
        else {
            continue;
        };
        let name = o.get("name");
        let revived = after
            .iter()
            .any(|n| n.get("name") == name && n.pointer("/state/terminated").is_none());
        let allowed = containers
            .iter()
            .find(|c| c.get("name") == name)
            .is_some_and(|c| should_restart(c, &spec, code));
        if revived && !allowed {
            return Err(format!(
                "status.{field}[{i}].state: Forbidden: may not be transitioned to non-terminated state"
            ));
        }
    }
    Ok(())
}

/// `podutil.ContainerShouldRestart`: the first matching rule, the container's own
/// policy, then the pod's.
fn should_restart(c: &Value, spec: &Value, code: i64) -> bool {
    if let Some(own) = c.get("restartPolicy").and_then(Value::as_str) {
        let rules = c.get("restartPolicyRules").and_then(Value::as_array);
        let matched = rules.into_iter().flatten().find(|r| {
            let listed = r
                .pointer("/exitCodes/values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|v| v.as_i64() == Some(code));
            match r.pointer("/exitCodes/operator").and_then(Value::as_str) {
                Some("In") => listed,
                Some("NotIn") => !listed,
                _ => false,
            }
        });
        if matched
            .and_then(|r| r.get("action"))
            .and_then(Value::as_str)
            == Some("Restart")
        {
            return true;
        }
        match own {
            "Always" => return true,
            "OnFailure" => return code != 0,
            "Never" => return false,
            _ => {}
        }
    }
    match spec.get("restartPolicy").and_then(Value::as_str) {
        Some("OnFailure") => code != 0,
        Some("Never") => false,
        _ => true,
    }
}

/// `ValidateQualifiedName`: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric.
fn is_qualified_name(s: &str) -> bool {
    let name = match s.rsplit_once('/') {
        Some((prefix, name)) if !prefix.is_empty() && prefix.len() <= 253 => name,
        Some(_) => return false,
        None => s,
    };
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    !name.is_empty()
        && name.len() <= 63
        && ends_ok(name.chars().next())
        && ends_ok(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `ComputePodQOS`: pod-level `resources` decide when set; else the containers' (init
/// and regular), each request defaulted from its limit as the API defaults it.
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    const RES: [&str; 2] = ["cpu", "memory"];
    let amounts = |r: &Value, kind: &str| -> Vec<(String, i128)> {
        RES.iter()
            .filter_map(|name| {
                let q = r
                    .pointer(&format!("/{kind}/{name}"))
                    .and_then(quantity_milli)?;
                (q != 0).then(|| (name.to_string(), q))
            })
            .collect()
    };
    let pod_level = spec
        .get("resources")
        .filter(|r| !amounts(r, "requests").is_empty() || !amounts(r, "limits").is_empty());
    let (mut requests, mut limits) = (
        std::collections::BTreeMap::new(),
        std::collections::BTreeMap::new(),
    );
    let mut guaranteed = true;
    let mut add = |r: &Value| {
        let lim = amounts(r, "limits");
        let mut req = amounts(r, "requests");
        for (n, q) in &lim {
            if !req.iter().any(|(m, _)| m == n) {
                req.push((n.clone(), *q));
            }
        }
        for (n, q) in req {
            *requests.entry(n).or_insert(0) += q;
        }
        let names: Vec<&String> = lim.iter().map(|(n, _)| n).collect();
        if RES.iter().any(|r| !names.iter().any(|n| n.as_str() == *r)) {
            guaranteed = false;
        }
        for (n, q) in lim {
            *limits.entry(n).or_insert(0) += q;
        }
    };
    match pod_level {
        Some(r) => add(r),
        None => {
            for list in ["initContainers", "containers"] {
                for c in spec
                    .get(list)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    add(c.get("resources").unwrap_or(&Value::Null));
                }
            }
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed && requests == limits {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A quantity in thousandths of its unit (`100m` → 100, `1` → 1000, `64Mi` → 64·2²⁰·1000);
/// None when it does not parse.
pub(crate) fn quantity_milli(v: &Value) -> Option<i128> {
    let s = match v {
        Value::String(s) => s.as_str(),
        Value::Number(n) => return n.as_f64().map(|f| (f * 1000.0) as i128),
        _ => return None,
    };
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let num: f64 = num.parse().ok()?;
    let scale: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return None,
    };
    Some((num * scale * 1000.0).round() as i128)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(requests: Value, limits: Value) -> Value {
        json!({"name": "c", "resources": {"requests": requests, "limits": limits}})
    }

    #[test]
    fn qos_follows_compute_pod_qos() {
        let spec = |cs: Vec<Value>| json!({"containers": cs});
        assert_eq!(qos_class(&spec(vec![json!({"name": "c"})])), "BestEffort");
        let g = container(json!({}), json!({"cpu": "500m", "memory": "64Mi"}));
        assert_eq!(qos_class(&spec(vec![g.clone()])), "Guaranteed");
        let b = container(
            json!({"cpu": "100m"}),
            json!({"cpu": "500m", "memory": "64Mi"}),
        );
        assert_eq!(qos_class(&spec(vec![b])), "Burstable");
        assert_eq!(qos_class(&spec(vec![g, json!({"name": "d"})])), "Burstable");
        // Pod-level resources decide alone.
        let pod_level = json!({"resources": {"limits": {"cpu": "1", "memory": "128Mi"}}, "containers": [{"name": "c"}]});
        assert_eq!(qos_class(&pod_level), "Guaranteed");
        let pod_level =
            json!({"resources": {"requests": {"cpu": "1"}}, "containers": [{"name": "c"}]});
        assert_eq!(qos_class(&pod_level), "Burstable");
        assert_eq!(quantity_milli(&json!("1.5Gi")), Some(1_610_612_736_000));
    }

    fn pod(status: Value) -> Value {
        json!({
            "metadata": {"name": "p", "generation": 1},
            "spec": {"nodeName": "n", "restartPolicy": "Never", "containers": [
                {"name": "a"},
                {"name": "r", "restartPolicy": "Never", "restartPolicyRules": [
                    {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]},
            ]},
            "status": status,
        })
    }

    #[test]
    fn status_updates_are_refused_as_the_real_server_does() {
        let old = pod(json!({"qosClass": "BestEffort", "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 0}}},
            {"name": "r", "state": {"terminated": {"exitCode": 42}}},
        ]}));
        let ok = pod(
            json!({"qosClass": "BestEffort", "observedGeneration": 1, "containerStatuses": [
            {"name": "a", "state": {"terminated": {"exitCode": 0}}},
            {"name": "r", "state": {"running": {}}},
        ], "conditions": [{"type": "Ready"}, {"type": "example.com/gate"}]}),
        );
        assert_eq!(check_status_update(&old, &ok), Ok(()));
        let qos = pod(json!({"qosClass": "Burstable"}));
        assert_eq!(
            check_status_update(&old, &qos).unwrap_err(),
            "status.qosClass: Invalid value: \"Burstable\": field is immutable"
        );
        let revived = pod(json!({"qosClass": "BestEffort", "containerStatuses": [
            {"name": "a", "state": {"running": {}}},
        ]}));
        assert_eq!(
            check_status_update(&old, &revived).unwrap_err(),
            "status.containerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state"
        );
        let bad = pod(json!({"qosClass": "BestEffort", "conditions": [{"type": "not a name!"}]}));
        assert!(
            check_status_update(&old, &bad)
                .unwrap_err()
                .starts_with("status.conditions[0].Type: Invalid value")
        );
        let negative = pod(json!({"qosClass": "BestEffort", "observedGeneration": -1}));
        assert!(
            check_status_update(&old, &negative)
                .unwrap_err()
                .starts_with("status.observedGeneration")
        );
    }

    #[test]
    fn the_runtime_class_admission_sets_overhead_and_scheduling_or_refuses() {
        let class = json!({"handler": "runsc", "overhead": {"podFixed": {"cpu": "250m", "memory": "64Mi"}},
            "scheduling": {"nodeSelector": {"sandboxed": "true"}, "tolerations": [{"key": "sandbox", "operator": "Exists"}]}});
        let mut p = json!({"spec": {"runtimeClassName": "gvisor", "containers": [{"name": "c"}]}});
        admit_runtime_class(&mut p, Some(&class)).unwrap();
        assert_eq!(
            p["spec"]["overhead"],
            json!({"cpu": "250m", "memory": "64Mi"})
        );
        assert_eq!(p["spec"]["nodeSelector"], json!({"sandboxed": "true"}));
        assert_eq!(
            p["spec"]["tolerations"],
            json!([{"key": "sandbox", "operator": "Exists"}])
        );
        let mut missing = json!({"spec": {"runtimeClassName": "nope"}});
        assert_eq!(
            admit_runtime_class(&mut missing, None).unwrap_err(),
            "pod rejected: RuntimeClass \"nope\" not found"
        );
        let mut other = json!({"spec": {"runtimeClassName": "gvisor", "overhead": {"cpu": "1"}}});
        assert!(
            admit_runtime_class(&mut other, Some(&class))
                .unwrap_err()
                .contains("Overhead")
        );
        let mut none = json!({"spec": {}});
        admit_runtime_class(&mut none, None).unwrap();
    }

    #[test]
    fn the_generation_moves_with_the_spec_only() {
        let old = pod(json!({}));
        let mut new = old.clone();
        new["status"] = json!({"phase": "Running"});
        assert_eq!(generation_after(&old, &new), 1);
        new["spec"]["activeDeadlineSeconds"] = json!(30);
        assert_eq!(generation_after(&old, &new), 2);
    }
}

//! What the real apiserver does to an object before storing it, beyond decoding: a
//! Secret's `stringData` is merged into `data` (the registry's `PrepareForCreate` /
//! `PrepareForUpdate`), and a pod is validated for the mistakes oxlet's tests care
//! about (`ValidatePodSpec`): duplicate container names across init and regular
//! containers, and unsupported `restartPolicy` / `imagePullPolicy` values; and the
//! storage and RuntimeClass objects tests create (`ValidatePersistentVolume`,
//! `...Claim`, `ValidateStorageClass`, `ValidateRuntimeClass`) for their required
//! fields. Errors are 422 Invalid naming the field path, worded like the real server's. A pod spec gets
//! the one default clients count on finding (`SetDefaults_PodSpec`'s empty
//! `securityContext`: `kubectl debug` reads it unchecked).

use base64::Engine as _;
use serde_json::Value;

use crate::status::ApiError;

const RESTART_POLICIES: [&str; 3] = ["Always", "OnFailure", "Never"];
const PULL_POLICIES: [&str; 3] = ["Always", "IfNotPresent", "Never"];

/// Normalizes and validates `body`, an object of resource `resource`.
pub(crate) fn admit(resource: &str, body: &mut Value) -> Result<(), ApiError> {
    match resource {
        "secrets" => {
            merge_string_data(body);
            Ok(())
        }
        "pods" => {
            default_pod(body);
            validate_pod(body).map_err(|m| ApiError::invalid("pods", &name(body), m))
        }
        "persistentvolumes" => {
            validate_volume(body).map_err(|m| ApiError::invalid(resource, &name(body), m))
        }
        "persistentvolumeclaims" => {
            validate_claim(body).map_err(|m| ApiError::invalid(resource, &name(body), m))
        }
        "storageclasses" => {
            validate_storage_class(body).map_err(|m| ApiError::invalid(resource, &name(body), m))
        }
        "runtimeclasses" => {
            validate_runtime_class(body).map_err(|m| ApiError::invalid(resource, &name(body), m))
        }
        "resourceclaims" => crate::dra_rules::check_claim(body)
            .map_err(|m| ApiError::invalid(resource, &name(body), m)),
        "resourceclaimtemplates" => crate::dra_rules::check_template(body)
            .map_err(|m| ApiError::invalid(resource, &name(body), m)),
        "resourceslices" => crate::dra_rules::check_slice(body)
            .map_err(|m| ApiError::invalid(resource, &name(body), m)),
        _ => Ok(()),
    }
}

/// The volume sources a PersistentVolume may name (exactly one).
const VOLUME_SOURCES: [&str; 8] = [
    "hostPath", "local", "csi", "nfs", "iscsi", "fc", "cephfs", "rbd",
];

/// `ValidatePersistentVolume`, as far as a node's tests meet it: capacity, access
/// modes, exactly one source, a hostPath's path, a local volume's node affinity.
fn validate_volume(pv: &Value) -> Result<(), String> {
    let spec = pv.get("spec").unwrap_or(&Value::Null);
    if spec.pointer("/capacity/storage").is_none() {
        return Err("spec.capacity: Required value".into());
    }
    if spec
        .get("accessModes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err("spec.accessModes: Required value".into());
    }
    let sources: Vec<&str> = VOLUME_SOURCES
        .iter()
        .copied()
        .filter(|s| spec.get(*s).is_some())
        .collect();
    match sources.as_slice() {
        [] => return Err("spec: Required value: must specify a volume type".into()),
        [_] => {}
        [_, second, ..] => {
            return Err(format!(
                "spec.{second}: Forbidden: may not specify more than 1 volume type"
            ));
        }
    }
    if let Some(hp) = spec.get("hostPath")
        && hp
            .get("path")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
    {
        return Err("spec.hostPath.path: Required value".into());
    }
    if spec.get("local").is_some() && spec.pointer("/nodeAffinity/required").is_none() {
        return Err(
            "spec.nodeAffinity: Required value: Local volume requires node affinity".into(),
        );
    }
    if let Some(mode) = spec.get("volumeMode").and_then(Value::as_str) {
        unsupported("spec.volumeMode", mode, &["Block", "Filesystem"])?;
    }
    Ok(())
}

/// `ValidatePersistentVolumeClaim`: access modes and a storage request.
fn validate_claim(pvc: &Value) -> Result<(), String> {
    let spec = pvc.get("spec").unwrap_or(&Value::Null);
    if spec
        .get("accessModes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err("spec.accessModes: Required value: at least 1 access mode is required".into());
    }
    if spec.pointer("/resources/requests/storage").is_none() {
        return Err("spec.resources[storage]: Required value".into());
    }
    Ok(())
}

/// `ValidateStorageClass`: a provisioner, and known policies.
fn validate_storage_class(sc: &Value) -> Result<(), String> {
    if sc
        .get("provisioner")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err("provisioner: Required value".into());
    }
    if let Some(p) = sc.get("reclaimPolicy").and_then(Value::as_str) {
        unsupported("reclaimPolicy", p, &["Delete", "Retain"])?;
    }
    if let Some(m) = sc.get("volumeBindingMode").and_then(Value::as_str) {
        unsupported(
            "volumeBindingMode",
            m,
            &["Immediate", "WaitForFirstConsumer"],
        )?;
    }
    Ok(())
}

/// `ValidateRuntimeClass`: the handler is a DNS label.
fn validate_runtime_class(rc: &Value) -> Result<(), String> {
    let handler = rc.get("handler").and_then(Value::as_str).unwrap_or("");
    if handler.is_empty() {
        return Err("handler: Required value".into());
    }
    let label = handler.len() <= 63
        && handler
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !handler.starts_with('-')
        && !handler.ends_with('-');
    if !label {
        return Err(format!(
            "handler: Invalid value: {handler:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

/// The pod defaults every stored pod has (objects put directly get them too).
pub(crate) fn default_pod(body: &mut Value) {
    if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("securityContext")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
}

fn name(body: &Value) -> String {
    body.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// `stringData` keys overwrite `data` keys, base64-encoded; `stringData` is not stored.
fn merge_string_data(body: &mut Value) {
    let Some(Value::Object(string_data)) =
        body.as_object_mut().and_then(|o| o.remove("stringData"))
    else {
        return;
    };
    if !body.get("data").is_some_and(Value::is_object) {
        body["data"] = Value::Object(serde_json::Map::new());
    }
    let data = body["data"].as_object_mut().expect("made an object above");
    for (k, v) in string_data {
        let text = v.as_str().unwrap_or_default();
        let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
        data.insert(k, Value::String(encoded));
    }
}

/// The first problem of a pod spec, as the real server words it.
fn validate_pod(body: &Value) -> Result<(), String> {
    let Some(spec) = body.get("spec") else {
        return Ok(());
    };
    if let Some(p) = spec.get("restartPolicy").and_then(Value::as_str) {
        unsupported("spec.restartPolicy", p, &RESTART_POLICIES)?;
    }
    let mut seen = std::collections::HashSet::new();
    for list in ["initContainers", "containers"] {
        let containers = spec.get(list).and_then(Value::as_array);
        for (i, c) in containers.into_iter().flatten().enumerate() {
            let path = format!("spec.{list}[{i}]");
            if let Some(n) = c.get("name").and_then(Value::as_str)
                && !seen.insert(n.to_owned())
            {
                return Err(format!("{path}.name: Duplicate value: {n:?}"));
            }
            if let Some(p) = c.get("imagePullPolicy").and_then(Value::as_str) {
                unsupported(&format!("{path}.imagePullPolicy"), p, &PULL_POLICIES)?;
            }
        }
    }
    Ok(())
}

fn unsupported(path: &str, value: &str, allowed: &[&str]) -> Result<(), String> {
    if allowed.contains(&value) {
        return Ok(());
    }
    let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
    Err(format!(
        "{path}: Unsupported value: {value:?}: supported values: {}",
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn string_data_is_merged_into_data_base64() {
        let mut s = json!({"metadata": {"name": "s"}, "data": {"a": "eA==", "b": "eQ=="},
            "stringData": {"b": "hello", "c": "world"}});
        admit("secrets", &mut s).unwrap();
        assert_eq!(
            s["data"],
            json!({"a": "eA==", "b": "aGVsbG8=", "c": "d29ybGQ="})
        );
        assert!(s.get("stringData").is_none());
    }

    fn pod(spec: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": spec})
    }

    fn invalid(spec: Value) -> String {
        let e = admit("pods", &mut pod(spec)).unwrap_err();
        assert_eq!(e.status()["code"], 422);
        assert_eq!(e.status()["reason"], "Invalid");
        e.status()["message"].as_str().unwrap().to_owned()
    }

    #[test]
    fn storage_and_runtime_class_objects_are_validated() {
        let bad = |resource: &str, body: Value| {
            let e = admit(resource, &mut body.clone()).unwrap_err();
            assert_eq!(e.status()["code"], 422);
            e.status()["message"].as_str().unwrap().to_owned()
        };
        let pv = |spec: Value| json!({"metadata": {"name": "pv"}, "spec": spec});
        let good = json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/data"}});
        admit("persistentvolumes", &mut pv(good)).unwrap();
        assert_eq!(
            bad(
                "persistentvolumes",
                pv(json!({"accessModes": ["ReadWriteOnce"]}))
            ),
            "spec.capacity: Required value"
        );
        assert!(
            bad(
                "persistentvolumes",
                pv(
                    json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "local": {"path": "/d"}})
                )
            )
            .contains("Local volume requires node affinity")
        );
        assert!(
            bad(
                "persistentvolumes",
                pv(
                    json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/d"}, "local": {"path": "/d"}})
                )
            )
            .contains("may not specify more than 1 volume type")
        );
        let pvc = json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"]}});
        assert_eq!(
            bad("persistentvolumeclaims", pvc),
            "spec.resources[storage]: Required value"
        );
        let sc = json!({"metadata": {"name": "s"}, "provisioner": "rancher.io/local-path", "volumeBindingMode": "Later"});
        assert!(bad("storageclasses", sc).starts_with("volumeBindingMode: Unsupported value"));
        let rc = json!({"metadata": {"name": "r"}, "handler": "Not_A_Label"});
        assert!(bad("runtimeclasses", rc).starts_with("handler: Invalid value"));
    }

    #[test]
    fn pods_are_validated_like_the_real_server() {
        let ok = json!({"restartPolicy": "Never", "initContainers": [{"name": "i"}],
            "containers": [{"name": "a", "imagePullPolicy": "IfNotPresent"}]});
        admit("pods", &mut pod(ok)).unwrap();
        let m = invalid(json!({"containers": [{"name": "a"}, {"name": "a"}]}));
        assert_eq!(m, r#"spec.containers[1].name: Duplicate value: "a""#);
        let m = invalid(json!({"initContainers": [{"name": "a"}], "containers": [{"name": "a"}]}));
        assert_eq!(m, r#"spec.containers[0].name: Duplicate value: "a""#);
        let m = invalid(json!({"restartPolicy": "Sometimes", "containers": [{"name": "a"}]}));
        assert!(
            m.starts_with(r#"spec.restartPolicy: Unsupported value: "Sometimes""#),
            "{m}"
        );
        let m = invalid(json!({"containers": [{"name": "a", "imagePullPolicy": "Maybe"}]}));
        assert!(
            m.starts_with(r#"spec.containers[0].imagePullPolicy: Unsupported value: "Maybe""#),
            "{m}"
        );
    }
}

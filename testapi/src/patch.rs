//! The three PATCH flavours kubelet and kubectl send: JSON merge patch (RFC 7386), strategic
//! merge patch (lists merged by their `patchMergeKey`, with the `$patch`, `$setElementOrder`,
//! `$deleteFromPrimitiveList` and `$retainKeys` directives), and JSON patch (RFC 6902).

use serde_json::{Map, Value};

use crate::status::ApiError;

/// RFC 7386: objects merge, `null` removes, everything else replaces.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// The `patchMergeKey` of the object lists a kubelet or kubectl patches, by dotted path
/// (list indexes left out). Lists not named here are replaced whole, as atomic lists are.
fn merge_key(path: &str) -> Option<&'static str> {
    Some(match path {
        "status.conditions" | "status.addresses" => "type",
        "status.containerStatuses"
        | "status.initContainerStatuses"
        | "status.ephemeralContainerStatuses"
        | "status.resourceClaimStatuses"
        | "spec.containers"
        | "spec.initContainers"
        | "spec.ephemeralContainers"
        | "spec.volumes"
        | "spec.imagePullSecrets"
        | "spec.containers.env"
        | "spec.initContainers.env" => "name",
        "status.podIPs" | "status.hostIPs" => "ip",
        "metadata.ownerReferences" => "uid",
        "spec.containers.volumeMounts" | "spec.initContainers.volumeMounts" => "mountPath",
        "spec.containers.ports" | "spec.initContainers.ports" => "containerPort",
        _ => return None,
    })
}

/// Lists of scalars that merge as sets (`patchStrategy: merge` on a primitive list).
fn is_set_list(path: &str) -> bool {
    path == "metadata.finalizers"
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Strategic merge patch of `target` (an object) with `patch`, at dotted `path`.
pub(crate) fn strategic(target: &mut Value, patch: &Value, path: &str) -> Result<(), ApiError> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut whole = p.clone();
            whole.remove("$patch");
            *target = Value::Object(whole);
            return Ok(());
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown patch type: {other} in map at {path}"
            )));
        }
        None => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("made an object above");
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        let sub = join(path, k);
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Array(items) => match (merge_key(&sub), t.get_mut(k)) {
                (Some(key), Some(Value::Array(existing))) => {
                    merge_list(existing, items, key, &sub)?
                }
                (None, Some(Value::Array(existing))) if is_set_list(&sub) => {
                    for i in items {
                        if !existing.contains(i) {
                            existing.push(i.clone());
                        }
                    }
                }
                _ => {
                    let cleaned: Vec<Value> = items
                        .iter()
                        .filter(|i| i.get("$patch").is_none())
                        .cloned()
                        .collect();
                    t.insert(k.clone(), Value::Array(cleaned));
                }
            },
            Value::Object(_) => {
                strategic(t.entry(k.clone()).or_insert(Value::Null), v, &sub)?;
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/")
            && let (Some(Value::Array(list)), Value::Array(gone)) = (t.get_mut(field), v)
        {
            list.retain(|x| !gone.contains(x));
        }
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$setElementOrder/")
            && let (Some(Value::Array(list)), Value::Array(order)) = (t.get_mut(field), v)
        {
            let key = merge_key(&join(path, field));
            let rank = |x: &Value| {
                order.iter().position(|o| match key {
                    Some(key) => o.get(key) == x.get(key),
                    None => o == x,
                })
            };
            // Stable: listed items in the given order, the others after them as they were.
            list.sort_by_key(|x| rank(x).unwrap_or(usize::MAX));
        }
    }
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        t.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    Ok(())
}

fn merge_list(
    existing: &mut Vec<Value>,
    items: &[Value],
    key: &str,
    path: &str,
) -> Result<(), ApiError> {
    for item in items {
        let id = item.get(key).ok_or_else(|| {
            ApiError::bad_request(format!(
                "map: {item} does not contain declared merge key: {key} at {path}"
            ))
        })?;
        let pos = existing.iter().position(|e| e.get(key) == Some(id));
        match (item.get("$patch").and_then(Value::as_str), pos) {
            (Some("delete"), Some(i)) => {
                existing.remove(i);
            }
            (Some("delete"), None) => {}
            (Some("replace"), _) => {
                let mut whole = item.clone();
                if let Some(o) = whole.as_object_mut() {
                    o.remove("$patch");
                }
                match pos {
                    Some(i) => existing[i] = whole,
                    None => existing.push(whole),
                }
            }
            (Some(other), _) => {
                return Err(ApiError::bad_request(format!(
                    "unknown patch type: {other} in list at {path}"
                )));
            }
            (None, Some(i)) => strategic(&mut existing[i], item, path)?,
            (None, None) => {
                let mut fresh = Value::Object(Map::new());
                strategic(&mut fresh, item, path)?;
                existing.push(fresh);
            }
        }
    }
    Ok(())
}

/// RFC 6901 pointer into tokens.
fn tokens(pointer: &str) -> Result<Vec<String>, ApiError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or_else(|| ApiError::bad_request(format!("json patch: bad path {pointer:?}")))?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn parent<'a>(doc: &'a mut Value, toks: &[String], whole: &str) -> Result<&'a mut Value, ApiError> {
    let mut cur = doc;
    for t in toks {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| {
            ApiError::invalid("", "", format!("json patch: path {whole:?} does not exist"))
        })?;
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), ApiError> {
    let toks = tokens(path)?;
    let Some((last, init)) = toks.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent(doc, init, path)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) if last == "-" => a.push(value),
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i <= a.len() => a.insert(i, value),
            _ => {
                return Err(ApiError::invalid(
                    "",
                    "",
                    format!("json patch: bad index in {path:?}"),
                ));
            }
        },
        _ => {
            return Err(ApiError::invalid(
                "",
                "",
                format!("json patch: {path:?} is not in a container"),
            ));
        }
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, ApiError> {
    let toks = tokens(path)?;
    let (last, init) = toks
        .split_last()
        .ok_or_else(|| ApiError::invalid("", "", "json patch: cannot remove the whole document"))?;
    let gone = match parent(doc, init, path)? {
        Value::Object(m) => m.remove(last),
        Value::Array(a) => last
            .parse::<usize>()
            .ok()
            .filter(|i| *i < a.len())
            .map(|i| a.remove(i)),
        _ => None,
    };
    gone.ok_or_else(|| {
        ApiError::invalid("", "", format!("json patch: path {path:?} does not exist"))
    })
}

/// RFC 6902, all six operations.
pub(crate) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), ApiError> {
    let ops = ops.as_array().ok_or_else(|| {
        ApiError::bad_request("json patch: the body must be a list of operations")
    })?;
    for op in ops {
        let field = |name: &str| op.get(name).and_then(Value::as_str);
        let path = field("path")
            .ok_or_else(|| ApiError::bad_request("json patch: operation without path"))?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| ApiError::bad_request(format!("json patch: {op} has no value")))
        };
        let from = || {
            field("from")
                .ok_or_else(|| ApiError::bad_request(format!("json patch: {op} has no from")))
        };
        match field("op") {
            Some("add") => add(doc, path, value()?)?,
            Some("remove") => {
                remove(doc, path)?;
            }
            Some("replace") => {
                remove(doc, path)?;
                add(doc, path, value()?)?;
            }
            Some("test") => {
                let toks = tokens(path)?;
                if *parent(doc, &toks, path)? != value()? {
                    return Err(ApiError::invalid(
                        "",
                        "",
                        format!("json patch: test failed at {path:?}"),
                    ));
                }
            }
            Some("move") => {
                let v = remove(doc, from()?)?;
                add(doc, path, v)?;
            }
            Some("copy") => {
                let toks = tokens(from()?)?;
                let v = parent(doc, &toks, path)?.clone();
                add(doc, path, v)?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "json patch: unknown op {other:?}"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_replaces_lists_and_null_removes() {
        let mut t = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge(&mut t, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(t, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn strategic_merges_pod_status_lists_by_key() {
        let mut pod = json!({"status": {
            "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "a", "ready": false, "restartCount": 0}],
        }});
        let patch = json!({"status": {
            "phase": "Running",
            "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}, {"type": "Initialized"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
            "containerStatuses": [{"name": "a", "ready": true}, {"name": "b", "ready": false}],
        }});
        strategic(&mut pod, &patch, "").unwrap();
        assert_eq!(
            pod,
            json!({"status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                ],
                "containerStatuses": [{"name": "a", "ready": true, "restartCount": 0}, {"name": "b", "ready": false}],
            }})
        );
    }

    #[test]
    fn strategic_directives() {
        let mut t = json!({"metadata": {"finalizers": ["x", "y"]}, "status": {"conditions": [{"type": "A"}, {"type": "B"}]}, "spec": {"tolerations": [1]}});
        let patch = json!({
            "metadata": {"finalizers": ["z"], "$deleteFromPrimitiveList/finalizers": ["x"]},
            "status": {"conditions": [{"type": "A", "$patch": "delete"}]},
            "spec": {"tolerations": [2]},
        });
        strategic(&mut t, &patch, "").unwrap();
        assert_eq!(
            t,
            json!({"metadata": {"finalizers": ["y", "z"]}, "status": {"conditions": [{"type": "B"}]}, "spec": {"tolerations": [2]}})
        );
        let bad = json!({"status": {"conditions": [{"status": "True"}]}});
        assert_eq!(strategic(&mut t, &bad, "").unwrap_err().code, 400);
    }

    #[test]
    fn json_patch_operations() {
        let mut t = json!({"a": [1, 2], "b": {"c": 1}});
        json_patch(
            &mut t,
            &json!([
                {"op": "add", "path": "/a/-", "value": 3},
                {"op": "replace", "path": "/b/c", "value": 2},
                {"op": "test", "path": "/b/c", "value": 2},
                {"op": "copy", "from": "/b", "path": "/d"},
                {"op": "move", "from": "/a/0", "path": "/e"},
                {"op": "remove", "path": "/b"},
            ]),
        )
        .unwrap();
        assert_eq!(t, json!({"a": [2, 3], "d": {"c": 2}, "e": 1}));
        assert_eq!(
            json_patch(&mut t, &json!([{"op": "test", "path": "/e", "value": 9}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            json_patch(&mut t, &json!([{"op": "remove", "path": "/zz"}]))
                .unwrap_err()
                .code,
            422
        );
    }
}

//! Environment variables from ConfigMaps and Secrets (kubelet's
//! `makeEnvironmentVariables`): `envFrom` with its prefix, and `valueFrom`'s
//! `configMapKeyRef`/`secretKeyRef`, with kubelet's messages for what is missing.

use k8s_openapi::api::core::v1::{ConfigMapKeySelector, Container, Pod, SecretKeySelector};

use crate::objects::{ObjectError, PodObjects};

/// Why an env var from an API object cannot be set (a `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ObjectEnvError {
    #[error(transparent)]
    Object(#[from] ObjectError),
    #[error("couldn't find key {key} in ConfigMap {namespace}/{name}")]
    ConfigMapKey {
        key: String,
        namespace: String,
        name: String,
    },
    #[error("couldn't find key {key} in Secret {namespace}/{name}")]
    SecretKey {
        key: String,
        namespace: String,
        name: String,
    },
}

/// kubelet's `IsEnvVarName`: `[-._a-zA-Z][-._a-zA-Z0-9]*`.
pub(crate) fn is_env_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || matches!(c, '-' | '.' | '_') || (!first && c.is_ascii_digit())
    };
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// The variables of the container's `envFrom`, in order (a later source overrides an
/// earlier one). Keys that are not valid variable names are skipped and logged, as
/// kubelet does (it records an `InvalidEnvironmentVariableNames` event).
pub(crate) fn env_from(
    pod: &Pod,
    container: &Container,
    objects: Option<&PodObjects>,
) -> Result<Vec<(String, String)>, ObjectEnvError> {
    let ns = namespace(pod);
    let mut out = Vec::new();
    for ef in container.env_from.iter().flatten() {
        let prefix = ef.prefix.as_deref().unwrap_or("");
        let (kind, name, data): (&str, &str, Vec<(String, String)>) =
            if let Some(r) = &ef.config_map_ref {
                let optional = r.optional.unwrap_or(false);
                let Some(cm) = PodObjects::config_map(objects, ns, &r.name, optional)? else {
                    continue;
                };
                let data = cm.data.clone().unwrap_or_default().into_iter().collect();
                ("configMap", &r.name, data)
            } else if let Some(r) = &ef.secret_ref {
                let optional = r.optional.unwrap_or(false);
                let Some(s) = PodObjects::secret(objects, ns, &r.name, optional)? else {
                    continue;
                };
                let data = (s.data.iter().flatten())
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                    .collect();
                ("secret", &r.name, data)
            } else {
                continue;
            };
        let mut invalid = Vec::new();
        for (k, v) in data {
            let k = format!("{prefix}{k}");
            if !is_env_var_name(&k) {
                invalid.push(k);
                continue;
            }
            out.push((k, v));
        }
        if !invalid.is_empty() {
            invalid.sort();
            tracing::warn!(
                pod = %format!("{ns}/{}", pod.metadata.name.as_deref().unwrap_or("")),
                container = %container.name,
                reason = "InvalidEnvironmentVariableNames",
                "Keys [{}] from the EnvFrom {kind} {ns}/{name} were skipped since they are considered invalid environment variable names.",
                invalid.join(", "),
            );
        }
    }
    Ok(out)
}

/// A `configMapKeyRef`'s value; `None` when optional and the object or key is missing
/// (kubelet then leaves the variable out).
pub(crate) fn config_map_key(
    pod: &Pod,
    sel: &ConfigMapKeySelector,
    objects: Option<&PodObjects>,
) -> Result<Option<String>, ObjectEnvError> {
    let ns = namespace(pod);
    let optional = sel.optional.unwrap_or(false);
    let Some(cm) = PodObjects::config_map(objects, ns, &sel.name, optional)? else {
        return Ok(None);
    };
    match cm.data.as_ref().and_then(|d| d.get(&sel.key)) {
        Some(v) => Ok(Some(v.clone())),
        None if optional => Ok(None),
        None => Err(ObjectEnvError::ConfigMapKey {
            key: sel.key.clone(),
            namespace: ns.to_string(),
            name: sel.name.clone(),
        }),
    }
}

/// A `secretKeyRef`'s value; `None` when optional and the object or key is missing.
pub(crate) fn secret_key(
    pod: &Pod,
    sel: &SecretKeySelector,
    objects: Option<&PodObjects>,
) -> Result<Option<String>, ObjectEnvError> {
    let ns = namespace(pod);
    let optional = sel.optional.unwrap_or(false);
    let Some(s) = PodObjects::secret(objects, ns, &sel.name, optional)? else {
        return Ok(None);
    };
    match s.data.as_ref().and_then(|d| d.get(&sel.key)) {
        Some(v) => Ok(Some(String::from_utf8_lossy(&v.0).into_owned())),
        None if optional => Ok(None),
        None => Err(ObjectEnvError::SecretKey {
            key: sel.key.clone(),
            namespace: ns.to_string(),
            name: sel.name.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use serde_json::json;

    use super::*;
    use crate::kuberuntime::environment;
    use crate::podenv::PodEnv;

    fn pod(container: serde_json::Value) -> (Pod, Container) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [container]},
        }))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        (pod, c)
    }

    /// A snapshot with ConfigMap `cm` {a, b, "1bad"}, Secret `s` {a, pw}, and the
    /// ConfigMap `gone` and Secret `nosecret` not found (as the manager resolves them).
    fn objects() -> PodObjects {
        let mut o = PodObjects::default();
        let cm = ConfigMap {
            data: Some(
                [("a", "cm-a"), ("b", "cm-b"), ("1bad", "x")]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
            ),
            ..ConfigMap::default()
        };
        let s = Secret {
            data: Some(
                [("a", "s-a"), ("pw", "hunter2")]
                    .map(|(k, v)| (k.to_string(), ByteString(v.into())))
                    .into(),
            ),
            ..Secret::default()
        };
        o.config_maps.insert("cm".into(), Ok(Arc::new(cm)));
        o.secrets.insert("s".into(), Ok(Arc::new(s)));
        let nf = |kind, name: &str| ObjectError::NotFound {
            kind,
            name: name.into(),
        };
        o.config_maps
            .insert("gone".into(), Err(nf("configmaps", "gone")));
        o.secrets
            .insert("nosecret".into(), Err(nf("secrets", "nosecret")));
        o
    }

    fn env_of(container: serde_json::Value) -> Result<Vec<(String, String)>, String> {
        let (pod, c) = pod(container);
        let env = PodEnv {
            objects: Some(Arc::new(objects())),
            ..PodEnv::default()
        };
        environment(&pod, &c, &env).map_err(|e| e.to_string())
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn env_from_with_prefix_then_env_overrides_and_invalid_names_skipped() {
        let got = env_of(json!({
            "name": "c", "image": "i",
            "envFrom": [
                {"configMapRef": {"name": "cm"}},
                // A later source overrides an earlier one; its prefix makes "1bad" valid.
                {"prefix": "P_", "configMapRef": {"name": "cm"}},
                {"secretRef": {"name": "s"}},
                {"configMapRef": {"name": "gone", "optional": true}},
                {"secretRef": {"name": "nosecret", "optional": true}},
            ],
            "env": [
                {"name": "b", "value": "explicit $(a)"},
                {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "b"}}},
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
                {"name": "O1", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x", "optional": true}}},
                {"name": "O2", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "nokey", "optional": true}}},
                {"name": "O3", "valueFrom": {"secretKeyRef": {"name": "nosecret", "key": "x", "optional": true}}},
                {"name": "O4", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nokey", "optional": true}}},
            ],
        }))
        .unwrap();
        // envFrom's order is each object's key order (sorted, as Go's map range is
        // unordered and kubelet's result is keyed by name); "a" comes from the secret.
        assert_eq!(
            got,
            pairs(&[
                ("a", "s-a"),
                ("b", "explicit s-a"),
                ("P_1bad", "x"),
                ("P_a", "cm-a"),
                ("P_b", "cm-b"),
                ("pw", "hunter2"),
                ("K", "cm-b"),
                ("PW", "hunter2"),
            ])
        );
    }

    #[test]
    fn env_var_names_as_kubelet() {
        for ok in ["a", "A_1", "_x", "-x", ".x", "x.y-z"] {
            assert!(is_env_var_name(ok), "{ok}");
        }
        for bad in ["", "1a", "a b", "a=b", "é"] {
            assert!(!is_env_var_name(bad), "{bad}");
        }
    }

    #[test]
    fn each_missing_object_or_key_has_kubelets_message() {
        let cases = [
            (
                json!({"envFrom": [{"configMapRef": {"name": "gone"}}]}),
                "configmaps \"gone\" not found",
            ),
            (
                json!({"envFrom": [{"secretRef": {"name": "nosecret"}}]}),
                "secrets \"nosecret\" not found",
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]}),
                "configmaps \"gone\" not found",
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nosecret", "key": "k"}}}]}),
                "secrets \"nosecret\" not found",
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]}),
                "couldn't find key k in ConfigMap ns/cm",
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}),
                "couldn't find key k in Secret ns/s",
            ),
        ];
        for (extra, want) in cases {
            let mut c = json!({"name": "c", "image": "i"});
            c.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            assert_eq!(env_of(c).unwrap_err(), want);
        }
        // Without an apiserver: kubelet's "no kubeClient" message, even when optional
        // (kubelet checks the client before optional).
        let (p, c) =
            pod(json!({"name": "c", "image": "i", "envFrom": [{"configMapRef": {"name": "cm"}}]}));
        let err = environment(&p, &c, &PodEnv::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "couldn't get configMap ns/cm, no kubeClient defined"
        );
        let (p, c) = pod(
            json!({"name": "c", "image": "i", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}),
        );
        let err = environment(&p, &c, &PodEnv::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "couldn't get secret ns/s, no kubeClient defined"
        );
    }
}

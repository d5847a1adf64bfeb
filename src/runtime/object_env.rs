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

//! The Node's labels and taints from `--node-labels` and `--register-with-taints`,
//! checked at start with kubelet's rules (`cmd/kubelet/app/options`,
//! `kubeletapis.IsKubeletLabel`, `taints.ParseTaints`), so a typo fails at start
//! naming the flag instead of being refused by the apiserver at every registration.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

use crate::flag_text::{InvalidValue, list_items, map_pairs};

/// Labels in the `kubernetes.io`/`k8s.io` namespaces that a kubelet may set on itself.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "kubernetes.io/os",
    "kubernetes.io/arch",
];

/// Namespaces (and their subdomains) a kubelet may set any label in.
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn in_namespace(ns: &str, domain: &str) -> bool {
    ns == domain || ns.ends_with(&format!(".{domain}"))
}

/// Whether kubelet may set this label on its Node (kubelet's `IsKubeletLabel`).
fn is_kubelet_label(key: &str) -> bool {
    if KUBELET_LABELS.contains(&key) {
        return true;
    }
    let ns = key.split_once('/').map_or("", |(ns, _)| ns);
    KUBELET_LABEL_NAMESPACES.iter().any(|d| in_namespace(ns, d))
}

/// Whether the label is in the reserved `kubernetes.io`/`k8s.io` namespaces.
fn is_kubernetes_label(key: &str) -> bool {
    let ns = key.split_once('/').map_or("", |(ns, _)| ns);
    in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io")
}

/// A label key: an optional DNS subdomain prefix and a name of at most 63
/// characters (alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric).
fn valid_key(key: &str) -> bool {
    let (prefix, name) = key.split_once('/').unwrap_or(("", key));
    (prefix.is_empty() && !key.contains('/') || crate::pod::is_dns1123_subdomain(prefix))
        && valid_value(name)
        && !name.is_empty()
}

/// A label value: empty, or at most 63 characters, alphanumerics, `-`, `_`, `.`,
/// starting and ending alphanumeric.
fn valid_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

/// `--node-labels`: `k=v,...`, each a valid label, and no `kubernetes.io`/`k8s.io`
/// label outside kubelet's allowed set (kubelet's message).
pub(crate) fn node_labels(text: &str) -> Result<BTreeMap<String, String>, InvalidValue> {
    let mut labels = BTreeMap::new();
    let mut unknown = Vec::new();
    for (k, v) in map_pairs(text, '=')? {
        if !valid_key(k) {
            return Err(format!("{k:?}: invalid label key").into());
        }
        if !valid_value(v) {
            return Err(format!("{k}={v:?}: invalid label value").into());
        }
        if is_kubernetes_label(k) && !is_kubelet_label(k) {
            unknown.push(k.to_string());
        }
        labels.insert(k.to_string(), v.to_string());
    }
    if !unknown.is_empty() {
        return Err(format!(
            "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: {unknown:?}; --node-labels in the 'kubernetes.io' namespace must begin with an allowed prefix ({}) or be in the specifically allowed set ({})",
            KUBELET_LABEL_NAMESPACES.join(", "),
            KUBELET_LABELS.join(", ")
        )
        .into());
    }
    Ok(labels)
}

/// `--register-with-taints`: `key=value:Effect` or `key:Effect`, effect one of
/// NoSchedule, PreferNoSchedule, NoExecute (kubelet's `ParseTaints`).
pub(crate) fn node_taints(text: &str) -> Result<Vec<Taint>, InvalidValue> {
    let mut out: Vec<Taint> = Vec::new();
    for item in list_items(text) {
        let Some((kv, effect)) = item.rsplit_once(':') else {
            return Err(format!("{item:?}: invalid taint spec, must be key=value:effect").into());
        };
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!(
                "{item:?}: invalid taint effect {effect:?}, unsupported taint effect (NoSchedule, PreferNoSchedule, NoExecute)"
            )
            .into());
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        if !valid_key(key) {
            return Err(format!("{item:?}: invalid taint key {key:?}").into());
        }
        if !valid_value(value) {
            return Err(format!("{item:?}: invalid taint value {value:?}").into());
        }
        if out.iter().any(|t| t.key == key && t.effect == effect) {
            return Err(
                format!("{item:?}: duplicated taint (key {key:?}, effect {effect})").into(),
            );
        }
        out.push(Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.into()),
            effect: effect.into(),
            time_added: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_labels_follow_kubelets_rules() {
        let l = node_labels("a=b, node.kubernetes.io/pool=x,kubernetes.io/os=linux").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l["node.kubernetes.io/pool"], "x");
        assert!(node_labels("kubelet.kubernetes.io/x=1,sub.node.kubernetes.io/y=").is_ok());
        let e = node_labels("node-role.kubernetes.io/control-plane=").unwrap_err();
        assert!(
            e.0.starts_with("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: [\"node-role.kubernetes.io/control-plane\"]"),
            "{e}"
        );
        assert!(node_labels("example.k8s.io/a=b").is_err());
        assert_eq!(
            node_labels("a=b=c").unwrap_err().0,
            "a=\"b=c\": invalid label value"
        );
        assert_eq!(
            node_labels("-a=b").unwrap_err().0,
            "\"-a\": invalid label key"
        );
        assert!(node_labels("nokey").is_err());
    }

    #[test]
    fn taints_parse_like_kubelet() {
        let t = node_taints("dedicated=gpu:NoSchedule,spot:PreferNoSchedule").unwrap();
        assert_eq!(t[0].key, "dedicated");
        assert_eq!(t[0].value.as_deref(), Some("gpu"));
        assert_eq!(t[0].effect, "NoSchedule");
        assert_eq!((t[1].key.as_str(), t[1].value.as_deref()), ("spot", None));
        assert!(node_taints("").unwrap().is_empty());
        assert!(
            node_taints("a=b")
                .unwrap_err()
                .0
                .contains("must be key=value:effect")
        );
        assert!(
            node_taints("a=b:Never")
                .unwrap_err()
                .0
                .contains("unsupported taint effect")
        );
        assert!(
            node_taints("a:NoSchedule,a=c:NoSchedule")
                .unwrap_err()
                .0
                .contains("duplicated")
        );
    }
}

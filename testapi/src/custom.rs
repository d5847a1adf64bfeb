//! Custom resources, as the real server serves them: a CustomResourceDefinition stored
//! through `apiextensions.k8s.io/v1` makes its group, versions and plural served, with
//! the `status` subresource when a version asks for it. Objects are kept as given (no
//! schema pruning or validation), in one store entry shared by every served version.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use crate::resources::{Def, any_object};
use crate::store::{Store, rv_of};

/// The store's id of CustomResourceDefinitions.
const CRD_ID: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// The Defs made from each CRD, by its name and resourceVersion. A Def is leaked to be
/// `'static` like the built-in ones; one is made per CRD version written, which bounds
/// it in a test server's life.
#[derive(Default)]
pub(crate) struct Custom {
    built: Mutex<HashMap<(String, u64), Vec<&'static Def>>>,
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// The Defs of one CRD: one per served version; none when it lacks a group, a plural
/// or a kind.
fn defs_of(crd: &Value) -> Vec<&'static Def> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(leak);
    let (Some(group), Some(plural), Some(kind)) = (
        text(&spec["group"]),
        text(&names["plural"]),
        text(&names["kind"]),
    ) else {
        return Vec::new();
    };
    let singular = text(&names["singular"]).unwrap_or_else(|| leak(&kind.to_lowercase()));
    let short: &'static [&'static str] = Box::leak(
        names["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(leak))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let namespaced = spec["scope"].as_str() == Some("Namespaced");
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .filter_map(|v| {
            let version = text(&v["name"])?;
            let def: &'static Def = Box::leak(Box::new(Def {
                group,
                version,
                name: plural,
                singular,
                kind,
                namespaced,
                status: v.pointer("/subresources/status").is_some(),
                fields: &[],
                short,
                check: any_object,
            }));
            Some(def)
        })
        .collect()
}

impl Custom {
    /// The Defs of every CRD stored now.
    pub(crate) fn defs(&self, store: &Store) -> Vec<&'static Def> {
        let Ok((crds, _)) = store.list(CRD_ID, None, None) else {
            return Vec::new();
        };
        let mut built = self
            .built
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Vec::new();
        for ((_, _, name), crd) in &crds {
            let key = (name.clone(), rv_of(crd));
            out.extend(built.entry(key).or_insert_with(|| defs_of(crd)).iter());
        }
        out
    }
}

/// What the real server writes into a CRD's status once it serves it: the names
/// accepted, Established, and the storage version.
pub(crate) fn established_status(crd: &Value) -> Value {
    let storage = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default();
    let condition = |kind: &str, reason: &str| {
        json!({"type": kind, "status": "True", "reason": reason, "message": "",
               "lastTransitionTime": crate::http::timestamp(crate::http::now())})
    };
    json!({
        "acceptedNames": crd["spec"]["names"],
        "conditions": [condition("NamesAccepted", "NoConflicts"), condition("Established", "InitialNamesAccepted")],
        "storedVersions": [storage],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crd_defines_one_resource_per_served_version() {
        let crd = json!({"spec": {"group": "slo.koordinator.sh", "scope": "Cluster",
            "names": {"plural": "nodemetrics", "kind": "NodeMetric", "shortNames": ["nm"]},
            "versions": [
                {"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}}},
                {"name": "v1beta1", "served": false, "storage": false}]}});
        let defs = defs_of(&crd);
        assert_eq!(defs.len(), 1);
        let d = defs[0];
        assert_eq!(d.id(), "slo.koordinator.sh/nodemetrics");
        assert_eq!(d.api_version(), "slo.koordinator.sh/v1alpha1");
        assert_eq!(
            (d.singular, d.kind, d.short),
            ("nodemetric", "NodeMetric", &["nm"][..])
        );
        assert!(d.status && !d.namespaced);
        assert!((d.check)(&json!({"spec": {"anything": 1}})).is_ok());
        assert!((d.check)(&json!([1])).is_err());
        assert!(defs_of(&json!({"spec": {"group": "g"}})).is_empty());
        let status = established_status(&crd);
        assert_eq!(status["storedVersions"], json!(["v1alpha1"]));
        assert_eq!(status["conditions"][1]["type"], "Established");
    }
}

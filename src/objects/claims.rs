//! PersistentVolumeClaims as kubelet's desired-state-of-world populator and mount
//! checks see them: the claim must be bound and not being deleted, its volume must be
//! a filesystem, and a volume with `nodeAffinity` must select this node
//! (`getPVCExtractPV`, `getPVSpec`, `CheckNodeAffinity`). What fails is said in
//! kubelet's words, as the pod's `FailedMount` event carries them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim,
};

use super::ObjectError;

/// The volume a claim is bound to, the claim and the volume both checked.
#[derive(Debug, Clone)]
pub(crate) struct BoundClaim {
    pub volume: Arc<PersistentVolume>,
}

/// Why a claim's volume cannot be mounted, in kubelet's words (the pod's
/// `FailedMount` event and waiting message carry them). Cached with the claim, so
/// `Clone`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ClaimError {
    #[error("PVC is being deleted")]
    Deleting,
    #[error("PVC is not bound")]
    NotBound,
    #[error("failed to fetch PVC from API server: {0}")]
    FetchClaim(ObjectError),
    #[error("failed to fetch PV {volume} from API server: {error}")]
    FetchVolume { volume: String, error: ObjectError },
    /// kubelet's populator wraps what went wrong with the claim itself.
    #[error("error processing PVC {namespace}/{name}: {why}")]
    Processing {
        namespace: String,
        name: String,
        why: Box<ClaimError>,
    },
    #[error(
        "found PV object {volume:?} but it has a ClaimRef that is bound to a different PVC (UID {uid})"
    )]
    OtherClaim { volume: String, uid: String },
    #[error(
        "volume {0:?} has volumeMode Block, which oxlet does not map into containers (only Filesystem volumes are mounted)"
    )]
    Block(String),
    #[error(
        "MountVolume.NodeAffinity check failed for volume {0:?}: no matching NodeSelectorTerms"
    )]
    NodeAffinity(String),
    #[error("couldn't get PersistentVolumeClaim {0:?}, no kubeClient defined")]
    NoClient(String),
}

/// kubelet's `getPVCExtractPV` checks: bound, and not being deleted.
pub(crate) fn check_claim(pvc: &PersistentVolumeClaim) -> Result<&str, ClaimError> {
    if pvc.metadata.deletion_timestamp.is_some() {
        return Err(ClaimError::Deleting);
    }
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    let volume = (pvc.spec.as_ref())
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty());
    match (phase, volume) {
        (Some("Bound"), Some(volume)) => Ok(volume),
        _ => Err(ClaimError::NotBound),
    }
}

/// kubelet's `getPVSpec` and mount checks on the bound volume: it names this claim,
/// is a filesystem, and (with `nodeAffinity`) selects `node`.
pub(crate) fn check_volume(
    pv: &PersistentVolume,
    pvc: &PersistentVolumeClaim,
    node: Option<&Node>,
) -> Result<(), ClaimError> {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    let spec = pv.spec.as_ref();
    let claim_ref = spec.and_then(|s| s.claim_ref.as_ref());
    let pvc_uid = pvc.metadata.uid.as_deref();
    if let Some(r) = claim_ref.filter(|r| r.uid.is_some() && r.uid.as_deref() != pvc_uid) {
        return Err(ClaimError::OtherClaim {
            volume: name.to_string(),
            uid: r.uid.clone().unwrap_or_default(),
        });
    }
    if spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block") {
        return Err(ClaimError::Block(name.to_string()));
    }
    let required = (spec.and_then(|s| s.node_affinity.as_ref())).and_then(|a| a.required.as_ref());
    if let Some(required) = required {
        let (labels, node_name) = match node {
            Some(n) => (
                n.metadata.labels.clone().unwrap_or_default(),
                n.metadata.name.clone().unwrap_or_default(),
            ),
            None => (BTreeMap::new(), String::new()),
        };
        if !required
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, &labels, &node_name))
        {
            return Err(ClaimError::NodeAffinity(name.to_string()));
        }
    }
    Ok(())
}

/// One node selector term: every expression and field matches (an empty term
/// matches nothing, as the API's `NodeSelectorTerm` semantics say).
fn term_matches(t: &NodeSelectorTerm, labels: &BTreeMap<String, String>, node: &str) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            r.key == "metadata.name" && requirement_matches(r, Some(node).filter(|n| !n.is_empty()))
        })
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    let single = values.first().and_then(|v| number(v));
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => value
            .and_then(number)
            .zip(single)
            .is_some_and(|(v, s)| v > s),
        "Lt" => value
            .and_then(number)
            .zip(single)
            .is_some_and(|(v, s)| v < s),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pvc(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_claim_must_be_bound_and_not_going() {
        let bound = pvc(
            json!({"metadata": {"name": "c", "uid": "u"}, "spec": {"volumeName": "pv"},
            "status": {"phase": "Bound"}}),
        );
        assert_eq!(check_claim(&bound), Ok("pv"));
        let pending =
            pvc(json!({"metadata": {"name": "c"}, "spec": {}, "status": {"phase": "Pending"}}));
        assert_eq!(
            check_claim(&pending).unwrap_err().to_string(),
            "PVC is not bound"
        );
        let going = pvc(
            json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"volumeName": "pv"}, "status": {"phase": "Bound"}}),
        );
        assert_eq!(
            check_claim(&going).unwrap_err().to_string(),
            "PVC is being deleted"
        );
    }

    fn pv(v: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(v).unwrap()
    }

    fn node(name: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"kubernetes.io/hostname": name, "disk": "ssd", "gen": "5"}}}))
        .unwrap()
    }

    #[test]
    fn node_affinity_mode_and_claim_ref_are_checked() {
        let claim = pvc(json!({"metadata": {"name": "c", "uid": "u1"}}));
        let affinity = |terms: serde_json::Value| {
            pv(json!({"metadata": {"name": "pv"}, "spec": {
                "claimRef": {"uid": "u1"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": terms}}}}))
        };
        let here = node("n1");
        let ok = affinity(json!([{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]));
        assert_eq!(check_volume(&ok, &claim, Some(&here)), Ok(()));
        let elsewhere = affinity(json!([{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]));
        assert_eq!(
            check_volume(&elsewhere, &claim, Some(&here))
                .unwrap_err()
                .to_string(),
            "MountVolume.NodeAffinity check failed for volume \"pv\": no matching NodeSelectorTerms"
        );
        // Terms are ORed, expressions ANDed; fields match the node's name.
        let either = affinity(json!([
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["hdd"]}]},
            {"matchExpressions": [{"key": "disk", "operator": "Exists"},
                                  {"key": "gen", "operator": "Gt", "values": ["4"]}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        ]));
        assert_eq!(check_volume(&either, &claim, Some(&here)), Ok(()));
        assert!(check_volume(&either, &claim, Some(&node("n2"))).is_err());
        assert!(check_volume(&affinity(json!([{}])), &claim, Some(&here)).is_err());
        let block = pv(json!({"metadata": {"name": "pv"}, "spec": {"volumeMode": "Block"}}));
        assert!(
            check_volume(&block, &claim, None)
                .unwrap_err()
                .to_string()
                .contains("volumeMode Block")
        );
        let theirs = pv(json!({"metadata": {"name": "pv"}, "spec": {"claimRef": {"uid": "u2"}}}));
        assert!(
            check_volume(&theirs, &claim, None)
                .unwrap_err()
                .to_string()
                .contains("different PVC")
        );
    }
}

//! TokenReview and SubjectAccessReview, answered from rules a test sets: which bearer
//! tokens name which users, and which users or groups may do which verb on which
//! `nodes` subresource. What a node's webhook authenticator and authorizer ask.

use serde_json::{Value, json};

use crate::status::ApiError;

/// One allowing rule: a user name or group, a verb and a subresource (`*`: any).
#[derive(Debug, Clone)]
pub(crate) struct AccessRule {
    pub subject: String,
    pub verb: String,
    pub subresource: String,
}

/// RBAC's `request-serviceaccounts-token-audience` grant: `subject` (a node's user
/// name or `system:nodes`) may request tokens for `audience`, of `service_account`
/// only when one is named (the rule's `resourceNames`).
#[derive(Debug, Clone)]
pub(crate) struct AudienceRule {
    pub subject: String,
    pub audience: String,
    pub service_account: Option<String>,
}

/// The rules.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    /// Token → user name and groups.
    pub tokens: Vec<(String, String, Vec<String>)>,
    pub allowed: Vec<AccessRule>,
    pub audiences: Vec<AudienceRule>,
}

/// NodeRestriction's `ServiceAccountNodeAudienceRestriction` (on by default since
/// 1.33): a node may request a token bound to one of its pods only for an audience
/// the pod's projected volumes name, or one RBAC grants it. `node` is the pod's node.
pub(crate) fn check_node_audience(
    rules: &Rules,
    pod: &Value,
    node: &str,
    service_account: &str,
    audiences: &[&str],
) -> Result<(), ApiError> {
    let forbidden = |why: &str| ApiError::forbidden("serviceaccounts", service_account, why);
    let audience = match audiences {
        [] => "",
        [one] => one,
        _ => return Err(forbidden("node may only request 0 or 1 audiences")),
    };
    let volumes = pod.pointer("/spec/volumes").and_then(Value::as_array);
    let in_volumes = (volumes.into_iter().flatten())
        .filter_map(|v| v.pointer("/projected/sources").and_then(Value::as_array))
        .flatten()
        .filter_map(|s| s.get("serviceAccountToken"))
        .any(|t| t.get("audience").and_then(Value::as_str).unwrap_or("") == audience);
    let user = format!("system:node:{node}");
    let granted = rules.audiences.iter().any(|r| {
        (r.subject == user || r.subject == "system:nodes")
            && r.audience == audience
            && r.service_account
                .as_deref()
                .is_none_or(|n| n == service_account)
    });
    if in_volumes || granted {
        return Ok(());
    }
    Err(forbidden(&format!(
        "audience {audience:?} not found in pod spec volume, {user} is not authorized to request tokens for this audience"
    )))
}

fn spec(body: &Value, kind: &str) -> Result<Value, ApiError> {
    if body["kind"] != kind {
        return Err(ApiError::new(
            400,
            "BadRequest",
            format!("expected a {kind}, got {}", body["kind"]),
        ));
    }
    Ok(body["spec"].clone())
}

/// A TokenReview's answer.
pub(crate) fn token_review(rules: &Rules, body: &Value) -> Result<Value, ApiError> {
    let spec = spec(body, "TokenReview")?;
    let token = spec["token"].as_str().unwrap_or_default();
    let status = match rules.tokens.iter().find(|(t, _, _)| t == token) {
        // As the real apiserver answers for a service account token: the user's
        // UID, and in `extra` the credential's ID (a hash of the token's ID here).
        Some((_, user, groups)) => json!({
            "authenticated": true,
            "user": {
                "username": user,
                "uid": user_uid(user),
                "groups": groups,
                "extra": {"authentication.kubernetes.io/credential-id": [credential_id(token)]},
            },
        }),
        None => json!({"authenticated": false, "error": "token not recognised"}),
    };
    Ok(json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    }))
}

/// A stable UID for a user name, shaped as the apiserver's UUIDs.
pub fn user_uid(user: &str) -> String {
    let h = fnv(user.as_bytes());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        h >> 32,
        (h >> 16) & 0xffff,
        h & 0xfff,
        (h >> 20) & 0xfff,
        h & 0xffff_ffff_ffff
    )
}

/// The credential ID the answer names for `token` (`JTI=`, as for bound tokens).
pub fn credential_id(token: &str) -> String {
    format!("JTI={:016x}", fnv(token.as_bytes()))
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A SubjectAccessReview's answer.
pub(crate) fn access_review(rules: &Rules, body: &Value) -> Result<Value, ApiError> {
    let spec = spec(body, "SubjectAccessReview")?;
    let user = spec["user"].as_str().unwrap_or_default();
    let groups: Vec<&str> = (spec["groups"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    let attrs = &spec["resourceAttributes"];
    let verb = attrs["verb"].as_str().unwrap_or_default();
    let sub = attrs["subresource"].as_str().unwrap_or_default();
    let allowed = attrs["resource"] == "nodes"
        && rules.allowed.iter().any(|r| {
            (r.subject == user || groups.contains(&r.subject.as_str()))
                && (r.verb == "*" || r.verb == verb)
                && (r.subresource == "*" || r.subresource == sub)
        });
    let status = match allowed {
        true => json!({"allowed": true, "reason": "allowed by a test rule"}),
        false => json!({"allowed": false}),
    };
    Ok(json!({
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec,
        "status": status,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_decide() {
        let rules = Rules {
            tokens: vec![("t1".into(), "alice".into(), vec!["devs".into()])],
            allowed: vec![AccessRule {
                subject: "devs".into(),
                verb: "get".into(),
                subresource: "stats".into(),
            }],
            audiences: Vec::new(),
        };
        let tr = |t: &str| json!({"kind": "TokenReview", "spec": {"token": t}});
        let answer = token_review(&rules, &tr("t1")).unwrap();
        assert_eq!(answer["status"]["user"]["username"], "alice");
        assert_eq!(answer["status"]["user"]["uid"], user_uid("alice"));
        assert_eq!(
            answer["status"]["user"]["extra"]["authentication.kubernetes.io/credential-id"][0],
            credential_id("t1")
        );
        assert_eq!(
            token_review(&rules, &tr("t2")).unwrap()["status"]["authenticated"],
            false
        );
        let sar = |verb: &str, sub: &str| {
            json!({"kind": "SubjectAccessReview", "spec": {"user": "bob", "groups": ["devs"],
                "resourceAttributes": {"verb": verb, "resource": "nodes", "subresource": sub}}})
        };
        assert_eq!(
            access_review(&rules, &sar("get", "stats")).unwrap()["status"]["allowed"],
            true
        );
        assert_eq!(
            access_review(&rules, &sar("get", "proxy")).unwrap()["status"]["allowed"],
            false
        );
        assert!(access_review(&rules, &json!({"kind": "Pod"})).is_err());
    }

    #[test]
    fn a_node_gets_only_the_audiences_its_pod_names_or_rbac_grants() {
        let pod = json!({"spec": {"volumes": [
            {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
            {"name": "vault", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "vault"}}]}},
        ]}});
        let mut rules = Rules::default();
        let check = |rules: &Rules, sa: &str, aud: &[&str]| {
            check_node_audience(rules, &pod, "n1", sa, aud)
                .map_err(|e| e.status()["message"].clone())
        };
        assert!(
            check(&rules, "app", &[]).is_ok(),
            "the unnamed default audience is in a volume"
        );
        assert!(check(&rules, "app", &["vault"]).is_ok());
        assert_eq!(
            check(&rules, "app", &["registry"]).unwrap_err(),
            "serviceaccounts \"app\" is forbidden: audience \"registry\" not found in pod spec volume, system:node:n1 is not authorized to request tokens for this audience"
        );
        assert!(check(&rules, "app", &["vault", "x"]).is_err());
        rules.audiences.push(AudienceRule {
            subject: "system:nodes".into(),
            audience: "registry".into(),
            service_account: Some("puller".into()),
        });
        assert!(check(&rules, "puller", &["registry"]).is_ok());
        assert!(
            check(&rules, "app", &["registry"]).is_err(),
            "the grant names one account"
        );
    }
}

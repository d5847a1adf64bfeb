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

/// The rules.
#[derive(Debug, Default)]
pub(crate) struct Rules {
    /// Token → user name and groups.
    pub tokens: Vec<(String, String, Vec<String>)>,
    pub allowed: Vec<AccessRule>,
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
        Some((_, user, groups)) => json!({
            "authenticated": true,
            "user": {"username": user, "groups": groups},
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
        };
        let tr = |t: &str| json!({"kind": "TokenReview", "spec": {"token": t}});
        assert_eq!(
            token_review(&rules, &tr("t1")).unwrap()["status"]["user"]["username"],
            "alice"
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
}

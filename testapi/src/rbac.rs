//! RBAC as the real server applies it to a node's identity where the node authorizer
//! has no opinion: koordinator's `slo.koordinator.sh` (a kubelet-identity koordlet's
//! NodeSLO and NodeMetric) and RBAC's own objects. A request is allowed only when a
//! ClusterRoleBinding naming the user or one of its groups references a ClusterRole
//! with a rule matching the request's API group, resource (`resource/subresource` for
//! a subresource), verb and, when the rule lists any, resource name; `*` matches any
//! group, resource or verb, and `*/status` any resource's status. Anything else is 403,
//! worded as the real server words it. Admin and test clients are not checked.

use hyper::Method;
use serde_json::Value;

use crate::status::ApiError;
use crate::store::Store;

/// The API groups whose requests from a node identity RBAC decides here.
pub(crate) const GROUPS: &[&str] = &["slo.koordinator.sh", "rbac.authorization.k8s.io"];

const ROLES: &str = "rbac.authorization.k8s.io/clusterroles";
const BINDINGS: &str = "rbac.authorization.k8s.io/clusterrolebindings";

/// The request's verb as the real server's request info names it.
pub(crate) fn verb(method: &Method, named: bool, watch: bool) -> &'static str {
    match (method, named) {
        (&Method::GET, true) => "get",
        (&Method::GET, false) if watch => "watch",
        (&Method::GET, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => "unknown",
    }
}

/// The name a list or watch is limited to by its field selector (`metadata.name=x`),
/// which the real server's request info takes as the request's name.
pub(crate) fn selected_name(fields: Option<&str>) -> Option<&str> {
    fields?.split(',').find_map(|term| {
        let v = term.trim().strip_prefix("metadata.name")?;
        let v = v.strip_prefix("==").or_else(|| v.strip_prefix('='))?;
        (!v.is_empty()).then_some(v)
    })
}

/// What RBAC is asked about one request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attributes<'a> {
    pub user: &'a str,
    pub groups: &'a [&'a str],
    pub verb: &'a str,
    pub api_group: &'a str,
    pub resource: &'a str,
    pub sub: Option<&'a str>,
    pub name: Option<&'a str>,
    pub namespace: Option<&'a str>,
}

impl Attributes<'_> {
    fn combined(&self) -> String {
        match self.sub {
            Some(s) => format!("{}/{s}", self.resource),
            None => self.resource.to_owned(),
        }
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// RBAC's `RuleAllows`: verb, API group, resource (with `*/sub`) and resource name.
fn rule_allows(rule: &Value, a: &Attributes<'_>) -> bool {
    let any = |list: Vec<String>, want: &str| list.iter().any(|v| v == "*" || v == want);
    let combined = a.combined();
    let resource = strings(rule, "resources").iter().any(|r| {
        r == "*" || *r == combined || a.sub.is_some_and(|s| r.strip_prefix("*/") == Some(s))
    });
    let names = strings(rule, "resourceNames");
    any(strings(rule, "verbs"), a.verb)
        && any(strings(rule, "apiGroups"), a.api_group)
        && resource
        && (names.is_empty() || a.name.is_some_and(|n| names.iter().any(|x| x == n)))
}

/// Whether a binding's subjects include the user or one of its groups.
fn binds(binding: &Value, a: &Attributes<'_>) -> bool {
    let subjects = binding.get("subjects").and_then(Value::as_array);
    subjects.into_iter().flatten().any(|s| {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("");
        match s.get("kind").and_then(Value::as_str) {
            Some("User") => name == a.user,
            Some("Group") => a.groups.contains(&name),
            _ => false,
        }
    })
}

/// Whether `roles` and `bindings` (ClusterRoles, ClusterRoleBindings) allow `a`.
pub(crate) fn allows(roles: &[Value], bindings: &[Value], a: &Attributes<'_>) -> bool {
    bindings.iter().filter(|b| binds(b, a)).any(|b| {
        let role_ref = b.get("roleRef").unwrap_or(&Value::Null);
        if role_ref.get("kind").and_then(Value::as_str) != Some("ClusterRole") {
            return false;
        }
        let wanted = role_ref.get("name").and_then(Value::as_str);
        roles
            .iter()
            .filter(|r| r.pointer("/metadata/name").and_then(Value::as_str) == wanted)
            .flat_map(|r| {
                r.get("rules")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .any(|rule| rule_allows(rule, a))
    })
}

/// The real server's refusal: `nodemetrics.slo.koordinator.sh "n1" is forbidden: User
/// "system:node:n1" cannot get resource "nodemetrics" in API group
/// "slo.koordinator.sh" at the cluster scope` (no name for a list without one).
pub(crate) fn forbidden(a: &Attributes<'_>) -> ApiError {
    let scope = match a.namespace {
        Some(ns) => format!("in the namespace \"{ns}\""),
        None => "at the cluster scope".to_owned(),
    };
    let why = format!(
        "User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
        a.user,
        a.verb,
        a.combined(),
        a.api_group
    );
    let qualified = if a.api_group.is_empty() {
        a.resource.to_owned()
    } else {
        format!("{}.{}", a.resource, a.api_group)
    };
    let name = a.name.unwrap_or("");
    let mut e = ApiError::forbidden(&qualified, name, &why);
    if name.is_empty() {
        e.message = format!("{qualified} is forbidden: {why}");
    }
    e.details = Some((a.resource.to_owned(), name.to_owned()));
    e
}

/// Allows `a` or refuses it with the real server's 403.
pub(crate) fn authorize(store: &Store, a: &Attributes<'_>) -> Result<(), ApiError> {
    let values = |id: &str| -> Result<Vec<Value>, ApiError> {
        Ok(store
            .list(id, None, None)?
            .0
            .into_iter()
            .map(|(_, v)| v)
            .collect())
    };
    if allows(&values(ROLES)?, &values(BINDINGS)?, a) {
        Ok(())
    } else {
        Err(forbidden(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NODE_GROUPS: &[&str] = &["system:nodes", "system:authenticated"];

    fn node<'a>(verb: &'a str, resource: &'a str, sub: Option<&'a str>) -> Attributes<'a> {
        Attributes {
            user: "system:node:n1",
            groups: NODE_GROUPS,
            verb,
            api_group: "slo.koordinator.sh",
            resource,
            sub,
            name: Some("n1"),
            namespace: None,
        }
    }

    fn role(name: &str, rules: Value) -> Value {
        json!({"metadata": {"name": name}, "rules": rules})
    }

    fn binding(role: &str, subjects: Value) -> Value {
        json!({"metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": subjects})
    }

    fn nodes_bound(rules: Value) -> (Vec<Value>, Vec<Value>) {
        (
            vec![role("r", rules)],
            vec![binding(
                "r",
                json!([{"kind": "Group", "name": "system:nodes"}]),
            )],
        )
    }

    #[test]
    fn a_rule_bound_to_system_nodes_allows_its_verbs_alone() {
        let (roles, bindings) = nodes_bound(json!([
            {"apiGroups": ["slo.koordinator.sh"], "resources": ["nodeslos"], "verbs": ["get", "list", "watch"]}]));
        for verb in ["get", "list", "watch"] {
            assert!(allows(&roles, &bindings, &node(verb, "nodeslos", None)));
        }
        assert!(!allows(
            &roles,
            &bindings,
            &node("update", "nodeslos", None)
        ));
        assert!(!allows(
            &roles,
            &bindings,
            &node("get", "nodemetrics", None)
        ));
        let mut other_group = node("get", "nodeslos", None);
        other_group.api_group = "config.koordinator.sh";
        assert!(!allows(&roles, &bindings, &other_group));
        // Bound to another group, or to another user: not this node's.
        let elsewhere = vec![binding(
            "r",
            json!([{"kind": "Group", "name": "system:masters"}, {"kind": "User", "name": "system:node:n2"}]),
        )];
        assert!(!allows(&roles, &elsewhere, &node("get", "nodeslos", None)));
        let user = vec![binding(
            "r",
            json!([{"kind": "User", "name": "system:node:n1"}]),
        )];
        assert!(allows(&roles, &user, &node("get", "nodeslos", None)));
        // A binding to a role that does not exist grants nothing.
        assert!(!allows(&[], &bindings, &node("get", "nodeslos", None)));
    }

    #[test]
    fn a_subresource_is_its_own_resource() {
        let (roles, bindings) = nodes_bound(json!([
            {"apiGroups": ["slo.koordinator.sh"], "resources": ["nodemetrics"], "verbs": ["get", "update"]}]));
        assert!(allows(
            &roles,
            &bindings,
            &node("update", "nodemetrics", None)
        ));
        let status = node("update", "nodemetrics", Some("status"));
        assert!(!allows(&roles, &bindings, &status));
        let (roles, bindings) = nodes_bound(json!([
            {"apiGroups": ["slo.koordinator.sh"], "resources": ["nodemetrics/status"], "verbs": ["update"]}]));
        assert!(allows(&roles, &bindings, &status));
        assert!(!allows(
            &roles,
            &bindings,
            &node("update", "nodemetrics", None)
        ));
        let (roles, bindings) = nodes_bound(json!([
            {"apiGroups": ["slo.koordinator.sh"], "resources": ["*/status"], "verbs": ["update"]}]));
        assert!(allows(&roles, &bindings, &status));
        assert!(!allows(
            &roles,
            &bindings,
            &node("update", "nodemetrics", None)
        ));
    }

    #[test]
    fn stars_match_any_group_resource_and_verb() {
        let (roles, bindings) = nodes_bound(json!([
            {"apiGroups": ["slo.koordinator.sh"], "resources": ["*"], "verbs": ["*"]}]));
        assert!(allows(&roles, &bindings, &node("delete", "nodeslos", None)));
        assert!(allows(
            &roles,
            &bindings,
            &node("patch", "nodemetrics", Some("status"))
        ));
        let (roles, bindings) =
            nodes_bound(json!([{"apiGroups": ["*"], "resources": ["nodeslos"], "verbs": ["get"]}]));
        assert!(allows(&roles, &bindings, &node("get", "nodeslos", None)));
        assert!(!allows(&roles, &bindings, &node("list", "nodeslos", None)));
    }

    #[test]
    fn resource_names_limit_a_rule_to_those_names() {
        let (roles, bindings) = nodes_bound(json!([
            {"apiGroups": ["slo.koordinator.sh"], "resources": ["nodeslos"], "resourceNames": ["n1"], "verbs": ["get", "list"]}]));
        assert!(allows(&roles, &bindings, &node("get", "nodeslos", None)));
        let mut other = node("get", "nodeslos", None);
        other.name = Some("n2");
        assert!(!allows(&roles, &bindings, &other));
        // A list of everything has no name: the rule does not cover it.
        other.name = None;
        other.verb = "list";
        assert!(!allows(&roles, &bindings, &other));
    }

    #[test]
    fn a_refusal_is_worded_as_the_real_servers() {
        let e = forbidden(&node("get", "nodemetrics", None));
        assert_eq!(e.code, 403);
        assert_eq!(e.reason, "Forbidden");
        assert_eq!(
            e.message,
            "nodemetrics.slo.koordinator.sh \"n1\" is forbidden: User \"system:node:n1\" cannot get resource \"nodemetrics\" in API group \"slo.koordinator.sh\" at the cluster scope"
        );
        let mut status = node("update", "nodemetrics", Some("status"));
        assert!(
            forbidden(&status)
                .message
                .ends_with("cannot update resource \"nodemetrics/status\" in API group \"slo.koordinator.sh\" at the cluster scope")
        );
        status.name = None;
        status.verb = "list";
        status.sub = None;
        assert!(
            forbidden(&status)
                .message
                .starts_with("nodemetrics.slo.koordinator.sh is forbidden: User")
        );
        assert_eq!(
            forbidden(&status).status()["details"],
            json!({"name": "", "kind": "nodemetrics"})
        );
    }

    #[test]
    fn a_field_selector_on_the_name_names_the_request() {
        assert_eq!(selected_name(Some("metadata.name=n1")), Some("n1"));
        assert_eq!(
            selected_name(Some("spec.x=y,metadata.name==n1")),
            Some("n1")
        );
        assert_eq!(selected_name(Some("metadata.name!=n1")), None);
        assert_eq!(selected_name(None), None);
    }

    /// Over HTTP: a node identity is refused until a binding grants it, as the real
    /// server refuses it; the admin never is.
    #[tokio::test]
    async fn a_node_gets_slo_objects_only_once_granted() {
        use crate::dra_tests::{call, tempfile_dir};
        let dir = tempfile_dir();
        let server = crate::TestApiServer::start(dir.path()).await.unwrap();
        server.add_node_token("node-n1", "n1").unwrap();
        let admin = server.token().to_owned();
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "nodemetrics.slo.koordinator.sh"},
            "spec": {"group": "slo.koordinator.sh", "scope": "Cluster",
                "names": {"kind": "NodeMetric", "plural": "nodemetrics"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true, "subresources": {"status": {}}}]}});
        let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
        assert_eq!(call(&server, &admin, "POST", crds, Some(crd)).await.0, 201);
        let metrics = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics";
        let nm = json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric", "metadata": {"name": "n1"}, "spec": {}});
        assert_eq!(
            call(&server, &admin, "POST", metrics, Some(nm)).await.0,
            201
        );

        let one = format!("{metrics}/n1");
        let (code, refused) = call(&server, "node-n1", "GET", &one, None).await;
        assert_eq!(code, 403);
        assert_eq!(
            refused["message"],
            "nodemetrics.slo.koordinator.sh \"n1\" is forbidden: User \"system:node:n1\" cannot get resource \"nodemetrics\" in API group \"slo.koordinator.sh\" at the cluster scope"
        );
        let watch = format!("{metrics}?watch=1&fieldSelector=metadata.name%3Dn1");
        let (code, refused) = call(&server, "node-n1", "GET", &watch, None).await;
        assert_eq!(code, 403);
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains("\"n1\" is forbidden: User \"system:node:n1\" cannot watch resource"),
            "{refused}"
        );
        // Refused before routing, as the real server authorizes first.
        let unserved = "/apis/slo.koordinator.sh/v1alpha1/nodeslos";
        assert_eq!(call(&server, "node-n1", "GET", unserved, None).await.0, 403);
        assert_eq!(call(&server, &admin, "GET", unserved, None).await.0, 404);

        let rbac = "/apis/rbac.authorization.k8s.io/v1";
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "koordlet"}, "rules": [
                {"apiGroups": ["slo.koordinator.sh"], "resources": ["nodemetrics"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["slo.koordinator.sh"], "resources": ["nodemetrics/status"], "verbs": ["update"]}]});
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "koordlet"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "koordlet"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]});
        let roles = format!("{rbac}/clusterroles");
        assert_eq!(
            call(&server, &admin, "POST", &roles, Some(role)).await.0,
            201
        );
        let bindings = format!("{rbac}/clusterrolebindings");
        assert_eq!(
            call(&server, &admin, "POST", &bindings, Some(binding))
                .await
                .0,
            201
        );

        let (code, got) = call(&server, "node-n1", "GET", &one, None).await;
        assert_eq!(code, 200, "{got}");
        let mut with_status = got.clone();
        with_status["status"] = json!({"podsMetric": []});
        let status = format!("{one}/status");
        let (code, body) = call(
            &server,
            "node-n1",
            "PUT",
            &status,
            Some(with_status.clone()),
        )
        .await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(
            call(&server, "node-n1", "PUT", &one, Some(got)).await.0,
            403
        );
        assert_eq!(call(&server, "node-n1", "DELETE", &one, None).await.0, 403);
        assert_eq!(call(&server, "node-n1", "GET", &roles, None).await.0, 403);
        assert_eq!(call(&server, &admin, "DELETE", &one, None).await.0, 200);
    }
}

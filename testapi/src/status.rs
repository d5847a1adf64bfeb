//! Errors as the apiserver sends them: a `Status` object whose `reason` and `code` are
//! what client-go and kube-rs branch on (NotFound, AlreadyExists, Conflict, Expired, ...).

use serde_json::{Value, json};

/// One failed request, rendered as a `metav1.Status`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details.kind`/`details.name` for per-object errors, as the real server fills them.
    pub details: Option<(String, String)>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, resource: &str, name: &str) -> Self {
        self.details = Some((resource.to_owned(), name.to_owned()));
        self
    }

    pub fn not_found(resource: &str, name: &str) -> Self {
        let what = resource.rsplit('/').next().unwrap_or(resource);
        Self::new(404, "NotFound", format!("{what} \"{name}\" not found")).with_details(what, name)
    }

    pub fn already_exists(resource: &str, name: &str) -> Self {
        let what = resource.rsplit('/').next().unwrap_or(resource);
        Self::new(
            409,
            "AlreadyExists",
            format!("{what} \"{name}\" already exists"),
        )
        .with_details(what, name)
    }

    /// An admission plugin's refusal (HTTP 403, reason Forbidden), worded as the real
    /// server's: `pods "x" is forbidden: <why>`.
    pub fn forbidden(resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{resource} \"{name}\" is forbidden: {why}"),
        )
        .with_details(resource, name)
    }

    /// An optimistic-lock or precondition failure (HTTP 409, reason Conflict).
    pub fn conflict(resource: &str, name: &str, why: &str) -> Self {
        let what = resource.rsplit('/').next().unwrap_or(resource);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {what} \"{name}\": {why}"),
        )
        .with_details(what, name)
    }

    /// A resourceVersion older than the kept history (HTTP 410; the real server says Expired).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// A resourceVersion newer than any the server has (a client of another, or an
    /// older, cluster): the watch cache's 504 after its wait, which client-go answers
    /// with a fresh list.
    pub fn too_large(asked: u64, current: u64) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {asked}, current: {current}"),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn invalid(resource: &str, name: &str, message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message).with_details(resource, name)
    }

    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((kind, name)) = &self.details {
            s["details"] = json!({ "name": name, "kind": kind });
            if self.reason == "Invalid" {
                s["details"]["causes"] = json!([cause(&self.message)]);
            }
        }
        s
    }
}

/// The `details.causes` entry of a field error `<field>: <kind>: <detail>`, as the real
/// server lists each one: kubectl prints these, not the message, for an Invalid answer.
fn cause(message: &str) -> Value {
    let (field, rest) = message.split_once(": ").unwrap_or(("", message));
    let reason = [
        ("Forbidden", "FieldValueForbidden"),
        ("Invalid value", "FieldValueInvalid"),
        ("Required value", "FieldValueRequired"),
        ("Unsupported value", "FieldValueNotSupported"),
        ("Duplicate value", "FieldValueDuplicate"),
    ]
    .iter()
    .find(|(prefix, _)| rest.starts_with(prefix))
    .map_or("FieldValueInvalid", |(_, reason)| reason);
    json!({"reason": reason, "message": rest, "field": field})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_answer_lists_its_cause() {
        let e = ApiError::invalid(
            "pods",
            "p",
            "spec.containers[0].resources.limits: Forbidden: resource limits cannot be removed",
        );
        assert_eq!(
            e.status()["details"]["causes"],
            json!([{"reason": "FieldValueForbidden", "field": "spec.containers[0].resources.limits",
                "message": "Forbidden: resource limits cannot be removed"}])
        );
        assert!(
            ApiError::not_found("pods", "p").status()["details"]
                .get("causes")
                .is_none()
        );
    }
}

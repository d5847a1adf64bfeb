//! `labelSelector` and `fieldSelector` as the apiserver parses them (the basics: equality,
//! inequality, existence, `in`/`notin`), with fields limited to the ones each resource indexes.

use serde_json::Value;

use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Selector(Vec<Req>);

/// Split on commas that are not inside `( … )`.
fn terms(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(s[start..].trim());
    out.into_iter().filter(|t| !t.is_empty()).collect()
}

fn set_of(rest: &str, whole: &str) -> Result<Vec<String>, ApiError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: {whole}")))?;
    Ok(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

impl Selector {
    pub(crate) fn labels(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for t in terms(s) {
            let req = if let Some(k) = t.strip_prefix('!') {
                Req::NotExists(k.trim().to_owned())
            } else if let Some((k, v)) = t.split_once("!=") {
                Req::Ne(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                Req::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, rest)) = t.split_once(" notin ") {
                Req::NotIn(k.trim().to_owned(), set_of(rest, t)?)
            } else if let Some((k, rest)) = t.split_once(" in ") {
                Req::In(k.trim().to_owned(), set_of(rest, t)?)
            } else if t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Req::Exists(t.to_owned())
            } else {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {t}"
                )));
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Field selectors allow only `=`, `==` and `!=`, on the fields in `allowed`.
    pub(crate) fn fields(s: &str, allowed: &[&str]) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for t in terms(s) {
            let (req, field) = if let Some((k, v)) = t.split_once("!=") {
                (Req::Ne(k.trim().to_owned(), v.trim().to_owned()), k.trim())
            } else if let Some((k, v)) = t.split_once("==").or_else(|| t.split_once('=')) {
                (Req::Eq(k.trim().to_owned(), v.trim().to_owned()), k.trim())
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{t}'"
                )));
            };
            if !allowed.contains(&field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    fn matches_with(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
            Req::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(&x)),
        })
    }

    pub(crate) fn matches_labels(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        self.matches_with(|k| {
            labels
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    }

    /// Fields are dotted paths into the object; a missing field reads as "" (as the real one).
    pub(crate) fn matches_fields(&self, obj: &Value) -> bool {
        self.matches_with(|k| {
            let pointer = format!("/{}", k.replace('.', "/"));
            Some(match obj.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_requirements() {
        let pod = json!({"metadata": {"labels": {"app": "web", "tier": "front"}}});
        for (sel, want) in [
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("app", true),
            ("!missing", true),
            ("!app", false),
            ("tier in (back, front)", true),
            ("tier notin (front)", false),
            ("missing notin (x)", true),
            ("", true),
        ] {
            assert_eq!(
                Selector::labels(sel).unwrap().matches_labels(&pod),
                want,
                "{sel}"
            );
        }
        assert!(Selector::labels("tier in front").is_err());
    }

    #[test]
    fn field_requirements_and_unsupported_fields() {
        let allowed = ["spec.nodeName", "metadata.name"];
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}});
        assert!(
            Selector::fields("spec.nodeName=n1", &allowed)
                .unwrap()
                .matches_fields(&pod)
        );
        assert!(
            !Selector::fields("spec.nodeName=n2", &allowed)
                .unwrap()
                .matches_fields(&pod)
        );
        let unbound = json!({"metadata": {"name": "q"}, "spec": {}});
        assert!(
            Selector::fields("spec.nodeName=", &allowed)
                .unwrap()
                .matches_fields(&unbound)
        );
        assert!(
            Selector::fields("spec.nodeName!=n1,metadata.name==q", &allowed)
                .unwrap()
                .matches_fields(&unbound)
        );
        let e = Selector::fields("spec.hostname=x", &allowed).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "field label not supported: spec.hostname")
        );
    }
}

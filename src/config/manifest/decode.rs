//! Bytes to a `Pod`: text only, one YAML or JSON document of kind Pod (kubelet's
//! `tryDecodeSinglePod`), read within budgets. YAML goes through `crate::yaml`, which
//! reads it as kubelet's sigs.k8s.io/yaml does (YAML 1.1 booleans and octals) in pure
//! Rust; JSON through serde_json, as kubelet hands JSON to its JSON decoder as is.

use k8s_openapi::api::core::v1::Pod;

use super::{FieldError, MAX_MANIFEST_BYTES, ParseError, fail};
use crate::yaml::{self, PathSeg};

/// Rejects binary content up front: the YAML parser's complaint about it would be cryptic.
pub(super) fn as_text(bytes: &[u8]) -> Result<&str, ParseError> {
    if let Some(at) = bytes.iter().position(|b| *b == 0) {
        return Err(ParseError::Decode(format!(
            "not a text manifest: binary data (NUL byte at offset {at})"
        )));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ParseError::Decode(format!(
            "not a text manifest: invalid UTF-8 at byte offset {}",
            e.valid_up_to()
        ))
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(ParseError::Decode(
            "empty manifest: expected one Pod".to_string(),
        ));
    }
    Ok(text)
}

/// Parses to a generic value first (kind/apiVersion/document count checks with clear
/// messages), then decodes the typed Pod, naming the field and line of a type error.
pub(super) fn parse_pod(text: &str) -> Result<Pod, ParseError> {
    if text.trim_start().starts_with('{') {
        // JSON has no aliases, but the same node budget bounds the generic value.
        let mut json = serde_json::Deserializer::from_str(text);
        if let Err(e) =
            serde::de::DeserializeSeed::deserialize(Walk(&ExpansionBudget::new()), &mut json)
            && e.classify() == serde_json::error::Category::Data
        {
            return Err(ParseError::Decode(format!("invalid JSON: {e}")));
        }
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value) => {
                check_kind(&value)?;
                return serde_json::from_str::<Pod>(text)
                    .map_err(|e| ParseError::Decode(format!("invalid Pod (JSON): {e}")));
            }
            Err(json_err) => {
                // A YAML flow mapping also starts with `{`; only if YAML fails too is
                // the JSON message the better one to show.
                if let Ok(value) = yaml_single_document(text) {
                    check_kind(&value)?;
                    return yaml_pod(text, value);
                }
                return Err(ParseError::Decode(format!("invalid JSON: {json_err}")));
            }
        }
    }
    let value = yaml_single_document(text)?;
    check_kind(&value)?;
    yaml_pod(text, value)
}

/// One Pod, or the items of a PodList (kubelet's HTTP source tries the one, then
/// the other). Anything that is not a PodList gets [`parse_pod`]'s checks and
/// messages. List items may omit `kind`/`apiVersion`, as in the API's own lists.
/// The flag is true for a list.
pub(super) fn parse_pods(text: &str) -> Result<(Vec<Pod>, bool), ParseError> {
    let Ok((value, yaml)) = generic_value(text) else {
        // Not even well-formed: parse_pod says why, in its words.
        return parse_pod(text).map(|p| (vec![p], false));
    };
    if value.get("kind").and_then(serde_json::Value::as_str) != Some("PodList") {
        return parse_pod(text).map(|p| (vec![p], false));
    }
    pod_list(text, value, yaml).map(|pods| (pods, true))
}

/// The one document of `text` as a generic value (budgeted as [`parse_pod`] is),
/// and whether it was read as YAML.
fn generic_value(text: &str) -> Result<(serde_json::Value, bool), ParseError> {
    if text.trim_start().starts_with('{') {
        let mut json = serde_json::Deserializer::from_str(text);
        let walked =
            serde::de::DeserializeSeed::deserialize(Walk(&ExpansionBudget::new()), &mut json);
        if walked.is_ok()
            && let Ok(value) = serde_json::from_str(text)
        {
            return Ok((value, false));
        }
    }
    Ok((yaml_single_document(text)?, true))
}

/// A PodList's items as Pods; the first bad item fails the whole list.
fn pod_list(text: &str, mut value: serde_json::Value, yaml: bool) -> Result<Vec<Pod>, ParseError> {
    use serde_json::Value;
    match value.get("apiVersion") {
        Some(Value::String(v)) if v == "v1" => {}
        None => {
            return Err(FieldError::new("apiVersion", "required value (expected \"v1\")").into());
        }
        Some(other) => {
            return Err(FieldError::new(
                "apiVersion",
                format!("unsupported value {other}: expected \"v1\""),
            )
            .into());
        }
    }
    let items = match value.get_mut("items").map(Value::take) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(FieldError::new("items", "expected a list of Pods").into()),
    };
    let mut pods = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let field = |f: &str| format!("items[{i}].{f}");
        if !item.is_object() {
            return Err(FieldError::new(format!("items[{i}]"), "expected a Pod object").into());
        }
        match item.get("kind") {
            None => {}
            Some(Value::String(k)) if k == "Pod" => {}
            Some(other) => {
                return Err(FieldError::new(
                    field("kind"),
                    format!("unsupported kind {other}: a PodList holds Pods"),
                )
                .into());
            }
        }
        match item.get("apiVersion") {
            None => {}
            Some(Value::String(v)) if v == "v1" => {}
            Some(other) => {
                return Err(FieldError::new(
                    field("apiVersion"),
                    format!("unsupported value {other}: expected \"v1\""),
                )
                .into());
            }
        }
        let invalid =
            |e: &dyn std::fmt::Display| ParseError::Decode(format!("items[{i}]: invalid Pod: {e}"));
        let pod = if yaml {
            let at = [PathSeg::Key("items".to_string()), PathSeg::Index(i)];
            yaml::decode::<Pod>(text, item, &LIMITS, &at).map_err(|e| invalid(&e))
        } else {
            serde_json::from_value::<Pod>(item).map_err(|e| invalid(&e))
        }?;
        pods.push(pod);
    }
    Ok(pods)
}

/// Decodes the typed Pod from its YAML document's value.
fn yaml_pod(text: &str, value: serde_json::Value) -> Result<Pod, ParseError> {
    yaml::decode::<Pod>(text, value, &LIMITS, &[])
        .map_err(|e| ParseError::Decode(format!("invalid Pod (YAML): {e}")))
}

/// The value of the one non-empty YAML document in `text`; more than one is an
/// error (kubelet would silently take the first, which hides mistakes).
fn yaml_single_document(text: &str) -> Result<serde_json::Value, ParseError> {
    let docs = yaml::documents(text, &LIMITS)
        .map_err(|e| ParseError::Decode(format!("invalid YAML: {e}")))?;
    let mut docs = docs.into_iter().filter(|d| !d.is_null());
    match (docs.next(), docs.count()) {
        (Some(value), 0) => Ok(value),
        (None, _) => Err(ParseError::Decode(
            "empty manifest: expected one Pod".to_string(),
        )),
        (Some(_), more) => Err(ParseError::Decode(format!(
            "found {} YAML documents: a manifest must hold exactly one Pod",
            more + 1
        ))),
    }
}

/// Deepest nesting of collections a YAML manifest may have (as deep as serde_yaml_ng,
/// the parser before, went, so no manifest it took is refused for its depth).
pub(super) const MAX_YAML_DEPTH: usize = 128;

/// Most bytes (scalar text plus one per node) all documents of a manifest may
/// expand to once YAML aliases are resolved: no more than a file without aliases
/// may hold, so an anchor referenced many times cannot multiply memory.
pub(crate) const MAX_EXPANDED_BYTES: usize = MAX_MANIFEST_BYTES;
/// Most YAML nodes after alias expansion (each becomes an allocated value; real
/// pods have a few thousand).
pub(crate) const MAX_EXPANDED_NODES: usize = 1_000_000;
/// Most alias references (`*name`) in a manifest: real ones share an env list or
/// a volume or two.
pub(crate) const MAX_ALIASES: usize = 10_000;
/// Most YAML documents (`---`) in a manifest, empty ones included: one holds the
/// Pod, the rest can only be empty.
pub(crate) const MAX_DOCUMENTS: usize = 16;

/// A manifest's YAML budgets (`crate::yaml` charges them while it builds).
pub(super) const LIMITS: yaml::Limits = yaml::Limits {
    depth: MAX_YAML_DEPTH,
    nodes: MAX_EXPANDED_NODES,
    bytes: MAX_EXPANDED_BYTES,
    aliases: MAX_ALIASES,
    documents: MAX_DOCUMENTS,
};

/// The JSON half of the budget: nodes and bytes, charged while walking.
struct ExpansionBudget {
    bytes: std::cell::Cell<usize>,
    nodes: std::cell::Cell<usize>,
}

impl ExpansionBudget {
    fn new() -> Self {
        ExpansionBudget {
            bytes: std::cell::Cell::new(MAX_EXPANDED_BYTES),
            nodes: std::cell::Cell::new(MAX_EXPANDED_NODES),
        }
    }
}

/// A serde seed and visitor that only counts, so a JSON document past the budget
/// is refused before any value is built.
#[derive(Clone, Copy)]
struct Walk<'b>(&'b ExpansionBudget);

/// What one non-string scalar is charged, in bytes.
const SCALAR_COST: usize = 8;

impl Walk<'_> {
    fn charge<E: serde::de::Error>(self, bytes: usize) -> Result<(), E> {
        let b = self.0;
        match (
            b.bytes.get().checked_sub(bytes.saturating_add(1)),
            b.nodes.get().checked_sub(1),
        ) {
            (Some(bytes), Some(nodes)) => {
                b.bytes.set(bytes);
                b.nodes.set(nodes);
                Ok(())
            }
            _ => Err(E::custom(format_args!(
                "document too large with aliases expanded: more than {MAX_EXPANDED_BYTES} bytes or {MAX_EXPANDED_NODES} nodes"
            ))),
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.charge(SCALAR_COST)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.charge(SCALAR_COST)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.charge(SCALAR_COST)
    }
    fn visit_i128<E: serde::de::Error>(self, _: i128) -> Result<(), E> {
        self.charge(SCALAR_COST)
    }
    fn visit_u128<E: serde::de::Error>(self, _: u128) -> Result<(), E> {
        self.charge(SCALAR_COST)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.charge(SCALAR_COST)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.charge(v.len())
    }
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<(), E> {
        self.charge(v.len())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.charge(0)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.charge(0)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.charge(0)?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.charge(0)?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        // A tagged node (`!tag value`): the tag, then its value.
        use serde::de::VariantAccess;
        let ((), variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self)
    }
}

fn check_kind(value: &serde_json::Value) -> Result<(), FieldError> {
    let Some(obj) = value.as_object() else {
        let got = match value {
            serde_json::Value::Array(_) => "a list",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::Bool(_) => "a boolean",
            _ => "something else",
        };
        return fail("<root>", format!("expected a Pod object, got {got}"));
    };
    match obj.get("kind") {
        None => return fail("kind", "required value (expected \"Pod\")"),
        Some(serde_json::Value::String(k)) if k == "Pod" => {}
        Some(serde_json::Value::String(k)) => {
            return fail(
                "kind",
                format!("unsupported kind {k:?}: a static pod manifest must hold exactly one Pod"),
            );
        }
        Some(other) => return fail("kind", format!("expected a string, got {other}")),
    }
    match obj.get("apiVersion") {
        None => fail("apiVersion", "required value (expected \"v1\")"),
        Some(serde_json::Value::String(v)) if v == "v1" => Ok(()),
        Some(other) => fail(
            "apiVersion",
            format!("unsupported value {other}: expected \"v1\""),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::manifest::test_support::*;
    use crate::config::manifest::*;

    const BOMB_CHILD_ENV: &str = "OXLET_TEST_DECODE_FILE";

    #[test]
    fn yaml_1_1_octal_file_modes_are_read_as_kubelet_reads_them() {
        let text = format!(
            "{GOOD}  volumes:\n  - name: info\n    downwardAPI:\n      defaultMode: 0644\n      items:\n      - path: labels\n        mode: 0400\n        fieldRef: {{fieldPath: metadata.labels}}\n      - path: name\n        mode: 256\n        fieldRef: {{fieldPath: metadata.name}}\n"
        );
        let pod = decode(&text).unwrap();
        let volumes = pod.spec.unwrap().volumes.unwrap();
        let d = volumes[0].downward_api.as_ref().unwrap();
        assert_eq!(d.default_mode, Some(0o644));
        let items = d.items.as_ref().unwrap();
        assert_eq!(items[0].mode, Some(0o400));
        assert_eq!(items[1].mode, Some(256));
        // Not octal: go-yaml v2 reads the digits as a float, 648, which is no file mode.
        assert_err(
            &text.replace("0644", "0648"),
            "spec.volumes[0].downwardAPI.defaultMode: invalid value 648: must be a number between 0 and 0777",
        );
        // Quoted, it is a string, which an integer field refuses (kubelet's JSON decoder too).
        assert_err(
            &text.replace("0644", "\"0644\""),
            "invalid Pod (YAML): spec.volumes[0].downwardAPI.defaultMode: invalid type: string \"0644\"",
        );
    }

    /// kubelet reads YAML 1.1 (go-yaml v2 through sigs.k8s.io/yaml) into JSON, then
    /// decodes the JSON: a plain `yes` is a boolean and `012` the number 10, which a
    /// string field refuses; a boolean key is the text "true".
    #[test]
    fn yaml_1_1_booleans_and_numbers_land_as_kubelet_lands_them() {
        let env =
            |v: &str| with_container_lines(&format!("    env:\n    - name: A\n      value: {v}\n"));
        assert_err(
            &env("yes"),
            "invalid Pod (YAML): spec.containers[0].env[0].value: invalid type: boolean `true`, expected a string",
        );
        assert!(
            err(&env("on")).contains("quote the value"),
            "{}",
            err(&env("on"))
        );
        assert!(
            err(&env("yes")).ends_with("at line 14 column 14"),
            "{}",
            err(&env("yes"))
        );
        let pod = decode(&env("\"yes\"")).unwrap();
        let value = |p: &Pod| {
            p.spec.as_ref().unwrap().containers[0].env.as_ref().unwrap()[0]
                .value
                .clone()
        };
        assert_eq!(value(&pod).as_deref(), Some("yes"));
        assert_eq!(
            value(&decode(&env("yesterday")).unwrap()).as_deref(),
            Some("yesterday")
        );
        assert_err(
            &GOOD.replace("- name: nginx", "- name: 012"),
            "spec.containers[0].name: invalid type: integer `10`, expected a string",
        );
        assert_err(&env("012"), "invalid type: integer `10`");
        let labelled = GOOD.replace("name: web\n", "name: web\n  labels: {on: x, app: web}\n");
        let pod = decode(&labelled).unwrap();
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels.get("true").map(String::as_str), Some("x"));
        let numbers = with_container_lines("    ports:\n    - containerPort: 0x50\n");
        let pod = decode(&numbers.replace("    ports:\n    - containerPort: 80\n", "")).unwrap();
        let port = pod.spec.unwrap().containers[0].ports.as_ref().unwrap()[0].container_port;
        assert_eq!(port, 80);
    }

    #[test]
    fn alias_count_and_document_count_are_budgeted() {
        let many = with_container_lines(&format!(
            "    env:\n    - name: A\n      value: &v x\n    args: [{}x]\n",
            "*v, ".repeat(MAX_ALIASES + 1)
        ));
        assert_err(
            &many,
            &format!("invalid YAML: more than {MAX_ALIASES} aliases at line"),
        );
        let separators = format!("{GOOD}{}", "---\n".repeat(MAX_DOCUMENTS));
        assert_err(
            &separators,
            &format!("invalid YAML: more than {MAX_DOCUMENTS} YAML documents at line"),
        );
        let fine = format!("{GOOD}{}", "---\n".repeat(MAX_DOCUMENTS - 2));
        assert!(decode(&fine).is_ok());
    }

    #[test]
    fn good_yaml_decodes_and_is_named_for_the_node() {
        let pod = decode(GOOD).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("web-node1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some(NODE));
        assert_eq!(
            pod.status.as_ref().unwrap().phase.as_deref(),
            Some("Pending")
        );
    }

    #[test]
    fn good_json_decodes() {
        let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j","namespace":"kube-system"},
            "spec":{"containers":[{"name":"c","image":"busybox:1.36"}]}}"#;
        let pod = decode(json).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("j-node1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("kube-system"));
    }

    #[test]
    fn yaml_flow_mapping_starting_with_brace_is_accepted() {
        let text = "{apiVersion: v1, kind: Pod, metadata: {name: f}, spec: {containers: [{name: c, image: x}]}}";
        assert_eq!(
            decode(text).unwrap().metadata.name.as_deref(),
            Some("f-node1")
        );
    }

    #[test]
    fn bad_yaml_reports_decoder_message_with_line() {
        let msg = err("apiVersion: v1\nkind: Pod\nmetadata:\n  name: [oops\n");
        assert!(msg.starts_with(&format!("{PATH}: invalid YAML: ")), "{msg}");
        assert!(msg.contains("line"), "{msg}");
    }

    #[test]
    fn json_syntax_error_reports_json_message() {
        let msg = err("{\"apiVersion\": \"v1\",\n \"kind\": \"Pod\",,}");
        assert!(msg.starts_with(&format!("{PATH}: invalid JSON: ")), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn type_error_in_pod_keeps_position() {
        let msg = err("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: 5\n");
        assert!(msg.contains("invalid Pod (YAML)"), "{msg}");
        assert!(msg.contains("line 6"), "{msg}");
    }

    #[test]
    fn not_a_pod_is_rejected() {
        assert_err(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n",
            "kind: unsupported kind \"Service\"",
        );
        assert_err(
            "apiVersion: v1\nmetadata:\n  name: s\n",
            "kind: required value",
        );
        assert_err(
            "apiVersion: apps/v1\nkind: Pod\nmetadata:\n  name: s\n",
            "apiVersion: unsupported value \"apps/v1\"",
        );
        assert_err("- a\n- b\n", "expected a Pod object, got a list");
        assert_err("just a string\n", "expected a Pod object, got a string");
    }

    #[test]
    fn pod_list_is_rejected() {
        assert_err(
            "apiVersion: v1\nkind: PodList\nitems: []\n",
            "kind: unsupported kind \"PodList\"",
        );
    }

    #[test]
    fn multi_document_yaml_is_rejected_but_trailing_separator_is_fine() {
        let two = format!("{GOOD}---\n{GOOD}");
        assert_err(&two, "found 2 YAML documents");
        let trailing = format!("---\n{GOOD}---\n");
        assert!(decode(&trailing).is_ok());
    }

    #[test]
    fn empty_and_binary_input_are_clear_errors() {
        assert_err("", "empty manifest");
        assert_err("  \n# only a comment\n", "empty manifest");
        let junk: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let msg = decode_static_pod(&junk, Path::new(PATH), NODE)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            format!("{PATH}: not a text manifest: binary data (NUL byte at offset 0)")
        );
        let latin1 = b"apiVersion: v1\nkind: Pod\nname: caf\xe9\n";
        let msg = decode_static_pod(latin1, Path::new(PATH), NODE)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("invalid UTF-8 at byte offset 34"), "{msg}");
    }

    /// A ~1 MB manifest whose anchor `&w` (`wide`) is referenced `refs` times.
    fn alias_bomb(wide: &str, refs: usize) -> String {
        let mut doc = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bomb\n  annotations:\n    a: &w {wide}\nspec:\n  containers:\n  - name: c\n    image: busybox\n    args: ["
        );
        for _ in 0..refs {
            doc.push_str("*w, ");
        }
        doc.push_str("x]\n");
        doc
    }

    #[test]
    fn alias_expansion_is_budgeted_by_size_not_only_count() {
        // One wide scalar, 400 references: 200 MiB expanded from a ~0.5 MB file.
        let wide_scalar = alias_bomb(&"x".repeat(512 * 1024), 400);
        // One wide sequence of 100k nodes, 400 references: 40M nodes.
        let wide_seq = alias_bomb(&format!("[{}0]", "0,".repeat(100_000)), 400);
        for bomb in [wide_scalar, wide_seq] {
            assert!(bomb.len() < 1024 * 1024);
            let started = std::time::Instant::now();
            assert_err(
                &bomb,
                &format!(
                    "document too large with aliases expanded: more than {MAX_EXPANDED_BYTES} bytes or {MAX_EXPANDED_NODES} nodes"
                ),
            );
            // Refused while walking, long before the whole expansion is visited.
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        }
        // Ordinary anchors (a shared env list, a repeated value) still work.
        let shared = GOOD.replace(
            "    image: nginx\n",
            "    image: nginx\n    env: &env\n    - name: A\n      value: &v \"one\"\n    - name: B\n      value: *v\n  - name: sidecar\n    image: nginx\n    env: *env\n",
        );
        let pod = decode(&shared).unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.containers[1].env, spec.containers[0].env);
        assert_eq!(
            spec.containers[0].env.as_ref().unwrap()[1].value.as_deref(),
            Some("one")
        );
    }

    #[test]
    fn deep_nesting_is_refused_in_linear_time() {
        // 100k open brackets (400 kB): libyaml's scanner is quadratic in flow depth, so
        // without the depth check this held the file source for minutes.
        let n = 100_000;
        let flow_seq = format!("{}{}", "[".repeat(n), "]".repeat(n));
        let flow_map = format!("{}1{}", "{a: ".repeat(n), "}".repeat(n));
        let docs = [
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels: {flow_seq}\n"),
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels: {flow_map}\n"),
            // JSON goes to the YAML parser when serde_json refuses it.
            format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":\"x\",\"annotations\":{{\"a\":{flow_seq}}}}}}}"
            ),
        ];
        let block: String = (0..200)
            .map(|i| format!("{}k:\n", "  ".repeat(i + 2)))
            .collect();
        let docs = [
            docs[0].clone(),
            docs[1].clone(),
            docs[2].clone(),
            format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels:\n{block}"),
        ];
        for doc in docs {
            let started = std::time::Instant::now();
            let msg = decode(&doc).unwrap_err().to_string();
            assert!(msg.starts_with(&format!("{PATH}: invalid ")), "{msg}");
            // (serde_json refuses deep JSON by itself, with its own words.)
            assert!(
                msg.contains("nested deeper than 128 levels")
                    || msg.contains("invalid JSON: recursion limit exceeded"),
                "{msg}"
            );
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "took {:?}",
                started.elapsed()
            );
        }
        // As deep as the parser before (serde_yaml_ng) went is not refused for its depth.
        let ok_depth = MAX_YAML_DEPTH - 4;
        let deep_ok = with_container_lines(&format!(
            "    args: {}{}\n",
            "[".repeat(ok_depth),
            "]".repeat(ok_depth)
        ));
        let msg = decode(&deep_ok)
            .map(|_| String::new())
            .unwrap_or_else(|e| e.to_string());
        assert!(!msg.contains("nested deeper"), "{msg}");
    }

    #[test]
    fn node_budget_bounds_json_and_plain_yaml_too() {
        // 1.1M tiny nodes in ~3.3 MB: within the file limit, past the node budget.
        let many = "0,".repeat(1_100_000);
        let json = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{{\"name\":\"x\"}},\"spec\":{{\"containers\":[{{\"name\":\"c\",\"image\":\"i\",\"args\":[{many}0]}}]}}}}"
        );
        assert_err(
            &json,
            &format!(
                "invalid JSON: document too large with aliases expanded: more than {MAX_EXPANDED_BYTES} bytes or {MAX_EXPANDED_NODES} nodes"
            ),
        );
        assert_err(
            &with_container_lines(&format!("    args: [{many}0]\n")),
            "document too large with aliases expanded",
        );
        // Just under: fine (strings: kubelet refuses numbers as args).
        let fewer = "a,".repeat(900_000);
        assert!(decode(&with_container_lines(&format!("    args: [{fewer}a]\n"))).is_ok());
    }

    /// Peak or current resident set (`VmHWM:` / `VmRSS:`) in KiB.
    fn vm_kib(key: &str) -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        line[key.len()..]
            .trim()
            .trim_end_matches(" kB")
            .trim()
            .parse()
            .unwrap()
    }

    /// The measuring half of `yaml_bomb_keeps_memory_flat`, run alone in a child
    /// process so no other test's allocations count.
    #[test]
    #[ignore = "run by yaml_bomb_keeps_memory_flat in a child process"]
    fn decode_peak_rss_child() {
        let Ok(path) = std::env::var(BOMB_CHILD_ENV) else {
            return;
        };
        let bytes = read_manifest(Path::new(&path)).unwrap();
        // Reset the peak to the current RSS (Linux ≥ 4.0), then decode.
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        let before = vm_kib("VmRSS:");
        let result = decode_static_pod(&bytes, Path::new(&path), NODE);
        let peak = vm_kib("VmHWM:");
        println!(
            "DECODE ok={} growth_kib={} err={:?}",
            result.is_ok(),
            peak.saturating_sub(before),
            result.err().map(|e| e.to_string())
        );
    }

    /// Decodes `text` in a child process; (decoded fine, peak RSS growth in KiB).
    fn decode_in_child(text: &str) -> (bool, u64) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("m.yaml");
        std::fs::write(&file, text).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "config::manifest::decode::tests::decode_peak_rss_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(BOMB_CHILD_ENV, &file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("DECODE ").map(|(_, r)| r))
            .unwrap_or_else(|| panic!("child printed no result: {stdout}"));
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .unwrap()
                .to_string()
        };
        (
            field("ok=") == "true",
            field("growth_kib=").parse().unwrap(),
        )
    }

    #[test]
    fn yaml_bomb_keeps_memory_flat() {
        // Control: the meter sees a plain 8 MiB value being decoded (copied into the
        // generic value and the Pod), so a low reading below is not a blind meter.
        let big = GOOD.replace(
            "name: web\n",
            &format!(
                "name: web\n  annotations:\n    a: {}\n",
                "y".repeat(8 << 20)
            ),
        );
        let (ok, control_kib) = decode_in_child(&big);
        assert!(ok, "an 8 MiB value without aliases is within the budget");
        assert!(
            control_kib > 8 * 1024,
            "control grew only {control_kib} KiB"
        );

        // The bomb would expand to 200 MiB; it is refused with the peak barely moving.
        let (ok, bomb_kib) = decode_in_child(&alias_bomb(&"x".repeat(512 * 1024), 400));
        eprintln!("peak RSS growth: 8 MiB control {control_kib} KiB, 200 MiB bomb {bomb_kib} KiB");
        assert!(!ok, "the bomb must be refused");
        // The budget is 10 MiB after expansion; the allocator's arenas add to the
        // peak on a loaded machine (10.3 MiB alone, 16.6 MiB under the whole lib
        // suite), still an eighth of the expansion.
        assert!(
            bomb_kib < 24 * 1024,
            "decoding the bomb grew RSS by {bomb_kib} KiB"
        );
    }
}

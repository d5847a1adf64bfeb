//! One static pod manifest: decode (YAML or JSON), validate, default.
//!
//! Mirrors kubelet's `config/common.go` (`tryDecodeSinglePod` + `applyDefaults`):
//! the API defaults the scheme would apply on decode come first, then a
//! `ValidatePodCreate`-style subset, then the static-pod defaults (UID from a hash,
//! `<name>-<node>`, node binding, config annotations, NoExecute toleration).
//! Everything here is pure so the file source can call it from a blocking task.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, Lifecycle, ObjectFieldSelector, Pod, PodSecurityContext, PodSpec,
    PodStatus, Probe, Toleration, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;

use super::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, FILE_SOURCE};
use crate::hash::Fnv128a;
use crate::quantity;
use crate::safe_path;

/// Largest manifest we read or decode (kubelet's shared decoder has the same ~10 MB cap),
/// so a stray log file or image in the directory cannot eat memory.
pub const MAX_MANIFEST_BYTES: usize = 10 * 1024 * 1024;

/// Longest object name (DNS-1123 subdomain).
const MAX_NAME_LEN: usize = 253;
/// Longest DNS-1123 label (namespaces, container and volume names).
const MAX_LABEL_LEN: usize = 63;
/// Longest `metadata.uid` accepted (a UUID has 36 characters, a derived static pod UID
/// 32): it names directories, so it is kept well below the file name limit.
const MAX_UID_LEN: usize = 128;

/// Why one manifest was rejected. Every variant displays as `<path>: ...` so a log
/// line alone tells the operator which file to fix.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{}: cannot read: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: manifest is larger than {max} bytes", .path.display())]
    TooLarge { path: PathBuf, max: usize },
    #[error("{}: not a regular file (a FIFO, device or socket is never read)", .path.display())]
    NotRegular { path: PathBuf },
    #[error("{}: {message}", .path.display())]
    Decode { path: PathBuf, message: String },
    #[error("{}: {field}: {reason}", .path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        reason: String,
    },
}

impl ManifestError {
    /// The manifest the error is about.
    pub fn path(&self) -> &Path {
        match self {
            ManifestError::Read { path, .. }
            | ManifestError::TooLarge { path, .. }
            | ManifestError::NotRegular { path }
            | ManifestError::Decode { path, .. }
            | ManifestError::Invalid { path, .. } => path,
        }
    }

    /// Whether the file vanished between listing and reading (not worth a warning).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ManifestError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether the failure says nothing about the file (see [`is_transient_io`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, ManifestError::Read { source, .. } if is_transient_io(source))
    }
}

/// Whether an I/O error says nothing about the file: the process or the system ran
/// out of descriptors or memory, or the call was interrupted. A file's last pod must
/// stay; a later read will tell.
pub fn is_transient_io(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    e.raw_os_error().is_some_and(|raw| {
        [
            Errno::MFILE,
            Errno::NFILE,
            Errno::NOMEM,
            Errno::AGAIN,
            Errno::INTR,
            Errno::NOBUFS,
        ]
        .iter()
        .any(|e| e.raw_os_error() == raw)
    })
}

/// Reads a manifest, refusing to read more than [`MAX_MANIFEST_BYTES`].
///
/// Bounded in time too: the open does not wait for a FIFO's writer or a device
/// (`O_NONBLOCK`), and whatever was opened must be a regular file, checked on the
/// open descriptor so a file swapped for a FIFO after the caller's stat is still caught.
pub fn read_manifest(path: &Path) -> Result<Vec<u8>, ManifestError> {
    use std::os::unix::fs::OpenOptionsExt;
    let read_err = |source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    };
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
        .map_err(read_err)?;
    if !file.metadata().map_err(read_err)?.is_file() {
        return Err(ManifestError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::new();
    // One byte past the limit tells "exactly at the limit" from "over it".
    file.take(MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_MANIFEST_BYTES,
        });
    }
    Ok(bytes)
}

/// Decodes, validates and defaults one static pod manifest for `node_name`.
///
/// `path` is the manifest's identity: it goes into error messages and into the UID
/// hash (`file:<path>`), so the same content in two files is two pods.
pub fn decode_static_pod(bytes: &[u8], path: &Path, node_name: &str) -> Result<Pod, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_MANIFEST_BYTES,
        });
    }
    let decode_err = |message: String| ManifestError::Decode {
        path: path.to_path_buf(),
        message,
    };
    let text = as_text(bytes).map_err(decode_err)?;
    let mut pod = parse_pod(text).map_err(|e| match e {
        ParseError::Decode(message) => decode_err(message),
        ParseError::Field(f) => f.at(path),
    })?;
    apply_api_defaults(&mut pod);
    validate_pod(&pod, node_name).map_err(|f| f.at(path))?;
    apply_static_defaults(&mut pod, path, node_name);
    Ok(pod)
}

/// A validation failure before the path is known.
#[derive(Debug)]
struct FieldError {
    field: String,
    reason: String,
}

impl FieldError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }
    fn at(self, path: &Path) -> ManifestError {
        ManifestError::Invalid {
            path: path.to_path_buf(),
            field: self.field,
            reason: self.reason,
        }
    }
}

fn fail<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, FieldError> {
    Err(FieldError::new(field, reason))
}

enum ParseError {
    Decode(String),
    Field(FieldError),
}

impl From<FieldError> for ParseError {
    fn from(f: FieldError) -> Self {
        ParseError::Field(f)
    }
}

/// Rejects binary content up front: the YAML parser's complaint about it would be cryptic.
fn as_text(bytes: &[u8]) -> Result<&str, String> {
    if let Some(at) = bytes.iter().position(|b| *b == 0) {
        return Err(format!(
            "not a text manifest: binary data (NUL byte at offset {at})"
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "not a text manifest: invalid UTF-8 at byte offset {}",
            e.valid_up_to()
        )
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err("empty manifest: expected one Pod".to_string());
    }
    Ok(text)
}

/// Parses to a generic value first (kind/apiVersion/document count checks with clear
/// messages), then decodes the typed Pod from the text so type errors keep line/column.
fn parse_pod(text: &str) -> Result<Pod, ParseError> {
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
                if let Ok((index, value)) = yaml_single_document(text) {
                    check_kind(&value)?;
                    return yaml_pod(text, index);
                }
                return Err(ParseError::Decode(format!("invalid JSON: {json_err}")));
            }
        }
    }
    let (index, value) = yaml_single_document(text)?;
    check_kind(&value)?;
    yaml_pod(text, index)
}

/// Decodes document `index` of `text` as a Pod (`from_str` refuses multi-document
/// input, and a stray leading or trailing `---` makes it that).
fn yaml_pod(text: &str, index: usize) -> Result<Pod, ParseError> {
    let doc = serde_yaml_ng::Deserializer::from_str(text)
        .nth(index)
        .ok_or_else(|| ParseError::Decode("invalid YAML: document vanished".to_string()))?;
    Pod::deserialize(doc).map_err(|e| ParseError::Decode(format!("invalid Pod (YAML): {e}")))
}

/// The index and value of the one non-empty YAML document in `text`; more than one
/// is an error (kubelet would silently take the first, which hides mistakes).
fn yaml_single_document(text: &str) -> Result<(usize, serde_json::Value), ParseError> {
    check_depth(text).map_err(ParseError::Decode)?;
    check_expansion(text)?;
    let mut found = None;
    let mut count = 0;
    for (index, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = serde_json::Value::deserialize(doc)
            .map_err(|e| ParseError::Decode(format!("invalid YAML: {e}")))?;
        if !value.is_null() {
            count += 1;
            found.get_or_insert((index, value));
        }
    }
    match (count, found) {
        (1, Some(found)) => Ok(found),
        (0, _) | (_, None) => Err(ParseError::Decode(
            "empty manifest: expected one Pod".to_string(),
        )),
        (n, _) => Err(ParseError::Decode(format!(
            "found {n} YAML documents: a manifest must hold exactly one Pod"
        ))),
    }
}

/// Deepest nesting of collections a YAML manifest may have: as deep as serde_yaml_ng
/// deserializes at all (its recursion limit), so no manifest it would accept is refused.
pub const MAX_YAML_DEPTH: usize = 128;

/// Refuses YAML nested deeper than [`MAX_YAML_DEPTH`] before serde_yaml_ng sees it.
///
/// serde_yaml_ng applies its depth limit only after libyaml has scanned the whole
/// document, and libyaml's scanner costs time quadratic in the flow depth: a 400 kB
/// `[[[[…` took the file source minutes of CPU, and no other manifest was read meanwhile.
/// This walks libyaml's events (the same scanner, so the same notion of depth) and stops
/// at the first level too deep, which bounds the scan at linear time. Syntax errors are
/// left to the real parse, which reports them with better context.
fn check_depth(text: &str) -> Result<(), String> {
    use std::mem::MaybeUninit;
    use unsafe_libyaml as unsafe_y;
    // SAFETY: the parser is initialised before use and deleted once; it reads `text`
    // only while `text` is borrowed here; every event it fills is deleted once.
    unsafe {
        let mut parser = MaybeUninit::<unsafe_y::yaml_parser_t>::uninit();
        let parser = parser.as_mut_ptr();
        if !unsafe_y::yaml_parser_initialize(parser).ok {
            return Err("invalid YAML: cannot initialise the parser".to_string());
        }
        unsafe_y::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as u64);
        let mut depth = 0usize;
        let result = loop {
            let mut event = MaybeUninit::<unsafe_y::yaml_event_t>::uninit();
            let event = event.as_mut_ptr();
            if !unsafe_y::yaml_parser_parse(parser, event).ok {
                break Ok(());
            }
            let kind = (*event).type_;
            unsafe_y::yaml_event_delete(event);
            match kind {
                unsafe_y::YAML_SEQUENCE_START_EVENT | unsafe_y::YAML_MAPPING_START_EVENT => {
                    depth += 1;
                    if depth > MAX_YAML_DEPTH {
                        break Err(format!(
                            "invalid YAML: nested deeper than {MAX_YAML_DEPTH} levels"
                        ));
                    }
                }
                unsafe_y::YAML_SEQUENCE_END_EVENT | unsafe_y::YAML_MAPPING_END_EVENT => {
                    depth = depth.saturating_sub(1)
                }
                unsafe_y::YAML_STREAM_END_EVENT => break Ok(()),
                _ => {}
            }
        };
        unsafe_y::yaml_parser_delete(parser);
        result
    }
}

/// Most bytes (scalar text plus one per node) all documents of a manifest may
/// expand to once YAML aliases are resolved: no more than a file without aliases
/// may hold, so an anchor referenced many times cannot multiply memory.
pub const MAX_EXPANDED_BYTES: usize = MAX_MANIFEST_BYTES;
/// Most YAML nodes after alias expansion (each becomes an allocated value; real
/// pods have a few thousand).
pub const MAX_EXPANDED_NODES: usize = 1_000_000;

/// Walks every document with aliases expanded, building nothing and charging each
/// node against the budget, so a "billion laughs" file is refused before any value
/// is built (serde_yaml_ng only limits how many aliases are followed, not how much
/// each one expands to). Time is bounded too: every step costs budget.
fn check_expansion(text: &str) -> Result<(), ParseError> {
    let budget = ExpansionBudget::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        serde::de::DeserializeSeed::deserialize(Walk(&budget), doc)
            .map_err(|e| ParseError::Decode(format!("invalid YAML: {e}")))?;
    }
    Ok(())
}

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

/// A serde seed and visitor that only counts (see [`check_expansion`]).
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

// ---------------------------------------------------------------------------
// API defaults (k8s.io/kubernetes/pkg/apis/core/v1/defaults.go), applied on
// decode by kubelet's scheme. Go's zero value means "unset", so empty strings
// and (where Go uses a plain int) zeros count as unset too.

fn unset(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

fn default_str(s: &mut Option<String>, value: &str) {
    if unset(s) {
        *s = Some(value.to_string());
    }
}

fn default_nonzero(v: &mut Option<i32>, value: i32) {
    if matches!(v, None | Some(0)) {
        *v = Some(value);
    }
}

fn apply_api_defaults(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    default_str(&mut spec.restart_policy, "Always");
    default_str(&mut spec.dns_policy, "ClusterFirst");
    default_str(&mut spec.scheduler_name, "default-scheduler");
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.enable_service_links.get_or_insert(true);
    let host_network = spec.host_network.unwrap_or(false);
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        default_container(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    if unset(&c.image_pull_policy) {
        let policy = default_pull_policy(c.image.as_deref().unwrap_or(""));
        c.image_pull_policy = Some(policy.to_string());
    }
    default_str(&mut c.termination_message_path, "/dev/termination-log");
    default_str(&mut c.termination_message_policy, "File");
    for p in c.ports.iter_mut().flatten() {
        default_str(&mut p.protocol, "TCP");
        if host_network && matches!(p.host_port, None | Some(0)) {
            p.host_port = Some(p.container_port);
        }
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lc) = &mut c.lifecycle {
        default_lifecycle(lc);
    }
    for e in c.env.iter_mut().flatten() {
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            default_field_ref(f);
        }
    }
    // Limits without requests mean requests = limits (QoS depends on it).
    if let Some(res) = &mut c.resources
        && let Some(limits) = &res.limits
    {
        let requests = res.requests.get_or_insert_with(BTreeMap::new);
        for (k, v) in limits {
            requests.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// `Always` for `:latest` or an untagged, undigested image; else `IfNotPresent`.
fn default_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.rsplit_once(':').map(|(_, t)| t);
    match tag {
        Some("latest") => "Always",
        None if !digest => "Always",
        _ => "IfNotPresent",
    }
}

fn default_probe(p: &mut Probe) {
    default_nonzero(&mut p.timeout_seconds, 1);
    default_nonzero(&mut p.period_seconds, 10);
    default_nonzero(&mut p.success_threshold, 1);
    default_nonzero(&mut p.failure_threshold, 3);
    if let Some(h) = &mut p.http_get {
        default_http_get(h);
    }
}

fn default_lifecycle(lc: &mut Lifecycle) {
    for h in [&mut lc.post_start, &mut lc.pre_stop].into_iter().flatten() {
        if let Some(g) = &mut h.http_get {
            default_http_get(g);
        }
    }
}

fn default_http_get(h: &mut HTTPGetAction) {
    default_str(&mut h.path, "/");
    default_str(&mut h.scheme, "HTTP");
}

fn default_field_ref(f: &mut ObjectFieldSelector) {
    default_str(&mut f.api_version, "v1");
}

fn default_volume(v: &mut Volume) {
    // A volume with no source is an emptyDir (SetDefaults_Volume).
    let mut probe = v.clone();
    probe.name = String::new();
    if probe == Volume::default() {
        v.empty_dir = Some(Default::default());
    }
    if let Some(hp) = &mut v.host_path
        && hp.type_.is_none()
    {
        hp.type_ = Some(String::new());
    }
    if let Some(d) = &mut v.downward_api {
        d.default_mode.get_or_insert(0o644);
        for item in d.items.iter_mut().flatten() {
            if let Some(f) = &mut item.field_ref {
                default_field_ref(f);
            }
        }
    }
    if let Some(p) = &mut v.projected {
        for src in p.sources.iter_mut().flatten() {
            for item in src
                .downward_api
                .iter_mut()
                .flat_map(|d| d.items.iter_mut().flatten())
            {
                if let Some(f) = &mut item.field_ref {
                    default_field_ref(f);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Validation: the part of ValidatePodCreate that decides whether a static pod can run.

fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL_LEN
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= MAX_NAME_LEN
        && s.split('.')
            .all(|part| !part.is_empty() && is_dns1123_label(part))
}

const LABEL_RULE: &str = "must be a DNS-1123 label (at most 63 lower-case alphanumerics or '-', starting and ending alphanumeric)";
const SUBDOMAIN_RULE: &str = "must be a DNS-1123 subdomain (at most 253 lower-case alphanumerics, '-' or '.', each part starting and ending alphanumeric)";

/// kubelet's env var name rule: `[-._a-zA-Z][-._a-zA-Z0-9]*`.
fn is_env_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || matches!(c, '-' | '.' | '_') || (!first && c.is_ascii_digit())
    };
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

fn one_of(field: &str, value: &Option<String>, allowed: &[&str]) -> Result<(), FieldError> {
    match value.as_deref() {
        None => Ok(()),
        Some(v) if allowed.contains(&v) => Ok(()),
        Some(v) => fail(
            field,
            format!(
                "unsupported value {v:?}: supported values: {}",
                quoted(allowed)
            ),
        ),
    }
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

const API_REF_REASON: &str = "forbidden: static pods may not reference API objects";

fn validate_pod(pod: &Pod, node_name: &str) -> Result<(), FieldError> {
    let meta = &pod.metadata;
    let name = meta.name.as_deref().unwrap_or("");
    if name.is_empty() {
        return fail("metadata.name", "required value");
    }
    if !is_dns1123_subdomain(name) {
        return fail(
            "metadata.name",
            format!("invalid value {name:?}: {SUBDOMAIN_RULE}"),
        );
    }
    let full = static_pod_name(name, node_name);
    if full.len() > MAX_NAME_LEN {
        return fail(
            "metadata.name",
            format!(
                "name plus node suffix {:?} is {} characters, must be no more than {MAX_NAME_LEN}",
                full.strip_prefix(name).unwrap_or(""),
                full.len()
            ),
        );
    }
    if !is_dns1123_subdomain(&full) {
        return fail(
            "metadata.name",
            format!("invalid value {full:?} (name plus node suffix): {SUBDOMAIN_RULE}"),
        );
    }
    if let Some(ns) = meta.namespace.as_deref().filter(|ns| !ns.is_empty())
        && !is_dns1123_label(ns)
    {
        return fail(
            "metadata.namespace",
            format!("invalid value {ns:?}: {LABEL_RULE}"),
        );
    }

    // The UID names `<root>/pods/<uid>` and the log directory, which oxlet (root) creates
    // and removes: it must be one plain path component. It is also printed in every log
    // line about the pod, so whitespace and control characters (a newline would forge
    // log lines) are refused too.
    if let Some(uid) = meta.uid.as_deref().filter(|u| !u.is_empty())
        && (uid.len() > MAX_UID_LEN
            || safe_path::component(uid).is_err()
            || uid.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return fail(
            "metadata.uid",
            format!(
                "invalid value {uid:?}: must be a single path component of at most {MAX_UID_LEN} characters (no '/', not '.' or '..', no whitespace or control characters)"
            ),
        );
    }

    let Some(spec) = &pod.spec else {
        return fail("spec", "required value");
    };
    if spec.containers.is_empty() {
        return fail(
            "spec.containers",
            "required value: a pod needs at least one container",
        );
    }
    one_of(
        "spec.restartPolicy",
        &spec.restart_policy,
        &["Always", "OnFailure", "Never"],
    )?;
    one_of(
        "spec.dnsPolicy",
        &spec.dns_policy,
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    )?;
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        return fail(
            "spec.terminationGracePeriodSeconds",
            format!("invalid value {g}: must be greater than or equal to 0"),
        );
    }
    if let Some(d) = spec.active_deadline_seconds
        && d <= 0
    {
        return fail(
            "spec.activeDeadlineSeconds",
            format!("invalid value {d}: must be greater than 0"),
        );
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return fail(
            "spec.ephemeralContainers",
            "forbidden: cannot be set on create",
        );
    }
    if spec
        .image_pull_secrets
        .as_ref()
        .is_some_and(|s| !s.is_empty())
    {
        return fail(
            "spec.imagePullSecrets",
            format!("{API_REF_REASON} (Secret)"),
        );
    }
    if spec.resource_claims.as_ref().is_some_and(|s| !s.is_empty()) {
        return fail(
            "spec.resourceClaims",
            format!("{API_REF_REASON} (ResourceClaim)"),
        );
    }
    for (field, sa) in [
        ("spec.serviceAccountName", &spec.service_account_name),
        ("spec.serviceAccount", &spec.service_account),
    ] {
        if !unset(sa) {
            return fail(field, format!("{API_REF_REASON} (ServiceAccount)"));
        }
    }

    let mut volumes = HashSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}]");
        validate_volume(v, &field)?;
        if !volumes.insert(v.name.as_str()) {
            return fail(
                format!("{field}.name"),
                format!("duplicate name {:?}", v.name),
            );
        }
    }

    let host_network = spec.host_network.unwrap_or(false);
    let mut names = HashSet::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let ctx = ContainerCtx {
            field: format!("spec.initContainers[{i}]"),
            init: true,
            host_network,
        };
        validate_container(c, &ctx, &mut names, &volumes)?;
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let ctx = ContainerCtx {
            field: format!("spec.containers[{i}]"),
            init: false,
            host_network,
        };
        validate_container(c, &ctx, &mut names, &volumes)?;
    }
    Ok(())
}

fn validate_volume(v: &Volume, field: &str) -> Result<(), FieldError> {
    if v.name.is_empty() {
        return fail(format!("{field}.name"), "required value");
    }
    if !is_dns1123_label(&v.name) {
        return fail(
            format!("{field}.name"),
            format!("invalid value {:?}: {LABEL_RULE}", v.name),
        );
    }
    let forbidden = |what: &str, kind: &str| {
        fail(
            format!("{field}.{what}"),
            format!("{API_REF_REASON} ({kind})"),
        )
    };
    if v.secret.is_some() {
        return forbidden("secret", "Secret");
    }
    if v.config_map.is_some() {
        return forbidden("configMap", "ConfigMap");
    }
    if v.persistent_volume_claim.is_some() {
        return forbidden("persistentVolumeClaim", "PersistentVolumeClaim");
    }
    if let Some(hp) = &v.host_path {
        let hf = |sub: &str| format!("{field}.hostPath.{sub}");
        if hp.path.is_empty() {
            return fail(hf("path"), "required value");
        }
        no_backsteps(&hf("path"), &hp.path)?;
        one_of(&hf("type"), &hp.type_, HOST_PATH_TYPES)?;
    }
    if v.ephemeral.is_some() {
        return forbidden("ephemeral", "PersistentVolumeClaim");
    }
    if v.csi
        .as_ref()
        .is_some_and(|c| c.node_publish_secret_ref.is_some())
    {
        return forbidden("csi.nodePublishSecretRef", "Secret");
    }
    if let Some(p) = &v.projected {
        for (j, src) in p.sources.iter().flatten().enumerate() {
            let at = |what: &str| format!("projected.sources[{j}].{what}");
            if src.secret.is_some() {
                return forbidden(&at("secret"), "Secret");
            }
            if src.config_map.is_some() {
                return forbidden(&at("configMap"), "ConfigMap");
            }
            if src.service_account_token.is_some() {
                return forbidden(&at("serviceAccountToken"), "ServiceAccount token");
            }
            if src.cluster_trust_bundle.is_some() {
                return forbidden(&at("clusterTrustBundle"), "ClusterTrustBundle");
            }
            if src.pod_certificate.is_some() {
                return forbidden(&at("podCertificate"), "PodCertificateRequest");
            }
        }
    }
    Ok(())
}

/// kubelet's `HostPathType` values ("" means no check).
const HOST_PATH_TYPES: &[&str] = &[
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
];

/// kubelet's `validatePathNoBacksteps`: no `..` element.
fn no_backsteps(field: &str, path: &str) -> Result<(), FieldError> {
    if path.split('/').any(|part| part == "..") {
        return fail(
            field,
            format!("invalid value {path:?}: must not contain '..'"),
        );
    }
    Ok(())
}

/// kubelet's `validateLocalDescendingPath` (for `subPath`, `subPathExpr`): relative and
/// without `..`; NUL is refused too, since no path can hold it.
fn local_descending(field: &str, path: &str) -> Result<(), FieldError> {
    if path.starts_with('/') {
        return fail(
            field,
            format!("invalid value {path:?}: must be a relative path"),
        );
    }
    no_backsteps(field, path)?;
    if safe_path::relative(path).is_err() {
        return fail(
            field,
            format!("invalid value {path:?}: must not contain NUL"),
        );
    }
    Ok(())
}

struct ContainerCtx {
    field: String,
    init: bool,
    host_network: bool,
}

fn validate_container<'a>(
    c: &'a Container,
    ctx: &ContainerCtx,
    names: &mut HashSet<&'a str>,
    volumes: &HashSet<&str>,
) -> Result<(), FieldError> {
    let f = |sub: &str| format!("{}.{sub}", ctx.field);
    if c.name.is_empty() {
        return fail(f("name"), "required value");
    }
    if !is_dns1123_label(&c.name) {
        return fail(
            f("name"),
            format!("invalid value {:?}: {LABEL_RULE}", c.name),
        );
    }
    if !names.insert(c.name.as_str()) {
        return fail(f("name"), format!("duplicate name {:?}", c.name));
    }
    match c.image.as_deref() {
        None | Some("") => return fail(f("image"), "required value"),
        Some(img) if img.trim() != img => {
            return fail(f("image"), "must not have leading or trailing whitespace");
        }
        Some(_) => {}
    }
    one_of(
        &f("imagePullPolicy"),
        &c.image_pull_policy,
        &["Always", "IfNotPresent", "Never"],
    )?;
    one_of(
        &f("terminationMessagePolicy"),
        &c.termination_message_policy,
        &["File", "FallbackToLogsOnError"],
    )?;
    let sidecar = ctx.init && c.restart_policy.as_deref() == Some("Always");
    if ctx.init {
        one_of(&f("restartPolicy"), &c.restart_policy, &["Always"])?;
    } else if c.restart_policy.is_some() || c.restart_policy_rules.is_some() {
        return fail(
            f("restartPolicy"),
            "forbidden: only allowed for init containers",
        );
    }

    for (j, p) in c.ports.iter().flatten().enumerate() {
        let pf = |sub: &str| f(&format!("ports[{j}].{sub}"));
        if !(1..=65535).contains(&p.container_port) {
            return fail(
                pf("containerPort"),
                format!(
                    "invalid value {}: must be between 1 and 65535, inclusive",
                    p.container_port
                ),
            );
        }
        if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
            if !(1..=65535).contains(&hp) {
                return fail(
                    pf("hostPort"),
                    format!("invalid value {hp}: must be between 1 and 65535, inclusive"),
                );
            }
            if ctx.host_network && hp != p.container_port {
                return fail(
                    pf("hostPort"),
                    format!(
                        "invalid value {hp}: must match containerPort when hostNetwork is true"
                    ),
                );
            }
        }
        one_of(&pf("protocol"), &p.protocol, &["TCP", "UDP", "SCTP"])?;
    }

    for (j, e) in c.env.iter().flatten().enumerate() {
        let ef = |sub: &str| f(&format!("env[{j}].{sub}"));
        if e.name.is_empty() {
            return fail(ef("name"), "required value");
        }
        if !is_env_var_name(&e.name) {
            return fail(
                ef("name"),
                format!(
                    "invalid value {:?}: a valid environment variable name must consist of alphabetic characters, digits, '_', '-' or '.', and must not start with a digit",
                    e.name
                ),
            );
        }
        if let Some(vf) = &e.value_from {
            if vf.secret_key_ref.is_some() {
                return fail(
                    ef("valueFrom.secretKeyRef"),
                    format!("{API_REF_REASON} (Secret)"),
                );
            }
            if vf.config_map_key_ref.is_some() {
                return fail(
                    ef("valueFrom.configMapKeyRef"),
                    format!("{API_REF_REASON} (ConfigMap)"),
                );
            }
            let sources = [
                vf.field_ref.is_some(),
                vf.resource_field_ref.is_some(),
                vf.file_key_ref.is_some(),
            ]
            .iter()
            .filter(|s| **s)
            .count();
            if sources != 1 {
                return fail(ef("valueFrom"), "must specify exactly one source");
            }
            if !unset(&e.value) {
                return fail(
                    ef("valueFrom"),
                    "may not be specified when `value` is not empty",
                );
            }
        }
    }
    for (j, e) in c.env_from.iter().flatten().enumerate() {
        if e.secret_ref.is_some() {
            return fail(
                f(&format!("envFrom[{j}].secretRef")),
                format!("{API_REF_REASON} (Secret)"),
            );
        }
        if e.config_map_ref.is_some() {
            return fail(
                f(&format!("envFrom[{j}].configMapRef")),
                format!("{API_REF_REASON} (ConfigMap)"),
            );
        }
    }
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mf = |sub: &str| f(&format!("volumeMounts[{j}].{sub}"));
        if !volumes.contains(m.name.as_str()) {
            return fail(
                mf("name"),
                format!("not found: no volume named {:?}", m.name),
            );
        }
        if m.mount_path.is_empty() {
            return fail(mf("mountPath"), "required value");
        }
        let sub_path = m.sub_path.as_deref().unwrap_or("");
        let sub_path_expr = m.sub_path_expr.as_deref().unwrap_or("");
        if !sub_path.is_empty() && !sub_path_expr.is_empty() {
            return fail(
                mf("subPathExpr"),
                format!(
                    "invalid value {sub_path_expr:?}: subPathExpr and subPath are mutually exclusive"
                ),
            );
        }
        if !sub_path.is_empty() {
            local_descending(&mf("subPath"), sub_path)?;
        }
        if !sub_path_expr.is_empty() {
            local_descending(&mf("subPathExpr"), sub_path_expr)?;
        }
    }

    let probes = [
        ("livenessProbe", &c.liveness_probe, true),
        ("readinessProbe", &c.readiness_probe, false),
        ("startupProbe", &c.startup_probe, true),
    ];
    for (name, probe, needs_single_success) in probes {
        let Some(probe) = probe else { continue };
        // Plain init containers run to completion: probes make no sense there.
        if ctx.init && !sidecar {
            return fail(
                f(name),
                "forbidden: may not be set for init containers without restartPolicy=Always",
            );
        }
        // Sidecars are never "ready"-gated the way regular containers are.
        if ctx.init && name == "readinessProbe" {
            continue;
        }
        validate_probe(probe, &f(name), needs_single_success)?;
    }
    if c.lifecycle.is_some() && ctx.init && !sidecar {
        return fail(
            f("lifecycle"),
            "forbidden: may not be set for init containers without restartPolicy=Always",
        );
    }
    validate_resources(c, &f)
}

/// Every quantity parses exactly and is not negative, requests stay within limits,
/// and the cgroup arithmetic accepts cpu and memory: the runtime's own function is
/// asked, so a value refused at container creation is refused here first.
fn validate_resources(c: &Container, f: &dyn Fn(&str) -> String) -> Result<(), FieldError> {
    let Some(res) = &c.resources else {
        return Ok(());
    };
    let parse = |which: &str, name: &str, q: &Quantity| {
        let field = f(&format!("resources.{which}.{name}"));
        let v = if name == "cpu" {
            quantity::milli_cpu(q)
        } else {
            quantity::bytes(q)
        }
        .map_err(|e| FieldError::new(&field, e.to_string()))?;
        if v < 0 {
            return fail(
                field,
                format!(
                    "invalid value {:?}: must be greater than or equal to 0",
                    q.0
                ),
            );
        }
        Ok(v)
    };
    for (name, limit) in res.limits.iter().flatten() {
        parse("limits", name, limit)?;
    }
    for (name, request) in res.requests.iter().flatten() {
        let r = parse("requests", name, request)?;
        if let Some(limit) = res.limits.as_ref().and_then(|l| l.get(name))
            && r > parse("limits", name, limit)?
        {
            return fail(
                f(&format!("resources.requests.{name}")),
                format!(
                    "invalid value {:?}: must be less than or equal to {name} limit of {}",
                    request.0, limit.0
                ),
            );
        }
    }
    crate::runtime::container::linux_resources(c)
        .map_err(|e| FieldError::new(f(&e.field()), e.reason()))?;
    Ok(())
}

fn validate_probe(p: &Probe, field: &str, needs_single_success: bool) -> Result<(), FieldError> {
    let handlers = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ]
    .iter()
    .filter(|h| **h)
    .count();
    match handlers {
        0 => return fail(field, "must specify a handler type"),
        1 => {}
        _ => return fail(field, "may not specify more than 1 handler type"),
    }
    let numbers = [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ];
    for (name, value) in numbers {
        if let Some(v) = value
            && v < 0
        {
            return fail(
                format!("{field}.{name}"),
                format!("invalid value {v}: must be greater than or equal to 0"),
            );
        }
    }
    if needs_single_success
        && let Some(s) = p.success_threshold
        && s != 1
    {
        return fail(
            format!("{field}.successThreshold"),
            format!("invalid value {s}: must be 1"),
        );
    }
    if let Some(g) = p.termination_grace_period_seconds
        && g <= 0
    {
        return fail(
            format!("{field}.terminationGracePeriodSeconds"),
            format!("invalid value {g}: must be greater than 0"),
        );
    }
    if let Some(h) = &p.http_get
        && let IntOrString::Int(port) = h.port
        && !(1..=65535).contains(&port)
    {
        return fail(
            format!("{field}.httpGet.port"),
            format!("invalid value {port}: must be between 1 and 65535, inclusive"),
        );
    }
    if let Some(t) = &p.tcp_socket
        && let IntOrString::Int(port) = t.port
        && !(1..=65535).contains(&port)
    {
        return fail(
            format!("{field}.tcpSocket.port"),
            format!("invalid value {port}: must be between 1 and 65535, inclusive"),
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The canonical form the static pod UID is hashed over. kubelet hashes its Go
// object, where a plain (non-pointer) `bool`, `string` or `int` cannot tell
// "unset" from its zero value: `hostNetwork: false` and no `hostNetwork` are the
// same object there. k8s-openapi makes those fields `Option`s, where `Some(false)`
// and `None` serialize differently, so the zero value of each such field is
// cleared before hashing. Pointer fields in Go (`privileged`, `runAsUser`,
// `allowPrivilegeEscalation`, ...) keep `Some(zero)`: there it means something.

fn clear_str(v: &mut Option<String>) {
    if v.as_deref() == Some("") {
        *v = None;
    }
}

fn clear_bool(v: &mut Option<bool>) {
    if *v == Some(false) {
        *v = None;
    }
}

fn clear_i32(v: &mut Option<i32>) {
    if *v == Some(0) {
        *v = None;
    }
}

fn clear_http_get(h: &mut HTTPGetAction) {
    clear_str(&mut h.host);
    clear_str(&mut h.path);
    clear_str(&mut h.scheme);
}

fn clear_probe(p: &mut Probe) {
    for v in [
        &mut p.initial_delay_seconds,
        &mut p.timeout_seconds,
        &mut p.period_seconds,
        &mut p.success_threshold,
        &mut p.failure_threshold,
    ] {
        clear_i32(v);
    }
    if let Some(h) = &mut p.http_get {
        clear_http_get(h);
    }
    if let Some(t) = &mut p.tcp_socket {
        clear_str(&mut t.host);
    }
}

fn clear_container(c: &mut Container) {
    for v in [
        &mut c.image,
        &mut c.working_dir,
        &mut c.termination_message_path,
        &mut c.termination_message_policy,
        &mut c.image_pull_policy,
    ] {
        clear_str(v);
    }
    for v in [&mut c.stdin, &mut c.stdin_once, &mut c.tty] {
        clear_bool(v);
    }
    for p in c.ports.iter_mut().flatten() {
        clear_str(&mut p.name);
        clear_str(&mut p.host_ip);
        clear_str(&mut p.protocol);
        clear_i32(&mut p.host_port);
    }
    for e in c.env.iter_mut().flatten() {
        clear_str(&mut e.value);
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            clear_str(&mut f.api_version);
        }
    }
    for m in c.volume_mounts.iter_mut().flatten() {
        clear_bool(&mut m.read_only);
        clear_str(&mut m.sub_path);
        clear_str(&mut m.sub_path_expr);
    }
    for p in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        clear_probe(p);
    }
    if let Some(lc) = &mut c.lifecycle {
        for h in [&mut lc.post_start, &mut lc.pre_stop].into_iter().flatten() {
            if let Some(g) = &mut h.http_get {
                clear_http_get(g);
            }
            if let Some(t) = &mut h.tcp_socket {
                clear_str(&mut t.host);
            }
        }
    }
}

/// Clears the zero values of Go's value-typed fields (see above), in place.
fn canonical_for_hash(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    for v in [
        &mut meta.name,
        &mut meta.generate_name,
        &mut meta.namespace,
        &mut meta.uid,
        &mut meta.resource_version,
        &mut meta.self_link,
    ] {
        clear_str(v);
    }
    if meta.generation == Some(0) {
        meta.generation = None;
    }
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    for v in [
        &mut spec.restart_policy,
        &mut spec.dns_policy,
        &mut spec.service_account_name,
        &mut spec.service_account,
        &mut spec.node_name,
        &mut spec.hostname,
        &mut spec.subdomain,
        &mut spec.scheduler_name,
        &mut spec.priority_class_name,
    ] {
        clear_str(v);
    }
    for v in [
        &mut spec.host_network,
        &mut spec.host_pid,
        &mut spec.host_ipc,
    ] {
        clear_bool(v);
    }
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        clear_container(c);
    }
    for t in spec.tolerations.iter_mut().flatten() {
        for v in [&mut t.key, &mut t.operator, &mut t.value, &mut t.effect] {
            clear_str(v);
        }
    }
    for v in spec.volumes.iter_mut().flatten() {
        if let Some(e) = &mut v.empty_dir {
            clear_str(&mut e.medium);
        }
    }
    if let Some(sc) = &mut spec.security_context
        && let Some(se) = &mut sc.se_linux_options
    {
        for v in [&mut se.user, &mut se.role, &mut se.type_, &mut se.level] {
            clear_str(v);
        }
    }
}

// ---------------------------------------------------------------------------
// Static pod defaults (kubelet's `applyDefaults`).

/// `<name>-<node lower-cased>`: static pods from different nodes never collide.
fn static_pod_name(name: &str, node_name: &str) -> String {
    format!("{name}-{}", node_name.to_lowercase())
}

/// The UID kubelet would derive: FNV-128a over the (API-defaulted) pod, the node and
/// the file, so an edit, another node or another file each give a different UID.
/// The pod is hashed in its [`canonical_for_hash`] form, so spelling out a default
/// (`hostNetwork: false`) is not an edit.
fn static_pod_uid(pod: &Pod, path: &Path, node_name: &str) -> String {
    let mut canonical = pod.clone();
    canonical_for_hash(&mut canonical);
    let mut h = Fnv128a::default();
    // Serializing a Pod (string-keyed, ordered maps) cannot fail.
    h.write(&serde_json::to_vec(&canonical).unwrap_or_default());
    h.write(b"host:");
    h.write(node_name.as_bytes());
    h.write(b"file:");
    h.write(path.as_os_str().as_bytes());
    h.hex()
}

fn apply_static_defaults(pod: &mut Pod, path: &Path, node_name: &str) {
    if unset(&pod.metadata.uid) {
        pod.metadata.uid = Some(static_pod_uid(pod, path, node_name));
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let meta = &mut pod.metadata;
    meta.name = Some(static_pod_name(
        meta.name.as_deref().unwrap_or(""),
        node_name,
    ));
    default_str(&mut meta.namespace, "default");
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), uid);
    annotations.insert(
        CONFIG_SOURCE_ANNOTATION.to_string(),
        FILE_SOURCE.to_string(),
    );

    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    spec.node_name = Some(node_name.to_string());
    // Static pods must survive node taints (kubelet adds this to every file pod).
    let tolerate_all = Toleration {
        operator: Some("Exists".to_string()),
        effect: Some("NoExecute".to_string()),
        ..Default::default()
    };
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let same = |t: &Toleration| {
        unset(&t.key)
            && t.operator.as_deref() == Some("Exists")
            && t.effect.as_deref() == Some("NoExecute")
            && unset(&t.value)
    };
    if let Some(existing) = tolerations.iter_mut().find(|t| same(t)) {
        *existing = tolerate_all;
    } else {
        tolerations.push(tolerate_all);
    }
    pod.status.get_or_insert_with(PodStatus::default).phase = Some("Pending".to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/etc/pods/a.yaml";
    const NODE: &str = "Node1";

    const GOOD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: nginx
    image: nginx
    ports:
    - containerPort: 80
"#;

    fn decode(text: &str) -> Result<Pod, ManifestError> {
        decode_static_pod(text.as_bytes(), Path::new(PATH), NODE)
    }

    fn err(text: &str) -> String {
        match decode(text) {
            Ok(p) => panic!("expected an error, got pod {:?}", p.metadata.name),
            Err(e) => e.to_string(),
        }
    }

    /// GOOD with `extra` appended under the first container (indented 4).
    fn with_container_lines(extra: &str) -> String {
        format!("{GOOD}{extra}")
    }

    fn assert_err(text: &str, expected: &str) {
        let msg = err(text);
        assert!(
            msg.starts_with(&format!("{PATH}: ")),
            "message does not start with the path: {msg}"
        );
        assert!(
            msg.contains(expected),
            "{msg:?} does not contain {expected:?}"
        );
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
        for doc in docs {
            let started = std::time::Instant::now();
            let msg = decode(&doc).unwrap_err().to_string();
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
        // As deep as serde_yaml_ng goes is not refused for its depth.
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
        // Just under: fine.
        let fewer = "0,".repeat(900_000);
        assert!(decode(&with_container_lines(&format!("    args: [{fewer}0]\n"))).is_ok());
    }

    const BOMB_CHILD_ENV: &str = "OXLET_TEST_DECODE_FILE";

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
                "config::manifest::tests::decode_peak_rss_child",
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
        assert!(
            bomb_kib < 16 * 1024,
            "decoding the bomb grew RSS by {bomb_kib} KiB"
        );
    }

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.yaml");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let zero = dir.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        // In a thread: a blocking open of a FIFO without a writer would hang forever.
        let (tx, rx) = std::sync::mpsc::channel();
        let paths = [fifo.clone(), zero.clone()];
        std::thread::spawn(move || {
            for p in paths {
                tx.send(read_manifest(&p).map(|_| ()).map_err(|e| e.to_string()))
                    .unwrap();
            }
        });
        for p in [fifo, zero] {
            let got = rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .expect("read blocked");
            assert_eq!(
                got,
                Err(format!(
                    "{}: not a regular file (a FIFO, device or socket is never read)",
                    p.display()
                ))
            );
        }
    }

    #[test]
    fn over_large_input_is_rejected() {
        let mut big = GOOD.as_bytes().to_vec();
        big.resize(MAX_MANIFEST_BYTES + 1, b' ');
        let msg = decode_static_pod(&big, Path::new(PATH), NODE)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            format!("{PATH}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.yaml");
        std::fs::write(&file, &big).unwrap();
        let e = read_manifest(&file).unwrap_err();
        assert!(matches!(e, ManifestError::TooLarge { .. }), "{e}");
        big.truncate(MAX_MANIFEST_BYTES);
        std::fs::write(&file, &big).unwrap();
        assert_eq!(read_manifest(&file).unwrap().len(), MAX_MANIFEST_BYTES);
        assert!(decode_static_pod(&big, &file, NODE).is_ok());
    }

    #[test]
    fn missing_or_bad_names_are_rejected() {
        assert_err(
            "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec:\n  containers: [{name: c, image: x}]\n",
            "metadata.name: required value",
        );
        assert_err(
            &GOOD.replace("name: web", "name: Web"),
            "metadata.name: invalid value \"Web\"",
        );
        assert_err(
            &GOOD.replace("name: web", "name: web\n  namespace: Kube_System"),
            "metadata.namespace: invalid value \"Kube_System\"",
        );
        // Valid on its own (249 characters), too long once "-node1" is appended.
        let long = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(57));
        assert!(is_dns1123_subdomain(&long));
        assert_err(
            &GOOD.replace("name: web", &format!("name: {long}")),
            "metadata.name: name plus node suffix \"-node1\" is 255 characters",
        );
        let msg = decode_static_pod(GOOD.as_bytes(), Path::new(PATH), "node_1")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("metadata.name: invalid value \"web-node_1\" (name plus node suffix)"),
            "{msg}"
        );
        assert_err(
            &GOOD.replace("name: nginx", "name: Nginx_1"),
            "spec.containers[0].name: invalid value \"Nginx_1\"",
        );
    }

    #[test]
    fn no_containers_is_rejected() {
        assert_err(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: []\n",
            "spec.containers: required value",
        );
        assert_err(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n",
            "spec.containers: required value",
        );
    }

    #[test]
    fn duplicate_container_names_are_rejected() {
        let text = with_container_lines(
            "  - name: sidecar\n    image: b\n  - name: nginx\n    image: c\n",
        );
        assert_eq!(
            err(&text),
            format!("{PATH}: spec.containers[2].name: duplicate name \"nginx\"")
        );
        let text = GOOD.replace(
            "spec:\n",
            "spec:\n  initContainers:\n  - name: nginx\n    image: init\n",
        );
        assert_eq!(
            err(&text),
            format!("{PATH}: spec.containers[0].name: duplicate name \"nginx\"")
        );
    }

    #[test]
    fn container_field_checks() {
        assert_err(
            &GOOD.replace("    image: nginx\n", ""),
            "spec.containers[0].image: required value",
        );
        assert_err(
            &with_container_lines("    imagePullPolicy: Sometimes\n"),
            "spec.containers[0].imagePullPolicy: unsupported value \"Sometimes\"",
        );
        assert_err(
            &GOOD.replace("containerPort: 80", "containerPort: 70000"),
            "spec.containers[0].ports[0].containerPort: invalid value 70000",
        );
        assert_err(
            &GOOD.replace(
                "containerPort: 80",
                "containerPort: 80\n      protocol: HTTP",
            ),
            "spec.containers[0].ports[0].protocol: unsupported value \"HTTP\"",
        );
        assert_err(
            &with_container_lines("    env:\n    - name: 1BAD\n      value: x\n"),
            "spec.containers[0].env[0].name: invalid value \"1BAD\"",
        );
        assert!(
            decode(&with_container_lines(
                "    env:\n    - name: a.b-c_D9\n      value: x\n"
            ))
            .is_ok()
        );
        assert_err(
            &with_container_lines("    restartPolicy: Always\n"),
            "spec.containers[0].restartPolicy: forbidden",
        );
    }

    #[test]
    fn resource_quantities_are_checked_exactly() {
        let res = |body: &str| with_container_lines(&format!("    resources:\n{body}"));
        assert_err(
            &res("      limits:\n        memory: 8Ei\n"),
            &format!(
                "spec.containers[0].resources.limits.memory: \"8Ei\" is too large: it must be at most {} bytes",
                i64::MAX
            ),
        );
        // Fits as millicores, but not as a CFS quota: the runtime's arithmetic says no.
        assert_err(
            &res("      limits:\n        cpu: 100T\n"),
            "spec.containers[0].resources.limits.cpu: 100000000000000000m is too large for a CFS quota",
        );
        assert_err(
            &res("      requests:\n        cpu: 10E\n"),
            "spec.containers[0].resources.requests.cpu: \"10E\" is too large",
        );
        assert_err(
            &res("      requests:\n        memory: lots\n"),
            "spec.containers[0].resources.requests.memory: \"lots\" is not a quantity",
        );
        assert_err(
            &res("      requests:\n        memory: -1Mi\n"),
            "spec.containers[0].resources.requests.memory: invalid value \"-1Mi\": must be greater than or equal to 0",
        );
        assert_err(
            &res("      requests:\n        cpu: \"2\"\n      limits:\n        cpu: 1500m\n"),
            "spec.containers[0].resources.requests.cpu: invalid value \"2\": must be less than or equal to cpu limit of 1500m",
        );
        // Init containers are checked too.
        let init = GOOD.replace(
            "  containers:\n",
            "  initContainers:\n  - name: i\n    image: busybox\n    resources:\n      limits:\n        memory: 9Ei\n  containers:\n",
        );
        assert_err(
            &init,
            "spec.initContainers[0].resources.limits.memory: \"9Ei\" is too large",
        );
        // Exact values that floats would get wrong are fine; equal request and limit too.
        assert!(decode(&res("      requests:\n        cpu: \"0.3\"\n      limits:\n        cpu: 300m\n        memory: 7Ei\n")).is_ok());
    }

    #[test]
    fn pod_field_checks() {
        assert_err(
            &format!("{GOOD}  restartPolicy: Sometimes\n"),
            "spec.restartPolicy: unsupported value \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
        );
        assert_err(
            &format!("{GOOD}  terminationGracePeriodSeconds: -1\n"),
            "spec.terminationGracePeriodSeconds: invalid value -1",
        );
    }

    #[test]
    fn probe_checks() {
        let probe = |extra: &str| {
            with_container_lines(&format!(
                "    livenessProbe:\n      tcpSocket:\n        port: 80\n{extra}"
            ))
        };
        assert!(decode(&probe("")).is_ok());
        assert_err(
            &probe("      periodSeconds: -5\n"),
            "spec.containers[0].livenessProbe.periodSeconds: invalid value -5",
        );
        assert_err(
            &probe("      successThreshold: 2\n"),
            "spec.containers[0].livenessProbe.successThreshold: invalid value 2: must be 1",
        );
        let readiness = with_container_lines(
            "    readinessProbe:\n      exec:\n        command: [/bin/true]\n      successThreshold: 2\n",
        );
        assert!(decode(&readiness).is_ok());
        assert_err(
            &with_container_lines("    startupProbe:\n      periodSeconds: 3\n"),
            "spec.containers[0].startupProbe: must specify a handler type",
        );
    }

    #[test]
    fn api_object_references_are_rejected() {
        let secret_volume =
            format!("{GOOD}  volumes:\n  - name: creds\n    secret:\n      secretName: s\n");
        assert_eq!(
            err(&secret_volume),
            format!(
                "{PATH}: spec.volumes[0].secret: forbidden: static pods may not reference API objects (Secret)"
            )
        );
        assert_err(
            &format!("{GOOD}  volumes:\n  - name: cfg\n    configMap:\n      name: c\n"),
            "spec.volumes[0].configMap: forbidden",
        );
        assert_err(
            &format!(
                "{GOOD}  volumes:\n  - name: d\n    persistentVolumeClaim:\n      claimName: c\n"
            ),
            "spec.volumes[0].persistentVolumeClaim: forbidden",
        );
        assert_err(
            &format!(
                "{GOOD}  volumes:\n  - name: t\n    projected:\n      sources:\n      - serviceAccountToken:\n          path: token\n"
            ),
            "spec.volumes[0].projected.sources[0].serviceAccountToken: forbidden",
        );
        assert_err(
            &with_container_lines(
                "    env:\n    - name: PW\n      valueFrom:\n        secretKeyRef:\n          name: s\n          key: k\n",
            ),
            "spec.containers[0].env[0].valueFrom.secretKeyRef: forbidden",
        );
        assert_err(
            &with_container_lines(
                "    env:\n    - name: C\n      valueFrom:\n        configMapKeyRef:\n          name: s\n          key: k\n",
            ),
            "spec.containers[0].env[0].valueFrom.configMapKeyRef: forbidden",
        );
        assert_err(
            &with_container_lines("    envFrom:\n    - secretRef:\n        name: s\n"),
            "spec.containers[0].envFrom[0].secretRef: forbidden",
        );
        assert_err(
            &with_container_lines("    envFrom:\n    - configMapRef:\n        name: s\n"),
            "spec.containers[0].envFrom[0].configMapRef: forbidden",
        );
    }

    #[test]
    fn volume_mounts_must_name_a_volume() {
        assert_err(
            &with_container_lines("    volumeMounts:\n    - name: data\n      mountPath: /data\n"),
            "spec.containers[0].volumeMounts[0].name: not found",
        );
        let ok = format!(
            "{}  volumes:\n  - name: data\n",
            with_container_lines("    volumeMounts:\n    - name: data\n      mountPath: /data\n")
        );
        let pod = decode(&ok).unwrap();
        let v = &pod.spec.unwrap().volumes.unwrap()[0];
        assert!(
            v.empty_dir.is_some(),
            "a volume without a source defaults to emptyDir"
        );
    }

    #[test]
    fn uid_is_deterministic_and_changes_with_content_node_and_path() {
        let a = decode(GOOD).unwrap().metadata.uid.unwrap();
        let b = decode(GOOD).unwrap().metadata.uid.unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        let edited = decode(&GOOD.replace("image: nginx", "image: nginx:1.27"))
            .unwrap()
            .metadata
            .uid
            .unwrap();
        assert_ne!(a, edited);
        let other_node = decode_static_pod(GOOD.as_bytes(), Path::new(PATH), "node2")
            .unwrap()
            .metadata
            .uid
            .unwrap();
        assert_ne!(a, other_node);
        let other_file = decode_static_pod(GOOD.as_bytes(), Path::new("/etc/pods/b.yaml"), NODE)
            .unwrap()
            .metadata
            .uid
            .unwrap();
        assert_ne!(a, other_file);
        // Explicit and implicit defaults describe the same pod.
        let explicit = decode(&format!("{GOOD}  restartPolicy: Always\n"))
            .unwrap()
            .metadata
            .uid
            .unwrap();
        assert_eq!(a, explicit);
    }

    /// GOOD with every default it leaves out spelled out (API defaults, and Go zero
    /// values of plain fields): the same pod, so the same UID (kubelet hashes its Go
    /// object, where these cannot be told apart).
    const GOOD_EXPLICIT: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: ""
spec:
  hostNetwork: false
  hostPID: false
  hostIPC: false
  restartPolicy: Always
  dnsPolicy: ClusterFirst
  schedulerName: default-scheduler
  terminationGracePeriodSeconds: 30
  enableServiceLinks: true
  securityContext: {}
  serviceAccountName: ""
  containers:
  - name: nginx
    image: nginx
    imagePullPolicy: Always
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
    workingDir: ""
    stdin: false
    tty: false
    ports:
    - containerPort: 80
      protocol: TCP
      hostPort: 0
"#;

    #[test]
    fn spelled_out_defaults_keep_the_uid() {
        let implicit = decode(GOOD).unwrap();
        let explicit = decode(GOOD_EXPLICIT).unwrap();
        assert_eq!(implicit.metadata.uid, explicit.metadata.uid);
        // One default at a time, too (each must be neutral on its own).
        for extra in [
            "  hostNetwork: false\n",
            "  dnsPolicy: ClusterFirst\n",
            "  terminationGracePeriodSeconds: 30\n",
            "  restartPolicy: Always\n",
        ] {
            let uid = decode(&format!("{GOOD}{extra}")).unwrap().metadata.uid;
            assert_eq!(uid, implicit.metadata.uid, "{extra}");
        }
        let pull =
            decode(&GOOD.replace("image: nginx", "image: nginx\n    imagePullPolicy: Always"))
                .unwrap()
                .metadata
                .uid;
        assert_eq!(pull, implicit.metadata.uid);
    }

    #[test]
    fn non_default_values_change_the_uid() {
        let base = decode(GOOD).unwrap().metadata.uid;
        for extra in [
            "  hostNetwork: true\n",
            "  terminationGracePeriodSeconds: 0\n",
            "  restartPolicy: Never\n",
        ] {
            let uid = decode(&format!("{GOOD}{extra}")).unwrap().metadata.uid;
            assert_ne!(uid, base, "{extra}");
        }
        let pull =
            decode(&GOOD.replace("image: nginx", "image: nginx\n    imagePullPolicy: Never"))
                .unwrap()
                .metadata
                .uid;
        assert_ne!(pull, base);
        // A Go pointer field: `false` is not "unset" (nil allowPrivilegeEscalation
        // means allowed), so spelling it out is a real edit.
        let ape = decode(&GOOD.replace(
            "image: nginx",
            "image: nginx\n    securityContext:\n      allowPrivilegeEscalation: false",
        ))
        .unwrap()
        .metadata
        .uid;
        assert_ne!(ape, base);
    }

    #[test]
    fn explicit_uid_is_kept() {
        let pod = decode(&GOOD.replace("name: web", "name: web\n  uid: my-uid")).unwrap();
        assert_eq!(pod.metadata.uid.as_deref(), Some("my-uid"));
        let ann = pod.metadata.annotations.unwrap();
        assert_eq!(ann[CONFIG_HASH_ANNOTATION], "my-uid");
    }

    #[test]
    fn unsafe_uids_are_rejected() {
        let with_uid = |uid: &str| GOOD.replace("name: web", &format!("name: web\n  uid: {uid:?}"));
        for bad in [
            "../../x",
            "/tmp/victim",
            "..",
            ".",
            "a/b",
            "x\u{0}y",
            "a\nb",
            " ",
            "a b",
            "a\tb",
        ] {
            assert_err(&with_uid(bad), "metadata.uid: invalid value");
        }
        assert_err(&with_uid(&"u".repeat(129)), "metadata.uid: invalid value");
        assert!(decode(&with_uid("0b0e2c8e-5b1a-4f6e-9d3e-2b1f0c9a7e11")).is_ok());
        assert!(
            decode(&with_uid("...")).is_ok(),
            "three dots is a plain name"
        );
        assert!(decode(&with_uid("")).is_ok(), "empty: derived");
    }

    #[test]
    fn host_path_volumes_are_validated_as_kubelet_does() {
        let host = |path: &str, type_: &str| {
            format!("{GOOD}  volumes:\n  - name: h\n    hostPath:\n      path: {path:?}\n{type_}")
        };
        assert!(decode(&host("/var/data", "")).is_ok());
        for t in HOST_PATH_TYPES.iter().filter(|t| !t.is_empty()) {
            assert!(
                decode(&host("/var/data", &format!("      type: {t}\n"))).is_ok(),
                "{t}"
            );
        }
        assert_err(
            &host("", ""),
            "spec.volumes[0].hostPath.path: required value",
        );
        assert_err(
            &host("/var/../etc", ""),
            "spec.volumes[0].hostPath.path: invalid value \"/var/../etc\": must not contain '..'",
        );
        assert_err(&host("..", ""), "must not contain '..'");
        assert_err(
            &host("/var/data", "      type: Dir\n"),
            "spec.volumes[0].hostPath.type: unsupported value \"Dir\"",
        );
        assert!(
            decode(&host("/var/a..b", "")).is_ok(),
            "'..' inside a name is fine"
        );
    }

    #[test]
    fn sub_paths_must_stay_inside_the_volume() {
        let mount = |extra: &str| {
            format!(
                "{}  volumes:\n  - name: data\n    emptyDir: {{}}\n",
                with_container_lines(&format!(
                    "    volumeMounts:\n    - name: data\n      mountPath: /data\n{extra}"
                ))
            )
        };
        assert!(decode(&mount("      subPath: a/b\n")).is_ok());
        assert!(decode(&mount("      subPath: ./a..b\n")).is_ok());
        assert_err(
            &mount("      subPath: /etc\n"),
            "spec.containers[0].volumeMounts[0].subPath: invalid value \"/etc\": must be a relative path",
        );
        for bad in ["..", "../x", "a/../../x", "a/.."] {
            assert_err(
                &mount(&format!("      subPath: {bad:?}\n")),
                "spec.containers[0].volumeMounts[0].subPath: invalid value",
            );
        }
        assert_err(
            &mount("      subPathExpr: ../$(POD)\n"),
            "volumeMounts[0].subPathExpr: invalid value \"../$(POD)\": must not contain '..'",
        );
        assert_err(
            &mount("      subPath: a\n      subPathExpr: b\n"),
            "subPathExpr and subPath are mutually exclusive",
        );
    }

    #[test]
    fn annotations_and_toleration() {
        let pod =
            decode(&GOOD.replace("name: web", "name: web\n  annotations:\n    team: a")).unwrap();
        let uid = pod.metadata.uid.clone().unwrap();
        let ann = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[CONFIG_HASH_ANNOTATION], uid);
        assert_eq!(ann[CONFIG_SOURCE_ANNOTATION], "file");
        assert_eq!(ann["team"], "a");
        let tolerations = pod.spec.as_ref().unwrap().tolerations.as_ref().unwrap();
        assert_eq!(
            tolerations,
            &vec![Toleration {
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                ..Default::default()
            }]
        );
        // Already present: not duplicated.
        let text = format!("{GOOD}  tolerations:\n  - operator: Exists\n    effect: NoExecute\n");
        let pod = decode(&text).unwrap();
        assert_eq!(pod.spec.unwrap().tolerations.unwrap().len(), 1);
    }

    #[test]
    fn pod_level_defaults() {
        let spec = decode(GOOD).unwrap().spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.security_context, Some(PodSecurityContext::default()));
        assert_eq!(spec.enable_service_links, Some(true));
        // Set values are kept.
        let spec = decode(&format!(
            "{GOOD}  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  enableServiceLinks: false\n"
        ))
        .unwrap()
        .spec
        .unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        assert_eq!(spec.enable_service_links, Some(false));
    }

    #[test]
    fn container_defaults() {
        let text = format!(
            "{GOOD}  initContainers:\n  - name: init\n    image: busybox@sha256:{}\n",
            "a".repeat(64)
        );
        let spec = decode(&text).unwrap().spec.unwrap();
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        let port = &c.ports.as_ref().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
        assert_eq!(port.host_port, None);
        let init = &spec.init_containers.unwrap()[0];
        assert_eq!(init.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            init.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
    }

    #[test]
    fn pull_policy_default_follows_the_tag() {
        for (image, policy) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/nginx", "Always"),
            ("localhost:5000/nginx:1.0", "IfNotPresent"),
            ("nginx@sha256:abc", "IfNotPresent"),
            ("nginx:latest@sha256:abc", "Always"),
            ("registry.k8s.io/pause:3.10", "IfNotPresent"),
        ] {
            assert_eq!(default_pull_policy(image), policy, "{image}");
        }
        let pod = decode(&with_container_lines("    imagePullPolicy: Never\n")).unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image_pull_policy.as_deref(),
            Some("Never")
        );
    }

    #[test]
    fn host_network_copies_container_port_to_host_port() {
        let pod = decode(&format!("{GOOD}  hostNetwork: true\n")).unwrap();
        let spec = pod.spec.unwrap();
        let port = &spec.containers[0].ports.as_ref().unwrap()[0];
        assert_eq!(port.host_port, Some(80));
    }

    #[test]
    fn probe_and_env_defaults() {
        let text = with_container_lines(concat!(
            "    livenessProbe:\n      httpGet:\n        port: 80\n",
            "    readinessProbe:\n      tcpSocket:\n        port: 80\n      timeoutSeconds: 5\n",
            "    lifecycle:\n      preStop:\n        httpGet:\n          port: 80\n",
            "    env:\n    - name: NODE\n      valueFrom:\n        fieldRef:\n          fieldPath: spec.nodeName\n",
            "    resources:\n      limits:\n        cpu: 500m\n",
        ));
        let c = decode(&text).unwrap().spec.unwrap().containers.remove(0);
        let live = c.liveness_probe.unwrap();
        assert_eq!(live.timeout_seconds, Some(1));
        assert_eq!(live.period_seconds, Some(10));
        assert_eq!(live.success_threshold, Some(1));
        assert_eq!(live.failure_threshold, Some(3));
        let get = live.http_get.unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTP"));
        assert_eq!(get.path.as_deref(), Some("/"));
        let ready = c.readiness_probe.unwrap();
        assert_eq!(ready.timeout_seconds, Some(5));
        assert_eq!(ready.period_seconds, Some(10));
        let pre_stop = c.lifecycle.unwrap().pre_stop.unwrap().http_get.unwrap();
        assert_eq!(pre_stop.path.as_deref(), Some("/"));
        let field_ref = c.env.unwrap()[0]
            .value_from
            .clone()
            .unwrap()
            .field_ref
            .unwrap();
        assert_eq!(field_ref.api_version.as_deref(), Some("v1"));
        let requests = c.resources.unwrap().requests.unwrap();
        assert_eq!(requests["cpu"].0, "500m");
    }

    #[test]
    fn init_container_probes_need_sidecar_policy() {
        let base = GOOD.replace(
            "spec:\n",
            "spec:\n  initContainers:\n  - name: init\n    image: i\n    startupProbe:\n      exec:\n        command: [/bin/true]\n",
        );
        assert_err(&base, "spec.initContainers[0].startupProbe: forbidden");
        let sidecar = base.replace(
            "    image: i\n",
            "    image: i\n    restartPolicy: Always\n",
        );
        assert!(decode(&sidecar).is_ok());
    }
}

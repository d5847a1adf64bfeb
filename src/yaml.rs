//! YAML read as kubelet reads it, in pure Rust and within explicit budgets.
//!
//! kubelet turns YAML into JSON with sigs.k8s.io/yaml (go-yaml v2 underneath) and then
//! decodes the JSON into typed objects. This room does the first half: text to one
//! `serde_json::Value` per document, with go-yaml v2's YAML 1.1 rules for plain scalars
//! ([`resolve_plain`], the one place they live) and sigs.k8s.io/yaml's for map keys
//! ([`key_text`]). So `defaultMode: 0644` is 420, `value: yes` is a boolean (which a
//! string field then refuses, as kubelet's JSON decoder does) and `on:` is the key
//! `"true"`. The events come from granit-parser, serde-saphyr's own parser (pure Rust,
//! no `unsafe`); every budget in [`Limits`] is charged while the value is built, so no
//! input makes it allocate or work past its budget.
//!
//! Where oxlet is stricter than kubelet, on purpose: a key written twice in one mapping
//! is refused (go-yaml v2 keeps the last, which hides the first from a reader), and so
//! is an integer too large for 64 bits (kubelet keeps it as a big number).

use std::collections::HashMap;

use serde_json::{Map, Number, Value};
use serde_saphyr::granit_parser::{self as granit, Event, Parser, ScalarStyle, Span, Tag};

/// What one read may cost. Nodes and bytes are counted after alias expansion
/// (bytes: scalar text plus one per node), so an anchor referenced many times is
/// charged every time it is copied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Deepest nesting of sequences and mappings.
    pub(crate) depth: usize,
    /// Most nodes, aliases expanded.
    pub(crate) nodes: usize,
    /// Most bytes, aliases expanded.
    pub(crate) bytes: usize,
    /// Most alias references (`*name`).
    pub(crate) aliases: usize,
    /// Most documents in the stream, empty ones included.
    pub(crate) documents: usize,
}

/// The budgets of a small config file read once at start (the KubeletConfiguration,
/// the node SLO): a few hundred nodes a few levels deep, bytes well past what the
/// callers read.
pub(crate) const CONFIG_LIMITS: Limits = Limits {
    depth: 32,
    nodes: 100_000,
    bytes: 4 << 20,
    aliases: 1_000,
    documents: 4,
};

/// Why a text was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Problem {
    #[error("{0}")]
    Syntax(String),
    #[error("nested deeper than {0} levels")]
    TooDeep(usize),
    #[error("document too large with aliases expanded: more than {bytes} bytes or {nodes} nodes")]
    TooLarge { bytes: usize, nodes: usize },
    #[error("more than {0} aliases")]
    TooManyAliases(usize),
    #[error("more than {0} YAML documents")]
    TooManyDocuments(usize),
    #[error("{0}")]
    Value(String),
    #[error(transparent)]
    Scalar(#[from] ScalarError),
}

/// Why a scalar has no JSON value or key, in go-yaml v2's and sigs.k8s.io/yaml's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScalarError {
    #[error("integer {0} does not fit in 64 bits")]
    IntRange(String),
    #[error("unsupported value {0}: JSON has no NaN or infinity")]
    NotFinite(f64),
    #[error("unsupported map key: null")]
    NullKey,
    #[error("unsupported map key: {0} (uint64)")]
    UintKey(u64),
    #[error("!!binary value contains invalid base64 data")]
    Base64,
    #[error("!!binary value is not UTF-8 text")]
    NotUtf8,
    #[error("cannot decode {got} `{text}` as a !!{wanted}")]
    Tag {
        got: &'static str,
        text: String,
        wanted: String,
    },
}

/// Why a document does not decode into its type: the field's path, serde's reason
/// with a hint where YAML 1.1 is the likely cause, and the field's place in the text.
#[derive(Debug, thiserror::Error)]
#[error("{field}{reason}{hint}{}", at_text(.at))]
pub(crate) struct DecodeError {
    /// `spec.containers[0].image: `, or nothing at the document's top.
    field: String,
    reason: String,
    hint: &'static str,
    /// 1-based line and column, when the field was found.
    at: Option<(usize, usize)>,
}

fn at_text(at: &Option<(usize, usize)>) -> String {
    at.map(|(line, column)| format!(" at line {line} column {column}"))
        .unwrap_or_default()
}

/// A [`Problem`] and where in the text it was met (1-based line and column).
#[derive(Debug, thiserror::Error)]
#[error("{problem} at line {line} column {column}")]
pub(crate) struct YamlError {
    pub(crate) problem: Problem,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// Every document of `text`, an empty one as `Null` (go-yaml v2 reads only the
/// first; the callers decide what more documents mean).
pub(crate) fn documents(text: &str, limits: &Limits) -> Result<Vec<Value>, YamlError> {
    let mut builder = Builder::new(limits, None);
    for item in Parser::new_from_str_with_options(text, parser_options(limits)) {
        let (event, span) = item.map_err(|e| YamlError {
            // The scanner counts its own nesting (flow and block apart), within ours.
            problem: match e.kind() {
                granit::ErrorKind::RecursionLimitExceeded => Problem::TooDeep(limits.depth),
                _ => Problem::Syntax(e.info()),
            },
            line: e.marker().line(),
            column: e.marker().col() + 1,
        })?;
        builder.event(event, span)?;
    }
    Ok(builder.documents)
}

/// The one document of `text` (`Null` when there is none); a second document that
/// is not empty is refused, as a file that says two things.
pub(crate) fn single(text: &str, limits: &Limits) -> Result<Value, YamlError> {
    let mut docs = documents(text, limits)?
        .into_iter()
        .filter(|d| !d.is_null());
    let first = docs.next().unwrap_or(Value::Null);
    let more = docs.count();
    if more > 0 {
        return Err(YamlError {
            problem: Problem::Value(format!(
                "found {} YAML documents where one is expected",
                more + 1
            )),
            line: 1,
            column: 1,
        });
    }
    Ok(first)
}

/// Decodes a typed value from a document read by [`documents`], naming the field
/// (`spec.containers[0].env[1].value`) and its place in `text` when it does not fit.
/// `prefix` is where the value sits in the document (a PodList's `items[3]`).
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    text: &str,
    value: Value,
    limits: &Limits,
    prefix: &[PathSeg],
) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let mut target = prefix.to_vec();
        for seg in e.path().iter() {
            match seg {
                serde_path_to_error::Segment::Seq { index } => target.push(PathSeg::Index(*index)),
                serde_path_to_error::Segment::Map { key } => target.push(PathSeg::Key(key.clone())),
                _ => break,
            }
        }
        let reason = e.inner().to_string();
        let hint = if reason.contains("expected a string")
            && (reason.contains("boolean") || reason.contains("integer") || reason.contains("floating"))
        {
            " (YAML 1.1, as kubelet reads it: yes/no/on/off/y/n are booleans and 012 is octal; quote the value)"
        } else {
            ""
        };
        let field = if e.path().iter().next().is_some() {
            format!("{}: ", e.path())
        } else {
            String::new()
        };
        DecodeError {
            field,
            reason,
            hint,
            at: locate(text, limits, &target),
        }
    })
}

/// One step of a path into a document.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum PathSeg {
    Key(String),
    Index(usize),
}

/// Where the node at `target` (or its deepest ancestor found) starts in `text`.
fn locate(text: &str, limits: &Limits, target: &[PathSeg]) -> Option<(usize, usize)> {
    let mut builder = Builder::new(limits, Some(target));
    for item in Parser::new_from_str_with_options(text, parser_options(limits)) {
        let Ok((event, span)) = item else { break };
        if builder.event(event, span).is_err() || builder.documents.iter().any(|d| !d.is_null()) {
            break;
        }
    }
    builder.found.map(|(_, line, column)| (line, column))
}

fn parser_options(limits: &Limits) -> granit::Options {
    // The scanner looks ahead past the events, so its own nesting limits (at most our
    // depth, as flow or block nesting alone is) stop a deep run before it is scanned.
    granit::options! {
        emit_comments: false,
        flow_nesting_limit: limits.depth,
        block_nesting_limit: limits.depth,
    }
}

/// A plain scalar as go-yaml v2 resolves it (its `resolve`, YAML 1.1 flavoured).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    /// Above `i64::MAX` (go-yaml's `uint64`).
    Uint(u64),
    Float(f64),
    Str(String),
}

/// go-yaml v2's resolution of an untagged plain scalar:
/// - `y Y yes Yes YES true True TRUE on On ON` are true, and `n N no No NO false False
///   FALSE off Off OFF` false; `~ null Null NULL` and nothing are null;
/// - a scalar starting with a digit or a sign has its `_` removed and is read as Go's
///   `strconv.ParseInt(s, 0, 64)` reads it: `0x1F`, `0o17`, `0b101`, and a leading `0`
///   for octal (`0644` is 420, `012` is 10); then as an unsigned 64-bit integer; then as
///   a float if it looks like one (`1e3`, `0.5`, and `0648`, which is not octal: 648);
/// - `.5`, `.inf`, `-.inf`, `.nan` are floats; anything else is a string.
///
/// Timestamps stay strings, as go-yaml v2 keeps them for untyped values.
pub(crate) fn resolve_plain(s: &str) -> Result<Scalar, ScalarError> {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Ok(Scalar::Bool(true));
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Ok(Scalar::Bool(false));
        }
        "" | "~" | "null" | "Null" | "NULL" => return Ok(Scalar::Null),
        ".nan" | ".NaN" | ".NAN" => return Ok(Scalar::Float(f64::NAN)),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Ok(Scalar::Float(f64::INFINITY));
        }
        "-.inf" | "-.Inf" | "-.INF" => return Ok(Scalar::Float(f64::NEG_INFINITY)),
        _ => {}
    }
    match s.as_bytes()[0] {
        b'.' => match s.parse::<f64>() {
            Ok(f) if f.is_finite() && looks_like_float(s) => Ok(Scalar::Float(f)),
            _ => Ok(Scalar::Str(s.to_string())),
        },
        b'0'..=b'9' | b'+' | b'-' => {
            let plain = s.replace('_', "");
            if let Ok(i) = go_parse_int(&plain) {
                return Ok(Scalar::Int(i));
            }
            let unsigned = go_parse_uint(&plain);
            if let Ok(u) = unsigned {
                return Ok(Scalar::Uint(u));
            }
            if looks_like_float(&plain)
                && let Ok(f) = plain.parse::<f64>()
                && f.is_finite()
            {
                return Ok(Scalar::Float(f));
            }
            if unsigned == Err(IntError::Range) {
                return Err(ScalarError::IntRange(s.to_string()));
            }
            Ok(Scalar::Str(s.to_string()))
        }
        _ => Ok(Scalar::Str(s.to_string())),
    }
}

/// go-yaml v2's float pattern: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn looks_like_float(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |mut i: usize| {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        (i, i - start)
    };
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    if b.get(i) == Some(&b'.') {
        let (next, n) = digits(i + 1);
        if n == 0 {
            return false;
        }
        i = next;
    } else {
        let (next, n) = digits(i);
        if n == 0 {
            return false;
        }
        i = next;
        if b.get(i) == Some(&b'.') {
            i = digits(i + 1).0;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let (next, n) = digits(i);
        if n == 0 {
            return false;
        }
        i = next;
    }
    i == b.len()
}

#[derive(Debug, PartialEq)]
enum IntError {
    Syntax,
    Range,
}

/// Go's `strconv.ParseUint(s, 0, 64)`: `0x`, `0o`, `0b` prefixes, a leading `0` for octal.
fn go_parse_uint(s: &str) -> Result<u64, IntError> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(IntError::Syntax);
    }
    let (base, digits) = if b[0] == b'0' {
        match b.get(1).map(|c| c | 0x20) {
            Some(b'b') if b.len() >= 3 => (2, &s[2..]),
            Some(b'o') if b.len() >= 3 => (8, &s[2..]),
            Some(b'x') if b.len() >= 3 => (16, &s[2..]),
            _ => (8, &s[1..]),
        }
    } else {
        (10, s)
    };
    let mut n: u64 = 0;
    let mut overflow = false;
    for c in digits.chars() {
        let d = c.to_digit(36).ok_or(IntError::Syntax)?;
        if d >= base {
            return Err(IntError::Syntax);
        }
        match n
            .checked_mul(u64::from(base))
            .and_then(|n| n.checked_add(u64::from(d)))
        {
            Some(v) => n = v,
            None => overflow = true,
        }
    }
    if overflow {
        Err(IntError::Range)
    } else {
        Ok(n)
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)`: an optional sign, then [`go_parse_uint`].
fn go_parse_int(s: &str) -> Result<i64, IntError> {
    let (neg, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = go_parse_uint(rest)?;
    if neg {
        if n > 1 << 63 {
            return Err(IntError::Range);
        }
        Ok((n as i64).wrapping_neg())
    } else {
        i64::try_from(n).map_err(|_| IntError::Range)
    }
}

/// A scalar as the JSON value sigs.k8s.io/yaml writes for it. Go writes a whole float
/// below 1e21 without a fraction (`1e3` is `1000`), which an integer field then takes.
fn scalar_value(s: Scalar) -> Result<Value, ScalarError> {
    Ok(match s {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::from(i),
        Scalar::Uint(u) => Value::from(u),
        Scalar::Str(s) => Value::String(s),
        Scalar::Float(f) if !f.is_finite() => return Err(ScalarError::NotFinite(f)),
        Scalar::Float(f) if f.fract() == 0.0 && f.abs() < 1e21 => {
            if f >= i64::MIN as f64 && f < i64::MAX as f64 {
                Value::from(f as i64)
            } else if f >= 0.0 && f < u64::MAX as f64 {
                Value::from(f as u64)
            } else {
                Number::from_f64(f).map_or(Value::Null, Value::Number)
            }
        }
        Scalar::Float(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
    })
}

/// A map key as sigs.k8s.io/yaml turns it into a JSON key: strings as they are,
/// integers in decimal, booleans as `true`/`false`, floats as Go's `%g` of a float32;
/// a null or an unsigned 64-bit key is refused, as there.
pub(crate) fn key_text(key: Scalar) -> Result<String, ScalarError> {
    Ok(match key {
        Scalar::Str(s) => s,
        Scalar::Int(i) => i.to_string(),
        Scalar::Bool(b) => b.to_string(),
        Scalar::Float(f) if f.is_nan() => ".nan".to_string(),
        Scalar::Float(f) if f.is_infinite() => if f > 0.0 { ".inf" } else { "-.inf" }.to_string(),
        Scalar::Float(f) => go_float32_g(f),
        Scalar::Null => return Err(ScalarError::NullKey),
        Scalar::Uint(u) => return Err(ScalarError::UintKey(u)),
    })
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 32)`.
fn go_float32_g(f: f64) -> String {
    let x = f as f32;
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{x}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

/// A scalar with its style and tag, as go-yaml v2 reads it for an untyped value:
/// quoted and block scalars are strings; a tag asks for its type.
fn tagged_scalar(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<Scalar, ScalarError> {
    let Some(tag) = tag else {
        return if style == ScalarStyle::Plain {
            resolve_plain(text)
        } else {
            Ok(Scalar::Str(text.to_string()))
        };
    };
    let Some(suffix) = tag.suffix_in_namespace("tag:yaml.org,2002:") else {
        // go-yaml v2 leaves a scalar with an application tag as its text.
        return Ok(Scalar::Str(text.to_string()));
    };
    let wanted = suffix.as_ref();
    if wanted == "binary" {
        use base64::Engine as _;
        let clean: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map_err(|_| ScalarError::Base64)?;
        return String::from_utf8(bytes)
            .map(Scalar::Str)
            .map_err(|_| ScalarError::NotUtf8);
    }
    if !matches!(wanted, "int" | "float" | "bool" | "null") {
        return Ok(Scalar::Str(text.to_string()));
    }
    let resolved = resolve_plain(text)?;
    let fits = match (wanted, &resolved) {
        ("int", Scalar::Int(_) | Scalar::Uint(_)) | ("bool", Scalar::Bool(_)) => true,
        ("null", Scalar::Null) => true,
        ("float", Scalar::Float(_)) => true,
        ("float", Scalar::Int(i)) => return Ok(Scalar::Float(*i as f64)),
        ("float", Scalar::Uint(u)) => return Ok(Scalar::Float(*u as f64)),
        _ => false,
    };
    if fits {
        Ok(resolved)
    } else {
        let got = match resolved {
            Scalar::Null => "!!null",
            Scalar::Bool(_) => "!!bool",
            Scalar::Int(_) | Scalar::Uint(_) => "!!int",
            Scalar::Float(_) => "!!float",
            Scalar::Str(_) => "!!str",
        };
        Err(ScalarError::Tag {
            got,
            text: text.to_string(),
            wanted: wanted.to_string(),
        })
    }
}

/// The key half of a mapping entry: a name, or `<<` (merge the value in).
enum Key {
    Name(String),
    Merge,
}

enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
        cost: (usize, usize),
    },
    Map {
        map: Map<String, Value>,
        /// Keys that came from a merge (`<<`), which a later key may replace.
        merged: Vec<String>,
        key: Option<Key>,
        anchor: usize,
        cost: (usize, usize),
    },
    /// A collection used as a key: read (and charged) only to be refused.
    KeyCollection,
}

/// An anchored value and what one copy of it costs (nodes, bytes).
struct Anchored {
    value: Value,
    cost: (usize, usize),
}

/// Builds values from parser events, charging every node against the budget.
struct Builder<'a> {
    limits: &'a Limits,
    nodes: usize,
    bytes: usize,
    aliases: usize,
    document_count: usize,
    anchors: HashMap<usize, Anchored>,
    stack: Vec<Frame>,
    documents: Vec<Value>,
    root: Option<Value>,
    /// In locate mode: the path looked for, and the deepest match so far
    /// (its length, line, column).
    target: Option<&'a [PathSeg]>,
    found: Option<(usize, usize, usize)>,
}

impl<'a> Builder<'a> {
    fn new(limits: &'a Limits, target: Option<&'a [PathSeg]>) -> Self {
        Builder {
            limits,
            nodes: 0,
            bytes: 0,
            aliases: 0,
            document_count: 0,
            anchors: HashMap::new(),
            stack: Vec::new(),
            documents: Vec::new(),
            root: None,
            target,
            found: None,
        }
    }

    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        let result = match event {
            Event::DocumentStart(..) => {
                self.document_count += 1;
                if self.document_count > self.limits.documents {
                    Err(Problem::TooManyDocuments(self.limits.documents))
                } else {
                    Ok(())
                }
            }
            Event::DocumentEnd => {
                self.anchors.clear();
                let root = self.root.take().unwrap_or(Value::Null);
                self.documents.push(root);
                Ok(())
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.note_position(&span);
                self.scalar(&text, style, anchor, tag.as_deref())
            }
            Event::Alias(id) => {
                self.note_position(&span);
                self.alias(id)
            }
            Event::SequenceStart(_, anchor, _) => {
                self.note_position(&span);
                self.open(true, anchor)
            }
            Event::MappingStart(_, anchor, _) => {
                self.note_position(&span);
                self.open(false, anchor)
            }
            Event::SequenceEnd | Event::MappingEnd => self.close(),
            _ => Ok(()),
        };
        result.map_err(|problem| YamlError {
            problem,
            line: span.start.line(),
            column: span.start.col() + 1,
        })
    }

    fn at_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Map { key: None, .. }))
    }

    fn scalar(
        &mut self,
        text: &str,
        style: ScalarStyle,
        anchor: usize,
        tag: Option<&Tag>,
    ) -> Result<(), Problem> {
        self.charge(1, text.len())?;
        if self.at_key() {
            let is_merge = text == "<<"
                && match tag {
                    None => style == ScalarStyle::Plain,
                    Some(t) => {
                        t.suffix_in_namespace("tag:yaml.org,2002:").as_deref() == Some("merge")
                    }
                };
            let key = if is_merge {
                Key::Merge
            } else {
                let name = key_text(tagged_scalar(text, style, tag)?)?;
                if anchor != 0 {
                    self.keep_anchor(anchor, &Value::String(name.clone()), (1, text.len()))?;
                }
                Key::Name(name)
            };
            if let Some(Frame::Map { key: slot, .. }) = self.stack.last_mut() {
                *slot = Some(key);
            }
            return Ok(());
        }
        let value = scalar_value(tagged_scalar(text, style, tag)?)?;
        if anchor != 0 {
            self.keep_anchor(anchor, &value, (1, text.len()))?;
        }
        self.place(value)
    }

    fn alias(&mut self, id: usize) -> Result<(), Problem> {
        self.aliases += 1;
        if self.aliases > self.limits.aliases {
            return Err(Problem::TooManyAliases(self.limits.aliases));
        }
        let Some(anchored) = self.anchors.get(&id) else {
            return Err(Problem::Value(
                "an anchor's value refers to itself".to_string(),
            ));
        };
        let (nodes, bytes) = anchored.cost;
        self.charge(nodes, bytes)?;
        let value = self.anchors[&id].value.clone();
        if let Some(Frame::Map {
            key: slot @ None, ..
        }) = self.stack.last_mut()
        {
            // An aliased key: go-yaml v2 takes the anchored scalar's value.
            let name = match value {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err(Problem::Value("invalid map key".to_string())),
            };
            *slot = Some(Key::Name(name));
            return Ok(());
        }
        self.place(value)
    }

    fn open(&mut self, sequence: bool, anchor: usize) -> Result<(), Problem> {
        if self.stack.len() >= self.limits.depth {
            return Err(Problem::TooDeep(self.limits.depth));
        }
        let cost = (self.nodes, self.bytes);
        self.charge(1, 0)?;
        let frame = if matches!(
            self.stack.last(),
            Some(Frame::Map { key: None, .. } | Frame::KeyCollection)
        ) {
            Frame::KeyCollection
        } else if sequence {
            Frame::Seq {
                items: Vec::new(),
                anchor,
                cost,
            }
        } else {
            Frame::Map {
                map: Map::new(),
                merged: Vec::new(),
                key: None,
                anchor,
                cost,
            }
        };
        self.stack.push(frame);
        Ok(())
    }

    fn close(&mut self) -> Result<(), Problem> {
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        let (value, anchor, (nodes, bytes)) = match frame {
            Frame::Seq {
                items,
                anchor,
                cost,
            } => (Value::Array(items), anchor, cost),
            Frame::Map {
                map, anchor, cost, ..
            } => (Value::Object(map), anchor, cost),
            Frame::KeyCollection => {
                if matches!(self.stack.last(), Some(Frame::KeyCollection)) {
                    return Ok(());
                }
                return Err(Problem::Value(
                    "invalid map key: a sequence or mapping".to_string(),
                ));
            }
        };
        if anchor != 0 {
            let nodes = self.nodes - nodes;
            let text = (self.bytes - bytes).saturating_sub(nodes);
            self.keep_anchor(anchor, &value, (nodes, text))?;
        }
        self.place(value)
    }

    fn charge(&mut self, nodes: usize, bytes: usize) -> Result<(), Problem> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.bytes = self.bytes.saturating_add(bytes).saturating_add(nodes);
        if self.nodes > self.limits.nodes || self.bytes > self.limits.bytes {
            return Err(Problem::TooLarge {
                bytes: self.limits.bytes,
                nodes: self.limits.nodes,
            });
        }
        Ok(())
    }

    /// Keeps a copy for aliases; the copy is charged like any expansion. `cost` is
    /// (nodes, scalar bytes) of one copy.
    fn keep_anchor(
        &mut self,
        id: usize,
        value: &Value,
        cost: (usize, usize),
    ) -> Result<(), Problem> {
        self.charge(cost.0, cost.1)?;
        self.anchors.insert(
            id,
            Anchored {
                value: value.clone(),
                cost,
            },
        );
        Ok(())
    }

    /// Puts a finished value where it belongs: the document's root, the next item of a
    /// sequence, or a mapping entry's value.
    fn place(&mut self, value: Value) -> Result<(), Problem> {
        match self.stack.last_mut() {
            None => self.root = Some(value),
            Some(Frame::KeyCollection) => {}
            Some(Frame::Seq { items, .. }) => items.push(value),
            Some(Frame::Map {
                map, merged, key, ..
            }) => match key.take() {
                None => {
                    return Err(Problem::Value("invalid map key".to_string()));
                }
                Some(Key::Name(k)) => {
                    if let Some(at) = merged.iter().position(|m| *m == k) {
                        merged.swap_remove(at);
                    } else if map.contains_key(&k) {
                        return Err(Problem::Value(format!(
                            "mapping key {k:?} is written twice"
                        )));
                    }
                    map.insert(k, value);
                }
                // go-yaml v2 merges in place: what it brings replaces what came before,
                // and of a list of maps the earlier ones win.
                Some(Key::Merge) => {
                    let sources = match value {
                        Value::Object(m) => vec![m],
                        Value::Array(items) => {
                            let mut maps = Vec::with_capacity(items.len());
                            for item in items.into_iter().rev() {
                                match item {
                                    Value::Object(m) => maps.push(m),
                                    _ => return Err(merge_error()),
                                }
                            }
                            maps
                        }
                        _ => return Err(merge_error()),
                    };
                    for source in sources {
                        for (k, v) in source {
                            if !merged.contains(&k) {
                                merged.push(k.clone());
                            }
                            map.insert(k, v);
                        }
                    }
                }
            },
        }
        Ok(())
    }

    /// In locate mode, remembers where a value node on the target's path starts.
    fn note_position(&mut self, span: &Span) {
        let Some(target) = self.target else { return };
        if matches!(
            self.stack.last(),
            Some(Frame::Map { key: None, .. } | Frame::KeyCollection)
        ) {
            return;
        }
        let mut depth = 0;
        for frame in &self.stack {
            let seg = match frame {
                Frame::Seq { items, .. } => PathSeg::Index(items.len()),
                Frame::Map {
                    key: Some(Key::Name(k)),
                    ..
                } => PathSeg::Key(k.clone()),
                _ => return,
            };
            if target.get(depth) != Some(&seg) {
                return;
            }
            depth += 1;
        }
        if self.found.is_none_or(|(len, ..)| depth > len) {
            self.found = Some((depth, span.start.line(), span.start.col() + 1));
        }
    }
}

fn merge_error() -> Problem {
    Problem::Value("map merge requires map or sequence of maps as the value".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: Limits = Limits {
        depth: 16,
        nodes: 1_000,
        bytes: 10_000,
        aliases: 20,
        documents: 3,
    };

    fn one(text: &str) -> Value {
        single(text, &LIMITS).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    fn refused(text: &str) -> String {
        match documents(text, &LIMITS) {
            Ok(v) => panic!("{text:?} was read as {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// go-yaml v2's `resolve` (sigs.k8s.io/yaml/goyaml.v2/resolve.go), case by case.
    #[test]
    fn plain_scalars_resolve_as_go_yaml_v2() {
        use Scalar::*;
        let cases: &[(&str, Scalar)] = &[
            ("yes", Bool(true)),
            ("Yes", Bool(true)),
            ("YES", Bool(true)),
            ("y", Bool(true)),
            ("Y", Bool(true)),
            ("on", Bool(true)),
            ("ON", Bool(true)),
            ("True", Bool(true)),
            ("no", Bool(false)),
            ("n", Bool(false)),
            ("off", Bool(false)),
            ("Off", Bool(false)),
            ("FALSE", Bool(false)),
            ("tRUE", Str("tRUE".into())),
            ("yes please", Str("yes please".into())),
            ("", Null),
            ("~", Null),
            ("null", Null),
            ("NULL", Null),
            ("0644", Int(420)),
            ("0400", Int(256)),
            ("012", Int(10)),
            ("0", Int(0)),
            ("00", Int(0)),
            ("-012", Int(-10)),
            ("0x1F", Int(31)),
            ("-0x10", Int(-16)),
            ("0o17", Int(15)),
            ("0b101", Int(5)),
            ("1_000", Int(1000)),
            ("+12", Int(12)),
            ("9223372036854775807", Int(i64::MAX)),
            ("9223372036854775808", Uint(1 << 63)),
            // Not octal, but a float's digits: go-yaml v2 reads 648 and 80.
            ("0648", Float(648.0)),
            ("080", Float(80.0)),
            ("1e3", Float(1000.0)),
            ("0.5", Float(0.5)),
            (".5", Float(0.5)),
            ("1.", Float(1.0)),
            ("18446744073709551616", Float(18446744073709551616.0)),
            ("1e400", Str("1e400".into())),
            ("0x", Str("0x".into())),
            ("0xg", Str("0xg".into())),
            ("12:30", Str("12:30".into())),
            ("2001-12-14", Str("2001-12-14".into())),
            ("1.2.3", Str("1.2.3".into())),
            ("-", Str("-".into())),
            ("+", Str("+".into())),
            (".", Str(".".into())),
            ("nginx:1.27", Str("nginx:1.27".into())),
        ];
        for (text, want) in cases {
            assert_eq!(&resolve_plain(text).unwrap(), want, "{text:?}");
        }
        assert!(matches!(resolve_plain(".inf"), Ok(Float(f)) if f == f64::INFINITY));
        assert!(matches!(resolve_plain("-.Inf"), Ok(Float(f)) if f == f64::NEG_INFINITY));
        assert!(matches!(resolve_plain(".NaN"), Ok(Float(f)) if f.is_nan()));
        // Past 64 bits with a radix prefix: kubelet keeps a big number, oxlet refuses.
        assert!(resolve_plain("0x10000000000000000").is_err());
    }

    /// What kubelet's reader hands its JSON decoder for the cases users meet.
    #[test]
    fn values_are_what_sigs_yaml_writes_as_json() {
        let doc = one(
            "defaultMode: 0644\nvalue: yes\nname: 012\non: x\n1.5: a\n1e6: b\n\
             quoted: \"0644\"\nsingle: 'yes'\nblock: |\n  on\nstr: !!str 0644\nint: !!int \"12\"\n\
             float: !!float 3\nwhole: 1e3\nhalf: 0.5\nhuge: 1e21\ncustom: !thing 12\n",
        );
        assert_eq!(
            doc,
            json!({
                "defaultMode": 420, "value": true, "name": 10, "true": "x",
                "1.5": "a", "1e+06": "b", "quoted": "0644", "single": "yes", "block": "on\n",
                "str": "0644", "int": 12, "float": 3, "whole": 1000, "half": 0.5,
                "huge": 1e21, "custom": "12",
            })
        );
        // `on:` and `y:` are the same key, "true": written twice.
        assert!(refused("on: a\ny: b\n").contains("mapping key \"true\" is written twice"));
        assert!(refused("n: 1\nfalse: 2\n").contains("\"false\" is written twice"));
        assert!(refused("~: x\n").contains("unsupported map key: null at line 1"));
        assert!(refused("[a]: x\n").contains("invalid map key"));
        assert!(refused("a: !!int abc\n").contains("cannot decode !!str `abc` as a !!int"));
        assert!(refused("a: .inf\n").contains("JSON has no NaN or infinity"));
        assert_eq!(one("!!binary aGk=\n"), json!("hi"));
    }

    #[test]
    fn anchors_merge_keys_and_duplicates_as_go_yaml_v2() {
        let doc = one(
            "base: &b {a: 1, b: 2}\nfirst:\n  <<: *b\n  b: 3\nlater:\n  b: 3\n  <<: *b\n\
             both:\n  <<: [{a: x}, {a: y, c: z}]\nlist: &l [1, 2]\nagain: *l\nm1: {&k kk: v}\nm2: {*k : w2}\n",
        );
        assert_eq!(doc["first"], json!({"a": 1, "b": 3}));
        // go-yaml v2 merges in place: what the merge brings replaces what came before.
        assert_eq!(doc["later"], json!({"a": 1, "b": 2}));
        // Of a list of maps, the earlier wins.
        assert_eq!(doc["both"], json!({"a": "x", "c": "z"}));
        assert_eq!(doc["again"], json!([1, 2]));
        assert_eq!(doc["m2"], json!({"kk": "w2"}));
        assert!(
            refused("a: 1\nb: 2\na: 3\n").contains("mapping key \"a\" is written twice at line 3")
        );
        assert!(refused("a:\n  <<: 5\n").contains("map merge requires map"));
        assert!(refused("a: &x [1, *x]\n").contains("refers to itself"));
        assert!(refused("a: *nowhere\n").to_lowercase().contains("anchor"));
    }

    /// Each budget refuses with its reason and place, before the work it bounds.
    #[test]
    fn every_budget_refuses_with_its_reason() {
        let deep = format!("a: {}{}\n", "[".repeat(17), "]".repeat(17));
        assert_eq!(
            refused(&deep),
            "nested deeper than 16 levels at line 1 column 20"
        );
        let mut block = String::new();
        for i in 0..17 {
            block.push_str(&format!("{}k:\n", "  ".repeat(i)));
        }
        assert!(refused(&block).starts_with("nested deeper than 16 levels at line 17"));
        let ok = format!("a: {}{}\n", "[".repeat(15), "]".repeat(15));
        one(&ok);

        // Aliases by count, and by what they expand to.
        let many = format!("a: &a x\nb: [{}]\n", "*a, ".repeat(21));
        assert!(
            refused(&many).starts_with("more than 20 aliases"),
            "{}",
            refused(&many)
        );
        let laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n";
        assert!(
            refused(laughs).starts_with(
                "document too large with aliases expanded: more than 10000 bytes or 1000 nodes"
            ),
            "{}",
            refused(laughs)
        );
        let wide = format!("a: &w {}\nb: [*w, *w, *w]\n", "x".repeat(3000));
        assert!(refused(&wide).starts_with("document too large"));
        // Plain size: every scalar byte counts.
        assert!(refused(&format!("a: {}\n", "x".repeat(10_001))).starts_with("document too large"));

        // Documents, empty ones too.
        assert_eq!(documents("a: 1\n---\n---\n", &LIMITS).unwrap().len(), 3);
        assert!(
            refused("---\n---\n---\n---\n").starts_with("more than 3 YAML documents at line 4")
        );
        let two = single("a: 1\n---\nb: 2\n", &LIMITS)
            .unwrap_err()
            .to_string();
        assert!(two.contains("found 2 YAML documents"), "{two}");
    }

    #[test]
    fn a_typed_error_names_the_field_and_its_line() {
        #[derive(Debug, serde::Deserialize)]
        struct Env {
            #[allow(dead_code)]
            value: String,
        }
        #[derive(Debug, serde::Deserialize)]
        struct Doc {
            #[allow(dead_code)]
            env: Vec<Env>,
        }
        let text = "env:\n- value: \"x\"\n- value: yes\n";
        let e = decode::<Doc>(text, one(text), &LIMITS, &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("env[1].value: invalid type: boolean `true`, expected a string"),
            "{e}"
        );
        assert!(e.contains("quote the value"), "{e}");
        assert!(e.ends_with("at line 3 column 10"), "{e}");
    }
}

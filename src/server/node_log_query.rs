//! kubelet's node log query (`NodeLogQuery`, KEP-2258): `/logs/?query=…` answered
//! from the node's journal, or from a file below `/var/log`, when the `NodeLogQuery`
//! gate and `enableSystemLogQuery` are both on.
//!
//! What kubelet does, step by step: the parameters are parsed (a bad one is a 400),
//! a query with a path is a 406, the query is validated (a 406, kubelet's messages
//! word for word), then services are read with `journalctl` and a file is served as
//! `/logs/<file>` would be. A service journald does not know is looked for as a file
//! (`/var/log/<s>`, `<s>.log`, `<s>/<s>.log`), as kubelet's heuristics do.
//!
//! Nothing from the request reaches a shell: journalctl gets an argv, service names
//! are only `[a-zA-Z0-9-_.:@]` (kubelet's set) and at most 256 bytes, four at most,
//! and every file is opened below the log directory by the kernel
//! ([`crate::safe_path::open_beneath`]), so a symlink cannot lead out of it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use bytes::Bytes;
use futures::Stream;

/// kubelet's bound on `tailLines`.
const MAX_TAIL_LINES: i64 = 100_000;
/// kubelet's bound on a service name's length.
const MAX_SERVICE_LENGTH: usize = 256;
/// kubelet's bound on how many services one query names.
const MAX_SERVICES: usize = 4;
/// The most of `journalctl --field _SYSTEMD_UNIT` read to tell which services journald
/// knows: a node's unit list is far smaller, and nothing unbounded is held in memory.
const MAX_UNIT_LIST: usize = 1 << 20;

/// A byte stream: journalctl's output as it comes.
pub(crate) type ByteStream = Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// How journalctl is run: the real command, or a fake in unit tests.
pub(crate) trait Journalctl: Send + Sync {
    /// journalctl with `args` as its argv (never through a shell): its stdout and
    /// stderr together, as kubelet sends both; an `Err` item at the end when it failed.
    fn run(&self, args: Vec<String>) -> io::Result<ByteStream>;
}

/// An instant as given in `sinceTime` / `untilTime` (RFC 3339), with its offset, which
/// kubelet's messages print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Time {
    at: jiff::Timestamp,
    offset: jiff::tz::Offset,
}

impl Time {
    /// Go's `time.Parse(time.RFC3339, s)`: `2006-01-02T15:04:05[.frac](Z|±hh:mm)`, a
    /// capital `T` and `Z`, and nothing else.
    fn parse(s: &str) -> Option<Time> {
        let b = s.as_bytes();
        let digits =
            |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
        let shape = b.len() >= 20
            && digits(0..4)
            && b[4] == b'-'
            && digits(5..7)
            && b[7] == b'-'
            && digits(8..10)
            && b[10] == b'T'
            && digits(11..13)
            && b[13] == b':'
            && digits(14..16)
            && b[16] == b':'
            && digits(17..19);
        if !shape {
            return None;
        }
        let (rest, offset) = if let Some(rest) = s.strip_suffix('Z') {
            (rest, jiff::tz::Offset::UTC)
        } else {
            let (rest, zone) = s.split_at(s.len().checked_sub(6)?);
            let z = zone.as_bytes();
            let ok = matches!(z[0], b'+' | b'-')
                && z[1..3].iter().all(u8::is_ascii_digit)
                && z[3] == b':'
                && z[4..6].iter().all(u8::is_ascii_digit);
            if !ok {
                return None;
            }
            let hours: i32 = zone[1..3].parse().ok()?;
            let minutes: i32 = zone[4..6].parse().ok()?;
            let sign = if z[0] == b'-' { -1 } else { 1 };
            let secs = sign * (hours * 3600 + minutes * 60);
            (rest, jiff::tz::Offset::from_seconds(secs).ok()?)
        };
        let frac = &rest[19..];
        if !(frac.is_empty()
            || (frac.len() > 1
                && frac.starts_with('.')
                && frac[1..].bytes().all(|d| d.is_ascii_digit())))
        {
            return None;
        }
        let civil: jiff::civil::DateTime = rest.parse().ok()?;
        let at = civil.to_zoned(jiff::tz::TimeZone::fixed(offset)).ok()?;
        Some(Time {
            at: at.timestamp(),
            offset,
        })
    }

    /// The wall clock in the given offset.
    fn wall(&self) -> jiff::civil::DateTime {
        self.at
            .to_zoned(jiff::tz::TimeZone::fixed(self.offset))
            .datetime()
    }

    /// journalctl's `--since`/`--until` value: kubelet's layout (`2006-1-2 15:4:5`),
    /// in UTC and saying so, since journalctl reads a bare time as the node's local time.
    fn journal(&self) -> String {
        let [y, mo, d, h, mi, s] = fields(&self.at.to_zoned(jiff::tz::TimeZone::UTC).datetime());
        format!("{y}-{mo}-{d} {h:02}:{mi}:{s} UTC")
    }
}

/// A wall clock's year, month, day, hour, minute and second.
fn fields(t: &jiff::civil::DateTime) -> [i32; 6] {
    let (y, mo, d) = (t.year().into(), t.month().into(), t.day().into());
    [
        y,
        mo,
        d,
        t.hour().into(),
        t.minute().into(),
        t.second().into(),
    ]
}

impl fmt::Display for Time {
    /// Go's `Time.String()`: `2006-01-02 15:04:05.999999999 -0700 MST`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.wall();
        let [y, mo, d, h, mi, s] = fields(&t);
        write!(f, "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")?;
        let nanos = t.subsec_nanosecond();
        if nanos != 0 {
            let frac = format!("{nanos:09}");
            write!(f, ".{}", frac.trim_end_matches('0'))?;
        }
        let secs = self.offset.seconds();
        let sign = if secs < 0 { '-' } else { '+' };
        let (h, m) = (secs.abs() / 3600, secs.abs() % 3600 / 60);
        let zone = if secs == 0 {
            "UTC".to_string()
        } else {
            format!("{sign}{h:02}{m:02}")
        };
        write!(f, " {sign}{h:02}{m:02} {zone}")
    }
}

/// A bad value in a message, printed as apimachinery's `field.Error` prints it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bad {
    /// `%q`.
    Str(String),
    /// `%#v` of a `[]string`.
    Strs(Vec<String>),
    /// An `int`.
    Int(i64),
    /// A `*time.Time`: its `String()`.
    Time(Time),
}

impl fmt::Display for Bad {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bad::Str(s) => f.write_str(&crate::klog::go_quote(s)),
            Bad::Strs(v) => {
                let items: Vec<String> = v.iter().map(|s| crate::klog::go_quote(s)).collect();
                write!(f, "[]string{{{}}}", items.join(", "))
            }
            Bad::Int(n) => write!(f, "{n}"),
            Bad::Time(t) => write!(f, "{t}"),
        }
    }
}

/// One of kubelet's validation errors (apimachinery's `field.Error`), worded as it is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FieldError {
    Invalid(&'static str, Bad, String),
    Required(&'static str, &'static str),
    TooMany(&'static str, usize, usize),
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldError::Invalid(field, bad, detail) => {
                write!(f, "{field}: Invalid value: {bad}: {detail}")
            }
            FieldError::Required(field, detail) => write!(f, "{field}: Required value: {detail}"),
            FieldError::TooMany(field, n, max) => {
                write!(f, "{field}: Too many: {n}: must have at most {max} items")
            }
        }
    }
}

/// apimachinery's aggregate: one error as it is, several as `[a, b]`.
pub(crate) fn aggregate(errs: &[FieldError]) -> String {
    match errs {
        [one] => one.to_string(),
        _ => {
            let all: Vec<String> = errs.iter().map(ToString::to_string).collect();
            format!("[{}]", all.join(", "))
        }
    }
}

/// The options a query may carry (kubelet's `options`): any of them makes a file query
/// an error, since only journalctl can apply them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Options {
    pub since: Option<Time>,
    pub until: Option<Time>,
    pub tail_lines: Option<i64>,
    pub boot: Option<i64>,
    pub pattern: String,
}

/// A parsed query (kubelet's `nodeLogQuery`): services for journald, or files below
/// the log directory (a value with `/` or `\`).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Query {
    pub services: Vec<String>,
    pub files: Vec<String>,
    pub options: Options,
}

/// Why a query's number or file does not hold, in kubelet's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeLogQueryError {
    #[error("strconv.Atoi: parsing {}: invalid syntax", crate::klog::go_quote(.0))]
    AtoiSyntax(String),
    #[error("strconv.Atoi: parsing {}: value out of range", crate::klog::go_quote(.0))]
    AtoiRange(String),
    #[error("invalid time format")]
    TimeFormat,
    #[error("stat {}: {why}", .shown.display())]
    Stat { shown: PathBuf, why: String },
}

/// Go's `strconv.Atoi`, with its error text.
fn atoi(s: &str) -> Result<i64, NodeLogQueryError> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(NodeLogQueryError::AtoiSyntax(s.to_string()));
    }
    s.parse::<i64>()
        .map_err(|_| NodeLogQueryError::AtoiRange(s.to_string()))
}

/// One parameter: None when absent or empty (kubelet ignores it), else its value, or
/// kubelet's error for it.
fn param<T>(
    value: &str,
    field: &'static str,
    parse: impl Fn(&str) -> Result<T, NodeLogQueryError>,
    errs: &mut Vec<FieldError>,
) -> Option<T> {
    if value.is_empty() {
        return None;
    }
    parse(value)
        .map_err(|e| {
            errs.push(FieldError::Invalid(
                field,
                Bad::Str(value.into()),
                e.to_string(),
            ));
        })
        .ok()
}

/// kubelet's `newNodeLogQuery`: `Ok(None)` when the request asks nothing of the query
/// (then `/logs/` serves files as before), else the query or the errors (a 400).
pub(crate) fn parse(pairs: &[(String, String)]) -> Result<Option<Query>, Vec<FieldError>> {
    let first = |key: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    };
    let mut q = Query::default();
    let mut errs = Vec::new();
    let queries: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "query")
        .map(|(_, v)| v.clone())
        .collect();
    for v in &queries {
        if v.contains(['/', '\\']) {
            q.files.push(v.clone());
        } else if !v.trim().is_empty() {
            q.services.push(v.clone());
        }
    }
    if !queries.is_empty() && q.files.is_empty() && q.services.is_empty() {
        errs.push(FieldError::Invalid(
            "query",
            Bad::Strs(queries),
            "query cannot be empty".into(),
        ));
    }
    let time = |v: &str| Time::parse(v).ok_or(NodeLogQueryError::TimeFormat);
    q.options.since = param(first("sinceTime"), "sinceTime", time, &mut errs);
    q.options.until = param(first("untilTime"), "untilTime", time, &mut errs);
    q.options.boot = param(first("boot"), "boot", atoi, &mut errs);
    q.options.tail_lines = param(first("tailLines"), "tailLines", atoi, &mut errs);
    q.options.pattern = first("pattern").to_string();
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok((q != Query::default()).then_some(q))
}

/// kubelet's `safeServiceName`, its messages included (the length's says 100 where
/// the bound is 256, as kubelet's does).
fn service_name_error(s: &str) -> Option<&'static str> {
    if s.len() > MAX_SERVICE_LENGTH {
        return Some("length must be less than 100");
    }
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@');
    (!s.chars().all(safe)).then_some("input contains unsupported characters")
}

/// Go's regexp error codes for what the `regex-syntax` parser reports.
fn regexp_error_code(kind: &regex_syntax::ast::ErrorKind) -> &'static str {
    use regex_syntax::ast::ErrorKind as K;
    match kind {
        K::ClassUnclosed => "missing closing ]",
        K::ClassRangeInvalid | K::ClassRangeLiteral => "invalid character class range",
        K::EscapeUnexpectedEof => "trailing backslash at end of expression",
        K::ClassEscapeInvalid
        | K::EscapeHexEmpty
        | K::EscapeHexInvalid
        | K::EscapeHexInvalidDigit
        | K::EscapeUnrecognized => "invalid escape sequence",
        K::GroupUnclosed => "missing closing )",
        K::GroupUnopened => "unexpected )",
        K::GroupNameDuplicate { .. }
        | K::GroupNameEmpty
        | K::GroupNameInvalid
        | K::GroupNameUnexpectedEof => "invalid named capture",
        K::RepetitionMissing => "missing argument to repetition operator",
        K::RepetitionCountInvalid | K::RepetitionCountDecimalEmpty | K::RepetitionCountUnclosed => {
            "invalid repeat count"
        }
        K::NestLimitExceeded(_) => "expression nests too deeply",
        _ => "invalid or unsupported Perl syntax",
    }
}

/// Go's `regexp/syntax.Parse(pattern, syntax.Perl)` as a yes or no, with its message
/// (``error parsing regexp: CODE: `EXPR` ``); the fragment shown may be shorter or
/// longer than Go's, the code is Go's.
fn pattern_error(pattern: &str) -> Option<String> {
    let ast = match regex_syntax::ast::parse::Parser::new().parse(pattern) {
        Ok(ast) => ast,
        Err(e) => {
            let code = regexp_error_code(e.kind());
            let span = e.span();
            let expr = match e.kind() {
                regex_syntax::ast::ErrorKind::EscapeUnexpectedEof => "",
                regex_syntax::ast::ErrorKind::GroupUnclosed => pattern,
                regex_syntax::ast::ErrorKind::ClassUnclosed => &pattern[span.start.offset..],
                _ => pattern
                    .get(span.start.offset..span.end.offset)
                    .unwrap_or(pattern),
            };
            return Some(format!("error parsing regexp: {code}: `{expr}`"));
        }
    };
    let translated = regex_syntax::hir::translate::Translator::new().translate(pattern, &ast);
    translated.err().map(|e| {
        let span = e.span();
        let expr = pattern
            .get(span.start.offset..span.end.offset)
            .unwrap_or(pattern);
        let code = match e.kind() {
            regex_syntax::hir::ErrorKind::UnicodePropertyNotFound
            | regex_syntax::hir::ErrorKind::UnicodePropertyValueNotFound => {
                "invalid character class range"
            }
            _ => "invalid or unsupported Perl syntax",
        };
        format!("error parsing regexp: {code}: `{expr}`")
    })
}

/// What a query's one file is, opened below the log directory at validation.
pub(crate) type Opened = super::node_logs::Opened;

impl Query {
    /// kubelet's `validate` (a 406 when it fails): the services' names and number, a
    /// file or services and never both, one file and no options with it, the file
    /// there (opened now, below `log_dir`; what is served is this descriptor), the
    /// window the right way round, `boot` ≤ 0, `tailLines` in 0..=100000, and a
    /// pattern Go's regexp parser takes.
    pub(crate) fn validate(&self, log_dir: &Path) -> Result<Option<Opened>, Vec<FieldError>> {
        let mut errs: Vec<FieldError> = self
            .services
            .iter()
            .filter_map(|s| {
                service_name_error(s)
                    .map(|e| FieldError::Invalid("query", Bad::Str(s.clone()), e.into()))
            })
            .collect();
        if self.services.len() > MAX_SERVICES {
            errs.push(FieldError::TooMany(
                "query",
                self.services.len(),
                MAX_SERVICES,
            ));
        }
        let mut opened = None;
        let files = || Bad::Strs(self.files.clone());
        match (self.files.len(), self.services.len()) {
            (0, 0) => errs.push(FieldError::Required(
                "query",
                "cannot be empty with options",
            )),
            (f, s) if f > 0 && s > 0 => errs.push(FieldError::Invalid(
                "query",
                Bad::Str(format!(
                    "[{}], [{}]",
                    self.files.join(" "),
                    self.services.join(" ")
                )),
                "cannot specify a file and service".into(),
            )),
            (f, _) if f > 1 => errs.push(FieldError::Invalid(
                "query",
                files(),
                "cannot specify more than one file".into(),
            )),
            (1, _) if self.options != Options::default() => errs.push(FieldError::Invalid(
                "query",
                files(),
                "cannot specify file with options".into(),
            )),
            (1, _) => match open_file(log_dir, &self.files[0]) {
                Ok(o) => opened = Some(o),
                Err(e) => errs.push(FieldError::Invalid("query", files(), e.to_string())),
            },
            _ => {}
        }
        self.validate_options(&mut errs);
        if errs.is_empty() {
            Ok(opened)
        } else {
            Err(errs)
        }
    }

    fn validate_options(&self, errs: &mut Vec<FieldError>) {
        let o = &self.options;
        if let (Some(since), Some(until)) = (o.since, o.until)
            && since.at > until.at
        {
            errs.push(FieldError::Invalid(
                "untilTime",
                Bad::Time(until),
                "must be after `sinceTime`".into(),
            ));
        }
        if let Some(boot) = o.boot.filter(|b| *b > 0) {
            errs.push(FieldError::Invalid(
                "boot",
                Bad::Int(boot),
                "must be less than 1".into(),
            ));
        }
        if let Some(n) = o.tail_lines.filter(|n| !(0..=MAX_TAIL_LINES).contains(n)) {
            errs.push(FieldError::Invalid(
                "tailLines",
                Bad::Int(n),
                format!("must be between 0 and {MAX_TAIL_LINES}, inclusive"),
            ));
        }
        if let Some(e) = pattern_error(&o.pattern) {
            errs.push(FieldError::Invalid(
                "pattern",
                Bad::Str(o.pattern.clone()),
                e,
            ));
        }
    }

    /// kubelet's journalctl argv for `services`: UTC, no pager, `short-precise`, the
    /// window, the tail, one `--unit=` per service, the pattern and the boot.
    pub(crate) fn journal_args(&self, services: &[String]) -> Vec<String> {
        let o = &self.options;
        let mut args: Vec<String> = ["--utc", "--no-pager", "--output=short-precise"]
            .map(String::from)
            .to_vec();
        if let Some(t) = o.since {
            args.push(format!("--since={}", t.journal()));
        }
        if let Some(t) = o.until {
            args.push(format!("--until={}", t.journal()));
        }
        if let Some(n) = o.tail_lines {
            args.push("--pager-end".into());
            args.push(format!("--lines={n}"));
        }
        args.extend(
            services
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| format!("--unit={s}")),
        );
        if !o.pattern.is_empty() {
            args.push(format!("--grep={}", o.pattern));
        }
        if let Some(b) = o.boot {
            args.push("--boot".into());
            args.push(b.to_string());
        }
        args
    }

    /// kubelet's split: a service journald has seen (`<s>.service` in the unit list,
    /// as a substring, as kubelet checks) is read from the journal, any other from
    /// files. No unit list (journalctl failed): every service is a file's.
    pub(crate) fn split_services(&self, units: Option<&str>) -> (Vec<String>, Vec<String>) {
        self.services
            .iter()
            .cloned()
            .partition(|s| units.is_some_and(|u| u.contains(&format!("{s}.service"))))
    }
}

/// The unit list (`journalctl --field _SYSTEMD_UNIT`), bounded; None when journalctl
/// cannot be run or fails, as kubelet's check then answers "not journald's".
pub(crate) async fn unit_list(j: &dyn Journalctl) -> Option<String> {
    use futures::StreamExt as _;
    let mut out = j.run(vec!["--field".into(), "_SYSTEMD_UNIT".into()]).ok()?;
    let mut text = Vec::new();
    while let Some(chunk) = out.next().await {
        let chunk = chunk.ok()?;
        if text.len() + chunk.len() > MAX_UNIT_LIST {
            break;
        }
        text.extend_from_slice(&chunk);
    }
    Some(String::from_utf8_lossy(&text).into_owned())
}

/// Opens `file` (a query's, relative to the log directory however it is spelt) as
/// kubelet's validation stats it, with its message when it cannot be.
fn open_file(log_dir: &Path, file: &str) -> Result<Opened, NodeLogQueryError> {
    let rel = file.trim_start_matches('/');
    super::node_logs::open(log_dir, rel).map_err(|e| {
        let why = match e {
            crate::safe_path::BeneathError::Io(e) => e.to_string(),
            _ => "no such file or directory".into(),
        };
        NodeLogQueryError::Stat {
            shown: log_dir.join(rel),
            why,
        }
    })
}

/// The real journalctl, its stdout and stderr one pipe, killed when the response is
/// dropped (a client gone, or kubelet's 30 s budget spent).
pub(crate) struct System;

impl Journalctl for System {
    fn run(&self, args: Vec<String>) -> io::Result<ByteStream> {
        let (reader, writer) = std::io::pipe()?;
        let child = {
            let mut cmd = tokio::process::Command::new("journalctl");
            cmd.args(&args)
                .stdin(std::process::Stdio::null())
                .stdout(writer.try_clone()?)
                .stderr(writer)
                .kill_on_drop(true);
            cmd.spawn()?
            // `cmd` dropped here: oxlet's copies of the write end close, so the reader
            // sees the end when journalctl exits.
        };
        let fd: std::os::fd::OwnedFd = reader.into();
        let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?;
        let state = (pipe, Some(child), vec![0u8; 64 * 1024]);
        let stream = futures::stream::unfold(state, |(mut pipe, child, mut buf)| async move {
            use tokio::io::AsyncReadExt as _;
            let mut child = child?;
            match pipe.read(&mut buf).await {
                Ok(0) => {
                    let status = child.wait().await;
                    match status {
                        Ok(s) if s.success() => None,
                        Ok(s) => Some((
                            Err(io::Error::other(format!("journalctl: {s}"))),
                            (pipe, None, buf),
                        )),
                        Err(e) => Some((Err(e), (pipe, None, buf))),
                    }
                }
                Ok(n) => {
                    let chunk = Bytes::copy_from_slice(&buf[..n]);
                    Some((Ok(chunk), (pipe, Some(child), buf)))
                }
                Err(e) => Some((Err(e), (pipe, None, buf))),
            }
        });
        Ok(Box::pin(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Result<Option<Query>, Vec<FieldError>> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse(&pairs)
    }

    fn parse_err(pairs: &[(&str, &str)]) -> String {
        aggregate(&q(pairs).unwrap_err())
    }

    #[test]
    fn parameters_are_parsed_as_kubelet_parses_them() {
        // Nothing the query knows: /logs/ as before.
        assert_eq!(q(&[]).unwrap(), None);
        assert_eq!(q(&[("unknown", "true")]).unwrap(), None);
        assert_eq!(q(&[("sinceTime", "")]).unwrap(), None);
        assert_eq!(q(&[("boot", "")]).unwrap(), None);
        let one = q(&[("query", "kubelet"), ("query", "/syslog"), ("query", " ")])
            .unwrap()
            .unwrap();
        assert_eq!(one.services, ["kubelet"]);
        assert_eq!(one.files, ["/syslog"]);
        let opts = q(&[
            ("query", "x"),
            ("tailLines", "100"),
            ("boot", "-23"),
            ("pattern", "foo"),
            ("sinceTime", "2019-12-04T02:00:00Z"),
            ("sinceTime", "ignored"),
        ])
        .unwrap()
        .unwrap()
        .options;
        assert_eq!(opts.tail_lines, Some(100));
        assert_eq!(opts.boot, Some(-23));
        assert_eq!(opts.pattern, "foo");
        assert_eq!(
            opts.since.unwrap().to_string(),
            "2019-12-04 02:00:00 +0000 UTC"
        );
    }

    #[test]
    fn bad_parameters_get_kubelets_messages() {
        assert_eq!(
            parse_err(&[("query", "")]),
            r#"query: Invalid value: []string{""}: query cannot be empty"#
        );
        assert_eq!(
            parse_err(&[("query", "  "), ("query", " ")]),
            r#"query: Invalid value: []string{"  ", " "}: query cannot be empty"#
        );
        for bad in [
            "2019-12-04 02:00:00",
            "2019-12-04 02:00:00.000",
            "2019-12-04 02",
            "2019-12-04T02:00:00",
            "2019-12-04t02:00:00Z",
            "2019-13-04T02:00:00Z",
        ] {
            assert_eq!(
                parse_err(&[("sinceTime", bad)]),
                format!(
                    "sinceTime: Invalid value: {}: invalid time format",
                    crate::klog::go_quote(bad)
                ),
            );
        }
        assert_eq!(
            parse_err(&[("tailLines", "foo")]),
            r#"tailLines: Invalid value: "foo": strconv.Atoi: parsing "foo": invalid syntax"#
        );
        assert_eq!(
            parse_err(&[("boot", " "), ("untilTime", "x")]),
            r#"[untilTime: Invalid value: "x": invalid time format, boot: Invalid value: " ": strconv.Atoi: parsing " ": invalid syntax]"#
        );
        assert_eq!(
            parse_err(&[("tailLines", "99999999999999999999")]),
            r#"tailLines: Invalid value: "99999999999999999999": strconv.Atoi: parsing "99999999999999999999": value out of range"#
        );
    }

    fn invalid(query: &Query) -> String {
        aggregate(
            &query
                .validate(Path::new("/nonexistent-oxlet-log-dir"))
                .unwrap_err(),
        )
    }

    fn services(s: &[&str]) -> Query {
        Query {
            services: s.iter().map(ToString::to_string).collect(),
            ..Query::default()
        }
    }

    #[test]
    fn the_query_is_validated_as_kubelet_validates_it() {
        let dir = Path::new("/nonexistent-oxlet-log-dir");
        for ok in [
            &["svc1"][..],
            &["svc1", "svc2"],
            &["svc.foo", "svc_foo", "svc@foo", "svc:foo"],
        ] {
            assert!(services(ok).validate(dir).is_ok(), "{ok:?}");
        }
        assert_eq!(
            invalid(&services(&["svc\n"])),
            r#"query: Invalid value: "svc\n": input contains unsupported characters"#
        );
        assert_eq!(
            invalid(&services(&[&"svc1".repeat(100)])),
            format!(
                r#"query: Invalid value: "{}": length must be less than 100"#,
                "svc1".repeat(100)
            )
        );
        assert_eq!(
            invalid(&services(&["a", "b", "c", "d", "e"])),
            "query: Too many: 5: must have at most 4 items"
        );
        let mut empty = Query::default();
        empty.options.tail_lines = Some(1);
        assert_eq!(
            invalid(&empty),
            "query: Required value: cannot be empty with options"
        );
        let both = Query {
            files: vec!["b/c".into()],
            services: vec!["a".into()],
            ..Query::default()
        };
        assert_eq!(
            invalid(&both),
            r#"query: Invalid value: "[b/c], [a]": cannot specify a file and service"#
        );
        let two = Query {
            files: vec!["/a".into(), "/b".into()],
            ..Query::default()
        };
        assert_eq!(
            invalid(&two),
            r#"query: Invalid value: []string{"/a", "/b"}: cannot specify more than one file"#
        );
        let mut with_options = Query {
            files: vec!["/a".into()],
            ..Query::default()
        };
        with_options.options.pattern = "x".into();
        assert_eq!(
            invalid(&with_options),
            r#"query: Invalid value: []string{"/a"}: cannot specify file with options"#
        );
        let mut opts = services(&["svc1"]);
        opts.options.since = Time::parse("2023-02-04T02:00:00Z");
        opts.options.until = Time::parse("2023-01-04T04:00:00+02:00");
        opts.options.boot = Some(1);
        opts.options.tail_lines = Some(100_001);
        opts.options.pattern = "foo\\".into();
        assert_eq!(
            invalid(&opts),
            "[untilTime: Invalid value: 2023-01-04 04:00:00 +0200 +0200: must be after `sinceTime`, \
             boot: Invalid value: 1: must be less than 1, \
             tailLines: Invalid value: 100001: must be between 0 and 100000, inclusive, \
             pattern: Invalid value: \"foo\\\\\": error parsing regexp: trailing backslash at end of expression: ``]"
        );
        let mut edge = services(&["svc1"]);
        edge.options.tail_lines = Some(100_000);
        edge.options.boot = Some(0);
        edge.options.pattern = "(?i)kube.*let".into();
        assert!(edge.validate(dir).is_ok());
        for (bad, code) in [
            ("(foo", "missing closing ): `(foo`"),
            ("a{2,1}", "invalid repeat count"),
            ("x(?=y)", "invalid or unsupported Perl syntax"),
            ("[a", "missing closing ]: `[a`"),
        ] {
            let e = pattern_error(bad).unwrap();
            assert!(
                e.starts_with("error parsing regexp: ") && e.contains(code),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_file_is_opened_below_the_log_dir_or_is_kubelets_stat_error() {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("log");
        std::fs::create_dir_all(&logs).unwrap();
        std::fs::write(logs.join("a.log"), "a\n").unwrap();
        std::fs::write(tmp.path().join("secret"), "s\n").unwrap();
        std::os::unix::fs::symlink("../secret", logs.join("escape")).unwrap();
        let file = |f: &str| Query {
            files: vec![f.into()],
            ..Query::default()
        };
        assert!(matches!(
            file("/a.log").validate(&logs),
            Ok(Some(Opened::File(_)))
        ));
        assert!(matches!(
            file("//a.log").validate(&logs),
            Ok(Some(Opened::File(_)))
        ));
        for bad in ["/escape", "/../secret", "/nope"] {
            let e = aggregate(&file(bad).validate(&logs).unwrap_err());
            let shown = logs.join(bad.trim_start_matches('/'));
            assert_eq!(
                e,
                format!(
                    "query: Invalid value: []string{{{}}}: stat {}: no such file or directory",
                    crate::klog::go_quote(bad),
                    shown.display()
                )
            );
        }
    }

    #[test]
    fn the_journalctl_argv_is_kubelets() {
        let mut query = services(&["kubelet", "containerd"]);
        assert_eq!(
            query.journal_args(&query.services),
            [
                "--utc",
                "--no-pager",
                "--output=short-precise",
                "--unit=kubelet",
                "--unit=containerd"
            ]
        );
        assert_eq!(
            query.journal_args(&["p1".into(), String::new(), "p2".into()]),
            [
                "--utc",
                "--no-pager",
                "--output=short-precise",
                "--unit=p1",
                "--unit=p2"
            ]
        );
        query.options = Options {
            since: Time::parse("2024-03-05T07:08:09.5Z"),
            until: Time::parse("2024-03-05T12:00:00+02:00"),
            tail_lines: Some(5),
            boot: Some(-1),
            pattern: "a b;$(rm -rf /)".into(),
        };
        assert_eq!(
            query.journal_args(&["kubelet".into()]),
            [
                "--utc",
                "--no-pager",
                "--output=short-precise",
                "--since=2024-3-5 07:8:9 UTC",
                "--until=2024-3-5 10:0:0 UTC",
                "--pager-end",
                "--lines=5",
                "--unit=kubelet",
                "--grep=a b;$(rm -rf /)",
                "--boot",
                "-1"
            ]
        );
    }

    /// A journalctl that answers from a table and remembers its argv.
    struct Fake {
        units: Option<&'static str>,
        calls: std::sync::Mutex<Vec<Vec<String>>>,
    }

    impl Journalctl for Fake {
        fn run(&self, args: Vec<String>) -> io::Result<ByteStream> {
            self.calls.lock().unwrap().push(args.clone());
            let out: Vec<io::Result<Bytes>> = match (args[0].as_str(), self.units) {
                ("--field", Some(u)) => vec![Ok(Bytes::from_static(u.as_bytes()))],
                ("--field", None) => vec![Err(io::Error::other("exit status: 1"))],
                _ => vec![Ok(Bytes::from("journal\n"))],
            };
            Ok(Box::pin(futures::stream::iter(out)))
        }
    }

    #[tokio::test]
    async fn services_journald_knows_are_read_from_it_the_others_from_files() {
        let fake = Fake {
            units: Some("containerd.service\nkubelet.service\nssh.service\n"),
            calls: Default::default(),
        };
        let units = unit_list(&fake).await;
        let query = services(&["kubelet", "kube-proxy", "let"]);
        let (native, files) = query.split_services(units.as_deref());
        // kubelet's check is a substring: "let" is taken as journald's too.
        assert_eq!(native, ["kubelet", "let"]);
        assert_eq!(files, ["kube-proxy"]);
        assert_eq!(fake.calls.lock().unwrap()[0], ["--field", "_SYSTEMD_UNIT"]);
        let failing = Fake {
            units: None,
            calls: Default::default(),
        };
        let units = unit_list(&failing).await;
        assert_eq!(units, None);
        assert_eq!(query.split_services(units.as_deref()).1.len(), 3);
    }
}

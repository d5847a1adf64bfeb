//! The stderr line, as kubelet writes it: klog's text format (header, quoted message,
//! `key=value` pairs) by default, or component-base's JSON format
//! (`--logging-format=json`). Only the stderr formatter reads this; the timelines
//! see the same events through their own layer.

use std::cell::RefCell;
use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::klog::{write_go_quoted, write_string_value};

/// kubelet's `--logging-format` / `logging.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// klog's text lines (`I1202 03:45:26.508123    1234 file.rs:12] "message" k="v"`).
    #[default]
    Text,
    /// One JSON object a line (`{"ts":…,"caller":…,"msg":…,"v":…}`).
    Json,
}

impl LogFormat {
    /// The format named `text` (component-base's registry holds `text` and `json`).
    pub fn parse(name: &str) -> Option<LogFormat> {
        match name {
            "text" => Some(LogFormat::Text),
            "json" => Some(LogFormat::Json),
            _ => None,
        }
    }

    /// Its name in the flag and the config file.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The klog/JSON event formatter of the stderr layer.
pub(super) struct KlogFormat {
    format: LogFormat,
    /// klog's header prints the process id where its format says "threadid".
    pid: u32,
    /// klog's header is in local time: Go's `time.Now()` is in the local zone.
    zone: jiff::tz::TimeZone,
}

impl KlogFormat {
    pub(super) fn new(format: LogFormat) -> KlogFormat {
        KlogFormat {
            format,
            pid: std::process::id(),
            zone: jiff::tz::TimeZone::system(),
        }
    }

    #[cfg(test)]
    pub(super) fn with_zone(format: LogFormat, pid: u32, zone: jiff::tz::TimeZone) -> KlogFormat {
        KlogFormat { format, pid, zone }
    }

    /// One line of `event` at `now`, newline included.
    pub(super) fn write_line(
        &self,
        w: &mut impl fmt::Write,
        now: jiff::Timestamp,
        event: &Event<'_>,
    ) -> fmt::Result {
        match self.format {
            LogFormat::Text => self.text_line(w, now, event),
            LogFormat::Json => json_line(w, now, event),
        }
    }

    /// klog's `printS`: header, the message Go-quoted, on error lines the error
    /// (`err`, as `ErrorS` puts it first), then the other fields in order.
    fn text_line(
        &self,
        w: &mut impl fmt::Write,
        now: jiff::Timestamp,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let file = meta.file().map_or("???", base_name);
        let line = meta.file().and(meta.line()).unwrap_or(1);
        write_header(
            w,
            severity(meta),
            self.zone.to_datetime(now),
            self.pid,
            file,
        )?;
        write!(w, ":{line}] ")?;
        let error_line = *meta.level() == Level::ERROR;
        let mut fields = Fields::new(w, Syntax::Text, Pick::Message);
        event.record(&mut fields);
        if !fields.found {
            fields.result = fields.result.and_then(|()| fields.w.write_str("\"\""));
        }
        if error_line {
            fields.pick = Pick::Error;
            event.record(&mut fields);
        }
        fields.pick = Pick::Rest {
            skip_error: error_line,
        };
        event.record(&mut fields);
        fields.result?;
        w.write_char('\n')
    }
}

impl<S, N> FormatEvent<S, N> for KlogFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        self.write_line(&mut writer, jiff::Timestamp::now(), event)
    }
}

/// component-base's JSON line (zap's encoder behind zapr): `ts` (milliseconds since
/// the epoch, a float), `caller` (`dir/file:line`), `msg`, `v` on every line but an
/// error line, the fields as JSON values, and an error line's `err` last.
fn json_line(w: &mut impl fmt::Write, now: jiff::Timestamp, event: &Event<'_>) -> fmt::Result {
    let meta = event.metadata();
    let millis = now.as_nanosecond() as f64 / 1e6;
    write!(w, "{{\"ts\":{millis},\"caller\":")?;
    match (meta.file(), meta.line()) {
        (Some(file), Some(line)) => {
            w.write_char('"')?;
            write_json_escaped(w, short_caller(file))?;
            write!(w, ":{line}\"")?;
        }
        _ => w.write_str("\"undefined\"")?,
    }
    w.write_str(",\"msg\":")?;
    let mut fields = Fields::new(w, Syntax::Json, Pick::Message);
    event.record(&mut fields);
    if !fields.found {
        fields.result = fields.result.and_then(|()| fields.w.write_str("\"\""));
    }
    fields.result?;
    let verbosity = verbosity(meta);
    if let Some(v) = verbosity {
        write!(w, ",\"v\":{v}")?;
    }
    let mut fields = Fields::new(
        w,
        Syntax::Json,
        Pick::Rest {
            skip_error: verbosity.is_none(),
        },
    );
    event.record(&mut fields);
    if verbosity.is_none() {
        fields.pick = Pick::Error;
        event.record(&mut fields);
    }
    fields.result?;
    w.write_str("}\n")
}

/// klog's severity letter: tracing's debug and trace lines are klog's `V(n).Info`.
fn severity(meta: &Metadata<'_>) -> u8 {
    match *meta.level() {
        Level::ERROR => b'E',
        Level::WARN => b'W',
        _ => b'I',
    }
}

/// The `-v` a line is shown from, which the JSON format prints as `v` (zapr's
/// `LogInfoLevel`); none for an error line, which zapr writes without it. Warnings
/// are klog's `Warning`, written as `V(0)` infos.
fn verbosity(meta: &Metadata<'_>) -> Option<u8> {
    match *meta.level() {
        Level::ERROR => None,
        Level::WARN => Some(0),
        Level::INFO => Some(match meta.target() {
            super::STARTUP_TARGET => 0,
            super::EVENTS_TARGET | super::V3_TARGET => 3,
            _ => 2,
        }),
        Level::DEBUG => Some(4),
        _ => Some(6),
    }
}

/// `Lmmdd hh:mm:ss.uuuuuu threadid file` (klog's `FormatHeader`), built in a
/// fixed buffer as klog does.
fn write_header(
    w: &mut impl fmt::Write,
    severity: u8,
    at: jiff::civil::DateTime,
    pid: u32,
    file: &str,
) -> fmt::Result {
    let mut b = [b' '; 30];
    b[0] = severity;
    digits(&mut b[1..3], at.month().unsigned_abs().into(), b'0');
    digits(&mut b[3..5], at.day().unsigned_abs().into(), b'0');
    digits(&mut b[6..8], at.hour().unsigned_abs().into(), b'0');
    b[8] = b':';
    digits(&mut b[9..11], at.minute().unsigned_abs().into(), b'0');
    b[11] = b':';
    digits(&mut b[12..14], at.second().unsigned_abs().into(), b'0');
    b[14] = b'.';
    digits(
        &mut b[15..21],
        at.subsec_nanosecond().unsigned_abs() / 1000,
        b'0',
    );
    // klog's `nDigits(7, …, pad ' ')`: right-aligned in seven columns.
    digits(&mut b[22..29], pid, b' ');
    w.write_str(std::str::from_utf8(&b).map_err(|_| fmt::Error)?)?;
    w.write_str(file)
}

/// `n`'s last `out.len()` decimal digits, right-aligned, padded on the left with `pad`.
fn digits(out: &mut [u8], mut n: u32, pad: u8) {
    let mut i = out.len();
    while i > 0 && n > 0 {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    out[..i].fill(pad);
}

/// klog's file name: the base name.
fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// zap's `ShortCallerEncoder`: the file's last directory and its name.
fn short_caller(path: &str) -> &str {
    match path.rfind('/').and_then(|last| path[..last].rfind('/')) {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// Which of an event's fields a pass writes: the line's parts come in klog's order
/// whatever order the event holds them in.
#[derive(Clone, Copy)]
enum Pick {
    Message,
    /// The `error` (or `err`) field alone.
    Error,
    /// Every other field, the error left out when it has its own place.
    Rest {
        skip_error: bool,
    },
}

#[derive(Clone, Copy, PartialEq)]
enum Syntax {
    Text,
    Json,
}

/// The fields of one line written to `w` (one pass per [`Pick`]).
struct Fields<'a, W: fmt::Write> {
    w: &'a mut W,
    syntax: Syntax,
    pick: Pick,
    /// Whether the message was seen (an event may have none).
    found: bool,
    result: fmt::Result,
}

/// The key kubelet uses for a field: its `ErrorS` error is `err`.
fn key_of(field: &Field) -> &'static str {
    match field.name() {
        "error" | "err" => "err",
        name => name,
    }
}

impl<'a, W: fmt::Write> Fields<'a, W> {
    fn new(w: &'a mut W, syntax: Syntax, pick: Pick) -> Self {
        Fields {
            w,
            syntax,
            pick,
            found: false,
            result: Ok(()),
        }
    }

    /// Whether this pass writes `field`; as it is the message, the key is not written.
    fn wants(&self, field: &Field) -> bool {
        let message = field.name() == "message";
        let error = key_of(field) == "err";
        match self.pick {
            Pick::Message => message,
            Pick::Error => error,
            Pick::Rest { skip_error } => !(message || skip_error && error),
        }
    }

    /// ` key` (text) or `,"key":` (JSON); nothing for the message.
    fn key(&mut self, field: &Field) -> fmt::Result {
        if field.name() == "message" {
            self.found = true;
            return Ok(());
        }
        match self.syntax {
            Syntax::Text => write!(self.w, " {}", key_of(field)),
            Syntax::Json => {
                self.w.write_str(",\"")?;
                write_json_escaped(self.w, key_of(field))?;
                self.w.write_str("\":")
            }
        }
    }

    /// A field whose value is written as it is (a number, a boolean).
    fn bare(&mut self, field: &Field, value: &dyn fmt::Display) {
        if self.result.is_err() || !self.wants(field) {
            return;
        }
        self.result = self.key(field).and_then(|()| match self.syntax {
            Syntax::Text => write!(self.w, "={value}"),
            Syntax::Json => write!(self.w, "{value}"),
        });
    }

    /// A string field: the message Go-quoted, a value in klog's string form, or a
    /// JSON string.
    fn string(&mut self, field: &Field, s: &str) {
        let message = field.name() == "message";
        self.result = self.key(field).and_then(|()| match (self.syntax, message) {
            (Syntax::Text, true) => write_go_quoted(self.w, s),
            (Syntax::Text, false) if is_debug_quoted(s) => write!(self.w, "={s}"),
            (Syntax::Text, false) => write_string_value(self.w, s),
            (Syntax::Json, _) if is_debug_quoted(s) && is_json_string(s) => self.w.write_str(s),
            (Syntax::Json, _) => {
                self.w.write_char('"')?;
                write_json_escaped(self.w, s)?;
                self.w.write_char('"')
            }
        });
    }
}

impl<W: fmt::Write> Visit for Fields<'_, W> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_ok() && self.wants(field) {
            self.string(field, value);
        }
    }

    /// `%value` and `?value` fields (and a formatted message): rendered once into a
    /// buffer kept per thread, then quoted, so a line allocates nothing once warm.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() || !self.wants(field) {
            return;
        }
        RENDERED.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                buf.clear();
                self.result = write!(buf, "{value:?}");
                if self.result.is_ok() {
                    self.string(field, &buf);
                }
                if buf.capacity() > RENDERED_KEEP {
                    *buf = String::new();
                }
            }
            // A value whose formatting logs: render it apart.
            Err(_) => self.string(field, &format!("{value:?}")),
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.bare(field, &value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.bare(field, &value);
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.bare(field, &value);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.bare(field, &value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.bare(field, &value);
    }

    /// A finite float is a number; NaN and the infinities are strings, as zap
    /// writes them.
    fn record_f64(&mut self, field: &Field, value: f64) {
        if value.is_finite() {
            self.bare(field, &value);
        } else if self.result.is_ok() && self.wants(field) {
            let text = match value {
                v if v.is_nan() => "NaN",
                v if v > 0.0 => "+Inf",
                _ => "-Inf",
            };
            self.string(field, text);
        }
    }
}

thread_local! {
    /// Where a formatted value is rendered before it is quoted.
    static RENDERED: RefCell<String> = const { RefCell::new(String::new()) };
}
/// A rendering buffer grown past this (one huge value) is not kept.
const RENDERED_KEEP: usize = 64 * 1024;

/// A `?string` field's Debug text is quoted already: written as it is, not twice.
/// Only one quoted string is: `"a" or "b"` (a message that quotes) is quoted again.
fn is_debug_quoted(s: &str) -> bool {
    let Some(inner) = s.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return false;
    };
    let mut escaped = false;
    for c in inner.chars() {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '"') => return false,
            _ => {}
        }
    }
    !escaped
}

/// Whether Rust's Debug quoting of a string is valid JSON as it is (Rust writes
/// `\u{…}` and `\0`, JSON does not).
fn is_json_string(s: &str) -> bool {
    !s.contains("\\u{") && !s.contains("\\0") && !s.contains("\\'")
}

/// zap's JSON string escaping: `"` and `\`, `\n` `\r` `\t`, other control
/// characters as `\u00xx`; everything else as it is.
fn write_json_escaped(w: &mut impl fmt::Write, s: &str) -> fmt::Result {
    let mut plain_from = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            b if b < 0x20 => "",
            _ => continue,
        };
        w.write_str(&s[plain_from..i])?;
        plain_from = i + 1;
        if escape.is_empty() {
            write!(w, "\\u00{b:02x}")?;
        } else {
            w.write_str(escape)?;
        }
    }
    w.write_str(&s[plain_from..])
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// 2026-12-02 03:45:26.508123 UTC.
    const AT_MICROS: i64 = 1_796_183_126_508_123;

    /// Writes each event with a fixed time, pid 1234 and a zone one hour east of UTC.
    struct Capture {
        format: KlogFormat,
        out: Arc<Mutex<String>>,
    }

    impl<S: Subscriber> tracing_subscriber::Layer<S> for Capture {
        fn on_event(&self, event: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            let at = jiff::Timestamp::from_microsecond(AT_MICROS).unwrap();
            let mut out = self.out.lock().unwrap();
            self.format.write_line(&mut *out, at, event).unwrap();
        }
    }

    /// What `log` writes in `format`.
    fn written(format: LogFormat, log: impl FnOnce()) -> String {
        let out = Arc::new(Mutex::new(String::new()));
        let zone = jiff::tz::TimeZone::fixed(jiff::tz::offset(1));
        let capture = Capture {
            format: KlogFormat::with_zone(format, 1234, zone),
            out: out.clone(),
        };
        tracing::subscriber::with_default(tracing_subscriber::registry().with(capture), log);
        out.lock().unwrap().clone()
    }

    #[test]
    fn text_header_is_klogs_in_local_time() {
        let mut line = 0;
        let out = written(LogFormat::Text, || {
            line = line!() + 1;
            tracing::info!(pod = %"default/web", attempt = 2, ready = true, "container started");
        });
        assert_eq!(
            out,
            format!(
                "I1202 04:45:26.508123    1234 format.rs:{line}] \"container started\" pod=\"default/web\" attempt=2 ready=true\n"
            )
        );
        let out = written(LogFormat::Text, || {
            tracing::warn!("w");
            tracing::debug!("d");
            tracing::trace!("t");
        });
        let letters: Vec<&str> = out.lines().map(|l| &l[..1]).collect();
        assert_eq!(letters, ["W", "I", "I"]);
    }

    /// An error line puts its error first as `err` (klog's `ErrorS`); a warning keeps
    /// the field where it is, under kubelet's key.
    #[test]
    fn text_error_lines_put_err_first() {
        let out = written(LogFormat::Text, || {
            tracing::error!(pod = %"ns/p", error = %"no such file", "start failed");
            tracing::warn!(pod = %"ns/p", error = %"timeout", "probe errored");
        });
        let lines: Vec<&str> = out.lines().map(|l| l.split_once("] ").unwrap().1).collect();
        assert_eq!(
            lines,
            [
                "\"start failed\" err=\"no such file\" pod=\"ns/p\"",
                "\"probe errored\" pod=\"ns/p\" err=\"timeout\""
            ]
        );
        assert!(out.starts_with("E1202 "), "{out}");
    }

    /// The message is Go-quoted even across lines; a multi-line value takes klog's
    /// `=<` form; Display text that quotes is quoted again, a `?string` is not.
    #[test]
    fn text_quoting_of_messages_and_values() {
        let out = written(LogFormat::Text, || {
            tracing::warn!(
                output = %"line 1\nline 2\n",
                text = %"\"a\" or \"b\"",
                name = ?"x y",
                ctl = %"\u{1}",
                "probe said \"no\"\nthen"
            );
        });
        let body = out.split_once("] ").unwrap().1;
        assert_eq!(
            body,
            "\"probe said \\\"no\\\"\\nthen\" output=<\n\tline 1\n\tline 2\n > text=\"\\\"a\\\" or \\\"b\\\"\" name=\"x y\" ctl=\"\\x01\"\n"
        );
        // Every line after the first is a continuation, never a header.
        assert!(
            out.lines()
                .skip(1)
                .all(|l| l.starts_with('\t') || l.starts_with(" >"))
        );
    }

    /// The JSON line apart from its time: `ts` is milliseconds since the epoch.
    fn json_without_ts(line: &str) -> &str {
        let rest = line.strip_prefix("{\"ts\":").unwrap();
        let (ts, rest) = rest.split_once(',').unwrap();
        let ts: f64 = ts.parse().unwrap();
        assert!((ts - AT_MICROS as f64 / 1000.0).abs() < 0.01, "{ts}");
        rest
    }

    #[test]
    fn json_keys_order_and_types() {
        let mut line = 0;
        let out = written(LogFormat::Json, || {
            line = line!() + 1;
            tracing::info!(pod = %"default/web", attempt = 2, ready = true, ratio = 0.5, "container started");
            tracing::error!(pod = %"ns/p", error = %"no such file", "start failed");
        });
        let lines: Vec<&str> = out.lines().map(json_without_ts).collect();
        assert_eq!(
            lines,
            [
                format!(
                    "\"caller\":\"logging/format.rs:{line}\",\"msg\":\"container started\",\"v\":2,\"pod\":\"default/web\",\"attempt\":2,\"ready\":true,\"ratio\":0.5}}"
                ),
                format!(
                    "\"caller\":\"logging/format.rs:{}\",\"msg\":\"start failed\",\"pod\":\"ns/p\",\"err\":\"no such file\"}}",
                    line + 1
                )
            ]
        );
        for l in out.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v["ts"].is_f64(), "{l}");
        }
    }

    /// `v` is the `-v` a line shows from: warnings and the start-up summary 0,
    /// pod updates 2, events 3, sync-loop detail 4, CRI calls 6.
    #[test]
    fn json_verbosity_of_each_kind_of_line() {
        let out = written(LogFormat::Json, || {
            tracing::warn!("w");
            tracing::info!(target: super::super::STARTUP_TARGET, "s");
            tracing::info!("i");
            tracing::info!(target: super::super::EVENTS_TARGET, "e");
            tracing::debug!("d");
            tracing::trace!("t");
        });
        let vs: Vec<i64> = out
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["v"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        assert_eq!(vs, [0, 0, 2, 3, 4, 6]);
    }

    #[test]
    fn json_escaping_and_odd_values() {
        let mut line = 0;
        let out = written(LogFormat::Json, || {
            line = line!() + 1;
            tracing::info!(output = %"a\nb\u{1}\"é", name = ?"x y", nan = f64::NAN, "say \"hi\"");
        });
        assert_eq!(
            json_without_ts(out.trim_end()),
            format!(
                "\"caller\":\"logging/format.rs:{line}\",\"msg\":\"say \\\"hi\\\"\",\"v\":2,\"output\":\"a\\nb\\u0001\\\"é\",\"name\":\"x y\",\"nan\":\"NaN\"}}"
            )
        );
        let v: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
        assert_eq!(v["output"], "a\nb\u{1}\"é");
    }

    #[test]
    fn header_digits_and_names() {
        let mut b = [0u8; 7];
        digits(&mut b, 42, b' ');
        assert_eq!(&b, b"     42");
        digits(&mut b, 123_456_789, b' ');
        assert_eq!(&b, b"3456789");
        let mut b = [0u8; 6];
        digits(&mut b, 0, b'0');
        assert_eq!(&b, b"000000");
        assert_eq!(base_name("src/agent/node.rs"), "node.rs");
        assert_eq!(short_caller("src/agent/node.rs"), "agent/node.rs");
        assert_eq!(short_caller("node.rs"), "node.rs");
        assert!(is_debug_quoted("\"a \\\" b\""));
        assert!(!is_debug_quoted("\"a\" or \"b\""));
        assert!(!is_debug_quoted("\""));
    }
}

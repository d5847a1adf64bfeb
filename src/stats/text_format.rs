//! Prometheus text format 0.0.4 as Go's client writes it, for the registries kubelet
//! builds from its stats: `/metrics/resource` and `/metrics/cadvisor`. Families come in
//! name order, samples in label order, values in Go's float formatting.

use std::fmt::Write;

/// The content type of Prometheus text 0.0.4.
pub(crate) const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A sample's label pairs, sorted by name.
pub(super) type Labels = Vec<(&'static str, String)>;

/// One sample: label pairs (sorted by name), value, optional timestamp (Unix ms).
pub(super) struct Sample {
    pub labels: Labels,
    pub value: f64,
    pub time_ms: Option<i64>,
}

/// One metric family. `stable` marks kubelet's own stable metrics, whose HELP the
/// component-base registry prefixes with `[STABLE]`; cAdvisor's raw ones have none.
pub(super) struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: &'static str,
    pub stable: bool,
    pub samples: Vec<Sample>,
}

impl Family {
    pub(super) fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            kind,
            stable: false,
            samples: Vec::new(),
        }
    }

    /// The same family, marked as one of kubelet's stable metrics.
    pub(super) fn stable(self) -> Family {
        Family {
            stable: true,
            ..self
        }
    }
}

/// The `<name>` scrape error gauge both collectors write: 1 when the stats could not be
/// read, else 0.
pub(super) fn scrape_error(name: &'static str, scraped: bool) -> Family {
    let mut f = Family::new(
        name,
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    );
    f.samples.push(Sample {
        labels: Vec::new(),
        value: if scraped { 0.0 } else { 1.0 },
        time_ms: None,
    });
    f
}

/// Every family, in name order as the Go client gathers them.
pub(super) fn render(mut families: Vec<Family>) -> String {
    families.sort_by_key(|f| f.name);
    let mut out = String::new();
    for f in &mut families {
        write_family(&mut out, f);
    }
    out
}

/// One family as the text format wants it: HELP, TYPE, then its samples sorted by
/// labels; nothing at all for a family without samples, as the Go client does.
pub(super) fn write_family(out: &mut String, f: &mut Family) {
    if f.samples.is_empty() {
        return;
    }
    f.samples.sort_by(|a, b| a.labels.cmp(&b.labels));
    let stability = if f.stable { "[STABLE] " } else { "" };
    let _ = writeln!(out, "# HELP {} {stability}{}", f.name, f.help);
    let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
    for s in &f.samples {
        write_sample(out, f.name, s);
    }
}

/// One sample line: name, `{labels}` if any, the value and the timestamp if any.
fn write_sample(out: &mut String, name: &str, s: &Sample) {
    out.push_str(name);
    if !s.labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in s.labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = write!(out, " {}", go_float(s.value));
    if let Some(t) = s.time_ms {
        let _ = write!(out, " {t}");
    }
    out.push('\n');
}

/// A label value escaped as the text format wants.
pub(super) fn escape(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

/// Go's `strconv.FormatFloat(v, 'g', -1, 64)` as the Prometheus text writer uses it:
/// the shortest digits that read back the same; exponent form when the decimal
/// exponent is below -4 or at least 6 (the shortest format's precision), with a sign
/// and at least two exponent digits. `0`, `1`, `-1`, `NaN` and `±Inf` are written
/// directly, as the writer does.
pub(crate) fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `d.ddddde±x`.
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if v < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}e{esign}{:02}", exp.abs());
    }
    // Fixed form: the point after `exp + 1` digits.
    let point = exp + 1;
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else {
        let point = point as usize;
        if digits.len() <= point {
            format!("{digits}{}", "0".repeat(point - digits.len()))
        } else {
            format!("{}.{}", &digits[..point], &digits[point..])
        }
    };
    format!("{sign}{body}")
}

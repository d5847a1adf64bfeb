//! Go `time.Duration` text: kubelet flags and KubeletConfiguration fields are
//! written this way (`20s`, `1m30s`, `300ms`), so we parse and print it the same.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A signed Go duration in nanoseconds (Go's `time.Duration` is an `int64`).
/// Signed so that `-1s` parses and validation can reject it with a clear message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoDuration(i64);

impl GoDuration {
    pub const ZERO: GoDuration = GoDuration(0);

    pub const fn from_nanos(nanos: i64) -> Self {
        GoDuration(nanos)
    }

    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    pub const fn is_positive(self) -> bool {
        self.0 > 0
    }

    /// The std duration, or None when negative.
    pub fn to_std(self) -> Option<Duration> {
        u64::try_from(self.0).ok().map(Duration::from_nanos)
    }
}

impl From<GoDuration> for i128 {
    fn from(d: GoDuration) -> i128 {
        i128::from(d.0)
    }
}

impl TryFrom<Duration> for GoDuration {
    type Error = DurationError;

    fn try_from(d: Duration) -> Result<Self, DurationError> {
        i64::try_from(d.as_nanos())
            .map(GoDuration)
            .map_err(|_| DurationError::Invalid(format_go_duration(d)))
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, DurationError> {
        parse_go_duration(s)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_nanos(self.0 < 0, u128::from(self.0.unsigned_abs())))
    }
}

/// Why a duration did not parse; the Display text matches Go's `time.ParseDuration`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("time: invalid duration \"{0}\"")]
    Invalid(String),
    #[error("time: missing unit in duration \"{0}\"")]
    MissingUnit(String),
    #[error("time: unknown unit \"{unit}\" in duration \"{input}\"")]
    UnknownUnit { unit: String, input: String },
}

impl DurationError {
    /// A short reason for config messages, which already show the value.
    pub fn reason(&self) -> String {
        const HINT: &str = "use a Go duration such as 20s, 1m30s or 300ms";
        match self {
            DurationError::Invalid(_) => format!("not a valid duration ({HINT})"),
            DurationError::MissingUnit(_) => format!("missing unit ({HINT})"),
            DurationError::UnknownUnit { unit, .. } => {
                format!("unknown unit \"{unit}\" (valid units: ns, us, ms, s, m, h)")
            }
        }
    }
}

const NANOSECOND: u128 = 1;
const MICROSECOND: u128 = 1_000 * NANOSECOND;
const MILLISECOND: u128 = 1_000 * MICROSECOND;
const SECOND: u128 = 1_000 * MILLISECOND;
const MINUTE: u128 = 60 * SECOND;
const HOUR: u128 = 60 * MINUTE;

fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" => NANOSECOND,
        "us" | "\u{b5}s" | "\u{3bc}s" => MICROSECOND,
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        _ => return None,
    })
}

/// Parses a Go duration: an optional sign, then one or more decimal numbers
/// (with optional fraction) each followed by a unit; `0` alone needs no unit.
/// Like Go, the result must fit in an `int64` of nanoseconds.
pub(crate) fn parse_go_duration(input: &str) -> Result<GoDuration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let (neg, mut s) = match input.as_bytes().first() {
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        _ => (false, input),
    };
    if s == "0" {
        return Ok(GoDuration(0));
    }
    if s.is_empty() {
        return Err(invalid());
    }
    // |i64::MIN| nanoseconds: the largest magnitude a negative duration may have.
    let limit: u128 = 1 << 63;
    let mut total: u128 = 0;
    while !s.is_empty() {
        let b = s.as_bytes();
        if !(b[0] == b'.' || b[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let int_len = b.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut whole: u128 = 0;
        for &c in &b[..int_len] {
            whole = whole * 10 + u128::from(c - b'0');
            if whole > limit {
                return Err(invalid());
            }
        }
        s = &s[int_len..];
        // Fraction digits past what fits are ignored, as Go does.
        let (mut frac, mut scale, mut frac_len) = (0u128, 1u128, 0usize);
        if s.starts_with('.') {
            s = &s[1..];
            let digits = s.bytes().take_while(u8::is_ascii_digit).count();
            for c in s[..digits].bytes() {
                if scale < 10u128.pow(19) {
                    frac = frac * 10 + u128::from(c - b'0');
                    scale *= 10;
                }
            }
            frac_len = digits;
            s = &s[digits..];
        }
        if int_len == 0 && frac_len == 0 {
            return Err(invalid());
        }
        let unit_len = s
            .bytes()
            .take_while(|c| !(*c == b'.' || c.is_ascii_digit()))
            .count();
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(input.to_string()));
        }
        let unit_text = &s[..unit_len];
        s = &s[unit_len..];
        let unit = unit_nanos(unit_text).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit_text.to_string(),
            input: input.to_string(),
        })?;
        let value = whole * unit + frac * unit / scale;
        total += value;
        if total > limit {
            return Err(invalid());
        }
    }
    if neg {
        // total <= 2^63, so the negation fits.
        Ok(GoDuration((-(total as i128)) as i64))
    } else {
        i64::try_from(total).map(GoDuration).map_err(|_| invalid())
    }
}

/// Formats like Go's `Duration.String()`: `1m0s`, `20s`, `2m0s`, `100ms`, `1.5s`.
pub(crate) fn format_go_duration(d: Duration) -> String {
    format_nanos(false, d.as_nanos())
}

fn format_nanos(neg: bool, nanos: u128) -> String {
    let sign = if neg { "-" } else { "" };
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < SECOND {
        let (unit, digits) = if nanos < MICROSECOND {
            ("ns", 0)
        } else if nanos < MILLISECOND {
            ("\u{b5}s", 3)
        } else {
            ("ms", 6)
        };
        let (whole, frac) = split_frac(nanos, digits);
        return format!("{sign}{whole}{frac}{unit}");
    }
    let (secs, frac) = split_frac(nanos, 9);
    let mut out = format!("{}{frac}s", secs % 60);
    let mins = secs / 60;
    if mins > 0 {
        out = format!("{}m{out}", mins % 60);
        let hours = mins / 60;
        if hours > 0 {
            out = format!("{hours}h{out}");
        }
    }
    format!("{sign}{out}")
}

/// Splits `v` at `digits` decimal places: the integer part and ".fff" without
/// trailing zeros ("" when the fraction is zero).
fn split_frac(v: u128, digits: u32) -> (u128, String) {
    let scale = 10u128.pow(digits);
    let (whole, frac) = (v / scale, v % scale);
    if frac == 0 {
        return (whole, String::new());
    }
    let text = format!("{frac:0width$}", width = digits as usize);
    (whole, format!(".{}", text.trim_end_matches('0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn parses_go_durations() {
        let table: &[(&str, i64)] = &[
            ("0", 0),
            ("-0", 0),
            ("+0", 0),
            ("0s", 0),
            ("20s", 20 * S),
            ("1m30s", 90 * S),
            ("1h", 3600 * S),
            ("300ms", 300_000_000),
            ("1.5s", 1_500_000_000),
            ("2h45m", (2 * 3600 + 45 * 60) * S),
            ("-1s", -S),
            ("+5s", 5 * S),
            (".5s", 500_000_000),
            ("5.s", 5 * S),
            ("1.004s", 1_004_000_000),
            ("100ns", 100),
            ("10us", 10_000),
            ("10\u{b5}s", 10_000),
            ("10\u{3bc}s", 10_000),
            ("1h1m1s1ms1us1ns", 3661 * S + 1_001_001),
            ("3s3s", 6 * S),
            ("0.5h", 1_800 * S),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
        ];
        for (text, nanos) in table {
            assert_eq!(
                parse_go_duration(text),
                Ok(GoDuration::from_nanos(*nanos)),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_bad_durations() {
        for text in [
            "", "-", "s", ".", ".s", "1", "1.5", "abc", "1x", "1s2", "1 s", "--1s", "1e3s",
        ] {
            assert!(parse_go_duration(text).is_err(), "{text:?} should fail");
        }
        assert_eq!(
            parse_go_duration("1").unwrap_err().to_string(),
            "time: missing unit in duration \"1\""
        );
        assert_eq!(
            parse_go_duration("3x").unwrap_err().to_string(),
            "time: unknown unit \"x\" in duration \"3x\""
        );
        assert_eq!(
            parse_go_duration("9223372036854775808ns"),
            Err(DurationError::Invalid("9223372036854775808ns".into()))
        );
        assert!(parse_go_duration("3000000h").is_err());
    }

    #[test]
    fn formats_like_go() {
        let table: &[(u64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1\u{b5}s"),
            (100_000_000, "100ms"),
            (1_500_000, "1.5ms"),
            (1_000_000_000, "1s"),
            (1_500_000_000, "1.5s"),
            (20_000_000_000, "20s"),
            (60_000_000_000, "1m0s"),
            (90_000_000_000, "1m30s"),
            (120_000_000_000, "2m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (9_900_000_000_000, "2h45m0s"),
            (3_661_001_000_000, "1h1m1.001s"),
        ];
        for (nanos, text) in table {
            assert_eq!(format_go_duration(Duration::from_nanos(*nanos)), *text);
        }
        assert_eq!(GoDuration::from_nanos(-S).to_string(), "-1s");
        assert_eq!(
            GoDuration::from_nanos(i64::MIN).to_string(),
            "-2562047h47m16.854775808s"
        );
    }

    #[test]
    fn round_trips_and_converts() {
        for text in ["20s", "1m0s", "2h45m0s", "300ms", "1.5s", "-1m30s"] {
            assert_eq!(parse_go_duration(text).unwrap().to_string(), text);
        }
        assert_eq!(
            GoDuration::from_nanos(5 * S).to_std(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(GoDuration::from_nanos(-1).to_std(), None);
        assert_eq!(
            GoDuration::try_from(Duration::from_secs(60)),
            Ok(GoDuration::from_nanos(60 * S))
        );
        assert!(!GoDuration::ZERO.is_positive());
    }
}

//! Kubernetes resource quantities ("100m", "0.5", "128Mi", "1G", "1e3") as plain
//! numbers: millicores for CPU, bytes for memory. Enough for QoS and cgroup limits.
//!
//! Parsing is exact integer arithmetic (no floats): `0.1` CPU is exactly 100
//! millicores and `8Ei` is refused as too large instead of wrapping or saturating.
//! Values round up, as Kubernetes' `Value()` / `MilliValue()` do.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Longest quantity text we look at; the grammar needs far less for any value that
/// fits 64 bits, and a bound keeps the digit loop short for hostile input.
const MAX_QUANTITY_LEN: usize = 64;

/// Why a quantity cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum QuantityError {
    #[error(
        "{0:?} is not a quantity (expected a number with an optional suffix, e.g. 100m, 0.5, 128Mi, 1G, 1e3)"
    )]
    Invalid(String),
    #[error("{text:?} is too large: it must be at most {max} {unit}")]
    TooLarge {
        text: String,
        max: i64,
        unit: &'static str,
    },
}

/// A parsed quantity: `sign × digits × 10^exp10 × 2^exp2`, exactly.
struct Parsed {
    negative: bool,
    /// Significant digits, leading and trailing zeros removed (trailing ones moved to `exp10`).
    digits: u128,
    /// More significant digits than u128 holds (over 38): refused as too large.
    overflow: bool,
    exp10: i32,
    exp2: u32,
}

fn parse(text: &str) -> Option<Parsed> {
    if text.is_empty() || text.len() > MAX_QUANTITY_LEN {
        return None;
    }
    let (negative, rest) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (num, suffix) = rest.split_at(num_end);
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if int_part.is_empty() && frac_part.is_empty() || frac_part.contains('.') {
        return None;
    }
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.starts_with(['e', 'E']) => {
            let e = &s[1..];
            let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Any exponent beyond ±1000 is out of every range we use; clamp it.
            let magnitude = if digits.len() > 4 {
                1000
            } else {
                digits.parse::<i32>().ok()?.min(1000)
            };
            (
                if e.starts_with('-') {
                    -magnitude
                } else {
                    magnitude
                },
                0,
            )
        }
        _ => return None,
    };
    // All digits, the point removed; each fractional digit lowers the exponent.
    let all = int_part.bytes().chain(frac_part.bytes());
    let mut exp10 = exp10 - frac_part.len() as i32;
    let mut digits: u128 = 0;
    let mut pending_zeros: i32 = 0;
    let mut overflow = false;
    for b in all {
        let d = u128::from(b - b'0');
        if d == 0 && digits != 0 {
            // Defer trailing zeros: they go to the exponent if nothing follows.
            pending_zeros += 1;
            continue;
        }
        if d == 0 {
            continue; // leading zero
        }
        let next = (0..=pending_zeros)
            .try_fold(digits, |n, _| n.checked_mul(10))
            .and_then(|n| n.checked_add(d));
        pending_zeros = 0;
        match next {
            Some(n) => digits = n,
            None => overflow = true,
        }
    }
    exp10 += pending_zeros;
    Some(Parsed {
        negative,
        digits,
        overflow,
        exp10,
        exp2,
    })
}

/// `ceil(p × 10^scale)` as an i64, or None when it does not fit.
fn scaled(p: &Parsed, scale: i32) -> Option<i64> {
    if p.overflow {
        return None;
    }
    if p.digits == 0 {
        return Some(0);
    }
    let mut n = p.digits.checked_mul(1u128.checked_shl(p.exp2)?)?;
    let exp10 = p.exp10 + scale;
    let mut remainder = false;
    if exp10 >= 0 {
        n = n.checked_mul(10u128.checked_pow(exp10 as u32)?)?;
    } else {
        let div = 10u128.checked_pow(exp10.unsigned_abs());
        match div {
            Some(div) => {
                remainder = n % div != 0;
                n /= div;
            }
            // Divisor beyond u128: the value is below 1, not zero.
            None => {
                remainder = true;
                n = 0;
            }
        }
    }
    let n = i64::try_from(n).ok()?;
    // Round up, towards +∞ (a negative value's fraction is dropped).
    if p.negative {
        Some(-n)
    } else if remainder {
        n.checked_add(1)
    } else {
        Some(n)
    }
}

fn value(q: &str, scale: i32, unit: &'static str) -> Result<i64, QuantityError> {
    let text = q.trim();
    let p = parse(text).ok_or_else(|| QuantityError::Invalid(text.to_string()))?;
    scaled(&p, scale).ok_or_else(|| QuantityError::TooLarge {
        text: text.to_string(),
        max: i64::MAX,
        unit,
    })
}

/// CPU in millicores (Kubernetes' `MilliValue`).
pub(crate) fn milli_cpu(q: &Quantity) -> Result<i64, QuantityError> {
    value(&q.0, 3, "millicores")
}

/// Memory (or any byte or count quantity) in whole units, rounded up (`Value`).
pub(crate) fn bytes(q: &Quantity) -> Result<i64, QuantityError> {
    value(&q.0, 0, "bytes")
}

/// A byte count as Kubernetes writes it canonically (BinarySI): the largest
/// binary suffix that divides it exactly ("16348964Ki"), else plain bytes.
pub(crate) fn binary_si(bytes: i64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    if bytes == 0 {
        return "0".into();
    }
    for (s, shift) in SUFFIXES {
        let unit = 1i64 << shift;
        if bytes % unit == 0 {
            return format!("{}{s}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// Go's canonical `Quantity.String()` for an integer value, binary (`1Mi`) or
/// decimal (`2k`); Go prints binary quantities between -1024 and 1024 as decimal ones.
pub(crate) fn canonical(value: i64, binary: bool) -> String {
    if binary && value.abs() >= 1024 {
        let mut v = value;
        let mut i = 0;
        while i < 6 && v % 1024 == 0 && v != 0 {
            v /= 1024;
            i += 1;
        }
        let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][i];
        return format!("{v}{suffix}");
    }
    let mut v = value;
    let mut i = 0;
    while i < 6 && v % 1000 == 0 && v != 0 {
        v /= 1000;
        i += 1;
    }
    let suffix = ["", "k", "M", "G", "T", "P", "E"][i];
    format!("{v}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> Result<i64, QuantityError> {
        milli_cpu(&Quantity(s.to_string()))
    }
    fn b(s: &str) -> Result<i64, QuantityError> {
        bytes(&Quantity(s.to_string()))
    }

    #[test]
    fn parses_common_forms() {
        assert_eq!(milli("100m"), Ok(100));
        assert_eq!(milli("0.5"), Ok(500));
        assert_eq!(milli(".5"), Ok(500));
        assert_eq!(milli("2"), Ok(2000));
        assert_eq!(milli("+2."), Ok(2000));
        assert_eq!(b("128Mi"), Ok(128 * 1024 * 1024));
        assert_eq!(b("1G"), Ok(1_000_000_000));
        assert_eq!(b("1e3"), Ok(1000));
        assert_eq!(b("1E+3"), Ok(1000));
        assert_eq!(b("1.5Ki"), Ok(1536));
        assert_eq!(b("0"), Ok(0));
        assert_eq!(b("000"), Ok(0));
        assert_eq!(b("-1Ki"), Ok(-1024));
    }

    #[test]
    fn exact_where_floats_are_not() {
        // 0.1 + 0.2 style errors: 0.3 CPU is exactly 300m, 1.1Gi exact bytes.
        assert_eq!(milli("0.3"), Ok(300));
        assert_eq!(milli("2.675"), Ok(2675));
        assert_eq!(b("1.1Gi"), Ok(1_181_116_006 + 1)); // 1.1 × 2^30 = 1181116006.4, rounded up
        assert_eq!(b("9223372036854775807"), Ok(i64::MAX));
        assert_eq!(b("100.000000000000000000000000000000000000000"), Ok(100));
        assert_eq!(
            b("0.000000000000000000000000000000000000000001e1000"),
            Err(QuantityError::TooLarge {
                text: "0.000000000000000000000000000000000000000001e1000".into(),
                max: i64::MAX,
                unit: "bytes"
            })
        );
    }

    #[test]
    fn rounds_up_like_kubernetes() {
        assert_eq!(milli("1n"), Ok(1));
        assert_eq!(milli("0.0001"), Ok(1));
        assert_eq!(b("1m"), Ok(1));
        assert_eq!(b("1e-2000"), Ok(1));
        assert_eq!(b("0.5"), Ok(1));
    }

    #[test]
    fn too_large_is_an_error_not_a_wrap() {
        assert!(matches!(
            b("9223372036854775808"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(b("8Ei"), Err(QuantityError::TooLarge { .. })));
        assert!(matches!(b("1e19"), Err(QuantityError::TooLarge { .. })));
        assert_eq!(b("7Ei"), Ok(7 << 60));
        // Fits as cores but not as millicores.
        assert!(matches!(
            milli("9223372036854775807"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            milli("1e999999999"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            milli("1e99999999999999999999"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            b(&"9".repeat(40)),
            Err(QuantityError::TooLarge { .. })
        ));
        let e = b("8Ei").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "\"8Ei\" is too large: it must be at most {} bytes",
                i64::MAX
            )
        );
    }

    #[test]
    fn malformed_is_invalid() {
        for s in [
            "", "abc", "1Zi", "1.2.3", ".", "1e", "1e+", "--1", "1 Gi", "Mi", "1ee3", "1e3.5",
        ] {
            assert!(matches!(b(s), Err(QuantityError::Invalid(_))), "{s:?}");
        }
        assert!(matches!(b(&"1".repeat(65)), Err(QuantityError::Invalid(_))));
    }
}

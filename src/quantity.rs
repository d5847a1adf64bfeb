//! Kubernetes resource quantities ("100m", "0.5", "128Mi", "1G", "1e3") as plain
//! numbers: millicores for CPU, bytes for memory. Enough for QoS and cgroup limits.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Parses a quantity into its value scaled by `scale` (1000 for milli-units, 1 for
/// bytes), rounding up as Kubernetes does. None when the text is not a quantity.
pub fn parse_scaled(q: &str, scale: f64) -> Option<i64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult: f64 = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    let v = num * mult * scale;
    v.is_finite().then(|| v.ceil() as i64)
}

/// CPU in millicores.
pub fn milli_cpu(q: &Quantity) -> Option<i64> {
    parse_scaled(&q.0, 1000.0)
}

/// Memory (or any byte quantity) in bytes.
pub fn bytes(q: &Quantity) -> Option<i64> {
    parse_scaled(&q.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_scaled("100m", 1000.0), Some(100));
        assert_eq!(parse_scaled("0.5", 1000.0), Some(500));
        assert_eq!(parse_scaled("2", 1000.0), Some(2000));
        assert_eq!(parse_scaled("128Mi", 1.0), Some(128 * 1024 * 1024));
        assert_eq!(parse_scaled("1G", 1.0), Some(1_000_000_000));
        assert_eq!(parse_scaled("1e3", 1.0), Some(1000));
        assert_eq!(parse_scaled("1Zi", 1.0), None);
        assert_eq!(parse_scaled("abc", 1.0), None);
    }
}

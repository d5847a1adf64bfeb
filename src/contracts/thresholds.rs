//! Eviction thresholds as kubelet spells them (`--eviction-hard`,
//! `evictionHard`): a signal and a quantity or a percentage of capacity
//! (kubelet's `ParseThresholdConfig` / `parseThresholdStatement`).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity;

/// kubelet's eviction signals (`pkg/kubelet/eviction/api/types.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Signal {
    MemoryAvailable,
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    ContainerFsAvailable,
    ContainerFsInodesFree,
    PidAvailable,
}

impl Signal {
    pub(crate) const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
        Signal::PidAvailable,
    ];

    /// kubelet's spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// An amount of this signal as a person reads it: bytes in the nearest binary
    /// unit (`92Mi`), inodes and pids as counts.
    pub(crate) fn readable(self, amount: i64) -> String {
        let counts = matches!(
            self,
            Signal::NodeFsInodesFree
                | Signal::ImageFsInodesFree
                | Signal::ContainerFsInodesFree
                | Signal::PidAvailable
        );
        if counts || amount.abs() < 1024 {
            return amount.to_string();
        }
        let units = ["Ki", "Mi", "Gi", "Ti"];
        let mut v = amount as f64 / 1024.0;
        let mut i = 0;
        while v.abs() >= 1024.0 && i + 1 < units.len() {
            v /= 1024.0;
            i += 1;
        }
        if v.fract().abs() < 0.05 || v.abs() >= 100.0 {
            format!("{v:.0}{}", units[i])
        } else {
            format!("{v:.1}{}", units[i])
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How much of a resource must stay available.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ThresholdValue {
    /// An absolute amount: bytes, inodes or pids.
    Quantity(i64),
    /// A fraction of capacity, in (0, 1) (`10%` is 0.1).
    Percentage(f64),
}

impl ThresholdValue {
    /// The amount for a resource whose capacity is `capacity` (kubelet's
    /// `GetThresholdQuantity`: percentages of capacity, rounded down).
    pub(crate) fn amount(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::Percentage(p) => (capacity as f64 * p) as i64,
        }
    }
}

impl fmt::Display for ThresholdValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // In the largest exact binary suffix ("100Mi"), as kubelet echoes it.
            ThresholdValue::Quantity(q) => f.write_str(&crate::quantity::binary_si(*q)),
            // Rounded so that 0.15 prints as 15, not 15.000000000000002.
            ThresholdValue::Percentage(p) => write!(f, "{}%", (p * 1e6).round() / 1e4),
        }
    }
}

/// A set of thresholds, one per signal; `0%` and `100%` are left out (disabled).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Thresholds(pub BTreeMap<Signal, ThresholdValue>);

impl Thresholds {
    pub(crate) fn get(&self, signal: Signal) -> Option<ThresholdValue> {
        self.0.get(&signal).copied()
    }

    /// Parses `(signal, value)` pairs; a later pair for the same signal wins, as
    /// in kubelet's map.
    pub(crate) fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Thresholds, ThresholdError> {
        let mut map = BTreeMap::new();
        for (signal, value) in pairs {
            let signal =
                Signal::parse(signal).ok_or_else(|| ThresholdError::Signal(signal.to_string()))?;
            match parse_value(signal, value)? {
                Some(v) => map.insert(signal, v),
                None => map.remove(&signal),
            };
        }
        Ok(Thresholds(map))
    }
}

impl fmt::Display for Thresholds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (s, v) in &self.0 {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{s}<{v}")?;
        }
        Ok(())
    }
}

/// Why a threshold is refused (kubelet's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ThresholdError {
    #[error("unsupported eviction signal {0}")]
    Signal(String),
    #[error("eviction percentage threshold {signal} must be a number followed by %: {value}")]
    Percentage { signal: Signal, value: String },
    #[error("eviction percentage threshold {signal} must be >= 0%: {value}")]
    NegativePercentage { signal: Signal, value: String },
    #[error("eviction percentage threshold {signal} must be <= 100%: {value}")]
    OverHundred { signal: Signal, value: String },
    #[error("eviction threshold {signal}: {source}")]
    Quantity {
        signal: Signal,
        #[source]
        source: quantity::QuantityError,
    },
    #[error("eviction threshold {signal} must be positive: {value}")]
    NotPositive { signal: Signal, value: String },
}

/// One value; `None` for `0%` and `100%`, which kubelet ignores.
fn parse_value(signal: Signal, value: &str) -> Result<Option<ThresholdValue>, ThresholdError> {
    if let Some(number) = value.strip_suffix('%') {
        if value == "0%" || value == "100%" {
            return Ok(None);
        }
        let p: f64 = number
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite())
            .ok_or_else(|| ThresholdError::Percentage {
                signal,
                value: value.to_string(),
            })?;
        if p < 0.0 {
            return Err(ThresholdError::NegativePercentage {
                signal,
                value: value.to_string(),
            });
        }
        if p > 100.0 {
            return Err(ThresholdError::OverHundred {
                signal,
                value: value.to_string(),
            });
        }
        return Ok(Some(ThresholdValue::Percentage(p / 100.0)));
    }
    let q = quantity::bytes(&Quantity(value.to_string()))
        .map_err(|source| ThresholdError::Quantity { signal, source })?;
    if q <= 0 {
        return Err(ThresholdError::NotPositive {
            signal,
            value: value.to_string(),
        });
    }
    Ok(Some(ThresholdValue::Quantity(q)))
}

/// kubelet's Linux `DefaultEvictionHard` (`pkg/kubelet/eviction/defaults_linux.go`),
/// as the flag spells it. A given map replaces it whole (kubelet's
/// `mergeDefaultEvictionSettings` defaults to false).
pub(crate) const DEFAULT_EVICTION_HARD: &str =
    "imagefs.available<15%,memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_in_binary_units_or_as_counts() {
        assert_eq!(Signal::MemoryAvailable.readable(92 << 20), "92Mi");
        assert_eq!(Signal::MemoryAvailable.readable(1536 << 20), "1.5Gi");
        assert_eq!(Signal::NodeFsAvailable.readable(500), "500");
        assert_eq!(Signal::PidAvailable.readable(4096), "4096");
        assert_eq!(Signal::MemoryAvailable.readable(-(3 << 20)), "-3Mi");
    }

    fn parse(pairs: &[(&str, &str)]) -> Result<Thresholds, ThresholdError> {
        Thresholds::parse(pairs.iter().copied())
    }

    #[test]
    fn quantities_and_percentages() {
        let t = parse(&[
            ("memory.available", "100Mi"),
            ("nodefs.available", "10%"),
            ("nodefs.inodesFree", "5.5%"),
            ("pid.available", "1k"),
        ])
        .unwrap();
        assert_eq!(
            t.get(Signal::MemoryAvailable),
            Some(ThresholdValue::Quantity(100 << 20))
        );
        assert_eq!(
            t.get(Signal::NodeFsAvailable),
            Some(ThresholdValue::Percentage(0.1))
        );
        assert_eq!(
            t.get(Signal::NodeFsInodesFree),
            Some(ThresholdValue::Percentage(0.055))
        );
        assert_eq!(
            t.get(Signal::PidAvailable),
            Some(ThresholdValue::Quantity(1000))
        );
        assert_eq!(t.get(Signal::ImageFsAvailable), None);
        assert_eq!(
            t.get(Signal::NodeFsAvailable).unwrap().amount(1_000_000),
            100_000
        );
        assert_eq!(ThresholdValue::Quantity(7).amount(1_000_000), 7);
    }

    #[test]
    fn zero_and_hundred_percent_disable() {
        let t = parse(&[("memory.available", "0%"), ("nodefs.available", "100%")]).unwrap();
        assert!(t.0.is_empty());
        // A later 0% removes an earlier value for the same signal.
        let t = parse(&[("memory.available", "1Gi"), ("memory.available", "0%")]).unwrap();
        assert!(t.0.is_empty());
    }

    #[test]
    fn refusals_name_the_signal_and_value() {
        let err = |pairs: &[(&str, &str)]| parse(pairs).unwrap_err().to_string();
        assert_eq!(
            err(&[("memory.free", "1Gi")]),
            "unsupported eviction signal memory.free"
        );
        assert_eq!(
            err(&[("nodefs.available", "-5%")]),
            "eviction percentage threshold nodefs.available must be >= 0%: -5%"
        );
        assert_eq!(
            err(&[("nodefs.available", "150%")]),
            "eviction percentage threshold nodefs.available must be <= 100%: 150%"
        );
        assert_eq!(
            err(&[("nodefs.available", "x%")]),
            "eviction percentage threshold nodefs.available must be a number followed by %: x%"
        );
        assert_eq!(
            err(&[("memory.available", "0")]),
            "eviction threshold memory.available must be positive: 0"
        );
        assert_eq!(
            err(&[("memory.available", "-1Gi")]),
            "eviction threshold memory.available must be positive: -1Gi"
        );
        assert!(
            err(&[("memory.available", "lots")])
                .starts_with("eviction threshold memory.available: ")
        );
    }

    #[test]
    fn the_default_parses_to_kubelets_four_thresholds() {
        let pairs = DEFAULT_EVICTION_HARD
            .split(',')
            .map(|kv| kv.split_once('<').unwrap());
        let t = Thresholds::parse(pairs).unwrap();
        assert_eq!(t.0.len(), 4);
        assert_eq!(
            t.to_string(),
            "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%"
        );
    }
}

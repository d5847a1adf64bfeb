//! The topology manager's settings as kubelet takes them (`topologyManagerPolicy`,
//! `topologyManagerScope`, `topologyManagerPolicyOptions`), checked as kubelet checks
//! them, with kubelet's words when they are wrong.

use std::collections::BTreeMap;

/// kubelet refuses machines with more NUMA nodes than this unless
/// `max-allowable-numa-nodes` raises it: the hint walk grows with every subset.
const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

const PREFER_CLOSEST_NUMA_NODES: &str = "prefer-closest-numa-nodes";
const MAX_ALLOWABLE_NUMA_NODES: &str = "max-allowable-numa-nodes";

/// Why the topology manager cannot start (kubelet's error texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TopologyError {
    #[error("unknown policy: \"{0}\"")]
    UnknownPolicy(String),
    #[error("unknown scope: \"{0}\"")]
    UnknownScope(String),
    /// A policy option kubelet refuses; the text is kubelet's.
    #[error("{0}")]
    Option(String),
    #[error("cannot discover NUMA topology: {0}")]
    Numa(String),
    #[error("unsupported on machines with more than {0} NUMA Nodes")]
    TooManyNodes(usize),
}

/// What the kubelet configuration says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopologySettings {
    /// `none`, `best-effort`, `restricted` or `single-numa-node`.
    pub policy: String,
    /// `container` or `pod`.
    pub scope: String,
    /// `topologyManagerPolicyOptions`.
    pub options: BTreeMap<String, String>,
}

impl Default for TopologySettings {
    /// kubelet's defaults: policy `none`, scope `container`.
    fn default() -> Self {
        Self {
            policy: "none".into(),
            scope: "container".into(),
            options: BTreeMap::new(),
        }
    }
}

/// The four policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PolicyName {
    None,
    BestEffort,
    Restricted,
    SingleNumaNode,
}

impl PolicyName {
    pub(crate) fn parse(s: &str) -> Result<Self, TopologyError> {
        match s {
            "none" => Ok(Self::None),
            "best-effort" => Ok(Self::BestEffort),
            "restricted" => Ok(Self::Restricted),
            "single-numa-node" => Ok(Self::SingleNumaNode),
            other => Err(TopologyError::UnknownPolicy(other.into())),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::BestEffort => "best-effort",
            Self::Restricted => "restricted",
            Self::SingleNumaNode => "single-numa-node",
        }
    }
}

/// The policy options kubelet 1.36 knows; both are on by default (beta or GA), no
/// alpha option exists, and any other name is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PolicyOptions {
    pub prefer_closest_numa: bool,
    pub max_allowable_numa_nodes: usize,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        Self {
            prefer_closest_numa: false,
            max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
        }
    }
}

impl PolicyOptions {
    /// kubelet's `NewPolicyOptions`, with its error texts.
    pub(crate) fn parse(options: &BTreeMap<String, String>) -> Result<Self, TopologyError> {
        let mut out = Self::default();
        for (name, value) in options {
            match name.as_str() {
                PREFER_CLOSEST_NUMA_NODES => {
                    out.prefer_closest_numa = go_parse_bool(value).ok_or_else(|| {
                        TopologyError::Option(format!(
                            "bad value for option {}: strconv.ParseBool: parsing {}: invalid syntax",
                            crate::klog::go_quote(name),
                            crate::klog::go_quote(value)
                        ))
                    })?;
                }
                MAX_ALLOWABLE_NUMA_NODES => {
                    let n: i64 = value.parse().map_err(|_| {
                        TopologyError::Option(format!(
                            "unable to convert policy option to integer {}: strconv.Atoi: parsing {}: invalid syntax",
                            crate::klog::go_quote(name),
                            crate::klog::go_quote(value)
                        ))
                    })?;
                    if n < DEFAULT_MAX_ALLOWABLE_NUMA_NODES as i64 {
                        return Err(TopologyError::Option(format!(
                            "the minimum value of {} should not be less than {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}",
                            crate::klog::go_quote(name)
                        )));
                    }
                    if n > DEFAULT_MAX_ALLOWABLE_NUMA_NODES as i64 {
                        tracing::info!(target: crate::logging::STARTUP_TARGET, max_allowable_numa_nodes = n, defaultMaxAllowableNUMANodes = DEFAULT_MAX_ALLOWABLE_NUMA_NODES, "WARNING: the value of max-allowable-numa-nodes is more than the default recommended value");
                    }
                    out.max_allowable_numa_nodes = usize::try_from(n).unwrap_or(usize::MAX);
                }
                other => {
                    return Err(TopologyError::Option(format!(
                        "unknown Topology Manager Policy option: {}",
                        crate::klog::go_quote(other)
                    )));
                }
            }
        }
        Ok(out)
    }
}

/// Go's `strconv.ParseBool`.
fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Result<PolicyOptions, TopologyError> {
        let m = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PolicyOptions::parse(&m)
    }

    #[test]
    fn options_parse_and_refuse_with_kubelets_words() {
        let o = opts(&[
            ("prefer-closest-numa-nodes", "True"),
            ("max-allowable-numa-nodes", "16"),
        ])
        .unwrap();
        assert!(o.prefer_closest_numa);
        assert_eq!(o.max_allowable_numa_nodes, 16);
        assert_eq!(opts(&[]).unwrap(), PolicyOptions::default());
        let err = |p| opts(p).unwrap_err().to_string();
        assert_eq!(
            err(&[("foo", "1")]),
            "unknown Topology Manager Policy option: \"foo\""
        );
        assert_eq!(
            err(&[("prefer-closest-numa-nodes", "yes")]),
            "bad value for option \"prefer-closest-numa-nodes\": strconv.ParseBool: parsing \"yes\": invalid syntax"
        );
        assert_eq!(
            err(&[("max-allowable-numa-nodes", "4")]),
            "the minimum value of \"max-allowable-numa-nodes\" should not be less than 8"
        );
        assert_eq!(
            err(&[("max-allowable-numa-nodes", "x")]),
            "unable to convert policy option to integer \"max-allowable-numa-nodes\": strconv.Atoi: parsing \"x\": invalid syntax"
        );
        assert_eq!(
            PolicyName::parse("strict").unwrap_err().to_string(),
            "unknown policy: \"strict\""
        );
    }
}

//! The resource managers' settings (kubelet's `cpuManager*`, `memoryManagerPolicy`,
//! `reservedMemory`, `topologyManager*` and `reservedSystemCPUs`), parsed and checked
//! here as kubelet's configuration validation does; each manager checks the rest
//! (its policy options against the machine) when it starts.

use std::collections::BTreeMap;
use std::time::Duration;

use super::settings::{InvalidValue, Kind, Setting, map_pairs, positive_duration, row};

/// The CPU, memory and topology managers' settings, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceManagerOptions {
    /// `cpuManagerPolicy`: `none` or `static`.
    pub cpu_policy: String,
    /// `cpuManagerPolicyOptions`: e.g. `full-pcpus-only=true`.
    pub cpu_policy_options: BTreeMap<String, String>,
    /// `cpuManagerReconcilePeriod`: how often every container's cpuset is checked.
    pub cpu_reconcile_period: Duration,
    /// `reservedSystemCPUs` (`--reserved-cpus`): a kernel CPU list, or None.
    pub reserved_cpus: Option<String>,
    /// `memoryManagerPolicy`: `None` or `Static`.
    pub memory_policy: String,
    /// `reservedMemory` (`--reserved-memory`): per NUMA node, bytes per resource.
    pub reserved_memory: BTreeMap<usize, BTreeMap<String, i64>>,
    /// `topologyManagerPolicy`: `none`, `best-effort`, `restricted`, `single-numa-node`.
    pub topology_policy: String,
    /// `topologyManagerScope`: `container` or `pod`.
    pub topology_scope: String,
    /// `topologyManagerPolicyOptions`.
    pub topology_policy_options: BTreeMap<String, String>,
}

impl Default for ResourceManagerOptions {
    /// kubelet's defaults.
    fn default() -> Self {
        Self {
            cpu_policy: "none".into(),
            cpu_policy_options: BTreeMap::new(),
            cpu_reconcile_period: Duration::from_secs(10),
            reserved_cpus: None,
            memory_policy: "None".into(),
            reserved_memory: BTreeMap::new(),
            topology_policy: "none".into(),
            topology_scope: "container".into(),
            topology_policy_options: BTreeMap::new(),
        }
    }
}

/// `cpuManagerPolicy`: kubelet's CPU manager refuses any other name at start.
pub(super) fn cpu_policy(text: &str) -> Result<String, InvalidValue> {
    match text {
        "none" | "static" => Ok(text.to_string()),
        other => Err(InvalidValue(format!("unknown policy: {other:?}"))),
    }
}

/// `memoryManagerPolicy`: `None` or `Static` (kubelet's spelling).
pub(super) fn memory_policy(text: &str) -> Result<String, InvalidValue> {
    match text {
        "None" | "Static" => Ok(text.to_string()),
        other => Err(InvalidValue(format!("unknown policy: {other:?}"))),
    }
}

/// `topologyManagerPolicy`, with kubelet's validation message.
pub(super) fn topology_policy(text: &str) -> Result<String, InvalidValue> {
    const ALLOWED: [&str; 4] = ["none", "best-effort", "restricted", "single-numa-node"];
    if ALLOWED.contains(&text) {
        return Ok(text.to_string());
    }
    Err(InvalidValue(format!(
        "{text:?} must be one of: [\"none\" \"best-effort\" \"restricted\" \"single-numa-node\"]"
    )))
}

/// `topologyManagerScope`, with kubelet's validation message.
pub(super) fn topology_scope(text: &str) -> Result<String, InvalidValue> {
    match text {
        "container" | "pod" => Ok(text.to_string()),
        other => Err(InvalidValue(format!(
            "{other:?} must be one of: \"container\", or \"pod\""
        ))),
    }
}

/// `reservedSystemCPUs`: a kernel CPU list (`0-1,4`); empty is none.
pub(super) fn reserved_cpus(text: &str) -> Result<Option<String>, InvalidValue> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let cpus = crate::cm::parse_cpu_list(text)
        .map_err(|e| InvalidValue(format!("unable to parse {text}, error: {e}")))?;
    Ok(Some(crate::cm::format_cpu_list(&cpus)))
}

/// The most NUMA nodes a reservation may name (kubelet's topology manager's own ceiling).
const MAX_NUMA_NODE: usize = 63;

/// `--reserved-memory`: `N:memory=1Gi,hugepages-2Mi=2Mi`, entries split by `;` (a
/// repeated flag adds entries; the config file's list is turned into the same text).
pub(super) fn reserved_memory(
    text: &str,
) -> Result<BTreeMap<usize, BTreeMap<String, i64>>, InvalidValue> {
    let mut out: BTreeMap<usize, BTreeMap<String, i64>> = BTreeMap::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let bad = || {
            InvalidValue(format!(
                "the reserved memory has incorrect format, expected \
                 numaNodeID:type=quantity[,type=quantity...], got {entry}"
            ))
        };
        let (node, limits) = entry.split_once(':').ok_or_else(bad)?;
        let node: usize = node.trim().parse().map_err(|_| bad())?;
        if node > MAX_NUMA_NODE {
            return Err(InvalidValue(format!(
                "NUMA node {node} is past {MAX_NUMA_NODE}"
            )));
        }
        for pair in limits.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').ok_or_else(bad)?;
            let name = name.trim();
            if name != "memory" && !name.starts_with("hugepages-") {
                return Err(InvalidValue(format!(
                    "invalid memory type {name:?}, should be one of memory or hugepages-*"
                )));
            }
            let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(value.trim().into());
            let bytes = crate::quantity::bytes(&q)
                .ok()
                .filter(|b| *b >= 0)
                .ok_or_else(|| {
                    InvalidValue(format!("failed to parse memory quantity {value:?}"))
                })?;
            let node_limits = out.entry(node).or_default();
            if node_limits.insert(name.to_string(), bytes).is_some() {
                return Err(InvalidValue(format!(
                    "the reserved memory has a duplicate value for NUMA node {node} and \
                     resource {name:?}"
                )));
            }
        }
    }
    Ok(out)
}

/// A `k=v,...` map of owned strings.
fn string_map(text: &str) -> Result<BTreeMap<String, String>, InvalidValue> {
    let pairs = map_pairs(text, '=')?;
    Ok(pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// kubelet's CPU manager.
pub(super) const CPU: &[Setting] = &[
    row(
        "cpu-manager-policy",
        Some("cpuManagerPolicy"),
        Kind::Text,
        "none",
        "none|static",
        "The CPU manager's policy: static gives Guaranteed containers with whole CPUs exclusive \
         CPUs",
        |o, i| cpu_policy(i.text).map(|p| o.resource_managers.cpu_policy = p),
    ),
    row(
        "cpu-manager-policy-options",
        Some("cpuManagerPolicyOptions"),
        Kind::Map('='),
        "",
        "full-pcpus-only=true,...",
        "The static policy's options (GA and beta ones)",
        |o, i| string_map(i.text).map(|m| o.resource_managers.cpu_policy_options = m),
    ),
    row(
        "cpu-manager-reconcile-period",
        Some("cpuManagerReconcilePeriod"),
        Kind::Duration,
        "10s",
        "DURATION",
        "How often every container's cpuset is made what the CPU manager says",
        |o, i| positive_duration(i.text).map(|d| o.resource_managers.cpu_reconcile_period = d),
    ),
    row(
        "reserved-cpus",
        Some("reservedSystemCPUs"),
        Kind::Text,
        "",
        "CPU-LIST",
        "CPUs kept for the system and Kubernetes daemons (e.g. 0-1); overrides the CPU of \
         kube-reserved and system-reserved",
        |o, i| reserved_cpus(i.text).map(|c| o.resource_managers.reserved_cpus = c),
    ),
];

/// kubelet's memory manager.
pub(super) const MEMORY: &[Setting] = &[
    row(
        "memory-manager-policy",
        Some("memoryManagerPolicy"),
        Kind::Text,
        "None",
        "None|Static",
        "The memory manager's policy: Static pins Guaranteed pods' memory to NUMA nodes",
        |o, i| memory_policy(i.text).map(|p| o.resource_managers.memory_policy = p),
    ),
    row(
        "reserved-memory",
        Some("reservedMemory"),
        Kind::ReservedMemory,
        "",
        "N:memory=1Gi,...;...",
        "Memory reserved per NUMA node for the Static memory policy; repeat the flag for more \
         nodes",
        |o, i| reserved_memory(i.text).map(|r| o.resource_managers.reserved_memory = r),
    ),
];

/// kubelet's topology manager.
pub(super) const TOPOLOGY: &[Setting] = &[
    row(
        "topology-manager-policy",
        Some("topologyManagerPolicy"),
        Kind::Text,
        "none",
        "none|best-effort|restricted|single-numa-node",
        "How the topology manager aligns CPUs, memory and devices on NUMA nodes",
        |o, i| topology_policy(i.text).map(|p| o.resource_managers.topology_policy = p),
    ),
    row(
        "topology-manager-scope",
        Some("topologyManagerScope"),
        Kind::Text,
        "container",
        "container|pod",
        "Whether the topology manager aligns each container or the whole pod",
        |o, i| topology_scope(i.text).map(|s| o.resource_managers.topology_scope = s),
    ),
    row(
        "topology-manager-policy-options",
        Some("topologyManagerPolicyOptions"),
        Kind::Map('='),
        "",
        "prefer-closest-numa-nodes=true,...",
        "The topology manager's options (GA and beta ones)",
        |o, i| string_map(i.text).map(|m| o.resource_managers.topology_policy_options = m),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_memory_reads_kubelets_flag_syntax_and_refuses_what_kubelet_refuses() {
        let r = reserved_memory("0:memory=1Gi,hugepages-2Mi=4Mi;1:memory=512Mi").unwrap();
        assert_eq!(r[&0]["memory"], 1 << 30);
        assert_eq!(r[&0]["hugepages-2Mi"], 4 << 20);
        assert_eq!(r[&1]["memory"], 512 << 20);
        assert!(
            reserved_memory("memory=1Gi")
                .unwrap_err()
                .0
                .contains("incorrect format")
        );
        assert!(
            reserved_memory("0:cpu=1")
                .unwrap_err()
                .0
                .contains("invalid memory type \"cpu\"")
        );
        assert!(
            reserved_memory("0:memory=1Gi;0:memory=2Gi")
                .unwrap_err()
                .0
                .contains("duplicate")
        );
        assert!(reserved_memory("0:memory=lots").is_err());
        assert!(reserved_memory("").unwrap().is_empty());
    }

    #[test]
    fn policies_and_scopes_are_kubelets_names_only() {
        assert!(cpu_policy("static").is_ok() && cpu_policy("Static").is_err());
        assert!(memory_policy("Static").is_ok() && memory_policy("static").is_err());
        assert_eq!(
            topology_policy("numa").unwrap_err().0,
            "\"numa\" must be one of: [\"none\" \"best-effort\" \"restricted\" \
             \"single-numa-node\"]"
        );
        assert!(topology_scope("pod").is_ok() && topology_scope("node").is_err());
        assert_eq!(reserved_cpus("1,0").unwrap().as_deref(), Some("0-1"));
        assert_eq!(reserved_cpus("").unwrap(), None);
        assert!(reserved_cpus("a").is_err());
    }
}

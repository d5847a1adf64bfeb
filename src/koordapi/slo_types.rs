//! koordinator's `slo.koordinator.sh/v1alpha1` objects with koordinator's field names
//! (`apis/slo/v1alpha1`). NodeMetric is typed whole: oxlet writes its status (NUMA
//! usages, host applications and GPU devices are never filled here). NodeSLO's
//! sections are kept as given and checked strategy by strategy where they are used,
//! so one bad value costs its strategy, never the whole object.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What koord-manager asks of this node's metric reports (`spec.metricCollectPolicy`).
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "slo.koordinator.sh",
    version = "v1alpha1",
    kind = "NodeMetric",
    status = "NodeMetricStatus",
    schema = "disabled"
)]
pub(crate) struct NodeMetricSpec {
    #[serde(
        rename = "metricCollectPolicy",
        skip_serializing_if = "Option::is_none"
    )]
    pub collect_policy: Option<NodeMetricCollectPolicy>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeMetricCollectPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate_duration_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_interval_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_aggregate_policy: Option<AggregatePolicy>,
    /// `usageWithoutPageCache` (the default), `usageWithHotPageCache`, `usageWithPageCache`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_memory_collect_policy: Option<String>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub(crate) struct AggregatePolicy {
    /// Go durations (`5m0s`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub durations: Vec<String>,
}

/// Resource names to quantities (`resources`), as koordinator's `ResourceMap`; GPU
/// `devices` are never filled here.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub(crate) struct ResourceMap {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<Value>>,
}

/// One aggregation window: `avg`, `p50`, `p90`, `p95`, `p99` of the node's usage.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub(crate) struct AggregatedUsage {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage: BTreeMap<String, ResourceMap>,
    /// A Go duration (`5m0s`).
    pub duration: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeMetricInfo {
    pub node_usage: ResourceMap,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregated_node_usages: Vec<AggregatedUsage>,
    pub system_usage: ResourceMap,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aggregated_system_usages: Vec<AggregatedUsage>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub numa_usages: Vec<Value>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodMetricInfo {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub pod_usage: ResourceMap,
    /// koordinator's priority class (`koord-prod`, …), empty for none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub priority: String,
    /// koordinator's QoS class (`LSR`, `LS`, `BE`, …).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub qos: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
}

/// One host application's usage (`HostApplicationMetricInfo`).
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub(crate) struct HostAppMetricInfo {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub usage: ResourceMap,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub priority: String,
    #[serde(default, rename = "qos", skip_serializing_if = "String::is_empty")]
    pub qos: String,
}

/// `prodReclaimableMetric` and `prodPeakMetric`: a resource map under `resource`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub(crate) struct ResourceMetric {
    #[serde(default)]
    pub resource: ResourceMap,
}

#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeMetricStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_metric: Option<NodeMetricInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_metric: Vec<PodMetricInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_application_metric: Vec<HostAppMetricInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_reclaimable_metric: Option<ResourceMetric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prod_peak_metric: Option<ResourceMetric>,
}

/// koordlet's `resourceUsedThresholdWithBE` (`ResourceThresholdStrategy`), field by
/// field as given: the QoS manager's configuration checks each value for its strategy
/// (`qosmanager/slo_spec.rs`), so a value of the wrong type drops that strategy alone
/// instead of failing the whole NodeSLO's decoding.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(transparent)]
pub(crate) struct ResourceThresholdStrategy(pub serde_json::Map<String, Value>);

/// Every field koordinator's `ResourceThresholdStrategy` has: a node SLO file naming
/// another is refused (the apiserver checked a NodeSLO against its CRD already).
pub(crate) const THRESHOLD_FIELDS: [&str; 19] = [
    "enable",
    "cpuSuppressThresholdPercent",
    "cpuSuppressMinPercent",
    "cpuSuppressPolicy",
    "memoryEvictThresholdPercent",
    "memoryEvictLowerPercent",
    "memoryAllocatableEvictThresholdPercent",
    "memoryAllocatableEvictLowerPercent",
    "cpuEvictBESatisfactionUpperPercent",
    "cpuEvictBESatisfactionLowerPercent",
    "cpuEvictBEUsageThresholdPercent",
    "cpuEvictTimeWindowSeconds",
    "cpuEvictThresholdPercent",
    "cpuEvictLowerPercent",
    "cpuAllocatableEvictThresholdPercent",
    "cpuAllocatableEvictLowerPercent",
    "cpuEvictPolicy",
    "evictEnabledPriorityThreshold",
    "allocatableEvictPriorityThreshold",
];

/// The node's SLO (`NodeSLO`, named after the node), which koord-manager writes. The
/// sections oxlet does not act on are kept as given.
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[kube(
    group = "slo.koordinator.sh",
    version = "v1alpha1",
    kind = "NodeSLO",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeSLOSpec {
    #[serde(
        default,
        rename = "resourceUsedThresholdWithBE",
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_used_threshold_with_be: Option<ResourceThresholdStrategy>,
    #[serde(
        default,
        rename = "resourceQOSStrategy",
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_qos_strategy: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_burst_strategy: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_strategy: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Value>,
    /// A list, checked item by item where it is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_applications: Option<Value>,
}

/// Every section of a NodeSLO spec.
pub(crate) const SPEC_FIELDS: [&str; 6] = [
    "resourceUsedThresholdWithBE",
    "resourceQOSStrategy",
    "cpuBurstStrategy",
    "systemStrategy",
    "extensions",
    "hostApplications",
];

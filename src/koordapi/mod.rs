//! koordinator's API as a node reads it, below every room that reads it: the metric
//! advisor, and the koordlet rooms (prediction, the QoS manager, the runtime hooks,
//! NodeSLO and NodeMetric).
//!
//! - `classes`: koordinator's QoS and priority classes of a pod (`apis/extension`).
//! - `host_apps`: the NodeSLO's host applications and their cgroups.
//! - `slo_types`: the `slo.koordinator.sh/v1alpha1` objects, NodeMetric and NodeSLO.
//! - `qos_config`: the QoS strategies oxlet runs, from `--node-slo-file` or a NodeSLO.
//! - `slo_spec`: a NodeSLO's spec checked strategy by strategy into that config.

mod classes;
mod host_apps;
mod qos_config;
mod slo_spec;
mod slo_types;

pub(crate) use classes::{
    BATCH_CPU, BATCH_MEMORY, KoordQos, PriorityClass, batch_milli_cpu_request,
    koord_qos_with_default,
};
#[cfg(test)]
pub(crate) use host_apps::CgroupBase;
pub(crate) use host_apps::{
    HostApp, QosPaths, from_file as host_apps_from_file, parse as parse_host_apps,
};
pub(crate) use qos_config::{
    CpuEvictConfig, CpuEvictPolicy, CpuSuppressPolicy, CpuUsageEvictConfig, MemoryEvictConfig,
    MemoryQosClasses, MemoryQosPercents, QosConfig, Strategies, load_qos_config, next_update,
    parse as parse_qos_config,
};
pub(crate) use slo_spec::{Kept, from_spec as qos_config_from_spec};
pub(crate) use slo_types::{
    AggregatedUsage, HostAppMetricInfo, NodeMetric, NodeMetricInfo, NodeMetricSpec,
    NodeMetricStatus, NodeSLO, PodMetricInfo, ResourceMap, ResourceMetric,
};

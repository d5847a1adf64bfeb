//! What the node, its pods and their containers use, served from the metric advisor's
//! latest readings (`contracts::LatestReadings`): the Summary API, the resource
//! metrics and the cAdvisor metrics.

mod build;
mod cadvisor_metrics;
mod cadvisor_scraped;
mod cgroup_extras;
mod log_metrics;
mod machine;
mod resource_metrics;
mod summary;
mod text_format;
mod volumes;

// The Summary API, `/metrics/resource` and `/metrics/cadvisor`, for the server.
pub(crate) use build::build_summary;
pub(crate) use cadvisor_metrics::scrape_cadvisor_metrics;
pub(crate) use cgroup_extras::ExtrasCache;
pub(crate) use machine::MachineReader;
pub(crate) use resource_metrics::render_resource_metrics;
pub(crate) use text_format::TEXT_CONTENT_TYPE;
// Each pod's measured local storage: the task that measures it, and its readers.
pub(crate) use log_metrics::LogMetrics;
#[cfg(test)]
pub(crate) use volumes::Usage;
pub(crate) use volumes::{Dirs, PodUsage, VOLUME_STATS_TICK, VolumeUsage, volume_stats_period};

//! What the node, its pods and their containers use, served from the metric advisor's
//! latest readings (`contracts::LatestReadings`): the Summary API and the resource
//! metrics.

mod build;
mod log_metrics;
mod resource_metrics;
mod summary;
mod volumes;

// The Summary API and `/metrics/resource`, for the server.
pub(crate) use build::build_summary;
pub(crate) use resource_metrics::{RESOURCE_METRICS_CONTENT_TYPE, render_resource_metrics};
// Each pod's measured local storage: the task that measures it, and its readers.
pub(crate) use log_metrics::LogMetrics;
#[cfg(test)]
pub(crate) use volumes::Usage;
pub(crate) use volumes::{Dirs, PodUsage, VOLUME_STATS_TICK, VolumeUsage, volume_stats_period};

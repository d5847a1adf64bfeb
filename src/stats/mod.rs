//! What the node, its pods and their containers use, served from the metric advisor's
//! latest readings (`contracts::LatestReadings`): the Summary API and the resource
//! metrics.

pub(crate) mod build;
pub(crate) mod log_metrics;
pub(crate) mod resource_metrics;
pub(crate) mod summary;
pub(crate) mod volumes;

//! What the node, its pods and their containers use: the metric advisor's latest
//! readings ([`readings`]), from which the Summary API and the resource metrics are
//! served.

pub(crate) mod build;
pub(crate) mod log_metrics;
pub(crate) mod readings;
pub(crate) mod resource_metrics;
pub(crate) mod summary;
pub(crate) mod volumes;

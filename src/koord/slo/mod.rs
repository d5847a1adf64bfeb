//! koordinator's node-level objects through the apiserver (koordlet's states
//! informer): this node's NodeMetric, whose status oxlet reports from the metric cache.

mod nodemetric;
mod report;
mod types;

pub(crate) use report::{NodeMetricReporter, NodeMetricSource, PredictionView};

#[cfg(test)]
mod tests;

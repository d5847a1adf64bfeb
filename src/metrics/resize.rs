//! kubelet's in-place pod resize families (`pkg/kubelet/metrics`, since 1.34): the
//! resizes the spec asks for, how long actuating one takes, the ones refused as
//! infeasible, the deferred ones accepted on a retry, and the resizes pending or in
//! progress now.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use prometheus::{CounterVec, Gauge, GaugeVec, HistogramVec, Registry};

use super::buckets;
use super::kubelet_families::{hopts, opts, register};
use crate::allocation::{resizable_containers, same_requirements};

/// The resize families, registered in the kubelet registry.
pub(crate) struct ResizeFamilies {
    pub requested: CounterVec,
    pub duration: HistogramVec,
    pub infeasible: CounterVec,
    pub deferred_accepted: CounterVec,
    pub pending: GaugeVec,
    pub in_progress: Gauge,
}

impl ResizeFamilies {
    /// Builds and registers the group's families, in kubelet's order.
    pub(super) fn register(r: &Registry) -> prometheus::Result<Self> {
        // kubelet's HELP says "refers to 'memory' or 'limits'" (for 'requests' or
        // 'limits'); it is kept as kubelet serves it.
        let requested_help = "Number of requested resizes, counted at the container level. Different resources on the same container are counted separately. The 'requirement' label refers to 'memory' or 'limits'; the 'operation' label can be one of 'add', 'remove', 'increase' or 'decrease'.";
        Ok(ResizeFamilies {
            requested: register(
                r,
                CounterVec::new(
                    opts("kubelet_container_requested_resizes_total", requested_help),
                    &["resource", "requirement", "operation"],
                )?,
            )?,
            duration: register(
                r,
                HistogramVec::new(
                    hopts(
                        "kubelet_pod_resize_duration_milliseconds",
                        "Duration in milliseconds to actuate a pod resize",
                        buckets::POD_RESIZE_MS,
                    ),
                    &["success"],
                )?,
            )?,
            pending: register(
                r,
                GaugeVec::new(
                    opts(
                        "kubelet_pod_pending_resizes",
                        "Number of pending resizes for pods.",
                    ),
                    &["reason"],
                )?,
            )?,
            infeasible: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_pod_infeasible_resizes_total",
                        "Number of infeasible resizes for pods.",
                    ),
                    &["reason_detail"],
                )?,
            )?,
            in_progress: register(
                r,
                Gauge::with_opts(opts(
                    "kubelet_pod_in_progress_resizes",
                    "Number of in-progress resizes for pods.",
                ))?,
            )?,
            deferred_accepted: register(
                r,
                CounterVec::new(
                    opts(
                        "kubelet_pod_deferred_accepted_resizes_total",
                        "Cumulative number of resizes that were accepted after being deferred.",
                    ),
                    &["retry_trigger"],
                )?,
            )?,
        })
    }

    /// kubelet's `recordResizeOperations`: counts each cpu and memory request and limit
    /// that changed on a resizable container between `old` and `new`, and says whether
    /// the update asks for a resize at all (a container's requirement or the pod-level
    /// resources changed; kubelet 1.36 counts no pod-level change).
    pub(super) fn count_requested(&self, old: &Pod, new: &Pod) -> bool {
        let (Some(old), Some(new)) = (old.spec.as_ref(), new.spec.as_ref()) else {
            return false;
        };
        let mut any = false;
        for (old_c, init) in resizable_containers(old) {
            let Some(new_c) = resizable_containers(new)
                .find(|(c, i)| *i == init && c.name == old_c.name)
                .map(|(c, _)| c)
            else {
                continue;
            };
            let empty = ResourceRequirements::default();
            let old_r = old_c.resources.as_ref().unwrap_or(&empty);
            let new_r = new_c.resources.as_ref().unwrap_or(&empty);
            for (resource, requirement) in REQUIREMENTS {
                let (Some(was), Some(now)) = (
                    value(list(old_r, requirement), resource),
                    value(list(new_r, requirement), resource),
                ) else {
                    continue;
                };
                if let Some(op) = operation(now, was) {
                    any = true;
                    self.requested
                        .with_label_values(&[resource, requirement, op])
                        .inc();
                }
            }
        }
        any || pod_level_changed(old, new)
    }

    /// One resize actuation, in whole milliseconds as kubelet observes it.
    pub(super) fn observe_duration(&self, took: Duration, success: bool) {
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        self.duration
            .with_label_values(&[if success { "true" } else { "false" }])
            .observe(ms as f64);
    }

    /// kubelet's status manager recount: pending resizes by their condition's reason,
    /// lowercased, a reason with none left removed (kubelet resets the family and
    /// writes the reasons it counted), and the resizes in progress.
    pub(super) fn set_gauges(&self, deferred: usize, infeasible: usize, in_progress: usize) {
        for (reason, n) in [("deferred", deferred), ("infeasible", infeasible)] {
            if n == 0 {
                // Absent already is the same answer.
                let _ = self.pending.remove_label_values(&[reason]);
            } else {
                self.pending.with_label_values(&[reason]).set(n as f64);
            }
        }
        self.in_progress.set(in_progress as f64);
    }
}

/// The (resource, requirement) pairs kubelet compares, in its order.
const REQUIREMENTS: [(&str, &str); 4] = [
    ("memory", "requests"),
    ("memory", "limits"),
    ("cpu", "requests"),
    ("cpu", "limits"),
];

/// The requests or the limits of `r`.
fn list<'a>(
    r: &'a ResourceRequirements,
    requirement: &str,
) -> Option<&'a BTreeMap<String, Quantity>> {
    match requirement {
        "requests" => r.requests.as_ref(),
        _ => r.limits.as_ref(),
    }
}

/// A quantity by value, in thousandths so `1` and `1000m` agree; an absent one is 0
/// (kubelet's `ResourceList.Cpu()`/`Memory()`). `None` for a quantity that cannot be
/// read, which is then left uncounted.
fn value(list: Option<&BTreeMap<String, Quantity>>, resource: &str) -> Option<i128> {
    let Some(q) = list.and_then(|l| l.get(resource)) else {
        return Some(0);
    };
    match crate::quantity::milli_cpu(q) {
        Ok(m) => Some(i128::from(m)),
        // Past i64 in thousandths (over 9 PB of memory): whole units still compare.
        Err(_) => crate::quantity::bytes(q).ok().map(|b| i128::from(b) * 1000),
    }
}

/// kubelet's `resizeOperationForResources`.
fn operation(new: i128, old: i128) -> Option<&'static str> {
    if new == 0 && old != 0 {
        Some("remove")
    } else if old == 0 && new != 0 {
        Some("add")
    } else if new < old {
        Some("decrease")
    } else if new > old {
        Some("increase")
    } else {
        None
    }
}

/// kubelet's `recordPodLevelResourceResizeOperations`: the pod-level resources differ
/// (absent and present differ, as in kubelet's `Semantic.DeepEqual` of the pointers).
fn pod_level_changed(old: &PodSpec, new: &PodSpec) -> bool {
    match (&old.resources, &new.resources) {
        (None, None) => false,
        (Some(a), Some(b)) => !same_requirements(a, b),
        _ => true,
    }
}

#[cfg(test)]
#[path = "resize_tests.rs"]
mod tests;

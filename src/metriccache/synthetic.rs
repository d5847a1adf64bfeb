//! Rounds of samples shaped as the advisor's, for the tests and the bench: the same
//! series at the same rates, with values that move as real readings do, so that what
//! they measure of the cache (its memory, its disk use) is what a node would see.

use super::{MetricKind, Sample, label};

/// A value that moves as a real reading does: CPU rates in every bit, memory by pages,
/// throttling and pids mostly still.
fn reading(kind: MetricKind, sec: i64, who: i64) -> f64 {
    let wobble = ((sec * 7919 + who * 104_729) % 1000) as f64 / 1000.0;
    match kind {
        MetricKind::PodCpuUsage | MetricKind::ContainerCpuUsage => 0.05 + wobble / 37.0,
        MetricKind::PodMemoryUsage | MetricKind::ContainerMemoryUsage => {
            f64::from(50 << 20) + 4096.0 * ((sec / 5 + who) % 13) as f64
        }
        MetricKind::PodPids => 3.0,
        _ => 0.0,
    }
}

/// One round of what the advisor writes for `pods` pods of `containers` containers at
/// second `sec` (time `ts`): node, system, pod and container kinds each second, PSI
/// every 10 s.
pub(crate) fn round(pods: i64, containers: i64, sec: i64, ts: i64) -> Vec<Sample> {
    let per_second = [
        MetricKind::PodCpuUsage,
        MetricKind::PodMemoryUsage,
        MetricKind::PodCpuThrottled,
        MetricKind::PodPids,
    ];
    let psi = [
        ("cpu", "some"),
        ("cpu", "full"),
        ("mem", "some"),
        ("mem", "full"),
        ("io", "some"),
        ("io", "full"),
    ];
    let per_container = [
        MetricKind::ContainerCpuUsage,
        MetricKind::ContainerMemoryUsage,
        MetricKind::ContainerCpuThrottled,
    ];
    let mut batch = Vec::new();
    for kind in [
        MetricKind::NodeCpuUsage,
        MetricKind::NodeMemoryUsage,
        MetricKind::SysCpuUsage,
        MetricKind::SysMemoryUsage,
    ] {
        batch.push(Sample::new(kind, &[], ts, 1.0 + (sec % 7) as f64 / 3.0).unwrap());
    }
    for p in 0..pods {
        let uid = format!("0b8c6f9e-1f2a-4c3d-9e8f-{p:012}");
        for kind in per_second {
            let v = reading(kind, sec, p);
            batch.push(Sample::new(kind, &[(label::POD_UID, &uid)], ts, v).unwrap());
        }
        if sec % 10 == 0 {
            for (res, deg) in psi {
                let labels = [
                    (label::POD_UID, uid.as_str()),
                    (label::PSI_RESOURCE, res),
                    (label::PSI_PRECISION, "10"),
                    (label::PSI_DEGREE, deg),
                ];
                batch.push(Sample::new(MetricKind::PodPsi, &labels, ts, 0.0).unwrap());
            }
        }
        for c in 0..containers {
            let id = format!("{p:032x}{c:032x}");
            for kind in per_container {
                let v = reading(kind, sec, p * containers + c);
                batch.push(Sample::new(kind, &[(label::CONTAINER_ID, &id)], ts, v).unwrap());
            }
            if sec % 10 == 0 {
                for (res, deg) in psi {
                    let labels = [
                        (label::POD_UID, uid.as_str()),
                        (label::CONTAINER_ID, id.as_str()),
                        (label::PSI_RESOURCE, res),
                        (label::PSI_PRECISION, "10"),
                        (label::PSI_DEGREE, deg),
                    ];
                    batch.push(Sample::new(MetricKind::ContainerPsi, &labels, ts, 0.0).unwrap());
                }
            }
        }
    }
    batch
}

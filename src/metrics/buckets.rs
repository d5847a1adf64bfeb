//! kubelet's histogram bucket sets, by name, so each family's buckets can be checked
//! against `pkg/kubelet/metrics/metrics.go` in one place.

/// component-base's `DefBuckets` (Prometheus' defaults).
pub(crate) const DEF: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Pod startup (`podStartupDurationBuckets`): round numbers up to an hour, for SLOs.
pub(crate) const POD_START: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];

/// Image pulls (`imagePullDurationBuckets`).
pub(crate) const IMAGE_PULL: &[f64] = &[
    1.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 480.0, 600.0, 900.0,
    1200.0, 1800.0, 2700.0, 3600.0,
];

/// Pod status sync.
pub(crate) const STATUS_SYNC: &[f64] =
    &[0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0];

/// In-place resize actuation, in milliseconds (`podResizeDurationBuckets`): 10 ms to
/// 10 minutes.
pub(crate) const POD_RESIZE_MS: &[f64] = &[
    10.0, 50.0, 100.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0, 20000.0, 30000.0, 60000.0, 120000.0,
    300000.0, 600000.0,
];

/// Runtime operations: `ExponentialBuckets(0.005, 2.5, 14)`.
pub(crate) fn runtime_ops() -> Vec<f64> {
    exponential(0.005, 2.5, 14)
}

/// Topology manager admission, in milliseconds: `ExponentialBuckets(.05, 2, 15)`.
pub(crate) fn topology_admission_ms() -> Vec<f64> {
    exponential(0.05, 2.0, 15)
}

/// Containers per pod: `ExponentialBuckets(1, 2, 5)`.
pub(crate) fn containers_per_pod() -> Vec<f64> {
    exponential(1.0, 2.0, 5)
}

/// `count` buckets from `start`, each `factor` times the one before (as Go's
/// `ExponentialBuckets`, which multiplies step by step).
fn exponential(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut b = start;
    for _ in 0..count {
        out.push(b);
        b *= factor;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_ops_buckets_are_kubelets() {
        let want = [
            0.005,
            0.0125,
            0.03125,
            0.078125,
            0.1953125,
            0.48828125,
            1.220703125,
            3.0517578125,
            7.62939453125,
            19.073486328125,
            47.6837158203125,
            119.20928955078125,
            298.0232238769531,
            745.0580596923828,
        ];
        let got = runtime_ops();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-9 * w, "{g} != {w}");
        }
    }

    #[test]
    fn fixed_bucket_sets_are_kubelets() {
        assert_eq!(containers_per_pod(), vec![1.0, 2.0, 4.0, 8.0, 16.0]);
        let topo = topology_admission_ms();
        assert_eq!(topo.len(), 15);
        assert_eq!((topo[0], topo[14]), (0.05, 819.2));
        assert_eq!(DEF.len(), 11);
        assert_eq!((DEF[0], DEF[10]), (0.005, 10.0));
        assert_eq!(POD_START.len(), 25);
        assert_eq!((POD_START[0], POD_START[24]), (0.5, 3600.0));
        assert_eq!(IMAGE_PULL.len(), 18);
        assert_eq!((IMAGE_PULL[0], IMAGE_PULL[17]), (1.0, 3600.0));
        assert_eq!(STATUS_SYNC.len(), 11);
        assert_eq!((STATUS_SYNC[0], STATUS_SYNC[10]), (0.01, 60.0));
        assert_eq!(POD_RESIZE_MS.len(), 14);
        assert_eq!((POD_RESIZE_MS[0], POD_RESIZE_MS[13]), (10.0, 600000.0));
        for set in [DEF, POD_START, IMAGE_PULL, STATUS_SYNC, POD_RESIZE_MS] {
            assert!(
                set.windows(2).all(|w| w[0] < w[1]),
                "{set:?} not increasing"
            );
        }
    }
}

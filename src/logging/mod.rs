//! klog-style verbosity on top of tracing. `-v=0`: warnings, errors and the start-up
//! summary; `-v=2`: every pod update and container event (info); `-v=3`: also the
//! events oxlet records (`Event: ...`); `-v=4`: every sync loop iteration (debug);
//! `-v=6`: every CRI call with its latency (trace), and kube-client's own error lines.
//! Each line is written as kubelet writes it: klog's text format, or JSON (`format`).

mod format;

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

pub use format::LogFormat;

/// The tracing target of the start-up summary, shown at every verbosity (as are the
/// few later lines kubelet logs at `V(0)`, such as a new pod CIDR).
pub(crate) const STARTUP_TARGET: &str = "oxlet::startup";
/// The tracing target of recorded events (`Event: ...`), shown from `-v=3` like
/// kubelet's event broadcaster log (`klog.V(3)`).
pub(crate) const EVENTS_TARGET: &str = "oxlet::events";
/// The tracing target of what kubelet logs at `klog.V(3)` (a pod status written to
/// the apiserver): shown from `-v=3`, and always in the pod's timeline.
pub(crate) const V3_TARGET: &str = "oxlet::v3";
/// kube-client logs every failed request at error level; oxlet already reports each
/// failure in its own words (rate-limited), so those lines only show from this `-v`.
const KUBE_CLIENT_FROM: u8 = 6;

/// The filter for a verbosity; dependencies stay at warn so `-v` tells oxlet's story.
pub(crate) fn filter_for(verbosity: u8) -> EnvFilter {
    let oxlet = match verbosity {
        0 | 1 => "warn",
        2 | 3 => "info",
        4 | 5 => "debug",
        _ => "trace",
    };
    let events = if verbosity >= 3 { oxlet } else { "warn" };
    let kube_client = if verbosity >= KUBE_CLIENT_FROM {
        "warn"
    } else {
        "off"
    };
    EnvFilter::new(format!(
        "warn,kube_client={kube_client},oxlet={oxlet},{EVENTS_TARGET}={events},{V3_TARGET}={events},{STARTUP_TARGET}=info"
    ))
}

/// Replaces the installed subscriber's filter (set once, by [`init`]).
type SetFilter =
    Box<dyn Fn(EnvFilter) -> Result<(), tracing_subscriber::reload::Error> + Send + Sync>;
static SET_FILTER: OnceLock<SetFilter> = OnceLock::new();

/// Installs the global subscriber (stderr, one line per event, in `format`). `RUST_LOG`
/// overrides `-v`.
/// Its filter can be changed later with `set_verbosity` (`PUT /debug/flags/v`).
/// Beside it, the timeline layer (`timeline::TimelineLayer`) sees oxlet's lines up to `-v=2`'s
/// whatever `-v` is, so each pod's timeline is the same at every verbosity.
pub fn init(verbosity: u8, format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{Layer as _, filter::Targets, fmt, reload};

    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| filter_for(verbosity));
    let (filter, handle) = reload::Layer::new(filter);
    let log = fmt::layer()
        .event_format(format::KlogFormat::new(format))
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let stories = crate::timeline::TimelineLayer
        .with_filter(Targets::new().with_target("oxlet", tracing::Level::INFO));
    if tracing_subscriber::registry()
        .with(log)
        .with(stories)
        .try_init()
        .is_ok()
    {
        let set: SetFilter = Box::new(move |f| handle.reload(f));
        let _ = SET_FILTER.set(set);
        crate::census::register("timeline: pod names", || {
            Some(crate::timeline::global().census().0)
        });
        crate::census::register("timeline: lives", || {
            Some(crate::timeline::global().census().1)
        });
    }
}

/// Why the verbosity was not changed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerbosityError {
    #[error("logging was not set up by oxlet")]
    NotInstalled,
    #[error("the filter could not be replaced: {0}")]
    Reload(#[from] tracing_subscriber::reload::Error),
}

/// Changes `-v` while running (kubelet's `PUT /debug/flags/v`): from the next line on,
/// what is logged is what `-v=<verbosity>` logs.
pub(crate) fn set_verbosity(verbosity: u8) -> Result<(), VerbosityError> {
    let set = SET_FILTER.get().ok_or(VerbosityError::NotInstalled)?;
    Ok(set(filter_for(verbosity))?)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn verbosity_maps_to_levels() {
        assert!(filter_for(0).to_string().contains("oxlet=warn"));
        assert!(filter_for(2).to_string().contains("oxlet=info"));
        assert!(filter_for(4).to_string().contains("oxlet=debug"));
        assert!(filter_for(6).to_string().contains("oxlet=trace"));
    }

    /// Collects what a subscriber with `filter_for(verbosity)` prints.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The lines shown at `verbosity` of: a pod update (info), an event, a
    /// kube-client request error, a RECONCILE-style debug line.
    fn shown(verbosity: u8) -> Vec<&'static str> {
        let buf = Buf::default();
        let w = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_env_filter(filter_for(verbosity))
            .with_writer(move || w.clone())
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::info!("pod-update");
            tracing::info!(target: EVENTS_TARGET, "event-line");
            tracing::error!(target: "kube_client::client::builder", "kube-error");
            tracing::debug!("debug-line");
            tracing::warn!("oxlet-warning");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        [
            "pod-update",
            "event-line",
            "kube-error",
            "debug-line",
            "oxlet-warning",
        ]
        .into_iter()
        .filter(|l| out.contains(l))
        .collect()
    }

    #[test]
    fn events_from_v3_kube_client_errors_only_at_high_verbosity() {
        assert_eq!(shown(0), ["oxlet-warning"]);
        assert_eq!(shown(2), ["pod-update", "oxlet-warning"]);
        assert_eq!(shown(3), ["pod-update", "event-line", "oxlet-warning"]);
        assert_eq!(
            shown(4),
            ["pod-update", "event-line", "debug-line", "oxlet-warning"]
        );
        assert_eq!(
            shown(6),
            [
                "pod-update",
                "event-line",
                "kube-error",
                "debug-line",
                "oxlet-warning"
            ]
        );
    }
}

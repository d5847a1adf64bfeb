//! klog-style verbosity on top of tracing. `-v=0`: warnings, errors and the start-up
//! summary; `-v=2`: every pod update and container event (info); `-v=4`: every sync
//! loop iteration (debug); `-v=6`: every CRI call with its latency (trace).

use tracing_subscriber::EnvFilter;

/// The tracing target of the start-up summary, shown at every verbosity.
pub(crate) const STARTUP_TARGET: &str = "oxlet::startup";

/// The filter for a verbosity; dependencies stay at warn so `-v` tells oxlet's story.
pub(crate) fn filter_for(verbosity: u8) -> EnvFilter {
    let oxlet = match verbosity {
        0 | 1 => "warn",
        2 | 3 => "info",
        4 | 5 => "debug",
        _ => "trace",
    };
    EnvFilter::new(format!("warn,oxlet={oxlet},{STARTUP_TARGET}=info"))
}

/// Installs the global subscriber (stderr, one line per event). `RUST_LOG` overrides `-v`.
pub fn init(verbosity: u8) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| filter_for(verbosity));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(verbosity >= 4)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbosity_maps_to_levels() {
        assert!(filter_for(0).to_string().contains("oxlet=warn"));
        assert!(filter_for(2).to_string().contains("oxlet=info"));
        assert!(filter_for(4).to_string().contains("oxlet=debug"));
        assert!(filter_for(6).to_string().contains("oxlet=trace"));
    }
}

//! The oxlet binary: parse flags and config, set up logging, run the agent.

use std::process::ExitCode;

/// The async runtime's worker threads; glibc keeps one malloc arena for each.
const WORKER_THREADS: usize = 2;

fn main() -> ExitCode {
    // Before any thread allocates: glibc's arenas are per thread (oxlet::heap).
    oxlet::limit_heap_arenas(WORKER_THREADS);
    // `oxlet timeline NAMESPACE/NAME`: a client of a running oxlet, not an agent.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("timeline") {
        return oxlet::timeline_command(&args[1..]);
    }
    let opts = oxlet::load_or_exit();
    oxlet::init_logging(opts.verbosity(), opts.logging_format());
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("oxlet: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(oxlet::run(opts)) {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            // kubelet's end once its logging is set up (component-base's `cli.Run`).
            let error = format!("{e:#}");
            tracing::error!(error = %error, "command failed");
            ExitCode::from(1)
        }
    }
}

//! The soak and fault harness (issue 25): the real binary, a real containerd and the
//! test apiserver, under runtime kills, apiserver outages, churn and hours of running.
//! Each scenario asserts kubelet's promises and reports its numbers (printed, and
//! appended to `target/soak/results.md`; `docs/reliability.md` keeps the figures).
//!
//! The suite runs in its short form with the others (CI). The full figures:
//! `OXLET_SOAK=full cargo test --release --test soak -- --nocapture --test-threads=1`
//! (`scripts/soak.sh` runs that), about 2 h.

mod agent;
#[path = "soak/churn.rs"]
mod churn;
mod common;
#[path = "soak/footprint.rs"]
mod footprint;
#[path = "soak/hours.rs"]
mod hours;
#[path = "soak/kills.rs"]
mod kills;
#[path = "soak/kit.rs"]
mod kit;
#[path = "soak/outages.rs"]
mod outages;

use kills::Runtime;
use kit::Scale;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_runtime_kills_restart_nothing_and_leak_no_address() {
    kills::runtime_kills(Scale::from_env(), Runtime::External).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_runtime_kills_restart_nothing_and_leak_no_address() {
    kills::runtime_kills(Scale::from_env(), Runtime::Managed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apiserver_outages_kill_nothing_and_catch_up_within_the_qps_limits() {
    outages::apiserver_outages(Scale::from_env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_leaves_the_node_as_it_found_it() {
    churn::churn(Scale::from_env()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hours_of_crash_loops_probe_kills_and_rotation_grow_nothing() {
    hours::hours(Scale::from_env()).await;
}

//! oxlet: a kubelet-like pod lifecycle engine.
//!
//! Data flows one way: pod sources (`config`) → merged updates → the sync loop
//! (`syncloop`) → one pod worker per pod → the CRI client (`runtime`) → containerd.
//! `pleg` watches the runtime and wakes pod workers; `status` turns what we see into
//! kubelet-faithful pod status; `server` serves read-only views.

pub mod app;
pub mod config;
pub mod containerd;
pub mod hash;
pub mod logging;
pub mod node;
pub mod options;
pub mod pleg;
pub mod pod;
pub mod quantity;
pub mod rlimit;
pub mod runonce;
pub mod runtime;
pub mod runtime_choice;
pub mod safe_path;
pub mod server;
pub mod status;
pub mod syncloop;
pub mod tasks;

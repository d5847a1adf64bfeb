//! The runtime: the one module that talks to the CRI. It owns the CRI client
//! (`cri`), the labels that let a restarted agent adopt containers (`labels`),
//! sandbox and container configs, pod actions and back-off. The managed containerd
//! is a room of its own (`crate::containerd`).

pub(crate) mod actions;
pub(crate) mod atomic_writer;
pub(crate) mod backoff;
pub(crate) mod container;
pub(crate) mod cri;
pub(crate) mod cri_api;
pub(crate) mod dns;
pub(crate) mod downward;
#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod gc;
pub(crate) mod hooks;
pub(crate) mod hosts;
pub(crate) mod image_gc;
pub(crate) mod images;
pub(crate) mod labels;
pub(crate) mod lifecycle;
pub(crate) mod listing;
pub(crate) mod log_symlinks;
pub(crate) mod logs;
pub(crate) mod manager;
pub(crate) mod object_env;
pub(crate) mod object_volumes;
pub(crate) mod reader;
pub(crate) mod sandbox;
pub(crate) mod security;
pub(crate) mod sidecar;
pub(crate) mod sysctl;
pub(crate) mod termination;
pub(crate) mod types;
pub(crate) mod volumes;

pub(crate) use cri::{CriError, RemoteRuntime};
pub(crate) use manager::RuntimeManager;

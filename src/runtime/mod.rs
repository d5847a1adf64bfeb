//! The runtime: the one module that talks to the CRI. It owns the CRI client
//! (`cri`), the labels that let a restarted agent adopt containers (`labels`),
//! sandbox and container configs, pod actions and back-off. The managed containerd
//! is a room of its own (`crate::containerd`).

pub mod actions;
pub mod backoff;
pub mod container;
pub mod cri;
pub mod cri_api;
#[cfg(any(test, feature = "testing"))]
pub mod fake;
pub mod gc;
pub mod labels;
pub mod manager;
pub mod reader;
pub mod sandbox;
pub mod types;
pub mod volumes;

pub use cri::{CriError, RemoteRuntime};
pub use cri_api::{Cri, CriRead, ExecOutput};
pub use manager::RuntimeManager;

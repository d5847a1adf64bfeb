//! The one CRI client and everything it needs to reach a runtime: oxlet talks to
//! containerd over the CRI, and can start and supervise a containerd of its own.

pub mod containerd;

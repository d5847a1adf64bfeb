//! gRPC over unix sockets without generated code: the node's plugin protocols (device
//! plugins, plugin registration, DRA) are served and called here with messages written
//! by hand (`#[derive(prost::Message)]`), since the build has no `protoc`.
//!
//! - [`Router`]: a service routing each method path to a handler, served on a socket
//!   by [`listen`] and [`serve`].
//! - [`connect`], [`unary`], [`server_streaming`]: the client side.

mod client;
mod server;

pub(crate) use client::{connect, server_streaming, unary};
pub(crate) use server::{Router, listen, serve};

use std::path::PathBuf;

/// Why a socket could not be served or dialled.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrpcError {
    /// The socket could not be created (or a file that is not a socket is in its place).
    #[error("failed to listen on {}: {reason}", path.display())]
    Listen { path: PathBuf, reason: String },
    /// The server stopped with an error.
    #[error("gRPC server on {} failed: {reason}", path.display())]
    Serve { path: PathBuf, reason: String },
    /// The socket did not answer.
    #[error("failed to dial {}: {reason}", path.display())]
    Connect { path: PathBuf, reason: String },
}

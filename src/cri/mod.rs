//! The CRI client (kubelet's `internal/cri/remote` and the `cri-api` interfaces):
//! the two traits every room talks to a runtime through (`CriRead` for what only
//! looks, `Cri` for what changes state), the one implementation over gRPC, the lean
//! listings the PLEG decodes every second, and, for unit tests, the fake runtime.

mod api;
#[cfg(test)]
mod fake;
mod listing;
mod pod_cidr;
mod remote;

#[cfg(test)]
pub(crate) use api::ExecOutput;
pub(crate) use api::{ContainerEvents, Cri, CriRead, StreamRequest};
#[cfg(test)]
pub(crate) use fake::{FakeRuntime, support};
pub(crate) use listing::Lookup;
pub(crate) use pod_cidr::PodCidr;
pub(crate) use remote::{CriError, RemoteRuntime};

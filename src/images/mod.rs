//! Images (kubelet's `images` package): pulls with their policy, back-off and
//! parallelism limit, and image garbage collection by disk thresholds and age.

mod gc;
mod pull;
mod pull_records;

pub(crate) use gc::{ImageGcManager, Policy, UnusedImages, gc_period};
pub(crate) use pull::{ImageError, ImagePuller, PullLimit, runtime_reason};
pub(crate) use pull_records::{PullRecords, VerifyPolicy};

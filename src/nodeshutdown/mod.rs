//! Graceful node shutdown (kubelet's `nodeshutdown`, with `shutdownGracePeriod`,
//! `shutdownGracePeriodCriticalPods` and `shutdownGracePeriodByPodPriority`): a delay
//! inhibitor lock from systemd-logind over D-Bus, and on logind's `PrepareForShutdown`
//! the pods stopped by priority within their budgets before the lock is let go.
//!
//! - `groups.rs`: the budgets from the settings, and the pods in their groups;
//! - `manager.rs`: the lock, the signal, the stopping of the pods (through
//!   `contracts::PodTerminator`), the node marked as shutting down
//!   (`contracts::NodeShutdownState`, which the node status and admission read);
//! - `admission.rs`: new pods refused while the node shuts down;
//! - `logind.rs`: the one boundary trait to logind; `dbus.rs` is the real one (zbus on
//!   tokio, the bus `DBUS_SYSTEM_BUS_ADDRESS` names), `fake.rs` the unit tests'.
//!
//! It stands beside the loop, as the eviction manager: pods are seen and stopped
//! through the contracts, never through the sync loop.

mod admission;
mod dbus;
#[cfg(test)]
mod fake;
mod groups;
mod logind;
mod manager;
mod storage;
#[cfg(test)]
mod tests;

// The admission handler the agent puts in the chain.
pub(crate) use admission::ShutdownAdmission;
// The real logind, and where its drop-in goes on a node.
pub(crate) use dbus::{LOGIND_DROP_IN_DIR, SystemLogind};
// The budgets, from the settings.
pub(crate) use groups::{PriorityGrace, from_settings, period_requested};
// The manager the agent runs.
pub(crate) use manager::{Manager, ManagerDeps};
pub(crate) use storage::ShutdownTimes;

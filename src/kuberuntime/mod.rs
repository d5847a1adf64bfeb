//! kubelet's `kuberuntime`: the runtime manager that turns a pod spec into CRI
//! calls. It computes a pod's actions (what to kill, create and start), builds the
//! sandbox and container configs, starts containers with their hooks and probes'
//! start-up gates, kills with the grace kubelet gives, reads the runtime's state back
//! as pod statuses, and collects dead containers. The labels on what it creates let a
//! restarted agent adopt them. It drives the CRI through `crate::cri`, and builds on
//! the pod environment (`crate::podenv`), volumes, images and logs rooms below it.

mod actions;
mod container;
mod container_kill;
mod container_start;
mod container_start_steps;
mod errors;
mod gc;
mod grants;
mod hooks;
mod kill_pod;
mod labels;
mod lifecycle;
mod manager;
mod reader;
mod resize;
#[cfg(test)]
mod resize_tests;
mod sandbox;
mod sidecar;
mod sync_pod;
mod termination;
mod types;
mod userns;

// The runtime manager and what a sync returns.
#[cfg(test)]
pub(crate) use errors::ContainerStartError;
pub(crate) use errors::SyncError;
pub(crate) use manager::RuntimeManager;
#[cfg(test)]
pub(crate) use sync_pod::SyncOutcome;
/// kubelet's default `userNamespaces.idsPerPod`.
pub(crate) use userns::IDS_PER_POD as USERNS_IDS_PER_POD;
// What the runtime reads back: pods, sandboxes and containers as the runtime has them.
pub(crate) use reader::{EventPod, RuntimeReader};
pub(crate) use types::{
    ContainerState, ContainerStatus, ContainerUser, PodRuntimeStatus, RuntimePod,
};
#[cfg(test)]
pub(crate) use types::{RuntimeContainer, RuntimeSandbox, SandboxStatus};
// Decisions the status generator shares with the pod actions.
pub(crate) use actions::should_restart;
pub(crate) use sidecar::{Startup, StartupGate, is_sidecar};
pub(crate) use termination::cap_pod_messages;
// The sandbox's environment, its log directory, and the hook points before the
// sandbox, container create, update and start.
pub(crate) use hooks::{HookError, RuntimeHook, RuntimeHooks};
pub(crate) use sandbox::SandboxEnv;
// An ephemeral container as the container it runs as (the status generator's too).
pub(crate) use container::ephemeral_as_container;
// Container GC: housekeeping's pass over dead containers and orphaned directories.
#[cfg(test)]
pub(crate) use container::environment;
pub(crate) use gc::{DeadContainers, cleanup_orphaned_dirs, collect_pod};
#[cfg(test)]
pub(crate) use labels::POD_NAME_LABEL;
// The labels the CPU manager's reconcile loop finds each container's pod and name by.
pub(crate) use labels::{CONTAINER_NAME_LABEL, POD_UID_LABEL};

//! kubelet's `kuberuntime`: the runtime manager that turns a pod spec into CRI
//! calls. It computes a pod's actions (what to kill, create and start), builds the
//! sandbox and container configs, starts containers with their hooks and probes'
//! start-up gates, kills with the grace kubelet gives, reads the runtime's state back
//! as pod statuses, and collects dead containers. The labels on what it creates let a
//! restarted agent adopt them. It drives the CRI through `crate::cri`, and builds on
//! the pod environment (`crate::podenv`), volumes, images and logs rooms below it.

pub(crate) mod actions;
pub(crate) mod container;
pub(crate) mod gc;
pub(crate) mod hooks;
pub(crate) mod labels;
pub(crate) mod lifecycle;
pub(crate) mod manager;
pub(crate) mod reader;
pub(crate) mod sandbox;
pub(crate) mod sidecar;
pub(crate) mod termination;
pub(crate) mod types;

pub(crate) use manager::RuntimeManager;

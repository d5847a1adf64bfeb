//! The runtime's view of pods, rebuilt from CRI objects and their labels (kubelet's
//! `kubecontainer.Pod` / `PodStatus`). Timestamps are nanoseconds since the epoch, as CRI gives them.

use k8s_cri::v1 as cri;

/// A container's state as the runtime reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl ContainerState {
    pub(crate) fn from_cri(state: i32) -> Self {
        match cri::ContainerState::try_from(state) {
            Ok(cri::ContainerState::ContainerCreated) => ContainerState::Created,
            Ok(cri::ContainerState::ContainerRunning) => ContainerState::Running,
            Ok(cri::ContainerState::ContainerExited) => ContainerState::Exited,
            _ => ContainerState::Unknown,
        }
    }
}

/// One container of a runtime pod, from `ListContainers` (cheap: no per-container call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeContainer {
    pub id: String,
    pub sandbox_id: String,
    pub name: String,
    pub state: ContainerState,
    pub hash: u32,
    pub created_at: i64,
}

/// One sandbox of a runtime pod, from `ListPodSandbox`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeSandbox {
    pub id: String,
    pub ready: bool,
    pub attempt: u32,
    pub created_at: i64,
}

/// A pod as found in the runtime, grouped by its `io.kubernetes.pod.uid` label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RuntimePod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<RuntimeSandbox>,
    pub containers: Vec<RuntimeContainer>,
}

impl RuntimePod {
    /// `namespace/name`, for logs.
    pub(crate) fn pod_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
    /// True when any container is running or any sandbox is ready.
    pub(crate) fn is_running(&self) -> bool {
        self.containers
            .iter()
            .any(|c| c.state == ContainerState::Running)
            || self.sandboxes.iter().any(|s| s.ready)
    }
}

/// Detailed status of one container instance (kubelet's `kubecontainer.Status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerStatus {
    pub id: String,
    pub name: String,
    pub state: ContainerState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub image: String,
    pub image_ref: String,
    pub reason: String,
    pub message: String,
    pub hash: u32,
    pub restart_count: i32,
    pub is_init: bool,
    /// The identity the process runs as, when the runtime reports it (containerd 2.x
    /// does; 1.6 and 1.7 do not).
    pub user: Option<ContainerUser>,
    /// The Linux resources the runtime reports the container running with (CRI
    /// `ContainerStatus.resources.linux`; containerd 1.7 and 2.x report them, 1.6 not).
    pub resources: Option<RuntimeResources>,
}

/// A container's cgroup limits as the runtime reports them (kubelet's
/// `ContainerResources`, read from `LinuxContainerResources`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RuntimeResources {
    pub cpu_shares: i64,
    pub cpu_quota: i64,
    pub cpu_period: i64,
    pub memory_limit_bytes: i64,
}

impl RuntimeResources {
    pub(crate) fn from_cri(linux: &cri::LinuxContainerResources) -> Self {
        RuntimeResources {
            cpu_shares: linux.cpu_shares,
            cpu_quota: linux.cpu_quota,
            cpu_period: linux.cpu_period,
            memory_limit_bytes: linux.memory_limit_in_bytes,
        }
    }

    /// The cpu request the shares stand for (kubelet's `sharesToMilliCPU`); None
    /// without shares.
    pub(crate) fn cpu_request_milli(&self) -> Option<i64> {
        (self.cpu_shares > 0).then(|| crate::cm::shares_to_milli_cpu(self.cpu_shares))
    }

    /// The cpu limit the CFS quota stands for (kubelet's `quotaToMilliCPU`); None
    /// without a quota.
    pub(crate) fn cpu_limit_milli(&self) -> Option<i64> {
        (self.cpu_quota > 0 && self.cpu_period > 0)
            .then(|| self.cpu_quota.saturating_mul(1000) / self.cpu_period)
    }

    /// The memory limit; None without one.
    pub(crate) fn memory_limit(&self) -> Option<i64> {
        (self.memory_limit_bytes > 0).then_some(self.memory_limit_bytes)
    }
}

/// A container process's Linux identity, as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerUser {
    pub uid: i64,
    pub gid: i64,
    pub supplemental_groups: Vec<i64>,
}

/// Detailed status of one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SandboxStatus {
    pub id: String,
    pub ready: bool,
    pub attempt: u32,
    pub created_at: i64,
    pub ips: Vec<String>,
    pub host_network: bool,
}

impl ContainerStatus {
    /// The reason an exited instance shows: the runtime's own (`OOMKilled`, …) as it
    /// gave it, else kubelet's by the exit code (`Completed` or `Error`).
    pub(crate) fn terminated_reason(&self) -> &str {
        if self.reason.is_empty() {
            crate::pod::TerminatedReason::of_exit(self.exit_code).as_str()
        } else {
            &self.reason
        }
    }
}

#[cfg(test)]
impl ContainerStatus {
    /// A status with only its ID, name and state set, the rest zero or empty; tests
    /// change what they need with `..ContainerStatus::for_test(..)`.
    pub(crate) fn for_test(id: &str, name: &str, state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            name: name.into(),
            state,
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            image: String::new(),
            image_ref: String::new(),
            reason: String::new(),
            message: String::new(),
            hash: 0,
            restart_count: 0,
            is_init: false,
            user: None,
            resources: None,
        }
    }
}

/// Everything the runtime knows about one pod: sandboxes and containers, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PodRuntimeStatus {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// IPs of the newest ready sandbox (empty for host-network pods until filled by the caller).
    pub ips: Vec<String>,
    pub sandboxes: Vec<SandboxStatus>,
    pub containers: Vec<ContainerStatus>,
}

impl PodRuntimeStatus {
    /// The newest instance of the named container, if any.
    pub(crate) fn latest(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers.iter().find(|c| c.name == name)
    }
    /// The newest instance that exited: kubelet's `doBackOff` counts the back-off
    /// from it even when a newer one still runs (e.g. one a probe is killing now).
    pub(crate) fn latest_exited(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers
            .iter()
            .find(|c| c.name == name && c.state == ContainerState::Exited)
    }
    /// The instance before the newest (for `lastState`).
    pub(crate) fn previous(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers.iter().filter(|c| c.name == name).nth(1)
    }
    pub(crate) fn running_containers(&self) -> impl Iterator<Item = &ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }
}

//! The effective settings oxlet runs with: defaults, then the `--config` file,
//! then flags (flags win), validated before anything starts.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Effective configuration after merging defaults, the config file and flags.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--config`: the KubeletConfiguration file, if any.
    pub config_file: Option<PathBuf>,
    /// `--pod-manifest-path` / `staticPodPath`: the static pod directory (None = file source off).
    pub static_pod_path: Option<PathBuf>,
    /// `--container-runtime-endpoint` / `containerRuntimeEndpoint`, e.g. `unix:///run/containerd/containerd.sock`.
    pub container_runtime_endpoint: String,
    /// True when the endpoint was given explicitly (flag or config file): never start a managed containerd then.
    pub runtime_endpoint_explicit: bool,
    /// `--root-dir` (default `/var/lib/oxlet`).
    pub root_dir: PathBuf,
    /// `--pod-logs-dir` / `podLogsDir` (default `/var/log/pods`).
    pub pod_logs_dir: PathBuf,
    /// The node name: `--hostname-override`, else the host name, lower-cased.
    pub node_name: String,
    /// `-v` / `--v`: klog verbosity.
    pub verbosity: u8,
    /// `--address` / `address` (default 127.0.0.1): where the read-only API listens.
    pub address: IpAddr,
    /// `--read-only-port` / `readOnlyPort` (0 disables).
    pub read_only_port: u16,
    /// `--healthz-bind-address` / `healthzBindAddress` (default 127.0.0.1).
    pub healthz_bind_address: IpAddr,
    /// `--healthz-port` / `healthzPort` (default 10248; 0 disables).
    pub healthz_port: u16,
    /// `--file-check-frequency` / `fileCheckFrequency` (default 20s).
    pub file_check_frequency: Duration,
    /// `--sync-frequency` / `syncFrequency` (default 1m).
    pub sync_frequency: Duration,
    /// `--runtime-request-timeout` / `runtimeRequestTimeout` (default 2m).
    pub runtime_request_timeout: Duration,
    /// `--max-pods` / `maxPods` (default 110).
    pub max_pods: u32,
    /// `--runonce`.
    pub runonce: bool,
    /// Settings kubelet has and oxlet accepts but does not implement yet, one
    /// human-readable line each ("flag --foo", "config field bar"); logged at start.
    pub unimplemented: Vec<String>,
}

/// The default CRI endpoint (containerd's).
pub const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

impl Default for Options {
    fn default() -> Self {
        Options {
            config_file: None,
            static_pod_path: None,
            container_runtime_endpoint: DEFAULT_RUNTIME_ENDPOINT.to_string(),
            runtime_endpoint_explicit: false,
            root_dir: PathBuf::from("/var/lib/oxlet"),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            node_name: String::new(),
            verbosity: 0,
            address: IpAddr::from([127, 0, 0, 1]),
            read_only_port: 10255,
            healthz_bind_address: IpAddr::from([127, 0, 0, 1]),
            healthz_port: 10248,
            file_check_frequency: Duration::from_secs(20),
            sync_frequency: Duration::from_secs(60),
            runtime_request_timeout: Duration::from_secs(120),
            max_pods: 110,
            runonce: false,
            unimplemented: Vec::new(),
        }
    }
}

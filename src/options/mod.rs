//! kubelet's `cmd/kubelet/app/options` plus `KubeletConfiguration`: the effective
//! settings oxlet runs with. Defaults, then the `--config` file, then flags (flags
//! win), validated before anything starts. Every setting is declared once, in
//! [`settings::SETTINGS`].

mod configz;
mod flags;
mod handlers;
mod kubelet_config;
mod problem;
mod resource_managers;
mod serving;
mod settings;

use std::ffi::OsString;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use flags::FlagValues;
pub(crate) use handlers::DebugHandlers;
use kubelet_config::KubeletConfigFile;
pub(crate) use problem::{ConfigError, Problem};
pub(crate) use resource_managers::ResourceManagerOptions;
pub(crate) use serving::{AuthorizationMode, Serving, TlsVersion};
pub(crate) use settings::{DEFAULT_RUNTIME_ENDPOINT, parse_go_bool};
// `/configz`: the settings in use, as kubelet's KubeletConfiguration.
pub(crate) use configz::kubelet_configuration;
use settings::{Input, InvalidValue, SETTINGS, Setting};

use crate::cm::{CgroupDriver, CgroupName, NodeAllocatableEnforcement, Reserved};
use crate::contracts::Thresholds;

/// Effective configuration after merging defaults, the config file and flags.
/// Which flag and config field set each value: see `settings::SETTINGS`.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--config`: the KubeletConfiguration file, if any.
    pub config_file: Option<PathBuf>,
    /// The static pod directory (None = file source off).
    pub static_pod_path: Option<PathBuf>,
    /// `--image-credential-provider-config`: the CredentialProviderConfig file or dir.
    pub image_credential_provider_config: Option<PathBuf>,
    /// `--image-credential-provider-bin-dir`: where the provider binaries are.
    pub image_credential_provider_bin_dir: Option<PathBuf>,
    /// `--node-slo-file`: the node QoS manager's file (None = QoS manager off).
    pub node_slo_file: Option<PathBuf>,
    /// The CRI endpoint, e.g. `unix:///run/containerd/containerd.sock`.
    pub container_runtime_endpoint: String,
    /// True when the endpoint was given explicitly (flag or config file): never start a managed containerd then.
    pub runtime_endpoint_explicit: bool,
    /// `--containerd-binary`: the containerd a managed runtime runs (None: the one in PATH).
    pub containerd_binary: Option<PathBuf>,
    /// `--pod-cidr` / `podCIDR`: the pods' addresses in standalone mode; a managed
    /// containerd's CNI subnet (None: [`crate::containerd::CniSettings`]'s default).
    pub(crate) pod_cidr: Option<String>,
    /// `--managed-cni-bridge`: the Linux bridge a managed containerd's pods attach to.
    pub(crate) managed_cni_bridge: String,
    /// `--runtime-cgroups`: the runtime's cgroup, the Summary API's `runtime` system container.
    pub(crate) runtime_cgroups: Option<String>,
    /// `failSwapOn`: refuse to start while swap is on.
    pub(crate) fail_swap_on: bool,
    /// `singleProcessOOMKill` and `memorySwap.swapBehavior`, as given (None: unset).
    pub(crate) memory: crate::cm::MemorySettings,
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    /// The node name: `--hostname-override`, else the host name, lower-cased.
    pub node_name: String,
    /// klog verbosity.
    pub verbosity: u8,
    /// `--logging-format` / `logging.format`: klog's text lines or JSON.
    pub logging_format: crate::logging::LogFormat,
    /// Where the read-only and secure ports listen.
    pub address: IpAddr,
    /// 0 disables.
    pub read_only_port: u16,
    pub healthz_bind_address: IpAddr,
    /// 0 disables.
    pub healthz_port: u16,
    pub file_check_frequency: Duration,
    pub sync_frequency: Duration,
    pub runtime_request_timeout: Duration,
    /// `serializeImagePulls`: one image pull at a time.
    pub serialize_image_pulls: bool,
    /// `maxParallelImagePulls` (None: no limit) when pulls are not serialized.
    pub max_parallel_image_pulls: Option<usize>,
    /// `imagePullCredentialsVerificationPolicy` with its allowlist
    /// (`preloadedImagesVerificationAllowlist`).
    pub(crate) pull_verification: crate::images::VerifyPolicy,
    /// Every flag oxlet implements with the value in force (given, from the config
    /// file, or the default), and `--config`: what `/flagz` lists.
    pub(crate) flag_values: Vec<(String, String)>,
    /// When the options were read: the start of the process, give or take the
    /// parsing (`/statusz`'s "Started").
    pub(crate) started: std::time::SystemTime,
    pub max_pods: u32,
    /// `userNamespaces.idsPerPod`: the IDs each `hostUsers: false` pod gets (None:
    /// kubelet's 65536).
    pub userns_ids_per_pod: Option<u32>,
    /// RLIMIT_NOFILE set at start.
    pub max_open_files: u64,
    pub runonce: bool,
    /// `--task-cpu-accounting` (oxlet only): CPU time per task on `/debug/tasks`.
    pub(crate) task_cpu_accounting: bool,
    /// `cgroupDriver`; the runtime's driver may replace it unless explicit.
    pub(crate) cgroup_driver: CgroupDriver,
    /// True when the driver was given (flag or config file), not defaulted.
    pub(crate) cgroup_driver_explicit: bool,
    /// `cgroupRoot` as components; empty is `/`.
    pub(crate) cgroup_root: CgroupName,
    pub(crate) cgroups_per_qos: bool,
    /// `podPidsLimit`: -1 for no limit (negatives become -1, as in kubelet).
    pub(crate) pod_pids_limit: i64,
    pub(crate) cpu_cfs_quota: bool,
    pub(crate) cpu_cfs_quota_period: Duration,
    pub(crate) fail_cgroup_v1: bool,
    pub(crate) kube_reserved: Reserved,
    pub(crate) system_reserved: Reserved,
    pub(crate) kube_reserved_cgroup: Option<CgroupName>,
    pub(crate) system_reserved_cgroup: Option<CgroupName>,
    /// `evictionHard`: kubelet's defaults unless given (then replaced whole).
    pub(crate) eviction_hard: Thresholds,
    // The eviction manager: the settings beyond evictionHard.
    pub(crate) eviction_soft: Thresholds,
    pub(crate) eviction_soft_grace_period:
        std::collections::BTreeMap<crate::contracts::Signal, std::time::Duration>,
    pub(crate) eviction_minimum_reclaim:
        std::collections::BTreeMap<crate::contracts::Signal, crate::contracts::ThresholdValue>,
    pub(crate) eviction_pressure_transition_period: std::time::Duration,
    pub(crate) eviction_max_pod_grace_period: i64,
    /// Graceful node shutdown: `shutdownGracePeriod`, `shutdownGracePeriodCriticalPods`
    /// (zero: off) and `shutdownGracePeriodByPodPriority` (checked: not with the others).
    pub(crate) shutdown_grace_period: Duration,
    pub(crate) shutdown_grace_period_critical_pods: Duration,
    pub(crate) shutdown_grace_period_by_pod_priority: Vec<crate::nodeshutdown::PriorityGrace>,
    pub(crate) enforce_node_allocatable: NodeAllocatableEnforcement,
    /// `containerLogMaxSize` in bytes; negative turns log rotation off (as in kubelet).
    pub(crate) container_log_max_size: i64,
    /// `containerLogMaxFiles`: the current log plus rotated ones, at least 2.
    pub(crate) container_log_max_files: usize,
    /// `containerLogMaxWorkers`: containers rotated at once.
    pub(crate) container_log_max_workers: usize,
    /// `containerLogMonitorInterval`: how often log sizes are checked (at least 3 s).
    pub(crate) container_log_monitor_interval: Duration,
    /// `--container-log-symlink-dir` (oxlet only): where the legacy
    /// `<pod>_<ns>_<container>-<id>.log` symlinks go; kubelet hardcodes /var/log/containers.
    pub(crate) container_log_symlink_dir: PathBuf,
    /// `seccompDefault`: RuntimeDefault seccomp for containers that set no profile.
    pub(crate) seccomp_default: bool,
    /// `allowedUnsafeSysctls`: names or patterns (`net.core.*`), checked at start.
    pub(crate) allowed_unsafe_sysctls: Vec<String>,
    /// `clusterDNS`: the nameservers of ClusterFirst pods.
    pub(crate) cluster_dns: Vec<IpAddr>,
    /// `clusterDomain`, without a trailing dot; empty when unset.
    pub(crate) cluster_domain: String,
    /// `resolvConf`; None ("") gives host-DNS pods no host settings.
    pub(crate) resolv_conf: Option<PathBuf>,
    // HTTP source: the manifest URL.
    /// `staticPodURL` (None: HTTP source off).
    pub(crate) manifest_url: Option<String>,
    /// `staticPodURLHeader`: request headers, each name with its values in order.
    pub(crate) manifest_url_header: std::collections::BTreeMap<String, Vec<String>>,
    /// `httpCheckFrequency`: how often the manifest URL is polled.
    pub(crate) http_check_frequency: Duration,
    /// `--kubeconfig`: the apiserver's kubeconfig; None runs standalone.
    pub(crate) kubeconfig: Option<PathBuf>,
    /// `--bootstrap-kubeconfig`: credentials for the client certificate CSR when
    /// `--kubeconfig` is missing or expired; None: no bootstrap.
    pub(crate) bootstrap_kubeconfig: Option<PathBuf>,
    /// `--cert-dir`: where the client certificate pairs are kept; None: `<root-dir>/pki`.
    pub(crate) cert_dir: Option<PathBuf>,
    /// `rotateCertificates`: renew the cert dir's client certificate before it expires.
    pub(crate) rotate_certificates: bool,
    /// `kubeAPIQPS` / `kubeAPIBurst`: the main apiserver client's token bucket.
    pub(crate) kube_api_qps: u32,
    pub(crate) kube_api_burst: u32,
    /// `nodeStatusUpdateFrequency`; with `nodeLeaseDurationSeconds`, bounds the heartbeat client's timeout.
    pub(crate) node_status_update_frequency: Duration,
    pub(crate) node_lease_duration: Duration,
    // Cluster mode: node registration and status.
    /// `--node-ip`: the node's InternalIPs, one per family, primary first (empty:
    /// detected; `0.0.0.0` or `::` alone: detected, preferring that family).
    pub(crate) node_ips: Vec<IpAddr>,
    /// `--provider-id` / `providerID`: the Node's `spec.providerID`.
    pub(crate) provider_id: String,
    /// `--feature-gates` / `featureGates`, as given (see [`Options::evented_pleg`]).
    pub(crate) feature_gates: std::collections::BTreeMap<String, bool>,
    /// `--node-labels`, checked against kubelet's allowed `kubernetes.io` labels.
    pub(crate) node_labels: std::collections::BTreeMap<String, String>,
    /// `--register-with-taints`.
    pub(crate) register_with_taints: Vec<k8s_openapi::api::core::v1::Taint>,
    /// `registerNode`: false never creates the Node, only updates an existing one.
    pub(crate) register_node: bool,
    /// `nodeStatusReportFrequency`: an unchanged status is still sent this often.
    pub(crate) node_status_report_frequency: Duration,
    /// `eventRecordQPS` / `eventBurst`: the event writer's token bucket.
    pub(crate) event_record_qps: u32,
    pub(crate) event_burst: u32,
    /// koordlet's peak prediction on (its default) or off, and its
    /// `--prediction-checkpoint-filepath` (None: `<root-dir>/prediction-checkpoints`).
    pub(crate) prediction: bool,
    pub(crate) prediction_checkpoint_dir: Option<PathBuf>,
    /// koordlet's metric cache on disk: `--tsdb-path` (None: `<root-dir>/metric-cache`),
    /// `--tsdb-retention-duration` and `--tsdb-max-bytes`.
    pub(crate) tsdb_path: Option<PathBuf>,
    pub(crate) tsdb_retention: Duration,
    pub(crate) tsdb_max_bytes: u64,
    /// kubelet's `--lock-file` (waited for) and `--exit-on-lock-contention`.
    pub(crate) lock_file: Option<PathBuf>,
    pub(crate) exit_on_lock_contention: bool,
    /// koordlet's `--enable-pagecache-collector`: memory with page cache recorded too.
    pub(crate) pagecache_collector: bool,
    /// The image GC policy (`imageGCHighThresholdPercent`,
    /// `imageGCLowThresholdPercent`, `imageMinimumGCAge`, `imageMaximumGCAge`).
    pub(crate) image_gc: crate::images::Policy,
    /// The secure port: TLS, authentication, authorization.
    pub(crate) serving: Serving,
    /// Which of kubelet's debugging endpoints the secure port serves.
    pub(crate) handlers: DebugHandlers,
    /// The CPU, memory and topology managers' settings.
    pub(crate) resource_managers: ResourceManagerOptions,
    /// `enableSystemLogQuery`: `/logs/?query=…` reads the journal, with the
    /// `NodeLogQuery` gate on too (see [`Options::node_log_query`]).
    pub(crate) system_log_query: bool,
    /// `protectKernelDefaults`: refuse to start when the kernel's tunables differ
    /// from kubelet's values, instead of writing them.
    pub(crate) protect_kernel_defaults: bool,
    /// `volumeStatsAggPeriod`: how often each pod's volumes and logs are measured
    /// (zero: never, as kubelet).
    pub(crate) volume_stats_agg_period: Duration,
    /// Settings kubelet has and oxlet accepts but does not implement yet, one
    /// human-readable line each ("flag --foo", "config field bar"); logged at start.
    pub unimplemented: Vec<String>,
    /// Other startup warnings, one line each (e.g. config-file keys that are not
    /// KubeletConfiguration fields, which kubelet also only warns about); logged at start.
    pub warnings: Vec<String>,
}

/// The feature gates oxlet reads; any other gate given is reported as not implemented.
const IMPLEMENTED_GATES: &[&str] = &[EVENTED_PLEG_GATE, NODE_LOG_QUERY_GATE];
/// kubelet's gate for the evented PLEG.
pub(crate) const EVENTED_PLEG_GATE: &str = "EventedPLEG";
/// kubelet's gate for the node log query (beta and off by default since 1.30).
pub(crate) const NODE_LOG_QUERY_GATE: &str = "NodeLogQuery";

impl Options {
    /// The node shutdown's budgets by priority (kubelet's, from
    /// `shutdownGracePeriodByPodPriority` or the two periods); empty: graceful node
    /// shutdown is off.
    pub(crate) fn shutdown_groups(&self) -> Vec<crate::nodeshutdown::PriorityGrace> {
        crate::nodeshutdown::from_settings(
            self.shutdown_grace_period,
            self.shutdown_grace_period_critical_pods,
            &self.shutdown_grace_period_by_pod_priority,
        )
    }

    /// Whether the evented PLEG may run: kubelet's `EventedPLEG` gate, which oxlet takes
    /// as on unless it is set false (kubelet's default is off while the gate is alpha;
    /// oxlet runs it wherever the runtime streams container events).
    pub(crate) fn evented_pleg(&self) -> bool {
        self.feature_gates
            .get(EVENTED_PLEG_GATE)
            .copied()
            .unwrap_or(true)
    }

    /// Whether `/logs/?query=…` reads the journal: kubelet asks for both its
    /// `NodeLogQuery` gate (off by default) and `enableSystemLogQuery`.
    pub(crate) fn node_log_query(&self) -> bool {
        self.system_log_query
            && self
                .feature_gates
                .get(NODE_LOG_QUERY_GATE)
                .copied()
                .unwrap_or(false)
    }

    /// What the container manager starts with, taken from these settings.
    pub(crate) fn cm_settings(&self) -> crate::cm::CmSettings {
        crate::cm::CmSettings {
            fail_cgroup_v1: self.fail_cgroup_v1,
            fail_swap_on: self.fail_swap_on,
            memory: self.memory,
            protect_kernel_defaults: self.protect_kernel_defaults,
            cgroup_driver: self.cgroup_driver,
            cgroup_driver_explicit: self.cgroup_driver_explicit,
            cgroup_root: self.cgroup_root.clone(),
            cgroups_per_qos: self.cgroups_per_qos,
            cpu_cfs_quota: self.cpu_cfs_quota,
            cpu_cfs_quota_period: self.cpu_cfs_quota_period,
            pod_pids_limit: self.pod_pids_limit,
            kube_reserved: self.kube_reserved,
            system_reserved: self.system_reserved,
            eviction_hard: self.eviction_hard.clone(),
            enforce_node_allocatable: self.enforce_node_allocatable,
            kube_reserved_cgroup: self.kube_reserved_cgroup.clone(),
            system_reserved_cgroup: self.system_reserved_cgroup.clone(),
        }
    }

    /// Zero values, before the table's defaults are applied.
    fn blank() -> Options {
        Options {
            config_file: None,
            static_pod_path: None,
            image_credential_provider_config: None,
            image_credential_provider_bin_dir: None,
            node_slo_file: None,
            container_runtime_endpoint: String::new(),
            runtime_endpoint_explicit: false,
            containerd_binary: None,
            pod_cidr: None,
            managed_cni_bridge: String::new(),
            runtime_cgroups: None,
            fail_swap_on: true,
            memory: crate::cm::MemorySettings::default(),
            root_dir: PathBuf::new(),
            pod_logs_dir: PathBuf::new(),
            node_name: String::new(),
            verbosity: 0,
            logging_format: crate::logging::LogFormat::Text,
            address: IpAddr::from([0, 0, 0, 0]),
            read_only_port: 0,
            serving: Serving::blank(),
            handlers: DebugHandlers::default(),
            resource_managers: ResourceManagerOptions::default(),
            system_log_query: false,
            protect_kernel_defaults: false,
            healthz_bind_address: IpAddr::from([0, 0, 0, 0]),
            healthz_port: 0,
            file_check_frequency: Duration::ZERO,
            sync_frequency: Duration::ZERO,
            runtime_request_timeout: Duration::ZERO,
            serialize_image_pulls: false,
            max_parallel_image_pulls: None,
            pull_verification: crate::images::VerifyPolicy::NeverVerifyPreloadedImages,
            flag_values: Vec::new(),
            started: std::time::SystemTime::now(),
            max_pods: 0,
            userns_ids_per_pod: None,
            max_open_files: 0,
            runonce: false,
            task_cpu_accounting: false,
            cgroup_driver: CgroupDriver::Cgroupfs,
            cgroup_driver_explicit: false,
            cgroup_root: CgroupName::default(),
            // kubelet's default, so enforceNodeAllocatable's cross-check holds
            // when a row is checked on its own.
            cgroups_per_qos: true,
            pod_pids_limit: -1,
            cpu_cfs_quota: false,
            cpu_cfs_quota_period: Duration::ZERO,
            fail_cgroup_v1: false,
            kube_reserved: Reserved::default(),
            system_reserved: Reserved::default(),
            kube_reserved_cgroup: None,
            system_reserved_cgroup: None,
            eviction_hard: Thresholds::default(),
            eviction_soft: Thresholds::default(),
            eviction_soft_grace_period: Default::default(),
            eviction_minimum_reclaim: Default::default(),
            eviction_pressure_transition_period: std::time::Duration::ZERO,
            eviction_max_pod_grace_period: 0,
            shutdown_grace_period: Duration::ZERO,
            shutdown_grace_period_critical_pods: Duration::ZERO,
            shutdown_grace_period_by_pod_priority: Vec::new(),
            volume_stats_agg_period: Duration::ZERO,
            enforce_node_allocatable: NodeAllocatableEnforcement::default(),
            container_log_max_size: 0,
            container_log_max_files: 0,
            container_log_max_workers: 0,
            container_log_monitor_interval: Duration::ZERO,
            container_log_symlink_dir: PathBuf::new(),
            seccomp_default: false,
            allowed_unsafe_sysctls: Vec::new(),
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: None,
            manifest_url: None,
            manifest_url_header: std::collections::BTreeMap::new(),
            http_check_frequency: Duration::ZERO,
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            cert_dir: None,
            rotate_certificates: false,
            kube_api_qps: 0,
            kube_api_burst: 0,
            node_status_update_frequency: Duration::ZERO,
            node_lease_duration: Duration::ZERO,
            node_ips: Vec::new(),
            provider_id: String::new(),
            feature_gates: std::collections::BTreeMap::new(),
            node_labels: std::collections::BTreeMap::new(),
            register_with_taints: Vec::new(),
            register_node: false,
            node_status_report_frequency: Duration::ZERO,
            event_record_qps: 0,
            event_burst: 0,
            prediction: false,
            prediction_checkpoint_dir: None,
            tsdb_path: None,
            tsdb_retention: Duration::ZERO,
            tsdb_max_bytes: 0,
            pagecache_collector: false,
            lock_file: None,
            exit_on_lock_contention: false,
            image_gc: crate::images::Policy::default(),
            unimplemented: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// The flags' defaults (no config file), taken from the settings table.
impl Default for Options {
    fn default() -> Self {
        let mut o = Options::blank();
        for s in SETTINGS {
            let text = s.default_for(false);
            // Every default passes its own check (a unit test asserts it).
            let _ = (s.set)(
                &mut o,
                Input {
                    text,
                    explicit: false,
                },
            );
        }
        o
    }
}

/// Builds the effective options from the command line (`argv[0]` first):
/// defaults, then the `--config` file, then explicit flags; validates
/// everything and reports every problem found.
pub(crate) fn load<I, T>(args: I) -> Result<Options, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let flags = flags::parse_flags(args)?;
    resolve(flags, crate::node::host_name)
}

/// For `main`: prints help/version and exits 0, or prints each problem to
/// stderr and exits 1.
pub fn load_or_exit() -> Options {
    match load(std::env::args_os()) {
        Ok(options) => options,
        Err(ConfigError::Help(e)) => {
            let _ = e.print();
            std::process::exit(0);
        }
        Err(ConfigError::Invalid(problems)) => {
            for p in &problems {
                eprintln!("oxlet: error: {p}");
            }
            if problems.iter().any(|p| matches!(p, Problem::Usage(_))) {
                eprintln!("oxlet: run 'oxlet --help' for the list of flags");
            }
            std::process::exit(1);
        }
    }
}

/// Where a setting's value came from, to name it in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Default,
    Flag,
    Field,
}

/// One line naming the flag or the file and field, the value and the reason.
fn problem(
    s: &Setting,
    origin: Origin,
    file: &Option<PathBuf>,
    text: &str,
    reason: InvalidValue,
) -> Problem {
    let value = text.to_string();
    let reason = reason.0;
    if s.field == Some("logging.format") {
        // kubelet validates its logging configuration apart from the rest
        // (component-base's `ValidateAndApplyAsField`), flag or file alike.
        return Problem::Other(format!(
            "initialize logging: logging.format: Invalid value: {}: {reason}",
            crate::klog::go_quote(text)
        ));
    }
    match (origin, s.field) {
        (Origin::Field, Some(field)) => Problem::Field {
            file: file.clone().unwrap_or_default(),
            field: field.to_string(),
            value,
            reason,
        },
        (Origin::Default, _) => {
            Problem::Other(format!("default value {value:?} of --{}: {reason}", s.flag))
        }
        _ => Problem::Flag {
            flag: s.flag.to_string(),
            value,
            reason,
        },
    }
}

/// Merges and validates; `host_name` is injected so tests do not depend on the machine.
fn resolve(
    flags: FlagValues,
    host_name: impl FnOnce() -> io::Result<String>,
) -> Result<Options, ConfigError> {
    let mut problems = flags.problems;
    let mut unimplemented: Vec<String> = flags
        .unimplemented
        .iter()
        .map(|name| format!("flag --{name}"))
        .collect();
    let mut warnings = Vec::new();

    // kubelet ignores an empty --config.
    let config_file = flags.config.filter(|p| !p.is_empty()).map(PathBuf::from);
    let mut file = KubeletConfigFile::default();
    if let Some(path) = &config_file {
        match kubelet_config::load_file(path) {
            Ok(f) => file = f,
            Err(p) => problems.extend(p),
        }
        problems.append(&mut file.problems);
        // A setting given both ways (kind: `--fail-swap-on=false` and `failSwapOn: false`)
        // is warned about once, as the flag that wins.
        let same = |flag: &str, field: &str| flag.replace('-', "").eq_ignore_ascii_case(field);
        unimplemented.extend(
            file.unimplemented
                .iter()
                .filter(|f| !flags.unimplemented.iter().any(|g| same(g, f)))
                .map(|f| format!("config field {f}")),
        );
        warnings.extend(file.unknown.iter().map(|field| {
            format!(
                "{}: unknown config field {field:?} (not a KubeletConfiguration field), ignored",
                path.display()
            )
        }));
    }

    let mut o = Options::blank();
    let config_text = config_file.as_ref().map(|p| p.display().to_string());
    o.flag_values
        .push(("config".into(), config_text.unwrap_or_default()));
    for s in SETTINGS {
        // The default, then the file's value, then the flag's. Range checks come
        // after flags are applied, as in kubelet, so a flag can fix a bad file value.
        let mut value = (Origin::Default, s.default_for(config_file.is_some()));
        if let Some(text) = s.field.and_then(|f| file.values.get(f)) {
            value = (Origin::Field, text);
        }
        let merged;
        if let Some(text) = flags.values.get(s.flag) {
            if let Err(reason) = s.kind.parse(text) {
                problems.push(problem(s, Origin::Flag, &config_file, text, reason));
                continue;
            }
            value = match (s.kind, value) {
                // kubelet keeps the file's feature gates the flag does not name: the
                // flag's come last, and the last value of a gate wins.
                (settings::Kind::Gates, (Origin::Field, from_file)) if !from_file.is_empty() => {
                    merged = format!("{from_file},{text}");
                    (Origin::Flag, merged.as_str())
                }
                _ => (Origin::Flag, text),
            };
        }
        let (origin, text) = value;
        if s.has_flag() {
            o.flag_values.push((s.flag.to_string(), text.to_string()));
        }
        let input = Input {
            text,
            explicit: origin != Origin::Default,
        };
        if let Err(reason) = (s.set)(&mut o, input) {
            problems.push(problem(s, origin, &config_file, text, reason));
        }
    }

    // kubelet: --hostname-override if set, else the host name; lower-cased.
    if o.node_name.is_empty() {
        match host_name() {
            Ok(h) => {
                o.node_name = h.trim().to_lowercase();
                if !crate::pod::is_dns1123_subdomain(&o.node_name) {
                    problems.push(Problem::Other(format!(
                        "host name {:?} is not a valid node name (a DNS subdomain); \
                         set --hostname-override",
                        o.node_name
                    )));
                }
            }
            Err(e) => problems.push(Problem::Other(format!(
                "cannot read the host name ({e}); set --hostname-override"
            ))),
        }
    }

    if !problems.is_empty() {
        return Err(ConfigError::Invalid(problems));
    }
    unimplemented.extend(
        o.feature_gates
            .keys()
            .filter(|g| !IMPLEMENTED_GATES.contains(&g.as_str()))
            .map(|g| format!("feature gate {g}")),
    );
    o.config_file = config_file;
    o.unimplemented = unimplemented;
    o.warnings = warnings;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::settings::ENDPOINT_REASON;
    use super::*;
    use crate::pod::is_dns1123_subdomain as is_dns_subdomain;
    use std::io::Write;

    fn resolve_args(args: &[&str], host: &str) -> Result<Options, ConfigError> {
        let flags = flags::parse_flags(std::iter::once("oxlet").chain(args.iter().copied()))?;
        let host = host.to_string();
        resolve(flags, move || Ok(host))
    }

    fn ok(args: &[&str]) -> Options {
        resolve_args(args, "test-host\n").unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn problems(args: &[&str]) -> Vec<String> {
        match resolve_args(args, "test-host") {
            Err(ConfigError::Invalid(p)) => p.iter().map(ToString::to_string).collect(),
            other => panic!("expected problems for {args:?}, got {other:?}"),
        }
    }

    fn one_problem(args: &[&str]) -> String {
        let mut p = problems(args);
        assert_eq!(p.len(), 1, "{p:?}");
        p.remove(0)
    }

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    /// A config file holding `body` after the standard header.
    fn config(body: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
        write!(f, "{HEADER}{body}").unwrap();
        f
    }

    fn config_flag(f: &tempfile::NamedTempFile) -> String {
        format!("--config={}", f.path().display())
    }

    #[test]
    fn defaults() {
        let o = ok(&[]);
        let d = Options::default();
        assert_eq!(o.config_file, None);
        assert_eq!(o.static_pod_path, None);
        assert_eq!(o.container_runtime_endpoint, DEFAULT_RUNTIME_ENDPOINT);
        assert!(!o.runtime_endpoint_explicit);
        assert_eq!(o.root_dir, d.root_dir);
        assert_eq!(o.pod_logs_dir, PathBuf::from("/var/log/pods"));
        assert_eq!(o.node_name, "test-host");
        assert_eq!(o.verbosity, 0);
        assert_eq!(o.address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(o.read_only_port, 10255);
        assert_eq!(o.healthz_bind_address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(o.healthz_port, 10248);
        // The secure port as kubelet's flags default it.
        let s = &o.serving;
        assert!(s.enabled() && s.port == 10250 && s.anonymous && !s.token_webhook);
        assert_eq!(s.authorization_mode, AuthorizationMode::AlwaysAllow);
        assert_eq!(s.token_webhook_cache_ttl, Duration::from_secs(120));
        assert_eq!(
            (s.authorized_ttl, s.unauthorized_ttl),
            (Duration::from_secs(300), Duration::from_secs(30))
        );
        assert_eq!(s.streaming_idle_timeout, Duration::from_secs(4 * 3600));
        assert_eq!((&s.tls_cert_file, &s.client_ca_file), (&None, &None));
        assert_eq!(o.file_check_frequency, Duration::from_secs(20));
        assert_eq!(o.sync_frequency, Duration::from_secs(60));
        assert_eq!(o.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(o.max_pods, 110);
        assert_eq!((o.event_record_qps, o.event_burst), (50, 100));
        assert_eq!(o.max_open_files, 1_000_000);
        assert!(!o.runonce);
        assert!(o.unimplemented.is_empty() && o.warnings.is_empty());
    }

    #[test]
    fn prediction_is_on_by_default_and_its_directory_is_a_flag() {
        let o = ok(&[]);
        assert!(o.prediction && o.prediction_checkpoint_dir.is_none());
        let o = ok(&[
            "--enable-prediction=false",
            "--prediction-checkpoint-filepath=/srv/cp",
        ]);
        assert!(!o.prediction);
        assert_eq!(o.prediction_checkpoint_dir, Some(PathBuf::from("/srv/cp")));
    }

    #[test]
    fn load_uses_the_machine_host_name() {
        let host = crate::node::host_name().unwrap().trim().to_lowercase();
        match load(["oxlet"]) {
            Ok(o) => assert_eq!(o.node_name, host),
            // A machine whose host name is not a DNS subdomain.
            Err(e) => assert!(!is_dns_subdomain(&host), "{e}"),
        }
    }

    #[test]
    fn every_flag_applies() {
        let o = ok(&[
            "--pod-manifest-path=/etc/kubernetes/manifests",
            "--container-runtime-endpoint",
            "unix:///run/crio/crio.sock",
            "--root-dir=/srv/oxlet",
            "--pod-logs-dir=/srv/logs",
            "--hostname-override=  Node-1.Example ",
            "-v",
            "4",
            "--address=0.0.0.0",
            "--read-only-port=0",
            "--healthz-bind-address=::",
            "--healthz-port=0",
            "--file-check-frequency=1.5s",
            "--sync-frequency=10s",
            "--runtime-request-timeout=1h",
            "--max-pods=0",
            "--runonce",
        ]);
        assert_eq!(
            o.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(o.container_runtime_endpoint, "unix:///run/crio/crio.sock");
        assert!(o.runtime_endpoint_explicit);
        assert_eq!(o.root_dir, PathBuf::from("/srv/oxlet"));
        assert_eq!(o.pod_logs_dir, PathBuf::from("/srv/logs"));
        assert_eq!(o.node_name, "node-1.example");
        assert_eq!(o.verbosity, 4);
        assert_eq!(o.address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(o.read_only_port, 0);
        assert_eq!(o.healthz_bind_address, "::".parse::<IpAddr>().unwrap());
        assert_eq!(o.healthz_port, 0);
        assert_eq!(o.file_check_frequency, Duration::from_millis(1500));
        assert_eq!(o.sync_frequency, Duration::from_secs(10));
        assert_eq!(o.runtime_request_timeout, Duration::from_secs(3600));
        assert_eq!(o.max_pods, 0);
        assert!(o.runonce);
    }

    #[test]
    fn feature_gates_turn_the_evented_pleg_off_and_name_the_others() {
        assert!(ok(&[]).evented_pleg(), "on unless set false");
        let o = ok(&["--feature-gates=EventedPLEG=false,InPlacePodVerticalScaling=true"]);
        assert!(!o.evented_pleg());
        assert_eq!(o.unimplemented, ["feature gate InPlacePodVerticalScaling"]);
        let f = config("featureGates:\n  EventedPLEG: true\n  FileOnly: true\n");
        assert!(ok(&[&config_flag(&f)]).evented_pleg());
        // The flag wins gate by gate; the file's other gates stay (kubelet's merge).
        let o = ok(&[
            &config_flag(&f),
            "--feature-gates=EventedPLEG=false,FlagOnly=false",
        ]);
        assert!(!o.evented_pleg());
        assert_eq!(
            o.feature_gates.keys().collect::<Vec<_>>(),
            ["EventedPLEG", "FileOnly", "FlagOnly"]
        );
        let p = one_problem(&["--feature-gates=EventedPLEG=maybe"]);
        assert!(
            p.contains("EventedPLEG: \"maybe\" is not true or false"),
            "{p}"
        );
        let f = config("featureGates:\n  EventedPLEG: \"no\"\n");
        let p = one_problem(&[&config_flag(&f)]);
        assert!(
            p.contains("featureGates") && p.contains("true or false"),
            "{p}"
        );
    }

    #[test]
    fn verbosity_flag_forms() {
        for args in [&["-v=4"][..], &["--v=4"], &["-v", "4"], &["-v4"]] {
            assert_eq!(ok(args).verbosity, 4, "{args:?}");
        }
    }

    /// `--logging-format` and `logging.format` (the flag wins); a format
    /// component-base does not know is refused with kubelet's words, either way.
    #[test]
    fn logging_format_from_flag_or_file() {
        use crate::logging::LogFormat;
        assert_eq!(ok(&[]).logging_format, LogFormat::Text);
        assert_eq!(
            ok(&["--logging-format=json"]).logging_format,
            LogFormat::Json
        );
        let f = config("logging:\n  format: json\n");
        assert_eq!(ok(&[&config_flag(&f)]).logging_format, LogFormat::Json);
        let both = ok(&[&config_flag(&f), "--logging-format=text"]);
        assert_eq!(both.logging_format, LogFormat::Text);
        assert!(both.unimplemented.is_empty(), "{:?}", both.unimplemented);
        let refused =
            "initialize logging: logging.format: Invalid value: \"xml\": Unsupported log format";
        assert_eq!(one_problem(&["--logging-format=xml"]), refused);
        let f = config("logging:\n  format: xml\n");
        assert_eq!(one_problem(&[&config_flag(&f)]), refused);
    }

    #[test]
    fn explicit_default_endpoint_is_still_explicit() {
        let o = ok(&["--container-runtime-endpoint", DEFAULT_RUNTIME_ENDPOINT]);
        assert!(o.runtime_endpoint_explicit);
        let f = config(&format!(
            "containerRuntimeEndpoint: {DEFAULT_RUNTIME_ENDPOINT}\n"
        ));
        assert!(ok(&[&config_flag(&f)]).runtime_endpoint_explicit);
    }

    #[test]
    fn event_rate_from_the_file_and_flags() {
        let f = config("eventRecordQPS: 7\neventBurst: 9\n");
        let o = ok(&[&config_flag(&f)]);
        assert_eq!((o.event_record_qps, o.event_burst), (7, 9));
        assert!(o.unimplemented.is_empty(), "{:?}", o.unimplemented);
        let o = ok(&[&config_flag(&f), "--event-qps=3"]);
        assert_eq!((o.event_record_qps, o.event_burst), (3, 9));
    }

    #[test]
    fn config_file_overrides_defaults() {
        let f = config(
            "staticPodPath: /etc/kubernetes/manifests\n\
             fileCheckFrequency: 5s\n\
             syncFrequency: 30s\n\
             runtimeRequestTimeout: 3m\n\
             readOnlyPort: 10255\n\
             healthzPort: 10249\n\
             healthzBindAddress: 0.0.0.0\n\
             address: 10.0.0.1\n\
             containerRuntimeEndpoint: unix:///run/crio/crio.sock\n\
             podLogsDir: /srv/pods\n\
             maxPods: 12\n",
        );
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(o.config_file.as_deref(), Some(f.path()));
        assert_eq!(
            o.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(o.file_check_frequency, Duration::from_secs(5));
        assert_eq!(o.sync_frequency, Duration::from_secs(30));
        assert_eq!(o.runtime_request_timeout, Duration::from_secs(180));
        assert_eq!(o.read_only_port, 10255);
        assert_eq!(o.healthz_port, 10249);
        assert_eq!(o.healthz_bind_address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(o.address, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(o.container_runtime_endpoint, "unix:///run/crio/crio.sock");
        assert!(o.runtime_endpoint_explicit);
        assert_eq!(o.pod_logs_dir, PathBuf::from("/srv/pods"));
        assert_eq!(o.max_pods, 12);
        assert!(o.unimplemented.is_empty() && o.warnings.is_empty());
    }

    #[test]
    fn flags_override_config_file() {
        let f = config(
            "staticPodPath: /from/file\n\
             syncFrequency: 30s\n\
             readOnlyPort: 1234\n\
             maxPods: 12\n\
             containerRuntimeEndpoint: unix:///from/file.sock\n",
        );
        let o = ok(&[
            "--pod-manifest-path=/from/flag",
            "--sync-frequency=5s",
            "--max-pods=3",
            &config_flag(&f),
            "--read-only-port=10255",
        ]);
        assert_eq!(o.static_pod_path, Some(PathBuf::from("/from/flag")));
        assert_eq!(o.sync_frequency, Duration::from_secs(5));
        assert_eq!(o.max_pods, 3);
        assert_eq!(o.read_only_port, 10255);
        // Not given as a flag: the file's value stands.
        assert_eq!(o.container_runtime_endpoint, "unix:///from/file.sock");
    }

    #[test]
    fn a_flag_can_replace_a_bad_file_value() {
        let f = config("readOnlyPort: 99999\nfileCheckFrequency: -1s\n");
        let o = ok(&[
            &config_flag(&f),
            "--read-only-port=80",
            "--file-check-frequency=2s",
        ]);
        assert_eq!(o.read_only_port, 80);
        assert_eq!(o.file_check_frequency, Duration::from_secs(2));
    }

    #[test]
    fn config_file_read_only_port_defaults_to_zero() {
        let f = config("maxPods: 10\n");
        assert_eq!(ok(&[&config_flag(&f)]).read_only_port, 0);
        assert_eq!(
            ok(&[&config_flag(&f), "--read-only-port=10255"]).read_only_port,
            10255
        );
        assert_eq!(ok(&[]).read_only_port, 10255);
        // An empty --config means no file, as in kubelet.
        let o = ok(&["--config="]);
        assert_eq!((o.config_file, o.read_only_port), (None, 10255));
    }

    /// With a config file, the secure port's defaults are KubeletConfiguration's:
    /// no anonymous requests, bearer tokens and authorization through the apiserver.
    #[test]
    fn config_file_secures_the_secure_port() {
        let f = config("maxPods: 10\n");
        let s = ok(&[&config_flag(&f)]).serving;
        assert!(!s.anonymous && s.token_webhook);
        assert_eq!(s.authorization_mode, AuthorizationMode::Webhook);
        let s = ok(&[
            &config_flag(&f),
            "--anonymous-auth",
            "--authorization-mode=AlwaysAllow",
        ])
        .serving;
        assert!(s.anonymous);
        assert_eq!(s.authorization_mode, AuthorizationMode::AlwaysAllow);
        let e = load(["oxlet", "--authorization-mode=RBAC"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("authorization-mode") && e.contains("AlwaysAllow or Webhook"),
            "{e}"
        );
        let e = load(["oxlet", "--tls-min-version=VersionTLS10"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("tls-min-version"), "{e}");
    }

    #[test]
    fn relative_static_pod_path_in_file_is_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet.yaml");
        std::fs::write(&path, format!("{HEADER}staticPodPath: manifests\n")).unwrap();
        let o = ok(&[&format!("--config={}", path.display())]);
        assert_eq!(o.static_pod_path, Some(dir.path().join("manifests")));
        assert_eq!(ok(&["--pod-manifest-path="]).static_pod_path, None);
    }

    #[test]
    fn unimplemented_kubelet_flags_warn() {
        let o = ok(&[
            "--kernel-memcg-notification=false",
            "--kubelet-cgroups",
            "/kubelet",
        ]);
        assert_eq!(
            o.unimplemented,
            ["flag --kernel-memcg-notification", "flag --kubelet-cgroups"]
        );
        assert_eq!(
            ok(&["--kernel-memcg-notification"]).unimplemented,
            ["flag --kernel-memcg-notification"]
        );
    }

    #[test]
    fn runonce_is_a_pflag_boolean() {
        assert!(ok(&["--runonce"]).runonce);
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(ok(&[&format!("--runonce={text}")]).runonce, "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert!(!ok(&[&format!("--runonce={text}")]).runonce, "{text}");
        }
        assert_eq!(
            one_problem(&["--runonce=maybe"]),
            "invalid value \"maybe\" for --runonce: must be true or false"
        );
    }

    #[test]
    fn bad_bool_flag_is_an_error() {
        assert_eq!(
            one_problem(&["--fail-swap-on=sometimes"]),
            "invalid value \"sometimes\" for --fail-swap-on: must be true or false"
        );
    }

    #[test]
    fn unknown_flag_rejected() {
        assert_eq!(
            one_problem(&["--max-pod=3"]),
            "unknown flag: --max-pod (did you mean --max-pods?)"
        );
        assert!(matches!(
            load(["oxlet", "--no-such-flag=1"]),
            Err(ConfigError::Invalid(_))
        ));
    }

    #[test]
    fn help_and_version() {
        assert!(matches!(
            load(["oxlet", "--help"]),
            Err(ConfigError::Help(_))
        ));
        match load(["oxlet", "--version"]) {
            Err(ConfigError::Help(text)) => {
                assert_eq!(
                    text.to_string().trim_end(),
                    format!("oxlet {}\nKubernetes v1.36.0", env!("CARGO_PKG_VERSION"))
                );
            }
            _ => panic!("--version prints the versions"),
        }
    }

    #[test]
    fn node_ip_takes_one_address_or_a_dual_stack_pair() {
        assert!(ok(&[]).node_ips.is_empty());
        let ips = |s: &str| -> Vec<IpAddr> { s.split(',').map(|p| p.parse().unwrap()).collect() };
        assert_eq!(ok(&["--node-ip=172.18.0.2"]).node_ips, ips("172.18.0.2"));
        assert_eq!(
            ok(&["--node-ip=172.18.0.2,fc00:f853:ccd:e793::2"]).node_ips,
            ips("172.18.0.2,fc00:f853:ccd:e793::2")
        );
        assert_eq!(ok(&["--node-ip=::"]).node_ips, ips("::"));
        for (value, reason) in [
            (
                "10.0.0.1,10.0.0.2",
                "must contain either a single IP or a dual-stack pair of IPs",
            ),
            (
                "10.0.0.1,fd00::1,fd00::2",
                "must contain either a single IP or a dual-stack pair of IPs",
            ),
            (
                "0.0.0.0,fd00::1",
                "dual-stack node IP cannot include '0.0.0.0' or '::'",
            ),
            ("10.0.0.1,nope", "could not parse \"nope\""),
        ] {
            assert_eq!(
                one_problem(&[&format!("--node-ip={value}")]),
                format!("invalid value {value:?} for --node-ip: {reason}")
            );
        }
    }

    #[test]
    fn user_namespace_ids_per_pod_is_checked_as_kubelet_checks_it() {
        assert_eq!(ok(&[]).userns_ids_per_pod, None);
        let f = config("userNamespaces:\n  idsPerPod: 1048576\n");
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(o.userns_ids_per_pod, Some(1_048_576));
        assert!(o.unimplemented.is_empty(), "{:?}", o.unimplemented);
        for (n, reason) in [
            ("1000", "must not be less than 65536"),
            ("100000", "must be a multiple of 65536"),
            ("4295032832", "must not be more than 4294967295"),
        ] {
            let f = config(&format!("userNamespaces:\n  idsPerPod: {n}\n"));
            assert_eq!(
                one_problem(&[&config_flag(&f)]),
                format!(
                    "{}: field userNamespaces.idsPerPod: invalid value \"{n}\": {reason}",
                    f.path().display()
                )
            );
        }
    }

    #[test]
    fn single_process_oom_kill_and_swap_behavior_come_from_the_file_only() {
        use crate::cm::SwapBehavior;
        let o = ok(&[]);
        assert_eq!(o.memory, crate::cm::MemorySettings::default());
        let f = config("singleProcessOOMKill: false\nmemorySwap:\n  swapBehavior: LimitedSwap\n");
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(o.memory.single_process_oom_kill, Some(false));
        assert_eq!(o.memory.swap_behavior, Some(SwapBehavior::LimitedSwap));
        assert!(o.unimplemented.is_empty(), "{:?}", o.unimplemented);
        assert_eq!(o.cm_settings().memory, o.memory);
        // kind writes `memorySwap: {}`, and "" is NoSwap's unset spelling.
        for body in ["memorySwap: {}\n", "memorySwap:\n  swapBehavior: \"\"\n"] {
            let f = config(body);
            assert_eq!(ok(&[&config_flag(&f)]).memory.swap_behavior, None);
        }
        let f = config("memorySwap:\n  swapBehavior: UnlimitedSwap\n");
        assert_eq!(
            one_problem(&[&config_flag(&f)]),
            format!(
                "{}: field memorySwap.swapBehavior: invalid value \"UnlimitedSwap\": must be one of: \"\", \"LimitedSwap\" or \"NoSwap\"",
                f.path().display()
            )
        );
        // Config fields only, as in kubelet.
        assert!(one_problem(&["--single-process-oom-kill=true"]).starts_with("unknown flag"));
    }

    #[test]
    fn config_fields_not_implemented_or_unknown_warn() {
        let f = config(
            "failSwapOn: false\n\
             kubeletCgroups: /kubelet\n\
             logging:\n  flushFrequency: 5s\n\
             noSuchField: 1\n",
        );
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(
            o.unimplemented,
            [
                "config field kubeletCgroups",
                "config field logging.flushFrequency"
            ]
        );
        // Given as a flag too, it is warned about once, as the flag.
        let o = ok(&[&config_flag(&f), "--kubelet-cgroups=/kubelet"]);
        assert_eq!(
            o.unimplemented,
            [
                "flag --kubelet-cgroups",
                "config field logging.flushFrequency"
            ]
        );
        assert_eq!(o.warnings.len(), 1);
        assert_eq!(
            o.warnings[0],
            format!(
                "{}: unknown config field \"noSuchField\" (not a KubeletConfiguration field), ignored",
                f.path().display()
            )
        );
    }

    /// One bad value per check: (flag, value, reason).
    const BAD_VALUES: &[(&str, &str, &str)] = &[
        ("read-only-port", "99999", "must be between 0 and 65535"),
        ("healthz-port", "-1", "must be between 0 and 65535"),
        ("healthz-port", "70000", "must be between 0 and 65535"),
        ("healthz-port", "http", "must be an integer"),
        ("max-pods", "-1", "must be greater than or equal to 0"),
        ("max-pods", "3000000000", "must be at most 2147483647"),
        ("max-open-files", "10", "must be at least 256"),
        ("max-open-files", "-1", "must be at least 256"),
        ("file-check-frequency", "-1s", "must be greater than 0"),
        // A zero in the file is kubelet's "unset" (defaulted); only a flag can say 0.
        ("sync-frequency", "-1s", "must be greater than 0"),
        ("kube-api-qps", "-1", "must not be a negative number"),
        ("kube-api-burst", "-5", "must not be a negative number"),
        ("kube-api-burst", "3000000000", "must be at most 2147483647"),
        ("event-qps", "-1", "must not be a negative number"),
        ("event-burst", "-1", "must not be a negative number"),
        (
            "node-status-update-frequency",
            "-10s",
            "must be greater than 0",
        ),
        ("runtime-request-timeout", "-2m", "must be greater than 0"),
        (
            "file-check-frequency",
            "20",
            "missing unit (use a Go duration such as 20s, 1m30s or 300ms)",
        ),
        (
            "address",
            "localhost",
            "must be a valid IPv4 or IPv6 address",
        ),
        (
            "address",
            "300.1.1.1",
            "must be a valid IPv4 or IPv6 address",
        ),
        (
            "healthz-bind-address",
            "1.2.3",
            "must be a valid IPv4 or IPv6 address",
        ),
        ("pod-logs-dir", "logs", "must be an absolute path"),
        ("root-dir", "", "must not be empty"),
        (
            "pod-cidr",
            "10.244.1.0",
            "must be a CIDR (an address, '/', a prefix length)",
        ),
        (
            "pod-cidr",
            "10.244.1.0/x",
            "must be a CIDR (an address, '/', a prefix length)",
        ),
        ("pod-cidr", "10.244.1.0/33", "prefix length 33 is over 32"),
        (
            "managed-cni-bridge",
            "a-very-long-bridge",
            "must be an interface name: 1 to 15 of a-z, A-Z, 0-9, '-', '_', '.'",
        ),
        (
            "managed-cni-bridge",
            "br/0",
            "must be an interface name: 1 to 15 of a-z, A-Z, 0-9, '-', '_', '.'",
        ),
        ("v", "300", "must be between 0 and 255"),
        ("v", "loud", "must be an integer"),
    ];

    /// Each bad value as a flag, and in the config file where the setting has a
    /// field: one line naming the flag or file and field, the value and the reason.
    #[test]
    fn bad_values_name_the_flag_or_field_the_value_and_the_reason() {
        for &(flag, value, reason) in BAD_VALUES {
            assert_eq!(
                one_problem(&[&format!("--{flag}={value}")]),
                format!("invalid value {value:?} for --{flag}: {reason}")
            );
            let setting = SETTINGS.iter().find(|s| s.flag == flag).unwrap();
            let Some(field) = setting.field else {
                continue;
            };
            // Integers as YAML numbers; everything else (and non-numbers) as strings.
            let f = match value.parse::<i64>() {
                Ok(_) if setting.kind == settings::Kind::Int => {
                    config(&format!("{field}: {value}\n"))
                }
                _ => config(&format!("{field}: {value:?}\n")),
            };
            assert_eq!(
                one_problem(&[&config_flag(&f)]),
                format!(
                    "{}: field {field}: invalid value {value:?}: {reason}",
                    f.path().display()
                )
            );
        }
    }

    #[test]
    fn file_problems_come_first() {
        let f = config("syncFrequency: -1s\nruntimeRequestTimeout: 2x\n");
        let p = problems(&[&config_flag(&f)]);
        let path = f.path().display().to_string();
        assert_eq!(
            p,
            [
                format!(
                    "{path}: field runtimeRequestTimeout: invalid value \"2x\": unknown unit \"x\" \
                     (valid units: ns, us, ms, s, m, h)"
                ),
                format!(
                    "{path}: field syncFrequency: invalid value \"-1s\": must be greater than 0"
                ),
            ]
        );
    }

    #[test]
    fn endpoint_must_be_unix_absolute() {
        for bad in [
            "tcp://127.0.0.1:1234",
            "unix://run/containerd.sock",
            "/run/containerd/containerd.sock",
            "unix://",
            "unix:///",
        ] {
            assert_eq!(
                one_problem(&["--container-runtime-endpoint", bad]),
                format!(
                    "invalid value {bad:?} for --container-runtime-endpoint: {ENDPOINT_REASON}"
                )
            );
        }
        let f = config("containerRuntimeEndpoint: npipe:////./pipe/containerd\n");
        let msg = one_problem(&[&config_flag(&f)]);
        assert!(
            msg.contains(
                "field containerRuntimeEndpoint: invalid value \"npipe:////./pipe/containerd\""
            ),
            "{msg}"
        );
    }

    #[test]
    fn node_name() {
        assert_eq!(ok(&["--hostname-override=  "]).node_name, "test-host");
        let msg = one_problem(&["--hostname-override=node_1"]);
        assert!(
            msg.starts_with("invalid value \"node_1\" for --hostname-override: "),
            "{msg}"
        );
        let err = resolve(FlagValues::default(), || Ok("bad_host".into())).unwrap_err();
        assert!(err.to_string().contains("set --hostname-override"), "{err}");
        let err = resolve(
            FlagValues::default(),
            || Err(io::ErrorKind::NotFound.into()),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("cannot read the host name"),
            "{err}"
        );
        let o = resolve(
            FlagValues {
                values: [("hostname-override", "X".to_string())].into(),
                ..Default::default()
            },
            || panic!("host name must not be read when overridden"),
        )
        .unwrap();
        assert_eq!(o.node_name, "x");
    }

    #[test]
    fn wrong_kind() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(f, "apiVersion: v1\nkind: Pod\n").unwrap();
        let path = f.path().display().to_string();
        assert_eq!(
            problems(&[&config_flag(&f)]),
            [
                format!(
                    "{path}: kind is \"Pod\", expected KubeletConfiguration \
                     (apiVersion kubelet.config.k8s.io/v1beta1)"
                ),
                format!("{path}: apiVersion is \"v1\", expected kubelet.config.k8s.io/v1beta1"),
            ]
        );
    }

    #[test]
    fn unreadable_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.yaml");
        let msg = one_problem(&[&format!("--config={}", path.display())]);
        assert!(
            msg.starts_with(&format!("{}: cannot read config file: ", path.display())),
            "{msg}"
        );
    }

    #[test]
    fn config_yaml_syntax_error() {
        let f = config("maxPods: 3\n  syncFrequency: [1m\n");
        let msg = one_problem(&[&config_flag(&f)]);
        assert!(
            msg.starts_with(&format!("{}: invalid YAML: ", f.path().display())),
            "{msg}"
        );
        assert!(msg.contains("line "), "{msg}");
    }

    #[test]
    fn all_problems_are_reported_together() {
        let f = config("maxPods: -1\nsyncFrequency: banana\nhealthzPort: 65536\n");
        let p = problems(&[
            &config_flag(&f),
            "--read-only-port=99999",
            "--address=nope",
            "--file-check-frequency=-1s",
            "--container-runtime-endpoint=tcp://x",
            "--fail-swap-on=perhaps",
        ]);
        assert_eq!(p.len(), 8, "{p:#?}");
        let all = p.join("\n");
        for needle in [
            "--fail-swap-on",
            "field syncFrequency: invalid value \"banana\"",
            "--container-runtime-endpoint",
            "--address",
            "--read-only-port",
            "field healthzPort: invalid value \"65536\"",
            "--file-check-frequency",
            "field maxPods: invalid value \"-1\"",
        ] {
            assert!(all.contains(needle), "{needle} missing from:\n{all}");
        }
        let err = resolve_args(&["--max-pods=-1", "--healthz-port=x"], "h").unwrap_err();
        assert_eq!(err.to_string().lines().count(), 2);
        assert_eq!(err.problems().len(), 2);
    }

    #[test]
    fn container_manager_defaults_are_kubelets() {
        use crate::contracts::{Signal, ThresholdValue};
        let o = ok(&[]);
        assert_eq!(o.cgroup_driver, CgroupDriver::Cgroupfs);
        assert!(!o.cgroup_driver_explicit);
        assert_eq!(o.cgroup_root, CgroupName::default());
        assert!(o.cgroups_per_qos && o.cpu_cfs_quota && o.fail_cgroup_v1);
        assert_eq!(o.pod_pids_limit, -1);
        assert_eq!(o.cpu_cfs_quota_period, Duration::from_millis(100));
        assert_eq!((o.kube_reserved, o.system_reserved), Default::default());
        assert_eq!(
            (&o.kube_reserved_cgroup, &o.system_reserved_cgroup),
            (&None, &None)
        );
        let t = &o.eviction_hard;
        assert_eq!(t.0.len(), 4);
        assert_eq!(
            t.get(Signal::MemoryAvailable),
            Some(ThresholdValue::Quantity(100 << 20))
        );
        assert_eq!(
            t.get(Signal::NodeFsAvailable),
            Some(ThresholdValue::Percentage(0.1))
        );
        assert_eq!(
            t.get(Signal::NodeFsInodesFree),
            Some(ThresholdValue::Percentage(0.05))
        );
        assert_eq!(
            t.get(Signal::ImageFsAvailable),
            Some(ThresholdValue::Percentage(0.15))
        );
        assert_eq!(
            o.enforce_node_allocatable,
            NodeAllocatableEnforcement {
                pods: true,
                ..Default::default()
            }
        );
        // The same defaults with a config file that sets none of them.
        let f = config("maxPods: 10\n");
        let c = ok(&[&config_flag(&f)]);
        assert_eq!(c.eviction_hard, o.eviction_hard);
        assert_eq!(c.enforce_node_allocatable, o.enforce_node_allocatable);
    }

    #[test]
    fn container_manager_flags_apply() {
        use crate::contracts::{Signal, ThresholdValue};
        let o = ok(&[
            "--cgroup-driver=systemd",
            "--cgroup-root=/oxlet//pods/",
            "--cgroups-per-qos=true",
            "--pod-max-pids=-7",
            "--cpu-cfs-quota=false",
            "--cpu-cfs-quota-period=50ms",
            "--fail-cgroupv1",
            "--kube-reserved=cpu=100m, memory=1Gi,ephemeral-storage=1Gi,pid=100",
            "--system-reserved=memory=512Mi",
            "--kube-reserved-cgroup=/kube.slice",
            "--system-reserved-cgroup=/system.slice",
            "--eviction-hard=memory.available<1Gi,nodefs.available<0%",
            "--enforce-node-allocatable=pods,kube-reserved,system-reserved",
        ]);
        assert_eq!(o.cgroup_driver, CgroupDriver::Systemd);
        assert!(o.cgroup_driver_explicit);
        assert_eq!(
            o.cgroup_root,
            CgroupName(vec!["oxlet".into(), "pods".into()])
        );
        assert_eq!(o.pod_pids_limit, -1);
        assert!(!o.cpu_cfs_quota && o.fail_cgroup_v1);
        assert_eq!(o.cpu_cfs_quota_period, Duration::from_millis(50));
        assert_eq!(o.kube_reserved.cpu_milli, Some(100));
        assert_eq!(o.kube_reserved.memory_bytes, Some(1 << 30));
        assert_eq!(o.kube_reserved.pids, Some(100));
        assert_eq!(o.system_reserved.memory_bytes, Some(512 << 20));
        assert_eq!(o.system_reserved.cpu_milli, None);
        assert_eq!(
            o.kube_reserved_cgroup,
            Some(CgroupName(vec!["kube.slice".into()]))
        );
        // A given map replaces the defaults whole; 0% disables.
        assert_eq!(o.eviction_hard.0.len(), 1);
        assert_eq!(
            o.eviction_hard.get(Signal::MemoryAvailable),
            Some(ThresholdValue::Quantity(1 << 30))
        );
        assert_eq!(
            o.enforce_node_allocatable,
            NodeAllocatableEnforcement {
                pods: true,
                system_reserved: Some(crate::cm::Enforced::All),
                kube_reserved: Some(crate::cm::Enforced::All)
            }
        );
        assert_eq!(ok(&["--pod-max-pids=4096"]).pod_pids_limit, 4096);
        assert_eq!(
            ok(&[
                "--kube-reserved-cgroup=/kube.slice",
                "--enforce-node-allocatable=pods,kube-reserved-compressible"
            ])
            .enforce_node_allocatable
            .kube_reserved,
            Some(crate::cm::Enforced::Compressible)
        );
        assert_eq!(
            ok(&["--enforce-node-allocatable=none"]).enforce_node_allocatable,
            NodeAllocatableEnforcement::default()
        );
        assert_eq!(
            ok(&["--enforce-node-allocatable=", "--cgroups-per-qos=false"])
                .enforce_node_allocatable,
            NodeAllocatableEnforcement::default()
        );
        assert!(ok(&["--eviction-hard="]).eviction_hard.0.is_empty());
    }

    #[test]
    fn container_manager_config_fields_apply_and_flags_win() {
        let f = config(
            "cgroupDriver: systemd\n\
             cgroupsPerQOS: false\n\
             enforceNodeAllocatable: []\n\
             podPidsLimit: 512\n\
             cpuCFSQuotaPeriod: 10ms\n\
             kubeReserved:\n  cpu: 200m\n  memory: 256Mi\n\
             evictionHard:\n  memory.available: 200Mi\n",
        );
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(o.cgroup_driver, CgroupDriver::Systemd);
        assert!(o.cgroup_driver_explicit && !o.cgroups_per_qos);
        assert_eq!(
            o.enforce_node_allocatable,
            NodeAllocatableEnforcement::default()
        );
        assert_eq!(o.pod_pids_limit, 512);
        assert_eq!(o.cpu_cfs_quota_period, Duration::from_millis(10));
        assert_eq!(o.kube_reserved.cpu_milli, Some(200));
        assert_eq!(o.kube_reserved.memory_bytes, Some(256 << 20));
        assert_eq!(o.eviction_hard.to_string(), "memory.available<200Mi");
        let o = ok(&[
            &config_flag(&f),
            "--kube-reserved=cpu=1",
            "--cgroup-driver=cgroupfs",
        ]);
        assert_eq!(o.kube_reserved.cpu_milli, Some(1000));
        assert_eq!(o.kube_reserved.memory_bytes, None);
        assert_eq!(o.cgroup_driver, CgroupDriver::Cgroupfs);
        // A cross-check names the field whose value fails it.
        let f = config("enforceNodeAllocatable: [pods]\ncgroupsPerQOS: false\n");
        assert_eq!(
            one_problem(&[&config_flag(&f)]),
            format!(
                "{}: field enforceNodeAllocatable: invalid value \"pods\": cgroupsPerQOS \
                 (--cgroups-per-qos) must be set to true when \"pods\" contained in enforceNodeAllocatable",
                f.path().display()
            )
        );
        let f = config("kubeReserved:\n  cpu: 1\n");
        let msg = one_problem(&[&config_flag(&f)]);
        assert!(
            msg.contains("field kubeReserved: invalid value ")
                && msg.ends_with("must be a map of strings (quote numbers: \"1\")"),
            "{msg}"
        );
        let f = config("evictionHard: 100Mi\n");
        assert!(one_problem(&[&config_flag(&f)]).ends_with("must be a map of strings"));
        let f = config("enforceNodeAllocatable: pods\n");
        assert!(one_problem(&[&config_flag(&f)]).ends_with("must be a list of strings"));
        let f = config("evictionHard:\n  memory.free: 1Gi\n");
        assert!(
            one_problem(&[&config_flag(&f)]).ends_with(
                "field evictionHard: invalid value \"memory.free<1Gi\": unsupported eviction signal memory.free"
            ),
            "{}",
            one_problem(&[&config_flag(&f)])
        );
    }

    #[test]
    fn container_manager_bad_values() {
        for (args, flag, value, reason) in [
            (
                &[][..],
                "cgroup-driver",
                "upstart",
                "must be \"cgroupfs\" or \"systemd\"",
            ),
            (
                &[],
                "cgroup-root",
                "kubepods",
                "must be an absolute cgroup path such as /kubelet",
            ),
            (
                &[],
                "cgroup-root",
                "/a/../b",
                "must not contain '.' or '..' components",
            ),
            (
                &[],
                "cpu-cfs-quota-period",
                "2s",
                "must be between 1ms and 1sec, inclusive",
            ),
            (
                &[],
                "cpu-cfs-quota-period",
                "500us",
                "must be between 1ms and 1sec, inclusive",
            ),
            (&[], "pod-max-pids", "many", "must be an integer"),
            (
                &[],
                "kube-reserved",
                "gpu=1",
                "cannot reserve \"gpu\" resource",
            ),
            (
                &[],
                "system-reserved",
                "memory=-1Gi",
                "resource quantity for \"memory\" cannot be negative: -1Gi",
            ),
            (
                &[],
                "kube-reserved",
                "cpu",
                "\"cpu\" must be formatted as key=value",
            ),
            (
                &[],
                "eviction-hard",
                "memory.available=1Gi",
                "\"memory.available=1Gi\" must be formatted as key<value",
            ),
            (
                &[],
                "eviction-hard",
                "memory.available<0",
                "eviction threshold memory.available must be positive: 0",
            ),
            (
                &[],
                "eviction-hard",
                "pid.available<101%",
                "eviction percentage threshold pid.available must be <= 100%: 101%",
            ),
            // kubelet's rules for the soft thresholds and minimum reclaim.
            (
                &["--eviction-soft-grace-period=nodefs.available=1m"],
                "eviction-soft",
                "memory.available<1Gi",
                "grace period must be specified for the soft eviction threshold memory.available \
                 (set --eviction-soft-grace-period or evictionSoftGracePeriod)",
            ),
            (
                &[],
                "eviction-soft-grace-period",
                "memory.available=-5s",
                "invalid eviction grace period specified: -5s, must be a positive value",
            ),
            (
                &[],
                "eviction-minimum-reclaim",
                "memory.free=1Gi",
                "unsupported eviction signal memory.free",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "pods,none",
                "enforceNodeAllocatable may not contain additional enforcements when \"none\" is specified",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "pods,pods",
                "duplicated enforcements \"pods\" in enforceNodeAllocatable",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "everything",
                "option \"everything\" specified for enforceNodeAllocatable. Valid options are \"pods\", \"system-reserved\", \"kube-reserved\", \"system-reserved-compressible\", \"kube-reserved-compressible\" or \"none\"",
            ),
            (
                &["--system-reserved-cgroup=/system.slice"],
                "enforce-node-allocatable",
                "system-reserved,system-reserved-compressible",
                "both \"system-reserved\" and \"system-reserved-compressible\" cannot be specified together in enforceNodeAllocatable",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "kube-reserved-compressible",
                "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \"kube-reserved-compressible\" included in enforceNodeAllocatable",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "system-reserved",
                "systemReservedCgroup (--system-reserved-cgroup) must be specified when \"system-reserved\" included in enforceNodeAllocatable",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "kube-reserved",
                "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \"kube-reserved\" included in enforceNodeAllocatable",
            ),
            (
                &["--cgroups-per-qos=false"],
                "enforce-node-allocatable",
                "pods",
                "cgroupsPerQOS (--cgroups-per-qos) must be set to true when \"pods\" contained in enforceNodeAllocatable",
            ),
        ] {
            let arg = format!("--{flag}={value}");
            let mut all: Vec<&str> = args.to_vec();
            all.push(&arg);
            assert_eq!(
                one_problem(&all),
                format!("invalid value {value:?} for --{flag}: {reason}"),
                "{all:?}"
            );
        }
        // cgroupsPerQOS off with the default enforcement is kubelet's error too.
        assert_eq!(
            one_problem(&["--cgroups-per-qos=false"]),
            "default value \"pods\" of --enforce-node-allocatable: cgroupsPerQOS (--cgroups-per-qos) \
             must be set to true when \"pods\" contained in enforceNodeAllocatable"
        );
        // A soft threshold without its grace period names the threshold the user wrote,
        // not the grace period's (empty) default.
        let why = "grace period must be specified for the soft eviction threshold memory.available \
                   (set --eviction-soft-grace-period or evictionSoftGracePeriod)";
        assert_eq!(
            one_problem(&["--eviction-soft=memory.available<1Gi"]),
            format!("invalid value \"memory.available<1Gi\" for --eviction-soft: {why}")
        );
        let f = config("evictionSoft:\n  memory.available: 1Gi\n");
        let p = one_problem(&[&config_flag(&f)]);
        assert!(
            p.starts_with(&format!("{}: field evictionSoft: ", f.path().display()))
                && p.ends_with(why),
            "{p}"
        );
        // The file's grace period covers the file's threshold, not the flag's: the flag
        // is named.
        let f = config(
            "evictionSoft:\n  memory.available: 1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n",
        );
        let p = one_problem(&[&config_flag(&f), "--eviction-soft=nodefs.available<1Gi"]);
        assert!(
            p.starts_with("invalid value \"nodefs.available<1Gi\" for --eviction-soft: "),
            "{p}"
        );
    }

    #[test]
    fn max_open_files_from_file_and_flag() {
        let f = config("maxOpenFiles: 4096\n");
        assert_eq!(ok(&[&config_flag(&f)]).max_open_files, 4096);
        assert_eq!(
            ok(&[&config_flag(&f), "--max-open-files=70000"]).max_open_files,
            70000
        );
    }

    #[test]
    fn container_log_settings_from_defaults_file_and_flags() {
        let o = ok(&[]);
        assert_eq!(o.container_log_max_size, 10 << 20);
        assert_eq!(o.container_log_max_files, 5);
        assert_eq!(o.container_log_max_workers, 1);
        assert_eq!(o.container_log_monitor_interval, Duration::from_secs(10));
        assert_eq!(
            o.container_log_symlink_dir,
            PathBuf::from("/var/log/containers")
        );
        let f = config(
            "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMaxWorkers: 2\n\
             containerLogMonitorInterval: 3s\n",
        );
        let o = ok(&[&config_flag(&f), "--container-log-symlink-dir=/tmp/links"]);
        assert_eq!(o.container_log_max_size, 1 << 20);
        assert_eq!(o.container_log_max_files, 3);
        assert_eq!(o.container_log_max_workers, 2);
        assert_eq!(o.container_log_monitor_interval, Duration::from_secs(3));
        assert_eq!(o.container_log_symlink_dir, PathBuf::from("/tmp/links"));
        assert!(
            !o.unimplemented.iter().any(|u| u.contains("containerLog")),
            "{:?}",
            o.unimplemented
        );
        assert_eq!(
            ok(&["--container-log-max-size=-1"]).container_log_max_size,
            -1
        );
        for (flag, value, reason) in [
            ("container-log-max-files", "1", "must be greater than 1"),
            (
                "container-log-max-workers",
                "0",
                "must be greater than or equal to 1",
            ),
            (
                "container-log-monitor-interval",
                "2s",
                "must be a positive time duration greater than or equal to 3s",
            ),
            (
                "container-log-symlink-dir",
                "links",
                "must be an absolute path",
            ),
        ] {
            let arg = format!("--{flag}={value}");
            assert_eq!(
                one_problem(&[&arg]),
                format!("invalid value {value:?} for --{flag}: {reason}")
            );
        }
        assert!(one_problem(&["--container-log-max-size=ten"]).contains("is not a quantity"));
    }

    /// The manifest URL settings, as kubelet's flags and config fields.
    #[test]
    fn manifest_url_settings() {
        let d = ok(&[]);
        assert_eq!(d.manifest_url, None);
        assert!(d.manifest_url_header.is_empty());
        assert_eq!(d.http_check_frequency, Duration::from_secs(20));
        // kubelet's own example: repeated flags and keys add values.
        let o = ok(&[
            "--manifest-url=http://127.0.0.1:8080/pods",
            "--manifest-url-header",
            "a:hello,b:again,c:world",
            "--manifest-url-header",
            "b:beautiful",
            "--http-check-frequency=5s",
        ]);
        assert_eq!(
            o.manifest_url.as_deref(),
            Some("http://127.0.0.1:8080/pods")
        );
        let h = |k: &str| o.manifest_url_header[k].clone();
        assert_eq!(h("a"), ["hello"]);
        assert_eq!(h("b"), ["again", "beautiful"]);
        assert_eq!(h("c"), ["world"]);
        assert_eq!(o.http_check_frequency, Duration::from_secs(5));
        assert!(o.unimplemented.is_empty(), "{:?}", o.unimplemented);

        let f = config(
            "staticPodURL: https://example.com/pods\n\
             staticPodURLHeader:\n  Authorization: [\"Bearer x:y\"]\n  X-A: [\"1\", \"2\"]\n\
             httpCheckFrequency: 1m\n",
        );
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(o.manifest_url.as_deref(), Some("https://example.com/pods"));
        assert_eq!(o.manifest_url_header["Authorization"], ["Bearer x:y"]);
        assert_eq!(o.manifest_url_header["X-A"], ["1", "2"]);
        assert_eq!(o.http_check_frequency, Duration::from_secs(60));
        assert!(o.unimplemented.is_empty(), "{:?}", o.unimplemented);

        assert!(one_problem(&["--manifest-url=ftp://x/pods"]).contains("http:// or https://"));
        assert!(one_problem(&["--manifest-url-header=novalue"]).contains("malformed pair"));
        assert!(one_problem(&["--manifest-url-header=bad name:v"]).contains("header name"));
        assert!(one_problem(&["--http-check-frequency=0s"]).contains("greater than 0"));
        let f = config("staticPodURLHeader:\n  a: b\n");
        assert!(one_problem(&[&config_flag(&f)]).contains("map of lists of strings"));
    }

    /// kubelet's image GC policy checks, each naming the setting.
    #[test]
    fn image_gc_policy_is_validated_as_kubelet() {
        let o = ok(&[]);
        assert_eq!(o.image_gc, crate::images::Policy::default());
        let o = ok(&[
            "--image-gc-high-threshold=100",
            "--image-gc-low-threshold=0",
            "--minimum-image-ttl-duration=0s",
        ]);
        assert_eq!((o.image_gc.high_percent, o.image_gc.low_percent), (100, 0));
        assert!(o.image_gc.min_age.is_zero() && !o.image_gc.periodic_gc_enabled());
        assert_eq!(
            one_problem(&["--image-gc-high-threshold=101"]),
            "invalid value \"101\" for --image-gc-high-threshold: must be between 0 and 100"
        );
        assert_eq!(
            one_problem(&["--image-gc-low-threshold=-1"]),
            "invalid value \"-1\" for --image-gc-low-threshold: must be between 0 and 100"
        );
        // Low must stay below high, the default low (80) included.
        assert!(one_problem(&["--image-gc-high-threshold=80"]).ends_with(
            "must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) 80"
        ),);
        assert!(
            one_problem(&["--minimum-image-ttl-duration=-1s"]).contains("must not be negative")
        );
        let f = config("imageMinimumGCAge: 5m\nimageMaximumGCAge: 5m\n");
        let p = one_problem(&[&config_flag(&f)]);
        assert!(
            p.contains("imageMaximumGCAge")
                && p.ends_with("must be greater than imageMinimumGCAge 5m0s"),
            "{p}"
        );
        let f = config(
            "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 70\nimageMaximumGCAge: 1h\n",
        );
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(
            o.image_gc,
            crate::images::Policy {
                high_percent: 90,
                low_percent: 70,
                min_age: Duration::from_secs(120),
                max_age: Duration::from_secs(3600),
            }
        );
    }

    #[test]
    fn shutdown_grace_periods_are_checked_as_kubelets() {
        let f = config("shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n");
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(
            o.shutdown_groups(),
            [
                crate::nodeshutdown::PriorityGrace {
                    priority: 0,
                    seconds: 20
                },
                crate::nodeshutdown::PriorityGrace {
                    priority: 2_000_000_000,
                    seconds: 10
                }
            ]
        );
        assert!(ok(&[]).shutdown_groups().is_empty());
        let f = config(
            "shutdownGracePeriodByPodPriority:\n- {priority: 100000, shutdownGracePeriodSeconds: 5}\n\
             - {priority: 0, shutdownGracePeriodSeconds: 20}\n",
        );
        let o = ok(&[&config_flag(&f)]);
        let groups: Vec<(i32, i64)> = o
            .shutdown_groups()
            .iter()
            .map(|g| (g.priority, g.seconds))
            .collect();
        assert_eq!(groups, [(0, 20), (100_000, 5)]);
        for (body, field, reason) in [
            (
                "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s\n",
                "shutdownGracePeriodCriticalPods",
                "must be <= shutdownGracePeriod 10s",
            ),
            (
                "shutdownGracePeriod: 500ms\n",
                "shutdownGracePeriod",
                "must be either zero or otherwise >= 1 sec",
            ),
            (
                "shutdownGracePeriod: 30s\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}]\n",
                "shutdownGracePeriodByPodPriority",
                "cannot be given with shutdownGracePeriod or shutdownGracePeriodCriticalPods at the same time",
            ),
            (
                "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: -5}]\n",
                "shutdownGracePeriodByPodPriority",
                "must be a whole number of seconds, not negative",
            ),
            (
                "shutdownGracePeriodByPodPriority: [{priority: 0, seconds: 5}]\n",
                "shutdownGracePeriodByPodPriority",
                "unknown field \"seconds\" in an entry",
            ),
        ] {
            let f = config(body);
            let p = one_problem(&[&config_flag(&f)]);
            assert!(p.contains(field) && p.ends_with(reason), "{body}: {p}");
        }
    }
}

//! The one table of oxlet's settings. Each row declares a setting once: its
//! flag, its KubeletConfiguration field, its default, how its text parses and
//! what is allowed, and where it lands in `Options`. The command line, the
//! config file decoder and the merge all read this table, so adding a setting is
//! adding a row.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use super::Options;
use super::resource_managers as rm;
use super::serving;
use crate::cm::{CgroupDriver, CgroupName, Enforced, NodeAllocatableEnforcement, Reserved};
use crate::contracts::{DEFAULT_EVICTION_HARD, Thresholds};
use crate::duration::{GoDuration, parse_go_duration};

/// How a setting's text is written and parsed: the flag's text goes through
/// [`Kind::parse`], and the config file must hold the matching YAML type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Any string.
    Text,
    /// A path that, written relative in the config file, is relative to the file
    /// (kubelet's `KubeletConfigurationPathRefs`).
    Path,
    /// An integer (a YAML number in the config file).
    Int,
    /// A Go duration such as `20s` (a YAML string in the config file).
    Duration,
    /// A pflag boolean: `--x` or `--x=false` (a YAML boolean in the config file).
    Bool,
    /// A map of strings: `k=v,k2=v2` on the command line, with this separator
    /// (`=`, or `<` for eviction thresholds); a YAML map of strings in the config
    /// file, which is turned into the same text so one check serves both.
    Map(char),
    /// A list of strings: `a,b` on the command line, a YAML list in the file.
    List,
    /// Feature gates: `Gate=true,Other=false` on the command line, a YAML map of
    /// booleans in the file (kubelet's `map[string]bool`).
    Gates,
    /// A map of string lists (pflag's `ColonSeparatedMultimapStringString`):
    /// `k:v,k:v2` on the command line, where a repeated flag adds to the earlier
    /// ones; a YAML map of lists of strings in the file, turned into the same text.
    Multimap,
    /// `shutdownGracePeriodByPodPriority` (config file only): a YAML list of
    /// `{priority, shutdownGracePeriodSeconds}`, held as the text `priority=seconds,...`.
    GraceByPriority,
    /// `reservedMemory`: `N:memory=1Gi,hugepages-2Mi=4Mi` entries split by `;`, a
    /// repeated flag adding entries; the config file's list of `{numaNode, limits}`.
    ReservedMemory,
}

impl Kind {
    /// Whether `text` is a well-formed value of this kind; the reason if not.
    pub(crate) fn parse(self, text: &str) -> Result<(), InvalidValue> {
        match self {
            Kind::Text | Kind::Path => Ok(()),
            Kind::Int => parse_int(text).map(drop),
            Kind::Duration => parse_duration(text).map(drop),
            Kind::Bool => parse_bool(text).map(drop),
            Kind::Map(sep) => map_pairs(text, sep).map(drop),
            Kind::List => Ok(()),
            Kind::Multimap => multimap(text).map(drop),
            Kind::Gates => feature_gates(text).map(drop),
            Kind::GraceByPriority => grace_by_priority(text).map(drop),
            Kind::ReservedMemory => super::resource_managers::reserved_memory(text).map(drop),
        }
    }
}

/// The gates of `--feature-gates` / `featureGates`, each `true` or `false`.
pub(crate) fn feature_gates(text: &str) -> Result<BTreeMap<String, bool>, InvalidValue> {
    map_pairs(text, '=')?
        .into_iter()
        .map(|(k, v)| {
            let on = parse_bool(v)
                .map_err(|_| InvalidValue(format!("{k}: {v:?} is not true or false")))?;
            Ok((k.to_string(), on))
        })
        .collect()
}

pub(super) use crate::flag_text::{InvalidValue, list_items, map_pairs, multimap};

/// The entries of `shutdownGracePeriodByPodPriority` from their text
/// (`priority=seconds,...`); a budget may not be negative.
pub(crate) fn grace_by_priority(
    text: &str,
) -> Result<Vec<crate::nodeshutdown::PriorityGrace>, InvalidValue> {
    list_items(text)
        .iter()
        .map(|item| {
            let (p, s) = item
                .split_once('=')
                .ok_or_else(|| InvalidValue(format!("{item:?} is not priority=seconds")))?;
            let priority = p
                .parse::<i32>()
                .map_err(|_| InvalidValue(format!("priority {p:?} is not a 32-bit integer")))?;
            let seconds = s
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| {
                    InvalidValue(format!(
                        "shutdownGracePeriodSeconds {s:?} of priority {priority} must be a whole number of seconds, not negative"
                    ))
                })?;
            Ok(crate::nodeshutdown::PriorityGrace { priority, seconds })
        })
        .collect()
}

/// A value on its way into `Options`: its text, and whether the user gave it
/// (flag or config file) rather than it being the default.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Input<'a> {
    pub text: &'a str,
    pub explicit: bool,
}

/// One setting (see the module doc).
#[derive(Debug)]
pub(crate) struct Setting {
    /// The kubelet flag, without `--`; empty when kubelet has only the config field.
    pub flag: &'static str,
    /// A one-letter alias (`-v`).
    pub short: Option<char>,
    /// The KubeletConfiguration field, if kubelet has one.
    pub field: Option<&'static str>,
    pub kind: Kind,
    /// The default as text; "" means unset. Shown in `--help`.
    pub default: &'static str,
    /// The default when a config file is given, where KubeletConfiguration's
    /// default differs from the flag's.
    pub config_default: Option<&'static str>,
    /// The placeholder in `--help`.
    pub value_name: &'static str,
    pub help: &'static str,
    /// Parses the text, checks it (the reason if not allowed) and stores it.
    pub set: fn(&mut Options, Input) -> Result<(), InvalidValue>,
}

impl Setting {
    /// False for a config-file-only setting (an empty `flag`: kubelet has no flag).
    pub(crate) fn has_flag(&self) -> bool {
        !self.flag.is_empty()
    }

    /// The default that applies, given whether a config file is in use.
    pub(crate) fn default_for(&self, with_config_file: bool) -> &'static str {
        match self.config_default {
            Some(d) if with_config_file => d,
            _ => self.default,
        }
    }
}

/// The default CRI endpoint (containerd's).
pub(crate) const DEFAULT_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";

/// The smallest `maxOpenFiles` accepted: a limit below what stdio and a runtime
/// socket need would break oxlet itself (kubelet only defaults 0).
pub(crate) const MIN_OPEN_FILES: u64 = 256;

use Kind::{
    Bool, Duration, Gates, GraceByPriority, Int, List, Map, Multimap, Path, ReservedMemory, Text,
};

/// Every setting, in `--help` order (problems are reported in this order too):
/// flag, config field, kind (the parser), default, `--help` placeholder and text,
/// and `set` (the check, storing into `Options`). One row per line, so the table
/// reads as one.
#[rustfmt::skip]
pub(crate) static SETTINGS: &[Setting] = &[
    row("pod-manifest-path", Some("staticPodPath"), Path, "", "PATH", "Directory of static pod manifests (empty: file source off)", |o, i| { o.static_pod_path = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("container-runtime-endpoint", Some("containerRuntimeEndpoint"), Text, DEFAULT_RUNTIME_ENDPOINT, "URL", "CRI endpoint (unix:// socket)", set_endpoint),
    row("containerd-binary", None, Path, "", "PATH", "The containerd a managed runtime runs; its release decides its config format (empty: containerd in PATH)", |o, i| { o.containerd_binary = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("pod-cidr", Some("podCIDR"), Text, "", "CIDR", "The pods' addresses: handed to the runtime at start, and a managed containerd's CNI subnet (empty: 10.88.0.0/16); the Node's spec.podCIDRs replace it", set_pod_cidr),
    row("managed-cni-bridge", None, Text, "oxlet0", "NAME", "The Linux bridge a managed containerd's pods attach to", set_managed_cni_bridge),
    row("runtime-cgroups", None, Text, "", "CGROUP", "The container runtime's cgroup, reported as the Summary API's runtime system container (empty: none)", |o, i| { o.runtime_cgroups = Some(i.text.to_string()).filter(|c| !c.is_empty()); Ok(()) }),
    row("fail-swap-on", Some("failSwapOn"), Bool, "true", "true|false", "Refuse to start while swap is on", |o, i| parse_bool(i.text).map(|b| o.fail_swap_on = b)),
    row("", Some("memorySwap.swapBehavior"), Text, "", "NoSwap|LimitedSwap", "Swap for containers where the swap controller is: NoSwap (unset: memory.swap.max 0 for each), or LimitedSwap (cgroup v2 only: a Burstable container of a pod that is not critical, whose memory request differs from its limit, may swap its request's share of the node's swap); config file only", |o, i| crate::cm::SwapBehavior::parse(i.text).map(|b| o.memory.swap_behavior = b).map_err(|e| InvalidValue(e.to_string()))),
    row("", Some("singleProcessOOMKill"), Bool, "", "true|false", "On an OOM kill the kernel kills one process of the container, not all of them (unset: false on cgroup v2, where each container gets memory.oom.group=1; cgroup v1 always kills one and refuses false); config file only", |o, i| { o.memory.single_process_oom_kill = if i.text.is_empty() { None } else { Some(parse_bool(i.text)?) }; Ok(()) }),
    row("root-dir", None, Text, "/var/lib/oxlet", "PATH", "Directory for oxlet state", |o, i| non_empty(i.text).map(|p| o.root_dir = p)),
    row("image-credential-provider-config", None, Path, "", "PATH", "The CredentialProviderConfig file, or a directory of them, naming the credential provider plugins asked for registry logins (empty: none)", |o, i| { o.image_credential_provider_config = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("image-credential-provider-bin-dir", None, Path, "", "PATH", "The directory of the credential provider plugin binaries", |o, i| { o.image_credential_provider_bin_dir = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("lock-file", None, Path, "", "PATH", "A file to hold an exclusive lock on while running, waited for at start (besides the lock oxlet always takes on the root dir)", |o, i| { o.lock_file = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("exit-on-lock-contention", None, Bool, "false", "true|false", "Exit when another process opens --lock-file", |o, i| parse_bool(i.text).map(|b| o.exit_on_lock_contention = b)),
    row("pod-logs-dir", Some("podLogsDir"), Text, "/var/log/pods", "PATH", "Directory for container logs", |o, i| absolute(i.text).map(|p| o.pod_logs_dir = p)),
    row("hostname-override", None, Text, "", "NAME", "Node name to use instead of the host name", set_node_name),
    row("address", Some("address"), Text, "0.0.0.0", "IP", "IP address the read-only and secure ports listen on", |o, i| ip(i.text).map(|a| o.address = a)),
    // The secure port (kubelet's API with TLS, authentication and authorization).
    row("enable-server", Some("enableServer"), Bool, "true", "true|false", "Serve the secure port", |o, i| parse_bool(i.text).map(|b| o.serving.enable = b)),
    row("port", Some("port"), Int, "10250", "PORT", "Secure API port (0 disables)", |o, i| port(i.text).map(|p| o.serving.port = p)),
    row("tls-cert-file", Some("tlsCertFile"), Path, "", "PATH", "Serving certificate of the secure port, CA certificates after it (empty: a self-signed one in --cert-dir)", |o, i| { o.serving.tls_cert_file = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("tls-private-key-file", Some("tlsPrivateKeyFile"), Path, "", "PATH", "Key of --tls-cert-file", |o, i| { o.serving.tls_private_key_file = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("rotate-server-certificates", Some("serverTLSBootstrap"), Bool, "false", "true|false", "Request the serving certificate from the apiserver (signer kubernetes.io/kubelet-serving, the node's addresses as names) and rotate it, instead of a self-signed one", |o, i| parse_bool(i.text).map(|b| o.serving.server_tls_bootstrap = b)),
    row("tls-min-version", Some("tlsMinVersion"), Text, "", "VersionTLS12|VersionTLS13", "Lowest TLS version the secure port accepts (empty: TLS 1.2)", |o, i| serving::tls_version(i.text).map(|v| o.serving.tls_min_version = v)),
    row("tls-cipher-suites", Some("tlsCipherSuites"), List, "", "NAME,...", "TLS cipher suites the secure port offers, Go's names (empty: the defaults)", |o, i| serving::cipher_suites(&list_items(i.text)).map(|v| o.serving.tls_cipher_suites = v)),
    row("client-ca-file", Some("authentication.x509.clientCAFile"), Path, "", "PATH", "CA bundle client certificates are verified against; a verified certificate's CN is the user, its O values the groups", |o, i| { o.serving.client_ca_file = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("anonymous-auth", Some("authentication.anonymous.enabled"), Bool, "true", "true|false", "Requests with no credentials are served as system:anonymous (group system:unauthenticated), not refused with 401", |o, i| parse_bool(i.text).map(|b| o.serving.anonymous = b)).config_default("false"),
    row("authentication-token-webhook", Some("authentication.webhook.enabled"), Bool, "false", "true|false", "Check bearer tokens with a TokenReview to the apiserver", |o, i| parse_bool(i.text).map(|b| o.serving.token_webhook = b)).config_default("true"),
    row("authentication-token-webhook-cache-ttl", Some("authentication.webhook.cacheTTL"), Duration, "2m0s", "DURATION", "How long a TokenReview's answer is kept", |o, i| non_negative_duration(i.text).map(|d| o.serving.token_webhook_cache_ttl = d)),
    row("authorization-mode", Some("authorization.mode"), Text, "AlwaysAllow", "AlwaysAllow|Webhook", "How requests to the secure port are authorized (Webhook: a SubjectAccessReview to the apiserver)", |o, i| serving::authorization_mode(i.text).map(|m| o.serving.authorization_mode = m)).config_default("Webhook"),
    row("authorization-webhook-cache-authorized-ttl", Some("authorization.webhook.cacheAuthorizedTTL"), Duration, "5m0s", "DURATION", "How long an allowing SubjectAccessReview is kept", |o, i| non_negative_duration(i.text).map(|d| o.serving.authorized_ttl = d)),
    row("authorization-webhook-cache-unauthorized-ttl", Some("authorization.webhook.cacheUnauthorizedTTL"), Duration, "30s", "DURATION", "How long a denying SubjectAccessReview is kept", |o, i| non_negative_duration(i.text).map(|d| o.serving.unauthorized_ttl = d)),
    // kubelet's switches for the debugging endpoints (kubelet's NewServer).
    row("enable-debugging-handlers", Some("enableDebuggingHandlers"), Bool, "true", "true|false", "Serve exec, attach, port-forward, run, /containerLogs, /logs/, /runningpods/, /configz, /debug/flags/v and /checkpoint on the secure port (false: the first seven answer 405 \"Debug endpoints are disabled.\", the others 404)", |o, i| parse_bool(i.text).map(|b| o.handlers.debugging = b)),
    row("", Some("enableSystemLogHandler"), Bool, "true", "true|false", "Serve the node's /var/log at /logs/ (false: 405 \"logs endpoint is disabled.\"); only with enableDebuggingHandlers; config file only", |o, i| parse_bool(i.text).map(|b| o.handlers.system_log = b)),
    row("", Some("enableSystemLogQuery"), Bool, "false", "true|false", "With the NodeLogQuery feature gate on too, /logs/?query=SERVICE|FILE answers from the journal (journalctl) or a file below /var/log, as kubelet's node log query; config file only", |o, i| parse_bool(i.text).map(|b| o.system_log_query = b)),
    row("", Some("enableProfilingHandler"), Bool, "true", "true|false", "kubelet's /debug/pprof/: oxlet serves the CPU profile (profile?seconds=N, pprof's protobuf) and cmdline; false answers 405 \"profiling endpoint is disabled.\" as kubelet; only with enableDebuggingHandlers; config file only", |o, i| parse_bool(i.text).map(|b| o.handlers.profiling = b)),
    row("", Some("enableDebugFlagsHandler"), Bool, "true", "true|false", "Serve PUT /debug/flags/v, which changes -v (false: 405 \"flags endpoint is disabled.\"); only with enableDebuggingHandlers; config file only", |o, i| parse_bool(i.text).map(|b| o.handlers.debug_flags = b)),
    row("streaming-connection-idle-timeout", Some("streamingConnectionIdleTimeout"), Duration, "4h0m0s", "DURATION", "An exec, attach or port-forward stream or a followed log idle this long is closed", |o, i| positive_duration(i.text).map(|d| o.serving.streaming_idle_timeout = d)),
    row("read-only-port", Some("readOnlyPort"), Int, "10255", "PORT", "Read-only API port (0 disables; KubeletConfiguration default is 0)", |o, i| port(i.text).map(|p| o.read_only_port = p)).config_default("0"),
    row("healthz-bind-address", Some("healthzBindAddress"), Text, "127.0.0.1", "IP", "IP address the healthz server listens on", |o, i| ip(i.text).map(|a| o.healthz_bind_address = a)),
    row("healthz-port", Some("healthzPort"), Int, "10248", "PORT", "Healthz port (0 disables)", |o, i| port(i.text).map(|p| o.healthz_port = p)),
    row("file-check-frequency", Some("fileCheckFrequency"), Duration, "20s", "DURATION", "How often to re-read the static pod directory", |o, i| positive_duration(i.text).map(|d| o.file_check_frequency = d)),
    row("sync-frequency", Some("syncFrequency"), Duration, "1m0s", "DURATION", "Maximum period between syncs of running pods", |o, i| positive_duration(i.text).map(|d| o.sync_frequency = d)),
    row("runtime-request-timeout", Some("runtimeRequestTimeout"), Duration, "2m0s", "DURATION", "Timeout for CRI requests, except long-running ones", |o, i| positive_duration(i.text).map(|d| o.runtime_request_timeout = d)),
    row("serialize-image-pulls", Some("serializeImagePulls"), Bool, "true", "true|false", "Pull images one at a time", |o, i| parse_bool(i.text).map(|b| o.serialize_image_pulls = b)),
    row("", Some("maxParallelImagePulls"), Int, "", "N", "Most image pulls at once when not serialized (unset: no limit); config file only", set_max_parallel_image_pulls),
    row("", Some("imagePullCredentialsVerificationPolicy"), Text, crate::images::VerifyPolicy::DEFAULT, "POLICY", "Which present images a pod must prove its pull credentials for: NeverVerify, NeverVerifyPreloadedImages (those the agent pulled), NeverVerifyAllowlistedImages (all but the allowlist's) or AlwaysVerify; config file only", set_pull_verification),
    row("", Some("preloadedImagesVerificationAllowlist"), List, "", "IMAGE|PREFIX/*,...", "Repositories (no tag) exempt from the check under NeverVerifyAllowlistedImages; config file only", set_preloaded_allowlist),
    row("", Some("userNamespaces.idsPerPod"), Int, "", "N", "IDs each `hostUsers: false` pod gets, a multiple of 65536 (unset: 65536); the kubelet user's subordinate range, or the default one, must hold maxPods such blocks; config file only", set_userns_ids_per_pod),
    row("max-pods", Some("maxPods"), Int, "110", "N", "Maximum number of pods on this node", |o, i| max_pods(i.text).map(|n| o.max_pods = n)),
    row("max-open-files", Some("maxOpenFiles"), Int, "1000000", "N", "Number of files the oxlet process may open (RLIMIT_NOFILE)", |o, i| max_open_files(i.text).map(|n| o.max_open_files = n)),
    row("cgroup-driver", Some("cgroupDriver"), Text, "cgroupfs", "cgroupfs|systemd", "Cgroup driver; a driver the runtime reports wins over the default, and a contradicting explicit one is refused", set_cgroup_driver),
    row("cgroup-root", Some("cgroupRoot"), Text, "", "PATH", "Cgroup below which kubepods is created (empty: the root, /)", |o, i| cgroup_path(i.text).map(|n| o.cgroup_root = n.unwrap_or_default())),
    row("cgroups-per-qos", Some("cgroupsPerQOS"), Bool, "true", "true|false", "Create the QoS cgroups and a cgroup per pod", |o, i| parse_bool(i.text).map(|b| o.cgroups_per_qos = b)),
    row("pod-max-pids", Some("podPidsLimit"), Int, "-1", "N", "Most processes in one pod (-1: no limit)", |o, i| parse_int(i.text).map(|n| o.pod_pids_limit = n.max(-1))),
    row("cpu-cfs-quota", Some("cpuCFSQuota"), Bool, "true", "true|false", "Enforce CPU limits with a CFS quota", |o, i| parse_bool(i.text).map(|b| o.cpu_cfs_quota = b)),
    row("cpu-cfs-quota-period", Some("cpuCFSQuotaPeriod"), Duration, "100ms", "DURATION", "CFS quota period for CPU limits (1ms to 1s)", set_cfs_quota_period),
    row("protect-kernel-defaults", Some("protectKernelDefaults"), Bool, "false", "true|false", "Refuse to start when a kernel tunable differs from kubelet's value (vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10, kernel.panic_on_oops=1, kernel.keys.root_maxkeys=1000000, kernel.keys.root_maxbytes=25000000); false writes kubelet's values, as kubelet does", |o, i| parse_bool(i.text).map(|b| o.protect_kernel_defaults = b)),
    row("fail-cgroupv1", Some("failCgroupV1"), Bool, "true", "true|false", "Refuse to start on a cgroup v1 host (kubelet's default since 1.35)", |o, i| parse_bool(i.text).map(|b| o.fail_cgroup_v1 = b)),
    row("kube-reserved", Some("kubeReserved"), Map('='), "", "cpu=100m,memory=1Gi,ephemeral-storage=1Gi,pid=100", "Resources held back for Kubernetes daemons", |o, i| reserved(i.text).map(|r| o.kube_reserved = r)),
    row("system-reserved", Some("systemReserved"), Map('='), "", "cpu=100m,memory=1Gi,ephemeral-storage=1Gi,pid=100", "Resources held back for the operating system", |o, i| reserved(i.text).map(|r| o.system_reserved = r)),
    row("kube-reserved-cgroup", Some("kubeReservedCgroup"), Text, "", "NAME", "Cgroup of the Kubernetes daemons, for enforcing kube-reserved", |o, i| cgroup_path(i.text).map(|n| o.kube_reserved_cgroup = n)),
    row("system-reserved-cgroup", Some("systemReservedCgroup"), Text, "", "NAME", "Cgroup of the system daemons, for enforcing system-reserved", |o, i| cgroup_path(i.text).map(|n| o.system_reserved_cgroup = n)),
    row("eviction-hard", Some("evictionHard"), Map('<'), DEFAULT_EVICTION_HARD, "SIGNAL<VALUE,...", "Hard eviction thresholds; a given set replaces the defaults (0% or 100% disables one)", set_eviction_hard),
    // After cgroups-per-qos and the reserved cgroups: its check reads their final values.
    row("enforce-node-allocatable", Some("enforceNodeAllocatable"), List, "pods", "pods,system-reserved,kube-reserved|none", "Which reservations to enforce with cgroup limits", set_enforce_node_allocatable),
    // The resource managers (kubelet's CPU, memory and topology managers).
    row("cpu-manager-policy", Some("cpuManagerPolicy"), Text, "none", "none|static", "The CPU manager's policy: static gives Guaranteed containers with whole CPUs exclusive CPUs", |o, i| rm::cpu_policy(i.text).map(|p| o.resource_managers.cpu_policy = p)),
    row("cpu-manager-policy-options", Some("cpuManagerPolicyOptions"), Map('='), "", "full-pcpus-only=true,...", "The static policy's options (GA and beta ones)", |o, i| map_pairs(i.text, '=').map(|m| o.resource_managers.cpu_policy_options = m.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())),
    row("cpu-manager-reconcile-period", Some("cpuManagerReconcilePeriod"), Duration, "10s", "DURATION", "How often every container's cpuset is made what the CPU manager says", |o, i| positive_duration(i.text).map(|d| o.resource_managers.cpu_reconcile_period = d)),
    row("reserved-cpus", Some("reservedSystemCPUs"), Text, "", "CPU-LIST", "CPUs kept for the system and Kubernetes daemons (e.g. 0-1); overrides the CPU of kube-reserved and system-reserved", |o, i| rm::reserved_cpus(i.text).map(|c| o.resource_managers.reserved_cpus = c)),
    row("memory-manager-policy", Some("memoryManagerPolicy"), Text, "None", "None|Static", "The memory manager's policy: Static pins Guaranteed pods' memory to NUMA nodes", |o, i| rm::memory_policy(i.text).map(|p| o.resource_managers.memory_policy = p)),
    row("reserved-memory", Some("reservedMemory"), ReservedMemory, "", "N:memory=1Gi,...;...", "Memory reserved per NUMA node for the Static memory policy; repeat the flag for more nodes", |o, i| rm::reserved_memory(i.text).map(|r| o.resource_managers.reserved_memory = r)),
    row("topology-manager-policy", Some("topologyManagerPolicy"), Text, "none", "none|best-effort|restricted|single-numa-node", "How the topology manager aligns CPUs, memory and devices on NUMA nodes", |o, i| rm::topology_policy(i.text).map(|p| o.resource_managers.topology_policy = p)),
    row("topology-manager-scope", Some("topologyManagerScope"), Text, "container", "container|pod", "Whether the topology manager aligns each container or the whole pod", |o, i| rm::topology_scope(i.text).map(|s| o.resource_managers.topology_scope = s)),
    row("topology-manager-policy-options", Some("topologyManagerPolicyOptions"), Map('='), "", "prefer-closest-numa-nodes=true,...", "The topology manager's options (GA and beta ones)", |o, i| map_pairs(i.text, '=').map(|m| o.resource_managers.topology_policy_options = m.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())),
    row("v", None, Int, "0", "LEVEL", "Log verbosity (klog level)", |o, i| int_within(i.text, 0, 255).map(|v| o.verbosity = v)).short('v'),
    row("logging-format", Some("logging.format"), Text, "text", "text|json", "Log format: text (klog's lines) or json (one JSON object a line)", |o, i| crate::logging::LogFormat::parse(i.text).map(|f| o.logging_format = f).ok_or_else(|| UNSUPPORTED_LOG_FORMAT.into())),
    row("runonce", None, Bool, "false", "true|false", "Start the static pods once, wait for them, then exit", |o, i| parse_bool(i.text).map(|b| o.runonce = b)),
    row("task-cpu-accounting", None, Bool, "false", "true|false", "Charge each task's CPU time to its name, shown on /debug/tasks (oxlet only; two clock reads per poll)", |o, i| parse_bool(i.text).map(|b| o.task_cpu_accounting = b)),
    // Container log rotation (kubelet's container log manager) and the legacy log symlinks.
    row("container-log-max-size", Some("containerLogMaxSize"), Text, "10Mi", "QUANTITY", "Size a container's log file reaches before it is rotated (negative: no rotation)", |o, i| log_max_size(i.text).map(|n| o.container_log_max_size = n)),
    row("container-log-max-files", Some("containerLogMaxFiles"), Int, "5", "N", "Most log files kept per container, the current one included (at least 2)", |o, i| Some(parse_int(i.text)?).filter(|n| *n > 1).and_then(|n| usize::try_from(n).ok()).map(|n| o.container_log_max_files = n).ok_or_else(|| "must be greater than 1".into())),
    row("container-log-max-workers", Some("containerLogMaxWorkers"), Int, "1", "N", "Containers whose logs are rotated at once", |o, i| Some(parse_int(i.text)?).filter(|n| *n >= 1).and_then(|n| usize::try_from(n).ok()).map(|n| o.container_log_max_workers = n).ok_or_else(|| "must be greater than or equal to 1".into())),
    row("container-log-monitor-interval", Some("containerLogMonitorInterval"), Duration, "10s", "DURATION", "How often container log sizes are checked for rotation (at least 3s)", |o, i| parse_duration(i.text)?.to_std().filter(|d| d.as_secs() >= 3).map(|d| o.container_log_monitor_interval = d).ok_or_else(|| "must be a positive time duration greater than or equal to 3s".into())),
    row("container-log-symlink-dir", None, Text, "/var/log/containers", "PATH", "Directory of the legacy <pod>_<namespace>_<container>-<id>.log symlinks to container logs (oxlet only: kubelet hardcodes /var/log/containers)", |o, i| absolute(i.text).map(|p| o.container_log_symlink_dir = p)),
    // Security context.
    row("seccomp-default", Some("seccompDefault"), Bool, "false", "true|false", "Run containers that ask for no seccomp profile with RuntimeDefault", |o, i| parse_bool(i.text).map(|b| o.seccomp_default = b)),
    // Sysctls, DNS, /etc/hosts.
    row("allowed-unsafe-sysctls", Some("allowedUnsafeSysctls"), List, "", "NAME|PATTERN,...", "Unsafe sysctls or patterns (ending in *) pods may set, beyond the safe ones", set_allowed_unsafe_sysctls),
    row("cluster-dns", Some("clusterDNS"), List, "", "IP,...", "DNS server IPs for pods with dnsPolicy ClusterFirst", set_cluster_dns),
    row("cluster-domain", Some("clusterDomain"), Text, "", "DOMAIN", "Cluster domain, searched by ClusterFirst pods and used in /etc/hosts", |o, i| { o.cluster_domain = i.text.trim_end_matches('.').to_string(); Ok(()) }),
    row("resolv-conf", Some("resolvConf"), Path, "/etc/resolv.conf", "PATH", "Resolver configuration the pods' DNS is based on (empty: no host DNS)", |o, i| { o.resolv_conf = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    // HTTP source: the manifest URL.
    row("manifest-url", Some("staticPodURL"), Text, "", "URL", "URL of static pods (one Pod or a PodList), polled every http-check-frequency (empty: HTTP source off)", set_manifest_url),
    row("manifest-url-header", Some("staticPodURLHeader"), Multimap, "", "KEY:VALUE,...", "Headers sent with the manifest URL request; repeat the flag or the key for more values", set_manifest_url_header),
    row("http-check-frequency", Some("httpCheckFrequency"), Duration, "20s", "DURATION", "How often the manifest URL is polled", |o, i| positive_duration(i.text).map(|d| o.http_check_frequency = d)),
    // The apiserver clients (kubelet's buildKubeletClientConfig).
    row("kubeconfig", None, Path, "", "PATH", "kubeconfig of the apiserver to talk to (empty: standalone, no apiserver)", |o, i| { o.kubeconfig = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("kube-api-qps", Some("kubeAPIQPS"), Int, "50", "QPS", "Requests per second to the apiserver (0: client-go's default of 5)", |o, i| non_negative_i32(i.text).map(|n| o.kube_api_qps = n)),
    row("kube-api-burst", Some("kubeAPIBurst"), Int, "100", "N", "Requests to the apiserver allowed in a burst", |o, i| non_negative_i32(i.text).map(|n| o.kube_api_burst = n)),
    row("node-status-update-frequency", Some("nodeStatusUpdateFrequency"), Duration, "10s", "DURATION", "How often node status is computed; also the heartbeat client's timeout (at most the lease duration)", |o, i| positive_duration(i.text).map(|d| o.node_status_update_frequency = d)),
    row("", Some("nodeLeaseDurationSeconds"), Int, "40", "SECONDS", "Duration of the node lease; caps the heartbeat client's timeout; config file only", |o, i| Some(parse_int(i.text)?).filter(|n| (1..=i64::from(i32::MAX)).contains(n)).and_then(|n| u64::try_from(n).ok()).map(|n| o.node_lease_duration = std::time::Duration::from_secs(n)).ok_or_else(|| "must be greater than 0".into())),
    // Cluster mode: node registration, node status and the lease.
    row("provider-id", Some("providerID"), Text, "", "ID", "The Node's spec.providerID, set when the node registers (kind: kind://docker/<cluster>/<node>)", |o, i| { o.provider_id = i.text.to_string(); Ok(()) }),
    row("node-ip", None, Text, "", "IP[,IP]", "The node's InternalIP, or a dual-stack pair (one per family, the first primary); empty: the host's first global IPv4 address, else its IPv6 one; '::' prefers IPv6", |o, i| node_ips(i.text).map(|ips| o.node_ips = ips)),
    row("node-labels", None, Map('='), "", "KEY=VALUE,...", "Labels the Node is registered with; kubernetes.io and k8s.io labels only from kubelet's allowed set", |o, i| crate::status::node_labels(i.text).map(|l| o.node_labels = l)),
    row("register-with-taints", None, List, "", "KEY=VALUE:EFFECT,...", "Taints the Node is registered with", |o, i| crate::status::node_taints(i.text).map(|t| o.register_with_taints = t)),
    row("feature-gates", Some("featureGates"), Gates, "", "GATE=true|false,...", "Feature gates. oxlet reads EventedPLEG (on unless set false: the evented PLEG runs where the runtime streams container events) and NodeLogQuery (off unless set true, as kubelet's: with enableSystemLogQuery, /logs/?query= reads the journal); any other gate is reported as not implemented", |o, i| feature_gates(i.text).map(|g| o.feature_gates = g)),
    row("register-node", Some("registerNode"), Bool, "true", "true|false", "Create the Node object in the apiserver (false: only update an existing one)", |o, i| parse_bool(i.text).map(|b| o.register_node = b)),
    row("", Some("nodeStatusReportFrequency"), Duration, "5m0s", "DURATION", "How often an unchanged node status is still sent; config file only", |o, i| positive_duration(i.text).map(|d| o.node_status_report_frequency = d)),
    // Events: the event writer's own token bucket (kubelet's event client).
    row("event-qps", Some("eventRecordQPS"), Int, "50", "QPS", "Events written to the apiserver per second (0: client-go's default of 5)", |o, i| non_negative_i32(i.text).map(|n| o.event_record_qps = n)),
    row("event-burst", Some("eventBurst"), Int, "100", "N", "Events written to the apiserver in a burst", |o, i| non_negative_i32(i.text).map(|n| o.event_burst = n)),
    // The client certificate bootstrap (kubelet's LoadClientCert).
    row("bootstrap-kubeconfig", None, Path, "", "PATH", "kubeconfig used to request a client certificate when --kubeconfig is missing or its certificate has expired; --kubeconfig is then written", |o, i| { o.bootstrap_kubeconfig = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("cert-dir", None, Path, "", "PATH", "Directory of the client certificate pairs (empty: <root-dir>/pki)", |o, i| { o.cert_dir = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    // Client certificate rotation (client-go's certificate manager).
    row("rotate-certificates", Some("rotateCertificates"), Bool, "false", "true|false", "Request a new client certificate before the current one expires (for a kubeconfig naming <cert-dir>/kubelet-client-current.pem)", |o, i| parse_bool(i.text).map(|b| o.rotate_certificates = b)),
    // The node QoS manager and runtime hooks (koordlet's NodeSLO).
    row("node-slo-file", None, Path, "", "PATH", "koordlet NodeSLO spec file, plus strategies: cpuSuppress (default on), memoryEvict, cpuEvict, cpuUsageEvict, cgroupReconcile; read at start; in cluster mode the node's NodeSLO replaces its thresholds", set_node_slo_file),
    // koordlet's peak prediction (its flag for the directory).
    row("enable-prediction", None, Bool, "true", "true|false", "Train koordlet's peak prediction models from the metric cache and serve /stats/predictions", |o, i| parse_bool(i.text).map(|b| o.prediction = b)),
    row("prediction-checkpoint-filepath", None, Path, "", "PATH", "Directory of the prediction models' checkpoints (empty: <root-dir>/prediction-checkpoints)", |o, i| { o.prediction_checkpoint_dir = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    // koordlet's metric cache on disk (its flags).
    row("tsdb-path", None, Path, "", "PATH", "Directory of the metric cache's log and blocks (empty: <root-dir>/metric-cache)", |o, i| { o.tsdb_path = Some(PathBuf::from(i.text)).filter(|p| !p.as_os_str().is_empty()); Ok(()) }),
    row("tsdb-retention-duration", None, Duration, "12h0m0s", "DURATION", "How long the metric cache keeps points on disk", |o, i| positive_duration(i.text).map(|d| o.tsdb_retention = d)),
    row("tsdb-max-bytes", None, Int, "104857600", "BYTES", "The metric cache's size cap on disk; the oldest blocks go past it", |o, i| int_within(i.text, 1 << 20, i64::MAX).map(|n| o.tsdb_max_bytes = n)),
    row("enable-pagecache-collector", None, Bool, "false", "true|false", "Record node, pod and container memory with the page cache too (koordlet's pagecache collector)", |o, i| parse_bool(i.text).map(|b| o.pagecache_collector = b)),
    // Image garbage collection (kubelet's ImageGCPolicy); each row's check reads the rows above it.
    row("image-gc-high-threshold", Some("imageGCHighThresholdPercent"), Int, "85", "PERCENT", "Image filesystem usage at which unused images are removed (100 turns the periodic image GC off)", |o, i| int_within(i.text, 0, 100).map(|n| o.image_gc.high_percent = n)),
    row("image-gc-low-threshold", Some("imageGCLowThresholdPercent"), Int, "80", "PERCENT", "Image filesystem usage the image GC frees down to; less than the high threshold", set_image_gc_low),
    row("minimum-image-ttl-duration", Some("imageMinimumGCAge"), Duration, "2m0s", "DURATION", "Minimum age of an unused image before it is garbage-collected", |o, i| non_negative_duration(i.text).map(|d| o.image_gc.min_age = d)),
    row("volume-stats-agg-period", Some("volumeStatsAggPeriod"), Duration, "1m0s", "DURATION", "How often each pod's volumes and logs are measured for the stats and the local storage limits (0: never)", |o, i| non_negative_duration(i.text).map(|d| o.volume_stats_agg_period = d)),
    row("", Some("imageMaximumGCAge"), Duration, "", "DURATION", "Unused images older than this are removed whatever the usage (unset or 0s: off); more than imageMinimumGCAge; config file only", set_image_max_gc_age),
    // The eviction manager's settings beyond evictionHard; the soft thresholds after their grace periods (their check reads them).
    row("eviction-soft-grace-period", Some("evictionSoftGracePeriod"), Map('='), "", "SIGNAL=DURATION,...", "How long each soft threshold must hold before a pod is evicted", set_eviction_soft_grace),
    row("eviction-soft", Some("evictionSoft"), Map('<'), "", "SIGNAL<VALUE,...", "Soft eviction thresholds, acted on after their grace period", set_eviction_soft),
    row("eviction-minimum-reclaim", Some("evictionMinimumReclaim"), Map('='), "", "SIGNAL=VALUE,...", "How far above its threshold a signal must get back before the threshold counts as resolved", |o, i| crate::eviction::parse_min_reclaim(map_pairs(i.text, '=')?).map(|m| o.eviction_minimum_reclaim = m).map_err(|e| InvalidValue(e.to_string()))),
    row("eviction-pressure-transition-period", Some("evictionPressureTransitionPeriod"), Duration, "5m0s", "DURATION", "How long a pressure condition stays True after its threshold was last met", |o, i| parse_duration(i.text)?.to_std().map(|d| o.eviction_pressure_transition_period = d).ok_or_else(|| "must not be negative".into())),
    row("eviction-max-pod-grace-period", Some("evictionMaxPodGracePeriod"), Int, "0", "SECONDS", "Longest grace period given to a pod evicted for a soft threshold", |o, i| parse_int(i.text).map(|n| o.eviction_max_pod_grace_period = n)),
    // Graceful node shutdown (config file only, as in kubelet); each row's check reads the rows above it.
    row("", Some("shutdownGracePeriod"), Duration, "", "DURATION", "How long a node shutdown is delayed for the pods to stop (unset or 0s: graceful node shutdown off); config file only", |o, i| shutdown_period(i.text).map(|d| o.shutdown_grace_period = d)),
    row("", Some("shutdownGracePeriodCriticalPods"), Duration, "", "DURATION", "The part of shutdownGracePeriod kept for critical pods (priority 2000000000 and up), stopped after the others; config file only", set_shutdown_grace_critical),
    row("", Some("shutdownGracePeriodByPodPriority"), GraceByPriority, "", "PRIORITY=SECONDS,...", "Shutdown budgets by pod priority, instead of the two above; config file only", set_shutdown_by_priority),
];

/// kubelet's check of the shutdown periods: zero, or at least a second.
fn shutdown_period(text: &str) -> Result<std::time::Duration, InvalidValue> {
    if text.is_empty() {
        return Ok(std::time::Duration::ZERO);
    }
    parse_duration(text)?
        .to_std()
        .filter(|d| d.is_zero() || *d >= std::time::Duration::from_secs(1))
        .ok_or_else(|| "must be either zero or otherwise >= 1 sec".into())
}

/// kubelet's: no longer than `shutdownGracePeriod` (its row comes first).
fn set_shutdown_grace_critical(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let d = shutdown_period(i.text)?;
    if d > o.shutdown_grace_period {
        return Err(format!(
            "must be <= shutdownGracePeriod {}",
            crate::duration::format_go_duration(o.shutdown_grace_period)
        )
        .into());
    }
    o.shutdown_grace_period_critical_pods = d;
    Ok(())
}

/// kubelet's: not together with `shutdownGracePeriod` or
/// `shutdownGracePeriodCriticalPods` (their rows come first).
fn set_shutdown_by_priority(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let list = grace_by_priority(i.text)?;
    let periods_given =
        !o.shutdown_grace_period.is_zero() || !o.shutdown_grace_period_critical_pods.is_zero();
    if !list.is_empty() && periods_given {
        return Err(
            "cannot be given with shutdownGracePeriod or shutdownGracePeriodCriticalPods at the same time"
                .into(),
        );
    }
    o.shutdown_grace_period_by_pod_priority = list;
    Ok(())
}

/// kubelet's validation: within 0..=100 and below the high threshold (its row comes first).
fn set_image_gc_low(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let low: u8 = int_within(i.text, 0, 100)?;
    if low >= o.image_gc.high_percent {
        return Err(format!(
            "must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) {}",
            o.image_gc.high_percent
        )
        .into());
    }
    o.image_gc.low_percent = low;
    Ok(())
}

/// kubelet's validation: zero (off) or more than the minimum age (its row comes first).
fn set_image_max_gc_age(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let max = if i.text.is_empty() {
        std::time::Duration::ZERO
    } else {
        non_negative_duration(i.text)?
    };
    if !max.is_zero() && max <= o.image_gc.min_age {
        return Err(format!(
            "must be greater than imageMinimumGCAge {}",
            crate::duration::format_go_duration(o.image_gc.min_age)
        )
        .into());
    }
    o.image_gc.max_age = max;
    Ok(())
}

/// A duration that may be zero but not negative.
fn non_negative_duration(s: &str) -> Result<std::time::Duration, InvalidValue> {
    parse_duration(s)?
        .to_std()
        .ok_or_else(|| "must not be negative".into())
}

/// Checks the file now, so a bad one stops the agent with its field and reason.
fn set_node_slo_file(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.node_slo_file = None;
    if i.text.is_empty() {
        return Ok(());
    }
    let path = PathBuf::from(i.text);
    crate::koordapi::load_qos_config(&path).map_err(|e| InvalidValue(e.to_string()))?;
    let (_, errors) =
        crate::koordapi::host_apps_from_file(&path).map_err(|e| InvalidValue(e.to_string()))?;
    if let Some(e) = errors.first() {
        return Err(InvalidValue(format!("{}: {e}", path.display())));
    }
    o.node_slo_file = Some(path);
    Ok(())
}

/// An `http://` or `https://` URL with a host ("" turns the source off), so a typo
/// fails at start rather than at every poll.
fn set_manifest_url(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    if i.text.is_empty() {
        o.manifest_url = None;
        return Ok(());
    }
    let uri: hyper::Uri = i
        .text
        .parse()
        .map_err(|e| InvalidValue(format!("not a URL: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none_or(str::is_empty) {
        return Err("must be an http:// or https:// URL with a host".into());
    }
    o.manifest_url = Some(i.text.to_string());
    Ok(())
}

/// Each name and value must be a valid HTTP header name and value.
fn set_manifest_url_header(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let map = multimap(i.text)?;
    for (k, values) in &map {
        hyper::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| InvalidValue(format!("{k:?} is not a valid HTTP header name")))?;
        for v in values {
            hyper::header::HeaderValue::from_str(v).map_err(|_| {
                InvalidValue(format!("{k}: {v:?} is not a valid HTTP header value"))
            })?;
        }
    }
    o.manifest_url_header = map;
    Ok(())
}

/// kubelet's `parseMaxSize`: a quantity in bytes; a negative one turns rotation off.
fn log_max_size(text: &str) -> Result<i64, InvalidValue> {
    crate::quantity::bytes(&k8s_openapi::apimachinery::pkg::api::resource::Quantity(
        text.to_string(),
    ))
    .map_err(|e| e.to_string().into())
}

/// kubelet's checks of `userNamespaces.idsPerPod` (its Linux config validation).
fn set_userns_ids_per_pod(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    const UNIT: i64 = 65536;
    if i.text.is_empty() {
        o.userns_ids_per_pod = None;
        return Ok(());
    }
    let n = parse_int(i.text)?;
    if n < UNIT {
        return Err(format!("must not be less than {UNIT}").into());
    }
    if n % UNIT != 0 {
        return Err(format!("must be a multiple of {UNIT}").into());
    }
    let n = u32::try_from(n).map_err(|_| format!("must not be more than {}", u32::MAX))?;
    o.userns_ids_per_pod = Some(n);
    Ok(())
}

/// kubelet's validation: nil or at least 1, and more than 1 only when pulls are
/// not serialized (the serializeImagePulls row comes first, so its value is final).
fn set_max_parallel_image_pulls(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    if i.text.is_empty() {
        o.max_parallel_image_pulls = None;
        return Ok(());
    }
    let n = parse_int(i.text)?;
    if n < 1 {
        return Err("must be a positive number".into());
    }
    if o.serialize_image_pulls && n > 1 {
        return Err("cannot be larger than 1 unless serializeImagePulls is false".into());
    }
    o.max_parallel_image_pulls = Some(usize::try_from(n).unwrap_or(usize::MAX));
    Ok(())
}

/// One of kubelet's four policies (the allowlist row comes next and completes it).
fn set_pull_verification(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.pull_verification =
        crate::images::VerifyPolicy::parse(i.text, &[]).map_err(|e| InvalidValue(e.to_string()))?;
    Ok(())
}

/// Only with NeverVerifyAllowlistedImages, each a repository or `prefix/*`, as
/// kubelet validates them.
fn set_preloaded_allowlist(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let items: Vec<String> = list_items(i.text).into_iter().map(str::to_string).collect();
    let name = o.pull_verification.name();
    o.pull_verification = crate::images::VerifyPolicy::parse(name, &items)
        .map_err(|e| InvalidValue(e.to_string()))?;
    Ok(())
}

/// kubelet refuses, at start, patterns that are malformed or not known to be
/// namespaced (`sysctl.NewAllowlist`).
fn set_allowed_unsafe_sysctls(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let items: Vec<String> = list_items(i.text).into_iter().map(str::to_string).collect();
    crate::podenv::Allowlist::new(&items).map_err(|e| InvalidValue(e.to_string()))?;
    o.allowed_unsafe_sysctls = items;
    Ok(())
}

/// Each must be an IP address (kubelet's flag is an IP list).
fn set_cluster_dns(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.cluster_dns = list_items(i.text)
        .into_iter()
        .map(|s| ip(s).map_err(|e| InvalidValue(format!("{s:?}: {e}"))))
        .collect::<Result<_, _>>()?;
    Ok(())
}

/// A row with no short flag and one default.
#[allow(clippy::too_many_arguments)]
const fn row(
    flag: &'static str,
    field: Option<&'static str>,
    kind: Kind,
    default: &'static str,
    value_name: &'static str,
    help: &'static str,
    set: fn(&mut Options, Input) -> Result<(), InvalidValue>,
) -> Setting {
    Setting {
        flag,
        short: None,
        field,
        kind,
        default,
        config_default: None,
        value_name,
        help,
        set,
    }
}

impl Setting {
    const fn short(mut self, c: char) -> Setting {
        self.short = Some(c);
        self
    }

    const fn config_default(mut self, d: &'static str) -> Setting {
        self.config_default = Some(d);
        self
    }
}

/// The driver, and whether the user chose it: only an explicit driver that
/// contradicts the runtime's is refused; the default gives way to the runtime's.
fn set_cgroup_driver(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.cgroup_driver = CgroupDriver::parse(i.text).ok_or("must be \"cgroupfs\" or \"systemd\"")?;
    o.cgroup_driver_explicit = i.explicit;
    Ok(())
}

/// A cgroup given as an absolute cgroupfs path (`/`, `/kubelet`); None for "".
/// Its parts become directory names below the cgroup mounts, so each must be one
/// plain path component.
fn cgroup_path(text: &str) -> Result<Option<CgroupName>, InvalidValue> {
    if text.is_empty() {
        return Ok(None);
    }
    let Some(rest) = text.strip_prefix('/') else {
        return Err("must be an absolute cgroup path such as /kubelet".into());
    };
    let parts: Vec<String> = rest
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| {
            crate::safe_path::component(p)
                .map(str::to_string)
                .map_err(|_| InvalidValue::from("must not contain '.' or '..' components"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Some(CgroupName(parts)))
}

/// kubelet's range for `cpuCFSQuotaPeriod` (which it also gates behind
/// `CustomCPUCFSQuotaPeriod`; oxlet has no feature gates).
fn set_cfs_quota_period(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let d = parse_duration(i.text)?;
    o.cpu_cfs_quota_period = d
        .to_std()
        .filter(|d| (MIN_CFS_QUOTA_PERIOD..=MAX_CFS_QUOTA_PERIOD).contains(d))
        .ok_or("must be between 1ms and 1sec, inclusive")?;
    Ok(())
}

const MIN_CFS_QUOTA_PERIOD: std::time::Duration = std::time::Duration::from_millis(1);
const MAX_CFS_QUOTA_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

fn reserved(text: &str) -> Result<Reserved, InvalidValue> {
    Reserved::parse(map_pairs(text, '=')?).map_err(|e| e.to_string().into())
}

fn set_eviction_hard(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.eviction_hard =
        Thresholds::parse(map_pairs(i.text, '<')?).map_err(|e| InvalidValue(e.to_string()))?;
    Ok(())
}

fn set_eviction_soft_grace(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.eviction_soft_grace_period = crate::eviction::parse_grace_periods(map_pairs(i.text, '=')?)
        .map_err(|e| InvalidValue(e.to_string()))?;
    Ok(())
}

/// kubelet's rule: each soft threshold has a grace period (read from the row before).
fn set_eviction_soft(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let soft =
        Thresholds::parse(map_pairs(i.text, '<')?).map_err(|e| InvalidValue(e.to_string()))?;
    crate::eviction::check_soft(&soft, &o.eviction_soft_grace_period).map_err(|e| {
        InvalidValue(format!(
            "{e} (set --eviction-soft-grace-period or evictionSoftGracePeriod)"
        ))
    })?;
    o.eviction_soft = soft;
    Ok(())
}

/// kubelet's `enforceNodeAllocatable` validation, with its messages.
fn set_enforce_node_allocatable(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let items = list_items(i.text);
    let mut e = NodeAllocatableEnforcement::default();
    let mut seen = Vec::new();
    for &val in &items {
        if seen.contains(&val) {
            return Err(
                format!("duplicated enforcements {val:?} in enforceNodeAllocatable").into(),
            );
        }
        seen.push(val);
        match val {
            "pods" => e.pods = true,
            "system-reserved" | "system-reserved-compressible" => {
                if o.system_reserved_cgroup.is_none() {
                    return Err(format!("systemReservedCgroup (--system-reserved-cgroup) must be specified when {val:?} included in enforceNodeAllocatable").into());
                }
                if e.system_reserved.is_some() {
                    return Err("both \"system-reserved\" and \"system-reserved-compressible\" cannot be specified together in enforceNodeAllocatable".into());
                }
                e.system_reserved = Some(enforced_of(val));
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                if o.kube_reserved_cgroup.is_none() {
                    return Err(format!("kubeReservedCgroup (--kube-reserved-cgroup) must be specified when {val:?} included in enforceNodeAllocatable").into());
                }
                if e.kube_reserved.is_some() {
                    return Err("both \"kube-reserved\" and \"kube-reserved-compressible\" cannot be specified together in enforceNodeAllocatable".into());
                }
                e.kube_reserved = Some(enforced_of(val));
            }
            "none" => {
                if items.len() > 1 {
                    return Err("enforceNodeAllocatable may not contain additional enforcements when \"none\" is specified".into());
                }
                continue;
            }
            other => {
                return Err(format!(
                    "option {other:?} specified for enforceNodeAllocatable. Valid options are \"pods\", \"system-reserved\", \"kube-reserved\", \"system-reserved-compressible\", \"kube-reserved-compressible\" or \"none\""
                )
                .into());
            }
        }
        if !o.cgroups_per_qos {
            return Err(format!("cgroupsPerQOS (--cgroups-per-qos) must be set to true when {val:?} contained in enforceNodeAllocatable").into());
        }
    }
    o.enforce_node_allocatable = e;
    Ok(())
}

/// `*-compressible` limits cpu only; the plain option every reserved resource.
fn enforced_of(option: &str) -> Enforced {
    if option.ends_with("-compressible") {
        Enforced::Compressible
    } else {
        Enforced::All
    }
}

/// Given explicitly (flag or config file), the endpoint means "never start a
/// managed containerd in its place".
fn set_endpoint(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.container_runtime_endpoint = unix_endpoint(i.text)?;
    o.runtime_endpoint_explicit = i.explicit;
    Ok(())
}

/// kubelet: trimmed and lower-cased; blank means "use the host name". Kept
/// even when invalid, so the host name is not read in its place.
fn set_node_name(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    o.node_name = i.text.trim().to_lowercase();
    if o.node_name.is_empty() || crate::pod::is_dns1123_subdomain(&o.node_name) {
        Ok(())
    } else {
        Err(NODE_NAME_REASON.into())
    }
}

/// kubelet passes `podCIDR` on to the runtime unchecked; oxlet writes it into a
/// managed containerd's CNI config, so it must be a CIDR (`10.244.1.0/24`).
fn set_pod_cidr(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let text = i.text.trim();
    if text.is_empty() {
        o.pod_cidr = None;
        return Ok(());
    }
    let bad = || InvalidValue::from("must be a CIDR (an address, '/', a prefix length)");
    let (addr, len) = text.split_once('/').ok_or_else(bad)?;
    let addr: std::net::IpAddr = addr.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(InvalidValue(format!("prefix length {len} is over {max}")));
    }
    o.pod_cidr = Some(text.to_string());
    Ok(())
}

/// A Linux interface name: 1 to 15 bytes (IFNAMSIZ - 1), no '/', ':' or space.
fn set_managed_cni_bridge(o: &mut Options, i: Input) -> Result<(), InvalidValue> {
    let name = i.text;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty()
        || name.len() > 15
        || !name.chars().all(allowed)
        || name == "."
        || name == ".."
    {
        return Err("must be an interface name: 1 to 15 of a-z, A-Z, 0-9, '-', '_', '.'".into());
    }
    o.managed_cni_bridge = name.to_string();
    Ok(())
}

fn non_empty(s: &str) -> Result<PathBuf, InvalidValue> {
    (!s.is_empty())
        .then(|| PathBuf::from(s))
        .ok_or_else(|| "must not be empty".into())
}

fn absolute(s: &str) -> Result<PathBuf, InvalidValue> {
    Some(PathBuf::from(s))
        .filter(|p| p.is_absolute())
        .ok_or_else(|| "must be an absolute path".into())
}

/// A port; 0 means disabled for every port oxlet serves.
fn port(s: &str) -> Result<u16, InvalidValue> {
    int_within(s, 0, 65535)
}

/// kubelet's `maxPods` is an `int32` that must not be negative.
fn max_pods(s: &str) -> Result<u32, InvalidValue> {
    match parse_int(s)? {
        n if n < 0 => Err("must be greater than or equal to 0".into()),
        n => u32::try_from(n)
            .ok()
            .filter(|&n| n <= i32::MAX as u32)
            .ok_or_else(|| format!("must be at most {}", i32::MAX).into()),
    }
}

fn max_open_files(s: &str) -> Result<u64, InvalidValue> {
    u64::try_from(parse_int(s)?)
        .ok()
        .filter(|&n| n >= MIN_OPEN_FILES)
        .ok_or_else(|| format!("must be at least {MIN_OPEN_FILES}").into())
}

/// The setting a config field belongs to.
pub(crate) fn by_field(field: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|s| s.field == Some(field))
}

pub(super) const NODE_NAME_REASON: &str = "the node name must be a DNS subdomain (lower-case \
     letters, digits, '-' and '.', at most 253 characters)";

/// component-base's reason for a format its registry does not hold.
pub(super) const UNSUPPORTED_LOG_FORMAT: &str = "Unsupported log format";

pub(super) const ENDPOINT_REASON: &str = "must be a unix:// URL with an absolute socket path, \
     e.g. unix:///run/containerd/containerd.sock";

fn parse_int(s: &str) -> Result<i64, InvalidValue> {
    s.parse::<i64>().map_err(|_| "must be an integer".into())
}

/// An integer in `min..=max`, converted to the field's type.
fn int_within<T: TryFrom<i64>>(s: &str, min: i64, max: i64) -> Result<T, InvalidValue> {
    Some(parse_int(s)?)
        .filter(|n| (min..=max).contains(n))
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("must be between {min} and {max}").into())
}

fn parse_duration(s: &str) -> Result<GoDuration, InvalidValue> {
    parse_go_duration(s).map_err(|e| e.reason().into())
}

/// A frequency or timeout; zero or negative would spin or never wait.
/// kubelet's `kubeAPIQPS`/`kubeAPIBurst` check: an int32 that "must not be a negative number".
fn non_negative_i32(s: &str) -> Result<u32, InvalidValue> {
    match parse_int(s)? {
        n if n < 0 => Err("must not be a negative number".into()),
        n => u32::try_from(n)
            .ok()
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| format!("must be at most {}", i32::MAX).into()),
    }
}

fn positive_duration(s: &str) -> Result<std::time::Duration, InvalidValue> {
    let d = parse_duration(s)?;
    d.to_std()
        .filter(|_| d.is_positive())
        .ok_or_else(|| "must be greater than 0".into())
}

/// Go's `strconv.ParseBool`, which pflag uses for boolean flags.
pub(crate) fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

pub(super) fn parse_bool(s: &str) -> Result<bool, InvalidValue> {
    parse_go_bool(s).ok_or_else(|| "must be true or false".into())
}

/// kubelet's `ParseNodeIPArgument` (no cloud provider, so dual-stack is allowed):
/// one address, or two of different families, neither of them unspecified.
fn node_ips(s: &str) -> Result<Vec<IpAddr>, InvalidValue> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    let mut ips = Vec::new();
    for part in s.split(',').map(str::trim) {
        ips.push(
            part.parse::<IpAddr>()
                .map_err(|_| format!("could not parse {part:?}"))?,
        );
    }
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv6() != b.is_ipv6() => {
            if a.is_unspecified() || b.is_unspecified() {
                Err("dual-stack node IP cannot include '0.0.0.0' or '::'".into())
            } else {
                Ok(ips)
            }
        }
        _ => Err("must contain either a single IP or a dual-stack pair of IPs".into()),
    }
}

fn ip(s: &str) -> Result<IpAddr, InvalidValue> {
    s.parse::<IpAddr>()
        .map_err(|_| "must be a valid IPv4 or IPv6 address".into())
}

/// `unix://` followed by an absolute path (kubelet's other schemes are not supported).
fn unix_endpoint(e: &str) -> Result<String, InvalidValue> {
    match e.strip_prefix("unix://") {
        Some(path) if path.starts_with('/') && path.len() > 1 => Ok(e.to_string()),
        _ => Err(ENDPOINT_REASON.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_default_passes_its_own_parser_and_check() {
        for s in SETTINGS {
            for with_file in [false, true] {
                let text = s.default_for(with_file);
                let mut o = Options::blank();
                let input = Input {
                    text,
                    explicit: false,
                };
                // "" is "unset" for the settings whose default is empty.
                if !text.is_empty() {
                    assert_eq!(s.kind.parse(text), Ok(()), "--{} default {text:?}", s.flag);
                }
                assert_eq!(
                    (s.set)(&mut o, input),
                    Ok(()),
                    "--{} default {text:?}",
                    s.flag
                );
            }
        }
    }

    #[test]
    fn flag_names_and_fields_are_unique() {
        let mut flags = HashSet::new();
        let mut fields = HashSet::new();
        for s in SETTINGS {
            assert!(
                !s.has_flag() || flags.insert(s.flag),
                "flag --{} twice",
                s.flag
            );
            if let Some(f) = s.field {
                assert!(fields.insert(f), "field {f} twice");
                assert_eq!(by_field(f).map(|b| b.flag), Some(s.flag), "field {f}");
            }
            assert!(
                s.short.is_none_or(|c| s.flag == c.to_string()),
                "{}",
                s.flag
            );
        }
    }

    #[test]
    fn max_parallel_image_pulls_follows_kubelet_validation() {
        let set = |serialize: bool, text: &str| {
            let mut o = Options::blank();
            o.serialize_image_pulls = serialize;
            let s = by_field("maxParallelImagePulls").unwrap();
            (s.set)(
                &mut o,
                Input {
                    text,
                    explicit: true,
                },
            )
            .map(|()| o.max_parallel_image_pulls)
        };
        assert_eq!(set(false, ""), Ok(None));
        assert_eq!(set(false, "3"), Ok(Some(3)));
        assert_eq!(set(true, "1"), Ok(Some(1)));
        assert_eq!(set(false, "0"), Err("must be a positive number".into()));
        assert_eq!(set(false, "-2"), Err("must be a positive number".into()));
        assert_eq!(
            set(true, "2"),
            Err("cannot be larger than 1 unless serializeImagePulls is false".into())
        );
        // kubelet has no flag for it; serializeImagePulls has both.
        assert!(!by_field("maxParallelImagePulls").unwrap().has_flag());
        assert_eq!(
            by_field("serializeImagePulls").unwrap().flag,
            "serialize-image-pulls"
        );
        let defaults = Options::default();
        assert!(defaults.serialize_image_pulls);
        assert_eq!(defaults.max_parallel_image_pulls, None);
    }

    #[test]
    fn every_setting_rejects_text_its_kind_refuses() {
        // What the parser refuses, `set` must refuse too, with the same reason.
        for s in SETTINGS {
            let bad = match s.kind {
                Kind::Int
                | Kind::Duration
                | Kind::Bool
                | Kind::Map(_)
                | Kind::Multimap
                | Kind::Gates
                | Kind::GraceByPriority
                | Kind::ReservedMemory => "x1",
                Kind::Text | Kind::Path | Kind::List => continue,
            };
            let reason = s.kind.parse(bad).unwrap_err();
            let input = Input {
                text: bad,
                explicit: true,
            };
            assert_eq!(
                (s.set)(&mut Options::blank(), input),
                Err(reason),
                "--{}",
                s.flag
            );
        }
    }

    /// Sysctl patterns, cluster DNS and resolv.conf.
    #[test]
    fn dns_and_sysctl_settings_are_checked_and_stored() {
        let set = |field: &str, text: &str| {
            let mut o = Options::blank();
            let s = by_field(field).unwrap();
            (s.set)(
                &mut o,
                Input {
                    text,
                    explicit: true,
                },
            )
            .map(|()| o)
        };
        let o = set("allowedUnsafeSysctls", "net.core.*, kernel.msgmax").unwrap();
        assert_eq!(
            o.allowed_unsafe_sysctls,
            vec!["net.core.*", "kernel.msgmax"]
        );
        assert_eq!(
            set("allowedUnsafeSysctls", "vm.swappiness")
                .unwrap_err()
                .to_string(),
            "the sysctls \"vm.swappiness\" are not known to be namespaced"
        );
        assert!(set("allowedUnsafeSysctls", "Net.*").is_err());
        let o = set("clusterDNS", "10.96.0.10,fd00::10").unwrap();
        assert_eq!(o.cluster_dns.len(), 2);
        assert_eq!(
            set("clusterDNS", "10.96.0.10,dns").unwrap_err().to_string(),
            "\"dns\": must be a valid IPv4 or IPv6 address"
        );
        assert_eq!(
            set("clusterDomain", "cluster.local.")
                .unwrap()
                .cluster_domain,
            "cluster.local"
        );
        assert_eq!(set("resolvConf", "").unwrap().resolv_conf, None);
        let d = Options::default();
        assert_eq!(
            d.resolv_conf.as_deref(),
            Some(std::path::Path::new("/etc/resolv.conf"))
        );
        assert!(d.cluster_dns.is_empty() && d.cluster_domain.is_empty());
    }

    #[test]
    fn ranges() {
        assert_eq!(int_within::<u16>("65535", 0, 65535), Ok(65535));
        assert!(int_within::<u16>("65536", 0, 65535).is_err());
        assert_eq!(
            positive_duration("0s").unwrap_err().to_string(),
            "must be greater than 0"
        );
        assert!(crate::pod::is_dns1123_subdomain("node-1.example"));
        assert!(!crate::pod::is_dns1123_subdomain("node_1"));
    }
}

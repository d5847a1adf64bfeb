//! kubelet's `cmd/kubelet/app/options` plus `KubeletConfiguration`: the effective
//! settings oxlet runs with. Defaults, then the `--config` file, then flags (flags
//! win), validated before anything starts. Every setting is declared once, in its
//! section's table beside the section's fields; [`settings::all`] lists them in order.

mod cluster;
mod cm;
mod configz;
mod eviction;
mod flags;
mod handlers;
mod images;
mod koordlet;
mod kubelet_config;
mod logs;
mod node;
mod pods;
mod problem;
mod process;
mod resource_managers;
mod runtime;
mod servers;
mod serving;
mod settings;
mod shutdown;
mod sources;
mod status;

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;

use flags::FlagValues;
pub(crate) use handlers::DebugHandlers;
use kubelet_config::KubeletConfigFile;
pub(crate) use problem::{ConfigError, Problem};
pub(crate) use resource_managers::ResourceManagerOptions;
pub(crate) use serving::{AuthorizationMode, Serving, TlsVersion};
pub(crate) use settings::{DEFAULT_RUNTIME_ENDPOINT, parse_go_bool};
// `/configz`: the settings in use, as kubelet's KubeletConfiguration.
pub(crate) use configz::kubelet_configuration;
use settings::{Input, InvalidValue, Setting};

pub(crate) use cluster::ClusterOptions;
pub(crate) use cm::CmOptions;
pub(crate) use eviction::EvictionOptions;
pub(crate) use images::ImageOptions;
pub(crate) use koordlet::KoordletOptions;
pub(crate) use logs::ContainerLogOptions;
pub(crate) use node::NodeOptions;
pub(crate) use pods::PodOptions;
pub(crate) use process::ProcessOptions;
pub(crate) use runtime::RuntimeOptions;
pub(crate) use servers::ServerOptions;
pub(crate) use shutdown::ShutdownOptions;
pub(crate) use sources::SourceOptions;
pub(crate) use status::StatusOptions;

/// Effective configuration after merging defaults, the config file and flags, in
/// sections named for the room each configures. Which flag and config field set
/// each value: the section's tables (see `settings::all`).
#[derive(Debug, Clone)]
pub struct Options {
    /// The process: root dir, lock, logging, limits, feature gates, start-up reports.
    pub(crate) process: ProcessOptions,
    /// The CRI endpoint and a managed containerd.
    pub(crate) runtime: RuntimeOptions,
    /// The node's identity and registration.
    pub(crate) node: NodeOptions,
    /// The pods: capacity, sync period, environment.
    pub(crate) pods: PodOptions,
    /// The container manager: cgroups, swap, reserved, allocatable enforcement.
    pub(crate) cm: CmOptions,
    /// The eviction manager.
    pub(crate) eviction: EvictionOptions,
    /// Image pulls, credentials and garbage collection.
    pub(crate) images: ImageOptions,
    /// The static pod sources (file and URL).
    pub(crate) sources: SourceOptions,
    /// The apiserver clients and client certificates.
    pub(crate) cluster: ClusterOptions,
    /// Node status, lease and volume stats periods.
    pub(crate) status: StatusOptions,
    /// Container logs.
    pub(crate) logs: ContainerLogOptions,
    /// Where the servers listen.
    pub(crate) servers: ServerOptions,
    /// The secure port: TLS, authentication, authorization.
    pub(crate) serving: Serving,
    /// Which of kubelet's debugging endpoints the secure port serves.
    pub(crate) handlers: DebugHandlers,
    /// The CPU, memory and topology managers' settings.
    pub(crate) resource_managers: ResourceManagerOptions,
    /// The koordlet-like QoS side: NodeSLO file, prediction, metric cache.
    pub(crate) koordlet: KoordletOptions,
    /// Graceful node shutdown.
    pub(crate) shutdown: ShutdownOptions,
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
            self.shutdown.grace_period,
            self.shutdown.grace_period_critical_pods,
            &self.shutdown.by_pod_priority,
        )
    }

    /// Whether the evented PLEG may run: kubelet's `EventedPLEG` gate, which oxlet takes
    /// as on unless it is set false (kubelet's default is off while the gate is alpha;
    /// oxlet runs it wherever the runtime streams container events).
    pub(crate) fn evented_pleg(&self) -> bool {
        self.process
            .feature_gates
            .get(EVENTED_PLEG_GATE)
            .copied()
            .unwrap_or(true)
    }

    /// Whether `/logs/?query=…` reads the journal: kubelet asks for both its
    /// `NodeLogQuery` gate (off by default) and `enableSystemLogQuery`.
    pub(crate) fn node_log_query(&self) -> bool {
        self.servers.system_log_query
            && self
                .process
                .feature_gates
                .get(NODE_LOG_QUERY_GATE)
                .copied()
                .unwrap_or(false)
    }

    /// What the container manager starts with, taken from these settings.
    pub(crate) fn cm_settings(&self) -> crate::cm::CmSettings {
        crate::cm::CmSettings {
            fail_cgroup_v1: self.cm.fail_cgroup_v1,
            fail_swap_on: self.cm.fail_swap_on,
            memory: self.cm.memory,
            protect_kernel_defaults: self.cm.protect_kernel_defaults,
            cgroup_driver: self.cm.cgroup_driver,
            cgroup_driver_explicit: self.cm.cgroup_driver_explicit,
            cgroup_root: self.cm.cgroup_root.clone(),
            cgroups_per_qos: self.cm.cgroups_per_qos,
            cpu_cfs_quota: self.cm.cpu_cfs_quota,
            cpu_cfs_quota_period: self.cm.cpu_cfs_quota_period,
            pod_pids_limit: self.cm.pod_pids_limit,
            kube_reserved: self.cm.kube_reserved,
            system_reserved: self.cm.system_reserved,
            eviction_hard: self.eviction.hard.clone(),
            enforce_node_allocatable: self.cm.enforce_node_allocatable,
            kube_reserved_cgroup: self.cm.kube_reserved_cgroup.clone(),
            system_reserved_cgroup: self.cm.system_reserved_cgroup.clone(),
        }
    }

    /// Zero values, before the tables' defaults are applied.
    fn blank() -> Options {
        Options {
            process: ProcessOptions::blank(),
            runtime: RuntimeOptions::blank(),
            node: NodeOptions::blank(),
            pods: PodOptions::blank(),
            cm: CmOptions::blank(),
            eviction: EvictionOptions::blank(),
            images: ImageOptions::blank(),
            sources: SourceOptions::blank(),
            cluster: ClusterOptions::blank(),
            status: StatusOptions::blank(),
            logs: ContainerLogOptions::blank(),
            servers: ServerOptions::blank(),
            serving: Serving::blank(),
            handlers: DebugHandlers::default(),
            resource_managers: ResourceManagerOptions::default(),
            koordlet: KoordletOptions::blank(),
            shutdown: ShutdownOptions::blank(),
        }
    }

    /// `-v`: klog's verbosity, for `main` to start logging with.
    pub fn verbosity(&self) -> u8 {
        self.process.verbosity
    }

    /// `--logging-format`: klog's text lines or JSON, for `main`.
    pub fn logging_format(&self) -> crate::logging::LogFormat {
        self.process.logging_format
    }
}

/// The flags' defaults (no config file), taken from the settings table.
impl Default for Options {
    fn default() -> Self {
        let mut o = Options::blank();
        for s in settings::all() {
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
    o.process
        .flag_values
        .push(("config".into(), config_text.unwrap_or_default()));
    for s in settings::all() {
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
            o.process
                .flag_values
                .push((s.flag.to_string(), text.to_string()));
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
    if o.node.name.is_empty() {
        match host_name() {
            Ok(h) => {
                o.node.name = h.trim().to_lowercase();
                if !crate::pod::is_dns1123_subdomain(&o.node.name) {
                    problems.push(Problem::Other(format!(
                        "host name {:?} is not a valid node name (a DNS subdomain); \
                         set --hostname-override",
                        o.node.name
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
        o.process
            .feature_gates
            .keys()
            .filter(|g| !IMPLEMENTED_GATES.contains(&g.as_str()))
            .map(|g| format!("feature gate {g}")),
    );
    o.process.config_file = config_file;
    o.process.unimplemented = unimplemented;
    o.process.warnings = warnings;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::settings::ENDPOINT_REASON;
    use super::*;
    use crate::cm::{CgroupDriver, CgroupName, NodeAllocatableEnforcement};
    use crate::pod::is_dns1123_subdomain as is_dns_subdomain;
    use std::io::Write;
    use std::net::IpAddr;
    use std::time::Duration;

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

    /// The sections' tables stay in rustfmt's hands and short (issue 48: the one
    /// table had 92 lines over 160 characters under a skip).
    #[test]
    fn option_files_are_formatted_and_lines_short() {
        let skip = concat!("rustfmt", "::skip");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/options");
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains(skip), "{}: {skip}", path.display());
            for (n, line) in text.lines().enumerate() {
                let len = line.chars().count();
                assert!(len <= 100, "{}:{}: {len} characters", path.display(), n + 1);
            }
            files += 1;
        }
        assert!(files > 10, "{files} files in {}", dir.display());
    }

    #[test]
    fn defaults() {
        let o = ok(&[]);
        let d = Options::default();
        assert_eq!(o.process.config_file, None);
        assert_eq!(o.sources.static_pod_path, None);
        assert_eq!(o.runtime.endpoint, DEFAULT_RUNTIME_ENDPOINT);
        assert!(!o.runtime.endpoint_explicit);
        assert_eq!(o.process.root_dir, d.process.root_dir);
        assert_eq!(o.logs.pod_logs_dir, PathBuf::from("/var/log/pods"));
        assert_eq!(o.node.name, "test-host");
        assert_eq!(o.process.verbosity, 0);
        assert_eq!(o.servers.address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(o.servers.read_only_port, 10255);
        assert_eq!(o.servers.healthz_bind_address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(o.servers.healthz_port, 10248);
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
        assert_eq!(o.sources.file_check_frequency, Duration::from_secs(20));
        assert_eq!(o.pods.sync_frequency, Duration::from_secs(60));
        assert_eq!(o.runtime.request_timeout, Duration::from_secs(120));
        assert_eq!(o.pods.max_pods, 110);
        assert_eq!(
            (o.cluster.event_record_qps, o.cluster.event_burst),
            (50, 100)
        );
        assert_eq!(o.process.max_open_files, 1_000_000);
        assert!(!o.process.runonce);
        assert!(o.process.unimplemented.is_empty() && o.process.warnings.is_empty());
    }

    #[test]
    fn prediction_is_on_by_default_and_its_directory_is_a_flag() {
        let o = ok(&[]);
        assert!(o.koordlet.prediction && o.koordlet.prediction_checkpoint_dir.is_none());
        let o = ok(&[
            "--enable-prediction=false",
            "--prediction-checkpoint-filepath=/srv/cp",
        ]);
        assert!(!o.koordlet.prediction);
        assert_eq!(
            o.koordlet.prediction_checkpoint_dir,
            Some(PathBuf::from("/srv/cp"))
        );
    }

    #[test]
    fn load_uses_the_machine_host_name() {
        let host = crate::node::host_name().unwrap().trim().to_lowercase();
        match load(["oxlet"]) {
            Ok(o) => assert_eq!(o.node.name, host),
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
            o.sources.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(o.runtime.endpoint, "unix:///run/crio/crio.sock");
        assert!(o.runtime.endpoint_explicit);
        assert_eq!(o.process.root_dir, PathBuf::from("/srv/oxlet"));
        assert_eq!(o.logs.pod_logs_dir, PathBuf::from("/srv/logs"));
        assert_eq!(o.node.name, "node-1.example");
        assert_eq!(o.process.verbosity, 4);
        assert_eq!(o.servers.address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(o.servers.read_only_port, 0);
        assert_eq!(
            o.servers.healthz_bind_address,
            "::".parse::<IpAddr>().unwrap()
        );
        assert_eq!(o.servers.healthz_port, 0);
        assert_eq!(o.sources.file_check_frequency, Duration::from_millis(1500));
        assert_eq!(o.pods.sync_frequency, Duration::from_secs(10));
        assert_eq!(o.runtime.request_timeout, Duration::from_secs(3600));
        assert_eq!(o.pods.max_pods, 0);
        assert!(o.process.runonce);
    }

    #[test]
    fn feature_gates_turn_the_evented_pleg_off_and_name_the_others() {
        assert!(ok(&[]).evented_pleg(), "on unless set false");
        let o = ok(&["--feature-gates=EventedPLEG=false,InPlacePodVerticalScaling=true"]);
        assert!(!o.evented_pleg());
        assert_eq!(
            o.process.unimplemented,
            ["feature gate InPlacePodVerticalScaling"]
        );
        let f = config("featureGates:\n  EventedPLEG: true\n  FileOnly: true\n");
        assert!(ok(&[&config_flag(&f)]).evented_pleg());
        // The flag wins gate by gate; the file's other gates stay (kubelet's merge).
        let o = ok(&[
            &config_flag(&f),
            "--feature-gates=EventedPLEG=false,FlagOnly=false",
        ]);
        assert!(!o.evented_pleg());
        assert_eq!(
            o.process.feature_gates.keys().collect::<Vec<_>>(),
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
            assert_eq!(ok(args).process.verbosity, 4, "{args:?}");
        }
    }

    /// `--logging-format` and `logging.format` (the flag wins); a format
    /// component-base does not know is refused with kubelet's words, either way.
    #[test]
    fn logging_format_from_flag_or_file() {
        use crate::logging::LogFormat;
        assert_eq!(ok(&[]).process.logging_format, LogFormat::Text);
        assert_eq!(
            ok(&["--logging-format=json"]).process.logging_format,
            LogFormat::Json
        );
        let f = config("logging:\n  format: json\n");
        assert_eq!(
            ok(&[&config_flag(&f)]).process.logging_format,
            LogFormat::Json
        );
        let both = ok(&[&config_flag(&f), "--logging-format=text"]);
        assert_eq!(both.process.logging_format, LogFormat::Text);
        assert!(
            both.process.unimplemented.is_empty(),
            "{:?}",
            both.process.unimplemented
        );
        let refused =
            "initialize logging: logging.format: Invalid value: \"xml\": Unsupported log format";
        assert_eq!(one_problem(&["--logging-format=xml"]), refused);
        let f = config("logging:\n  format: xml\n");
        assert_eq!(one_problem(&[&config_flag(&f)]), refused);
    }

    #[test]
    fn explicit_default_endpoint_is_still_explicit() {
        let o = ok(&["--container-runtime-endpoint", DEFAULT_RUNTIME_ENDPOINT]);
        assert!(o.runtime.endpoint_explicit);
        let f = config(&format!(
            "containerRuntimeEndpoint: {DEFAULT_RUNTIME_ENDPOINT}\n"
        ));
        assert!(ok(&[&config_flag(&f)]).runtime.endpoint_explicit);
    }

    #[test]
    fn event_rate_from_the_file_and_flags() {
        let f = config("eventRecordQPS: 7\neventBurst: 9\n");
        let o = ok(&[&config_flag(&f)]);
        assert_eq!((o.cluster.event_record_qps, o.cluster.event_burst), (7, 9));
        assert!(
            o.process.unimplemented.is_empty(),
            "{:?}",
            o.process.unimplemented
        );
        let o = ok(&[&config_flag(&f), "--event-qps=3"]);
        assert_eq!((o.cluster.event_record_qps, o.cluster.event_burst), (3, 9));
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
        assert_eq!(o.process.config_file.as_deref(), Some(f.path()));
        assert_eq!(
            o.sources.static_pod_path,
            Some(PathBuf::from("/etc/kubernetes/manifests"))
        );
        assert_eq!(o.sources.file_check_frequency, Duration::from_secs(5));
        assert_eq!(o.pods.sync_frequency, Duration::from_secs(30));
        assert_eq!(o.runtime.request_timeout, Duration::from_secs(180));
        assert_eq!(o.servers.read_only_port, 10255);
        assert_eq!(o.servers.healthz_port, 10249);
        assert_eq!(o.servers.healthz_bind_address, IpAddr::from([0, 0, 0, 0]));
        assert_eq!(o.servers.address, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(o.runtime.endpoint, "unix:///run/crio/crio.sock");
        assert!(o.runtime.endpoint_explicit);
        assert_eq!(o.logs.pod_logs_dir, PathBuf::from("/srv/pods"));
        assert_eq!(o.pods.max_pods, 12);
        assert!(o.process.unimplemented.is_empty() && o.process.warnings.is_empty());
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
        assert_eq!(o.sources.static_pod_path, Some(PathBuf::from("/from/flag")));
        assert_eq!(o.pods.sync_frequency, Duration::from_secs(5));
        assert_eq!(o.pods.max_pods, 3);
        assert_eq!(o.servers.read_only_port, 10255);
        // Not given as a flag: the file's value stands.
        assert_eq!(o.runtime.endpoint, "unix:///from/file.sock");
    }

    #[test]
    fn a_flag_can_replace_a_bad_file_value() {
        let f = config("readOnlyPort: 99999\nfileCheckFrequency: -1s\n");
        let o = ok(&[
            &config_flag(&f),
            "--read-only-port=80",
            "--file-check-frequency=2s",
        ]);
        assert_eq!(o.servers.read_only_port, 80);
        assert_eq!(o.sources.file_check_frequency, Duration::from_secs(2));
    }

    #[test]
    fn config_file_read_only_port_defaults_to_zero() {
        let f = config("maxPods: 10\n");
        assert_eq!(ok(&[&config_flag(&f)]).servers.read_only_port, 0);
        assert_eq!(
            ok(&[&config_flag(&f), "--read-only-port=10255"])
                .servers
                .read_only_port,
            10255
        );
        assert_eq!(ok(&[]).servers.read_only_port, 10255);
        // An empty --config means no file, as in kubelet.
        let o = ok(&["--config="]);
        assert_eq!(
            (o.process.config_file, o.servers.read_only_port),
            (None, 10255)
        );
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
        assert_eq!(
            o.sources.static_pod_path,
            Some(dir.path().join("manifests"))
        );
        assert_eq!(ok(&["--pod-manifest-path="]).sources.static_pod_path, None);
    }

    #[test]
    fn unimplemented_kubelet_flags_warn() {
        let o = ok(&[
            "--kernel-memcg-notification=false",
            "--kubelet-cgroups",
            "/kubelet",
        ]);
        assert_eq!(
            o.process.unimplemented,
            ["flag --kernel-memcg-notification", "flag --kubelet-cgroups"]
        );
        assert_eq!(
            ok(&["--kernel-memcg-notification"]).process.unimplemented,
            ["flag --kernel-memcg-notification"]
        );
    }

    #[test]
    fn runonce_is_a_pflag_boolean() {
        assert!(ok(&["--runonce"]).process.runonce);
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(
                ok(&[&format!("--runonce={text}")]).process.runonce,
                "{text}"
            );
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert!(
                !ok(&[&format!("--runonce={text}")]).process.runonce,
                "{text}"
            );
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
        assert!(ok(&[]).node.ips.is_empty());
        let ips = |s: &str| -> Vec<IpAddr> { s.split(',').map(|p| p.parse().unwrap()).collect() };
        assert_eq!(ok(&["--node-ip=172.18.0.2"]).node.ips, ips("172.18.0.2"));
        assert_eq!(
            ok(&["--node-ip=172.18.0.2,fc00:f853:ccd:e793::2"]).node.ips,
            ips("172.18.0.2,fc00:f853:ccd:e793::2")
        );
        assert_eq!(ok(&["--node-ip=::"]).node.ips, ips("::"));
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
        assert_eq!(ok(&[]).pods.userns_ids_per_pod, None);
        let f = config("userNamespaces:\n  idsPerPod: 1048576\n");
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(o.pods.userns_ids_per_pod, Some(1_048_576));
        assert!(
            o.process.unimplemented.is_empty(),
            "{:?}",
            o.process.unimplemented
        );
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
        assert_eq!(o.cm.memory, crate::cm::MemorySettings::default());
        let f = config("singleProcessOOMKill: false\nmemorySwap:\n  swapBehavior: LimitedSwap\n");
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(o.cm.memory.single_process_oom_kill, Some(false));
        assert_eq!(o.cm.memory.swap_behavior, Some(SwapBehavior::LimitedSwap));
        assert!(
            o.process.unimplemented.is_empty(),
            "{:?}",
            o.process.unimplemented
        );
        assert_eq!(o.cm_settings().memory, o.cm.memory);
        // kind writes `memorySwap: {}`, and "" is NoSwap's unset spelling.
        for body in ["memorySwap: {}\n", "memorySwap:\n  swapBehavior: \"\"\n"] {
            let f = config(body);
            assert_eq!(ok(&[&config_flag(&f)]).cm.memory.swap_behavior, None);
        }
        let f = config("memorySwap:\n  swapBehavior: UnlimitedSwap\n");
        assert_eq!(
            one_problem(&[&config_flag(&f)]),
            format!(
                "{}: field memorySwap.swapBehavior: invalid value \"UnlimitedSwap\": must be \
                 one of: \"\", \"LimitedSwap\" or \"NoSwap\"",
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
            o.process.unimplemented,
            [
                "config field kubeletCgroups",
                "config field logging.flushFrequency"
            ]
        );
        // Given as a flag too, it is warned about once, as the flag.
        let o = ok(&[&config_flag(&f), "--kubelet-cgroups=/kubelet"]);
        assert_eq!(
            o.process.unimplemented,
            [
                "flag --kubelet-cgroups",
                "config field logging.flushFrequency"
            ]
        );
        assert_eq!(o.process.warnings.len(), 1);
        assert_eq!(
            o.process.warnings[0],
            format!(
                "{}: unknown config field \"noSuchField\" (not a KubeletConfiguration field), \
                 ignored",
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
            let setting = settings::all().find(|s| s.flag == flag).unwrap();
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
        assert_eq!(ok(&["--hostname-override=  "]).node.name, "test-host");
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
        assert_eq!(o.node.name, "x");
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
        assert_eq!(o.cm.cgroup_driver, CgroupDriver::Cgroupfs);
        assert!(!o.cm.cgroup_driver_explicit);
        assert_eq!(o.cm.cgroup_root, CgroupName::default());
        assert!(o.cm.cgroups_per_qos && o.cm.cpu_cfs_quota && o.cm.fail_cgroup_v1);
        assert_eq!(o.cm.pod_pids_limit, -1);
        assert_eq!(o.cm.cpu_cfs_quota_period, Duration::from_millis(100));
        assert_eq!(
            (o.cm.kube_reserved, o.cm.system_reserved),
            Default::default()
        );
        assert_eq!(
            (&o.cm.kube_reserved_cgroup, &o.cm.system_reserved_cgroup),
            (&None, &None)
        );
        let t = &o.eviction.hard;
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
            o.cm.enforce_node_allocatable,
            NodeAllocatableEnforcement {
                pods: true,
                ..Default::default()
            }
        );
        // The same defaults with a config file that sets none of them.
        let f = config("maxPods: 10\n");
        let c = ok(&[&config_flag(&f)]);
        assert_eq!(c.eviction.hard, o.eviction.hard);
        assert_eq!(c.cm.enforce_node_allocatable, o.cm.enforce_node_allocatable);
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
        assert_eq!(o.cm.cgroup_driver, CgroupDriver::Systemd);
        assert!(o.cm.cgroup_driver_explicit);
        assert_eq!(
            o.cm.cgroup_root,
            CgroupName(vec!["oxlet".into(), "pods".into()])
        );
        assert_eq!(o.cm.pod_pids_limit, -1);
        assert!(!o.cm.cpu_cfs_quota && o.cm.fail_cgroup_v1);
        assert_eq!(o.cm.cpu_cfs_quota_period, Duration::from_millis(50));
        assert_eq!(o.cm.kube_reserved.cpu_milli, Some(100));
        assert_eq!(o.cm.kube_reserved.memory_bytes, Some(1 << 30));
        assert_eq!(o.cm.kube_reserved.pids, Some(100));
        assert_eq!(o.cm.system_reserved.memory_bytes, Some(512 << 20));
        assert_eq!(o.cm.system_reserved.cpu_milli, None);
        assert_eq!(
            o.cm.kube_reserved_cgroup,
            Some(CgroupName(vec!["kube.slice".into()]))
        );
        // A given map replaces the defaults whole; 0% disables.
        assert_eq!(o.eviction.hard.0.len(), 1);
        assert_eq!(
            o.eviction.hard.get(Signal::MemoryAvailable),
            Some(ThresholdValue::Quantity(1 << 30))
        );
        assert_eq!(
            o.cm.enforce_node_allocatable,
            NodeAllocatableEnforcement {
                pods: true,
                system_reserved: Some(crate::cm::Enforced::All),
                kube_reserved: Some(crate::cm::Enforced::All)
            }
        );
        assert_eq!(ok(&["--pod-max-pids=4096"]).cm.pod_pids_limit, 4096);
        assert_eq!(
            ok(&[
                "--kube-reserved-cgroup=/kube.slice",
                "--enforce-node-allocatable=pods,kube-reserved-compressible"
            ])
            .cm
            .enforce_node_allocatable
            .kube_reserved,
            Some(crate::cm::Enforced::Compressible)
        );
        assert_eq!(
            ok(&["--enforce-node-allocatable=none"])
                .cm
                .enforce_node_allocatable,
            NodeAllocatableEnforcement::default()
        );
        assert_eq!(
            ok(&["--enforce-node-allocatable=", "--cgroups-per-qos=false"])
                .cm
                .enforce_node_allocatable,
            NodeAllocatableEnforcement::default()
        );
        assert!(ok(&["--eviction-hard="]).eviction.hard.0.is_empty());
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
        assert_eq!(o.cm.cgroup_driver, CgroupDriver::Systemd);
        assert!(o.cm.cgroup_driver_explicit && !o.cm.cgroups_per_qos);
        assert_eq!(
            o.cm.enforce_node_allocatable,
            NodeAllocatableEnforcement::default()
        );
        assert_eq!(o.cm.pod_pids_limit, 512);
        assert_eq!(o.cm.cpu_cfs_quota_period, Duration::from_millis(10));
        assert_eq!(o.cm.kube_reserved.cpu_milli, Some(200));
        assert_eq!(o.cm.kube_reserved.memory_bytes, Some(256 << 20));
        assert_eq!(o.eviction.hard.to_string(), "memory.available<200Mi");
        let o = ok(&[
            &config_flag(&f),
            "--kube-reserved=cpu=1",
            "--cgroup-driver=cgroupfs",
        ]);
        assert_eq!(o.cm.kube_reserved.cpu_milli, Some(1000));
        assert_eq!(o.cm.kube_reserved.memory_bytes, None);
        assert_eq!(o.cm.cgroup_driver, CgroupDriver::Cgroupfs);
        // A cross-check names the field whose value fails it.
        let f = config("enforceNodeAllocatable: [pods]\ncgroupsPerQOS: false\n");
        assert_eq!(
            one_problem(&[&config_flag(&f)]),
            format!(
                "{}: field enforceNodeAllocatable: invalid value \"pods\": cgroupsPerQOS \
                 (--cgroups-per-qos) must be set to true when \"pods\" contained in \
                 enforceNodeAllocatable",
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
                "field evictionHard: invalid value \"memory.free<1Gi\": unsupported eviction \
                 signal memory.free"
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
                "enforceNodeAllocatable may not contain additional enforcements when \"none\" \
                 is specified",
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
                "option \"everything\" specified for enforceNodeAllocatable. Valid options are \
                 \"pods\", \"system-reserved\", \"kube-reserved\", \
                 \"system-reserved-compressible\", \"kube-reserved-compressible\" or \"none\"",
            ),
            (
                &["--system-reserved-cgroup=/system.slice"],
                "enforce-node-allocatable",
                "system-reserved,system-reserved-compressible",
                "both \"system-reserved\" and \"system-reserved-compressible\" cannot be \
                 specified together in enforceNodeAllocatable",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "kube-reserved-compressible",
                "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \
                 \"kube-reserved-compressible\" included in enforceNodeAllocatable",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "system-reserved",
                "systemReservedCgroup (--system-reserved-cgroup) must be specified when \
                 \"system-reserved\" included in enforceNodeAllocatable",
            ),
            (
                &[],
                "enforce-node-allocatable",
                "kube-reserved",
                "kubeReservedCgroup (--kube-reserved-cgroup) must be specified when \
                 \"kube-reserved\" included in enforceNodeAllocatable",
            ),
            (
                &["--cgroups-per-qos=false"],
                "enforce-node-allocatable",
                "pods",
                "cgroupsPerQOS (--cgroups-per-qos) must be set to true when \"pods\" contained \
                 in enforceNodeAllocatable",
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
            "default value \"pods\" of --enforce-node-allocatable: cgroupsPerQOS \
             (--cgroups-per-qos) \
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
            "evictionSoft:\n  memory.available: \
             1Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n",
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
        assert_eq!(ok(&[&config_flag(&f)]).process.max_open_files, 4096);
        assert_eq!(
            ok(&[&config_flag(&f), "--max-open-files=70000"])
                .process
                .max_open_files,
            70000
        );
    }

    #[test]
    fn container_log_settings_from_defaults_file_and_flags() {
        let o = ok(&[]);
        assert_eq!(o.logs.max_size, 10 << 20);
        assert_eq!(o.logs.max_files, 5);
        assert_eq!(o.logs.max_workers, 1);
        assert_eq!(o.logs.monitor_interval, Duration::from_secs(10));
        assert_eq!(o.logs.symlink_dir, PathBuf::from("/var/log/containers"));
        let f = config(
            "containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\ncontainerLogMaxWorkers: 2\n\
             containerLogMonitorInterval: 3s\n",
        );
        let o = ok(&[&config_flag(&f), "--container-log-symlink-dir=/tmp/links"]);
        assert_eq!(o.logs.max_size, 1 << 20);
        assert_eq!(o.logs.max_files, 3);
        assert_eq!(o.logs.max_workers, 2);
        assert_eq!(o.logs.monitor_interval, Duration::from_secs(3));
        assert_eq!(o.logs.symlink_dir, PathBuf::from("/tmp/links"));
        assert!(
            !o.process
                .unimplemented
                .iter()
                .any(|u| u.contains("containerLog")),
            "{:?}",
            o.process.unimplemented
        );
        assert_eq!(ok(&["--container-log-max-size=-1"]).logs.max_size, -1);
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
        assert_eq!(d.sources.manifest_url, None);
        assert!(d.sources.manifest_url_header.is_empty());
        assert_eq!(d.sources.http_check_frequency, Duration::from_secs(20));
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
            o.sources.manifest_url.as_deref(),
            Some("http://127.0.0.1:8080/pods")
        );
        let h = |k: &str| o.sources.manifest_url_header[k].clone();
        assert_eq!(h("a"), ["hello"]);
        assert_eq!(h("b"), ["again", "beautiful"]);
        assert_eq!(h("c"), ["world"]);
        assert_eq!(o.sources.http_check_frequency, Duration::from_secs(5));
        assert!(
            o.process.unimplemented.is_empty(),
            "{:?}",
            o.process.unimplemented
        );

        let f = config(
            "staticPodURL: https://example.com/pods\n\
             staticPodURLHeader:\n  Authorization: [\"Bearer x:y\"]\n  X-A: [\"1\", \"2\"]\n\
             httpCheckFrequency: 1m\n",
        );
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(
            o.sources.manifest_url.as_deref(),
            Some("https://example.com/pods")
        );
        assert_eq!(
            o.sources.manifest_url_header["Authorization"],
            ["Bearer x:y"]
        );
        assert_eq!(o.sources.manifest_url_header["X-A"], ["1", "2"]);
        assert_eq!(o.sources.http_check_frequency, Duration::from_secs(60));
        assert!(
            o.process.unimplemented.is_empty(),
            "{:?}",
            o.process.unimplemented
        );

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
        assert_eq!(o.images.gc, crate::images::Policy::default());
        let o = ok(&[
            "--image-gc-high-threshold=100",
            "--image-gc-low-threshold=0",
            "--minimum-image-ttl-duration=0s",
        ]);
        assert_eq!(
            (o.images.gc.high_percent, o.images.gc.low_percent),
            (100, 0)
        );
        assert!(o.images.gc.min_age.is_zero() && !o.images.gc.periodic_gc_enabled());
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
            "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: \
             70\nimageMaximumGCAge: 1h\n",
        );
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(
            o.images.gc,
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
            "shutdownGracePeriodByPodPriority:\n- {priority: 100000, \
             shutdownGracePeriodSeconds: 5}\n\
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
                "shutdownGracePeriod: 30s\nshutdownGracePeriodByPodPriority: [{priority: 0, \
                 shutdownGracePeriodSeconds: 5}]\n",
                "shutdownGracePeriodByPodPriority",
                "cannot be given with shutdownGracePeriod or shutdownGracePeriodCriticalPods at \
                 the same time",
            ),
            (
                "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: \
                 -5}]\n",
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

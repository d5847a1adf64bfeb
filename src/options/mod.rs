//! The effective settings oxlet runs with: defaults, then the `--config` file,
//! then flags (flags win), validated before anything starts.

use std::ffi::OsString;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

pub mod duration;
pub mod flags;
pub mod kubelet_config;

use duration::{GoDuration, parse_go_duration};
use flags::FlagValues;
use kubelet_config::{FieldValue, KubeletConfigFile};

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
    /// `--max-open-files` / `maxOpenFiles` (default 1000000): RLIMIT_NOFILE set at start.
    pub max_open_files: u64,
    /// `--runonce`.
    pub runonce: bool,
    /// Settings kubelet has and oxlet accepts but does not implement yet, one
    /// human-readable line each ("flag --foo", "config field bar"); logged at start.
    pub unimplemented: Vec<String>,
    /// Other startup warnings, one line each (e.g. config-file keys that are not
    /// KubeletConfiguration fields, which kubelet also only warns about); logged at start.
    pub warnings: Vec<String>,
}

/// The smallest `maxOpenFiles` accepted.
pub const MIN_OPEN_FILES: u64 = 256;

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
            max_open_files: 1_000_000,
            runonce: false,
            unimplemented: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

/// One problem with the command line or config file, as one line naming the
/// flag or field (and file), the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("invalid value {value:?} for --{flag}: {reason}")]
    Flag {
        flag: String,
        value: String,
        reason: String,
    },
    #[error("{}: field {field}: invalid value {value:?}: {reason}", file.display())]
    Field {
        file: PathBuf,
        field: String,
        value: String,
        reason: String,
    },
    /// The config file as a whole: unreadable, bad YAML, wrong kind.
    #[error("{}: {reason}", file.display())]
    File { file: PathBuf, reason: String },
    /// The command line does not parse (unknown flag, missing value).
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Other(String),
}

/// Why `load` returned no `Options`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `--help` or `--version` was asked for: print it, exit 0.
    #[error("{0}")]
    Help(clap::Error),
    /// Everything found wrong, one line per problem.
    #[error("{}", lines(.0))]
    Invalid(Vec<Problem>),
}

fn lines(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The problems (empty for `Help`).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Help(_) => &[],
            ConfigError::Invalid(p) => p,
        }
    }

    /// Turns clap's multi-line errors into one line, pflag-style where it helps.
    pub(crate) fn from_clap(e: clap::Error) -> ConfigError {
        use clap::error::{ContextKind, ErrorKind};
        let msg = match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => return ConfigError::Help(e),
            ErrorKind::UnknownArgument => {
                let arg = e
                    .get(ContextKind::InvalidArg)
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                if arg.starts_with('-') {
                    let hint = e
                        .get(ContextKind::SuggestedArg)
                        .map(|s| format!(" (did you mean {s}?)"))
                        .unwrap_or_default();
                    let flag = arg.split('=').next().unwrap_or(&arg);
                    format!("unknown flag: {flag}{hint}")
                } else {
                    format!("unexpected argument {arg:?}: oxlet takes no positional arguments")
                }
            }
            _ => {
                let rendered = e.render().to_string();
                let first = rendered.lines().next().unwrap_or("invalid command line");
                first.trim_start_matches("error: ").to_string()
            }
        };
        ConfigError::Invalid(vec![Problem::Usage(msg)])
    }
}

/// Builds the effective options from the command line (argv[0] first):
/// defaults, then the `--config` file, then explicit flags; validates
/// everything and reports every problem found.
pub fn load<I, T>(args: I) -> Result<Options, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let flags = flags::parse_flags(args)?;
    resolve(flags, system_host_name)
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

/// The kernel's host name (what Go's `os.Hostname` reads on Linux).
fn system_host_name() -> io::Result<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
}

/// Where a setting's value came from, to name it in messages.
#[derive(Debug, Clone, Copy)]
enum Origin {
    Default,
    Flag(&'static str),
    Field(&'static str),
}

#[derive(Debug)]
struct Setting<T> {
    value: T,
    text: String,
    origin: Origin,
}

impl<T> Setting<T> {
    fn explicit(&self) -> bool {
        !matches!(self.origin, Origin::Default)
    }
}

/// Collects problems while settings are merged and checked.
struct Merger {
    file: Option<PathBuf>,
    problems: Vec<Problem>,
}

impl Merger {
    fn invalid<T>(&mut self, s: &Setting<T>, reason: &str) {
        let (value, reason) = (s.text.clone(), reason.to_string());
        self.problems.push(match s.origin {
            Origin::Flag(flag) => Problem::Flag {
                flag: flag.to_string(),
                value,
                reason,
            },
            Origin::Field(field) => Problem::Field {
                file: self.file.clone().unwrap_or_default(),
                field: field.to_string(),
                value,
                reason,
            },
            Origin::Default => Problem::Other(format!("default value {value:?}: {reason}")),
        });
    }

    /// Default, then the file's value, then the flag's. None when the flag's
    /// text does not parse (already reported).
    #[allow(clippy::too_many_arguments)]
    fn merge<T>(
        &mut self,
        default: T,
        default_text: &str,
        field: &'static str,
        file: Option<FieldValue<T>>,
        flag: &'static str,
        flag_text: Option<String>,
        parse: fn(&str) -> Result<T, String>,
    ) -> Option<Setting<T>> {
        let mut setting = match file {
            Some(v) => Setting {
                value: v.value,
                text: v.text,
                origin: Origin::Field(field),
            },
            None => Setting {
                value: default,
                text: default_text.to_string(),
                origin: Origin::Default,
            },
        };
        if let Some(text) = flag_text {
            let flagged = Setting {
                value: (),
                text,
                origin: Origin::Flag(flag),
            };
            match parse(&flagged.text) {
                Ok(value) => {
                    setting = Setting {
                        value,
                        text: flagged.text,
                        origin: flagged.origin,
                    }
                }
                Err(reason) => {
                    self.invalid(&flagged, &reason);
                    return None;
                }
            }
        }
        Some(setting)
    }

    /// A port; 0 means disabled for every port oxlet serves.
    fn port(&mut self, s: Option<Setting<i64>>) -> Option<u16> {
        self.check(s, |v| {
            u16::try_from(*v)
                .ok()
                .ok_or_else(|| "must be between 0 and 65535".to_string())
        })
    }

    /// A frequency or timeout; zero or negative would spin or never wait.
    fn positive(&mut self, s: Option<Setting<GoDuration>>) -> Option<Duration> {
        self.check(s, |d| {
            d.to_std()
                .filter(|_| d.is_positive())
                .ok_or_else(|| "must be greater than 0".to_string())
        })
    }

    fn ip(&mut self, s: Option<Setting<String>>) -> Option<IpAddr> {
        self.check(s, |v| {
            v.parse::<IpAddr>()
                .map_err(|_| "must be a valid IPv4 or IPv6 address".to_string())
        })
    }

    /// Applies `convert`, reporting its error against the setting's origin.
    fn check<T, U>(
        &mut self,
        s: Option<Setting<T>>,
        convert: impl FnOnce(&T) -> Result<U, String>,
    ) -> Option<U> {
        let s = s?;
        match convert(&s.value) {
            Ok(u) => Some(u),
            Err(reason) => {
                self.invalid(&s, &reason);
                None
            }
        }
    }
}

fn parse_text(s: &str) -> Result<String, String> {
    Ok(s.to_string())
}

fn parse_int(s: &str) -> Result<i64, String> {
    s.parse::<i64>()
        .map_err(|_| "must be an integer".to_string())
}

fn parse_duration(s: &str) -> Result<GoDuration, String> {
    parse_go_duration(s).map_err(|e| e.reason())
}

const ENDPOINT_REASON: &str = "must be a unix:// URL with an absolute socket path, \
     e.g. unix:///run/containerd/containerd.sock";

/// `unix://` followed by an absolute path (kubelet's other schemes are not supported).
fn check_endpoint(e: &str) -> Result<String, String> {
    match e.strip_prefix("unix://") {
        Some(path) if path.starts_with('/') && path.len() > 1 => Ok(e.to_string()),
        _ => Err(ENDPOINT_REASON.to_string()),
    }
}

/// Node names end up in static pod names, so they must be DNS-1123 subdomains.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Merges and validates; `host_name` is injected so tests do not depend on the machine.
fn resolve(
    flags: FlagValues,
    host_name: impl FnOnce() -> io::Result<String>,
) -> Result<Options, ConfigError> {
    let mut m = Merger {
        file: None,
        problems: flags.problems,
    };
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
        m.file = Some(path.clone());
        match kubelet_config::load_file(path) {
            Ok(f) => file = f,
            Err(problems) => m.problems.extend(problems),
        }
        m.problems.append(&mut file.problems);
        for field in &file.unimplemented {
            unimplemented.push(format!("config field {field}"));
        }
        for field in &file.unknown {
            warnings.push(format!(
                "{}: unknown config field {field:?} (not a KubeletConfiguration field), ignored",
                path.display()
            ));
        }
    }
    let d = Options::default();
    // KubeletConfiguration's default readOnlyPort is 0; the flag's is 10255.
    let read_only_default = if config_file.is_some() {
        0
    } else {
        i64::from(d.read_only_port)
    };

    let static_pod_path = m.merge(
        String::new(),
        "",
        "staticPodPath",
        file.static_pod_path,
        "pod-manifest-path",
        flags.pod_manifest_path,
        parse_text,
    );
    let endpoint = m.merge(
        d.container_runtime_endpoint.clone(),
        DEFAULT_RUNTIME_ENDPOINT,
        "containerRuntimeEndpoint",
        file.container_runtime_endpoint,
        "container-runtime-endpoint",
        flags.container_runtime_endpoint,
        parse_text,
    );
    let endpoint_explicit = endpoint.as_ref().is_some_and(Setting::explicit);
    let endpoint = m.check(endpoint, |e| check_endpoint(e));
    let root_dir = m.merge(
        "/var/lib/oxlet".to_string(),
        "/var/lib/oxlet",
        "",
        None,
        "root-dir",
        flags.root_dir,
        parse_text,
    );
    let root_dir = m.check(root_dir, |v| {
        (!v.is_empty())
            .then(|| PathBuf::from(v))
            .ok_or_else(|| "must not be empty".to_string())
    });
    let pod_logs_dir = m.merge(
        "/var/log/pods".to_string(),
        "/var/log/pods",
        "podLogsDir",
        file.pod_logs_dir,
        "pod-logs-dir",
        flags.pod_logs_dir,
        parse_text,
    );
    let pod_logs_dir = m.check(pod_logs_dir, |v| {
        Some(PathBuf::from(v))
            .filter(|p| p.is_absolute())
            .ok_or_else(|| "must be an absolute path".to_string())
    });
    let verbosity = m.merge(0, "0", "", None, "v", flags.verbosity, parse_int);
    let verbosity = m.check(verbosity, |v| {
        u8::try_from(*v).map_err(|_| "must be between 0 and 255".to_string())
    });
    let address = m.merge(
        d.address.to_string(),
        "127.0.0.1",
        "address",
        file.address,
        "address",
        flags.address,
        parse_text,
    );
    let address = m.ip(address);
    let healthz_bind_address = m.merge(
        d.healthz_bind_address.to_string(),
        "127.0.0.1",
        "healthzBindAddress",
        file.healthz_bind_address,
        "healthz-bind-address",
        flags.healthz_bind_address,
        parse_text,
    );
    let healthz_bind_address = m.ip(healthz_bind_address);
    let read_only_port = m.merge(
        read_only_default,
        &read_only_default.to_string(),
        "readOnlyPort",
        file.read_only_port,
        "read-only-port",
        flags.read_only_port,
        parse_int,
    );
    let read_only_port = m.port(read_only_port);
    let healthz_port = m.merge(
        i64::from(d.healthz_port),
        "10248",
        "healthzPort",
        file.healthz_port,
        "healthz-port",
        flags.healthz_port,
        parse_int,
    );
    let healthz_port = m.port(healthz_port);
    let mut duration = |default: Duration, field, file, flag, text| {
        let default = GoDuration::try_from(default).unwrap_or_default();
        let s = m.merge(
            default,
            &default.to_string(),
            field,
            file,
            flag,
            text,
            parse_duration,
        );
        m.positive(s)
    };
    let file_check_frequency = duration(
        d.file_check_frequency,
        "fileCheckFrequency",
        file.file_check_frequency,
        "file-check-frequency",
        flags.file_check_frequency,
    );
    let sync_frequency = duration(
        d.sync_frequency,
        "syncFrequency",
        file.sync_frequency,
        "sync-frequency",
        flags.sync_frequency,
    );
    let runtime_request_timeout = duration(
        d.runtime_request_timeout,
        "runtimeRequestTimeout",
        file.runtime_request_timeout,
        "runtime-request-timeout",
        flags.runtime_request_timeout,
    );
    let max_pods = m.merge(
        i64::from(d.max_pods),
        "110",
        "maxPods",
        file.max_pods,
        "max-pods",
        flags.max_pods,
        parse_int,
    );
    let max_pods = m.check(max_pods, |v| match *v {
        v if v < 0 => Err("must be greater than or equal to 0".to_string()),
        v if v > i64::from(i32::MAX) => Err(format!("must be at most {}", i32::MAX)),
        v => Ok(v as u32),
    });
    let max_open_files = m.merge(
        d.max_open_files as i64,
        "1000000",
        "maxOpenFiles",
        file.max_open_files,
        "max-open-files",
        flags.max_open_files,
        parse_int,
    );
    // kubelet only defaults 0; a limit below what stdio and a runtime socket need
    // would break oxlet itself, so require a usable floor.
    let max_open_files = m.check(max_open_files, |v| match *v {
        v if v < MIN_OPEN_FILES as i64 => Err(format!("must be at least {MIN_OPEN_FILES}")),
        v => Ok(v as u64),
    });

    // kubelet: --hostname-override if set (trimmed), else the host name; lower-cased.
    let override_name = flags
        .hostname_override
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let node_name = match override_name {
        Some(name) => {
            let name = name.to_lowercase();
            if !is_dns_subdomain(&name) {
                m.problems.push(Problem::Flag {
                    flag: "hostname-override".to_string(),
                    value: name.clone(),
                    reason: "the node name must be a DNS subdomain (lower-case letters, \
                             digits, '-' and '.', at most 253 characters)"
                        .to_string(),
                });
            }
            name
        }
        None => match host_name() {
            Ok(h) => {
                let name = h.trim().to_lowercase();
                if !is_dns_subdomain(&name) {
                    m.problems.push(Problem::Other(format!(
                        "host name {name:?} is not a valid node name (a DNS subdomain); \
                         set --hostname-override"
                    )));
                }
                name
            }
            Err(e) => {
                m.problems.push(Problem::Other(format!(
                    "cannot read the host name ({e}); set --hostname-override"
                )));
                String::new()
            }
        },
    };

    if !m.problems.is_empty() {
        return Err(ConfigError::Invalid(m.problems));
    }
    // No problems means every checked value above is Some.
    let missing =
        || ConfigError::Invalid(vec![Problem::Other("internal: unchecked setting".into())]);
    Ok(Options {
        config_file,
        static_pod_path: static_pod_path
            .map(|s| s.value)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        container_runtime_endpoint: endpoint.ok_or_else(missing)?,
        runtime_endpoint_explicit: endpoint_explicit,
        root_dir: root_dir.ok_or_else(missing)?,
        pod_logs_dir: pod_logs_dir.ok_or_else(missing)?,
        node_name,
        verbosity: verbosity.ok_or_else(missing)?,
        address: address.ok_or_else(missing)?,
        read_only_port: read_only_port.ok_or_else(missing)?,
        healthz_bind_address: healthz_bind_address.ok_or_else(missing)?,
        healthz_port: healthz_port.ok_or_else(missing)?,
        file_check_frequency: file_check_frequency.ok_or_else(missing)?,
        sync_frequency: sync_frequency.ok_or_else(missing)?,
        runtime_request_timeout: runtime_request_timeout.ok_or_else(missing)?,
        max_pods: max_pods.ok_or_else(missing)?,
        max_open_files: max_open_files.ok_or_else(missing)?,
        runonce: flags.runonce.unwrap_or(false),
        unimplemented,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(o.address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(o.read_only_port, 10255);
        assert_eq!(o.healthz_bind_address, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(o.healthz_port, 10248);
        assert_eq!(o.file_check_frequency, Duration::from_secs(20));
        assert_eq!(o.sync_frequency, Duration::from_secs(60));
        assert_eq!(o.runtime_request_timeout, Duration::from_secs(120));
        assert_eq!(o.max_pods, 110);
        assert_eq!(o.max_open_files, 1_000_000);
        assert!(!o.runonce);
        assert!(o.unimplemented.is_empty() && o.warnings.is_empty());
    }

    #[test]
    fn load_uses_the_machine_host_name() {
        let host = system_host_name().unwrap().trim().to_lowercase();
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
    fn verbosity_flag_forms() {
        for args in [&["-v=4"][..], &["--v=4"], &["-v", "4"], &["-v4"]] {
            assert_eq!(ok(args).verbosity, 4, "{args:?}");
        }
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
            "--kubeconfig=/etc/kubernetes/kubelet.conf",
            "--fail-swap-on=false",
            "--cgroup-driver",
            "systemd",
            "--eviction-hard=memory.available<100Mi",
        ]);
        assert_eq!(
            o.unimplemented,
            [
                "flag --kubeconfig",
                "flag --fail-swap-on",
                "flag --cgroup-driver",
                "flag --eviction-hard"
            ]
        );
        assert_eq!(
            ok(&["--fail-swap-on"]).unimplemented,
            ["flag --fail-swap-on"]
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
            one_problem(&["--no-such-flag"]),
            "unknown flag: --no-such-flag"
        );
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
        assert!(matches!(
            load(["oxlet", "--version"]),
            Err(ConfigError::Help(_))
        ));
    }

    #[test]
    fn config_fields_not_implemented_or_unknown_warn() {
        let f = config(
            "failSwapOn: false\n\
             cgroupDriver: systemd\n\
             authentication:\n  webhook:\n    enabled: true\n\
             noSuchField: 1\n",
        );
        let o = ok(&[&config_flag(&f)]);
        assert_eq!(
            o.unimplemented,
            [
                "config field failSwapOn",
                "config field cgroupDriver",
                "config field authentication"
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

    #[test]
    fn port_out_of_range() {
        assert_eq!(
            one_problem(&["--read-only-port=99999"]),
            "invalid value \"99999\" for --read-only-port: must be between 0 and 65535"
        );
        assert_eq!(
            one_problem(&["--healthz-port=-1"]),
            "invalid value \"-1\" for --healthz-port: must be between 0 and 65535"
        );
        assert_eq!(
            one_problem(&["--healthz-port=http"]),
            "invalid value \"http\" for --healthz-port: must be an integer"
        );
        let f = config("healthzPort: 70000\n");
        assert_eq!(
            one_problem(&[&config_flag(&f)]),
            format!(
                "{}: field healthzPort: invalid value \"70000\": must be between 0 and 65535",
                f.path().display()
            )
        );
    }

    #[test]
    fn max_pods_must_not_be_negative() {
        assert_eq!(
            one_problem(&["--max-pods=-1"]),
            "invalid value \"-1\" for --max-pods: must be greater than or equal to 0"
        );
        assert_eq!(
            one_problem(&["--max-pods=3000000000"]),
            "invalid value \"3000000000\" for --max-pods: must be at most 2147483647"
        );
        let f = config("maxPods: -5\n");
        assert_eq!(
            one_problem(&[&config_flag(&f)]),
            format!(
                "{}: field maxPods: invalid value \"-5\": must be greater than or equal to 0",
                f.path().display()
            )
        );
    }

    #[test]
    fn frequencies_and_timeouts_must_be_positive() {
        let f = config("fileCheckFrequency: -1s\n");
        assert_eq!(
            one_problem(&[&config_flag(&f)]),
            format!(
                "{}: field fileCheckFrequency: invalid value \"-1s\": must be greater than 0",
                f.path().display()
            )
        );
        assert_eq!(
            one_problem(&["--sync-frequency=0"]),
            "invalid value \"0\" for --sync-frequency: must be greater than 0"
        );
        assert_eq!(
            one_problem(&["--runtime-request-timeout=-2m"]),
            "invalid value \"-2m\" for --runtime-request-timeout: must be greater than 0"
        );
        assert_eq!(
            one_problem(&["--file-check-frequency=20"]),
            "invalid value \"20\" for --file-check-frequency: missing unit \
             (use a Go duration such as 20s, 1m30s or 300ms)"
        );
        let f = config("syncFrequency: 0s\nruntimeRequestTimeout: 2x\n");
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
                    "{path}: field syncFrequency: invalid value \"0s\": must be greater than 0"
                ),
            ]
        );
    }

    #[test]
    fn bad_ip_addresses() {
        assert_eq!(
            one_problem(&["--address=localhost"]),
            "invalid value \"localhost\" for --address: must be a valid IPv4 or IPv6 address"
        );
        assert_eq!(
            one_problem(&["--healthz-bind-address=1.2.3"]),
            "invalid value \"1.2.3\" for --healthz-bind-address: must be a valid IPv4 or IPv6 address"
        );
        let f = config("address: 300.1.1.1\n");
        assert_eq!(
            one_problem(&[&config_flag(&f)]),
            format!(
                "{}: field address: invalid value \"300.1.1.1\": must be a valid IPv4 or IPv6 address",
                f.path().display()
            )
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
    fn directories_and_verbosity() {
        assert_eq!(
            one_problem(&["--pod-logs-dir=logs"]),
            "invalid value \"logs\" for --pod-logs-dir: must be an absolute path"
        );
        assert_eq!(
            one_problem(&["--root-dir="]),
            "invalid value \"\" for --root-dir: must not be empty"
        );
        assert_eq!(
            one_problem(&["-v=300"]),
            "invalid value \"300\" for --v: must be between 0 and 255"
        );
        assert_eq!(
            one_problem(&["--v=loud"]),
            "invalid value \"loud\" for --v: must be an integer"
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
                hostname_override: Some("X".into()),
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
    fn max_open_files_from_file_and_flag() {
        let f = config("maxOpenFiles: 4096\n");
        assert_eq!(ok(&[&config_flag(&f)]).max_open_files, 4096);
        assert_eq!(
            ok(&[&config_flag(&f), "--max-open-files=70000"]).max_open_files,
            70000
        );
        let p = one_problem(&["--max-open-files=10"]);
        assert!(
            p.contains("--max-open-files") && p.contains("at least 256"),
            "{p}"
        );
        let bad = config("maxOpenFiles: -1\n");
        let p = one_problem(&[&config_flag(&bad)]);
        assert!(p.contains("field maxOpenFiles"), "{p}");
    }
}

//! The command line, spelled like kubelet's so existing unit files and scripts
//! work: oxlet's own flags plus kubelet's other flags, which are accepted (and
//! reported) rather than rejected so a kubelet command line does not fail.

use std::collections::BTreeMap;
use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

use super::settings::{self, Kind, Setting, parse_bool};
use super::{ConfigError, Problem};

/// Whether a kubelet flag is a boolean (`--x`, `--x=false`) or takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FlagKind {
    Bool,
    Value,
}

use FlagKind::{Bool, Value};

/// Kubelet flags oxlet accepts but does not implement yet (kubelet ~1.30-1.34).
pub(crate) const UNIMPLEMENTED_FLAGS: &[(&str, FlagKind)] = &[
    ("cloud-config", Value),
    ("cloud-provider", Value),
    ("config-dir", Value),
    ("contention-profiling", Bool),
    ("enable-controller-attach-detach", Bool),
    ("experimental-mounter-path", Value),
    ("hairpin-mode", Value),
    ("image-service-endpoint", Value),
    ("kernel-memcg-notification", Bool),
    ("kube-api-content-type", Value),
    ("kubelet-cgroups", Value),
    ("local-storage-capacity-isolation", Bool),
    ("log-flush-frequency", Value),
    ("log-json-info-buffer-size", Value),
    ("log-json-split-stream", Bool),
    ("log-text-info-buffer-size", Value),
    ("log-text-split-stream", Bool),
    ("make-iptables-util-chains", Bool),
    ("maximum-dead-containers", Value),
    ("maximum-dead-containers-per-container", Value),
    ("minimum-container-ttl-duration", Value),
    ("node-status-max-images", Value),
    ("oom-score-adj", Value),
    ("pod-infra-container-image", Value),
    ("pods-per-core", Value),
    ("qos-reserved", Value),
    ("registry-burst", Value),
    ("registry-qps", Value),
    ("show-hidden-metrics-for-version", Value),
    ("system-cgroups", Value),
    ("vmodule", Value),
    ("volume-plugin-dir", Value),
];

/// What the command line said. Settings are present only when given explicitly,
/// so defaults never override the config file; values are the raw text, parsed
/// and checked by the settings table.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FlagValues {
    /// `--config`: the KubeletConfiguration file (read before the settings).
    pub config: Option<String>,
    /// The settings given, by flag name.
    pub values: BTreeMap<&'static str, String>,
    /// Unimplemented kubelet flags that were given, by name, in command-line order.
    pub unimplemented: Vec<String>,
    /// Values that are wrong at the flag level (a boolean that is not true/false).
    pub problems: Vec<Problem>,
}

impl FlagValues {
    /// The text given for the setting `flag`, if any.
    #[cfg(test)]
    pub(crate) fn get(&self, flag: &str) -> Option<&str> {
        self.values.get(flag).map(String::as_str)
    }
}

/// The clap command; kubelet (pflag) semantics: a repeated flag's last value
/// wins, and a value may start with `-`.
pub(crate) fn command() -> Command {
    let mut cmd =
        Command::new("oxlet")
            .about("A kubelet-like node agent: runs static pods through a CRI runtime")
            .version(crate::version::VERSION_TEXT)
            .disable_version_flag(true)
            .args_override_self(true)
            .arg(
                Arg::new("version")
                    .long("version")
                    .action(ArgAction::Version)
                    .help("Print version information and quit"),
            )
            .arg(value_arg("config").value_name("PATH").help(
                "KubeletConfiguration file (kubelet.config.k8s.io/v1beta1); flags override it",
            ));
    for setting in settings::all().filter(|s| s.has_flag()) {
        cmd = cmd.arg(setting_arg(setting));
    }
    for &(name, kind) in UNIMPLEMENTED_FLAGS {
        let arg = match kind {
            Bool => bool_arg(name),
            Value => value_arg(name).value_name("VALUE"),
        };
        cmd =
            cmd.arg(arg.help_heading(
                "Kubelet flags accepted but not implemented (ignored, with a warning)",
            ));
    }
    cmd
}

/// A setting's flag, with its placeholder, help and (non-empty) default.
fn setting_arg(s: &Setting) -> Arg {
    let mut arg = match s.kind {
        Kind::Bool => bool_arg(s.flag),
        _ => value_arg(s.flag).value_name(s.value_name),
    };
    if let Some(c) = s.short {
        arg = arg.short(c);
    }
    if matches!(s.kind, Kind::Multimap | Kind::ReservedMemory) {
        // pflag's multimap (and kubelet's reserved memory): every occurrence adds
        // to the earlier ones.
        arg = arg.action(ArgAction::Append);
    }
    if s.kind != Kind::Bool && !s.default.is_empty() {
        arg = arg.default_value(s.default);
    }
    arg.help(s.help)
}

fn value_arg(name: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .num_args(1)
        .allow_hyphen_values(true)
        .action(ArgAction::Set)
}

/// A pflag-style boolean: `--x` means true, `--x=false` sets it; never `--x false`.
fn bool_arg(name: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .num_args(0..=1)
        .require_equals(true)
        .default_missing_value("true")
        .value_name("true|false")
        .action(ArgAction::Set)
}

/// Parses the command line (`argv[0]` first). `--help` and `--version` come back
/// as `ConfigError::Help`; anything clap rejects as one `Problem::Usage` line.
pub(crate) fn parse_flags<I, T>(args: I) -> Result<FlagValues, ConfigError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = command()
        .try_get_matches_from(args)
        .map_err(ConfigError::from_clap)?;
    Ok(from_matches(&matches))
}

fn explicit(m: &ArgMatches, name: &str) -> Option<String> {
    (m.value_source(name) == Some(ValueSource::CommandLine))
        .then(|| m.get_one::<String>(name).cloned())
        .flatten()
}

/// Every occurrence of an appending flag, joined as one text (`a:1,b:2`).
fn explicit_all(m: &ArgMatches, name: &str) -> Option<String> {
    explicit_all_joined(m, name, ",")
}

/// Every occurrence of a repeated flag, joined by `sep`.
fn explicit_all_joined(m: &ArgMatches, name: &str, sep: &str) -> Option<String> {
    (m.value_source(name) == Some(ValueSource::CommandLine))
        .then(|| m.get_many::<String>(name))
        .flatten()
        .map(|v| v.map(String::as_str).collect::<Vec<_>>().join(sep))
}

fn from_matches(m: &ArgMatches) -> FlagValues {
    let mut problems = Vec::new();
    let mut given: Vec<(usize, &'static str)> = Vec::new();
    for &(name, kind) in UNIMPLEMENTED_FLAGS {
        let Some(text) = explicit(m, name) else {
            continue;
        };
        if kind == Bool
            && let Err(reason) = parse_bool(&text)
        {
            problems.push(Problem::Flag {
                flag: name.to_string(),
                value: text,
                reason: reason.0,
            });
        }
        given.push((m.index_of(name).unwrap_or(usize::MAX), name));
    }
    given.sort();
    FlagValues {
        config: explicit(m, "config"),
        values: settings::all()
            .filter(|s| s.has_flag())
            .filter_map(|s| {
                let text = if s.kind == Kind::Multimap {
                    explicit_all(m, s.flag)?
                } else if s.kind == Kind::ReservedMemory {
                    explicit_all_joined(m, s.flag, ";")?
                } else {
                    explicit(m, s.flag)?
                };
                Some((s.flag, text))
            })
            .collect(),
        unimplemented: given.into_iter().map(|(_, n)| n.to_string()).collect(),
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<FlagValues, ConfigError> {
        parse_flags(std::iter::once("oxlet").chain(args.iter().copied()))
    }

    fn usage_error(args: &[&str]) -> String {
        match parse(args) {
            Err(ConfigError::Invalid(p)) => {
                assert_eq!(p.len(), 1, "{p:?}");
                p[0].to_string()
            }
            other => panic!("expected a usage error for {args:?}, got {other:?}"),
        }
    }

    #[test]
    fn command_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn verbosity_forms() {
        for args in [
            &["-v=4"][..],
            &["--v=4"],
            &["-v", "4"],
            &["-v4"],
            &["--v", "4"],
        ] {
            assert_eq!(parse(args).unwrap().get("v"), Some("4"), "{args:?}");
        }
        assert_eq!(parse(&[]).unwrap().get("v"), None);
    }

    #[test]
    fn defaults_are_not_explicit() {
        assert_eq!(parse(&[]).unwrap(), FlagValues::default());
    }

    #[test]
    fn every_setting_flag_is_read_in_both_forms() {
        // `--flag=value` and `--flag value` (pflag), for every setting in the table.
        for two_args in [false, true] {
            let mut args = vec!["--config=/etc/oxlet/config.yaml".to_string()];
            for s in settings::all().filter(|s| s.kind != Kind::Bool && s.has_flag()) {
                let value = format!("{}-value", s.flag);
                if two_args {
                    args.extend([format!("--{}", s.flag), value]);
                } else {
                    args.push(format!("--{}={value}", s.flag));
                }
            }
            for s in settings::all().filter(|s| s.kind == Kind::Bool && s.has_flag()) {
                args.push(format!("--{}=false", s.flag));
            }
            args.push("--runonce".to_string());
            let f = parse(&args.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
            assert_eq!(f.config.as_deref(), Some("/etc/oxlet/config.yaml"));
            for s in settings::all().filter(|s| s.kind != Kind::Bool && s.has_flag()) {
                assert_eq!(f.get(s.flag), Some(format!("{}-value", s.flag).as_str()));
            }
            assert_eq!(f.get("runonce"), Some("true"));
            assert_eq!(f.get("serialize-image-pulls"), Some("false"));
            assert_eq!(f.get("cgroups-per-qos"), Some("false"));
            let with_flag = settings::all().filter(|s| s.has_flag()).count();
            assert_eq!(f.values.len(), with_flag);
            assert!(f.unimplemented.is_empty() && f.problems.is_empty());
        }
    }

    #[test]
    fn last_value_wins_and_hyphen_values_allowed() {
        let f = parse(&["--max-pods=1", "--max-pods", "-5", "--hostname-override="]).unwrap();
        assert_eq!(f.get("max-pods"), Some("-5"));
        assert_eq!(f.get("hostname-override"), Some(""));
    }

    #[test]
    fn bool_flag_forms() {
        let f = parse(&["--runonce=false"]).unwrap();
        assert_eq!(f.get("runonce"), Some("false"));
        assert_eq!(parse(&["--runonce"]).unwrap().get("runonce"), Some("true"));
        // The text is checked with the setting (see options' tests).
        let f = parse(&["--runonce=maybe"]).unwrap();
        assert_eq!(f.get("runonce"), Some("maybe"));
        assert!(f.problems.is_empty());
        // pflag never takes a boolean's value from the next argument.
        assert!(parse(&["--runonce", "false"]).is_err());
    }

    #[test]
    fn unimplemented_kubelet_flags_are_accepted_in_order() {
        let f = parse(&[
            "--registry-qps=7",
            "--kernel-memcg-notification=false",
            "--make-iptables-util-chains",
            "--oom-score-adj",
            "-999",
            "--registry-qps=9",
        ])
        .unwrap();
        assert_eq!(
            f.unimplemented,
            [
                "kernel-memcg-notification",
                "make-iptables-util-chains",
                "oom-score-adj",
                "registry-qps"
            ]
        );
        assert!(f.problems.is_empty(), "{:?}", f.problems);
    }

    #[test]
    fn unimplemented_bool_flag_value_checked() {
        let f = parse(&["--kernel-memcg-notification=nope"]).unwrap();
        assert_eq!(f.unimplemented, ["kernel-memcg-notification"]);
        assert_eq!(
            f.problems[0].to_string(),
            "invalid value \"nope\" for --kernel-memcg-notification: must be true or false"
        );
    }

    #[test]
    fn unknown_flag_rejected() {
        assert_eq!(
            usage_error(&["--no-such-flag"]),
            "unknown flag: --no-such-flag"
        );
        assert_eq!(
            usage_error(&["--no-such-flag=3"]),
            "unknown flag: --no-such-flag"
        );
        assert_eq!(usage_error(&["-x"]), "unknown flag: -x");
        let msg = usage_error(&["stray"]);
        assert!(msg.contains("stray"), "{msg}");
        let msg = usage_error(&["--max-pods"]);
        assert!(msg.contains("--max-pods"), "{msg}");
    }

    #[test]
    fn help_and_version_are_not_failures() {
        for arg in ["--help", "-h", "--version"] {
            assert!(matches!(parse(&[arg]), Err(ConfigError::Help(_))), "{arg}");
        }
        let Err(ConfigError::Help(help)) = parse(&["--help"]) else {
            unreachable!()
        };
        let text = help.to_string();
        assert!(text.contains("--read-only-port"), "{text}");
        assert!(text.contains("--kernel-memcg-notification"), "{text}");
    }

    #[test]
    fn table_has_no_duplicates() {
        let mut names: Vec<&str> = UNIMPLEMENTED_FLAGS.iter().map(|(n, _)| *n).collect();
        names.extend(settings::all().filter(|s| s.has_flag()).map(|s| s.flag));
        names.extend(["config", "version", "help"]);
        let total = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), total);
    }
}

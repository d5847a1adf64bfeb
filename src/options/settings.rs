//! The one table of oxlet's settings. Each row declares a setting once: its
//! flag, its KubeletConfiguration field, its default, how its text parses and
//! what is allowed, and where it lands in `Options`. The command line, the
//! config file decoder and the merge all read this table, so adding a setting is
//! adding a row.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use super::Options;
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
            let seconds = s.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                InvalidValue(format!(
                    "shutdownGracePeriodSeconds {s:?} of priority {priority} must be a \
                         whole number of seconds, not negative"
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

/// Every setting, in `--help` order (problems are reported in this order too),
/// as the sections' tables: each section declares its rows beside its fields.
static TABLES: &[&[Setting]] = &[
    super::sources::STATIC_POD_PATH,
    super::runtime::RUNTIME,
    super::cm::SWAP_AND_OOM,
    super::process::ROOT_DIR,
    super::images::CREDENTIAL_PROVIDERS,
    super::process::LOCK,
    super::logs::POD_LOGS_DIR,
    super::node::HOSTNAME,
    super::servers::ADDRESS,
    super::serving::TLS,
    super::serving::AUTH,
    super::handlers::DEBUGGING,
    super::servers::SYSTEM_LOG_QUERY,
    super::handlers::PROFILING_AND_FLAGS,
    super::serving::STREAMING,
    super::servers::PORTS,
    super::sources::FILE_CHECK,
    super::pods::SYNC,
    super::runtime::REQUEST_TIMEOUT,
    super::images::PULLS,
    super::pods::CAPACITY,
    super::process::OPEN_FILES,
    super::cm::CGROUPS,
    super::cm::RESERVED,
    super::eviction::HARD,
    super::cm::ENFORCE,
    super::resource_managers::CPU,
    super::resource_managers::MEMORY,
    super::resource_managers::TOPOLOGY,
    super::process::LOGGING_AND_RUN,
    super::logs::ROTATION,
    super::pods::SECURITY_AND_DNS,
    super::sources::HTTP,
    super::cluster::API_CLIENT,
    super::status::UPDATE_AND_LEASE,
    super::node::REGISTRATION,
    super::process::FEATURE_GATES,
    super::node::REGISTER,
    super::status::REPORT,
    super::cluster::EVENTS_AND_CERTS,
    super::koordlet::KOORDLET,
    super::images::GC,
    super::status::VOLUME_STATS,
    super::images::MAX_GC_AGE,
    super::eviction::SOFT,
    super::shutdown::SHUTDOWN,
];

/// Every setting, in `--help` order: flag, config field, kind (the parser),
/// default, `--help` placeholder and text, and `set` (the check, storing into
/// `Options`).
pub(crate) fn all() -> impl Iterator<Item = &'static Setting> {
    TABLES.iter().flat_map(|t| t.iter())
}

/// A path setting's value; "" is unset.
pub(super) fn opt_path(text: &str) -> Option<PathBuf> {
    Some(PathBuf::from(text)).filter(|p| !p.as_os_str().is_empty())
}

/// A duration that may be zero but not negative.
pub(super) fn non_negative_duration(s: &str) -> Result<std::time::Duration, InvalidValue> {
    parse_duration(s)?
        .to_std()
        .ok_or_else(|| "must not be negative".into())
}

/// A row with no short flag and one default.
#[allow(clippy::too_many_arguments)]
pub(super) const fn row(
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
    pub(super) const fn short(mut self, c: char) -> Setting {
        self.short = Some(c);
        self
    }

    pub(super) const fn config_default(mut self, d: &'static str) -> Setting {
        self.config_default = Some(d);
        self
    }
}

pub(super) fn non_empty(s: &str) -> Result<PathBuf, InvalidValue> {
    (!s.is_empty())
        .then(|| PathBuf::from(s))
        .ok_or_else(|| "must not be empty".into())
}

pub(super) fn absolute(s: &str) -> Result<PathBuf, InvalidValue> {
    Some(PathBuf::from(s))
        .filter(|p| p.is_absolute())
        .ok_or_else(|| "must be an absolute path".into())
}

/// A port; 0 means disabled for every port oxlet serves.
pub(super) fn port(s: &str) -> Result<u16, InvalidValue> {
    int_within(s, 0, 65535)
}

/// The setting a config field belongs to.
pub(crate) fn by_field(field: &str) -> Option<&'static Setting> {
    all().find(|s| s.field == Some(field))
}

pub(super) const NODE_NAME_REASON: &str = "the node name must be a DNS subdomain (lower-case \
     letters, digits, '-' and '.', at most 253 characters)";

/// component-base's reason for a format its registry does not hold.
pub(super) const UNSUPPORTED_LOG_FORMAT: &str = "Unsupported log format";

pub(super) const ENDPOINT_REASON: &str = "must be a unix:// URL with an absolute socket path, \
     e.g. unix:///run/containerd/containerd.sock";

pub(super) fn parse_int(s: &str) -> Result<i64, InvalidValue> {
    s.parse::<i64>().map_err(|_| "must be an integer".into())
}

/// An integer in `min..=max`, converted to the field's type.
pub(super) fn int_within<T: TryFrom<i64>>(s: &str, min: i64, max: i64) -> Result<T, InvalidValue> {
    Some(parse_int(s)?)
        .filter(|n| (min..=max).contains(n))
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| format!("must be between {min} and {max}").into())
}

pub(super) fn parse_duration(s: &str) -> Result<GoDuration, InvalidValue> {
    parse_go_duration(s).map_err(|e| e.reason().into())
}

/// A frequency or timeout; zero or negative would spin or never wait.
/// kubelet's `kubeAPIQPS`/`kubeAPIBurst` check: an int32 that "must not be a negative number".
pub(super) fn non_negative_i32(s: &str) -> Result<u32, InvalidValue> {
    match parse_int(s)? {
        n if n < 0 => Err("must not be a negative number".into()),
        n => u32::try_from(n)
            .ok()
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| format!("must be at most {}", i32::MAX).into()),
    }
}

pub(super) fn positive_duration(s: &str) -> Result<std::time::Duration, InvalidValue> {
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

pub(super) fn ip(s: &str) -> Result<IpAddr, InvalidValue> {
    s.parse::<IpAddr>()
        .map_err(|_| "must be a valid IPv4 or IPv6 address".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_default_passes_its_own_parser_and_check() {
        for s in all() {
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
        for s in all() {
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
            o.images.serialize_pulls = serialize;
            let s = by_field("maxParallelImagePulls").unwrap();
            (s.set)(
                &mut o,
                Input {
                    text,
                    explicit: true,
                },
            )
            .map(|()| o.images.max_parallel_pulls)
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
        assert!(defaults.images.serialize_pulls);
        assert_eq!(defaults.images.max_parallel_pulls, None);
    }

    #[test]
    fn every_setting_rejects_text_its_kind_refuses() {
        // What the parser refuses, `set` must refuse too, with the same reason.
        for s in all() {
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
            o.pods.allowed_unsafe_sysctls,
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
        assert_eq!(o.pods.cluster_dns.len(), 2);
        assert_eq!(
            set("clusterDNS", "10.96.0.10,dns").unwrap_err().to_string(),
            "\"dns\": must be a valid IPv4 or IPv6 address"
        );
        assert_eq!(
            set("clusterDomain", "cluster.local.")
                .unwrap()
                .pods
                .cluster_domain,
            "cluster.local"
        );
        assert_eq!(set("resolvConf", "").unwrap().pods.resolv_conf, None);
        let d = Options::default();
        assert_eq!(
            d.pods.resolv_conf.as_deref(),
            Some(std::path::Path::new("/etc/resolv.conf"))
        );
        assert!(d.pods.cluster_dns.is_empty() && d.pods.cluster_domain.is_empty());
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

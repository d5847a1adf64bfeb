//! Which sysctls a pod may set (kubelet's `pkg/kubelet/sysctl`): the safe ones every
//! node allows, the unsafe ones the admin allows with `allowedUnsafeSysctls`, and the
//! namespace each belongs to, so a pod sharing the host's network or IPC namespace
//! cannot change the host through it.

use std::collections::BTreeMap;

/// The kernel namespace a sysctl belongs to (kubelet's `utilsysctl.Namespace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Namespace {
    Ipc,
    Net,
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        })
    }
}

/// The namespace of `name` (in dot form); None when it is not known to be namespaced.
pub(crate) fn namespaced_by(name: &str) -> Option<Namespace> {
    if name == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    const PREFIXES: [(&str, Namespace); 4] = [
        ("kernel.shm", Namespace::Ipc),
        ("kernel.msg", Namespace::Ipc),
        ("fs.mqueue.", Namespace::Ipc),
        ("net.", Namespace::Net),
    ];
    PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|&(_, ns)| ns)
}

/// The safe sysctls, each with the kernel version that namespaced it (kubelet's
/// `safeSysctls` and `pkg/util/kernel` versions in its current source): namespaced, and
/// without effect on other pods.
const SAFE_SYSCTLS: [(&str, Option<(u32, u32)>); 12] = [
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", Some((4, 15))),
    ("net.ipv4.tcp_wmem", Some((4, 15))),
];

/// The safe sysctls this kernel has (`major.minor` of `release`, e.g. `6.1.0-13-amd64`).
/// An unreadable version keeps only those without a minimum, as kubelet does.
pub(crate) fn safe_sysctls(release: Option<&str>) -> Vec<&'static str> {
    let version = release.and_then(kernel_version);
    SAFE_SYSCTLS
        .iter()
        .filter(|(name, min)| match (min, version) {
            (None, _) => true,
            (Some(min), Some(v)) => v >= *min,
            (Some(_), None) => {
                tracing::warn!(
                    sysctl = name,
                    kernelVersion = release.unwrap_or("unknown"),
                    "kernel version is too small, dropping the sysctl from safe sysctl list"
                );
                false
            }
        })
        .map(|(name, _)| *name)
        .collect()
}

/// The running kernel's release (`/proc/sys/kernel/osrelease`).
pub(crate) fn kernel_release() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
}

fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// kubelet's `NormalizeName`: a name whose first separator is `/`
/// (`net/ipv4/conf/eno2.100/rp_filter`) has its `.` and `/` swapped, so every name
/// is in dot form (`net.ipv4.conf.eno2/100.rp_filter`), which runc needs.
pub(crate) fn normalize_name(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// kubelet's `SysctlMaxLength`.
const MAX_LENGTH: usize = 253;

/// kubelet's `IsValidSysctlPattern`: segments of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`
/// joined by `.` or `/`, the last of which may end in `*`.
fn is_valid_pattern(p: &str) -> bool {
    if p.len() > MAX_LENGTH || p.is_empty() {
        return false;
    }
    let segments: Vec<&str> = p.split(['.', '/']).collect();
    let (last, rest) = segments.split_last().expect("split yields one part");
    let inner = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_';
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let segment = |s: &str| {
        let b = s.as_bytes();
        !b.is_empty() && edge(b[0]) && edge(b[b.len() - 1]) && b.iter().all(|&c| inner(c))
    };
    // The last one: `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]`.
    let last_ok = {
        let b = last.as_bytes();
        match b.split_last() {
            None => false,
            Some((&end, head)) => {
                (edge(end) || end == b'*')
                    && head.first().is_none_or(|&c| edge(c))
                    && head.iter().all(|&c| inner(c))
            }
        }
    };
    rest.iter().all(|s| segment(s)) && last_ok
}

/// A sysctl name as the API server accepts it (`IsValidSysctlName`): a pattern
/// without `*`. runc turns the dots into a path below /proc/sys, so an empty or
/// `..` segment must never get through.
pub(crate) fn is_valid_name(name: &str) -> bool {
    !name.contains('*') && is_valid_pattern(name)
}

/// A pattern `allowedUnsafeSysctls` cannot hold, with kubelet's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AllowlistError {
    #[error(
        "sysctl {0:?} must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"
    )]
    Malformed(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// Why a pod's sysctl is refused (the text after kubelet's "forbidden sysctl: ").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Forbidden {
    #[error("{0:?} not allowed with host {1} enabled")]
    HostNamespace(String, Namespace),
    #[error("{0:?} not allowlisted")]
    NotAllowlisted(String),
    #[error(
        "{0:?} must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?"
    )]
    InvalidName(String),
}

/// kubelet's `patternAllowlist`: exact names and prefixes (from `x.*`), each with
/// its namespace.
#[derive(Debug, Clone, Default)]
pub(crate) struct Allowlist {
    names: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Allowlist {
    /// From names and patterns ending in `*`; each must be known to be namespaced.
    pub(crate) fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Allowlist, AllowlistError> {
        let mut list = Allowlist::default();
        for p in patterns {
            let p = p.as_ref();
            if !is_valid_pattern(p) {
                return Err(AllowlistError::Malformed(p.to_string()));
            }
            let p = normalize_name(p);
            let (key, map) = match p.strip_suffix('*') {
                Some(prefix) => (prefix.to_string(), &mut list.prefixes),
                None => (p.clone(), &mut list.names),
            };
            let ns = namespaced_by(&key).ok_or(AllowlistError::NotNamespaced(p))?;
            map.insert(key, ns);
        }
        Ok(list)
    }

    /// The safe sysctls of this kernel plus `unsafe_allowed` (kubelet builds its
    /// allowlist the same way).
    pub(crate) fn node<S: AsRef<str>>(
        kernel_release: Option<&str>,
        unsafe_allowed: &[S],
    ) -> Result<Allowlist, AllowlistError> {
        let mut all: Vec<String> = safe_sysctls(kernel_release)
            .into_iter()
            .map(str::to_string)
            .collect();
        all.extend(unsafe_allowed.iter().map(|s| s.as_ref().to_string()));
        Allowlist::new(&all)
    }

    /// kubelet's `validateSysctl`: allowlisted, and not in a namespace the pod
    /// shares with the host.
    pub(crate) fn check(
        &self,
        name: &str,
        host_net: bool,
        host_ipc: bool,
    ) -> Result<(), Forbidden> {
        if !is_valid_name(name) {
            return Err(Forbidden::InvalidName(name.to_string()));
        }
        let name = normalize_name(name);
        let ns = self.names.get(&name).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| name.starts_with(p.as_str()))
                .map(|(_, &ns)| ns)
        });
        match ns {
            None => Err(Forbidden::NotAllowlisted(name)),
            Some(Namespace::Ipc) if host_ipc => Err(Forbidden::HostNamespace(name, Namespace::Ipc)),
            Some(Namespace::Net) if host_net => Err(Forbidden::HostNamespace(name, Namespace::Net)),
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_sysctls_depend_on_the_kernel_version() {
        let all = safe_sysctls(Some("6.1.0-13-amd64"));
        assert_eq!(all.len(), 12);
        let old = safe_sysctls(Some("4.4.0"));
        assert!(old.contains(&"net.ipv4.ip_local_reserved_ports"));
        assert!(!old.contains(&"net.ipv4.tcp_keepalive_time"));
        let mid = safe_sysctls(Some("4.14.300"));
        assert!(mid.contains(&"net.ipv4.tcp_fin_timeout"));
        assert!(!mid.contains(&"net.ipv4.tcp_rmem"));
        assert_eq!(safe_sysctls(Some("4.15.0")).len(), 12);
        let older = safe_sysctls(Some("3.10.0-1160.el7"));
        assert!(!older.contains(&"net.ipv4.ip_local_reserved_ports"));
        assert!(older.contains(&"kernel.shm_rmid_forced"));
        assert_eq!(safe_sysctls(None).len(), 5);
        assert_eq!(safe_sysctls(Some("garbage")).len(), 5);
    }

    #[test]
    fn names_are_normalized_to_dots_as_kubelet_does() {
        assert_eq!(
            normalize_name("net/ipv4/conf/eno2.100/rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
        assert_eq!(
            normalize_name("net.ipv4.conf.eno2/100.rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
        assert_eq!(
            normalize_name("kernel/shm_rmid_forced"),
            "kernel.shm_rmid_forced"
        );
        assert_eq!(normalize_name("plain"), "plain");
    }

    #[test]
    fn patterns_are_checked_like_kubelets_allowlist() {
        assert!(
            Allowlist::new(&[
                "net.*",
                "kernel.msg*",
                "kernel.sem",
                "net/ipv4/tcp_fin_timeout"
            ])
            .is_ok()
        );
        assert_eq!(
            Allowlist::new(&["kernel.hostname"])
                .unwrap_err()
                .to_string(),
            "the sysctls \"kernel.hostname\" are not known to be namespaced"
        );
        assert!(matches!(
            Allowlist::new(&["vm.*"]),
            Err(AllowlistError::NotNamespaced(_))
        ));
        for bad in [
            "",
            "Net.core",
            "net..x",
            "net.*.x",
            "net.core-",
            "*.net",
            "net.x y",
        ] {
            assert!(
                matches!(Allowlist::new(&[bad]), Err(AllowlistError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            Allowlist::new(&["*"]),
            Err(AllowlistError::NotNamespaced(_))
        ));
    }

    #[test]
    fn pods_get_safe_ones_and_allowed_unsafe_ones_only() {
        let list = Allowlist::node(Some("6.1.0"), &["net.core.*", "kernel.msgmax"]).unwrap();
        assert_eq!(list.check("kernel.shm_rmid_forced", false, false), Ok(()));
        assert_eq!(
            list.check("net/ipv4/ip_unprivileged_port_start", false, false),
            Ok(())
        );
        assert_eq!(list.check("net.core.somaxconn", false, false), Ok(()));
        assert_eq!(list.check("kernel.msgmax", false, false), Ok(()));
        assert_eq!(
            list.check("kernel.msgmnb", false, false)
                .unwrap_err()
                .to_string(),
            "\"kernel.msgmnb\" not allowlisted"
        );
        assert_eq!(
            list.check("vm.swappiness", false, false)
                .unwrap_err()
                .to_string(),
            "\"vm.swappiness\" not allowlisted"
        );
        // Shared namespaces: net sysctls with hostNetwork, ipc ones with hostIPC.
        assert_eq!(
            list.check("net.core.somaxconn", true, false)
                .unwrap_err()
                .to_string(),
            "\"net.core.somaxconn\" not allowed with host net enabled"
        );
        assert_eq!(
            list.check("kernel.shm_rmid_forced", false, true)
                .unwrap_err()
                .to_string(),
            "\"kernel.shm_rmid_forced\" not allowed with host ipc enabled"
        );
        assert_eq!(list.check("kernel.shm_rmid_forced", true, false), Ok(()));
        assert_eq!(list.check("net.ipv4.tcp_syncookies", false, true), Ok(()));
        // Names that could climb out of /proc/sys never pass, even under an allowed prefix.
        for bad in [
            "net.core/../../kernel/core_pattern",
            "net.core..x",
            "net.core.*",
            "net.Core",
        ] {
            assert!(
                matches!(
                    list.check(bad, false, false),
                    Err(Forbidden::InvalidName(_))
                ),
                "{bad:?}"
            );
        }
    }
}

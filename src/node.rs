//! Node facts: the node's name, addresses, capacity and machine info, gathered once at
//! start from procfs, sysfs and /etc (what kubelet gets from cadvisor's `MachineInfo`
//! and its node-address setter). One home, so node status, the container manager and
//! the server all read the same facts.

use std::net::IpAddr;
use std::path::Path;

use tracing::{debug, warn};

/// The kind of a node address (kubelet's `NodeAddressType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddressType {
    InternalIP,
    Hostname,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeAddress {
    pub kind: AddressType,
    pub address: String,
}

/// What the node offers to pods before any reservation (kubelet's node capacity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capacity {
    /// CPUs this process may run on (the cpuset it is confined to).
    pub cpu_cores: u32,
    /// `MemTotal` from /proc/meminfo, in bytes.
    pub memory_bytes: u64,
    /// `maxPods`.
    pub pods: u32,
    /// Size of the filesystem holding the root dir (statvfs blocks × fragment
    /// size, as cadvisor reports it); 0 when it cannot be read.
    pub ephemeral_storage_bytes: u64,
}

/// The node's facts, read once at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeInfo {
    /// The node name (`--hostname-override` or the host name, lower-cased).
    pub name: String,
    /// `InternalIP` first, then `Hostname`, as kubelet lists them.
    pub addresses: Vec<NodeAddress>,
    pub capacity: Capacity,
    /// `SwapTotal` from /proc/meminfo, in bytes (cadvisor's `SwapCapacity`): what
    /// `LimitedSwap` shares out, and the Node's `nodeInfo.swap.capacity`.
    pub swap_capacity_bytes: u64,
    /// /etc/machine-id; empty when absent.
    pub machine_id: String,
    /// /sys/class/dmi/id/product_uuid; empty when absent or unreadable.
    pub system_uuid: String,
    /// /proc/sys/kernel/random/boot_id: changes on every boot.
    pub boot_id: String,
    /// The kernel release (`uname -r`).
    pub kernel_version: String,
    /// `PRETTY_NAME` from /etc/os-release, else "Linux" (as cadvisor reports it).
    pub os_image: String,
    /// `GOOS` spelling: always "linux".
    pub operating_system: &'static str,
    /// `GOARCH` spelling: "amd64", "arm64", ...
    pub architecture: &'static str,
}

/// The kernel's host name (what Go's `os.Hostname` reads on Linux); the node name
/// is this, lower-cased, unless `--hostname-override` says otherwise (see `options`).
pub(crate) fn host_name() -> std::io::Result<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
}

/// The size of the filesystem holding `path` (kubelet's ephemeral-storage
/// capacity); logged and None when statvfs fails.
pub(crate) fn filesystem_size(path: &Path) -> Option<u64> {
    match rustix::fs::statvfs(path) {
        Ok(st) => Some(st.f_blocks.saturating_mul(st.f_frsize)),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "cannot read the filesystem size (statvfs); ephemeral-storage capacity is 0");
            None
        }
    }
}

/// The address used when no global IPv4 address is found.
const LOOPBACK: &str = "127.0.0.1";

#[cfg(test)]
impl NodeInfo {
    /// A node with this name and capacity and no other fact known, for tests.
    pub(crate) fn with_capacity(name: &str, capacity: Capacity) -> NodeInfo {
        NodeInfo {
            name: name.to_string(),
            addresses: Vec::new(),
            capacity,
            swap_capacity_bytes: 0,
            machine_id: String::new(),
            system_uuid: String::new(),
            boot_id: String::new(),
            kernel_version: String::new(),
            os_image: String::new(),
            operating_system: "linux",
            architecture: "amd64",
        }
    }
}

impl NodeInfo {
    /// Reads the facts of this host, its InternalIPs from `node_ips` (`--node-ip`) or
    /// detected. A fact that cannot be read is logged with its file and the reason and
    /// left empty (or zero); it never stops the agent.
    pub(crate) fn gather(
        name: &str,
        max_pods: u32,
        root_dir: &Path,
        node_ips: &[IpAddr],
    ) -> NodeInfo {
        let internal = internal_ips(node_ips, detect_host_ip);
        let mut addresses: Vec<NodeAddress> = (internal.iter())
            .map(|ip| NodeAddress {
                kind: AddressType::InternalIP,
                address: ip.to_string(),
            })
            .collect();
        addresses.push(NodeAddress {
            kind: AddressType::Hostname,
            address: name.to_string(),
        });
        let cpu_cores = read_fact("/proc/self/status", true)
            .and_then(|s| cpus_allowed(&s))
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .map(|n| n.get() as u32)
            })
            .unwrap_or(1);
        let meminfo = read_fact("/proc/meminfo", true)
            .and_then(|m| crate::procfs::parse_meminfo(&m))
            .unwrap_or_default();
        let (memory_bytes, swap_capacity_bytes) = (meminfo.total, meminfo.swap_total);
        NodeInfo {
            name: name.to_string(),
            addresses,
            capacity: Capacity {
                cpu_cores,
                memory_bytes,
                pods: max_pods,
                ephemeral_storage_bytes: filesystem_size(root_dir).unwrap_or(0),
            },
            swap_capacity_bytes,
            machine_id: read_fact("/etc/machine-id", false)
                .or_else(|| read_fact("/var/lib/dbus/machine-id", false))
                .unwrap_or_default(),
            system_uuid: read_fact("/sys/class/dmi/id/product_uuid", false).unwrap_or_default(),
            boot_id: read_fact("/proc/sys/kernel/random/boot_id", true).unwrap_or_default(),
            kernel_version: read_fact("/proc/sys/kernel/osrelease", true).unwrap_or_default(),
            os_image: read_fact("/etc/os-release", false)
                .or_else(|| read_fact("/usr/lib/os-release", false))
                .and_then(|s| os_pretty_name(&s))
                .unwrap_or_else(|| "Linux".to_string()),
            operating_system: "linux",
            architecture: go_arch(std::env::consts::ARCH),
        }
    }

    /// The first `InternalIP` (the pods' `status.hostIP`).
    pub(crate) fn internal_ip(&self) -> &str {
        self.addresses
            .iter()
            .find(|a| a.kind == AddressType::InternalIP)
            .map_or(LOOPBACK, |a| a.address.as_str())
    }

    /// Every `InternalIP`, primary first (the pods' `status.hostIPs`): one per family.
    pub(crate) fn internal_ips(&self) -> Vec<String> {
        let ips: Vec<String> = (self.addresses.iter())
            .filter(|a| a.kind == AddressType::InternalIP)
            .map(|a| a.address.clone())
            .collect();
        if ips.is_empty() {
            vec![LOOPBACK.to_string()]
        } else {
            ips
        }
    }
}

/// A small host file, trimmed. Unreadable: logged (at warn when `expected`) and `None`.
/// Files are capped at 64 KiB: none of these is larger on a sane host.
fn read_fact(path: &str, expected: bool) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    let read = std::fs::File::open(Path::new(path))
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text));
    match read {
        Ok(_) => Some(text.trim().to_string()),
        Err(e) if expected => {
            warn!(file = path, error = %e, "cannot read a node fact; leaving it empty");
            None
        }
        Err(e) => {
            debug!(file = path, error = %e, "cannot read an optional node fact");
            None
        }
    }
}

/// kubelet's node address setter without a cloud provider: `--node-ip` as given (one
/// address, or a dual-stack pair) when it names one; else the address `detect` finds,
/// of IPv4 first unless the flag is `::` (then IPv6 first), as kubelet chooses.
pub(crate) fn internal_ips(
    node_ips: &[IpAddr],
    detect: impl Fn(bool) -> Option<IpAddr>,
) -> Vec<IpAddr> {
    match node_ips.first() {
        Some(first) if !first.is_unspecified() => node_ips.to_vec(),
        first => {
            let v6_first = matches!(first, Some(IpAddr::V6(_)));
            [v6_first, !v6_first]
                .into_iter()
                .find_map(&detect)
                .into_iter()
                .collect()
        }
    }
}

/// The host's first global address of one family, as `ip` lists them.
fn detect_host_ip(v6: bool) -> Option<IpAddr> {
    let family = if v6 { "-6" } else { "-4" };
    let out = std::process::Command::new("ip")
        .args(["-o", family, "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    first_inet(&String::from_utf8_lossy(&out.stdout))?
        .parse()
        .ok()
}

/// The first `inet`/`inet6` address in `ip -o addr` output, without its prefix length.
pub(crate) fn first_inet(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        words.find(|w| *w == "inet" || *w == "inet6")?;
        words.next()?.split('/').next().map(str::to_string)
    })
}

/// The number of CPUs in `Cpus_allowed_list` of `/proc/<pid>/status` text.
pub(crate) fn cpus_allowed(status: &str) -> Option<u32> {
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    cpu_list_len(line.trim())
}

/// The size of a kernel CPU list (`0-3,8,10-11`); `None` when malformed or empty.
pub(crate) fn cpu_list_len(list: &str) -> Option<u32> {
    let mut n: u32 = 0;
    for part in list.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (
                lo.trim().parse::<u32>().ok()?,
                hi.trim().parse::<u32>().ok()?,
            ),
            None => {
                let c = part.trim().parse::<u32>().ok()?;
                (c, c)
            }
        };
        n = n.checked_add(hi.checked_sub(lo)?.checked_add(1)?)?;
    }
    (n > 0).then_some(n)
}

/// `PRETTY_NAME` of os-release text, unquoted.
pub(crate) fn os_pretty_name(os_release: &str) -> Option<String> {
    let value = os_release
        .lines()
        .find_map(|l| l.trim().strip_prefix("PRETTY_NAME="))?;
    let value = value.trim();
    let unquoted = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
        .unwrap_or(value);
    (!unquoted.is_empty()).then(|| unquoted.to_string())
}

/// Rust's architecture name in Go's spelling (the `kubernetes.io/arch` label's).
pub(crate) fn go_arch(rust_arch: &'static str) -> &'static str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(cpu_list_len("0"), Some(1));
        assert_eq!(cpu_list_len("0-1"), Some(2));
        assert_eq!(cpu_list_len("0-3,8,10-11"), Some(7));
        for bad in ["", "3-1", "a", "0-", "1,,2"] {
            assert_eq!(cpu_list_len(bad), None, "{bad:?}");
        }
        let status = "Name:\tcat\nCpus_allowed:\tf\nCpus_allowed_list:\t0-3\nMems_allowed:\t1\n";
        assert_eq!(cpus_allowed(status), Some(4));
        assert_eq!(cpus_allowed("Name:\tcat\n"), None);
    }

    #[test]
    fn os_image_is_the_pretty_name() {
        let text = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
        assert_eq!(
            os_pretty_name(text).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            os_pretty_name("PRETTY_NAME='Alpine'\n").as_deref(),
            Some("Alpine")
        );
        assert_eq!(
            os_pretty_name("PRETTY_NAME=Plain\n").as_deref(),
            Some("Plain")
        );
        assert_eq!(os_pretty_name("PRETTY_NAME=\"\"\n"), None);
        assert_eq!(os_pretty_name("ID=x\n"), None);
    }

    #[test]
    fn the_first_global_ipv4_address_is_taken() {
        let out = "2: eth0    inet 10.1.2.3/24 brd 10.1.2.255 scope global eth0\\       valid_lft forever\n\
                   3: eth1    inet 192.0.2.7/32 scope global eth1\n";
        assert_eq!(first_inet(out).as_deref(), Some("10.1.2.3"));
        assert_eq!(first_inet(""), None);
    }

    #[test]
    fn architectures_use_gos_names() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }

    /// The parsers against this host's real files, checked with the kernel's own answers.
    #[test]
    fn the_real_proc_files_parse_and_agree_with_the_kernel() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        // The same set as the kernel's hex mask (`Cpus_allowed`), counted bit by bit.
        let mask_cpus: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed:"))
            .unwrap()
            .trim()
            .chars()
            .filter_map(|c| c.to_digit(16))
            .map(u32::count_ones)
            .sum();
        assert_eq!(cpus_allowed(&status), Some(mask_cpus));
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let total = crate::procfs::parse_meminfo(&meminfo).unwrap().total;
        let free_kb: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemFree:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        assert!(
            total > free_kb * 1024 && total.is_multiple_of(1024),
            "{total}"
        );

        let info = NodeInfo::gather("node-1", 110, Path::new("/"), &[]);
        let st = rustix::fs::statvfs("/").unwrap();
        assert_eq!(
            info.capacity.ephemeral_storage_bytes,
            st.f_blocks * st.f_frsize
        );
        assert!(info.capacity.ephemeral_storage_bytes > 0);
        assert_eq!(filesystem_size(Path::new("/no/such/dir")), None);
        assert_eq!(info.name, "node-1");
        assert_eq!(info.capacity.pods, 110);
        assert_eq!(info.capacity.cpu_cores, mask_cpus);
        assert_eq!(info.capacity.memory_bytes, total);
        let version = std::fs::read_to_string("/proc/version").unwrap();
        assert!(
            version.starts_with(&format!("Linux version {} ", info.kernel_version)),
            "{version:?} vs {:?}",
            info.kernel_version
        );
        // 36 characters, a new one on every boot.
        assert_eq!(info.boot_id.len(), 36, "{:?}", info.boot_id);
        assert_eq!(info.addresses[1].kind, AddressType::Hostname);
        assert_eq!(info.addresses[1].address, "node-1");
        assert!(info.internal_ip().parse::<std::net::Ipv4Addr>().is_ok());
        assert!(!info.os_image.is_empty());
    }

    #[test]
    fn internal_ips_follow_node_ip_as_kubelet() {
        let v4: IpAddr = "10.0.0.5".parse().unwrap();
        let v6: IpAddr = "fd00::5".parse().unwrap();
        let host = |v6_wanted: bool| Some(if v6_wanted { v6 } else { v4 });
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Given: as given, a pair in its order.
        assert_eq!(internal_ips(&[ip("172.18.0.2")], host), [ip("172.18.0.2")]);
        let pair = [ip("fc00:f853::2"), ip("172.18.0.2")];
        assert_eq!(internal_ips(&pair, host), pair);
        // Unset or 0.0.0.0: IPv4 first; '::': IPv6 first; a family the host lacks is skipped.
        assert_eq!(internal_ips(&[], host), [v4]);
        assert_eq!(internal_ips(&[ip("0.0.0.0")], host), [v4]);
        assert_eq!(internal_ips(&[ip("::")], host), [v6]);
        assert_eq!(
            internal_ips(&[ip("::")], |v6_wanted| (!v6_wanted).then_some(v4)),
            [v4]
        );
        assert!(internal_ips(&[], |_| None).is_empty());
    }
}

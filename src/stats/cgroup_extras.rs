//! What `/metrics/cadvisor` reads at scrape time beyond the advisor's rounds: per-device
//! block I/O, the processes and their descriptors, the CPU spec and the network counters
//! of a cgroup, from the files cAdvisor's libcontainer handler reads. The advisor reads
//! every second what eviction and the Summary API need; these families only a scrape
//! wants, so they are read when one comes (a handful of small files per cgroup).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::cm::CgroupTree;
use crate::locks::Locked as _;

/// How long a cgroup's files are served before they are read again: cAdvisor's
/// housekeeping interval under kubelet, whose scrapes serve the stats of its latest
/// housekeeping. A scrape at rest then costs little more than the text.
const HOUSEKEEPING: Duration = Duration::from_secs(10);

/// Control and proc files read here are small; reads stop here.
const MAX_FILE_BYTES: u64 = 256 * 1024;
/// Processes of one cgroup whose descriptors are counted, at most.
const MAX_PIDS: usize = 8192;
/// Descriptors looked at per scrape and cgroup, at most (a bound, not a sample: the
/// count stops growing there).
const MAX_FDS: usize = 1 << 20;
/// Block devices and interfaces kept per cgroup, at most.
const MAX_ROWS: usize = 256;

/// One block device's counters in one cgroup.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct DeviceIo {
    pub major: u64,
    pub minor: u64,
    /// `/dev/<disk>` for a whole disk the machine lists in `/sys/block`, else empty
    /// (cAdvisor names devices from its machine info's disk map).
    pub device: String,
    /// Bytes by operation as the kernel names them (v1: `Read`, `Write`, `Sync`,
    /// `Async`, `Discard`, `Total`; v2: `Read`, `Write`).
    pub bytes: Vec<(String, u64)>,
    /// Requests completed by operation, named the same way.
    pub ios: Vec<(String, u64)>,
}

impl DeviceIo {
    fn op(list: &[(String, u64)], op: &str) -> Option<u64> {
        list.iter().find(|(o, _)| o == op).map(|(_, v)| *v)
    }
    pub(super) fn bytes(&self, op: &str) -> Option<u64> {
        DeviceIo::op(&self.bytes, op)
    }
    pub(super) fn ios(&self, op: &str) -> Option<u64> {
        DeviceIo::op(&self.ios, op)
    }
}

/// cAdvisor's process stats: the cgroup's own processes (`cgroup.procs`, not those of
/// child cgroups), their descriptors and sockets, and the pids controller's tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Processes {
    pub count: u64,
    pub fds: u64,
    pub sockets: u64,
    /// `pids.current`, `pids.max` (0: no limit, as cAdvisor writes it).
    pub threads: u64,
    pub threads_max: u64,
}

/// cAdvisor's CPU spec: shares (v2: from `cpu.weight`), the CFS period and the quota
/// (None without one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct CpuSpec {
    pub shares: u64,
    pub period: u64,
    pub quota: Option<u64>,
}

/// One interface of `/proc/<pid>/net/dev`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Interface {
    pub name: String,
    /// Receive then transmit: bytes, packets, errors, dropped.
    pub rx: [u64; 4],
    pub tx: [u64; 4],
}

/// What one cgroup's scrape-time files say; parts that could not be read are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Extras {
    pub io: Vec<DeviceIo>,
    pub processes: Option<Processes>,
    pub cpu: Option<CpuSpec>,
    pub network: Vec<Interface>,
    /// A container's init process's soft open-files limit (-1: unlimited).
    pub max_open_files: Option<i64>,
    /// When the files were read (None: not read, the scrape's time stands).
    pub time: Option<SystemTime>,
}

/// What a row's cgroup is, which says where its network counters come from: the root
/// (pid 1's namespace, the machine's, as cAdvisor reads it), a pod (a process of its
/// own, in the sandbox's namespace), or a container (none: it shares its pod's; but
/// its init process's open-files limit, as cAdvisor's containerd handler has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RowKind {
    Root,
    Pod,
    Container,
}

/// A small file's text, at most `MAX_FILE_BYTES` of it (kernel files: `/proc`, `/sys`,
/// cgroups).
pub(super) fn read_small(path: &Path) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_FILE_BYTES)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// Reads the scrape-time files of the host's cgroups, remembering device names for the
/// scrape.
pub(crate) struct ExtrasReader<'a> {
    tree: &'a CgroupTree,
    v1: bool,
    devices: HashMap<(u64, u64), String>,
    sys: PathBuf,
    proc: PathBuf,
}

impl<'a> ExtrasReader<'a> {
    pub(crate) fn new(tree: &'a CgroupTree) -> ExtrasReader<'a> {
        ExtrasReader::with_roots(tree, Path::new("/sys"), Path::new("/proc"))
    }

    /// A reader whose `/sys` and `/proc` are elsewhere (for tests).
    pub(crate) fn with_roots(tree: &'a CgroupTree, sys: &Path, proc: &Path) -> ExtrasReader<'a> {
        ExtrasReader {
            tree,
            v1: tree.version().uses_v1_controllers(),
            devices: HashMap::new(),
            sys: sys.to_path_buf(),
            proc: proc.to_path_buf(),
        }
    }

    /// The cgroup `rel`'s files (`""`: the root).
    pub(super) fn read(&mut self, rel: &str, kind: RowKind) -> Extras {
        let mut io = self.io(rel);
        for d in &mut io {
            d.device = self.device_name(d.major, d.minor);
        }
        let pids = self.procs(rel);
        let processes = pids.as_ref().map(|p| self.processes(rel, p));
        let net_pid = match kind {
            RowKind::Container => None,
            RowKind::Root => Some(1),
            RowKind::Pod => self.first_process_below(rel),
        };
        let network = net_pid.map(|p| self.interfaces(p)).unwrap_or_default();
        // The container's init: the oldest process, the lowest pid short of a wrap.
        let init = pids.as_ref().and_then(|p| p.iter().min().copied());
        let max_open_files = match kind {
            RowKind::Container => init.and_then(|p| self.max_open_files(p)),
            _ => None,
        };
        Extras {
            io,
            processes,
            cpu: self.cpu_spec(rel),
            network,
            max_open_files,
            time: Some(SystemTime::now()),
        }
    }

    fn file(&self, controller: &str, rel: &str, name: &str) -> Option<String> {
        read_small(&self.tree.file_of(controller, rel, name)?)
    }

    /// v2 `io.stat`; v1 the first blkio stat pair with entries (CFQ, BFQ, then the
    /// throttle files, as runc tries them).
    fn io(&self, rel: &str) -> Vec<DeviceIo> {
        if !self.v1 {
            return self
                .file("io", rel, "io.stat")
                .map(|t| parse_io_stat(&t))
                .unwrap_or_default();
        }
        for prefix in ["blkio.", "blkio.bfq.", "blkio.throttle."] {
            let bytes = self.file("blkio", rel, &format!("{prefix}io_service_bytes_recursive"));
            let ios = self.file("blkio", rel, &format!("{prefix}io_serviced_recursive"));
            let found = parse_blkio(bytes.as_deref().unwrap_or(""), ios.as_deref().unwrap_or(""));
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }

    /// `/dev/<name>` of a whole disk (one listed in `/sys/block`), else empty.
    fn device_name(&mut self, major: u64, minor: u64) -> String {
        let sys = &self.sys;
        self.devices
            .entry((major, minor))
            .or_insert_with(|| {
                let link = std::fs::read_link(sys.join(format!("dev/block/{major}:{minor}")));
                let name = link
                    .ok()
                    .and_then(|l| l.file_name().and_then(|n| n.to_str()).map(str::to_string));
                name.filter(|n| sys.join("block").join(n).exists())
                    .map(|n| format!("/dev/{n}"))
                    .unwrap_or_default()
            })
            .clone()
    }

    /// The cgroup's own processes (the cpu hierarchy's `cgroup.procs` on v1).
    fn procs(&self, rel: &str) -> Option<Vec<u32>> {
        let text = self.file("cpu", rel, "cgroup.procs")?;
        Some(parse_pids(&text))
    }

    /// The first process of the cgroup or of one below it (depth-first, bounded).
    fn first_process_below(&self, rel: &str) -> Option<u32> {
        let dir = self.tree.file_of("cpu", rel, "")?;
        first_pid_in(&dir, 0)
    }

    fn processes(&self, rel: &str, pids: &[u32]) -> Processes {
        let (mut fds, mut sockets, mut seen) = (0u64, 0u64, 0usize);
        for pid in pids.iter().take(MAX_PIDS) {
            let Ok(entries) = std::fs::read_dir(self.proc.join(format!("{pid}/fd"))) else {
                continue;
            };
            for e in entries.flatten() {
                if seen >= MAX_FDS {
                    break;
                }
                seen += 1;
                fds += 1;
                let link = std::fs::read_link(e.path());
                if link.is_ok_and(|l| l.as_os_str().as_encoded_bytes().starts_with(b"socket")) {
                    sockets += 1;
                }
            }
        }
        let number = |name| {
            self.file("pids", rel, name)
                .and_then(|t| t.trim().parse().ok())
        };
        Processes {
            count: pids.len() as u64,
            fds,
            sockets,
            threads: number("pids.current").unwrap_or(0),
            threads_max: number("pids.max").unwrap_or(0),
        }
    }

    /// cAdvisor's spec: any cgroup with a cpu directory has one; a file it cannot read
    /// counts 0, a quota of `-1`/`max` none.
    fn cpu_spec(&self, rel: &str) -> Option<CpuSpec> {
        if !self.tree.file_of("cpu", rel, "")?.is_dir() {
            return None;
        }
        let number = |name| -> Option<u64> { self.file("cpu", rel, name)?.trim().parse().ok() };
        if self.v1 {
            return Some(CpuSpec {
                shares: number("cpu.shares").unwrap_or(0),
                period: number("cpu.cfs_period_us").unwrap_or(0),
                quota: number("cpu.cfs_quota_us").filter(|q| *q > 0),
            });
        }
        let max = self.file("cpu", rel, "cpu.max");
        let (quota, period) = max.as_deref().map_or((None, None), parse_cpu_max);
        Some(CpuSpec {
            shares: number("cpu.weight").map_or(0, shares_of_weight),
            period: period.unwrap_or(0),
            quota: quota.filter(|q| *q > 0),
        })
    }

    fn max_open_files(&self, pid: u32) -> Option<i64> {
        let limits = read_small(&self.proc.join(format!("{pid}/limits")))?;
        parse_max_open_files(&limits)
    }

    fn interfaces(&self, pid: u32) -> Vec<Interface> {
        read_small(&self.proc.join(format!("{pid}/net/dev")))
            .map(|t| parse_net_dev(&t))
            .unwrap_or_default()
    }
}

/// Each row's files as last read, served until they are [`HOUSEKEEPING`] old; None
/// without a cgroup tree (then the families are left out).
pub(crate) struct ExtrasCache {
    tree: Option<CgroupTree>,
    entries: Mutex<HashMap<(String, RowKind), Extras>>,
}

impl ExtrasCache {
    pub(crate) fn new(tree: Option<CgroupTree>) -> ExtrasCache {
        ExtrasCache {
            tree,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `f` with a lookup of each row's files at `now`: the kept ones while fresh,
    /// else read anew. Rows `f` does not ask for are forgotten (their cgroups are gone).
    pub(super) fn serve<R>(
        &self,
        now: SystemTime,
        f: impl FnOnce(&mut dyn FnMut(&str, RowKind) -> Extras) -> R,
    ) -> R {
        let mut entries = self.entries.locked();
        let mut kept = std::mem::take(&mut *entries);
        let mut reader = self.tree.as_ref().map(ExtrasReader::new);
        let fresh = |x: &Extras| {
            x.time
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age < HOUSEKEEPING)
        };
        let mut lookup = |rel: &str, kind: RowKind| {
            let key = (rel.to_string(), kind);
            let x = match kept.remove(&key) {
                Some(x) if fresh(&x) => x,
                _ => reader.as_mut().map_or_else(Extras::default, |r| Extras {
                    time: Some(now),
                    ..r.read(rel, kind)
                }),
            };
            entries.insert(key, x.clone());
            x
        };
        f(&mut lookup)
    }
}

/// The first pid in `dir`'s `cgroup.procs` or, depth-first, in a child's.
fn first_pid_in(dir: &Path, depth: usize) -> Option<u32> {
    if depth > 8 {
        return None;
    }
    let own = read_small(&dir.join("cgroup.procs")).and_then(|t| parse_pids(&t).first().copied());
    if own.is_some() {
        return own;
    }
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .take(MAX_ROWS)
        .collect();
    children.sort();
    children.iter().find_map(|c| first_pid_in(c, depth + 1))
}

/// The soft `Max open files` of a `/proc/<pid>/limits` (`unlimited`: -1, as cAdvisor).
fn parse_max_open_files(limits: &str) -> Option<i64> {
    match crate::procfs::soft_limit(limits, "Max open files")? {
        crate::procfs::Limit::Unlimited => Some(-1),
        crate::procfs::Limit::Max(n) => i64::try_from(n).ok(),
    }
}

fn parse_pids(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn major_minor(field: &str) -> Option<(u64, u64)> {
    let (ma, mi) = field.split_once(':')?;
    Some((ma.parse().ok()?, mi.parse().ok()?))
}

/// v2 `io.stat`: `MAJ:MIN rbytes=… wbytes=… rios=… wios=… …`, as runc turns it into
/// `Read`/`Write` bytes and requests.
pub(super) fn parse_io_stat(text: &str) -> Vec<DeviceIo> {
    let mut out = Vec::new();
    for line in text.lines().take(MAX_ROWS) {
        let mut fields = line.split_whitespace();
        let Some((major, minor)) = fields.next().and_then(major_minor) else {
            continue;
        };
        let mut d = DeviceIo {
            major,
            minor,
            ..DeviceIo::default()
        };
        for kv in fields {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Ok(v) = v.parse::<u64>() else { continue };
            match k {
                "rbytes" => d.bytes.push(("Read".into(), v)),
                "wbytes" => d.bytes.push(("Write".into(), v)),
                "rios" => d.ios.push(("Read".into(), v)),
                "wios" => d.ios.push(("Write".into(), v)),
                _ => {}
            }
        }
        out.push(d);
    }
    out
}

/// v1 blkio stat pairs: `MAJ:MIN Op value` lines (the closing `Total N` line skipped).
pub(super) fn parse_blkio(bytes: &str, ios: &str) -> Vec<DeviceIo> {
    let mut out: Vec<DeviceIo> = Vec::new();
    for (text, is_bytes) in [(bytes, true), (ios, false)] {
        for line in text.lines().take(MAX_ROWS * 8) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [dev, op, value] = f[..] else { continue };
            let (Some((major, minor)), Ok(value)) = (major_minor(dev), value.parse::<u64>()) else {
                continue;
            };
            let at = match out
                .iter()
                .position(|d| d.major == major && d.minor == minor)
            {
                Some(i) => i,
                None if out.len() < MAX_ROWS => {
                    out.push(DeviceIo {
                        major,
                        minor,
                        ..DeviceIo::default()
                    });
                    out.len() - 1
                }
                None => continue,
            };
            let list = if is_bytes {
                &mut out[at].bytes
            } else {
                &mut out[at].ios
            };
            list.push((op.to_string(), value));
        }
    }
    out
}

/// v2 `cpu.max`: `max|QUOTA PERIOD` → (quota, period).
fn parse_cpu_max(text: &str) -> (Option<u64>, Option<u64>) {
    let mut f = text.split_whitespace();
    let quota = f.next().and_then(|q| q.parse().ok());
    let period = f.next().and_then(|p| p.parse().ok());
    (quota, period)
}

/// cAdvisor's v2 weight → shares (`2 + (weight − 1) · 262142 / 9999`).
fn shares_of_weight(weight: u64) -> u64 {
    2 + weight.saturating_sub(1).saturating_mul(262_142) / 9999
}

/// The interfaces of a `/proc/<pid>/net/dev` but those cAdvisor ignores (names
/// starting `lo`, `veth`, `docker`, `nerdctl`); nothing if a line is malformed, as
/// cAdvisor then trusts none of the file.
pub(super) fn parse_net_dev(text: &str) -> Vec<Interface> {
    let four = |c: [u64; 8]| [c[0], c[1], c[2], c[3]];
    let Some(devices) = crate::procfs::net_devices(text)
        .take(MAX_ROWS)
        .collect::<Option<Vec<_>>>()
    else {
        return Vec::new();
    };
    (devices.into_iter())
        .filter(|d| !crate::procfs::ignored_by_cadvisor(d.name))
        .map(|d| Interface {
            name: d.name.to_string(),
            rx: four(d.rx),
            tx: four(d.tx),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_stat_gives_read_and_write_per_device() {
        let d = parse_io_stat(
            "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n253:1 rbytes=1 wbytes=0 rios=1 wios=0\n",
        );
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].major, d[0].minor), (8, 0));
        assert_eq!(d[0].bytes("Write"), Some(8192));
        assert_eq!(d[0].ios("Read"), Some(1));
        assert_eq!(d[1].bytes("Read"), Some(1));
    }

    #[test]
    fn blkio_keeps_every_operation_and_skips_the_total_line() {
        let bytes = "8:0 Read 10\n8:0 Write 20\n8:0 Sync 5\n8:0 Async 25\n8:0 Discard 0\n8:0 Total 30\nTotal 30\n";
        let ios = "8:0 Read 1\n8:0 Write 2\nTotal 3\n";
        let d = parse_blkio(bytes, ios);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].bytes.len(), 6);
        assert_eq!(d[0].bytes("Total"), Some(30));
        assert_eq!(d[0].ios("Write"), Some(2));
    }

    #[test]
    fn net_dev_leaves_out_loopback_and_veths() {
        let text = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n  eth0: 5000  40 1 2 0 0 0 0 3000 30 3 4 0 0 0 0\nveth12: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n";
        let i = parse_net_dev(text);
        assert_eq!(i.len(), 1);
        assert_eq!(i[0].name, "eth0");
        assert_eq!(i[0].rx, [5000, 40, 1, 2]);
        assert_eq!(i[0].tx, [3000, 30, 3, 4]);
        assert!(parse_net_dev("h\nh\neth0: 1 2\n").is_empty());
    }

    /// A row's files are served as read for a housekeeping interval, then read anew.
    #[test]
    fn files_are_kept_for_a_housekeeping_interval() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let stat = |w: u64| {
            std::fs::write(
                dir.path().join("a/io.stat"),
                format!("8:0 rbytes=0 wbytes={w} rios=0 wios=1\n"),
            )
            .unwrap();
        };
        stat(100);
        let tree = CgroupTree::new(dir.path(), crate::cm::CgroupVersion::V2).unwrap();
        let cache = ExtrasCache::new(Some(tree));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let written =
            |at: SystemTime| cache.serve(at, |f| f("a", RowKind::Container).io[0].bytes("Write"));
        assert_eq!(written(t0), Some(100));
        stat(200);
        assert_eq!(written(t0 + Duration::from_secs(9)), Some(100), "kept");
        assert_eq!(
            written(t0 + Duration::from_secs(10)),
            Some(200),
            "read anew"
        );
        // A row not asked for in a scrape is forgotten.
        cache.serve(t0, |_| ());
        assert!(cache.entries.locked().is_empty());
    }

    #[test]
    fn the_open_files_limit_is_the_soft_one() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n";
        assert_eq!(parse_max_open_files(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_open_files(unlimited), Some(-1));
    }

    #[test]
    fn v2_weights_map_back_to_shares_and_max_is_no_quota() {
        assert_eq!(shares_of_weight(100), 2597);
        assert_eq!(shares_of_weight(1), 2);
        assert_eq!(parse_cpu_max("max 100000"), (None, Some(100_000)));
        assert_eq!(parse_cpu_max("50000 100000"), (Some(50_000), Some(100_000)));
    }
}

//! The metric advisor's cgroup reader: the same stat files as every round before, read
//! through descriptors kept open between rounds.
//!
//! At 110 pods the advisor reads about 1,300 control files a second. Opening one costs
//! a path walk through kernfs (a lookup and a permission check per level) and a close;
//! on the bench VM that was a quarter of the advisor's CPU, and reading to the end took
//! three `read` calls and a fresh `String` per file. A kernel control file is a
//! `seq_file`: a `pread` at offset 0 makes the kernel produce it anew, so one open
//! descriptor and one `pread` into one reused buffer give the same text. A descriptor
//! of a removed cgroup fails (`ENODEV`), and is then dropped with its cgroup; cgroups
//! not read in a round are closed at its end. The descriptors kept are bounded by a
//! share of `RLIMIT_NOFILE`; past it, files are opened for each read as before.
//!
//! Test trees (plain files, no kernel) are read the same way: `pread` at 0 of a plain
//! file gives its current content. An open plain file outlives its directory, though,
//! so on a test tree a kept cgroup is first checked to be there (as the kernel's
//! `ENODEV` would say).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::CgroupError;
use super::files::{self, MAX_FILE_BYTES, err};
use super::stat::{cache_split_from_stat, dir_of, memory_from_stat, throttling};
use super::tree::CgroupTree;
use crate::contracts::{CgroupReading, CpuReading, MemoryReading, Pressure};

/// What one cgroup's reading is made of, in the order [`StatReader::stats`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// v1 `cpuacct.usage` (ns); it also stands for the cgroup being there.
    CpuUsage,
    /// `cpu.stat`: throttling (v1, v2) and usage (v2; it stands for the cgroup there).
    CpuStat,
    MemoryUsage,
    /// v2 `memory.swap.current`, read with the usage (before the stat, so a
    /// reading kept for reuse has it).
    SwapUsage,
    MemoryStat,
    MemoryLimit,
    /// v2 `memory.swap.max`, reused like the memory limit.
    SwapLimit,
    Pids,
}

/// The files of one cgroup version: the part, the v1 controller, the file name.
const V1_FILES: [(Part, &str, &str); 6] = [
    (Part::CpuUsage, "cpuacct", "cpuacct.usage"),
    (Part::CpuStat, "cpu", "cpu.stat"),
    (Part::MemoryUsage, "memory", "memory.usage_in_bytes"),
    (Part::MemoryStat, "memory", "memory.stat"),
    (Part::MemoryLimit, "memory", "memory.limit_in_bytes"),
    (Part::Pids, "pids", "pids.current"),
];
const V2_FILES: [(Part, &str, &str); 7] = [
    (Part::CpuStat, "", "cpu.stat"),
    (Part::MemoryUsage, "", "memory.current"),
    (Part::SwapUsage, "", "memory.swap.current"),
    (Part::MemoryStat, "", "memory.stat"),
    (Part::MemoryLimit, "", "memory.max"),
    (Part::SwapLimit, "", "memory.swap.max"),
    (Part::Pids, "", "pids.current"),
];

/// One cgroup's open files (None: missing, or not kept), and the round it was read in.
#[derive(Debug)]
struct OpenCgroup {
    files: Vec<Option<File>>,
    round: u64,
    /// The memory limit file's number as last read (`None` inside: no number), and
    /// the round it was read in.
    limit: Option<(Option<u64>, u64)>,
    /// The same of the swap limit file.
    swap_limit: Option<(Option<u64>, u64)>,
    /// v1: whether the cgroup has a CFS quota (`cpu.cfs_quota_us` ≥ 0), and the round
    /// that was read in; without one its `cpu.stat` counters cannot move.
    quota: Option<(bool, u64)>,
    /// v1: `cpu.cfs_quota_us`, opened at its first read and kept with the others
    /// (not counted against the budget: one per kept cgroup at most).
    quota_file: Option<File>,
    /// The throttling counters as last read from `cpu.stat`.
    throttling: Option<Option<crate::contracts::Throttling>>,
    /// The memory reading made with a fresh usage file, and its round (see
    /// [`StatReader::detail_rounds`]).
    memory: Option<(MemoryReading, u64)>,
    /// `pids.current` as last read, and its round.
    pids: Option<(Option<u64>, u64)>,
}

/// v1 reports "no memory limit" as the largest page-aligned value; anything this
/// large means unlimited.
const UNLIMITED_MEMORY: u64 = 1 << 62;

/// Rounds a memory limit or a CPU quota is reused for: they change only when the pod
/// is resized, and kubelet's summary takes limits from cAdvisor's container spec,
/// which is not read every second either. One file fewer per cgroup and round.
const LIMIT_ROUNDS: u64 = 10;

/// Reads cgroups' usage (see the module doc). One per collector: not shared.
#[derive(Debug)]
pub(crate) struct StatReader {
    tree: CgroupTree,
    v1: bool,
    /// Every hierarchy is a kernel cgroup filesystem (see the module doc).
    kernel: bool,
    open: HashMap<String, OpenCgroup>,
    /// Descriptors kept now, and the most that may be.
    kept: usize,
    max_kept: usize,
    round: u64,
    /// Rounds the kubelet side of a kept cgroup's reading is reused for: the usage
    /// with page cache (so the working set), rss and faults, and the process count.
    /// 1 reads them every round; the pod collector reuses them for 10 (see
    /// [`StatReader::reusing_details`]).
    detail_rounds: u64,
    buf: Vec<u8>,
}

/// The share of `RLIMIT_NOFILE` the readers may keep open: a quarter, at most 64k.
fn max_kept_for(open_files_limit: u64) -> usize {
    usize::try_from(open_files_limit / 4)
        .unwrap_or(usize::MAX)
        .min(65_536)
}

/// The text of a file's content: control files are ASCII; anything else is unreadable.
fn text(bytes: &[u8]) -> Option<&str> {
    std::str::from_utf8(bytes).ok()
}

impl StatReader {
    pub(crate) fn new(tree: CgroupTree) -> StatReader {
        StatReader::with_limit(tree, crate::rlimit::open_files_limit())
    }

    /// A reader that keeps at most a quarter of `open_files_limit` descriptors.
    pub(crate) fn with_limit(tree: CgroupTree, open_files_limit: u64) -> StatReader {
        StatReader {
            v1: tree.version().uses_v1_controllers(),
            kernel: tree.hierarchies().iter().all(|h| h.kernel),
            tree,
            open: HashMap::new(),
            kept: 0,
            max_kept: max_kept_for(open_files_limit),
            round: 0,
            detail_rounds: 1,
            buf: vec![0; usize::try_from(MAX_FILE_BYTES).unwrap_or(65_536) + 1],
        }
    }

    /// This reader, reading the kubelet side of a cgroup (usage with page cache,
    /// working set, rss, faults, process count) every [`LIMIT_ROUNDS`] rounds only, and
    /// koordlet's side (CPU usage, memory without page cache) every round. kubelet's
    /// summary and eviction ranking take pod stats from cAdvisor's 10 s housekeeping,
    /// so they are no staler than kubelet's; koordlet reads only `cpuacct.usage` and
    /// `memory.stat` each second. At 110 pods that is 330 of 770 files a second fewer.
    pub(crate) fn reusing_details(mut self) -> StatReader {
        self.detail_rounds = LIMIT_ROUNDS;
        self
    }

    fn files(&self) -> &'static [(Part, &'static str, &'static str)] {
        if self.v1 { &V1_FILES } else { &V2_FILES }
    }

    /// Whether the kubelet side of `rel`'s last reading (see
    /// [`StatReader::reusing_details`]) was read in this round rather than reused.
    pub(crate) fn read_details_now(&self, rel: &str) -> bool {
        self.open
            .get(rel)
            .is_none_or(|c| c.pids.is_none_or(|(_, at)| at == self.round))
    }

    /// The descriptors kept now (for tests and the bench).
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.kept
    }

    /// Closes the files of every cgroup not read since the last call: they are gone,
    /// or no longer asked for.
    pub(crate) fn end_round(&mut self) {
        let round = self.round;
        let mut closed = 0;
        self.open.retain(|_, c| {
            let keep = c.round == round;
            if !keep {
                closed += c.files.iter().flatten().count();
            }
            keep
        });
        self.kept -= closed;
        self.round += 1;
    }

    fn forget(&mut self, rel: &str) {
        if let Some(c) = self.open.remove(rel) {
            self.kept -= c.files.iter().flatten().count();
        }
    }

    /// The directory of the file at `index` for `rel`.
    fn dir(&self, index: usize, rel: &str) -> Result<PathBuf, CgroupError> {
        let (_, controller, _) = self.files()[index];
        let hierarchy = if self.v1 {
            self.tree.controller(controller).ok_or_else(|| {
                err(
                    "stats",
                    self.tree.root(),
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("the {controller} controller is not mounted"),
                    ),
                )
            })?
        } else {
            &self.tree.hierarchies()[0]
        };
        dir_of(&self.tree, hierarchy, rel)
    }

    /// Opens one file read-only, not through a symlink; None when it is not there.
    fn open_file(path: &Path) -> io::Result<Option<File>> {
        match files::open_nofollow(path) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads `file` from offset 0 into the buffer; the byte count, bounded.
    fn pread(buf: &mut [u8], file: &File) -> io::Result<usize> {
        let n = file.read_at(buf, 0)?;
        if n == buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("larger than {MAX_FILE_BYTES} bytes"),
            ));
        }
        Ok(n)
    }

    /// The files of `rel`, opened now if they were not kept (None: past the budget,
    /// so each read opens its own).
    fn opened(&mut self, rel: &str) -> Result<Option<&mut OpenCgroup>, CgroupError> {
        if !self.open.contains_key(rel) {
            let count = self.files().len();
            if self.kept + count > self.max_kept {
                return Ok(None);
            }
            let mut files = Vec::with_capacity(count);
            for i in 0..count {
                let dir = self.dir(i, rel);
                let file = match dir {
                    Ok(d) => Self::open_file(&d.join(self.files()[i].2))
                        .map_err(|e| err("stats", &d.join(self.files()[i].2), e))?,
                    Err(_) => None,
                };
                files.push(file);
            }
            let opened = files.iter().flatten().count();
            if opened == 0 {
                // Gone, or not made yet: nothing to keep.
                return Ok(None);
            }
            self.kept += opened;
            self.open.insert(
                rel.to_string(),
                OpenCgroup {
                    files,
                    round: 0,
                    limit: None,
                    swap_limit: None,
                    quota: None,
                    quota_file: None,
                    throttling: None,
                    memory: None,
                    pids: None,
                },
            );
        }
        let round = self.round;
        let c = self.open.get_mut(rel).expect("inserted above");
        c.round = round;
        Ok(Some(c))
    }

    /// What the cgroup `rel` uses now; a `NotFound` error when it is gone. Pressure
    /// is left empty (read apart, every 10 s); `pids` false skips `pids.current` (a
    /// container's reading has no process count).
    pub(crate) fn stats(&mut self, rel: &str, pids: bool) -> Result<CgroupReading, CgroupError> {
        match self.read_parts(rel, pids) {
            Ok(r) => Ok(r),
            // A kept descriptor of a cgroup removed (and maybe made again) since it was
            // opened: read once more from fresh descriptors.
            Err(e) if self.open.contains_key(rel) => {
                self.forget(rel);
                tracing::trace!(cgroup = rel, error = %e, "cgroup files reopened");
                self.read_parts(rel, pids)
            }
            Err(e) => Err(e),
        }
    }

    /// One read of every part; text parsed in place.
    fn read_parts(&mut self, rel: &str, pids: bool) -> Result<CgroupReading, CgroupError> {
        let time = SystemTime::now();
        let kept = self.opened(rel)?.is_some();
        let mut reading = Reading::default();
        let mut buf = std::mem::take(&mut self.buf);
        // Out of the map while it is read (no allocation: the key goes back in).
        let mut entry = if kept {
            self.open.remove_entry(rel)
        } else {
            None
        };
        let open = entry.as_mut().map(|(_, c)| c);
        let result = self.read_each(rel, open, pids, &mut buf, &mut reading);
        if let Some((key, c)) = entry {
            self.open.insert(key, c);
        }
        self.buf = buf;
        result?;
        if !reading.cgroup_there {
            // Its first file is missing: is the cgroup itself gone?
            let dir = self.dir(0, rel)?;
            if !files::is_dir(&dir) {
                self.forget(rel);
                return Err(err(
                    "stats",
                    &dir,
                    io::Error::new(io::ErrorKind::NotFound, "no such cgroup"),
                ));
            }
        }
        Ok(reading.finish(time))
    }

    /// Whether the v1 cgroup `rel` has a CFS quota, read again every [`LIMIT_ROUNDS`]
    /// through a kept descriptor (an unreadable quota counts as one, so `cpu.stat` is
    /// read).
    fn has_quota(&self, rel: &str, c: &mut OpenCgroup, buf: &mut [u8]) -> bool {
        if let Some((quota, at)) = c.quota
            && self.round.saturating_sub(at) < LIMIT_ROUNDS
        {
            return quota;
        }
        if c.quota_file.is_none() {
            let cpu = (self.files().iter()).position(|(p, _, _)| *p == Part::CpuStat);
            c.quota_file = cpu
                .and_then(|i| self.dir(i, rel).ok())
                .and_then(|d| Self::open_file(&d.join("cpu.cfs_quota_us")).ok().flatten());
        }
        let quota = (c.quota_file.as_ref())
            .and_then(|f| Self::pread(buf, f).ok())
            .and_then(|n| text(&buf[..n]))
            .and_then(|t| t.trim().parse::<i64>().ok())
            .is_none_or(|q| q >= 0);
        c.quota = Some((quota, self.round));
        quota
    }

    /// A kept cgroup's memory or swap limit as last read, while within [`LIMIT_ROUNDS`].
    fn kept_limit(&self, part: Part, c: &OpenCgroup) -> Option<Option<u64>> {
        let kept = match part {
            Part::MemoryLimit => c.limit,
            Part::SwapLimit => c.swap_limit,
            _ => None,
        };
        let (limit, at) = kept?;
        (self.round.saturating_sub(at) < LIMIT_ROUNDS).then_some(limit)
    }

    /// Whether `part` of a kept cgroup is reused from an earlier round rather than
    /// read (the usage file and `pids.current`, within [`StatReader::detail_rounds`]);
    /// if so, the reused value is put in `reading`.
    fn reused(&self, part: Part, open: Option<&OpenCgroup>, reading: &mut Reading) -> bool {
        let fresh = |at: u64| self.round.saturating_sub(at) < self.detail_rounds;
        match (part, open) {
            (Part::MemoryUsage, Some(c)) => match c.memory {
                Some((m, at)) if fresh(at) => {
                    reading.reused_memory = Some(m);
                    true
                }
                _ => false,
            },
            // The reused memory reading holds its swap usage.
            (Part::SwapUsage, Some(_)) => reading.reused_memory.is_some(),
            (Part::Pids, Some(c)) => match c.pids {
                Some((pids, at)) if fresh(at) => {
                    reading.pids = pids;
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Reads each file of `rel` into `buf` in turn (through its kept descriptors when
    /// `open`, else opened for this read) and hands its text to `reading`.
    fn read_each(
        &self,
        rel: &str,
        mut open: Option<&mut OpenCgroup>,
        pids: bool,
        buf: &mut [u8],
        reading: &mut Reading,
    ) -> Result<(), CgroupError> {
        if open.is_some() && !self.kernel && !files::is_dir(&self.dir(0, rel)?) {
            return Err(err(
                "stats",
                &self.dir(0, rel)?,
                io::Error::from_raw_os_error(rustix::io::Errno::NODEV.raw_os_error()),
            ));
        }
        for (i, (part, _, name)) in self.files().iter().enumerate() {
            if *part == Part::Pids && !pids {
                continue;
            }
            if self.reused(*part, open.as_deref(), reading) {
                continue;
            }
            if let Some(c) = open.as_deref()
                && let Some(limit) = self.kept_limit(*part, c)
            {
                match part {
                    Part::SwapLimit => reading.swap_limit = limit,
                    _ => reading.memory_limit = limit,
                }
                continue;
            }
            // v1 `cpu.stat` holds only the throttling counters, which stand still
            // without a CFS quota (BestEffort, and every container without a CPU
            // limit): its last counters stand for it.
            if *part == Part::CpuStat
                && self.v1
                && let Some(c) = open.as_deref_mut()
                && let Some(throttling) = c.throttling
                && !self.has_quota(rel, c, buf)
            {
                reading.throttling = throttling;
                continue;
            }
            let read = match open.as_deref() {
                Some(c) => c.files[i].as_ref().map(|f| Self::pread(buf, f)),
                None => match self.dir(i, rel) {
                    Ok(d) => {
                        let path = d.join(name);
                        Self::open_file(&path)
                            .map_err(|e| err("stats", &path, e))?
                            .map(|f| Self::pread(buf, &f))
                    }
                    Err(_) => None,
                },
            };
            let content = match read {
                Some(Ok(n)) => text(&buf[..n]),
                Some(Err(e)) => return Err(err("stats", &PathBuf::from(rel).join(name), e)),
                None => None,
            };
            reading.take(*part, content, self.v1);
            if let Some(c) = open.as_deref_mut() {
                match part {
                    Part::MemoryLimit => c.limit = Some((reading.memory_limit, self.round)),
                    Part::SwapLimit => c.swap_limit = Some((reading.swap_limit, self.round)),
                    Part::CpuStat => c.throttling = Some(reading.throttling),
                    Part::MemoryStat if reading.memory_usage.is_some() => {
                        c.memory = reading.memory.map(|m| (m, self.round));
                    }
                    Part::Pids => c.pids = Some((reading.pids, self.round)),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// The parts of one reading as they are read.
#[derive(Debug, Default)]
struct Reading {
    cgroup_there: bool,
    cpu_usage: Option<u64>,
    throttling: Option<crate::contracts::Throttling>,
    memory_usage: Option<u64>,
    /// The last reading made with a fresh usage file, when this round reuses it.
    reused_memory: Option<MemoryReading>,
    memory: Option<MemoryReading>,
    memory_limit: Option<u64>,
    swap_usage: Option<u64>,
    swap_limit: Option<u64>,
    pids: Option<u64>,
}

fn number(text: Option<&str>) -> Option<u64> {
    text?.trim().parse().ok()
}

impl Reading {
    fn take(&mut self, part: Part, content: Option<&str>, v1: bool) {
        match part {
            Part::CpuUsage => {
                self.cgroup_there = content.is_some();
                self.cpu_usage = number(content);
            }
            Part::CpuStat => {
                if !v1 {
                    self.cgroup_there = content.is_some();
                    self.cpu_usage = content
                        .and_then(|s| files::stat_field(s, "usage_usec"))
                        .map(|us| us.saturating_mul(1000));
                }
                self.throttling = content.and_then(|s| throttling(s, v1));
            }
            Part::MemoryUsage => self.memory_usage = number(content),
            Part::SwapUsage => self.swap_usage = number(content),
            // The limit comes after the stat: the reading is finished at the end.
            Part::MemoryStat => {
                self.memory = match (self.memory_usage, self.reused_memory) {
                    (Some(usage), _) => content.map(|stat| MemoryReading {
                        swap_usage_bytes: self.swap_usage,
                        ..memory_from_stat(usage, stat, v1)
                    }),
                    (None, Some(earlier)) => content.map(|stat| {
                        let (without, with) = cache_split_from_stat(stat, v1);
                        MemoryReading {
                            without_cache_bytes: without,
                            with_cache_bytes: with,
                            ..earlier
                        }
                    }),
                    (None, None) => None,
                };
            }
            Part::MemoryLimit => self.memory_limit = number(content),
            // `max` is no number: no limit.
            Part::SwapLimit => self.swap_limit = number(content),
            Part::Pids => self.pids = number(content),
        }
    }

    fn finish(self, time: SystemTime) -> CgroupReading {
        let (limit, swap_limit) = (self.memory_limit, self.swap_limit);
        CgroupReading {
            time,
            cpu: self.cpu_usage.map(|usage| CpuReading {
                usage_core_nanos: usage,
                usage_nano_cores: None,
                throttling: self.throttling,
            }),
            memory: self.memory.map(|mut m| {
                m.limit_bytes = limit.filter(|l| *l < UNLIMITED_MEMORY);
                m.swap_limit_bytes = swap_limit.filter(|l| *l < UNLIMITED_MEMORY);
                m
            }),
            pids: self.pids,
            pressure: Pressure::default(),
        }
    }
}

//! The v1 memory controller's threshold notification files (`memory.usage_in_bytes`
//! and `cgroup.event_control`), opened through the checked path of the cgroup layer:
//! the eviction manager's memcg notifier registers an
//! eventfd with them. cgroup v2 has no `cgroup.event_control`; kubelet does not
//! notify there either (it runs a disabled notifier), so opening fails on v2.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::files::{self, err};
use super::{CgroupError, CgroupTree};

/// The file whose value a threshold is compared with (kubelet's `memoryUsageAttribute`).
pub(crate) const USAGE_FILE: &str = "memory.usage_in_bytes";
/// Where a threshold is registered.
pub(crate) const CONTROL_FILE: &str = "cgroup.event_control";

/// The two open files of one cgroup's memory threshold registration.
#[derive(Debug)]
pub(crate) struct ThresholdFiles {
    dir: PathBuf,
    usage: File,
    control: File,
}

fn open(dir: &std::path::Path, name: &str, write: bool) -> Result<File, CgroupError> {
    let path = dir.join(name);
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits().cast_signed())
        .open(&path)
        .map_err(|e| err("open", &path, e))
}

impl ThresholdFiles {
    /// Registers `eventfd` to be signalled when the cgroup's memory usage crosses
    /// `threshold` bytes (either way): one write of `<eventfd> <usage fd> <bytes>`, as
    /// the kernel wants it. The registration lasts until the eventfd is closed.
    pub(crate) fn register(
        &mut self,
        eventfd: BorrowedFd<'_>,
        threshold: u64,
    ) -> Result<(), CgroupError> {
        let line = format!(
            "{} {} {threshold}",
            eventfd.as_raw_fd(),
            self.usage.as_raw_fd()
        );
        self.control
            .write_all(line.as_bytes())
            .map_err(|e| err("write", &self.dir.join(CONTROL_FILE), e))
    }

    /// The cgroup directory, for logs.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }
}

impl CgroupTree {
    /// Opens the memory threshold files of the cgroup `rel` (`""` is the root) in the
    /// memory hierarchy; an error on cgroup v2, which has no threshold notification.
    pub(crate) fn memory_threshold_files(&self, rel: &str) -> Result<ThresholdFiles, CgroupError> {
        const OP: &str = "open memory threshold";
        if !self.version().uses_v1_controllers() {
            return Err(err(
                OP,
                self.root(),
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "memory threshold notification is not supported on cgroup v2",
                ),
            ));
        }
        let dir = files::existing(OP, self.controller_dir(OP, "memory", rel)?)?;
        Ok(ThresholdFiles {
            usage: open(&dir, USAGE_FILE, false)?,
            control: open(&dir, CONTROL_FILE, true)?,
            dir,
        })
    }
}

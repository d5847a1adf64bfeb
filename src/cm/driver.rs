//! The cgroup driver: how cgroup names are spelled and who creates them
//! (`--cgroup-driver` / `cgroupDriver`).

/// kubelet's two drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CgroupDriver {
    /// Paths as they are: `/kubepods/burstable/pod<uid>`.
    Cgroupfs,
    /// systemd slices: `/kubepods.slice/kubepods-burstable.slice/…`.
    Systemd,
}

impl CgroupDriver {
    /// The spelling of the flag and config file.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }

    /// Parses the flag's text.
    pub(crate) fn parse(text: &str) -> Option<CgroupDriver> {
        match text {
            "cgroupfs" => Some(CgroupDriver::Cgroupfs),
            "systemd" => Some(CgroupDriver::Systemd),
            _ => None,
        }
    }
}

impl std::fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

//! The process's open-file limit, set at start as kubelet does with `maxOpenFiles`:
//! pods' log files, CRI streams and HTTP clients all cost descriptors, and the soft
//! limit a service inherits (often 1024) is far too low for a node agent.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// What [`raise_open_files`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenFiles {
    /// The soft limit now in force.
    pub soft: u64,
    /// The hard limit now in force.
    pub hard: u64,
    /// True when `maxOpenFiles` could not be set and the hard limit was used instead.
    pub capped: bool,
}

fn value(v: Option<u64>) -> u64 {
    v.unwrap_or(u64::MAX) // None is RLIM_INFINITY
}

/// Sets soft and hard `RLIMIT_NOFILE` to `wanted` (kubelet's `rlimit.SetNumFiles`);
/// when that is not allowed (no CAP_SYS_RESOURCE, or above `fs.nr_open`), raises the
/// soft limit to the hard limit if that is lower than `wanted`. Errors only if even
/// reading the limit fails.
pub(crate) fn raise_open_files(wanted: u64) -> std::io::Result<OpenFiles> {
    let before = getrlimit(Resource::Nofile);
    let set = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(wanted),
            maximum: Some(wanted),
        },
    );
    if set.is_ok() {
        return Ok(OpenFiles {
            soft: wanted,
            hard: wanted,
            capped: false,
        });
    }
    let hard = value(before.maximum);
    let soft = wanted.min(hard);
    if soft > value(before.current) {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(soft),
                maximum: before.maximum,
            },
        )?;
    }
    let now = getrlimit(Resource::Nofile);
    Ok(OpenFiles {
        soft: value(now.current),
        hard: value(now.maximum),
        capped: true,
    })
}

/// The soft limit in force now.
pub(crate) fn open_files_limit() -> u64 {
    value(getrlimit(Resource::Nofile).current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_lowers_below_what_was_asked_or_the_hard_limit() {
        // Runs in the test process: ask for what is already there, so nothing changes.
        let now = getrlimit(Resource::Nofile);
        let hard = value(now.maximum);
        let wanted = hard.min(1 << 20);
        let r = raise_open_files(wanted).unwrap();
        assert!(r.soft >= wanted.min(hard), "{r:?}");
        assert_eq!(open_files_limit(), r.soft);
    }
}

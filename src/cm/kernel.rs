//! kubelet's kernel tunables (`setupKernelTunables` in `container_manager_linux.go`,
//! the values from `component-helpers/node/util/sysctl`): six sysctls kubelet wants
//! at its values. With `protectKernelDefaults` a differing one stops the start, each
//! named with its value and the expected one; without it kubelet writes its values.
//! The files are read under a `/proc/sys` root given by the caller, so a test can
//! point it at a tree of its own.

use std::path::Path;

use tracing::info;

/// Where the kernel's tunables live.
pub(crate) const PROC_SYS: &str = "/proc/sys";

/// kubelet's tunables: the path below `/proc/sys` (kubelet's names) and the value.
pub(crate) const KERNEL_TUNABLES: &[(&str, i64)] = &[
    // No memory over-commit handling: the kubelet's limits decide, not the heuristic.
    ("vm/overcommit_memory", 1),
    // An OOM calls the OOM killer instead of panicking the node.
    ("vm/panic_on_oom", 0),
    // A panicked node reboots after 10 s, and an oops panics it.
    ("kernel/panic", 10),
    ("kernel/panic_on_oops", 1),
    // Room for a key per container (docker made one each).
    ("kernel/keys/root_maxkeys", 1_000_000),
    ("kernel/keys/root_maxbytes", 25_000_000),
];

/// One tunable that is not as kubelet wants it, or cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TunableError {
    /// kubelet's words, under `protectKernelDefaults`.
    #[error("invalid kernel flag: {flag}, expected value: {expected}, actual value: {actual}")]
    Differs {
        flag: &'static str,
        expected: i64,
        actual: i64,
    },
    #[error("cannot read kernel flag {flag}: {cause}")]
    Read {
        flag: &'static str,
        cause: std::io::Error,
    },
    #[error("kernel flag {flag} is not a number: {text:?}")]
    NotANumber { flag: &'static str, text: String },
    #[error("cannot set kernel flag {flag} to {expected}: {cause}")]
    Write {
        flag: &'static str,
        expected: i64,
        cause: std::io::Error,
    },
}

/// Every tunable that failed, in kubelet's aggregate form (`[a, b]` for more than one).
#[derive(Debug)]
pub(crate) struct TunablesError(pub Vec<TunableError>);

impl std::fmt::Display for TunablesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        match all.as_slice() {
            [one] => write!(f, "{one}"),
            many => write!(f, "[{}]", many.join(", ")),
        }
    }
}

impl std::error::Error for TunablesError {}

/// A tunable's value as kubelet reads it: the file's text, trimmed of spaces and
/// newlines, as a decimal integer.
fn read(root: &Path, flag: &'static str) -> Result<i64, TunableError> {
    use std::io::Read as _;
    let mut text = String::new();
    // A sysctl file holds one number; 64 bytes is plenty and bounds the read.
    std::fs::File::open(root.join(flag))
        .and_then(|f| f.take(64).read_to_string(&mut text))
        .map_err(|cause| TunableError::Read { flag, cause })?;
    let trimmed = text.trim_matches([' ', '\n']);
    trimmed.parse().map_err(|_| TunableError::NotANumber {
        flag,
        text: trimmed.to_string(),
    })
}

/// kubelet's `setupKernelTunables`: with `protect`, every tunable that differs is an
/// error; without it, each differing one is written (and said at `-v=2`).
pub(crate) fn setup_kernel_tunables(root: &Path, protect: bool) -> Result<(), TunablesError> {
    let mut errors = Vec::new();
    for &(flag, expected) in KERNEL_TUNABLES {
        let actual = match read(root, flag) {
            Ok(v) => v,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if actual == expected {
            continue;
        }
        if protect {
            errors.push(TunableError::Differs {
                flag,
                expected,
                actual,
            });
            continue;
        }
        info!(
            flag,
            expectedValue = expected,
            actualValue = actual,
            "updating kernel flag to kubelet's value (protectKernelDefaults is false)"
        );
        if let Err(cause) = std::fs::write(root.join(flag), expected.to_string()) {
            errors.push(TunableError::Write {
                flag,
                expected,
                cause,
            });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(TunablesError(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/sys` tree with kubelet's values, `changes` applied over them.
    fn tree(changes: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for &(flag, value) in KERNEL_TUNABLES {
            let path = dir.path().join(flag);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let text = (changes.iter().find(|(f, _)| *f == flag))
                .map_or_else(|| format!("{value}\n"), |(_, v)| (*v).to_string());
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    fn value(dir: &tempfile::TempDir, flag: &str) -> String {
        std::fs::read_to_string(dir.path().join(flag)).unwrap()
    }

    #[test]
    fn protect_refuses_each_differing_tunable_by_name_and_value() {
        let dir = tree(&[("vm/overcommit_memory", "0\n"), ("kernel/panic", " 1 ")]);
        let err = setup_kernel_tunables(dir.path(), true).unwrap_err();
        assert_eq!(
            err.to_string(),
            "[invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0, \
             invalid kernel flag: kernel/panic, expected value: 10, actual value: 1]"
        );
        // Nothing is written under protectKernelDefaults.
        assert_eq!(value(&dir, "vm/overcommit_memory"), "0\n");
        let dir = tree(&[("kernel/keys/root_maxbytes", "20000")]);
        assert_eq!(
            setup_kernel_tunables(dir.path(), true)
                .unwrap_err()
                .to_string(),
            "invalid kernel flag: kernel/keys/root_maxbytes, expected value: 25000000, actual value: 20000"
        );
        assert!(setup_kernel_tunables(tree(&[]).path(), true).is_ok());
    }

    #[test]
    fn without_protect_kubelets_values_are_written() {
        let dir = tree(&[
            ("vm/overcommit_memory", "0\n"),
            ("kernel/panic_on_oops", "0"),
        ]);
        setup_kernel_tunables(dir.path(), false).unwrap();
        assert_eq!(value(&dir, "vm/overcommit_memory"), "1");
        assert_eq!(value(&dir, "kernel/panic_on_oops"), "1");
        // One already right is not rewritten.
        assert_eq!(value(&dir, "kernel/panic"), "10\n");
        setup_kernel_tunables(dir.path(), true).unwrap();
    }

    #[test]
    fn unreadable_or_unparsable_tunables_are_errors_in_both_modes() {
        let dir = tree(&[("vm/panic_on_oom", "x")]);
        std::fs::remove_file(dir.path().join("kernel/panic")).unwrap();
        for protect in [true, false] {
            let err = setup_kernel_tunables(dir.path(), protect).unwrap_err();
            assert_eq!(err.0.len(), 2, "{err}");
            let text = err.to_string();
            assert!(
                text.contains("kernel flag vm/panic_on_oom is not a number: \"x\""),
                "{text}"
            );
            assert!(
                text.contains("cannot read kernel flag kernel/panic"),
                "{text}"
            );
        }
    }

    /// The host's own tunables read as numbers (only read: writing would change the
    /// machine the tests run on), and protect mode names exactly those that differ.
    #[test]
    fn the_hosts_proc_sys_is_read() {
        let root = Path::new(PROC_SYS);
        let differing: Vec<&str> = KERNEL_TUNABLES
            .iter()
            .filter(|(flag, want)| read(root, flag).unwrap() != *want)
            .map(|(flag, _)| *flag)
            .collect();
        match setup_kernel_tunables(root, true) {
            Ok(()) => assert!(differing.is_empty()),
            Err(e) => {
                let named: Vec<&str> = (e.0.iter())
                    .map(|t| match t {
                        TunableError::Differs { flag, .. } => *flag,
                        other => panic!("{other}"),
                    })
                    .collect();
                assert_eq!(named, differing);
            }
        }
    }
}

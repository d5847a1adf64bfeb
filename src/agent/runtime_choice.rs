//! Which container runtime a `--root-dir` was run with, recorded in
//! `<root-dir>/container-runtime` so a later start cannot silently switch between the
//! managed containerd and an external endpoint: pods started by the first runtime would
//! keep running there, unseen and unmanaged.
//!
//! The override is deliberate and manual: stop oxlet, deal with the old runtime's pods,
//! delete the record file, start with the new choice (which is then recorded).

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The record's file name under `--root-dir`.
pub(super) const RECORD_FILE: &str = "container-runtime";
/// A record is one short line; anything longer is not ours.
const MAX_RECORD_BYTES: u64 = 4096;

/// A runtime oxlet can run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RuntimeChoice {
    /// oxlet's own containerd under `<root-dir>/containerd`.
    Managed,
    /// An external CRI endpoint (`unix://…`).
    Endpoint(String),
}

impl fmt::Display for RuntimeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeChoice::Managed => write!(f, "the managed containerd"),
            RuntimeChoice::Endpoint(e) => write!(f, "the container runtime at {e}"),
        }
    }
}

impl RuntimeChoice {
    fn to_line(&self) -> String {
        match self {
            RuntimeChoice::Managed => "managed\n".to_string(),
            RuntimeChoice::Endpoint(e) => format!("endpoint {e}\n"),
        }
    }

    fn parse(text: &str) -> Option<RuntimeChoice> {
        match text.trim_end_matches('\n') {
            "managed" => Some(RuntimeChoice::Managed),
            line => line
                .strip_prefix("endpoint ")
                .filter(|e| e.starts_with("unix:///") && !e.contains('\n'))
                .map(|e| RuntimeChoice::Endpoint(e.to_string())),
        }
    }

    /// How to start oxlet so that it makes this choice again.
    fn how_to_start(&self) -> String {
        match self {
            RuntimeChoice::Managed => "without --container-runtime-endpoint".to_string(),
            RuntimeChoice::Endpoint(e) => format!("with --container-runtime-endpoint={e}"),
        }
    }
}

/// Reading, writing or honouring the record failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ChoiceError {
    #[error("{}: cannot read the recorded container runtime: {source}", file.display())]
    Read {
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: not a container runtime record (expected \"managed\" or \"endpoint unix:///…\"); delete it if it is not oxlet's", file.display())]
    Malformed { file: PathBuf },
    #[error("{}: cannot record the container runtime: {source}", file.display())]
    Write {
        file: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{}: this --root-dir was last run with {recorded}, but this start would use {requested}; \
         its pods would be orphaned. Start oxlet {} as before, or, to switch runtimes on purpose, \
         stop the pods of the old runtime and delete {}",
        file.display(),
        recorded.how_to_start(),
        file.display()
    )]
    Conflict {
        file: PathBuf,
        recorded: RuntimeChoice,
        requested: RuntimeChoice,
    },
}

/// The record's path for a root dir.
pub(super) fn record_path(root_dir: &Path) -> PathBuf {
    root_dir.join(RECORD_FILE)
}

/// The recorded choice; None when nothing was recorded yet.
pub(super) fn load(root_dir: &Path) -> Result<Option<RuntimeChoice>, ChoiceError> {
    let file = record_path(root_dir);
    let f = match std::fs::File::open(&file) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ChoiceError::Read { file, source }),
    };
    let mut text = String::new();
    if let Err(source) = f.take(MAX_RECORD_BYTES).read_to_string(&mut text) {
        return Err(ChoiceError::Read { file, source });
    }
    RuntimeChoice::parse(&text)
        .map(Some)
        .ok_or(ChoiceError::Malformed { file })
}

/// Refuses a start whose runtime differs from the recorded one.
pub(super) fn check(
    root_dir: &Path,
    recorded: Option<&RuntimeChoice>,
    requested: &RuntimeChoice,
) -> Result<(), ChoiceError> {
    match recorded {
        Some(r) if r != requested => Err(ChoiceError::Conflict {
            file: record_path(root_dir),
            recorded: r.clone(),
            requested: requested.clone(),
        }),
        _ => Ok(()),
    }
}

/// Records `choice` (write to a temp file, then rename, so a crash never leaves half a record).
pub(super) fn save(root_dir: &Path, choice: &RuntimeChoice) -> Result<(), ChoiceError> {
    let file = record_path(root_dir);
    let tmp = root_dir.join(format!(".{RECORD_FILE}.tmp"));
    let write = || -> io::Result<()> {
        std::fs::create_dir_all(root_dir)?;
        std::fs::write(&tmp, choice.to_line())?;
        std::fs::rename(&tmp, &file)
    };
    write().map_err(|source| ChoiceError::Write {
        file: file.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EP: &str = "unix:///run/containerd/containerd.sock";

    #[test]
    fn round_trip_and_absent() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        assert!(load(&root).unwrap().is_none());
        for c in [RuntimeChoice::Managed, RuntimeChoice::Endpoint(EP.into())] {
            save(&root, &c).unwrap();
            assert_eq!(load(&root).unwrap(), Some(c));
        }
    }

    #[test]
    fn conflict_names_the_record_and_the_way_back() {
        let root = Path::new("/var/lib/oxlet");
        let e = check(
            root,
            Some(&RuntimeChoice::Managed),
            &RuntimeChoice::Endpoint(EP.into()),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("/var/lib/oxlet/container-runtime: "), "{e}");
        assert!(e.contains("last run with the managed containerd"), "{e}");
        assert!(
            e.contains(&format!("would use the container runtime at {EP}")),
            "{e}"
        );
        assert!(e.contains("without --container-runtime-endpoint"), "{e}");
        assert!(e.contains("delete /var/lib/oxlet/container-runtime"), "{e}");
        let e = check(
            root,
            Some(&RuntimeChoice::Endpoint(EP.into())),
            &RuntimeChoice::Managed,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!("with --container-runtime-endpoint={EP}")),
            "{e}"
        );
        assert!(check(root, None, &RuntimeChoice::Managed).is_ok());
        assert!(check(root, Some(&RuntimeChoice::Managed), &RuntimeChoice::Managed).is_ok());
    }

    #[test]
    fn foreign_content_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for text in ["docker\n", "endpoint tcp://x\n", ""] {
            std::fs::write(record_path(dir.path()), text).unwrap();
            let e = load(dir.path()).unwrap_err().to_string();
            assert!(
                e.contains("not a container runtime record"),
                "{text:?}: {e}"
            );
        }
    }
}

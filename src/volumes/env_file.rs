//! `env[].valueFrom.fileKeyRef` (EnvFiles, beta and on by default since 1.35): a
//! variable's value read from a `.env` file a container (usually an init container)
//! wrote into an emptyDir of the pod. The file is read at container creation, below
//! the volume's directory only, and within bounds; the format is kubelet's strict one
//! (`pkg/kubelet/util/env`): `KEY=VALUE` lines, comments and blank lines skipped, a
//! trailing backslash continuing a value on the next line.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{FileKeySelector, Pod};

use super::pod_volumes::empty_dir_path;
use crate::safe_path::{self, BeneathError};

/// The largest env file read (kubelet reads any size; 1 MiB is far above any set of
/// variables and keeps a pod from making oxlet read a disk's worth).
pub(crate) const MAX_ENV_FILE: u64 = 1 << 20;
/// The longest line, as Go's `bufio.Scanner` that kubelet reads with.
const MAX_LINE: usize = 64 * 1024;

/// Why a `fileKeyRef` gives no value: the container's `CreateContainerConfigError`,
/// in kubelet's words where it has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnvFileError {
    #[error("cannot find the volume {0:?} referenced by FileKeyRef")]
    NoVolume(String),
    /// kubelet's message leaves out which file; the log line beside it names it.
    #[error("couldn't parse env file")]
    Parse { file: PathBuf, reason: String },
    #[error("environment variable key {key:?} not found in file {file:?}")]
    KeyMissing { key: String, file: PathBuf },
}

/// The value `sel` names, or None when it is optional and the key is missing or
/// empty (kubelet treats an empty value as missing). The volume must be one of the
/// pod's emptyDirs (the API validates that; a static pod is validated the same way).
pub(crate) fn file_key_value(
    pod: &Pod,
    pods_dir: &Path,
    sel: &FileKeySelector,
) -> Result<Option<String>, EnvFileError> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    let is_empty_dir = volumes
        .unwrap_or_default()
        .iter()
        .any(|v| v.name == sel.volume_name && v.empty_dir.is_some());
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let dir = match empty_dir_path(pods_dir, uid, &sel.volume_name) {
        Ok(dir) if is_empty_dir => dir,
        _ => return Err(EnvFileError::NoVolume(sel.volume_name.clone())),
    };
    let file = dir.join(&sel.path);
    // kubelet's message names neither the file nor the cause; the log line does.
    let parse = |reason: String| {
        tracing::warn!(pod = %crate::pod::pod_ref(pod), file = %file.display(), reason = %reason, "failed to parse env file");
        EnvFileError::Parse {
            file: file.clone(),
            reason,
        }
    };
    let rel = safe_path::relative(&sel.path).map_err(|e| parse(e.to_string()))?;
    let text = match safe_path::read_beneath(&dir, rel, MAX_ENV_FILE) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| parse("it is not UTF-8".into()))?,
        Err(e @ BeneathError::NotFound) => {
            return Err(parse(format!(
                "failed to open environment variable file: {e}"
            )));
        }
        Err(e) => return Err(parse(e.to_string())),
    };
    match parse_env(&text, &sel.key).map_err(|e| parse(e.to_string()))? {
        Some(v) if !v.is_empty() => Ok(Some(v)),
        _ if sel.optional == Some(true) => Ok(None),
        _ => Err(EnvFileError::KeyMissing {
            key: sel.key.clone(),
            file,
        }),
    }
}

/// Why `.env` text is malformed, in kubelet's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnvSyntaxError {
    #[error("line {0} is longer than {max} bytes", max = MAX_LINE)]
    LongLine(usize),
    #[error("invalid environment variable format at line {line}: {what} in continuation")]
    InContinuation { line: usize, what: &'static str },
    #[error("invalid environment variable format at line {0}")]
    Format(usize),
    #[error("unexpected end of file: unfinished line continuation")]
    UnfinishedContinuation,
}

/// The value of `key` in `.env` text: the first `KEY=VALUE` line naming it, with the
/// whitespace around the name and the value trimmed. Leading whitespace is ignored;
/// blank lines and `#` comments are skipped, but not inside a continuation; a line
/// ending in `\` continues on the next, joined with one space. Every line up to the
/// key must be well formed.
pub(crate) fn parse_env(text: &str, key: &str) -> Result<Option<String>, EnvSyntaxError> {
    let mut pending: Option<String> = None;
    for (n, raw) in text.lines().enumerate() {
        let n = n + 1;
        if raw.len() > MAX_LINE {
            return Err(EnvSyntaxError::LongLine(n));
        }
        let line = raw.trim_start_matches([' ', '\t']);
        if line.is_empty() || line.starts_with('#') {
            if pending.is_some() {
                let what = if line.is_empty() {
                    "blank line"
                } else {
                    "comment"
                };
                return Err(EnvSyntaxError::InContinuation { line: n, what });
            }
            continue;
        }
        let trimmed = line.trim_end_matches([' ', '\t']);
        let continues = trimmed
            .strip_suffix('\\')
            .map(|t| t.trim_end_matches([' ', '\t']));
        let whole = match (pending.take(), continues) {
            (Some(mut so_far), Some(part)) => {
                so_far.push(' ');
                so_far.push_str(part);
                pending = Some(so_far);
                continue;
            }
            (None, Some(part)) => {
                pending = Some(part.to_string());
                continue;
            }
            (Some(so_far), None) => format!("{so_far} {trimmed}"),
            (None, None) => line.to_string(),
        };
        let Some((name, value)) = whole.split_once('=') else {
            return Err(EnvSyntaxError::Format(n));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(EnvSyntaxError::Format(n));
        }
        if name == key {
            return Ok(Some(value.trim().to_string()));
        }
    }
    if pending.is_some() {
        return Err(EnvSyntaxError::UnfinishedContinuation);
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PodSpec, Volume};

    #[test]
    fn values_are_trimmed_and_the_first_line_naming_the_key_wins() {
        let text = "# comment\n\n  A = one  \nB=two=three\nA=again\n";
        assert_eq!(parse_env(text, "A").unwrap().as_deref(), Some("one"));
        assert_eq!(parse_env(text, "B").unwrap().as_deref(), Some("two=three"));
        assert_eq!(parse_env(text, "C").unwrap(), None);
        assert_eq!(parse_env("E=\n", "E").unwrap().as_deref(), Some(""));
    }

    #[test]
    fn a_backslash_continues_the_value_joined_by_one_space() {
        let text = "LONG=first \\\n   second\\\n third\nNEXT=x\n";
        assert_eq!(
            parse_env(text, "LONG").unwrap().as_deref(),
            Some("first second third")
        );
        assert_eq!(parse_env(text, "NEXT").unwrap().as_deref(), Some("x"));
    }

    #[test]
    fn malformed_lines_before_the_key_are_errors() {
        for (text, want) in [
            ("junk\nA=1\n", "at line 1"),
            ("=1\nA=1\n", "at line 1"),
            ("X=a\\\n\nA=1\n", "blank line in continuation"),
            ("X=a\\\n# c\nA=1\n", "comment in continuation"),
            ("X=a\\\n", "unfinished line continuation"),
        ] {
            let err = parse_env(text, "A").unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
        let long = format!("X={}\nA=1\n", "v".repeat(MAX_LINE));
        assert!(
            parse_env(&long, "A")
                .unwrap_err()
                .to_string()
                .contains("longer than")
        );
    }

    fn pod_with_empty_dir(uid: &str) -> Pod {
        Pod {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![
                    Volume {
                        name: "config".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    },
                    Volume {
                        name: "host".into(),
                        host_path: Some(Default::default()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sel(volume: &str, path: &str, key: &str, optional: bool) -> FileKeySelector {
        FileKeySelector {
            volume_name: volume.into(),
            path: path.into(),
            key: key.into(),
            optional: Some(optional),
        }
    }

    #[test]
    fn the_value_comes_from_the_pods_empty_dir_only() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path();
        let dir = pods.join("u1/volumes/kubernetes.io~empty-dir/config");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vars.env"), "TOKEN=abc\nEMPTY=\n").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("out")).unwrap();
        let pod = pod_with_empty_dir("u1");
        let get = |s: &FileKeySelector| file_key_value(&pod, pods, s);
        assert_eq!(
            get(&sel("config", "vars.env", "TOKEN", false)),
            Ok(Some("abc".into()))
        );
        assert_eq!(get(&sel("config", "vars.env", "MISSING", true)), Ok(None));
        assert_eq!(get(&sel("config", "vars.env", "EMPTY", true)), Ok(None));
        assert!(matches!(
            get(&sel("config", "vars.env", "EMPTY", false)),
            Err(EnvFileError::KeyMissing { .. })
        ));
        assert_eq!(
            get(&sel("host", "vars.env", "TOKEN", false)),
            Err(EnvFileError::NoVolume("host".into()))
        );
        assert_eq!(
            get(&sel("host", "x", "K", false)).unwrap_err().to_string(),
            "cannot find the volume \"host\" referenced by FileKeyRef"
        );
        for path in ["out", "../../../../etc/hostname", "missing.env"] {
            let err = get(&sel("config", path, "K", false)).unwrap_err();
            assert!(matches!(err, EnvFileError::Parse { .. }), "{path}: {err}");
            assert_eq!(err.to_string(), "couldn't parse env file");
        }
    }
}

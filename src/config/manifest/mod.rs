//! One static pod manifest: decode (YAML or JSON), validate, default, and the
//! static pod's identity, each in its own file.
//!
//! Mirrors kubelet's `config/common.go` (`tryDecodeSinglePod` + `applyDefaults`):
//! the API defaults the scheme would apply on decode come first, then a
//! `ValidatePodCreate`-style subset, then the static-pod defaults (UID from a hash,
//! `<name>-<node>`, node binding, config annotations, NoExecute toleration).
//! Everything here is pure so the file source can call it from a blocking task.

use std::io::Read;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

mod decode;
mod defaults;
mod identity;
mod validate;

use decode::{as_text, parse_pod, parse_pods};
use defaults::apply_api_defaults;
use identity::{Origin, apply_static_defaults};
use validate::validate_pod;

/// Largest manifest we read or decode (kubelet's shared decoder has the same ~10 MB cap),
/// so a stray log file or image in the directory cannot eat memory.
pub(crate) const MAX_MANIFEST_BYTES: usize = 10 * 1024 * 1024;

/// Why one manifest was rejected. Every variant displays as `<path>: ...` so a log
/// line alone tells the operator which file to fix.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestError {
    #[error("{}: cannot read: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: manifest is larger than {max} bytes", .path.display())]
    TooLarge { path: PathBuf, max: usize },
    #[error("{}: not a regular file (a FIFO, device or socket is never read)", .path.display())]
    NotRegular { path: PathBuf },
    #[error("{}: {message}", .path.display())]
    Decode { path: PathBuf, message: String },
    #[error("{}: {field}: {reason}", .path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        reason: String,
    },
}

impl ManifestError {
    /// Whether the file vanished between listing and reading (not worth a warning).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(self, ManifestError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether the failure says nothing about the file (see [`is_transient_io`]).
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, ManifestError::Read { source, .. } if is_transient_io(source))
    }
}

/// Whether an I/O error says nothing about the file: the process or the system ran
/// out of descriptors or memory, or the call was interrupted. A file's last pod must
/// stay; a later read will tell.
pub(crate) fn is_transient_io(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    e.raw_os_error().is_some_and(|raw| {
        [
            Errno::MFILE,
            Errno::NFILE,
            Errno::NOMEM,
            Errno::AGAIN,
            Errno::INTR,
            Errno::NOBUFS,
        ]
        .iter()
        .any(|e| e.raw_os_error() == raw)
    })
}

/// Reads a manifest, refusing to read more than [`MAX_MANIFEST_BYTES`].
///
/// Bounded in time too: the open does not wait for a FIFO's writer or a device
/// (`O_NONBLOCK`), and whatever was opened must be a regular file, checked on the
/// open descriptor so a file swapped for a FIFO after the caller's stat is still caught.
pub(crate) fn read_manifest(path: &Path) -> Result<Vec<u8>, ManifestError> {
    use std::os::unix::fs::OpenOptionsExt;
    let read_err = |source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    };
    let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)
        .map_err(read_err)?;
    if !file.metadata().map_err(read_err)?.is_file() {
        return Err(ManifestError::NotRegular {
            path: path.to_path_buf(),
        });
    }
    let mut bytes = Vec::new();
    // One byte past the limit tells "exactly at the limit" from "over it".
    file.take(MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_MANIFEST_BYTES,
        });
    }
    Ok(bytes)
}

/// Decodes, validates and defaults one static pod manifest for `node_name`.
///
/// `path` is the manifest's identity: it goes into error messages and into the UID
/// hash (`file:<path>`), so the same content in two files is two pods.
pub(crate) fn decode_static_pod(
    bytes: &[u8],
    path: &Path,
    node_name: &str,
) -> Result<Pod, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_MANIFEST_BYTES,
        });
    }
    let decode_err = |message: String| ManifestError::Decode {
        path: path.to_path_buf(),
        message,
    };
    let manifest_err = |e: ParseError| match e {
        ParseError::Decode(message) => decode_err(message),
        ParseError::Field(f) => f.at(path),
    };
    let text = as_text(bytes).map_err(manifest_err)?;
    let mut pod = parse_pod(text).map_err(manifest_err)?;
    apply_api_defaults(&mut pod);
    validate_pod(&pod, node_name).map_err(|f| f.at(path))?;
    apply_static_defaults(&mut pod, Origin::File(path), node_name);
    Ok(pod)
}

/// Decodes the body of a manifest URL (kubelet's HTTP source): one Pod, or a
/// PodList whose items must all be valid (one bad item refuses the whole body, so
/// the caller keeps its last good set). Each pod is defaulted as kubelet's
/// `applyDefaults` does for a URL: the UID hashes the pod and `url:<url>`, and no
/// NoExecute toleration is added. The URL, its password redacted, stands where a
/// file's path does in messages; a list item's field is named `items[<i>].<field>`.
pub(crate) fn decode_url_pods(
    bytes: &[u8],
    url: &str,
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let shown = crate::http_get::redacted_url(url);
    let path = Path::new(shown.as_ref());
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_MANIFEST_BYTES,
        });
    }
    let manifest_err = |e: ParseError| match e {
        ParseError::Decode(message) => ManifestError::Decode {
            path: path.to_path_buf(),
            message,
        },
        ParseError::Field(f) => f.at(path),
    };
    let text = as_text(bytes).map_err(manifest_err)?;
    let (mut pods, list) = parse_pods(text).map_err(manifest_err)?;
    for (i, pod) in pods.iter_mut().enumerate() {
        apply_api_defaults(pod);
        validate_pod(pod, node_name).map_err(|mut f| {
            if list {
                f.field = format!("items[{i}].{}", f.field);
            }
            f.at(path)
        })?;
        apply_static_defaults(pod, Origin::Url(url), node_name);
    }
    Ok(pods)
}

/// A validation failure before the path is known.
#[derive(Debug)]
pub(super) struct FieldError {
    field: String,
    reason: String,
}

impl FieldError {
    fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }
    fn at(self, path: &Path) -> ManifestError {
        ManifestError::Invalid {
            path: path.to_path_buf(),
            field: self.field,
            reason: self.reason,
        }
    }
}

pub(super) fn fail<T>(
    field: impl Into<String>,
    reason: impl Into<String>,
) -> Result<T, FieldError> {
    Err(FieldError::new(field, reason))
}

pub(super) enum ParseError {
    Decode(String),
    Field(FieldError),
}

impl From<FieldError> for ParseError {
    fn from(f: FieldError) -> Self {
        ParseError::Field(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::manifest::test_support::*;

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.yaml");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let zero = dir.path().join("zero.yaml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        // In a thread: a blocking open of a FIFO without a writer would hang forever.
        let (tx, rx) = std::sync::mpsc::channel();
        let paths = [fifo.clone(), zero.clone()];
        std::thread::spawn(move || {
            for p in paths {
                tx.send(read_manifest(&p).map(|_| ()).map_err(|e| e.to_string()))
                    .unwrap();
            }
        });
        for p in [fifo, zero] {
            let got = rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .expect("read blocked");
            assert_eq!(
                got,
                Err(format!(
                    "{}: not a regular file (a FIFO, device or socket is never read)",
                    p.display()
                ))
            );
        }
    }

    #[test]
    fn over_large_input_is_rejected() {
        let mut big = GOOD.as_bytes().to_vec();
        big.resize(MAX_MANIFEST_BYTES + 1, b' ');
        let msg = decode_static_pod(&big, Path::new(PATH), NODE)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            format!("{PATH}: manifest is larger than {MAX_MANIFEST_BYTES} bytes")
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.yaml");
        std::fs::write(&file, &big).unwrap();
        let e = read_manifest(&file).unwrap_err();
        assert!(matches!(e, ManifestError::TooLarge { .. }), "{e}");
        big.truncate(MAX_MANIFEST_BYTES);
        std::fs::write(&file, &big).unwrap();
        assert_eq!(read_manifest(&file).unwrap().len(), MAX_MANIFEST_BYTES);
        assert!(decode_static_pod(&big, &file, NODE).is_ok());
    }
}

/// What the tests of every part share: a good manifest and decoding through
/// the whole pipeline, as the file source does.
#[cfg(test)]
mod test_support {
    use super::*;

    pub(crate) const PATH: &str = "/etc/pods/a.yaml";
    pub(crate) const NODE: &str = "Node1";

    pub(crate) const GOOD: &str = r"
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: nginx
    image: nginx
    ports:
    - containerPort: 80
";

    pub(crate) fn decode(text: &str) -> Result<Pod, ManifestError> {
        decode_static_pod(text.as_bytes(), Path::new(PATH), NODE)
    }

    pub(crate) fn err(text: &str) -> String {
        match decode(text) {
            Ok(p) => panic!("expected an error, got pod {:?}", p.metadata.name),
            Err(e) => e.to_string(),
        }
    }

    /// GOOD with `extra` appended under the first container (indented 4).
    pub(crate) fn with_container_lines(extra: &str) -> String {
        format!("{GOOD}{extra}")
    }

    pub(crate) fn assert_err(text: &str, expected: &str) {
        let msg = err(text);
        assert!(
            msg.starts_with(&format!("{PATH}: ")),
            "message does not start with the path: {msg}"
        );
        assert!(
            msg.contains(expected),
            "{msg:?} does not contain {expected:?}"
        );
    }
}

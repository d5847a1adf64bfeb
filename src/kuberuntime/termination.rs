//! Termination messages as kubelet keeps them: each container instance gets its own
//! empty file under `<root-dir>/pods/<uid>/containers/<name>/`, bind-mounted at its
//! `terminationMessagePath`; when it has exited, the file (policy `File`) or, if that
//! is empty and the exit was non-zero, the tail of its log (`FallbackToLogsOnError`)
//! becomes `state.terminated.message`. Every read is capped as kubelet caps it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus, Pod, PodStatus};

use crate::safe_path::{self, PathError};

/// kubelet's `MaxContainerTerminationMessageLength`: the last 4096 bytes of the file.
pub(crate) const MAX_MESSAGE_BYTES: u64 = 4 * 1024;
/// kubelet's `MaxContainerTerminationMessageLogLines` / `...LogLength`.
pub(crate) const MAX_LOG_LINES: usize = 80;
pub(crate) const MAX_LOG_BYTES: usize = 2 * 1024;
/// kubelet's `MaxPodTerminationMessageLogLength`, split evenly over the containers.
pub(crate) const MAX_POD_MESSAGE_BYTES: usize = 12 * 1024;
/// Bytes of a log read from its end to find the last lines (each CRI record carries
/// a ~40-byte prefix; 80 full lines of content fit well within this).
const LOG_TAIL_WINDOW: u64 = 64 * 1024;

/// The default `terminationMessagePath` (API default).
pub(crate) const DEFAULT_PATH: &str = "/dev/termination-log";

/// The policies of `terminationMessagePolicy`.
pub(crate) const POLICY_FALLBACK: &str = "FallbackToLogsOnError";

/// Why the message file of a container could not be made: the container cannot be
/// configured (`CreateContainerConfigError`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum MessageFileError {
    #[error("terminationMessagePath: {0}")]
    Path(#[from] PathError),
    #[error("terminationMessagePath: cannot create {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Creates the instance's message file (mode 0666, so any user in the container can
/// write it) and returns the mount that puts it at `terminationMessagePath`. The file
/// is named by restart count and a random suffix, unique per instance as kubelet's is.
pub(crate) fn message_mount(
    pods_dir: &Path,
    uid: &str,
    container: &Container,
    restart_count: i32,
) -> Result<Option<cri::Mount>, MessageFileError> {
    let target = container
        .termination_message_path
        .clone()
        .unwrap_or_else(|| DEFAULT_PATH.into());
    if target.is_empty() {
        return Ok(None);
    }
    let dir = crate::pod::container_dir(pods_dir, uid, &container.name)?;
    let file = format!("{restart_count}-{:08x}", fastrand::u32(..));
    let path = safe_path::beneath(&dir, &[&file])?;
    let io = |source| MessageFileError::Io {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)
        .map_err(io)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o666))
        .map_err(io)?;
    Ok(Some(cri::Mount {
        container_path: target,
        host_path: path.to_string_lossy().into_owned(),
        ..Default::default()
    }))
}

/// Opens `path` for reading only if it lies below `root` and is a regular file
/// reached without following a symlink at its end (the paths come back from the
/// runtime, and only files oxlet made there are read).
fn open_below(root: &Path, path: &Path) -> Option<File> {
    let rel = path.strip_prefix(root).ok()?;
    let rel = safe_path::relative(rel.to_str()?).ok()?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(root.join(rel))
        .ok()?;
    f.metadata().ok()?.is_file().then_some(f)
}

/// The last `max` bytes of a file.
fn read_tail(mut f: File, max: u64) -> Vec<u8> {
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(SeekFrom::Start(len.saturating_sub(max))).is_err() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let _ = f.take(max).read_to_end(&mut out);
    out
}

/// The message of an exited container (kubelet's `getTerminationMessage` and
/// `readLastStringFromContainerLogs`): the file mounted at `message_path`, else, when
/// `fallback` (policy FallbackToLogsOnError, non-zero exit) and the file is empty or
/// missing, the log's last lines.
pub(crate) fn exited_message(
    pods_dir: &Path,
    logs_dir: &Path,
    status: &cri::ContainerStatus,
    message_path: &str,
    fallback: bool,
) -> String {
    let from_file = status
        .mounts
        .iter()
        .find(|m| m.container_path == message_path)
        .and_then(|m| open_below(pods_dir, Path::new(&m.host_path)))
        .map(|f| read_tail(f, MAX_MESSAGE_BYTES))
        .unwrap_or_default();
    if !from_file.is_empty() || !fallback {
        return String::from_utf8_lossy(&from_file).into_owned();
    }
    open_below(logs_dir, Path::new(&status.log_path))
        .map(|f| log_tail(&read_tail(f, LOG_TAIL_WINDOW)))
        .unwrap_or_default()
}

/// The content of the last [`MAX_LOG_LINES`] lines of a CRI-format log
/// (`<time> <stream> <P|F> <text>`, P records continue in the next one), cut to its
/// first [`MAX_LOG_BYTES`] bytes as kubelet's `LimitBytes` cuts it.
pub(crate) fn log_tail(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut lines: Vec<String> = Vec::new();
    let mut partial = String::new();
    // The first record may be cut by the window; it is dropped unless it is the file's start.
    let skip_first = raw.len() as u64 >= LOG_TAIL_WINDOW;
    for (i, rec) in text.split('\n').enumerate() {
        if rec.is_empty() || (i == 0 && skip_first) {
            continue;
        }
        let mut parts = rec.splitn(4, ' ');
        let (Some(_time), Some(_stream), Some(tag)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        partial.push_str(parts.next().unwrap_or(""));
        if tag != "P" {
            partial.push('\n');
            lines.push(std::mem::take(&mut partial));
        }
    }
    let start = lines.len().saturating_sub(MAX_LOG_LINES);
    let mut out = lines[start..].concat();
    truncate_at_char(&mut out, MAX_LOG_BYTES);
    out
}

fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// kubelet's per-pod cap (status manager's `normalizeStatus`): 12 KiB of terminated
/// messages per pod, split evenly over its containers, each message cut to its share.
pub(crate) fn cap_pod_messages(pod: &Pod, status: &mut PodStatus) {
    let n = pod.spec.as_ref().map_or(0, |s| {
        s.containers.len() + s.init_containers.as_ref().map_or(0, Vec::len)
    });
    let share = MAX_POD_MESSAGE_BYTES / n.max(1);
    let cap_state = |st: &mut Option<ContainerState>| {
        if let Some(m) = st
            .as_mut()
            .and_then(|s| s.terminated.as_mut())
            .and_then(|t| t.message.as_mut())
        {
            truncate_at_char(m, share);
        }
    };
    let all: [&mut Option<Vec<ContainerStatus>>; 2] = [
        &mut status.init_container_statuses,
        &mut status.container_statuses,
    ];
    for list in all {
        for c in list.iter_mut().flatten() {
            cap_state(&mut c.state);
            cap_state(&mut c.last_state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStateTerminated, PodSpec};

    fn record(text: &str) -> String {
        format!("2026-11-26T03:00:00.000000000Z stderr F {text}\n")
    }

    #[test]
    fn log_tail_keeps_the_last_80_lines_and_2048_bytes() {
        let mut raw = String::new();
        for i in 0..100 {
            raw.push_str(&record(&format!("line {i}")));
        }
        let tail = log_tail(raw.as_bytes());
        assert!(tail.starts_with("line 20\n"), "{tail:.40}");
        assert!(tail.ends_with("line 99\n"));
        assert_eq!(tail.lines().count(), 80);
        // Long lines: the first 2048 bytes of the last lines.
        let long = "x".repeat(1000);
        let raw: String = (0..5).map(|_| record(&long)).collect();
        assert_eq!(log_tail(raw.as_bytes()).len(), MAX_LOG_BYTES);
        // Partial records join into one line.
        let raw = "t stdout P hel\nt stdout F lo\n";
        assert_eq!(log_tail(raw.as_bytes()), "hello\n");
    }

    #[test]
    fn message_file_is_read_from_its_end_and_only_below_the_pods_dir() {
        let pods = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let c = Container {
            name: "app".into(),
            ..Default::default()
        };
        let m = message_mount(pods.path(), "u1", &c, 0).unwrap().unwrap();
        assert_eq!(m.container_path, DEFAULT_PATH);
        assert!(
            m.host_path
                .starts_with(&*pods.path().join("u1/containers/app").to_string_lossy())
        );
        let mode = std::fs::metadata(&m.host_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o666);
        std::fs::write(&m.host_path, format!("{}END", "a".repeat(5000))).unwrap();
        let mut st = cri::ContainerStatus {
            mounts: vec![m.clone()],
            ..Default::default()
        };
        let msg = exited_message(pods.path(), logs.path(), &st, DEFAULT_PATH, false);
        assert_eq!(msg.len(), MAX_MESSAGE_BYTES as usize);
        assert!(msg.ends_with("END"));
        // Empty file, fallback: the log; no fallback: nothing.
        std::fs::write(&m.host_path, "").unwrap();
        let log = logs.path().join("ns_p_u1/app/0.log");
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::fs::write(&log, record("it broke")).unwrap();
        st.log_path = log.to_string_lossy().into_owned();
        assert_eq!(
            exited_message(pods.path(), logs.path(), &st, DEFAULT_PATH, true),
            "it broke\n"
        );
        assert_eq!(
            exited_message(pods.path(), logs.path(), &st, DEFAULT_PATH, false),
            ""
        );
        // A host path outside the pods dir is never read.
        let outside = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(outside.path(), "secret").unwrap();
        st.mounts[0].host_path = outside.path().to_string_lossy().into_owned();
        assert_eq!(
            exited_message(pods.path(), logs.path(), &st, DEFAULT_PATH, false),
            ""
        );
        st.mounts[0].host_path = format!("{}/../../etc/hostname", pods.path().display());
        assert_eq!(
            exited_message(pods.path(), logs.path(), &st, DEFAULT_PATH, false),
            ""
        );
        // An unsafe container name makes no file.
        let bad = Container {
            name: "../x".into(),
            ..Default::default()
        };
        assert!(message_mount(pods.path(), "u1", &bad, 0).is_err());
    }

    #[test]
    fn pod_messages_share_12_kib() {
        let names = ["a", "b", "c", "d"];
        let pod = Pod {
            spec: Some(PodSpec {
                containers: names
                    .iter()
                    .map(|n| Container {
                        name: (*n).into(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let term = |len| {
            Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    message: Some("m".repeat(len)),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        let mut status = PodStatus {
            container_statuses: Some(
                names
                    .iter()
                    .map(|n| ContainerStatus {
                        name: (*n).into(),
                        state: term(4096),
                        last_state: term(100),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        cap_pod_messages(&pod, &mut status);
        for c in status.container_statuses.unwrap() {
            let len = |s: &Option<ContainerState>| {
                s.as_ref()
                    .unwrap()
                    .terminated
                    .as_ref()
                    .unwrap()
                    .message
                    .as_ref()
                    .unwrap()
                    .len()
            };
            assert_eq!(len(&c.state), 3072);
            assert_eq!(len(&c.last_state), 100);
        }
    }
}

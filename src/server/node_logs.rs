//! `/logs/`: the node's log directory (`/var/log`), as kubelet serves it with Go's
//! file server: a directory is an HTML list of its entries, a file its bytes, and a
//! directory asked for without its trailing slash is redirected to it.
//!
//! Every path is resolved once below the log directory by the kernel
//! ([`crate::safe_path::open_beneath`]): a symlink that leads out of it is a 404,
//! not a way to read the rest of the host. What is served is the descriptor opened
//! then, never the name again.

use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use crate::safe_path::{BeneathError, open_beneath, open_dir};

/// How much of a file is sent at once.
const CHUNK: usize = 64 * 1024;
/// The most entries a directory list shows.
const MAX_ENTRIES: usize = 10_000;

/// The directory `/logs/` serves (kubelet's is `/var/log`).
#[derive(Clone)]
pub(crate) struct NodeLogs {
    pub dir: PathBuf,
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
}

/// `GET /logs/` and `GET /logs/{path}`.
pub(crate) async fn node_logs(State(s): State<NodeLogs>, uri: Uri) -> Response {
    let path = uri.path().strip_prefix("/logs").unwrap_or_default();
    let rel = crate::percent::decoded(path.trim_start_matches('/'));
    let wants_dir = path.ends_with('/') || rel.is_empty();
    let dir = s.dir.clone();
    let opened = tokio::task::spawn_blocking(move || open(&dir, &rel)).await;
    match opened {
        Ok(Ok(Opened::Dir(names))) if wants_dir => listing(&names),
        Ok(Ok(Opened::Dir(_))) => {
            let to = format!("{}/", uri.path().rsplit('/').next().unwrap_or_default());
            (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, to)]).into_response()
        }
        Ok(Ok(Opened::File(f))) => file(f),
        Ok(Err(e)) => {
            tracing::debug!(path, error = %e, "/logs/: not served");
            not_found()
        }
        Err(_) => not_found(),
    }
}

enum Opened {
    Dir(Vec<(String, bool)>),
    File(std::fs::File),
}

/// Opens `rel` below `dir`: a directory's entries (name, is a directory), or a file.
fn open(dir: &Path, rel: &str) -> Result<Opened, BeneathError> {
    let base = open_dir(dir)?;
    let fd = open_beneath(&base, Path::new(rel))?;
    // Reopened through the descriptor: the inode resolved above, whatever the name is now.
    let through = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let meta = std::fs::metadata(&through)?;
    if meta.is_dir() {
        let mut names: Vec<(String, bool)> = std::fs::read_dir(&through)?
            .filter_map(Result::ok)
            .take(MAX_ENTRIES)
            .map(|e| {
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                (e.file_name().to_string_lossy().into_owned(), is_dir)
            })
            .collect();
        names.sort();
        return Ok(Opened::Dir(names));
    }
    if !meta.is_file() {
        return Err(BeneathError::NotFound);
    }
    Ok(Opened::File(std::fs::File::open(&through)?))
}

/// Go's `dirList`: names in order, directories with a slash.
fn listing(names: &[(String, bool)]) -> Response {
    let mut html = String::from(
        "<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n",
    );
    for (name, is_dir) in names {
        let shown = if *is_dir {
            format!("{name}/")
        } else {
            name.clone()
        };
        html.push_str(&format!(
            "<a href=\"{}\">{}</a>\n",
            crate::percent::encoded_path(&shown),
            escape_html(&shown)
        ));
    }
    html.push_str("</pre>\n");
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

/// The file's bytes, read in chunks on a blocking thread.
fn file(f: std::fs::File) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        let mut f = f;
        let mut buf = vec![0u8; CHUNK];
        loop {
            match f.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    if tx
                        .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                    {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        Body::from_stream(stream),
    )
        .into_response()
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_what_is_below_the_log_dir_is_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let logs = tmp.path().join("log");
        std::fs::create_dir_all(logs.join("pods")).unwrap();
        std::fs::write(logs.join("syslog"), "hello\n").unwrap();
        std::fs::write(tmp.path().join("shadow"), "secret\n").unwrap();
        symlink("../shadow", logs.join("escape")).unwrap();
        symlink("syslog", logs.join("inside")).unwrap();
        let Opened::Dir(names) = open(&logs, "").unwrap() else {
            panic!()
        };
        assert_eq!(
            names,
            [
                ("escape".into(), false),
                ("inside".into(), false),
                ("pods".into(), true),
                ("syslog".into(), false)
            ]
        );
        let Opened::File(mut f) = open(&logs, "inside").unwrap() else {
            panic!()
        };
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello\n");
        assert!(matches!(open(&logs, "escape"), Err(BeneathError::Escapes)));
        assert!(matches!(
            open(&logs, "../shadow"),
            Err(BeneathError::Escapes)
        ));
        assert!(matches!(open(&logs, "nope"), Err(BeneathError::NotFound)));
    }

    #[test]
    fn names_are_escaped_and_decoded() {
        assert_eq!(crate::percent::decoded("a%20b%2"), "a b%2");
        assert_eq!(crate::percent::encoded_path("a b/"), "a%20b/");
        assert_eq!(escape_html("<x>"), "&lt;x&gt;");
    }
}

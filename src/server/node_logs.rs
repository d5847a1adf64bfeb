//! `/logs/`: the node's log directory (`/var/log`), as kubelet serves it with Go's
//! file server: a directory is an HTML list of its entries, a file its bytes, and a
//! directory asked for without its trailing slash is redirected to it.
//!
//! Every path is resolved once below the log directory by the kernel
//! ([`crate::safe_path::open_beneath`]): a symlink that leads out of it is a 404,
//! not a way to read the rest of the host. What is served is the descriptor opened
//! then, never the name again.
//!
//! With kubelet's `NodeLogQuery` gate and `enableSystemLogQuery` on, a request with a
//! query (`?query=kubelet`) is answered from the journal instead ([`node_log_query`]).

use std::io::Read as _;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt as _;

use super::node_log_query::{self, ByteStream, Journalctl};
use crate::safe_path::{BeneathError, open_beneath, open_dir};

/// How much of a file is sent at once.
const CHUNK: usize = 64 * 1024;
/// The most entries a directory list shows.
const MAX_ENTRIES: usize = 10_000;
/// kubelet's budget for one query's answer: past it journalctl is killed and the
/// answer ends where it is.
const QUERY_BUDGET: Duration = Duration::from_secs(30);

/// The directory `/logs/` serves (kubelet's is `/var/log`), and the journal queries
/// run when kubelet's `NodeLogQuery` gate and `enableSystemLogQuery` are on (None: off,
/// a query is ignored and the path served as a file, as kubelet does).
#[derive(Clone)]
pub(crate) struct NodeLogs {
    pub dir: PathBuf,
    pub query: Option<Arc<dyn Journalctl>>,
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "404 page not found\n").into_response()
}

/// `GET /logs/` and `GET /logs/{path}`.
pub(crate) async fn node_logs(State(s): State<NodeLogs>, uri: Uri) -> Response {
    if let Some(journal) = s.query.clone()
        && let Some(answer) = query_mode(&s.dir, journal, &uri).await
    {
        return answer;
    }
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

/// kubelet's query mode: None when the request carries no query (then `/logs/` is a
/// file server), else kubelet's answer: 400 for a bad parameter, 406 for a path with
/// a query or a query that does not validate, the file a query names, or the journal.
async fn query_mode(dir: &Path, journal: Arc<dyn Journalctl>, uri: &Uri) -> Option<Response> {
    let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let query = match node_log_query::parse(&pairs) {
        Ok(None) => return None,
        Ok(Some(q)) => q,
        Err(errs) => {
            let msg = node_log_query::aggregate(&errs);
            tracing::info!(query = uri.query(), error = %msg, "/logs/: the node log query is refused (400): a parameter does not parse");
            return Some(super::switches::go_http_error(
                StatusCode::BAD_REQUEST,
                &msg,
            ));
        }
    };
    let path = uri.path().strip_prefix("/logs/").unwrap_or_default();
    if !path.is_empty() && path != "/" {
        tracing::info!(
            path,
            "/logs/: the node log query is refused (406): a path and a query together"
        );
        return Some(super::switches::go_http_error(
            StatusCode::NOT_ACCEPTABLE,
            "path not allowed in query mode",
        ));
    }
    let (base, q) = (dir.to_path_buf(), query.clone());
    let validated = tokio::task::spawn_blocking(move || q.validate(&base)).await;
    let Ok(validated) = validated else {
        return Some(not_found());
    };
    Some(match validated {
        Err(errs) => {
            let msg = node_log_query::aggregate(&errs);
            tracing::info!(query = uri.query(), error = %msg, "/logs/: the node log query is refused (406): it does not validate");
            super::switches::go_http_error(StatusCode::NOT_ACCEPTABLE, &msg)
        }
        Ok(Some(Opened::File(f))) => file(f),
        Ok(Some(Opened::Dir(names))) => {
            let asked = &query.files[0];
            if asked.ends_with('/') {
                listing(&names)
            } else {
                let to = format!("{}/", asked.rsplit('/').next().unwrap_or_default());
                (StatusCode::MOVED_PERMANENTLY, [(header::LOCATION, to)]).into_response()
            }
        }
        Ok(None) => journal_answer(dir.to_path_buf(), journal, query).await,
    })
}

/// The services' logs as kubelet sends them: those journald knows from journalctl,
/// then the others from their files below the log directory (or, with options, a
/// line saying why not), all within kubelet's 30 s.
async fn journal_answer(
    dir: PathBuf,
    journal: Arc<dyn Journalctl>,
    query: node_log_query::Query,
) -> Response {
    let deadline = tokio::time::Instant::now() + QUERY_BUDGET;
    let units = tokio::time::timeout_at(deadline, node_log_query::unit_list(journal.as_ref()))
        .await
        .ok()
        .flatten();
    let (native, files) = query.split_services(units.as_deref());
    let mut parts: Vec<ByteStream> = Vec::new();
    if !native.is_empty() {
        let args = query.journal_args(&native);
        tracing::info!(services = %native.join(","), args = %args.join(" "), "/logs/: the node log query reads the journal (journald has logged these units)");
        match journal.run(args) {
            // journalctl's failure status ends the answer: its message is in it already.
            Ok(out) => parts.push(Box::pin(out.take_while(|r| std::future::ready(r.is_ok())))),
            Err(e) => {
                tracing::warn!(error = %e, "/logs/: cannot run journalctl for the node log query");
                if query.options.boot.unwrap_or(0) == 0 {
                    parts.push(text("\nerror: journal output not available\n".into()));
                }
            }
        }
    }
    if !files.is_empty() {
        if query.options != node_log_query::Options::default() {
            tracing::info!(services = %files.join(","), "/logs/: the node log query is not answered for these services: journald has no such unit, and a file cannot take the query's options");
            parts.push(text(format!(
                "\noptions present and query resolved to log files for [{}]\ntry without specifying options\n",
                files.join(" ")
            )));
        } else {
            tracing::info!(services = %files.join(","), "/logs/: the node log query reads files below the log directory (journald has no such unit)");
            parts.push(blocking_stream(move |tx| service_files(&dir, &files, tx)));
        }
    }
    let body = futures::stream::iter(parts)
        .flatten()
        .take_until(tokio::time::sleep_until(deadline));
    (
        [(header::CONTENT_TYPE, "text/plain;charset=UTF-8")],
        Body::from_stream(body),
    )
        .into_response()
}

/// One line of kubelet's, as a body part.
fn text(s: String) -> ByteStream {
    Box::pin(futures::stream::once(std::future::ready(Ok(Bytes::from(
        s,
    )))))
}

/// kubelet's heuristics for a service journald does not know: the first of
/// `<s>`, `<s>.log` and `<s>/<s>.log` below the log directory that is a file, or a
/// line saying there is none (or why it could not be read).
fn service_files(dir: &Path, services: &[String], tx: &Sender) {
    for s in services {
        let names = [s.clone(), format!("{s}.log"), format!("{s}/{s}.log")];
        let found = names.iter().find_map(|n| match open(dir, n) {
            Ok(Opened::File(f)) => Some(Ok(f)),
            Ok(Opened::Dir(_))
            | Err(
                BeneathError::NotFound
                | BeneathError::Escapes
                | BeneathError::Invalid(_)
                | BeneathError::NotAFile
                | BeneathError::TooLarge(_),
            ) => None,
            Err(BeneathError::Io(e)) => Some(Err(e)),
        });
        let line = match found {
            Some(Ok(f)) => {
                if !copy(f, tx) {
                    return;
                }
                continue;
            }
            None => format!("\nlog not found for {s}\n"),
            Some(Err(e)) => format!("\nerror getting log for {s}: {e}\n"),
        };
        if tx.blocking_send(Ok(Bytes::from(line))).is_err() {
            return;
        }
    }
}

#[derive(Debug)]
pub(super) enum Opened {
    Dir(Vec<(String, bool)>),
    File(std::fs::File),
}

/// Opens `rel` below `dir`: a directory's entries (name, is a directory), or a file.
pub(super) fn open(dir: &Path, rel: &str) -> Result<Opened, BeneathError> {
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

/// Where a blocking producer sends the body's chunks.
type Sender = tokio::sync::mpsc::Sender<std::io::Result<Bytes>>;

/// A body produced on a blocking thread by `produce`, a few chunks ahead at most; the
/// producer stops when the receiver is gone.
fn blocking_stream(produce: impl FnOnce(&Sender) + Send + 'static) -> ByteStream {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || produce(&tx));
    Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (b, rx))
    }))
}

/// Sends `f`'s bytes in chunks; false when the receiver is gone.
fn copy(mut f: std::fs::File, tx: &Sender) -> bool {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match f.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => {
                if tx
                    .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                    .is_err()
                {
                    return false;
                }
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return false;
            }
        }
    }
}

/// The file's bytes, read in chunks on a blocking thread.
fn file(f: std::fs::File) -> Response {
    let stream = blocking_stream(move |tx| {
        copy(f, tx);
    });
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

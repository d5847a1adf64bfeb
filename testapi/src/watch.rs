//! Watches: the first events (synthetic ADDED, or the history after a resourceVersion, or one
//! ERROR with 410 when that is gone), then every change in scope as it happens, BOOKMARKs if
//! asked for, until the timeout; a watch that falls too far behind is ended with 410.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, header};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use crate::http::{Body, Shared};
use crate::resources::Def;
use crate::selectors::Selector;
use crate::status::ApiError;
use crate::store::{Change, EventType};

/// Open watches at once; one more gets 429.
const MAX_WATCHERS: usize = 256;

/// What a watch request asked for.
pub(crate) struct Params {
    /// None: start with synthetic ADDED events for what exists now.
    pub from: Option<u64>,
    pub timeout: Duration,
    pub bookmarks: bool,
    pub initial_events: bool,
    pub labels: Selector,
    pub fields: Selector,
}

/// Counts an open watch for as long as its stream lives.
struct WatchSlot(Arc<Shared>);

impl Drop for WatchSlot {
    fn drop(&mut self) {
        self.0.watchers.fetch_sub(1, Ordering::SeqCst);
    }
}

struct WatchState {
    initial: VecDeque<Bytes>,
    rx: tokio::sync::broadcast::Receiver<Arc<Change>>,
    resource: String,
    ns: Option<String>,
    labels: Selector,
    fields: Selector,
    kind: &'static str,
    api_version: String,
    /// The newest change this watch has looked at; bookmarks never claim more.
    seen: u64,
    bookmarks: Option<tokio::time::Interval>,
    deadline: Instant,
    done: bool,
    _slot: WatchSlot,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({ "type": kind, "object": object }).to_string();
    s.push('\n');
    Bytes::from(s)
}

impl WatchState {
    fn matches(&self, v: &Value) -> bool {
        self.labels.matches_labels(v) && self.fields.matches_fields(v)
    }

    /// An object entering or leaving the selection is ADDED or DELETED, as the real watch cache says.
    fn render(&self, c: &Change) -> Option<Bytes> {
        if c.key.0 != self.resource || self.ns.as_ref().is_some_and(|n| *n != c.key.1) {
            return None;
        }
        let now = self.matches(&c.object);
        let before = c.prev.as_ref().is_some_and(|p| self.matches(p));
        let kind = match (c.kind, before, now) {
            (EventType::Added, _, true) => "ADDED",
            (EventType::Deleted, _, true) => "DELETED",
            (EventType::Modified, true, true) => "MODIFIED",
            (EventType::Modified, false, true) => "ADDED",
            (EventType::Modified, true, false) => "DELETED",
            _ => return None,
        };
        Some(line(kind, &c.object))
    }

    async fn next(&mut self) -> Option<Bytes> {
        if let Some(l) = self.initial.pop_front() {
            return Some(l);
        }
        if self.done {
            return None;
        }
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(self.deadline) => return None,
                () = tick(&mut self.bookmarks) => {
                    let obj = json!({"kind": self.kind, "apiVersion": self.api_version, "metadata": {"resourceVersion": self.seen.to_string()}});
                    return Some(line("BOOKMARK", &obj));
                }
                r = self.rx.recv() => match r {
                    Ok(c) => {
                        self.seen = self.seen.max(c.rv);
                        if let Some(l) = self.render(&c) {
                            return Some(l);
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        self.done = true;
                        return Some(line("ERROR", &ApiError::expired("the watch fell too far behind and was closed").status()));
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}

async fn tick(i: &mut Option<tokio::time::Interval>) {
    match i {
        Some(i) => {
            i.tick().await;
        }
        None => std::future::pending().await,
    }
}

pub(crate) fn watch(
    shared: &Arc<Shared>,
    def: &'static Def,
    ns: Option<&str>,
    p: Params,
) -> Result<Response<Body>, ApiError> {
    if p.initial_events {
        return Err(ApiError::invalid(
            def.name,
            "",
            "sendInitialEvents is not supported by this server; list, then watch",
        ));
    }
    if shared.watchers.fetch_add(1, Ordering::SeqCst) >= MAX_WATCHERS {
        shared.watchers.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::new(
            429,
            "TooManyRequests",
            "too many open watches",
        ));
    }
    let slot = WatchSlot(shared.clone());
    // The real server accepts a watch from a too-old version, then sends one ERROR event (410).
    // A version from the future is refused before the stream starts (504).
    let (initial, seen, rx, gone) = match shared.store.watch(&def.id(), ns, p.from) {
        Ok(w) => (w.initial, w.rv, w.rx, None),
        // The slot's drop gives the watcher count back.
        Err(e) if e.code == 504 => return Err(e),
        Err(e) => {
            let w = shared.store.watch(&def.id(), ns, None)?;
            (Vec::new(), w.rv, w.rx, Some(e))
        }
    };
    let every = *shared
        .bookmark_every
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut st = WatchState {
        initial: VecDeque::new(),
        rx,
        resource: def.id(),
        ns: ns.map(str::to_owned),
        labels: p.labels,
        fields: p.fields,
        kind: def.kind,
        api_version: def.api_version(),
        seen,
        bookmarks: p
            .bookmarks
            .then(|| tokio::time::interval_at(Instant::now() + every, every)),
        deadline: Instant::now() + p.timeout,
        done: gone.is_some(),
        _slot: slot,
    };
    if let Some(e) = gone {
        st.initial.push_back(line("ERROR", &e.status()));
    }
    for c in &initial {
        if let Some(l) = st.render(c) {
            st.initial.push_back(l);
        }
    }
    // hyper frames the body as chunked itself (no length is known).
    let stream = futures::stream::unfold(st, |mut st| async move {
        st.next()
            .await
            .map(|l| (Ok::<_, Infallible>(Frame::data(l)), st))
    });
    let mut r = Response::new(StreamBody::new(stream).boxed());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

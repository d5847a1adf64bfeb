//! A watch that lists afresh after any failure, as client-go's reflector does.
//!
//! kube-runtime's watcher lists again only when the apiserver answers 410 Gone; after
//! any other error it resumes the watch from the version it last saw. Against a
//! cluster that was replaced by a new one (same address, versions started over) that
//! version is from the future, the apiserver refuses it ("too large resource
//! version"), and the watcher retries it forever: the new cluster's objects are never
//! seen. client-go's reflector instead ends the watch on any error and lists again
//! after a back-off (800 ms doubling to 30 s, jitter 1.0, reset once a list completed),
//! which also catches up what changed while the apiserver was away.

use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _};
use kube::api::Api;
use kube::runtime::watcher::{self, Event, watcher};
use serde::de::DeserializeOwned;
use tracing::debug;

/// The reflector's first and longest wait between a failure and the next list.
const RELIST_BACKOFF_START: Duration = Duration::from_millis(800);
const RELIST_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// kube-runtime's watcher on `api` with `config`, started anew (a full list) after
/// every error it yields. The error is still yielded, for the caller to log; the
/// stream ends only when the caller drops it.
pub(crate) fn relisting_watcher<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let what = std::any::type_name::<K>().rsplit("::").next().unwrap_or("");
    relisting(what, move || watcher(api.clone(), config.clone()).boxed())
}

/// [`relisting_watcher`] over any way of starting a watch (`make`), so the back-off
/// can be tested without an apiserver.
pub(crate) fn relisting<K, F>(
    what: &'static str,
    make: F,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: Send + 'static,
    F: FnMut() -> BoxStream<'static, Result<Event<K>, watcher::Error>> + Send + 'static,
{
    struct State<K, F> {
        make: F,
        what: &'static str,
        current: Option<BoxStream<'static, Result<Event<K>, watcher::Error>>>,
        wait: Duration,
        pause: Option<Duration>,
    }
    let state = State {
        make,
        what,
        current: None,
        wait: RELIST_BACKOFF_START,
        pause: None,
    };
    futures::stream::unfold(state, |mut s| async move {
        if let Some(pause) = s.pause.take() {
            debug!(resource = s.what, after = %crate::duration::format_go_duration(pause),
                "watch failed; listing again, as client-go's reflector does");
            tokio::time::sleep(pause).await;
        }
        let current = s.current.get_or_insert_with(&mut s.make);
        match current.next().await {
            Some(Ok(event)) => {
                if matches!(event, Event::InitDone) {
                    s.wait = RELIST_BACKOFF_START;
                }
                Some((Ok(event), s))
            }
            Some(Err(e)) => {
                s.current = None;
                // client-go's jitter of 1.0: nodes that lost the same apiserver
                // come back spread out.
                s.pause = Some(crate::backoff::jitter(s.wait, 1.0));
                s.wait = (s.wait * 2).min(RELIST_BACKOFF_MAX);
                Some((Err(e), s))
            }
            None => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::time::Instant;

    use super::*;

    type Item = Result<Event<u32>, watcher::Error>;

    /// Each start of a watch plays the next script, then waits forever.
    fn scripted(scripts: Vec<Vec<Item>>) -> (impl Stream<Item = Item>, Arc<Mutex<usize>>) {
        let starts = Arc::new(Mutex::new(0));
        let counted = starts.clone();
        let mut scripts = scripts.into_iter();
        let stream = relisting("Thing", move || {
            *counted.lock().unwrap() += 1;
            let script = scripts.next().unwrap_or_default();
            futures::stream::iter(script)
                .chain(futures::stream::pending())
                .boxed()
        });
        (stream, starts)
    }

    fn broken() -> Item {
        Err(watcher::Error::NoResourceVersion)
    }

    #[tokio::test(start_paused = true)]
    async fn every_error_starts_a_fresh_list_after_a_growing_back_off() {
        let (stream, starts) = scripted(vec![
            vec![
                Ok(Event::Init),
                Ok(Event::InitApply(1)),
                Ok(Event::InitDone),
                broken(),
            ],
            vec![broken()],
            vec![broken()],
            vec![Ok(Event::Init), Ok(Event::InitDone), broken()],
            vec![Ok(Event::Init)],
        ]);
        let mut stream = std::pin::pin!(stream);
        let mut next = async || {
            let item = stream.next().await.unwrap();
            (item.is_ok(), Instant::now())
        };
        for _ in 0..3 {
            assert!(next().await.0);
        }
        let (ok, failed) = next().await;
        assert!(!ok);
        assert_eq!(
            *starts.lock().unwrap(),
            1,
            "no new list before it is asked for"
        );
        // After a completed list, the first wait is 800 ms (jitter: up to twice that);
        // then each failure without a completed list doubles it.
        let mut at = failed;
        for (i, base) in [0.8, 1.6].into_iter().enumerate() {
            let (ok, t) = next().await;
            assert!(!ok);
            assert_eq!(*starts.lock().unwrap(), 2 + i);
            let waited = (t - at).as_secs_f64();
            assert!(
                (base..=2.0 * base).contains(&waited),
                "waited {waited}s, base {base}s"
            );
            at = t;
        }
        let (ok, t) = next().await;
        assert!(ok, "the fourth start lists");
        let waited = (t - at).as_secs_f64();
        assert!((3.2..=6.4).contains(&waited), "waited {waited}s");
        assert!(next().await.0);
        // That list completed: the back-off starts over.
        let (ok, at) = next().await;
        assert!(!ok);
        let (ok, t) = next().await;
        assert!(ok);
        let waited = (t - at).as_secs_f64();
        assert!((0.8..=1.6).contains(&waited), "waited {waited}s");
        assert_eq!(*starts.lock().unwrap(), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn the_back_off_stops_growing_at_thirty_seconds() {
        let (stream, _) = scripted((0..12).map(|_| vec![broken()]).collect());
        let mut stream = std::pin::pin!(stream);
        let mut at = Instant::now();
        let mut longest = 0.0_f64;
        for _ in 0..12 {
            assert!(stream.next().await.unwrap().is_err());
            longest = longest.max((Instant::now() - at).as_secs_f64());
            at = Instant::now();
        }
        assert!((30.0..=60.0).contains(&longest), "longest wait {longest}s");
    }
}

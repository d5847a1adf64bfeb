//! The object store: every object as JSON under (resource, namespace, name), one global
//! resourceVersion counter, a bounded history of changes for resuming watches and for
//! consistent paged lists, and a broadcast of every change to the open watches.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::status::ApiError;

/// How many changes are kept for watches to resume from; older resourceVersions are Gone.
pub(crate) const HISTORY: usize = 2048;
/// Changes a slow watch may fall behind before it is ended with 410 (the real server drops it too).
const FANOUT: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum EventType {
    #[serde(rename = "ADDED")]
    Added,
    #[serde(rename = "MODIFIED")]
    Modified,
    #[serde(rename = "DELETED")]
    Deleted,
}

/// Objects are keyed by (resource id, namespace, name); cluster-scoped ones have namespace "".
pub(crate) type Key = (String, String, String);

/// One change; `prev` is the object before it, so a list can be rebuilt at an older version.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub rv: u64,
    pub key: Key,
    pub kind: EventType,
    pub object: Value,
    pub prev: Option<Value>,
}

struct Inner {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Arc<Change>>,
    /// Watches and consistent lists can resume from any resourceVersion >= floor.
    floor: u64,
}

/// A watch's first events, the version they bring it to, and the feed of what follows.
#[derive(Debug)]
pub(crate) struct WatchStart {
    pub initial: Vec<Arc<Change>>,
    pub rv: u64,
    pub rx: broadcast::Receiver<Arc<Change>>,
}

pub(crate) struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Change>>,
}

/// What is written to `<state_dir>/state.json`.
#[derive(Serialize, Deserialize)]
pub(crate) struct Persisted {
    pub rv: u64,
    pub objects: Vec<(Key, Value)>,
}

pub(crate) fn rv_of(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

impl Store {
    pub(crate) fn new(state: Option<Persisted>) -> Self {
        let (rv, objects) = match state {
            Some(p) => (p.rv, p.objects.into_iter().collect()),
            None => (0, BTreeMap::new()),
        };
        let (tx, _) = broadcast::channel(FANOUT);
        Self {
            inner: Mutex::new(Inner {
                rv,
                objects,
                history: VecDeque::new(),
                floor: rv,
            }),
            tx,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn persisted(&self) -> Persisted {
        let inner = self.lock();
        Persisted {
            rv: inner.rv,
            objects: inner
                .objects
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Forget the history: every older resourceVersion is Gone from now on (tests force 410s).
    pub(crate) fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.floor = inner.rv;
    }

    pub(crate) fn get(&self, key: &Key) -> Option<Value> {
        self.lock().objects.get(key).cloned()
    }

    /// Apply one change under the lock: `f` sees the current object (if any) and returns the
    /// new one (`None` removes it). An unchanged object is not written (no new resourceVersion).
    pub(crate) fn mutate<T>(
        &self,
        key: &Key,
        f: impl FnOnce(Option<&Value>, u64) -> Result<(Option<Value>, T), ApiError>,
    ) -> Result<(Option<Value>, T), ApiError> {
        let mut inner = self.lock();
        let old = inner.objects.get(key).cloned();
        let next_rv = inner.rv + 1;
        let (new, out) = f(old.as_ref(), next_rv)?;
        let kind = match (&old, &new) {
            (None, None) => return Ok((None, out)),
            (Some(o), Some(n)) if o == n => return Ok((Some(n.clone()), out)),
            (None, Some(_)) => EventType::Added,
            (Some(_), Some(_)) => EventType::Modified,
            (Some(_), None) => EventType::Deleted,
        };
        inner.rv = next_rv;
        let rv = next_rv.to_string();
        let object = match &new {
            Some(n) => {
                let mut n = n.clone();
                n["metadata"]["resourceVersion"] = Value::String(rv);
                inner.objects.insert(key.clone(), n.clone());
                n
            }
            None => {
                inner.objects.remove(key);
                let mut o = old.clone().unwrap_or(Value::Null);
                o["metadata"]["resourceVersion"] = Value::String(rv);
                o
            }
        };
        let change = Arc::new(Change {
            rv: next_rv,
            key: key.clone(),
            kind,
            object,
            prev: old,
        });
        if inner.history.len() >= HISTORY
            && let Some(gone) = inner.history.pop_front()
        {
            inner.floor = gone.rv;
        }
        inner.history.push_back(change.clone());
        // No receivers is fine: nobody watches.
        let _ = self.tx.send(change.clone());
        let result = if kind == EventType::Deleted {
            Some(change.object.clone())
        } else {
            new.map(|_| change.object.clone())
        };
        Ok((result, out))
    }

    /// The objects of `resource` (in `ns`, or all namespaces) as of `at` (None: now), with the
    /// resourceVersion they are consistent at. An `at` older than the history is Gone.
    pub(crate) fn list(
        &self,
        resource: &str,
        ns: Option<&str>,
        at: Option<u64>,
    ) -> Result<(Vec<(Key, Value)>, u64), ApiError> {
        let inner = self.lock();
        let in_scope = |k: &Key| k.0 == resource && ns.is_none_or(|n| k.1 == n);
        let mut objects: BTreeMap<Key, Value> = inner
            .objects
            .iter()
            .filter(|(k, _)| in_scope(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let Some(at) = at.filter(|a| *a != inner.rv) else {
            return Ok((objects.into_iter().collect(), inner.rv));
        };
        if at > inner.rv {
            return Err(ApiError::too_large(at, inner.rv));
        }
        if at < inner.floor {
            return Err(ApiError::expired(format!(
                "too old resource version: {at} ({})",
                inner.floor + 1
            )));
        }
        // Undo the newer changes, newest first.
        for change in inner.history.iter().rev().take_while(|c| c.rv > at) {
            if !in_scope(&change.key) {
                continue;
            }
            match &change.prev {
                Some(p) => objects.insert(change.key.clone(), p.clone()),
                None => objects.remove(&change.key),
            };
        }
        Ok((objects.into_iter().collect(), at))
    }

    /// Start a watch: the changes after `from` (or synthetic ADDED events for everything now,
    /// when `from` is None), plus a receiver for what comes next, taken under the same lock so
    /// nothing falls between them.
    pub(crate) fn watch(
        &self,
        resource: &str,
        ns: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        let inner = self.lock();
        let in_scope = |k: &Key| k.0 == resource && ns.is_none_or(|n| k.1 == n);
        let initial = match from {
            None => inner
                .objects
                .iter()
                .filter(|(k, _)| in_scope(k))
                .map(|(k, v)| {
                    Arc::new(Change {
                        rv: rv_of(v),
                        key: k.clone(),
                        kind: EventType::Added,
                        object: v.clone(),
                        prev: None,
                    })
                })
                .collect(),
            Some(from) if from > inner.rv => return Err(ApiError::too_large(from, inner.rv)),
            Some(from) if from < inner.floor => {
                return Err(ApiError::expired(format!(
                    "too old resource version: {from} ({})",
                    inner.floor + 1
                )));
            }
            Some(from) => inner
                .history
                .iter()
                .filter(|c| c.rv > from && in_scope(&c.key))
                .cloned()
                .collect(),
        };
        Ok(WatchStart {
            initial,
            rv: inner.rv,
            rx: self.tx.subscribe(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(name: &str) -> Key {
        ("pods".into(), "ns".into(), name.into())
    }

    fn put(s: &Store, name: &str, v: i64) -> u64 {
        let (obj, ()) = s
            .mutate(&key(name), |_, _| {
                Ok((Some(json!({"metadata": {"name": name}, "v": v})), ()))
            })
            .unwrap();
        rv_of(&obj.unwrap())
    }

    #[test]
    fn list_at_an_older_version_undoes_later_changes() {
        let s = Store::new(None);
        let rv1 = put(&s, "a", 1);
        put(&s, "a", 2);
        put(&s, "b", 1);
        let (items, at) = s.list("pods", Some("ns"), Some(rv1)).unwrap();
        assert_eq!(at, rv1);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].1["v"], 1);
        let (items, _) = s.list("pods", None, None).unwrap();
        assert_eq!(items.len(), 2);
    }

    #[test]
    fn unchanged_writes_keep_the_resource_version() {
        let s = Store::new(None);
        let rv1 = put(&s, "a", 1);
        let (obj, ()) = s
            .mutate(&key("a"), |old, _| Ok((old.cloned(), ())))
            .unwrap();
        assert_eq!(rv_of(&obj.unwrap()), rv1);
        assert_eq!(s.current_rv(), rv1);
    }

    #[test]
    fn compaction_makes_older_versions_gone() {
        let s = Store::new(None);
        let rv1 = put(&s, "a", 1);
        put(&s, "a", 2);
        s.compact();
        assert_eq!(s.watch("pods", None, Some(rv1)).unwrap_err().code, 410);
        assert_eq!(s.list("pods", None, Some(rv1)).unwrap_err().code, 410);
        assert!(
            s.watch("pods", None, Some(s.current_rv()))
                .unwrap()
                .initial
                .is_empty()
        );
    }

    #[test]
    fn watch_resumes_after_a_version() {
        let s = Store::new(None);
        let rv1 = put(&s, "a", 1);
        put(&s, "b", 1);
        s.mutate(&key("a"), |_, _| Ok((None, ()))).unwrap();
        let events = s.watch("pods", Some("ns"), Some(rv1)).unwrap().initial;
        let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventType::Added, EventType::Deleted]);
        assert_eq!(rv_of(&events[1].object), s.current_rv());
    }
}

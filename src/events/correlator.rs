//! client-go's `EventCorrelator` (`tools/record/events_cache.go`), pure: the sink
//! feeds it each recorded event with the time and gets back what to write.
//!
//! - aggregation: more than 10 events about one object that differ only in message
//!   within 10 minutes become one "(combined from similar events): …" event;
//! - logging: an event seen before (same key) becomes an update of its `count` and
//!   `lastTimestamp` rather than a new object;
//! - spam filter: a token bucket per source and object, burst 25, refilled by one
//!   every 5 minutes.
//!
//! Each cache holds at most 4096 keys (client-go's LRU size); the least recently used
//! key goes first.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;

use super::{EventType, ObjectRef, Reason, Recorded};

const MAX_CACHE_ENTRIES: usize = 4096;
const AGGREGATE_MAX_EVENTS: usize = 10;
const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
const SPAM_BURST: f64 = 25.0;
const SPAM_QPS: f64 = 1.0 / 300.0;
const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// One event as it should be on the apiserver.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EventRecord {
    /// `<object name>.<hex nanoseconds>`, kept for every repeat.
    pub name: String,
    pub object: ObjectRef,
    pub kind: EventType,
    pub reason: Reason,
    pub message: String,
    pub count: i32,
    pub first: jiff::Timestamp,
    pub last: jiff::Timestamp,
    pub annotations: BTreeMap<String, String>,
}

/// What the sink should do with one recorded event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Correlated {
    /// Spam: drop it.
    Skip,
    /// A new event object.
    Create(EventRecord),
    /// A repeat: patch `count`, `lastTimestamp` and `message` of `name`.
    Update(EventRecord),
}

/// A map bounded to `MAX_CACHE_ENTRIES`, dropping the least recently used key.
#[derive(Debug)]
struct Lru<V> {
    map: HashMap<String, (V, u64)>,
    tick: u64,
}

impl<V> Default for Lru<V> {
    fn default() -> Self {
        Lru {
            map: HashMap::new(),
            tick: 0,
        }
    }
}

impl<V> Lru<V> {
    fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(v, t)| {
            *t = tick;
            v
        })
    }

    fn remove_where(&mut self, matches: impl Fn(&str) -> bool) {
        self.map.retain(|k, _| !matches(k));
    }

    fn count_where(&self, matches: impl Fn(&str) -> bool) -> usize {
        self.map.keys().filter(|k| matches(k)).count()
    }

    fn insert(&mut self, key: String, value: V) {
        self.tick += 1;
        if self.map.len() >= MAX_CACHE_ENTRIES && !self.map.contains_key(&key) {
            let oldest = self.map.iter().min_by_key(|(_, (_, t))| *t);
            if let Some(k) = oldest.map(|(k, _)| k.clone()) {
                self.map.remove(&k);
            }
        }
        self.map.insert(key, (value, self.tick));
    }
}

struct Aggregate {
    messages: HashSet<String>,
    last: Instant,
}

struct Observed {
    count: i32,
    first: jiff::Timestamp,
    name: String,
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The correlator's state: three bounded caches.
#[derive(Default)]
pub(crate) struct Correlator {
    aggregates: Lru<Aggregate>,
    observed: Lru<Observed>,
    spam: Lru<Bucket>,
}

/// The object part of every key (client-go's `getSpamKey` without the source, which
/// is the same for every event of this process).
fn object_key(o: &ObjectRef) -> String {
    format!("{}\0{}\0{}\0{}", o.kind, o.namespace, o.name, o.uid)
}

/// `EventAggregatorByReasonFunc`'s aggregate key: object, type, reason.
fn aggregate_key(e: &Recorded) -> String {
    format!(
        "{}\0{}\0{}",
        object_key(&e.object),
        e.kind.as_str(),
        e.reason
    )
}

/// `getEventKey`: object with its field path, type, reason, message.
fn event_key(object: &ObjectRef, kind: EventType, reason: &str, message: &str) -> String {
    format!(
        "{}\0{}\0{}\0{reason}\0{message}",
        object_key(object),
        object.field_path,
        kind.as_str()
    )
}

/// client-go's event name: the object's name and the time in hex nanoseconds.
pub(crate) fn event_name(object: &str, at: jiff::Timestamp) -> String {
    format!("{object}.{:x}", at.as_nanosecond())
}

/// The object UID a key starts with (the fourth field of [`object_key`]).
fn uid_of(key: &str) -> Option<&str> {
    key.split('\0').nth(3)
}

impl Correlator {
    /// Drops every entry about the object `uid`: it is gone, and a new one has a new
    /// UID, so none could match again. client-go keeps them until the LRU pushes them
    /// out; without this a node that churns pods holds its three caches full for good.
    pub(crate) fn forget(&mut self, uid: &str) {
        let about = |key: &str| uid_of(key) == Some(uid);
        self.aggregates.remove_where(about);
        self.observed.remove_where(about);
        self.spam.remove_where(about);
    }

    /// Entries in its three caches (the census).
    pub(crate) fn entries(&self) -> usize {
        self.aggregates.map.len() + self.observed.map.len() + self.spam.map.len()
    }

    /// Of [`entries`](Self::entries), those about pods ([`forget`](Self::forget) takes
    /// them as pods leave); the rest are about the Node, which stays.
    pub(crate) fn pod_entries(&self) -> usize {
        let about_a_pod = |key: &str| key.starts_with("Pod\0");
        self.aggregates.count_where(about_a_pod)
            + self.observed.count_where(about_a_pod)
            + self.spam.count_where(about_a_pod)
    }

    /// Correlates one event recorded at `e.at`, seen by the sink at `now`.
    pub(crate) fn correlate(&mut self, e: &Recorded, now: Instant) -> Correlated {
        let (object, message, key) = self.aggregate(e, now);
        let record = self.observe(e, object, message, key);
        if self.spam_filtered(&e.object, now) {
            return Correlated::Skip;
        }
        if record.count > 1 {
            Correlated::Update(record)
        } else {
            Correlated::Create(record)
        }
    }

    /// `EventAggregate`: the event's object, message and cache key, combined once 10
    /// distinct messages were seen for its aggregate key within the interval.
    fn aggregate(&mut self, e: &Recorded, now: Instant) -> (ObjectRef, String, String) {
        let akey = aggregate_key(e);
        let fresh = || Aggregate {
            messages: HashSet::new(),
            last: now,
        };
        let mut record = match self.aggregates.map.remove(&akey) {
            Some((r, _)) if now.saturating_duration_since(r.last) <= AGGREGATE_INTERVAL => r,
            _ => fresh(),
        };
        record.messages.insert(e.message.clone());
        record.last = now;
        let distinct = record.messages.len();
        if distinct >= AGGREGATE_MAX_EVENTS {
            // Never grow past the threshold (client-go's PopAny).
            if let Some(any) = record.messages.iter().next().cloned() {
                record.messages.remove(&any);
            }
        }
        self.aggregates.insert(akey.clone(), record);
        if distinct < AGGREGATE_MAX_EVENTS {
            let key = event_key(&e.object, e.kind, &e.reason, &e.message);
            return (e.object.clone(), e.message.clone(), key);
        }
        (
            e.object.clone(),
            format!("{COMBINED_PREFIX}{}", e.message),
            akey,
        )
    }

    /// `eventObserve`: counts repeats of the same key, keeping the first name and time.
    fn observe(
        &mut self,
        e: &Recorded,
        object: ObjectRef,
        message: String,
        key: String,
    ) -> EventRecord {
        let (count, first, name) = match self.observed.get_mut(&key) {
            Some(o) => (o.count + 1, o.first, o.name.clone()),
            None => (1, e.at, event_name(&object.name, e.at)),
        };
        self.observed.insert(
            key,
            Observed {
                count,
                first,
                name: name.clone(),
            },
        );
        EventRecord {
            name,
            object,
            kind: e.kind,
            reason: e.reason.clone(),
            message,
            count,
            first,
            last: e.at,
            annotations: e.annotations.clone(),
        }
    }

    /// `EventSourceObjectSpamFilter.Filter`: true when this object's bucket is empty.
    fn spam_filtered(&mut self, object: &ObjectRef, now: Instant) -> bool {
        let key = object_key(object);
        if self.spam.get_mut(&key).is_none() {
            let full = Bucket {
                tokens: SPAM_BURST,
                last: now,
            };
            self.spam.insert(key.clone(), full);
        }
        let bucket = self.spam.get_mut(&key).expect("just inserted");
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * SPAM_QPS).min(SPAM_BURST);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            false
        } else {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::reason;
    use super::*;

    fn obj(name: &str) -> ObjectRef {
        ObjectRef {
            kind: "Pod",
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            field_path: "spec.containers{app}".into(),
        }
    }

    fn ev(o: &ObjectRef, reason: &'static str, message: &str) -> Recorded {
        Recorded {
            object: o.clone(),
            kind: EventType::Normal,
            reason: reason.into(),
            message: message.into(),
            at: jiff::Timestamp::now(),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn identical_events_count_up_under_one_name() {
        let (mut c, now, o) = (Correlator::default(), Instant::now(), obj("p"));
        let Correlated::Create(first) = c.correlate(&ev(&o, reason::BACK_OFF, "m"), now) else {
            panic!("the first is a create")
        };
        assert_eq!(first.count, 1);
        assert!(first.name.starts_with("p."), "{}", first.name);
        let Correlated::Update(second) = c.correlate(&ev(&o, reason::BACK_OFF, "m"), now) else {
            panic!("a repeat is an update")
        };
        assert_eq!((second.count, &second.name), (2, &first.name));
        assert_eq!(second.first, first.first);
        // Another message, reason or field path is another event.
        assert!(matches!(
            c.correlate(&ev(&o, reason::BACK_OFF, "other"), now),
            Correlated::Create(_)
        ));
        assert!(matches!(
            c.correlate(&ev(&o, reason::PULLED, "m"), now),
            Correlated::Create(_)
        ));
        let mut init = ev(&o, reason::BACK_OFF, "m");
        init.object.field_path = "spec.initContainers{i}".into();
        assert!(matches!(c.correlate(&init, now), Correlated::Create(_)));
    }

    #[test]
    fn ten_similar_events_are_combined() {
        let (mut c, now, o) = (Correlator::default(), Instant::now(), obj("p"));
        for i in 0..9 {
            let r = c.correlate(&ev(&o, reason::UNHEALTHY, &format!("m{i}")), now);
            assert!(matches!(r, Correlated::Create(ref e) if e.message == format!("m{i}")));
        }
        let Correlated::Create(combined) = c.correlate(&ev(&o, reason::UNHEALTHY, "m9"), now)
        else {
            panic!("the 10th is a new combined event")
        };
        assert_eq!(combined.message, "(combined from similar events): m9");
        let Correlated::Update(again) = c.correlate(&ev(&o, reason::UNHEALTHY, "m10"), now) else {
            panic!("the next similar one updates the combined event")
        };
        assert_eq!(again.count, 2);
        assert_eq!(again.name, combined.name);
        assert_eq!(again.message, "(combined from similar events): m10");
        // After the interval the group starts again.
        let later = now + AGGREGATE_INTERVAL + Duration::from_secs(1);
        let r = c.correlate(&ev(&o, reason::UNHEALTHY, "m11"), later);
        assert!(matches!(r, Correlated::Create(ref e) if e.message == "m11"));
    }

    #[test]
    fn spam_filter_is_per_object_and_refills_slowly() {
        let (mut c, now) = (Correlator::default(), Instant::now());
        let (a, b) = (obj("a"), obj("b"));
        for i in 0..25 {
            let r = c.correlate(&ev(&a, reason::BACK_OFF, &format!("{}", i % 3)), now);
            assert_ne!(r, Correlated::Skip, "event {i} is within the burst");
        }
        assert_eq!(
            c.correlate(&ev(&a, reason::BACK_OFF, "0"), now),
            Correlated::Skip
        );
        // Another object has its own bucket.
        assert_ne!(
            c.correlate(&ev(&b, reason::BACK_OFF, "0"), now),
            Correlated::Skip
        );
        // One token back after 5 minutes, not before.
        let soon = now + Duration::from_secs(200);
        assert_eq!(
            c.correlate(&ev(&a, reason::BACK_OFF, "0"), soon),
            Correlated::Skip
        );
        let later = now + Duration::from_secs(301);
        assert_ne!(
            c.correlate(&ev(&a, reason::BACK_OFF, "0"), later),
            Correlated::Skip
        );
    }

    #[test]
    fn caches_stay_bounded() {
        let (mut c, now) = (Correlator::default(), Instant::now());
        for i in 0..MAX_CACHE_ENTRIES + 10 {
            c.correlate(&ev(&obj(&format!("p{i}")), reason::PULLED, "m"), now);
        }
        assert_eq!(c.observed.map.len(), MAX_CACHE_ENTRIES);
        assert_eq!(c.spam.map.len(), MAX_CACHE_ENTRIES);
        assert_eq!(c.aggregates.map.len(), MAX_CACHE_ENTRIES);
    }

    #[test]
    fn a_forgotten_object_leaves_nothing_and_starts_afresh() {
        let (mut c, now) = (Correlator::default(), Instant::now());
        let (gone, kept) = (obj("gone"), obj("kept"));
        for o in [&gone, &kept] {
            for i in 0..3 {
                c.correlate(&ev(o, reason::BACK_OFF, &format!("m{i}")), now);
            }
        }
        let before = c.entries();
        c.forget(&gone.uid);
        // One aggregate, three observed and one spam bucket each.
        assert_eq!((before, c.entries()), (10, 5));
        c.correlate(
            &ev(&ObjectRef::node("n1"), reason::NODE_READY, "ready"),
            now,
        );
        assert_eq!((c.entries(), c.pod_entries()), (8, 5));
        c.forget("n1");
        assert!(
            [
                &c.aggregates.map.keys().collect::<Vec<_>>(),
                &c.observed.map.keys().collect(),
                &c.spam.map.keys().collect()
            ]
            .iter()
            .flat_map(|keys| keys.iter())
            .all(|k| uid_of(k) == Some(kept.uid.as_str()))
        );
        // The kept object still counts up; the forgotten one would start again at 1.
        let Correlated::Update(r) = c.correlate(&ev(&kept, reason::BACK_OFF, "m0"), now) else {
            panic!("a repeat of a kept object is an update")
        };
        assert_eq!(r.count, 2);
        let Correlated::Create(r) = c.correlate(&ev(&gone, reason::BACK_OFF, "m0"), now) else {
            panic!("nothing is remembered of a forgotten object")
        };
        assert_eq!(r.count, 1);
        // A UID that is a prefix of another's takes only its own.
        c.forget("uid-kep");
        assert_eq!(c.entries(), 8);
    }

    #[test]
    fn names_are_hex_nanoseconds() {
        let at = jiff::Timestamp::from_nanosecond(255).unwrap();
        assert_eq!(event_name("p", at), "p.ff");
    }
}

//! The stories: one per pod name, each a few lives (one per UID the name had), each
//! life a bounded list of entries. Bounded three ways, so churn or a crash loop can
//! never grow it without end: entries per life (the first ones, which tell the start,
//! and the latest ones), lives per name, and lives kept after their pod is gone.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::locks::Locked;

/// The first entries of a life are kept whatever follows: they tell how it started.
pub(crate) const FIRST_KEPT: usize = 24;
/// The latest entries of a life, after the first ones.
const LATEST_KEPT: usize = 104;
/// Lives of one pod name (a static pod re-created, an API pod deleted and made again).
const LIVES_PER_NAME: usize = 4;
/// How long a life is kept after its pod is gone, so the end of its story can be read.
pub(crate) const GONE_KEPT_FOR: Duration = Duration::from_secs(10 * 60);
/// At most this many lives of gone pods are kept; the oldest gone go first.
const GONE_MAX: usize = 256;

/// One thing that happened to a pod, as the code that decided it said it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// When it was said (RFC 3339, UTC).
    pub(crate) time: jiff::Timestamp,
    /// The room of the code that decided it (`kuberuntime`, `prober`, `eviction`, …).
    pub(crate) room: String,
    /// What happened, in the log line's words.
    pub(crate) what: String,
    /// Why: the line's `cause` (or `reason`) field, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cause: Option<String>,
    /// `warning` or `error` for lines above info; absent for info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) severity: Option<String>,
    /// The line's other fields, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) details: Vec<(String, String)>,
}

/// One UID's story.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Life {
    /// The pod's UID (empty when no line named it yet).
    pub(crate) uid: String,
    /// When housekeeping first found the pod gone (kept for [`GONE_KEPT_FOR`]).
    #[serde(default, rename = "goneAt", skip_serializing_if = "Option::is_none")]
    pub(crate) gone_at: Option<jiff::Timestamp>,
    /// Entries left out between the first and the latest ones.
    #[serde(default)]
    pub(crate) dropped: u64,
    pub(crate) entries: Vec<Entry>,
}

/// Everything kept for one pod name, oldest life first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Story {
    /// `namespace/name`.
    pub(crate) pod: String,
    pub(crate) lives: Vec<Life>,
}

/// An entry as it is kept: exact-size text, and the room and field names as the
/// `'static` strings tracing gives, so 110 pods' stories stay small.
pub(crate) struct Stored {
    pub time: jiff::Timestamp,
    pub room: &'static str,
    pub what: Box<str>,
    pub cause: Option<Box<str>>,
    /// `Some("warning")` or `Some("error")` above info.
    pub severity: Option<&'static str>,
    pub details: Box<[(&'static str, Box<str>)]>,
}

impl Stored {
    fn view(&self) -> Entry {
        Entry {
            time: self.time,
            room: self.room.to_string(),
            what: self.what.to_string(),
            cause: self.cause.as_deref().map(str::to_string),
            severity: self.severity.map(str::to_string),
            details: self
                .details
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.to_string()))
                .collect(),
        }
    }
}

/// A life as it is kept: the first entries, then a ring of the latest.
struct Kept {
    uid: String,
    first: Vec<Stored>,
    latest: VecDeque<Stored>,
    dropped: u64,
    gone: Option<(Instant, jiff::Timestamp)>,
}

impl Kept {
    fn new(uid: &str) -> Kept {
        Kept {
            uid: uid.to_string(),
            first: Vec::new(),
            latest: VecDeque::new(),
            dropped: 0,
            gone: None,
        }
    }

    fn push(&mut self, entry: Stored) {
        if self.first.len() < FIRST_KEPT {
            self.first.push(entry);
            return;
        }
        if self.latest.len() == LATEST_KEPT {
            self.latest.pop_front();
            self.dropped += 1;
        }
        self.latest.push_back(entry);
    }

    fn view(&self) -> Life {
        Life {
            uid: self.uid.clone(),
            gone_at: self.gone.map(|(_, at)| at),
            dropped: self.dropped,
            entries: self
                .first
                .iter()
                .chain(&self.latest)
                .map(Stored::view)
                .collect(),
        }
    }
}

/// Every pod's story, by `namespace/name`.
#[derive(Default)]
pub(crate) struct Timelines {
    stories: Mutex<HashMap<String, Vec<Kept>>>,
}

impl Timelines {
    /// Pod names with a story, and their lives (the census).
    pub(crate) fn census(&self) -> (usize, usize) {
        let stories = self.stories.locked();
        (stories.len(), stories.values().map(Vec::len).sum())
    }

    /// Adds `entry` to the life of `uid` (the name's latest life when the line named
    /// no UID), starting a new life when the UID is new to the name.
    pub(crate) fn record(&self, pod: &str, uid: Option<&str>, entry: Stored) {
        let mut stories = self.stories.locked();
        let lives = match stories.get_mut(pod) {
            Some(l) => l,
            None => stories.entry(pod.to_string()).or_default(),
        };
        let at = match uid {
            None if !lives.is_empty() => lives.len() - 1,
            None => {
                lives.push(Kept::new(""));
                0
            }
            Some(uid) => match lives.iter().rposition(|l| l.uid == uid) {
                Some(i) => i,
                // Lines that named no UID started this life; it is this UID's.
                None if lives.last().is_some_and(|l| l.uid.is_empty()) => {
                    let i = lives.len() - 1;
                    lives[i].uid = uid.to_string();
                    i
                }
                None => {
                    if lives.len() == LIVES_PER_NAME {
                        lives.remove(0);
                    }
                    lives.push(Kept::new(uid));
                    lives.len() - 1
                }
            },
        };
        lives[at].push(entry);
    }

    /// The story of `namespace/name`, if anything was said of it.
    pub(crate) fn story(&self, pod: &str) -> Option<Story> {
        let stories = self.stories.locked();
        stories.get(pod).map(|lives| Story {
            pod: pod.to_string(),
            lives: lives.iter().map(Kept::view).collect(),
        })
    }

    /// Housekeeping's pass: a life whose UID `live` no longer knows is marked gone
    /// (and live again if it comes back); lives gone longer than [`GONE_KEPT_FOR`], and
    /// the oldest gone beyond [`GONE_MAX`], are dropped.
    pub(crate) fn retain_live(&self, live: impl Fn(&str) -> bool) {
        self.retain_live_at(live, Instant::now());
    }

    fn retain_live_at(&self, live: impl Fn(&str) -> bool, now: Instant) {
        let mut stories = self.stories.locked();
        let mut gone: Vec<Instant> = Vec::new();
        for lives in stories.values_mut() {
            for l in lives.iter_mut() {
                // A life whose lines named no UID yet belongs to a pod still arriving.
                if l.uid.is_empty() || live(&l.uid) {
                    l.gone = None;
                } else if l.gone.is_none() {
                    l.gone = Some((now, jiff::Timestamp::now()));
                }
            }
            lives.retain(|l| {
                l.gone
                    .is_none_or(|(at, _)| now.saturating_duration_since(at) < GONE_KEPT_FOR)
            });
            gone.extend(lives.iter().filter_map(|l| l.gone.map(|(at, _)| at)));
        }
        if gone.len() > GONE_MAX {
            gone.sort_unstable();
            let cutoff = gone[gone.len() - GONE_MAX];
            for lives in stories.values_mut() {
                lives.retain(|l| l.gone.is_none_or(|(at, _)| at >= cutoff));
            }
        }
        stories.retain(|_, lives| !lives.is_empty());
    }

    /// How many entries are kept in all.
    #[cfg(test)]
    fn entries(&self) -> usize {
        let stories = self.stories.locked();
        stories
            .values()
            .flatten()
            .map(|l| l.first.len() + l.latest.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(what: &str) -> Stored {
        Stored {
            time: jiff::Timestamp::now(),
            room: "test",
            what: what.into(),
            cause: None,
            severity: None,
            details: Box::new([]),
        }
    }

    #[test]
    fn a_life_keeps_its_first_and_latest_entries() {
        let t = Timelines::default();
        for i in 0..1000 {
            t.record("ns/a", Some("u1"), entry(&format!("e{i}")));
        }
        let life = &t.story("ns/a").unwrap().lives[0];
        assert_eq!(life.entries.len(), FIRST_KEPT + LATEST_KEPT);
        assert_eq!(life.entries[0].what, "e0");
        assert_eq!(
            life.entries[FIRST_KEPT - 1].what,
            format!("e{}", FIRST_KEPT - 1)
        );
        assert_eq!(life.entries.last().unwrap().what, "e999");
        assert_eq!(life.dropped, (1000 - FIRST_KEPT - LATEST_KEPT) as u64);
    }

    #[test]
    fn lines_without_a_uid_join_the_latest_life_and_a_new_uid_starts_one() {
        let t = Timelines::default();
        t.record("ns/a", None, entry("update from config"));
        t.record("ns/a", Some("u1"), entry("sandbox"));
        t.record("ns/a", None, entry("event"));
        t.record("ns/a", Some("u2"), entry("re-created"));
        let s = t.story("ns/a").unwrap();
        assert_eq!(s.lives.len(), 2);
        assert_eq!(s.lives[0].uid, "u1");
        assert_eq!(s.lives[0].entries.len(), 3);
        assert_eq!(s.lives[1].uid, "u2");
        for i in 0..10 {
            t.record("ns/a", Some(&format!("n{i}")), entry("x"));
        }
        assert_eq!(t.story("ns/a").unwrap().lives.len(), LIVES_PER_NAME);
    }

    #[test]
    fn gone_lives_are_kept_for_a_while_then_dropped() {
        let t = Timelines::default();
        t.record("ns/a", Some("u1"), entry("x"));
        t.record("ns/b", Some("u2"), entry("y"));
        let start = Instant::now();
        t.retain_live_at(|uid| uid == "u2", start);
        let a = t.story("ns/a").unwrap();
        assert!(a.lives[0].gone_at.is_some(), "marked gone");
        t.retain_live_at(|uid| uid == "u2", start + GONE_KEPT_FOR / 2);
        assert!(t.story("ns/a").is_some(), "kept for a while");
        t.retain_live_at(|uid| uid == "u2", start + GONE_KEPT_FOR);
        assert!(t.story("ns/a").is_none(), "dropped after GONE_KEPT_FOR");
        assert!(t.story("ns/b").unwrap().lives[0].gone_at.is_none());
    }

    #[test]
    fn no_more_than_gone_max_gone_lives_are_kept() {
        let t = Timelines::default();
        let start = Instant::now();
        for i in 0..GONE_MAX + 50 {
            t.record(&format!("ns/p{i}"), Some(&format!("u{i}")), entry("x"));
            // Each pod goes a millisecond after the one before.
            t.retain_live_at(
                |uid| uid.trim_start_matches('u').parse::<usize>().unwrap() > i,
                start + Duration::from_millis(i as u64),
            );
        }
        assert_eq!(t.entries(), GONE_MAX);
        assert!(t.story("ns/p0").is_none(), "the oldest gone went first");
        assert!(t.story(&format!("ns/p{}", GONE_MAX + 49)).is_some());
    }
}

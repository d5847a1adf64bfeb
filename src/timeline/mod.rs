//! Each pod's timeline: what happened to it, when, why, and which room of the code
//! decided it, kept per pod in memory and served at
//! `/debug/pods/{namespace}/{name}/timeline` (`oxlet timeline` prints it).
//!
//! kubelet has no such view: its story of a pod is spread over thousands of log lines.
//! Here the story is the log itself, one pod at a time: [`TimelineLayer`] turns every
//! line at `-v=2` or below that names a pod into an entry, so a decision is told once,
//! as a sentence with its cause, and both the log and the timeline show it. The stories
//! are bounded ([`store`]'s limits) and a gone pod's is kept for
//! [`GONE_KEPT_FOR`].

mod layer;
mod store;

use std::sync::OnceLock;

pub(crate) use layer::TimelineLayer;
#[cfg(test)]
use store::Stored;
pub(crate) use store::{Entry, GONE_KEPT_FOR, Story, Timelines};

/// The process's stories: the log is process-wide, so the timelines are too.
pub(crate) fn global() -> &'static Timelines {
    static TIMELINES: OnceLock<Timelines> = OnceLock::new();
    TIMELINES.get_or_init(Timelines::default)
}

/// A story as a person reads it: one line per entry, time, room, what, and why.
pub(crate) fn render_text(story: &Story) -> String {
    let mut out = String::new();
    for life in &story.lives {
        let gone = life
            .gone_at
            .map(|t| format!("  (gone since {})", short_time(t)))
            .unwrap_or_default();
        let uid = if life.uid.is_empty() {
            "(no UID yet)"
        } else {
            &life.uid
        };
        out.push_str(&format!("pod {}  uid {uid}{gone}\n", story.pod));
        for (i, e) in life.entries.iter().enumerate() {
            // The left-out entries sat after the first ones a life keeps.
            if i == store::FIRST_KEPT && life.dropped > 0 {
                out.push_str(&format!("  … {} entries left out …\n", life.dropped));
            }
            out.push_str(&entry_line(e));
        }
    }
    out
}

fn entry_line(e: &Entry) -> String {
    let mut line = format!("  {}  {:<11} {}", short_time(e.time), e.room, e.what);
    if let Some(c) = &e.cause {
        line.push_str(&format!("  [cause: {c}]"));
    }
    if let Some(s) = &e.severity {
        line.push_str(&format!("  ({s})"));
    }
    for (k, v) in &e.details {
        line.push_str(&format!(" {k}={}", crate::klog::quote(v)));
    }
    line.push('\n');
    line
}

/// `15:04:05.000` in UTC: a story spans minutes, and the date is in the JSON.
fn short_time(t: jiff::Timestamp) -> String {
    t.strftime("%H:%M:%S%.3f").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_story_reads_as_one_line_per_entry_with_its_cause() {
        let t = Timelines::default();
        let time: jiff::Timestamp = "2026-11-28T10:00:01.5Z".parse().unwrap();
        t.record(
            "default/web",
            Some("u1"),
            Stored {
                time,
                room: "kuberuntime",
                what: "back-off 20s restarting failed container".into(),
                cause: Some("exited with code 1".into()),
                severity: None,
                details: Box::new([("container", "app".into())]),
            },
        );
        let text = render_text(&t.story("default/web").unwrap());
        assert_eq!(
            text,
            "pod default/web  uid u1\n  10:00:01.500  kuberuntime back-off 20s restarting failed container  [cause: exited with code 1] container=app\n"
        );
    }
}

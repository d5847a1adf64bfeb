//! The tracing layer that writes the stories: every line of oxlet's at `-v=2` or
//! below that names a pod (`pod=namespace/name`) becomes an entry of that pod's
//! story, whatever `-v` the process logs at. So the timeline says exactly what the
//! `-v=2` log says, one pod at a time, and a decision needs no second call to be told.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;

use super::store::Stored;

/// A field's value is cut to this many bytes (probe output can be long).
const VALUE_MAX: usize = 256;
/// The message is cut to this many bytes.
const WHAT_MAX: usize = 512;
/// At most this many other fields are kept per entry.
const DETAILS_MAX: usize = 12;

/// Feeds [`super::global`] from the log.
pub(crate) struct TimelineLayer;

impl<S: Subscriber> tracing_subscriber::Layer<S> for TimelineLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        // The cheap test first: most lines name no pod, and their values are never formatted.
        if meta.fields().field("pod").is_none() || *meta.level() > Level::INFO {
            return;
        }
        let mut line = Line::default();
        event.record(&mut line);
        let Some(pod) = line.pod.take() else { return };
        // Only `namespace/name`: a line that names a pod some other way is not a story.
        if pod.split('/').count() != 2 {
            return;
        }
        // The module, not the target: a line may go to a verbosity's target (`oxlet::v3`).
        let room = room_of(meta.module_path().unwrap_or(meta.target()));
        // A recorded event reads as its message; `events` already says what it is.
        let what = match line.what.strip_prefix("Event: ") {
            Some(m) if room == "events" => m,
            _ => &line.what,
        };
        let entry = Stored {
            time: jiff::Timestamp::now(),
            room,
            what: crate::klog::one_line(what).into(),
            cause: line.cause.map(|c| crate::klog::one_line(&c).into()),
            severity: match *meta.level() {
                Level::ERROR => Some("error"),
                Level::WARN => Some("warning"),
                _ => None,
            },
            details: line.details.into_boxed_slice(),
        };
        super::global().record(&pod, line.uid.as_deref(), entry);
    }
}

/// The room of a target: `oxlet::kuberuntime::manager` → `kuberuntime`; recorded
/// events (`oxlet::events`) keep `events`.
fn room_of(target: &'static str) -> &'static str {
    let rest = target.strip_prefix("oxlet::").unwrap_or(target);
    rest.split("::").next().unwrap_or(rest)
}

/// One line's fields, sorted into an entry's parts.
#[derive(Default)]
struct Line {
    pod: Option<String>,
    uid: Option<String>,
    what: String,
    cause: Option<String>,
    details: Vec<(&'static str, Box<str>)>,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut s = String::new();
        let _ = write!(s, "{value:?}");
        self.take(field, s);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.take(field, value.to_string());
    }
}

impl Line {
    fn take(&mut self, field: &Field, mut value: String) {
        match field.name() {
            "pod" => self.pod = Some(value),
            "podUID" => self.uid = Some(value),
            "message" => {
                cut(&mut value, WHAT_MAX);
                self.what = value;
            }
            "cause" => {
                cut(&mut value, VALUE_MAX);
                self.cause = Some(value);
            }
            // Recorded events and kills say why in `reason`; `cause` wins when both are set.
            "reason" if self.cause.is_none() => {
                cut(&mut value, VALUE_MAX);
                self.cause = Some(value);
            }
            name if self.details.len() < DETAILS_MAX => {
                cut(&mut value, VALUE_MAX);
                self.details.push((name, value.into_boxed_str()));
            }
            _ => {}
        }
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary, marking the cut.
fn cut(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push('…');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_is_the_targets_first_module() {
        assert_eq!(room_of("oxlet::kuberuntime::manager"), "kuberuntime");
        assert_eq!(room_of("oxlet::events"), "events");
        assert_eq!(room_of("oxlet"), "oxlet");
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        let mut s = "é".repeat(300);
        cut(&mut s, 255);
        assert!(s.len() <= 255 + '…'.len_utf8());
        assert!(s.ends_with('…'));
    }
}

//! kubelet's `/debug/pprof/` (Go's `net/http/pprof`), as far as a Rust process can
//! give it. `profile?seconds=N` samples the CPU for N seconds (30 by default, as Go)
//! at 100 Hz, through SIGPROF and a stack walk per sample (pprof-rs), and answers in
//! pprof's own format, a gzipped `perftools.profiles.Profile` protobuf, so `go tool
//! pprof`, `pprof` and every reader of that format open it. `cmdline` is the command
//! line, NUL-separated, as Go's. There is no heap profile: glibc's malloc keeps no
//! record of where memory was allocated (Go's runtime samples its allocations), and
//! one CPU profile runs at a time, as in Go.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::Query;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tracing::info;

/// Samples a second, as Go's CPU profiler takes them.
const FREQUENCY: i32 = 100;
/// Go's default duration.
const DEFAULT_SECONDS: u64 = 30;
/// The longest profile served: a request holds a thread for its duration.
const MAX_SECONDS: u64 = 300;
/// Frames from these libraries are left out of the stacks (the signal's own path).
const BLOCKLIST: &[&str] = &["libc", "libgcc", "pthread", "vdso"];

/// One profile at a time (Go's "cpu profiling already in use").
static RUNNING: AtomicBool = AtomicBool::new(false);

/// pprof's `profile.proto`, the messages and fields a CPU profile uses.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub(super) struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// `?seconds=` as Go reads it: a positive integer, else the default.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ProfileQuery {
    seconds: Option<String>,
}

fn seconds(q: &ProfileQuery) -> u64 {
    q.seconds
        .as_deref()
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| *n > 0)
        .map_or(DEFAULT_SECONDS, i64::unsigned_abs)
}

fn plain(code: StatusCode, text: &str) -> Response {
    (
        code,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        format!("{text}\n"),
    )
        .into_response()
}

/// `GET /debug/pprof/profile`.
pub(crate) async fn profile(Query(q): Query<ProfileQuery>) -> Response {
    let secs = seconds(&q);
    if secs > MAX_SECONDS {
        return plain(
            StatusCode::BAD_REQUEST,
            &format!("profile duration exceeds the longest oxlet serves ({MAX_SECONDS}s)"),
        );
    }
    if RUNNING.swap(true, Ordering::AcqRel) {
        return plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Could not enable CPU profiling: cpu profiling already in use",
        );
    }
    info!(
        seconds = secs,
        "CPU profile requested: sampling every thread at 100 Hz"
    );
    let taken = tokio::task::spawn_blocking(move || sample(Duration::from_secs(secs))).await;
    RUNNING.store(false, Ordering::Release);
    match taken {
        Ok(Ok(body)) => (
            [
                (header::CONTENT_TYPE, "application/octet-stream"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"profile\"",
                ),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            body,
        )
            .into_response(),
        Ok(Err(e)) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("Could not enable CPU profiling: {e}"),
        ),
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// Samples for `for_how_long` (on a blocking thread: the profiler's guard stays on
/// the thread that made it) and encodes the result.
fn sample(for_how_long: Duration) -> Result<Vec<u8>, pprof::Error> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        .blocklist(BLOCKLIST)
        .build()?;
    std::thread::sleep(for_how_long);
    let report = guard.report().build()?;
    drop(guard);
    let samples = report.data.iter().map(|(frames, count)| {
        let stack = frames
            .frames
            .iter()
            .map(|symbols| symbols.iter().map(|s| (s.name(), s.lineno)).collect());
        (frames.thread_name.clone(), stack.collect(), *count)
    });
    let profile = encode(
        samples.collect(),
        report.timing.start_time,
        report.timing.duration,
        report.timing.frequency,
    );
    Ok(gzip(&prost::Message::encode_to_vec(&profile)))
}

/// One sampled stack: its thread, its frames innermost first (each the symbols of
/// one address, inlined ones first), and how many times it was seen.
type Stack = (String, Vec<Vec<(String, Option<u32>)>>, isize);

/// Builds pprof's tables: strings, functions and locations deduplicated, each
/// sample's values as Go's CPU profile has them (`samples/count`, `cpu/nanoseconds`).
fn encode(
    stacks: Vec<Stack>,
    start: std::time::SystemTime,
    duration: Duration,
    frequency: i32,
) -> proto::Profile {
    let mut strings = Strings::default();
    let period = 1_000_000_000 / i64::from(frequency.max(1));
    let mut p = proto::Profile {
        sample_type: vec![
            value_type(&mut strings, "samples", "count"),
            value_type(&mut strings, "cpu", "nanoseconds"),
        ],
        period_type: Some(value_type(&mut strings, "cpu", "nanoseconds")),
        period,
        time_nanos: start
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
        duration_nanos: i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX),
        ..Default::default()
    };
    let thread_key = strings.id("thread");
    let mut functions: HashMap<String, u64> = HashMap::new();
    let mut locations: HashMap<Vec<(u64, i64)>, u64> = HashMap::new();
    for (thread, frames, count) in stacks {
        let mut location_id = Vec::with_capacity(frames.len());
        for symbols in frames {
            let lines: Vec<(u64, i64)> = symbols
                .into_iter()
                .map(|(name, line)| {
                    let next = functions.len() as u64 + 1;
                    let id = *functions.entry(name.clone()).or_insert_with(|| {
                        let name = strings.id(&name);
                        p.function.push(proto::Function {
                            id: next,
                            name,
                            system_name: name,
                            filename: 0,
                        });
                        next
                    });
                    (id, i64::from(line.unwrap_or(0)))
                })
                .collect();
            let next = locations.len() as u64 + 1;
            let id = *locations.entry(lines.clone()).or_insert_with(|| {
                p.location.push(proto::Location {
                    id: next,
                    line: lines
                        .iter()
                        .map(|&(function_id, line)| proto::Line { function_id, line })
                        .collect(),
                });
                next
            });
            location_id.push(id);
        }
        let count = i64::try_from(count).unwrap_or(0);
        p.sample.push(proto::Sample {
            location_id,
            value: vec![count, count * period],
            label: vec![proto::Label {
                key: thread_key,
                str: strings.id(&thread),
            }],
        });
    }
    p.string_table = strings.table;
    p
}

fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> proto::ValueType {
    proto::ValueType {
        r#type: strings.id(kind),
        unit: strings.id(unit),
    }
}

/// pprof's string table: index 0 is the empty string.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Self {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    out.write_all(bytes).expect("writing to memory");
    out.finish().expect("writing to memory")
}

/// `GET /debug/pprof/cmdline`: the command line, NUL-separated, as Go's.
pub(crate) async fn cmdline() -> Response {
    let args: Vec<String> = std::env::args().collect();
    plain(StatusCode::OK, &args.join("\0")).into_response()
}

/// `GET /debug/pprof/` and any other name: what is here, and why the rest is not.
pub(crate) async fn index() -> Response {
    plain(
        StatusCode::NOT_FOUND,
        "oxlet serves /debug/pprof/profile (CPU, pprof's protobuf; ?seconds=N, 30 by default) \
         and /debug/pprof/cmdline; there is no heap, goroutine or other Go runtime profile \
         (oxlet is not a Go program, and glibc's malloc records no allocation sites)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

    #[test]
    fn seconds_are_read_as_go_reads_them() {
        let q = |s: Option<&str>| ProfileQuery {
            seconds: s.map(str::to_string),
        };
        assert_eq!(seconds(&q(None)), 30);
        assert_eq!(seconds(&q(Some("5"))), 5);
        assert_eq!(seconds(&q(Some("0"))), 30);
        assert_eq!(seconds(&q(Some("-3"))), 30);
        assert_eq!(seconds(&q(Some("x"))), 30);
    }

    #[test]
    fn a_profile_is_pprofs_protobuf_with_shared_tables() {
        let stacks = vec![
            (
                "tokio-runtime-worker".to_string(),
                vec![
                    vec![("oxlet::spin".to_string(), Some(12))],
                    vec![("main".to_string(), None)],
                ],
                7,
            ),
            (
                "other".to_string(),
                vec![vec![("main".to_string(), None)]],
                3,
            ),
        ];
        let p = encode(stacks, UNIX_EPOCH, Duration::from_secs(2), 100);
        let bytes = gzip(&prost::Message::encode_to_vec(&p));
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut raw)
            .unwrap();
        let back: proto::Profile = prost::Message::decode(&raw[..]).unwrap();
        assert_eq!(back, p);
        let s = |i: i64| back.string_table[usize::try_from(i).unwrap()].as_str();
        assert_eq!(s(0), "");
        assert_eq!(back.period, 10_000_000);
        assert_eq!(back.duration_nanos, 2_000_000_000);
        assert_eq!(back.function.len(), 2, "main is one function");
        assert_eq!(back.location.len(), 2, "and one location");
        assert_eq!(back.sample[0].value, [7, 70_000_000]);
        assert_eq!(back.sample[1].location_id, [back.sample[0].location_id[1]]);
        assert_eq!(s(back.sample[1].label[0].str), "other");
        let types: Vec<&str> = back.sample_type.iter().map(|t| s(t.r#type)).collect();
        assert_eq!(types, ["samples", "cpu"]);
    }
}

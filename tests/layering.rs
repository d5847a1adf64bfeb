//! The house's floors, checked: every `crate::…` path in production code under `src/`
//! is read, and a room that names a room on its own floor or above, or reaches past
//! another room's face (`crate::room::sub_module::…` instead of what `room`'s
//! `mod.rs` offers), is counted. `FLOORS` is the architecture (`docs/architecture.md`
//! explains it, and must change with it); this test keeps the code from drifting away from it.
//!
//! Issue 21 moves the code onto these floors over several steps. Until the last one,
//! the counts of what is still out of place may only go down: `STILL_UPWARD` and
//! `STILL_PAST_A_FACE` are the counts at the last step, and the test fails when a change
//! adds to either (and asks for the figure to be lowered when a change removes some).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Rooms, bottom floor first. A room may use the rooms of the floors below its own.
const FLOORS: &[&[&str]] = &[
    // the lock policy, which the base rooms use too
    &["locks"],
    // base: needs no other room (but the one HTTP GET uses the TLS set-up)
    &[
        "hash",
        "quantity",
        "duration",
        "flag_text",
        "logging",
        "node",
        "tls",
        "rlimit",
        "safe_path",
        "tasks",
        "pod",
    ],
    &["http_get"],
    // the apiserver clients and the metrics registries
    &["kubeclient", "metrics"],
    &["events", "objects"],
    // the contracts between rooms: traits one room defines and another implements
    &["contracts"],
    // pod sources; the container manager
    &["config", "cm"],
    // the CRI runtime, and the containerd oxlet can manage beside it
    &["runtime"],
    &["containerd"],
    // what watches and reports on the runtime
    &["pleg", "prober", "stats"],
    &["status"],
    // beside the loop: they see pods through the contracts, never the loop itself
    &["eviction", "koord"],
    // the loop and its pod workers
    &["syncloop"],
    // settings, servers, and the agent that wires every room
    &["options"],
    &["server"],
    &["agent"],
];

/// What is still out of place (lower these as rooms move; never raise them).
const STILL_UPWARD: usize = 4;
const STILL_PAST_A_FACE: usize = 42;

fn floor_of(room: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&room))
}

/// Every `.rs` file below `dir`, tests and fakes left out (they may reach anywhere).
fn production_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "testdata") {
                production_files(&p, out);
            }
            continue;
        }
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let test_only =
            name == "tests.rs" || name.ends_with("_tests.rs") || name.starts_with("fake");
        if name.ends_with(".rs") && !test_only {
            out.push(p);
        }
    }
}

/// The file's code before its unit-test module, comments left out (a doc link
/// names a room without using it).
fn production_text(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text,
    };
    code.lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The room a file belongs to: `src/<room>.rs` or anything under `src/<room>/`.
fn room_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every `crate::a::b…` path in `text`, as its segments.
fn crate_paths(text: &str) -> Vec<Vec<&str>> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + "crate::".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        out.push(rest[..end].split("::").filter(|s| !s.is_empty()).collect());
    }
    out
}

/// True when `room` has a module named `name` (a file or a directory under it).
fn is_sub_module(src: &Path, room: &str, name: &str) -> bool {
    let dir = src.join(room);
    dir.join(format!("{name}.rs")).is_file() || dir.join(name).is_dir()
}

#[derive(Default)]
struct Findings {
    /// (from, to) → sites, for a room naming one on its floor or above.
    upward: BTreeMap<(String, String), Vec<String>>,
    /// (from, `to::sub`) → sites, for a path past a room's face.
    past_face: BTreeMap<(String, String), Vec<String>>,
    unknown: Vec<String>,
}

fn survey() -> Findings {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    production_files(&src, &mut files);
    files.sort();
    let mut f = Findings::default();
    for file in &files {
        let room = room_of(&src, file);
        if room == "lib" || room == "main" {
            continue;
        }
        let site = file.strip_prefix(&src).unwrap().display().to_string();
        let Some(floor) = floor_of(&room) else {
            f.unknown.push(room);
            continue;
        };
        for path in crate_paths(&production_text(file)) {
            let Some(&to) = path.first() else { continue };
            if to == room {
                continue;
            }
            match floor_of(to) {
                None => f.unknown.push(to.to_string()),
                Some(t) if t >= floor => f
                    .upward
                    .entry((room.clone(), to.to_string()))
                    .or_default()
                    .push(site.clone()),
                Some(_) => {}
            }
            if let Some(&sub) = path.get(1)
                && is_sub_module(&src, to, sub)
            {
                f.past_face
                    .entry((room.clone(), format!("{to}::{sub}")))
                    .or_default()
                    .push(site.clone());
            }
        }
    }
    f.unknown.sort();
    f.unknown.dedup();
    f
}

fn total(m: &BTreeMap<(String, String), Vec<String>>) -> usize {
    m.values().map(Vec::len).sum()
}

#[test]
fn every_room_is_on_a_floor() {
    let f = survey();
    assert!(
        f.unknown.is_empty(),
        "rooms on no floor (add them to FLOORS and to docs/architecture.md): {:?}",
        f.unknown
    );
}

#[test]
fn no_room_reaches_up_or_past_a_face_more_than_before() {
    let f = survey();
    let (up, past) = (total(&f.upward), total(&f.past_face));
    let mut report = String::new();
    for ((from, to), sites) in &f.upward {
        report += &format!(
            "  up: {from} -> {to} ({} sites, first {})\n",
            sites.len(),
            sites[0]
        );
    }
    println!("{report}");
    println!(
        "imports running up: {up} at {} room pairs; paths past a face: {past} at {} pairs",
        f.upward.len(),
        f.past_face.len()
    );
    assert!(
        up <= STILL_UPWARD,
        "{up} imports run up a floor, {STILL_UPWARD} did before:\n{report}"
    );
    assert!(
        past <= STILL_PAST_A_FACE,
        "{past} paths reach past a room's face, {STILL_PAST_A_FACE} did before"
    );
    assert!(
        (up, past) == (STILL_UPWARD, STILL_PAST_A_FACE),
        "fewer out of place than recorded: set STILL_UPWARD to {up} and STILL_PAST_A_FACE to {past}"
    );
}

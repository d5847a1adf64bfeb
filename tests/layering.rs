//! The house's floors, checked: every `crate::…` path in production code under `src/`
//! is read, and a room that names a room on its own floor or above, or reaches past
//! another room's face (`crate::room::sub_module::…` instead of what `room`'s
//! `mod.rs` offers), is reported. `FLOORS` is the architecture (`docs/architecture.md`
//! explains it, and must change with it); this test keeps the code from drifting away from it.
//!
//! No room imports one on its own floor or above, none reaches past another's face,
//! and no room's `mod.rs` opens a sub-file to the others. Two house rules are checked
//! on the same production text: every lock goes through the lock policy, and no
//! `Result` carries a bare `String` as its error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Rooms, bottom floor first. A room may use the rooms of the floors below its own.
const FLOORS: &[&[&str]] = &[
    // the `/proc` files' parsers, which the safe-path helper's mount table needs too;
    // the CPU and NUMA topology's sysfs files
    &["procfs", "sysfs"],
    // the lock policy, the one safe-path helper, Go's duration spelling, klog's
    // quoting and the versions oxlet says it is, which the base rooms use too
    &["locks", "safe_path", "duration", "klog", "version"],
    // base: needs no other room (but the one HTTP GET uses the TLS set-up)
    &[
        "hash",
        "quantity",
        "flag_text",
        "percent",
        "timeline",
        "node",
        "tls",
        "rlimit",
        "heap",
        "private_file",
        "tasks",
        "census",
        "pod",
        "backoff",
        "yaml",
    ],
    // the one HTTP GET; registry credentials (which read the pod helpers); logging,
    // which feeds the timelines
    &[
        "http_get",
        "credentials",
        "logging",
        "allocation",
        "grpc_unix",
    ],
    // the clients: the apiserver's, and the metrics registries
    &["kubeclient", "metrics"],
    // the clients' users: events and objects through the apiserver, the CRI client
    &["events", "objects", "cri"],
    // the containerd oxlet can manage beside the runtime it talks to
    &["containerd"],
    // the contracts between rooms: traits one room defines and another implements
    &["contracts"],
    // the container manager
    &["cm"],
    // the topology manager's hints, masks and policies, below its hint providers
    &["topology", "pluginwatcher"],
    // the pod resources API: its messages, answers and socket, fed by the managers
    &["podresources"],
    // pod sources; what a pod's runtime set-up is made of
    &["config", "podenv", "images", "logs"],
    &["volumes"],
    // kubelet's kuberuntime: pod actions, sandboxes, containers, kills, container GC
    &["kuberuntime"],
    // what watches and measures the runtime
    &["pleg", "stats"],
    // pod status (kubelet's status manager), which the prober reads
    &["status"],
    &["prober"],
    // the resource managers, each with its state file (kubelet's cm/cpumanager,
    // memorymanager, devicemanager, dra)
    &["cpumanager", "memorymanager", "devicemanager", "dra"],
    // the resource managers as one: admission, what containers get, the reconcile loop
    &["resourcemanager"],
    // beside the loop: they see pods through the contracts, never the loop itself
    &["eviction", "koord", "nodeshutdown"],
    // the loop and its pod workers
    &["syncloop"],
    // settings, servers, and the agent that wires every room
    &["options"],
    &["server"],
    &["agent"],
    // the fuzz targets' entry points (`fuzz/`), above every room they feed
    &["fuzzing"],
];

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
    let code = match text.find("#[cfg(test)]\nmod tests {") {
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

/// Every `crate::a::b…` path in `text`, as its segments; a group (`crate::a::{b, c::d}`)
/// gives one path per member, so grouping cannot hide a path past a face.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        expand_path(&text[i + "crate::".len()..], Vec::new(), &mut out);
    }
    out
}

/// The path at the start of `rest` after the segments in `prefix`, groups expanded.
fn expand_path(rest: &str, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(rest.len());
    let head = &rest[..end];
    prefix.extend(
        head.split("::")
            .filter(|s| !s.is_empty() && *s != "self")
            .map(str::to_string),
    );
    if !(head.ends_with("::") && rest[end..].starts_with('{')) {
        out.push(prefix);
        return;
    }
    let group = &rest[end + 1..];
    let (mut depth, mut start) = (0usize, 0usize);
    for (j, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                expand_path(group[start..j].trim(), prefix.clone(), out);
                return;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_path(group[start..j].trim(), prefix.clone(), out);
                start = j + 1;
            }
            _ => {}
        }
    }
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
            let Some(to) = path.first().map(String::as_str) else {
                continue;
            };
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
            if let Some(sub) = path.get(1)
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
fn no_room_reaches_up() {
    let f = survey();
    let mut report = String::new();
    for ((from, to), sites) in &f.upward {
        report += &format!("  {from} -> {to}: {}\n", sites.join(", "));
    }
    assert!(
        f.upward.is_empty(),
        "rooms import a room on their own floor or above (move the code, or put the \
         contract in a room below both):\n{report}"
    );
}

#[test]
fn no_room_reaches_past_a_face() {
    let f = survey();
    let mut report = String::new();
    for ((from, to), sites) in &f.past_face {
        report += &format!("  {from} -> {to}: {}\n", sites.join(", "));
    }
    assert!(
        f.past_face.is_empty(),
        "paths reach past a room's face (re-export the item from the room's mod.rs and \
         use it from there):\n{report}"
    );
}

/// Each room's `mod.rs` keeps its sub-files private (or `pub(super)` further down):
/// what other rooms may use is what it re-exports.
#[test]
fn sub_files_are_private() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut open = Vec::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let dir = e.unwrap().path();
        let face = dir.join("mod.rs");
        if !face.is_file() {
            continue;
        }
        let room = dir.file_name().unwrap().to_string_lossy().into_owned();
        for line in production_text(&face).lines() {
            let Some(rest) = line
                .trim()
                .strip_prefix("pub(crate) mod ")
                .or_else(|| line.trim().strip_prefix("pub mod "))
            else {
                continue;
            };
            let name = rest.trim_end_matches(';').trim();
            if is_sub_module(&src, &room, name) {
                open.push(format!("{room}::{name}"));
            }
        }
    }
    assert!(
        open.is_empty(),
        "sub-files other rooms could name past the face: {open:?}"
    );
}

/// Every lock goes through `crate::locks` (`locked()`, `read_locked()`,
/// `write_locked()`): a `lock().unwrap()` in production code passes a panicked
/// holder's poison on to every later user (see `src/locks.rs`), and one spelled
/// out by hand drifts from the policy. Chains split over lines count too.
#[test]
fn every_lock_goes_through_the_lock_policy() {
    let shapes = [
        ".lock().unwrap(",
        ".lock().expect(",
        ".lock().unwrap_or_else(",
        ".read().unwrap(",
        ".read().expect(",
        ".read().unwrap_or_else(",
        ".write().unwrap(",
        ".write().expect(",
        ".write().unwrap_or_else(",
    ];
    let mut found = Vec::new();
    for (site, text) in production_sources().iter().filter(|(s, _)| s != "locks.rs") {
        let code: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        for shape in shapes.iter().filter(|s| code.contains(**s)) {
            found.push(format!("{site}: {shape}"));
        }
    }
    assert!(
        found.is_empty(),
        "locks taken past crate::locks (use Locked::locked / ReadWriteLocked): {found:#?}"
    );
}

/// Each production file under `src/` but those declared for tests, as its path below
/// `src/` and its [`production_text`], in path order.
fn production_sources() -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    production_files(&src, &mut files);
    files.sort();
    (files.iter())
        .filter(|f| !declared_for_tests(f))
        .map(|f| {
            let site = f.strip_prefix(&src).unwrap().display().to_string();
            (site, production_text(f))
        })
        .collect()
}

/// Whether the module that owns `file` declares it behind `#[cfg(test)]` (a test
/// helper module such as `kubeclient/test_apiserver.rs`).
fn declared_for_tests(file: &Path) -> bool {
    let Some(stem) = file.file_stem().and_then(|s| s.to_str()) else {
        return false;
    };
    let dir = file.parent().unwrap();
    let owner = dir.join("mod.rs");
    let owner = if owner.is_file() && owner != file {
        owner
    } else {
        dir.with_extension("rs")
    };
    let Ok(text) = std::fs::read_to_string(owner) else {
        return false;
    };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines.windows(2).any(|w| {
        w[0] == "#[cfg(test)]"
            && w[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                == format!("mod {stem};")
    })
}

/// No production code says why it failed in a bare `String` (`Result<_, String>`,
/// in a signature, a field or a type alias): each room names its failures in a
/// `thiserror` enum, so callers can match on them and the words live in one place
/// (issue 48). Test modules and test files may.
#[test]
fn no_result_has_a_string_error() {
    let mut found = Vec::new();
    for (site, text) in production_sources() {
        for line in string_error_results(&text) {
            found.push(format!("{site}:{line}"));
        }
    }
    assert!(
        found.is_empty(),
        "Result<_, String> in production code (give the room a thiserror enum): {found:#?}"
    );
}

/// The lines of `code` with a `Result<T, String>`: generics are followed to their
/// closing `>`, so `Result<Option<Vec<u8>>, String>` counts and
/// `Result<BTreeMap<String, String>, E>` does not.
fn string_error_results(code: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    for (i, _) in code.match_indices("Result") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = code[i + "Result".len()..].trim_start();
        let Some(args) = rest.strip_prefix('<') else {
            continue;
        };
        let args = top_level_args(args);
        let error: String = (args.get(1).copied().unwrap_or_default().chars())
            .filter(|c| !c.is_whitespace())
            .collect();
        if args.len() == 2 && (error == "String" || error == "std::string::String") {
            lines.push(code[..i].matches('\n').count() + 1);
        }
    }
    lines
}

/// The comma-separated arguments of a generic list whose `<` was just passed, up to
/// its closing `>` (`->` is an arrow, not a bracket).
fn top_level_args(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut args) = (0usize, 0usize, Vec::new());
    let mut prev = ' ';
    for (j, c) in text.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' if prev == '-' => {}
            '>' | ')' | ']' if depth == 0 => {
                args.push(&text[start..j]);
                return args;
            }
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                args.push(&text[start..j]);
                start = j + 1;
            }
            _ => {}
        }
        prev = c;
    }
    Vec::new()
}

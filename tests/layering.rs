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
    // which feeds the timelines; the allocation checkpoints, the gRPC server on a unix
    // socket, and the metric cache (koordlet's time series of the node's samples)
    &[
        "http_get",
        "credentials",
        "logging",
        "allocation",
        "grpc_unix",
        "metriccache",
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
    // the topology manager's hints, masks and policies, below its hint providers;
    // koordinator's API types, below the advisor and the koordlet rooms that read them
    &["topology", "pluginwatcher", "koordapi"],
    // the pod resources API: its messages, answers and socket, fed by the managers
    &["podresources"],
    // pod sources; what a pod's runtime set-up is made of
    &["config", "podenv", "images", "logs"],
    &["volumes"],
    // kubelet's kuberuntime: pod actions, sandboxes, containers, kills, container GC
    &["kuberuntime"],
    // what watches the runtime
    &["pleg"],
    // the node's stats collector (the metric advisor), which kubelet's and koordlet's
    // rooms both read
    &["advisor"],
    // what kubelet serves of those stats
    &["stats"],
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
    let test_module = [
        "mod tests {",
        "pub(super) mod tests {",
        "pub(crate) mod tests {",
    ]
    .iter()
    .filter_map(|m| text.find(&format!("#[cfg(test)]\n{m}")))
    .min();
    let code = match test_module {
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

/// Every path to a module of this crate in `text`, written by a file whose module is
/// `module` (`src/a/b/mod.rs` and `src/a/b.rs` are `[a, b]`), made absolute: `crate::…`,
/// `super::…` and `self::…` paths, and paths that start with one of the module's own
/// sub-modules. A group (`crate::a::{b, c::d}`) gives one path per member, so grouping
/// cannot hide a path past a face.
fn module_paths(src: &Path, module: &[String], text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let own_dir = module.iter().fold(src.to_path_buf(), |d, m| d.join(m));
    for (i, _) in text.match_indices("::") {
        let start = text[..i]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |j| j + 1);
        let first = &text[start..i];
        if text[..start].ends_with("::") || first.is_empty() {
            continue;
        }
        let base: Vec<String> = match first {
            "crate" => Vec::new(),
            "super" | "self" => module.to_vec(),
            name if is_sub_module_of(&own_dir, name) => module.to_vec(),
            _ => continue,
        };
        let mut found = Vec::new();
        expand_path(&text[start..], Vec::new(), &mut found);
        for rel in found {
            out.push(resolve(&base, rel));
        }
    }
    out
}

/// `rel` (as written: `crate`, `super` and `self` segments and all) made absolute
/// against `base`, the module its file is.
fn resolve(base: &[String], rel: Vec<String>) -> Vec<String> {
    let mut path = base.to_vec();
    let mut segments = rel.into_iter().peekable();
    if segments.peek().is_some_and(|s| s == "crate") {
        path.clear();
        segments.next();
    }
    while segments.peek().is_some_and(|s| s == "super") {
        path.pop();
        segments.next();
    }
    path.extend(segments);
    path
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

/// True when the module whose directory is `dir` has a sub-module named `name` (a
/// file or a directory under it).
fn is_sub_module_of(dir: &Path, name: &str) -> bool {
    dir.join(format!("{name}.rs")).is_file() || dir.join(name).is_dir()
}

/// The module a file is: `src/a/b/mod.rs` and `src/a/b.rs` are `[a, b]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = (rel.components())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Where `path` reaches past a face: the first module on it, below the crate root,
/// that has a directory (a room, or a room inside one) and whose next segment is one
/// of its sub-modules, while `file` lies outside that directory. Inside a room every
/// sub-room keeps its own face, as the rooms do towards each other.
fn past_face(src: &Path, file: &Path, path: &[String]) -> Option<String> {
    let mut dir = src.to_path_buf();
    for (k, segment) in path.iter().enumerate() {
        dir = dir.join(segment);
        let next = path.get(k + 1)?;
        if !dir.is_dir() || !is_sub_module_of(&dir, next) {
            return None;
        }
        if !file.starts_with(&dir) && file != dir.with_extension("rs") {
            return Some(format!("{}::{next}", path[..=k].join("::")));
        }
    }
    None
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
    survey_at(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// The findings for the source tree at `src`.
fn survey_at(src: &Path) -> Findings {
    let mut files = Vec::new();
    production_files(src, &mut files);
    files.sort();
    let mut f = Findings::default();
    for file in &files {
        let room = room_of(src, file);
        if room == "lib" || room == "main" {
            continue;
        }
        let site = file.strip_prefix(src).unwrap().display().to_string();
        let floor = floor_of(&room);
        if floor.is_none() {
            f.unknown.push(room.clone());
        }
        let module = module_of(src, file);
        for path in module_paths(src, &module, &production_text(file)) {
            let Some(to) = path.first().map(String::as_str) else {
                continue;
            };
            if let Some(face) = past_face(src, file, &path) {
                f.past_face
                    .entry((room.clone(), face))
                    .or_default()
                    .push(site.clone());
            }
            if to == room {
                continue;
            }
            match (floor_of(to), floor) {
                (None, _) => f.unknown.push(to.to_string()),
                (Some(t), Some(floor)) if t >= floor => f
                    .upward
                    .entry((room.clone(), to.to_string()))
                    .or_default()
                    .push(site.clone()),
                _ => {}
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

/// Each room's face (`mod.rs`, or `room.rs` beside `room/`) keeps its sub-files
/// private, and so does every room inside a room: what others may use is what the
/// face re-exports. A sub-file declared `pub`, `pub(crate)`, `pub(super)` or
/// `pub(in …)` is open past the face; test modules and fakes may be.
#[test]
fn sub_files_are_private() {
    let open = open_sub_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        open.is_empty(),
        "sub-files other rooms could name past the face: {open:?}"
    );
}

/// Every sub-file opened by its face, in the tree at `src`, as `room::…::sub`.
fn open_sub_files(src: &Path) -> Vec<String> {
    let mut dirs = Vec::new();
    module_dirs(src, &mut dirs);
    let mut open = Vec::new();
    for dir in dirs {
        let face = [dir.join("mod.rs"), dir.with_extension("rs")]
            .into_iter()
            .find(|f| f.is_file());
        let Some(face) = face else { continue };
        let module = module_of(src, &face).join("::");
        let lines: Vec<String> = production_text(&face).lines().map(str::to_string).collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = opened_module(line) else {
                continue;
            };
            let for_tests = i > 0 && lines[i - 1].trim() == "#[cfg(test)]";
            let test_name = name == "tests" || name.ends_with("_tests") || name.starts_with("fake");
            if is_sub_module_of(&dir, name) && !for_tests && !test_name {
                open.push(format!("{module}::{name}"));
            }
        }
    }
    open
}

/// Every directory below `dir` that can hold a module's sub-files.
fn module_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && p.file_name().is_some_and(|n| n != "testdata") {
            out.push(p.clone());
            module_dirs(&p, out);
        }
    }
}

/// The module a line declares with some `pub` visibility (`pub(super) mod x;`).
fn opened_module(line: &str) -> Option<&str> {
    let rest = line.trim().strip_prefix("pub")?;
    let rest = match rest.strip_prefix('(') {
        Some(vis) => vis.split_once(')')?.1,
        None => rest,
    };
    let name = rest.trim_start().strip_prefix("mod ")?;
    let name = name.strip_suffix(';')?.trim();
    Some(name)
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

/// The face checks reach inside rooms: in a made-up wing whose sub-room `inner` opens
/// its sub-file `secret`, the opening is found, and so is every path through it (from
/// the wing's own face, and with `super::`, `crate::` and inside a group), while a
/// path through `inner`'s face is not.
#[test]
fn a_face_opened_inside_a_room_is_found() {
    let root = std::env::temp_dir().join(format!("oxlet-layering-{}", std::process::id()));
    let src = root.join("src");
    let files = [
        (
            "wing/mod.rs",
            "mod inner;\nmod other;\npub(crate) use inner::secret::Hidden;\n",
        ),
        (
            "wing/inner/mod.rs",
            "pub(super) mod secret;\nmod kept;\npub(crate) use kept::Shown;\n",
        ),
        ("wing/inner/secret.rs", "pub(crate) struct Hidden;\n"),
        ("wing/inner/kept.rs", "pub(crate) struct Shown;\n"),
        (
            "wing/other.rs",
            "use super::inner::secret::Hidden;\n\
             use crate::wing::inner::{Shown, secret::Hidden as H};\n\
             fn f(_: crate::wing::inner::Shown) {}\n",
        ),
    ];
    for (path, text) in files {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let found = survey_at(&src).past_face;
    let open = open_sub_files(&src);
    std::fs::remove_dir_all(&root).unwrap();
    let sites = found.get(&("wing".to_string(), "wing::inner::secret".to_string()));
    assert_eq!(
        sites.map(Vec::as_slice),
        Some(
            ["wing/mod.rs", "wing/other.rs", "wing/other.rs"]
                .map(String::from)
                .as_slice()
        ),
        "{found:?}"
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(open, ["wing::inner::secret"]);
}

/// No room grows past a tenth of the production code (issue 48): a room that large
/// has stopped having one job, and the floors say little about what is inside it.
/// Lines are counted as [`production_text`] gives them (tests and comments left out).
#[test]
fn no_room_holds_more_than_a_tenth_of_the_code() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    production_files(&src, &mut files);
    let mut by_room: BTreeMap<String, usize> = BTreeMap::new();
    for file in &files {
        let lines = production_text(file)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count();
        *by_room.entry(room_of(&src, file)).or_default() += lines;
    }
    let total: usize = by_room.values().sum();
    let (room, largest) = by_room.iter().max_by_key(|(_, n)| **n).unwrap();
    assert!(
        largest * 10 <= total,
        "room {room} holds {largest} of {total} production lines, over a tenth: split it \
         into rooms of one job each"
    );
}

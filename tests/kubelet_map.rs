//! `docs/kubelet-map.md` names oxlet's files and functions as `` `src/…/file.rs::name` ``
//! (or a bare `` `src/…` `` path). This checks that each path exists and, where a name
//! is given, that the file still defines it, so a rename or a move shows here.
//! `docs/architecture.md` is checked the same way, with its shorter spellings: a file
//! named in a row of "Who owns what" lives in that row's room, and one named in the
//! prose lives somewhere below `src/` (or at the path it gives).

use std::path::{Path, PathBuf};

/// Whether `text` defines `name` as a function, type, trait or constant.
fn defines(text: &str, name: &str) -> bool {
    ["fn", "struct", "enum", "trait", "const", "type", "static"]
        .iter()
        .any(|kind| {
            text.match_indices(&format!("{kind} {name}")).any(|(i, m)| {
                let after = text[i + m.len()..].chars().next();
                after.is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
            })
        })
}

/// Every `` `src/…` `` reference in the map: (path, optional name).
fn references(map: &str) -> Vec<(String, Option<String>)> {
    map.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("src/"))
        .map(|s| match s.split_once("::") {
            Some((path, name)) => (path.to_string(), Some(name.to_string())),
            None => (s.to_string(), None),
        })
        .collect()
}

#[test]
fn every_oxlet_name_in_the_kubelet_map_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("docs/kubelet-map.md")).unwrap();
    let refs = references(&map);
    assert!(refs.len() > 50, "the map names {} places", refs.len());
    let mut stale = Vec::new();
    for (path, name) in refs {
        let file = root.join(&path);
        let Ok(text) = std::fs::read_to_string(&file) else {
            if !file.is_dir() {
                stale.push(format!("{path}: no such file"));
            }
            continue;
        };
        if let Some(name) = name
            && !defines(&text, &name)
        {
            stale.push(format!("{path}: defines no {name}"));
        }
    }
    assert!(
        stale.is_empty(),
        "docs/kubelet-map.md is stale:\n{}",
        stale.join("\n")
    );
}

/// Every `.rs` file below `dir`, as paths relative to `dir`.
fn rust_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// The `.rs` names in backticks of `text` (`file.rs`, `dir/file.rs`, `file.rs::name`).
fn rust_names(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            let path = s.split("::").next().unwrap_or(s);
            path.ends_with(".rs")
                && path
                    .chars()
                    .all(|c| c.is_alphanumeric() || "_./-".contains(c))
        })
        .collect()
}

/// Where `name` (a backticked `.rs` path of the doc) is: at its own path from the
/// repository root, below one of `bases` (the row's modules, or the prose's trees), or,
/// when it has a directory, below `src/`.
fn locate(root: &Path, bases: &[PathBuf], name: &str) -> Option<PathBuf> {
    if root.join(name).is_file() {
        return Some(root.join(name));
    }
    let rel = name.strip_prefix("src/").unwrap_or(name);
    let in_src = rel.contains('/').then(|| root.join("src").join(rel));
    let below = bases.iter().find_map(|base| {
        let dir = if base.is_file() { base.parent()? } else { base };
        rust_files(dir)
            .into_iter()
            .find(|f| f == rel || f.ends_with(&format!("/{rel}")))
            .map(|f| dir.join(f))
    });
    below.or(in_src.filter(|p| p.is_file()))
}

/// What in `text` (one row, or the prose) names no file it can be found at, or a name
/// its file does not define.
fn stale_names(root: &Path, bases: &[PathBuf], text: &str) -> Vec<String> {
    let mut stale = Vec::new();
    for name in rust_names(text) {
        let (path, item) = match name.split_once("::") {
            Some((p, i)) => (p, Some(i)),
            None => (name, None),
        };
        match (locate(root, bases, path), item) {
            (None, _) => stale.push(format!("{name}: no such file")),
            (Some(file), Some(item)) => {
                let text = std::fs::read_to_string(&file).unwrap();
                if !defines(&text, item) {
                    stale.push(format!("{name}: defines no {item}"));
                }
            }
            (Some(_), None) => {}
        }
    }
    stale
}

#[test]
fn every_file_the_architecture_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut stale = Vec::new();
    let mut rows = 0;
    let mut prose = String::new();
    for line in doc.lines() {
        // A row of "Who owns what": | `src/room`, `src/other.rs` | job |
        let first_cell = line
            .strip_prefix("| `")
            .and_then(|r| r.split_once(" |"))
            .map(|(cell, _)| format!("`{cell}"));
        let Some(cell) = first_cell else {
            prose.push_str(line);
            prose.push('\n');
            continue;
        };
        rows += 1;
        let mut bases: Vec<PathBuf> = Vec::new();
        for module in cell.split('`').skip(1).step_by(2) {
            let path = match bases.last() {
                // `src/logs` (`read.rs`): a bare name is in the room before it;
                // `src/kubeclient/bootstrap.rs`, `csr.rs`: it is a sibling.
                Some(prev) if !module.contains('/') && prev.is_dir() => prev.join(module),
                Some(prev) if !module.contains('/') => prev.parent().unwrap().join(module),
                _ => root.join(module),
            };
            if !path.exists() {
                stale.push(format!("{module}: no such module"));
            }
            bases.push(path);
        }
        stale.extend(stale_names(root, &bases, line));
    }
    assert!(rows > 30, "the map has {rows} rows");
    let trees = ["src", "testapi/src", "tests", "benches"].map(|d| root.join(d));
    stale.extend(stale_names(root, &trees, &prose));
    // A `src/…` directory named anywhere exists.
    for (path, _) in references(&doc) {
        if !root.join(&path).exists() {
            stale.push(format!("{path}: no such path"));
        }
    }
    stale.sort();
    stale.dedup();
    assert!(
        stale.is_empty(),
        "docs/architecture.md is stale:\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_definition_is_a_whole_name() {
    let text = "pub(crate) async fn sync_pod_probed(\nstruct PodWorkers<S> {";
    assert!(defines(text, "sync_pod_probed"));
    assert!(defines(text, "PodWorkers"));
    assert!(!defines(text, "sync_pod"));
    assert_eq!(
        references("a `src/x.rs::f` b `kubelet` c `src/y/`"),
        [
            ("src/x.rs".into(), Some("f".into())),
            ("src/y/".into(), None)
        ]
    );
}

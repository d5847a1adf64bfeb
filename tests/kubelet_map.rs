//! `docs/kubelet-map.md` names oxlet's files and functions as `` `src/…/file.rs::name` ``
//! (or a bare `` `src/…` `` path). This checks that each path exists and, where a name
//! is given, that the file still defines it, so a rename or a move shows here.

use std::path::Path;

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

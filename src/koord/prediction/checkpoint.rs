//! Checkpoints: one JSON file per model in the checkpoint directory, named by its UID,
//! in koordlet's format (`UID`, `CPU`, `Memory`, `LastUpdated`), written atomically
//! (`<uid>.tmp`, then renamed). UIDs come from pods and are untrusted: a name must be
//! one plain path component of a small alphabet, and only such names are ever
//! written, read or deleted; anything else in the directory is left alone.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::PredictionConfig;
use super::histogram::{Buckets, DecayingHistogram, HistogramCheckpoint, HistogramError};
use super::model::Model;

/// A larger checkpoint is corrupt (a full one is a few KiB).
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Directory entries looked at on restore.
const MAX_ENTRIES: usize = 4096;
const TMP_SUFFIX: &str = ".tmp";
/// Longest model name (a DNS subdomain's length).
const MAX_NAME: usize = 253;

/// Why a name, file or write was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    #[error(
        "{0:?} is not a model name (1-253 of [A-Za-z0-9_.-], a single path component, not ending in .tmp)"
    )]
    BadName(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: larger than {MAX_FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path}: not a checkpoint: {reason}")]
    Json {
        path: PathBuf,
        reason: serde_json::Error,
    },
    #[error("{path}: field {field}: {reason}")]
    Field {
        path: PathBuf,
        field: &'static str,
        reason: HistogramError,
    },
    #[error("{path}: field UID: {uid:?} does not match the file name")]
    UidMismatch { path: PathBuf, uid: String },
}

/// Checks that `uid` can name a checkpoint file.
pub(crate) fn model_name(uid: &str) -> Result<&str, CheckpointError> {
    let ok = crate::safe_path::component(uid).is_ok()
        && uid.len() <= MAX_NAME
        && !uid.ends_with(TMP_SUFFIX)
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(uid)
    } else {
        Err(CheckpointError::BadName(uid.to_string()))
    }
}

/// koordlet's `ModelCheckpoint` (Go's default field names).
#[derive(Debug, Serialize, Deserialize)]
struct ModelCheckpoint {
    #[serde(rename = "UID")]
    uid: String,
    #[serde(rename = "CPU")]
    cpu: HistogramCheckpoint,
    #[serde(rename = "Memory")]
    memory: HistogramCheckpoint,
    #[serde(rename = "LastUpdated")]
    last_updated: String,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Writes `uid`'s checkpoint: `<uid>.tmp` (made anew, synced), then renamed over
/// `<uid>`, and the directory synced.
pub(crate) fn save(
    dir: &Path,
    uid: &str,
    model: &Model,
    now_ms: i64,
) -> Result<(), CheckpointError> {
    let name = model_name(uid)?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let c = ModelCheckpoint {
        uid: name.to_string(),
        cpu: model.cpu.checkpoint(),
        memory: model.memory.checkpoint(),
        last_updated: rfc3339(now_ms),
    };
    let body = serde_json::to_vec(&c).map_err(|reason| CheckpointError::Json {
        path: dir.join(name),
        reason,
    })?;
    let tmp = dir.join(format!("{name}{TMP_SUFFIX}"));
    let dst = dir.join(name);
    write_new(&tmp, &body).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &dst).map_err(io(&dst))?;
    // The rename itself, made durable: a crash after it leaves the new checkpoint.
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

/// Writes `body` to a file made anew at `tmp` (never through a link or into a file
/// someone left there: a leftover is removed, itself, and the create is exclusive),
/// and syncs it, so the rename that follows never publishes a half-written file.
fn write_new(tmp: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(tmp)
    };
    let mut f = match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // A crash's leftover, or something planted: unlinked, not followed.
            std::fs::remove_file(tmp)?;
            create()?
        }
        other => other?,
    };
    f.write_all(body)?;
    f.sync_all()
}

/// Deletes `uid`'s checkpoint, if there is one.
pub(crate) fn remove(dir: &Path, uid: &str) -> Result<(), CheckpointError> {
    let path = dir.join(model_name(uid)?);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path)(e)),
        _ => Ok(()),
    }
}

/// Reads and decodes one checkpoint file (at most [`MAX_FILE_BYTES`]).
fn load(cfg: &PredictionConfig, path: &Path, uid: &str) -> Result<Model, CheckpointError> {
    let f = std::fs::File::open(path).map_err(io(path))?;
    let mut body = Vec::new();
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut body)
        .map_err(io(path))?;
    if body.len() as u64 > MAX_FILE_BYTES {
        return Err(CheckpointError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let c: ModelCheckpoint =
        serde_json::from_slice(&body).map_err(|reason| CheckpointError::Json {
            path: path.to_path_buf(),
            reason,
        })?;
    if c.uid != uid {
        return Err(CheckpointError::UidMismatch {
            path: path.to_path_buf(),
            uid: c.uid,
        });
    }
    let field = |field| {
        move |reason| CheckpointError::Field {
            path: path.to_path_buf(),
            field,
            reason,
        }
    };
    let cpu = DecayingHistogram::restore(Buckets::cpu(), cfg.cpu_half_life_ms, &c.cpu)
        .map_err(field("CPU"))?;
    let memory = DecayingHistogram::restore(Buckets::memory(), cfg.memory_half_life_ms, &c.memory)
        .map_err(field("Memory"))?;
    let last: jiff::Timestamp = c.last_updated.parse().map_err(|_| CheckpointError::Field {
        path: path.to_path_buf(),
        field: "LastUpdated",
        reason: HistogramError::BadReference(c.last_updated.clone()),
    })?;
    let last = last.as_millisecond();
    Ok(Model {
        cpu,
        memory,
        last_updated_ms: last,
        last_checkpointed_ms: last,
    })
}

/// What a restore did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    pub models: Vec<String>,
    /// Files deleted: leftovers, corrupt and unknown ones.
    pub deleted: Vec<String>,
}

/// Restores the models in `dir` (koordlet's `restoreModels`): `*.tmp` leftovers are
/// deleted, each `<uid>` file decoded; a file that fails to decode (logged with the
/// reason) or then names an unknown UID is deleted. Files whose names are not model names,
/// and anything but regular files, are not touched.
pub(crate) fn restore(
    cfg: &PredictionConfig,
    dir: &Path,
    known: impl Fn(&str) -> bool,
    now_ms: i64,
) -> (Vec<(String, Model)>, Restored) {
    let mut out = Vec::new();
    let mut report = Restored::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (out, report),
        Err(e) => {
            warn!(dir = %dir.display(), error = %e, "prediction: cannot read the checkpoint directory");
            return (out, report);
        }
    };
    for entry in entries.take(MAX_ENTRIES).flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if !is_file {
            continue;
        }
        let path = entry.path();
        let delete = |report: &mut Restored| match std::fs::remove_file(&path) {
            Ok(()) => report.deleted.push(name.clone()),
            Err(e) => {
                warn!(file = %path.display(), error = %e, "prediction: cannot delete a checkpoint file");
            }
        };
        if let Some(stem) = name.strip_suffix(TMP_SUFFIX) {
            if model_name(stem).is_ok() {
                delete(&mut report);
            }
            continue;
        }
        if model_name(&name).is_err() {
            continue;
        }
        match load(cfg, &path, &name) {
            Ok(_) if !known(&name) => {
                info!(file = %path.display(), "prediction: deleting the checkpoint of an unknown UID");
                delete(&mut report);
            }
            Ok(mut m) => {
                m.last_updated_ms = m.last_updated_ms.min(now_ms);
                report.models.push(name.clone());
                out.push((name, m));
            }
            Err(e) => {
                warn!(file = %path.display(), error = %e, "prediction: deleting a checkpoint that cannot be decoded");
                delete(&mut report);
            }
        }
    }
    (out, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_006_400_000;

    fn model() -> Model {
        let cfg = PredictionConfig::default();
        let mut m = Model::new(&cfg, NOW);
        for _ in 0..90 {
            m.add(1.0, 2e9, NOW);
        }
        for _ in 0..10 {
            m.add(3.0, 5e9, NOW);
        }
        m
    }

    #[test]
    fn names_are_checked() {
        assert!(model_name("0b6f0c7e-1d1a-4b0e-9f5e-3b1c2d4e5f60").is_ok());
        assert!(model_name("__node-koord-prod__").is_ok());
        assert!(model_name("__node-__").is_ok());
        for bad in ["", ".", "..", "../etc", "a/b", "a b", "x.tmp", "a\0b"] {
            assert!(model_name(bad).is_err(), "{bad:?}");
        }
        assert!(model_name(&"a".repeat(254)).is_err());
    }

    #[test]
    fn a_restored_model_gives_the_same_predictions() {
        let d = tempfile::tempdir().unwrap();
        let m = model();
        save(d.path(), "pod-1", &m, NOW + 1000).unwrap();
        assert!(!d.path().join("pod-1.tmp").exists());
        let text = std::fs::read_to_string(d.path().join("pod-1")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["UID"], "pod-1");
        assert_eq!(v["CPU"]["bucketWeights"]["22"], 10000);
        assert_eq!(v["Memory"]["totalWeight"].as_f64().unwrap(), 100.0);
        assert!(
            v["LastUpdated"]
                .as_str()
                .unwrap()
                .starts_with("2023-11-15T00:00:01")
        );
        let (models, r) = restore(&PredictionConfig::default(), d.path(), |_| true, NOW + 2000);
        assert_eq!(r.models, vec!["pod-1".to_string()]);
        assert_eq!(models[0].1.prediction(), m.prediction());
        assert_eq!(models[0].1.last_checkpointed_ms, NOW + 1000);
    }

    #[test]
    fn corrupt_leftover_and_unknown_files_are_deleted_and_others_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        save(p, "keep", &model(), NOW).unwrap();
        save(p, "gone-pod", &model(), NOW).unwrap();
        std::fs::write(p.join("broken"), b"{not json").unwrap();
        std::fs::write(p.join("badbucket"), br#"{"UID":"badbucket","CPU":{"referenceTimestamp":"0001-01-01T00:00:00Z","bucketWeights":{"999":1},"totalWeight":1},"Memory":{"referenceTimestamp":"0001-01-01T00:00:00Z","bucketWeights":{},"totalWeight":0},"LastUpdated":"2023-11-14T22:13:20Z"}"#).unwrap();
        std::fs::write(p.join("huge"), vec![b' '; (MAX_FILE_BYTES + 1) as usize]).unwrap();
        std::fs::write(p.join("keep.tmp"), b"half").unwrap();
        std::fs::write(p.join("not a model"), b"x").unwrap();
        std::fs::create_dir(p.join("subdir")).unwrap();
        let known = |u: &str| u != "gone-pod";
        let (models, mut r) = restore(&PredictionConfig::default(), p, known, NOW);
        r.deleted.sort();
        assert_eq!(models.len(), 1);
        assert_eq!(r.models, vec!["keep".to_string()]);
        assert_eq!(
            r.deleted,
            vec!["badbucket", "broken", "gone-pod", "huge", "keep.tmp"]
        );
        let mut left: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["keep", "not a model", "subdir"]);
    }

    #[test]
    fn a_link_planted_at_the_temp_name_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let dir = d.path().join("c");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("pod-1.tmp")).unwrap();
        save(&dir, "pod-1", &model(), NOW).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let saved = dir.join("pod-1");
        let meta = std::fs::symlink_metadata(&saved).unwrap();
        assert!(
            meta.file_type().is_file(),
            "the checkpoint is a file of its own"
        );
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o600
        );
        assert!(
            std::fs::read_to_string(&saved)
                .unwrap()
                .contains("\"UID\":\"pod-1\"")
        );
        assert!(std::fs::symlink_metadata(dir.join("pod-1.tmp")).is_err());
    }

    #[test]
    fn a_path_escaping_uid_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let inner = d.path().join("c");
        assert!(matches!(
            save(&inner, "../escaped", &model(), NOW),
            Err(CheckpointError::BadName(_))
        ));
        assert!(matches!(
            remove(&inner, "../escaped"),
            Err(CheckpointError::BadName(_))
        ));
        assert!(!d.path().join("escaped").exists());
        assert!(!inner.exists());
    }
}

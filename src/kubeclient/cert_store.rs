//! kubelet's certificate stores under `--cert-dir`, in client-go's
//! `certificate_store.go` layout: each issued pair is one file
//! `<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (certificate then key, mode 0600), and
//! `<prefix>-current.pem` is a symlink to the newest, swapped by a rename so a reader
//! always sees a whole pair. The client store's prefix is `kubelet-client` (kind's
//! kubeconfig points at its link); the serving store's is `kubelet-server`.
//!
//! The cert dir is oxlet's, but nothing planted in it is trusted: new files are created
//! exclusively (never through an existing name or link), the current link is followed
//! only to a plain file name of oxlet's own pattern in the same directory, and only
//! regular files of that pattern are ever pruned.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use super::kubeconfig::MAX_FILE_BYTES;

/// The client store's pair files' prefix (client-go's `pairNamePrefix`).
pub(crate) const PREFIX: &str = "kubelet-client";
/// The serving store's prefix (`serverTLSBootstrap`).
pub(crate) const SERVING_PREFIX: &str = "kubelet-server";
/// The client store's symlink, which kind's kubeconfig names.
pub(crate) const CURRENT: &str = "kubelet-client-current.pem";
/// How many pair files are kept, the current one included.
const KEEP: usize = 5;

/// Why the store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("cert dir {}: {what}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cert dir {}: {prefix}-current.pem points at {target:?}, which is not one of oxlet's {prefix}-<timestamp>.pem files in the same directory", dir.display())]
    ForeignLink {
        dir: PathBuf,
        prefix: &'static str,
        target: PathBuf,
    },
}

/// One store (one prefix) in one directory.
#[derive(Debug, Clone)]
pub(crate) struct CertStore {
    dir: PathBuf,
    prefix: &'static str,
}

impl CertStore {
    /// The client certificate's store.
    pub(crate) fn new(dir: &Path) -> CertStore {
        CertStore {
            dir: dir.to_path_buf(),
            prefix: PREFIX,
        }
    }

    /// The serving certificate's store.
    pub(crate) fn serving(dir: &Path) -> CertStore {
        CertStore {
            dir: dir.to_path_buf(),
            prefix: SERVING_PREFIX,
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<prefix>-current.pem`.
    pub(crate) fn current_name(&self) -> String {
        format!("{}-current.pem", self.prefix)
    }

    /// The path kubeconfigs name: the `-current` symlink.
    pub(crate) fn current_path(&self) -> PathBuf {
        self.dir.join(self.current_name())
    }

    fn io(&self, what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
        let dir = self.dir.clone();
        let what = what.into();
        move |source| StoreError::Io { dir, what, source }
    }

    /// The current pair's PEM (certificate and key), or None when there is none yet.
    pub(crate) fn read_current(&self) -> Result<Option<Vec<u8>>, StoreError> {
        let link = self.current_path();
        let target = match std::fs::read_link(&link) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                let what = format!("cannot read the link {}", self.current_name());
                return Err(self.io(what)(e));
            }
        };
        let name = target
            .to_str()
            .filter(|n| is_pair_name(self.prefix, n))
            .ok_or_else(|| StoreError::ForeignLink {
                dir: self.dir.clone(),
                prefix: self.prefix,
                target: target.clone(),
            })?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(self.dir.join(name))
            .map_err(self.io(format!("cannot open {name}")))?;
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(self.io(format!("cannot read {name}")))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(self.io(name.to_string())(std::io::Error::other(format!(
                "larger than {MAX_FILE_BYTES} bytes"
            ))));
        }
        Ok(Some(bytes))
    }

    /// Stores a new pair: writes `<prefix>-<now>.pem`, points the current link at
    /// it, prunes old pairs. Returns the new file's path.
    pub(crate) fn update(
        &self,
        cert_pem: &[u8],
        key_pem: &[u8],
        now: jiff::Timestamp,
    ) -> Result<PathBuf, StoreError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(self.io("cannot create it"))?;
        let mut name = pair_name(self.prefix, now);
        let mut file = None;
        // Two pairs within one second (rotation retries) get a numbered suffix rather
        // than replacing a file a kubeconfig may name.
        for n in 0..100 {
            if n > 0 {
                let first = pair_name(self.prefix, now);
                name = format!("{}-{n}.pem", first.trim_end_matches(".pem"));
            }
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(self.dir.join(&name))
            {
                Ok(f) => {
                    file = Some(f);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(self.io(format!("cannot create {name}"))(e)),
            }
        }
        let mut file = file.ok_or_else(|| {
            self.io(format!("cannot create {name}"))(std::io::ErrorKind::AlreadyExists.into())
        })?;
        let mut body = cert_pem.to_vec();
        if !body.ends_with(b"\n") {
            body.push(b'\n');
        }
        body.extend_from_slice(key_pem);
        file.write_all(&body)
            .and_then(|()| file.sync_all())
            .map_err(self.io(format!("cannot write {name}")))?;
        // The swap: a fresh link under a temporary name, renamed over the current one
        // (rename replaces a link itself, never what it points at).
        let current = self.current_name();
        let tmp = (self.dir).join(format!(".{current}.tmp-{}", fastrand::u64(..)));
        std::os::unix::fs::symlink(&name, &tmp)
            .map_err(self.io(format!("cannot create a link to {name}")))?;
        if let Err(e) = std::fs::rename(&tmp, self.current_path()) {
            let _ = std::fs::remove_file(&tmp);
            return Err(self.io(format!("cannot point {current} at {name}"))(e));
        }
        self.prune(&name);
        Ok(self.dir.join(name))
    }

    /// Removes all but the newest [`KEEP`] pair files (never `keep`); only regular files
    /// of oxlet's own name pattern. Failures are logged: a leftover file harms nothing.
    fn prune(&self, keep: &str) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut pairs: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| is_pair_name(self.prefix, n) && n != keep)
            .collect();
        // The timestamp format sorts by time.
        pairs.sort();
        let excess = (pairs.len() + 1).saturating_sub(KEEP);
        for old in pairs.into_iter().take(excess) {
            if let Err(e) = crate::safe_path::remove_beneath(&self.dir, &self.dir.join(&old)) {
                tracing::warn!(error = %e, file = old, "cannot remove an old certificate pair");
            }
        }
    }
}

/// `<prefix>-2006-01-02-15-04-05.pem` (client-go's layout, UTC).
fn pair_name(prefix: &str, now: jiff::Timestamp) -> String {
    format!("{prefix}-{}.pem", now.strftime("%Y-%m-%d-%H-%M-%S"))
}

/// Whether `name` is one of ours: `<prefix>-<19-char timestamp>[-N].pem`.
pub(crate) fn is_pair_name(prefix: &str, name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|r| r.strip_suffix(".pem"))
    else {
        return false;
    };
    let (stamp, suffix) = rest.split_at(rest.len().min(19));
    let stamp_ok = stamp.len() == 19
        && stamp.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 | 10 | 13 | 16 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    let suffix_ok = suffix.is_empty()
        || suffix.strip_prefix('-').is_some_and(|n| {
            !n.is_empty() && n.len() <= 2 && n.bytes().all(|b| b.is_ascii_digit())
        });
    stamp_ok && suffix_ok
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn names_follow_client_gos_layout() {
        assert_eq!(
            pair_name(PREFIX, at("2026-01-02T03:04:05Z")),
            "kubelet-client-2026-01-02-03-04-05.pem"
        );
        let client = |n| is_pair_name(PREFIX, n);
        assert!(client("kubelet-client-2026-01-02-03-04-05.pem"));
        assert!(client("kubelet-client-2026-01-02-03-04-05-1.pem"));
        assert!(!client(CURRENT));
        assert!(!client("kubelet-client-2026-01-02-03-04-05.pem.bak"));
        assert!(!client("../kubelet-client-2026-01-02-03-04-05.pem"));
        assert!(!client("kubelet-server-2026-01-02-03-04-05.pem"));
        // The serving store's files are its own; neither store takes the other's.
        assert!(is_pair_name(
            SERVING_PREFIX,
            "kubelet-server-2026-01-02-03-04-05.pem"
        ));
        assert!(!is_pair_name(
            SERVING_PREFIX,
            "kubelet-client-2026-01-02-03-04-05.pem"
        ));
        assert_eq!(
            CertStore::serving(Path::new("/p")).current_path(),
            Path::new("/p/kubelet-server-current.pem")
        );
    }

    #[test]
    fn update_writes_a_private_pair_and_swaps_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(&dir.path().join("pki"));
        assert_eq!(store.read_current().unwrap(), None);
        let first = store
            .update(b"CERT1", b"KEY1\n", at("2026-01-02T03:04:05Z"))
            .unwrap();
        assert_eq!(
            first.file_name().unwrap(),
            "kubelet-client-2026-01-02-03-04-05.pem"
        );
        let mode = std::fs::metadata(&first).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(store.read_current().unwrap().unwrap(), b"CERT1\nKEY1\n");
        // Same second: a second file, not an overwrite.
        let second = store
            .update(b"CERT2\n", b"KEY2\n", at("2026-01-02T03:04:05Z"))
            .unwrap();
        assert_ne!(first, second);
        assert_eq!(std::fs::read(&first).unwrap(), b"CERT1\nKEY1\n");
        let link = std::fs::read_link(store.current_path()).unwrap();
        assert_eq!(link, Path::new(second.file_name().unwrap()));
        assert_eq!(store.read_current().unwrap().unwrap(), b"CERT2\nKEY2\n");
    }

    #[test]
    fn old_pairs_are_pruned_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertStore::new(dir.path());
        std::fs::write(dir.path().join("kubelet-server-current.pem"), "x").unwrap();
        std::fs::write(dir.path().join("kubelet-client-notes.pem"), "x").unwrap();
        // The serving store's oldest pair is not the client store's to prune.
        let serving_pair = "kubelet-server-2026-01-01-00-00-00.pem";
        std::fs::write(dir.path().join(serving_pair), "x").unwrap();
        for s in 0..8 {
            store
                .update(b"C\n", b"K\n", at(&format!("2026-01-02T03:04:0{s}Z")))
                .unwrap();
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "kubelet-client-2026-01-02-03-04-03.pem",
                "kubelet-client-2026-01-02-03-04-04.pem",
                "kubelet-client-2026-01-02-03-04-05.pem",
                "kubelet-client-2026-01-02-03-04-06.pem",
                "kubelet-client-2026-01-02-03-04-07.pem",
                "kubelet-client-current.pem",
                "kubelet-client-notes.pem",
                serving_pair,
                "kubelet-server-current.pem",
            ]
        );
    }

    #[test]
    fn planted_links_are_never_followed_out() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, "do not read or overwrite").unwrap();
        let store = CertStore::new(dir.path());
        // A current link to a file outside is refused, not read.
        std::os::unix::fs::symlink(&secret, store.current_path()).unwrap();
        assert!(matches!(
            store.read_current(),
            Err(StoreError::ForeignLink { .. })
        ));
        // A pair name that is itself a link out is not read through either.
        let planted = "kubelet-client-2026-01-02-03-04-05.pem";
        std::os::unix::fs::symlink(&secret, dir.path().join(planted)).unwrap();
        std::fs::remove_file(store.current_path()).unwrap();
        std::os::unix::fs::symlink(planted, store.current_path()).unwrap();
        assert!(matches!(store.read_current(), Err(StoreError::Io { .. })));
        // Writing at that very second creates a new file beside it, and pruning never
        // removes the planted link (not a regular file).
        let new = store
            .update(b"C\n", b"K\n", at("2026-01-02T03:04:05Z"))
            .unwrap();
        assert_ne!(new.file_name().unwrap(), planted);
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            "do not read or overwrite"
        );
        assert!(
            std::fs::symlink_metadata(dir.path().join(planted))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(store.read_current().unwrap().unwrap(), b"C\nK\n");
    }
}

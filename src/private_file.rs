//! Small state files only root may read (the user-namespace allocations, the image pull
//! records): written whole, so a crash leaves the old file or the new one and never
//! half of one, and read with a size limit, so a file grown by someone else cannot
//! take the agent's memory.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Why a JSON checkpoint could not be read or written (the resource managers' state
/// files; the last variant is kubelet's `CorruptCheckpointError` text).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckpointError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("checkpoint is corrupted")]
    Corrupt,
}

/// Writes `body` to `file` through a temporary file beside it (mode 0600), synced and
/// renamed into place, then syncs the directory so the rename survives a crash.
pub(crate) fn write_atomically(file: &Path, body: &[u8]) -> std::io::Result<()> {
    let tmp = file.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)?;
    if let Some(dir) = file.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads `file` whole if it is at most `limit` bytes; `Ok(None)` when it does not exist.
pub(crate) fn read_bounded(file: &Path, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut body = Vec::new();
    f.take(limit + 1).read_to_end(&mut body)?;
    if body.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is larger than {limit} bytes", file.display()),
        ));
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn written_files_are_roots_alone_and_reads_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("state");
        write_atomically(&f, b"one").unwrap();
        write_atomically(&f, b"two").unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!f.with_extension("tmp").exists());
        assert_eq!(read_bounded(&f, 3).unwrap().unwrap(), b"two");
        assert!(read_bounded(&f, 2).is_err(), "over the limit");
        assert!(read_bounded(&dir.path().join("none"), 2).unwrap().is_none());
    }
}

//! Image archive import (k3s's `agent/images` convention) into the managed or any
//! containerd, through `ctr`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use tokio::process::Command;

use super::CRI_NAMESPACE;

/// Whether `name` looks like an image archive `ctr images import` reads.
fn is_image_archive(name: &str) -> bool {
    [".tar", ".tar.gz", ".tgz", ".oci", ".oci.tar"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// `ctr images import` of one archive. ctr 1.6 reads only plain tar, so a gzipped archive
/// is piped through `gzip -dc` into `ctr images import -`.
async fn import_one(ctr: &Path, socket: &Path, file: &Path) -> io::Result<std::process::Output> {
    let mut ctr = Command::new(ctr);
    ctr.arg("-a")
        .arg(socket)
        .args(["-n", CRI_NAMESPACE, "images", "import"])
        .kill_on_drop(true);
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !(name.ends_with(".gz") || name.ends_with(".tgz")) {
        return ctr.arg(file).stdin(Stdio::null()).output().await;
    }
    let mut gunzip = Command::new("gzip")
        .arg("-dc")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout: Stdio = gunzip.stdout.take().expect("stdout is piped").try_into()?;
    let mut out = ctr.arg("-").stdin(stdout).output().await?;
    let gz = gunzip.wait_with_output().await?;
    if !gz.status.success() && out.status.success() {
        // ctr may accept a truncated stream; a failed decompression is still a failure.
        out.status = gz.status;
    }
    if !gz.status.success() {
        out.stderr.extend_from_slice(b"; gzip: ");
        out.stderr.extend_from_slice(&gz.stderr);
    }
    Ok(out)
}

/// Why one image archive was not imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("ctr images import: {status}: {stderr}")]
    Failed {
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("running ctr: {0}")]
    Run(std::io::Error),
}

/// Import every image archive in `dir` (k3s's `agent/images` convention) into the CRI
/// namespace, each on its own with `ctr -a <socket> -n k8s.io images import <file>`, in
/// name order, with the `ctr` of containerd's own release. A broken archive is logged and
/// skipped; a missing dir imports nothing.
pub async fn import_images(
    ctr: &Path,
    socket: &Path,
    dir: &Path,
) -> Vec<(PathBuf, Result<(), ImportError>)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(std::result::Result::ok)
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_image_archive)
        })
        .collect();
    files.sort();

    let mut results = Vec::with_capacity(files.len());
    for file in files {
        let started = Instant::now();
        let result = match import_one(ctr, socket, &file).await {
            Ok(o) if o.status.success() => {
                tracing::info!(
                    file = %file.display(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "imported image archive"
                );
                Ok(())
            }
            Ok(o) => {
                let stderr = String::from_utf8_lossy(&o.stderr).trim().to_string();
                tracing::warn!(file = %file.display(), status = %o.status, stderr = %stderr, "image import failed; skipping this archive");
                Err(ImportError::Failed {
                    status: o.status,
                    stderr,
                })
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "could not run ctr; skipping this archive");
                Err(ImportError::Run(e))
            }
        };
        results.push((file, result));
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names() {
        for ok in ["a.tar", "b.tar.gz", "c.tgz", "d.oci.tar"] {
            assert!(is_image_archive(ok), "{ok}");
        }
        for no in ["README", "a.tar.partial", "x.json"] {
            assert!(!is_image_archive(no), "{no}");
        }
    }

    #[tokio::test]
    async fn import_from_missing_dir_is_empty() {
        let r = import_images(
            Path::new("ctr"),
            Path::new("/nonexistent.sock"),
            Path::new("/nonexistent/dir"),
        )
        .await;
        assert!(r.is_empty());
    }
}

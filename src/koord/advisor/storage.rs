//! Filesystems: the `--root-dir` filesystem (statvfs, kubelet's node `fs`) and the
//! runtime's image filesystem (CRI `ImageFsInfo` for the bytes and inodes used, statvfs
//! of its mountpoint for capacity and available, as kubelet does).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::debug;

use super::{CollectFuture, Collector, STORAGE_INTERVAL, Shared};
use crate::runtime::cri_api::CriRead;
use crate::stats::readings::FsReading;

/// A filesystem's size and use from statvfs; None when it cannot be read.
pub(crate) fn statvfs_reading(path: &Path) -> Option<FsReading> {
    let s = rustix::fs::statvfs(path)
        .inspect_err(
            |e| debug!(path = %path.display(), error = %e, "metric advisor: statvfs failed"),
        )
        .ok()?;
    let frsize = s.f_frsize;
    Some(FsReading {
        time: SystemTime::now(),
        capacity_bytes: s.f_blocks.saturating_mul(frsize),
        available_bytes: s.f_bavail.saturating_mul(frsize),
        used_bytes: s.f_blocks.saturating_sub(s.f_bfree).saturating_mul(frsize),
        inodes: Some(s.f_files),
        inodes_free: Some(s.f_ffree),
        inodes_used: Some(s.f_files.saturating_sub(s.f_ffree)),
    })
}

pub(crate) struct StorageCollector {
    root_dir: PathBuf,
    cri: Arc<dyn CriRead>,
}

impl StorageCollector {
    pub(crate) fn new(root_dir: PathBuf, cri: Arc<dyn CriRead>) -> Self {
        StorageCollector { root_dir, cri }
    }

    async fn image_fs(&self) -> Option<FsReading> {
        let usages = self
            .cri
            .image_fs_info()
            .await
            .inspect_err(|e| debug!(error = %e, "metric advisor: ImageFsInfo failed"))
            .ok()?;
        let usage = usages.into_iter().next()?;
        let mountpoint = usage.fs_id.map(|f| f.mountpoint).unwrap_or_default();
        let mut fs = statvfs_reading(Path::new(&mountpoint))?;
        if let Some(used) = usage.used_bytes {
            fs.used_bytes = used.value;
        }
        fs.inodes_used = usage.inodes_used.map(|v| v.value).or(fs.inodes_used);
        Some(fs)
    }
}

impl Collector for StorageCollector {
    fn name(&self) -> &'static str {
        "nodestorageinfo"
    }

    fn interval(&self) -> Duration {
        STORAGE_INTERVAL
    }

    fn disabled_reason(&self) -> Option<String> {
        None
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            shared.fs = statvfs_reading(&self.root_dir);
            shared.image_fs = self.image_fs().await;
        })
    }
}

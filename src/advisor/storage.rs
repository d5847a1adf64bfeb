//! Filesystems: the `--root-dir` filesystem (statvfs, kubelet's node `fs`) and the
//! runtime's image filesystem (CRI `ImageFsInfo` for the bytes and inodes used, statvfs
//! of its mountpoint for capacity and available, as kubelet does), and each
//! container's writable layer (CRI `ListContainerStats`), its `rootfs` in the summary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::debug;

use super::pods::MAX_CONTAINERS;
use super::{CollectFuture, Collector, STORAGE_INTERVAL, Shared};
use crate::contracts::FsReading;
use crate::cri::CriRead;

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
        let mut fs = FsReading::of(Path::new(&mountpoint))?;
        if let Some(used) = usage.used_bytes {
            fs.used_bytes = used.value;
        }
        fs.inodes_used = usage.inodes_used.map(|v| v.value).or(fs.inodes_used);
        Some(fs)
    }
}

/// Each container's writable layer by container ID, at most [`MAX_CONTAINERS`]:
/// used bytes and inodes from the runtime, capacity, available and inode totals
/// from the image filesystem it lives on (kubelet's `makeContainerStats`).
pub(crate) fn rootfs_by_id(
    stats: Vec<k8s_cri::v1::ContainerStats>,
    image_fs: Option<&FsReading>,
) -> HashMap<String, FsReading> {
    let now = SystemTime::now();
    stats
        .into_iter()
        .filter_map(|s| {
            let id = s.attributes?.id;
            let layer = s.writable_layer?;
            let used = layer.used_bytes?.value;
            let time = u64::try_from(layer.timestamp)
                .ok()
                .filter(|ns| *ns > 0)
                .map_or(now, |ns| std::time::UNIX_EPOCH + Duration::from_nanos(ns));
            let fs = FsReading {
                time,
                capacity_bytes: image_fs.map_or(0, |f| f.capacity_bytes),
                available_bytes: image_fs.map_or(0, |f| f.available_bytes),
                used_bytes: used,
                inodes: image_fs.and_then(|f| f.inodes),
                inodes_free: image_fs.and_then(|f| f.inodes_free),
                inodes_used: layer.inodes_used.map(|v| v.value),
            };
            Some((id, fs))
        })
        .take(MAX_CONTAINERS)
        .collect()
}

impl Collector for StorageCollector {
    fn name(&self) -> &'static str {
        "nodestorageinfo"
    }

    fn interval(&self) -> Duration {
        STORAGE_INTERVAL
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            shared.fs = FsReading::of(&self.root_dir);
            shared.image_fs = self.image_fs().await;
            shared.container_rootfs = match self.cri.list_container_stats(None).await {
                Ok(stats) => rootfs_by_id(stats, shared.image_fs.as_ref()),
                Err(e) => {
                    debug!(error = %e, "metric advisor: ListContainerStats failed");
                    HashMap::new()
                }
            };
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::Cri;
    use crate::cri::FakeRuntime;
    use k8s_cri::v1 as cri;

    #[tokio::test]
    async fn each_container_gets_its_writable_layer_on_the_image_fs() {
        let fake = Arc::new(FakeRuntime::new());
        fake.add_image("img");
        let sandbox = cri::PodSandboxConfig::default();
        let sb = fake.run_pod_sandbox(sandbox.clone(), "").await.unwrap();
        let config = |name: &str| cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: "img".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let a = fake
            .create_container(&sb, config("a"), sandbox.clone())
            .await
            .unwrap();
        let b = fake
            .create_container(&sb, config("b"), sandbox)
            .await
            .unwrap();
        fake.set_writable_layer(&a, 15 << 20, 7);
        let root = tempfile::tempdir().unwrap();
        let mut c = StorageCollector::new(root.path().to_path_buf(), fake.clone());
        let mut shared = Shared::default();
        c.collect(&mut shared).await;
        let image_fs = shared.image_fs.clone().expect("the fake's image fs at /");
        let rootfs = &shared.container_rootfs[&a];
        assert_eq!(rootfs.used_bytes, 15 << 20);
        assert_eq!(rootfs.inodes_used, Some(7));
        assert_eq!(rootfs.capacity_bytes, image_fs.capacity_bytes);
        assert!(rootfs.capacity_bytes > 0);
        assert_eq!(rootfs.inodes, image_fs.inodes);
        // A container the runtime reports no writable layer for has no rootfs.
        assert!(!shared.container_rootfs.contains_key(&b));
        assert_eq!(shared.container_rootfs.len(), 1);
    }

    #[test]
    fn the_map_is_bounded() {
        let stats: Vec<cri::ContainerStats> = (0..MAX_CONTAINERS + 10)
            .map(|i| cri::ContainerStats {
                attributes: Some(cri::ContainerAttributes {
                    id: format!("c{i}"),
                    ..Default::default()
                }),
                writable_layer: Some(cri::FilesystemUsage {
                    used_bytes: Some(cri::UInt64Value { value: 1 }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        assert_eq!(rootfs_by_id(stats, None).len(), MAX_CONTAINERS);
    }
}

//! Image garbage collection (kubelet's `realImageGCManager`): every 5 minutes, when
//! the image filesystem is at or above `imageGCHighThresholdPercent`, unused images are
//! removed least recently used first until usage is back at the low threshold; images
//! unused for `imageMaximumGCAge` go whatever the usage. The eviction manager's
//! `deleteUnusedImages` step ([`UnusedImages`]) removes every unused image at once.
//!
//! An image is in use while any container (running or not) references its ID; the
//! runtime's pinned images and images first seen less than `imageMinimumGCAge` ago are
//! never removed. The records (first seen, last used) live in memory, as in kubelet: a
//! restarted agent sees every image as new, so the minimum age protects them again.

use crate::locks::Locked as _;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use tracing::{debug, info, warn};

use super::pull_records::PullRecords;
use crate::contracts::{DiskReclaimer, DiskTarget, ReclaimError, Reclaimed};
use crate::cri::Cri;
use crate::cri::CriError;
use crate::events::{EventRecorder, EventType, ObjectRef};

/// kubelet's `ImageGCPeriod`.
pub(crate) const GC_PERIOD: Duration = Duration::from_secs(5 * 60);

/// How often the GC runs; `OXLET_TEST_IMAGE_GC_PERIOD_MS` shortens it for tests.
pub(crate) fn gc_period() -> Duration {
    std::env::var("OXLET_TEST_IMAGE_GC_PERIOD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(GC_PERIOD, Duration::from_millis)
}

/// kubelet's `ImageGCPolicy`, checked when the settings were parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Usage (percent of capacity) at or above which the GC frees space; 100 turns
    /// the periodic GC off.
    pub high_percent: u8,
    /// Usage the GC frees space down to.
    pub low_percent: u8,
    /// Images first seen more recently than this are never removed.
    pub min_age: Duration,
    /// Images unused for longer are removed whatever the usage (zero: off).
    pub max_age: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
            max_age: Duration::ZERO,
        }
    }
}

impl Policy {
    /// kubelet starts no image GC loop when the high threshold is 100.
    pub(crate) fn periodic_gc_enabled(&self) -> bool {
        self.high_percent < 100
    }
}

/// What oxlet knows of one image (kubelet's `imageRecord`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    first_detected: Instant,
    /// None: not used by a container since it was first seen.
    last_used: Option<Instant>,
    size: u64,
    pinned: bool,
}

/// The image filesystem's size, from statvfs of its mountpoint (kubelet's
/// `ImageFsStats` capacity and available).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FsSpace {
    pub capacity: u64,
    pub available: u64,
}

/// Why an image GC run did not free what it had to.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImageGcError {
    #[error("image GC: {0}")]
    Cri(#[from] CriError),
    #[error("image GC: the runtime reports no image filesystem mountpoint")]
    NoImageFs,
    #[error("image GC: cannot statvfs the image filesystem at {path}: {source}")]
    Statvfs {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free {to_free} bytes, but only found {freed} bytes eligible to free."
    )]
    NotEnough { to_free: u64, freed: u64 },
    #[error(
        "wanted to free {to_free} bytes, but freed {freed} bytes space with errors in image deletion: {errors}"
    )]
    Deletion {
        to_free: u64,
        freed: u64,
        errors: String,
    },
}

/// Why an image was removed (the `reason` label of
/// `kubelet_image_garbage_collected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Space,
    Age,
}

impl Why {
    fn label(self) -> &'static str {
        match self {
            Why::Space => "space",
            Why::Age => "age",
        }
    }
}

/// One image that may be removed, in eviction order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    id: String,
    record: Record,
}

/// What one pass freed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Freed {
    pub bytes: u64,
    pub removed: usize,
}

/// The image GC manager: the records, the policy, and the runtime it removes from.
pub(crate) struct ImageGcManager {
    cri: Arc<dyn Cri>,
    policy: Policy,
    records: Mutex<HashMap<String, Record>>,
    /// When the GC began (`beganGC`): the maximum age applies only after it has passed.
    began: Instant,
    events: EventRecorder,
    node: ObjectRef,
    /// Records of images gone are pruned after each run.
    pull_records: Option<Arc<PullRecords>>,
}

impl ImageGcManager {
    pub(crate) fn new(
        cri: Arc<dyn Cri>,
        policy: Policy,
        events: EventRecorder,
        node_name: &str,
    ) -> Self {
        ImageGcManager {
            cri,
            policy,
            records: Mutex::default(),
            began: Instant::now(),
            events,
            node: ObjectRef::node(node_name),
            pull_records: None,
        }
    }

    /// Prunes the pull records of removed images after each run (kubelet's
    /// `PruneUnknownRecords`).
    pub(crate) fn with_pull_records(mut self, records: Arc<PullRecords>) -> Self {
        self.pull_records = Some(records);
        self
    }

    pub(crate) fn policy(&self) -> Policy {
        self.policy
    }

    fn records(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        self.records.locked()
    }

    /// Updates the records from the runtime (kubelet's `detectImages`): new images are
    /// first seen `now`, images a container references are last used `now`, images
    /// gone from the runtime are forgotten. Returns the IDs in use.
    async fn detect(&self, now: Instant) -> Result<HashSet<String>, CriError> {
        let images = self.cri.list_images().await?;
        let containers = self.cri.list_containers(None).await?;
        let mut in_use: HashSet<String> = containers
            .into_iter()
            .map(|c| c.image_ref)
            .filter(|r| !r.is_empty())
            .collect();
        // The sandbox image is always in use (kubelet's pod infra image): without it no
        // new pod can start, and a node without a registry could not get it back.
        match self.cri.sandbox_image().await {
            Ok(Some(sandbox)) => in_use.extend(
                images
                    .iter()
                    .filter(|i| i.repo_tags.contains(&sandbox) || i.id == sandbox)
                    .map(|i| i.id.clone()),
            ),
            Ok(None) => {}
            Err(e) => debug!(error = %e, "image GC: the runtime did not name its sandbox image"),
        }
        let mut records = self.records();
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        records.retain(|id, _| present.contains(id.as_str()));
        for image in &images {
            let r = records.entry(image.id.clone()).or_insert(Record {
                first_detected: now,
                last_used: None,
                size: 0,
                pinned: false,
            });
            if in_use.contains(&image.id) {
                r.last_used = Some(now);
            }
            r.size = image.size;
            r.pinned = image.pinned;
        }
        Ok(in_use)
    }

    /// The images that may go, least recently used first, then first seen first
    /// (kubelet's `imagesInEvictionOrder`): in-use and pinned images are left out.
    async fn eviction_order(&self, now: Instant) -> Result<Vec<Candidate>, CriError> {
        let in_use = self.detect(now).await?;
        let records = self.records();
        let mut out: Vec<Candidate> = records
            .iter()
            .filter(|(id, r)| {
                if in_use.contains(*id) {
                    debug!(imageID = %id, "image is in use");
                    return false;
                }
                if r.pinned {
                    debug!(imageID = %id, "image is pinned, skipping garbage collection");
                }
                !r.pinned
            })
            .map(|(id, r)| Candidate {
                id: id.clone(),
                record: *r,
            })
            .collect();
        out.sort_by(|a, b| {
            (a.record.last_used, a.record.first_detected, &a.id).cmp(&(
                b.record.last_used,
                b.record.first_detected,
                &b.id,
            ))
        });
        Ok(out)
    }

    /// Removes one image and forgets it.
    async fn remove(&self, c: &Candidate, why: Why) -> Result<(), CriError> {
        info!(imageID = %c.id, size = c.record.size, reason = why.label(), "removing image to free bytes");
        self.cri.remove_image(&c.id).await?;
        self.records().remove(&c.id);
        crate::metrics::image_garbage_collected(why.label());
        Ok(())
    }

    /// Removes images unused for longer than the maximum age, once the GC has run that
    /// long (kubelet's `freeOldImages`); returns the candidates left.
    async fn free_old(
        &self,
        candidates: Vec<Candidate>,
        now: Instant,
        freed: &mut Freed,
    ) -> Result<Vec<Candidate>, ImageGcError> {
        let max = self.policy.max_age;
        if max.is_zero() || now.saturating_duration_since(self.began) <= max {
            return Ok(candidates);
        }
        let mut left = Vec::with_capacity(candidates.len());
        let mut errors = Vec::new();
        for c in candidates {
            let unused_for = c
                .record
                .last_used
                .map_or(Duration::MAX, |t| now.saturating_duration_since(t));
            if unused_for <= max {
                left.push(c);
                continue;
            }
            match self.remove(&c, Why::Age).await {
                Ok(()) => {
                    freed.bytes += c.record.size;
                    freed.removed += 1;
                }
                Err(e) => {
                    errors.push(e.to_string());
                    left.push(c);
                }
            }
        }
        if errors.is_empty() {
            Ok(left)
        } else {
            Err(ImageGcError::Deletion {
                to_free: 0,
                freed: freed.bytes,
                errors: errors.join("; "),
            })
        }
    }

    /// Removes candidates in order until `to_free` bytes are freed (kubelet's
    /// `freeSpace`): images used at or after `now` and images younger than the
    /// minimum age are skipped. Failed removals are reported after trying the rest.
    async fn free_space(
        &self,
        to_free: u64,
        now: Instant,
        candidates: &[Candidate],
    ) -> Result<Freed, ImageGcError> {
        let mut freed = Freed::default();
        let mut errors = Vec::new();
        for c in candidates {
            if c.record.last_used.is_some_and(|t| t >= now) {
                debug!(imageID = %c.id, "image was used too recently, not eligible for garbage collection");
                continue;
            }
            let age = now.saturating_duration_since(c.record.first_detected);
            if age < self.policy.min_age {
                debug!(imageID = %c.id, age = %crate::duration::format_go_duration(age), minAge = %crate::duration::format_go_duration(self.policy.min_age), "image is younger than the minimum GC age, not eligible for garbage collection");
                continue;
            }
            if let Err(e) = self.remove(c, Why::Space).await {
                warn!(imageID = %c.id, error = %e, "cannot remove image");
                errors.push(e.to_string());
                continue;
            }
            freed.bytes += c.record.size;
            freed.removed += 1;
            if freed.bytes >= to_free {
                break;
            }
        }
        if errors.is_empty() {
            Ok(freed)
        } else {
            Err(ImageGcError::Deletion {
                to_free,
                freed: freed.bytes,
                errors: errors.join("; "),
            })
        }
    }

    /// The image filesystem's capacity and available bytes: statvfs of the
    /// mountpoint the runtime reports in `ImageFsInfo`, as kubelet's stats provider.
    pub(crate) async fn image_fs_space(&self) -> Result<FsSpace, ImageGcError> {
        let fs = self.cri.image_fs_info().await?;
        let mountpoint = fs
            .into_iter()
            .filter_map(|u| u.fs_id.map(|f| f.mountpoint))
            .find(|m| !m.is_empty())
            .ok_or(ImageGcError::NoImageFs)?;
        let s = rustix::fs::statvfs(Path::new(&mountpoint)).map_err(|e| ImageGcError::Statvfs {
            path: mountpoint.clone(),
            source: e.into(),
        })?;
        Ok(FsSpace {
            capacity: s.f_blocks.saturating_mul(s.f_frsize),
            available: s.f_bavail.saturating_mul(s.f_frsize),
        })
    }

    /// One periodic run (kubelet's `GarbageCollect`).
    pub(crate) async fn garbage_collect(&self) -> Result<Freed, ImageGcError> {
        let began = jiff::Timestamp::now();
        let freed = self.collect_images().await;
        if let Some(records) = &self.pull_records {
            // Whatever the run freed, records of images no longer there go; one of an
            // image pulled since the run began stays.
            if let Ok(images) = self.cri.list_images().await {
                let present = images.into_iter().map(|i| i.id).collect();
                let pruned = records.prune(&present, began);
                if pruned > 0 {
                    debug!(
                        pruned,
                        "image GC: removed the pull records of images no longer present"
                    );
                }
            }
        }
        freed
    }

    async fn collect_images(&self) -> Result<Freed, ImageGcError> {
        let now = Instant::now();
        let mut freed = Freed::default();
        let candidates = self.eviction_order(now).await?;
        let candidates = self.free_old(candidates, now, &mut freed).await?;
        let space = self.image_fs_space().await?;
        let by_space = self.collect_with(space, now, &candidates).await?;
        freed.bytes += by_space.bytes;
        freed.removed += by_space.removed;
        Ok(freed)
    }

    /// The threshold part of a run, given the filesystem's space: at or above the high
    /// threshold, frees down to the low one; too little freed is an error and a
    /// `FreeDiskSpaceFailed` event on the node.
    async fn collect_with(
        &self,
        space: FsSpace,
        now: Instant,
        candidates: &[Candidate],
    ) -> Result<Freed, ImageGcError> {
        let Some(to_free) = amount_to_free(space, self.policy).inspect_err(|e| {
            self.events.event(
                &self.node,
                EventType::Warning,
                "InvalidDiskCapacity",
                e.to_string(),
            );
        })?
        else {
            return Ok(Freed::default());
        };
        info!(
            usage = usage_percent(space),
            highThreshold = self.policy.high_percent,
            amountToFree = to_free,
            lowThreshold = self.policy.low_percent,
            "disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        );
        let freed = self.free_space(to_free, now, candidates).await?;
        if freed.bytes < to_free {
            let e = ImageGcError::NotEnough {
                to_free,
                freed: freed.bytes,
            };
            self.events.event(
                &self.node,
                EventType::Warning,
                "FreeDiskSpaceFailed",
                e.to_string(),
            );
            return Err(e);
        }
        Ok(freed)
    }

    /// Removes every unused image the policy allows, ignoring the thresholds (kubelet's
    /// `DeleteUnusedImages`, the eviction manager's `deleteUnusedImages`).
    pub(crate) async fn delete_unused(&self) -> Result<Reclaimed, ImageGcError> {
        info!("attempting to delete unused images");
        let now = Instant::now();
        let candidates = self.eviction_order(now).await?;
        let freed = self.free_space(u64::MAX, now, &candidates).await?;
        Ok(Reclaimed {
            bytes: freed.bytes,
            removed: freed.removed,
        })
    }

    /// The loop: a run every `period` (the first at once, as kubelet's `wait.Until`);
    /// a failure is logged (and an `ImageGCFailed` event after two in a row, as
    /// kubelet) and the loop goes on.
    pub(crate) async fn run(&self, period: Duration, cancel: tokio_util::sync::CancellationToken) {
        let mut failed_before = false;
        loop {
            let started = Instant::now();
            match self.garbage_collect().await {
                Ok(f) => {
                    failed_before = false;
                    info!(removed = f.removed, freedBytes = f.bytes, took = %crate::duration::format_go_duration(started.elapsed()), "image garbage collection done");
                }
                Err(e) => {
                    if failed_before {
                        warn!(error = %e, "image garbage collection failed multiple times in a row");
                        self.events.event(
                            &self.node,
                            EventType::Warning,
                            "ImageGCFailed",
                            e.to_string(),
                        );
                    } else {
                        info!(error = %e, "image garbage collection failed once; stats initialization may not have completed yet");
                    }
                    failed_before = true;
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    }
}

/// Percent of the capacity in use, from what is available (kubelet's `usagePercent`).
fn usage_percent(space: FsSpace) -> u64 {
    let available = space.available.min(space.capacity);
    100 - (u128::from(available) * 100 / u128::from(space.capacity.max(1))) as u64
}

/// The bytes to free, or None below the high threshold (kubelet: `capacity × (100 −
/// low) / 100 − available` once usage reaches `high`).
fn amount_to_free(space: FsSpace, policy: Policy) -> Result<Option<u64>, ImageGcError> {
    if space.capacity == 0 {
        return Err(ImageGcError::InvalidCapacity);
    }
    let available = space.available.min(space.capacity);
    if usage_percent(space) < u64::from(policy.high_percent) {
        return Ok(None);
    }
    let keep_free =
        u128::from(space.capacity) * u128::from(100 - policy.low_percent.min(100)) / 100;
    Ok(Some(
        u64::try_from(keep_free.saturating_sub(u128::from(available))).unwrap_or(u64::MAX),
    ))
}

/// The eviction manager's `deleteUnusedImages` step.
pub(crate) struct UnusedImages(pub Arc<ImageGcManager>);

impl DiskReclaimer for UnusedImages {
    fn name(&self) -> &'static str {
        "deleteUnusedImages"
    }

    fn targets(&self) -> &'static [DiskTarget] {
        &[DiskTarget::ImageFs]
    }

    fn reclaim(&self) -> BoxFuture<'_, Result<Reclaimed, ReclaimError>> {
        Box::pin(async move {
            self.0.delete_unused().await.map_err(|e| ReclaimError {
                step: "deleteUnusedImages",
                message: e.to_string(),
            })
        })
    }
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod tests;

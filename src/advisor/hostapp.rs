//! koordlet's `hostapplication` collector: every second, each host application the
//! NodeSLO names (`spec.hostApplications`), read from its own cgroup: CPU cores from
//! the usage delta, memory without page cache (koordlet's usage) and with it (the
//! cgroup's usage file). The list follows the NodeSLO as it changes; the current one
//! is also kept in the key-value store (`host_applications`) for CPU suppress, which
//! counts the usage of the host applications that are not BE.

use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::rate::RateTracker;
use super::{CollectFuture, Collector, Shared};
use crate::cm::{CgroupTree, StatReader};
use crate::koordapi::{HostApp, QosPaths};
use crate::metriccache::{MetricCache, MetricKind, label, unix_ms};

/// The key-value store's key for the current host applications.
pub(crate) const HOST_APPS_KEY: &str = "host_applications";

pub(crate) struct HostAppCollector {
    reader: StatReader,
    apps: watch::Receiver<Vec<HostApp>>,
    bases: QosPaths,
    cache: std::sync::Arc<MetricCache>,
    /// Each application's last CPU reading, by name (the pod collector's rates).
    rates: RateTracker,
    stored: Option<Vec<HostApp>>,
}

impl HostAppCollector {
    pub(crate) fn new(
        tree: CgroupTree,
        apps: watch::Receiver<Vec<HostApp>>,
        bases: QosPaths,
        cache: std::sync::Arc<MetricCache>,
    ) -> Self {
        HostAppCollector {
            reader: StatReader::new(tree),
            apps,
            bases,
            cache,
            rates: RateTracker::default(),
            stored: None,
        }
    }

    /// Keeps the key-value store's list in step with the NodeSLO's.
    fn store(&mut self, apps: &[HostApp]) {
        if self.stored.as_deref() == Some(apps) {
            return;
        }
        match self.cache.kv().set(HOST_APPS_KEY, &apps) {
            Ok(()) => {
                info!(
                    hostApplications = apps.len(),
                    "metric advisor: following the NodeSLO's host applications"
                );
                self.stored = Some(apps.to_vec());
            }
            Err(e) => warn!(error = %e, "metric advisor: host applications not stored"),
        }
    }
}

impl Collector for HostAppCollector {
    fn name(&self) -> &'static str {
        "hostapplication"
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            let apps = self.apps.borrow().clone();
            self.store(&apps);
            shared.host_apps_usage = (0.0, 0.0);
            for app in &apps {
                let Some(path) = app.cgroup_path(&self.bases) else {
                    continue;
                };
                let r = match self.reader.stats(&path, false) {
                    Ok(r) => r,
                    Err(e) => {
                        debug!(hostApplication = %app.name, cgroup = %path, error = %e, "metric advisor: host application not read");
                        continue;
                    }
                };
                let ts = unix_ms(r.time);
                let labels = [(label::HOST_APP_NAME, app.name.as_str())];
                if let Some(mut cpu) = r.cpu
                    && let Some(cores) = self.rates.update(&app.name, r.time, &mut cpu).cores
                {
                    shared.host_apps_usage.0 += cores;
                    shared.push(MetricKind::HostAppCpuUsage, &labels, ts, cores);
                }
                if let Some(m) = r.memory {
                    shared.host_apps_usage.1 += m.without_cache_bytes as f64;
                    shared.push(
                        MetricKind::HostAppMemoryUsage,
                        &labels,
                        ts,
                        m.without_cache_bytes as f64,
                    );
                    shared.push(
                        MetricKind::HostAppMemoryUsageWithPageCache,
                        &labels,
                        ts,
                        m.usage_bytes as f64,
                    );
                }
            }
            self.rates.end_round();
        })
    }
}

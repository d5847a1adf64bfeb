//! koordlet's `pagecache` collector (off by default, `--enable-pagecache-collector`):
//! memory with the page cache counted, beside the usage without it that the pod
//! collector records. The node's is MemTotal − MemFree; a pod's and a container's are
//! the anonymous, unevictable and file pages of its `memory.stat`. Both come from
//! what the node and pod collectors read this round: no file is read twice.

use super::{CollectFuture, Collector, Shared};
use crate::metriccache::{MetricKind, label, now_ms, unix_ms};

pub(crate) struct PageCacheCollector {
    enabled: bool,
}

impl PageCacheCollector {
    pub(crate) fn new(enabled: bool) -> Self {
        PageCacheCollector { enabled }
    }
}

impl Collector for PageCacheCollector {
    fn name(&self) -> &'static str {
        "pagecache"
    }

    fn disabled_reason(&self) -> Option<String> {
        (!self.enabled).then(|| "--enable-pagecache-collector=false (koordlet's default)".into())
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            let mut out = Vec::new();
            if let Some(bytes) = shared.node_memory_with_cache_bytes {
                out.push((
                    MetricKind::NodeMemoryUsageWithPageCache,
                    None,
                    now_ms(),
                    bytes,
                ));
            }
            for pod in &shared.pods {
                if let Some(m) = pod
                    .cgroup
                    .as_ref()
                    .and_then(|c| c.memory.map(|m| (c.time, m)))
                {
                    let v = m.1.with_cache_bytes as f64;
                    out.push((
                        MetricKind::PodMemoryUsageWithPageCache,
                        Some((label::POD_UID, pod.uid.clone())),
                        unix_ms(m.0),
                        v,
                    ));
                }
                for c in &pod.containers {
                    if let Some(m) = c.cgroup.memory {
                        let v = m.with_cache_bytes as f64;
                        out.push((
                            MetricKind::ContainerMemoryUsageWithPageCache,
                            Some((label::CONTAINER_ID, c.id.clone())),
                            unix_ms(c.cgroup.time),
                            v,
                        ));
                    }
                }
            }
            for (kind, l, ts, v) in out {
                match &l {
                    Some((name, value)) => shared.push(kind, &[(name, value.as_str())], ts, v),
                    None => shared.push(kind, &[], ts, v),
                }
            }
        })
    }
}

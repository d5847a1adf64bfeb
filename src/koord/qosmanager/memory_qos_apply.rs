//! cgroup reconcile's memory QoS written (koordlet's `LeveledUpdateBatch`): the QoS,
//! pod and container levels raised top-down first (a parent never below a child on
//! the way), then every value set bottom-up. Only what differs is written, each write
//! logged with its cause; a kernel without the files (cgroup v1 without Anolis) is
//! said once and left alone, as koordlet's `SupportedIfFileExistsInKubepods` does.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tracing::{debug, info};

use super::QosManager;
use super::memory_qos::{self, MAX, MemoryValues};
use crate::cm::QosFile;
use crate::pod::pod_uid;

/// One cgroup's wanted values, and the pod they are for (None at QoS level).
type Want = (String, MemoryValues, Option<Arc<Pod>>);

impl QosManager {
    /// One round of memory QoS over the running pods.
    pub(super) fn reconcile_memory_qos(&mut self) {
        let Some(kubepods) = self.d.cm.kubepods_path() else {
            return;
        };
        match self.d.cm.read_qos_file(&kubepods, QosFile::MemoryMin) {
            Ok(Some(_)) => {}
            Ok(None) => {
                if self.first_time("no-memory-qos") {
                    info!(cgroup = %kubepods, "cgroup reconcile: the kernel has no memory.min, memory.low or memory.high here (cgroup v1 without Anolis); memory QoS is not applied");
                }
                return;
            }
            Err(e) => {
                debug!(cgroup = %kubepods, error = %e, "cgroup reconcile: cannot read memory.min of kubepods");
                return;
            }
        }
        let levels = self.memory_qos_plan();
        self.write_memory_levels(&levels);
    }

    /// The values of each level: QoS cgroups, pod cgroups, container cgroups.
    fn memory_qos_plan(&self) -> [Vec<Want>; 3] {
        let cfg = self.d.cfg.memory_qos;
        let pods: HashMap<String, Arc<Pod>> = self
            .d
            .pods
            .all()
            .into_iter()
            .map(|p| (pod_uid(&p).to_string(), p))
            .collect();
        let mut levels: [Vec<Want>; 3] = Default::default();
        let mut running = Vec::new();
        for t in self.d.lister.list() {
            let Some(pod) = pods.get(&t.uid) else {
                continue;
            };
            let p = memory_qos::percents(&cfg, pod);
            running.push(pod.clone());
            if let Some(cg) = &t.cgroup {
                levels[1].push((
                    cg.to_string(),
                    memory_qos::pod_values(pod, p),
                    Some(pod.clone()),
                ));
            }
            let spec = pod
                .spec
                .as_ref()
                .map(|s| s.containers.as_slice())
                .unwrap_or_default();
            for ct in &t.containers {
                if let Some(c) = spec.iter().find(|c| c.name == ct.name) {
                    let v =
                        memory_qos::container_values(pod, c, p, self.d.allocatable.memory_bytes);
                    levels[2].push((ct.cgroup.to_string(), v, Some(pod.clone())));
                }
            }
        }
        let refs: Vec<&Pod> = running.iter().map(Arc::as_ref).collect();
        for (class, v) in memory_qos::qos_values(&cfg, &refs) {
            if let Some(path) = self.d.cm.qos_cgroup_path(class) {
                levels[0].push((path, v, None));
            }
        }
        levels
    }

    fn write_memory_levels(&self, levels: &[Vec<Want>; 3]) {
        // Raise top-down, then set bottom-up.
        for (path, v, pod) in levels.iter().flatten() {
            for (file, want) in files(v) {
                let have = self.read_memory_file(path, file);
                if have.is_some_and(|h| h < want) {
                    self.write_memory_file(path, file, have, want, pod.as_deref());
                }
            }
        }
        for (path, v, pod) in levels.iter().rev().flatten() {
            for (file, want) in files(v) {
                let have = self.read_memory_file(path, file);
                if have != Some(want) {
                    self.write_memory_file(path, file, have, want, pod.as_deref());
                }
            }
        }
    }

    /// A memory QoS file as a number (`max` is [`MAX`]); None when absent or unreadable.
    fn read_memory_file(&self, path: &str, file: QosFile) -> Option<i64> {
        let text = self.d.cm.read_qos_file(path, file).ok()??;
        let text = text.trim();
        if text == "max" {
            Some(MAX)
        } else {
            text.parse().ok()
        }
    }

    fn write_memory_file(
        &self,
        path: &str,
        file: QosFile,
        have: Option<i64>,
        want: i64,
        pod: Option<&Pod>,
    ) {
        let spell = |v: i64| {
            if v == MAX {
                "max".to_string()
            } else {
                v.to_string()
            }
        };
        let class = pod.map_or("the sum of its pods", |p| {
            crate::koordapi::koord_qos_with_default(p).name()
        });
        match self.d.cm.write_qos_file(path, file, &spell(want)) {
            Ok(()) => info!(
                cgroup = %path,
                file = file.name(),
                old = %have.map_or_else(|| "unknown".to_string(), spell),
                value = %spell(want),
                qosClass = class,
                "cgroup reconcile: memory QoS value differed from the class's resourceQOSStrategy; written"
            ),
            Err(e) => {
                debug!(cgroup = %path, file = file.name(), error = %e, "cgroup reconcile: cannot write a memory QoS file");
            }
        }
    }
}

/// The files a level sets, with their values.
fn files(v: &MemoryValues) -> Vec<(QosFile, i64)> {
    let mut f = vec![(QosFile::MemoryMin, v.min), (QosFile::MemoryLow, v.low)];
    if let Some(h) = v.high {
        f.push((QosFile::MemoryHigh, h));
    }
    f
}

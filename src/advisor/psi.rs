//! Pressure (koordlet's PSI collector, every 10 s): the node's `/proc/pressure/*` and
//! each pod's and container's pressure files. Off when the kernel has no PSI; on
//! cgroup v1 a cgroup without pressure files is skipped quietly, and once one that
//! exists has none, the kernel keeps none in v1 cgroups (only some, such as Anolis,
//! do): the cgroups are not looked at again (a walk and three failed opens each, at
//! 220 cgroups every 10 s).

use std::path::PathBuf;
use std::time::Duration;

use super::{CollectFuture, Collector, PSI_INTERVAL, Shared};
use crate::cm::{CgroupTree, parse_psi};
use crate::contracts::{Pressure, Psi};
use crate::metriccache::{MetricKind, label, now_ms};

/// koordlet's `psi_precision`: the avg10 window.
const PRECISION: &str = "10";

pub(crate) struct PsiCollector {
    proc_root: PathBuf,
    tree: CgroupTree,
    /// False once a v1 cgroup showed that this kernel keeps no pressure files in v1.
    cgroups_have_psi: bool,
}

impl PsiCollector {
    pub(crate) fn new(proc_root: PathBuf, tree: CgroupTree) -> Self {
        PsiCollector {
            proc_root,
            tree,
            cgroups_have_psi: true,
        }
    }

    /// A cgroup's pressure; on v1, the first cgroup read without any pressure file
    /// turns the cgroups' part off (see the module doc).
    fn cgroup(&mut self, path: &str) -> Option<Pressure> {
        if !self.cgroups_have_psi {
            return None;
        }
        let p = self.tree.pressure(path).ok()?;
        if self.tree.version().uses_v1_controllers()
            && p.cpu.is_none()
            && p.memory.is_none()
            && p.io.is_none()
        {
            self.cgroups_have_psi = false;
            tracing::info!(
                cgroup = path,
                "metric advisor: this kernel keeps no pressure files in cgroup v1 cgroups; pod and container PSI is not collected"
            );
            return None;
        }
        Some(p)
    }

    fn node_file(&self, name: &str) -> Option<Psi> {
        let text = crate::procfs::read_bounded(&self.proc_root.join("pressure").join(name)).ok()?;
        parse_psi(&text)
    }
}

/// The samples of one cgroup's pressure: avg10 of `some` and `full` per resource.
fn push_pressure(
    shared: &mut Shared,
    kind: MetricKind,
    ids: &[(&str, &str)],
    p: &Pressure,
    ts: i64,
) {
    for (resource, psi) in [("cpu", p.cpu), ("mem", p.memory), ("io", p.io)] {
        let Some(psi) = psi else { continue };
        let degrees = [("some", Some(psi.some)), ("full", psi.full)];
        for (degree, line) in degrees {
            let Some(line) = line else { continue };
            let mut labels = ids.to_vec();
            labels.extend([
                (label::PSI_RESOURCE, resource),
                (label::PSI_PRECISION, PRECISION),
                (label::PSI_DEGREE, degree),
            ]);
            shared.push(kind, &labels, ts, line.avg10);
        }
    }
}

impl Collector for PsiCollector {
    fn name(&self) -> &'static str {
        "psi"
    }

    fn interval(&self) -> Duration {
        PSI_INTERVAL
    }

    fn disabled_reason(&self) -> Option<String> {
        let dir = self.proc_root.join("pressure");
        (!dir.join("cpu").exists())
            .then(|| format!("the kernel has no PSI ({} is missing)", dir.display()))
    }

    fn collect<'a>(&'a mut self, shared: &'a mut Shared) -> CollectFuture<'a> {
        Box::pin(async move {
            let ts = now_ms();
            shared.node_pressure = Pressure {
                cpu: self.node_file("cpu"),
                memory: self.node_file("memory"),
                io: self.node_file("io"),
            };
            shared.pressure.clear();
            let targets = std::mem::take(&mut shared.targets);
            for t in &targets {
                if let Some(path) = &t.cgroup
                    && let Some(p) = self.cgroup(path)
                {
                    push_pressure(
                        shared,
                        MetricKind::PodPsi,
                        &[(label::POD_UID, &t.uid)],
                        &p,
                        ts,
                    );
                    shared.pressure.insert(path.to_string(), p);
                }
                for c in &t.containers {
                    if let Some(p) = self.cgroup(&c.cgroup) {
                        push_pressure(
                            shared,
                            MetricKind::ContainerPsi,
                            &[(label::POD_UID, &t.uid), (label::CONTAINER_ID, &c.id)],
                            &p,
                            ts,
                        );
                        shared.pressure.insert(c.cgroup.to_string(), p);
                    }
                }
            }
            shared.targets = targets;
        })
    }
}

//! What each part of oxlet's requests costs containerd: the fair floor's pod replayed
//! with one kubelet semantic taken out at a time (the pod cgroup as cgroup parent, the
//! security contexts, DNS, the mounts, the resources, sysctls, labels and
//! annotations). Each round runs every variant once, full request first, so all see
//! the same machine; a variant's cost is the full request's p50 minus its own.

use k8s_cri::v1 as cri;

use crate::common::Testbed;
use crate::fair::FairFloor;
use crate::stats::{ms, pct, sorted};

/// One semantic taken out of the replayed requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Without {
    Nothing,
    CgroupParent,
    SecurityContext,
    Dns,
    Mounts,
    Resources,
    Sysctls,
    LabelsAndAnnotations,
}

pub(crate) const VARIANTS: [Without; 8] = [
    Without::Nothing,
    Without::CgroupParent,
    Without::SecurityContext,
    Without::Dns,
    Without::Mounts,
    Without::Resources,
    Without::Sysctls,
    Without::LabelsAndAnnotations,
];

impl Without {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Without::Nothing => "the full request",
            Without::CgroupParent => "pod cgroup as the cgroup parent",
            Without::SecurityContext => "security contexts (seccomp, capabilities, masked paths)",
            Without::Dns => "DNS config (containerd writes resolv.conf)",
            Without::Mounts => "mounts (/etc/hosts, termination-log)",
            Without::Resources => "resources (shares, quota, oom_score_adj)",
            Without::Sysctls => "sysctls",
            Without::LabelsAndAnnotations => "labels and annotations",
        }
    }

    /// Takes the semantic out of a sandbox and container config (a namespace option
    /// stays: without it the pod would lose its network).
    pub(crate) fn apply(self, sb: &mut cri::PodSandboxConfig, c: &mut cri::ContainerConfig) {
        match self {
            Without::Nothing => {}
            Without::CgroupParent => {
                if let Some(l) = sb.linux.as_mut() {
                    l.cgroup_parent.clear();
                }
            }
            Without::SecurityContext => {
                if let Some(s) = sb.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
                    let ns = s.namespace_options.take();
                    *s = cri::LinuxSandboxSecurityContext {
                        namespace_options: ns,
                        ..Default::default()
                    };
                }
                if let Some(s) = c.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
                    let ns = s.namespace_options.take();
                    *s = cri::LinuxContainerSecurityContext {
                        namespace_options: ns,
                        ..Default::default()
                    };
                }
            }
            Without::Dns => sb.dns_config = None,
            Without::Mounts => c.mounts.clear(),
            Without::Resources => {
                if let Some(l) = sb.linux.as_mut() {
                    l.resources = None;
                    l.overhead = None;
                }
                if let Some(l) = c.linux.as_mut() {
                    l.resources = None;
                }
            }
            Without::Sysctls => {
                if let Some(l) = sb.linux.as_mut() {
                    l.sysctls.clear();
                }
            }
            Without::LabelsAndAnnotations => {
                sb.annotations.clear();
                c.annotations.clear();
                sb.labels.retain(|k, _| !k.starts_with("bench."));
                c.labels.retain(|k, _| !k.starts_with("bench."));
            }
        }
    }
}

/// Each variant's start times (ms), by variant, over `rounds` rounds.
pub(crate) async fn run(
    bed: &Testbed,
    fair: &FairFloor,
    rounds: usize,
) -> Vec<(Without, Vec<f64>)> {
    eprintln!("bench: fair floor without one semantic at a time, {rounds} rounds");
    let mut times: Vec<(Without, Vec<f64>)> = VARIANTS.iter().map(|v| (*v, Vec::new())).collect();
    for r in 0..rounds {
        for (v, t) in &mut times {
            t.push(ms(fair
                .pod_without(bed, &format!("abl-{r}-{}", *v as u8), *v)
                .await));
            fair.remove_all(bed).await;
        }
    }
    times.into_iter().map(|(v, t)| (v, sorted(t))).collect()
}

/// The table: each variant's p50 and what the semantic costs (full p50 minus its p50).
pub(crate) fn print(times: &[(Without, Vec<f64>)]) {
    let full = times
        .iter()
        .find(|(v, _)| *v == Without::Nothing)
        .map_or(f64::NAN, |(_, t)| pct(t, 0.5));
    println!("\n## What containerd spends on each part of oxlet's requests (fair floor, ms)\n");
    println!("| replayed without | p50 | p90 | cost of the part (full p50 − p50) |");
    println!("|---|---|---|---|");
    for (v, t) in times {
        let p50 = pct(t, 0.5);
        let cost = if *v == Without::Nothing {
            String::new()
        } else {
            format!("{:+.1}", full - p50)
        };
        println!("| {} | {p50:.1} | {:.1} | {cost} |", v.name(), pct(t, 0.9));
    }
}

/// The table as JSON.
pub(crate) fn json(times: &[(Without, Vec<f64>)]) -> serde_json::Value {
    times
        .iter()
        .map(|(v, t)| (v.name().to_string(), crate::stats::dist(t)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

//! The Summary API from the metric advisor's latest readings and the measured volume
//! usage, filled as kubelet's CRI stats provider fills it: a field whose source could
//! not be read is omitted, the pod's CPU and memory fall back to the sum of its
//! containers, and ephemeral storage adds up the containers' writable layers and logs,
//! the disk-backed volumes, the pod's own logs and its `etc-hosts`.

use std::time::SystemTime;

use super::summary::{
    ContainerStats, CpuStats, FsStats, InterfaceStats, IoStats, MemoryStats, NetworkStats,
    NodeStats, PodReference, PodStats, PsiData, PsiStats, RlimitStats, RuntimeStats, Summary,
    SwapStats, Time, VolumeStats,
};
use super::volumes::{PodUsage, Usage, VolumeUsage};
use crate::contracts::{
    CgroupReading, FsReading, InterfaceReading, NetworkReading, NodeReading, Pressure, Psi,
    Snapshot, SystemContainerReading,
};

/// The whole summary, or the CPU-and-memory-only shape (`?only_cpu_and_memory=true`).
pub(crate) fn build_summary(
    snap: &Snapshot,
    volumes: &VolumeUsage,
    only_cpu_and_memory: bool,
) -> Summary {
    if only_cpu_and_memory {
        return cpu_and_memory(snap);
    }
    let n = &snap.node;
    let node = NodeStats {
        node_name: n.name.clone(),
        system_containers: n
            .system_containers
            .iter()
            .map(|c| system_container(n, c))
            .collect(),
        start_time: Time::from_system(n.started_at),
        cpu: cpu(&n.cgroup),
        memory: memory(&n.cgroup, Some(n.memory_capacity_bytes)),
        swap: swap(&n.cgroup),
        io: io(&n.cgroup),
        fs: n.fs.as_ref().map(fs),
        network: n.network.as_ref().map(network),
        runtime: n.image_fs.as_ref().map(|f| RuntimeStats {
            image_fs: Some(fs(f)),
            container_fs: Some(fs(f)),
        }),
        rlimit: (n.max_pid.is_some() || n.processes.is_some()).then(|| RlimitStats {
            time: Time::from_system(n.cgroup.time),
            maxpid: n.max_pid.and_then(|v| i64::try_from(v).ok()),
            curproc: n.processes.and_then(|v| i64::try_from(v).ok()),
        }),
    };
    let pods = snap
        .pods
        .iter()
        .map(|p| {
            let measured = volumes.usage_of(&p.uid);
            let containers: Vec<ContainerStats> = p
                .containers
                .iter()
                .map(|c| ContainerStats {
                    name: c.name.clone(),
                    start_time: Time::from_system(c.created_at),
                    cpu: cpu(&c.cgroup),
                    memory: memory(&c.cgroup, None),
                    swap: swap(&c.cgroup),
                    rootfs: c.rootfs.as_ref().map(fs),
                    logs: measured
                        .as_ref()
                        .and_then(|m| Some(owned(m.container_log(&c.name)?, m, n.fs.as_ref())))
                        .or_else(|| c.logs.as_ref().map(fs)),
                    ..ContainerStats::default()
                })
                .collect();
            let volume: Vec<VolumeStats> = match &measured {
                Some(m) => m
                    .volumes
                    .iter()
                    .map(|(name, u)| VolumeStats {
                        fs: owned(*u, m, n.fs.as_ref()),
                        name: name.clone(),
                        ..VolumeStats::default()
                    })
                    .collect(),
                None => p
                    .volumes
                    .iter()
                    .map(|(name, f)| VolumeStats {
                        fs: fs(f),
                        name: name.clone(),
                        ..VolumeStats::default()
                    })
                    .collect(),
            };
            let ephemeral_storage = n.fs.as_ref().map(|root| {
                ephemeral(
                    &containers,
                    &volume,
                    measured.as_deref(),
                    n.fs.as_ref(),
                    root,
                )
            });
            let (pod_cpu, pod_memory) = pod_cpu_memory(p.cgroup.as_ref(), &containers);
            PodStats {
                pod_ref: PodReference {
                    name: p.name.clone(),
                    namespace: p.namespace.clone(),
                    uid: p.uid.clone(),
                },
                start_time: Time::from_system(p.started_at),
                cpu: pod_cpu,
                memory: pod_memory,
                swap: pod_swap(p.cgroup.as_ref(), &containers),
                io: p.cgroup.as_ref().and_then(io),
                containers: Some(containers),
                volume,
                ephemeral_storage,
                ..PodStats::default()
            }
        })
        .collect();
    Summary { node, pods }
}

/// A system container: its cgroup's CPU and memory, started when its cgroup was made
/// (the boot time when that is unknown).
fn system_container(n: &NodeReading, c: &SystemContainerReading) -> ContainerStats {
    ContainerStats {
        name: c.name.clone(),
        start_time: Time::from_system(c.created_at.unwrap_or(n.started_at)),
        cpu: cpu(&c.cgroup),
        memory: memory(&c.cgroup, None),
        swap: swap(&c.cgroup),
        ..ContainerStats::default()
    }
}

fn interface(i: &InterfaceReading) -> InterfaceStats {
    InterfaceStats {
        name: i.name.clone(),
        rx_bytes: Some(i.rx_bytes),
        rx_errors: Some(i.rx_errors),
        tx_bytes: Some(i.tx_bytes),
        tx_errors: Some(i.tx_errors),
    }
}

/// The host's interfaces, the default-route one also inline (kubelet's
/// `cadvisorInfoToNetworkStats`; inline stays empty without a default route).
fn network(r: &NetworkReading) -> NetworkStats {
    let interfaces: Vec<InterfaceStats> = r.interfaces.iter().map(interface).collect();
    let default = r
        .default
        .as_deref()
        .and_then(|d| interfaces.iter().find(|i| i.name == d).cloned())
        .unwrap_or_default();
    NetworkStats {
        time: Time::from_system(r.time),
        default,
        interfaces,
    }
}

/// kubelet's `GetCPUAndMemoryStats` shape.
fn cpu_and_memory(snap: &Snapshot) -> Summary {
    let n = &snap.node;
    let node = NodeStats {
        node_name: n.name.clone(),
        system_containers: n
            .system_containers
            .iter()
            .map(|c| system_container(n, c))
            .collect(),
        start_time: Time::from_system(n.started_at),
        cpu: cpu(&n.cgroup),
        memory: memory(&n.cgroup, Some(n.memory_capacity_bytes)),
        ..NodeStats::default()
    };
    let pods = snap
        .pods
        .iter()
        .map(|p| {
            let containers: Vec<ContainerStats> = p
                .containers
                .iter()
                .map(|c| ContainerStats {
                    name: c.name.clone(),
                    start_time: Time::from_system(c.created_at),
                    cpu: cpu(&c.cgroup),
                    memory: memory(&c.cgroup, None),
                    ..ContainerStats::default()
                })
                .collect();
            let (pod_cpu, pod_memory) = pod_cpu_memory(p.cgroup.as_ref(), &containers);
            PodStats {
                pod_ref: PodReference {
                    name: p.name.clone(),
                    namespace: p.namespace.clone(),
                    uid: p.uid.clone(),
                },
                start_time: Time::from_system(p.started_at),
                containers: Some(containers),
                cpu: pod_cpu,
                memory: pod_memory,
                ..PodStats::default()
            }
        })
        .collect();
    Summary { node, pods }
}

fn psi(p: Option<&Psi>) -> Option<PsiStats> {
    let line = |l: &crate::contracts::PsiLine| PsiData {
        total: l.total_us,
        avg10: l.avg10,
        avg60: l.avg60,
        avg300: l.avg300,
    };
    p.map(|p| PsiStats {
        some: line(&p.some),
        full: p.full.as_ref().map(line).unwrap_or_default(),
    })
}

fn cpu(cg: &CgroupReading) -> Option<CpuStats> {
    let c = cg.cpu?;
    Some(CpuStats {
        time: Time::from_system(cg.time),
        usage_nano_cores: c.usage_nano_cores,
        usage_core_nano_seconds: Some(c.usage_core_nanos),
        psi: psi(cg.pressure.cpu.as_ref()),
    })
}

/// `capacity` is the node's memory; otherwise the cgroup's limit, when set, gives
/// `availableBytes`.
fn memory(cg: &CgroupReading, capacity: Option<u64>) -> Option<MemoryStats> {
    let m = cg.memory?;
    Some(MemoryStats {
        time: Time::from_system(cg.time),
        available_bytes: capacity
            .or(m.limit_bytes)
            .map(|c| c.saturating_sub(m.working_set_bytes)),
        usage_bytes: Some(m.usage_bytes),
        working_set_bytes: Some(m.working_set_bytes),
        rss_bytes: Some(m.rss_bytes),
        page_faults: Some(m.page_faults),
        major_page_faults: Some(m.major_page_faults),
        psi: psi(cg.pressure.memory.as_ref()),
    })
}

/// kubelet's `cadvisorInfoToSwapStats`: the swap in use, and what is left of a
/// limit when there is one (the node's: SwapTotal).
fn swap(cg: &CgroupReading) -> Option<SwapStats> {
    let m = cg.memory?;
    let usage = m.swap_usage_bytes?;
    Some(SwapStats {
        time: Time::from_system(cg.time),
        swap_available_bytes: m.swap_limit_bytes.map(|l| l.saturating_sub(usage)),
        swap_usage_bytes: Some(usage),
    })
}

/// The pod cgroup's swap, or the sum of its containers' (kubelet's `addSwapStats`).
fn pod_swap(cg: Option<&CgroupReading>, containers: &[ContainerStats]) -> Option<SwapStats> {
    if let Some(s) = cg.and_then(swap) {
        return Some(s);
    }
    let swaps: Vec<&SwapStats> = containers.iter().filter_map(|c| c.swap.as_ref()).collect();
    (!swaps.is_empty()).then(|| SwapStats {
        time: swaps.iter().map(|s| s.time).max().unwrap_or_default(),
        swap_available_bytes: Some(swaps.iter().filter_map(|s| s.swap_available_bytes).sum()),
        swap_usage_bytes: Some(swaps.iter().filter_map(|s| s.swap_usage_bytes).sum()),
    })
}

fn io(cg: &CgroupReading) -> Option<IoStats> {
    let Pressure { io, .. } = &cg.pressure;
    io.as_ref().map(|p| IoStats {
        time: Time::from_system(cg.time),
        psi: psi(Some(p)),
    })
}

fn fs(f: &FsReading) -> FsStats {
    FsStats {
        time: Time::from_system(f.time),
        available_bytes: Some(f.available_bytes),
        capacity_bytes: Some(f.capacity_bytes),
        used_bytes: Some(f.used_bytes),
        inodes_free: f.inodes_free,
        inodes: f.inodes,
        inodes_used: f.inodes_used,
    }
}

/// What a volume or log directory itself uses, on the root filesystem's capacity (as
/// kubelet's `du` metrics report the statfs of the directory's filesystem).
fn owned(u: Usage, m: &PodUsage, root: Option<&FsReading>) -> FsStats {
    FsStats {
        time: Time::from_system(m.time.unwrap_or(SystemTime::UNIX_EPOCH)),
        available_bytes: root.map(|r| r.available_bytes),
        capacity_bytes: root.map(|r| r.capacity_bytes),
        used_bytes: Some(u.bytes),
        inodes_free: root.and_then(|r| r.inodes_free),
        inodes: root.and_then(|r| r.inodes),
        inodes_used: Some(u.inodes),
    }
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// kubelet's `calcEphemeralStorage`: a container's logs count only with its rootfs.
fn ephemeral(
    containers: &[ContainerStats],
    volumes: &[VolumeStats],
    measured: Option<&PodUsage>,
    root_opt: Option<&FsReading>,
    root: &FsReading,
) -> FsStats {
    let mut r = FsStats {
        time: Time::from_system(root.time),
        available_bytes: Some(root.available_bytes),
        capacity_bytes: Some(root.capacity_bytes),
        inodes_free: root.inodes_free,
        inodes: root.inodes,
        ..FsStats::default()
    };
    let take = |f: &FsStats, r: &mut FsStats| {
        r.used_bytes = add(r.used_bytes, f.used_bytes);
        r.inodes_used = add(r.inodes_used, f.inodes_used);
        r.time = r.time.max(f.time);
    };
    for c in containers {
        if let Some(rootfs) = &c.rootfs {
            take(rootfs, &mut r);
            if let Some(logs) = &c.logs {
                take(logs, &mut r);
            }
        }
    }
    for v in volumes {
        take(&v.fs, &mut r);
    }
    if let Some(m) = measured {
        take(&owned(m.pod_logs, m, root_opt), &mut r);
        if let Some(h) = m.etc_hosts {
            take(&owned(h, m, root_opt), &mut r);
        }
    }
    r
}

/// The pod cgroup's CPU and memory, or the sum of the containers' (kubelet's fallback).
fn pod_cpu_memory(
    cg: Option<&CgroupReading>,
    containers: &[ContainerStats],
) -> (Option<CpuStats>, Option<MemoryStats>) {
    let from_cgroup = (cg.and_then(cpu), cg.and_then(|c| memory(c, None)));
    let cpu = from_cgroup.0.or_else(|| {
        let cpus: Vec<&CpuStats> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
        (!cpus.is_empty()).then(|| CpuStats {
            time: cpus.iter().map(|c| c.time).max().unwrap_or_default(),
            usage_nano_cores: cpus
                .iter()
                .try_fold(0, |s, c| Some(s + c.usage_nano_cores?)),
            usage_core_nano_seconds: cpus
                .iter()
                .fold(None, |s, c| add(s, c.usage_core_nano_seconds)),
            psi: None,
        })
    });
    let memory = from_cgroup.1.or_else(|| {
        let mems: Vec<&MemoryStats> = containers
            .iter()
            .filter_map(|c| c.memory.as_ref())
            .collect();
        (!mems.is_empty()).then(|| MemoryStats {
            time: mems.iter().map(|m| m.time).max().unwrap_or_default(),
            available_bytes: None,
            usage_bytes: mems.iter().fold(None, |s, m| add(s, m.usage_bytes)),
            working_set_bytes: mems.iter().fold(None, |s, m| add(s, m.working_set_bytes)),
            rss_bytes: mems.iter().fold(None, |s, m| add(s, m.rss_bytes)),
            page_faults: mems.iter().fold(None, |s, m| add(s, m.page_faults)),
            major_page_faults: mems.iter().fold(None, |s, m| add(s, m.major_page_faults)),
            psi: None,
        })
    });
    (cpu, memory)
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::contracts::{
        ContainerReading, CpuReading, MemoryReading, NodeReading, PodReading, PsiLine,
    };

    pub(crate) fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn cg(secs: u64, cpu_ns: u64, ws: u64) -> CgroupReading {
        CgroupReading {
            time: at(secs),
            cpu: Some(CpuReading {
                usage_core_nanos: cpu_ns,
                usage_nano_cores: Some(cpu_ns / 10),
                throttling: None,
            }),
            memory: Some(MemoryReading {
                usage_bytes: ws + 100,
                working_set_bytes: ws,
                without_cache_bytes: ws / 2,
                with_cache_bytes: ws,
                rss_bytes: ws / 2,
                page_faults: 7,
                major_page_faults: 1,
                limit_bytes: None,
                swap_usage_bytes: None,
                swap_limit_bytes: None,
            }),
            pids: Some(3),
            pressure: Pressure::default(),
        }
    }

    fn fsr(used: u64) -> FsReading {
        FsReading {
            time: at(1_700_000_010),
            capacity_bytes: 1000,
            available_bytes: 1000 - used,
            used_bytes: used,
            inodes: Some(50),
            inodes_free: Some(40),
            inodes_used: Some(10),
        }
    }

    /// `cg` with swap in use, and a swap limit.
    fn swapping(mut r: CgroupReading, usage: u64, limit: Option<u64>) -> CgroupReading {
        let m = r.memory.as_mut().unwrap();
        (m.swap_usage_bytes, m.swap_limit_bytes) = (Some(usage), limit);
        r
    }

    /// A node with one pod of two containers.
    pub(crate) fn snapshot() -> Snapshot {
        let mut node_cg = cg(1_700_000_001, 8_000_000_000, 1_500);
        node_cg.pressure.cpu = Some(Psi {
            some: PsiLine {
                total_us: 5,
                avg10: 1.5,
                avg60: 0.0,
                avg300: 0.0,
            },
            full: None,
        });
        Snapshot {
            node: NodeReading {
                name: "n1".into(),
                started_at: at(1_600_000_000),
                cgroup: node_cg,
                memory_capacity_bytes: 4_000,
                fs: Some(fsr(300)),
                image_fs: Some(fsr(200)),
                max_pid: Some(4_194_304),
                processes: Some(321),
                system_containers: vec![SystemContainerReading {
                    name: "pods".into(),
                    created_at: Some(at(1_650_000_000)),
                    cgroup: cg(1_700_000_001, 5, 6),
                }],
                network: Some(NetworkReading {
                    time: at(1_700_000_001),
                    default: Some("eth0".into()),
                    interfaces: vec![
                        InterfaceReading {
                            name: "cni0".into(),
                            rx_bytes: 1,
                            rx_errors: 0,
                            tx_bytes: 2,
                            tx_errors: 0,
                        },
                        InterfaceReading {
                            name: "eth0".into(),
                            rx_bytes: 100,
                            rx_errors: 1,
                            tx_bytes: 200,
                            tx_errors: 2,
                        },
                    ],
                }),
            },
            pods: vec![PodReading {
                uid: "u1".into(),
                name: "web".into(),
                namespace: "default".into(),
                started_at: at(1_690_000_000),
                cgroup: Some(cg(1_700_000_002, 3_000, 900)),
                cgroup_path: Some("kubepods/burstable/podu1".into()),
                containers: vec![
                    ContainerReading {
                        id: "c1".into(),
                        name: "app".into(),
                        image: "docker.io/library/app:1".into(),
                        cgroup_path: "kubepods/burstable/podu1/c1".into(),
                        created_at: at(1_690_000_001),
                        cgroup: cg(1_700_000_003, 1_000, 400),
                        rootfs: Some(fsr(40)),
                        logs: None,
                    },
                    ContainerReading {
                        id: "c2".into(),
                        name: "side".into(),
                        image: "docker.io/library/side:2".into(),
                        cgroup_path: "kubepods/burstable/podu1/c2".into(),
                        created_at: at(1_690_000_002),
                        cgroup: cg(1_700_000_004, 2_000, 500),
                        rootfs: None,
                        logs: Some(fsr(9)),
                    },
                ],
                volumes: Vec::new(),
            }],
        }
    }

    #[test]
    fn readings_land_in_kubelets_fields() {
        let s = build_summary(&snapshot(), &VolumeUsage::default(), false);
        let v = serde_json::to_value(&s).unwrap();
        let node = &v["node"];
        assert_eq!(node["nodeName"], "n1");
        assert_eq!(node["startTime"], "2020-09-13T12:26:40Z");
        assert_eq!(node["cpu"]["usageCoreNanoSeconds"], 8_000_000_000u64);
        assert_eq!(node["cpu"]["usageNanoCores"], 800_000_000u64);
        assert_eq!(node["cpu"]["psi"]["some"]["avg10"], 1.5);
        assert_eq!(node["cpu"]["psi"]["full"]["total"], 0);
        assert_eq!(node["memory"]["availableBytes"], 2_500);
        assert_eq!(node["memory"]["workingSetBytes"], 1_500);
        assert_eq!(node["memory"]["usageBytes"], 1_600);
        assert_eq!(node["memory"]["rssBytes"], 750);
        assert_eq!(node["memory"]["majorPageFaults"], 1);
        assert_eq!(node["fs"]["usedBytes"], 300);
        assert_eq!(node["runtime"]["imageFs"]["usedBytes"], 200);
        assert_eq!(node["rlimit"]["maxpid"], 4_194_304);
        assert_eq!(node["rlimit"]["curproc"], 321);
        assert_eq!(node["systemContainers"][0]["name"], "pods");
        // The cgroup's own time, not the boot time.
        assert_eq!(
            node["systemContainers"][0]["startTime"],
            "2022-04-15T05:20:00Z"
        );
        // The default-route interface inline, every interface listed.
        let net = &node["network"];
        assert_eq!(net["time"], "2023-11-14T22:13:21Z");
        assert_eq!(
            (&net["name"], &net["rxBytes"], &net["rxErrors"]),
            (&"eth0".into(), &100.into(), &1.into())
        );
        assert_eq!(
            (&net["txBytes"], &net["txErrors"]),
            (&200.into(), &2.into())
        );
        assert_eq!(net["interfaces"].as_array().unwrap().len(), 2);
        assert_eq!(net["interfaces"][0]["name"], "cni0");
        assert!(node.get("io").is_none());
        // No swap accounting read: no swap stats.
        assert!(node.get("swap").is_none() && v["pods"][0].get("swap").is_none());
        let pod = &v["pods"][0];
        assert_eq!(
            pod["podRef"],
            serde_json::json!({"name": "web", "namespace": "default", "uid": "u1"})
        );
        assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 3_000);
        assert_eq!(pod["memory"]["workingSetBytes"], 900);
        assert!(
            pod["memory"].get("availableBytes").is_none(),
            "no limit, no availableBytes"
        );
        let app = &pod["containers"][0];
        assert_eq!(app["name"], "app");
        assert_eq!(app["startTime"], "2023-07-22T04:26:41Z");
        assert_eq!(app["memory"]["workingSetBytes"], 400);
        assert_eq!(app["rootfs"]["usedBytes"], 40);
        assert!(app.get("logs").is_none());
        // Ephemeral storage: app's rootfs; side's logs do not count without a rootfs.
        assert_eq!(pod["ephemeral-storage"]["usedBytes"], 40);
        assert_eq!(pod["ephemeral-storage"]["capacityBytes"], 1000);
    }

    #[test]
    fn measured_volumes_and_logs_feed_the_volume_and_ephemeral_stats() {
        let volumes = VolumeUsage::default();
        let u = |bytes, inodes| Usage {
            bytes,
            inodes,
            partial: false,
        };
        volumes.set(
            "u1",
            PodUsage {
                time: Some(at(1_700_000_020)),
                volumes: vec![("data".into(), u(2 << 20, 2))],
                container_logs: vec![("app".into(), u(8192, 2)), ("side".into(), u(4096, 2))],
                pod_logs: u(0, 0),
                etc_hosts: Some(u(4096, 1)),
                ..PodUsage::default()
            },
        );
        let s = build_summary(&snapshot(), &volumes, false);
        let pod = &s.pods[0];
        assert_eq!(pod.volume.len(), 1);
        assert_eq!(pod.volume[0].name, "data");
        assert_eq!(pod.volume[0].fs.used_bytes, Some(2 << 20));
        assert_eq!(pod.volume[0].fs.inodes_used, Some(2));
        assert_eq!(pod.volume[0].fs.capacity_bytes, Some(1000));
        let containers = pod.containers.as_ref().unwrap();
        assert_eq!(containers[0].logs.as_ref().unwrap().used_bytes, Some(8192));
        // The measured logs replace the reading's.
        assert_eq!(containers[1].logs.as_ref().unwrap().used_bytes, Some(4096));
        let e = pod.ephemeral_storage.as_ref().unwrap();
        // app: rootfs 40 + logs 8192; side has no rootfs; the volume; etc-hosts.
        assert_eq!(e.used_bytes, Some(40 + 8192 + (2 << 20) + 4096));
        assert_eq!(e.inodes_used, Some(10 + 2 + 2 + 1));
        assert_eq!(e.time, Time::from_system(at(1_700_000_020)));
    }

    #[test]
    fn swap_is_the_usage_and_whats_left_of_a_limit() {
        let mut snap = snapshot();
        // The node: SwapTotal 1000, SwapTotal − SwapFree 100 in use.
        snap.node.cgroup = swapping(snap.node.cgroup, 100, Some(1_000));
        let pod = &mut snap.pods[0];
        // memory.swap.max 0 (NoSwap), and `max` (no limit).
        pod.containers[0].cgroup = swapping(pod.containers[0].cgroup.clone(), 0, Some(0));
        pod.containers[1].cgroup = swapping(pod.containers[1].cgroup.clone(), 7, None);
        pod.cgroup = Some(swapping(pod.cgroup.clone().unwrap(), 12, None));
        let v = serde_json::to_value(build_summary(&snap, &VolumeUsage::default(), false)).unwrap();
        let node = &v["node"]["swap"];
        assert_eq!(node["time"], "2023-11-14T22:13:21Z");
        assert_eq!(
            (&node["swapUsageBytes"], &node["swapAvailableBytes"]),
            (&100.into(), &900.into())
        );
        let pod = &v["pods"][0];
        assert_eq!(
            pod["swap"],
            serde_json::json!({"time": "2023-11-14T22:13:22Z", "swapUsageBytes": 12})
        );
        let c = &pod["containers"];
        assert_eq!(
            (
                &c[0]["swap"]["swapUsageBytes"],
                &c[0]["swap"]["swapAvailableBytes"]
            ),
            (&0.into(), &0.into())
        );
        assert!(c[1]["swap"].get("swapAvailableBytes").is_none(), "no limit");
        // Without the pod cgroup's reading, the containers' sum.
        snap.pods[0].cgroup = None;
        let s = build_summary(&snap, &VolumeUsage::default(), false);
        let sum = s.pods[0].swap.as_ref().unwrap();
        assert_eq!(
            (sum.swap_usage_bytes, sum.swap_available_bytes),
            (Some(7), Some(0))
        );
        assert_eq!(sum.time, Time::from_system(at(1_700_000_004)));
        // The CPU-and-memory shape has none.
        let v = serde_json::to_value(build_summary(&snap, &VolumeUsage::default(), true)).unwrap();
        assert!(v["node"].get("swap").is_none());
    }

    #[test]
    fn missing_sources_are_omitted() {
        let mut snap = snapshot();
        snap.node.cgroup.cpu = None;
        snap.node.fs = None;
        snap.node.image_fs = None;
        snap.node.max_pid = None;
        snap.node.processes = None;
        snap.pods[0].containers[0].cgroup.memory = None;
        let v = serde_json::to_value(build_summary(&snap, &VolumeUsage::default(), false)).unwrap();
        for f in ["cpu", "fs", "runtime", "rlimit"] {
            assert!(v["node"].get(f).is_none(), "{f}");
        }
        assert!(v["pods"][0]["containers"][0].get("memory").is_none());
        assert!(
            v["pods"][0].get("ephemeral-storage").is_none(),
            "no root fs, no ephemeral storage"
        );
    }

    #[test]
    fn pod_cpu_and_memory_fall_back_to_the_container_sum() {
        let mut snap = snapshot();
        snap.pods[0].cgroup = None;
        let s = build_summary(&snap, &VolumeUsage::default(), false);
        let pod = &s.pods[0];
        let cpu = pod.cpu.as_ref().unwrap();
        assert_eq!(cpu.usage_core_nano_seconds, Some(3_000));
        assert_eq!(cpu.usage_nano_cores, Some(300));
        assert_eq!(cpu.time, Time::from_system(at(1_700_000_004)));
        assert_eq!(pod.memory.as_ref().unwrap().working_set_bytes, Some(900));
        // A container without a rate makes the sum's rate unknown.
        snap.pods[0].containers[0]
            .cgroup
            .cpu
            .as_mut()
            .unwrap()
            .usage_nano_cores = None;
        let s = build_summary(&snap, &VolumeUsage::default(), false);
        assert_eq!(s.pods[0].cpu.as_ref().unwrap().usage_nano_cores, None);
    }

    #[test]
    fn only_cpu_and_memory_has_kubelets_shape() {
        let v = serde_json::to_value(build_summary(&snapshot(), &VolumeUsage::default(), true))
            .unwrap();
        let mut keys: Vec<&str> = v["node"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["cpu", "memory", "nodeName", "startTime", "systemContainers"]
        );
        let mut keys: Vec<&str> = v["pods"][0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["containers", "cpu", "memory", "podRef", "startTime"]);
        let mut keys: Vec<&str> = v["pods"][0]["containers"][0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, ["cpu", "memory", "name", "startTime"]);
    }
}

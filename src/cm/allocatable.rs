//! Node capacity and allocatable (kubelet's `node_container_manager_linux.go`):
//! what is held back for the system and for kubelet (`kubeReserved`,
//! `systemReserved`), what pods may use, and the limits of the `kubepods` cgroup.

use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::resources::{ResourceConfig, milli_cpu_to_shares};
use crate::contracts::{Signal, Thresholds};
use crate::node::Capacity;
use crate::quantity::{self, QuantityError};

/// Node resources in kubelet's units: millicores, bytes, pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeResources {
    pub cpu_milli: i64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    pub pods: i64,
}

impl NodeResources {
    /// The node's capacity as kubelet reports it.
    pub(crate) fn capacity(c: &Capacity) -> NodeResources {
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        NodeResources {
            cpu_milli: i64::from(c.cpu_cores) * 1000,
            memory_bytes: i(c.memory_bytes),
            ephemeral_storage_bytes: i(c.ephemeral_storage_bytes),
            pods: i64::from(c.pods),
        }
    }
}

impl fmt::Display for NodeResources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu={}m memory={} ephemeral-storage={} pods={}",
            self.cpu_milli, self.memory_bytes, self.ephemeral_storage_bytes, self.pods
        )
    }
}

/// What the settings hold back from pods (`kubeReserved`, `systemReserved`,
/// the hard eviction thresholds) and which of it is enforced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reservations<'a> {
    pub kube: &'a Reserved,
    pub system: &'a Reserved,
    pub eviction_hard: &'a Thresholds,
    /// `enforceNodeAllocatable` has `pods` (and `cgroupsPerQOS` is on).
    pub enforce_pods: bool,
}

/// The node's capacity, its allocatable and the limits of the `kubepods`
/// cgroup: kept beside [`crate::node::NodeInfo`] (which holds the capacity it
/// was computed from), for admission, node status and the container manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NodeAllocatable {
    pub capacity: NodeResources,
    /// Capacity − kubeReserved − systemReserved − hard eviction thresholds,
    /// never below zero (what pods may request).
    pub allocatable: NodeResources,
    /// The limits written to `kubepods`.
    pub kubepods: ResourceConfig,
    /// kubeReserved + systemReserved + hard eviction thresholds, per resource
    /// (kubelet's `GetNodeAllocatableReservation`), unclamped.
    pub reservation: NodeResources,
}

/// Reservations larger than the node: kubelet's container manager refuses to start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Node Allocatable configuration. {}", .0.join(" "))]
pub(crate) struct InvalidAllocatable(pub Vec<String>);

impl NodeAllocatable {
    /// kubelet's `GetNodeAllocatableReservation` and the node status' allocatable
    /// (capacity minus the reservation, at least zero); `kubepods` gets capacity
    /// minus the reservations without the eviction thresholds when `pods` is
    /// enforced (`GetNodeAllocatableAbsolute`; eviction handles the rest), else
    /// the capacity. `pid_max` (the host's, see [`pid_max`]) limits `kubepods`'
    /// pids only when pids are reserved.
    pub(crate) fn new(capacity: &Capacity, r: Reservations<'_>, pid_max: Option<i64>) -> Self {
        let cap = NodeResources::capacity(capacity);
        let reserved = |f: fn(&Reserved) -> Option<i64>| {
            f(r.kube)
                .unwrap_or(0)
                .saturating_add(f(r.system).unwrap_or(0))
        };
        let cpu = reserved(|x| x.cpu_milli);
        let memory = reserved(|x| x.memory_bytes);
        let storage = reserved(|x| x.ephemeral_storage_bytes);
        let evict = |s: Signal, capacity: i64| {
            r.eviction_hard
                .get(s)
                .map_or(0, |t| t.amount(capacity).max(0))
        };
        let left = |capacity: i64, held: i64| capacity.saturating_sub(held).max(0);
        let allocatable = NodeResources {
            cpu_milli: left(cap.cpu_milli, cpu),
            memory_bytes: left(
                cap.memory_bytes,
                memory.saturating_add(evict(Signal::MemoryAvailable, cap.memory_bytes)),
            ),
            ephemeral_storage_bytes: left(
                cap.ephemeral_storage_bytes,
                storage.saturating_add(evict(Signal::NodeFsAvailable, cap.ephemeral_storage_bytes)),
            ),
            pods: cap.pods,
        };
        let (cpu_limit, memory_limit) = if r.enforce_pods {
            (left(cap.cpu_milli, cpu), left(cap.memory_bytes, memory))
        } else {
            (cap.cpu_milli, cap.memory_bytes)
        };
        // kubelet's internal capacity always has the pid limit, so `kubepods` always
        // gets `pids.max` (minus the reservation when enforced).
        let pids_limit = pid_max.map(|max| {
            if r.enforce_pods {
                left(max, reserved(|x| x.pids))
            } else {
                max
            }
        });
        let reservation = NodeResources {
            cpu_milli: cpu,
            memory_bytes: memory.saturating_add(evict(Signal::MemoryAvailable, cap.memory_bytes)),
            ephemeral_storage_bytes: storage
                .saturating_add(evict(Signal::NodeFsAvailable, cap.ephemeral_storage_bytes)),
            pods: 0,
        };
        NodeAllocatable {
            capacity: cap,
            allocatable,
            reservation,
            kubepods: ResourceConfig {
                cpu_shares: Some(milli_cpu_to_shares(cpu_limit) as u64),
                memory_limit: Some(memory_limit),
                pids_limit,
                ..Default::default()
            },
        }
    }
}

impl NodeAllocatable {
    /// kubelet's `validateNodeAllocatable`: no resource may reserve more than the
    /// node has (the hard eviction thresholds count). Every offending resource is
    /// named, in kubelet's words (`has an allocatable of <reserved>, capacity of
    /// <what would be left>`), cpu in millicores and the rest in bytes.
    pub(crate) fn validate(&self) -> Result<(), InvalidAllocatable> {
        let (c, r) = (&self.capacity, &self.reservation);
        let mut errors = Vec::new();
        for (name, cap, res, unit) in [
            ("cpu", c.cpu_milli, r.cpu_milli, "m"),
            ("memory", c.memory_bytes, r.memory_bytes, ""),
            (
                "ephemeral-storage",
                c.ephemeral_storage_bytes,
                r.ephemeral_storage_bytes,
                "",
            ),
        ] {
            let left = cap.saturating_sub(res);
            if left < 0 {
                errors.push(format!(
                    "Resource {name:?} has an allocatable of {res}{unit}, capacity of {left}{unit}"
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(InvalidAllocatable(errors))
        }
    }
}

impl fmt::Display for NodeAllocatable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "capacity: {}; allocatable: {}; kubepods: cpu.shares={} memory={}",
            self.capacity,
            self.allocatable,
            self.kubepods.cpu_shares.unwrap_or(0),
            self.kubepods.memory_limit.unwrap_or(-1),
        )?;
        if let Some(p) = self.kubepods.pids_limit {
            write!(f, " pids={p}")?;
        }
        Ok(())
    }
}

/// The most processes the host allows (kubelet's `pidlimit.Stats`: the smaller
/// of `kernel.pid_max` and `kernel.threads-max`); None if neither can be read.
pub(crate) fn pid_max() -> Option<i64> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
    };
    match (
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Resources held back from pods (`--kube-reserved`, `--system-reserved`);
/// `None` reserves nothing of that resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reserved {
    pub cpu_milli: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub ephemeral_storage_bytes: Option<i64>,
    pub pids: Option<i64>,
}

/// Why a reservation is refused (kubelet's `parseResourceList` messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReservedError {
    #[error("cannot reserve {0:?} resource")]
    Resource(String),
    #[error("failed to parse quantity {value:?} for {name:?} resource: {source}")]
    Quantity {
        name: String,
        value: String,
        #[source]
        source: QuantityError,
    },
    #[error("resource quantity for {name:?} cannot be negative: {value}")]
    Negative { name: String, value: String },
}

impl Reserved {
    /// Parses `(resource, quantity)` pairs: `cpu`, `memory`, `ephemeral-storage`
    /// and `pid`, as kubelet allows; a later pair for the same resource wins.
    pub(crate) fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Reserved, ReservedError> {
        let mut r = Reserved::default();
        for (name, value) in pairs {
            let slot = match name {
                "cpu" => &mut r.cpu_milli,
                "memory" => &mut r.memory_bytes,
                "ephemeral-storage" => &mut r.ephemeral_storage_bytes,
                "pid" => &mut r.pids,
                _ => return Err(ReservedError::Resource(name.to_string())),
            };
            let q = Quantity(value.to_string());
            let parsed = if name == "cpu" {
                quantity::milli_cpu(&q)
            } else {
                quantity::bytes(&q)
            };
            let v = parsed.map_err(|source| ReservedError::Quantity {
                name: name.to_string(),
                value: value.to_string(),
                source,
            })?;
            if v < 0 {
                return Err(ReservedError::Negative {
                    name: name.to_string(),
                    value: value.to_string(),
                });
            }
            *slot = Some(v);
        }
        Ok(r)
    }
}

impl fmt::Display for Reserved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            ("cpu", self.cpu_milli.map(|m| format!("{m}m"))),
            ("memory", self.memory_bytes.map(|b| b.to_string())),
            (
                "ephemeral-storage",
                self.ephemeral_storage_bytes.map(|b| b.to_string()),
            ),
            ("pid", self.pids.map(|p| p.to_string())),
        ];
        let text: Vec<String> = parts
            .into_iter()
            .filter_map(|(n, v)| Some(format!("{n}={}", v?)))
            .collect();
        if text.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&text.join(","))
        }
    }
}

/// Which reservations are enforced with cgroup limits (`enforceNodeAllocatable`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeAllocatableEnforcement {
    /// `pods`: the `kubepods` cgroup is limited to capacity minus reservations.
    pub pods: bool,
    /// `system-reserved[-compressible]`: `systemReservedCgroup` is limited to
    /// `systemReserved`.
    pub system_reserved: Option<Enforced>,
    /// `kube-reserved[-compressible]`: `kubeReservedCgroup` is limited to `kubeReserved`.
    pub kube_reserved: Option<Enforced>,
}

/// How much of a reservation its cgroup is limited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enforced {
    /// Every reserved resource (cpu, memory, pids).
    All,
    /// `*-compressible`: cpu only, which throttles rather than kills.
    Compressible,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_parses_kubelets_four_resources() {
        let r = Reserved::parse([
            ("cpu", "100m"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "1Gi"),
            ("pid", "100"),
        ])
        .unwrap();
        assert_eq!(
            r,
            Reserved {
                cpu_milli: Some(100),
                memory_bytes: Some(1 << 30),
                ephemeral_storage_bytes: Some(1 << 30),
                pids: Some(100),
            }
        );
        assert_eq!(
            r.to_string(),
            "cpu=100m,memory=1073741824,ephemeral-storage=1073741824,pid=100"
        );
        assert_eq!(Reserved::parse([]).unwrap().to_string(), "none");
    }

    const GI: i64 = 1 << 30;

    fn capacity() -> Capacity {
        Capacity {
            cpu_cores: 4,
            memory_bytes: 16 << 30,
            pods: 110,
            ephemeral_storage_bytes: 100 << 30,
        }
    }

    fn defaults() -> Thresholds {
        let pairs = crate::contracts::DEFAULT_EVICTION_HARD
            .split(',')
            .map(|kv| kv.split_once('<').unwrap());
        Thresholds::parse(pairs).unwrap()
    }

    #[test]
    fn allocatable_is_capacity_minus_reservations_and_hard_eviction() {
        let kube = Reserved::parse([
            ("cpu", "100m"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "1Gi"),
        ])
        .unwrap();
        let system = Reserved::parse([("cpu", "400m"), ("memory", "512Mi")]).unwrap();
        let eviction = defaults();
        let r = Reservations {
            kube: &kube,
            system: &system,
            eviction_hard: &eviction,
            enforce_pods: true,
        };
        let a = NodeAllocatable::new(&capacity(), r, Some(4_194_304));
        assert_eq!(
            a.capacity,
            NodeResources {
                cpu_milli: 4000,
                memory_bytes: 16 * GI,
                ephemeral_storage_bytes: 100 * GI,
                pods: 110
            }
        );
        // memory: 16Gi - 1Gi - 512Mi - 100Mi; storage: 100Gi - 1Gi - 10% of 100Gi.
        assert_eq!(
            a.allocatable,
            NodeResources {
                cpu_milli: 3500,
                memory_bytes: 16 * GI - GI - 512 * (1 << 20) - 100 * (1 << 20),
                ephemeral_storage_bytes: 100 * GI - GI - 10 * GI,
                pods: 110
            }
        );
        // kubepods: capacity - reserved, without the eviction threshold.
        assert_eq!(
            a.kubepods,
            ResourceConfig {
                cpu_shares: Some(3584),
                memory_limit: Some(16 * GI - GI - 512 * (1 << 20)),
                pids_limit: Some(4_194_304),
                ..Default::default()
            }
        );
        assert_eq!(
            a.to_string(),
            format!(
                "capacity: cpu=4000m memory={} ephemeral-storage={} pods=110; allocatable: \
                 cpu=3500m memory={} ephemeral-storage={} pods=110; kubepods: cpu.shares=3584 memory={} pids=4194304",
                16 * GI,
                100 * GI,
                a.allocatable.memory_bytes,
                89 * GI,
                a.kubepods.memory_limit.unwrap()
            )
        );
    }

    #[test]
    fn kubepods_gets_capacity_when_pods_are_not_enforced_and_always_a_pid_limit() {
        let kube = Reserved::parse([("cpu", "1"), ("pid", "1000")]).unwrap();
        let none = Reserved::default();
        let eviction = Thresholds::default();
        let r = Reservations {
            kube: &kube,
            system: &none,
            eviction_hard: &eviction,
            enforce_pods: false,
        };
        let a = NodeAllocatable::new(&capacity(), r, Some(32768));
        assert_eq!(a.allocatable.cpu_milli, 3000);
        assert_eq!(a.allocatable.memory_bytes, 16 * GI);
        assert_eq!(a.kubepods.cpu_shares, Some(4096));
        assert_eq!(a.kubepods.memory_limit, Some(16 * GI));
        assert_eq!(a.kubepods.pids_limit, Some(32768));
        let a = NodeAllocatable::new(
            &capacity(),
            Reservations {
                enforce_pods: true,
                ..r
            },
            Some(32768),
        );
        assert_eq!(a.kubepods.pids_limit, Some(31768));
        assert!(a.to_string().ends_with(" pids=31768"), "{a}");
        let r = Reservations { kube: &none, ..r };
        assert_eq!(
            NodeAllocatable::new(&capacity(), r, Some(32768))
                .kubepods
                .pids_limit,
            Some(32768)
        );
        assert_eq!(
            NodeAllocatable::new(&capacity(), r, None)
                .kubepods
                .pids_limit,
            None
        );
    }

    #[test]
    fn allocatable_never_goes_below_zero() {
        let kube = Reserved::parse([
            ("cpu", "8"),
            ("memory", "32Gi"),
            ("ephemeral-storage", "1Ti"),
        ])
        .unwrap();
        let eviction = defaults();
        let r = Reservations {
            kube: &kube,
            system: &Reserved::default(),
            eviction_hard: &eviction,
            enforce_pods: true,
        };
        let a = NodeAllocatable::new(&capacity(), r, None);
        assert_eq!(
            a.allocatable,
            NodeResources {
                pods: 110,
                ..Default::default()
            }
        );
        assert_eq!(a.kubepods.cpu_shares, Some(2));
        assert_eq!(a.kubepods.memory_limit, Some(0));
        // kubelet refuses to start with this: every resource over capacity is named.
        let e = a.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("invalid Node Allocatable configuration. "),
            "{e}"
        );
        assert!(
            e.contains(r#"Resource "cpu" has an allocatable of 8000m, capacity of -4000m"#),
            "{e}"
        );
        assert!(e.contains(r#"Resource "memory""#), "{e}");
        assert!(e.contains(r#"Resource "ephemeral-storage""#), "{e}");
    }

    #[test]
    fn the_eviction_threshold_counts_when_reservations_are_checked() {
        let eviction = defaults();
        let none = Reserved::default();
        // 100Mi short of capacity: fine alone, over it with memory.available<100Mi.
        let kube = Reserved::parse([("memory", "16383Mi")]).unwrap();
        let r = Reservations {
            kube: &kube,
            system: &none,
            eviction_hard: &eviction,
            enforce_pods: true,
        };
        let a = NodeAllocatable::new(&capacity(), r, None);
        let e = a.validate().unwrap_err().to_string();
        assert!(
            e.contains(r#"Resource "memory""#) && !e.contains("cpu"),
            "{e}"
        );
        let fine = Reserved::parse([("memory", "1Gi"), ("cpu", "4")]).unwrap();
        let r = Reservations { kube: &fine, ..r };
        assert_eq!(
            NodeAllocatable::new(&capacity(), r, None).validate(),
            Ok(())
        );
    }

    #[test]
    fn pid_max_reads_the_host() {
        let max = pid_max().unwrap();
        let pid_max: i64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(max > 0 && max <= pid_max, "{max}");
    }

    #[test]
    fn reserved_refusals_are_kubelets() {
        let err = |n: &str, v: &str| Reserved::parse([(n, v)]).unwrap_err().to_string();
        assert_eq!(err("gpu", "1"), "cannot reserve \"gpu\" resource");
        assert_eq!(
            err("memory", "-1Gi"),
            "resource quantity for \"memory\" cannot be negative: -1Gi"
        );
        assert!(
            err("cpu", "lots")
                .starts_with("failed to parse quantity \"lots\" for \"cpu\" resource: "),
            "{}",
            err("cpu", "lots")
        );
    }
}

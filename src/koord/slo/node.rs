//! What koordlet reads of this node's Node object (its states informer's `GetNode`),
//! parsed once each time the Node changes: the batch allocatable koord-manager
//! writes, and the annotations `node.koordinator.sh/raw-allocatable`,
//! `node.koordinator.sh/reservation` and `node.koordinator.sh/cpu-normalization-ratio`
//! (koordinator's `apis/extension`). An annotation that cannot be read is dropped
//! with its reason, as koordlet drops it (its getters return an error that the
//! callers log and pass over).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use crate::koord::prediction::ResourceAmount;
use crate::koordapi::{BATCH_CPU, BATCH_MEMORY};

/// koordinator's `AnnotationNodeRawAllocatable`: the allocatable before koord-manager
/// amplified it.
pub(crate) const RAW_ALLOCATABLE: &str = "node.koordinator.sh/raw-allocatable";
/// koordinator's `AnnotationNodeReservation`.
pub(crate) const RESERVATION: &str = "node.koordinator.sh/reservation";
/// koordinator's `AnnotationCPUNormalizationRatio`.
pub(crate) const CPU_NORMALIZATION_RATIO: &str = "node.koordinator.sh/cpu-normalization-ratio";

/// The Node, as koordlet's components read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodeInfo {
    /// `status.allocatable`'s cpu (milli) and memory (bytes), a missing one 0; None
    /// when the Node has no allocatable.
    pub allocatable: Option<ResourceAmount>,
    /// `status.allocatable[kubernetes.io/batch-cpu]` as Go's `Value()` gives it
    /// (koordinator counts batch CPU in millicores); None when absent.
    pub batch_cpu: Option<i64>,
    /// `status.allocatable[kubernetes.io/batch-memory]` in bytes; None when absent.
    pub batch_memory: Option<i64>,
    /// The raw-allocatable annotation's cpu and memory, a missing one 0.
    pub raw_allocatable: Option<ResourceAmount>,
    pub reservation: Option<Reservation>,
    /// The cpu-normalization-ratio annotation; None when absent.
    pub cpu_normalization_ratio: Option<f64>,
}

/// koordinator's `NodeReservation`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Reservation {
    /// `resources.cpu` (milli) and `resources.memory` (bytes), when given.
    pub cpu_milli: Option<i64>,
    pub memory_bytes: Option<i64>,
    /// `reservedCPUs`, parsed; empty when not given.
    pub reserved_cpus: Vec<usize>,
    /// `applyPolicy` as given (`Default`, `ReservedCPUsOnly` or empty).
    pub apply_policy: String,
}

impl Reservation {
    /// The CPU it reserves, in millicores (koordinator's `GetNodeReservationResources`,
    /// whatever the apply policy): the listed CPUs when there are any, else
    /// `resources.cpu`.
    pub(crate) fn cpu_reserved_milli(&self) -> i64 {
        if self.reserved_cpus.is_empty() {
            self.cpu_milli.unwrap_or(0).max(0)
        } else {
            self.reserved_cpus.len() as i64 * 1000
        }
    }
}

impl NodeInfo {
    /// koordlet's `getBEMilliAllocatable`: the batch-cpu allocatable, 1 when it is 0
    /// (koord-manager zeroes it when prod usage is high, and the satisfaction rate is
    /// still wanted); None when absent or negative (koordlet's −1).
    pub(crate) fn be_milli_allocatable(&self) -> Option<f64> {
        match self.batch_cpu? {
            v if v < 0 => None,
            0 => Some(1.0),
            v => Some(v as f64),
        }
    }

    /// The prod predictor's allocatable (koordlet's `getNodeAllocatable`): the
    /// raw-allocatable annotation when it was read, else `status.allocatable`.
    pub(crate) fn predictor_allocatable(&self) -> Option<ResourceAmount> {
        self.raw_allocatable.or(self.allocatable)
    }

    /// The node's CPU reserved by its reservation annotation, in millicores (0 without).
    pub(crate) fn reserved_cpu_milli(&self) -> i64 {
        self.reservation
            .as_ref()
            .map_or(0, Reservation::cpu_reserved_milli)
    }

    /// The CPUs the reservation annotation lists (koordinator's `GetReservedCPUs`
    /// with `reservedCPUs` given).
    pub(crate) fn reserved_cpus(&self) -> &[usize] {
        self.reservation
            .as_ref()
            .map_or(&[], |r| r.reserved_cpus.as_slice())
    }
}

/// Why one annotation or allocatable entry of the Node was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeFieldError {
    #[error("not JSON of the expected shape: {0}")]
    Json(#[from] serde_json::Error),
    #[error("resource {name}: {source}")]
    Quantity {
        name: String,
        source: crate::quantity::QuantityError,
    },
    #[error("resource {0}: a quantity is a string or a number")]
    QuantityType(String),
    #[error("reservedCPUs: {0}")]
    CpuList(#[from] crate::cm::CpuListError),
    #[error("{0:?} is not a number")]
    NotANumber(String),
    #[error("{0} is not a finite number above 0")]
    NotPositive(f64),
}

/// One field of the Node that was dropped: the annotation (or allocatable entry),
/// its text and why.
#[derive(Debug)]
pub(crate) struct Dropped {
    pub field: String,
    pub value: String,
    pub error: NodeFieldError,
}

impl NodeInfo {
    /// What koordlet reads of `node`, and what it could not read.
    pub(crate) fn from_node(node: &Node) -> (NodeInfo, Vec<Dropped>) {
        let mut dropped = Vec::new();
        let status = node.status.as_ref();
        let allocatable = status.and_then(|s| s.allocatable.as_ref());
        let mut entry = |name: &str| {
            let q = allocatable?.get(name)?;
            match crate::quantity::bytes(q) {
                Ok(v) => Some(v),
                Err(source) => {
                    dropped.push(Dropped {
                        field: format!("status.allocatable[{name}]"),
                        value: q.0.clone(),
                        error: NodeFieldError::Quantity {
                            name: name.to_owned(),
                            source,
                        },
                    });
                    None
                }
            }
        };
        let (batch_cpu, batch_memory) = (entry(BATCH_CPU), entry(BATCH_MEMORY));
        let annotations = node.metadata.annotations.as_ref();
        let raw = annotation(
            annotations,
            RAW_ALLOCATABLE,
            parse_raw_allocatable,
            &mut dropped,
        );
        let reservation = annotation(annotations, RESERVATION, parse_reservation, &mut dropped);
        let ratio = annotation(
            annotations,
            CPU_NORMALIZATION_RATIO,
            |t| parse_ratio(t).map(Some),
            &mut dropped,
        );
        let info = NodeInfo {
            allocatable: allocatable.map(|a| amount(a.iter().map(|(k, v)| (k.as_str(), v)))),
            batch_cpu,
            batch_memory,
            raw_allocatable: raw,
            reservation,
            cpu_normalization_ratio: ratio,
        };
        (info, dropped)
    }
}

/// The annotation `key` by `parse`; an unreadable one goes to `dropped`.
fn annotation<T>(
    annotations: Option<&BTreeMap<String, String>>,
    key: &'static str,
    parse: impl Fn(&str) -> Result<Option<T>, NodeFieldError>,
    dropped: &mut Vec<Dropped>,
) -> Option<T> {
    let text = annotations?.get(key)?;
    parse(text).unwrap_or_else(|error| {
        dropped.push(Dropped {
            field: key.to_owned(),
            value: text.chars().take(256).collect(),
            error,
        });
        None
    })
}

/// cpu (milli) and memory (bytes) of a resource list; a missing or unreadable one 0.
fn amount<'a>(list: impl Iterator<Item = (&'a str, &'a Quantity)>) -> ResourceAmount {
    let mut a = ResourceAmount::default();
    for (name, q) in list {
        match name {
            "cpu" => a.cpu_milli = crate::quantity::milli_cpu(q).unwrap_or(0),
            "memory" => a.memory_bytes = crate::quantity::bytes(q).unwrap_or(0),
            _ => {}
        }
    }
    a
}

/// A JSON resource list (`corev1.ResourceList` as Go decodes it: each quantity a
/// string or a bare number); None for `null`. Any unreadable quantity fails it all,
/// as Go's decoder does.
fn resource_list(
    v: Option<BTreeMap<String, Value>>,
) -> Result<Option<BTreeMap<String, Quantity>>, NodeFieldError> {
    let Some(v) = v else { return Ok(None) };
    let mut out = BTreeMap::new();
    for (name, q) in v {
        let text = match &q {
            Value::String(s) => s.trim().to_owned(),
            Value::Number(n) => n.to_string(),
            Value::Null => continue,
            _ => return Err(NodeFieldError::QuantityType(name)),
        };
        let q = Quantity(text);
        let check = if name == "cpu" {
            crate::quantity::milli_cpu(&q)
        } else {
            crate::quantity::bytes(&q)
        };
        match check {
            // Go's quantities do not overflow on a large value of another resource.
            Err(crate::quantity::QuantityError::TooLarge { .. })
                if name != "cpu" && name != "memory" => {}
            Err(source) => return Err(NodeFieldError::Quantity { name, source }),
            Ok(_) => {}
        }
        out.insert(name, q);
    }
    Ok(Some(out))
}

/// koordinator's `GetNodeRawAllocatable`.
pub(crate) fn parse_raw_allocatable(text: &str) -> Result<Option<ResourceAmount>, NodeFieldError> {
    let list: Option<BTreeMap<String, Value>> = serde_json::from_str(text)?;
    Ok(resource_list(list)?.map(|l| amount(l.iter().map(|(k, v)| (k.as_str(), v)))))
}

/// koordinator's `GetNodeReservation`, with `reservedCPUs` parsed (`cpuset.Parse`,
/// which every caller does, dropping the reservation when it fails). An empty
/// annotation is none.
pub(crate) fn parse_reservation(text: &str) -> Result<Option<Reservation>, NodeFieldError> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Json {
        resources: Option<BTreeMap<String, Value>>,
        #[serde(rename = "reservedCPUs")]
        reserved_cpus: Option<String>,
        apply_policy: Option<String>,
    }
    if text.is_empty() {
        return Ok(None);
    }
    let Some(j) = serde_json::from_str::<Option<Json>>(text)? else {
        return Ok(None);
    };
    let resources = resource_list(j.resources)?.unwrap_or_default();
    let reserved = j.reserved_cpus.unwrap_or_default();
    Ok(Some(Reservation {
        cpu_milli: resources
            .get("cpu")
            .and_then(|q| crate::quantity::milli_cpu(q).ok()),
        memory_bytes: resources
            .get("memory")
            .and_then(|q| crate::quantity::bytes(q).ok()),
        reserved_cpus: crate::cm::parse_cpu_list(&reserved)?,
        apply_policy: j.apply_policy.unwrap_or_default(),
    }))
}

/// koordinator's `GetCPUNormalizationRatio`: a number above 0 (Go's `ParseFloat`
/// takes `Inf` and `NaN` too; here they are refused).
pub(crate) fn parse_ratio(text: &str) -> Result<f64, NodeFieldError> {
    let v: f64 = text
        .parse()
        .map_err(|_| NodeFieldError::NotANumber(text.chars().take(64).collect()))?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(NodeFieldError::NotPositive(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(allocatable: &[(&str, &str)], annotations: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.annotations = Some(
            (annotations.iter())
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            allocatable: Some(
                (allocatable.iter())
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect(),
            ),
            ..Default::default()
        });
        n
    }

    #[test]
    fn the_batch_allocatable_is_read_as_koordlet_reads_it() {
        let (info, dropped) = NodeInfo::from_node(&node(
            &[
                ("cpu", "3800m"),
                ("memory", "1Gi"),
                (BATCH_CPU, "2500"),
                (BATCH_MEMORY, "2Gi"),
            ],
            &[],
        ));
        assert!(dropped.is_empty());
        assert_eq!(info.batch_cpu, Some(2500));
        assert_eq!(info.batch_memory, Some(2 << 30));
        assert_eq!(info.be_milli_allocatable(), Some(2500.0));
        let alloc = ResourceAmount {
            cpu_milli: 3800,
            memory_bytes: 1 << 30,
        };
        assert_eq!(info.allocatable, Some(alloc));
        assert_eq!(info.predictor_allocatable(), Some(alloc));
        // Zero is a small allocatable (1), not none; absent or negative is none.
        let zero = NodeInfo::from_node(&node(&[(BATCH_CPU, "0")], &[])).0;
        assert_eq!(zero.be_milli_allocatable(), Some(1.0));
        let none = NodeInfo::from_node(&node(&[("cpu", "4")], &[])).0;
        assert_eq!(none.be_milli_allocatable(), None);
        let negative = NodeInfo::from_node(&node(&[(BATCH_CPU, "-5")], &[])).0;
        assert_eq!(negative.be_milli_allocatable(), None);
        // Go's Value() rounds up.
        let milli = NodeInfo::from_node(&node(&[(BATCH_CPU, "1500m")], &[])).0;
        assert_eq!(milli.batch_cpu, Some(2));
    }

    #[test]
    fn raw_allocatable_comes_before_the_status_and_a_bad_one_is_dropped() {
        let raw = r#"{"cpu":"8","memory":"16Gi","pods":110}"#;
        let (info, dropped) =
            NodeInfo::from_node(&node(&[("cpu", "16")], &[(RAW_ALLOCATABLE, raw)]));
        assert!(dropped.is_empty());
        assert_eq!(
            info.predictor_allocatable(),
            Some(ResourceAmount {
                cpu_milli: 8000,
                memory_bytes: 16 << 30
            })
        );
        // A raw list without memory counts it 0, as koordlet's subtraction does.
        assert_eq!(
            parse_raw_allocatable(r#"{"cpu":"2"}"#).unwrap(),
            Some(ResourceAmount {
                cpu_milli: 2000,
                memory_bytes: 0
            })
        );
        assert_eq!(parse_raw_allocatable("null").unwrap(), None);
        for bad in ["", "[1]", r#"{"cpu":"lots"}"#, r#"{"cpu":true}"#] {
            let (info, dropped) =
                NodeInfo::from_node(&node(&[("cpu", "16")], &[(RAW_ALLOCATABLE, bad)]));
            assert_eq!(dropped.len(), 1, "{bad:?}");
            assert_eq!(dropped[0].field, RAW_ALLOCATABLE);
            assert_eq!(info.raw_allocatable, None);
            assert_eq!(
                info.predictor_allocatable().map(|a| a.cpu_milli),
                Some(16_000),
                "the status's allocatable is used instead"
            );
        }
    }

    #[test]
    fn a_reservation_reserves_its_listed_cpus_else_its_cpu_amount() {
        let r = parse_reservation(
            r#"{"resources":{"cpu":"1500m","memory":"2Gi"},"applyPolicy":"Default"}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.cpu_milli, Some(1500));
        assert_eq!(r.memory_bytes, Some(2 << 30));
        assert_eq!(r.apply_policy, "Default");
        assert_eq!(r.cpu_reserved_milli(), 1500);
        assert!(r.reserved_cpus.is_empty());
        // Listed CPUs win over the amount (GetNodeReservationResources).
        let r = parse_reservation(r#"{"resources":{"cpu":"1"},"reservedCPUs":"0-1,4"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(r.reserved_cpus, [0, 1, 4]);
        assert_eq!(r.cpu_reserved_milli(), 3000);
        assert_eq!(parse_reservation("").unwrap(), None);
        assert_eq!(parse_reservation("null").unwrap(), None);
        let info = NodeInfo::from_node(&node(&[], &[(RESERVATION, r#"{"reservedCPUs":"2"}"#)])).0;
        assert_eq!(info.reserved_cpus(), [2]);
        assert_eq!(info.reserved_cpu_milli(), 1000);
        // A bad CPU list or quantity drops the whole reservation, as every koordlet
        // caller does.
        for bad in [
            r#"{"reservedCPUs":"3-1"}"#,
            r#"{"resources":{"cpu":"x"}}"#,
            "{",
            r#"{"reservedCPUs":5}"#,
        ] {
            let (info, dropped) = NodeInfo::from_node(&node(&[], &[(RESERVATION, bad)]));
            assert_eq!(info.reservation, None, "{bad:?}");
            assert_eq!(dropped.len(), 1);
            assert!(!dropped[0].error.to_string().is_empty());
        }
    }

    #[test]
    fn the_normalization_ratio_is_a_number_above_zero() {
        assert_eq!(parse_ratio("1.25").unwrap(), 1.25);
        for bad in ["", "abc", "0", "-1", "NaN", "inf"] {
            assert!(parse_ratio(bad).is_err(), "{bad:?}");
        }
        let (info, dropped) = NodeInfo::from_node(&node(&[], &[(CPU_NORMALIZATION_RATIO, "0")]));
        assert_eq!(info.cpu_normalization_ratio, None);
        assert_eq!(dropped[0].field, CPU_NORMALIZATION_RATIO);
        assert_eq!(
            dropped[0].error.to_string(),
            "0 is not a finite number above 0"
        );
        let info = NodeInfo::from_node(&node(&[], &[(CPU_NORMALIZATION_RATIO, "1.5")])).0;
        assert_eq!(info.cpu_normalization_ratio, Some(1.5));
    }
}

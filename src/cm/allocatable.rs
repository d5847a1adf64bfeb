//! Node capacity and allocatable (kubelet's `node_container_manager_linux.go`):
//! what is held back for the system and for kubelet (`kubeReserved`,
//! `systemReserved`), what pods may use, and the limits of the `kubepods` cgroup.

use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::quantity::{self, QuantityError};

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

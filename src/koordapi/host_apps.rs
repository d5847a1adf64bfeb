//! koordinator's host applications (NodeSLO `spec.hostApplications`): processes run
//! outside Kubernetes, in cgroups of their own, whose usage koordlet collects and CPU
//! suppress counts with the pods of their QoS class. Each names its cgroup by a base
//! (the cgroup root, `kubepods` or a QoS cgroup) and a path below it, or by its QoS
//! class alone (`host-latency-sensitive/<name>`, `host-best-effort/<name>`, or
//! `<name>` at the root), as koordlet's `GetHostAppCgroupRelativePath` does.
//!
//! The spec comes from the cluster: every name and path part must be one plain path
//! component, so a cgroup path built from it never leaves its base.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::classes::KoordQos;

/// Host applications taken at most.
pub(crate) const MAX_HOST_APPS: usize = 64;
const MAX_PARTS: usize = 16;

/// The cgroup a path is below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum CgroupBase {
    CgroupRoot,
    Kubepods,
    KubepodsBurstable,
    KubepodsBesteffort,
}

/// One host application, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HostApp {
    pub name: String,
    /// koordinator's QoS class name (`LS`, `BE`, …; empty for none).
    pub qos: String,
    pub priority: String,
    pub base: CgroupBase,
    /// The path below the base, in plain components.
    pub parts: Vec<String>,
}

impl HostApp {
    pub(crate) fn is_be(&self) -> bool {
        self.qos == KoordQos::Be.name()
    }

    /// Its cgroup path below the mount, given the base cgroups' paths (None when the
    /// base has no cgroup here, e.g. `Kubepods` without pod cgroups).
    pub(crate) fn cgroup_path(&self, bases: &QosPaths) -> Option<String> {
        let base = match self.base {
            CgroupBase::CgroupRoot => String::new(),
            CgroupBase::Kubepods => bases.kubepods.clone()?,
            CgroupBase::KubepodsBurstable => bases.burstable.clone()?,
            CgroupBase::KubepodsBesteffort => bases.best_effort.clone()?,
        };
        let mut path = base.trim_matches('/').to_string();
        for p in &self.parts {
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(p);
        }
        Some(path)
    }
}

/// The pod cgroups' bases, below the mount.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QosPaths {
    pub kubepods: Option<String>,
    pub burstable: Option<String>,
    pub best_effort: Option<String>,
}

/// Why a host application was refused, naming its field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("hostApplications[{index}].{field}: {reason}")]
pub(crate) struct HostAppError {
    pub index: usize,
    pub field: &'static str,
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawApp {
    #[serde(default)]
    name: String,
    #[serde(default)]
    priority: String,
    #[serde(default)]
    qos: String,
    #[serde(default)]
    cgroup_path: Option<RawPath>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPath {
    #[serde(default)]
    base: Option<CgroupBase>,
    #[serde(default)]
    parent_dir: String,
    #[serde(default)]
    relative_path: String,
}

/// Why a host application's file or cgroup path is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostAppsFileError {
    #[error("{}: {source}", .path.display())]
    Read {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{}: larger than {max} bytes", .path.display())]
    TooLarge { path: std::path::PathBuf, max: u64 },
    #[error("{}: {source}", .path.display())]
    Yaml {
        path: std::path::PathBuf,
        source: crate::yaml::YamlError,
    },
    #[error(transparent)]
    PathPart(#[from] crate::safe_path::PathError),
    #[error("more than {MAX_PARTS} path parts")]
    TooManyParts,
}

/// The plain components of `path` (slashes at either end and doubled ones dropped).
fn components(path: &str) -> Result<Vec<String>, HostAppsFileError> {
    let parts: Vec<String> = path
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| crate::safe_path::component(p).map(str::to_string))
        .collect::<Result<_, _>>()?;
    if parts.len() > MAX_PARTS {
        return Err(HostAppsFileError::TooManyParts);
    }
    Ok(parts)
}

fn one(index: usize, raw: &Value) -> Result<HostApp, HostAppError> {
    let err = |field, reason: String| HostAppError {
        index,
        field,
        reason,
    };
    let app: RawApp = serde_json::from_value(raw.clone()).map_err(|e| err("", e.to_string()))?;
    crate::safe_path::component(&app.name).map_err(|e| {
        err(
            "name",
            format!("{e} (a host application's name is a cgroup directory)"),
        )
    })?;
    let (base, parts) = match app.cgroup_path {
        None => {
            let dir = match app.qos.as_str() {
                "LSE" | "LSR" | "LS" => Some("host-latency-sensitive"),
                "BE" => Some("host-best-effort"),
                _ => None,
            };
            let parts = dir
                .into_iter()
                .map(str::to_string)
                .chain([app.name.clone()]);
            (CgroupBase::CgroupRoot, parts.collect())
        }
        Some(p) => {
            let mut parts = components(&p.parent_dir)
                .map_err(|r| err("cgroupPath.parentDir", r.to_string()))?;
            parts.extend(
                components(&p.relative_path)
                    .map_err(|r| err("cgroupPath.relativePath", r.to_string()))?,
            );
            (p.base.unwrap_or(CgroupBase::CgroupRoot), parts)
        }
    };
    Ok(HostApp {
        name: app.name,
        qos: app.qos,
        priority: app.priority,
        base,
        parts,
    })
}

/// The spec's host applications; every bad one is refused (with why), the rest
/// kept, so one typo does not hide the others.
pub(crate) fn parse(raw: Option<&[Value]>) -> (Vec<HostApp>, Vec<HostAppError>) {
    let (mut apps, mut errors) = (Vec::new(), Vec::new());
    for (i, v) in raw.unwrap_or_default().iter().enumerate() {
        if i >= MAX_HOST_APPS {
            errors.push(HostAppError {
                index: i,
                field: "",
                reason: format!(
                    "more than {MAX_HOST_APPS} host applications; the rest are ignored"
                ),
            });
            break;
        }
        match one(i, v) {
            Ok(app) if apps.iter().any(|a: &HostApp| a.name == app.name) => {
                errors.push(HostAppError {
                    index: i,
                    field: "name",
                    reason: format!("{:?} is named twice", app.name),
                });
            }
            Ok(app) => apps.push(app),
            Err(e) => errors.push(e),
        }
    }
    (apps, errors)
}

/// The host applications of a `--node-slo-file` (its `hostApplications`), read
/// bounded; the file's errors are the caller's to report.
pub(crate) fn from_file(
    path: &std::path::Path,
) -> Result<(Vec<HostApp>, Vec<HostAppError>), HostAppsFileError> {
    use std::io::Read as _;
    const MAX_BYTES: u64 = 64 * 1024;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_BYTES + 1).read_to_string(&mut text))
        .map_err(|source| HostAppsFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if text.len() as u64 > MAX_BYTES {
        return Err(HostAppsFileError::TooLarge {
            path: path.to_path_buf(),
            max: MAX_BYTES,
        });
    }
    let doc: Value = if text.trim().is_empty() {
        Value::Null
    } else {
        crate::yaml::single(&text, &crate::yaml::CONFIG_LIMITS).map_err(|source| {
            HostAppsFileError::Yaml {
                path: path.to_path_buf(),
                source,
            }
        })?
    };
    let list = doc.get("hostApplications").and_then(Value::as_array);
    Ok(parse(list.map(Vec::as_slice)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_as_koordlet_builds_them_and_bad_input_named() {
        let bases = QosPaths {
            kubepods: Some("kubepods".into()),
            burstable: Some("kubepods/burstable".into()),
            best_effort: Some("kubepods/besteffort".into()),
        };
        let raw = vec![
            json!({"name": "nginx", "qos": "LS", "priority": "koord-prod"}),
            json!({"name": "batch", "qos": "BE"}),
            json!({"name": "plain"}),
            json!({"name": "agent", "qos": "LS", "cgroupPath": {"base": "KubepodsBesteffort", "parentDir": "/host/", "relativePath": "agent"}}),
            json!({"name": "../etc", "qos": "LS"}),
            json!({"name": "x", "cgroupPath": {"parentDir": "a/../../b"}}),
            json!({"name": "nginx"}),
            json!({"name": "y", "cgroupPath": {"base": "Elsewhere"}}),
        ];
        let (apps, errors) = parse(Some(&raw));
        let paths: Vec<Option<String>> = apps.iter().map(|a| a.cgroup_path(&bases)).collect();
        assert_eq!(
            paths,
            [
                Some("host-latency-sensitive/nginx".to_string()),
                Some("host-best-effort/batch".to_string()),
                Some("plain".to_string()),
                Some("kubepods/besteffort/host/agent".to_string()),
            ]
        );
        assert!(apps[1].is_be() && !apps[0].is_be());
        let fields: Vec<(usize, &str)> = errors.iter().map(|e| (e.index, e.field)).collect();
        assert_eq!(
            fields,
            [
                (4, "name"),
                (5, "cgroupPath.parentDir"),
                (6, "name"),
                (7, "")
            ]
        );
        assert!(
            errors[2].to_string().contains("named twice"),
            "{}",
            errors[2]
        );
        // Without pod cgroups, a kubepods base has no path.
        assert_eq!(apps[3].cgroup_path(&QosPaths::default()), None);
    }
}

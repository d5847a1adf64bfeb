//! The cgroup driver: how cgroup names are spelled and who creates them
//! (`--cgroup-driver` / `cgroupDriver`), and how oxlet settles on one at start: what the
//! runtime reports, what was configured, and what the directories on the host suggest.

use std::path::Path;

use k8s_cri::v1 as cri;

use super::name::CgroupName;
use super::version::CgroupVersion;
use crate::safe_path;

/// kubelet's two drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CgroupDriver {
    /// Paths as they are: `/kubepods/burstable/pod<uid>`.
    Cgroupfs,
    /// systemd slices: `/kubepods.slice/kubepods-burstable.slice/…`.
    Systemd,
}

impl CgroupDriver {
    /// The spelling of the flag and config file.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CgroupDriver::Cgroupfs => "cgroupfs",
            CgroupDriver::Systemd => "systemd",
        }
    }

    /// Parses the flag's text.
    pub(crate) fn parse(text: &str) -> Option<CgroupDriver> {
        match text {
            "cgroupfs" => Some(CgroupDriver::Cgroupfs),
            "systemd" => Some(CgroupDriver::Systemd),
            _ => None,
        }
    }
}

impl std::fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// koordlet's guess from the directories kubelet left: `kubepods` below the cgroup root,
/// spelled for the systemd driver (`kubepods.slice`; below `--cgroup-root=/kubelet`:
/// `kubelet.slice/kubelet-kubepods.slice`) means systemd, spelled for cgroupfs
/// (`kubepods`, `kubelet/kubepods`) means cgroupfs, neither means unknown. v1 looks in
/// the cpu hierarchy, v2 in the unified root.
pub(crate) fn guess(
    mount: &Path,
    version: CgroupVersion,
    cgroup_root: &CgroupName,
) -> Option<CgroupDriver> {
    let hierarchy = if version.uses_v1_controllers() {
        mount.join("cpu")
    } else {
        mount.to_path_buf()
    };
    let kubepods = cgroup_root.child("kubepods");
    // Only real directories count: a symlink planted there says nothing about kubelet.
    let is_dir = |driver: CgroupDriver| {
        kubepods
            .to_path(driver)
            .ok()
            .and_then(|rel| {
                safe_path::relative(&rel)
                    .ok()
                    .map(|rel| hierarchy.join(rel))
            })
            .and_then(|dir| std::fs::symlink_metadata(dir).ok())
            .is_some_and(|m| m.file_type().is_dir())
    };
    [CgroupDriver::Systemd, CgroupDriver::Cgroupfs]
        .into_iter()
        .find(|d| is_dir(*d))
}

/// The driver in a CRI `RuntimeConfig` answer (CRI v1.28+); `None` when the runtime sent
/// no Linux section or a value this CRI version does not know.
pub(crate) fn from_runtime_config(resp: &cri::RuntimeConfigResponse) -> Option<CgroupDriver> {
    let linux = resp.linux.as_ref()?;
    match cri::CgroupDriver::try_from(linux.cgroup_driver).ok()? {
        cri::CgroupDriver::Systemd => Some(CgroupDriver::Systemd),
        cri::CgroupDriver::Cgroupfs => Some(CgroupDriver::Cgroupfs),
    }
}

/// Where [`from_runtime_config`]'s answer comes from, for the start-up line.
pub(crate) const SOURCE_RUNTIME_CONFIG: &str = "CRI RuntimeConfig";
/// Where [`from_containerd_config`]'s answer comes from, for the start-up line.
pub(crate) const SOURCE_CONTAINERD_CONFIG: &str =
    "containerd's CRI config (Status info \"config\": the default runtime's SystemdCgroup)";

/// The largest `info["config"]` accepted: containerd's is a few KiB.
const MAX_CONFIG_BYTES: usize = 1 << 20;
/// containerd's legacy runtime, configured by the top-level `systemd_cgroup`.
const LEGACY_RUNTIME_TYPE: &str = "io.containerd.runtime.v1.linux";

/// containerd's CRI config could not tell the driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ContainerdConfigError {
    #[error(
        "containerd's Status info \"config\" is {0} bytes, over the {MAX_CONFIG_BYTES}-byte bound"
    )]
    TooLarge(usize),
    #[error("containerd's Status info \"config\" is not JSON: {0}")]
    NotJson(String),
    #[error("containerd's Status info \"config\": field {field}: {reason}")]
    Field { field: String, reason: String },
}

fn field_error(field: &str, reason: &str) -> ContainerdConfigError {
    ContainerdConfigError::Field {
        field: field.to_string(),
        reason: reason.to_string(),
    }
}

/// The driver in the CRI plugin config that containerd (1.6, 1.7) returns as
/// `StatusResponse.info["config"]` with `verbose: true`: the default runtime's
/// `options.SystemdCgroup` (absent or false: cgroupfs, runc's default), or for the legacy
/// v1 runtime the top-level `systemdCgroup`.
pub(crate) fn from_containerd_config(json: &str) -> Result<CgroupDriver, ContainerdConfigError> {
    use serde_json::Value;
    if json.len() > MAX_CONFIG_BYTES {
        return Err(ContainerdConfigError::TooLarge(json.len()));
    }
    let config: Value =
        serde_json::from_str(json).map_err(|e| ContainerdConfigError::NotJson(e.to_string()))?;
    let containerd = config
        .get("containerd")
        .ok_or_else(|| field_error("containerd", "missing"))?;
    let default_name = containerd
        .get("defaultRuntimeName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (field, runtime) = if default_name.is_empty() {
        // Before default_runtime_name, the runtime was configured inline.
        let runtime = containerd.get("defaultRuntime").ok_or_else(|| {
            field_error(
                "containerd.defaultRuntime",
                "missing, and no defaultRuntimeName",
            )
        })?;
        ("containerd.defaultRuntime".to_string(), runtime)
    } else {
        let field = format!("containerd.runtimes.{default_name}");
        let runtime = containerd
            .get("runtimes")
            .and_then(|r| r.get(default_name))
            .ok_or_else(|| field_error(&field, "missing: defaultRuntimeName names no runtime"))?;
        (field, runtime)
    };
    let as_driver = |systemd: bool| {
        if systemd {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }
    };
    let runtime_type = runtime
        .get("runtimeType")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if runtime_type == LEGACY_RUNTIME_TYPE {
        return match config.get("systemdCgroup") {
            None | Some(Value::Null) => Ok(CgroupDriver::Cgroupfs),
            Some(Value::Bool(b)) => Ok(as_driver(*b)),
            Some(_) => Err(field_error("systemdCgroup", "not a boolean")),
        };
    }
    match runtime.get("options").and_then(|o| o.get("SystemdCgroup")) {
        None | Some(Value::Null) => Ok(CgroupDriver::Cgroupfs),
        Some(Value::Bool(b)) => Ok(as_driver(*b)),
        Some(_) => Err(field_error(
            &format!("{field}.options.SystemdCgroup"),
            "not a boolean",
        )),
    }
}

/// The driver oxlet runs with, and the reason, for the one start-up line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedDriver {
    pub driver: CgroupDriver,
    pub why: String,
    /// Set when the directories on the host suggest the other driver (left by an earlier
    /// kubelet or oxlet with another setting): worth a warning, never a refusal.
    pub warning: Option<String>,
}

/// An explicitly configured driver that the runtime contradicts: kubelet refuses to run,
/// since pods would land in cgroups the runtime does not manage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cgroup driver mismatch: oxlet is configured with \"{configured}\" (--cgroup-driver / cgroupDriver) \
     but the container runtime uses \"{reported}\" (from {source_}); configure both alike, or leave \
     oxlet's unset to follow the runtime"
)]
pub(crate) struct DriverMismatch {
    pub configured: CgroupDriver,
    pub reported: CgroupDriver,
    pub source_: &'static str,
}

/// Settles the driver. The runtime's answer wins (kubelet 1.28+ with `RuntimeConfig`),
/// and an explicitly configured driver that contradicts it is refused. Without one, an
/// explicit setting wins; without that, koordlet's guess from the host's directories,
/// then the configured default. A guess that disagrees with the outcome is a warning.
pub(crate) fn resolve(
    configured: CgroupDriver,
    configured_explicitly: bool,
    reported: Option<(CgroupDriver, &'static str)>,
    guessed: Option<CgroupDriver>,
) -> Result<ResolvedDriver, DriverMismatch> {
    let (driver, why) = match (reported, configured_explicitly, guessed) {
        (Some((reported, source_)), true, _) if reported != configured => {
            return Err(DriverMismatch {
                configured,
                reported,
                source_,
            });
        }
        (Some((reported, source)), explicit, _) => {
            let also = if explicit { ", as configured" } else { "" };
            (
                reported,
                format!("reported by the runtime ({source}){also}"),
            )
        }
        (None, true, _) => (
            configured,
            "configured (--cgroup-driver / cgroupDriver); the runtime does not report one"
                .to_string(),
        ),
        (None, false, Some(guessed)) => (
            guessed,
            format!(
                "guessed from the host's cgroups ({} found below the cgroup root); the runtime \
                 does not report one and none is configured",
                if guessed == CgroupDriver::Systemd {
                    "kubepods.slice"
                } else {
                    "kubepods"
                }
            ),
        ),
        (None, false, None) => (
            configured,
            "the default; the runtime does not report one, none is configured, and no kubepods \
             cgroup is on the host"
                .to_string(),
        ),
    };
    let warning = guessed.filter(|g| *g != driver).map(|g| {
        format!(
            "the host's cgroups look like the {g} driver (an earlier kubelet or oxlet?), but oxlet \
             uses {driver}"
        )
    });
    Ok(ResolvedDriver {
        driver,
        why,
        warning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// containerd 1.6.20's real `Status(verbose).info["config"]`, from the test bed.
    const CONTAINERD_1_6_CONFIG: &str =
        include_str!("testdata/containerd-1.6.20-status-info-config.json");

    #[test]
    fn reads_the_real_containerd_config() {
        assert_eq!(
            from_containerd_config(CONTAINERD_1_6_CONFIG),
            Ok(CgroupDriver::Cgroupfs)
        );
        let systemd =
            CONTAINERD_1_6_CONFIG.replace("\"SystemdCgroup\":false", "\"SystemdCgroup\":true");
        assert_ne!(systemd, CONTAINERD_1_6_CONFIG);
        assert_eq!(from_containerd_config(&systemd), Ok(CgroupDriver::Systemd));
    }

    #[test]
    fn containerd_config_shapes() {
        let cfg = |runtimes: &str, top: &str| {
            format!(r#"{{"containerd":{{"defaultRuntimeName":"r",{runtimes}}}{top}}}"#)
        };
        // No options at all: runc's default.
        let none = cfg(
            r#""runtimes":{"r":{"runtimeType":"io.containerd.runc.v2","options":null}}"#,
            "",
        );
        assert_eq!(from_containerd_config(&none), Ok(CgroupDriver::Cgroupfs));
        // The legacy runtime follows the top-level flag.
        let legacy = cfg(
            r#""runtimes":{"r":{"runtimeType":"io.containerd.runtime.v1.linux"}}"#,
            r#","systemdCgroup":true"#,
        );
        assert_eq!(from_containerd_config(&legacy), Ok(CgroupDriver::Systemd));
        // Errors name the field.
        let missing = cfg(r#""runtimes":{"other":{}}"#, "");
        let err = from_containerd_config(&missing).unwrap_err().to_string();
        assert!(
            err.contains("containerd.runtimes.r") && err.contains("names no runtime"),
            "{err}"
        );
        let bad = cfg(
            r#""runtimes":{"r":{"options":{"SystemdCgroup":"yes"}}}"#,
            "",
        );
        let err = from_containerd_config(&bad).unwrap_err().to_string();
        assert!(
            err.contains("containerd.runtimes.r.options.SystemdCgroup: not a boolean"),
            "{err}"
        );
        assert!(matches!(
            from_containerd_config("{"),
            Err(ContainerdConfigError::NotJson(_))
        ));
        let huge = " ".repeat(MAX_CONFIG_BYTES + 1);
        assert!(matches!(
            from_containerd_config(&huge),
            Err(ContainerdConfigError::TooLarge(_))
        ));
    }

    #[test]
    fn reads_the_cri_runtime_config() {
        let resp = |d: i32| cri::RuntimeConfigResponse {
            linux: Some(cri::LinuxRuntimeConfiguration { cgroup_driver: d }),
        };
        assert_eq!(from_runtime_config(&resp(0)), Some(CgroupDriver::Systemd));
        assert_eq!(from_runtime_config(&resp(1)), Some(CgroupDriver::Cgroupfs));
        assert_eq!(from_runtime_config(&resp(7)), None);
        assert_eq!(
            from_runtime_config(&cri::RuntimeConfigResponse { linux: None }),
            None
        );
    }

    #[test]
    fn guesses_from_kubepods_directories() {
        let root = tempfile::tempdir().unwrap();
        let cpu = root.path().join("cpu");
        std::fs::create_dir_all(&cpu).unwrap();
        let top = CgroupName::default();
        assert_eq!(guess(root.path(), CgroupVersion::Hybrid, &top), None);
        std::fs::create_dir(cpu.join("kubepods")).unwrap();
        assert_eq!(
            guess(root.path(), CgroupVersion::V1, &top),
            Some(CgroupDriver::Cgroupfs)
        );
        std::fs::create_dir(cpu.join("kubepods.slice")).unwrap();
        assert_eq!(
            guess(root.path(), CgroupVersion::V1, &top),
            Some(CgroupDriver::Systemd)
        );
        // v2 looks at the unified root; a --cgroup-root below it is honoured.
        let oxlet = CgroupName(vec!["oxlet".into()]);
        std::fs::create_dir_all(root.path().join("oxlet/kubepods")).unwrap();
        assert_eq!(guess(root.path(), CgroupVersion::V2, &top), None);
        assert_eq!(
            guess(root.path(), CgroupVersion::V2, &oxlet),
            Some(CgroupDriver::Cgroupfs)
        );
        // kind's root with the systemd driver: kubelet's slices, not <root>/kubepods.slice.
        let kubelet = CgroupName(vec!["kubelet".into()]);
        std::fs::create_dir_all(root.path().join("kubelet/kubepods.slice")).unwrap();
        assert_eq!(guess(root.path(), CgroupVersion::V2, &kubelet), None);
        std::fs::create_dir_all(root.path().join("kubelet.slice/kubelet-kubepods.slice")).unwrap();
        assert_eq!(
            guess(root.path(), CgroupVersion::V2, &kubelet),
            Some(CgroupDriver::Systemd)
        );
        // A root that cannot be spelled guesses nothing.
        let bad = CgroupName(vec!["..".into()]);
        assert_eq!(guess(root.path(), CgroupVersion::V2, &bad), None);
    }

    #[test]
    fn an_explicit_driver_against_the_runtime_is_refused_in_one_line() {
        let err = resolve(
            CgroupDriver::Systemd,
            true,
            Some((CgroupDriver::Cgroupfs, SOURCE_CONTAINERD_CONFIG)),
            None,
        )
        .unwrap_err();
        let line = err.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.contains("\"systemd\" (--cgroup-driver / cgroupDriver)"),
            "{line}"
        );
        assert!(
            line.contains("\"cgroupfs\" (from containerd's CRI config"),
            "{line}"
        );
    }

    #[test]
    fn the_runtime_wins_then_the_configured_then_the_guess() {
        use CgroupDriver::{Cgroupfs, Systemd};
        let r = resolve(
            Cgroupfs,
            false,
            Some((Systemd, SOURCE_RUNTIME_CONFIG)),
            Some(Systemd),
        )
        .unwrap();
        assert_eq!((r.driver, r.warning), (Systemd, None));
        assert!(r.why.contains("CRI RuntimeConfig"), "{}", r.why);
        let r = resolve(
            Systemd,
            true,
            Some((Systemd, SOURCE_RUNTIME_CONFIG)),
            Some(Cgroupfs),
        )
        .unwrap();
        assert_eq!(r.driver, Systemd);
        assert!(r.warning.unwrap().contains("cgroupfs driver"));
        let r = resolve(Systemd, true, None, Some(Cgroupfs)).unwrap();
        assert_eq!(r.driver, Systemd);
        assert!(r.why.starts_with("configured"), "{}", r.why);
        assert!(r.warning.is_some());
        let r = resolve(Cgroupfs, false, None, Some(Systemd)).unwrap();
        assert_eq!((r.driver, r.warning), (Systemd, None));
        assert!(r.why.contains("kubepods.slice"), "{}", r.why);
        let r = resolve(Cgroupfs, false, None, None).unwrap();
        assert_eq!(r.driver, Cgroupfs);
        assert!(r.why.starts_with("the default"), "{}", r.why);
    }
}

//! What a container is allowed to do, as kubelet computes it: the pod- and
//! container-level security contexts merged (`DetermineEffectiveSecurityContext`),
//! `runAsNonRoot` checked against the image's user, seccomp and AppArmor profiles
//! chosen (container field, then pod field, then the node's default), and the CRI
//! security contexts of the sandbox and of each container. `fsGroup` ownership of
//! emptyDir volumes (kubelet's `SetVolumeOwnership`) lives here too.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, Container, Pod, PodSecurityContext, SELinuxOptions,
    SeccompProfile, SecurityContext,
};

use super::sandbox;
use crate::safe_path::{self, PathError};

/// The node's security settings.
#[derive(Debug, Clone, Default)]
pub(crate) struct SecuritySettings {
    /// `<root-dir>/seccomp`: the only place Localhost seccomp profiles are read from.
    pub seccomp_root: PathBuf,
    /// `seccompDefault`: containers that ask for no seccomp profile get RuntimeDefault
    /// rather than Unconfined.
    pub seccomp_default: bool,
}

/// The user an image runs as (kubelet's `getImageUser`): a numeric UID, or a name
/// that cannot be checked without the image's passwd file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

impl ImageUser {
    /// From the runtime's `ImageStatus`; an image that names no user runs as root.
    pub(crate) fn of(image: Option<&cri::Image>) -> ImageUser {
        match image {
            Some(i) if i.uid.is_some() => ImageUser {
                uid: i.uid.as_ref().map(|u| u.value),
                username: String::new(),
            },
            Some(i) if !i.username.is_empty() => ImageUser {
                uid: None,
                username: i.username.clone(),
            },
            _ => ImageUser {
                uid: Some(0),
                username: String::new(),
            },
        }
    }
}

/// Why a container's security context cannot be built: a `CreateContainerConfigError`.
/// The runAsNonRoot messages are kubelet's, word for word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SecurityError {
    #[error("container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})")]
    RunAsUserIsRoot { pod: String, container: String },
    #[error(
        "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})"
    )]
    ImageRunsAsRoot { pod: String, container: String },
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {pod:?}, container: {container})"
    )]
    ImageUserNotNumeric {
        user: String,
        pod: String,
        container: String,
    },
    #[error(
        "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({max})): must be between 0 and {max}, inclusive (pod: {pod:?}, container: {container})",
        max = i32::MAX
    )]
    ImageUserInvalid {
        uid: i64,
        pod: String,
        container: String,
    },
    #[error("{field}: localhostProfile must be set if seccompProfile type is Localhost.")]
    SeccompLocalhostEmpty { field: &'static str },
    #[error("{field}: localhostProfile {name:?} must stay inside {root}: {source}")]
    SeccompOutside {
        field: &'static str,
        name: String,
        root: PathBuf,
        source: PathError,
    },
    #[error(
        "{field}: unknown seccomp profile type {type_:?} (RuntimeDefault, Unconfined or Localhost)"
    )]
    SeccompType { field: &'static str, type_: String },
    #[error("{field}: missing localhost apparmor profile name")]
    AppArmorLocalhostEmpty { field: String },
    #[error("{field}: unknown apparmor profile type: {type_:?}")]
    AppArmorType { field: String, type_: String },
    #[error("securityContext.procMount: unknown value {0:?} (Default or Unmasked)")]
    ProcMount(String),
    #[error(
        "spec.securityContext.supplementalGroupsPolicy: unsupported value {0:?} (Merge or Strict)"
    )]
    SupplementalGroupsPolicy(String),
}

/// kubelet's `format.Pod`: `name_namespace(uid)`.
fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

fn pod_security(pod: &Pod) -> Option<&PodSecurityContext> {
    pod.spec.as_ref().and_then(|s| s.security_context.as_ref())
}

/// The container's effective security context: what the pod sets (user, group,
/// runAsNonRoot, SELinux), overridden field by field by the container's own.
pub(crate) fn effective(pod: &Pod, container: &Container) -> SecurityContext {
    let mut sc = pod_security(pod)
        .map(|p| SecurityContext {
            run_as_user: p.run_as_user,
            run_as_group: p.run_as_group,
            run_as_non_root: p.run_as_non_root,
            se_linux_options: p.se_linux_options.clone(),
            windows_options: p.windows_options.clone(),
            ..Default::default()
        })
        .unwrap_or_default();
    let Some(c) = container.security_context.as_ref() else {
        return sc;
    };
    macro_rules! over {
        ($($f:ident),*) => {$(if c.$f.is_some() { sc.$f = c.$f.clone(); })*};
    }
    over!(
        se_linux_options,
        windows_options,
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount
    );
    sc
}

/// kubelet's `verifyRunAsNonRoot`: with runAsNonRoot, the user the container will
/// run as must be known and not root.
pub(crate) fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    sc: &SecurityContext,
    image: &ImageUser,
) -> Result<(), SecurityError> {
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let names = || (format_pod(pod), container.name.clone());
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            let (pod, container) = names();
            return Err(SecurityError::RunAsUserIsRoot { pod, container });
        }
        return Ok(());
    }
    match image.uid {
        None if !image.username.is_empty() => {
            let (pod, container) = names();
            Err(SecurityError::ImageUserNotNumeric {
                user: image.username.clone(),
                pod,
                container,
            })
        }
        Some(0) => {
            let (pod, container) = names();
            Err(SecurityError::ImageRunsAsRoot { pod, container })
        }
        Some(uid) if !(0..=i64::from(i32::MAX)).contains(&uid) => {
            let (pod, container) = names();
            Err(SecurityError::ImageUserInvalid {
                uid,
                pod,
                container,
            })
        }
        _ => Ok(()),
    }
}

fn profile(t: cri::security_profile::ProfileType, localhost_ref: String) -> cri::SecurityProfile {
    cri::SecurityProfile {
        profile_type: t as i32,
        localhost_ref,
    }
}

/// kubelet's `getSeccompProfile`: the container's field, else the pod's, else
/// RuntimeDefault with `seccompDefault` and Unconfined without. A Localhost profile
/// is a relative path that must stay below `<root-dir>/seccomp`; an empty one is an
/// error, never Unconfined.
pub(crate) fn seccomp_profile(
    pod: &Pod,
    container: &Container,
    settings: &SecuritySettings,
) -> Result<cri::SecurityProfile, SecurityError> {
    use cri::security_profile::ProfileType;
    let chosen: Option<(&'static str, &SeccompProfile)> = container
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| ("securityContext.seccompProfile", p))
        .or_else(|| {
            pod_security(pod)
                .and_then(|s| s.seccomp_profile.as_ref())
                .map(|p| ("spec.securityContext.seccompProfile", p))
        });
    let Some((field, p)) = chosen else {
        let t = if settings.seccomp_default {
            ProfileType::RuntimeDefault
        } else {
            ProfileType::Unconfined
        };
        return Ok(profile(t, String::new()));
    };
    match p.type_.as_str() {
        "RuntimeDefault" => Ok(profile(ProfileType::RuntimeDefault, String::new())),
        "Unconfined" => Ok(profile(ProfileType::Unconfined, String::new())),
        "Localhost" => {
            let name = p.localhost_profile.as_deref().unwrap_or("");
            if name.is_empty() {
                return Err(SecurityError::SeccompLocalhostEmpty { field });
            }
            let rel =
                safe_path::relative(name).map_err(|source| SecurityError::SeccompOutside {
                    field,
                    name: name.to_string(),
                    root: settings.seccomp_root.clone(),
                    source,
                })?;
            let path = settings.seccomp_root.join(rel);
            Ok(profile(
                ProfileType::Localhost,
                path.to_string_lossy().into_owned(),
            ))
        }
        other => Err(SecurityError::SeccompType {
            field,
            type_: other.to_string(),
        }),
    }
}

/// The deprecated per-container AppArmor annotation, which static pods may still carry.
const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The annotation's value as a profile (kubelet's `getProfileFromPodAnnotations`);
/// values it does not know are ignored, as kubelet ignores them.
fn apparmor_from_annotation(value: &str) -> Option<AppArmorProfile> {
    let (type_, localhost_profile) = match value {
        "runtime/default" => ("RuntimeDefault", None),
        "unconfined" => ("Unconfined", None),
        v => ("Localhost", Some(v.strip_prefix("localhost/")?.to_string())),
    };
    Some(AppArmorProfile {
        type_: type_.to_string(),
        localhost_profile,
    })
}

/// kubelet's `getAppArmorProfile`: the container's field, else the pod's annotation
/// for the container, else the pod's field; with the deprecated profile string older
/// runtimes read. None leaves the choice to the runtime.
pub(crate) fn apparmor_profile(
    pod: &Pod,
    container: &Container,
) -> Result<(Option<cri::SecurityProfile>, String), SecurityError> {
    use cri::security_profile::ProfileType;
    let annotation = format!("{APPARMOR_ANNOTATION_PREFIX}{}", container.name);
    let chosen = if let Some(p) = container
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
    {
        ("securityContext.appArmorProfile".to_string(), p)
    } else if let Some(p) = (pod.metadata.annotations.as_ref())
        .and_then(|a| a.get(&annotation))
        .and_then(|v| apparmor_from_annotation(v))
    {
        (format!("metadata.annotations[{annotation:?}]"), p)
    } else if let Some(p) = pod_security(pod).and_then(|s| s.app_armor_profile.clone()) {
        ("spec.securityContext.appArmorProfile".to_string(), p)
    } else {
        return Ok((None, String::new()));
    };
    let (field, p) = chosen;
    match p.type_.as_str() {
        "RuntimeDefault" => Ok((
            Some(profile(ProfileType::RuntimeDefault, String::new())),
            "runtime/default".to_string(),
        )),
        "Unconfined" => Ok((
            Some(profile(ProfileType::Unconfined, String::new())),
            "unconfined".to_string(),
        )),
        "Localhost" => {
            let name = p.localhost_profile.unwrap_or_default();
            if name.is_empty() {
                return Err(SecurityError::AppArmorLocalhostEmpty { field });
            }
            let deprecated = format!("localhost/{name}");
            Ok((Some(profile(ProfileType::Localhost, name)), deprecated))
        }
        other => Err(SecurityError::AppArmorType {
            field,
            type_: other.to_string(),
        }),
    }
}

/// kubelet's default masked paths (`securitycontext.defaultMaskedPaths`).
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// kubelet's default read-only paths (`securitycontext.defaultReadonlyPaths`).
const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Masked and read-only /proc paths for a `procMount`: kubelet's defaults, none with
/// Unmasked.
fn proc_paths(proc_mount: Option<&str>) -> Result<(Vec<String>, Vec<String>), SecurityError> {
    let owned = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    match proc_mount {
        None | Some("Default") => Ok((owned(MASKED_PATHS), owned(READONLY_PATHS))),
        Some("Unmasked") => Ok((Vec::new(), Vec::new())),
        Some(other) => Err(SecurityError::ProcMount(other.to_string())),
    }
}

fn capabilities(c: &Capabilities) -> cri::Capability {
    // Names as written (`NET_ADMIN`); the runtime adds `CAP_`.
    cri::Capability {
        add_capabilities: c.add.clone().unwrap_or_default(),
        drop_capabilities: c.drop.clone().unwrap_or_default(),
        add_ambient_capabilities: Vec::new(),
    }
}

fn selinux(o: &SELinuxOptions) -> cri::SeLinuxOption {
    cri::SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    }
}

/// The pod's groups, as kubelet adds them to the sandbox and to every container:
/// `fsGroup` first, then `supplementalGroups`.
fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let Some(sc) = pod_security(pod) else {
        return Vec::new();
    };
    sc.fs_group
        .into_iter()
        .chain(sc.supplemental_groups.iter().flatten().copied())
        .collect()
}

/// `supplementalGroupsPolicy` as the CRI enum; Merge when unset.
fn supplemental_groups_policy(pod: &Pod) -> Result<i32, SecurityError> {
    match pod_security(pod).and_then(|s| s.supplemental_groups_policy.as_deref()) {
        None | Some("Merge") => Ok(cri::SupplementalGroupsPolicy::Merge as i32),
        Some("Strict") => Ok(cri::SupplementalGroupsPolicy::Strict as i32),
        Some(other) => Err(SecurityError::SupplementalGroupsPolicy(other.to_string())),
    }
}

/// kubelet's `HasPrivilegedContainer`: the sandbox is privileged when any container is.
fn has_privileged_container(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .any(|c| {
                c.security_context
                    .as_ref()
                    .and_then(|sc| sc.privileged)
                    .unwrap_or(false)
            })
    })
}

/// The sandbox's security context (kubelet's `generatePodSandboxLinuxConfig`). The
/// sandbox always runs RuntimeDefault seccomp, so a pod-level profile may be strict.
/// An unsupported `supplementalGroupsPolicy` is left as Merge here; the containers
/// refuse it with a config error.
pub(crate) fn sandbox_security_context(pod: &Pod) -> cri::LinuxSandboxSecurityContext {
    let sc = pod_security(pod);
    cri::LinuxSandboxSecurityContext {
        namespace_options: Some(sandbox::namespace_options(pod)),
        selinux_options: sc.and_then(|s| s.se_linux_options.as_ref()).map(selinux),
        run_as_user: sc
            .and_then(|s| s.run_as_user)
            .map(|value| cri::Int64Value { value }),
        run_as_group: sc
            .and_then(|s| s.run_as_group)
            .map(|value| cri::Int64Value { value }),
        supplemental_groups: supplemental_groups(pod),
        supplemental_groups_policy: supplemental_groups_policy(pod).unwrap_or_default(),
        privileged: has_privileged_container(pod),
        seccomp: Some(profile(
            cri::security_profile::ProfileType::RuntimeDefault,
            String::new(),
        )),
        ..Default::default()
    }
}

/// One container's CRI security context (kubelet's `determineEffectiveSecurityContext`),
/// after the runAsNonRoot check against the image's user.
pub(crate) fn container_security_context(
    pod: &Pod,
    container: &Container,
    image: &ImageUser,
    settings: &SecuritySettings,
) -> Result<cri::LinuxContainerSecurityContext, SecurityError> {
    let sc = effective(pod, container);
    verify_run_as_non_root(pod, container, &sc, image)?;
    let (apparmor, apparmor_profile) = apparmor_profile(pod, container)?;
    let (masked_paths, readonly_paths) = proc_paths(sc.proc_mount.as_deref())?;
    #[allow(
        deprecated,
        reason = "kubelet still fills the old AppArmor field for older runtimes"
    )]
    let mut out = cri::LinuxContainerSecurityContext {
        capabilities: sc.capabilities.as_ref().map(capabilities),
        privileged: sc.privileged.unwrap_or(false),
        namespace_options: Some(sandbox::namespace_options(pod)),
        selinux_options: sc.se_linux_options.as_ref().map(selinux),
        run_as_user: sc.run_as_user.map(|value| cri::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: supplemental_groups(pod),
        supplemental_groups_policy: supplemental_groups_policy(pod)?,
        // kubelet's AddNoNewPrivileges: only an explicit `false` sets it.
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        masked_paths,
        readonly_paths,
        seccomp: Some(seccomp_profile(pod, container, settings)?),
        apparmor,
        apparmor_profile,
        ..Default::default()
    };
    // Without a runAsUser, the image's user, as kubelet passes it.
    if out.run_as_user.is_none() {
        match image.uid {
            Some(value) => out.run_as_user = Some(cri::Int64Value { value }),
            None => out.run_as_username = image.username.clone(),
        }
    }
    Ok(out)
}

/// kubelet's `SetVolumeOwnership` on a new, empty volume directory: group `fs_group`,
/// group read/write/search and setgid, so files made inside belong to the group too.
/// `dir` was just created by oxlet below its own pods directory.
pub(crate) fn set_volume_ownership(dir: &Path, fs_group: i64) -> std::io::Result<()> {
    let gid = u32::try_from(fs_group).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("fsGroup {fs_group} is not a valid group ID"),
        )
    })?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(std::io::Error::other("not a directory"));
    }
    std::os::unix::fs::lchown(dir, None, Some(gid))?;
    let mode = meta.permissions().mode() | 0o2000 | 0o660 | 0o110;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

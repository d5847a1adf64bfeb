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

use crate::pod::is_host_network;
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
    let owned = |l: &[&str]| l.iter().map(ToString::to_string).collect();
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
        namespace_options: Some(namespace_options(pod)),
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
        namespace_options: Some(namespace_options(pod)),
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

/// Most entries [`set_volume_ownership`] changes in one volume; the volumes it runs
/// on are written by oxlet itself, so more means something else is in there.
const MAX_OWNERSHIP_ENTRIES: usize = 100_000;

/// kubelet's `SetVolumeOwnership`: the volume directory `dir` and everything below it
/// go to group `fs_group`, with group read (and write, unless the volume is
/// `read_only` to the pod) and, for directories, search and setgid, so files made
/// later belong to the group too. Symlinks (the atomic writer's) get the group but no
/// mode change, and are never followed. `dir` is below oxlet's own pods directory.
pub(crate) fn set_volume_ownership(
    dir: &Path,
    fs_group: i64,
    read_only: bool,
) -> std::io::Result<()> {
    let gid = u32::try_from(fs_group).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("fsGroup {fs_group} is not a valid group ID"),
        )
    })?;
    if !std::fs::symlink_metadata(dir)?.is_dir() {
        return Err(std::io::Error::other("not a directory"));
    }
    let mask = if read_only { 0o440 } else { 0o660 };
    let mut todo = vec![dir.to_path_buf()];
    let mut changed = 0usize;
    while let Some(path) = todo.pop() {
        changed += 1;
        if changed > MAX_OWNERSHIP_ENTRIES {
            return Err(std::io::Error::other(format!(
                "more than {MAX_OWNERSHIP_ENTRIES} entries"
            )));
        }
        let meta = std::fs::symlink_metadata(&path)?;
        std::os::unix::fs::lchown(&path, None, Some(gid))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mut mode = meta.permissions().mode() & 0o7777 | mask;
        if meta.is_dir() {
            mode |= 0o2000 | 0o110;
            for entry in std::fs::read_dir(&path)? {
                todo.push(entry?.path());
            }
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// The namespace options shared by the sandbox and its containers.
fn namespace_options(pod: &Pod) -> cri::NamespaceOption {
    let spec = pod.spec.as_ref();
    let host_pid = spec.and_then(|s| s.host_pid).unwrap_or(false);
    let host_ipc = spec.and_then(|s| s.host_ipc).unwrap_or(false);
    let share_pid = spec
        .and_then(|s| s.share_process_namespace)
        .unwrap_or(false);
    cri::NamespaceOption {
        network: if is_host_network(pod) {
            cri::NamespaceMode::Node as i32
        } else {
            cri::NamespaceMode::Pod as i32
        },
        pid: if host_pid {
            cri::NamespaceMode::Node as i32
        } else if share_pid {
            cri::NamespaceMode::Pod as i32
        } else {
            cri::NamespaceMode::Container as i32
        },
        ipc: if host_ipc {
            cri::NamespaceMode::Node as i32
        } else {
            cri::NamespaceMode::Pod as i32
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cri::security_profile::ProfileType;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut p = json!({
            "metadata": {"name": "web-n1", "namespace": "ns", "uid": "u1"},
            "spec": spec,
        });
        if p["spec"]["containers"].is_null() {
            p["spec"]["containers"] = json!([{"name": "app"}]);
        }
        serde_json::from_value(p).unwrap()
    }

    fn first(p: &Pod) -> &Container {
        &p.spec.as_ref().unwrap().containers[0]
    }

    fn settings(seccomp_default: bool) -> SecuritySettings {
        SecuritySettings {
            seccomp_root: PathBuf::from("/var/lib/oxlet/seccomp"),
            seccomp_default,
        }
    }

    fn user(uid: Option<i64>, name: &str) -> ImageUser {
        ImageUser {
            uid,
            username: name.into(),
        }
    }

    fn build(
        p: &Pod,
        image: &ImageUser,
    ) -> Result<cri::LinuxContainerSecurityContext, SecurityError> {
        container_security_context(p, first(p), image, &settings(false))
    }

    #[test]
    fn the_container_overrides_the_pod_field_by_field() {
        let p = pod(json!({
            "securityContext": {"runAsUser": 1000, "runAsGroup": 2000, "runAsNonRoot": true,
                                "seLinuxOptions": {"level": "s0:c1"}},
            "containers": [{"name": "app", "securityContext": {
                "runAsUser": 1001, "readOnlyRootFilesystem": true, "privileged": false,
                "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}}],
        }));
        let sc = effective(&p, first(&p));
        assert_eq!(sc.run_as_user, Some(1001));
        assert_eq!(sc.run_as_group, Some(2000));
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.se_linux_options.unwrap().level.as_deref(), Some("s0:c1"));
        let out = build(&p, &user(Some(0), "")).unwrap();
        assert_eq!(out.run_as_user, Some(cri::Int64Value { value: 1001 }));
        assert_eq!(out.run_as_group, Some(cri::Int64Value { value: 2000 }));
        assert!(out.readonly_rootfs && !out.privileged);
        let caps = out.capabilities.unwrap();
        // As written: the runtime adds `CAP_`.
        assert_eq!(caps.add_capabilities, vec!["NET_ADMIN"]);
        assert_eq!(caps.drop_capabilities, vec!["ALL"]);
        assert_eq!(out.selinux_options.unwrap().level, "s0:c1");
        // Pod-only fields never leak into the container's context.
        let p = pod(json!({"securityContext": {"fsGroup": 5}}));
        assert_eq!(effective(&p, first(&p)), SecurityContext::default());
    }

    #[test]
    fn groups_are_fs_group_then_supplemental_groups_in_sandbox_and_container() {
        let p = pod(
            json!({"securityContext": {"fsGroup": 3000, "supplementalGroups": [4000, 4001],
                                               "runAsUser": 7, "runAsGroup": 8}}),
        );
        let out = build(&p, &user(Some(0), "")).unwrap();
        assert_eq!(out.supplemental_groups, vec![3000, 4000, 4001]);
        let sb = sandbox_security_context(&p);
        assert_eq!(sb.supplemental_groups, vec![3000, 4000, 4001]);
        assert_eq!(sb.run_as_user, Some(cri::Int64Value { value: 7 }));
        assert_eq!(sb.run_as_group, Some(cri::Int64Value { value: 8 }));
        // The sandbox always runs RuntimeDefault seccomp.
        assert_eq!(
            sb.seccomp.unwrap().profile_type,
            ProfileType::RuntimeDefault as i32
        );
        let strict = pod(json!({"securityContext": {"supplementalGroupsPolicy": "Strict"}}));
        assert_eq!(
            build(&strict, &user(Some(0), ""))
                .unwrap()
                .supplemental_groups_policy,
            cri::SupplementalGroupsPolicy::Strict as i32
        );
        let bad = pod(json!({"securityContext": {"supplementalGroupsPolicy": "Loose"}}));
        assert_eq!(
            build(&bad, &user(Some(0), "")).unwrap_err(),
            SecurityError::SupplementalGroupsPolicy("Loose".into())
        );
    }

    #[test]
    fn the_sandbox_is_privileged_when_any_container_is() {
        let p = pod(json!({
            "initContainers": [{"name": "init", "securityContext": {"privileged": true}}],
            "containers": [{"name": "app"}],
        }));
        assert!(sandbox_security_context(&p).privileged);
        assert!(!sandbox_security_context(&pod(json!({}))).privileged);
    }

    #[test]
    fn run_as_non_root_is_checked_against_the_image_user_with_kubelets_messages() {
        let p = pod(json!({"securityContext": {"runAsNonRoot": true}}));
        assert_eq!(
            build(&p, &user(Some(0), "")).unwrap_err().to_string(),
            r#"container has runAsNonRoot and image will run as root (pod: "web-n1_ns(u1)", container: app)"#
        );
        assert_eq!(
            build(&p, &user(None, "nginx")).unwrap_err().to_string(),
            r#"container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root (pod: "web-n1_ns(u1)", container: app)"#
        );
        assert!(matches!(
            build(&p, &user(Some(1 << 40), "")).unwrap_err(),
            SecurityError::ImageUserInvalid { uid, .. } if uid == 1 << 40
        ));
        // A numeric non-root image user is fine, and becomes the container's user.
        let out = build(&p, &user(Some(65534), "")).unwrap();
        assert_eq!(out.run_as_user, Some(cri::Int64Value { value: 65534 }));
        // An explicit runAsUser decides, whatever the image says.
        let p = pod(json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 0}}));
        assert_eq!(
            build(&p, &user(Some(1000), "")).unwrap_err().to_string(),
            r#"container's runAsUser breaks non-root policy (pod: "web-n1_ns(u1)", container: app)"#
        );
        let p = pod(json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 5}}));
        assert!(build(&p, &user(Some(0), "")).is_ok());
        // The container may turn it off; without it a root image is fine.
        let p = pod(json!({"securityContext": {"runAsNonRoot": true},
                           "containers": [{"name": "app", "securityContext": {"runAsNonRoot": false}}]}));
        assert!(build(&p, &user(Some(0), "")).is_ok());
        // A named user is passed on by name.
        let out = build(&pod(json!({})), &user(None, "nginx")).unwrap();
        assert_eq!(
            (out.run_as_user, out.run_as_username.as_str()),
            (None, "nginx")
        );
    }

    #[test]
    fn image_user_follows_kubelets_get_image_user() {
        assert_eq!(ImageUser::of(None), user(Some(0), ""));
        let img = |uid: Option<i64>, name: &str| cri::Image {
            uid: uid.map(|value| cri::Int64Value { value }),
            username: name.into(),
            ..Default::default()
        };
        assert_eq!(ImageUser::of(Some(&img(None, ""))), user(Some(0), ""));
        assert_eq!(ImageUser::of(Some(&img(Some(12), ""))), user(Some(12), ""));
        assert_eq!(ImageUser::of(Some(&img(None, "www"))), user(None, "www"));
    }

    #[test]
    fn no_new_privs_only_when_escalation_is_explicitly_refused() {
        let with = |v: serde_json::Value| {
            let p = pod(json!({"containers": [{"name": "app", "securityContext": v}]}));
            build(&p, &user(Some(0), "")).unwrap().no_new_privs
        };
        assert!(with(json!({"allowPrivilegeEscalation": false})));
        assert!(!with(json!({"allowPrivilegeEscalation": true})));
        assert!(!with(json!({})));
    }

    #[test]
    fn proc_mount_decides_masked_and_readonly_paths() {
        let with = |v: serde_json::Value| {
            let p = pod(json!({"containers": [{"name": "app", "securityContext": v}]}));
            build(&p, &user(Some(0), ""))
        };
        let d = with(json!({})).unwrap();
        assert!(d.masked_paths.contains(&"/proc/kcore".to_string()));
        assert!(d.readonly_paths.contains(&"/proc/sys".to_string()));
        assert_eq!(with(json!({"procMount": "Default"})).unwrap(), d);
        let u = with(json!({"procMount": "Unmasked"})).unwrap();
        assert!(u.masked_paths.is_empty() && u.readonly_paths.is_empty());
        assert_eq!(
            with(json!({"procMount": "Open"})).unwrap_err(),
            SecurityError::ProcMount("Open".into())
        );
    }

    fn seccomp(
        spec: serde_json::Value,
        default: bool,
    ) -> Result<cri::SecurityProfile, SecurityError> {
        let p = pod(spec);
        seccomp_profile(&p, first(&p), &settings(default))
    }

    #[test]
    fn seccomp_container_then_pod_then_the_node_default() {
        let t = |r: Result<cri::SecurityProfile, SecurityError>| r.unwrap().profile_type;
        assert_eq!(t(seccomp(json!({}), false)), ProfileType::Unconfined as i32);
        assert_eq!(
            t(seccomp(json!({}), true)),
            ProfileType::RuntimeDefault as i32
        );
        let pod_rd = json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}});
        assert_eq!(
            t(seccomp(pod_rd, false)),
            ProfileType::RuntimeDefault as i32
        );
        let both = json!({
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "securityContext": {"seccompProfile": {"type": "Unconfined"}}}],
        });
        assert_eq!(t(seccomp(both, true)), ProfileType::Unconfined as i32);
        let local = json!({"securityContext": {"seccompProfile":
            {"type": "Localhost", "localhostProfile": "profiles/audit.json"}}});
        let p = seccomp(local, false).unwrap();
        assert_eq!(p.profile_type, ProfileType::Localhost as i32);
        assert_eq!(
            p.localhost_ref,
            "/var/lib/oxlet/seccomp/profiles/audit.json"
        );
    }

    #[test]
    fn a_localhost_seccomp_profile_must_be_named_and_stay_in_the_seccomp_dir() {
        let local = |name: serde_json::Value| {
            seccomp(
                json!({"containers": [{"name": "app", "securityContext": {"seccompProfile":
                    {"type": "Localhost", "localhostProfile": name}}}]}),
                true,
            )
        };
        for empty in [json!(""), json!(null)] {
            assert_eq!(
                local(empty).unwrap_err(),
                SecurityError::SeccompLocalhostEmpty {
                    field: "securityContext.seccompProfile"
                }
            );
        }
        for outside in ["../escape.json", "/etc/passwd", "a/../../b.json"] {
            assert!(
                matches!(
                    local(json!(outside)),
                    Err(SecurityError::SeccompOutside { .. })
                ),
                "{outside} accepted"
            );
        }
        assert!(matches!(
            seccomp(
                json!({"securityContext": {"seccompProfile": {"type": "Strict"}}}),
                false
            ),
            Err(SecurityError::SeccompType {
                field: "spec.securityContext.seccompProfile",
                ..
            })
        ));
    }

    #[test]
    fn apparmor_container_field_then_annotation_then_pod_field() {
        let aa = |p: &Pod| apparmor_profile(p, first(p));
        assert_eq!(aa(&pod(json!({}))).unwrap(), (None, String::new()));
        let pod_rd =
            pod(json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}));
        let (p, old) = aa(&pod_rd).unwrap();
        assert_eq!(p.unwrap().profile_type, ProfileType::RuntimeDefault as i32);
        assert_eq!(old, "runtime/default");
        let mut annotated = pod_rd.clone();
        annotated.metadata.annotations = Some(
            [(
                format!("{APPARMOR_ANNOTATION_PREFIX}app"),
                "localhost/k8s-nginx".to_string(),
            )]
            .into(),
        );
        let (p, old) = aa(&annotated).unwrap();
        let p = p.unwrap();
        assert_eq!(
            (p.profile_type, p.localhost_ref.as_str(), old.as_str()),
            (
                ProfileType::Localhost as i32,
                "k8s-nginx",
                "localhost/k8s-nginx"
            )
        );
        let mut field = annotated.clone();
        field.spec.as_mut().unwrap().containers[0].security_context = Some(SecurityContext {
            app_armor_profile: Some(AppArmorProfile {
                type_: "Unconfined".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        });
        let (p, old) = aa(&field).unwrap();
        assert_eq!(p.unwrap().profile_type, ProfileType::Unconfined as i32);
        assert_eq!(old, "unconfined");
        for bad in [
            json!({"type": "Localhost"}),
            json!({"type": "Localhost", "localhostProfile": ""}),
        ] {
            let p = pod(json!({"securityContext": {"appArmorProfile": bad}}));
            assert!(matches!(
                aa(&p),
                Err(SecurityError::AppArmorLocalhostEmpty { .. })
            ));
        }
        let p = pod(json!({"securityContext": {"appArmorProfile": {"type": "Complain"}}}));
        assert!(matches!(aa(&p), Err(SecurityError::AppArmorType { .. })));
        // An empty localhost annotation is an error too, never unconfined.
        let mut empty = pod(json!({}));
        empty.metadata.annotations = Some(
            [(
                format!("{APPARMOR_ANNOTATION_PREFIX}app"),
                "localhost/".to_string(),
            )]
            .into(),
        );
        assert!(matches!(
            aa(&empty),
            Err(SecurityError::AppArmorLocalhostEmpty { .. })
        ));
    }

    #[test]
    fn fs_group_owns_a_new_volume_with_setgid() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("v");
        std::fs::create_dir(&vol).unwrap();
        std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o755)).unwrap();
        set_volume_ownership(&vol, 4321, false).unwrap();
        let m = std::fs::metadata(&vol).unwrap();
        assert_eq!(m.gid(), 4321);
        assert_eq!(m.mode() & 0o7777, 0o2775);
        // A symlink is never followed.
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&vol, &link).unwrap();
        assert!(set_volume_ownership(&link, 1, false).is_err());
        assert!(set_volume_ownership(&vol, -1, false).is_err());
    }

    #[test]
    fn fs_group_reaches_the_whole_tree_as_kubelet_read_only_mask_included() {
        use std::os::unix::fs::MetadataExt;
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().mode() & 0o7777;
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("v");
        let data = vol.join("..2026_11_27");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        for d in [&vol, &data, &data.join("sub")] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(data.join("token"), "t").unwrap();
        std::fs::set_permissions(data.join("token"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::write(data.join("sub/ca.crt"), "c").unwrap();
        std::fs::set_permissions(
            data.join("sub/ca.crt"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        std::os::unix::fs::symlink("..2026_11_27", vol.join("..data")).unwrap();
        // A link out of the volume: it gets the group, its target nothing.
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "o").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("escape")).unwrap();

        set_volume_ownership(&vol, 4321, true).unwrap();
        // kubelet's token: 0600 becomes 0640 with an fsGroup.
        assert_eq!(mode(&data.join("token")), 0o640);
        assert_eq!(mode(&data.join("sub/ca.crt")), 0o644);
        assert_eq!(mode(&data.join("sub")), 0o2755);
        assert_eq!(mode(&vol), 0o2755);
        for p in [&vol, &data, &data.join("token"), &data.join("sub/ca.crt")] {
            assert_eq!(
                std::fs::symlink_metadata(p).unwrap().gid(),
                4321,
                "{}",
                p.display()
            );
        }
        assert_eq!(
            std::fs::symlink_metadata(vol.join("escape")).unwrap().gid(),
            4321
        );
        assert_eq!(mode(&outside), 0o600);
        assert_ne!(std::fs::metadata(&outside).unwrap().gid(), 4321);
    }
}

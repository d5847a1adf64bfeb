//! Volume mounts for the volume types a static pod can use without an apiserver:
//! `hostPath` (with kubelet's type checks), `emptyDir` (a directory under
//! `<root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`, a tmpfs there for
//! `medium: Memory`), and `downwardAPI` (also as the only source of a `projected`
//! volume), written by the atomic writer and mounted read-only as kubelet does.
//!
//! A `subPath` is pod input pointing into a volume the pod can write to, so it is opened
//! below the volume without following a symlink out of it, and what was opened is
//! bind-mounted at `<root-dir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>`
//! (kubelet's layout); that mount, never the name, is what the CRI gets.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, DownwardAPIVolumeFile, EmptyDirVolumeSource, HostPathVolumeSource, Pod, Volume,
    VolumeMount,
};

use super::atomic_writer::{self, AtomicWriteError, FileProjection, Payload};
use super::object_volumes;
use crate::cm::NodeResources;
use crate::objects::PodObjects;
use crate::podenv::DownwardError;
use crate::safe_path::{self, BeneathError, PathError};

/// Why a container's mounts could not be prepared: a `CreateContainerConfigError`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VolumeError {
    #[error("volume mount {0:?}: no such volume")]
    NoSuchVolume(String),
    #[error(
        "volume {0:?}: only hostPath, emptyDir and downwardAPI volumes are supported without an apiserver (configMap, secret and projected volumes need --kubeconfig)"
    )]
    Unsupported(String),
    #[error("volume {volume:?}: emptyDir medium {medium:?} is not supported by oxlet")]
    Medium { volume: String, medium: String },
    #[error("volume {volume:?}: cannot mount a tmpfs at {path}: {source}")]
    Tmpfs {
        volume: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("volume {volume:?}: items[{index}]: {source}")]
    Downward {
        volume: String,
        index: usize,
        source: DownwardError,
    },
    #[error("volume {volume:?}: {source}")]
    Object {
        volume: String,
        source: super::object_volumes::ObjectVolumeError,
    },
    #[error("volume {volume:?}: sources[{index}]: {source}")]
    Projected {
        volume: String,
        index: usize,
        source: super::object_volumes::ObjectVolumeError,
    },
    #[error("volume {volume:?}: {source}")]
    AtomicWrite {
        volume: String,
        source: AtomicWriteError,
    },
    /// kubelet's validation message.
    #[error(
        "volume mount {0:?}: mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers"
    )]
    BidirectionalUnprivileged(String),
    /// kubelet's `makeMounts` message around `resolveRecursiveReadOnly`'s.
    #[error("failed to resolve recursive read-only mode: {0}")]
    RecursiveReadOnly(RecursiveReadOnlyError),
    /// kubelet's `translateMountPropagation` message.
    #[error("volume mount {volume:?}: invalid MountPropagation mode: {mode:?}")]
    Propagation { volume: String, mode: String },
    #[error(
        "volume {volume:?}: subPath {sub_path:?} into an image volume needs the CRI's image_sub_path, which oxlet's CRI API does not carry yet"
    )]
    ImageSubPath { volume: String, sub_path: String },
    /// A claim that is not bound or cannot be mounted here, in kubelet's words.
    #[error("{0}")]
    Claim(String),
    /// A claim the object manager could not bind and check, in kubelet's words.
    #[error(transparent)]
    Unbound(crate::objects::ClaimError),
    #[error("unsafe path part: {0}")]
    Path(#[from] PathError),
    #[error("cannot set up emptyDir {path}: {source}")]
    EmptyDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// kubelet's wording, so the message reads the same as on a kubelet node.
    #[error("hostPath {0} doesn't exist")]
    HostPathMissing(PathBuf),
    #[error("hostPath type check failed: {path} is not a {expected}, it's a {actual}")]
    HostPathType {
        path: PathBuf,
        expected: &'static str,
        actual: &'static str,
    },
    #[error("hostPath {path}: {source}")]
    HostPathIo {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("volume {volume:?}: subPath {sub_path:?}: {source}")]
    SubPath {
        volume: String,
        sub_path: String,
        source: BeneathError,
    },
    #[error("volume {volume:?}: subPathExpr {expr:?} expands to more than {max} bytes")]
    SubPathExprTooLong {
        volume: String,
        expr: String,
        max: usize,
    },
    #[error("volume {volume:?}: subPath {sub_path:?}: cannot bind-mount it: {source}")]
    SubPathMount {
        volume: String,
        sub_path: String,
        source: std::io::Error,
    },
}

pub(super) fn empty_dir_path(pods_dir: &Path, uid: &str, name: &str) -> Result<PathBuf, PathError> {
    crate::pod::volume_dir(pods_dir, uid, EMPTY_DIR, name)
}

/// `<pods_dir>/<uid>/volume-subpaths/<volume>/<container>/<index>`: where the opened subPath
/// of the container's `index`-th volume mount is bound.
fn subpath_target(
    pods_dir: &Path,
    uid: &str,
    volume: &str,
    container: &str,
    index: usize,
) -> Result<PathBuf, PathError> {
    safe_path::beneath(
        pods_dir,
        &[
            uid,
            safe_path::SUBPATHS_DIR,
            volume,
            container,
            &index.to_string(),
        ],
    )
}

/// The kind of file at `path` (symlinks followed, as kubelet's `GetFileType`), in the
/// words of `HostPathType`.
fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "Directory"
    } else if t.is_file() {
        "File"
    } else if t.is_socket() {
        "Socket"
    } else if t.is_char_device() {
        "CharDevice"
    } else if t.is_block_device() {
        "BlockDevice"
    } else {
        "FIFO"
    }
}

/// kubelet's hostPath `checkType`: the `*OrCreate` types create what is missing (a
/// directory with its parents, or an empty file whose parent must exist), then every
/// typed volume must be the kind of file it names.
fn check_host_path(hp: &HostPathVolumeSource) -> Result<PathBuf, VolumeError> {
    let path = PathBuf::from(&hp.path);
    let io_err = |source| VolumeError::HostPathIo {
        path: path.clone(),
        source,
    };
    let (expected, description) = match hp.type_.as_deref().unwrap_or("") {
        "" => return Ok(path),
        "DirectoryOrCreate" => {
            if !path.exists() {
                std::fs::create_dir_all(&path).map_err(io_err)?;
            }
            ("Directory", "directory")
        }
        "FileOrCreate" => {
            if !path.exists() {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(io_err)?;
            }
            ("File", "file")
        }
        "Directory" => ("Directory", "directory"),
        "File" => ("File", "file"),
        "Socket" => ("Socket", "socket file"),
        "CharDevice" => ("CharDevice", "character device"),
        "BlockDevice" => ("BlockDevice", "block device"),
        other => {
            return Err(VolumeError::HostPathIo {
                path,
                source: std::io::Error::other(format!("{other} is an invalid volume type")),
            });
        }
    };
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(VolumeError::HostPathMissing(path));
        }
        Err(e) => return Err(io_err(e)),
    };
    let actual = file_kind(&meta);
    if actual != expected {
        return Err(VolumeError::HostPathType {
            path,
            expected: description,
            actual,
        });
    }
    Ok(path)
}

/// The plugin directory names kubelet uses below `<pod>/volumes`.
const EMPTY_DIR: &str = "kubernetes.io~empty-dir";
const DOWNWARD_API: &str = "kubernetes.io~downward-api";
const PROJECTED: &str = "kubernetes.io~projected";

/// Where a volume comes from on the host, and whether it must be mounted read-only.
pub(super) struct HostVolume {
    path: PathBuf,
    read_only: bool,
}

/// The host path backing one volume, created (and for `downwardAPI`, written) when
/// needed. A new emptyDir is given to the pod's `fsGroup` (kubelet's `SetVolumeOwnership`).
fn host_path_of(
    volume: &Volume,
    pod: &Pod,
    pods_dir: &Path,
    objects: Option<&PodObjects>,
    allocatable: &NodeResources,
) -> Result<HostVolume, VolumeError> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    if let Some(hp) = &volume.host_path {
        return check_host_path(hp).map(|path| HostVolume {
            path,
            read_only: false,
        });
    }
    if let Some(src) = &volume.persistent_volume_claim {
        let bound = PodObjects::claim(objects, &src.claim_name).map_err(VolumeError::Unbound)?;
        return claim_host_volume(&bound, src.read_only.unwrap_or(false));
    }
    if let Some(ed) = &volume.empty_dir {
        let path = empty_dir_path(pods_dir, uid, &volume.name)?;
        let dir_err = |source| VolumeError::EmptyDir {
            path: path.clone(),
            source,
        };
        let fresh = !path.exists();
        std::fs::create_dir_all(&path).map_err(dir_err)?;
        match ed.medium.as_deref().unwrap_or("") {
            "" => {}
            "Memory" => mount_tmpfs(&volume.name, &path, tmpfs_size(pod, ed, allocatable), None)?,
            other => {
                return Err(VolumeError::Medium {
                    volume: volume.name.clone(),
                    medium: other.to_string(),
                });
            }
        }
        // kubelet's setupDir: world-writable, so a container of any user can use it
        // (a fresh tmpfs is 1777 already).
        set_mode_if_other(&path, 0o777).map_err(dir_err)?;
        let fs_group = (pod.spec.as_ref())
            .and_then(|s| s.security_context.as_ref())
            .and_then(|sc| sc.fs_group);
        if let Some(gid) = fs_group.filter(|_| fresh) {
            crate::podenv::set_volume_ownership(&path, gid, false).map_err(dir_err)?;
        }
        return Ok(HostVolume {
            path,
            read_only: false,
        });
    }
    if let Some((plugin, payload)) = downward_payload(volume, pod, allocatable)? {
        let path = crate::pod::volume_dir(pods_dir, uid, plugin, &volume.name)?;
        write_payload(&volume.name, &path, &payload)?;
        // Always read-only, as kubelet mounts API data volumes since v1.10.
        return Ok(HostVolume {
            path,
            read_only: true,
        });
    }
    let written = object_volumes::write(volume, pod, pods_dir, objects, allocatable, false)?;
    if let Some((path, _)) = written {
        return Ok(HostVolume {
            path,
            read_only: true,
        });
    }
    Err(VolumeError::Unsupported(volume.name.clone()))
}

/// The host directory behind a bound claim's volume: a `hostPath` volume (with its
/// type checked, as the hostPath plugin does) or a `local` one (which must exist);
/// read-only when the pod's volume says so. Other sources have no node plugin here:
/// CSI needs the driver's node plugin, which oxlet does not run, and kubelet's
/// words for a driver it does not know say so.
pub(super) fn claim_host_volume(
    bound: &crate::objects::BoundClaim,
    read_only: bool,
) -> Result<HostVolume, VolumeError> {
    let pv = &bound.volume;
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    let spec = pv.spec.as_ref();
    if let Some(hp) = spec.and_then(|s| s.host_path.as_ref()) {
        let hp = HostPathVolumeSource {
            path: hp.path.clone(),
            type_: hp.type_.clone(),
        };
        return check_host_path(&hp).map(|path| HostVolume { path, read_only });
    }
    if let Some(local) = spec.and_then(|s| s.local.as_ref()) {
        let path = PathBuf::from(&local.path);
        if !path.is_dir() {
            return Err(VolumeError::Claim(format!(
                "MountVolume.NewMounter initialization failed for volume {name:?} : path {:?} does not exist",
                local.path
            )));
        }
        return Ok(HostVolume { path, read_only });
    }
    if let Some(csi) = spec.and_then(|s| s.csi.as_ref()) {
        return Err(VolumeError::Claim(format!(
            "MountVolume.MountDevice failed for volume {name:?} : kubernetes.io/csi: attacher.MountDevice failed to create newCsiDriverClient: driver name {} not found in the list of registered CSI drivers (oxlet runs no CSI node plugins)",
            csi.driver
        )));
    }
    Err(VolumeError::Claim(format!(
        "volume {name:?}: only hostPath and local persistent volumes can be mounted by oxlet (no node plugin for its source)"
    )))
}

/// Sets `path`'s permission bits to `mode` unless they are already (kubelet's
/// `setupDir` compares `Perm()` only, so a sticky tmpfs or an fsGroup's setgid stays).
fn set_mode_if_other(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

pub(super) fn write_payload(
    volume: &str,
    path: &Path,
    payload: &Payload,
) -> Result<bool, VolumeError> {
    let err = |source| VolumeError::AtomicWrite {
        volume: volume.to_string(),
        source,
    };
    std::fs::create_dir_all(path).map_err(|source| {
        err(AtomicWriteError::Io {
            path: path.to_path_buf(),
            source,
        })
    })?;
    atomic_writer::write(path, payload).map_err(err)
}

/// kubelet's default file mode of API data volumes (`0644`).
pub(super) const DEFAULT_MODE: i32 = 0o644;

/// The files of a `downwardAPI` volume (or a `projected` one whose sources are all
/// `downwardAPI`), with the plugin directory it lives in; `None` for other volumes
/// (projected volumes with API-object sources are `object_volumes`' job).
fn downward_payload(
    volume: &Volume,
    pod: &Pod,
    allocatable: &NodeResources,
) -> Result<Option<(&'static str, Payload)>, VolumeError> {
    let (plugin, default_mode, sources) = if let Some(d) = &volume.downward_api {
        (DOWNWARD_API, d.default_mode, vec![d.items.as_deref()])
    } else if let Some(p) = &volume.projected {
        let mut items = Vec::new();
        for source in p.sources.iter().flatten() {
            match &source.downward_api {
                Some(d) => items.push(d.items.as_deref()),
                None => return Ok(None),
            }
        }
        (PROJECTED, p.default_mode, items)
    } else {
        return Ok(None);
    };
    let mut payload = Payload::new();
    for items in sources {
        downward_items(volume, items, default_mode, pod, allocatable, &mut payload)?;
    }
    Ok(Some((plugin, payload)))
}

/// Adds the files of one list of downwardAPI items to `payload`.
pub(super) fn downward_items(
    volume: &Volume,
    items: Option<&[DownwardAPIVolumeFile]>,
    default_mode: Option<i32>,
    pod: &Pod,
    allocatable: &NodeResources,
    payload: &mut Payload,
) -> Result<(), VolumeError> {
    for (index, item) in items.unwrap_or_default().iter().enumerate() {
        let err = |source| VolumeError::Downward {
            volume: volume.name.clone(),
            index,
            source,
        };
        let value = if let Some(fr) = &item.field_ref {
            crate::podenv::metadata_field(pod, &fr.field_path).map_err(err)?
        } else if let Some(rf) = &item.resource_field_ref {
            let name = rf.container_name.as_deref().unwrap_or("");
            let c = crate::podenv::find_container(pod, name)
                .ok_or_else(|| err(DownwardError::NoContainer(name.to_string())))?;
            crate::podenv::resource_value(c, rf, allocatable).map_err(err)?
        } else {
            String::new()
        };
        let mode = item.mode.or(default_mode).unwrap_or(DEFAULT_MODE);
        // The API's range for file modes; anything else is refused, never masked.
        let mode = u32::try_from(mode)
            .ok()
            .filter(|m| *m <= 0o777)
            .ok_or_else(|| err(DownwardError::Mode(mode)))?;
        payload.insert(
            item.path.clone(),
            FileProjection {
                data: value.into_bytes(),
                mode,
                fs_user: None,
            },
        );
    }
    Ok(())
}

/// Re-writes the pod's `downwardAPI` volumes that exist already, so changed labels and
/// annotations reach running containers (kubelet re-projects them on each sync). A
/// volume whose content is unchanged is not touched. Returns the volumes rewritten.
pub(crate) fn refresh_downward_volumes(
    pod: &Pod,
    pods_dir: &Path,
    allocatable: &NodeResources,
) -> Result<Vec<String>, VolumeError> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    let mut written = Vec::new();
    for volume in volumes.unwrap_or_default() {
        let Some((plugin, payload)) = downward_payload(volume, pod, allocatable)? else {
            continue;
        };
        let path = crate::pod::volume_dir(pods_dir, uid, plugin, &volume.name)?;
        if path.is_dir() && write_payload(&volume.name, &path, &payload)? {
            written.push(volume.name.clone());
        }
    }
    Ok(written)
}

/// kubelet's `calculateEmptyDirMemorySize`: node allocatable memory, or the pod's memory
/// limit when it has one below that, or the volume's `sizeLimit` when below both.
/// `None` leaves the kernel's default (half of RAM).
pub(super) fn tmpfs_size(
    pod: &Pod,
    ed: &EmptyDirVolumeSource,
    allocatable: &NodeResources,
) -> Option<i64> {
    let mut size = allocatable.memory_bytes;
    if let Ok((limits, declared)) = crate::cm::pod_limits(pod)
        && declared.memory
        && let Some(l) = limits.memory_bytes
        && l > 0
        && l <= size
    {
        size = l;
    }
    if let Some(l) = ed
        .size_limit
        .as_ref()
        .and_then(|q| crate::quantity::bytes(q).ok())
        && l > 0
        && l <= size
    {
        size = l;
    }
    (size > 0).then_some(size)
}

/// Mounts a tmpfs at `path` (kubelet's `setupTmpfs`), unless one is there already.
pub(super) fn mount_tmpfs(
    volume: &str,
    path: &Path,
    size: Option<i64>,
    mode: Option<u32>,
) -> Result<(), VolumeError> {
    let err = |source| VolumeError::Tmpfs {
        volume: volume.to_string(),
        path: path.to_path_buf(),
        source,
    };
    if safe_path::mounts_at_or_below(path)
        .map_err(err)?
        .iter()
        .any(|m| m == path)
    {
        return Ok(());
    }
    let options = [
        size.map(|s| format!("size={s}")),
        mode.map(|m| format!("mode={m:o}")),
    ];
    let options = options.into_iter().flatten().collect::<Vec<_>>().join(",");
    let options = std::ffi::CString::new(options).map_err(|e| err(std::io::Error::other(e)))?;
    rustix::mount::mount(
        "tmpfs",
        path,
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        Some(options.as_c_str()),
    )
    .map_err(|e| err(e.into()))
}

/// Detaches the tmpfs of each Memory emptyDir, secret and projected volume of the pod whose directory is `pod_dir`
/// (`<pods>/<uid>`), so that the directory can be removed: the removal never deletes
/// through a mount. Only mounts exactly at `volumes/kubernetes.io~empty-dir/<name>`,
/// where oxlet puts them, are detached; anything else stays and refuses the removal.
pub(crate) fn unmount_pod_volumes(pod_dir: &Path) -> std::io::Result<()> {
    for plugin in [EMPTY_DIR, object_volumes::SECRET, object_volumes::PROJECTED] {
        let dir = pod_dir.join(crate::pod::VOLUMES_DIR).join(plugin);
        for m in safe_path::mounts_at_or_below(&dir)? {
            if m.parent() == Some(dir.as_path()) {
                safe_path::detach(&m)?;
            }
        }
    }
    Ok(())
}

/// Tears down the volumes of a terminated pod whose object may stay (kubelet's volume
/// manager unmounts every terminated pod's volumes, and an emptyDir's teardown deletes
/// its content): detaches oxlet's tmpfs and subPath mounts, then removes
/// `<pods>/<uid>/volumes` and `<pods>/<uid>/volume-subpaths`. The rest of the pod's
/// directory stays until the pod is deleted. Returns whether anything was removed.
pub(crate) fn tear_down_pod_volumes(pods_dir: &Path, uid: &str) -> std::io::Result<bool> {
    let pod_dir = crate::pod::pod_dir(pods_dir, uid)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    unmount_pod_volumes(&pod_dir)?;
    let mut removed = false;
    for sub in [crate::pod::VOLUMES_DIR, safe_path::SUBPATHS_DIR] {
        removed |= safe_path::remove_beneath(pods_dir, &pod_dir.join(sub))?;
    }
    Ok(removed)
}

/// Opens `sub` below the volume at `volume_path` (creating missing directories below it,
/// as kubelet does) and binds what was opened at `target`.
fn bind_sub_path(
    volume: &str,
    volume_path: &Path,
    sub: &str,
    target: &Path,
) -> Result<PathBuf, VolumeError> {
    let sub_err = |source| VolumeError::SubPath {
        volume: volume.to_string(),
        sub_path: sub.to_string(),
        source,
    };
    let rel = safe_path::relative(sub).map_err(|e| VolumeError::SubPath {
        volume: volume.to_string(),
        sub_path: sub.to_string(),
        source: BeneathError::Invalid(e),
    })?;
    let base = safe_path::open_dir(volume_path).map_err(|e| sub_err(e.into()))?;
    let opened = match safe_path::open_beneath(&base, rel) {
        Err(BeneathError::NotFound) => {
            safe_path::make_dirs_beneath(&base, rel).map_err(sub_err)?;
            safe_path::open_beneath(&base, rel)
        }
        other => other,
    }
    .map_err(sub_err)?;
    safe_path::bind_fd(&opened, target).map_err(|source| VolumeError::SubPathMount {
        volume: volume.to_string(),
        sub_path: sub.to_string(),
        source,
    })?;
    Ok(target.to_path_buf())
}

/// kubelet's `translateMountPropagation`, with its API rule that only a privileged
/// container may use `Bidirectional`.
fn propagation(vm: &VolumeMount, privileged: bool) -> Result<i32, VolumeError> {
    use cri::MountPropagation as P;
    Ok(match vm.mount_propagation.as_deref() {
        None | Some("None") => P::PropagationPrivate as i32,
        Some("HostToContainer") => P::PropagationHostToContainer as i32,
        Some("Bidirectional") if privileged => P::PropagationBidirectional as i32,
        Some("Bidirectional") => {
            return Err(VolumeError::BidirectionalUnprivileged(vm.name.clone()));
        }
        Some(other) => {
            return Err(VolumeError::Propagation {
                volume: vm.name.clone(),
                mode: other.to_string(),
            });
        }
    })
}

/// What the runtime and the sync add to a container's mounts: whether the pod's
/// runtime handler makes recursive read-only mounts, and the image each image volume
/// was pulled as (volume name → image reference).
#[derive(Debug, Default)]
pub(crate) struct MountFeatures {
    pub supports_rro: bool,
    pub image_volumes: std::collections::HashMap<String, String>,
}

/// An image volume's mount (`volumes[].image`, beta and on by default since 1.35):
/// the runtime mounts the pulled image itself, read-only, at the mount path; there is
/// no host path. A `subPath` into it needs the CRI's `image_sub_path` (CRI 1.33),
/// which the CRI API oxlet is built on does not carry yet, so it is refused rather
/// than silently mounting the whole image.
fn image_mount(
    vm: &VolumeMount,
    features: &MountFeatures,
    envs: &[(String, String)],
    propagation: i32,
) -> Result<cri::Mount, VolumeError> {
    if let Some(sub) = sub_path_of(vm, envs)? {
        return Err(VolumeError::ImageSubPath {
            volume: vm.name.clone(),
            sub_path: sub,
        });
    }
    let image = features
        .image_volumes
        .get(&vm.name)
        .ok_or_else(|| VolumeError::NoSuchVolume(vm.name.clone()))?;
    Ok(cri::Mount {
        container_path: vm.mount_path.clone(),
        readonly: true,
        propagation,
        image: Some(cri::ImageSpec {
            image: image.clone(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// kubelet's `resolveRecursiveReadOnly`: whether the mount is recursively read-only
/// (`recursiveReadOnly`, GA in 1.33). `Enabled` needs a read-only mount without
/// propagation and a runtime handler that supports it (`supported`, from the CRI
/// status); `IfPossible` is recursive only where the runtime can; unset or
/// `Disabled` is not. The errors are kubelet's words.
pub(crate) fn resolve_recursive_read_only(
    vm: &VolumeMount,
    supported: bool,
) -> Result<bool, RecursiveReadOnlyError> {
    let mode = match vm.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    let name = &vm.name;
    if vm.read_only != Some(true) {
        return Err(RecursiveReadOnlyError::NotReadOnly(name.clone()));
    }
    if let Some(p) = vm.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(RecursiveReadOnlyError::Propagation {
            volume: name.clone(),
            propagation: p.to_string(),
        });
    }
    match mode {
        "IfPossible" => Ok(supported),
        "Enabled" if supported => Ok(true),
        "Enabled" => Err(RecursiveReadOnlyError::Unsupported(name.clone())),
        other => Err(RecursiveReadOnlyError::UnknownMode(other.to_string())),
    }
}

/// Why a mount cannot be recursively read-only, in kubelet's words.
#[derive(Debug, PartialEq, thiserror::Error)]
pub(crate) enum RecursiveReadOnlyError {
    #[error("volume {0:?} requested recursive read-only mode, but it is not read-only")]
    NotReadOnly(String),
    #[error(
        "volume {volume:?} requested recursive read-only mode, but it is not compatible with propagation {propagation:?}"
    )]
    Propagation { volume: String, propagation: String },
    #[error(
        "volume {0:?} requested recursive read-only mode, but it is not supported by the runtime"
    )]
    Unsupported(String),
    #[error("unknown recursive read-only mode {0:?}")]
    UnknownMode(String),
}

/// The subPath of a mount: `subPath` as written, or `subPathExpr` with `$(VAR)` expanded
/// from the container's environment (kubelet's `ExpandContainerVolumeMounts`). The result is
/// pod input either way and is checked again before use.
fn sub_path_of(vm: &VolumeMount, envs: &[(String, String)]) -> Result<Option<String>, VolumeError> {
    if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
        return Ok(Some(sub.to_string()));
    }
    let Some(expr) = vm.sub_path_expr.as_deref().filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let lookup = |k: &str| envs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let max = crate::podenv::MAX_EXPANDED_LEN;
    crate::podenv::expand(expr, lookup, max)
        .map(Some)
        .map_err(|_| VolumeError::SubPathExprTooLong {
            volume: vm.name.clone(),
            expr: expr.to_string(),
            max,
        })
}

/// The CRI mounts of one container (`envs`: its environment, for `subPathExpr`). An error
/// is a `CreateContainerConfigError`; the subPath mounts it leaves behind are detached
/// when the pod directory is removed.
pub(crate) fn container_mounts(
    pod: &Pod,
    container: &Container,
    pods_dir: &Path,
    envs: &[(String, String)],
    objects: Option<&PodObjects>,
    allocatable: &NodeResources,
    features: &MountFeatures,
) -> Result<Vec<cri::Mount>, VolumeError> {
    let privileged = container
        .security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false);
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut mounts = Vec::new();
    for (index, vm) in container.volume_mounts.iter().flatten().enumerate() {
        let volume = volumes
            .iter()
            .find(|v| v.name == vm.name)
            .ok_or_else(|| VolumeError::NoSuchVolume(vm.name.clone()))?;
        let propagation = propagation(vm, privileged)?;
        let recursive_read_only = resolve_recursive_read_only(vm, features.supports_rro)
            .map_err(VolumeError::RecursiveReadOnly)?;
        if volume.image.is_some() {
            mounts.push(image_mount(vm, features, envs, propagation)?);
            continue;
        }
        let HostVolume {
            path: mut host,
            read_only,
        } = host_path_of(volume, pod, pods_dir, objects, allocatable)?;
        if let Some(sub) = sub_path_of(vm, envs)? {
            let target = subpath_target(pods_dir, uid, &volume.name, &container.name, index)?;
            host = bind_sub_path(&volume.name, &host, &sub, &target)?;
        }
        mounts.push(cri::Mount {
            container_path: vm.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            readonly: vm.read_only.unwrap_or(false) || read_only,
            recursive_read_only,
            propagation,
            ..Default::default()
        });
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        DownwardAPIVolumeFile, DownwardAPIVolumeSource, ObjectFieldSelector, PodSpec,
        ResourceFieldSelector, SecurityContext,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    const NODE: NodeResources = NodeResources {
        cpu_milli: 2000,
        memory_bytes: 1 << 30,
        ephemeral_storage_bytes: 1 << 40,
        pods: 110,
    };

    fn memory_dir(name: &str, limit: Option<&str>) -> Volume {
        Volume {
            name: name.into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: limit.map(|l| Quantity(l.into())),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn downward_volume(items: Vec<DownwardAPIVolumeFile>) -> Volume {
        Volume {
            name: "info".into(),
            downward_api: Some(DownwardAPIVolumeSource {
                default_mode: Some(0o600),
                items: Some(items),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn field_item(path: &str, field: &str) -> DownwardAPIVolumeFile {
        DownwardAPIVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                field_path: field.into(),
                api_version: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn downward_volumes_are_written_read_only_and_refreshed() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let mut items = vec![
            field_item("labels", "metadata.labels"),
            field_item("name", "metadata.name"),
        ];
        items.push(DownwardAPIVolumeFile {
            path: "limits/mem".into(),
            resource_field_ref: Some(ResourceFieldSelector {
                container_name: Some("c".into()),
                resource: "limits.memory".into(),
                divisor: Some(Quantity("1Mi".into())),
            }),
            mode: Some(0o640),
            ..Default::default()
        });
        let mut p = pod("u9", vec![downward_volume(items)]);
        p.metadata.name = Some("web".into());
        p.metadata.labels = Some(BTreeMap::from([("a".to_string(), "1".to_string())]));
        let c = container(vec![mount("info", "/etc/info", None)]);
        p.spec.as_mut().unwrap().containers = vec![c.clone()];
        // Nothing to refresh before the volume was set up.
        assert!(
            refresh_downward_volumes(&p, &pods, &NODE)
                .unwrap()
                .is_empty()
        );
        let m =
            container_mounts(&p, &c, &pods, &[], None, &NODE, &MountFeatures::default()).unwrap();
        assert!(m[0].readonly, "API data volumes are always read-only");
        let dir = pods.join("u9/volumes/kubernetes.io~downward-api/info");
        assert_eq!(m[0].host_path, dir.to_string_lossy());
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(read("labels"), "a=\"1\"");
        assert_eq!(read("name"), "web");
        assert_eq!(read("limits/mem"), "1024");
        let mode = |f: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777
        };
        assert_eq!(mode("name"), 0o600);
        assert_eq!(mode("limits/mem"), 0o640);
        assert!(
            refresh_downward_volumes(&p, &pods, &NODE)
                .unwrap()
                .is_empty()
        );
        p.metadata.labels = Some(BTreeMap::from([("a".to_string(), "2".to_string())]));
        assert_eq!(
            refresh_downward_volumes(&p, &pods, &NODE).unwrap(),
            ["info"]
        );
        assert_eq!(read("labels"), "a=\"2\"");

        // A mode out of the API's range is refused, not masked.
        let mut item = field_item("n", "metadata.name");
        item.mode = Some(0o1777);
        let odd = pod("u14", vec![downward_volume(vec![item])]);
        let err = container_mounts(&odd, &c, &pods, &[], None, &NODE, &MountFeatures::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume \"info\": items[0]: mode: 0o1777 must be a number between 0 and 0777 (octal)"
        );

        // An escaping item path is an error naming the volume; nothing is written.
        let bad = pod(
            "u10",
            vec![downward_volume(vec![field_item("../x", "metadata.name")])],
        );
        let err = container_mounts(&bad, &c, &pods, &[], None, &NODE, &MountFeatures::default())
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("volume \"info\": item path \"../x\""),
            "{err}"
        );
        assert!(!tmp.path().join("pods/u10/volumes/x").exists());
    }

    #[test]
    fn projected_downward_sources_share_one_volume_and_other_sources_are_refused() {
        use k8s_openapi::api::core::v1::{
            ConfigMapProjection, ProjectedVolumeSource, VolumeProjection,
        };
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let source = |item| VolumeProjection {
            downward_api: Some(k8s_openapi::api::core::v1::DownwardAPIProjection {
                items: Some(vec![item]),
            }),
            ..Default::default()
        };
        let projected = |sources| Volume {
            name: "proj".into(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(0o444),
                sources: Some(sources),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut p = pod(
            "u15",
            vec![projected(vec![
                source(field_item("name", "metadata.name")),
                source(field_item("uid", "metadata.uid")),
            ])],
        );
        p.metadata.name = Some("web".into());
        let c = container(vec![mount("proj", "/p", None)]);
        let m =
            container_mounts(&p, &c, &pods, &[], None, &NODE, &MountFeatures::default()).unwrap();
        assert!(m[0].readonly);
        let dir = pods.join("u15/volumes/kubernetes.io~projected/proj");
        assert_eq!(std::fs::read_to_string(dir.join("name")).unwrap(), "web");
        assert_eq!(std::fs::read_to_string(dir.join("uid")).unwrap(), "u15");

        let cm = VolumeProjection {
            config_map: Some(ConfigMapProjection::default()),
            ..Default::default()
        };
        let p = pod("u16", vec![projected(vec![cm])]);
        let err = container_mounts(&p, &c, &pods, &[], None, &NODE, &MountFeatures::default())
            .unwrap_err();
        assert!(
            matches!(err, VolumeError::Unsupported(ref v) if v == "proj"),
            "{err}"
        );
    }

    #[test]
    fn bidirectional_propagation_needs_a_privileged_container() {
        let mut vm = mount("d", "/d", None);
        vm.mount_propagation = Some("Bidirectional".into());
        assert_eq!(
            propagation(&vm, false).unwrap_err().to_string(),
            "volume mount \"d\": mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers"
        );
        assert_eq!(
            propagation(&vm, true).unwrap(),
            cri::MountPropagation::PropagationBidirectional as i32
        );
        vm.mount_propagation = Some("HostToContainer".into());
        assert_eq!(
            propagation(&vm, false).unwrap(),
            cri::MountPropagation::PropagationHostToContainer as i32
        );
        vm.mount_propagation = Some("Sideways".into());
        assert!(propagation(&vm, true).is_err());
        vm.mount_propagation = None;
        assert_eq!(
            propagation(&vm, false).unwrap(),
            cri::MountPropagation::PropagationPrivate as i32
        );
        // Through container_mounts, the privileged flag comes from the container.
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let ed = Volume {
            name: "d".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        };
        let p = pod("u11", vec![ed]);
        let mut vm = mount("d", "/d", None);
        vm.mount_propagation = Some("Bidirectional".into());
        let mut c = container(vec![vm]);
        assert!(
            container_mounts(&p, &c, &pods, &[], None, &NODE, &MountFeatures::default()).is_err()
        );
        c.security_context = Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        });
        assert_eq!(
            container_mounts(&p, &c, &pods, &[], None, &NODE, &MountFeatures::default())
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn memory_empty_dir_size_as_kubelet() {
        let ed = |l: Option<&str>| memory_dir("m", l).empty_dir.unwrap();
        let p = pod("u", vec![]);
        assert_eq!(tmpfs_size(&p, &ed(None), &NODE), Some(1 << 30));
        assert_eq!(tmpfs_size(&p, &ed(Some("64Mi")), &NODE), Some(64 << 20));
        // A sizeLimit above allocatable is ignored.
        assert_eq!(tmpfs_size(&p, &ed(Some("2Gi")), &NODE), Some(1 << 30));
        assert_eq!(tmpfs_size(&p, &ed(None), &NodeResources::default()), None);
        // A pod memory limit below allocatable bounds it.
        let mut limited = pod("u", vec![]);
        let mut c = container(vec![]);
        c.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("128Mi".into()),
            )])),
            ..Default::default()
        });
        limited.spec.as_mut().unwrap().containers = vec![c];
        assert_eq!(tmpfs_size(&limited, &ed(None), &NODE), Some(128 << 20));
        assert_eq!(tmpfs_size(&limited, &ed(Some("1Mi")), &NODE), Some(1 << 20));
    }

    #[test]
    fn memory_empty_dir_is_a_tmpfs_unmounted_before_removal() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let p = pod("u12", vec![memory_dir("m", Some("8Mi"))]);
        let c = container(vec![mount("m", "/m", None)]);
        let m =
            container_mounts(&p, &c, &pods, &[], None, &NODE, &MountFeatures::default()).unwrap();
        let dir = pods.join("u12/volumes/kubernetes.io~empty-dir/m");
        assert_eq!(m[0].host_path, dir.to_string_lossy());
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let line = mounts
            .lines()
            .find(|l| l.split(' ').nth(1) == Some(dir.to_str().unwrap()))
            .expect("tmpfs mounted");
        assert!(line.starts_with("tmpfs "), "{line}");
        assert!(line.contains("size=8192k"), "{line}");
        // A second container start mounts nothing more.
        container_mounts(&p, &c, &pods, &[], None, &NODE, &MountFeatures::default()).unwrap();
        assert_eq!(safe_path::mounts_at_or_below(&dir).unwrap().len(), 1);
        // The removal refuses to cross it until it is unmounted.
        assert!(safe_path::remove_beneath(&pods, &pods.join("u12")).is_err());
        unmount_pod_volumes(&pods.join("u12")).unwrap();
        assert!(safe_path::remove_beneath(&pods, &pods.join("u12")).unwrap());
        assert!(safe_path::mounts_at_or_below(&pods).unwrap().is_empty());
        // An unsupported medium is a clear error.
        let mut v = memory_dir("h", None);
        v.empty_dir.as_mut().unwrap().medium = Some("HugePages".into());
        let p = pod("u13", vec![v]);
        let err = container_mounts(
            &p,
            &container(vec![mount("h", "/h", None)]),
            &pods,
            &[],
            None,
            &NODE,
            &MountFeatures::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "volume \"h\": emptyDir medium \"HugePages\" is not supported by oxlet"
        );
    }

    fn host_path(path: &Path, type_: &str) -> HostPathVolumeSource {
        HostPathVolumeSource {
            path: path.to_string_lossy().into(),
            type_: Some(type_.into()),
        }
    }

    fn pod(uid: &str, volumes: Vec<Volume>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(volumes),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn mount(name: &str, path: &str, sub: Option<&str>) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            sub_path: sub.map(Into::into),
            ..Default::default()
        }
    }

    fn container(mounts: Vec<VolumeMount>) -> Container {
        Container {
            name: "c".into(),
            volume_mounts: Some(mounts),
            ..Default::default()
        }
    }

    #[test]
    fn a_terminated_pods_volumes_are_torn_down_and_the_rest_of_its_directory_stays() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let disk = Volume {
            name: "d".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        };
        let p = pod("u14", vec![disk, memory_dir("m", Some("8Mi"))]);
        let c = container(vec![mount("d", "/d", Some("sub")), mount("m", "/m", None)]);
        container_mounts(&p, &c, &pods, &[], None, &NODE, &MountFeatures::default()).unwrap();
        let volumes = pods.join("u14/volumes");
        std::fs::write(
            volumes.join("kubernetes.io~empty-dir/d/sub/data"),
            [0u8; 4096],
        )
        .unwrap();
        std::fs::write(pods.join("u14/etc-hosts"), b"127.0.0.1 localhost\n").unwrap();
        assert_eq!(safe_path::mounts_at_or_below(&pods).unwrap().len(), 2);

        assert!(tear_down_pod_volumes(&pods, "u14").unwrap());
        assert!(!volumes.exists(), "the emptyDirs' content is gone");
        assert!(!pods.join("u14").join(safe_path::SUBPATHS_DIR).exists());
        assert!(safe_path::mounts_at_or_below(&pods).unwrap().is_empty());
        assert!(
            pods.join("u14/etc-hosts").is_file(),
            "the pod directory stays"
        );
        // Nothing left: a second teardown (a retried sync) removes nothing.
        assert!(!tear_down_pod_volumes(&pods, "u14").unwrap());
        assert!(
            tear_down_pod_volumes(&pods, "..").is_err(),
            "a UID is one name"
        );
    }

    #[test]
    fn recursive_read_only_is_resolved_as_kubelet_does() {
        let rro = |mode: Option<&str>, ro: bool, prop: Option<&str>, supported: bool| {
            let mut m = mount("v", "/v", None);
            m.recursive_read_only = mode.map(Into::into);
            m.read_only = Some(ro);
            m.mount_propagation = prop.map(Into::into);
            resolve_recursive_read_only(&m, supported).map_err(|e| e.to_string())
        };
        assert_eq!(rro(None, true, None, true), Ok(false));
        assert_eq!(rro(Some("Disabled"), true, None, true), Ok(false));
        assert_eq!(rro(Some("IfPossible"), true, None, true), Ok(true));
        assert_eq!(rro(Some("IfPossible"), true, None, false), Ok(false));
        assert_eq!(rro(Some("Enabled"), true, Some("None"), true), Ok(true));
        assert_eq!(
            rro(Some("Enabled"), true, None, false),
            Err("volume \"v\" requested recursive read-only mode, but it is not supported by the runtime".into())
        );
        assert!(
            rro(Some("Enabled"), false, None, true)
                .unwrap_err()
                .ends_with("but it is not read-only")
        );
        assert!(
            rro(Some("IfPossible"), true, Some("HostToContainer"), true)
                .unwrap_err()
                .contains("not compatible with propagation \"HostToContainer\"")
        );
        // The CRI mount carries it; a mount that cannot have it fails the config.
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let pod = pod(
            "u9",
            vec![Volume {
                name: "e".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }],
        );
        let mut m = mount("e", "/ro", None);
        m.read_only = Some(true);
        m.recursive_read_only = Some("Enabled".into());
        let c = container(vec![m]);
        let rro = MountFeatures {
            supports_rro: true,
            ..Default::default()
        };
        let made = container_mounts(&pod, &c, &pods, &[], None, &NODE, &rro).unwrap();
        assert!(made[0].readonly && made[0].recursive_read_only);
        let err = container_mounts(&pod, &c, &pods, &[], None, &NODE, &MountFeatures::default())
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("failed to resolve recursive read-only mode: volume \"e\""),
            "{err}"
        );
    }

    #[test]
    fn host_path_and_empty_dir_mounts() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("data");
        let pod = pod(
            "u1",
            vec![
                Volume {
                    name: "h".into(),
                    host_path: Some(host_path(&host, "DirectoryOrCreate")),
                    ..Default::default()
                },
                Volume {
                    name: "e".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
            ],
        );
        let mut data = mount("h", "/data", None);
        data.read_only = Some(true);
        let c = container(vec![data, mount("e", "/scratch", Some("sub"))]);
        let pods = tmp.path().join("pods");
        let m = container_mounts(
            &pod,
            &c,
            &pods,
            &[],
            None,
            &NodeResources::default(),
            &MountFeatures::default(),
        )
        .unwrap();
        assert!(host.is_dir(), "DirectoryOrCreate created it");
        assert_eq!(m[0].container_path, "/data");
        assert_eq!(m[0].host_path, host.to_string_lossy());
        assert!(m[0].readonly);
        // The subPath is made inside the emptyDir and bound under volume-subpaths.
        let e = pods.join("u1/volumes/kubernetes.io~empty-dir/e/sub");
        assert!(e.is_dir());
        // kubelet's emptyDir is world-writable, for containers of any user.
        let ed_mode = std::fs::metadata(e.parent().unwrap())
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&ed_mode) & 0o7777,
            0o777
        );
        let target = pods.join("u1/volume-subpaths/e/c/1");
        assert_eq!(m[1].host_path, target.to_string_lossy());
        std::fs::write(e.join("f"), b"x").unwrap();
        assert!(target.join("f").exists(), "target shows the subPath");
        assert!(safe_path::remove_beneath(&pods, &pods.join("u1")).unwrap());
        assert!(safe_path::mounts_at_or_below(&pods).unwrap().is_empty());

        let mut missing = c.clone();
        missing.volume_mounts.as_mut().unwrap()[0].name = "nope".into();
        let err = container_mounts(
            &pod,
            &missing,
            &pods,
            &[],
            None,
            &NodeResources::default(),
            &MountFeatures::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn an_escaping_sub_path_is_refused_and_nothing_is_mounted() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let vol = tmp.path().join("vol");
        std::fs::create_dir(&vol).unwrap();
        std::os::unix::fs::symlink(&outside, vol.join("link")).unwrap();
        let pod = pod(
            "u2",
            vec![Volume {
                name: "h".into(),
                host_path: Some(host_path(&vol, "Directory")),
                ..Default::default()
            }],
        );
        let pods = tmp.path().join("pods");
        for sub in ["link", "link/deeper"] {
            let c = container(vec![mount("h", "/x", Some(sub))]);
            let err = container_mounts(
                &pod,
                &c,
                &pods,
                &[],
                None,
                &NodeResources::default(),
                &MountFeatures::default(),
            )
            .unwrap_err();
            assert!(matches!(err, VolumeError::SubPath { .. }), "{err}");
            let msg = err.to_string();
            assert!(
                msg.contains("\"h\"") && msg.contains(&format!("{sub:?}")),
                "{msg}"
            );
        }
        assert!(!outside.join("deeper").exists(), "nothing made outside");

        // subPathExpr expands from the environment and is held to the same rules.
        let envs = [
            ("DIR".to_string(), "link".to_string()),
            ("UP".to_string(), "..".to_string()),
        ];
        for expr in ["$(DIR)", "a/$(UP)/$(UP)/outside"] {
            let mut m = mount("h", "/x", None);
            m.sub_path_expr = Some(expr.into());
            let err = container_mounts(
                &pod,
                &container(vec![m]),
                &pods,
                &envs,
                None,
                &NodeResources::default(),
                &MountFeatures::default(),
            )
            .unwrap_err();
            assert!(matches!(err, VolumeError::SubPath { .. }), "{expr}: {err}");
        }
        let mut m = mount("h", "/x", None);
        m.sub_path_expr = Some("made-$(DIR)".into());
        let ok = container_mounts(
            &pod,
            &container(vec![m]),
            &pods,
            &envs,
            None,
            &NodeResources::default(),
            &MountFeatures::default(),
        )
        .unwrap();
        assert!(vol.join("made-link").is_dir(), "expanded and made inside");
        assert!(ok[0].host_path.ends_with("volume-subpaths/h/c/0"));
        assert!(safe_path::remove_beneath(&pods, &pods.join("u2")).unwrap());
        assert!(safe_path::mounts_at_or_below(&pods).unwrap().is_empty());
    }

    #[test]
    fn host_path_types_are_checked_as_kubelet_does() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("dir");
        let file = tmp.path().join("file");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(&file, b"").unwrap();
        let ok = |p: &Path, t: &str| check_host_path(&host_path(p, t));

        assert!(ok(&dir, "Directory").is_ok());
        assert!(ok(&file, "File").is_ok());
        assert!(ok(&dir, "").is_ok());
        assert!(
            ok(&tmp.path().join("nothing"), "").is_ok(),
            "untyped: no check"
        );
        assert!(ok(Path::new("/dev/null"), "CharDevice").is_ok());
        assert_eq!(
            ok(&file, "Directory").unwrap_err().to_string(),
            format!(
                "hostPath type check failed: {} is not a directory, it's a File",
                file.display()
            )
        );
        assert!(
            ok(&dir, "Socket")
                .unwrap_err()
                .to_string()
                .contains("is not a socket file, it's a Directory")
        );
        assert!(
            ok(&dir, "BlockDevice")
                .unwrap_err()
                .to_string()
                .contains("is not a block device")
        );
        assert!(matches!(
            ok(&tmp.path().join("gone"), "File"),
            Err(VolumeError::HostPathMissing(_))
        ));

        // *OrCreate make what is missing; FileOrCreate needs the parent, as in kubelet.
        let made = tmp.path().join("a/b");
        ok(&made, "DirectoryOrCreate").unwrap();
        assert!(made.is_dir());
        let f = tmp.path().join("new-file");
        ok(&f, "FileOrCreate").unwrap();
        assert!(f.is_file());
        assert!(ok(&tmp.path().join("no/parent"), "FileOrCreate").is_err());
        assert!(!tmp.path().join("no").exists());
        assert!(
            ok(&file, "DirectoryOrCreate").is_err(),
            "a file is not a dir"
        );
    }
}

//! Volume mounts for the volume types a static pod can use without an apiserver:
//! `hostPath` (with kubelet's type checks) and `emptyDir` (a directory under
//! `<root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`).
//!
//! A `subPath` is pod input pointing into a volume the pod can write to, so it is opened
//! below the volume without following a symlink out of it, and what was opened is
//! bind-mounted at `<root-dir>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>`
//! (kubelet's layout); that mount, never the name, is what the CRI gets.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, HostPathVolumeSource, Pod, Volume, VolumeMount};

use crate::safe_path::{self, BeneathError, PathError};

/// Why a container's mounts could not be prepared: a `CreateContainerConfigError`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VolumeError {
    #[error("volume mount {0:?}: no such volume")]
    NoSuchVolume(String),
    #[error("volume {0:?}: only hostPath and emptyDir volumes are supported by oxlet so far")]
    Unsupported(String),
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

fn empty_dir_path(pods_dir: &Path, uid: &str, name: &str) -> Result<PathBuf, PathError> {
    safe_path::beneath(pods_dir, &[uid, "volumes", "kubernetes.io~empty-dir", name])
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

/// The host path backing one volume, created when its type asks for it.
/// A new emptyDir is given to the pod's `fsGroup` (kubelet's `SetVolumeOwnership`).
fn host_path_of(
    volume: &Volume,
    pods_dir: &Path,
    uid: &str,
    fs_group: Option<i64>,
) -> Result<PathBuf, VolumeError> {
    if let Some(hp) = &volume.host_path {
        return check_host_path(hp);
    }
    if volume.empty_dir.is_some() {
        let path = empty_dir_path(pods_dir, uid, &volume.name)?;
        let fresh = !path.exists();
        let err = |source| VolumeError::EmptyDir {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&path).map_err(err)?;
        if let Some(gid) = fs_group.filter(|_| fresh) {
            super::security::set_volume_ownership(&path, gid).map_err(err)?;
        }
        return Ok(path);
    }
    Err(VolumeError::Unsupported(volume.name.clone()))
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

fn propagation(mode: Option<&str>) -> i32 {
    match mode {
        Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer as i32,
        Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional as i32,
        _ => cri::MountPropagation::PropagationPrivate as i32,
    }
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
    let max = super::container::MAX_EXPANDED_LEN;
    super::container::expand(expr, lookup, max)
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
) -> Result<Vec<cri::Mount>, VolumeError> {
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
        let fs_group = (pod.spec.as_ref())
            .and_then(|s| s.security_context.as_ref())
            .and_then(|sc| sc.fs_group);
        let mut host = host_path_of(volume, pods_dir, uid, fs_group)?;
        if let Some(sub) = sub_path_of(vm, envs)? {
            let target = subpath_target(pods_dir, uid, &volume.name, &container.name, index)?;
            host = bind_sub_path(&volume.name, &host, &sub, &target)?;
        }
        mounts.push(cri::Mount {
            container_path: vm.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            readonly: vm.read_only.unwrap_or(false),
            propagation: propagation(vm.mount_propagation.as_deref()),
            ..Default::default()
        });
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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
        let m = container_mounts(&pod, &c, &pods, &[]).unwrap();
        assert!(host.is_dir(), "DirectoryOrCreate created it");
        assert_eq!(m[0].container_path, "/data");
        assert_eq!(m[0].host_path, host.to_string_lossy());
        assert!(m[0].readonly);
        // The subPath is made inside the emptyDir and bound under volume-subpaths.
        let e = pods.join("u1/volumes/kubernetes.io~empty-dir/e/sub");
        assert!(e.is_dir());
        let target = pods.join("u1/volume-subpaths/e/c/1");
        assert_eq!(m[1].host_path, target.to_string_lossy());
        std::fs::write(e.join("f"), b"x").unwrap();
        assert!(target.join("f").exists(), "target shows the subPath");
        assert!(safe_path::remove_beneath(&pods, &pods.join("u1")).unwrap());
        assert!(safe_path::mounts_at_or_below(&pods).unwrap().is_empty());

        let mut missing = c.clone();
        missing.volume_mounts.as_mut().unwrap()[0].name = "nope".into();
        let err = container_mounts(&pod, &missing, &pods, &[]).unwrap_err();
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
            let err = container_mounts(&pod, &c, &pods, &[]).unwrap_err();
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
            let err = container_mounts(&pod, &container(vec![m]), &pods, &envs).unwrap_err();
            assert!(matches!(err, VolumeError::SubPath { .. }), "{expr}: {err}");
        }
        let mut m = mount("h", "/x", None);
        m.sub_path_expr = Some("made-$(DIR)".into());
        let ok = container_mounts(&pod, &container(vec![m]), &pods, &envs).unwrap();
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

//! Volume mounts for the volume types a static pod can use without an apiserver:
//! `hostPath` (with kubelet's create-if-missing types) and `emptyDir` (a directory
//! under `<root-dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`).

use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, Volume};

/// `<pods_dir>/<uid>`: the pod's own directory (emptyDir data lives below it).
pub fn pod_dir(pods_dir: &Path, uid: &str) -> PathBuf {
    pods_dir.join(uid)
}

fn empty_dir_path(pods_dir: &Path, uid: &str, name: &str) -> PathBuf {
    pod_dir(pods_dir, uid)
        .join("volumes")
        .join("kubernetes.io~empty-dir")
        .join(name)
}

/// The host path backing one volume, created when its type asks for it.
fn host_path_of(volume: &Volume, pods_dir: &Path, uid: &str) -> Result<PathBuf, String> {
    if let Some(hp) = &volume.host_path {
        let path = PathBuf::from(&hp.path);
        let exists = path.exists();
        match hp.type_.as_deref().unwrap_or("") {
            "" => {}
            "DirectoryOrCreate" if !exists => std::fs::create_dir_all(&path)
                .map_err(|e| format!("cannot create hostPath {}: {e}", path.display()))?,
            "FileOrCreate" if !exists => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
                }
                std::fs::File::create(&path)
                    .map_err(|e| format!("cannot create hostPath {}: {e}", path.display()))?;
            }
            "Directory" if !path.is_dir() => {
                return Err(format!(
                    "hostPath type check failed: {} is not a directory",
                    path.display()
                ));
            }
            "File" if !path.is_file() => {
                return Err(format!(
                    "hostPath type check failed: {} is not a file",
                    path.display()
                ));
            }
            "Socket" | "CharDevice" | "BlockDevice" if !exists => {
                return Err(format!(
                    "hostPath type check failed: {} does not exist",
                    path.display()
                ));
            }
            _ => {}
        }
        return Ok(path);
    }
    if volume.empty_dir.is_some() {
        let path = empty_dir_path(pods_dir, uid, &volume.name);
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("cannot create emptyDir {}: {e}", path.display()))?;
        return Ok(path);
    }
    Err(format!(
        "volume {:?}: only hostPath and emptyDir volumes are supported by oxlet so far",
        volume.name
    ))
}

fn propagation(mode: Option<&str>) -> i32 {
    match mode {
        Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer as i32,
        Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional as i32,
        _ => cri::MountPropagation::PropagationPrivate as i32,
    }
}

/// The CRI mounts of one container. An error is a `CreateContainerConfigError`.
pub fn container_mounts(
    pod: &Pod,
    container: &Container,
    pods_dir: &Path,
) -> Result<Vec<cri::Mount>, String> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let volume = volumes
            .iter()
            .find(|v| v.name == vm.name)
            .ok_or_else(|| format!("volume mount {:?}: no such volume", vm.name))?;
        let mut host = host_path_of(volume, pods_dir, uid)?;
        if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
            host = host.join(sub);
            if volume.empty_dir.is_some() {
                std::fs::create_dir_all(&host).map_err(|e| e.to_string())?;
            }
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
    use k8s_openapi::api::core::v1::{
        EmptyDirVolumeSource, HostPathVolumeSource, PodSpec, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn host_path_and_empty_dir_mounts() {
        let tmp = tempfile::tempdir().unwrap();
        let host = tmp.path().join("data");
        let pod = Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![
                    Volume {
                        name: "h".into(),
                        host_path: Some(HostPathVolumeSource {
                            path: host.to_string_lossy().into(),
                            type_: Some("DirectoryOrCreate".into()),
                        }),
                        ..Default::default()
                    },
                    Volume {
                        name: "e".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let c = Container {
            name: "c".into(),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "h".into(),
                    mount_path: "/data".into(),
                    read_only: Some(true),
                    ..Default::default()
                },
                VolumeMount {
                    name: "e".into(),
                    mount_path: "/scratch".into(),
                    sub_path: Some("sub".into()),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let pods = tmp.path().join("pods");
        let m = container_mounts(&pod, &c, &pods).unwrap();
        assert!(host.is_dir(), "DirectoryOrCreate created it");
        assert_eq!(m[0].container_path, "/data");
        assert!(m[0].readonly);
        let e = pods.join("u1/volumes/kubernetes.io~empty-dir/e/sub");
        assert!(e.is_dir());
        assert_eq!(m[1].host_path, e.to_string_lossy());

        let mut missing = c.clone();
        missing.volume_mounts.as_mut().unwrap()[0].name = "nope".into();
        assert!(
            container_mounts(&pod, &missing, &pods)
                .unwrap_err()
                .contains("nope")
        );
    }
}

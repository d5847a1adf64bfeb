//! The volumes whose files come from the apiserver (kubelet's `configmap`, `secret` and
//! `projected` volume plugins): the payload from a [`PodObjects`] snapshot, written with
//! the atomic writer below `<pod>/volumes/kubernetes.io~<plugin>/<name>`. Secret and
//! projected volumes sit on a tmpfs as in kubelet (their wrapped emptyDir is `Memory`),
//! so secrets never reach the disk. Without an apiserver (no snapshot) these volumes are
//! refused with a clear error, as before cluster mode.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, ConfigMapVolumeSource, EmptyDirVolumeSource, KeyToPath, Pod,
    ProjectedVolumeSource, SecretProjection, SecretVolumeSource, ServiceAccountTokenProjection,
    Volume,
};

use super::atomic_writer::{FileProjection, Payload};
use super::pod_volumes::{self as volumes, VolumeError};
use crate::cm::NodeResources;
use crate::objects::{self, ObjectError, PodObjects};

pub(super) const CONFIG_MAP: &str = "kubernetes.io~configmap";
pub(super) const SECRET: &str = "kubernetes.io~secret";
pub(super) const PROJECTED: &str = "kubernetes.io~projected";
/// The mode of a secret or projected volume's tmpfs: root writes, the pod's users read.
const OBJECT_TMPFS_MODE: u32 = 0o755;

/// Why an API-object volume cannot be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ObjectVolumeError {
    #[error(transparent)]
    Object(#[from] ObjectError),
    /// kubelet's `configmap.MakePayload` message.
    #[error("configmap references non-existent config key: {0}")]
    ConfigMapKey(String),
    /// kubelet's `secret.MakePayload` message.
    #[error("references non-existent secret key: {0}")]
    SecretKey(String),
    #[error("file mode {0:#o} is outside 0..=0777")]
    Mode(i32),
    #[error("no token was requested for this projection")]
    NoToken,
    #[error("clusterTrustBundle projections are not supported by oxlet")]
    ClusterTrustBundle,
    #[error("podCertificate projections are not supported by oxlet")]
    PodCertificate,
}

/// One API-object volume: its plugin directory, whether it lives on a tmpfs, and its files.
pub(super) struct ObjectVolume {
    pub plugin: &'static str,
    pub memory: bool,
    pub payload: Payload,
}

fn file_mode(mode: Option<i32>, default_mode: Option<i32>) -> Result<u32, ObjectVolumeError> {
    let mode = mode
        .or(default_mode)
        .unwrap_or(super::pod_volumes::DEFAULT_MODE);
    u32::try_from(mode)
        .ok()
        .filter(|m| *m <= 0o777)
        .ok_or(ObjectVolumeError::Mode(mode))
}

/// kubelet's `MakePayload` for both kinds: every key when there are no items, else the
/// items, a missing key being an error unless the source is optional.
fn make_payload(
    payload: &mut Payload,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
    missing: fn(String) -> ObjectVolumeError,
) -> Result<(), ObjectVolumeError> {
    let items = items.unwrap_or_default();
    if items.is_empty() {
        let mode = file_mode(None, default_mode)?;
        for (k, v) in data {
            let file = FileProjection {
                data: v.clone(),
                mode,
                fs_user: None,
            };
            payload.insert(k.clone(), file);
        }
        return Ok(());
    }
    for item in items {
        let Some(v) = data.get(&item.key) else {
            if optional {
                continue;
            }
            return Err(missing(item.key.clone()));
        };
        let mode = file_mode(item.mode, default_mode)?;
        let file = FileProjection {
            data: v.clone(),
            mode,
            fs_user: None,
        };
        payload.insert(item.path.clone(), file);
    }
    Ok(())
}

fn config_map_data(cm: &k8s_openapi::api::core::v1::ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let data = (cm.data.iter().flatten()).map(|(k, v)| (k.clone(), v.clone().into_bytes()));
    let bin = (cm.binary_data.iter().flatten()).map(|(k, v)| (k.clone(), v.0.clone()));
    data.chain(bin).collect()
}

fn secret_data(s: &k8s_openapi::api::core::v1::Secret) -> BTreeMap<String, Vec<u8>> {
    (s.data.iter().flatten())
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

fn wrap(volume: &Volume, e: impl Into<ObjectVolumeError>) -> VolumeError {
    VolumeError::Object {
        volume: volume.name.clone(),
        source: e.into(),
    }
}

/// The payload of a configMap, secret or projected volume; `None` for other volumes
/// (and for projected volumes whose sources are all downwardAPI, which the downward
/// volume code writes). `objects` is `None` without an apiserver.
pub(super) fn payload(
    volume: &Volume,
    pod: &Pod,
    objects: Option<&PodObjects>,
    allocatable: &NodeResources,
) -> Result<Option<ObjectVolume>, VolumeError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    if !needs_api_objects(volume) {
        return Ok(None);
    }
    let Some(objects) = objects else {
        return Err(VolumeError::Unsupported(volume.name.clone()));
    };
    if let Some(src) = &volume.config_map {
        return config_map_payload(volume, src, ns, objects).map(Some);
    }
    if let Some(src) = &volume.secret {
        return secret_payload(volume, src, ns, objects).map(Some);
    }
    let Some(p) = &volume.projected else {
        return Ok(None);
    };
    projected_payload(volume, p, pod, objects, allocatable).map(Some)
}

/// Whether the volume's files come from the apiserver: a configMap or secret volume, or
/// a projected one with a source other than downwardAPI.
fn needs_api_objects(volume: &Volume) -> bool {
    volume.config_map.is_some()
        || volume.secret.is_some()
        || (volume
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten()))
        .any(|s| s.downward_api.is_none())
}

/// kubelet's configmap plugin: the configMap's keys (or the listed items) as files; a
/// missing optional configMap gives an empty volume.
fn config_map_payload(
    volume: &Volume,
    src: &ConfigMapVolumeSource,
    ns: &str,
    objects: &PodObjects,
) -> Result<ObjectVolume, VolumeError> {
    let mut payload = Payload::new();
    let optional = src.optional.unwrap_or(false);
    let cm = PodObjects::config_map(Some(objects), ns, &src.name, optional)
        .map_err(|e| wrap(volume, e))?;
    if let Some(cm) = cm {
        make_payload(
            &mut payload,
            &config_map_data(&cm),
            src.items.as_deref(),
            src.default_mode,
            optional,
            ObjectVolumeError::ConfigMapKey,
        )
        .map_err(|e| wrap(volume, e))?;
    }
    Ok(ObjectVolume {
        plugin: CONFIG_MAP,
        memory: false,
        payload,
    })
}

/// kubelet's secret plugin: the secret's keys (or the listed items) as files on a
/// tmpfs; a missing optional secret gives an empty volume.
fn secret_payload(
    volume: &Volume,
    src: &SecretVolumeSource,
    ns: &str,
    objects: &PodObjects,
) -> Result<ObjectVolume, VolumeError> {
    let mut payload = Payload::new();
    let optional = src.optional.unwrap_or(false);
    let name = src.secret_name.as_deref().unwrap_or("");
    let s = PodObjects::secret(Some(objects), ns, name, optional).map_err(|e| wrap(volume, e))?;
    if let Some(s) = s {
        make_payload(
            &mut payload,
            &secret_data(&s),
            src.items.as_deref(),
            src.default_mode,
            optional,
            ObjectVolumeError::SecretKey,
        )
        .map_err(|e| wrap(volume, e))?;
    }
    Ok(ObjectVolume {
        plugin: SECRET,
        memory: true,
        payload,
    })
}

/// kubelet's `FsUserFrom`: the effective `runAsUser` (the container's, else the
/// pod's) when every init and regular container has one and they are all the same;
/// None otherwise (ephemeral containers are not counted).
fn fs_user(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|sc| sc.run_as_user);
    let mut users = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| {
            c.security_context
                .as_ref()
                .and_then(|sc| sc.run_as_user)
                .or(pod_user)
        });
    let first = users.next()??;
    users.all(|u| u == Some(first)).then_some(first)
}

/// The pod's `fsGroup`, which its volumes' files are given to.
fn fs_group(pod: &Pod) -> Option<i64> {
    (pod.spec.as_ref())
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.fs_group)
}

/// kubelet's projected plugin (`collectData`): every source's files in one tmpfs
/// volume, a failure naming the source's index.
fn projected_payload(
    volume: &Volume,
    p: &ProjectedVolumeSource,
    pod: &Pod,
    objects: &PodObjects,
    allocatable: &NodeResources,
) -> Result<ObjectVolume, VolumeError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut payload = Payload::new();
    for (index, src) in p.sources.iter().flatten().enumerate() {
        let err = |e: ObjectVolumeError| VolumeError::Projected {
            volume: volume.name.clone(),
            index,
            source: e,
        };
        if let Some(cm) = &src.config_map {
            project_config_map(&mut payload, cm, p.default_mode, ns, objects).map_err(err)?;
        } else if let Some(s) = &src.secret {
            project_secret(&mut payload, s, p.default_mode, ns, objects).map_err(err)?;
        } else if let Some(t) = &src.service_account_token {
            // kubelet: with the pod's one user or an fsGroup the token is 0600 (the
            // ownership walk below makes it 0640 for the group), and that user's;
            // with neither it keeps the volume's default mode.
            let user = fs_user(pod);
            let mode = (user.is_some() || fs_group(pod).is_some())
                .then_some(0o600)
                .or(p.default_mode);
            let mut file = token_file(t, mode, objects).map_err(err)?;
            file.fs_user = user.and_then(|u| u32::try_from(u).ok());
            payload.insert(t.path.clone(), file);
        } else if let Some(d) = &src.downward_api {
            volumes::downward_items(
                volume,
                d.items.as_deref(),
                p.default_mode,
                pod,
                allocatable,
                &mut payload,
            )?;
        } else if src.cluster_trust_bundle.is_some() {
            return Err(err(ObjectVolumeError::ClusterTrustBundle));
        } else if src.pod_certificate.is_some() {
            return Err(err(ObjectVolumeError::PodCertificate));
        }
    }
    Ok(ObjectVolume {
        plugin: PROJECTED,
        memory: true,
        payload,
    })
}

/// A projected configMap source's files, with the volume's default mode.
fn project_config_map(
    payload: &mut Payload,
    cm: &ConfigMapProjection,
    default_mode: Option<i32>,
    ns: &str,
    objects: &PodObjects,
) -> Result<(), ObjectVolumeError> {
    let optional = cm.optional.unwrap_or(false);
    let got = PodObjects::config_map(Some(objects), ns, &cm.name, optional)?;
    if let Some(got) = got {
        let data = config_map_data(&got);
        let items = cm.items.as_deref();
        make_payload(
            payload,
            &data,
            items,
            default_mode,
            optional,
            ObjectVolumeError::ConfigMapKey,
        )?;
    }
    Ok(())
}

/// A projected secret source's files, with the volume's default mode.
fn project_secret(
    payload: &mut Payload,
    s: &SecretProjection,
    default_mode: Option<i32>,
    ns: &str,
    objects: &PodObjects,
) -> Result<(), ObjectVolumeError> {
    let optional = s.optional.unwrap_or(false);
    let got = PodObjects::secret(Some(objects), ns, &s.name, optional)?;
    if let Some(got) = got {
        let data = secret_data(&got);
        let items = s.items.as_deref();
        make_payload(
            payload,
            &data,
            items,
            default_mode,
            optional,
            ObjectVolumeError::SecretKey,
        )?;
    }
    Ok(())
}

/// A projected serviceAccountToken source's file: the token requested for it before
/// the sync (its request failing fails the volume).
fn token_file(
    t: &ServiceAccountTokenProjection,
    default_mode: Option<i32>,
    objects: &PodObjects,
) -> Result<FileProjection, ObjectVolumeError> {
    let want = objects::token_want(t);
    let token = match objects.tokens.get(&want) {
        Some(Ok(token)) => token.clone(),
        Some(Err(e)) => return Err(e.clone().into()),
        None => return Err(ObjectVolumeError::NoToken),
    };
    let mode = file_mode(None, default_mode)?;
    Ok(FileProjection {
        data: token.into_bytes(),
        mode,
        fs_user: None,
    })
}

/// Writes an API-object volume (mounting its tmpfs first if it has one) and returns its
/// directory; `None` for other volumes. Written files go to the pod's `fsGroup`.
pub(super) fn write(
    volume: &Volume,
    pod: &Pod,
    pods_dir: &Path,
    objects: Option<&PodObjects>,
    allocatable: &NodeResources,
    only_existing: bool,
) -> Result<Option<(PathBuf, bool)>, VolumeError> {
    let Some(ov) = payload(volume, pod, objects, allocatable)? else {
        return Ok(None);
    };
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let path = crate::pod::volume_dir(pods_dir, uid, ov.plugin, &volume.name)?;
    if only_existing && !path.is_dir() {
        return Ok(None);
    }
    if ov.memory {
        std::fs::create_dir_all(&path).map_err(|source| VolumeError::EmptyDir {
            path: path.clone(),
            source,
        })?;
        let size = volumes::tmpfs_size(pod, &EmptyDirVolumeSource::default(), allocatable);
        // Not the tmpfs default 1777: only root writes here (the atomic writer).
        volumes::mount_tmpfs(&volume.name, &path, size, Some(OBJECT_TMPFS_MODE))?;
    }
    let changed = volumes::write_payload(&volume.name, &path, &ov.payload)?;
    if let Some(gid) = fs_group(pod).filter(|_| changed) {
        // These volumes are read-only to the pod: kubelet's read-only mask.
        crate::podenv::set_volume_ownership(&path, gid, true).map_err(|source| {
            VolumeError::EmptyDir {
                path: path.clone(),
                source,
            }
        })?;
    }
    Ok(Some((path, changed)))
}

/// kubelet's `WaitForAttachAndMount` for these volumes: every API-object volume of the
/// pod is written before its sandbox is made. Returns each volume that could not be,
/// with the message of kubelet's `FailedMount` event.
pub(crate) fn set_up(
    pod: &Pod,
    pods_dir: &Path,
    objects: &PodObjects,
    allocatable: &NodeResources,
) -> Vec<(String, String)> {
    let vols = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    let mut failed = Vec::new();
    for volume in vols.unwrap_or_default() {
        if let Some(src) = &volume.persistent_volume_claim {
            let v = &volume.name;
            match PodObjects::claim(Some(objects), &src.claim_name) {
                // The volume's source is checked (and a DirectoryOrCreate made) before
                // the sandbox, as kubelet mounts before it.
                Ok(bound) => {
                    let read_only = src.read_only.unwrap_or(false);
                    if let Err(e) = super::pod_volumes::claim_host_volume(&bound, read_only) {
                        failed.push((v.clone(), e.to_string()));
                    }
                }
                // kubelet's WaitForAttachAndMount message for a claim it could not process.
                Err(why) => failed.push((
                    v.clone(),
                    format!(
                        "Unable to attach or mount volumes: unmounted volumes=[{v}], unattached volumes=[{v}], failed to process volumes=[{v}]: {why}"
                    ),
                )),
            }
            continue;
        }
        if let Err(e) = write(volume, pod, pods_dir, Some(objects), allocatable, false) {
            let detail = match &e {
                VolumeError::Object { source, .. } | VolumeError::Projected { source, .. } => {
                    mount_detail(source)
                }
                other => other.to_string(),
            };
            let msg = format!(
                "MountVolume.SetUp failed for volume {:?} : {detail}",
                volume.name
            );
            failed.push((volume.name.clone(), msg));
        }
    }
    failed
}

/// The error as kubelet's volume plugins word it: their object managers say
/// `configmap "x" not found` (the singular resource), not the apiserver's plural.
fn mount_detail(e: &ObjectVolumeError) -> String {
    match e {
        ObjectVolumeError::Object(ObjectError::NotFound { kind, name }) => {
            format!("{} {name:?} not found", kind.trim_end_matches('s'))
        }
        other => other.to_string(),
    }
}

/// Re-writes the pod's API-object volumes that exist already, so a changed ConfigMap,
/// Secret or a rotated token reaches running containers (kubelet's remount on each
/// sync). Unchanged volumes are not touched. Returns the volumes rewritten.
pub(crate) fn refresh(
    pod: &Pod,
    pods_dir: &Path,
    objects: &PodObjects,
    allocatable: &NodeResources,
) -> Result<Vec<String>, VolumeError> {
    let mut written = Vec::new();
    let vols = pod.spec.as_ref().and_then(|s| s.volumes.as_deref());
    for volume in vols.unwrap_or_default() {
        if let Some((_, true)) = write(volume, pod, pods_dir, Some(objects), allocatable, true)? {
            written.push(volume.name.clone());
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapVolumeSource};
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::Arc;

    fn objects(data: &[(&str, &str)]) -> PodObjects {
        let cm = ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ConfigMap::default()
        };
        let mut o = PodObjects::default();
        o.config_maps.insert("cm".into(), Ok(Arc::new(cm)));
        o
    }

    fn volume(items: Option<Vec<KeyToPath>>, optional: Option<bool>) -> Volume {
        Volume {
            name: "v".into(),
            config_map: Some(ConfigMapVolumeSource {
                name: "cm".into(),
                items,
                optional,
                default_mode: Some(0o600),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        }
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
            ..KeyToPath::default()
        }
    }

    #[test]
    fn config_map_items_modes_and_missing_keys_as_kubelet() {
        let pod = Pod::default();
        let o = objects(&[("a", "1"), ("b", "2")]);
        let all = payload(
            &volume(None, None),
            &pod,
            Some(&o),
            &NodeResources::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(all.plugin, CONFIG_MAP);
        assert_eq!(all.payload["a"].mode, 0o600);
        assert_eq!(all.payload.len(), 2);
        let items = Some(vec![item("b", "dir/b.txt", Some(0o400))]);
        let some = payload(
            &volume(items, None),
            &pod,
            Some(&o),
            &NodeResources::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(some.payload.len(), 1);
        assert_eq!(some.payload["dir/b.txt"].data, b"2");
        assert_eq!(some.payload["dir/b.txt"].mode, 0o400);
        let missing = Some(vec![item("zz", "zz", None)]);
        let err = payload(
            &volume(missing.clone(), None),
            &pod,
            Some(&o),
            &NodeResources::default(),
        )
        .err()
        .unwrap();
        assert!(
            err.to_string()
                .ends_with("configmap references non-existent config key: zz"),
            "{err}"
        );
        let ok = payload(
            &volume(missing, Some(true)),
            &pod,
            Some(&o),
            &NodeResources::default(),
        );
        assert!(ok.unwrap().unwrap().payload.is_empty());
        // Without an apiserver the volume stays unsupported.
        let err = payload(&volume(None, None), &pod, None, &NodeResources::default()).err();
        assert!(matches!(err, Some(VolumeError::Unsupported(_))));
    }

    fn cm_volume(name: &str, cm: &str) -> Volume {
        Volume {
            name: name.into(),
            config_map: Some(ConfigMapVolumeSource {
                name: cm.into(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        }
    }

    fn pod_with(volumes: Vec<Volume>) -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        pod.spec.as_mut().unwrap().volumes = Some(volumes);
        pod
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn refresh_rewrites_only_changed_volumes_that_exist() {
        let dir = tempfile::tempdir().unwrap();
        let pods = dir.path();
        let pod = pod_with(vec![cm_volume("v", "cm"), cm_volume("later", "cm")]);
        let vols = pod.spec.as_ref().unwrap().volumes.clone().unwrap();
        let res = NodeResources::default();
        let one = objects(&[("a", "1")]);
        let (path, changed) = write(&vols[0], &pod, pods, Some(&one), &res, false)
            .unwrap()
            .unwrap();
        assert!(changed);
        assert_eq!(read(&path.join("a")), "1");
        let data_dir = std::fs::read_link(path.join("..data")).unwrap();
        // Same data: nothing is rewritten (the timestamped dir stays).
        assert!(refresh(&pod, pods, &one, &res).unwrap().is_empty());
        assert_eq!(std::fs::read_link(path.join("..data")).unwrap(), data_dir);
        // Changed data: only the set-up volume is rewritten; "later" was never mounted
        // and refresh does not create it.
        let two = objects(&[("a", "2"), ("b", "3")]);
        assert_eq!(refresh(&pod, pods, &two, &res).unwrap(), ["v"]);
        assert_eq!(read(&path.join("a")), "2");
        assert_eq!(read(&path.join("b")), "3");
        assert_ne!(std::fs::read_link(path.join("..data")).unwrap(), data_dir);
        assert!(!path.parent().unwrap().join("later").exists());
        // A key that went away goes from the volume too.
        let three = objects(&[("b", "3")]);
        assert_eq!(refresh(&pod, pods, &three, &res).unwrap(), ["v"]);
        assert!(!path.join("a").exists());
        assert!(refresh(&pod, pods, &three, &res).unwrap().is_empty());
    }

    #[test]
    fn projected_mixes_token_config_map_secret_and_downward_api() {
        use k8s_openapi::api::core::v1::Secret;
        let volume: Volume = serde_json::from_value(serde_json::json!({
            "name": "kube-api-access-abcde",
            "projected": {"defaultMode": 0o644, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "cm", "items": [{"key": "a", "path": "ca.crt"}]}},
                {"secret": {"name": "s", "items": [{"key": "k", "path": "sec/k", "mode": 0o400}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]},
        }))
        .unwrap();
        let pod = pod_with(vec![volume.clone()]);
        let mut o = objects(&[("a", "CA")]);
        let secret = Secret {
            data: Some([("k".to_string(), k8s_openapi::ByteString(b"sv".to_vec()))].into()),
            ..Secret::default()
        };
        o.secrets.insert("s".into(), Ok(Arc::new(secret)));
        let want = objects::TokenWant {
            audience: None,
            expiration_seconds: 3607,
        };
        o.tokens.insert(want.clone(), Ok("tok".into()));
        let res = NodeResources::default();
        let got = payload(&volume, &pod, Some(&o), &res).unwrap().unwrap();
        assert_eq!(got.plugin, PROJECTED);
        assert!(got.memory);
        let files: Vec<(&str, &[u8], u32)> = (got.payload.iter())
            .map(|(k, f)| (k.as_str(), f.data.as_slice(), f.mode))
            .collect();
        assert_eq!(
            files,
            [
                ("ca.crt", &b"CA"[..], 0o644),
                ("namespace", &b"ns"[..], 0o644),
                ("sec/k", &b"sv"[..], 0o400),
                ("token", &b"tok"[..], 0o644),
            ]
        );
        // With an fsGroup, kubelet writes the token 0600 (its ownership walk adds 0040).
        let mut grouped = pod.clone();
        grouped.spec.as_mut().unwrap().security_context =
            Some(k8s_openapi::api::core::v1::PodSecurityContext {
                fs_group: Some(2000),
                ..Default::default()
            });
        let got = payload(&volume, &grouped, Some(&o), &res).unwrap().unwrap();
        assert_eq!(got.payload["token"].mode, 0o600);
        assert_eq!(got.payload["ca.crt"].mode, 0o644);
        // With one runAsUser for every container and no fsGroup, kubelet's FsUser:
        // the token is 0600 and that user's, on disk too.
        let mut one_user = pod.clone();
        one_user.spec.as_mut().unwrap().security_context =
            Some(k8s_openapi::api::core::v1::PodSecurityContext {
                run_as_user: Some(1234),
                ..Default::default()
            });
        let got = payload(&volume, &one_user, Some(&o), &res)
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.payload["token"].mode, got.payload["token"].fs_user),
            (0o600, Some(1234))
        );
        assert_eq!(got.payload["ca.crt"].fs_user, None);
        let dir = tempfile::tempdir().unwrap();
        crate::volumes::atomic_writer::write(dir.path(), &got.payload).unwrap();
        let meta = std::fs::metadata(dir.path().join("token")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 1234);
        let ca = std::fs::metadata(dir.path().join("ca.crt")).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&ca), 0);
        // Written again unchanged: nothing to do.
        assert!(!crate::volumes::atomic_writer::write(dir.path(), &got.payload).unwrap());
        // A container of another user: no FsUser, the volume's default mode.
        let mut two_users = one_user.clone();
        let spec = two_users.spec.as_mut().unwrap();
        let mut init = spec.containers[0].clone();
        init.security_context = Some(k8s_openapi::api::core::v1::SecurityContext {
            run_as_user: Some(99),
            ..Default::default()
        });
        spec.init_containers = Some(vec![init]);
        let got = payload(&volume, &two_users, Some(&o), &res)
            .unwrap()
            .unwrap();
        assert_eq!(
            (got.payload["token"].mode, got.payload["token"].fs_user),
            (0o644, None)
        );
        // A failed TokenRequest fails the volume with its reason, naming the source.
        o.tokens.insert(
            want,
            Err(ObjectError::Token {
                namespace: "ns".into(),
                name: "default".into(),
                message: "forbidden".into(),
            }),
        );
        let err = payload(&volume, &pod, Some(&o), &res).err().unwrap();
        assert!(err.to_string().contains("forbidden"), "{err}");
        assert!(err.to_string().contains("kube-api-access-abcde"), "{err}");
        // Only downwardAPI sources: not this module's volume (no apiserver needed).
        let downward_only: Volume = serde_json::from_value(serde_json::json!({
            "name": "d", "projected": {"sources": [{"downwardAPI": {"items": []}}]},
        }))
        .unwrap();
        assert!(payload(&downward_only, &pod, None, &res).unwrap().is_none());
    }
}

//! The claim info checkpoint, `dra_manager_state` in the root dir, in kubelet's format
//! (`cm/dra/state`): `{"Data":"<json>","Checksum":N}` where the checksum is the CRC-32
//! (IEEE) of the data string and the data is `{"kind":"DRACheckpoint","apiVersion":
//! "checkpoint.dra.kubelet.k8s.io/v1","Entries":[...]}`. Field names and `null` for an
//! empty list are Go's `encoding/json` of kubelet's structs, so kubelet and oxlet read
//! each other's files.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// kubelet's file name, in the root dir.
pub(super) const STATE_FILE: &str = "dra_manager_state";
const KIND: &str = "DRACheckpoint";
const API_VERSION: &str = "checkpoint.dra.kubelet.k8s.io/v1";
/// Largest checkpoint read back; a node's claims need a few KiB.
const MAX_STATE_BYTES: u64 = 16 << 20;

/// Why the checkpoint could not be read or written.
pub(super) use crate::private_file::CheckpointError as StateError;

/// One claim as kubelet checkpoints it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct ClaimInfoState {
    #[serde(rename = "ClaimUID")]
    pub claim_uid: String,
    #[serde(rename = "ClaimName")]
    pub claim_name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    /// Go's `sets.Set[string]`: `{"uid":{}}`.
    #[serde(rename = "PodUIDs", with = "uid_set")]
    pub pod_uids: std::collections::BTreeSet<String>,
    /// Every driver with a result in the allocation, devices or not.
    #[serde(rename = "DriverState", default, deserialize_with = "null_default")]
    pub driver_state: BTreeMap<String, DriverState>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct DriverState {
    #[serde(rename = "Devices", with = "nil_list")]
    pub devices: Vec<Device>,
}

/// A prepared device as the driver described it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Device {
    #[serde(rename = "PoolName")]
    pub pool_name: String,
    #[serde(rename = "DeviceName")]
    pub device_name: String,
    #[serde(rename = "ShareID", default)]
    pub share_id: Option<String>,
    #[serde(rename = "RequestNames", with = "nil_list")]
    pub request_names: Vec<String>,
    #[serde(rename = "CDIDeviceIDs", with = "nil_list")]
    pub cdi_device_ids: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Checkpoint {
    #[serde(rename = "Data")]
    data: String,
    #[serde(rename = "Checksum")]
    checksum: u32,
}

#[derive(Serialize, Deserialize)]
struct CheckpointData {
    #[serde(default)]
    kind: String,
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(rename = "Entries", default, deserialize_with = "null_default")]
    entries: Vec<ClaimInfoState>,
}

/// The file's bytes for `entries`.
pub(super) fn encode(entries: &[ClaimInfoState]) -> Result<Vec<u8>, StateError> {
    let data = serde_json::to_string(&CheckpointData {
        kind: KIND.into(),
        api_version: API_VERSION.into(),
        entries: entries.to_vec(),
    })?;
    let checksum = crc32fast::hash(data.as_bytes());
    Ok(serde_json::to_vec(&Checkpoint { data, checksum })?)
}

/// The entries of a file's bytes, its checksum checked.
pub(super) fn decode(body: &[u8]) -> Result<Vec<ClaimInfoState>, StateError> {
    let cp: Checkpoint = serde_json::from_slice(body)?;
    if crc32fast::hash(cp.data.as_bytes()) != cp.checksum {
        return Err(StateError::Corrupt);
    }
    let data: CheckpointData = serde_json::from_str(&cp.data)?;
    Ok(data.entries)
}

/// Writes the checkpoint whole, 0600 (`private_file`).
pub(super) fn store(file: &Path, entries: &[ClaimInfoState]) -> Result<(), StateError> {
    crate::private_file::write_atomically(file, &encode(entries)?)?;
    Ok(())
}

/// The checkpoint's entries; none when there is no file yet.
pub(super) fn load(file: &Path) -> Result<Vec<ClaimInfoState>, StateError> {
    match crate::private_file::read_bounded(file, MAX_STATE_BYTES)? {
        Some(body) => decode(&body),
        None => Ok(Vec::new()),
    }
}

fn null_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Go's nil slice: `null` when empty, and `null` read as empty.
mod nil_list {
    use super::*;

    pub(super) fn serialize<S: Serializer, T: Serialize>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        if v.is_empty() {
            s.serialize_none()
        } else {
            v.serialize(s)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
    }
}

/// Go's `sets.Set[string]` (a map to empty structs), keys sorted as Go writes them.
mod uid_set {
    use super::*;
    use std::collections::BTreeSet;

    #[derive(Serialize, Deserialize)]
    struct Empty {}

    pub(super) fn serialize<S: Serializer>(v: &BTreeSet<String>, s: S) -> Result<S::Ok, S::Error> {
        let m: BTreeMap<&str, Empty> = v.iter().map(|k| (k.as_str(), Empty {})).collect();
        m.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeSet<String>, D::Error> {
        let m = Option::<BTreeMap<String, serde_json::Value>>::deserialize(d)?;
        Ok(m.unwrap_or_default().into_keys().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubelet's `TestCheckpointGetOrCreate` "single-claim-info-state" file (written
    /// before `ShareID` joined the device).
    const KUBELET_FILE: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1597924435}"#;

    fn example() -> ClaimInfoState {
        ClaimInfoState {
            claim_uid: "067798be-454e-4be4-9047-1aa06aea63f7".into(),
            claim_name: "example".into(),
            namespace: "default".into(),
            pod_uids: ["139cdb46-f989-4f17-9561-ca10cfb509a6".to_string()].into(),
            driver_state: [(
                "test-driver.cdi.k8s.io".to_string(),
                DriverState {
                    devices: vec![Device {
                        pool_name: "worker-1".into(),
                        device_name: "dev-1".into(),
                        share_id: None,
                        request_names: vec!["test request".into()],
                        cdi_device_ids: vec!["example.com/example=cdi-example".into()],
                    }],
                },
            )]
            .into(),
        }
    }

    #[test]
    fn kubelets_file_is_read_and_its_checksum_is_ours() {
        assert_eq!(decode(KUBELET_FILE.as_bytes()).unwrap(), vec![example()]);
        let tampered = KUBELET_FILE.replace("dev-1", "dev-2");
        assert!(matches!(
            decode(tampered.as_bytes()),
            Err(StateError::Corrupt)
        ));
        assert!(decode(b"{").is_err());
    }

    #[test]
    fn written_as_go_writes_kubelets_structs() {
        let mut second = example();
        second.claim_name = "example-2".into();
        second
            .driver_state
            .get_mut("test-driver.cdi.k8s.io")
            .unwrap()
            .devices[0] = Device {
            pool_name: "worker-1".into(),
            device_name: "dev-2".into(),
            ..Device::default()
        };
        let body = encode(&[example(), second.clone()]).unwrap();
        let text = String::from_utf8(body.clone()).unwrap();
        // 1.36's device carries ShareID (a nil pointer: null) before the request names.
        assert!(text.contains(r#"\"DeviceName\":\"dev-2\",\"ShareID\":null,\"RequestNames\":null,\"CDIDeviceIDs\":null}"#), "{text}");
        assert!(text.starts_with(r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"Entries\":[{\"ClaimUID\""#));
        assert_eq!(decode(&body).unwrap(), vec![example(), second]);
        // The data of kubelet's file, written by us without the ShareID kubelet then lacked,
        // has kubelet's checksum.
        let ours = String::from_utf8(encode(&[example()]).unwrap()).unwrap();
        let ours = ours.replace(r#"\"ShareID\":null,"#, "");
        let cp: Checkpoint = serde_json::from_str(&ours).unwrap();
        assert_eq!(crc32fast::hash(cp.data.as_bytes()), 1_597_924_435);
    }

    #[test]
    fn stored_files_are_roots_alone_and_absent_is_empty() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(STATE_FILE);
        assert!(load(&file).unwrap().is_empty());
        store(&file, &[example()]).unwrap();
        assert_eq!(load(&file).unwrap(), vec![example()]);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        store(&file, &[]).unwrap();
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains(r#"\"Entries\":[]"#)
        );
    }
}

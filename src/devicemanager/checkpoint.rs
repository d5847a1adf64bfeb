//! `kubelet_internal_checkpoint`, the device manager's state file in kubelet's format:
//! `{"Data":{"PodDeviceEntries":[...],"RegisteredDevices":{...}},"Checksum":N}`, each
//! entry a container's devices of one resource by NUMA node and the plugin's
//! `ContainerAllocateResponse` in protobuf (base64 in the JSON).
//!
//! The checksum is kubelet's: FNV-32a over what its `DeepHashObject` (spew's `%#v`,
//! keys sorted) prints for the `checkpointData` struct. Checked against two files
//! real kubelets wrote (see the tests): the text below reproduces spew's byte for byte.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// kubelet's file name, in the device plugin directory.
pub(super) const CHECKPOINT_FILE: &str = "kubelet_internal_checkpoint";

/// One container's devices of one resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Entry {
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    #[serde(rename = "ContainerName")]
    pub container: String,
    #[serde(rename = "ResourceName")]
    pub resource: String,
    /// Device ids by NUMA node (-1: devices without topology). `None`: JSON `null`.
    #[serde(rename = "DeviceIDs")]
    pub device_ids: Option<BTreeMap<i64, Option<Vec<String>>>>,
    /// The plugin's `ContainerAllocateResponse`, encoded.
    #[serde(rename = "AllocResp", with = "base64_bytes", default)]
    pub alloc_resp: Option<Vec<u8>>,
}

/// The checksummed part.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Data {
    #[serde(rename = "PodDeviceEntries", default)]
    pub entries: Option<Vec<Entry>>,
    #[serde(rename = "RegisteredDevices", default)]
    pub registered: Option<BTreeMap<String, Option<Vec<String>>>>,
}

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: Data,
    #[serde(rename = "Checksum")]
    checksum: u64,
    #[serde(rename = "BootID", default, skip_serializing_if = "String::is_empty")]
    boot_id: String,
}

/// Why a checkpoint was not read.
#[derive(Debug, thiserror::Error)]
pub(super) enum CheckpointError {
    #[error("checkpoint is not valid JSON: {0}")]
    Decode(String),
    #[error("checkpoint is corrupted: checksum {stored} does not match the data's {actual}")]
    Checksum { stored: u64, actual: u64 },
}

/// The file's bytes for `data`.
pub(super) fn encode(data: &Data) -> Vec<u8> {
    let file = File {
        data: data.clone(),
        checksum: u64::from(checksum(data)),
        boot_id: String::new(),
    };
    // Plain strings, numbers and maps: serializing cannot fail.
    serde_json::to_vec(&file).unwrap_or_default()
}

/// The data in `body`, its checksum verified.
pub(super) fn decode(body: &[u8]) -> Result<Data, CheckpointError> {
    let file: File =
        serde_json::from_slice(body).map_err(|e| CheckpointError::Decode(e.to_string()))?;
    let actual = u64::from(checksum(&file.data));
    if actual != file.checksum {
        return Err(CheckpointError::Checksum {
            stored: file.checksum,
            actual,
        });
    }
    Ok(file.data)
}

/// FNV-32a of spew's `%#v` of kubelet's `checkpointData`.
pub(super) fn checksum(data: &Data) -> u32 {
    let mut h = crate::hash::Fnv32a::default();
    h.write(spew(data).as_bytes());
    h.finish()
}

/// What spew prints: a struct field with its type in parentheses, slice elements and
/// map entries without, strings bare, `nil` as `<nil>`, map keys sorted.
fn spew(data: &Data) -> String {
    let mut s =
        String::from("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)");
    match &data.entries {
        None => s.push_str("<nil>"),
        Some(entries) => {
            s.push('[');
            for (i, e) in entries.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                spew_entry(&mut s, e);
            }
            s.push(']');
        }
    }
    s.push_str(" RegisteredDevices:(map[string][]string)");
    match &data.registered {
        None => s.push_str("<nil>"),
        Some(map) => spew_map(&mut s, map.iter().map(|(k, v)| (k.clone(), v))),
    }
    s.push('}');
    s
}

fn spew_entry(s: &mut String, e: &Entry) {
    s.push_str("{PodUID:(string)");
    s.push_str(&e.pod_uid);
    s.push_str(" ContainerName:(string)");
    s.push_str(&e.container);
    s.push_str(" ResourceName:(string)");
    s.push_str(&e.resource);
    s.push_str(" DeviceIDs:(checkpoint.DevicesPerNUMA)");
    match &e.device_ids {
        None => s.push_str("<nil>"),
        Some(map) => spew_map(s, map.iter().map(|(k, v)| (k.to_string(), v))),
    }
    s.push_str(" AllocResp:([]uint8)");
    match &e.alloc_resp {
        None => s.push_str("<nil>"),
        Some(bytes) => {
            s.push('[');
            for (i, b) in bytes.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                s.push_str(&b.to_string());
            }
            s.push(']');
        }
    }
    s.push('}');
}

/// `map[k1:[a b] k2:<nil>]`, the keys already in spew's order (a `BTreeMap`'s: by
/// value for the NUMA ids, bytewise for the resource names).
fn spew_map<'a>(s: &mut String, entries: impl Iterator<Item = (String, &'a Option<Vec<String>>)>) {
    s.push_str("map[");
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&k);
        s.push(':');
        match v {
            None => s.push_str("<nil>"),
            Some(ids) => {
                s.push('[');
                s.push_str(&ids.join(" "));
                s.push(']');
            }
        }
    }
    s.push(']');
}

/// Go's `[]byte` in JSON: standard base64, `null` for nil.
mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Files real kubelets wrote (published in a vendor's GPU docs and a device plugin
    // walkthrough); our checksum must equal theirs.
    const NO_PODS: &str = r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"nvidia.com/gpu":["GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"]}},"Checksum":3952659280}"#;
    const ONE_POD: &str = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"bf52b2cd-b611-4e79-86b1-280b283185c3","ContainerName":"check","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["tegra"]},"AllocResp":"Ch8KFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSBXRlZ3Jh"}],"RegisteredDevices":{"nvidia.com/gpu":["tegra"]}},"Checksum":3660592824}"#;

    #[test]
    fn kubelets_own_files_verify() {
        let data = decode(ONE_POD.as_bytes()).expect("kubelet's checksum");
        let entries = data.entries.as_ref().unwrap();
        assert_eq!(entries[0].container, "check");
        assert_eq!(
            entries[0].device_ids.as_ref().unwrap()[&-1],
            Some(vec!["tegra".to_string()])
        );
        let resp = entries[0].alloc_resp.as_ref().unwrap();
        let decoded: super::super::api::ContainerAllocateResponse =
            prost::Message::decode(resp.as_slice()).unwrap();
        assert_eq!(decoded.envs["NVIDIA_VISIBLE_DEVICES"], "tegra");
        assert_eq!(checksum(&data), 3660592824);
        let none = decode(NO_PODS.as_bytes()).expect("kubelet's checksum");
        assert!(none.entries.is_none());
    }

    #[test]
    fn round_trip_and_corruption() {
        let mut ids = BTreeMap::new();
        ids.insert(0, Some(vec!["a".to_string(), "b".to_string()]));
        ids.insert(-1, Some(vec!["c".to_string()]));
        let data = Data {
            entries: Some(vec![Entry {
                pod_uid: "u1".into(),
                container: "c".into(),
                resource: "example.com/widget".into(),
                device_ids: Some(ids),
                alloc_resp: Some(vec![10, 0]),
            }]),
            registered: Some(BTreeMap::from([(
                "example.com/widget".to_string(),
                Some(vec!["a".to_string()]),
            )])),
        };
        let body = encode(&data);
        assert_eq!(decode(&body).unwrap(), data);
        let tampered = String::from_utf8(body).unwrap().replace("\"u1\"", "\"u2\"");
        assert!(matches!(
            decode(tampered.as_bytes()),
            Err(CheckpointError::Checksum { .. })
        ));
    }
}

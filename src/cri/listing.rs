//! What `ListPodSandbox` and `ListContainers` return, decoded lean.
//!
//! The PLEG lists every second and housekeeping every two, so these two answers are
//! the most decoded bytes oxlet reads. The generated CRI types put each label and
//! annotation in a `HashMap<String, String>`: two allocations and a SipHash per entry,
//! for maps of which oxlet reads five keys. These types are wire-compatible
//! subsets of `runtime.v1.PodSandbox` and `runtime.v1.Container`: a map field is a
//! repeated key/value message on the wire, so each entry is kept as two slices of the
//! response buffer ([`Bytes`], no copy), and fields oxlet never reads (the
//! sandbox's annotations, the runtime handler, the image spec) are skipped unparsed.

use bytes::Bytes;
use k8s_cri::v1 as cri;

/// One label or annotation, both halves slices of the response.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Pair {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

#[cfg(test)]
impl Pair {
    pub(crate) fn new(key: &str, value: &str) -> Pair {
        Pair {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
        }
    }
}

/// Reads one key of a label or annotation map, whichever form it came in.
pub(crate) trait Lookup {
    fn lookup(&self, key: &str) -> Option<&str>;
}

impl Lookup for std::collections::HashMap<String, String> {
    fn lookup(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A linear scan: a pod's maps hold a handful of entries, fewer than a hash costs.
/// A value that is not UTF-8 reads as absent, as a key nobody set.
impl Lookup for [Pair] {
    fn lookup(&self, key: &str) -> Option<&str> {
        self.iter()
            .find(|p| p.key == key.as_bytes())
            .and_then(|p| std::str::from_utf8(&p.value).ok())
    }
}

/// Builds pairs from a map (the fake runtime lists what it was configured with).
#[cfg(test)]
pub(crate) fn pairs_of(map: &std::collections::HashMap<String, String>) -> Vec<Pair> {
    map.iter().map(|(k, v)| Pair::new(k, v)).collect()
}

/// `runtime.v1.PodSandbox` without its annotations and runtime handler.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListedSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<cri::PodSandboxMetadata>,
    #[prost(enumeration = "cri::PodSandboxState", tag = "3")]
    pub state: i32,
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    #[prost(message, repeated, tag = "5")]
    pub labels: Vec<Pair>,
}

/// `runtime.v1.Container` without its image spec and image ID.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListedContainer {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<cri::ContainerMetadata>,
    #[prost(string, tag = "5")]
    pub image_ref: String,
    #[prost(enumeration = "cri::ContainerState", tag = "6")]
    pub state: i32,
    #[prost(int64, tag = "7")]
    pub created_at: i64,
    #[prost(message, repeated, tag = "8")]
    pub labels: Vec<Pair>,
    #[prost(message, repeated, tag = "9")]
    pub annotations: Vec<Pair>,
}

/// `runtime.v1.ListPodSandboxResponse`, lean.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListedSandboxes {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<ListedSandbox>,
}

/// `runtime.v1.ListContainersResponse`, lean.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListedContainers {
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<ListedContainer>,
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use prost::Message;

    use super::*;

    /// The generated full message, encoded, decodes into the lean one with the same
    /// fields and every map entry.
    #[test]
    fn full_messages_decode_into_the_lean_ones() {
        let labels = HashMap::from([
            ("io.kubernetes.pod.uid".to_string(), "u1".to_string()),
            ("app".to_string(), "web".to_string()),
        ]);
        let annotations =
            HashMap::from([("io.kubernetes.container.hash".to_string(), "ab".to_string())]);
        let full = cri::ListContainersResponse {
            containers: vec![cri::Container {
                id: "c1".into(),
                pod_sandbox_id: "s1".into(),
                metadata: Some(cri::ContainerMetadata {
                    name: "app".into(),
                    attempt: 2,
                }),
                image: Some(cri::ImageSpec {
                    image: "busybox".into(),
                    ..Default::default()
                }),
                image_ref: "sha256:1".into(),
                state: cri::ContainerState::ContainerExited as i32,
                created_at: 42,
                labels: labels.clone(),
                annotations,
                image_id: "sha256:1".into(),
            }],
        };
        let lean = ListedContainers::decode(full.encode_to_vec().as_slice()).unwrap();
        let c = &lean.containers[0];
        assert_eq!((c.id.as_str(), c.pod_sandbox_id.as_str()), ("c1", "s1"));
        assert_eq!(c.metadata.as_ref().unwrap().attempt, 2);
        assert_eq!(c.image_ref, "sha256:1");
        assert_eq!(c.state, cri::ContainerState::ContainerExited as i32);
        assert_eq!(c.created_at, 42);
        assert_eq!(c.labels.len(), 2);
        assert_eq!(c.labels.lookup("io.kubernetes.pod.uid"), Some("u1"));
        assert_eq!(c.labels.lookup("app"), Some("web"));
        assert_eq!(c.labels.lookup("missing"), None);
        assert_eq!(
            c.annotations.lookup("io.kubernetes.container.hash"),
            Some("ab")
        );

        let full = cri::ListPodSandboxResponse {
            items: vec![cri::PodSandbox {
                id: "s1".into(),
                metadata: Some(cri::PodSandboxMetadata {
                    name: "web".into(),
                    uid: "u1".into(),
                    namespace: "default".into(),
                    attempt: 1,
                }),
                state: cri::PodSandboxState::SandboxReady as i32,
                created_at: 7,
                labels,
                annotations: HashMap::from([("big".to_string(), "x".repeat(4096))]),
                runtime_handler: "runc".into(),
            }],
        };
        let lean = ListedSandboxes::decode(full.encode_to_vec().as_slice()).unwrap();
        let s = &lean.items[0];
        assert_eq!(s.id, "s1");
        assert_eq!(s.metadata.as_ref().unwrap().namespace, "default");
        assert_eq!(s.state, cri::PodSandboxState::SandboxReady as i32);
        assert_eq!(s.created_at, 7);
        assert_eq!(s.labels.lookup("io.kubernetes.pod.uid"), Some("u1"));
    }

    #[test]
    fn a_value_that_is_not_utf8_reads_as_absent() {
        let pairs = [Pair {
            key: Bytes::from_static(b"k"),
            value: Bytes::from_static(&[0xff, 0xfe]),
        }];
        assert_eq!(pairs.lookup("k"), None);
    }
}

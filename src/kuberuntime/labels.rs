//! The labels and annotations oxlet writes on CRI objects, with kubelet's names, so a
//! restarted agent (or kubelet itself, or crictl) can tell which pod and container a
//! runtime object belongs to, its restart count, spec hash and grace periods.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::cri::Lookup;

pub(crate) const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub(crate) const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub(crate) const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub(crate) const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

pub(crate) const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
pub(crate) const CONTAINER_RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
pub(crate) const TERMINATION_MESSAGE_PATH_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePath";
pub(crate) const TERMINATION_MESSAGE_POLICY_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePolicy";
pub(crate) const CONTAINER_PORTS_ANNOTATION: &str = "io.kubernetes.container.ports";
pub(crate) const CONTAINER_TYPE_ANNOTATION: &str = "io.kubernetes.container.type";
pub(crate) const PRE_STOP_HANDLER_ANNOTATION: &str = "io.kubernetes.container.preStopHandler";
pub(crate) const POD_DELETION_GRACE_ANNOTATION: &str = "io.kubernetes.pod.deletionGracePeriod";
pub(crate) const POD_TERMINATION_GRACE_ANNOTATION: &str =
    "io.kubernetes.pod.terminationGracePeriod";

/// Kind of container, as recorded in [`CONTAINER_TYPE_ANNOTATION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContainerType {
    Init,
    Regular,
    /// Added to a running pod (`kubectl debug`); never restarted.
    Ephemeral,
}

impl ContainerType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ContainerType::Init => "init",
            ContainerType::Regular => "container",
            ContainerType::Ephemeral => "ephemeral",
        }
    }
}

fn meta(pod: &Pod) -> (&str, &str, &str) {
    (
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.uid.as_deref().unwrap_or(""),
    )
}

/// Sandbox labels: the pod's labels plus the three identity labels.
pub(crate) fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let (name, ns, uid) = meta(pod);
    labels.insert(POD_NAME_LABEL.into(), name.into());
    labels.insert(POD_NAMESPACE_LABEL.into(), ns.into());
    labels.insert(POD_UID_LABEL.into(), uid.into());
    labels
}

/// Sandbox annotations: the pod's annotations.
pub(crate) fn sandbox_annotations(pod: &Pod) -> HashMap<String, String> {
    pod.metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// Container labels: pod identity plus the container name.
pub(crate) fn container_labels(pod: &Pod, container: &Container) -> HashMap<String, String> {
    let (name, ns, uid) = meta(pod);
    HashMap::from([
        (POD_NAME_LABEL.into(), name.into()),
        (POD_NAMESPACE_LABEL.into(), ns.into()),
        (POD_UID_LABEL.into(), uid.into()),
        (CONTAINER_NAME_LABEL.into(), container.name.clone()),
    ])
}

/// Container annotations: what a restarted agent needs to adopt and stop the container.
pub(crate) fn container_annotations(
    pod: &Pod,
    container: &Container,
    restart_count: i32,
    kind: ContainerType,
) -> HashMap<String, String> {
    let mut a: HashMap<String, String> = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    a.insert(
        CONTAINER_HASH_ANNOTATION.into(),
        format!("{:x}", container_hash(container)),
    );
    a.insert(
        CONTAINER_RESTART_COUNT_ANNOTATION.into(),
        restart_count.to_string(),
    );
    a.insert(
        TERMINATION_MESSAGE_PATH_ANNOTATION.into(),
        container
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into()),
    );
    a.insert(
        TERMINATION_MESSAGE_POLICY_ANNOTATION.into(),
        container
            .termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".into()),
    );
    a.insert(CONTAINER_TYPE_ANNOTATION.into(), kind.as_str().into());
    if let Some(ports) = container.ports.as_ref().filter(|p| !p.is_empty())
        && let Ok(json) = serde_json::to_string(ports)
    {
        a.insert(CONTAINER_PORTS_ANNOTATION.into(), json);
    }
    if let Some(pre_stop) = container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        && let Ok(json) = serde_json::to_string(pre_stop)
    {
        a.insert(PRE_STOP_HANDLER_ANNOTATION.into(), json);
    }
    if let Some(grace) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        a.insert(POD_TERMINATION_GRACE_ANNOTATION.into(), grace.to_string());
    }
    if let Some(grace) = pod.metadata.deletion_grace_period_seconds {
        a.insert(POD_DELETION_GRACE_ANNOTATION.into(), grace.to_string());
    }
    a
}

/// kubelet's `HashContainer` (since 1.31): only the name and the image, so that only a
/// changed image (or name) restarts a running container. kubelet hashes with FNV-32a
/// what `DeepHashObject` prints for `json.Marshal(map{"name", "image"})`: Go sorts the
/// map keys (`image` first), and spew's `%#v` of a byte slice is `([]uint8)[123 34 ...]`.
/// Reproducing it byte for byte keeps the annotation comparable with kubelet's.
pub(crate) fn container_hash(container: &Container) -> u32 {
    let json = format!(
        "{{\"image\":{},\"name\":{}}}",
        go_json_string(container.image.as_deref().unwrap_or("")),
        go_json_string(&container.name)
    );
    let mut h = crate::hash::Fnv32a::default();
    h.write(b"([]uint8)[");
    for (i, b) in json.bytes().enumerate() {
        if i > 0 {
            h.write(b" ");
        }
        h.write(b.to_string().as_bytes());
    }
    h.write(b"]");
    h.finish()
}

/// A string as Go's `encoding/json` writes it (HTML-safe: `<`, `>`, `&`, U+2028 and
/// U+2029 are escaped too), so odd characters hash as they do in kubelet.
fn go_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Identity and bookkeeping read back from a CRI container's labels and annotations.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ContainerInfo {
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    pub container_name: String,
    pub hash: u32,
    pub restart_count: i32,
    pub termination_grace: Option<i64>,
    /// The preStop hook, for stopping the container once its pod's spec is gone.
    pub pre_stop: Option<LifecycleHandler>,
    pub is_init: bool,
}

/// Reads back what [`container_labels`] and [`container_annotations`] wrote; missing
/// values fall back to defaults, as kubelet's do.
pub(crate) fn container_info<L: Lookup + ?Sized>(labels: &L, annotations: &L) -> ContainerInfo {
    let get = |k: &str| labels.lookup(k).unwrap_or_default().to_string();
    ContainerInfo {
        pod_name: get(POD_NAME_LABEL),
        pod_namespace: get(POD_NAMESPACE_LABEL),
        pod_uid: get(POD_UID_LABEL),
        container_name: get(CONTAINER_NAME_LABEL),
        hash: annotations
            .lookup(CONTAINER_HASH_ANNOTATION)
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .unwrap_or(0),
        restart_count: annotations
            .lookup(CONTAINER_RESTART_COUNT_ANNOTATION)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0),
        termination_grace: annotations
            .lookup(POD_TERMINATION_GRACE_ANNOTATION)
            .and_then(|g| g.parse().ok()),
        pre_stop: annotations
            .lookup(PRE_STOP_HANDLER_ANNOTATION)
            .and_then(|j| serde_json::from_str(j).ok()),
        is_init: annotations.lookup(CONTAINER_TYPE_ANNOTATION) == Some("init"),
    }
}

/// The link's subject from a container's CRI labels (kubelet's
/// `getContainerInfoFromLabels`); None when a label is missing (not oxlet's).
pub(crate) fn log_link_of<'a>(
    id: &'a str,
    status: &'a k8s_cri::v1::ContainerStatus,
) -> Option<crate::logs::LinkOf<'a>> {
    let get = |k: &str| status.labels.get(k).map(String::as_str);
    Some(crate::logs::LinkOf {
        pod: get(POD_NAME_LABEL)?,
        namespace: get(POD_NAMESPACE_LABEL)?,
        container: get(CONTAINER_NAME_LABEL)?,
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-node1".into()),
                namespace: Some("default".into()),
                uid: Some("abc".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                termination_grace_period_seconds: Some(7),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(image: &str) -> Container {
        Container {
            name: "app".into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    #[test]
    fn labels_and_annotations_round_trip() {
        let p = pod();
        let c = container("busybox:1");
        let info = container_info(
            &container_labels(&p, &c),
            &container_annotations(&p, &c, 3, ContainerType::Regular),
        );
        assert_eq!(info.pod_name, "web-node1");
        assert_eq!(info.pod_namespace, "default");
        assert_eq!(info.pod_uid, "abc");
        assert_eq!(info.container_name, "app");
        assert_eq!(info.restart_count, 3);
        assert_eq!(info.hash, container_hash(&c));
        assert_eq!(info.termination_grace, Some(7));
        assert_eq!(info.pre_stop, None);
        assert!(!info.is_init);
        // A preStop hook comes back whole (kubelet's preStopHandler annotation).
        let mut c = c;
        c.lifecycle = Some(k8s_openapi::api::core::v1::Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(k8s_openapi::api::core::v1::SleepAction { seconds: 4 }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let info = container_info(
            &container_labels(&p, &c),
            &container_annotations(&p, &c, 0, ContainerType::Regular),
        );
        assert_eq!(
            info.pre_stop.and_then(|h| h.sleep).map(|s| s.seconds),
            Some(4)
        );
    }

    /// kubelet's own vector (`pkg/kubelet/container/helpers_test.go`, TestHashContainer):
    /// args and ports do not count, the result must be 0x8e45cbd0.
    #[test]
    fn hash_matches_kubelet_test_vector() {
        let c = Container {
            name: "test_container".into(),
            image: Some("foo/image:v1".into()),
            args: Some(vec!["/bin/sh".into(), "-c".into(), "echo abc".into()]),
            ports: Some(vec![k8s_openapi::api::core::v1::ContainerPort {
                container_port: 8001,
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(container_hash(&c), 0x8e45cbd0);
        assert_eq!(
            container_annotations(&pod(), &c, 0, ContainerType::Regular)[CONTAINER_HASH_ANNOTATION],
            "8e45cbd0"
        );
    }

    #[test]
    fn go_json_escapes_like_go() {
        assert_eq!(
            go_json_string("a<b>&\"\\\n"),
            r#""a\u003cb\u003e\u0026\"\\\n""#
        );
        assert_eq!(go_json_string("\u{1}\u{2028}é"), r#""\u0001\u2028é""#);
    }

    #[test]
    fn hash_changes_with_image_only() {
        let a = container("busybox:1");
        let mut b = container("busybox:1");
        b.args = Some(vec!["x".into()]);
        assert_eq!(container_hash(&a), container_hash(&b));
        assert_ne!(container_hash(&a), container_hash(&container("busybox:2")));
    }
}

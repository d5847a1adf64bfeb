//! Static pod identity (kubelet's `applyDefaults`): the UID hashed from the pod,
//! the node and the file, the `<name>-<node>` name, node binding, the config
//! annotations and the NoExecute toleration.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, Pod, PodSpec, PodStatus, Probe, Toleration,
};

use super::defaults::{default_str, unset};

use crate::hash::Fnv128a;
use crate::pod::{CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, FILE_SOURCE, HTTP_SOURCE};

/// Where a static pod came from, as kubelet's `applyDefaults` tells them apart:
/// it decides what the UID hash covers and whether the NoExecute toleration is added.
#[derive(Debug, Clone, Copy)]
pub(super) enum Origin<'a> {
    /// A manifest file (the file source).
    File(&'a Path),
    /// A manifest URL (the HTTP source).
    Url(&'a str),
}

// The canonical form the static pod UID is hashed over. kubelet hashes its Go
// object, where a plain (non-pointer) `bool`, `string` or `int` cannot tell
// "unset" from its zero value: `hostNetwork: false` and no `hostNetwork` are the
// same object there. k8s-openapi makes those fields `Option`s, where `Some(false)`
// and `None` serialize differently, so the zero value of each such field is
// cleared before hashing. Pointer fields in Go (`privileged`, `runAsUser`,
// `allowPrivilegeEscalation`, ...) keep `Some(zero)`: there it means something.

fn clear_str(v: &mut Option<String>) {
    if v.as_deref() == Some("") {
        *v = None;
    }
}

fn clear_bool(v: &mut Option<bool>) {
    if *v == Some(false) {
        *v = None;
    }
}

fn clear_i32(v: &mut Option<i32>) {
    if *v == Some(0) {
        *v = None;
    }
}

fn clear_http_get(h: &mut HTTPGetAction) {
    clear_str(&mut h.host);
    clear_str(&mut h.path);
    clear_str(&mut h.scheme);
}

fn clear_probe(p: &mut Probe) {
    for v in [
        &mut p.initial_delay_seconds,
        &mut p.timeout_seconds,
        &mut p.period_seconds,
        &mut p.success_threshold,
        &mut p.failure_threshold,
    ] {
        clear_i32(v);
    }
    if let Some(h) = &mut p.http_get {
        clear_http_get(h);
    }
    if let Some(t) = &mut p.tcp_socket {
        clear_str(&mut t.host);
    }
}

fn clear_container(c: &mut Container) {
    for v in [
        &mut c.image,
        &mut c.working_dir,
        &mut c.termination_message_path,
        &mut c.termination_message_policy,
        &mut c.image_pull_policy,
    ] {
        clear_str(v);
    }
    for v in [&mut c.stdin, &mut c.stdin_once, &mut c.tty] {
        clear_bool(v);
    }
    for p in c.ports.iter_mut().flatten() {
        clear_str(&mut p.name);
        clear_str(&mut p.host_ip);
        clear_str(&mut p.protocol);
        clear_i32(&mut p.host_port);
    }
    for e in c.env.iter_mut().flatten() {
        clear_str(&mut e.value);
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            clear_str(&mut f.api_version);
        }
    }
    for m in c.volume_mounts.iter_mut().flatten() {
        clear_bool(&mut m.read_only);
        clear_str(&mut m.sub_path);
        clear_str(&mut m.sub_path_expr);
    }
    for p in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        clear_probe(p);
    }
    if let Some(lc) = &mut c.lifecycle {
        for h in [&mut lc.post_start, &mut lc.pre_stop].into_iter().flatten() {
            if let Some(g) = &mut h.http_get {
                clear_http_get(g);
            }
            if let Some(t) = &mut h.tcp_socket {
                clear_str(&mut t.host);
            }
        }
    }
}

/// Clears the zero values of Go's value-typed fields (see above), in place.
fn canonical_for_hash(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    for v in [
        &mut meta.name,
        &mut meta.generate_name,
        &mut meta.namespace,
        &mut meta.uid,
        &mut meta.resource_version,
        &mut meta.self_link,
    ] {
        clear_str(v);
    }
    if meta.generation == Some(0) {
        meta.generation = None;
    }
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    for v in [
        &mut spec.restart_policy,
        &mut spec.dns_policy,
        &mut spec.service_account_name,
        &mut spec.service_account,
        &mut spec.node_name,
        &mut spec.hostname,
        &mut spec.subdomain,
        &mut spec.scheduler_name,
        &mut spec.priority_class_name,
    ] {
        clear_str(v);
    }
    for v in [
        &mut spec.host_network,
        &mut spec.host_pid,
        &mut spec.host_ipc,
    ] {
        clear_bool(v);
    }
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        clear_container(c);
    }
    for t in spec.tolerations.iter_mut().flatten() {
        for v in [&mut t.key, &mut t.operator, &mut t.value, &mut t.effect] {
            clear_str(v);
        }
    }
    for v in spec.volumes.iter_mut().flatten() {
        if let Some(e) = &mut v.empty_dir {
            clear_str(&mut e.medium);
        }
    }
    if let Some(sc) = &mut spec.security_context
        && let Some(se) = &mut sc.se_linux_options
    {
        for v in [&mut se.user, &mut se.role, &mut se.type_, &mut se.level] {
            clear_str(v);
        }
    }
}

/// `<name>-<node lower-cased>`: static pods from different nodes never collide.
pub(super) fn static_pod_name(name: &str, node_name: &str) -> String {
    format!("{name}-{}", node_name.to_lowercase())
}

/// The UID kubelet would derive: FNV-128a over the (API-defaulted) pod, the node and
/// the file, so an edit, another node or another file each give a different UID.
/// A URL's pod hashes the pod and `url:<url>` only (kubelet leaves the node out there).
/// The pod is hashed in its [`canonical_for_hash`] form, so spelling out a default
/// (`hostNetwork: false`) is not an edit.
fn static_pod_uid(pod: &Pod, origin: Origin<'_>, node_name: &str) -> String {
    let mut canonical = pod.clone();
    canonical_for_hash(&mut canonical);
    let mut h = Fnv128a::default();
    // Serializing a Pod (string-keyed, ordered maps) cannot fail.
    h.write(&serde_json::to_vec(&canonical).unwrap_or_default());
    match origin {
        Origin::File(path) => {
            h.write(b"host:");
            h.write(node_name.as_bytes());
            h.write(b"file:");
            h.write(path.as_os_str().as_bytes());
        }
        Origin::Url(url) => {
            h.write(b"url:");
            h.write(url.as_bytes());
        }
    }
    h.hex()
}

pub(super) fn apply_static_defaults(pod: &mut Pod, origin: Origin<'_>, node_name: &str) {
    if unset(&pod.metadata.uid) {
        pod.metadata.uid = Some(static_pod_uid(pod, origin, node_name));
    }
    let source = match origin {
        Origin::File(_) => FILE_SOURCE,
        Origin::Url(_) => HTTP_SOURCE,
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let meta = &mut pod.metadata;
    meta.name = Some(static_pod_name(
        meta.name.as_deref().unwrap_or(""),
        node_name,
    ));
    default_str(&mut meta.namespace, "default");
    let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), uid);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.to_string(), source.to_string());

    pod.status.get_or_insert_with(PodStatus::default).phase =
        Some(crate::pod::Phase::Pending.to_string());
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    spec.node_name = Some(node_name.to_string());
    if matches!(origin, Origin::Url(_)) {
        // kubelet adds the toleration below to file pods only.
        return;
    }
    // Static pods must survive node taints (kubelet adds this to every file pod).
    let tolerate_all = Toleration {
        operator: Some("Exists".to_string()),
        effect: Some("NoExecute".to_string()),
        ..Default::default()
    };
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let same = |t: &Toleration| {
        unset(&t.key)
            && t.operator.as_deref() == Some("Exists")
            && t.effect.as_deref() == Some("NoExecute")
            && unset(&t.value)
    };
    if let Some(existing) = tolerations.iter_mut().find(|t| same(t)) {
        *existing = tolerate_all;
    } else {
        tolerations.push(tolerate_all);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::manifest::test_support::*;
    use crate::config::manifest::*;

    const GOOD_EXPLICIT: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: ""
spec:
  hostNetwork: false
  hostPID: false
  hostIPC: false
  restartPolicy: Always
  dnsPolicy: ClusterFirst
  schedulerName: default-scheduler
  terminationGracePeriodSeconds: 30
  enableServiceLinks: true
  securityContext: {}
  serviceAccountName: ""
  containers:
  - name: nginx
    image: nginx
    imagePullPolicy: Always
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
    workingDir: ""
    stdin: false
    tty: false
    ports:
    - containerPort: 80
      protocol: TCP
      hostPort: 0
"#;

    #[test]
    fn uid_is_deterministic_and_changes_with_content_node_and_path() {
        let a = decode(GOOD).unwrap().metadata.uid.unwrap();
        let b = decode(GOOD).unwrap().metadata.uid.unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        let edited = decode(&GOOD.replace("image: nginx", "image: nginx:1.27"))
            .unwrap()
            .metadata
            .uid
            .unwrap();
        assert_ne!(a, edited);
        let other_node = decode_static_pod(GOOD.as_bytes(), Path::new(PATH), "node2")
            .unwrap()
            .metadata
            .uid
            .unwrap();
        assert_ne!(a, other_node);
        let other_file = decode_static_pod(GOOD.as_bytes(), Path::new("/etc/pods/b.yaml"), NODE)
            .unwrap()
            .metadata
            .uid
            .unwrap();
        assert_ne!(a, other_file);
        // Explicit and implicit defaults describe the same pod.
        let explicit = decode(&format!("{GOOD}  restartPolicy: Always\n"))
            .unwrap()
            .metadata
            .uid
            .unwrap();
        assert_eq!(a, explicit);
    }

    #[test]
    fn spelled_out_defaults_keep_the_uid() {
        let implicit = decode(GOOD).unwrap();
        let explicit = decode(GOOD_EXPLICIT).unwrap();
        assert_eq!(implicit.metadata.uid, explicit.metadata.uid);
        // One default at a time, too (each must be neutral on its own).
        for extra in [
            "  hostNetwork: false\n",
            "  dnsPolicy: ClusterFirst\n",
            "  terminationGracePeriodSeconds: 30\n",
            "  restartPolicy: Always\n",
        ] {
            let uid = decode(&format!("{GOOD}{extra}")).unwrap().metadata.uid;
            assert_eq!(uid, implicit.metadata.uid, "{extra}");
        }
        let pull =
            decode(&GOOD.replace("image: nginx", "image: nginx\n    imagePullPolicy: Always"))
                .unwrap()
                .metadata
                .uid;
        assert_eq!(pull, implicit.metadata.uid);
    }

    #[test]
    fn non_default_values_change_the_uid() {
        let base = decode(GOOD).unwrap().metadata.uid;
        for extra in [
            "  hostNetwork: true\n",
            "  terminationGracePeriodSeconds: 0\n",
            "  restartPolicy: Never\n",
        ] {
            let uid = decode(&format!("{GOOD}{extra}")).unwrap().metadata.uid;
            assert_ne!(uid, base, "{extra}");
        }
        let pull =
            decode(&GOOD.replace("image: nginx", "image: nginx\n    imagePullPolicy: Never"))
                .unwrap()
                .metadata
                .uid;
        assert_ne!(pull, base);
        // A Go pointer field: `false` is not "unset" (nil allowPrivilegeEscalation
        // means allowed), so spelling it out is a real edit.
        let ape = decode(&GOOD.replace(
            "image: nginx",
            "image: nginx\n    securityContext:\n      allowPrivilegeEscalation: false",
        ))
        .unwrap()
        .metadata
        .uid;
        assert_ne!(ape, base);
    }

    #[test]
    fn url_pods_hash_the_url_not_the_node() {
        let url = |u: &str, node: &str| {
            let pods = decode_url_pods(GOOD.as_bytes(), u, node).unwrap();
            pods[0].metadata.uid.clone().unwrap()
        };
        let base = url("http://h/pods", NODE);
        // kubelet hashes `url:<url>` only: the same URL on another node is the same UID.
        assert_eq!(url("http://h/pods", "node2"), base);
        assert_ne!(url("http://h/other", NODE), base);
        // Not the file source's UID for the same content.
        assert_ne!(decode(GOOD).unwrap().metadata.uid.unwrap(), base);
    }

    #[test]
    fn explicit_uid_is_kept() {
        let pod = decode(&GOOD.replace("name: web", "name: web\n  uid: my-uid")).unwrap();
        assert_eq!(pod.metadata.uid.as_deref(), Some("my-uid"));
        let ann = pod.metadata.annotations.unwrap();
        assert_eq!(ann[CONFIG_HASH_ANNOTATION], "my-uid");
    }

    #[test]
    fn annotations_and_toleration() {
        let pod =
            decode(&GOOD.replace("name: web", "name: web\n  annotations:\n    team: a")).unwrap();
        let uid = pod.metadata.uid.clone().unwrap();
        let ann = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[CONFIG_HASH_ANNOTATION], uid);
        assert_eq!(ann[CONFIG_SOURCE_ANNOTATION], "file");
        assert_eq!(ann["team"], "a");
        let tolerations = pod.spec.as_ref().unwrap().tolerations.as_ref().unwrap();
        assert_eq!(
            tolerations,
            &vec![Toleration {
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                ..Default::default()
            }]
        );
        // Already present: not duplicated.
        let text = format!("{GOOD}  tolerations:\n  - operator: Exists\n    effect: NoExecute\n");
        let pod = decode(&text).unwrap();
        assert_eq!(pod.spec.unwrap().tolerations.unwrap().len(), 1);
    }
}

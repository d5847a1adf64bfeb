//! The API defaults (k8s.io/kubernetes/pkg/apis/core/v1/defaults.go), applied on
//! decode by kubelet's scheme. Go's zero value means "unset", so empty strings
//! and (where Go uses a plain int) zeros count as unset too.

use k8s_openapi::api::core::v1::{
    Container, HTTPGetAction, Lifecycle, ObjectFieldSelector, Pod, PodSecurityContext, PodSpec,
    Probe, Volume,
};
use std::collections::BTreeMap;

use crate::pod::{ImagePullPolicy, RestartPolicy};

pub(super) fn unset(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

pub(super) fn default_str(s: &mut Option<String>, value: &str) {
    if unset(s) {
        *s = Some(value.to_string());
    }
}

fn default_nonzero(v: &mut Option<i32>, value: i32) {
    if matches!(v, None | Some(0)) {
        *v = Some(value);
    }
}

pub(super) fn apply_api_defaults(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    default_str(&mut spec.restart_policy, RestartPolicy::Always.as_str());
    default_str(&mut spec.dns_policy, "ClusterFirst");
    default_str(&mut spec.scheduler_name, "default-scheduler");
    spec.termination_grace_period_seconds.get_or_insert(30);
    spec.security_context
        .get_or_insert_with(PodSecurityContext::default);
    spec.enable_service_links.get_or_insert(true);
    let host_network = spec.host_network.unwrap_or(false);
    for c in spec
        .init_containers
        .iter_mut()
        .flatten()
        .chain(spec.containers.iter_mut())
    {
        default_container(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    if unset(&c.image_pull_policy) {
        let policy = default_pull_policy(c.image.as_deref().unwrap_or(""));
        c.image_pull_policy = Some(policy.to_string());
    }
    default_str(&mut c.termination_message_path, "/dev/termination-log");
    default_str(&mut c.termination_message_policy, "File");
    for p in c.ports.iter_mut().flatten() {
        default_str(&mut p.protocol, "TCP");
        if host_network && matches!(p.host_port, None | Some(0)) {
            p.host_port = Some(p.container_port);
        }
    }
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lc) = &mut c.lifecycle {
        default_lifecycle(lc);
    }
    for e in c.env.iter_mut().flatten() {
        if let Some(f) = e.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            default_field_ref(f);
        }
    }
    // Limits without requests mean requests = limits (QoS depends on it).
    if let Some(res) = &mut c.resources
        && let Some(limits) = &res.limits
    {
        let requests = res.requests.get_or_insert_with(BTreeMap::new);
        for (k, v) in limits {
            requests.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
}

/// `Always` for `:latest` or an untagged, undigested image; else `IfNotPresent`
/// (also for a reference that does not parse: kubelet's `ParseImageName` then
/// gives no tag).
fn default_pull_policy(image: &str) -> ImagePullPolicy {
    if crate::pod::check_image_ref(image).is_err() {
        return ImagePullPolicy::IfNotPresent;
    }
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.rsplit_once(':').map(|(_, t)| t);
    match tag {
        Some("latest") => ImagePullPolicy::Always,
        None if !digest => ImagePullPolicy::Always,
        _ => ImagePullPolicy::IfNotPresent,
    }
}

fn default_probe(p: &mut Probe) {
    default_nonzero(&mut p.timeout_seconds, 1);
    default_nonzero(&mut p.period_seconds, 10);
    default_nonzero(&mut p.success_threshold, 1);
    default_nonzero(&mut p.failure_threshold, 3);
    if let Some(h) = &mut p.http_get {
        default_http_get(h);
    }
}

fn default_lifecycle(lc: &mut Lifecycle) {
    for h in [&mut lc.post_start, &mut lc.pre_stop].into_iter().flatten() {
        if let Some(g) = &mut h.http_get {
            default_http_get(g);
        }
    }
}

fn default_http_get(h: &mut HTTPGetAction) {
    default_str(&mut h.path, "/");
    default_str(&mut h.scheme, "HTTP");
}

fn default_field_ref(f: &mut ObjectFieldSelector) {
    default_str(&mut f.api_version, "v1");
}

fn default_volume(v: &mut Volume) {
    // A volume with no source is an emptyDir (SetDefaults_Volume).
    let mut probe = v.clone();
    probe.name = String::new();
    if probe == Volume::default() {
        v.empty_dir = Some(Default::default());
    }
    if let Some(hp) = &mut v.host_path
        && hp.type_.is_none()
    {
        hp.type_ = Some(String::new());
    }
    if let Some(d) = &mut v.downward_api {
        d.default_mode.get_or_insert(0o644);
        for item in d.items.iter_mut().flatten() {
            if let Some(f) = &mut item.field_ref {
                default_field_ref(f);
            }
        }
    }
    if let Some(p) = &mut v.projected {
        for src in p.sources.iter_mut().flatten() {
            for item in src
                .downward_api
                .iter_mut()
                .flat_map(|d| d.items.iter_mut().flatten())
            {
                if let Some(f) = &mut item.field_ref {
                    default_field_ref(f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::manifest::test_support::*;

    #[test]
    fn pod_level_defaults() {
        let spec = decode(GOOD).unwrap().spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.security_context, Some(PodSecurityContext::default()));
        assert_eq!(spec.enable_service_links, Some(true));
        // Set values are kept.
        let spec = decode(&format!(
            "{GOOD}  restartPolicy: Never\n  terminationGracePeriodSeconds: 0\n  enableServiceLinks: false\n"
        ))
        .unwrap()
        .spec
        .unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        assert_eq!(spec.enable_service_links, Some(false));
    }

    #[test]
    fn container_defaults() {
        let text = format!(
            "{GOOD}  initContainers:\n  - name: init\n    image: busybox@sha256:{}\n",
            "a".repeat(64)
        );
        let spec = decode(&text).unwrap().spec.unwrap();
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        let port = &c.ports.as_ref().unwrap()[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));
        assert_eq!(port.host_port, None);
        let init = &spec.init_containers.unwrap()[0];
        assert_eq!(init.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            init.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
    }

    #[test]
    fn pull_policy_default_follows_the_tag() {
        for (image, policy) in [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/nginx", "Always"),
            ("localhost:5000/nginx:1.0", "IfNotPresent"),
            ("nginx@sha256:abc", "IfNotPresent"),
            (
                "nginx:latest@sha256:7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097",
                "Always",
            ),
            (
                "nginx@sha256:7031c1b283388d2c2e09b57badb803c05ebed362dc88d84b480cc47f72a21097",
                "IfNotPresent",
            ),
            // Does not parse: no tag, as kubelet's parser says.
            ("nginx:latest@sha256:abc", "IfNotPresent"),
            ("Nginx", "IfNotPresent"),
            ("registry.k8s.io/pause:3.10", "IfNotPresent"),
        ] {
            assert_eq!(default_pull_policy(image).as_str(), policy, "{image}");
        }
        let pod = decode(&with_container_lines("    imagePullPolicy: Never\n")).unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image_pull_policy.as_deref(),
            Some("Never")
        );
    }

    #[test]
    fn host_network_copies_container_port_to_host_port() {
        let pod = decode(&format!("{GOOD}  hostNetwork: true\n")).unwrap();
        let spec = pod.spec.unwrap();
        let port = &spec.containers[0].ports.as_ref().unwrap()[0];
        assert_eq!(port.host_port, Some(80));
    }

    #[test]
    fn probe_and_env_defaults() {
        let text = with_container_lines(concat!(
            "    livenessProbe:\n      httpGet:\n        port: 80\n",
            "    readinessProbe:\n      tcpSocket:\n        port: 80\n      timeoutSeconds: 5\n",
            "    lifecycle:\n      preStop:\n        httpGet:\n          port: 80\n",
            "    env:\n    - name: NODE\n      valueFrom:\n        fieldRef:\n          fieldPath: spec.nodeName\n",
            "    resources:\n      limits:\n        cpu: 500m\n",
        ));
        let c = decode(&text).unwrap().spec.unwrap().containers.remove(0);
        let live = c.liveness_probe.unwrap();
        assert_eq!(live.timeout_seconds, Some(1));
        assert_eq!(live.period_seconds, Some(10));
        assert_eq!(live.success_threshold, Some(1));
        assert_eq!(live.failure_threshold, Some(3));
        let get = live.http_get.unwrap();
        assert_eq!(get.scheme.as_deref(), Some("HTTP"));
        assert_eq!(get.path.as_deref(), Some("/"));
        let ready = c.readiness_probe.unwrap();
        assert_eq!(ready.timeout_seconds, Some(5));
        assert_eq!(ready.period_seconds, Some(10));
        let pre_stop = c.lifecycle.unwrap().pre_stop.unwrap().http_get.unwrap();
        assert_eq!(pre_stop.path.as_deref(), Some("/"));
        let field_ref = c.env.unwrap()[0]
            .value_from
            .clone()
            .unwrap()
            .field_ref
            .unwrap();
        assert_eq!(field_ref.api_version.as_deref(), Some("v1"));
        let requests = c.resources.unwrap().requests.unwrap();
        assert_eq!(requests["cpu"].0, "500m");
    }
}

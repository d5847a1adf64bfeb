//! Building a container's `ContainerConfig`: command and args with `$(VAR)`
//! expansion, environment (values and downward-API field refs), working dir, log
//! path `<container>/<restartCount>.log`, resources, security context, and the
//! labels and annotations that let a restarted agent adopt it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

use super::labels::{self, ContainerType};
use super::sandbox;
use crate::safe_path::{self, PathError};

/// Facts about the pod's surroundings that env vars may reference.
#[derive(Debug, Clone, Default)]
pub struct PodEnv {
    pub pod_ips: Vec<String>,
    pub host_ip: String,
}

/// Expands `$(VAR)` references from `lookup`, as kubelet does: `$$` is a literal `$`,
/// and an undefined `$(VAR)` stays as it was.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let bytes = input.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().unwrap_or('$');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The value of a downward-API field path for this pod.
fn field_ref(pod: &Pod, path: &str, env: &PodEnv) -> Option<String> {
    let m = &pod.metadata;
    let key_of = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    match path {
        "metadata.name" => m.name.clone(),
        "metadata.namespace" => m.namespace.clone(),
        "metadata.uid" => m.uid.clone(),
        "spec.nodeName" => pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone()),
        "status.podIP" => env.pod_ips.first().cloned(),
        "status.podIPs" => Some(env.pod_ips.join(",")),
        "status.hostIP" | "status.hostIPs" => Some(env.host_ip.clone()),
        _ => {
            if let Some(k) = key_of("metadata.labels['") {
                m.labels.as_ref().and_then(|l| l.get(&k).cloned())
            } else if let Some(k) = key_of("metadata.annotations['") {
                m.annotations.as_ref().and_then(|a| a.get(&k).cloned())
            } else {
                None
            }
        }
    }
}

/// The container's environment in order, each value expanded against the ones before it.
pub fn environment(pod: &Pod, container: &Container, env: &PodEnv) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for EnvVar {
        name,
        value,
        value_from,
    } in container.env.iter().flatten()
    {
        let raw = if let Some(v) = value {
            let lookup = |k: &str| index.get(k).map(|&i| out[i].1.clone());
            expand(v, &lookup)
        } else if let Some(fr) = value_from.as_ref().and_then(|vf| vf.field_ref.as_ref()) {
            field_ref(pod, &fr.field_path, env).unwrap_or_default()
        } else {
            String::new()
        };
        match index.get(name) {
            Some(&i) => out[i].1 = raw,
            None => {
                index.insert(name.clone(), out.len());
                out.push((name.clone(), raw));
            }
        }
    }
    out
}

/// Linux resources from the container's requests and limits (kubelet's formulas).
pub fn linux_resources(container: &Container) -> cri::LinuxContainerResources {
    use crate::quantity;
    let res = container.resources.as_ref();
    let get = |which: &str, name: &str| {
        let m = match which {
            "requests" => res.and_then(|r| r.requests.as_ref()),
            _ => res.and_then(|r| r.limits.as_ref()),
        };
        m.and_then(|m| m.get(name)).cloned()
    };
    let cpu_limit = get("limits", "cpu").and_then(|q| quantity::milli_cpu(&q));
    // Requests default to limits when only limits are set.
    let cpu_request = get("requests", "cpu")
        .and_then(|q| quantity::milli_cpu(&q))
        .or(cpu_limit);
    let mem_limit = get("limits", "memory").and_then(|q| quantity::bytes(&q));
    let mut r = cri::LinuxContainerResources {
        cpu_shares: cpu_request.map(milli_cpu_to_shares).unwrap_or(2),
        ..Default::default()
    };
    if let Some(limit) = cpu_limit {
        r.cpu_period = 100_000;
        r.cpu_quota = (limit.max(10) * 100_000 / 1000).max(1000);
    }
    if let Some(mem) = mem_limit {
        r.memory_limit_in_bytes = mem;
    }
    r
}

/// CPU shares for a milli-CPU request: `m × 1024 / 1000`, clamped to 2..262144.
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli == 0 {
        return 2;
    }
    (milli * 1024 / 1000).clamp(2, 262_144)
}

/// `<container>/<restartCount>.log`, relative to the pod's log directory; the container
/// name must be one plain path component, so the log stays in the pod's directory.
pub fn container_log_path(name: &str, restart_count: i32) -> Result<String, PathError> {
    Ok(format!(
        "{}/{restart_count}.log",
        safe_path::component(name)?
    ))
}

/// After a restart of the agent (no runtime status left), the restart count is
/// recovered from the log files `<N>.log` in the container's log directory.
pub fn restart_count_from_logs(container_log_dir: &Path) -> i32 {
    let Ok(entries) = std::fs::read_dir(container_log_dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".log")?
                .parse::<i32>()
                .ok()
        })
        .max()
        .map(|n| n + 1)
        .unwrap_or(0)
}

/// Everything needed to build one container's config.
pub struct ContainerRequest<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    pub kind: ContainerType,
    pub restart_count: i32,
    pub image_ref: &'a str,
    pub env: &'a PodEnv,
    pub mounts: Vec<cri::Mount>,
}

/// Builds the CRI container config. Fails only for a container name that is not a safe
/// path component (its log path is built from it).
pub fn container_config(req: &ContainerRequest<'_>) -> Result<cri::ContainerConfig, PathError> {
    let ContainerRequest {
        pod,
        container,
        kind,
        restart_count,
        image_ref,
        env,
        ..
    } = req;
    let envs = environment(pod, container, env);
    let lookup = |k: &str| envs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter().flatten().map(|s| expand(s, &lookup)).collect()
    };
    let sc = container.security_context.as_ref();
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let log_path = container_log_path(&container.name, *restart_count)?;
    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt: *restart_count as u32,
        }),
        image: Some(cri::ImageSpec {
            image: image_ref.to_string(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: expand_all(&container.command),
        args: expand_all(&container.args),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: envs
            .iter()
            .map(|(k, v)| cri::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        mounts: req.mounts.clone(),
        labels: labels::container_labels(pod, container),
        annotations: labels::container_annotations(pod, container, *restart_count, *kind),
        log_path,
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(linux_resources(container)),
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(sandbox::namespace_options(pod)),
                privileged: sc.and_then(|s| s.privileged).unwrap_or(false),
                run_as_user: sc
                    .and_then(|s| s.run_as_user)
                    .or(pod_sc.and_then(|s| s.run_as_user))
                    .map(|value| cri::Int64Value { value }),
                run_as_group: sc
                    .and_then(|s| s.run_as_group)
                    .or(pod_sc.and_then(|s| s.run_as_group))
                    .map(|value| cri::Int64Value { value }),
                readonly_rootfs: sc
                    .and_then(|s| s.read_only_root_filesystem)
                    .unwrap_or(false),
                capabilities: caps.map(|c| cri::Capability {
                    add_capabilities: c.add.clone().unwrap_or_default(),
                    drop_capabilities: c.drop.clone().unwrap_or_default(),
                    add_ambient_capabilities: Vec::new(),
                }),
                no_new_privs: sc
                    .and_then(|s| s.allow_privilege_escalation)
                    .map(|a| !a)
                    .unwrap_or(false),
                ..Default::default()
            }),
        }),
        ..Default::default()
    })
}

/// Host directory of the container's logs: `<pod log dir>/<container>`.
pub fn container_log_dir(pod_log_dir: &Path, name: &str) -> Result<PathBuf, PathError> {
    safe_path::beneath(pod_log_dir, &[name])
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn lookup(k: &str) -> Option<String> {
        match k {
            "A" => Some("1".into()),
            "B" => Some("two".into()),
            _ => None,
        }
    }

    #[test]
    fn expands_like_kubelet() {
        assert_eq!(expand("x$(A)y", &lookup), "x1y");
        assert_eq!(expand("$(A)-$(B)", &lookup), "1-two");
        assert_eq!(expand("$(C)", &lookup), "$(C)");
        assert_eq!(expand("$$(A)", &lookup), "$(A)");
        assert_eq!(expand("$A", &lookup), "$A");
        assert_eq!(expand("$(A", &lookup), "$(A");
        assert_eq!(expand("héllo $(B)", &lookup), "héllo two");
    }

    fn pod_with_env(env: Vec<EnvVar>) -> (Pod, Container) {
        let c = Container {
            name: "app".into(),
            image: Some("img:1".into()),
            env: Some(env),
            command: Some(vec!["echo".into(), "$(GREETING)".into()]),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p-n1".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![c.clone()],
                node_name: Some("n1".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        (pod, c)
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn field(name: &str, path: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.into(),
                    api_version: None,
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn env_expands_in_order_and_resolves_field_refs() {
        let (pod, c) = pod_with_env(vec![
            var("NAME", "world"),
            var("GREETING", "hello $(NAME) $(LATER)"),
            var("LATER", "x"),
            field("POD", "metadata.name"),
            field("NODE", "spec.nodeName"),
            field("IP", "status.podIP"),
        ]);
        let env = PodEnv {
            pod_ips: vec!["10.1.0.5".into()],
            host_ip: "192.0.2.1".into(),
        };
        let vars = environment(&pod, &c, &env);
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(get("GREETING"), "hello world $(LATER)");
        assert_eq!(get("POD"), "p-n1");
        assert_eq!(get("NODE"), "n1");
        assert_eq!(get("IP"), "10.1.0.5");
        let config = |c: &Container| {
            container_config(&ContainerRequest {
                pod: &pod,
                container: c,
                kind: ContainerType::Regular,
                restart_count: 2,
                image_ref: "sha256:abc",
                env: &env,
                mounts: vec![],
            })
        };
        let cfg = config(&c).unwrap();
        assert_eq!(cfg.command, vec!["echo", "hello world $(LATER)"]);
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(cfg.metadata.unwrap().attempt, 2);
        // A name that would put the log elsewhere never becomes a config.
        for bad in ["../x", "/etc", "a/b", ""] {
            let mut c = c.clone();
            c.name = bad.into();
            assert!(config(&c).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn log_paths_stay_in_the_pod_log_dir() {
        let pod_dir = Path::new("/var/log/pods/ns_p_u");
        assert_eq!(
            container_log_dir(pod_dir, "app").unwrap(),
            pod_dir.join("app")
        );
        assert_eq!(container_log_path("app", 0).unwrap(), "app/0.log");
        for bad in ["..", "../../etc", "/etc", "a/b", ""] {
            assert!(container_log_dir(pod_dir, bad).is_err(), "{bad:?}");
            assert!(container_log_path(bad, 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shares_follow_kubelet_formula() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), 262_144);
    }

    #[test]
    fn restart_count_recovers_from_log_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(restart_count_from_logs(dir.path()), 0);
        std::fs::write(dir.path().join("0.log"), "").unwrap();
        std::fs::write(dir.path().join("3.log"), "").unwrap();
        std::fs::write(dir.path().join("junk.txt"), "").unwrap();
        assert_eq!(restart_count_from_logs(dir.path()), 4);
    }
}

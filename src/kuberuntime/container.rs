//! Building a container's `ContainerConfig`: command and args with `$(VAR)`
//! expansion, environment (values, downward-API field refs, object keys and env
//! files), working dir, log
//! path `<container>/<restartCount>.log`, resources, security context, and the
//! labels and annotations that let a restarted agent adopt it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, EnvVar, EphemeralContainer, Pod};

use super::labels::{self, ContainerType};
use crate::cm::{ResourceError, apply_cfs_period, linux_resources};
use crate::podenv::{
    DownwardError, ImageUser, MAX_EXPANDED_LEN, MAX_EXPANDED_TOTAL, SecurityError,
    SecuritySettings, TooLong, expand,
};
use crate::safe_path::{self, PathError};

pub(crate) use crate::podenv::PodEnv;

/// Why a container's config cannot be built: a `CreateContainerConfigError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ContainerConfigError {
    #[error("{field}: expands to more than {max} bytes")]
    ExpansionTooLong { field: String, max: usize },
    #[error("{field}: environment, command and args expand to more than {max} bytes in total")]
    ExpansionTotal { field: String, max: usize },
    #[error(transparent)]
    Resources(#[from] ResourceError),
    #[error(transparent)]
    Path(#[from] PathError),
    #[error(transparent)]
    Security(#[from] SecurityError),
    /// kubelet's message as it is (`configmaps "x" not found`, `couldn't find key ...`).
    #[error(transparent)]
    Object(#[from] crate::podenv::ObjectEnvError),
    /// kubelet's message as it is (`couldn't parse env file`, `environment variable
    /// key "K" not found in file ...`).
    #[error(transparent)]
    EnvFile(#[from] crate::volumes::EnvFileError),
    #[error("{field}: {source}")]
    Downward {
        field: String,
        #[source]
        source: DownwardError,
    },
}

/// Bytes left for one container's expanded strings; every produced string is
/// charged, so memory stays bounded even when values are later overridden.
struct Budget {
    left: usize,
}

impl Budget {
    fn new() -> Self {
        Budget {
            left: MAX_EXPANDED_TOTAL,
        }
    }

    fn charge(
        &mut self,
        field: impl FnOnce() -> String,
        len: usize,
    ) -> Result<(), ContainerConfigError> {
        self.left =
            self.left
                .checked_sub(len)
                .ok_or_else(|| ContainerConfigError::ExpansionTotal {
                    field: field(),
                    max: MAX_EXPANDED_TOTAL,
                })?;
        Ok(())
    }
}

/// The container's environment in order, each value expanded against the ones before it.
pub(crate) fn environment(
    pod: &Pod,
    container: &Container,
    env: &PodEnv,
) -> Result<Vec<(String, String)>, ContainerConfigError> {
    environment_within(pod, container, env, &mut Budget::new())
}

fn environment_within(
    pod: &Pod,
    container: &Container,
    env: &PodEnv,
    budget: &mut Budget,
) -> Result<Vec<(String, String)>, ContainerConfigError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    // envFrom first, then env overrides it (kubelet's order).
    let objects = env.objects.as_deref();
    for (name, value) in crate::podenv::env_from(pod, container, objects)? {
        budget.charge(|| format!("envFrom ({name})"), name.len() + value.len())?;
        match index.get(&name) {
            Some(&i) => out[i].1 = value,
            None => {
                index.insert(name.clone(), out.len());
                out.push((name, value));
            }
        }
    }
    for (
        i,
        EnvVar {
            name,
            value,
            value_from,
        },
    ) in container.env.iter().flatten().enumerate()
    {
        let field = || format!("env[{i}] ({name})");
        let raw = if let Some(v) = value {
            let lookup = |k: &str| index.get(k).map(|&i| out[i].1.as_str());
            expand(v, lookup, MAX_EXPANDED_LEN).map_err(|TooLong| {
                ContainerConfigError::ExpansionTooLong {
                    field: field(),
                    max: MAX_EXPANDED_LEN,
                }
            })?
        } else if let Some(vf) = value_from {
            let downward = |source| ContainerConfigError::Downward {
                field: field(),
                source,
            };
            if let Some(fr) = &vf.field_ref {
                crate::podenv::env_field(pod, &fr.field_path, env).map_err(downward)?
            } else if let Some(rf) = &vf.resource_field_ref {
                // kubelet's containerResourceRuntimeValue: another container when named.
                let target = match rf.container_name.as_deref().filter(|n| !n.is_empty()) {
                    Some(n) => crate::podenv::find_container(pod, n)
                        .ok_or_else(|| downward(DownwardError::NoContainer(n.to_string())))?,
                    None => container,
                };
                crate::podenv::resource_value(target, rf, &env.allocatable).map_err(downward)?
            } else if let Some(sel) = &vf.config_map_key_ref {
                match crate::podenv::config_map_key(pod, sel, objects)? {
                    Some(v) => v,
                    None => continue,
                }
            } else if let Some(sel) = &vf.secret_key_ref {
                match crate::podenv::secret_key(pod, sel, objects)? {
                    Some(v) => v,
                    None => continue,
                }
            } else if let Some(sel) = &vf.file_key_ref {
                match crate::volumes::file_key_value(pod, &env.pods_dir, sel)? {
                    Some(v) => v,
                    None => continue,
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        budget.charge(field, name.len() + raw.len())?;
        match index.get(name) {
            Some(&i) => out[i].1 = raw,
            None => {
                index.insert(name.clone(), out.len());
                out.push((name.clone(), raw));
            }
        }
    }
    Ok(out)
}

/// `<container>/<restartCount>.log`, relative to the pod's log directory; the container
/// name must be one plain path component, so the log stays in the pod's directory.
pub(crate) fn container_log_path(name: &str, restart_count: i32) -> Result<String, PathError> {
    Ok(format!(
        "{}/{restart_count}.log",
        safe_path::component(name)?
    ))
}

/// After a restart of the agent (no runtime status left), the restart count is
/// recovered from the log files `<N>.log` in the container's log directory.
pub(crate) fn restart_count_from_logs(container_log_dir: &Path) -> i32 {
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
pub(crate) struct ContainerRequest<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    pub kind: ContainerType,
    pub restart_count: i32,
    pub image_ref: &'a str,
    pub env: &'a PodEnv,
    pub mounts: Vec<cri::Mount>,
    /// kubelet's `oom_score_adj` for the container's QoS class, clamped for this host.
    pub oom_score_adj: i64,
    /// The CFS period for cpu limits (`cpuCFSQuotaPeriod`, µs); `None` when
    /// `cpuCFSQuota` is off, which leaves containers without a quota.
    pub cfs_period_us: Option<i64>,
    /// `memory.oom.group` and swap on this host.
    pub memory: &'a crate::cm::MemoryPolicy,
    /// The image's user, from `ImageStatus`, for runAsNonRoot and the default user.
    pub image_user: &'a ImageUser,
    pub security: &'a SecuritySettings,
    /// An ephemeral container's target: the runtime ID whose process namespace it
    /// joins (kubelet's `NamespaceMode_TARGET`).
    pub pid_target: Option<&'a str>,
    /// The pod's user namespace, as its sandbox has it (containers share it).
    pub userns: Option<&'a cri::UserNamespace>,
}

/// An ephemeral container as the container it runs as (kubelet's
/// `v1.Container(ec.EphemeralContainerCommon)`): every field but the target.
pub(crate) fn ephemeral_as_container(ec: &EphemeralContainer) -> Container {
    let ec = ec.clone();
    Container {
        args: ec.args,
        command: ec.command,
        env: ec.env,
        env_from: ec.env_from,
        image: ec.image,
        image_pull_policy: ec.image_pull_policy,
        lifecycle: ec.lifecycle,
        liveness_probe: ec.liveness_probe,
        name: ec.name,
        ports: ec.ports,
        readiness_probe: ec.readiness_probe,
        resize_policy: ec.resize_policy,
        resources: ec.resources,
        restart_policy: ec.restart_policy,
        restart_policy_rules: ec.restart_policy_rules,
        security_context: ec.security_context,
        startup_probe: ec.startup_probe,
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        termination_message_path: ec.termination_message_path,
        termination_message_policy: ec.termination_message_policy,
        tty: ec.tty,
        volume_devices: ec.volume_devices,
        volume_mounts: ec.volume_mounts,
        working_dir: ec.working_dir,
    }
}

/// The container's security context, with an ephemeral container's process namespace
/// its target's where it would otherwise have its own (kubelet's
/// `generateLinuxContainerConfig`).
fn security_context(
    req: &ContainerRequest<'_>,
) -> Result<cri::LinuxContainerSecurityContext, ContainerConfigError> {
    let mut sc = crate::podenv::container_security_context(
        req.pod,
        req.container,
        req.image_user,
        req.security,
    )?;
    if let (Some(target), Some(ns)) = (req.pid_target, sc.namespace_options.as_mut())
        && ns.pid == cri::NamespaceMode::Container as i32
    {
        ns.pid = cri::NamespaceMode::Target as i32;
        ns.target_id = target.to_string();
    }
    if let (Some(userns), Some(ns)) = (req.userns, sc.namespace_options.as_mut()) {
        ns.userns_options = Some(userns.clone());
    }
    Ok(sc)
}

/// The container's CRI Linux resources (kubelet's `generateLinuxContainerResources`):
/// the cgroup formulas, the CFS period, its `oom_score_adj`, and the memory policy's
/// unified settings. The same for `CreateContainer` and for a resize's
/// `UpdateContainerResources`.
pub(crate) fn container_resources(
    pod: &Pod,
    container: &Container,
    oom_score_adj: i64,
    cfs_period_us: Option<i64>,
    memory: &crate::cm::MemoryPolicy,
) -> Result<cri::LinuxContainerResources, ResourceError> {
    let mut resources = cri::LinuxContainerResources {
        oom_score_adj,
        ..linux_resources(container)?
    };
    apply_cfs_period(&mut resources, cfs_period_us);
    memory.apply(pod, container, &mut resources);
    Ok(resources)
}

/// Builds the CRI container config; an error is the pod's `CreateContainerConfigError`.
pub(crate) fn container_config(
    req: &ContainerRequest<'_>,
) -> Result<cri::ContainerConfig, ContainerConfigError> {
    let ContainerRequest {
        pod,
        container,
        kind,
        restart_count,
        image_ref,
        env,
        ..
    } = req;
    let mut budget = Budget::new();
    let envs = environment_within(pod, container, env, &mut budget)?;
    let lookup = |k: &str| envs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let mut expand_all = |what: &str, v: &Option<Vec<String>>| {
        let mut out = Vec::new();
        for (i, s) in v.iter().flatten().enumerate() {
            let field = || format!("{what}[{i}]");
            let e = expand(s, lookup, MAX_EXPANDED_LEN).map_err(|TooLong| {
                ContainerConfigError::ExpansionTooLong {
                    field: field(),
                    max: MAX_EXPANDED_LEN,
                }
            })?;
            budget.charge(field, e.len())?;
            out.push(e);
        }
        Ok::<_, ContainerConfigError>(out)
    };
    let command = expand_all("command", &container.command)?;
    let args = expand_all("args", &container.args)?;
    let resources = container_resources(
        pod,
        container,
        req.oom_score_adj,
        req.cfs_period_us,
        req.memory,
    )?;
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
        command,
        args,
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
            resources: Some(resources),
            security_context: Some(security_context(req)?),
        }),
        ..Default::default()
    })
}

/// Host directory of the container's logs: `<pod log dir>/<container>`.
pub(crate) fn container_log_dir(pod_log_dir: &Path, name: &str) -> Result<PathBuf, PathError> {
    safe_path::beneath(pod_log_dir, &[name])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::milli_cpu_to_shares;
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn lookup(k: &str) -> Option<&'static str> {
        match k {
            "A" => Some("1"),
            "B" => Some("two"),
            _ => None,
        }
    }

    fn ex(input: &str) -> String {
        expand(input, lookup, MAX_EXPANDED_LEN).unwrap()
    }

    #[test]
    fn expands_like_kubelet() {
        assert_eq!(ex("x$(A)y"), "x1y");
        assert_eq!(ex("$(A)-$(B)"), "1-two");
        assert_eq!(ex("$(C)"), "$(C)");
        assert_eq!(ex("$$(A)"), "$(A)");
        assert_eq!(ex("$A"), "$A");
        assert_eq!(ex("$(A"), "$(A");
        assert_eq!(ex("héllo $(B)"), "héllo two");
    }

    #[test]
    fn expansion_stops_at_its_limit() {
        assert_eq!(expand("$(B)$(B)", lookup, 6).as_deref(), Ok("twotwo"));
        assert_eq!(expand("$(B)$(B)x", lookup, 6), Err(TooLong));
        assert_eq!(expand("1234567", lookup, 6), Err(TooLong));
        assert_eq!(expand("$(C)", lookup, 3), Err(TooLong));
    }

    #[test]
    fn chained_env_references_cannot_blow_up() {
        // Each variable doubles the one before: 2^40 bytes if unbounded.
        let mut env = vec![var("V0", &"x".repeat(1024))];
        for i in 1..=30 {
            env.push(var(
                &format!("V{i}"),
                &format!("$(V{})$(V{})", i - 1, i - 1),
            ));
        }
        let (pod, c) = pod_with_env(env);
        let err = environment(&pod, &c, &PodEnv::default()).unwrap_err();
        // 1 KiB doubles past 128 KiB at V8.
        assert_eq!(
            err.to_string(),
            format!("env[8] (V8): expands to more than {MAX_EXPANDED_LEN} bytes")
        );

        // Many values each under the per-string limit still hit the total.
        let mut env = vec![var("BIG", &"y".repeat(100 * 1024))];
        for i in 0..30 {
            env.push(var(&format!("C{i}"), "$(BIG)"));
        }
        let (pod, c) = pod_with_env(env);
        let err = environment(&pod, &c, &PodEnv::default()).unwrap_err();
        assert!(
            matches!(err, ContainerConfigError::ExpansionTotal { ref field, max: MAX_EXPANDED_TOTAL } if field == "env[20] (C19)"),
            "{err}"
        );

        // And the command line shares the container's budget.
        let env = vec![var("BIG", &"y".repeat(100 * 1024))];
        let (pod, mut c) = pod_with_env(env);
        c.args = Some(vec!["$(BIG)".to_string(); 25]);
        let err = container_config(&request(&pod, &c, &PodEnv::default())).unwrap_err();
        assert!(
            matches!(err, ContainerConfigError::ExpansionTotal { ref field, .. } if field == "args[19]"),
            "{err}"
        );
    }

    #[test]
    fn an_ephemeral_container_joins_its_targets_processes_unless_the_pod_shares_them() {
        let (mut pod, c) = pod_with_env(vec![]);
        let env = PodEnv::default();
        let pid_of = |pod: &Pod| {
            let mut req = request(pod, &c, &env);
            req.pid_target = Some("target-id");
            let config = container_config(&req).unwrap();
            let ns = (config.linux.unwrap().security_context.unwrap())
                .namespace_options
                .unwrap();
            (ns.pid, ns.target_id)
        };
        assert_eq!(
            pid_of(&pod),
            (cri::NamespaceMode::Target as i32, "target-id".to_string())
        );
        pod.spec.as_mut().unwrap().share_process_namespace = Some(true);
        assert_eq!(
            pid_of(&pod),
            (cri::NamespaceMode::Pod as i32, String::new())
        );
        // Without a target, none is named.
        let config = container_config(&request(&pod, &c, &env)).unwrap();
        let sc = config.linux.unwrap().security_context.unwrap();
        assert!(sc.namespace_options.unwrap().target_id.is_empty());
    }

    #[test]
    fn an_ephemeral_container_runs_as_the_container_it_describes() {
        let ec = k8s_openapi::api::core::v1::EphemeralContainer {
            name: "debugger".into(),
            image: Some("busybox:1".into()),
            command: Some(vec!["sh".into()]),
            stdin: Some(true),
            tty: Some(true),
            target_container_name: Some("app".into()),
            ..Default::default()
        };
        let c = ephemeral_as_container(&ec);
        assert_eq!(
            (c.name.as_str(), c.image.as_deref(), c.stdin, c.tty),
            ("debugger", Some("busybox:1"), Some(true), Some(true))
        );
        assert_eq!(c.command, Some(vec!["sh".to_string()]));
    }

    fn request<'a>(pod: &'a Pod, c: &'a Container, env: &'a PodEnv) -> ContainerRequest<'a> {
        ContainerRequest {
            pod,
            container: c,
            kind: ContainerType::Regular,
            restart_count: 2,
            image_ref: "sha256:abc",
            env,
            mounts: vec![],
            oom_score_adj: 42,
            cfs_period_us: Some(100_000),
            memory: &NO_MEMORY_POLICY,
            image_user: &ROOT,
            security: &SECURITY,
            pid_target: None,
            userns: None,
        }
    }

    static NO_MEMORY_POLICY: crate::cm::MemoryPolicy = crate::cm::MemoryPolicy::NONE;

    static ROOT: ImageUser = ImageUser {
        uid: Some(0),
        username: String::new(),
    };
    static SECURITY: SecuritySettings = SecuritySettings {
        seccomp_root: PathBuf::new(),
        seccomp_default: false,
    };

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

    #[test]
    fn resource_field_refs_read_the_named_container_or_this_one() {
        use k8s_openapi::api::core::v1::{ResourceFieldSelector, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let rf = |name: &str, container: Option<&str>| EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(EnvVarSource {
                resource_field_ref: Some(ResourceFieldSelector {
                    container_name: container.map(Into::into),
                    resource: "limits.memory".into(),
                    divisor: Some(Quantity("1Mi".into())),
                }),
                ..Default::default()
            }),
        };
        let (mut pod, c) = pod_with_env(vec![rf("OWN", None), rf("SIDE", Some("side"))]);
        let side = Container {
            name: "side".into(),
            resources: Some(ResourceRequirements {
                limits: Some([("memory".to_string(), Quantity("64Mi".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        pod.spec.as_mut().unwrap().containers.push(side);
        let env = PodEnv {
            allocatable: crate::cm::NodeResources {
                memory_bytes: 2 << 30,
                ..Default::default()
            },
            ..Default::default()
        };
        let vars = environment(&pod, &c, &env).unwrap();
        assert_eq!(vars[0], ("OWN".to_string(), "2048".to_string()));
        assert_eq!(vars[1], ("SIDE".to_string(), "64".to_string()));
        let (pod, c) = pod_with_env(vec![rf("X", Some("ghost"))]);
        assert_eq!(
            environment(&pod, &c, &env).unwrap_err().to_string(),
            "env[0] (X): resourceFieldRef: container \"ghost\" not found in the pod"
        );
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
            host_ips: vec!["192.0.2.1".into()],
            ..Default::default()
        };
        let vars = environment(&pod, &c, &env).unwrap();
        // An unknown field path is the container's config error, naming the variable.
        let (bad_pod, bad) = pod_with_env(vec![var("A", "1"), field("BAD", "spec.bogus")]);
        assert_eq!(
            environment(&bad_pod, &bad, &env).unwrap_err().to_string(),
            "env[1] (BAD): unsupported fieldPath: spec.bogus"
        );
        let get = |k: &str| vars.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(get("GREETING"), "hello world $(LATER)");
        assert_eq!(get("POD"), "p-n1");
        assert_eq!(get("NODE"), "n1");
        assert_eq!(get("IP"), "10.1.0.5");
        let cfg = container_config(&request(&pod, &c, &env)).unwrap();
        assert_eq!(cfg.command, vec!["echo", "hello world $(LATER)"]);
        assert_eq!(cfg.log_path, "app/2.log");
        assert_eq!(cfg.metadata.unwrap().attempt, 2);
        // A name that would put the log elsewhere never becomes a config.
        for bad in ["../x", "/etc", "a/b", ""] {
            let mut c = c.clone();
            c.name = bad.into();
            assert!(
                container_config(&request(&pod, &c, &env)).is_err(),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn the_memory_policy_lands_in_the_containers_unified_resources() {
        let (pod, c) = pod_with_env(vec![]);
        let env = PodEnv::default();
        let unified = |policy: &crate::cm::MemoryPolicy| {
            let req = ContainerRequest {
                memory: policy,
                ..request(&pod, &c, &env)
            };
            let cfg = container_config(&req).unwrap();
            cfg.linux.unwrap().resources.unwrap().unified
        };
        assert!(unified(&NO_MEMORY_POLICY).is_empty());
        // cgroup v2 with a swap controller and the default NoSwap.
        let v2 = crate::cm::MemoryPolicy::new(
            crate::cm::CgroupVersion::V2,
            &crate::cm::MemorySettings::default(),
            true,
            1 << 30,
            1 << 30,
        );
        let u = unified(&v2);
        assert_eq!(
            (
                u["memory.oom.group"].as_str(),
                u["memory.swap.max"].as_str()
            ),
            ("1", "0")
        );
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
        assert_eq!(milli_cpu_to_shares(i64::MAX), 262_144);
    }

    fn with_resources(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        use k8s_openapi::api::core::v1::ResourceRequirements;
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let m = |v: &[(&str, &str)]| {
            Some(
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect(),
            )
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: m(requests),
                limits: m(limits),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn resources_follow_kubelet_formulas() {
        let r = linux_resources(&with_resources(
            &[("cpu", "250m")],
            &[("cpu", "500m"), ("memory", "128Mi")],
        ))
        .unwrap();
        assert_eq!(
            (r.cpu_shares, r.cpu_period, r.cpu_quota),
            (256, 100_000, 50_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 128 << 20);
        // Tiny limits: at least 10m, and at least 1 ms of quota.
        let r = linux_resources(&with_resources(&[], &[("cpu", "1m")])).unwrap();
        assert_eq!((r.cpu_shares, r.cpu_quota), (2, 1000));
        // Zero limit: no quota (kubelet's milliCPUToQuota).
        let r = linux_resources(&with_resources(&[], &[("cpu", "0")])).unwrap();
        assert_eq!(r.cpu_quota, 0);
        // Huge but representable: shares clamp, quota still exact.
        let r = linux_resources(&with_resources(&[], &[("cpu", "1M")])).unwrap();
        assert_eq!((r.cpu_shares, r.cpu_quota), (262_144, 100_000_000_000));
    }

    #[test]
    fn resource_overflow_is_an_error_never_a_wrap() {
        let err = |req: &[(&str, &str)], lim: &[(&str, &str)]| {
            linux_resources(&with_resources(req, lim)).unwrap_err()
        };
        // 100 T cores: millicores fit i64, quota (× 100000 / 1000) would not.
        let e = err(&[], &[("cpu", "100T")]);
        assert_eq!(e.field(), "resources.limits.cpu");
        assert!(
            matches!(e, ResourceError::CpuLimit { milli, .. } if milli == 100_000_000_000_000_000),
            "{e}"
        );
        // Not even millicores fit.
        let e = err(&[("cpu", "10E")], &[]);
        assert_eq!(e.field(), "resources.requests.cpu");
        assert!(e.reason().contains("too large"), "{e}");
        let e = err(&[], &[("memory", "8Ei")]);
        assert_eq!(
            e.to_string(),
            format!(
                "resources.limits.memory: \"8Ei\" is too large: it must be at most {} bytes",
                i64::MAX
            )
        );
        let e = err(&[], &[("memory", "-1")]);
        assert_eq!(
            e.to_string(),
            "resources.limits.memory: must be greater than or equal to 0"
        );
        let e = err(&[("memory", "lots")], &[]);
        assert_eq!(e.field(), "resources.requests.memory");
        // And container_config surfaces it as its error (CreateContainerConfigError).
        let (pod, _) = pod_with_env(vec![]);
        let c = with_resources(&[], &[("cpu", "100T")]);
        assert!(matches!(
            container_config(&request(&pod, &c, &PodEnv::default())),
            Err(ContainerConfigError::Resources(
                ResourceError::CpuLimit { .. }
            ))
        ));
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

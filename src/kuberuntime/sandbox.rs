//! kubelet's `kuberuntime_sandbox.go`: building a pod's `PodSandboxConfig` (identity,
//! log directory, DNS, ports, namespaces, and the one place where the pod's cgroup
//! parent is decided), the pod's runtime handler and user namespace, and
//! `createPodSandbox`, the runtime manager's `RunPodSandbox`.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;

use super::errors::SyncError;
use super::labels;
use super::manager::RuntimeManager;
use super::types::PodRuntimeStatus;
use crate::contracts::PodCgroupParent;
use crate::events::EventType::Warning;
use crate::events::{ObjectRef, reason};
use crate::pod::{pod_ref, pod_uid};
use crate::podenv::{DnsConfigurer, DnsError, HostsError};
use crate::safe_path::PathError;
use tracing::{info, warn};

/// Why a pod's sandbox config cannot be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxConfigError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("DNS: {0}")]
    Dns(#[from] DnsError),
    #[error("host name: {0}")]
    Hostname(#[from] HostsError),
}

impl SandboxConfigError {
    /// Only an unreadable resolv.conf can get better on its own.
    pub(crate) fn retryable(&self) -> bool {
        matches!(self, SandboxConfigError::Dns(e) if e.retryable())
    }
}

/// The host facts a sandbox config needs.
#[derive(Debug, Clone)]
pub(crate) struct SandboxEnv {
    /// `--pod-logs-dir`.
    pub pod_logs_dir: PathBuf,
    /// The node's DNS settings (`clusterDNS`, `clusterDomain`, `resolvConf`).
    pub dns: DnsConfigurer,
    /// `<root-dir>/pods`: per-pod directories (emptyDir volumes).
    pub pods_dir: PathBuf,
    /// Decides each sandbox's cgroup parent.
    pub cgroups: Arc<dyn PodCgroupParent>,
    /// The node's memory capacity: a Burstable container's `oom_score_adj` scales with
    /// its request's share of it.
    pub node_memory_bytes: i64,
    /// The lowest `oom_score_adj` this host lets oxlet give a container (its own).
    pub min_oom_score_adj: i64,
    /// `memory.oom.group` and swap for each container (and the group for the sandbox).
    pub memory: crate::cm::MemoryPolicy,
    /// `cpuCFSQuotaPeriod` in µs, `None` with `cpuCFSQuota` off.
    pub cfs_period_us: Option<i64>,
    /// Seccomp profile root and default, for the containers' security contexts.
    pub security: crate::podenv::SecuritySettings,
    /// Node allocatable: the downward API's value of a limit a container does not set,
    /// and the size of a Memory emptyDir.
    pub allocatable: crate::cm::NodeResources,
}

/// The CRI runtime handler for the pod's `runtimeClassName`. Without an apiserver
/// there are no RuntimeClass objects to look the handler up in, so the class name is
/// the handler (what most RuntimeClasses map to); an unknown one fails `RunPodSandbox`
/// with the runtime's message. kubelet without an apiserver ignores the field and runs
/// the pod on the default runtime, which would quietly drop the isolation asked for.
pub(crate) fn runtime_handler(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref())
        .unwrap_or("")
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => cri::Protocol::Udp as i32,
        Some("SCTP") => cri::Protocol::Sctp as i32,
        _ => cri::Protocol::Tcp as i32,
    }
}

/// The CRI port mappings of every container port that asks for a host port.
pub(crate) fn port_mappings(pod: &Pod) -> Vec<cri::PortMapping> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| cri::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect()
}

/// The full sandbox config for `pod` at sandbox `attempt`. Fails when the pod's
/// namespace, name or UID cannot name its log directory safely, or its DNS settings
/// or host name cannot be made.
pub(crate) fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    env: &SandboxEnv,
) -> Result<cri::PodSandboxConfig, SandboxConfigError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let hostname = crate::podenv::sandbox_hostname(pod, &env.dns.cluster_domain)?;
    let pod_sc = spec.and_then(|s| s.security_context.as_ref());
    let log_directory = crate::pod::pod_log_dir(&env.pod_logs_dir, &namespace, &name, &uid)?;
    Ok(cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.clone(),
            uid: uid.clone(),
            namespace: namespace.clone(),
            attempt,
        }),
        hostname,
        log_directory: log_directory.to_string_lossy().into_owned(),
        dns_config: Some(env.dns.pod_dns(pod)?),
        port_mappings: port_mappings(pod),
        labels: labels::sandbox_labels(pod),
        annotations: labels::sandbox_annotations(pod),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: env.cgroups.cgroup_parent(pod),
            security_context: Some(crate::podenv::sandbox_security_context(pod)),
            sysctls: pod_sc
                .and_then(|sc| sc.sysctls.clone())
                .unwrap_or_default()
                .into_iter()
                // runc wants dots as the separator (kubelet's NormalizeName).
                .map(|s| (crate::podenv::normalize_name(&s.name), s.value))
                .collect(),
            ..sandbox_resources(pod, env.cfs_period_us, &env.memory)
        }),
        windows: None,
    })
}

/// Puts the pod's user namespace into the sandbox's namespace options.
pub(crate) fn set_user_namespace(config: &mut cri::PodSandboxConfig, userns: cri::UserNamespace) {
    let ns = (config.linux.get_or_insert_with(Default::default))
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default);
    ns.userns_options = Some(userns);
}

/// kubelet's `applySandboxResources`: the pod's requests and limits without the
/// overhead as `resources`, and the overhead (requests = limits) as `overhead`,
/// each in container-resource form (`calculateLinuxResources`, so with
/// `memory.oom.group` where the policy asks for it; an absent overhead stays empty).
/// A quantity that cannot be read (manifest validation refuses those) leaves both unset.
fn sandbox_resources(
    pod: &Pod,
    cfs_period_us: Option<i64>,
    policy: &crate::cm::MemoryPolicy,
) -> cri::LinuxPodSandboxConfig {
    use crate::cm::{milli_cpu_to_quota, milli_cpu_to_shares, sandbox_amounts};
    let Ok(amounts) = sandbox_amounts(pod) else {
        return cri::LinuxPodSandboxConfig::default();
    };
    let linux = |cpu_request: Option<i64>, cpu_limit: Option<i64>, memory: Option<i64>| {
        let mut r = cri::LinuxContainerResources {
            // A request left out defaults to the limit.
            cpu_shares: milli_cpu_to_shares(cpu_request.or(cpu_limit).unwrap_or(0)),
            memory_limit_in_bytes: memory.unwrap_or(0),
            ..Default::default()
        };
        if let Some(period) = cfs_period_us {
            r.cpu_period = period;
            r.cpu_quota = milli_cpu_to_quota(cpu_limit.unwrap_or(0), period).unwrap_or(-1);
        }
        policy.apply_oom_group(&mut r);
        r
    };
    let overhead = amounts
        .overhead
        .map_or_else(cri::LinuxContainerResources::default, |o| {
            linux(o.cpu_milli, o.cpu_milli, o.memory_bytes)
        });
    cri::LinuxPodSandboxConfig {
        resources: Some(linux(
            amounts.requests.cpu_milli,
            amounts.limits.cpu_milli,
            amounts.limits.memory_bytes,
        )),
        overhead: Some(overhead),
        ..Default::default()
    }
}

impl RuntimeManager {
    /// SyncPod's step 4 (kubelet's `createPodSandbox`): runs a new sandbox and reads its
    /// IPs back; returns its ID and the pod's IPs (on host network, the status's).
    pub(super) async fn create_pod_sandbox(
        &self,
        pod: &Pod,
        status: &PodRuntimeStatus,
        attempt: u32,
        sandbox_config: &cri::PodSandboxConfig,
        objects: Option<&crate::objects::PodObjects>,
    ) -> Result<(String, Vec<String>), SyncError> {
        let pod_ref = pod_ref(pod);
        let uid = pod_uid(pod);
        let mut ips = status.ips.clone();
        let config = sandbox_config.clone();
        if let Err(e) = std::fs::create_dir_all(&config.log_directory) {
            warn!(pod = %pod_ref, podUID = %uid, dir = %config.log_directory, error = %e, "cannot create pod log directory");
        }
        if let Some(msg) = self.sandbox_env.dns.missing_cluster_dns(pod) {
            let pod_obj = ObjectRef::pod(pod);
            (self.events).event(&pod_obj, Warning, reason::MISSING_CLUSTER_DNS, msg);
        }
        let handler = match self.runtime_handler(pod, objects) {
            Ok(h) => h,
            Err(e) => {
                // kubelet's event and wording; retried on the next sync.
                let msg = format!("Failed to create pod sandbox: {e}");
                warn!(pod = %pod_ref, podUID = %uid, event = "FailedCreatePodSandBox", runtimeClassName = crate::objects::runtime_class_name(pod).unwrap_or(""), "{msg}");
                let pod_obj = ObjectRef::pod(pod);
                (self.events).event(&pod_obj, Warning, reason::FAILED_CREATE_POD_SANDBOX, msg);
                return Err(SyncError::RuntimeClass(e));
            }
        };
        let handler = handler.as_str();
        if let Some(class) = crate::objects::runtime_class_name(pod) {
            // kubelet's V(2) line, with the class that chose the handler.
            info!(pod = %pod_ref, podUID = %uid, runtimeClassName = class, runtimeHandler = handler, "Running pod with runtime handler");
        }
        info!(pod = %pod_ref, podUID = %uid, attempt = attempt, hostNetwork = crate::pod::is_host_network(pod), runtimeHandler = handler, "creating pod sandbox");
        crate::metrics::kubelet().started_pods.inc();
        self.hooks.pre_run_pod_sandbox(pod);
        let id = match self.cri.run_pod_sandbox(config, handler).await {
            Ok(id) => id,
            Err(e) => {
                crate::metrics::kubelet().started_pods_errors.inc();
                // kubelet's event and wording; the pod stays Pending and is retried.
                warn!(pod = %pod_ref, podUID = %uid, event = "FailedCreatePodSandBox", error = %e, "Failed to create pod sandbox: {e}");
                let msg = format!("Failed to create pod sandbox: {e}");
                (self.events).event(
                    &ObjectRef::pod(pod),
                    Warning,
                    reason::FAILED_CREATE_POD_SANDBOX,
                    msg,
                );
                return Err(SyncError::CreateSandbox(e));
            }
        };
        if !crate::pod::is_host_network(pod) {
            let st = self.cri.pod_sandbox_status(&id).await?;
            ips = st
                .network
                .map(|n| {
                    std::iter::once(n.ip)
                        .chain(n.additional_ips.into_iter().map(|i| i.ip))
                        .filter(|ip| !ip.is_empty())
                        .collect()
                })
                .unwrap_or_default();
        }
        info!(pod = %pod_ref, podUID = %uid, sandboxID = %id, ips = %ips.join(","), "pod sandbox ready");
        Ok((id, ips))
    }

    /// The pod's user namespace (kubelet's `GetOrCreateUserNamespaceMappings`) for its
    /// runtime handler, which must say it supports them when the pod asks for one.
    pub(super) fn user_namespace(
        &self,
        pod: &Pod,
        objects: Option<&crate::objects::PodObjects>,
    ) -> Result<cri::UserNamespace, super::userns::UsernsError> {
        let handler = self
            .runtime_handler(pod, objects)
            .unwrap_or_else(|_| self.known_handler(pod));
        let supported = (self.runtime_state.handler(&handler)).is_some_and(|h| h.user_namespaces);
        self.userns.mappings(pod, &handler, supported)
    }

    /// kubelet's `LookupRuntimeHandler`: the CRI handler of the pod's RuntimeClass.
    /// With an apiserver the class object decides (its `handler`), and a class that
    /// does not exist fails the sandbox with the apiserver's NotFound; standalone no
    /// class objects exist and the class name is the handler (`sandbox::runtime_handler`).
    fn runtime_handler(
        &self,
        pod: &Pod,
        objects: Option<&crate::objects::PodObjects>,
    ) -> Result<String, crate::objects::ObjectError> {
        match objects.and_then(|o| o.runtime_class.as_ref()) {
            Some(Ok(class)) => Ok(class.handler.clone()),
            Some(Err(e)) => Err(e.clone()),
            None => Ok(super::sandbox::runtime_handler(pod).to_string()),
        }
    }

    /// The pod's handler as far as it is known without a fetch: the RuntimeClass the
    /// last sync read, else the class name (for readers outside a sync).
    pub(super) fn known_handler(&self, pod: &Pod) -> String {
        let class = crate::objects::runtime_class_name(pod)
            .zip(self.objects.as_ref())
            .and_then(|(name, m)| m.cached_runtime_class(name));
        match class {
            Some(rc) => rc.handler.clone(),
            None => super::sandbox::runtime_handler(pod).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_carries_the_pods_resources_and_its_overhead_apart() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "uid": "u1"},
            "spec": {
                "overhead": {"cpu": "250m", "memory": "120Mi"},
                "containers": [
                    {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "32Mi"}}},
                ],
            },
        }))
        .unwrap();
        let none = crate::cm::MemoryPolicy::default();
        let l = sandbox_resources(&pod, Some(100_000), &none);
        let r = l.resources.unwrap();
        // Requests 1 + 0.5 CPU; limits: only a's cpu, both memories.
        assert_eq!(r.cpu_shares, 1536);
        assert_eq!((r.cpu_quota, r.cpu_period), (100_000, 100_000));
        assert_eq!(r.memory_limit_in_bytes, 96 << 20);
        let o = l.overhead.unwrap();
        assert_eq!(o.cpu_shares, 256);
        assert_eq!((o.cpu_quota, o.cpu_period), (25_000, 100_000));
        assert_eq!(o.memory_limit_in_bytes, 120 << 20);
        // Without cpuCFSQuota, no quota or period; without overhead, an empty one.
        let mut plain = pod.clone();
        plain.spec.as_mut().unwrap().overhead = None;
        let l = sandbox_resources(&plain, None, &none);
        assert_eq!(
            (
                l.resources.as_ref().unwrap().cpu_quota,
                l.resources.unwrap().cpu_period
            ),
            (0, 0)
        );
        assert_eq!(l.overhead, Some(cri::LinuxContainerResources::default()));
        // cgroup v2: memory.oom.group on both, as kubelet's calculateLinuxResources;
        // an absent overhead stays empty.
        let v2 = crate::cm::MemoryPolicy::new(
            crate::cm::CgroupVersion::V2,
            &crate::cm::MemorySettings::default(),
            false,
            1 << 30,
            0,
        );
        let l = sandbox_resources(&pod, Some(100_000), &v2);
        for r in [l.resources.unwrap(), l.overhead.unwrap()] {
            assert_eq!(r.unified["memory.oom.group"], "1");
        }
        let l = sandbox_resources(&plain, None, &v2);
        assert_eq!(l.resources.unwrap().unified["memory.oom.group"], "1");
        assert_eq!(l.overhead, Some(cri::LinuxContainerResources::default()));
    }

    /// Pods' cgroups by UID, as the container manager will give them.
    #[derive(Debug)]
    struct PerPod;

    impl PodCgroupParent for PerPod {
        fn cgroup_parent(&self, pod: &Pod) -> String {
            format!("/kubepods/pod{}", pod.metadata.uid.as_deref().unwrap_or(""))
        }
    }

    #[test]
    fn the_cgroup_parent_comes_from_the_provider_in_the_environment() {
        let pod = crate::cri::support::pod("web", &[], &["app"], "Always");
        let mut env = SandboxEnv {
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            dns: Default::default(),
            pods_dir: PathBuf::from("/var/lib/oxlet/pods"),
            cgroups: Arc::new(crate::contracts::RuntimeDefaultCgroups),
            node_memory_bytes: 1 << 30,
            min_oom_score_adj: -999,
            memory: Default::default(),
            cfs_period_us: Some(100_000),
            security: Default::default(),
            allocatable: Default::default(),
        };
        let parent = |env: &SandboxEnv| {
            sandbox_config(&pod, 0, env)
                .unwrap()
                .linux
                .unwrap()
                .cgroup_parent
        };
        assert_eq!(parent(&env), "");
        env.cgroups = Arc::new(PerPod);
        assert_eq!(parent(&env), "/kubepods/poduid-web");
    }

    #[test]
    fn sysctls_go_in_dot_form_and_bad_dns_or_hostnames_fail_the_config() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
            "spec": {
                "hostname": "web-0",
                "dnsPolicy": "None",
                "dnsConfig": {"nameservers": ["1.2.3.4"]},
                "securityContext": {"sysctls": [
                    {"name": "net/ipv4/conf/eno2.100/rp_filter", "value": "1"},
                    {"name": "kernel.shm_rmid_forced", "value": "1"},
                ]},
                "containers": [{"name": "c", "image": "i"}],
            },
        }))
        .unwrap();
        let env = SandboxEnv {
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            dns: Default::default(),
            pods_dir: PathBuf::from("/var/lib/oxlet/pods"),
            cgroups: Arc::new(crate::contracts::RuntimeDefaultCgroups),
            node_memory_bytes: 1 << 30,
            min_oom_score_adj: -999,
            memory: Default::default(),
            cfs_period_us: None,
            security: Default::default(),
            allocatable: Default::default(),
        };
        let c = sandbox_config(&pod, 0, &env).unwrap();
        let sysctls = c.linux.unwrap().sysctls;
        assert_eq!(sysctls["net.ipv4.conf.eno2/100.rp_filter"], "1");
        assert_eq!(sysctls["kernel.shm_rmid_forced"], "1");
        assert_eq!(c.hostname, "web-0");
        assert_eq!(c.dns_config.unwrap().servers, vec!["1.2.3.4"]);
        let mut bad = pod.clone();
        bad.spec.as_mut().unwrap().dns_config = None;
        let e = sandbox_config(&bad, 0, &env).unwrap_err();
        assert!(
            matches!(e, SandboxConfigError::Dns(_)) && !e.retryable(),
            "{e}"
        );
        let mut bad = pod.clone();
        bad.spec.as_mut().unwrap().hostname = Some("Web_0".into());
        let e = sandbox_config(&bad, 0, &env).unwrap_err();
        assert!(
            e.to_string().starts_with("host name: spec.hostname:"),
            "{e}"
        );
    }

    #[test]
    fn log_dir_follows_kubelet_layout() {
        assert_eq!(
            crate::pod::pod_log_dir(
                std::path::Path::new("/var/log/pods"),
                "default",
                "web-n1",
                "u1"
            )
            .unwrap(),
            PathBuf::from("/var/log/pods/default_web-n1_u1")
        );
        for (ns, name, uid) in [
            ("..", "a", "u"),
            ("d", "a/b", "u"),
            ("d", "a", "/etc"),
            ("d", "a", ""),
        ] {
            assert!(
                crate::pod::pod_log_dir(std::path::Path::new("/var/log/pods"), ns, name, uid)
                    .is_err(),
                "{ns:?} {name:?} {uid:?} accepted"
            );
        }
    }
}

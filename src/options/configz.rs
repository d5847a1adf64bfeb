//! `/configz`: the effective settings as kubelet's `{"kubeletconfig":{…}}`, in
//! `kubelet.config.k8s.io/v1beta1` field names and without `kind`/`apiVersion`, so
//! tools that read a kubelet's running configuration (kind, kubeadm upgrade checks)
//! read oxlet's. Only settings that have a KubeletConfiguration field appear; unset
//! optional ones are left out, as Go's `omitempty` does.

use serde_json::{Map, Value, json};

use super::Options;
use crate::cm::{Enforced, Reserved};
use crate::duration::format_go_duration;

/// A byte count as a Kubernetes quantity, as kubelet echoes the text it was given
/// (`200Mi`); oxlet keeps only the bytes, so the canonical binary form.
use crate::quantity::binary_si as quantity;

fn reserved(r: &Reserved) -> Value {
    let mut m = Map::new();
    if let Some(c) = r.cpu_milli {
        m.insert("cpu".into(), json!(format!("{c}m")));
    }
    if let Some(b) = r.memory_bytes {
        m.insert("memory".into(), json!(quantity(b)));
    }
    if let Some(b) = r.ephemeral_storage_bytes {
        m.insert("ephemeral-storage".into(), json!(quantity(b)));
    }
    if let Some(p) = r.pids {
        m.insert("pid".into(), json!(p.to_string()));
    }
    Value::Object(m)
}

fn path(p: Option<&std::path::PathBuf>) -> Value {
    json!(p.map(|p| p.display().to_string()).unwrap_or_default())
}

/// A cgroup name as its cgroupfs path, as KubeletConfiguration spells cgroups.
fn cgroup(n: &crate::cm::CgroupName) -> Value {
    json!(n.to_cgroupfs().unwrap_or_default())
}

/// The `kubeletconfig` object of `/configz`; `runtime_endpoint` is the CRI endpoint
/// oxlet connected to (its managed containerd's when it chose one).
pub(crate) fn kubelet_configuration(o: &Options, runtime_endpoint: &str) -> Value {
    let mut m = Map::new();
    pod_sources_and_runtime(&mut m, o, runtime_endpoint);
    servers(&mut m, o);
    sync_and_limits(&mut m, o);
    cgroups_and_reserved(&mut m, o);
    eviction(&mut m, o);
    resource_managers(&mut m, &o.resource_managers);
    m.insert(
        "enforceNodeAllocatable".into(),
        json!(enforce_node_allocatable(o)),
    );
    container_logs(&mut m, o);
    pod_security_and_dns(&mut m, o);
    static_pod_url(&mut m, o);
    api_and_node_status(&mut m, o);
    garbage_collection(&mut m, o);
    omitted_when_unset(&mut m, o);
    // Of component-base's logging configuration, the one field oxlet reads.
    m.insert(
        "logging".into(),
        json!({ "format": o.process.logging_format.name() }),
    );
    json!({ "kubeletconfig": m })
}

/// The CPU, memory and topology managers, as kubelet's `/configz` spells them (the
/// option maps and `reservedSystemCPUs` only when set, as Go's `omitempty`).
fn resource_managers(m: &mut Map<String, Value>, r: &super::ResourceManagerOptions) {
    m.insert("cpuManagerPolicy".into(), json!(r.cpu_policy));
    if !r.cpu_policy_options.is_empty() {
        m.insert(
            "cpuManagerPolicyOptions".into(),
            json!(r.cpu_policy_options),
        );
    }
    m.insert(
        "cpuManagerReconcilePeriod".into(),
        json!(format_go_duration(r.cpu_reconcile_period)),
    );
    if let Some(cpus) = &r.reserved_cpus {
        m.insert("reservedSystemCPUs".into(), json!(cpus));
    }
    m.insert("memoryManagerPolicy".into(), json!(r.memory_policy));
    if !r.reserved_memory.is_empty() {
        let entries: Vec<Value> = r
            .reserved_memory
            .iter()
            .map(|(node, limits)| {
                let limits: Map<String, Value> = limits
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(crate::quantity::binary_si(*v))))
                    .collect();
                json!({ "numaNode": node, "limits": limits })
            })
            .collect();
        m.insert("reservedMemory".into(), json!(entries));
    }
    m.insert("topologyManagerPolicy".into(), json!(r.topology_policy));
    m.insert("topologyManagerScope".into(), json!(r.topology_scope));
    if !r.topology_policy_options.is_empty() {
        m.insert(
            "topologyManagerPolicyOptions".into(),
            json!(r.topology_policy_options),
        );
    }
}

/// Where pods come from, the CRI endpoint, and where their logs go.
fn pod_sources_and_runtime(m: &mut Map<String, Value>, o: &Options, runtime_endpoint: &str) {
    m.insert(
        "staticPodPath".into(),
        json!(path(o.sources.static_pod_path.as_ref())),
    );
    m.insert("containerRuntimeEndpoint".into(), json!(runtime_endpoint));
    m.insert(
        "podLogsDir".into(),
        json!(o.logs.pod_logs_dir.display().to_string()),
    );
}

/// The read-only and healthz servers' addresses.
fn servers(m: &mut Map<String, Value>, o: &Options) {
    m.insert("address".into(), json!(o.servers.address.to_string()));
    m.insert("readOnlyPort".into(), json!(o.servers.read_only_port));
    m.insert(
        "healthzBindAddress".into(),
        json!(o.servers.healthz_bind_address.to_string()),
    );
    m.insert("healthzPort".into(), json!(o.servers.healthz_port));
    secure_port(m, &o.serving);
    let h = o.handlers;
    m.insert("enableDebuggingHandlers".into(), json!(h.debugging));
    m.insert("enableSystemLogHandler".into(), json!(h.system_log));
    m.insert(
        "enableSystemLogQuery".into(),
        json!(o.servers.system_log_query),
    );
    m.insert("enableDebugFlagsHandler".into(), json!(h.debug_flags));
    m.insert("enableProfilingHandler".into(), json!(h.profiling));
}

/// The secure port: TLS, authentication and authorization, nested as kubelet nests them.
fn secure_port(m: &mut Map<String, Value>, s: &super::Serving) {
    m.insert("enableServer".into(), json!(s.enable));
    m.insert("port".into(), json!(s.port));
    m.insert("tlsCertFile".into(), json!(path(s.tls_cert_file.as_ref())));
    m.insert(
        "tlsPrivateKeyFile".into(),
        json!(path(s.tls_private_key_file.as_ref())),
    );
    let min = match s.tls_min_version {
        None => "",
        Some(super::TlsVersion::Tls12) => "VersionTLS12",
        Some(super::TlsVersion::Tls13) => "VersionTLS13",
    };
    m.insert("tlsMinVersion".into(), json!(min));
    m.insert("serverTLSBootstrap".into(), json!(s.server_tls_bootstrap));
    m.insert("tlsCipherSuites".into(), json!(s.tls_cipher_suites));
    m.insert(
        "authentication".into(),
        json!({
            "x509": {"clientCAFile": path(s.client_ca_file.as_ref())},
            "webhook": {
                "enabled": s.token_webhook,
                "cacheTTL": format_go_duration(s.token_webhook_cache_ttl),
            },
            "anonymous": {"enabled": s.anonymous},
        }),
    );
    let mode = s.authorization_mode.as_str();
    m.insert(
        "authorization".into(),
        json!({
            "mode": mode,
            "webhook": {
                "cacheAuthorizedTTL": format_go_duration(s.authorized_ttl),
                "cacheUnauthorizedTTL": format_go_duration(s.unauthorized_ttl),
            },
        }),
    );
    m.insert(
        "streamingConnectionIdleTimeout".into(),
        json!(format_go_duration(s.streaming_idle_timeout)),
    );
}

/// The sync loop's periods, the runtime's timeout and pulls, and the pod and file limits.
fn sync_and_limits(m: &mut Map<String, Value>, o: &Options) {
    m.insert(
        "fileCheckFrequency".into(),
        json!(format_go_duration(o.sources.file_check_frequency)),
    );
    m.insert(
        "syncFrequency".into(),
        json!(format_go_duration(o.pods.sync_frequency)),
    );
    m.insert(
        "runtimeRequestTimeout".into(),
        json!(format_go_duration(o.runtime.request_timeout)),
    );
    m.insert(
        "serializeImagePulls".into(),
        json!(o.images.serialize_pulls),
    );
    m.insert(
        "imagePullCredentialsVerificationPolicy".into(),
        json!(o.images.pull_verification.name()),
    );
    let allowlist = o.images.pull_verification.allowlist();
    if !allowlist.is_empty() {
        m.insert(
            "preloadedImagesVerificationAllowlist".into(),
            json!(allowlist),
        );
    }
    m.insert("maxPods".into(), json!(o.pods.max_pods));
    m.insert("maxOpenFiles".into(), json!(o.process.max_open_files));
}

/// The container manager's cgroup settings and the reserved resources.
fn cgroups_and_reserved(m: &mut Map<String, Value>, o: &Options) {
    m.insert("cgroupDriver".into(), json!(o.cm.cgroup_driver.to_string()));
    m.insert("cgroupRoot".into(), json!(cgroup(&o.cm.cgroup_root)));
    m.insert("cgroupsPerQOS".into(), json!(o.cm.cgroups_per_qos));
    m.insert("podPidsLimit".into(), json!(o.cm.pod_pids_limit));
    m.insert("cpuCFSQuota".into(), json!(o.cm.cpu_cfs_quota));
    m.insert(
        "cpuCFSQuotaPeriod".into(),
        json!(format_go_duration(o.cm.cpu_cfs_quota_period)),
    );
    m.insert("failCgroupV1".into(), json!(o.cm.fail_cgroup_v1));
    m.insert("failSwapOn".into(), json!(o.cm.fail_swap_on));
    let swap =
        o.cm.memory
            .swap_behavior
            .map(crate::cm::SwapBehavior::as_str);
    m.insert(
        "memorySwap".into(),
        swap.map_or_else(|| json!({}), |b| json!({ "swapBehavior": b })),
    );
    m.insert(
        "protectKernelDefaults".into(),
        json!(o.cm.protect_kernel_defaults),
    );
    m.insert("kubeReserved".into(), json!(reserved(&o.cm.kube_reserved)));
    m.insert(
        "systemReserved".into(),
        json!(reserved(&o.cm.system_reserved)),
    );
}

/// The eviction manager's thresholds, grace periods and minimum reclaims.
fn eviction(m: &mut Map<String, Value>, o: &Options) {
    let hard: Map<String, Value> = o
        .eviction
        .hard
        .0
        .iter()
        .map(|(s, v)| (s.as_str().to_string(), json!(v.to_string())))
        .collect();
    m.insert("evictionHard".into(), json!(hard));
    // The eviction manager's other settings.
    let soft: Map<String, Value> = (o.eviction.soft.0.iter())
        .map(|(s, v)| (s.as_str().to_string(), json!(v.to_string())))
        .collect();
    let grace: Map<String, Value> = (o.eviction.soft_grace_period.iter())
        .map(|(s, d)| (s.as_str().to_string(), json!(format_go_duration(*d))))
        .collect();
    let reclaim: Map<String, Value> = (o.eviction.minimum_reclaim.iter())
        .map(|(s, v)| (s.as_str().to_string(), json!(v.to_string())))
        .collect();
    m.insert("evictionSoft".into(), json!(soft));
    m.insert("evictionSoftGracePeriod".into(), json!(grace));
    m.insert("evictionMinimumReclaim".into(), json!(reclaim));
    m.insert(
        "evictionPressureTransitionPeriod".into(),
        json!(format_go_duration(o.eviction.pressure_transition_period)),
    );
    m.insert(
        "evictionMaxPodGracePeriod".into(),
        json!(o.eviction.max_pod_grace_period),
    );
    // Graceful node shutdown, beside eviction as the other way kubelet stops pods.
    m.insert(
        "shutdownGracePeriod".into(),
        json!(format_go_duration(o.shutdown.grace_period)),
    );
    m.insert(
        "shutdownGracePeriodCriticalPods".into(),
        json!(format_go_duration(o.shutdown.grace_period_critical_pods)),
    );
}

/// `enforceNodeAllocatable`: the cgroups whose allocatable oxlet enforces, in kubelet's words.
fn enforce_node_allocatable(o: &Options) -> Vec<&'static str> {
    let mut enforce = Vec::new();
    let e = &o.cm.enforce_node_allocatable;
    if e.pods {
        enforce.push("pods");
    }
    match e.system_reserved {
        Some(Enforced::All) => enforce.push("system-reserved"),
        Some(Enforced::Compressible) => enforce.push("system-reserved-compressible"),
        None => {}
    }
    match e.kube_reserved {
        Some(Enforced::All) => enforce.push("kube-reserved"),
        Some(Enforced::Compressible) => enforce.push("kube-reserved-compressible"),
        None => {}
    }
    enforce
}

/// The container log manager's rotation settings.
fn container_logs(m: &mut Map<String, Value>, o: &Options) {
    m.insert(
        "containerLogMaxSize".into(),
        json!(quantity(o.logs.max_size)),
    );
    m.insert("containerLogMaxFiles".into(), json!(o.logs.max_files));
    m.insert("containerLogMaxWorkers".into(), json!(o.logs.max_workers));
    m.insert(
        "containerLogMonitorInterval".into(),
        json!(format_go_duration(o.logs.monitor_interval)),
    );
}

/// The pods' security defaults and DNS.
fn pod_security_and_dns(m: &mut Map<String, Value>, o: &Options) {
    m.insert("seccompDefault".into(), json!(o.pods.seccomp_default));
    m.insert(
        "allowedUnsafeSysctls".into(),
        json!(o.pods.allowed_unsafe_sysctls),
    );
    m.insert(
        "clusterDNS".into(),
        json!(
            o.pods
                .cluster_dns
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        ),
    );
    m.insert("clusterDomain".into(), json!(o.pods.cluster_domain));
    m.insert(
        "resolvConf".into(),
        json!(path(o.pods.resolv_conf.as_ref())),
    );
}

/// The HTTP static pod source. The read-only port serves this page to anyone, so
/// the URL's password and every header value (`Authorization: Bearer …`) are
/// redacted; the header names show which are set.
fn static_pod_url(m: &mut Map<String, Value>, o: &Options) {
    let url = o.sources.manifest_url.as_deref().unwrap_or_default();
    m.insert(
        "staticPodURL".into(),
        json!(crate::http_get::redacted_url(url)),
    );
    let headers: std::collections::BTreeMap<&str, Vec<&str>> =
        (o.sources.manifest_url_header.iter())
            .map(|(name, values)| (name.as_str(), values.iter().map(|_| "xxxxx").collect()))
            .collect();
    m.insert("staticPodURLHeader".into(), json!(headers));
    m.insert(
        "httpCheckFrequency".into(),
        json!(format_go_duration(o.sources.http_check_frequency)),
    );
}

/// The apiserver client's rates, the node's status and lease, events, certificates.
fn api_and_node_status(m: &mut Map<String, Value>, o: &Options) {
    m.insert("kubeAPIQPS".into(), json!(o.cluster.kube_api_qps));
    m.insert("kubeAPIBurst".into(), json!(o.cluster.kube_api_burst));
    m.insert(
        "nodeStatusUpdateFrequency".into(),
        json!(format_go_duration(o.status.update_frequency)),
    );
    m.insert(
        "nodeLeaseDurationSeconds".into(),
        json!(o.status.lease_duration.as_secs()),
    );
    m.insert("providerID".into(), json!(o.node.provider_id));
    m.insert("registerNode".into(), json!(o.node.register));
    m.insert(
        "nodeStatusReportFrequency".into(),
        json!(format_go_duration(o.status.report_frequency)),
    );
    m.insert("eventRecordQPS".into(), json!(o.cluster.event_record_qps));
    m.insert("eventBurst".into(), json!(o.cluster.event_burst));
    m.insert(
        "rotateCertificates".into(),
        json!(o.cluster.rotate_certificates),
    );
    m.insert("featureGates".into(), json!(o.process.feature_gates));
}

/// Image garbage collection, and the volume stats period between its fields.
fn garbage_collection(m: &mut Map<String, Value>, o: &Options) {
    m.insert(
        "imageGCHighThresholdPercent".into(),
        json!(o.images.gc.high_percent),
    );
    m.insert(
        "imageGCLowThresholdPercent".into(),
        json!(o.images.gc.low_percent),
    );
    m.insert(
        "imageMinimumGCAge".into(),
        json!(format_go_duration(o.images.gc.min_age)),
    );
    m.insert(
        "volumeStatsAggPeriod".into(),
        json!(format_go_duration(o.status.volume_stats_agg_period)),
    );
    m.insert(
        "imageMaximumGCAge".into(),
        json!(format_go_duration(o.images.gc.max_age)),
    );
}

/// The optional settings, left out when unset (Go's `omitempty`).
fn omitted_when_unset(m: &mut Map<String, Value>, o: &Options) {
    if let Some(n) = o.images.max_parallel_pulls {
        m.insert("maxParallelImagePulls".into(), json!(n));
    }
    if let Some(n) = o.pods.userns_ids_per_pod {
        m.insert("userNamespaces".into(), json!({"idsPerPod": n}));
    }
    if let Some(cidr) = &o.runtime.pod_cidr {
        m.insert("podCIDR".into(), json!(cidr));
    }
    if let Some(b) = o.cm.memory.single_process_oom_kill {
        m.insert("singleProcessOOMKill".into(), json!(b));
    }
    if let Some(n) = &o.cm.kube_reserved_cgroup {
        m.insert("kubeReservedCgroup".into(), cgroup(n));
    }
    if let Some(n) = &o.cm.system_reserved_cgroup {
        m.insert("systemReservedCgroup".into(), cgroup(n));
    }
    if !o.shutdown.by_pod_priority.is_empty() {
        let list: Vec<Value> = (o.shutdown.by_pod_priority.iter())
            .map(|g| json!({"priority": g.priority, "shutdownGracePeriodSeconds": g.seconds}))
            .collect();
        m.insert("shutdownGracePeriodByPodPriority".into(), json!(list));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::settings;

    fn parse(args: &[&str]) -> Options {
        let flags = crate::options::flags::parse_flags(
            std::iter::once("oxlet").chain(args.iter().copied()),
        )
        .unwrap();
        crate::options::resolve(flags, || Ok("test-host".to_string())).unwrap()
    }

    #[test]
    fn every_config_field_is_rendered_and_nothing_else() {
        let o = parse(&[
            "--max-pods=42",
            "--kube-reserved-cgroup=/kube",
            "--system-reserved-cgroup=/sys",
            "--kube-reserved=cpu=100m,memory=1Mi",
            "--eviction-soft=memory.available<1Gi,nodefs.available<15%",
            "--eviction-soft-grace-period=memory.available=30s,nodefs.available=1m",
            "--eviction-minimum-reclaim=memory.available=500Mi",
            "--volume-stats-agg-period=30s",
            "--feature-gates=EventedPLEG=false,SomeAlphaGate=true",
            "--cpu-manager-policy-options=full-pcpus-only=true",
            "--topology-manager-policy-options=prefer-closest-numa-nodes=true",
            "--reserved-memory=0:memory=1Gi",
            "--reserved-cpus=0",
        ]);
        let mut o = o;
        o.images.max_parallel_pulls = Some(2);
        o.runtime.pod_cidr = Some("10.244.1.0/24".into());
        o.cm.memory.single_process_oom_kill = Some(true);
        o.cm.memory.swap_behavior = Some(crate::cm::SwapBehavior::LimitedSwap);
        o.pods.userns_ids_per_pod = Some(131_072);
        o.images.pull_verification = crate::images::VerifyPolicy::parse(
            "NeverVerifyAllowlistedImages",
            &["busybox".to_string()],
        )
        .unwrap();
        o.shutdown.by_pod_priority = vec![crate::nodeshutdown::PriorityGrace {
            priority: 0,
            seconds: 30,
        }];
        let v = kubelet_configuration(&o, "unix:///managed/containerd.sock");
        let c = v["kubeletconfig"].as_object().unwrap();
        let fields: Vec<&str> = settings::all().filter_map(|s| s.field).collect();
        for f in &fields {
            let pointer = format!("/{}", f.replace('.', "/"));
            assert!(
                v["kubeletconfig"].pointer(&pointer).is_some(),
                "{f} missing from /configz"
            );
        }
        for k in c.keys() {
            assert!(
                fields
                    .iter()
                    .any(|f| f.split('.').next() == Some(k.as_str())),
                "{k} is not a KubeletConfiguration field oxlet has"
            );
        }
        assert!(!c.contains_key("kind") && !c.contains_key("apiVersion"));
        assert_eq!(c["maxPods"], 42);
        assert_eq!(c["logging"], json!({"format": "text"}));
        assert_eq!(c["syncFrequency"], "1m0s");
        assert_eq!(c["kubeReserved"], json!({"cpu": "100m", "memory": "1Mi"}));
        assert_eq!(c["kubeReservedCgroup"], "/kube");
        // Quantities in their binary-suffix form (kubelet echoes the text it was given).
        assert_eq!(c["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(c["evictionHard"]["nodefs.available"], "10%");
        assert_eq!(c["evictionSoft"]["memory.available"], "1Gi");
        assert_eq!(c["evictionSoft"]["nodefs.available"], "15%");
        assert_eq!(c["evictionSoftGracePeriod"]["nodefs.available"], "1m0s");
        assert_eq!(c["evictionMinimumReclaim"]["memory.available"], "500Mi");
        assert_eq!(c["volumeStatsAggPeriod"], "30s");
        assert_eq!(
            c["featureGates"],
            json!({"EventedPLEG": false, "SomeAlphaGate": true})
        );
        assert_eq!(c["containerLogMaxSize"], "10Mi");
        assert_eq!(c["enforceNodeAllocatable"], json!(["pods"]));
        assert_eq!(c["shutdownGracePeriod"], "0s");
        assert_eq!(
            c["shutdownGracePeriodByPodPriority"],
            json!([{"priority": 0, "shutdownGracePeriodSeconds": 30}])
        );
        assert_eq!(c["singleProcessOOMKill"], true);
        assert_eq!(c["memorySwap"], json!({"swapBehavior": "LimitedSwap"}));
        // Unset: `singleProcessOOMKill` left out, `memorySwap` empty (Go's omitempty).
        let plain = kubelet_configuration(&parse(&[]), "unix:///c.sock");
        assert!(plain["kubeletconfig"].get("singleProcessOOMKill").is_none());
        assert_eq!(plain["kubeletconfig"]["memorySwap"], json!({}));
        // The endpoint connected to, not the flag's default.
        assert_eq!(
            c["containerRuntimeEndpoint"],
            "unix:///managed/containerd.sock"
        );
    }

    #[test]
    fn the_manifest_url_password_and_header_values_never_show() {
        let o = parse(&[
            "--manifest-url=https://bob:hunter2@example.com/pods",
            "--manifest-url-header=Authorization:Bearer sekret,X-A:1,X-A:2",
        ]);
        let v = kubelet_configuration(&o, "unix:///c.sock");
        let c = &v["kubeletconfig"];
        assert_eq!(c["staticPodURL"], "https://bob:xxxxx@example.com/pods");
        assert_eq!(
            c["staticPodURLHeader"],
            json!({"Authorization": ["xxxxx"], "X-A": ["xxxxx", "xxxxx"]})
        );
        let text = v.to_string();
        assert!(
            !text.contains("hunter2") && !text.contains("sekret"),
            "{text}"
        );
    }

    #[test]
    fn quantities_take_the_largest_exact_binary_suffix() {
        assert_eq!(quantity(200 << 20), "200Mi");
        assert_eq!(quantity(10 << 20), "10Mi");
        assert_eq!(quantity(1 << 30), "1Gi");
        assert_eq!(quantity(1536), "1536");
        assert_eq!(quantity(1500), "1500");
        assert_eq!(quantity(0), "0");
        assert_eq!(quantity(3 << 10), "3Ki");
    }
}

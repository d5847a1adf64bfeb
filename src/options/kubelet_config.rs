//! The `--config` file: a kubelet `KubeletConfiguration` (YAML or JSON), so the
//! same file can drive kubelet or oxlet. Decoded leniently like kubelet: fields
//! oxlet does not implement, or that do not exist, are warnings, not errors.

use std::path::{Path, PathBuf};

use serde_yaml_ng::Value;

use super::Problem;
use super::duration::{GoDuration, parse_go_duration};

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";

/// Fields oxlet reads (besides `apiVersion` and `kind`).
pub const IMPLEMENTED_FIELDS: &[&str] = &[
    "staticPodPath",
    "fileCheckFrequency",
    "syncFrequency",
    "readOnlyPort",
    "healthzPort",
    "healthzBindAddress",
    "address",
    "containerRuntimeEndpoint",
    "podLogsDir",
    "maxPods",
    "runtimeRequestTimeout",
    "maxOpenFiles",
];

/// KubeletConfiguration (v1beta1, ~1.30-1.34) fields oxlet accepts but ignores.
pub const UNIMPLEMENTED_FIELDS: &[&str] = &[
    "enableServer",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "port",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "cgroupRoot",
    "cgroupsPerQOS",
    "cgroupDriver",
    "cpuManagerPolicy",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "singleProcessOOMKill",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "qosReserved",
    "hairpinMode",
    "podCIDR",
    "podPidsLimit",
    "resolvConf",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "mergeDefaultEvictionSettings",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "featureGates",
    "failSwapOn",
    "memorySwap",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "enforceNodeAllocatable",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "providerID",
    "kernelMemcgNotification",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "memoryThrottlingFactor",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "localStorageCapacityIsolation",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
];

/// A value read from the file, with its text as written (for messages).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldValue<T> {
    pub value: T,
    pub text: String,
}

/// The implemented fields the file set (None = not set or null), plus what it
/// set that oxlet ignores. Range checks happen after flags are applied, as in
/// kubelet, so a flag can fix a bad file value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KubeletConfigFile {
    pub path: PathBuf,
    /// Relative paths are resolved against the file's directory, like kubelet.
    pub static_pod_path: Option<FieldValue<String>>,
    pub file_check_frequency: Option<FieldValue<GoDuration>>,
    pub sync_frequency: Option<FieldValue<GoDuration>>,
    pub runtime_request_timeout: Option<FieldValue<GoDuration>>,
    pub read_only_port: Option<FieldValue<i64>>,
    pub healthz_port: Option<FieldValue<i64>>,
    pub max_pods: Option<FieldValue<i64>>,
    pub max_open_files: Option<FieldValue<i64>>,
    pub healthz_bind_address: Option<FieldValue<String>>,
    pub address: Option<FieldValue<String>>,
    pub container_runtime_endpoint: Option<FieldValue<String>>,
    pub pod_logs_dir: Option<FieldValue<String>>,
    /// KubeletConfiguration fields present but not implemented, in file order.
    pub unimplemented: Vec<String>,
    /// Keys that are not KubeletConfiguration fields at all, in file order.
    pub unknown: Vec<String>,
    /// Field values of the wrong type or unparseable.
    pub problems: Vec<Problem>,
}

/// Reads and decodes a config file. Err holds the problems that stop decoding
/// (unreadable, bad YAML, wrong kind/apiVersion).
pub fn load_file(path: &Path) -> Result<KubeletConfigFile, Vec<Problem>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![Problem::File {
            file: path.to_path_buf(),
            reason: format!("cannot read config file: {e}"),
        }]
    })?;
    parse_config(path, &text)
}

/// Decodes config file text; `path` names the file in messages and anchors
/// relative paths.
pub fn parse_config(path: &Path, text: &str) -> Result<KubeletConfigFile, Vec<Problem>> {
    let file_problem = |reason: String| Problem::File {
        file: path.to_path_buf(),
        reason,
    };
    let expected = format!("expected {KIND} (apiVersion {API_VERSION})");
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| {
        let msg = e.to_string().replace('\n', " ");
        vec![file_problem(format!("invalid YAML: {msg}"))]
    })?;
    let map = match doc {
        Value::Mapping(map) => map,
        Value::Null => return Err(vec![file_problem(format!("file is empty, {expected}"))]),
        other => {
            return Err(vec![file_problem(format!(
                "not a {KIND} object (found {}), {expected}",
                value_text(&other)
            ))]);
        }
    };

    let mut header = Vec::new();
    match map.get("kind") {
        Some(Value::String(k)) if k == KIND => {}
        None | Some(Value::Null) => {
            header.push(file_problem(format!("kind is missing, {expected}")))
        }
        Some(v) => header.push(file_problem(format!(
            "kind is \"{}\", {expected}",
            value_text(v)
        ))),
    }
    match map.get("apiVersion") {
        Some(Value::String(v)) if v == API_VERSION => {}
        None | Some(Value::Null) => header.push(file_problem(format!(
            "apiVersion is missing, expected {API_VERSION}"
        ))),
        Some(v) => header.push(file_problem(format!(
            "apiVersion is \"{}\", expected {API_VERSION}",
            value_text(v)
        ))),
    }
    if !header.is_empty() {
        return Err(header);
    }

    let mut cfg = KubeletConfigFile {
        path: path.to_path_buf(),
        ..Default::default()
    };
    for (key, value) in &map {
        let Value::String(name) = key else {
            cfg.unknown.push(value_text(key));
            continue;
        };
        let name = name.as_str();
        match name {
            "apiVersion" | "kind" => {}
            "staticPodPath" => {
                cfg.static_pod_path = cfg.string(name, value).map(|mut v| {
                    v.value = resolve_relative(path, &v.value);
                    v
                })
            }
            "fileCheckFrequency" => cfg.file_check_frequency = cfg.duration(name, value),
            "syncFrequency" => cfg.sync_frequency = cfg.duration(name, value),
            "runtimeRequestTimeout" => cfg.runtime_request_timeout = cfg.duration(name, value),
            "readOnlyPort" => cfg.read_only_port = cfg.integer(name, value),
            "healthzPort" => cfg.healthz_port = cfg.integer(name, value),
            "maxPods" => cfg.max_pods = cfg.integer(name, value),
            "maxOpenFiles" => cfg.max_open_files = cfg.integer(name, value),
            "healthzBindAddress" => cfg.healthz_bind_address = cfg.string(name, value),
            "address" => cfg.address = cfg.string(name, value),
            "containerRuntimeEndpoint" => cfg.container_runtime_endpoint = cfg.string(name, value),
            "podLogsDir" => cfg.pod_logs_dir = cfg.string(name, value),
            _ if UNIMPLEMENTED_FIELDS.contains(&name) => cfg.unimplemented.push(name.to_string()),
            _ => cfg.unknown.push(name.to_string()),
        }
    }
    Ok(cfg)
}

impl KubeletConfigFile {
    fn bad_type(&mut self, field: &str, value: &Value, reason: &str) {
        self.problems.push(Problem::Field {
            file: self.path.clone(),
            field: field.to_string(),
            value: value_text(value),
            reason: reason.to_string(),
        });
    }

    fn string(&mut self, field: &str, value: &Value) -> Option<FieldValue<String>> {
        match value {
            Value::Null => None,
            Value::String(s) => Some(FieldValue {
                value: s.clone(),
                text: s.clone(),
            }),
            other => {
                self.bad_type(field, other, "must be a string");
                None
            }
        }
    }

    fn integer(&mut self, field: &str, value: &Value) -> Option<FieldValue<i64>> {
        match value {
            Value::Null => None,
            Value::Number(n) if n.as_i64().is_some() => Some(FieldValue {
                value: n.as_i64().unwrap_or_default(),
                text: n.to_string(),
            }),
            other => {
                self.bad_type(field, other, "must be an integer");
                None
            }
        }
    }

    /// Go's metav1.Duration decodes only from a string such as "20s".
    fn duration(&mut self, field: &str, value: &Value) -> Option<FieldValue<GoDuration>> {
        match value {
            Value::Null => None,
            Value::String(s) => match parse_go_duration(s) {
                Ok(d) => Some(FieldValue {
                    value: d,
                    text: s.clone(),
                }),
                Err(e) => {
                    self.bad_type(field, value, &e.reason());
                    None
                }
            },
            other => {
                self.bad_type(
                    field,
                    other,
                    "must be a duration string such as \"20s\" or \"1m30s\"",
                );
                None
            }
        }
    }
}

fn resolve_relative(config: &Path, p: &str) -> String {
    let dir = config.parent().unwrap_or(Path::new(""));
    if p.is_empty() || Path::new(p).is_absolute() || dir.as_os_str().is_empty() {
        return p.to_string();
    }
    dir.join(p).to_string_lossy().into_owned()
}

/// A value as the user wrote it, for messages.
fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        other => serde_json::to_string(other).unwrap_or_else(|_| format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    fn parse(body: &str) -> Result<KubeletConfigFile, Vec<Problem>> {
        parse_config(Path::new("/etc/x.yaml"), &format!("{HEADER}{body}"))
    }

    fn messages(problems: &[Problem]) -> Vec<String> {
        problems.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn reads_implemented_fields() {
        let cfg = parse(
            "staticPodPath: /etc/kubernetes/manifests\n\
             fileCheckFrequency: 5s\n\
             syncFrequency: 1m30s\n\
             runtimeRequestTimeout: 10m\n\
             readOnlyPort: 10255\n\
             healthzPort: 0\n\
             healthzBindAddress: 0.0.0.0\n\
             address: ::1\n\
             containerRuntimeEndpoint: unix:///run/crio/crio.sock\n\
             podLogsDir: /srv/logs\n\
             maxPods: 7\n",
        )
        .unwrap();
        let s = |v: &Option<FieldValue<String>>| v.as_ref().unwrap().value.clone();
        let d = |v: &Option<FieldValue<GoDuration>>| v.as_ref().unwrap().value.to_string();
        let i = |v: &Option<FieldValue<i64>>| v.as_ref().unwrap().value;
        assert_eq!(s(&cfg.static_pod_path), "/etc/kubernetes/manifests");
        assert_eq!(d(&cfg.file_check_frequency), "5s");
        assert_eq!(d(&cfg.sync_frequency), "1m30s");
        assert_eq!(d(&cfg.runtime_request_timeout), "10m0s");
        assert_eq!(i(&cfg.read_only_port), 10255);
        assert_eq!(i(&cfg.healthz_port), 0);
        assert_eq!(i(&cfg.max_pods), 7);
        assert_eq!(s(&cfg.healthz_bind_address), "0.0.0.0");
        assert_eq!(s(&cfg.address), "::1");
        assert_eq!(
            s(&cfg.container_runtime_endpoint),
            "unix:///run/crio/crio.sock"
        );
        assert_eq!(s(&cfg.pod_logs_dir), "/srv/logs");
        assert!(cfg.unimplemented.is_empty() && cfg.unknown.is_empty() && cfg.problems.is_empty());
    }

    #[test]
    fn json_is_accepted() {
        let text = r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                       "maxPods": 5, "syncFrequency": "30s"}"#;
        let cfg = parse_config(Path::new("/etc/x.json"), text).unwrap();
        assert_eq!(cfg.max_pods.unwrap().value, 5);
        assert_eq!(cfg.sync_frequency.unwrap().text, "30s");
    }

    #[test]
    fn null_and_absent_fields_are_unset() {
        let cfg = parse("staticPodPath:\nmaxPods: null\n").unwrap();
        assert_eq!(cfg.static_pod_path, None);
        assert_eq!(cfg.max_pods, None);
        assert_eq!(cfg.read_only_port, None);
    }

    #[test]
    fn relative_static_pod_path_is_resolved_against_the_file() {
        let cfg = parse("staticPodPath: manifests\n").unwrap();
        assert_eq!(cfg.static_pod_path.unwrap().value, "/etc/manifests");
    }

    #[test]
    fn unimplemented_and_unknown_fields_are_collected() {
        let cfg = parse(
            "failSwapOn: false\n\
             authentication:\n  anonymous:\n    enabled: false\n\
             notAField: 3\n\
             evictionHard:\n  memory.available: 100Mi\n\
             StaticPodPath: /x\n",
        )
        .unwrap();
        assert_eq!(
            cfg.unimplemented,
            ["failSwapOn", "authentication", "evictionHard"]
        );
        assert_eq!(cfg.unknown, ["notAField", "StaticPodPath"]);
        assert!(cfg.problems.is_empty());
    }

    #[test]
    fn wrong_kind_and_api_version() {
        let err =
            parse_config(Path::new("/etc/x.yaml"), "apiVersion: v1\nkind: Pod\n").unwrap_err();
        assert_eq!(
            messages(&err),
            [
                "/etc/x.yaml: kind is \"Pod\", expected KubeletConfiguration (apiVersion kubelet.config.k8s.io/v1beta1)",
                "/etc/x.yaml: apiVersion is \"v1\", expected kubelet.config.k8s.io/v1beta1",
            ]
        );
        let err = parse_config(Path::new("/etc/x.yaml"), "maxPods: 3\n").unwrap_err();
        assert_eq!(
            messages(&err),
            [
                "/etc/x.yaml: kind is missing, expected KubeletConfiguration (apiVersion kubelet.config.k8s.io/v1beta1)",
                "/etc/x.yaml: apiVersion is missing, expected kubelet.config.k8s.io/v1beta1",
            ]
        );
        let err = parse_config(Path::new("/etc/x.yaml"), "").unwrap_err();
        assert!(messages(&err)[0].starts_with("/etc/x.yaml: file is empty"));
        let err = parse_config(Path::new("/etc/x.yaml"), "- a\n- b\n").unwrap_err();
        assert!(messages(&err)[0].contains("found [\"a\",\"b\"]"), "{err:?}");
    }

    #[test]
    fn yaml_syntax_error_names_file_and_line() {
        let err = parse("maxPods: [1\nsyncFrequency: 1m\n").unwrap_err();
        let msg = messages(&err).remove(0);
        assert!(msg.starts_with("/etc/x.yaml: invalid YAML: "), "{msg}");
        assert!(msg.contains("line"), "{msg}");
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn wrong_types_are_reported_per_field() {
        let cfg = parse(
            "maxPods: lots\n\
             readOnlyPort: 1.5\n\
             syncFrequency: 60\n\
             fileCheckFrequency: soon\n\
             address: [1, 2]\n",
        )
        .unwrap();
        assert_eq!(
            messages(&cfg.problems),
            [
                "/etc/x.yaml: field maxPods: invalid value \"lots\": must be an integer",
                "/etc/x.yaml: field readOnlyPort: invalid value \"1.5\": must be an integer",
                "/etc/x.yaml: field syncFrequency: invalid value \"60\": must be a duration string such as \"20s\" or \"1m30s\"",
                "/etc/x.yaml: field fileCheckFrequency: invalid value \"soon\": not a valid duration (use a Go duration such as 20s, 1m30s or 300ms)",
                "/etc/x.yaml: field address: invalid value \"[1,2]\": must be a string",
            ]
        );
    }

    #[test]
    fn negative_duration_parses_for_later_validation() {
        let cfg = parse("fileCheckFrequency: -1s\n").unwrap();
        let v = cfg.file_check_frequency.unwrap();
        assert_eq!(
            (v.value.as_nanos(), v.text.as_str()),
            (-1_000_000_000, "-1s")
        );
    }

    #[test]
    fn field_tables_are_disjoint() {
        for f in IMPLEMENTED_FIELDS {
            assert!(!UNIMPLEMENTED_FIELDS.contains(f), "{f}");
        }
        let mut all: Vec<&str> = UNIMPLEMENTED_FIELDS.to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), UNIMPLEMENTED_FIELDS.len());
    }

    #[test]
    fn unreadable_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.yaml");
        let err = load_file(&path).unwrap_err();
        let msg = messages(&err).remove(0);
        assert!(
            msg.starts_with(&format!("{}: cannot read config file: ", path.display())),
            "{msg}"
        );
    }
}

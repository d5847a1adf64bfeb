//! The `--config` file: a kubelet `KubeletConfiguration` (YAML or JSON), so the
//! same file can drive kubelet or oxlet. Decoded leniently like kubelet: fields
//! oxlet does not implement, or that do not exist, are warnings, not errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A YAML mapping, its keys already JSON's strings (`crate::yaml`).
type Mapping = serde_json::Map<String, Value>;

use super::Problem;
use super::settings::{self, InvalidValue, Kind};

pub(crate) const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub(crate) const KIND: &str = "KubeletConfiguration";

/// KubeletConfiguration (v1beta1, ~1.30-1.34) fields oxlet accepts but ignores.
pub(crate) const UNIMPLEMENTED_FIELDS: &[&str] = &[
    "registryPullQPS",
    "registryBurst",
    "enableContentionProfiling",
    "oomScoreAdj",
    "kubeletCgroups",
    "systemCgroups",
    "qosReserved",
    "hairpinMode",
    "nodeStatusMaxImages",
    "contentType",
    "mergeDefaultEvictionSettings",
    "podsPerCore",
    "enableControllerAttachDetach",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "configMapAndSecretChangeDetectionStrategy",
    "showHiddenMetricsForVersion",
    "volumePluginDir",
    "kernelMemcgNotification",
    "memoryThrottlingFactor",
    "localStorageCapacityIsolation",
    "imageServiceEndpoint",
];

/// KubeletConfiguration fields oxlet refuses when set: ignored, they would leave the
/// node weaker than the file asks, a hardening that silently does not happen. Each
/// with the value that is what oxlet does anyway (accepted; "" is an empty list) and why.
pub(crate) const REFUSED_FIELDS: &[(&str, &str, &str)] = &[(
    "registerWithTaints",
    "",
    "oxlet takes the Node's registration taints from --register-with-taints only; \
         a taint given here would not be on the Node",
)];

/// The reason `name` set to `value` is refused, if it is ([`REFUSED_FIELDS`]).
fn refused(name: &str, value: &Value) -> Option<&'static str> {
    let &(_, accepted, reason) = REFUSED_FIELDS.iter().find(|(f, _, _)| *f == name)?;
    let is_accepted = match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty() && accepted.is_empty(),
        Value::String(text) => text == accepted,
        _ => false,
    };
    (!is_accepted).then_some(reason)
}

/// KubeletConfiguration fields that are structs, each with its own fields (dotted
/// for structs inside). The decoder walks them: a field with a setting row
/// (`authentication.x509.clientCAFile`) is read like a top-level one, any other is
/// warned about by its full name, and a misspelt nested key is reported as unknown.
pub(crate) const STRUCT_FIELDS: &[(&str, &[&str])] = &[
    (
        "authentication",
        &[
            "x509.clientCAFile",
            "webhook.enabled",
            "webhook.cacheTTL",
            "anonymous.enabled",
        ],
    ),
    (
        "authorization",
        &[
            "mode",
            "webhook.cacheAuthorizedTTL",
            "webhook.cacheUnauthorizedTTL",
        ],
    ),
    (
        "logging",
        &[
            "format",
            "flushFrequency",
            "verbosity",
            "vmodule",
            "options.json.infoBufferSize",
            "options.json.splitStream",
            "options.text.infoBufferSize",
            "options.text.splitStream",
        ],
    ),
    ("memorySwap", &["swapBehavior"]),
    ("crashLoopBackOff", &["maxContainerRestartPeriod"]),
    ("tracing", &["endpoint", "samplingRatePerMillion"]),
    ("userNamespaces", &["idsPerPod"]),
];

/// Fields whose zero value (`0s`, `0`, `""`, `"0"`) kubelet treats as unset: its
/// `SetDefaults_KubeletConfiguration` replaces a zero with the default, or zero is the
/// default. kubeadm writes every such field of its KubeletConfiguration, zero when it
/// has no value (kind's `syncFrequency: 0s`), so a zero here asks for nothing: it is
/// neither applied (which could fail a range check) nor warned about.
pub(crate) const ZERO_IS_UNSET: &[&str] = &[
    // Defaulted from zero in defaults.go.
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "address",
    "port",
    "authentication.webhook.cacheTTL",
    "authorization.mode",
    "authorization.webhook.cacheAuthorizedTTL",
    "authorization.webhook.cacheUnauthorizedTTL",
    "registryBurst",
    "eventBurst",
    "healthzBindAddress",
    "streamingConnectionIdleTimeout",
    "nodeStatusReportFrequency",
    "nodeStatusUpdateFrequency",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "volumeStatsAggPeriod",
    "cgroupDriver",
    "cpuManagerPolicy",
    "cpuManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "runtimeRequestTimeout",
    "hairpinMode",
    "maxPods",
    "maxOpenFiles",
    "contentType",
    "kubeAPIBurst",
    "evictionPressureTransitionPeriod",
    "containerLogMaxSize",
    "configMapAndSecretChangeDetectionStrategy",
    "volumePluginDir",
    "containerRuntimeEndpoint",
    "podLogsDir",
    // component-base's logging defaults (SetRecommendedLoggingConfiguration).
    "logging.format",
    "logging.flushFrequency",
    "logging.verbosity",
    "logging.options.json.infoBufferSize",
    "logging.options.text.infoBufferSize",
    // Zero is the default: off, none, or no value.
    "imageMaximumGCAge",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "evictionMaxPodGracePeriod",
    "podsPerCore",
    "staticPodURL",
    "providerID",
    "podCIDR",
    "kubeletCgroups",
    "systemCgroups",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsMinVersion",
    "authentication.x509.clientCAFile",
    "memorySwap.swapBehavior",
];

/// Whether `value` is Go's zero value for a field of [`ZERO_IS_UNSET`].
fn is_unset_zero(field: &str, value: &Value) -> bool {
    if !ZERO_IS_UNSET.contains(&field) {
        return false;
    }
    match value {
        Value::Null => true,
        Value::String(s) => {
            s.is_empty()
                || s == "0"
                || crate::duration::parse_go_duration(s).is_ok_and(|d| d.as_nanos() == 0)
        }
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Walks a struct field's value, recording each of its fields that is set as
/// unimplemented, and each key it does not have as unknown.
fn walk_struct(path: &str, value: &Value, leaves: &[&str], top: &str, cfg: &mut KubeletConfigFile) {
    let map = match value {
        Value::Null => return,
        Value::Object(map) => map,
        other => {
            cfg.problems.push(Problem::Field {
                file: cfg.path.clone(),
                field: path.to_string(),
                value: value_text(other),
                reason: "must be an object".into(),
            });
            return;
        }
    };
    for (key, v) in map {
        let full = format!("{path}.{key}");
        let rel = &full[top.len() + 1..];
        if leaves.contains(&rel) {
            let empty = matches!(v, Value::Object(m) if m.is_empty())
                || matches!(v, Value::Array(s) if s.is_empty());
            if v.is_null() || empty || is_unset_zero(&full, v) {
                continue;
            }
            match settings::by_field(&full) {
                Some(setting) => {
                    let path = cfg.path.clone();
                    record_value(setting, &path, v, cfg);
                }
                None => cfg.unimplemented.push(full),
            }
        } else if leaves
            .iter()
            .any(|l| l.strip_prefix(rel).is_some_and(|r| r.starts_with('.')))
        {
            walk_struct(&full, v, leaves, top, cfg);
        } else {
            cfg.unknown.push(full);
        }
    }
}

/// The settings the file set (by field; absent or null = not set), as text to be
/// parsed and checked by the settings table, plus what it set that oxlet ignores.
/// Range checks happen after flags are applied, as in kubelet, so a flag can fix
/// a bad file value.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct KubeletConfigFile {
    pub path: PathBuf,
    /// Field name → value text, of the right type and well-formed. A relative
    /// path of a [`Kind::Path`] setting is already resolved against the file's directory.
    pub values: BTreeMap<&'static str, String>,
    /// KubeletConfiguration fields present but not implemented, in file order.
    pub unimplemented: Vec<String>,
    /// Keys that are not KubeletConfiguration fields at all, in file order.
    pub unknown: Vec<String>,
    /// Field values of the wrong type or unparseable.
    pub problems: Vec<Problem>,
}

/// Reads and decodes a config file. Err holds the problems that stop decoding
/// (unreadable, bad YAML, wrong kind/apiVersion).
pub(crate) fn load_file(path: &Path) -> Result<KubeletConfigFile, Vec<Problem>> {
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
pub(crate) fn parse_config(path: &Path, text: &str) -> Result<KubeletConfigFile, Vec<Problem>> {
    let file_problem = |reason: String| Problem::File {
        file: path.to_path_buf(),
        reason,
    };
    let expected = format!("expected {KIND} (apiVersion {API_VERSION})");
    let doc: Value = crate::yaml::single(text, &crate::yaml::CONFIG_LIMITS).map_err(|e| {
        let msg = e.to_string().replace('\n', " ");
        vec![file_problem(format!("invalid YAML: {msg}"))]
    })?;
    let map = match doc {
        Value::Object(map) => map,
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
            header.push(file_problem(format!("kind is missing, {expected}")));
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
    for (name, value) in &map {
        let name = name.as_str();
        if name == "apiVersion" || name == "kind" {
            continue;
        }
        if is_unset_zero(name, value) {
            continue;
        }
        if let Some((top, leaves)) = STRUCT_FIELDS.iter().find(|(f, _)| *f == name) {
            walk_struct(top, value, leaves, top, &mut cfg);
            continue;
        }
        if let Some(reason) = refused(name, value) {
            cfg.problems.push(Problem::Field {
                file: path.to_path_buf(),
                field: name.to_string(),
                value: value_text(value),
                reason: reason.to_string(),
            });
            continue;
        }
        match settings::by_field(name) {
            Some(setting) => record_value(setting, path, value, &mut cfg),
            None if REFUSED_FIELDS.iter().any(|(f, _, _)| *f == name) => {}
            None if UNIMPLEMENTED_FIELDS.contains(&name) => {
                cfg.unimplemented.push(name.to_string());
            }
            None => cfg.unknown.push(name.to_string()),
        }
    }
    Ok(cfg)
}

/// Records a setting's value from the file (a relative path resolved against the
/// file), or the problem with it.
fn record_value(
    setting: &'static settings::Setting,
    path: &Path,
    value: &Value,
    cfg: &mut KubeletConfigFile,
) {
    let field = setting.field.unwrap_or_default();
    match field_text(setting.kind, value) {
        Ok(None) => {}
        Ok(Some(text)) if setting.kind == Kind::Path => {
            cfg.values.insert(field, resolve_relative(path, &text));
        }
        Ok(Some(text)) => {
            cfg.values.insert(field, text);
        }
        Err(reason) => cfg.problems.push(Problem::Field {
            file: path.to_path_buf(),
            field: field.to_string(),
            value: value_text(value),
            reason: reason.0,
        }),
    }
}

/// A field's value as text when it has the YAML type its setting's kind needs
/// and parses; None when null (unset). Go's `metav1.Duration` decodes only
/// from a string such as "20s".
fn field_text(kind: Kind, value: &Value) -> Result<Option<String>, InvalidValue> {
    let text = match (kind, value) {
        (_, Value::Null) => return Ok(None),
        (Kind::Text | Kind::Path | Kind::Duration, Value::String(s)) => s.clone(),
        (Kind::Int, Value::Number(n)) if n.as_i64().is_some() => n.to_string(),
        (Kind::Bool, Value::Bool(b)) => b.to_string(),
        (Kind::Map(sep), Value::Object(m)) => map_text(m, sep)?,
        (Kind::List, Value::Array(items)) => list_text(items)?,
        (Kind::Multimap, Value::Object(m)) => multimap_text(m)?,
        (Kind::Gates, Value::Object(m)) => gates_text(m)?,
        (Kind::GraceByPriority, Value::Array(items)) => grace_by_priority_text(items)?,
        (Kind::ReservedMemory, Value::Array(items)) => reserved_memory_text(items)?,
        (Kind::Text | Kind::Path, _) => return Err("must be a string".into()),
        (Kind::Int, _) => return Err("must be an integer".into()),
        (Kind::Duration, _) => {
            return Err("must be a duration string such as \"20s\" or \"1m30s\"".into());
        }
        (Kind::Bool, _) => return Err("must be true or false".into()),
        (Kind::Map(_), _) => return Err("must be a map of strings".into()),
        (Kind::List, _) => return Err("must be a list of strings".into()),
        (Kind::Multimap, _) => return Err("must be a map of lists of strings".into()),
        (Kind::Gates, _) => return Err("must be a map of gate names to true or false".into()),
        (Kind::GraceByPriority, _) => {
            return Err("must be a list of {priority, shutdownGracePeriodSeconds}".into());
        }
        (Kind::ReservedMemory, _) => return Err("must be a list of {numaNode, limits}".into()),
    };
    kind.parse(&text)?;
    Ok(Some(text))
}

/// A YAML map of strings as the flag's text (`k<sep>v,...`), so the flag and
/// the file go through one check. Keys or values holding `,` (or a key holding
/// the separator) could not round-trip and are refused.
fn map_text(m: &Mapping, sep: char) -> Result<String, InvalidValue> {
    let mut parts = Vec::with_capacity(m.len());
    for (k, v) in m {
        let Value::String(v) = v else {
            return Err("must be a map of strings (quote numbers: \"1\")".into());
        };
        if k.contains([',', sep]) || v.contains(',') || k.trim().is_empty() {
            return Err(format!("{k:?}: {v:?} is not a valid entry").into());
        }
        parts.push(format!("{k}{sep}{v}"));
    }
    Ok(parts.join(","))
}

/// A YAML map of booleans as the flag's text (`Gate=true,Other=false`).
fn gates_text(m: &Mapping) -> Result<String, InvalidValue> {
    let mut parts = Vec::new();
    for (k, v) in m {
        let Value::Bool(on) = v else {
            return Err("must be a map of gate names to true or false".into());
        };
        if k.contains([',', '=']) || k.trim().is_empty() {
            return Err(format!("{k:?} is not a gate name").into());
        }
        parts.push(format!("{k}={on}"));
    }
    Ok(parts.join(","))
}

/// A YAML map of string lists as the flag's text (`k:v,k:v2`). A key holding
/// `:` or `,`, or a value holding `,`, could not round-trip and is refused.
fn multimap_text(m: &Mapping) -> Result<String, InvalidValue> {
    let mut parts = Vec::new();
    for (k, v) in m {
        let Value::Array(values) = v else {
            return Err("must be a map of lists of strings".into());
        };
        if k.contains([',', ':']) || k.trim().is_empty() {
            return Err(format!("{k:?} is not a valid key").into());
        }
        for v in values {
            match v {
                Value::String(v) if !v.contains(',') => parts.push(format!("{k}:{v}")),
                _ => return Err(format!("{k}: must be a list of strings without commas").into()),
            }
        }
    }
    Ok(parts.join(","))
}

/// `shutdownGracePeriodByPodPriority`'s entries as `priority=seconds,...`; a field
/// left out is zero, as Go decodes it, and any other field is refused.
fn grace_by_priority_text(items: &[Value]) -> Result<String, InvalidValue> {
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(m) = item else {
            return Err("must be a list of {priority, shutdownGracePeriodSeconds}".into());
        };
        let (mut priority, mut seconds) = (0_i64, 0_i64);
        for (k, v) in m {
            let Value::Number(n) = v else {
                return Err(format!("{k} is not a field with an integer").into());
            };
            let n = n
                .as_i64()
                .ok_or_else(|| InvalidValue(format!("{k}: {n} is not an integer")))?;
            match k.as_str() {
                "priority" => priority = n,
                "shutdownGracePeriodSeconds" => seconds = n,
                other => return Err(format!("unknown field {other:?} in an entry").into()),
            }
        }
        parts.push(format!("{priority}={seconds}"));
    }
    Ok(parts.join(","))
}

/// `reservedMemory`'s entries (`{numaNode: 0, limits: {memory: 1Gi}}`) as the
/// flag's text (`0:memory=1Gi;...`); any other field is refused, as Go's strict decode.
fn reserved_memory_text(items: &[Value]) -> Result<String, InvalidValue> {
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(m) = item else {
            return Err("must be a list of {numaNode, limits}".into());
        };
        let (mut node, mut limits) = (None, String::new());
        for (k, v) in m {
            match (k.as_str(), v) {
                ("numaNode", Value::Number(n)) => node = n.as_u64(),
                ("limits", Value::Object(l)) => limits = map_text(l, '=')?,
                ("numaNode", _) => return Err("numaNode must be a whole number".into()),
                ("limits", _) => return Err("limits must be a map of quantities".into()),
                (other, _) => {
                    return Err(format!("unknown field {other:?} in an entry").into());
                }
            }
        }
        let node = node.ok_or_else(|| InvalidValue("an entry has no numaNode".into()))?;
        parts.push(format!("{node}:{limits}"));
    }
    Ok(parts.join(";"))
}

/// A YAML list of strings as the flag's text (`a,b`).
fn list_text(items: &[Value]) -> Result<String, InvalidValue> {
    let mut parts = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::String(s) if !s.contains(',') => parts.push(s.as_str()),
            _ => return Err("must be a list of strings".into()),
        }
    }
    Ok(parts.join(","))
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

    /// Every setting's field is read, as written (absolute paths stay as they are).
    #[test]
    fn reads_every_settings_field() {
        let fields: Vec<(&str, &str)> = settings::all()
            .filter(|s| {
                !matches!(
                    s.kind,
                    Kind::Map(_)
                        | Kind::List
                        | Kind::Multimap
                        | Kind::Gates
                        | Kind::GraceByPriority
                        | Kind::ReservedMemory
                )
            })
            .filter_map(|s| Some((s.field?, Some(s.default).filter(|d| !d.is_empty())?)))
            // A zero that kubelet treats as unset is not read (written below instead).
            .filter(|(f, v)| !(ZERO_IS_UNSET.contains(f) && *v == "0"))
            // Nested fields are written below, as structs.
            .filter(|(f, _)| !f.contains('.'))
            .chain([
                ("staticPodPath", "/etc/kubernetes/manifests"),
                ("providerID", "kind://docker/kind/n1"),
                ("maxParallelImagePulls", "1"),
                ("imageMaximumGCAge", "1h"),
                ("tlsCertFile", "/tls.crt"),
                ("tlsPrivateKeyFile", "/tls.key"),
                ("tlsMinVersion", "VersionTLS13"),
            ])
            .collect();
        let body: String = fields.iter().map(|(f, v)| format!("{f}: {v}\n")).collect();
        let body = format!(
            "{body}kubeReserved:\n  cpu: 100m\nsystemReserved: {{}}\n\
             evictionHard:\n  memory.available: 1Gi\n  nodefs.available: \"5%\"\n\
             enforceNodeAllocatable: [pods, kube-reserved]\n\
             cgroupRoot: /x\nkubeReservedCgroup: /k\nsystemReservedCgroup: /s\n"
        );
        // The eviction manager's settings.
        let body = format!(
            "{body}evictionSoft:\n  memory.available: \
             2Gi\nevictionSoftGracePeriod:\n  memory.available: 1m\n\
             evictionMinimumReclaim:\n  memory.available: 100Mi\nevictionMaxPodGracePeriod: 10\n\
             featureGates:\n  EventedPLEG: false\n  Other: true\n"
        );
        // Sysctls and cluster DNS.
        let body = format!(
            "{body}clusterDomain: cluster.local\nclusterDNS: \
             [10.96.0.10]\nallowedUnsafeSysctls: [\"net.core.*\"]\n"
        );
        // The HTTP source.
        let body =
            format!("{body}staticPodURL: http://h/p\nstaticPodURLHeader:\n  a: [x, \"y:z\"]\n");
        // Standalone pod addresses (a managed containerd's subnet).
        let body = format!("{body}podCIDR: 10.244.1.0/24\n");
        // The containers' OOM kill and swap.
        let body = format!(
            "{body}singleProcessOOMKill: false\nmemorySwap:\n  swapBehavior: LimitedSwap\n\
             userNamespaces:\n  idsPerPod: 131072\n\
             preloadedImagesVerificationAllowlist: [busybox, \"reg.io/*\"]\n\
             logging:\n  format: json\n"
        );
        // The secure port's authentication and authorization.
        let body = format!(
            "{body}authentication:\n  x509:\n    clientCAFile: \
             /ca.crt\n  webhook:\n    enabled: true\n    cacheTTL: \
             1m\n  anonymous:\n    enabled: false\n\
             authorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: 1m\n    \
             cacheUnauthorizedTTL: 1s\n\
             tlsCipherSuites: [TLS_AES_128_GCM_SHA256]\n"
        );
        // Graceful node shutdown.
        let body = format!(
            "{body}shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n\
             shutdownGracePeriodByPodPriority:\n- priority: 2000000000\n  \
             shutdownGracePeriodSeconds: 10\n\
             - shutdownGracePeriodSeconds: 20\n"
        );
        // The resource managers' maps, lists and the reserved memory.
        let body = format!(
            "{body}cpuManagerPolicyOptions:\n  full-pcpus-only: \"true\"\n\
             topologyManagerPolicyOptions:\n  prefer-closest-numa-nodes: \"true\"\n\
             reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\nreservedSystemCPUs: 0-1\n"
        );
        let fields: Vec<(&str, &str)> = fields
            .into_iter()
            .chain([
                ("cpuManagerPolicyOptions", "full-pcpus-only=true"),
                (
                    "topologyManagerPolicyOptions",
                    "prefer-closest-numa-nodes=true",
                ),
                ("reservedMemory", "0:memory=1Gi"),
                ("reservedSystemCPUs", "0-1"),
                ("tlsCipherSuites", "TLS_AES_128_GCM_SHA256"),
                ("authentication.x509.clientCAFile", "/ca.crt"),
                ("authentication.webhook.enabled", "true"),
                ("authentication.webhook.cacheTTL", "1m"),
                ("authentication.anonymous.enabled", "false"),
                ("authorization.mode", "Webhook"),
                ("authorization.webhook.cacheAuthorizedTTL", "1m"),
                ("authorization.webhook.cacheUnauthorizedTTL", "1s"),
                ("kubeReserved", "cpu=100m"),
                ("systemReserved", ""),
                ("evictionHard", "memory.available<1Gi,nodefs.available<5%"),
                ("enforceNodeAllocatable", "pods,kube-reserved"),
                ("cgroupRoot", "/x"),
                ("kubeReservedCgroup", "/k"),
                ("systemReservedCgroup", "/s"),
                ("clusterDomain", "cluster.local"),
                ("clusterDNS", "10.96.0.10"),
                ("allowedUnsafeSysctls", "net.core.*"),
                ("staticPodURL", "http://h/p"),
                ("podCIDR", "10.244.1.0/24"),
                ("singleProcessOOMKill", "false"),
                ("memorySwap.swapBehavior", "LimitedSwap"),
                ("userNamespaces.idsPerPod", "131072"),
                ("preloadedImagesVerificationAllowlist", "busybox,reg.io/*"),
                ("logging.format", "json"),
                ("staticPodURLHeader", "a:x,a:y:z"),
                ("evictionSoft", "memory.available<2Gi"),
                ("evictionSoftGracePeriod", "memory.available=1m"),
                ("evictionMinimumReclaim", "memory.available=100Mi"),
                ("evictionMaxPodGracePeriod", "10"),
                ("featureGates", "EventedPLEG=false,Other=true"),
                ("shutdownGracePeriod", "30s"),
                ("shutdownGracePeriodCriticalPods", "10s"),
                ("shutdownGracePeriodByPodPriority", "2000000000=10,0=20"),
            ])
            .collect();
        let cfg = parse(&body).unwrap();
        for (field, value) in &fields {
            assert_eq!(
                cfg.values.get(field).map(String::as_str),
                Some(*value),
                "{field}"
            );
        }
        assert_eq!(cfg.values.len(), fields.len());
        assert_eq!(
            fields.len(),
            settings::all().filter(|s| s.field.is_some()).count()
        );
        assert!(cfg.unimplemented.is_empty() && cfg.unknown.is_empty() && cfg.problems.is_empty());
    }

    #[test]
    fn json_is_accepted() {
        let text = r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1",
                       "kind": "KubeletConfiguration",
                       "maxPods": 5, "syncFrequency": "30s"}"#;
        let cfg = parse_config(Path::new("/etc/x.json"), text).unwrap();
        assert_eq!(cfg.values["maxPods"], "5");
        assert_eq!(cfg.values["syncFrequency"], "30s");
    }

    #[test]
    fn null_and_absent_fields_are_unset() {
        let cfg = parse("staticPodPath:\nmaxPods: null\n").unwrap();
        assert!(cfg.values.is_empty(), "{:?}", cfg.values);
        assert!(cfg.problems.is_empty());
    }

    #[test]
    fn relative_static_pod_path_is_resolved_against_the_file() {
        let cfg = parse("staticPodPath: manifests\n").unwrap();
        assert_eq!(cfg.values["staticPodPath"], "/etc/manifests");
        // Only paths kubelet resolves: podLogsDir stays as written (and is refused later).
        let cfg = parse("podLogsDir: logs\n").unwrap();
        assert_eq!(cfg.values["podLogsDir"], "logs");
    }

    #[test]
    fn unimplemented_and_unknown_fields_are_collected() {
        let cfg = parse(
            "failSwapOn: false\n\
             logging:\n  flushFrequency: 5s\n\
             notAField: 3\n\
             mergeDefaultEvictionSettings: true\n\
             StaticPodPath: /x\n",
        )
        .unwrap();
        assert_eq!(
            cfg.unimplemented,
            ["logging.flushFrequency", "mergeDefaultEvictionSettings"]
        );
        // In key order (the YAML reader's maps are sorted; Go's have no order).
        assert_eq!(cfg.unknown, ["StaticPodPath", "notAField"]);
        assert!(cfg.problems.is_empty());
    }

    /// Struct fields are walked: each field set is named, a key the
    /// struct does not have is unknown, a struct that is not an object is refused.
    #[test]
    fn nested_struct_fields_are_walked() {
        let cfg = parse(
            "authentication:\n  x509:\n    clientCAFile: /ca.crt\n  webhook:\n    enabled: \
             true\n    cacheTTL: 2m\n    cachTTL: 1m\n  oidc: {}\n\
             authorization:\n  mode: AlwaysAllow\n\
             logging:\n  format: json\n  options:\n    json:\n      infoBufferSize: 64Ki\n      \
             bufferSize: 1\n\
             memorySwap:\n  swapBehavior: LimitedSwap\n",
        )
        .unwrap();
        assert_eq!(cfg.unimplemented, ["logging.options.json.infoBufferSize"]);
        assert_eq!(
            cfg.unknown,
            [
                "authentication.oidc",
                "authentication.webhook.cachTTL",
                "logging.options.json.bufferSize"
            ]
        );
        assert!(cfg.problems.is_empty());
        // Nested fields with a setting are read as values, a relative path against the file.
        let values: Vec<(&str, &str)> = cfg.values.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            values,
            [
                ("authentication.webhook.cacheTTL", "2m"),
                ("authentication.webhook.enabled", "true"),
                ("authentication.x509.clientCAFile", "/ca.crt"),
                ("authorization.mode", "AlwaysAllow"),
                ("logging.format", "json"),
                ("memorySwap.swapBehavior", "LimitedSwap"),
            ]
        );
        let cfg = parse(
            "authentication:\n  x509:\n    clientCAFile: \
                         pki/ca.crt\n  anonymous:\n    enabled: 1\n",
        )
        .unwrap();
        assert_eq!(
            cfg.values["authentication.x509.clientCAFile"],
            "/etc/pki/ca.crt"
        );
        assert_eq!(
            messages(&cfg.problems),
            [
                "/etc/x.yaml: field authentication.anonymous.enabled: invalid value \"1\": must \
                 be true or false"
            ]
        );
        let problems = parse("authentication: true\n").unwrap().problems;
        assert_eq!(
            messages(&problems),
            ["/etc/x.yaml: field authentication: invalid value \"true\": must be an object"]
        );
    }

    /// kubeadm writes unset fields as zeros (`syncFrequency: 0s`); kubelet
    /// defaults them, so they are neither applied nor warned about, and a zero
    /// that is a real value (`readOnlyPort: 0`, `shutdownGracePeriod` aside) stays.
    #[test]
    fn zero_values_kubelet_defaults_are_unset() {
        let cfg = parse(
            "syncFrequency: 0s\nfileCheckFrequency: \"0\"\nruntimeRequestTimeout: 0s\n\
             containerRuntimeEndpoint: \"\"\nmaxPods: 0\nhealthzBindAddress: \"\"\n\
             nodeStatusUpdateFrequency: 0s\nnodeLeaseDurationSeconds: 0\n\
             httpCheckFrequency: 0s\nshutdownGracePeriod: 0s\n\
             logging:\n  flushFrequency: 0\n  verbosity: 0\n  options:\n    text:\n      \
             infoBufferSize: \"0\"\n\
             readOnlyPort: 0\nfailSwapOn: false\n",
        )
        .unwrap();
        // failSwapOn is a pointer in kubelet's file: an explicit false is kept.
        assert_eq!(
            cfg.values.keys().copied().collect::<Vec<_>>(),
            ["failSwapOn", "readOnlyPort"]
        );
        assert!(cfg.unimplemented.is_empty(), "{:?}", cfg.unimplemented);
        assert!(cfg.unknown.is_empty() && cfg.problems.is_empty());
        // Not zero: applied and checked as usual.
        let cfg = parse("syncFrequency: 30s\nshutdownGracePeriod: 30s\n").unwrap();
        assert_eq!(cfg.values["syncFrequency"], "30s");
        assert_eq!(cfg.values["shutdownGracePeriod"], "30s");
    }

    /// kind's `/var/lib/kubelet/config.yaml`, as kubeadm writes it: every
    /// field is read, what oxlet lacks is named once, nothing is refused.
    #[test]
    fn kinds_kubelet_config_is_read() {
        let text = include_str!("../../tests/data/kind/config.yaml");
        let cfg = parse_config(Path::new("/var/lib/kubelet/config.yaml"), text).unwrap();
        assert!(cfg.problems.is_empty(), "{:?}", cfg.problems);
        assert!(cfg.unknown.is_empty(), "{:?}", cfg.unknown);
        assert!(cfg.unimplemented.is_empty(), "{:?}", cfg.unimplemented);
        let values: Vec<(&str, &str)> = cfg.values.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            values,
            [
                ("authentication.anonymous.enabled", "false"),
                ("authentication.webhook.enabled", "true"),
                (
                    "authentication.x509.clientCAFile",
                    "/etc/kubernetes/pki/ca.crt"
                ),
                ("authorization.mode", "Webhook"),
                ("cgroupDriver", "systemd"),
                ("cgroupRoot", "/kubelet"),
                ("clusterDNS", "10.96.0.10"),
                ("clusterDomain", "cluster.local"),
                (
                    "containerRuntimeEndpoint",
                    "unix:///run/containerd/containerd.sock"
                ),
                (
                    "evictionHard",
                    "imagefs.available<0%,nodefs.available<0%,nodefs.inodesFree<0%"
                ),
                ("failSwapOn", "false"),
                ("healthzBindAddress", "127.0.0.1"),
                ("healthzPort", "10248"),
                ("imageGCHighThresholdPercent", "100"),
                ("rotateCertificates", "true"),
                ("staticPodPath", "/etc/kubernetes/manifests"),
            ]
        );
    }

    #[test]
    fn wrong_kind_and_api_version() {
        let err =
            parse_config(Path::new("/etc/x.yaml"), "apiVersion: v1\nkind: Pod\n").unwrap_err();
        assert_eq!(
            messages(&err),
            [
                "/etc/x.yaml: kind is \"Pod\", expected KubeletConfiguration (apiVersion \
                 kubelet.config.k8s.io/v1beta1)",
                "/etc/x.yaml: apiVersion is \"v1\", expected kubelet.config.k8s.io/v1beta1",
            ]
        );
        let err = parse_config(Path::new("/etc/x.yaml"), "maxPods: 3\n").unwrap_err();
        assert_eq!(
            messages(&err),
            [
                "/etc/x.yaml: kind is missing, expected KubeletConfiguration (apiVersion \
                 kubelet.config.k8s.io/v1beta1)",
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
                "/etc/x.yaml: field address: invalid value \"[1,2]\": must be a string",
                "/etc/x.yaml: field fileCheckFrequency: invalid value \"soon\": not a valid \
                 duration (use a Go duration such as 20s, 1m30s or 300ms)",
                "/etc/x.yaml: field maxPods: invalid value \"lots\": must be an integer",
                "/etc/x.yaml: field readOnlyPort: invalid value \"1.5\": must be an integer",
                "/etc/x.yaml: field syncFrequency: invalid value \"60\": must be a duration \
                 string such as \"20s\" or \"1m30s\"",
            ]
        );
    }

    #[test]
    fn negative_duration_parses_for_later_validation() {
        let cfg = parse("fileCheckFrequency: -1s\n").unwrap();
        assert_eq!(cfg.values["fileCheckFrequency"], "-1s");
    }

    /// A field whose silent absence would weaken the node stops the start, naming it,
    /// unless its value is what oxlet does anyway.
    #[test]
    fn refused_fields_stop_the_start_unless_set_to_what_oxlet_does() {
        let cfg = parse(
            "registerWithTaints:\n- key: dedicated\n  value: secrets\n  effect: NoSchedule\n",
        )
        .unwrap();
        let mut all = messages(&cfg.problems);
        let taints = all.pop().unwrap();
        assert!(
            taints.starts_with("/etc/x.yaml: field registerWithTaints: invalid value \"[{")
                && taints.ends_with(
                    "\": oxlet takes the Node's registration taints from \
                                     --register-with-taints only; a taint given here would not \
                                     be on the Node"
                ),
            "{taints}"
        );
        assert!(all.is_empty(), "{all:?}");
        assert!(cfg.unimplemented.is_empty() && cfg.unknown.is_empty());
        let cfg = parse("registerWithTaints: []\n").unwrap();
        assert!(cfg.problems.is_empty(), "{:?}", cfg.problems);
        assert!(cfg.unimplemented.is_empty() && cfg.unknown.is_empty());
    }

    #[test]
    fn field_tables_are_disjoint() {
        for f in settings::all().filter_map(|s| s.field) {
            assert!(!UNIMPLEMENTED_FIELDS.contains(&f), "{f}");
        }
        for (f, _, _) in REFUSED_FIELDS {
            assert!(
                !UNIMPLEMENTED_FIELDS.contains(f) && settings::by_field(f).is_none(),
                "{f}"
            );
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

//! Validation: the part of `ValidatePodCreate` that decides whether a static pod
//! can run, refused with the field and the reason.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, EnvVarSource, Pod, PodSpec, Probe, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::defaults::unset;
use super::identity::static_pod_name;
use super::{FieldError, fail};
use crate::pod::{
    ImagePullPolicy, RULE_ACTION_RESTART, RULE_OPERATORS, RestartPolicy, is_dns1123_label,
    is_dns1123_subdomain,
};
use crate::quantity;
use crate::safe_path;

/// Longest object name (DNS-1123 subdomain).
const MAX_NAME_LEN: usize = 253;
/// Longest DNS-1123 label (namespaces, container and volume names).
/// Longest `metadata.uid` accepted (a UUID has 36 characters, a derived static pod UID
/// 32): it names directories, so it is kept well below the file name limit.
const MAX_UID_LEN: usize = 128;

const LABEL_RULE: &str = "must be a DNS-1123 label (at most 63 lower-case alphanumerics or '-', starting and ending alphanumeric)";
const SUBDOMAIN_RULE: &str = "must be a DNS-1123 subdomain (at most 253 lower-case alphanumerics, '-' or '.', each part starting and ending alphanumeric)";

/// kubelet's env var name rule: `[-._a-zA-Z][-._a-zA-Z0-9]*`.
fn is_env_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic() || matches!(c, '-' | '.' | '_') || (!first && c.is_ascii_digit())
    };
    chars.next().is_some_and(|c| ok(c, true)) && chars.all(|c| ok(c, false))
}

fn one_of(field: &str, value: &Option<String>, allowed: &[&str]) -> Result<(), FieldError> {
    match value.as_deref() {
        None => Ok(()),
        Some(v) if allowed.contains(&v) => Ok(()),
        Some(v) => fail(
            field,
            format!(
                "unsupported value {v:?}: supported values: {}",
                quoted(allowed)
            ),
        ),
    }
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

const API_REF_REASON: &str = "forbidden: static pods may not reference API objects";

/// `ValidatePodCreate` as far as a static pod needs it: the metadata, then the spec;
/// the first error found is returned.
pub(super) fn validate_pod(pod: &Pod, node_name: &str) -> Result<(), FieldError> {
    validate_object_meta(&pod.metadata, node_name)?;
    let Some(spec) = &pod.spec else {
        return fail("spec", "required value");
    };
    validate_pod_spec(spec)
}

/// kubelet's `ValidateObjectMeta` for a static pod: the name (with the node suffix it
/// will carry), the namespace and the UID, which oxlet turns into paths.
fn validate_object_meta(meta: &ObjectMeta, node_name: &str) -> Result<(), FieldError> {
    validate_pod_name(meta.name.as_deref().unwrap_or(""), node_name)?;
    if let Some(ns) = meta.namespace.as_deref().filter(|ns| !ns.is_empty())
        && !is_dns1123_label(ns)
    {
        return fail(
            "metadata.namespace",
            format!("invalid value {ns:?}: {LABEL_RULE}"),
        );
    }
    validate_pod_uid(meta.uid.as_deref())
}

/// kubelet's `ValidatePodName`, checked both as written and with the node suffix the
/// static pod's full name gets, since the full name is what must stay valid.
fn validate_pod_name(name: &str, node_name: &str) -> Result<(), FieldError> {
    if name.is_empty() {
        return fail("metadata.name", "required value");
    }
    if !is_dns1123_subdomain(name) {
        return fail(
            "metadata.name",
            format!("invalid value {name:?}: {SUBDOMAIN_RULE}"),
        );
    }
    let full = static_pod_name(name, node_name);
    if full.len() > MAX_NAME_LEN {
        return fail(
            "metadata.name",
            format!(
                "name plus node suffix {:?} is {} characters, must be no more than {MAX_NAME_LEN}",
                full.strip_prefix(name).unwrap_or(""),
                full.len()
            ),
        );
    }
    if !is_dns1123_subdomain(&full) {
        return fail(
            "metadata.name",
            format!("invalid value {full:?} (name plus node suffix): {SUBDOMAIN_RULE}"),
        );
    }
    Ok(())
}

/// The UID names `<root>/pods/<uid>` and the log directory, which oxlet (root) creates
/// and removes, and is printed in every log line about the pod: it must be safe for both.
fn validate_pod_uid(uid: Option<&str>) -> Result<(), FieldError> {
    // It must be one plain path component. Whitespace and control characters (a
    // newline would forge log lines) are refused too.
    if let Some(uid) = uid.filter(|u| !u.is_empty())
        && (uid.len() > MAX_UID_LEN
            || safe_path::component(uid).is_err()
            || uid.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return fail(
            "metadata.uid",
            format!(
                "invalid value {uid:?}: must be a single path component of at most {MAX_UID_LEN} characters (no '/', not '.' or '..', no whitespace or control characters)"
            ),
        );
    }
    Ok(())
}

/// kubelet's `ValidatePodSpec`, as far as a static pod needs it: the pod-level fields,
/// then the volumes, then the containers that mount them.
fn validate_pod_spec(spec: &PodSpec) -> Result<(), FieldError> {
    if spec.containers.is_empty() {
        return fail(
            "spec.containers",
            "required value: a pod needs at least one container",
        );
    }
    validate_pod_policies(spec)?;
    validate_hostname_override(spec)?;
    validate_host_users(spec)?;
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return fail(
            "spec.ephemeralContainers",
            "forbidden: cannot be set on create",
        );
    }
    validate_no_api_references(spec)?;
    let volumes = validate_volumes(spec)?;
    validate_containers(spec, &volumes)?;
    validate_env_files(spec)
}

/// The API's `validateHostUsers`: a pod in its own user namespace shares none of the
/// node's other namespaces.
fn validate_host_users(spec: &PodSpec) -> Result<(), FieldError> {
    if spec.host_users != Some(false) {
        return Ok(());
    }
    for (field, set) in [
        ("spec.hostNetwork", spec.host_network),
        ("spec.hostPID", spec.host_pid),
        ("spec.hostIPC", spec.host_ipc),
    ] {
        if set == Some(true) {
            return fail(field, "forbidden: when `pod.Spec.HostUsers` is false");
        }
    }
    Ok(())
}

/// The API's checks of `spec.hostnameOverride` (HostnameOverride, beta in 1.35): a
/// DNS subdomain of at most 64 characters, and neither a host-network pod's (it has
/// the node's name) nor beside `setHostnameAsFQDN` (the override has no domain).
fn validate_hostname_override(spec: &PodSpec) -> Result<(), FieldError> {
    let Some(h) = spec.hostname_override.as_deref() else {
        return Ok(());
    };
    const FIELD: &str = "spec.hostnameOverride";
    if h.len() > 64 || !is_dns1123_subdomain(h) {
        return fail(
            FIELD,
            format!("invalid value {h:?}: must be a DNS subdomain of at most 64 characters"),
        );
    }
    if spec.host_network == Some(true) {
        return fail(FIELD, "forbidden: may not be set when hostNetwork is true");
    }
    if spec.set_hostname_as_fqdn == Some(true) {
        return fail(
            FIELD,
            "forbidden: may not be set when setHostnameAsFQDN is true",
        );
    }
    Ok(())
}

/// The API's `validateFileKeySelector` and its pod-level check: each `fileKeyRef`
/// names one of the pod's emptyDir volumes, a relative path inside it, and a key.
fn validate_env_files(spec: &PodSpec) -> Result<(), FieldError> {
    let empty_dirs: HashSet<&str> = (spec.volumes.iter().flatten())
        .filter(|v| v.empty_dir.is_some())
        .map(|v| v.name.as_str())
        .collect();
    let lists = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", &spec.containers[..]),
    ];
    for (list, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            for (j, e) in c.env.iter().flatten().enumerate() {
                let Some(sel) = e.value_from.as_ref().and_then(|v| v.file_key_ref.as_ref()) else {
                    continue;
                };
                let f = |sub: &str| format!("spec.{list}[{i}].env[{j}].valueFrom.fileKeyRef.{sub}");
                if sel.volume_name.is_empty() {
                    return fail(f("volumeName"), "required value");
                }
                if !empty_dirs.contains(sel.volume_name.as_str()) {
                    return fail(
                        f("volumeName"),
                        format!(
                            "invalid value {:?}: must reference an emptyDir volume of the pod",
                            sel.volume_name
                        ),
                    );
                }
                if sel.path.is_empty() {
                    return fail(f("path"), "required value");
                }
                if crate::safe_path::relative(&sel.path).is_err() {
                    return fail(
                        f("path"),
                        format!(
                            "invalid value {:?}: must be a relative path without '..'",
                            sel.path
                        ),
                    );
                }
                if sel.key.is_empty() {
                    return fail(f("key"), "required value");
                }
                if !is_env_var_name(&sel.key) {
                    return fail(
                        f("key"),
                        format!(
                            "invalid value {:?}: not a valid environment variable name",
                            sel.key
                        ),
                    );
                }
            }
        }
    }
    Ok(())
}

/// kubelet's `validateRestartPolicy` and `validateDNSPolicy`, and the bounds on the
/// pod's grace period and active deadline.
fn validate_pod_policies(spec: &PodSpec) -> Result<(), FieldError> {
    one_of(
        "spec.restartPolicy",
        &spec.restart_policy,
        RestartPolicy::NAMES,
    )?;
    one_of(
        "spec.dnsPolicy",
        &spec.dns_policy,
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    )?;
    if let Some(g) = spec.termination_grace_period_seconds
        && g < 0
    {
        return fail(
            "spec.terminationGracePeriodSeconds",
            format!("invalid value {g}: must be greater than or equal to 0"),
        );
    }
    if let Some(d) = spec.active_deadline_seconds
        && d <= 0
    {
        return fail(
            "spec.activeDeadlineSeconds",
            format!("invalid value {d}: must be greater than 0"),
        );
    }
    Ok(())
}

/// The API server's static pod restriction: no pod-level reference to an API object
/// (pull secrets, resource claims, service accounts), since no API server serves them.
fn validate_no_api_references(spec: &PodSpec) -> Result<(), FieldError> {
    if spec
        .image_pull_secrets
        .as_ref()
        .is_some_and(|s| !s.is_empty())
    {
        return fail(
            "spec.imagePullSecrets",
            format!("{API_REF_REASON} (Secret)"),
        );
    }
    if spec.resource_claims.as_ref().is_some_and(|s| !s.is_empty()) {
        return fail(
            "spec.resourceClaims",
            format!("{API_REF_REASON} (ResourceClaim)"),
        );
    }
    for (field, sa) in [
        ("spec.serviceAccountName", &spec.service_account_name),
        ("spec.serviceAccount", &spec.service_account),
    ] {
        if !unset(sa) {
            return fail(field, format!("{API_REF_REASON} (ServiceAccount)"));
        }
    }
    Ok(())
}

/// kubelet's `ValidateVolumes`: each volume, and unique names; the names are returned
/// for the containers' volume mounts to be checked against.
fn validate_volumes(spec: &PodSpec) -> Result<HashSet<&str>, FieldError> {
    let mut volumes = HashSet::new();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}]");
        validate_volume(v, &field)?;
        validate_file_modes(v, &field)?;
        if !volumes.insert(v.name.as_str()) {
            return fail(
                format!("{field}.name"),
                format!("duplicate name {:?}", v.name),
            );
        }
    }
    Ok(volumes)
}

/// kubelet's file mode checks (`validateDownwardAPIVolumeSource`, `validateProjectedVolumeSource`):
/// a mode is 0 to 0777. YAML's `0648` is no octal and reads as 648, which lands here.
fn validate_file_modes(
    v: &k8s_openapi::api::core::v1::Volume,
    field: &str,
) -> Result<(), FieldError> {
    let check = |mode: Option<i32>, at: String| match mode {
        Some(m) if !(0..=0o777).contains(&m) => fail(
            at,
            format!(
                "invalid value {m}: must be a number between 0 and 0777 (octal), both inclusive"
            ),
        ),
        _ => Ok(()),
    };
    let items = |items: Option<&Vec<k8s_openapi::api::core::v1::DownwardAPIVolumeFile>>,
                 at: &str| {
        for (j, item) in items.into_iter().flatten().enumerate() {
            check(item.mode, format!("{at}.items[{j}].mode"))?;
        }
        Ok(())
    };
    if let Some(d) = &v.downward_api {
        let at = format!("{field}.downwardAPI");
        check(d.default_mode, format!("{at}.defaultMode"))?;
        items(d.items.as_ref(), &at)?;
    }
    if let Some(p) = &v.projected {
        let at = format!("{field}.projected");
        check(p.default_mode, format!("{at}.defaultMode"))?;
        for (k, source) in p.sources.iter().flatten().enumerate() {
            if let Some(d) = &source.downward_api {
                items(d.items.as_ref(), &format!("{at}.sources[{k}].downwardAPI"))?;
            }
        }
    }
    Ok(())
}

/// kubelet's `validateInitContainers` then `validateContainers`: container names are
/// unique across both lists.
fn validate_containers(spec: &PodSpec, volumes: &HashSet<&str>) -> Result<(), FieldError> {
    let host_network = spec.host_network.unwrap_or(false);
    let mut names = HashSet::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let ctx = ContainerCtx {
            field: format!("spec.initContainers[{i}]"),
            init: true,
            host_network,
        };
        validate_container(c, &ctx, &mut names, volumes)?;
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let ctx = ContainerCtx {
            field: format!("spec.containers[{i}]"),
            init: false,
            host_network,
        };
        validate_container(c, &ctx, &mut names, volumes)?;
    }
    Ok(())
}

fn validate_volume(v: &Volume, field: &str) -> Result<(), FieldError> {
    if v.name.is_empty() {
        return fail(format!("{field}.name"), "required value");
    }
    if !is_dns1123_label(&v.name) {
        return fail(
            format!("{field}.name"),
            format!("invalid value {:?}: {LABEL_RULE}", v.name),
        );
    }
    let forbidden = |what: &str, kind: &str| {
        fail(
            format!("{field}.{what}"),
            format!("{API_REF_REASON} ({kind})"),
        )
    };
    if v.secret.is_some() {
        return forbidden("secret", "Secret");
    }
    if v.config_map.is_some() {
        return forbidden("configMap", "ConfigMap");
    }
    if v.persistent_volume_claim.is_some() {
        return forbidden("persistentVolumeClaim", "PersistentVolumeClaim");
    }
    if let Some(hp) = &v.host_path {
        let hf = |sub: &str| format!("{field}.hostPath.{sub}");
        if hp.path.is_empty() {
            return fail(hf("path"), "required value");
        }
        no_backsteps(&hf("path"), &hp.path)?;
        one_of(&hf("type"), &hp.type_, HOST_PATH_TYPES)?;
    }
    if v.ephemeral.is_some() {
        return forbidden("ephemeral", "PersistentVolumeClaim");
    }
    if v.csi
        .as_ref()
        .is_some_and(|c| c.node_publish_secret_ref.is_some())
    {
        return forbidden("csi.nodePublishSecretRef", "Secret");
    }
    if let Some(p) = &v.projected {
        for (j, src) in p.sources.iter().flatten().enumerate() {
            let at = |what: &str| format!("projected.sources[{j}].{what}");
            if src.secret.is_some() {
                return forbidden(&at("secret"), "Secret");
            }
            if src.config_map.is_some() {
                return forbidden(&at("configMap"), "ConfigMap");
            }
            if src.service_account_token.is_some() {
                return forbidden(&at("serviceAccountToken"), "ServiceAccount token");
            }
            if src.cluster_trust_bundle.is_some() {
                return forbidden(&at("clusterTrustBundle"), "ClusterTrustBundle");
            }
            if src.pod_certificate.is_some() {
                return forbidden(&at("podCertificate"), "PodCertificateRequest");
            }
        }
    }
    Ok(())
}

/// kubelet's `HostPathType` values ("" means no check).
const HOST_PATH_TYPES: &[&str] = &[
    "",
    "DirectoryOrCreate",
    "Directory",
    "FileOrCreate",
    "File",
    "Socket",
    "CharDevice",
    "BlockDevice",
];

/// kubelet's `validatePathNoBacksteps`: no `..` element.
fn no_backsteps(field: &str, path: &str) -> Result<(), FieldError> {
    if path.split('/').any(|part| part == "..") {
        return fail(
            field,
            format!("invalid value {path:?}: must not contain '..'"),
        );
    }
    Ok(())
}

/// kubelet's `validateLocalDescendingPath` (for `subPath`, `subPathExpr`): relative and
/// without `..`; NUL is refused too, since no path can hold it.
fn local_descending(field: &str, path: &str) -> Result<(), FieldError> {
    if path.starts_with('/') {
        return fail(
            field,
            format!("invalid value {path:?}: must be a relative path"),
        );
    }
    no_backsteps(field, path)?;
    if safe_path::relative(path).is_err() {
        return fail(
            field,
            format!("invalid value {path:?}: must not contain NUL"),
        );
    }
    Ok(())
}

struct ContainerCtx {
    field: String,
    init: bool,
    host_network: bool,
}

/// One container (`ctx` says where and in which list), part by part like the API's
/// `validateContainerCommon`; the first error found is returned.
fn validate_container<'a>(
    c: &'a Container,
    ctx: &ContainerCtx,
    names: &mut HashSet<&'a str>,
    volumes: &HashSet<&str>,
) -> Result<(), FieldError> {
    let f = |sub: &str| format!("{}.{sub}", ctx.field);
    validate_container_name(c, &f, names)?;
    validate_image(c, &f)?;
    one_of(
        &f("imagePullPolicy"),
        &c.image_pull_policy,
        ImagePullPolicy::NAMES,
    )?;
    one_of(
        &f("terminationMessagePolicy"),
        &c.termination_message_policy,
        &["File", "FallbackToLogsOnError"],
    )?;
    // An init container restarted Always is a sidecar: it may have probes and hooks.
    let sidecar = ctx.init && c.restart_policy.as_deref() == Some(RestartPolicy::Always.as_str());
    validate_container_restart_policy(c, ctx, &f)?;
    validate_security_context(c, &f)?;
    validate_container_ports(c, ctx, &f)?;
    validate_env(c, &f)?;
    validate_env_from(c, &f)?;
    validate_volume_mounts(c, volumes, &f)?;
    validate_container_probes(c, ctx, sidecar, &f)?;
    if c.lifecycle.is_some() && ctx.init && !sidecar {
        return fail(
            f("lifecycle"),
            "forbidden: may not be set for init containers without restartPolicy=Always",
        );
    }
    validate_resources(c, &f)
}

/// A container's name: required, a DNS-1123 label, and unique in the pod (`names`
/// holds those already seen, init containers included).
fn validate_container_name<'a>(
    c: &'a Container,
    f: &dyn Fn(&str) -> String,
    names: &mut HashSet<&'a str>,
) -> Result<(), FieldError> {
    if c.name.is_empty() {
        return fail(f("name"), "required value");
    }
    if !is_dns1123_label(&c.name) {
        return fail(
            f("name"),
            format!("invalid value {:?}: {LABEL_RULE}", c.name),
        );
    }
    if !names.insert(c.name.as_str()) {
        return fail(f("name"), format!("duplicate name {:?}", c.name));
    }
    Ok(())
}

/// A static pod has no controller to default the image: it is required, and must be
/// written without surrounding whitespace.
fn validate_image(c: &Container, f: &dyn Fn(&str) -> String) -> Result<(), FieldError> {
    match c.image.as_deref() {
        None | Some("") => fail(f("image"), "required value"),
        Some(img) if img.trim() != img => {
            fail(f("image"), "must not have leading or trailing whitespace")
        }
        Some(_) => Ok(()),
    }
}

/// The API's `validateContainerRestartPolicy` (ContainerRestartRules, beta and on by
/// default since 1.35): any container may override the pod's policy (an init
/// container's Always makes it a sidecar), and restart rules need that override.
fn validate_container_restart_policy(
    c: &Container,
    ctx: &ContainerCtx,
    f: &dyn Fn(&str) -> String,
) -> Result<(), FieldError> {
    let rules = c.restart_policy_rules.as_deref().unwrap_or_default();
    if c.restart_policy.is_none() {
        if !rules.is_empty() {
            return fail(
                f("restartPolicy"),
                "required value: must be specified when restartPolicyRules are used",
            );
        }
        return Ok(());
    }
    one_of(&f("restartPolicy"), &c.restart_policy, RestartPolicy::NAMES)?;
    if rules.len() > MAX_RESTART_RULES {
        return fail(
            f("restartPolicyRules"),
            format!(
                "too many: {}: must have at most {MAX_RESTART_RULES} items",
                rules.len()
            ),
        );
    }
    for (i, rule) in rules.iter().enumerate() {
        let rf = |sub: &str| format!("{}.restartPolicyRules[{i}].{sub}", ctx.field);
        one_of(
            &rf("action"),
            &Some(rule.action.clone()),
            &[RULE_ACTION_RESTART],
        )?;
        let Some(on) = rule.exit_codes.as_ref() else {
            return fail(rf("exitCodes"), "required value: must be specified");
        };
        one_of(
            &rf("exitCodes.operator"),
            &Some(on.operator.clone()),
            RULE_OPERATORS,
        )?;
        let values = on.values.as_deref().unwrap_or_default();
        if values.len() > MAX_RULE_EXIT_CODES {
            return fail(
                rf("exitCodes.values"),
                format!(
                    "too many: {}: must have at most {MAX_RULE_EXIT_CODES} items",
                    values.len()
                ),
            );
        }
    }
    Ok(())
}

/// The API's bounds on a container's restart rules and on one rule's exit codes.
const MAX_RESTART_RULES: usize = 20;
const MAX_RULE_EXIT_CODES: usize = 255;

/// The API's `ValidateSecurityContext`: no_new_privs cannot hold for a privileged
/// container, nor for one that adds CAP_SYS_ADMIN (the API compares that spelling only).
fn validate_security_context(c: &Container, f: &dyn Fn(&str) -> String) -> Result<(), FieldError> {
    let Some(sc) = c
        .security_context
        .as_ref()
        .filter(|sc| sc.allow_privilege_escalation == Some(false))
    else {
        return Ok(());
    };
    if sc.privileged == Some(true) {
        return fail(
            f("securityContext"),
            "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
        );
    }
    let adds = sc.capabilities.as_ref().and_then(|c| c.add.as_ref());
    if adds.is_some_and(|a| a.iter().any(|c| c == "CAP_SYS_ADMIN")) {
        return fail(
            f("securityContext"),
            "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
        );
    }
    Ok(())
}

/// kubelet's `validateContainerPorts`, plus its host network rule that a host port
/// must be the container port.
fn validate_container_ports(
    c: &Container,
    ctx: &ContainerCtx,
    f: &dyn Fn(&str) -> String,
) -> Result<(), FieldError> {
    for (j, p) in c.ports.iter().flatten().enumerate() {
        let pf = |sub: &str| f(&format!("ports[{j}].{sub}"));
        if !(1..=65535).contains(&p.container_port) {
            return fail(
                pf("containerPort"),
                format!(
                    "invalid value {}: must be between 1 and 65535, inclusive",
                    p.container_port
                ),
            );
        }
        if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
            if !(1..=65535).contains(&hp) {
                return fail(
                    pf("hostPort"),
                    format!("invalid value {hp}: must be between 1 and 65535, inclusive"),
                );
            }
            if ctx.host_network && hp != p.container_port {
                return fail(
                    pf("hostPort"),
                    format!(
                        "invalid value {hp}: must match containerPort when hostNetwork is true"
                    ),
                );
            }
        }
        one_of(&pf("protocol"), &p.protocol, &["TCP", "UDP", "SCTP"])?;
    }
    Ok(())
}

/// kubelet's `ValidateEnv`: each variable's name, and its `valueFrom` source.
fn validate_env(c: &Container, f: &dyn Fn(&str) -> String) -> Result<(), FieldError> {
    for (j, e) in c.env.iter().flatten().enumerate() {
        let ef = |sub: &str| f(&format!("env[{j}].{sub}"));
        if e.name.is_empty() {
            return fail(ef("name"), "required value");
        }
        if !is_env_var_name(&e.name) {
            return fail(
                ef("name"),
                format!(
                    "invalid value {:?}: a valid environment variable name must consist of alphabetic characters, digits, '_', '-' or '.', and must not start with a digit",
                    e.name
                ),
            );
        }
        if let Some(vf) = &e.value_from {
            validate_env_var_source(vf, &e.value, &ef)?;
        }
    }
    Ok(())
}

/// kubelet's `validateEnvVarValueFrom`: exactly one source, none of them an API
/// object a static pod may not reference, and no plain value beside it.
fn validate_env_var_source(
    vf: &EnvVarSource,
    value: &Option<String>,
    ef: &dyn Fn(&str) -> String,
) -> Result<(), FieldError> {
    if vf.secret_key_ref.is_some() {
        return fail(
            ef("valueFrom.secretKeyRef"),
            format!("{API_REF_REASON} (Secret)"),
        );
    }
    if vf.config_map_key_ref.is_some() {
        return fail(
            ef("valueFrom.configMapKeyRef"),
            format!("{API_REF_REASON} (ConfigMap)"),
        );
    }
    let sources = [
        vf.field_ref.is_some(),
        vf.resource_field_ref.is_some(),
        vf.file_key_ref.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if sources != 1 {
        return fail(ef("valueFrom"), "must specify exactly one source");
    }
    if !unset(value) {
        return fail(
            ef("valueFrom"),
            "may not be specified when `value` is not empty",
        );
    }
    Ok(())
}

/// kubelet's `ValidateEnvFrom`, narrowed by the static pod rule: both of its sources
/// are API objects.
fn validate_env_from(c: &Container, f: &dyn Fn(&str) -> String) -> Result<(), FieldError> {
    for (j, e) in c.env_from.iter().flatten().enumerate() {
        if e.secret_ref.is_some() {
            return fail(
                f(&format!("envFrom[{j}].secretRef")),
                format!("{API_REF_REASON} (Secret)"),
            );
        }
        if e.config_map_ref.is_some() {
            return fail(
                f(&format!("envFrom[{j}].configMapRef")),
                format!("{API_REF_REASON} (ConfigMap)"),
            );
        }
    }
    Ok(())
}

/// kubelet's `ValidateVolumeMounts`: each mount names a pod volume, has a mount path,
/// and a `subPath` or `subPathExpr` (not both) that stays inside the volume.
fn validate_volume_mounts(
    c: &Container,
    volumes: &HashSet<&str>,
    f: &dyn Fn(&str) -> String,
) -> Result<(), FieldError> {
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        let mf = |sub: &str| f(&format!("volumeMounts[{j}].{sub}"));
        if !volumes.contains(m.name.as_str()) {
            return fail(
                mf("name"),
                format!("not found: no volume named {:?}", m.name),
            );
        }
        if m.mount_path.is_empty() {
            return fail(mf("mountPath"), "required value");
        }
        let sub_path = m.sub_path.as_deref().unwrap_or("");
        let sub_path_expr = m.sub_path_expr.as_deref().unwrap_or("");
        if !sub_path.is_empty() && !sub_path_expr.is_empty() {
            return fail(
                mf("subPathExpr"),
                format!(
                    "invalid value {sub_path_expr:?}: subPathExpr and subPath are mutually exclusive"
                ),
            );
        }
        if !sub_path.is_empty() {
            local_descending(&mf("subPath"), sub_path)?;
        }
        if !sub_path_expr.is_empty() {
            local_descending(&mf("subPathExpr"), sub_path_expr)?;
        }
    }
    Ok(())
}

/// kubelet's liveness, readiness and startup probe checks: where a container may have
/// probes at all (`sidecar`: an init container with restartPolicy Always), then each.
fn validate_container_probes(
    c: &Container,
    ctx: &ContainerCtx,
    sidecar: bool,
    f: &dyn Fn(&str) -> String,
) -> Result<(), FieldError> {
    let probes = [
        ("livenessProbe", &c.liveness_probe, true),
        ("readinessProbe", &c.readiness_probe, false),
        ("startupProbe", &c.startup_probe, true),
    ];
    for (name, probe, needs_single_success) in probes {
        let Some(probe) = probe else { continue };
        // Plain init containers run to completion: probes make no sense there.
        if ctx.init && !sidecar {
            return fail(
                f(name),
                "forbidden: may not be set for init containers without restartPolicy=Always",
            );
        }
        // Sidecars are never "ready"-gated the way regular containers are.
        if ctx.init && name == "readinessProbe" {
            continue;
        }
        validate_probe(probe, &f(name), needs_single_success)?;
    }
    Ok(())
}

/// Every quantity parses exactly and is not negative, requests stay within limits,
/// and the cgroup arithmetic accepts cpu and memory: the runtime's own function is
/// asked, so a value refused at container creation is refused here first.
fn validate_resources(c: &Container, f: &dyn Fn(&str) -> String) -> Result<(), FieldError> {
    let Some(res) = &c.resources else {
        return Ok(());
    };
    let parse = |which: &str, name: &str, q: &Quantity| {
        let field = f(&format!("resources.{which}.{name}"));
        let v = if name == "cpu" {
            quantity::milli_cpu(q)
        } else {
            quantity::bytes(q)
        }
        .map_err(|e| FieldError::new(&field, e.to_string()))?;
        if v < 0 {
            return fail(
                field,
                format!(
                    "invalid value {:?}: must be greater than or equal to 0",
                    q.0
                ),
            );
        }
        Ok(v)
    };
    for (name, limit) in res.limits.iter().flatten() {
        parse("limits", name, limit)?;
    }
    for (name, request) in res.requests.iter().flatten() {
        let r = parse("requests", name, request)?;
        if let Some(limit) = res.limits.as_ref().and_then(|l| l.get(name))
            && r > parse("limits", name, limit)?
        {
            return fail(
                f(&format!("resources.requests.{name}")),
                format!(
                    "invalid value {:?}: must be less than or equal to {name} limit of {}",
                    request.0, limit.0
                ),
            );
        }
    }
    crate::cm::linux_resources(c).map_err(|e| FieldError::new(f(&e.field()), e.reason()))?;
    Ok(())
}

fn validate_probe(p: &Probe, field: &str, needs_single_success: bool) -> Result<(), FieldError> {
    let handlers = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ]
    .iter()
    .filter(|h| **h)
    .count();
    match handlers {
        0 => return fail(field, "must specify a handler type"),
        1 => {}
        _ => return fail(field, "may not specify more than 1 handler type"),
    }
    let numbers = [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ];
    for (name, value) in numbers {
        if let Some(v) = value
            && v < 0
        {
            return fail(
                format!("{field}.{name}"),
                format!("invalid value {v}: must be greater than or equal to 0"),
            );
        }
    }
    if needs_single_success
        && let Some(s) = p.success_threshold
        && s != 1
    {
        return fail(
            format!("{field}.successThreshold"),
            format!("invalid value {s}: must be 1"),
        );
    }
    if let Some(g) = p.termination_grace_period_seconds
        && g <= 0
    {
        return fail(
            format!("{field}.terminationGracePeriodSeconds"),
            format!("invalid value {g}: must be greater than 0"),
        );
    }
    if let Some(h) = &p.http_get
        && let IntOrString::Int(port) = h.port
        && !(1..=65535).contains(&port)
    {
        return fail(
            format!("{field}.httpGet.port"),
            format!("invalid value {port}: must be between 1 and 65535, inclusive"),
        );
    }
    if let Some(t) = &p.tcp_socket
        && let IntOrString::Int(port) = t.port
        && !(1..=65535).contains(&port)
    {
        return fail(
            format!("{field}.tcpSocket.port"),
            format!("invalid value {port}: must be between 1 and 65535, inclusive"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::manifest::test_support::*;
    use crate::config::manifest::*;

    #[test]
    fn missing_or_bad_names_are_rejected() {
        assert_err(
            "apiVersion: v1\nkind: Pod\nmetadata: {}\nspec:\n  containers: [{name: c, image: x}]\n",
            "metadata.name: required value",
        );
        assert_err(
            &GOOD.replace("name: web", "name: Web"),
            "metadata.name: invalid value \"Web\"",
        );
        assert_err(
            &GOOD.replace("name: web", "name: web\n  namespace: Kube_System"),
            "metadata.namespace: invalid value \"Kube_System\"",
        );
        // Valid on its own (249 characters), too long once "-node1" is appended.
        let long = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(57));
        assert!(is_dns1123_subdomain(&long));
        assert_err(
            &GOOD.replace("name: web", &format!("name: {long}")),
            "metadata.name: name plus node suffix \"-node1\" is 255 characters",
        );
        let msg = decode_static_pod(GOOD.as_bytes(), Path::new(PATH), "node_1")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("metadata.name: invalid value \"web-node_1\" (name plus node suffix)"),
            "{msg}"
        );
        assert_err(
            &GOOD.replace("name: nginx", "name: Nginx_1"),
            "spec.containers[0].name: invalid value \"Nginx_1\"",
        );
    }

    #[test]
    fn no_containers_is_rejected() {
        assert_err(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: []\n",
            "spec.containers: required value",
        );
        assert_err(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n",
            "spec.containers: required value",
        );
    }

    #[test]
    fn duplicate_container_names_are_rejected() {
        let text = with_container_lines(
            "  - name: sidecar\n    image: b\n  - name: nginx\n    image: c\n",
        );
        assert_eq!(
            err(&text),
            format!("{PATH}: spec.containers[2].name: duplicate name \"nginx\"")
        );
        let text = GOOD.replace(
            "spec:\n",
            "spec:\n  initContainers:\n  - name: nginx\n    image: init\n",
        );
        assert_eq!(
            err(&text),
            format!("{PATH}: spec.containers[0].name: duplicate name \"nginx\"")
        );
    }

    #[test]
    fn no_new_privs_cannot_hold_for_privileged_or_sys_admin_containers() {
        assert_err(
            &with_container_lines(
                "    securityContext:\n      privileged: true\n      allowPrivilegeEscalation: false\n",
            ),
            "spec.containers[0].securityContext: cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
        );
        assert_err(
            &with_container_lines(
                "    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities:\n        add: [CAP_SYS_ADMIN]\n",
            ),
            "spec.containers[0].securityContext: cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
        );
        // As the API: only that spelling, and privileged with escalation allowed is fine.
        for ok in [
            "    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities:\n        add: [SYS_ADMIN]\n",
            "    securityContext:\n      privileged: true\n      allowPrivilegeEscalation: true\n",
        ] {
            assert!(decode(&with_container_lines(ok)).is_ok(), "{ok}");
        }
    }

    #[test]
    fn container_field_checks() {
        assert_err(
            &GOOD.replace("    image: nginx\n", ""),
            "spec.containers[0].image: required value",
        );
        assert_err(
            &with_container_lines("    imagePullPolicy: Sometimes\n"),
            "spec.containers[0].imagePullPolicy: unsupported value \"Sometimes\"",
        );
        assert_err(
            &GOOD.replace("containerPort: 80", "containerPort: 70000"),
            "spec.containers[0].ports[0].containerPort: invalid value 70000",
        );
        assert_err(
            &GOOD.replace(
                "containerPort: 80",
                "containerPort: 80\n      protocol: HTTP",
            ),
            "spec.containers[0].ports[0].protocol: unsupported value \"HTTP\"",
        );
        assert_err(
            &with_container_lines("    env:\n    - name: 1BAD\n      value: x\n"),
            "spec.containers[0].env[0].name: invalid value \"1BAD\"",
        );
        assert!(
            decode(&with_container_lines(
                "    env:\n    - name: a.b-c_D9\n      value: x\n"
            ))
            .is_ok()
        );
        assert_err(
            &with_container_lines("    restartPolicy: Sometimes\n"),
            "spec.containers[0].restartPolicy: unsupported value \"Sometimes\"",
        );
    }

    #[test]
    fn a_pod_in_its_own_user_namespace_shares_no_host_namespace() {
        let with = |lines: &str| format!("{GOOD}  {lines}\n");
        assert!(decode(&with("hostUsers: false")).is_ok());
        assert_err(
            &with("hostUsers: false\n  hostPID: true"),
            "spec.hostPID: forbidden: when `pod.Spec.HostUsers` is false",
        );
        assert_err(
            &with("hostUsers: false\n  hostNetwork: true"),
            "spec.hostNetwork: forbidden",
        );
    }

    #[test]
    fn a_hostname_override_is_a_dns_subdomain_off_the_host_network() {
        let with = |lines: &str| format!("{GOOD}  {lines}\n");
        assert!(decode(&with("hostnameOverride: api.internal")).is_ok());
        assert_err(
            &with("hostnameOverride: Api_1"),
            "spec.hostnameOverride: invalid value",
        );
        let long = format!("hostnameOverride: {}", "a".repeat(65));
        assert_err(&with(&long), "spec.hostnameOverride: invalid value");
        assert_err(
            &with("hostnameOverride: api\n  hostNetwork: true"),
            "spec.hostnameOverride: forbidden: may not be set when hostNetwork is true",
        );
        assert_err(
            &with("hostnameOverride: api\n  setHostnameAsFQDN: true"),
            "spec.hostnameOverride: forbidden",
        );
    }

    #[test]
    fn a_file_key_ref_names_an_empty_dir_a_relative_path_and_a_key() {
        let with = |volume: &str, path: &str, key: &str| {
            format!(
                "{}  volumes:\n  - name: cfg\n    emptyDir: {{}}\n  - name: host\n    hostPath:\n      path: /tmp\n",
                with_container_lines(&format!(
                    "    env:\n    - name: V\n      valueFrom:\n        fileKeyRef:\n          volumeName: {volume:?}\n          path: {path:?}\n          key: {key:?}\n"
                ))
            )
        };
        assert!(decode(&with("cfg", "vars.env", "TOKEN")).is_ok());
        let f = "spec.containers[0].env[0].valueFrom.fileKeyRef";
        assert_err(
            &with("host", "vars.env", "K"),
            &format!("{f}.volumeName: invalid value \"host\": must reference an emptyDir"),
        );
        assert_err(
            &with("", "vars.env", "K"),
            &format!("{f}.volumeName: required value"),
        );
        assert_err(
            &with("cfg", "../x", "K"),
            &format!("{f}.path: invalid value \"../x\""),
        );
        assert_err(
            &with("cfg", "/etc/x", "K"),
            &format!("{f}.path: invalid value"),
        );
        assert_err(
            &with("cfg", "vars.env", "1K"),
            &format!("{f}.key: invalid value \"1K\""),
        );
    }

    #[test]
    fn containers_may_override_the_restart_policy_with_rules_beside_it() {
        for policy in ["Always", "OnFailure", "Never"] {
            let lines = format!("    restartPolicy: {policy}\n");
            assert!(decode(&with_container_lines(&lines)).is_ok(), "{policy}");
        }
        let rules = "    restartPolicyRules:\n    - action: Restart\n      exitCodes:\n        operator: In\n        values: [42]\n";
        assert!(
            decode(&with_container_lines(&format!(
                "    restartPolicy: Never\n{rules}"
            )))
            .is_ok()
        );
        assert_err(
            &with_container_lines(rules),
            "spec.containers[0].restartPolicy: required value",
        );
        let with = |rule: &str| {
            with_container_lines(&format!(
                "    restartPolicy: Never\n    restartPolicyRules:\n{rule}"
            ))
        };
        assert_err(
            &with(
                "    - action: RestartAllContainers\n      exitCodes:\n        operator: In\n        values: [1]\n",
            ),
            "spec.containers[0].restartPolicyRules[0].action: unsupported value \"RestartAllContainers\": supported values: \"Restart\"",
        );
        assert_err(
            &with("    - action: Restart\n"),
            "spec.containers[0].restartPolicyRules[0].exitCodes: required value",
        );
        assert_err(
            &with("    - action: Restart\n      exitCodes:\n        operator: Above\n"),
            "spec.containers[0].restartPolicyRules[0].exitCodes.operator: unsupported value \"Above\"",
        );
        let many = "    - action: Restart\n      exitCodes:\n        operator: In\n".repeat(21);
        assert_err(
            &with(&many),
            "spec.containers[0].restartPolicyRules: too many: 21: must have at most 20 items",
        );
        let codes = (0..256)
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        assert_err(
            &with(&format!(
                "    - action: Restart\n      exitCodes:\n        operator: NotIn\n        values: [{codes}]\n"
            )),
            "spec.containers[0].restartPolicyRules[0].exitCodes.values: too many: 256",
        );
    }

    #[test]
    fn resource_quantities_are_checked_exactly() {
        let res = |body: &str| with_container_lines(&format!("    resources:\n{body}"));
        assert_err(
            &res("      limits:\n        memory: 8Ei\n"),
            &format!(
                "spec.containers[0].resources.limits.memory: \"8Ei\" is too large: it must be at most {} bytes",
                i64::MAX
            ),
        );
        // Fits as millicores, but not as a CFS quota: the runtime's arithmetic says no.
        assert_err(
            &res("      limits:\n        cpu: 100T\n"),
            "spec.containers[0].resources.limits.cpu: 100000000000000000m is too large for a CFS quota",
        );
        assert_err(
            &res("      requests:\n        cpu: 10E\n"),
            "spec.containers[0].resources.requests.cpu: \"10E\" is too large",
        );
        assert_err(
            &res("      requests:\n        memory: lots\n"),
            "spec.containers[0].resources.requests.memory: \"lots\" is not a quantity",
        );
        assert_err(
            &res("      requests:\n        memory: -1Mi\n"),
            "spec.containers[0].resources.requests.memory: invalid value \"-1Mi\": must be greater than or equal to 0",
        );
        assert_err(
            &res("      requests:\n        cpu: \"2\"\n      limits:\n        cpu: 1500m\n"),
            "spec.containers[0].resources.requests.cpu: invalid value \"2\": must be less than or equal to cpu limit of 1500m",
        );
        // Init containers are checked too.
        let init = GOOD.replace(
            "  containers:\n",
            "  initContainers:\n  - name: i\n    image: busybox\n    resources:\n      limits:\n        memory: 9Ei\n  containers:\n",
        );
        assert_err(
            &init,
            "spec.initContainers[0].resources.limits.memory: \"9Ei\" is too large",
        );
        // Exact values that floats would get wrong are fine; equal request and limit too.
        assert!(decode(&res("      requests:\n        cpu: \"0.3\"\n      limits:\n        cpu: 300m\n        memory: 7Ei\n")).is_ok());
    }

    #[test]
    fn pod_field_checks() {
        assert_err(
            &format!("{GOOD}  restartPolicy: Sometimes\n"),
            "spec.restartPolicy: unsupported value \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
        );
        assert_err(
            &format!("{GOOD}  terminationGracePeriodSeconds: -1\n"),
            "spec.terminationGracePeriodSeconds: invalid value -1",
        );
    }

    #[test]
    fn probe_checks() {
        let probe = |extra: &str| {
            with_container_lines(&format!(
                "    livenessProbe:\n      tcpSocket:\n        port: 80\n{extra}"
            ))
        };
        assert!(decode(&probe("")).is_ok());
        assert_err(
            &probe("      periodSeconds: -5\n"),
            "spec.containers[0].livenessProbe.periodSeconds: invalid value -5",
        );
        assert_err(
            &probe("      successThreshold: 2\n"),
            "spec.containers[0].livenessProbe.successThreshold: invalid value 2: must be 1",
        );
        let readiness = with_container_lines(
            "    readinessProbe:\n      exec:\n        command: [/bin/true]\n      successThreshold: 2\n",
        );
        assert!(decode(&readiness).is_ok());
        assert_err(
            &with_container_lines("    startupProbe:\n      periodSeconds: 3\n"),
            "spec.containers[0].startupProbe: must specify a handler type",
        );
    }

    #[test]
    fn api_object_references_are_rejected() {
        let secret_volume =
            format!("{GOOD}  volumes:\n  - name: creds\n    secret:\n      secretName: s\n");
        assert_eq!(
            err(&secret_volume),
            format!(
                "{PATH}: spec.volumes[0].secret: forbidden: static pods may not reference API objects (Secret)"
            )
        );
        assert_err(
            &format!("{GOOD}  volumes:\n  - name: cfg\n    configMap:\n      name: c\n"),
            "spec.volumes[0].configMap: forbidden",
        );
        assert_err(
            &format!(
                "{GOOD}  volumes:\n  - name: d\n    persistentVolumeClaim:\n      claimName: c\n"
            ),
            "spec.volumes[0].persistentVolumeClaim: forbidden",
        );
        assert_err(
            &format!(
                "{GOOD}  volumes:\n  - name: t\n    projected:\n      sources:\n      - serviceAccountToken:\n          path: token\n"
            ),
            "spec.volumes[0].projected.sources[0].serviceAccountToken: forbidden",
        );
        assert_err(
            &with_container_lines(
                "    env:\n    - name: PW\n      valueFrom:\n        secretKeyRef:\n          name: s\n          key: k\n",
            ),
            "spec.containers[0].env[0].valueFrom.secretKeyRef: forbidden",
        );
        assert_err(
            &with_container_lines(
                "    env:\n    - name: C\n      valueFrom:\n        configMapKeyRef:\n          name: s\n          key: k\n",
            ),
            "spec.containers[0].env[0].valueFrom.configMapKeyRef: forbidden",
        );
        assert_err(
            &with_container_lines("    envFrom:\n    - secretRef:\n        name: s\n"),
            "spec.containers[0].envFrom[0].secretRef: forbidden",
        );
        assert_err(
            &with_container_lines("    envFrom:\n    - configMapRef:\n        name: s\n"),
            "spec.containers[0].envFrom[0].configMapRef: forbidden",
        );
    }

    #[test]
    fn volume_mounts_must_name_a_volume() {
        assert_err(
            &with_container_lines("    volumeMounts:\n    - name: data\n      mountPath: /data\n"),
            "spec.containers[0].volumeMounts[0].name: not found",
        );
        let ok = format!(
            "{}  volumes:\n  - name: data\n",
            with_container_lines("    volumeMounts:\n    - name: data\n      mountPath: /data\n")
        );
        let pod = decode(&ok).unwrap();
        let v = &pod.spec.unwrap().volumes.unwrap()[0];
        assert!(
            v.empty_dir.is_some(),
            "a volume without a source defaults to emptyDir"
        );
    }

    /// GOOD with every default it leaves out spelled out (API defaults, and Go zero
    /// values of plain fields): the same pod, so the same UID (kubelet hashes its Go
    /// object, where these cannot be told apart).
    #[test]
    fn unsafe_uids_are_rejected() {
        let with_uid = |uid: &str| GOOD.replace("name: web", &format!("name: web\n  uid: {uid:?}"));
        for bad in [
            "../../x",
            "/tmp/victim",
            "..",
            ".",
            "a/b",
            "x\u{0}y",
            "a\nb",
            " ",
            "a b",
            "a\tb",
        ] {
            assert_err(&with_uid(bad), "metadata.uid: invalid value");
        }
        assert_err(&with_uid(&"u".repeat(129)), "metadata.uid: invalid value");
        assert!(decode(&with_uid("0b0e2c8e-5b1a-4f6e-9d3e-2b1f0c9a7e11")).is_ok());
        assert!(
            decode(&with_uid("...")).is_ok(),
            "three dots is a plain name"
        );
        assert!(decode(&with_uid("")).is_ok(), "empty: derived");
    }

    #[test]
    fn host_path_volumes_are_validated_as_kubelet_does() {
        let host = |path: &str, type_: &str| {
            format!("{GOOD}  volumes:\n  - name: h\n    hostPath:\n      path: {path:?}\n{type_}")
        };
        assert!(decode(&host("/var/data", "")).is_ok());
        for t in HOST_PATH_TYPES.iter().filter(|t| !t.is_empty()) {
            assert!(
                decode(&host("/var/data", &format!("      type: {t}\n"))).is_ok(),
                "{t}"
            );
        }
        assert_err(
            &host("", ""),
            "spec.volumes[0].hostPath.path: required value",
        );
        assert_err(
            &host("/var/../etc", ""),
            "spec.volumes[0].hostPath.path: invalid value \"/var/../etc\": must not contain '..'",
        );
        assert_err(&host("..", ""), "must not contain '..'");
        assert_err(
            &host("/var/data", "      type: Dir\n"),
            "spec.volumes[0].hostPath.type: unsupported value \"Dir\"",
        );
        assert!(
            decode(&host("/var/a..b", "")).is_ok(),
            "'..' inside a name is fine"
        );
    }

    #[test]
    fn sub_paths_must_stay_inside_the_volume() {
        let mount = |extra: &str| {
            format!(
                "{}  volumes:\n  - name: data\n    emptyDir: {{}}\n",
                with_container_lines(&format!(
                    "    volumeMounts:\n    - name: data\n      mountPath: /data\n{extra}"
                ))
            )
        };
        assert!(decode(&mount("      subPath: a/b\n")).is_ok());
        assert!(decode(&mount("      subPath: ./a..b\n")).is_ok());
        assert_err(
            &mount("      subPath: /etc\n"),
            "spec.containers[0].volumeMounts[0].subPath: invalid value \"/etc\": must be a relative path",
        );
        for bad in ["..", "../x", "a/../../x", "a/.."] {
            assert_err(
                &mount(&format!("      subPath: {bad:?}\n")),
                "spec.containers[0].volumeMounts[0].subPath: invalid value",
            );
        }
        assert_err(
            &mount("      subPathExpr: ../$(POD)\n"),
            "volumeMounts[0].subPathExpr: invalid value \"../$(POD)\": must not contain '..'",
        );
        assert_err(
            &mount("      subPath: a\n      subPathExpr: b\n"),
            "subPathExpr and subPath are mutually exclusive",
        );
    }

    #[test]
    fn init_container_probes_need_sidecar_policy() {
        let base = GOOD.replace(
            "spec:\n",
            "spec:\n  initContainers:\n  - name: init\n    image: i\n    startupProbe:\n      exec:\n        command: [/bin/true]\n",
        );
        assert_err(&base, "spec.initContainers[0].startupProbe: forbidden");
        let sidecar = base.replace(
            "    image: i\n",
            "    image: i\n    restartPolicy: Always\n",
        );
        assert!(decode(&sidecar).is_ok());
    }
}

//! A pod's host name and its `/etc/hosts` (kubelet's `GeneratePodHostNameAndDomain`,
//! `makeHostsMount`, `ensureHostsFile`). oxlet writes the file to
//! `<root-dir>/pods/<uid>/etc-hosts` once the pod's IPs are known, and mounts it into
//! every container that does not mount `/etc/hosts` itself. Pod-network pods get
//! kubelet's managed file; host-network pods get the node's file; both end with
//! `hostAliases`, which are checked first since each lands on a line of its own.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, HostAlias, Pod};

use crate::pod::{HOSTS_FILE, is_dns1123_label, is_dns1123_subdomain};
use crate::safe_path::{self, PathError};

/// Where containers see the file.
pub(crate) const ETC_HOSTS: &str = "/etc/hosts";
/// The node's own file, which host-network pods get.
pub(crate) const NODE_HOSTS: &str = "/etc/hosts";
const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const HOST_NETWORK_HEADER: &str = "# Kubernetes-managed hosts file (host network).\n";
/// The longest node hosts file copied into a pod.
const MAX_NODE_HOSTS: u64 = 1 << 20;
/// The kernel's nodename holds 64 characters.
const MAX_FQDN: usize = 64;

/// Why a pod's host name or hosts file cannot be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostsError {
    #[error("{field}: {reason}")]
    Spec { field: String, reason: String },
    #[error("pod directory: {0}")]
    Path(#[from] PathError),
    #[error("cannot read the node's hosts file {path}: {source}")]
    NodeHosts {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the node's hosts file {0} is larger than 1 MiB")]
    NodeHostsTooLarge(PathBuf),
    #[error("cannot write the pod's hosts file {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn spec_error(field: impl Into<String>, reason: impl Into<String>) -> HostsError {
    HostsError::Spec {
        field: field.into(),
        reason: reason.into(),
    }
}

/// kubelet's `GeneratePodHostNameAndDomain`: `spec.hostnameOverride` when set
/// (HostnameOverride, beta and on by default since 1.35: a DNS subdomain, with no
/// domain), else `spec.hostname`, else the pod's name, cut to 63 characters without a
/// trailing `-` or `.`; the domain is `<subdomain>.<namespace>.svc.<clusterDomain>`
/// when `spec.subdomain` is set.
pub(crate) fn hostname_and_domain(
    pod: &Pod,
    cluster_domain: &str,
) -> Result<(String, String), HostsError> {
    let spec = pod.spec.as_ref();
    if let Some(h) = spec.and_then(|s| s.hostname_override.as_deref()) {
        if !is_dns1123_subdomain(h) {
            return Err(spec_error(
                "spec.hostnameOverride",
                format!("pod HostnameOverride {h:?} is not a valid DNS subdomain"),
            ));
        }
        return Ok((truncated_hostname(pod, h)?, String::new()));
    }
    let mut hostname = pod.metadata.name.as_deref().unwrap_or("");
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        if !is_dns1123_label(h) {
            return Err(spec_error(
                "spec.hostname",
                format!(
                    "{h:?} is not a valid DNS label (at most 63 lower-case letters, digits and '-')"
                ),
            ));
        }
        hostname = h;
    }
    let hostname = truncated_hostname(pod, hostname)?;
    let domain = match spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        None => String::new(),
        Some(sub) if !is_dns1123_label(sub) => {
            return Err(spec_error(
                "spec.subdomain",
                format!(
                    "{sub:?} is not a valid DNS label (at most 63 lower-case letters, digits and '-')"
                ),
            ));
        }
        Some(sub) => {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            format!("{sub}.{ns}.svc.{cluster_domain}")
        }
    };
    Ok((hostname, domain))
}

/// kubelet's `truncatePodHostnameIfNeeded`: at most 63 characters (the kernel's
/// limit), without a trailing `-` or `.`.
fn truncated_hostname(pod: &Pod, hostname: &str) -> Result<String, HostsError> {
    if hostname.len() <= 63 {
        return Ok(hostname.to_string());
    }
    // Pod names and DNS subdomains are ASCII, so byte 63 is a character boundary.
    let cut = hostname
        .get(..63)
        .unwrap_or(hostname)
        .trim_end_matches(['-', '.']);
    tracing::warn!(
        pod = %crate::pod::pod_ref(pod),
        podUID = crate::pod::pod_uid(pod),
        hostnameMaxLen = 63,
        truncatedHostname = cut,
        "Hostname for pod was too long, truncated it"
    );
    if cut.is_empty() {
        let name = pod.metadata.name.as_deref().unwrap_or("");
        return Err(spec_error(
            "metadata.name",
            format!("hostname for pod {name:?} was invalid: {hostname:?}"),
        ));
    }
    Ok(cut.to_string())
}

/// The sandbox's host name, which `hostname` prints inside (kubelet's
/// `GetNodenameForKernel`): the FQDN with `setHostnameAsFQDN` and a domain, else the
/// short name. Host-network pods keep the node's name (empty here).
pub(crate) fn sandbox_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, HostsError> {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.host_network).unwrap_or(false) {
        return Ok(String::new());
    }
    let (hostname, domain) = hostname_and_domain(pod, cluster_domain)?;
    if domain.is_empty() || !spec.and_then(|s| s.set_hostname_as_fqdn).unwrap_or(false) {
        return Ok(hostname);
    }
    let fqdn = format!("{hostname}.{domain}");
    if fqdn.len() > MAX_FQDN {
        return Err(spec_error(
            "spec.setHostnameAsFQDN",
            format!(
                "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({MAX_FQDN} characters is the max, {} characters requested)",
                fqdn.len()
            ),
        ));
    }
    Ok(fqdn)
}

/// The API server's `ValidateHostAliases`, which static pods never went through.
fn check_aliases(aliases: &[HostAlias]) -> Result<(), HostsError> {
    for (i, a) in aliases.iter().enumerate() {
        if a.ip.parse::<IpAddr>().is_err() {
            return Err(spec_error(
                format!("spec.hostAliases[{i}].ip"),
                format!("{:?} must be a valid IP address", a.ip),
            ));
        }
        for (j, h) in a.hostnames.iter().flatten().enumerate() {
            if !is_dns1123_subdomain(h) {
                return Err(spec_error(
                    format!("spec.hostAliases[{i}].hostnames[{j}]"),
                    format!(
                        "{h:?} must be a DNS subdomain (lower-case letters, digits, '-' and '.')"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// kubelet's `hostsEntriesFromHostAliases`: a blank line, a comment, then one line per
/// alias IP with its names separated by tabs.
fn alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        let names: Vec<&str> = a.hostnames.iter().flatten().map(String::as_str).collect();
        out.push_str(&format!("{}\t{}\n", a.ip, names.join("\t")));
    }
    out
}

/// kubelet's `managedHostsFileContent`.
pub(crate) fn managed_content(
    ips: &[String],
    hostname: &str,
    domain: &str,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from(MANAGED_HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in ips {
        if domain.is_empty() {
            out.push_str(&format!("{ip}\t{hostname}\n"));
        } else {
            out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
        }
    }
    out.push_str(&alias_entries(aliases));
    out
}

/// kubelet's `nodeHostsFileContent`: the node's file under its own header.
pub(crate) fn node_content(node_file: &Path, aliases: &[HostAlias]) -> Result<String, HostsError> {
    let io = |source| HostsError::NodeHosts {
        path: node_file.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(node_file)
        .map_err(io)?
        .take(MAX_NODE_HOSTS + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_NODE_HOSTS {
        return Err(HostsError::NodeHostsTooLarge(node_file.to_path_buf()));
    }
    Ok(format!(
        "{HOST_NETWORK_HEADER}{text}{}",
        alias_entries(aliases)
    ))
}

/// kubelet's rule: only once the pod has IPs, and not into a container that mounts
/// something at `/etc/hosts` itself.
pub(crate) fn should_mount(c: &Container, pod_ips: &[String]) -> bool {
    !pod_ips.is_empty()
        && !c
            .volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == ETC_HOSTS)
}

/// Writes `content` in place (truncating, as kubelet's `os.WriteFile`): a rename
/// would detach the file from containers that already mount it. `O_NOFOLLOW` keeps a
/// symlink in its place from redirecting the write.
fn write_in_place(path: &Path, content: &str) -> Result<(), HostsError> {
    let err = |source| HostsError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(err)?;
    f.write_all(content.as_bytes()).map_err(err)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(err)
}

/// kubelet's `makeHostsMount`: (re)writes the pod's hosts file and returns its mount,
/// or None when the container is not to get one.
pub(crate) fn hosts_mount(
    pod: &Pod,
    c: &Container,
    pods_dir: &Path,
    pod_ips: &[String],
    cluster_domain: &str,
    node_file: &Path,
) -> Result<Option<cri::Mount>, HostsError> {
    if !should_mount(c, pod_ips) {
        return Ok(None);
    }
    let spec = pod.spec.as_ref();
    let aliases = spec
        .and_then(|s| s.host_aliases.as_deref())
        .unwrap_or_default();
    check_aliases(aliases)?;
    let content = if spec.and_then(|s| s.host_network).unwrap_or(false) {
        node_content(node_file, aliases)?
    } else {
        let (hostname, domain) = hostname_and_domain(pod, cluster_domain)?;
        managed_content(pod_ips, &hostname, &domain, aliases)
    };
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let pod_dir = crate::pod::pod_dir(pods_dir, uid)?;
    std::fs::create_dir_all(&pod_dir).map_err(|source| HostsError::Write {
        path: pod_dir.clone(),
        source,
    })?;
    let path = safe_path::beneath(&pod_dir, &[HOSTS_FILE])?;
    write_in_place(&path, &content)?;
    Ok(Some(cri::Mount {
        container_path: ETC_HOSTS.to_string(),
        host_path: path.to_string_lossy().into_owned(),
        readonly: false,
        selinux_relabel: true,
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        let mut base = serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        });
        for (k, v) in json.as_object().unwrap() {
            base["spec"][k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn aliases() -> serde_json::Value {
        serde_json::json!([
            {"ip": "10.1.2.3", "hostnames": ["foo.local", "bar.local"]},
            {"ip": "10.1.2.4", "hostnames": ["baz.local"]},
        ])
    }

    #[test]
    fn the_managed_file_has_kubelets_layout() {
        let p = pod(serde_json::json!({"hostAliases": aliases()}));
        let (h, d) = hostname_and_domain(&p, "cluster.local").unwrap();
        assert_eq!((h.as_str(), d.as_str()), ("web", ""));
        let text = managed_content(
            &["10.88.0.5".into()],
            &h,
            &d,
            p.spec.unwrap().host_aliases.as_deref().unwrap(),
        );
        assert_eq!(
            text,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.88.0.5\tweb\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n10.1.2.4\tbaz.local\n"
        );
    }

    #[test]
    fn hostname_subdomain_and_fqdn_follow_kubelet() {
        let p = pod(serde_json::json!({"hostname": "db-0", "subdomain": "db"}));
        let (h, d) = hostname_and_domain(&p, "cluster.local").unwrap();
        assert_eq!(
            (h.as_str(), d.as_str()),
            ("db-0", "db.shop.svc.cluster.local")
        );
        let text = managed_content(&["10.88.0.5".into()], &h, &d, &[]);
        assert!(
            text.ends_with("10.88.0.5\tdb-0.db.shop.svc.cluster.local\tdb-0\n"),
            "{text}"
        );
        assert_eq!(sandbox_hostname(&p, "cluster.local").unwrap(), "db-0");
        let mut fqdn = p.clone();
        fqdn.spec.as_mut().unwrap().set_hostname_as_fqdn = Some(true);
        assert_eq!(
            sandbox_hostname(&fqdn, "cluster.local").unwrap(),
            "db-0.db.shop.svc.cluster.local"
        );
        let long = "x".repeat(40);
        let e = sandbox_hostname(&fqdn, &format!("{long}.example")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("spec.setHostnameAsFQDN: failed to construct FQDN"),
            "{e}"
        );
        // Long pod names are cut to 63 without a trailing '-' or '.'.
        let mut long = pod(serde_json::json!({}));
        long.metadata.name = Some(format!("{}-{}", "a".repeat(62), "b".repeat(10)));
        assert_eq!(sandbox_hostname(&long, "").unwrap(), "a".repeat(62));
        // Host-network pods keep the node's name.
        assert_eq!(
            sandbox_hostname(&pod(serde_json::json!({"hostNetwork": true})), "").unwrap(),
            ""
        );
        for (field, bad) in [("hostname", "Bad_Name"), ("subdomain", "a.b")] {
            let e = hostname_and_domain(&pod(serde_json::json!({field: bad})), "").unwrap_err();
            assert!(e.to_string().starts_with(&format!("spec.{field}:")), "{e}");
        }
    }

    #[test]
    fn a_hostname_override_wins_and_drops_the_domain() {
        let p = pod(serde_json::json!({
            "hostname": "db-0", "subdomain": "db", "hostnameOverride": "api.example.internal",
        }));
        let (h, d) = hostname_and_domain(&p, "cluster.local").unwrap();
        assert_eq!((h.as_str(), d.as_str()), ("api.example.internal", ""));
        assert_eq!(
            sandbox_hostname(&p, "cluster.local").unwrap(),
            "api.example.internal"
        );
        let text = managed_content(&["10.88.0.5".into()], &h, &d, &[]);
        assert!(
            text.ends_with("10.88.0.5\tapi.example.internal\n"),
            "{text}"
        );
        let long = pod(serde_json::json!({"hostnameOverride": format!("{}.b", "a".repeat(62))}));
        assert_eq!(sandbox_hostname(&long, "").unwrap(), "a".repeat(62));
        let e = hostname_and_domain(&pod(serde_json::json!({"hostnameOverride": "Not_DNS"})), "")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.hostnameOverride: pod HostnameOverride \"Not_DNS\" is not a valid DNS subdomain"
        );
    }

    #[test]
    fn the_file_is_written_under_the_pod_dir_and_mounted_unless_the_container_mounts_its_own() {
        let tmp = tempfile::tempdir().unwrap();
        let pods = tmp.path().join("pods");
        let p = pod(serde_json::json!({"hostAliases": aliases()}));
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let ips = vec!["10.88.0.5".to_string()];
        let m = hosts_mount(&p, &c, &pods, &ips, "cluster.local", Path::new(NODE_HOSTS))
            .unwrap()
            .unwrap();
        assert_eq!(m.container_path, "/etc/hosts");
        assert_eq!(Path::new(&m.host_path), pods.join("u1/etc-hosts"));
        let text = std::fs::read_to_string(&m.host_path).unwrap();
        assert!(text.contains("10.88.0.5\tweb\n"));
        let mode = std::fs::metadata(&m.host_path)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        // No IPs yet: no file, no mount.
        assert!(
            hosts_mount(&p, &c, &pods, &[], "", Path::new(NODE_HOSTS))
                .unwrap()
                .is_none()
        );
        // A container mounting /etc/hosts itself keeps its own.
        let mut own = c.clone();
        own.volume_mounts = Some(vec![
            serde_json::from_value(serde_json::json!({"name": "v", "mountPath": "/etc/hosts"}))
                .unwrap(),
        ]);
        assert!(!should_mount(&own, &ips));
        // A symlink planted in the file's place is not followed.
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::fs::remove_file(pods.join("u1/etc-hosts")).unwrap();
        std::os::unix::fs::symlink(&victim, pods.join("u1/etc-hosts")).unwrap();
        assert!(hosts_mount(&p, &c, &pods, &ips, "", Path::new(NODE_HOSTS)).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // An unsafe UID never names a directory.
        let mut evil = p.clone();
        evil.metadata.uid = Some("..".into());
        assert!(matches!(
            hosts_mount(&evil, &c, &pods, &ips, "", Path::new(NODE_HOSTS)),
            Err(HostsError::Path(_))
        ));
    }

    #[test]
    fn host_network_pods_get_the_nodes_file_and_their_aliases() {
        let tmp = tempfile::tempdir().unwrap();
        let node = tmp.path().join("hosts");
        std::fs::write(&node, "127.0.0.1 localhost\n10.0.0.1 node1\n").unwrap();
        let p = pod(serde_json::json!({"hostNetwork": true, "hostAliases": aliases()}));
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let m = hosts_mount(
            &p,
            &c,
            &tmp.path().join("pods"),
            &["10.0.0.1".into()],
            "",
            &node,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&m.host_path).unwrap(),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n10.0.0.1 node1\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n10.1.2.4\tbaz.local\n"
        );
    }

    #[test]
    fn bad_host_aliases_are_refused_naming_the_field() {
        let tmp = tempfile::tempdir().unwrap();
        for (aliases, field) in [
            (
                serde_json::json!([{"ip": "nope", "hostnames": ["a"]}]),
                "spec.hostAliases[0].ip:",
            ),
            (
                serde_json::json!([{"ip": "1.2.3.4", "hostnames": ["ok", "evil\n6.6.6.6 bank"]}]),
                "spec.hostAliases[0].hostnames[1]:",
            ),
        ] {
            let p = pod(serde_json::json!({"hostAliases": aliases}));
            let c = p.spec.as_ref().unwrap().containers[0].clone();
            let e = hosts_mount(
                &p,
                &c,
                tmp.path(),
                &["10.0.0.9".into()],
                "",
                Path::new(NODE_HOSTS),
            )
            .unwrap_err();
            assert!(e.to_string().starts_with(field), "{e}");
        }
    }
}

//! The sysctl admission check (kubelet's `patternAllowlist.Admit`): a pod asking for
//! a sysctl outside the node's allowlist, or for a namespaced one in a namespace it
//! shares with the host, is rejected with `SysctlForbidden` before anything runs.

use crate::contracts::{PodAdmitAttributes, PodAdmitHandler, Rejection};
use crate::podenv::Allowlist;

/// kubelet's `sysctl.ForbiddenReason`.
pub(crate) const SYSCTL_FORBIDDEN: &str = "SysctlForbidden";

/// Admits pods whose sysctls are all allowed on this node.
#[derive(Debug, Clone)]
pub(crate) struct SysctlAdmission {
    pub allowlist: Allowlist,
}

impl SysctlAdmission {
    /// The safe sysctls of the running kernel plus `allowedUnsafeSysctls`. The
    /// patterns were checked when the options were read; should one still be
    /// refused, it is left out (and said so) rather than stopping the agent.
    pub(crate) fn for_node(unsafe_allowed: &[String]) -> SysctlAdmission {
        let release = crate::podenv::kernel_release();
        let allowlist = Allowlist::node(release.as_deref(), unsafe_allowed).unwrap_or_else(|e| {
            tracing::error!(error = %e, "allowedUnsafeSysctls refused; only the safe sysctls are allowed");
            Allowlist::node::<&str>(release.as_deref(), &[]).unwrap_or_default()
        });
        SysctlAdmission { allowlist }
    }
}

impl PodAdmitHandler for SysctlAdmission {
    fn name(&self) -> &'static str {
        "sysctl"
    }

    fn admit(&self, attrs: &PodAdmitAttributes<'_>) -> Result<(), Rejection> {
        let Some(spec) = attrs.pod.spec.as_ref() else {
            return Ok(());
        };
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|sc| sc.sysctls.as_deref())
            .unwrap_or_default();
        let host_net = spec.host_network.unwrap_or(false);
        let host_ipc = spec.host_ipc.unwrap_or(false);
        for s in sysctls {
            if let Err(e) = self.allowlist.check(&s.name, host_net, host_ipc) {
                return Err(Rejection {
                    reason: SYSCTL_FORBIDDEN.to_string(),
                    message: format!("forbidden sysctl: {e}"),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(sysctls: &[&str], host_network: bool) -> Pod {
        let list: Vec<_> = sysctls
            .iter()
            .map(|n| serde_json::json!({"name": n, "value": "1"}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {
                "hostNetwork": host_network,
                "securityContext": {"sysctls": list},
                "containers": [{"name": "c", "image": "i"}],
            },
        }))
        .unwrap()
    }

    fn admit(h: &SysctlAdmission, p: &Pod) -> Result<(), Rejection> {
        h.admit(&PodAdmitAttributes {
            pod: p,
            other_pods: &[],
        })
    }

    #[test]
    fn forbidden_sysctls_reject_the_pod_with_kubelets_reason_and_message() {
        let h = SysctlAdmission {
            allowlist: Allowlist::node(Some("6.1.0"), &["kernel.msg*"]).unwrap(),
        };
        assert_eq!(admit(&h, &pod(&[], false)), Ok(()));
        assert_eq!(
            admit(
                &h,
                &pod(&["kernel.shm_rmid_forced", "kernel.msgmax"], false)
            ),
            Ok(())
        );
        assert_eq!(
            admit(
                &h,
                &pod(&["kernel.shm_rmid_forced", "net.core.somaxconn"], false)
            ),
            Err(Rejection {
                reason: "SysctlForbidden".into(),
                message: "forbidden sysctl: \"net.core.somaxconn\" not allowlisted".into(),
            })
        );
        assert_eq!(
            admit(&h, &pod(&["net.ipv4.ip_unprivileged_port_start"], true))
                .unwrap_err()
                .message,
            "forbidden sysctl: \"net.ipv4.ip_unprivileged_port_start\" not allowed with host net enabled"
        );
    }
}

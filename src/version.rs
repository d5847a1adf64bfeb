//! The versions oxlet says it is, from this one place: its own (the crate's), and the
//! Kubernetes release whose kubelet it follows. The Node's `kubeletVersion`, the
//! probes' `User-Agent` and `--version` read them. The Kubernetes one is the minor
//! oxlet is checked against (kind v0.32 nodes run 1.36), with patch 0, so a cluster
//! of any 1.36 patch sees a kubelet no newer than its apiserver, as the version skew
//! policy requires.

/// `<major>.<minor>` of the Kubernetes release followed (one literal, so the other
/// constants can be made from it at compile time).
macro_rules! kubernetes_minor {
    () => {
        "1.36"
    };
}

/// The Kubernetes release followed, as the Node's `kubeletVersion` says it.
pub(crate) const KUBERNETES: &str = concat!("v", kubernetes_minor!(), ".0");

/// kubelet's HTTP probe `User-Agent`: `kube-probe/<major>.<minor>`.
pub(crate) const PROBE_USER_AGENT: &str = concat!("kube-probe/", kubernetes_minor!());

/// oxlet's own version.
pub(crate) const OXLET: &str = env!("CARGO_PKG_VERSION");

/// What `--version` prints: oxlet's version, then the Kubernetes one as kubelet
/// prints its own (`Kubernetes v1.36.0`).
pub(crate) const VERSION_TEXT: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nKubernetes v",
    kubernetes_minor!(),
    ".0"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_release_everywhere() {
        assert_eq!(KUBERNETES, "v1.36.0");
        assert_eq!(PROBE_USER_AGENT, "kube-probe/1.36");
        assert!(VERSION_TEXT.ends_with(&format!("\nKubernetes {KUBERNETES}")));
        assert!(VERSION_TEXT.starts_with(OXLET));
    }
}

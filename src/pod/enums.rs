//! Phases, reasons and policies as enums, each spelled as kubelet spells it in one
//! place (`as_str`), so no other file writes these strings. k8s-openapi's types hold
//! `String`s: convert with `as_str`/`Display` where a status object is built and with
//! `FromStr` where one is read.

use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};

/// A string that names no variant of the enum it was parsed as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub(crate) struct UnknownValue {
    /// What was parsed, e.g. "pod phase".
    pub kind: &'static str,
    pub value: String,
}

/// Declares an enum whose variants each have one API string, with `ALL`, `as_str`,
/// `Display` and `FromStr`.
macro_rules! api_strings {
    ($(#[$meta:meta])* $name:ident ($kind:literal) {
        $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            #[cfg(test)]
            pub(crate) const ALL: &'static [$name] = &[$($name::$variant,)+];
            /// Every variant's API string, in declaration order.
            #[allow(dead_code, reason = "made for every enum; validation messages list some")]
            pub(crate) const NAMES: &'static [&'static str] = &[$($text,)+];

            /// The string the Kubernetes API uses.
            pub(crate) const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, UnknownValue> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownValue { kind: $kind, value: s.to_string() }),
                }
            }
        }
    };
}

api_strings! {
    /// `status.phase` (kubelet's `v1.PodPhase`).
    Phase ("pod phase") {
        Pending = "Pending",
        Running = "Running",
        Succeeded = "Succeeded",
        Failed = "Failed",
        Unknown = "Unknown",
    }
}

impl Phase {
    /// Succeeded and Failed are never left again.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    /// The phase a status string names; a missing or unknown one reads as Pending
    /// (a pod nobody has reported on yet).
    pub(crate) fn parse_or_pending(s: Option<&str>) -> Phase {
        s.and_then(|s| s.parse().ok()).unwrap_or(Phase::Pending)
    }
}

api_strings! {
    /// `spec.restartPolicy`, and a sidecar init container's `restartPolicy`.
    RestartPolicy ("restart policy") {
        Always = "Always",
        OnFailure = "OnFailure",
        Never = "Never",
    }
}

impl RestartPolicy {
    /// The pod's restart policy; the API default (Always) when unset. Validation
    /// refuses any other string, so none reaches here from a manifest.
    pub(crate) fn of(pod: &Pod) -> RestartPolicy {
        pod.spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .and_then(|p| p.parse().ok())
            .unwrap_or(RestartPolicy::Always)
    }

    /// A container's own restart policy: a sidecar init container's Always, or any
    /// container's override of the pod's (ContainerRestartRules).
    pub(crate) fn of_container(c: &Container) -> Option<RestartPolicy> {
        c.restart_policy.as_deref().and_then(|p| p.parse().ok())
    }
}

api_strings! {
    /// A container's `imagePullPolicy`.
    ImagePullPolicy ("image pull policy") {
        Always = "Always",
        IfNotPresent = "IfNotPresent",
        Never = "Never",
    }
}

impl ImagePullPolicy {
    /// The container's pull policy; IfNotPresent when unset (defaulting always sets it).
    pub(crate) fn of(c: &Container) -> ImagePullPolicy {
        c.image_pull_policy
            .as_deref()
            .and_then(|p| p.parse().ok())
            .unwrap_or(ImagePullPolicy::IfNotPresent)
    }
}

api_strings! {
    /// Why a container waits (`state.waiting.reason`), kubelet's names.
    WaitingReason ("waiting reason") {
        /// Default for a pod without init containers.
        ContainerCreating = "ContainerCreating",
        /// Default for a pod with init containers.
        PodInitializing = "PodInitializing",
        CrashLoopBackOff = "CrashLoopBackOff",
        ErrImagePull = "ErrImagePull",
        ImagePullBackOff = "ImagePullBackOff",
        ErrImageNeverPull = "ErrImageNeverPull",
        InvalidImageName = "InvalidImageName",
        ImageInspectError = "ImageInspectError",
        CreateContainerError = "CreateContainerError",
        CreateContainerConfigError = "CreateContainerConfigError",
        RunContainerError = "RunContainerError",
        /// A pre-start step (e.g. CPU/memory manager) refused the container.
        PreStartHookError = "PreStartHookError",
        /// The postStart hook failed; the container was killed.
        PostStartHookError = "PostStartHookError",
    }
}

impl WaitingReason {
    /// Reasons that do not fix themselves without a change to the pod or the node
    /// (what `--runonce` counts as a failure).
    pub(crate) fn is_stuck(self) -> bool {
        !matches!(
            self,
            WaitingReason::ContainerCreating
                | WaitingReason::PodInitializing
                | WaitingReason::ImageInspectError
        )
    }
}

api_strings! {
    /// Why a container ended (`state.terminated.reason`) when oxlet names it; the
    /// runtime may report others, which are passed through as they are.
    TerminatedReason ("terminated reason") {
        Completed = "Completed",
        Error = "Error",
        OomKilled = "OOMKilled",
        /// The runtime could not run the process (containerd's reason when the
        /// task failed to start, e.g. the executable is missing).
        ContainerCannotRun = "ContainerCannotRun",
        /// The runtime's reason for a container whose start failed (containerd 1.7+).
        StartError = "StartError",
        /// kubelet's reason for a container that vanished from the runtime.
        ContainerStatusUnknown = "ContainerStatusUnknown",
    }
}

impl TerminatedReason {
    /// kubelet's reason for an exit the runtime gave no reason for.
    pub(crate) fn of_exit(exit_code: i32) -> TerminatedReason {
        if exit_code == 0 {
            TerminatedReason::Completed
        } else {
            TerminatedReason::Error
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant's string parses back to it, `Display` agrees with `as_str`,
    /// `NAMES` lists the same strings, and the strings are distinct.
    fn round_trip<T>(all: &[T], names: &[&str], as_str: fn(T) -> &'static str)
    where
        T: Copy + PartialEq + fmt::Debug + fmt::Display + FromStr<Err = UnknownValue>,
    {
        assert_eq!(all.len(), names.len());
        for (v, name) in all.iter().zip(names) {
            assert_eq!(as_str(*v), *name);
            assert_eq!(v.to_string(), *name);
            assert_eq!(name.parse::<T>(), Ok(*v));
        }
        let mut sorted = names.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "duplicate strings in {names:?}");
        let err = "nope".parse::<T>().unwrap_err();
        assert_eq!(err.value, "nope");
        assert!(err.to_string().contains("\"nope\""), "{err}");
        // The API strings are case-sensitive, as in kubelet.
        assert!(names[0].to_lowercase().parse::<T>().is_err());
    }

    #[test]
    fn every_variant_round_trips() {
        round_trip(Phase::ALL, Phase::NAMES, Phase::as_str);
        round_trip(
            RestartPolicy::ALL,
            RestartPolicy::NAMES,
            RestartPolicy::as_str,
        );
        round_trip(
            ImagePullPolicy::ALL,
            ImagePullPolicy::NAMES,
            ImagePullPolicy::as_str,
        );
        round_trip(
            WaitingReason::ALL,
            WaitingReason::NAMES,
            WaitingReason::as_str,
        );
        round_trip(
            TerminatedReason::ALL,
            TerminatedReason::NAMES,
            TerminatedReason::as_str,
        );
    }

    #[test]
    fn kubelet_spellings() {
        assert_eq!(Phase::Succeeded.as_str(), "Succeeded");
        assert_eq!(TerminatedReason::OomKilled.as_str(), "OOMKilled");
        assert_eq!(RestartPolicy::OnFailure.as_str(), "OnFailure");
        assert_eq!(ImagePullPolicy::IfNotPresent.as_str(), "IfNotPresent");
        assert_eq!(WaitingReason::CrashLoopBackOff.as_str(), "CrashLoopBackOff");
        assert_eq!(
            WaitingReason::CreateContainerConfigError.as_str(),
            "CreateContainerConfigError"
        );
    }

    #[test]
    fn terminal_phases() {
        let terminal: Vec<Phase> = Phase::ALL
            .iter()
            .copied()
            .filter(|p| p.is_terminal())
            .collect();
        assert_eq!(terminal, [Phase::Succeeded, Phase::Failed]);
        assert_eq!(Phase::parse_or_pending(None), Phase::Pending);
        assert_eq!(Phase::parse_or_pending(Some("bogus")), Phase::Pending);
        assert_eq!(Phase::parse_or_pending(Some("Failed")), Phase::Failed);
    }

    #[test]
    fn restart_policy_defaults_to_always() {
        let mut pod = Pod::default();
        assert_eq!(RestartPolicy::of(&pod), RestartPolicy::Always);
        pod.spec = Some(Default::default());
        assert_eq!(RestartPolicy::of(&pod), RestartPolicy::Always);
        pod.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        assert_eq!(RestartPolicy::of(&pod), RestartPolicy::Never);
        let mut c = Container::default();
        assert_eq!(RestartPolicy::of_container(&c), None);
        c.restart_policy = Some("Always".into());
        assert_eq!(RestartPolicy::of_container(&c), Some(RestartPolicy::Always));
        assert_eq!(ImagePullPolicy::of(&c), ImagePullPolicy::IfNotPresent);
        c.image_pull_policy = Some("Never".into());
        assert_eq!(ImagePullPolicy::of(&c), ImagePullPolicy::Never);
    }

    #[test]
    fn exit_reasons_and_stuck_waits() {
        assert_eq!(TerminatedReason::of_exit(0), TerminatedReason::Completed);
        assert_eq!(TerminatedReason::of_exit(1), TerminatedReason::Error);
        assert_eq!(TerminatedReason::of_exit(137), TerminatedReason::Error);
        assert!(WaitingReason::CrashLoopBackOff.is_stuck());
        assert!(WaitingReason::ErrImagePull.is_stuck());
        assert!(!WaitingReason::ContainerCreating.is_stuck());
        assert!(!WaitingReason::PodInitializing.is_stuck());
    }
}

/// The three probe types (kubelet's `probeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    pub(crate) const ALL: [ProbeKind; 3] = [
        ProbeKind::Liveness,
        ProbeKind::Readiness,
        ProbeKind::Startup,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }

    /// The container's probe of this type.
    pub(crate) fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            ProbeKind::Liveness => c.liveness_probe.as_ref(),
            ProbeKind::Readiness => c.readiness_probe.as_ref(),
            ProbeKind::Startup => c.startup_probe.as_ref(),
        }
    }
}

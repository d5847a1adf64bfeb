//! The policies and the static policy's options (kubelet's `policy_options.go`).
//! In 1.36 `full-pcpus-only` is GA; `strict-cpu-reservation`,
//! `distribute-cpus-across-numa` and `prefer-align-cpus-by-uncorecache` are beta, on
//! through `CPUManagerPolicyBetaOptions` (on by default); `align-by-socket` and
//! `distribute-cpus-across-cores` are alpha, refused as kubelet refuses them with its
//! alpha gate off.

use std::collections::BTreeMap;

use super::CpuManagerError;

/// `cpuManagerPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum CpuManagerPolicy {
    /// Pins nothing: every container may run on every CPU.
    #[default]
    None,
    /// Exclusive CPUs for Guaranteed containers with whole-CPU requests.
    Static,
}

impl CpuManagerPolicy {
    /// The configuration's spelling, as kubelet refuses an unknown one.
    pub(crate) fn parse(name: &str) -> Result<Self, CpuManagerError> {
        match name {
            "none" | "" => Ok(Self::None),
            "static" => Ok(Self::Static),
            other => Err(CpuManagerError::Options(format!(
                "unknown policy: {other:?}"
            ))),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Static => "static",
        }
    }
}

pub(super) const FULL_PCPUS_ONLY: &str = "full-pcpus-only";
const DISTRIBUTE_ACROSS_NUMA: &str = "distribute-cpus-across-numa";
const STRICT_CPU_RESERVATION: &str = "strict-cpu-reservation";
const PREFER_UNCORE_CACHE: &str = "prefer-align-cpus-by-uncorecache";
const ALPHA: [&str; 2] = ["align-by-socket", "distribute-cpus-across-cores"];

/// The static policy's options, parsed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct StaticOptions {
    /// Whole physical cores only; refuse requests that are not a multiple of them.
    pub full_pcpus_only: bool,
    /// Spread a request over NUMA nodes evenly when it needs more than one.
    pub distribute_across_numa: bool,
    /// Keep the reserved CPUs out of the shared pool too.
    pub strict_cpu_reservation: bool,
    /// Best effort to keep a request within one L3 (uncore) cache.
    pub prefer_uncore_cache: bool,
}

/// Go's `strconv.ParseBool`.
fn parse_bool(name: &str, value: &str) -> Result<bool, CpuManagerError> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(CpuManagerError::Options(format!(
            "bad value for option {name:?}: strconv.ParseBool: parsing {value:?}: invalid syntax"
        ))),
    }
}

impl StaticOptions {
    /// kubelet's `NewStaticPolicyOptions` with the beta options on and the alpha off.
    pub(super) fn parse(options: &BTreeMap<String, String>) -> Result<Self, CpuManagerError> {
        let mut out = Self::default();
        for (name, value) in options {
            let flag = match name.as_str() {
                FULL_PCPUS_ONLY => &mut out.full_pcpus_only,
                DISTRIBUTE_ACROSS_NUMA => &mut out.distribute_across_numa,
                STRICT_CPU_RESERVATION => &mut out.strict_cpu_reservation,
                PREFER_UNCORE_CACHE => &mut out.prefer_uncore_cache,
                n if ALPHA.contains(&n) => {
                    return Err(CpuManagerError::Options(format!(
                        "CPU Manager Policy Alpha-level Options not enabled, but option {n:?} provided"
                    )));
                }
                n => {
                    return Err(CpuManagerError::Options(format!(
                        "unknown CPU Manager Policy option: {n:?}"
                    )));
                }
            };
            *flag = parse_bool(name, value)?;
        }
        if out.prefer_uncore_cache && out.distribute_across_numa {
            return Err(CpuManagerError::Options(format!(
                "static policy options {PREFER_UNCORE_CACHE} and {DISTRIBUTE_ACROSS_NUMA} can not be used at the same time"
            )));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Result<StaticOptions, CpuManagerError> {
        let m = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StaticOptions::parse(&m)
    }

    #[test]
    fn ga_and_beta_options_are_taken_alpha_and_unknown_refused() {
        let o = opts(&[
            ("full-pcpus-only", "true"),
            ("strict-cpu-reservation", "True"),
            ("distribute-cpus-across-numa", "1"),
        ])
        .unwrap();
        assert!(o.full_pcpus_only && o.strict_cpu_reservation && o.distribute_across_numa);
        assert!(
            opts(&[("prefer-align-cpus-by-uncorecache", "true")])
                .unwrap()
                .prefer_uncore_cache
        );
        assert_eq!(
            opts(&[("align-by-socket", "true")])
                .unwrap_err()
                .to_string(),
            r#"CPU Manager Policy Alpha-level Options not enabled, but option "align-by-socket" provided"#
        );
        assert_eq!(
            opts(&[("made-up", "true")]).unwrap_err().to_string(),
            r#"unknown CPU Manager Policy option: "made-up""#
        );
        assert_eq!(
            opts(&[("full-pcpus-only", "yes")]).unwrap_err().to_string(),
            r#"bad value for option "full-pcpus-only": strconv.ParseBool: parsing "yes": invalid syntax"#
        );
        assert!(
            opts(&[
                ("prefer-align-cpus-by-uncorecache", "true"),
                ("distribute-cpus-across-numa", "true")
            ])
            .unwrap_err()
            .to_string()
            .contains("can not be used at the same time")
        );
        assert_eq!(
            CpuManagerPolicy::parse("dynamic").unwrap_err().to_string(),
            r#"unknown policy: "dynamic""#
        );
    }
}

//! The pod's environment as the runtime is asked to build it (kubelet's DNS
//! configurer, hosts file, sysctls, security contexts and the environment
//! variables of `env`, `envFrom` and the downward API): what goes into a sandbox
//! and a container config besides the runtime's own bookkeeping.

mod dns;
mod downward;
mod expansion;
mod hosts;
mod object_env;
mod security;
mod sysctl;

pub(crate) use dns::{DnsConfigurer, DnsError};
pub(crate) use downward::{
    DownwardError, PodEnv, env_field, find_container, metadata_field, resource_value,
};
pub(crate) use expansion::{MAX_EXPANDED_LEN, MAX_EXPANDED_TOTAL, TooLong, expand};
pub(crate) use hosts::{HostsError, NODE_HOSTS, hosts_mount, sandbox_hostname};
pub(crate) use object_env::{ObjectEnvError, config_map_key, env_from, secret_key};
pub(crate) use security::{
    ImageUser, SecurityError, SecuritySettings, container_security_context,
    sandbox_security_context, set_volume_ownership,
};
pub(crate) use sysctl::{Allowlist, kernel_release, normalize_name};

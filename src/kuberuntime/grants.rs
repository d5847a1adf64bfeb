//! The resource managers' grants written into a container's CRI config, as kubelet's
//! `generateContainerConfig` (devices, mounts, env, annotations and CDI devices from
//! `GetResources`) and `PreCreateContainer` (the cpuset) do.

use k8s_cri::v1 as cri;

use crate::contracts::ContainerGrants;

/// Adds `grants` to `config`: an env variable the container already sets keeps the
/// container's value only if the grant does not name it (kubelet appends the device
/// plugin's env after the container's, and the runtime's last value wins).
pub(super) fn apply(config: &mut cri::ContainerConfig, grants: ContainerGrants) {
    if grants.is_empty() {
        return;
    }
    let ContainerGrants {
        cpuset_cpus,
        cpuset_mems,
        devices,
        mounts,
        envs,
        annotations,
        cdi_devices,
    } = grants;
    config
        .devices
        .extend(devices.into_iter().map(|d| cri::Device {
            container_path: d.container_path,
            host_path: d.host_path,
            permissions: d.permissions,
        }));
    config.mounts.extend(mounts.into_iter().map(|m| cri::Mount {
        container_path: m.container_path,
        host_path: m.host_path,
        readonly: m.read_only,
        ..Default::default()
    }));
    config.envs.extend(
        envs.into_iter()
            .map(|(key, value)| cri::KeyValue { key, value }),
    );
    config.annotations.extend(annotations);
    config
        .cdi_devices
        .extend(cdi_devices.into_iter().map(|name| cri::CdiDevice { name }));
    let resources = (config.linux.get_or_insert_with(Default::default))
        .resources
        .get_or_insert_with(Default::default);
    if let Some(cpus) = cpuset_cpus {
        resources.cpuset_cpus = cpus;
    }
    if let Some(mems) = cpuset_mems {
        resources.cpuset_mems = mems;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contracts::{DeviceGrant, MountGrant};

    #[test]
    fn grants_land_in_the_containers_config_and_nothing_else_changes() {
        let mut config = cri::ContainerConfig {
            envs: vec![cri::KeyValue {
                key: "A".into(),
                value: "1".into(),
            }],
            ..Default::default()
        };
        apply(&mut config, ContainerGrants::default());
        assert_eq!(config.linux, None, "no grants: nothing added");

        apply(
            &mut config,
            ContainerGrants {
                cpuset_cpus: Some("1".into()),
                cpuset_mems: Some("0".into()),
                devices: vec![DeviceGrant {
                    container_path: "/dev/w0".into(),
                    host_path: "/dev/null".into(),
                    permissions: "rw".into(),
                }],
                mounts: vec![MountGrant {
                    container_path: "/widgets/w0".into(),
                    host_path: "/tmp/w0".into(),
                    read_only: true,
                }],
                envs: vec![("WIDGETS".into(), "w0".into())],
                annotations: vec![("example.com/w".into(), "w0".into())],
                cdi_devices: vec!["example.com/widget=w0".into()],
            },
        );
        let r = config.linux.as_ref().unwrap().resources.as_ref().unwrap();
        assert_eq!((r.cpuset_cpus.as_str(), r.cpuset_mems.as_str()), ("1", "0"));
        assert_eq!(config.devices[0].container_path, "/dev/w0");
        assert!(config.mounts[0].readonly);
        assert_eq!(config.envs.len(), 2);
        assert_eq!(config.annotations["example.com/w"], "w0");
        assert_eq!(config.cdi_devices[0].name, "example.com/widget=w0");
    }
}

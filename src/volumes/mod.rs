//! The pod's volumes (kubelet's volume manager and its in-tree plugins, for what a
//! node without a CSI driver has): emptyDir (disk and memory), hostPath, the
//! downward API, Secrets, ConfigMaps, projected service account tokens, subPath,
//! written through the atomic writer; mounted into containers and torn down; and the
//! env files (`fileKeyRef`) containers leave in an emptyDir.

mod atomic_writer;
mod data_dirs;
mod env_file;
mod object_volumes;
mod pod_volumes;

// The node's and each pod's data directories, with kubelet's modes.
pub(crate) use data_dirs::{DataDirError, make_data_dirs, make_pod_data_dirs};
// `fileKeyRef`: a variable's value from an env file in one of the pod's emptyDirs.
pub(crate) use env_file::{EnvFileError, file_key_value};
pub(crate) use object_volumes::{
    refresh as refresh_object_volumes, set_up as set_up_object_volumes,
};
pub(crate) use pod_volumes::{
    MountFeatures, container_mounts, refresh_downward_volumes, resolve_recursive_read_only,
    tear_down_pod_volumes, unmount_pod_volumes,
};

//! The pod's volumes (kubelet's volume manager and its in-tree plugins, for what a
//! node without a CSI driver has): emptyDir (disk and memory), hostPath, the
//! downward API, Secrets, ConfigMaps, projected service account tokens, subPath,
//! written through the atomic writer; mounted into containers and torn down.

mod atomic_writer;
mod data_dirs;
mod object_volumes;
mod pod_volumes;

// The node's and each pod's data directories, with kubelet's modes.
pub(crate) use data_dirs::{DataDirError, make_data_dirs, make_pod_data_dirs};
pub(crate) use object_volumes::{
    refresh as refresh_object_volumes, set_up as set_up_object_volumes,
};
pub(crate) use pod_volumes::{
    container_mounts, refresh_downward_volumes, tear_down_pod_volumes, unmount_pod_volumes,
};

//! The pod's volumes (kubelet's volume manager and its in-tree plugins, for what a
//! node without a CSI driver has): emptyDir (disk and memory), hostPath, the
//! downward API, Secrets, ConfigMaps, projected service account tokens, subPath,
//! written through the atomic writer; mounted into containers and torn down.

mod atomic_writer;
mod object_volumes;
mod pod_volumes;

pub(crate) use object_volumes::{
    refresh as refresh_object_volumes, set_up as set_up_object_volumes,
};
pub(crate) use pod_volumes::{
    container_mounts, refresh_downward_volumes, tear_down_pod_volumes, unmount_pod_volumes,
};

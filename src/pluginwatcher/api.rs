//! The plugin registration API, v1 (`k8s.io/kubelet/pkg/apis/pluginregistration/v1`,
//! proto package `pluginregistration`), written by hand: the plugin serves it, the
//! watcher calls it. Field numbers and types follow the `.proto`.

pub(super) const GET_INFO: &str = "/pluginregistration.Registration/GetInfo";
pub(super) const NOTIFY: &str = "/pluginregistration.Registration/NotifyRegistrationStatus";

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct PluginInfo {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub endpoint: String,
    #[prost(string, repeated, tag = "4")]
    pub supported_versions: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RegistrationStatus {
    #[prost(bool, tag = "1")]
    pub plugin_registered: bool,
    #[prost(string, tag = "2")]
    pub error: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RegistrationStatusResponse {}

#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct InfoRequest {}

//! The registered plugins of DRA drivers (kubelet's `DRAPluginManager`): the plugin
//! watcher's `ValidatePlugin`/`RegisterPlugin`/`DeRegisterPlugin` for type `DRAPlugin`,
//! the version choice, and the wiping of a driver's ResourceSlices when no plugin of it
//! has been registered for [`WIPING_DELAY`] (and of all of them at start, before any
//! driver is back), so pods are not scheduled to a node whose driver is gone.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{debug, error, info};

use super::client::{PluginClient, Service};
use super::{ClaimSource, DraError};
use crate::locks::Locked as _;
use crate::tasks::Tasks;

/// kubelet's `defaultWipingDelay`: how long a driver has to come back before its
/// ResourceSlices are deleted.
pub(super) const WIPING_DELAY: Duration = Duration::from_secs(30);
/// The services kubelet speaks, newest first.
const SUPPORTED: [Service; 2] = [Service::V1, Service::V1Beta1];

pub(super) struct Plugins {
    node_name: String,
    api: Arc<dyn ClaimSource>,
    wiping_delay: Duration,
    /// Driver name → its plugins in registration order (the newest is used).
    store: Mutex<HashMap<String, Vec<PluginClient>>>,
    /// Driver name → the pending wipe of its slices.
    wipes: Arc<Mutex<HashMap<String, tokio::task::JoinHandle<()>>>>,
    /// Where the wipes run, as named tasks.
    tasks: Tasks,
}

impl Drop for Plugins {
    fn drop(&mut self) {
        for (_, w) in self.wipes.locked().drain() {
            w.abort();
        }
    }
}

/// Why none of a plugin's services will do (kubelet's words; the lists in Go's `%q`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ServiceError {
    #[error("empty list of supported gRPC services (aka supported versions)")]
    Empty,
    #[error(
        "none of services supported by the plugin ({theirs}) are supported by the kubelet ({ours})"
    )]
    NoneShared { theirs: String, ours: String },
}

/// kubelet's `validateSupportedServices`: the first of the plugin's services kubelet
/// speaks.
fn choose(versions: &[String]) -> Result<Service, ServiceError> {
    if versions.is_empty() {
        return Err(ServiceError::Empty);
    }
    versions
        .iter()
        .find_map(|v| SUPPORTED.into_iter().find(|s| s.name() == v))
        .ok_or_else(|| {
            let ours: Vec<String> = SUPPORTED.iter().map(|s| s.name().to_owned()).collect();
            ServiceError::NoneShared {
                theirs: go_quoted_list(versions),
                ours: go_quoted_list(&ours),
            }
        })
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| crate::klog::go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

impl Plugins {
    pub(super) fn new(
        node_name: &str,
        api: Arc<dyn ClaimSource>,
        wiping_delay: Duration,
        tasks: Tasks,
    ) -> Self {
        Plugins {
            node_name: node_name.to_owned(),
            api,
            wiping_delay,
            store: Mutex::new(HashMap::new()),
            wipes: Arc::new(Mutex::new(HashMap::new())),
            tasks,
        }
    }

    pub(super) fn validate(
        &self,
        driver: &str,
        endpoint: &Path,
        versions: &[String],
    ) -> Result<Service, DraError> {
        choose(versions).map_err(|reason| DraError::Versions {
            driver: driver.to_owned(),
            endpoint: endpoint.display().to_string(),
            reason: reason.to_string(),
        })
    }

    pub(super) fn register(
        &self,
        driver: &str,
        endpoint: &Path,
        versions: &[String],
        timeout: Duration,
    ) -> Result<(), DraError> {
        let service = self.validate(driver, endpoint, versions)?;
        let mut store = self.store.locked();
        let plugins = store.entry(driver.to_owned()).or_default();
        if plugins.iter().any(|p| p.endpoint == endpoint) {
            return Err(DraError::EndpointTaken {
                endpoint: endpoint.display().to_string(),
                driver: driver.to_owned(),
            });
        }
        plugins.push(PluginClient::new(driver, endpoint, service, timeout)?);
        let count = plugins.len();
        drop(store);
        if let Some(w) = self.wipes.locked().remove(driver) {
            w.abort();
            info!(driverName = %driver, "DRA driver is back, its ResourceSlices are kept");
        }
        info!(
            driverName = %driver,
            endpoint = %endpoint.display(),
            chosenService = service.name(),
            numPlugins = count,
            "Registered DRA plugin"
        );
        Ok(())
    }

    pub(super) fn deregister(&self, driver: &str, endpoint: Option<&Path>) {
        let mut store = self.store.locked();
        let Some(plugins) = store.get_mut(driver) else {
            return;
        };
        match endpoint {
            Some(e) => plugins.retain(|p| p.endpoint != e),
            None => plugins.clear(),
        }
        let left = plugins.len();
        if left == 0 {
            store.remove(driver);
        }
        drop(store);
        info!(driverName = %driver, numPlugins = left, "Unregistered DRA plugin");
        if left == 0 {
            self.schedule_wipe(driver);
        }
    }

    /// kubelet's `GetPlugin`: the newest plugin of `driver`.
    pub(super) fn get(&self, driver: &str) -> Result<PluginClient, DraError> {
        if driver.is_empty() {
            return Err(DraError::DriverNameEmpty);
        }
        let store = self.store.locked();
        store
            .get(driver)
            .and_then(|p| p.last())
            .cloned()
            .ok_or_else(|| DraError::DriverNotRegistered {
                driver: driver.to_owned(),
            })
    }

    fn schedule_wipe(&self, driver: &str) {
        let mut wipes = self.wipes.locked();
        if wipes.contains_key(driver) {
            return;
        }
        let (api, node, delay) = (self.api.clone(), self.node_name.clone(), self.wiping_delay);
        let (name, all) = (driver.to_owned(), self.wipes.clone());
        info!(driverName = %driver, delay = %crate::duration::format_go_duration(delay), "DRA driver gone, its ResourceSlices are deleted unless it comes back");
        wipes.insert(
            driver.to_owned(),
            self.tasks.spawn_pass("dra-slice-wipe", async move {
                tokio::time::sleep(delay).await;
                wipe(api.as_ref(), &node, Some(&name)).await;
                all.locked().remove(&name);
                Ok(())
            }),
        );
    }

    /// At start no driver is registered yet: the node's slices are deleted until the
    /// drivers publish them again (kubelet does it in the background; so should the caller).
    pub(super) async fn wipe_all(&self) {
        wipe(self.api.as_ref(), &self.node_name, None).await;
    }
}

/// Deletes the slices, retrying with kubelet's back-off (1 s doubling to 5 min, 100 tries).
async fn wipe(api: &dyn ClaimSource, node: &str, driver: Option<&str>) {
    let mut wait = Duration::from_secs(1);
    let driver_name = driver.unwrap_or("");
    for _ in 0..100 {
        match api.delete_resource_slices(node, driver).await {
            Ok(()) => {
                info!(target: crate::logging::V3_TARGET, node = %node, driverName = %driver_name, "Deleted ResourceSlices");
                return;
            }
            Err(e) => {
                debug!(node = %node, driverName = %driver_name, err = %e, "Deleting ResourceSlice failed, retrying");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(300));
    }
    error!(node = %node, driverName = %driver_name, "Deleting ResourceSlices failed, giving up");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_newest_service_both_speak_is_chosen() {
        assert_eq!(
            choose(&v(&["v1beta1.DRAPlugin", "v1.DRAPlugin"])),
            Ok(Service::V1Beta1)
        );
        assert_eq!(choose(&v(&["v1.DRAPlugin"])), Ok(Service::V1));
        assert_eq!(
            choose(&[]).unwrap_err().to_string(),
            "empty list of supported gRPC services (aka supported versions)"
        );
        assert_eq!(
            choose(&v(&["1.0.0"])).unwrap_err().to_string(),
            "none of services supported by the plugin ([\"1.0.0\"]) are supported by the kubelet ([\"v1.DRAPlugin\" \"v1beta1.DRAPlugin\"])"
        );
    }
}

//! grpc probes: the standard `grpc.health.v1.Health/Check` through tonic-health's
//! client; only `SERVING` is success, everything else (including not connecting) is
//! failure (kubelet's `pkg/probe/grpc`).

use std::time::Duration;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::ProbeOutcome;
use super::tcp::bracket;

pub(crate) async fn probe(
    host: &str,
    port: u16,
    service: Option<String>,
    timeout: Duration,
) -> ProbeOutcome {
    let target = format!("http://{}:{port}", bracket(host));
    let endpoint = match tonic::transport::Endpoint::from_shared(target.clone()) {
        Ok(e) => e.connect_timeout(timeout).timeout(timeout),
        Err(e) => return ProbeOutcome::Failure(format!("invalid target {target}: {e}")),
    };
    let check = async {
        let channel = endpoint.connect().await.map_err(|e| {
            format!("timeout: failed to connect service {target:?} within {timeout:?}: {e}")
        })?;
        let request = HealthCheckRequest {
            service: service.unwrap_or_default(),
        };
        let response = HealthClient::new(channel)
            .check(request)
            .await
            .map_err(|s| format!("health rpc failed: {:?}: {}", s.code(), s.message()))?;
        Ok::<_, String>(response.into_inner().status)
    };
    match tokio::time::timeout(timeout, check).await {
        Err(_) => ProbeOutcome::Failure(format!("health rpc did not complete within {timeout:?}")),
        Ok(Err(msg)) => ProbeOutcome::Failure(msg),
        Ok(Ok(s)) if s == ServingStatus::Serving as i32 => ProbeOutcome::Success(String::new()),
        Ok(Ok(s)) => {
            let name = ServingStatus::try_from(s).map_or("UNKNOWN", |s| s.as_str_name());
            ProbeOutcome::Failure(format!("service unhealthy (responded with {name:?})"))
        }
    }
}

//! tcpSocket probes: success when a TCP connection opens within the timeout; it is
//! closed at once (kubelet's `pkg/probe/tcp`).

use std::time::Duration;

use super::ProbeOutcome;

pub(crate) async fn probe(host: &str, port: u16, timeout: Duration) -> ProbeOutcome {
    let addr = format!("{}:{port}", bracket(host));
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
        Ok(Ok(_stream)) => ProbeOutcome::Success(String::new()),
        Ok(Err(e)) => ProbeOutcome::Failure(format!("dial tcp {addr}: {e}")),
        Err(_) => ProbeOutcome::Failure(format!("dial tcp {addr}: i/o timeout")),
    }
}

/// IPv6 literals need brackets in `host:port`.
pub(crate) fn bracket(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

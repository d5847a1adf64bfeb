//! Serve a test apiserver by hand, for poking at it with kubectl:
//! `cargo run -p testapi --example serve -- /tmp/testapi`, then
//! `kubectl --kubeconfig /tmp/testapi/kubeconfig get pods`. Ctrl-C stops it and saves state.

#[tokio::main]
async fn main() -> Result<(), testapi::Error> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "testapi-state".to_owned());
    let mut server = testapi::TestApiServer::start(std::path::Path::new(&dir)).await?;
    println!(
        "serving {} (kubeconfig {})",
        server.url(),
        server.kubeconfig().display()
    );
    let _ = tokio::signal::ctrl_c().await;
    server.stop().await
}

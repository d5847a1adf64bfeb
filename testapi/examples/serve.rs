//! Serve a test apiserver by hand, for poking at it with kubectl:
//! `cargo run -p testapi --example serve -- /tmp/testapi 6443`, then
//! `kubectl --kubeconfig /tmp/testapi/kubeconfig get pods`. Ctrl-C stops it and saves
//! state; started again with the same port, the kubeconfig written before still works.

const USAGE: &str = "usage: serve [STATE_DIR [PORT]]
  STATE_DIR  where state, token and kubeconfig live (default: testapi-state)
  PORT       loopback port to listen on (default: a free one)";

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return std::process::ExitCode::SUCCESS;
    }
    if args.len() > 2 || args.iter().any(|a| a.starts_with('-')) {
        eprintln!("serve: unexpected arguments {args:?}\n{USAGE}");
        return std::process::ExitCode::from(2);
    }
    let dir = args.first().map_or("testapi-state", String::as_str);
    let port = match args.get(1).map(|p| p.parse::<u16>()) {
        None => 0,
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            eprintln!("serve: PORT {:?}: {e}\n{USAGE}", args[1]);
            return std::process::ExitCode::from(2);
        }
    };
    match run(dir, port).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("serve: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(dir: &str, port: u16) -> Result<(), testapi::Error> {
    let mut server = testapi::TestApiServer::start_on(std::path::Path::new(dir), port).await?;
    println!(
        "serving {} (kubeconfig {})",
        server.url(),
        server.kubeconfig().display()
    );
    let _ = tokio::signal::ctrl_c().await;
    server.stop().await
}

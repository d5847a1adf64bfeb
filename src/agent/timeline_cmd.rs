//! `oxlet timeline <namespace>/<name>`: asks a running oxlet for a pod's story
//! (`/debug/pods/{namespace}/{name}/timeline`) and prints it for a person.
//!
//! The secure port (`https://127.0.0.1:10250`) is the default: `/debug/*` is served
//! there alone, behind `nodes/proxy` (`--token …` where anonymous requests are off;
//! `--insecure-skip-tls-verify` for the node's self-signed serving certificate).

use std::process::ExitCode;

use http_body_util::Empty;
use hyper::body::Bytes;

use crate::http_get::{Transport, get_over};
use crate::timeline::{Story, render_text};

/// A story is at most a few hundred KiB; anything bigger is not one.
const MAX_ANSWER: usize = 8 << 20;

const USAGE: &str = "usage: oxlet timeline [--server URL] [--token TOKEN | --token-file FILE] \
[--insecure-skip-tls-verify] [-o text|json] NAMESPACE/NAME";

/// What the command line asked for.
#[derive(Debug, PartialEq)]
struct Ask {
    server: String,
    token: Option<String>,
    insecure: bool,
    json: bool,
    pod: String,
}

/// Why the command line asked for no timeline.
#[derive(Debug, PartialEq)]
enum NoAsk {
    /// `-h` or `--help`: the usage alone.
    Help,
    /// A mistake, said before the usage.
    Wrong(String),
}

impl From<String> for NoAsk {
    fn from(why: String) -> NoAsk {
        NoAsk::Wrong(why)
    }
}

fn parse(args: &[String]) -> Result<Ask, NoAsk> {
    let mut ask = Ask {
        server: "https://127.0.0.1:10250".into(),
        token: None,
        insecure: false,
        json: false,
        pod: String::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag {
            "--server" => ask.server = value("--server")?,
            "--token" => ask.token = Some(value("--token")?),
            "--token-file" => {
                let path = value("--token-file")?;
                let t = std::fs::read_to_string(&path)
                    .map_err(|e| format!("--token-file {path}: {e}"))?;
                ask.token = Some(t.trim().to_string());
            }
            "--insecure-skip-tls-verify" => ask.insecure = true,
            "-o" | "--output" => match value("-o")?.as_str() {
                "json" => ask.json = true,
                "text" => ask.json = false,
                other => return Err(format!("-o {other}: want text or json").into()),
            },
            "-h" | "--help" => return Err(NoAsk::Help),
            f if f.starts_with('-') => return Err(format!("unknown flag {f}").into()),
            pod if ask.pod.is_empty() => ask.pod = pod.to_string(),
            extra => return Err(format!("one pod at a time ({extra} is one too many)").into()),
        }
    }
    let parts: Vec<&str> = ask.pod.split('/').collect();
    if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(NoAsk::Wrong("name the pod as NAMESPACE/NAME".into()));
    }
    Ok(ask)
}

/// Runs the command; `args` are what follows `timeline`.
pub fn timeline_command(args: &[String]) -> ExitCode {
    let ask = match parse(args) {
        Ok(a) => a,
        Err(no) => {
            if let NoAsk::Wrong(why) = no {
                eprintln!("oxlet timeline: {why}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("oxlet timeline: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(fetch(&ask)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("oxlet timeline: {e}");
            ExitCode::from(1)
        }
    }
}

/// `host[:port]` or `[v6][:port]`, with the scheme's port when none is given.
fn host_port(authority: &str, default: u16) -> Option<(&str, u16)> {
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.ends_with(']') && (!h.contains(':') || h.ends_with(']')) => {
            (h, p.parse().ok()?)
        }
        _ => (authority, default),
    };
    Some((host, port))
}

/// Why no timeline could be fetched; each names the server asked.
#[derive(Debug, thiserror::Error)]
enum TimelineFetchError {
    #[error("--server {0}: want http:// or https://")]
    Scheme(String),
    #[error("--server {0}: bad port")]
    Port(String),
    #[error("{0}")]
    Request(#[from] hyper::http::Error),
    #[error("{server}: {error}")]
    Get {
        server: String,
        error: crate::http_get::HttpGetError,
    },
    #[error("{server}: {status} {body}")]
    Status {
        server: String,
        status: hyper::StatusCode,
        body: String,
    },
    #[error("{server}: not a timeline: {error}")]
    NotATimeline {
        server: String,
        error: serde_json::Error,
    },
}

/// Asks the server and turns the answer into what to print.
async fn fetch(ask: &Ask) -> Result<String, TimelineFetchError> {
    let server = || ask.server.clone();
    let (https, rest) = if let Some(r) = ask.server.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = ask.server.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(TimelineFetchError::Scheme(server()));
    };
    let authority = rest.trim_end_matches('/');
    let (host, port) = host_port(authority, if https { 443 } else { 80 })
        .ok_or_else(|| TimelineFetchError::Port(server()))?;
    let transport = match (https, ask.insecure) {
        (false, _) => Transport::Plain,
        (true, true) => Transport::TlsSkipVerify,
        (true, false) => Transport::TlsVerify,
    };
    let (ns, name) = ask.pod.split_once('/').unwrap_or_default();
    let mut req = hyper::Request::get(format!("/debug/pods/{ns}/{name}/timeline"))
        .header(hyper::header::HOST, authority);
    if let Some(t) = &ask.token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req.body(Empty::<Bytes>::new())?;
    let answer = get_over(transport, host, port, req, MAX_ANSWER)
        .await
        .map_err(|error| TimelineFetchError::Get {
            server: server(),
            error,
        })?;
    let body = String::from_utf8_lossy(&answer.body);
    if !answer.status.is_success() {
        return Err(TimelineFetchError::Status {
            server: server(),
            status: answer.status,
            body: body.trim().to_string(),
        });
    }
    if ask.json {
        return Ok(format!("{body}\n"));
    }
    let story: Story =
        serde_json::from_str(&body).map_err(|error| TimelineFetchError::NotATimeline {
            server: server(),
            error,
        })?;
    Ok(render_text(&story))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn flags_and_the_pod_are_read() {
        let a = parse(&args(
            "--server=https://127.0.0.1:10250 --token t -o json kube-system/etcd",
        ))
        .unwrap();
        assert_eq!(a.server, "https://127.0.0.1:10250");
        assert_eq!(a.token.as_deref(), Some("t"));
        assert!(a.json);
        assert_eq!(a.pod, "kube-system/etcd");
        assert_eq!(
            parse(&args("default/web")).unwrap().server,
            "https://127.0.0.1:10250"
        );
    }

    #[test]
    fn the_port_is_the_servers_or_the_schemes() {
        assert_eq!(host_port("127.0.0.1:10255", 80), Some(("127.0.0.1", 10255)));
        assert_eq!(host_port("node", 443), Some(("node", 443)));
        assert_eq!(host_port("[::1]:10250", 443), Some(("[::1]", 10250)));
        assert_eq!(host_port("[::1]", 443), Some(("[::1]", 443)));
        assert_eq!(host_port("node:x", 80), None);
    }

    #[test]
    fn bad_command_lines_say_why() {
        let why = |line: &str| match parse(&args(line)) {
            Err(NoAsk::Wrong(why)) => why,
            other => panic!("{line}: {other:?}"),
        };
        assert!(why("web").contains("NAMESPACE/NAME"));
        assert!(why("a/b c/d").contains("one pod"));
        assert!(why("--bogus a/b").contains("--bogus"));
        assert!(why("-o yaml a/b").contains("yaml"));
        assert!(why("a/b --server").contains("needs a value"));
        assert_eq!(parse(&args("--help")), Err(NoAsk::Help));
    }
}

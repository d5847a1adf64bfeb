//! httpGet probes (kubelet's `pkg/probe/http`): GET with kubelet's default headers,
//! 200–399 is success, redirects followed only to the same host (at most 10), the
//! body read capped at 10 KiB. The whole probe, redirects included, gets `timeout`.

use std::time::Duration;

use http_body_util::Empty;
use hyper::{Request, StatusCode, Uri};

use crate::http_get::{self, HttpGetError};

use super::tcp::bracket;
use super::{ProbeError, ProbeOutcome};

/// The Kubernetes version oxlet reports, as in kubelet's `kube-probe/<major>.<minor>`.
pub(crate) const USER_AGENT: &str = crate::version::PROBE_USER_AGENT;
/// kubelet's `maxRespBodyLength`.
const MAX_BODY: usize = 10 * 1024;
/// Go's http client's redirect limit, which kubelet keeps.
const MAX_REDIRECTS: usize = 10;

/// One httpGet probe's target, resolved from the spec.
#[derive(Debug, Clone)]
pub(crate) struct HttpTarget {
    /// `scheme: HTTPS`: TLS without certificate checks, as kubelet probes.
    pub https: bool,
    pub host: String,
    pub port: u16,
    pub path: String,
    /// Custom headers, in spec order (a `Host` header sets the request's host).
    pub headers: Vec<(String, String)>,
}

impl HttpTarget {
    fn uri(&self) -> Result<Uri, ProbeError> {
        let path = if self.path.starts_with('/') {
            self.path.clone()
        } else {
            format!("/{}", self.path)
        };
        let scheme = if self.https { "https" } else { "http" };
        let s = format!("{scheme}://{}:{}{path}", bracket(&self.host), self.port);
        s.parse()
            .map_err(|e: hyper::http::uri::InvalidUri| ProbeError::BadTarget(format!("{s}: {e}")))
    }
}

pub(crate) async fn probe(
    target: &HttpTarget,
    timeout: Duration,
) -> Result<ProbeOutcome, ProbeError> {
    let uri = target.uri()?;
    match tokio::time::timeout(timeout, follow(target, uri)).await {
        Ok(r) => r,
        Err(_) => Ok(ProbeOutcome::Failure(format!(
            "Get \"{}\": context deadline exceeded",
            target.uri()?
        ))),
    }
}

/// Sends the request and follows same-host redirects.
async fn follow(target: &HttpTarget, mut uri: Uri) -> Result<ProbeOutcome, ProbeError> {
    let first_host = uri.host().unwrap_or_default().to_string();
    for _ in 0..=MAX_REDIRECTS {
        let (status, location, body) = match get_once(target, &uri).await {
            Ok(r) => r,
            Err(msg) => return Ok(ProbeOutcome::Failure(format!("Get \"{uri}\": {msg}"))),
        };
        if status.is_redirection()
            && let Some(loc) = location
        {
            let next = resolve(&uri, &loc)?;
            if next.host().unwrap_or_default() != first_host {
                // kubelet: not followed; success with a warning.
                return Ok(ProbeOutcome::Success(format!(
                    "Probe terminated redirects, Response body: {body}"
                )));
            }
            uri = next;
            continue;
        }
        let code = status.as_u16();
        if (200..400).contains(&code) {
            return Ok(ProbeOutcome::Success(body));
        }
        return Ok(ProbeOutcome::Failure(format!(
            "HTTP probe failed with statuscode: {code}"
        )));
    }
    Ok(ProbeOutcome::Failure(format!(
        "Get \"{uri}\": stopped after {MAX_REDIRECTS} redirects"
    )))
}

/// A `Location` against the URI it came from (absolute, or a path on the same server).
fn resolve(base: &Uri, location: &str) -> Result<Uri, ProbeError> {
    let bad = |e: hyper::http::uri::InvalidUri| ProbeError::BadTarget(format!("{location}: {e}"));
    let loc: Uri = location.parse().map_err(bad)?;
    if loc.scheme().is_some() {
        return Ok(loc);
    }
    let authority = base
        .authority()
        .map(hyper::http::uri::Authority::as_str)
        .unwrap_or_default();
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        format!("/{location}")
    };
    let scheme = base.scheme_str().unwrap_or("http");
    format!("{scheme}://{authority}{path}").parse().map_err(bad)
}

/// One GET: status, Location header and the body's first 10 KiB.
async fn get_once(
    target: &HttpTarget,
    uri: &Uri,
) -> Result<(StatusCode, Option<String>, String), HttpGetError> {
    let host = uri.host().unwrap_or_default();
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let mut req = Request::get(uri.path_and_query().map_or("/", |p| p.as_str()));
    let has = |name: &str| {
        target
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    if !has("host") {
        req = req.header("Host", uri.authority().map_or(host, |a| a.as_str()));
    }
    if !has("user-agent") {
        req = req.header("User-Agent", USER_AGENT);
    }
    if !has("accept") {
        req = req.header("Accept", "*/*");
    }
    for (k, v) in &target.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let answer = http_get::get(https, host, port, req.body(Empty::new())?, MAX_BODY).await?;
    Ok((
        answer.status,
        answer.location,
        String::from_utf8_lossy(&answer.body).into_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A tiny HTTP/1.1 server on 127.0.0.1: answers by path, records each request head.
    async fn server() -> (u16, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        // Test-only server, dropped with the test's runtime.
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap();
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                log.lock().unwrap().push(head.clone());
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (status, extra, body) = match path.as_str() {
                    "/ok" => ("200 OK", String::new(), "fine".to_string()),
                    "/moved" => ("302 Found", "Location: /ok\r\n".into(), String::new()),
                    "/away" => (
                        "302 Found",
                        "Location: http://192.0.2.1/ok\r\n".into(),
                        String::new(),
                    ),
                    "/loop" => ("302 Found", "Location: /loop\r\n".into(), String::new()),
                    "/big" => ("200 OK", String::new(), "x".repeat(20 * 1024)),
                    "/hang" => {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        continue;
                    }
                    _ => ("500 Internal Server Error", String::new(), String::new()),
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        (port, seen)
    }

    fn target(port: u16, path: &str) -> HttpTarget {
        HttpTarget {
            https: false,
            host: "127.0.0.1".into(),
            port,
            path: path.into(),
            headers: vec![("X-Custom".into(), "yes".into())],
        }
    }

    const T: Duration = Duration::from_secs(2);

    #[tokio::test]
    async fn sends_kubelets_headers_and_200_to_399_is_success() {
        let (port, seen) = server().await;
        let out = probe(&target(port, "/ok"), T).await.unwrap();
        assert_eq!(out, ProbeOutcome::Success("fine".into()));
        let head = seen.lock().unwrap()[0].to_lowercase();
        assert!(head.starts_with("get /ok http/1.1"), "{head}");
        for h in [
            "user-agent: kube-probe/1.36",
            "accept: */*",
            "x-custom: yes",
            &format!("host: 127.0.0.1:{port}"),
        ] {
            assert!(head.contains(h), "{h} in {head}");
        }
        let out = probe(&target(port, "/nope"), T).await.unwrap();
        assert_eq!(
            out,
            ProbeOutcome::Failure("HTTP probe failed with statuscode: 500".into())
        );
    }

    #[tokio::test]
    async fn redirects_are_followed_only_to_the_same_host_at_most_ten_times() {
        let (port, seen) = server().await;
        let out = probe(&target(port, "/moved"), T).await.unwrap();
        assert_eq!(out, ProbeOutcome::Success("fine".into()));
        assert_eq!(seen.lock().unwrap().len(), 2);
        // Another host: not followed, success (kubelet warns).
        let out = probe(&target(port, "/away"), T).await.unwrap();
        assert!(matches!(out, ProbeOutcome::Success(_)), "{out:?}");
        assert_eq!(seen.lock().unwrap().len(), 3);
        let out = probe(&target(port, "/loop"), T).await.unwrap();
        assert!(
            matches!(out, ProbeOutcome::Failure(ref m) if m.contains("redirects")),
            "{out:?}"
        );
        assert_eq!(seen.lock().unwrap().len(), 3 + 1 + MAX_REDIRECTS);
    }

    #[tokio::test]
    async fn the_body_read_is_capped_and_a_slow_server_fails_at_the_timeout() {
        let (port, _) = server().await;
        let ProbeOutcome::Success(body) = probe(&target(port, "/big"), T).await.unwrap() else {
            panic!("big body is a success");
        };
        assert_eq!(body.len(), MAX_BODY);
        let started = std::time::Instant::now();
        let out = probe(&target(port, "/hang"), Duration::from_millis(300))
            .await
            .unwrap();
        assert!(
            matches!(out, ProbeOutcome::Failure(ref m) if m.contains("deadline")),
            "{out:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // Nothing listens: a failure, not an error.
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = probe(&target(free, "/ok"), T).await.unwrap();
        assert!(matches!(out, ProbeOutcome::Failure(_)), "{out:?}");
    }

    /// A self-signed certificate and its PKCS#8 key (DER), made by the openssl CLI.
    fn self_signed() -> (Vec<u8>, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl (scripts/install-deps.sh installs it)");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.der",
            "-outform",
            "DER",
            "-subj",
            "/CN=probe-test",
            "-days",
            "1",
        ]);
        run(&[
            "pkcs8", "-topk8", "-nocrypt", "-in", "key.pem", "-outform", "DER", "-out", "key.der",
        ]);
        (
            std::fs::read(dir.path().join("cert.der")).unwrap(),
            std::fs::read(dir.path().join("key.der")).unwrap(),
        )
    }

    /// An HTTPS server on 127.0.0.1 with a self-signed certificate: 200 on every path.
    async fn tls_server() -> u16 {
        use tokio_rustls::rustls::ServerConfig;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let (cert, key) = self_signed();
        let config = ServerConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert)],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Test-only server, dropped with the test's runtime.
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(mut s) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecure",
                    )
                    .await;
                let _ = s.shutdown().await;
            }
        });
        port
    }

    #[tokio::test]
    async fn https_probes_skip_certificate_checks_but_need_tls() {
        let port = tls_server().await;
        let https = HttpTarget {
            https: true,
            ..target(port, "/ok")
        };
        // A self-signed certificate for another name passes, as with kubelet.
        match probe(&https, Duration::from_secs(5)).await.unwrap() {
            ProbeOutcome::Success(body) => assert_eq!(body, "secure"),
            other => panic!("{other:?}"),
        }
        // Plain HTTP against the TLS server fails.
        let plain = probe(&target(port, "/ok"), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(matches!(plain, ProbeOutcome::Failure(_)), "{plain:?}");
        // HTTPS against a plain HTTP server fails in the handshake.
        let (plain_port, _) = server().await;
        let wrong = HttpTarget {
            https: true,
            ..target(plain_port, "/ok")
        };
        match probe(&wrong, Duration::from_secs(5)).await.unwrap() {
            ProbeOutcome::Failure(msg) => assert!(msg.contains("tls"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }
}

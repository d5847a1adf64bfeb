//! What the apiserver does to a node on a client's behalf: `pods/log`, `pods/exec`,
//! `pods/attach`, `pods/portforward` and `nodes/proxy` are forwarded to the node's
//! daemon endpoint (its InternalIP and `daemonEndpoints.kubeletEndpoint.Port`) over TLS
//! with the apiserver's kubelet client certificate, as the real apiserver does. The
//! node's serving certificate is not verified, as with kind's apiserver (no
//! `--kubelet-certificate-authority`). Upgrades (exec, attach, port-forward, in SPDY or
//! WebSocket) are joined byte for byte; other answers are streamed back as they come.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio_rustls::rustls;

use crate::http::{Body, Shared};
use crate::status::ApiError;

/// A request the apiserver forwards to a node.
pub(crate) enum Proxied {
    /// `pods/<name>/<sub>` in `ns`.
    Pod {
        ns: String,
        name: String,
        sub: String,
    },
    /// `nodes/<name>/proxy/<path>`.
    Node { name: String, path: String },
}

/// Recognises the proxy subresources among the `/api/v1` paths.
pub(crate) fn route(group: &str, version: &str, rest: &[&str]) -> Option<Proxied> {
    if (group, version) != ("", "v1") {
        return None;
    }
    match rest {
        [
            "namespaces",
            ns,
            "pods",
            name,
            sub @ ("log" | "exec" | "attach" | "portforward"),
        ] => Some(Proxied::Pod {
            ns: (*ns).to_owned(),
            name: (*name).to_owned(),
            sub: (*sub).to_owned(),
        }),
        ["nodes", name, "proxy", path @ ..] => Some(Proxied::Node {
            name: (*name).to_owned(),
            path: path.join("/"),
        }),
        _ => None,
    }
}

/// The apiserver's client certificate for kubelets, and the TLS set-up made from it.
pub(crate) fn client_config(
    cert_pem: &[u8],
    key_pem: &[u8],
) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_client_auth_cert(chain, key)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(config))
}

/// Accepts any serving certificate (checking only that the handshake is signed by it).
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn bad(code: u16, reason: &'static str, msg: String) -> ApiError {
    ApiError::new(code, reason, msg)
}

/// The pod's node and the path on its kubelet, as the apiserver's `*Location`s build it.
fn pod_location(
    shared: &Shared,
    ns: &str,
    name: &str,
    sub: &str,
    query: &str,
) -> Result<(String, String), ApiError> {
    let pod = (shared
        .store
        .get(&("pods".to_owned(), ns.to_owned(), name.to_owned())))
    .ok_or_else(|| ApiError::not_found("pods", name))?;
    let node = pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if node.is_empty() {
        return Err(bad(
            400,
            "BadRequest",
            format!("pod {name} does not have a host assigned"),
        ));
    }
    let pairs = parse_query(query);
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let container = match get("container") {
        Some(c) => c.to_owned(),
        None => only_container(&pod, name)?,
    };
    let truthy = |k: &str| get(k).is_some_and(|v| v == "true" || v == "1");
    let mut out: Vec<(String, String)> = Vec::new();
    let path = match sub {
        "log" => {
            for k in [
                "follow",
                "previous",
                "sinceSeconds",
                "sinceTime",
                "timestamps",
                "tailLines",
                "limitBytes",
            ] {
                if let Some(v) = get(k) {
                    out.push((k.to_owned(), v.to_owned()));
                }
            }
            format!("/containerLogs/{ns}/{name}/{container}")
        }
        "exec" | "attach" => {
            for (k, flag) in [
                ("stdin", "input"),
                ("stdout", "output"),
                ("stderr", "error"),
                ("tty", "tty"),
            ] {
                if truthy(k) {
                    out.push((flag.to_owned(), "1".to_owned()));
                }
            }
            for (_, c) in pairs.iter().filter(|(k, _)| k == "command") {
                out.push(("command".to_owned(), c.clone()));
            }
            format!("/{sub}/{ns}/{name}/{container}")
        }
        _ => {
            for (_, p) in pairs.iter().filter(|(k, _)| k == "ports") {
                out.push(("port".to_owned(), p.clone()));
            }
            format!("/portForward/{ns}/{name}")
        }
    };
    let query: Vec<String> = out
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    Ok((
        node,
        if query.is_empty() {
            path
        } else {
            format!("{path}?{}", query.join("&"))
        },
    ))
}

/// The pod's one container, or the apiserver's refusal to choose.
fn only_container(pod: &Value, name: &str) -> Result<String, ApiError> {
    let names: Vec<&str> = (pod["spec"]["containers"].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    match names.as_slice() {
        [one] => Ok((*one).to_owned()),
        _ => Err(bad(
            400,
            "BadRequest",
            format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                names.join(" ")
            ),
        )),
    }
}

/// `host:port` of the node's kubelet.
fn node_address(shared: &Shared, node: &str) -> Result<String, ApiError> {
    let n = (shared
        .store
        .get(&("nodes".to_owned(), String::new(), node.to_owned())))
    .ok_or_else(|| ApiError::not_found("nodes", node))?;
    let ip = (n["status"]["addresses"].as_array().into_iter().flatten())
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .ok_or_else(|| {
            bad(
                503,
                "ServiceUnavailable",
                format!("node {node} has no InternalIP"),
            )
        })?;
    let port = n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .unwrap_or(0);
    if port == 0 {
        return Err(bad(
            503,
            "ServiceUnavailable",
            format!("node {node} has no kubelet port"),
        ));
    }
    Ok(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                crate::http::percent_decode(k),
                crate::http::percent_decode(v),
            )
        })
        .collect()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Forwards `req` to the node's kubelet and relays the answer (or joins the upgrade).
pub(crate) async fn forward(
    shared: &Arc<Shared>,
    target: Proxied,
    mut req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let query = req.uri().query().unwrap_or("").to_owned();
    let (node, path) = match target {
        Proxied::Pod { ns, name, sub } => pod_location(shared, &ns, &name, &sub, &query)?,
        Proxied::Node { name, path } => {
            let q = if query.is_empty() {
                String::new()
            } else {
                format!("?{query}")
            };
            (name, format!("/{path}{q}"))
        }
    };
    let addr = node_address(shared, &node)?;
    let config = (shared
        .kubelet_client
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone())
    .ok_or_else(|| {
        bad(
            503,
            "ServiceUnavailable",
            "the test apiserver has no kubelet client certificate".into(),
        )
    })?;
    let unavailable = |e: String| {
        bad(
            503,
            "ServiceUnavailable",
            format!("error dialing backend: {e}"),
        )
    };
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    let name = rustls::pki_types::ServerName::try_from(
        addr.rsplit_once(':')
            .map_or("", |(h, _)| h)
            .trim_matches(['[', ']'])
            .to_owned(),
    )
    .map_err(|e| unavailable(e.to_string()))?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let client_upgrade = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>();
    let mut out = Request::builder().method(req.method()).uri(&path);
    for (k, v) in req.headers() {
        if k != header::AUTHORIZATION && k != header::HOST {
            out = out.header(k, v);
        }
    }
    let body = req.into_body();
    let out = out
        .header(header::HOST, addr.as_str())
        .body(body)
        .map_err(|e| unavailable(e.to_string()))?;
    let mut resp = sender
        .send_request(out)
        .await
        .map_err(|e| unavailable(e.to_string()))?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let backend = hyper::upgrade::on(&mut resp);
        let mut answer = Response::builder().status(StatusCode::SWITCHING_PROTOCOLS);
        for (k, v) in resp.headers() {
            answer = answer.header(k, v);
        }
        if let Some(client) = client_upgrade {
            tokio::spawn(async move {
                if let Ok((c, b)) = tokio::try_join!(client, backend) {
                    let _ =
                        tokio::io::copy_bidirectional(&mut TokioIo::new(c), &mut TokioIo::new(b))
                            .await;
                }
            });
        }
        return answer.body(empty()).map_err(|e| unavailable(e.to_string()));
    }
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, streamed(body)))
}

fn empty() -> Body {
    http_body_util::Empty::new().map_err(|e| match e {}).boxed()
}

/// The kubelet's body, relayed frame by frame; an error ends it.
fn streamed(body: Incoming) -> Body {
    let frames = futures::stream::unfold(body, |mut b| async move {
        match b.frame().await {
            Some(Ok(f)) => Some((Ok::<Frame<Bytes>, Infallible>(f), b)),
            _ => None,
        }
    });
    StreamBody::new(frames).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_paths_are_recognised() {
        assert!(matches!(
            route("", "v1", &["namespaces", "ns", "pods", "p", "exec"]),
            Some(Proxied::Pod { sub, .. }) if sub == "exec"
        ));
        assert!(matches!(
            route("", "v1", &["nodes", "n1", "proxy", "stats", "summary"]),
            Some(Proxied::Node { path, .. }) if path == "stats/summary"
        ));
        assert!(route("", "v1", &["namespaces", "ns", "pods", "p", "status"]).is_none());
        assert!(route("apps", "v1", &["nodes", "n", "proxy"]).is_none());
    }

    #[test]
    fn exec_options_become_kubelets() {
        let pairs = parse_query(
            "command=sh&command=-c&command=echo%20hi&stdin=true&stdout=true&tty=false&container=main",
        );
        assert_eq!(pairs[2], ("command".to_owned(), "echo hi".to_owned()));
    }
}

//! The HTTP pod source (kubelet's `config/http.go`): GET the manifest URL every
//! `httpCheckFrequency` and send the pods it serves, one Pod or a PodList, as this
//! source's complete set. A body identical to the last good one is a no-op; a bad
//! answer is logged (quietly after 3 in a row) and the last good set stays.

use std::collections::BTreeMap;
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::SourceSnapshot;
use super::manifest::{MAX_MANIFEST_BYTES, ManifestError, decode_url_pods};
use crate::http_get::{HttpGetError, Transport, get_over};
use crate::pod::HTTP_SOURCE;

/// kubelet's client timeout for the manifest URL: a hung server costs one poll.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Redirects followed before giving up (Go's client default).
pub(crate) const MAX_REDIRECTS: usize = 10;
/// Failures in a row logged at warning level; later ones go to `-v=4`.
pub(crate) const LOUD_FAILURES: u32 = 3;

/// Why one poll of the URL gave no new set. Each names the URL.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpSourceError {
    #[error("{url}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("Get {url:?}: {source}")]
    Get {
        url: String,
        #[source]
        source: HttpGetError,
    },
    #[error("Get {url:?}: timeout after {REQUEST_TIMEOUT:?}")]
    Timeout { url: String },
    #[error("Get {url:?}: stopped after {MAX_REDIRECTS} redirects")]
    TooManyRedirects { url: String },
    #[error("{url}: {status}")]
    Status { url: String, status: StatusCode },
    #[error("zero-length data received from {url}")]
    Empty { url: String },
    #[error("{url}: body is larger than {MAX_MANIFEST_BYTES} bytes")]
    TooLarge { url: String },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

/// One manifest URL and what was last read from it.
#[derive(Debug)]
pub(crate) struct UrlSource {
    url: String,
    /// The URL as messages show it: its password redacted.
    shown: String,
    /// Request headers (`staticPodURLHeader`), each name with its values in order.
    headers: BTreeMap<String, Vec<String>>,
    node_name: String,
    /// The last body that decoded to a good set (None: none yet).
    last: Option<Vec<u8>>,
    /// Failed polls in a row, for kubelet's quiet mode.
    failures: u32,
}

/// What one poll produced.
#[derive(Debug)]
pub(crate) enum Poll {
    /// A new set for the merger.
    Pods(Vec<Pod>),
    /// The same body as last time: nothing to send.
    Unchanged,
}

impl UrlSource {
    pub(crate) fn new(
        url: String,
        headers: BTreeMap<String, Vec<String>>,
        node_name: String,
    ) -> Self {
        UrlSource {
            shown: crate::http_get::redacted_url(&url).into_owned(),
            url,
            headers,
            node_name,
            last: None,
            failures: 0,
        }
    }

    /// One GET and its decoding (kubelet's `extractFromURL`). An empty body is an
    /// error, but the caller still sends the empty set it means (see [`run_http_source`]).
    pub(crate) async fn poll(&mut self) -> Result<Poll, HttpSourceError> {
        let body = match tokio::time::timeout(REQUEST_TIMEOUT, self.fetch()).await {
            Ok(body) => body?,
            Err(_) => {
                return Err(HttpSourceError::Timeout {
                    url: self.shown.clone(),
                });
            }
        };
        if body.is_empty() {
            // Forget the last body: the set is now empty, so that body is news again.
            // (kubelet keeps it, and a server that comes back with it is ignored.)
            self.last = None;
            return Err(HttpSourceError::Empty {
                url: self.shown.clone(),
            });
        }
        if self.last.as_deref() == Some(&body[..]) {
            return Ok(Poll::Unchanged);
        }
        // Only a good body is remembered, so a bad one keeps being reported.
        let pods = decode_url_pods(&body, &self.url, &self.node_name)?;
        self.last = Some(body);
        Ok(Poll::Pods(pods))
    }

    /// GETs the URL, following redirects, and returns the body of the 200 answer.
    async fn fetch(&self) -> Result<Vec<u8>, HttpSourceError> {
        let mut target = self.url.clone();
        let first_host = parse(&target, &self.shown)?.1;
        for _ in 0..=MAX_REDIRECTS {
            let (transport, host, port, uri) = parse(&target, &self.shown)?;
            // Credentials go only to the host they were given for (as Go's client).
            let same_host = host == first_host;
            let authority = uri.authority().map_or(host.as_str(), |a| a.as_str());
            let mut req = Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
                .header("Host", crate::http_get::host_of(authority))
                .header("User-Agent", format!("oxlet/{}", crate::version::OXLET));
            // The URL's user info goes as Basic auth unless a header says otherwise
            // (Go's client), and never in the Host header.
            let configured = self
                .headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("authorization"));
            if let Some(basic) = crate::http_get::basic_auth_of(authority).filter(|_| !configured) {
                req = req.header("Authorization", basic);
            }
            for (name, values) in &self.headers {
                if !same_host && is_sensitive(name) {
                    continue;
                }
                for v in values {
                    req = req.header(name.as_str(), v.as_str());
                }
            }
            let req = req
                .body(Empty::<Bytes>::new())
                .map_err(|e| self.get_err(HttpGetError::Request(e)))?;
            let answer = get_over(transport, &host, port, req, MAX_MANIFEST_BYTES + 1)
                .await
                .map_err(|e| self.get_err(e))?;
            if answer.status.is_redirection()
                && let Some(location) = answer.location
            {
                target = resolve(&uri, &location);
                continue;
            }
            if answer.status != StatusCode::OK {
                return Err(HttpSourceError::Status {
                    url: self.shown.clone(),
                    status: answer.status,
                });
            }
            if answer.body.len() > MAX_MANIFEST_BYTES {
                return Err(HttpSourceError::TooLarge {
                    url: self.shown.clone(),
                });
            }
            return Ok(answer.body);
        }
        Err(HttpSourceError::TooManyRedirects {
            url: self.shown.clone(),
        })
    }

    fn get_err(&self, source: HttpGetError) -> HttpSourceError {
        HttpSourceError::Get {
            url: self.shown.clone(),
            source,
        }
    }

    /// Logs one poll's outcome the way kubelet does: warnings for the first
    /// [`LOUD_FAILURES`] failures in a row, then `-v=4`; one line when it recovers.
    /// Returns how loudly the failure was logged (None: success).
    fn log(&mut self, result: &Result<Poll, HttpSourceError>) -> Option<Loudness> {
        match result {
            Ok(_) => {
                if self.failures > 0 {
                    info!(url = %self.shown, "successfully read pods from URL");
                    self.failures = 0;
                }
                None
            }
            Err(e) => {
                let loudness = loudness(self.failures);
                match loudness {
                    Loudness::Warn => warn!("failed to read pods from URL: {e}"),
                    Loudness::LastWarn => warn!(
                        "failed to read pods from URL; dropping verbosity of this message to -v=4: {e}"
                    ),
                    Loudness::Quiet => debug!("failed to read pods from URL: {e}"),
                }
                self.failures = self.failures.saturating_add(1);
                Some(loudness)
            }
        }
    }
}

/// How loudly a failure is logged, given the failures in a row before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loudness {
    Warn,
    /// The last warning, saying that later ones go to `-v=4`.
    LastWarn,
    Quiet,
}

fn loudness(failures_before: u32) -> Loudness {
    match failures_before {
        n if n < LOUD_FAILURES => Loudness::Warn,
        n if n == LOUD_FAILURES => Loudness::LastWarn,
        _ => Loudness::Quiet,
    }
}

/// Headers Go's client drops when a redirect leaves the original host.
fn is_sensitive(name: &str) -> bool {
    ["authorization", "www-authenticate", "cookie", "cookie2"]
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s))
}

/// The transport, host, port and URI of an `http://` or `https://` URL.
fn parse(target: &str, url: &str) -> Result<(Transport, String, u16, Uri), HttpSourceError> {
    let shown = crate::http_get::redacted_url(target);
    let bad = |reason: String| HttpSourceError::BadUrl {
        url: crate::http_get::redacted_url(url).into_owned(),
        reason,
    };
    let uri: Uri = target
        .parse()
        .map_err(|e| bad(format!("invalid URL {shown:?}: {e}")))?;
    let (transport, default_port) = match uri.scheme_str() {
        Some("http") => (Transport::Plain, 80),
        Some("https") => (Transport::TlsVerify, 443),
        other => {
            return Err(bad(format!(
                "unsupported protocol scheme {:?} in {shown:?} (http or https)",
                other.unwrap_or("")
            )));
        }
    };
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| bad(format!("no host in {shown:?}")))?
        .to_string();
    let port = uri.port_u16().unwrap_or(default_port);
    Ok((transport, host, port, uri))
}

/// A redirect's `Location`, absolute or relative to `base`.
fn resolve(base: &Uri, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let origin = format!(
        "{}://{}",
        base.scheme_str().unwrap_or("http"),
        base.authority().map_or("", |a| a.as_str())
    );
    if location.starts_with('/') {
        return format!("{origin}{location}");
    }
    let path = base.path();
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    format!("{origin}{dir}{location}")
}

/// Polls `source` every `period` (the first poll at once) and sends each new set
/// to the merger until cancelled or the merger is gone. An empty body sends the
/// empty set, as kubelet does, so the source counts as seen.
pub(crate) async fn run_http_source(
    mut source: UrlSource,
    period: Duration,
    tx: mpsc::Sender<SourceSnapshot>,
    cancel: CancellationToken,
) {
    info!(url = %source.shown, "watching URL");
    let mut ticker = tokio::time::interval(period.max(Duration::from_millis(10)));
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tx.closed() => return,
            _ = ticker.tick() => {}
        }
        let result = tokio::select! {
            () = cancel.cancelled() => return,
            r = source.poll() => r,
        };
        source.log(&result);
        let pods = match result {
            Ok(Poll::Pods(pods)) => Some(pods),
            Err(HttpSourceError::Empty { .. }) => Some(Vec::new()),
            _ => None,
        };
        if let Some(pods) = pods {
            debug!(url = %source.shown, pods = pods.len(), "read pods from URL");
            let snapshot = SourceSnapshot {
                source: HTTP_SOURCE,
                pods,
            };
            tokio::select! {
                sent = tx.send(snapshot) => if sent.is_err() { return },
                () = cancel.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What the test server answers, and the requests it saw (head only).
    #[derive(Default)]
    struct Served {
        status: u16,
        location: Option<String>,
        body: Vec<u8>,
        requests: Vec<String>,
    }

    /// A tiny HTTP/1.1 server: one answer per connection, then close.
    async fn server(served: Arc<Mutex<Served>>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Lives as long as the test's runtime.
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                // Not HTTP (a TLS hello): answer in plain HTTP at once.
                while !head.windows(4).any(|w| w == b"\r\n\r\n")
                    && (head.is_empty() || head.starts_with(b"GET"))
                {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = {
                    let mut s = served.lock().unwrap();
                    s.requests.push(String::from_utf8_lossy(&head).into_owned());
                    let mut reply = format!(
                        "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                        s.status,
                        s.body.len()
                    );
                    if let Some(l) = &s.location {
                        reply.push_str(&format!("location: {l}\r\n"));
                    }
                    reply.push_str("\r\n");
                    let mut reply = reply.into_bytes();
                    reply.extend_from_slice(&s.body);
                    reply
                };
                let _ = conn.write_all(&reply).await;
                let _ = conn.shutdown().await;
            }
        });
        format!("http://{addr}/pods")
    }

    fn serve(served: &Arc<Mutex<Served>>, status: u16, body: &str) {
        let mut s = served.lock().unwrap();
        s.status = status;
        s.body = body.as_bytes().to_vec();
    }

    const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#;

    fn list(items: &[&str]) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"PodList","items":[{}]}}"#,
            items.join(",")
        )
    }

    fn item(name: &str, image: &str) -> String {
        format!(
            r#"{{"metadata":{{"name":"{name}"}},"spec":{{"containers":[{{"name":"c","image":"{image}"}}]}}}}"#
        )
    }

    async fn source(headers: &[(&str, &[&str])]) -> (UrlSource, Arc<Mutex<Served>>) {
        let served = Arc::new(Mutex::new(Served::default()));
        let url = server(served.clone()).await;
        let headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.iter().map(ToString::to_string).collect()))
            .collect();
        (UrlSource::new(url, headers, "Node1".into()), served)
    }

    fn names(p: &Poll) -> Vec<String> {
        match p {
            Poll::Pods(pods) => pods
                .iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect(),
            Poll::Unchanged => panic!("expected pods"),
        }
    }

    #[tokio::test]
    async fn single_pod_is_defaulted_for_the_url() {
        let (mut src, served) = source(&[]).await;
        serve(&served, 200, POD);
        let Poll::Pods(pods) = src.poll().await.unwrap() else {
            panic!()
        };
        assert_eq!(pods.len(), 1);
        let pod = &pods[0];
        assert_eq!(pod.metadata.name.as_deref(), Some("web-node1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
        let ann = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[crate::pod::CONFIG_SOURCE_ANNOTATION], "http");
        assert_eq!(
            ann[crate::pod::CONFIG_HASH_ANNOTATION],
            *pod.metadata.uid.as_ref().unwrap()
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("Node1"));
        // No NoExecute toleration: kubelet adds it to file pods only.
        assert!(spec.tolerations.as_ref().is_none_or(Vec::is_empty));
        // The UID hashes the URL, not the node: another URL is another pod.
        let (mut other, served2) = source(&[]).await;
        serve(&served2, 200, POD);
        let Poll::Pods(again) = other.poll().await.unwrap() else {
            panic!()
        };
        assert_ne!(again[0].metadata.uid, pod.metadata.uid);
    }

    #[tokio::test]
    async fn pod_list_and_identical_body_no_op() {
        let (mut src, served) = source(&[]).await;
        let body = list(&[&item("a", "busybox"), &item("b", "busybox")]);
        serve(&served, 200, &body);
        assert_eq!(names(&src.poll().await.unwrap()), ["a-node1", "b-node1"]);
        assert!(matches!(src.poll().await.unwrap(), Poll::Unchanged));
        // An empty list is a good, empty set.
        serve(&served, 200, &list(&[]));
        assert_eq!(names(&src.poll().await.unwrap()), Vec::<String>::new());
        // YAML lists decode too (a plain `y` would be YAML 1.1's true, as kubelet reads it).
        serve(
            &served,
            200,
            "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: ylist}\n  spec: {containers: [{name: c, image: busybox}]}\n",
        );
        assert_eq!(names(&src.poll().await.unwrap()), ["ylist-node1"]);
    }

    #[tokio::test]
    async fn bad_pod_in_list_fails_the_whole_update() {
        let (mut src, served) = source(&[]).await;
        serve(&served, 200, &list(&[&item("a", "busybox")]));
        assert_eq!(names(&src.poll().await.unwrap()), ["a-node1"]);
        serve(
            &served,
            200,
            &list(&[&item("a", "busybox"), &item("b", "")]),
        );
        let e = src.poll().await.unwrap_err().to_string();
        assert!(e.starts_with(&src.url), "{e}");
        assert!(e.contains("items[1].spec.containers[0].image"), "{e}");
        // Not remembered: the same bad body fails again rather than being a no-op.
        assert!(src.poll().await.is_err());
        // The last good body again: the merger still holds its set, nothing to send.
        serve(&served, 200, &list(&[&item("a", "busybox")]));
        assert!(matches!(src.poll().await.unwrap(), Poll::Unchanged));
        serve(
            &served,
            200,
            r#"{"apiVersion":"v1","kind":"PodList","items":[{"kind":"Service"}]}"#,
        );
        let e = src.poll().await.unwrap_err().to_string();
        assert!(e.contains("items[0].kind"), "{e}");
        serve(&served, 200, "not: [a pod");
        assert!(src.poll().await.is_err());
    }

    #[tokio::test]
    async fn non_200_and_empty_body_are_errors() {
        let (mut src, served) = source(&[]).await;
        serve(&served, 200, POD);
        src.poll().await.unwrap();
        serve(&served, 404, "nope");
        let e = src.poll().await.unwrap_err();
        assert!(
            matches!(e, HttpSourceError::Status { status, .. } if status == StatusCode::NOT_FOUND),
            "{e}"
        );
        serve(&served, 200, "");
        let e = src.poll().await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("zero-length data received from {}", src.url)
        );
        // After the empty set, the old body is news again.
        serve(&served, 200, POD);
        assert_eq!(names(&src.poll().await.unwrap()), ["web-node1"]);
    }

    #[tokio::test]
    async fn headers_are_sent_and_redirects_followed() {
        let (mut src, served) =
            source(&[("X-Team", &["a", "b"]), ("Authorization", &["Bearer t"])]).await;
        serve(&served, 200, POD);
        src.poll().await.unwrap();
        let req = served.lock().unwrap().requests[0].to_ascii_lowercase();
        assert!(req.starts_with("get /pods http/1.1"), "{req}");
        assert!(
            req.contains("x-team: a\r\n") && req.contains("x-team: b\r\n"),
            "{req}"
        );
        assert!(req.contains("authorization: bearer t\r\n"), "{req}");
        // A redirect loop ends after MAX_REDIRECTS.
        {
            let mut s = served.lock().unwrap();
            s.status = 302;
            s.location = Some("/pods".into());
        }
        let e = src.poll().await.unwrap_err();
        assert!(matches!(e, HttpSourceError::TooManyRedirects { .. }), "{e}");
        assert_eq!(served.lock().unwrap().requests.len(), 1 + MAX_REDIRECTS + 1);
    }

    #[tokio::test]
    async fn url_user_info_is_basic_auth_never_the_host_header_nor_a_message() {
        let served = Arc::new(Mutex::new(Served::default()));
        let url = server(served.clone())
            .await
            .replace("http://", "http://bob:s3cr%40t@");
        let mut src = UrlSource::new(url, BTreeMap::new(), "Node1".into());
        serve(&served, 200, POD);
        src.poll().await.unwrap();
        let req = served.lock().unwrap().requests[0].clone();
        let lower = req.to_ascii_lowercase();
        assert!(
            lower.contains("authorization: basic ym9ionmzy3jada==\r\n"),
            "{req}"
        );
        assert!(!req.contains("bob"), "{req}");
        // A configured Authorization header wins, as in Go's client.
        let mut src = UrlSource::new(
            src.url.clone(),
            [("Authorization".to_string(), vec!["Bearer t".to_string()])].into(),
            "Node1".into(),
        );
        src.poll().await.unwrap();
        let req = served.lock().unwrap().requests[1].to_ascii_lowercase();
        assert!(req.contains("authorization: bearer t\r\n"), "{req}");
        assert!(!req.contains("basic"), "{req}");
        // Errors name the URL with its password redacted.
        serve(&served, 500, "");
        let e = src.poll().await.unwrap_err().to_string();
        assert!(e.contains("bob:xxxxx@") && !e.contains("s3cr"), "{e}");
    }

    /// A token as the user info and credentials in the query never reach a message.
    #[tokio::test]
    async fn token_user_info_and_query_credentials_are_redacted_in_errors() {
        let served = Arc::new(Mutex::new(Served::default()));
        let url = server(served.clone())
            .await
            .replace("http://", "http://ghp_t0ken@");
        let url = format!("{url}pods.yaml?v=1&token=q1&X-Amz-Signature=q2&sig=q3");
        let mut src = UrlSource::new(url, BTreeMap::new(), "Node1".into());
        serve(&served, 500, "");
        let e = src.poll().await.unwrap_err().to_string();
        for secret in ["ghp_t0ken", "q1", "q2", "q3"] {
            assert!(!e.contains(secret), "{secret} in {e}");
        }
        assert!(e.contains("xxxxx@") && e.contains("v=1&token=xxxxx"), "{e}");
        let bad = UrlSource::new(
            "ftp://tok@h/?access_token=q4".into(),
            BTreeMap::new(),
            "Node1".into(),
        )
        .poll()
        .await
        .unwrap_err()
        .to_string();
        assert!(!bad.contains("tok@") && !bad.contains("q4"), "{bad}");
    }

    #[tokio::test]
    async fn credentials_stay_with_their_host_across_redirects() {
        let (mut src, first) =
            source(&[("X-Team", &["a"]), ("Authorization", &["Bearer t"])]).await;
        let other = Arc::new(Mutex::new(Served::default()));
        let other_url = server(other.clone()).await;
        serve(&other, 200, POD);
        {
            let mut s = first.lock().unwrap();
            s.status = 301;
            // Another host name for the same machine: a different host to Go's client.
            s.location = Some(other_url.replace("127.0.0.1", "localhost"));
        }
        assert_eq!(names(&src.poll().await.unwrap()), ["web-node1"]);
        let req = other.lock().unwrap().requests[0].to_ascii_lowercase();
        assert!(req.contains("x-team: a\r\n"), "{req}");
        assert!(!req.contains("authorization"), "{req}");
    }

    #[tokio::test]
    async fn body_size_is_bounded() {
        let (mut src, served) = source(&[]).await;
        let mut big = POD.to_string();
        big.push_str(&" ".repeat(MAX_MANIFEST_BYTES + 1 - big.len()));
        serve(&served, 200, &big);
        let e = src.poll().await.unwrap_err();
        assert!(matches!(e, HttpSourceError::TooLarge { .. }), "{e}");
        big.pop();
        serve(&served, 200, &big);
        assert_eq!(names(&src.poll().await.unwrap()), ["web-node1"]);
    }

    #[tokio::test]
    async fn quiet_after_three_failures_in_a_row() {
        let (mut src, served) = source(&[]).await;
        serve(&served, 500, "");
        let mut seen = Vec::new();
        for _ in 0..5 {
            let r = src.poll().await;
            seen.push(src.log(&r));
        }
        use Loudness::*;
        assert_eq!(
            seen,
            [
                Some(Warn),
                Some(Warn),
                Some(Warn),
                Some(LastWarn),
                Some(Quiet)
            ]
        );
        serve(&served, 200, POD);
        let r = src.poll().await;
        assert_eq!(src.log(&r), None);
        serve(&served, 500, "");
        let r = src.poll().await;
        assert_eq!(src.log(&r), Some(Warn), "a success resets the count");
    }

    #[tokio::test]
    async fn bad_urls_and_tls_are_clear_errors() {
        let mut src = UrlSource::new("ftp://x/pods".into(), BTreeMap::new(), "n".into());
        let e = src.poll().await.unwrap_err().to_string();
        assert!(e.contains("unsupported protocol scheme \"ftp\""), "{e}");
        // https to a plain-HTTP server: the handshake fails, nothing is decoded.
        let (plain, served) = source(&[]).await;
        serve(&served, 200, POD);
        let url = plain.url.replace("http://", "https://");
        let mut src = UrlSource::new(url, BTreeMap::new(), "n".into());
        let e = src.poll().await.unwrap_err();
        assert!(
            matches!(
                e,
                HttpSourceError::Get {
                    source: HttpGetError::Tls(_),
                    ..
                }
            ),
            "{e}"
        );
    }

    #[tokio::test]
    async fn run_sends_sets_and_keeps_the_last_on_errors() {
        let (src, served) = source(&[]).await;
        serve(&served, 200, POD);
        let (tx, mut rx) = mpsc::channel(4);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run_http_source(
            src,
            Duration::from_millis(20),
            tx,
            cancel.clone(),
        ));
        let first = rx.recv().await.unwrap();
        assert_eq!((first.source, first.pods.len()), (HTTP_SOURCE, 1));
        serve(&served, 503, "");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(rx.try_recv().is_err(), "an error sends nothing");
        serve(&served, 200, "");
        assert!(
            rx.recv().await.unwrap().pods.is_empty(),
            "an empty body sends the empty set"
        );
        cancel.cancel();
        task.await.unwrap();
    }
}

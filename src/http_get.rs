//! The one HTTP/1.1 GET that kubelet's own checks make: httpGet probes and httpGet
//! lifecycle hooks. One connection (plain, or TLS without certificate checks as
//! kubelet dials them), one request, and an answer whose body is read only up to a
//! bound. Each caller decides what the answer means.

use std::io;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

/// Why a GET got no answer (the words follow Go's client, which kubelet's messages show).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HttpGetError {
    #[error("dial tcp: {0}")]
    Dial(io::Error),
    #[error("tls: {0}")]
    Tls(io::Error),
    #[error("bad request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("reading body: {0}")]
    Body(hyper::Error),
}

/// What came back: the status, the `Location` header, and the body's first bytes.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub location: Option<String>,
    pub body: Vec<u8>,
}

/// A URL as logs, errors and `/configz` may show it, every credential shape replaced
/// by `xxxxx`: the password of the user info (as Go's `URL.Redacted`), a user info
/// that is a user alone (`https://TOKEN@host`, a token more often than a name), and
/// the value of each query parameter whose name says it carries a credential (see
/// [`is_credential_param`]: `token`, `access_token`, `X-Amz-Signature`, `sig`…).
pub(crate) fn redacted_url(url: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:xxxxx@{host}"),
            None => format!("xxxxx@{host}"),
        },
        None => authority.to_string(),
    };
    let (before_fragment, fragment) = tail.split_at(tail.find('#').unwrap_or(tail.len()));
    let tail = match before_fragment.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if is_credential_param(name) => format!("{name}=xxxxx"),
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}{fragment}", pairs.join("&"))
        }
        None => tail.to_string(),
    };
    let shown = format!("{scheme}://{authority}{tail}");
    if shown == url {
        url.into()
    } else {
        shown.into()
    }
}

/// Whether a query parameter's name (percent-decoded, any case) says its value is a
/// credential: a token, key, secret, password or signature of the common schemes
/// (OAuth, S3 and GCS presigned URLs, Azure SAS, API keys).
fn is_credential_param(name: &str) -> bool {
    const EXACT: [&str; 9] = [
        "sig",
        "key",
        "code",
        "auth",
        "authorization",
        "pass",
        "pwd",
        "session",
        "jwt",
    ];
    const WITHIN: [&str; 9] = [
        "token",
        "secret",
        "signature",
        "password",
        "passwd",
        "credential",
        "apikey",
        "api_key",
        "api-key",
    ];
    let name = crate::percent::decoded(name).to_ascii_lowercase();
    EXACT.contains(&name.as_str())
        || WITHIN.iter().any(|w| name.contains(w))
        || name.ends_with("_key")
        || name.ends_with("-key")
}

/// The authority without its user info: what a `Host` header carries.
pub(crate) fn host_of(authority: &str) -> &str {
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// The `Authorization` value for an authority's user info, which Go's client sends
/// as Basic auth (percent-decoded); `None` without user info.
pub(crate) fn basic_auth_of(authority: &str) -> Option<String> {
    use base64::Engine as _;
    let (user_info, _) = authority.rsplit_once('@')?;
    let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
    let pair = format!(
        "{}:{}",
        crate::percent::decoded(user),
        crate::percent::decoded(password)
    );
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    ))
}

/// A plain or TLS stream, so one handshake serves both.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// How a connection is made: plain, or TLS with or without checking the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Plain,
    /// kubelet's probes and hooks: a real handshake, no certificate checks.
    TlsSkipVerify,
    /// Go's default client (the manifest URL): the chain and name are verified
    /// against the system's trusted roots.
    TlsVerify,
}

/// Sends `request` to `host:port` and reads at most `max_body` bytes of the answer's
/// body. The connection lives only as long as this call.
pub(crate) async fn get(
    https: bool,
    host: &str,
    port: u16,
    request: Request<Empty<Bytes>>,
    max_body: usize,
) -> Result<Answer, HttpGetError> {
    let transport = if https {
        Transport::TlsSkipVerify
    } else {
        Transport::Plain
    };
    get_over(transport, host, port, request, max_body).await
}

/// [`get`] with the transport chosen by the caller.
pub(crate) async fn get_over(
    transport: Transport,
    host: &str,
    port: u16,
    request: Request<Empty<Bytes>>,
    max_body: usize,
) -> Result<Answer, HttpGetError> {
    let bare = host.trim_matches(['[', ']']);
    let addr = if bare.contains(':') {
        format!("[{bare}]:{port}")
    } else {
        format!("{bare}:{port}")
    };
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(HttpGetError::Dial)?;
    let stream: Box<dyn Stream> = match transport {
        Transport::Plain => Box::new(tcp),
        Transport::TlsSkipVerify => Box::new(
            crate::tls::connect(tcp, bare)
                .await
                .map_err(HttpGetError::Tls)?,
        ),
        Transport::TlsVerify => Box::new(
            crate::tls::connect_verified(tcp, bare)
                .await
                .map_err(HttpGetError::Tls)?,
        ),
    };
    exchange(stream, request, max_body).await
}

/// Sends `request` over an established `stream` (plain or TLS, dialled by the
/// caller) and reads at most `max_body` bytes of the answer's body.
async fn exchange<S>(
    stream: S,
    request: Request<Empty<Bytes>>,
    max_body: usize,
) -> Result<Answer, HttpGetError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let conn = async move {
        let _ = conn.await;
    };
    let send = async {
        let resp = sender.send_request(request).await?;
        let status = resp.status();
        let location = resp
            .headers()
            .get(hyper::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = resp.into_body();
        let mut read = Vec::new();
        while read.len() < max_body {
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        read.extend_from_slice(data);
                    }
                }
                Some(Err(e)) => return Err(HttpGetError::Body(e)),
                None => break,
            }
        }
        read.truncate(max_body);
        Ok(Answer {
            status,
            location,
            body: read,
        })
    };
    tokio::pin!(send, conn);
    tokio::select! {
        r = &mut send => r,
        // The server closed the connection: whatever the request got is its answer.
        () = &mut conn => send.await,
    }
}

#[cfg(test)]
mod tests {
    use super::{basic_auth_of, host_of, redacted_url};

    #[test]
    fn user_info_is_redacted_in_urls_and_sent_as_basic_auth() {
        assert_eq!(
            redacted_url("https://bob:s3cr%40t@example.com:8443/p?q=a@b"),
            "https://bob:xxxxx@example.com:8443/p?q=a@b"
        );
        // A user alone is most often a token (GitHub's, a presigned proxy's).
        assert_eq!(
            redacted_url("http://bob@example.com/x"),
            "http://xxxxx@example.com/x"
        );
        assert_eq!(
            redacted_url("https://ghp_abc123@raw.example.com/pods.yaml"),
            "https://xxxxx@raw.example.com/pods.yaml"
        );
        assert_eq!(
            redacted_url("http://example.com/a@b"),
            "http://example.com/a@b"
        );
        assert_eq!(redacted_url("not a url"), "not a url");
        // Query credentials, whatever their case or encoding; other parameters kept.
        for (url, shown) in [
            ("https://h/p?token=abc", "https://h/p?token=xxxxx"),
            (
                "https://h/p?a=1&access_token=abc&b=2",
                "https://h/p?a=1&access_token=xxxxx&b=2",
            ),
            (
                "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=AK%2F1&X-Amz-Signature=f00&X-Amz-Security-Token=t",
                "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=xxxxx&X-Amz-Signature=xxxxx&X-Amz-Security-Token=xxxxx",
            ),
            (
                "https://a.blob.core.windows.net/c/p?sv=2020&sp=r&sig=abc%3D",
                "https://a.blob.core.windows.net/c/p?sv=2020&sp=r&sig=xxxxx",
            ),
            (
                "https://storage.googleapis.com/b/o?X-Goog-Signature=00&x=1",
                "https://storage.googleapis.com/b/o?X-Goog-Signature=xxxxx&x=1",
            ),
            (
                "http://h/?apikey=k&api_key=k&private_key=k",
                "http://h/?apikey=xxxxx&api_key=xxxxx&private_key=xxxxx",
            ),
            (
                "http://h/?client_secret=s&password=p",
                "http://h/?client_secret=xxxxx&password=xxxxx",
            ),
            ("http://h/?%74oken=abc", "http://h/?%74oken=xxxxx"),
            ("http://h/?TOKEN=abc#frag", "http://h/?TOKEN=xxxxx#frag"),
            (
                "http://h/?design=1&monkey=2&flag",
                "http://h/?design=1&monkey=2&flag",
            ),
            ("https://u:p@h/?token=t", "https://u:xxxxx@h/?token=xxxxx"),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
        }
        assert_eq!(host_of("bob:pw@example.com:8443"), "example.com:8443");
        assert_eq!(host_of("[::1]:80"), "[::1]:80");
        // "bob:s3cr@t", as Go's SetBasicAuth sends it.
        assert_eq!(
            basic_auth_of("bob:s3cr%40t@example.com").as_deref(),
            Some("Basic Ym9iOnMzY3JAdA==")
        );
        assert_eq!(basic_auth_of("example.com"), None);
    }
}

//! Running one plugin as kubelet's `execPlugin` does: `<bin-dir>/<name> args…` with
//! the provider's env added to oxlet's own, a `CredentialProviderRequest` on stdin, a
//! `CredentialProviderResponse` read from stdout, a one-minute limit, and stderr in
//! the error.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use super::super::docker_config::{Credential, DockerConfig};

/// kubelet's catch-all limit on one plugin run.
pub(crate) const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// The most stdout read (a response is a few registries' logins).
const MAX_STDOUT: usize = 1 << 20;
/// The most stderr kept for the error.
const MAX_STDERR: usize = 4096;

/// What a plugin is asked for one image.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    pub image: &'a str,
    /// Only for `credentialprovider.kubelet.k8s.io/v1`.
    pub service_account_token: Option<&'a str>,
    pub service_account_annotations: &'a BTreeMap<String, String>,
}

/// How a response's logins are cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CacheKeyType {
    Image,
    Registry,
    Global,
}

/// A decoded, checked response.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    pub cache_key_type: CacheKeyType,
    /// None: the provider's `defaultCacheDuration`.
    pub cache_duration: Option<Duration>,
    pub auth: DockerConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawResponse {
    kind: String,
    /// Checked before decoding; declared so the strict decode accepts it.
    #[allow(dead_code)]
    api_version: String,
    #[serde(default)]
    cache_key_type: String,
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, RawAuth>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// One provider's binary and how it is run.
#[derive(Debug, Clone)]
pub(crate) struct ExecPlugin {
    pub name: String,
    pub binary: PathBuf,
    pub api_version: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
}

impl ExecPlugin {
    /// The request's JSON in the provider's protocol version.
    fn encode(&self, r: &Request<'_>) -> Vec<u8> {
        let mut body = serde_json::json!({
            "kind": "CredentialProviderRequest",
            "apiVersion": self.api_version,
            "image": r.image,
        });
        if self.api_version == super::config::PLUGIN_V1 {
            if let Some(t) = r.service_account_token.filter(|t| !t.is_empty()) {
                body["serviceAccountToken"] = t.into();
            }
            if !r.service_account_annotations.is_empty() {
                body["serviceAccountAnnotations"] =
                    serde_json::to_value(r.service_account_annotations).unwrap_or_default();
            }
        }
        body.to_string().into_bytes()
    }

    /// Runs the plugin once; the error is kubelet's text, never a credential.
    pub(crate) async fn run(&self, r: &Request<'_>) -> Result<Response, PluginRunError> {
        let failed = |why: &str, stderr: &str| PluginRunError::Exec {
            plugin: self.name.clone(),
            image: r.image.to_string(),
            why: why.to_string(),
            stderr: stderr.to_string(),
        };
        let mut child = tokio::process::Command::new(&self.binary)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| failed(&e.to_string(), ""))?;
        let request = self.encode(r);
        let mut stdin = child.stdin.take().expect("piped");
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let work = async {
            // A plugin that exits without reading its stdin is no error by itself.
            let _ = stdin.write_all(&request).await;
            drop(stdin);
            let (out, err) = tokio::join!(
                read_bounded(&mut stdout, MAX_STDOUT),
                read_bounded(&mut stderr, MAX_STDERR)
            );
            let status = child.wait().await;
            (out, err, status)
        };
        let Ok((out, err, status)) = tokio::time::timeout(self.timeout, work).await else {
            return Err(failed("context deadline exceeded", ""));
        };
        let err_text = String::from_utf8_lossy(&err.0).trim_end().to_string();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => return Err(failed(&exit_text(s), &err_text)),
            Err(e) => return Err(failed(&e.to_string(), &err_text)),
        }
        if out.1 {
            return Err(PluginRunError::TooMuchOutput(self.name.clone()));
        }
        self.decode(&out.0)
    }

    /// kubelet's checks: the response's apiVersion is the provider's, the kind and
    /// fields are the API's, and the cache key type is one it knows.
    fn decode(&self, data: &[u8]) -> Result<Response, PluginRunError> {
        let head: serde_json::Value =
            serde_json::from_slice(data).map_err(|e| PluginRunError::Gvk(e.to_string()))?;
        let got = head["apiVersion"].as_str().unwrap_or_default();
        if got != self.api_version {
            return Err(PluginRunError::ApiVersion {
                expected: self.api_version.clone(),
                got: got.to_string(),
            });
        }
        // Never the decoder's own words: they may quote a credential.
        let undecodable = || PluginRunError::Undecodable;
        let raw: RawResponse = serde_json::from_value(head).map_err(|_| undecodable())?;
        if raw.kind != "CredentialProviderResponse" {
            return Err(undecodable());
        }
        let cache_key_type = match raw.cache_key_type.as_str() {
            "Image" => CacheKeyType::Image,
            "Registry" => CacheKeyType::Registry,
            "Global" => CacheKeyType::Global,
            other => return Err(PluginRunError::CacheKeyType(other.to_string())),
        };
        let cache_duration = match raw.cache_duration.as_deref() {
            None => None,
            Some(text) => {
                let d = crate::duration::parse_go_duration(text).map_err(|_| undecodable())?;
                Some(d.to_std().unwrap_or_default())
            }
        };
        let auth = (raw.auth.into_iter())
            .map(|(k, a)| {
                let c = Credential {
                    username: a.username,
                    password: a.password,
                };
                (k, c)
            })
            .collect();
        Ok(Response {
            cache_key_type,
            cache_duration,
            auth,
        })
    }
}

/// Why a plugin run gave no logins, in kubelet's words (never the decoder's, which
/// may quote a credential). Shared by the concurrent asks of one key, so `Clone`.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PluginRunError {
    #[error("error execing credential provider plugin {plugin} for image {image}: {why}: {stderr}")]
    Exec {
        plugin: String,
        image: String,
        why: String,
        stderr: String,
    },
    #[error("credential provider plugin {0} wrote more than {max} bytes", max = MAX_STDOUT)]
    TooMuchOutput(String),
    #[error("error reading GVK from response: {0}")]
    Gvk(String),
    #[error(
        "apiVersion from credential plugin response did not match expected apiVersion:{expected}, actual apiVersion:{got}"
    )]
    ApiVersion { expected: String, got: String },
    #[error("error decoding credential provider plugin response from stdout")]
    Undecodable,
    #[error("credential provider plugin did not return a valid cacheKeyType: {0:?}")]
    CacheKeyType(String),
}

/// Go's `exec.ExitError` text.
fn exit_text(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => format!("signal: {sig}"),
        _ => "exited".into(),
    }
}

/// Up to `max` bytes, and whether there was more (the rest is drained so the child
/// is not blocked on a full pipe).
async fn read_bounded(r: &mut (impl AsyncRead + Unpin), max: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut more = false;
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, more),
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                more |= n > room;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn plugin(dir: &std::path::Path, script: &str, api: &str) -> ExecPlugin {
        let binary = dir.join("p");
        std::fs::write(&binary, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        ExecPlugin {
            name: "p".into(),
            binary,
            api_version: api.into(),
            args: vec!["--flag".into()],
            env: vec![("PLUGIN_ENV".into(), "set".into())],
            timeout: Duration::from_secs(10),
        }
    }

    const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

    fn request<'a>(annotations: &'a BTreeMap<String, String>) -> Request<'a> {
        Request {
            image: "reg.io/team/app",
            service_account_token: Some("tok"),
            service_account_annotations: annotations,
        }
    }

    #[tokio::test]
    async fn the_request_goes_in_and_the_response_comes_out() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("seen");
        let argv = dir.path().join("argv");
        let script = format!(
            "cat > {seen}; echo \"$1 $PLUGIN_ENV\" > {argv}\necho '{{\"kind\":\"CredentialProviderResponse\",\"apiVersion\":\"{V1}\",\"cacheKeyType\":\"Registry\",\"cacheDuration\":\"5m\",\"auth\":{{\"reg.io\":{{\"username\":\"u\",\"password\":\"p\"}}}}}}'",
            seen = seen.display(),
            argv = argv.display()
        );
        let p = plugin(dir.path(), &script, V1);
        let ann = BTreeMap::from([("a.io/x".to_string(), "1".to_string())]);
        let r = p.run(&request(&ann)).await.unwrap();
        assert_eq!(r.cache_key_type, CacheKeyType::Registry);
        assert_eq!(r.cache_duration, Some(Duration::from_secs(300)));
        assert_eq!(r.auth["reg.io"].username, "u");
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
        assert_eq!(json["kind"], "CredentialProviderRequest");
        assert_eq!(json["apiVersion"], V1);
        assert_eq!(json["image"], "reg.io/team/app");
        assert_eq!(json["serviceAccountToken"], "tok");
        assert_eq!(json["serviceAccountAnnotations"]["a.io/x"], "1");
        let argv = std::fs::read_to_string(&argv).unwrap();
        assert_eq!(
            argv.trim_end(),
            "--flag set",
            "the args, and the env added to oxlet's"
        );
    }

    #[tokio::test]
    async fn older_protocols_get_no_token() {
        let dir = tempfile::tempdir().unwrap();
        let ann = BTreeMap::new();
        let beta = "credentialprovider.kubelet.k8s.io/v1beta1";
        let p = plugin(dir.path(), "cat >&2; exit 3", beta);
        let e = p.run(&request(&ann)).await.unwrap_err().to_string();
        assert!(e.starts_with("error execing credential provider plugin p for image reg.io/team/app: exit status 3: {"), "{e}");
        assert!(!e.contains("tok"), "{e}");
    }

    #[tokio::test]
    async fn bad_responses_are_refused_with_kubelets_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let ann = BTreeMap::new();
        let reply = |body: &str| format!("cat >/dev/null; echo '{body}'");
        let cases = [
            (
                r#"{"kind":"CredentialProviderResponse","apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","cacheKeyType":"Image"}"#,
                "did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1",
            ),
            (
                &format!(r#"{{"kind":"CredentialProviderResponse","apiVersion":"{V1}"}}"#),
                "did not return a valid cacheKeyType: \"\"",
            ),
            (
                &format!(
                    r#"{{"kind":"CredentialProviderResponse","apiVersion":"{V1}","cacheKeyType":"Image","auth":{{"r.io":{{"username":"u","password":"secret","extra":1}}}}}}"#
                ),
                "error decoding credential provider plugin response from stdout",
            ),
        ];
        for (body, want) in cases {
            let e = plugin(dir.path(), &reply(body), V1)
                .run(&request(&ann))
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
        let mut slow = plugin(dir.path(), "sleep 5", V1);
        slow.timeout = Duration::from_millis(200);
        let e = slow.run(&request(&ann)).await.unwrap_err().to_string();
        assert!(e.ends_with("context deadline exceeded: "), "{e}");
    }
}

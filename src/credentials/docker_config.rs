//! The two docker config formats kubelet reads credentials from: `config.json` and the
//! `.dockerconfigjson` secret key (`{"auths": {registry: entry}}`), and the older
//! `.dockercfg` (`{registry: entry}`). An entry's `auth` (base64 of `user:password`)
//! wins over its `username` and `password` fields, as in kubelet's `DockerConfigEntry`.

use base64::Engine as _;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The largest docker config read: a Secret's own bound (etcd's 1 MiB object limit).
pub(crate) const MAX_CONFIG_BYTES: usize = 1 << 20;

/// One registry's login. `Debug` hides the password: it must never reach a log.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credential {
    pub username: String,
    pub password: String,
}

/// Where a login came from. kubelet's pull records (`imagePullCredentialsVerificationPolicy`)
/// keep it: an image pulled with a pod's secret is that secret's, one pulled with the
/// node's own logins is every pod's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LoginSource {
    /// One of a pod's `imagePullSecrets`.
    Secret {
        namespace: String,
        name: String,
        uid: String,
    },
    /// The node's own logins (its docker config files, or a credential provider
    /// plugin asked without a service account token).
    Node,
    /// A credential provider plugin's answer for a token of this service account.
    ServiceAccount {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// A login and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Login {
    pub credential: Credential,
    pub source: LoginSource,
}

impl Credential {
    /// The hex SHA-256 of the login as kubelet hashes it (its `AuthConfig` as JSON,
    /// empty fields left out): pull records keep it, never the login.
    pub(crate) fn hash(&self) -> String {
        /// Go's field order (a JSON object's keys are hashed as written).
        #[derive(serde::Serialize)]
        struct AuthConfig<'a> {
            #[serde(skip_serializing_if = "str::is_empty")]
            username: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            password: &'a str,
        }
        let json = serde_json::to_vec(&AuthConfig {
            username: &self.username,
            password: &self.password,
        })
        .expect("two strings");
        crate::hash::sha256_hex(&json)
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Registry key (`host[:port][/path]`, maybe with a scheme or a host glob) to login.
pub(crate) type DockerConfig = BTreeMap<String, Credential>;

/// Why a docker config could not be read; never quotes a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DockerConfigError {
    #[error("{what} is {size} bytes, over the {MAX_CONFIG_BYTES}-byte bound")]
    TooLarge { what: String, size: usize },
    #[error("{what} is not a docker config: {reason}")]
    NotJson { what: String, reason: String },
    #[error(
        "{what}: registry {registry:?}: field auth: {reason} (it must be base64(username:password))"
    )]
    Auth {
        what: String,
        registry: String,
        reason: &'static str,
    },
}

/// An entry as written; `auth` decoded afterwards.
#[derive(Deserialize)]
struct RawEntry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

#[derive(Deserialize)]
struct RawConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, RawEntry>,
}

/// Reads `config.json` or a `.dockerconfigjson` key; `what` names the source in errors.
pub(crate) fn parse_config_json(
    bytes: &[u8],
    what: &str,
) -> Result<DockerConfig, DockerConfigError> {
    check_size(bytes, what)?;
    let raw: RawConfigJson = serde_json::from_slice(bytes).map_err(|e| not_json(what, &e))?;
    entries(raw.auths, what)
}

/// Reads a `.dockercfg` file or secret key.
pub(crate) fn parse_dockercfg(bytes: &[u8], what: &str) -> Result<DockerConfig, DockerConfigError> {
    check_size(bytes, what)?;
    let raw: BTreeMap<String, RawEntry> =
        serde_json::from_slice(bytes).map_err(|e| not_json(what, &e))?;
    entries(raw, what)
}

fn check_size(bytes: &[u8], what: &str) -> Result<(), DockerConfigError> {
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(DockerConfigError::TooLarge {
            what: what.to_string(),
            size: bytes.len(),
        });
    }
    Ok(())
}

fn not_json(what: &str, e: &serde_json::Error) -> DockerConfigError {
    // serde's message names the line and column, never the value.
    DockerConfigError::NotJson {
        what: what.to_string(),
        reason: e.to_string(),
    }
}

fn entries(raw: BTreeMap<String, RawEntry>, what: &str) -> Result<DockerConfig, DockerConfigError> {
    let mut out = DockerConfig::new();
    for (registry, e) in raw {
        let cred = if e.auth.is_empty() {
            Credential {
                username: e.username,
                password: e.password,
            }
        } else {
            decode_auth(&e.auth).map_err(|reason| DockerConfigError::Auth {
                what: what.to_string(),
                registry: registry.clone(),
                reason,
            })?
        };
        out.insert(registry, cred);
    }
    Ok(out)
}

/// `auth`: base64 of `user:password`, padded or not (kubelet takes either).
fn decode_auth(field: &str) -> Result<Credential, &'static str> {
    let engine = if field.trim().ends_with('=') {
        &base64::engine::general_purpose::STANDARD
    } else {
        &base64::engine::general_purpose::STANDARD_NO_PAD
    };
    let decoded = engine.decode(field).map_err(|_| "not base64")?;
    let text = String::from_utf8(decoded).map_err(|_| "not UTF-8 once decoded")?;
    let (username, password) = text.split_once(':').ok_or("no ':' once decoded")?;
    Ok(Credential {
        username: username.to_string(),
        password: password.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn config_json_auth_wins_over_username_and_password() {
        let text = format!(
            r#"{{"auths":{{"reg.example.com":{{"username":"u","password":"p","auth":"{}"}},
            "other.io:5000/team":{{"username":"bob","password":"pw:with:colons"}}}}}}"#,
            b64("alice:se:cret")
        );
        let cfg = parse_config_json(text.as_bytes(), "config.json").unwrap();
        assert_eq!(cfg["reg.example.com"].username, "alice");
        assert_eq!(cfg["reg.example.com"].password, "se:cret");
        assert_eq!(cfg["other.io:5000/team"].password, "pw:with:colons");
    }

    #[test]
    fn unpadded_auth_is_read_too() {
        let padded = b64("ab:c");
        assert!(padded.ends_with('='));
        let text = format!(
            r#"{{"r.io":{{"auth":"{}"}}}}"#,
            padded.trim_end_matches('=')
        );
        let cfg = parse_dockercfg(text.as_bytes(), "s").unwrap();
        assert_eq!(cfg["r.io"].username, "ab");
        assert_eq!(cfg["r.io"].password, "c");
    }

    #[test]
    fn bad_input_names_the_source_and_registry_but_never_the_secret() {
        let text = format!(r#"{{"auths":{{"r.io":{{"auth":"{}"}}}}}}"#, b64("nocolon"));
        let e = parse_config_json(text.as_bytes(), "secret default/pull").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("secret default/pull") && msg.contains("\"r.io\""),
            "{msg}"
        );
        assert!(msg.contains("no ':'"), "{msg}");
        assert!(
            !msg.contains("nocolon") && !msg.contains(&b64("nocolon")),
            "{msg}"
        );

        let e = parse_dockercfg(b"[1,2]", "secret default/old").unwrap_err();
        assert!(matches!(e, DockerConfigError::NotJson { .. }), "{e}");
        let e = parse_config_json(&vec![b' '; MAX_CONFIG_BYTES + 1], "big").unwrap_err();
        assert!(matches!(e, DockerConfigError::TooLarge { .. }), "{e}");
        let e = parse_dockercfg(br#"{"r.io":{"auth":"!!"}}"#, "s").unwrap_err();
        assert!(e.to_string().contains("not base64"), "{e}");
    }

    #[test]
    fn debug_never_shows_a_password() {
        let c = Credential {
            username: "alice".into(),
            password: "hunter2".into(),
        };
        let shown = format!("{c:?}");
        assert!(
            shown.contains("alice") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}

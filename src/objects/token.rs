//! kubelet's token manager (`pkg/kubelet/token`): service-account tokens bound to the
//! pod, cached per (namespace, service account, audience, expiry, pod UID), and
//! requested again once 80 % of their lifetime has passed or they are 24 h old.
//! kubelet adds up to 10 s of random jitter to both limits; oxlet does not, so the
//! rotation time is exact (a node's few pods do not need their renewals spread).

use crate::locks::Locked as _;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::Pod;

use super::{Clock, ObjectError, ObjectSource, TokenWant};

/// kubelet's `maxTTL`: a token is renewed at the latest a day after it was issued.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Most tokens kept; beyond it the one expiring first is dropped.
const MAX_TOKENS: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    service_account: String,
    want: TokenWant,
    pod_uid: String,
}

#[derive(Debug, Clone)]
struct Token {
    token: String,
    expires: SystemTime,
    seconds: i64,
}

impl Token {
    /// kubelet's `requiresRefresh`, without jitter.
    fn requires_refresh(&self, now: SystemTime) -> bool {
        let lifetime = Duration::from_secs(self.seconds.max(0) as u64);
        let issued = self.expires.checked_sub(lifetime).unwrap_or(self.expires);
        if now > issued + MAX_TTL {
            return true;
        }
        let fifth = Duration::from_secs((self.seconds.max(0) as u64 * 20) / 100);
        now > self.expires.checked_sub(fifth).unwrap_or(self.expires)
    }
}

pub(super) struct TokenCache {
    clock: Clock,
    tokens: Mutex<HashMap<Key, Token>>,
}

impl TokenCache {
    pub(super) fn new(clock: Clock) -> Self {
        TokenCache {
            clock,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// The token for `want`, from the cache unless it needs rotating. A failed
    /// rotation keeps serving the old token while it is still valid (kubelet's
    /// `GetServiceAccountToken`).
    pub(super) async fn get(
        &self,
        source: &dyn ObjectSource,
        pod: &Pod,
        sa: &str,
        want: &TokenWant,
    ) -> Result<String, ObjectError> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let key = Key {
            namespace: ns.to_string(),
            service_account: sa.to_string(),
            want: want.clone(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        let now = (self.clock)();
        let old = self.tokens.locked().get(&key).cloned();
        if let Some(t) = &old
            && !t.requires_refresh(now)
        {
            return Ok(t.token.clone());
        }
        let request = bound_request(pod, want);
        let fresh = source.token(ns, sa, &request).await.and_then(|tr| {
            let status = tr.status.unwrap_or_default();
            let seconds =
                (tr.spec.and_then(|s| s.expiration_seconds)).unwrap_or(want.expiration_seconds);
            let (Some(token), Some(expires)) = (status.token, status.expiration_timestamp) else {
                return Err(token_error(ns, sa, "no token or expiry in the response"));
            };
            Ok(Token {
                token,
                expires: SystemTime::from(expires.0),
                seconds,
            })
        });
        match fresh {
            Ok(t) => {
                let mut tokens = self.tokens.locked();
                if tokens.len() >= MAX_TOKENS && !tokens.contains_key(&key) {
                    let first = (tokens.iter())
                        .min_by_key(|(_, t)| t.expires)
                        .map(|(k, _)| k.clone());
                    if let Some(k) = first {
                        tokens.remove(&k);
                    }
                }
                tokens.insert(key, t.clone());
                Ok(t.token)
            }
            Err(e) => match old.filter(|t| now < t.expires) {
                Some(t) => {
                    tracing::warn!(error = %e, "cannot rotate a service account token; the current one is still valid");
                    Ok(t.token)
                }
                None => Err(e),
            },
        }
    }

    pub(super) fn forget_pod(&self, uid: &str) {
        self.tokens.locked().retain(|k, _| k.pod_uid != uid);
    }
}

fn token_error(ns: &str, sa: &str, message: &str) -> ObjectError {
    ObjectError::Token {
        namespace: ns.to_string(),
        name: sa.to_string(),
        message: message.to_string(),
    }
}

/// The TokenRequest kubelet's projected volume plugin sends: the projection's audience
/// and expiry, bound to the pod by name and UID.
pub(super) fn bound_request(pod: &Pod, want: &TokenWant) -> TokenRequest {
    TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(want.audience.iter().cloned().collect()),
            expiration_seconds: Some(want.expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_string()),
                kind: Some("Pod".to_string()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_at_eighty_percent_or_a_day() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Token {
            token: "t".into(),
            expires: t0 + Duration::from_secs(3600),
            seconds: 3600,
        };
        assert!(!hour.requires_refresh(t0));
        assert!(!hour.requires_refresh(t0 + Duration::from_secs(2880)));
        assert!(hour.requires_refresh(t0 + Duration::from_secs(2881)));
        let week = 7 * 24 * 3600;
        let long = Token {
            token: "t".into(),
            expires: t0 + Duration::from_secs(week),
            seconds: week as i64,
        };
        assert!(!long.requires_refresh(t0 + Duration::from_secs(24 * 3600)));
        assert!(long.requires_refresh(t0 + Duration::from_secs(24 * 3600 + 1)));
    }
}

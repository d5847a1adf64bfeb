//! A provider's cached logins (kubelet's expiration store): keyed by the image, its
//! registry or one global key, each joined with the service account's key in token
//! mode; an entry lives until its expiry, expired entries are purged every 15 minutes,
//! and the store is bounded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::super::docker_config::DockerConfig;
use crate::locks::Locked as _;

/// kubelet's `cachePurgeInterval`.
const PURGE_INTERVAL: Duration = Duration::from_secs(15 * 60);
/// Most entries kept; beyond it the one expiring first goes.
pub(super) const MAX_ENTRIES: usize = 4096;
/// kubelet's `globalCacheKey`.
pub(super) const GLOBAL_KEY: &str = "global";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct CacheKey {
    /// The image, its registry, or [`GLOBAL_KEY`].
    pub base: String,
    /// The service account's part (empty without a token).
    pub account: String,
}

struct Entry {
    logins: DockerConfig,
    expires: Instant,
}

struct Store {
    entries: HashMap<CacheKey, Entry>,
    last_purge: Instant,
}

pub(super) struct Cache {
    store: Mutex<Store>,
}

/// kubelet's `parseRegistry`: the image's first path segment (host and port).
pub(super) fn registry_of(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

impl Cache {
    pub(super) fn new(now: Instant) -> Cache {
        Cache {
            store: Mutex::new(Store {
                entries: HashMap::new(),
                last_purge: now,
            }),
        }
    }

    /// The cached logins for `image`: by image, then registry, then global key.
    pub(super) fn get(&self, image: &str, account: &str, now: Instant) -> Option<DockerConfig> {
        let mut store = self.store.locked();
        if now.duration_since(store.last_purge) > PURGE_INTERVAL {
            store.entries.retain(|_, e| e.expires >= now);
            store.last_purge = now;
        }
        for base in [image, registry_of(image), GLOBAL_KEY] {
            let key = CacheKey {
                base: base.to_string(),
                account: account.to_string(),
            };
            match store.entries.get(&key) {
                Some(e) if now > e.expires => {
                    store.entries.remove(&key);
                }
                Some(e) => return Some(e.logins.clone()),
                None => {}
            }
        }
        None
    }

    pub(super) fn put(&self, key: CacheKey, logins: DockerConfig, expires: Instant, now: Instant) {
        let mut store = self.store.locked();
        if store.entries.len() >= MAX_ENTRIES && !store.entries.contains_key(&key) {
            store.entries.retain(|_, e| e.expires >= now);
            if store.entries.len() >= MAX_ENTRIES {
                let first = (store.entries.iter())
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone());
                if let Some(k) = first {
                    store.entries.remove(&k);
                }
            }
        }
        store.entries.insert(key, Entry { logins, expires });
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.store.locked().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Credential;

    fn logins(user: &str) -> DockerConfig {
        let c = Credential {
            username: user.into(),
            password: "p".into(),
        };
        DockerConfig::from([("reg.io".to_string(), c)])
    }

    fn key(base: &str, account: &str) -> CacheKey {
        CacheKey {
            base: base.into(),
            account: account.into(),
        }
    }

    #[test]
    fn entries_serve_until_they_expire_and_by_the_widest_key_last() {
        let t0 = Instant::now();
        let cache = Cache::new(t0);
        let min = Duration::from_secs(60);
        cache.put(key("reg.io/a", ""), logins("image"), t0 + min, t0);
        cache.put(key("reg.io", ""), logins("registry"), t0 + 2 * min, t0);
        cache.put(key(GLOBAL_KEY, ""), logins("global"), t0 + 3 * min, t0);
        let user = |image: &str, at| {
            cache
                .get(image, "", at)
                .map(|c| c["reg.io"].username.clone())
        };
        assert_eq!(user("reg.io/a", t0).as_deref(), Some("image"));
        assert_eq!(user("reg.io/b", t0).as_deref(), Some("registry"));
        assert_eq!(user("other.io/b", t0).as_deref(), Some("global"));
        assert_eq!(
            user("reg.io/a", t0 + min).as_deref(),
            Some("image"),
            "good until its expiry"
        );
        assert_eq!(
            user("reg.io/a", t0 + min + Duration::from_secs(1)).as_deref(),
            Some("registry")
        );
        assert_eq!(user("reg.io/a", t0 + 4 * min), None);
        assert!(
            cache.get("reg.io/a", "sa", t0).is_none(),
            "another account's key"
        );
    }

    #[test]
    fn expired_entries_are_purged_and_the_store_is_bounded() {
        let t0 = Instant::now();
        let cache = Cache::new(t0);
        for i in 0..10 {
            cache.put(
                key(&format!("r.io/{i}"), ""),
                logins("u"),
                t0 + Duration::from_secs(1),
                t0,
            );
        }
        assert_eq!(cache.len(), 10);
        let later = t0 + PURGE_INTERVAL + Duration::from_secs(1);
        assert!(cache.get("x.io/y", "", later).is_none());
        assert_eq!(cache.len(), 0, "the periodic purge drops what expired");
        for i in 0..MAX_ENTRIES + 5 {
            let exp = later + Duration::from_secs(100 + i as u64);
            cache.put(key(&format!("r.io/{i}"), ""), logins("u"), exp, later);
        }
        assert_eq!(cache.len(), MAX_ENTRIES);
        assert!(
            cache.get("r.io/0", "", later).is_none(),
            "the first to expire went"
        );
        assert!(
            cache
                .get(&format!("r.io/{}", MAX_ENTRIES + 4), "", later)
                .is_some()
        );
    }
}

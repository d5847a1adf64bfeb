//! The key-value half of the cache: facts that are not series (koordlet keeps the CPU
//! topology and NUMA info here). In memory only, like koordlet's, and bounded in keys
//! and value size, since nothing ever expires.

use crate::locks::Locked as _;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Keys kept at most.
pub(crate) const MAX_KEYS: usize = 256;
/// Largest value, serialized, in bytes.
pub(crate) const MAX_VALUE_BYTES: usize = 256 * 1024;

/// Why a value was not stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KvError {
    #[error("key {key:?}: the store already holds {MAX_KEYS} keys")]
    Full { key: String },
    #[error("key {key:?}: value is {bytes} bytes, more than {MAX_VALUE_BYTES}")]
    TooLarge { key: String, bytes: usize },
    #[error("key {key:?}: {error}")]
    Json {
        key: String,
        error: serde_json::Error,
    },
}

#[derive(Debug, Default)]
pub(crate) struct KvStore {
    values: Mutex<BTreeMap<String, serde_json::Value>>,
}

impl KvStore {
    /// Stores `value` under `key`, replacing what was there.
    pub(crate) fn set<T: serde::Serialize>(&self, key: &str, value: &T) -> Result<(), KvError> {
        let json = serde_json::to_value(value).map_err(|error| KvError::Json {
            key: key.to_string(),
            error,
        })?;
        let bytes = json.to_string().len();
        if bytes > MAX_VALUE_BYTES {
            return Err(KvError::TooLarge {
                key: key.to_string(),
                bytes,
            });
        }
        let mut map = self.values.locked();
        if !map.contains_key(key) && map.len() >= MAX_KEYS {
            return Err(KvError::Full {
                key: key.to_string(),
            });
        }
        map.insert(key.to_string(), json);
        Ok(())
    }

    /// The value under `key`, if any and if it decodes as `T`.
    pub(crate) fn get<T: serde::de::DeserializeOwned>(&self, key: &str) -> Option<T> {
        let map = self.values.locked();
        serde_json::from_value(map.get(key)?.clone()).ok()
    }

    #[cfg(test)]
    pub(crate) fn remove(&self, key: &str) {
        self.values.locked().remove(key);
    }
}

//! A small expiring map for the resolution providers (subnets, security groups, AMIs, SSM
//! parameters, instance profiles): Karpenter's go-cache with a default TTL per entry.
//!
//! Expiry is checked against tokio's clock, so paused-time tests move through TTLs. Entries are
//! dropped when read after their expiry and swept on insert once the map has grown past a
//! bound, so a cache keyed by selector terms cannot grow without limit while selectors churn.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Entries above which an insert first sweeps the expired ones. Each provider holds one entry
/// per distinct selector (a handful per `EC2NodeClass`), so this is generous.
const SWEEP_ABOVE: usize = 256;

/// An expiring map with a default TTL.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K: Eq + Hash + Clone, V: Clone> TtlCache<K, V> {
    /// A cache whose entries live `ttl` unless inserted with their own.
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, (V, Instant)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live value for `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.lock();
        match entries.get(key) {
            Some((value, expires)) if *expires > Instant::now() => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` for the default TTL.
    pub fn insert(&self, key: K, value: V) {
        self.insert_for(key, value, self.ttl);
    }

    /// Stores `value` for `ttl`.
    pub fn insert_for(&self, key: K, value: V, ttl: Duration) {
        let now = Instant::now();
        let mut entries = self.lock();
        if entries.len() >= SWEEP_ABOVE {
            entries.retain(|_, (_, expires)| *expires > now);
        }
        entries.insert(key, (value, now + ttl));
    }

    /// Drops the entry for `key`; returns whether there was one.
    #[allow(clippy::must_use_candidate, reason = "callers usually do not care")]
    pub fn remove(&self, key: &K) -> bool {
        self.lock().remove(key).is_some()
    }

    /// Entries held, expired ones included until they are read or swept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no entry is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn entries_expire_after_their_ttl_and_can_be_evicted() {
        let cache = TtlCache::new(Duration::from_mins(1));
        cache.insert("a", 1);
        cache.insert_for("b", 2, Duration::from_mins(10));
        assert_eq!(cache.get(&"a"), Some(1));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(cache.get(&"a"), None);
        assert_eq!(cache.get(&"b"), Some(2));
        assert!(cache.remove(&"b"));
        assert_eq!(cache.get(&"b"), None);
        assert!(cache.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_sweeps_expired_entries_on_insert() {
        let cache = TtlCache::new(Duration::from_secs(1));
        for i in 0..SWEEP_ABOVE {
            cache.insert(i, i);
        }
        tokio::time::advance(Duration::from_secs(2)).await;
        cache.insert(SWEEP_ABOVE, 0);
        assert_eq!(cache.len(), 1);
    }
}

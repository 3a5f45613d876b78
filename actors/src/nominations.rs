//! Nodes nominated for pods (Karpenter's `StateNode.Nominate`): the Provisioner nominates an
//! existing node when its run places pending pods there, and the disruption actor nominates the
//! existing nodes a command moves pods to. A nominated node is no disruption candidate until the
//! nomination expires, so a round never removes the node that pods are about to land on.
//!
//! Shared by both singletons (one instance, built by the daemon); in memory only, as in
//! Karpenter: after a restart the next provisioning run nominates again.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Karpenter's `nominationWindow`: twice the batch maximum, at least 10 s.
#[must_use]
pub fn nomination_window(batch_max: Duration) -> Duration {
    (batch_max * 2).max(Duration::from_secs(10))
}

/// Node name → nominated until.
#[derive(Debug, Default)]
pub struct Nominations {
    until: Mutex<HashMap<String, Timestamp>>,
}

impl Nominations {
    /// Nominates `node` from `now` for `window` (a later nomination extends it).
    pub fn nominate(&self, node: &str, now: Timestamp, window: Duration) {
        let until = now
            .checked_add(SignedDuration::try_from(window).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MAX);
        let mut map = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map.entry(node.to_owned()).or_insert(until);
        if *entry < until {
            *entry = until;
        }
    }

    /// Until when `node` is nominated, if its nomination has not expired at `now`. Expired
    /// entries are dropped as they are met.
    pub fn until(&self, node: &str, now: Timestamp) -> Option<Timestamp> {
        let mut map = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get(node) {
            Some(until) if *until > now => Some(*until),
            Some(_) => {
                map.remove(node);
                None
            }
            None => None,
        }
    }

    /// Drops every expired nomination.
    pub fn prune(&self, now: Timestamp) {
        self.until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, until| *until > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nomination_lasts_its_window_and_a_later_one_extends_it() {
        let nominations = Nominations::default();
        let t0 = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let at = |s: i64| t0 + SignedDuration::from_secs(s);
        nominations.nominate("a", t0, Duration::from_secs(20));
        assert_eq!(nominations.until("a", at(19)), Some(at(20)));
        nominations.nominate("a", at(10), Duration::from_secs(20));
        assert_eq!(nominations.until("a", at(25)), Some(at(30)));
        assert_eq!(nominations.until("a", at(30)), None);
        assert_eq!(nominations.until("b", t0), None);
    }

    #[test]
    fn the_window_is_twice_the_batch_maximum_and_at_least_ten_seconds() {
        assert_eq!(
            nomination_window(Duration::from_secs(10)),
            Duration::from_secs(20)
        );
        assert_eq!(
            nomination_window(Duration::from_secs(1)),
            Duration::from_secs(10)
        );
    }
}

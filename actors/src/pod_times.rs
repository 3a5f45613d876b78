//! When the Provisioner first saw each pending pod and when it first found the pod a place
//! (Karpenter's cluster-state `podAcks` and `podsSchedulableTimes`), by `namespace/name`.
//!
//! The Provisioner writes: [`PodSchedulingTimes::ack`] when a pod's change triggers it,
//! [`PodSchedulingTimes::schedulable`] when a run nominates it or gives it a NodeClaim. The pod
//! gauges (`crate::cluster_metrics`) read it for Karpenter's `karpenter_pods_provisioning_*`
//! families and forget each pod once it is Ready (Karpenter's pod metrics controller clears
//! its scheduling times then) or gone. Shared through
//! [`crate::metrics::Metrics::pod_times`].
//!
//! A scale-up holds an entry per pending pod (50,000 in the 5,000-node scale run), so an
//! entry is kept small: its key an `Arc<str>` (the one the Provisioner's own ack holds, shared)
//! and its times nanoseconds ([`Stored`]), 32 bytes a slot where a `String` and two
//! `Timestamp`s took 64.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::jiff::Timestamp;

/// One pod's times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodTimes {
    /// First seen pending by the Provisioner.
    pub acked: Timestamp,
    /// First found a place (nominated or provisioned); `None` while undecided.
    pub schedulable: Option<Timestamp>,
}

/// [`PodTimes`] as kept: nanoseconds since the epoch, `schedulable` [`UNDECIDED`] while
/// `None`.
#[derive(Debug, Clone, Copy)]
struct Stored {
    acked: i64,
    schedulable: i64,
}

/// No place found yet.
const UNDECIDED: i64 = i64::MIN;

/// A time as kept: exact from 1677 to 2262, clamped outside (never [`UNDECIDED`]).
fn nanos(at: Timestamp) -> i64 {
    let kept = at
        .as_nanosecond()
        .clamp(i128::from(UNDECIDED) + 1, i128::from(i64::MAX));
    i64::try_from(kept).unwrap_or(i64::MAX)
}

fn time(nanos: i64) -> Timestamp {
    Timestamp::from_nanosecond(i128::from(nanos)).unwrap_or_default()
}

impl From<Stored> for PodTimes {
    fn from(stored: Stored) -> Self {
        Self {
            acked: time(stored.acked),
            schedulable: (stored.schedulable != UNDECIDED).then(|| time(stored.schedulable)),
        }
    }
}

/// The shared table; clones share it.
#[derive(Debug, Clone, Default)]
pub struct PodSchedulingTimes(Arc<Mutex<HashMap<Arc<str>, Stored>>>);

impl PodSchedulingTimes {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Stored>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pod `key` was seen pending at `now` (kept if seen before). The key is shared, not
    /// copied: the Provisioner keeps the same one while the pod waits for its run.
    pub fn ack(&self, key: &Arc<str>, now: Timestamp) {
        let mut table = self.table();
        if !table.contains_key(&**key) {
            table.insert(
                Arc::clone(key),
                Stored {
                    acked: nanos(now),
                    schedulable: UNDECIDED,
                },
            );
        }
    }

    /// The pod `key` found a place at `now` (kept if it had one before).
    pub fn schedulable(&self, key: &str, now: Timestamp) {
        self.schedulable_all([key], now);
    }

    /// The pods `keys` found a place at `now` (each kept if it had one before): one lock for a
    /// whole run's pods, and a key copied only for a pod not seen before.
    pub fn schedulable_all<'a>(&self, keys: impl IntoIterator<Item = &'a str>, now: Timestamp) {
        let mut table = self.table();
        let now = nanos(now);
        for key in keys {
            match table.get_mut(key) {
                Some(times) => {
                    if times.schedulable == UNDECIDED {
                        times.schedulable = now;
                    }
                }
                None => {
                    table.insert(
                        key.into(),
                        Stored {
                            acked: now,
                            schedulable: now,
                        },
                    );
                }
            }
        }
    }

    #[must_use]
    pub fn get(&self, key: &str) -> Option<PodTimes> {
        self.table().get(key).copied().map(PodTimes::from)
    }

    /// Forgets every pod whose key (`namespace/name`) `keep` refuses, and gives back the room
    /// a scale-up's pods took once most are forgotten.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut table = self.table();
        table.retain(|key, _| keep(key));
        if crate::table_room::mostly_empty(table.capacity(), table.len()) {
            table.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ack_and_the_first_place_are_kept() {
        let times = PodSchedulingTimes::default();
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        times.ack(&"ns/a".into(), at(10));
        times.ack(&"ns/a".into(), at(20));
        assert_eq!(times.get("ns/a").unwrap().acked, at(10));
        assert_eq!(times.get("ns/a").unwrap().schedulable, None);
        times.schedulable("ns/a", at(30));
        times.schedulable("ns/a", at(40));
        assert_eq!(times.get("ns/a").unwrap().schedulable, Some(at(30)));
        let exact = Timestamp::from_nanosecond(1_700_000_000_123_456_789).unwrap();
        times.schedulable("ns/c", exact);
        assert_eq!(
            times.get("ns/c"),
            Some(PodTimes {
                acked: exact,
                schedulable: Some(exact)
            }),
            "kept to the nanosecond"
        );
        times.ack(&"ns/b".into(), at(50));
        times.retain(|key| key == "ns/b");
        assert!(times.get("ns/a").is_none());
        assert_eq!(times.get("ns/b").unwrap().acked, at(50));
    }

    #[test]
    fn an_ack_shares_the_callers_key() {
        let times = PodSchedulingTimes::default();
        let key: Arc<str> = "ns/a".into();
        times.ack(&key, Timestamp::from_second(10).unwrap());
        assert_eq!(Arc::strong_count(&key), 2, "the table holds the same key");
        times.ack(&key, Timestamp::from_second(20).unwrap());
        assert_eq!(Arc::strong_count(&key), 2, "a second ack keeps the first");
    }
}

//! The unavailable-offerings (ICE) cache (reference 4.4): offerings that just failed for lack of
//! capacity are skipped for 3 minutes, and the whole spot capacity type when spot's
//! service-linked role is missing.
//!
//! Written by the instances provider (fleet errors) and the interruption actor (spot
//! interruptions); read by the instance-type provider, whose offering cache is keyed by
//! [`UnavailableOfferings::seq_num`], bumped on every mark and expiry so offerings are rebuilt at
//! once. Expiry is checked against tokio's clock, so paused-time tests move through it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use karpenter_core::domain::instance_type::CapacityType;

/// How long an offering stays unavailable after an insufficient-capacity error (Karpenter's
/// `UnavailableOfferingsTTL`); marking again extends it.
pub const UNAVAILABLE_OFFERINGS_TTL: Duration = Duration::from_mins(3);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct OfferingKey {
    capacity_type: CapacityType,
    instance_type: String,
    zone: String,
}

#[derive(Debug, Default)]
struct Entries {
    offerings: HashMap<OfferingKey, Instant>,
    capacity_types: HashMap<CapacityType, Instant>,
}

/// Offerings that recently failed for lack of capacity.
#[derive(Debug)]
pub struct UnavailableOfferings {
    ttl: Duration,
    entries: Mutex<Entries>,
    seq: AtomicU64,
}

impl Default for UnavailableOfferings {
    fn default() -> Self {
        UnavailableOfferings::new(UNAVAILABLE_OFFERINGS_TTL)
    }
}

impl UnavailableOfferings {
    #[must_use]
    pub fn new(ttl: Duration) -> Self {
        UnavailableOfferings {
            ttl,
            entries: Mutex::new(Entries::default()),
            seq: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks one offering unavailable for the TTL.
    pub fn mark_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
        reason: &str,
    ) {
        tracing::debug!(
            reason,
            "instance-type" = instance_type,
            zone,
            "capacity-type" = capacity_type.as_str(),
            ttl = %crate::logs::GoDuration(self.ttl),
            "removing offering from offerings"
        );
        let key = OfferingKey {
            capacity_type,
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
        };
        self.lock().offerings.insert(key, Instant::now() + self.ttl);
        self.seq.fetch_add(1, Ordering::SeqCst);
    }

    /// Marks a whole capacity type unavailable (spot without its service-linked role).
    pub fn mark_capacity_type_unavailable(&self, capacity_type: CapacityType) {
        self.lock()
            .capacity_types
            .insert(capacity_type, Instant::now() + self.ttl);
        self.seq.fetch_add(1, Ordering::SeqCst);
    }

    #[must_use]
    pub fn is_unavailable(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
    ) -> bool {
        let now = Instant::now();
        let entries = self.lock();
        if entries
            .capacity_types
            .get(&capacity_type)
            .is_some_and(|until| *until > now)
        {
            return true;
        }
        let key = OfferingKey {
            capacity_type,
            instance_type: instance_type.to_owned(),
            zone: zone.to_owned(),
        };
        entries
            .offerings
            .get(&key)
            .is_some_and(|until| *until > now)
    }

    /// Drops expired entries; bumps the sequence number when any went.
    pub fn evict_expired(&self) {
        let now = Instant::now();
        let mut entries = self.lock();
        let before = entries.offerings.len() + entries.capacity_types.len();
        entries.offerings.retain(|_, until| *until > now);
        entries.capacity_types.retain(|_, until| *until > now);
        if entries.offerings.len() + entries.capacity_types.len() != before {
            self.seq.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Changes whenever the set of unavailable offerings changes (expired entries included).
    #[must_use]
    pub fn seq_num(&self) -> u64 {
        self.evict_expired();
        self.seq.load(Ordering::SeqCst)
    }

    /// Number of offerings currently marked.
    #[must_use]
    pub fn len(&self) -> usize {
        self.evict_expired();
        self.lock().offerings.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn an_offering_comes_back_after_three_minutes() {
        let cache = UnavailableOfferings::default();
        let seq = cache.seq_num();
        cache.mark_unavailable(
            "m5.large",
            "us-west-2a",
            CapacityType::Spot,
            "InsufficientInstanceCapacity",
        );
        assert!(cache.is_unavailable("m5.large", "us-west-2a", CapacityType::Spot));
        assert!(!cache.is_unavailable("m5.large", "us-west-2a", CapacityType::OnDemand));
        assert!(!cache.is_unavailable("m5.large", "us-west-2b", CapacityType::Spot));
        let marked = cache.seq_num();
        assert!(marked > seq);

        tokio::time::advance(Duration::from_secs(179)).await;
        assert!(cache.is_unavailable("m5.large", "us-west-2a", CapacityType::Spot));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!cache.is_unavailable("m5.large", "us-west-2a", CapacityType::Spot));
        assert!(
            cache.seq_num() > marked,
            "expiry changes the sequence number"
        );
        assert!(cache.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn marking_again_extends_the_ttl() {
        let cache = UnavailableOfferings::default();
        cache.mark_unavailable("c5.large", "us-west-2a", CapacityType::OnDemand, "ICE");
        tokio::time::advance(Duration::from_mins(2)).await;
        cache.mark_unavailable("c5.large", "us-west-2a", CapacityType::OnDemand, "ICE");
        tokio::time::advance(Duration::from_mins(2)).await;
        assert!(cache.is_unavailable("c5.large", "us-west-2a", CapacityType::OnDemand));
    }

    #[tokio::test(start_paused = true)]
    async fn a_missing_spot_role_blocks_every_spot_offering() {
        let cache = UnavailableOfferings::default();
        cache.mark_capacity_type_unavailable(CapacityType::Spot);
        assert!(cache.is_unavailable("m5.large", "us-west-2c", CapacityType::Spot));
        assert!(!cache.is_unavailable("m5.large", "us-west-2c", CapacityType::OnDemand));
        tokio::time::advance(UNAVAILABLE_OFFERINGS_TTL).await;
        assert!(!cache.is_unavailable("m5.large", "us-west-2c", CapacityType::Spot));
    }
}

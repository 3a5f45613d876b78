//! The unavailable-offerings (ICE) cache (reference 4.4): offerings that just failed for lack of
//! capacity are skipped for 3 minutes, and the whole spot capacity type when spot's
//! service-linked role is missing.
//!
//! Written by the instances provider (fleet errors) and the interruption actor (spot
//! interruptions); read by the instance-type provider, whose offering cache is keyed by
//! [`UnavailableOfferings::seq_num`], bumped on every mark and expiry so offerings are rebuilt at
//! once.
//!
//! Who does what: reads ([`UnavailableOfferings::is_unavailable`], `seq_num`) are synchronous on
//! the shared state, and cheap (`seq_num` is one atomic load on every instance-type listing, the
//! provisioning hot path). Marks are synchronous too, so the launch that met the ICE error, its
//! retry and the next listing see the mark at once, with no mailbox in between that could
//! reorder or drop it. Expiry belongs to [`UnavailableOfferingsActor`], the ICE cache's actor in
//! the AWS group: a mark nudges it, it keeps one timer armed for the earliest expiry, and when it
//! fires it evicts what expired and bumps the sequence number (Karpenter's cache janitor does the
//! same). `is_unavailable` compares with the clock itself, so a late or restarting actor only
//! delays the rebuild of memoised offerings, never keeps an offering out past its TTL in a direct
//! read. Expiry is checked against tokio's clock, so paused-time tests move through it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::runtime::{
    ActorCtx, ActorError, ActorRef, GroupRef, Handles, Mail, SpawnError, Supervised,
};
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

impl Entries {
    fn next_expiry(&self) -> Option<Instant> {
        self.offerings
            .values()
            .chain(self.capacity_types.values())
            .min()
            .copied()
    }
}

/// Offerings that recently failed for lack of capacity.
#[derive(Debug)]
pub struct UnavailableOfferings {
    ttl: Duration,
    entries: Mutex<Entries>,
    seq: AtomicU64,
    /// The expiry actor, once started: told about every mark.
    expiry: Mutex<Option<ActorRef<UnavailableOfferingsActor>>>,
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
            expiry: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A mark happened: the expiry actor arms its timer if it has none (a nudge: one queued at
    /// most however many marks a fleet answer brings).
    fn marked(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        let actor = self
            .expiry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(actor) = actor {
            // Lost only if the actor is stopping or parked; its `started` re-arms from the
            // entries, so nothing is forgotten.
            let _ = actor.nudge(Rearm);
        }
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
        self.marked();
    }

    /// Marks a whole capacity type unavailable (spot without its service-linked role).
    pub fn mark_capacity_type_unavailable(&self, capacity_type: CapacityType) {
        self.lock()
            .capacity_types
            .insert(capacity_type, Instant::now() + self.ttl);
        self.marked();
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

    /// Drops expired entries; bumps the sequence number when any went. Returns the next expiry.
    pub fn evict_expired(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut entries = self.lock();
        let before = entries.offerings.len() + entries.capacity_types.len();
        entries.offerings.retain(|_, until| *until > now);
        entries.capacity_types.retain(|_, until| *until > now);
        if entries.offerings.len() + entries.capacity_types.len() != before {
            self.seq.fetch_add(1, Ordering::SeqCst);
        }
        entries.next_expiry()
    }

    /// When the next entry expires, if any is marked.
    #[must_use]
    pub fn next_expiry(&self) -> Option<Instant> {
        self.lock().next_expiry()
    }

    /// Changes whenever the set of unavailable offerings changes: on every mark, and when the
    /// expiry actor evicts what expired.
    #[must_use]
    pub fn seq_num(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Number of offerings unavailable now.
    #[must_use]
    pub fn len(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .offerings
            .values()
            .filter(|until| **until > now)
            .count()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Re-read the entries and arm the expiry timer (sent as a nudge by every mark).
#[derive(Debug)]
pub struct Rearm;

impl Mail for Rearm {
    type Reply = ();
    const NAME: &'static str = "Rearm";
}

/// The timer: evict what expired by `at`.
#[derive(Debug)]
pub struct Expire {
    at: Instant,
}

impl Mail for Expire {
    type Reply = ();
    const NAME: &'static str = "Expire";
}

/// The ICE cache's actor: evicts expired entries at their expiry (see the module docs).
#[derive(Debug)]
pub struct UnavailableOfferingsActor {
    offerings: Arc<UnavailableOfferings>,
    /// The deadline of the timer set last, while it has not fired.
    armed: Option<Instant>,
}

impl UnavailableOfferingsActor {
    /// Its key in the AWS group.
    pub const KEY: &'static str = "unavailable-offerings";

    /// Starts the actor for `offerings` under `group`; marks then nudge it.
    pub fn start(
        group: &GroupRef,
        offerings: &Arc<UnavailableOfferings>,
    ) -> Result<ActorRef<Self>, SpawnError> {
        let actor = group.spawn::<Self>(Self::KEY, Arc::clone(offerings))?;
        *offerings
            .expiry
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(actor.clone());
        Ok(actor)
    }

    fn rearm(&mut self, ctx: &mut ActorCtx<Self>) {
        let Some(next) = self.offerings.next_expiry() else {
            ctx.set_state("empty");
            return;
        };
        ctx.set_state("expiring");
        if self.armed.is_some_and(|armed| armed <= next) {
            return;
        }
        self.armed = Some(next);
        ctx.send_after(
            next.saturating_duration_since(Instant::now()),
            Expire { at: next },
        );
    }
}

impl Supervised for UnavailableOfferingsActor {
    const KIND: &'static str = "UnavailableOfferingsActor";
    // One nudge and one timer are ever queued; a few more slots for timers of earlier arms.
    const MAILBOX_CAPACITY: usize = 8;
    type Deps = Arc<UnavailableOfferings>;

    fn build(_key: &str, offerings: &Arc<UnavailableOfferings>) -> Result<Self, ActorError> {
        Ok(Self {
            offerings: Arc::clone(offerings),
            armed: None,
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        // A restarted instance lost its timer: arm one for whatever is marked.
        self.offerings.evict_expired();
        self.rearm(ctx);
        Ok(())
    }
}

impl Handles<Rearm> for UnavailableOfferingsActor {
    async fn handle(&mut self, _: Rearm, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        self.rearm(ctx);
        Ok(())
    }
}

impl Handles<Expire> for UnavailableOfferingsActor {
    async fn handle(&mut self, expire: Expire, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        if self.armed == Some(expire.at) {
            self.armed = None;
        }
        self.offerings.evict_expired();
        self.rearm(ctx);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::runtime::{ActorKit, GroupSpec, KitOptions, RootGroup};

    fn with_actor() -> (ActorKit, RootGroup, Arc<UnavailableOfferings>) {
        let mut registry = Registry::default();
        let kit = ActorKit::new(&mut registry, KitOptions::default());
        let root = kit.root(GroupSpec::one_for_one("aws")).unwrap();
        let cache = Arc::new(UnavailableOfferings::default());
        UnavailableOfferingsActor::start(&root, &cache).unwrap();
        (kit, root, cache)
    }

    #[actix::test]
    async fn an_offering_comes_back_after_three_minutes() {
        tokio::time::pause();
        let (kit, _root, cache) = with_actor();
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

        tokio::time::sleep(Duration::from_secs(179)).await;
        assert!(cache.is_unavailable("m5.large", "us-west-2a", CapacityType::Spot));
        assert_eq!(cache.seq_num(), marked, "nothing expired yet");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!cache.is_unavailable("m5.large", "us-west-2a", CapacityType::Spot));
        assert!(
            cache.seq_num() > marked,
            "the actor's expiry changes the sequence number"
        );
        assert!(cache.is_empty());
        let snapshot = kit.snapshot();
        let actor = snapshot
            .actor("UnavailableOfferingsActor", UnavailableOfferingsActor::KEY)
            .unwrap();
        assert_eq!(actor.handled_by_message["Expire"], 1);
        assert_eq!(actor.state, "empty");
    }

    #[actix::test]
    async fn marking_again_extends_the_ttl() {
        tokio::time::pause();
        let (_kit, _root, cache) = with_actor();
        cache.mark_unavailable("c5.large", "us-west-2a", CapacityType::OnDemand, "ICE");
        tokio::time::sleep(Duration::from_mins(2)).await;
        cache.mark_unavailable("c5.large", "us-west-2a", CapacityType::OnDemand, "ICE");
        let seq = cache.seq_num();
        tokio::time::sleep(Duration::from_mins(2)).await;
        assert!(cache.is_unavailable("c5.large", "us-west-2a", CapacityType::OnDemand));
        assert_eq!(
            cache.seq_num(),
            seq,
            "the first expiry found nothing to evict"
        );
    }

    #[actix::test]
    async fn a_missing_spot_role_blocks_every_spot_offering() {
        tokio::time::pause();
        let (_kit, _root, cache) = with_actor();
        cache.mark_capacity_type_unavailable(CapacityType::Spot);
        assert!(cache.is_unavailable("m5.large", "us-west-2c", CapacityType::Spot));
        assert!(!cache.is_unavailable("m5.large", "us-west-2c", CapacityType::OnDemand));
        let marked = cache.seq_num();
        tokio::time::sleep(UNAVAILABLE_OFFERINGS_TTL).await;
        assert!(!cache.is_unavailable("m5.large", "us-west-2c", CapacityType::Spot));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(cache.seq_num() > marked);
    }

    #[actix::test]
    async fn a_restarted_expiry_actor_still_expires_what_was_marked() {
        tokio::time::pause();
        let plan = crate::runtime::FaultPlan::new(1)
            .with_rule(
                crate::runtime::FaultRule::new(crate::runtime::FaultAction::Panic)
                    .kind("UnavailableOfferingsActor")
                    .message("Rearm")
                    .nth(1),
            )
            .unwrap();
        let mut registry = Registry::default();
        let kit = ActorKit::new(
            &mut registry,
            KitOptions {
                faults: Some(Arc::new(plan)),
                ..KitOptions::default()
            },
        );
        let root = kit.root(GroupSpec::one_for_one("aws")).unwrap();
        let cache = Arc::new(UnavailableOfferings::default());
        UnavailableOfferingsActor::start(&root, &cache).unwrap();
        cache.mark_unavailable("c5.large", "us-west-2a", CapacityType::OnDemand, "ICE");
        let marked = cache.seq_num();
        tokio::time::sleep(UNAVAILABLE_OFFERINGS_TTL + Duration::from_secs(1)).await;
        assert!(
            cache.seq_num() > marked,
            "the fresh instance armed its own timer"
        );
        let snapshot = kit.snapshot();
        let actor = snapshot
            .actor("UnavailableOfferingsActor", UnavailableOfferingsActor::KEY)
            .unwrap();
        assert_eq!((actor.panics, actor.restarts), (1, 1));
    }
}

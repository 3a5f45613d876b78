//! Memory of the actor kit, measured by counting every allocation of this test binary (its own
//! global allocator, so the numbers are exact and do not depend on timing): 10,000 spawn/stop
//! cycles leave nothing behind, and an idle per-object actor stays under 4 KiB.
//!
//! Each test runs in its own process under nextest, so the counters see only that test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::alloc::System;
use std::time::Duration;

use karpenter_actors::runtime::{
    ActorCtx, ActorError, ActorKit, Family, GroupSpec, Handles, KitOptions, Mail, RestartPolicy,
    Supervised,
};
use prometheus_client::registry::Registry;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const TIMEOUT: Duration = Duration::from_secs(5);
const CYCLES: usize = 10_000;
/// The budget for an idle per-object actor.
const IDLE_ACTOR_BUDGET_BYTES: usize = 4 * 1024;

/// A per-object actor with a little state, like a NodeClaimActor between events.
struct Idle {
    generation: u64,
}

impl Supervised for Idle {
    const KIND: &'static str = "Idle";
    // As a per-object actor would size it: a handful of events between reconciles.
    const MAILBOX_CAPACITY: usize = 16;
    const RESTART: RestartPolicy = RestartPolicy::Transient;
    type Deps = ();

    fn build(_: &str, (): &()) -> Result<Self, ActorError> {
        Ok(Self { generation: 0 })
    }
}

struct Touch;
impl Mail for Touch {
    type Reply = u64;
    const NAME: &'static str = "Touch";
}
impl Handles<Touch> for Idle {
    async fn handle(&mut self, _: Touch, _: &mut ActorCtx<Self>) -> Result<u64, ActorError> {
        self.generation += 1;
        Ok(self.generation)
    }
}

/// Bytes allocated and not freed since the region began (`stats_alloc` already counts a
/// realloc's growth as allocated and its shrinking as freed).
fn net_bytes(region: &Region<'_, System>) -> isize {
    let change = region.change();
    isize::try_from(change.bytes_allocated).unwrap()
        - isize::try_from(change.bytes_deallocated).unwrap()
}

async fn spawn_touch_stop(family: &Family<Idle>, key: &str) {
    let actor = family.ensure(key).unwrap();
    assert_eq!(actor.request(Touch, TIMEOUT).await.unwrap(), 1);
    assert!(family.remove(key));
    actor.terminated().await;
}

#[actix::test]
async fn ten_thousand_spawn_stop_cycles_leave_the_registry_empty_and_memory_flat() {
    tokio::time::pause();
    let mut metrics = Registry::default();
    let kit = ActorKit::new(&mut metrics, KitOptions::default());
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let family = root
        .family::<Idle>(GroupSpec::one_for_one("idle"), ())
        .unwrap();
    let keys: Vec<String> = (0..CYCLES).map(|i| format!("nodeclaim-{i}")).collect();
    // Warm-up: metric handles, tokio's timer wheel and actix's queues reach their steady size.
    for key in keys.iter().take(1_000) {
        spawn_touch_stop(&family, key).await;
    }

    let region = Region::new(GLOBAL);
    for key in &keys {
        spawn_touch_stop(&family, key).await;
    }
    let net = net_bytes(&region);
    let change = region.change();

    assert!(kit.registry().is_empty());
    assert!(family.is_empty());
    assert_eq!(kit.snapshot().actors.len(), 0);
    println!(
        "{CYCLES} cycles: {} allocations, {} frees, net {net} bytes",
        change.allocations, change.deallocations
    );
    // Flat: nothing per cycle survives. The slack covers a container growing once.
    assert!(
        net < 4 * 1024,
        "{net} bytes left after {CYCLES} cycles ({} per cycle)",
        net / isize::try_from(CYCLES).unwrap()
    );
}

#[actix::test]
async fn an_idle_per_object_actor_costs_less_than_4_kib() {
    tokio::time::pause();
    let mut metrics = Registry::default();
    let kit = ActorKit::new(&mut metrics, KitOptions::default());
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let family = root
        .family::<Idle>(GroupSpec::one_for_one("idle"), ())
        .unwrap();
    spawn_touch_stop(&family, "warm-up").await;
    let keys: Vec<String> = (0..CYCLES).map(|i| format!("nodeclaim-{i}")).collect();

    let region = Region::new(GLOBAL);
    let mut actors = Vec::with_capacity(CYCLES);
    for key in &keys {
        actors.push(family.ensure(key).unwrap());
    }
    // Every actor has started and handled one message, then sits idle.
    for actor in &actors {
        actor.request(Touch, TIMEOUT).await.unwrap();
    }
    drop(actors);
    let net = usize::try_from(net_bytes(&region)).unwrap();
    let per_actor = net / CYCLES;
    println!("{CYCLES} idle actors: {net} bytes, {per_actor} bytes each");
    assert_eq!(kit.registry().len(), CYCLES);
    assert!(
        per_actor < IDLE_ACTOR_BUDGET_BYTES,
        "{per_actor} bytes per idle actor"
    );
    root.stop().await;
    assert!(kit.registry().is_empty());
}

//! The daemon's process life: SIGTERM stops it in time and releases its Lease; two replicas
//! never both act and the standby takes over; `kill -9` in the middle of a scale-up, then a
//! restart, ends with exactly one instance per NodeClaim and no instance without one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::support::{Daemon, SCALE_UP, STARTUP, TERMINATION_GRACE, World, instance_of, until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_daemon_in_time_with_exit_0_and_releases_the_lease() {
    let Some(world) = World::start("sigterm").await else {
        return;
    };
    world.apply_nodepool().await;
    let mut daemon = world.daemon(&[]);
    world.until_leading_and_ready(&daemon).await;
    // A scale-up under way when the signal comes.
    world.create_pods("web", 2).await;
    until(
        "a NodeClaim to be created",
        SCALE_UP,
        || world.context(&[&daemon]),
        || async { (!world.nodeclaims().await.is_empty()).then_some(()) },
    )
    .await;

    let signalled = Instant::now();
    daemon.proc.terminate();
    let status = daemon.proc.wait_exit(TERMINATION_GRACE).await;
    let took = signalled.elapsed();
    let context = world.context(&[&daemon]);
    let status = status
        .unwrap_or_else(|| panic!("still running {TERMINATION_GRACE:?} after SIGTERM\n{context}"));
    assert!(
        status.success(),
        "exit {status:?} after {took:?}\n{context}"
    );
    assert_eq!(
        world.lease_holder().await,
        None,
        "the Lease is released on the way out\n{context}"
    );
}

/// Events' `reportingInstance`s (the daemon's identity on everything it records).
async fn reporters(world: &World) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let events: Api<Event> = Api::all(world.client.clone());
    for event in events
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if event.reporting_controller.as_deref() == Some("karpenter") {
            let instance = event.reporting_instance.unwrap_or_default();
            *counts.entry(instance).or_insert(0) += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_never_both_act_and_the_standby_takes_over() {
    let Some(world) = World::start("two-daemons").await else {
        return;
    };
    world.apply_nodepool().await;
    let first = world.daemon(&[]);
    let second = world.daemon(&[]);
    let identities = [first.identity(), second.identity()];
    let holder = until(
        "one of the two daemons to hold the Lease",
        STARTUP,
        || world.context(&[&first, &second]),
        || async {
            world
                .lease_holder()
                .await
                .filter(|h| identities.contains(h))
        },
    )
    .await;
    let (mut leader, standby) = if holder == identities[0] {
        (first, second)
    } else {
        (second, first)
    };
    world.until_leading_and_ready(&leader).await;

    world.create_pods("web", 2).await;
    world.until_pods_run("web", 2, &[&leader, &standby]).await;
    let context = world.context(&[&leader, &standby]);
    assert_eq!(
        world.lease_holder().await.as_deref(),
        Some(leader.identity().as_str())
    );
    let events = reporters(&world).await;
    assert_eq!(
        events.keys().collect::<Vec<_>>(),
        [&leader.identity()],
        "only the leader records events: {events:?}\n{context}"
    );
    assert!(
        leader
            .metric_sum("karpenter_nodeclaims_created_total")
            .await
            >= 2.0,
        "{context}"
    );
    let created_by_standby = standby
        .metric_sum("karpenter_nodeclaims_created_total")
        .await;
    assert!(
        created_by_standby < 1.0,
        "the standby created {created_by_standby} NodeClaims\n{context}"
    );

    // The leader goes; the standby takes the released Lease and acts.
    leader.proc.terminate();
    assert!(
        leader
            .proc
            .wait_exit(TERMINATION_GRACE)
            .await
            .is_some_and(|s| s.success()),
        "{}",
        world.context(&[&leader, &standby])
    );
    world.until_leading_and_ready(&standby).await;
    world.create_pods("after", 1).await;
    world.until_pods_run("after", 1, &[&standby]).await;
    let events = reporters(&world).await;
    assert!(
        events.get(&standby.identity()).is_some_and(|n| *n > 0),
        "the new leader records events: {events:?}"
    );
}

/// A pseudo-random delay below `max` (xorshift of the clock), printed so a failure can be
/// reproduced by eye.
fn random_delay(state: &mut u64, max: Duration) -> Duration {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    let millis = u64::try_from(max.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(*state % millis)
}

/// Every NodeClaim has its one instance and every instance its NodeClaim; `None` while not, with
/// the last disagreement kept in `last`.
async fn one_instance_per_nodeclaim(world: &World, last: &mut String) -> Option<()> {
    let claims = world.nodeclaims().await;
    let instances = world.instances().await;
    let claimed: BTreeMap<String, String> = claims
        .iter()
        .filter_map(|c| Some((instance_of(c)?, c.name_any())))
        .collect();
    let launched: BTreeSet<&String> = instances.iter().map(|(id, _)| id).collect();
    let unlaunched: Vec<String> = claims
        .iter()
        .filter(|c| instance_of(c).is_none())
        .map(ResourceExt::name_any)
        .collect();
    let orphans: Vec<&(String, Option<String>)> = instances
        .iter()
        .filter(|(id, _)| !claimed.contains_key(id))
        .collect();
    let missing: Vec<&String> = claimed.keys().filter(|id| !launched.contains(id)).collect();
    *last = format!(
        "nodeclaims {claimed:?}, without instance {unlaunched:?}, instances {instances:?}, \
         orphans {orphans:?}, claimed but not running {missing:?}"
    );
    (unlaunched.is_empty() && orphans.is_empty() && missing.is_empty() && !claimed.is_empty())
        .then_some(())
}

/// Where a scale-up was when the daemon died: NodeClaims with and without an instance, and the
/// instances.
async fn state_at_kill(world: &World) -> String {
    let claims = world.nodeclaims().await;
    let launched = claims.iter().filter(|c| instance_of(c).is_some()).count();
    format!(
        "{} NodeClaims ({launched} with an instance), {} instances",
        claims.len(),
        world.instances().await.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_scale_up_then_a_restart_leaves_one_instance_per_nodeclaim() {
    let Some(world) = World::start("kill-9").await else {
        return;
    };
    world.apply_nodepool().await;
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| u64::from(d.subsec_nanos()) | 1);
    eprintln!("kill -9 points seeded with {seed}");
    let mut daemon: Daemon = world.daemon(&[]);
    world.until_leading_and_ready(&daemon).await;

    // Round 1: killed within moments of the first NodeClaim's creation, while its launch (and
    // its siblings') is in flight.
    world.create_pods("first", 3).await;
    let created = Instant::now();
    while world.nodeclaims().await.is_empty() {
        assert!(
            created.elapsed() < SCALE_UP,
            "no NodeClaim\n{}",
            world.context(&[&daemon])
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let delay = random_delay(&mut seed, Duration::from_millis(400));
    eprintln!("round 1: kill -9 {delay:?} after the first NodeClaim");
    // The random kill point itself: nothing to poll for.
    tokio::time::sleep(delay).await;
    daemon.proc.kill();
    eprintln!("round 1 killed at: {}", state_at_kill(&world).await);

    // Round 2: the restarted daemon (it waits out the dead one's Lease) is killed again at a
    // random point of its recovery and a second scale-up.
    daemon = world.daemon(&[]);
    world.until_leading_and_ready(&daemon).await;
    world.create_pods("second", 2).await;
    let delay = random_delay(&mut seed, Duration::from_secs(3));
    eprintln!("round 2: kill -9 {delay:?} after the pods");
    tokio::time::sleep(delay).await;
    daemon.proc.kill();
    eprintln!("round 2 killed at: {}", state_at_kill(&world).await);

    // The last restart converges: every pod runs, every NodeClaim has exactly its instance, and
    // the garbage collector has taken any instance a killed launch left without one.
    let daemon = world.daemon(&[]);
    world.until_leading_and_ready(&daemon).await;
    world.until_pods_run("first", 3, &[&daemon]).await;
    world.until_pods_run("second", 2, &[&daemon]).await;
    let mut last = String::new();
    let converged = async {
        let deadline = Instant::now() + Duration::from_mins(2);
        while Instant::now() < deadline {
            if one_instance_per_nodeclaim(&world, &mut last)
                .await
                .is_some()
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        false
    }
    .await;
    assert!(
        converged,
        "no convergence to one instance per NodeClaim: {last}\n{}",
        world.context(&[&daemon])
    );
}

//! The whole daemon over the emulator and kwok, stepped by hand (`Simulation`): pending pods end
//! as instances, Ready nodes and bound pods; a deleted NodeClaim drains and terminates its
//! instance; a daemon restarted mid scale-up loses nothing and launches no duplicate instance,
//! and one stopped at twenty seeded instants of a scale-up (CreateFleet answering in 2 s, so
//! some kills lose a fleet's answer) ends, after a restart and the collector's window, with one
//! instance per NodeClaim and none without a NodeClaim.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use karpenter::sim::scenario::{LoadedScenario, Simulation};

use super::support::{
    SMALL, claimed_instances, delete_nodeclaim, in_simulation, is_bound, live_instances, load,
    nodeclaims, nodes, pods, ready_condition, registered, small_without_consolidation, taint_keys,
};

fn small() -> LoadedScenario {
    load(SMALL)
}

fn bound(pods: &[Pod]) -> usize {
    pods.iter().filter(|p| is_bound(p)).count()
}

#[test]
fn pending_pods_end_as_ready_nodes_with_their_pods_bound() {
    in_simulation(|| async {
        let mut sim = Simulation::start(small(), None).await.unwrap();
        assert!(sim.advance(Duration::from_secs(90)).await);
        let pods = pods(&sim).await;
        assert_eq!(pods.len(), 4, "the workload's first step");
        assert_eq!(bound(&pods), 4, "every pod bound");
        let claims = nodeclaims(&sim).await;
        assert!(!claims.is_empty());
        let instances = claimed_instances(&claims);
        assert_eq!(instances.len(), claims.len(), "every NodeClaim launched");
        assert_eq!(
            instances.iter().cloned().collect::<BTreeSet<_>>(),
            live_instances(&sim)
        );
        let nodes = nodes(&sim).await;
        assert_eq!(nodes.len(), claims.len());
        for node in &nodes {
            let ready = ready_condition(node).map(|c| c.status.clone());
            assert_eq!(ready.as_deref(), Some("True"), "{:?}", node.metadata.name);
            let taints = taint_keys(node);
            assert!(
                !taints.contains(&"karpenter.sh/unregistered".to_owned()),
                "{taints:?}"
            );
        }
        sim.finish().await;
    });
}

#[test]
fn a_deleted_nodeclaim_drains_its_pods_and_terminates_its_instance() {
    in_simulation(|| async {
        let mut sim = Simulation::start(small(), None).await.unwrap();
        assert!(sim.advance(Duration::from_mins(1)).await);
        let (name, node, instance) = registered(&sim).await;
        delete_nodeclaim(&sim, &name).await;
        assert!(sim.advance(Duration::from_secs(50)).await);

        let claims = nodeclaims(&sim).await;
        assert!(
            claims
                .iter()
                .all(|c| c.metadata.name.as_deref() != Some(&name)),
            "the NodeClaim is gone once its finalizer is removed"
        );
        assert!(
            !live_instances(&sim).contains(&instance),
            "instance terminated"
        );
        let pods = pods(&sim).await;
        assert!(
            pods.iter().all(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node.as_str())
            }),
            "no pod left on the drained node"
        );
        assert_eq!(pods.len(), 4);
        assert_eq!(bound(&pods), 4, "the replacements run elsewhere");
        sim.finish().await;
    });
}

#[test]
fn a_daemon_restarted_mid_scale_up_loses_nothing_and_launches_no_duplicate_instance() {
    in_simulation(|| async {
        let mut sim = Simulation::start(small_without_consolidation(), None)
            .await
            .unwrap();
        // The workload goes 4 -> 12 at 2m; the Provisioner's batch closes a second later, the
        // instances take 10 s to run and their nodes 10 s more to register: restart while the
        // new NodeClaims are launched but not registered. (Restarts between NodeClaim creation
        // and CreateFleet's answer are the seeded kill tests below.)
        assert!(sim.advance(Duration::from_secs(123)).await);
        let claims = nodeclaims(&sim).await;
        let starting = claims
            .iter()
            .filter(|c| {
                let status = c.status.clone().unwrap_or_default();
                status.provider_id.is_some() && status.node_name.is_none()
            })
            .count();
        assert!(
            starting > 0,
            "instances are starting, their nodes not registered yet"
        );
        let before: BTreeSet<String> = claims
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        sim.restart_daemon().await.unwrap();
        assert!(sim.advance(Duration::from_secs(90)).await);

        let claims = nodeclaims(&sim).await;
        let after: BTreeSet<String> = claims
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect();
        assert!(before.is_subset(&after), "{before:?} -> {after:?}");
        let instances = claimed_instances(&claims);
        let distinct: BTreeSet<String> = instances.iter().cloned().collect();
        assert_eq!(
            distinct.len(),
            instances.len(),
            "one instance per NodeClaim"
        );
        assert_eq!(
            distinct,
            live_instances(&sim),
            "no instance without its NodeClaim"
        );
        let pods = pods(&sim).await;
        assert_eq!(pods.len(), 12);
        assert_eq!(bound(&pods), 12);
        sim.finish().await;
    });
}

/// How long kwok's CreateFleet takes to answer in the kill tests: EC2 answers instant fleets
/// in seconds, and a kill lands inside the call this way (the instances exist, the answer is
/// lost with the process).
const FLEET_LATENCY: Duration = Duration::from_secs(2);
/// How long the restarted daemon runs before the checks: launches, registration, and more
/// than the garbage collector's window (30 s after launch, swept every 10 s).
const AFTER_RESTART: Duration = Duration::from_secs(90);

/// A deterministic instant in `[from, from + span)` for `seed` (`SplitMix64`), to the millisecond.
fn seeded_instant(seed: u64, from: Duration, span: Duration) -> Duration {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let span_ms = u64::try_from(span.as_millis()).unwrap();
    from + Duration::from_millis(z % span_ms)
}

/// What one kill and restart left.
#[derive(Debug)]
struct KillOutcome {
    at: Duration,
    /// Instances that reached EC2 but whose NodeClaim named none when the daemon died.
    orphans_at_kill: usize,
    /// Instances launched in all, beyond one per NodeClaim (later terminated as leaks).
    wasted: usize,
}

/// Stops the daemon at `at` (as `kill -9` would: its actors stop, the calls it made finish
/// without it), starts a new one over the same cluster and account, and checks after
/// [`AFTER_RESTART`]: one instance per NodeClaim, no instance without one, every pod bound.
async fn kill_and_restart_at(at: Duration, pods_expected: usize) -> KillOutcome {
    let mut sim = Simulation::start(small_without_consolidation(), None)
        .await
        .unwrap();
    sim.world().ec2.set_create_fleet_latency(FLEET_LATENCY);
    let whole = Duration::from_secs(at.as_secs());
    assert!(sim.advance(whole).await);
    tokio::time::sleep(at.saturating_sub(whole)).await;
    let named: BTreeSet<String> = claimed_instances(&nodeclaims(&sim).await)
        .into_iter()
        .collect();
    let orphans_at_kill = live_instances(&sim).difference(&named).count();
    sim.restart_daemon().await.unwrap();
    assert!(sim.advance(AFTER_RESTART).await);

    let claims = nodeclaims(&sim).await;
    let instances = claimed_instances(&claims);
    assert_eq!(
        instances.len(),
        claims.len(),
        "killed at {at:?}: every NodeClaim launched"
    );
    let distinct: BTreeSet<String> = instances.iter().cloned().collect();
    assert_eq!(
        distinct.len(),
        instances.len(),
        "killed at {at:?}: one instance per NodeClaim"
    );
    assert_eq!(
        distinct,
        live_instances(&sim),
        "killed at {at:?}: no instance outlives the collector's window without a NodeClaim"
    );
    let pods = pods(&sim).await;
    assert_eq!(pods.len(), pods_expected, "killed at {at:?}");
    assert_eq!(
        bound(&pods),
        pods_expected,
        "killed at {at:?}: every pod bound"
    );
    let wasted = sim.world().ec2.instances().len() - claims.len();
    sim.finish().await;
    KillOutcome {
        at,
        orphans_at_kill,
        wasted,
    }
}

/// Runs [`kill_and_restart_at`] for ten seeded instants in `[from, from + span)`.
async fn kill_at_seeded_instants(
    seeds: std::ops::Range<u64>,
    from: Duration,
    span: Duration,
    pods: usize,
) {
    let mut outcomes = Vec::new();
    for seed in seeds {
        outcomes.push(kill_and_restart_at(seeded_instant(seed, from, span), pods).await);
    }
    for o in &outcomes {
        eprintln!(
            "killed at {:?}: {} orphan(s) at the kill, {} instance(s) launched twice",
            o.at, o.orphans_at_kill, o.wasted
        );
    }
    assert!(
        outcomes.iter().any(|o| o.orphans_at_kill > 0),
        "some seed kills the daemon while a fleet's answer is on its way: {outcomes:?}"
    );
    let adopted: Vec<&KillOutcome> = outcomes
        .iter()
        .filter(|o| o.orphans_at_kill > 0 && o.wasted == 0)
        .collect();
    assert!(
        !adopted.is_empty(),
        "the restarted daemon adopted what its predecessor launched: {outcomes:?}"
    );
}

#[test]
fn a_daemon_killed_at_seeded_instants_of_the_first_scale_up_ends_with_one_instance_per_nodeclaim() {
    in_simulation(|| async {
        // The first four pods: NodeClaims at about 1 s, their fleets answer 2 s later.
        kill_at_seeded_instants(0..10, Duration::from_millis(500), Duration::from_secs(5), 4).await;
    });
}

#[test]
fn a_daemon_killed_at_seeded_instants_of_the_second_scale_up_ends_with_one_instance_per_nodeclaim()
{
    in_simulation(|| async {
        // 4 -> 12 pods at 2m: NodeClaims at about 2m1s, their fleets answer 2 s later.
        kill_at_seeded_instants(10..20, Duration::from_mins(2), Duration::from_secs(6), 12).await;
    });
}

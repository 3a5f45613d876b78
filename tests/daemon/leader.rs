//! Leader-gated start on tokio's paused clock: a standby watches (its cache syncs, its probes
//! pass) but starts no actor but the AWS group's until the leader stops and releases the lease;
//! a leader starts no actor before its store has listed every kind; a leader whose renewal hangs
//! stops its actors at the renew deadline and writes nothing after; shutdown gives launches in
//! flight their grace and names those that did not finish.

use std::sync::Arc;
use std::time::Duration;

use karpenter::cloud::CloudSource;
use karpenter::daemon::{DaemonAssembly, Exit};
use karpenter::emulator::{Emulator, FaultRule, Verb};
use karpenter::kube::leader::LeaseTiming;
use karpenter_actors::aws::AWS_ACTOR_KINDS;
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_actors::testing::FakeCloudProvider;
use karpenter_core::apis::NodeClaim;
use kube::Api;
use kube::api::PostParams;

use super::support::{inputs, options, settings, world};

const QUEUE: &str = "test-cluster";
/// controller-runtime's gauge for the default Lease.
const LEADER_STATUS: &str = "leader_election_master_status{name=\"karpenter-leader-election\"}";

/// The actors running besides the AWS group (which runs on every replica, leading or not).
fn daemon_actors(daemon: &DaemonAssembly) -> Vec<String> {
    daemon
        .kit()
        .snapshot()
        .actors
        .iter()
        .filter(|a| !AWS_ACTOR_KINDS.contains(&a.kind.as_str()))
        .map(|a| format!("{} {}", a.kind, a.key))
        .collect()
}

async fn until_started(daemon: &DaemonAssembly) {
    while !daemon.actors_started() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[actix::test]
async fn only_the_leader_runs_actors_and_a_standby_takes_over_when_it_stops() {
    tokio::time::pause();
    let emulator = Emulator::new().unwrap();
    let world = world();
    world
        .create_interruption_queue(QUEUE, "test-cluster")
        .await
        .unwrap();

    let mut a = DaemonAssembly::start(
        inputs(&emulator, &world, settings(Some(QUEUE), true), "a"),
        options(),
    )
    .await
    .unwrap();
    a.until_leading().await;
    until_started(&a).await;
    tokio::task::yield_now().await;
    assert!(
        (metric(&a, LEADER_STATUS) - 1.0).abs() < f64::EPSILON,
        "controller-runtime's gauge"
    );
    assert!(
        a.kit()
            .snapshot()
            .actor("InterruptionActor", "interruption")
            .is_some(),
        "the leader runs the actors"
    );

    let b = DaemonAssembly::start(
        inputs(&emulator, &world, settings(Some(QUEUE), true), "b"),
        options(),
    )
    .await
    .unwrap();
    // A minute as standby: watching, ready, but no actor started.
    tokio::time::sleep(Duration::from_mins(1)).await;
    assert!(!b.is_leading());
    assert!(!b.actors_started());
    assert!(
        (metric(&b, LEADER_STATUS) - 0.0).abs() < f64::EPSILON,
        "a standby reports 0"
    );
    // Only the AWS group runs on a standby (its catalogue refresh gates readiness).
    let standby = b.kit().snapshot();
    assert!(
        standby
            .actors
            .iter()
            .all(|a| AWS_ACTOR_KINDS.contains(&a.kind.as_str())),
        "{:?}",
        standby.actors
    );
    assert!(
        standby
            .actor("CatalogueRefreshActor", "aws-catalogue")
            .is_some_and(|a| a.state == "loaded")
    );
    let results = b.readiness().run();
    let failing: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failing.is_empty(), "a standby is ready: {failing:?}");

    // The leader stops cleanly: it releases the lease and the standby starts its actors.
    let unfinished = a.shutdown(Duration::from_secs(20)).await;
    assert!(unfinished.is_empty());
    let mut b = b;
    let handover = tokio::time::Instant::now();
    b.until_leading().await;
    until_started(&b).await;
    tokio::task::yield_now().await;
    assert!(
        (metric(&b, LEADER_STATUS) - 1.0).abs() < f64::EPSILON,
        "the new leader reports 1"
    );
    assert!(
        handover.elapsed() <= Duration::from_secs(5),
        "a released lease is taken at the next retry, not after the lease duration"
    );
    assert!(
        b.kit()
            .snapshot()
            .actor("InterruptionActor", "interruption")
            .is_some()
    );
    b.shutdown(Duration::from_secs(20)).await;
}

#[actix::test]
async fn shutdown_gives_in_flight_launches_their_grace_and_names_the_unfinished() {
    tokio::time::pause();
    let emulator = Emulator::new().unwrap();
    let world = world();
    let mut inputs = inputs(&emulator, &world, settings(None, false), "solo");
    // A cloud whose launches take an hour: the NodeClaim below is in flight at shutdown.
    let cloud = FakeCloudProvider::new(Arc::new(SystemClock));
    cloud.set_create_latency(Duration::from_hours(1));
    inputs.cloud = CloudSource::Ready {
        cloud: Arc::new(cloud),
        unavailable: Arc::new(UnavailableOfferings::default()),
    };
    let daemon = DaemonAssembly::start(inputs, options()).await.unwrap();
    until_started(&daemon).await;
    // A NodeClaim whose launch never finishes.
    let claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-inflight"},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []
        }
    }))
    .unwrap();
    Api::<NodeClaim>::all(emulator.client())
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    while daemon.state().nodeclaim("default-inflight").is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = tokio::time::Instant::now();
    let unfinished = daemon.shutdown(Duration::from_secs(20)).await;
    assert_eq!(unfinished, ["default-inflight"]);
    assert!(
        started.elapsed() >= Duration::from_secs(20),
        "it waited the grace"
    );
}

/// The daemon's writes to the emulator (everything but reads and the elector's own Lease).
fn writes(emulator: &Emulator) -> Vec<String> {
    emulator
        .requests()
        .into_iter()
        .filter(|r| {
            !matches!(
                r.verb,
                Verb::Get | Verb::List | Verb::Watch | Verb::Discovery
            )
        })
        .filter(|r| r.resource.as_deref() != Some("leases"))
        .map(|r| format!("{} {}", r.verb, r.path))
        .collect()
}

fn metric(daemon: &DaemonAssembly, name: &str) -> f64 {
    let text = daemon.registries().encode().unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} missing from\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[actix::test]
async fn a_leader_starts_no_actor_before_every_kind_has_been_listed() {
    tokio::time::pause();
    let emulator = Emulator::new().unwrap();
    let world = world();
    // One kind cannot be listed: the store never syncs.
    emulator.faults().inject(
        FaultRule::fail(500)
            .on(Verb::List)
            .resource("poddisruptionbudgets"),
    );
    let daemon = DaemonAssembly::start(
        inputs(&emulator, &world, settings(None, false), "solo"),
        options(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_mins(1)).await;
    assert!(daemon.is_leading());
    assert!(!daemon.actors_started(), "actors started on a partial view");
    assert_eq!(daemon_actors(&daemon), Vec::<String>::new());
    let ready = daemon.readiness().run();
    assert!(
        ready
            .iter()
            .any(|(name, result)| name == "cache-synced" && result.is_err()),
        "{ready:?}"
    );
    assert!((metric(&daemon, "karpenter_cluster_state_synced") - 0.0).abs() < f64::EPSILON);
    assert!(metric(&daemon, "karpenter_cluster_state_unsynced_time_seconds") >= 59.0);

    // The list succeeds: the actors start, the gauges follow.
    emulator.faults().clear();
    let synced = tokio::time::timeout(Duration::from_mins(2), until_started(&daemon)).await;
    assert!(
        synced.is_ok(),
        "the actors never started: synced {}, leading {}, requests {:?}",
        karpenter_actors::ports::cluster_view::ClusterView::is_synced(daemon.state()),
        daemon.is_leading(),
        emulator
            .requests()
            .iter()
            .rev()
            .take(5)
            .map(|r| format!("{} {} {}", r.verb, r.path, r.code))
            .collect::<Vec<_>>()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!((metric(&daemon, "karpenter_cluster_state_synced") - 1.0).abs() < f64::EPSILON);
    assert!(metric(&daemon, "karpenter_cluster_state_unsynced_time_seconds").abs() < f64::EPSILON);
    daemon.shutdown(Duration::from_secs(1)).await;
}

#[actix::test]
async fn a_leader_whose_renewal_hangs_stops_its_actors_at_the_renew_deadline_and_writes_nothing_after()
 {
    tokio::time::pause();
    let emulator = Emulator::new().unwrap();
    let world = world();
    let mut a = DaemonAssembly::start(
        inputs(&emulator, &world, settings(None, true), "a"),
        options(),
    )
    .await
    .unwrap();
    a.until_leading().await;
    until_started(&a).await;
    // Renewals hang from now on.
    emulator.faults().inject(
        FaultRule::delay(Duration::from_hours(1))
            .on(Verb::Update)
            .resource("leases"),
    );
    let hung = tokio::time::Instant::now();
    let exit = a.wait().await;
    let lost_after = hung.elapsed();
    assert_eq!(exit, Exit::LostLeadership);
    let timing = LeaseTiming::default();
    // The last renewal started before the hang, so the deadline is at most 10 s after it;
    // stopping the actors takes a few ticks of the paused clock.
    assert!(
        lost_after <= timing.renew_deadline + Duration::from_millis(100),
        "leadership outlived the renew deadline: {lost_after:?}"
    );
    assert!(
        !a.actors_started(),
        "the actors stop with the lease, without a grace"
    );
    assert_eq!(daemon_actors(&a), Vec::<String>::new());

    // The cluster keeps changing: nothing this replica holds writes to it any more.
    let before = writes(&emulator);
    let claim: NodeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-late"},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []
        }
    }))
    .unwrap();
    Api::<NodeClaim>::all(emulator.client())
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_mins(1)).await;
    let after = writes(&emulator);
    assert_eq!(
        &after[before.len() + 1..],
        &[] as &[String],
        "writes after the lease was lost"
    );
    let started = tokio::time::Instant::now();
    a.shutdown(Duration::from_secs(20)).await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "no launch grace after a lost lease"
    );
}

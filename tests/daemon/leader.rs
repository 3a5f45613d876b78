//! Leader-gated start on tokio's paused clock: a standby watches (its cache syncs, its probes
//! pass) but starts no actor but the AWS group's until the leader stops and releases the lease;
//! shutdown gives
//! launches in flight their grace and names those that did not finish.

use std::sync::Arc;
use std::time::Duration;

use karpenter::cloud::CloudSource;
use karpenter::daemon::DaemonAssembly;
use karpenter::emulator::Emulator;
use karpenter_actors::aws::AWS_ACTOR_KINDS;
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_actors::testing::FakeCloudProvider;
use karpenter_core::apis::NodeClaim;
use kube::Api;
use kube::api::PostParams;

use super::support::{inputs, options, settings, world};

const QUEUE: &str = "test-cluster";

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

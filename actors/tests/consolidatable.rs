//! The NodeClaim side of consolidation over fakes: pod events on a node are recorded as its
//! NodeClaim's `lastPodEventTime` (deduplicated), and `Consolidatable` is set `consolidateAfter`
//! after the last pod event or the initialization, removed under `Never`. The daemon assembly
//! routes the mirrored fake cluster's changes (`support`); time is tokio's paused clock.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod support;

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use karpenter_actors::testing::{ClusterCall, Operation};
use karpenter_core::apis::duration::NillableDuration;
use serde_json::json;
use support::{Harness, PodSpecBuilder, nodeclass, nodepool, plus, ready_nodeclaim, until};

const NODEPOOL: &str = "default";
const CONSOLIDATABLE: &str = "Consolidatable";

/// A cluster with a ready class and the `default` pool waiting `consolidate_after`.
fn cluster(consolidate_after: &str) -> Harness {
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool(
        NODEPOOL,
        json!({ "spec": { "disruption": { "consolidateAfter": consolidate_after } } }),
    ));
    h
}

/// When a condition of the NodeClaim last transitioned.
fn transitioned(h: &Harness, name: &str, kind: &str) -> Option<Timestamp> {
    h.nodeclaim(name)?
        .status?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.last_transition_time.0)
}

fn consolidatable(h: &Harness, name: &str) -> Option<String> {
    h.condition(name, CONSOLIDATABLE).map(|c| c.0)
}

fn last_pod_event(h: &Harness, name: &str) -> Option<Timestamp> {
    h.nodeclaim(name)?.status?.last_pod_event_time.map(|t| t.0)
}

fn status_writes(h: &Harness, name: &str) -> usize {
    h.api
        .calls_of(Operation::UpdateNodeClaimStatus)
        .into_iter()
        .filter(|call| matches!(call, ClusterCall::UpdateNodeClaimStatus { name: n } if n == name))
        .count()
}

/// Asserts `Consolidatable` is absent until just before `at` and `True` from `at`: the requeue
/// lands on the instant the window ends (tokio's timer wheel rounds it up to its next
/// millisecond, so the condition transitions at most 1 ms later).
async fn expect_consolidatable_at(h: &Harness, name: &str, at: Timestamp) {
    // `settle` moves at most 6 ms, so this looks 4 ms or more before `at`.
    tokio::time::sleep(until(h, at).checked_sub(Duration::from_millis(10)).unwrap()).await;
    h.settle().await;
    assert_eq!(
        consolidatable(h, name),
        None,
        "not consolidatable before {at}"
    );
    tokio::time::sleep(until(h, at)).await;
    h.settle().await;
    assert_eq!(consolidatable(h, name).as_deref(), Some("True"));
    let marked = transitioned(h, name, CONSOLIDATABLE).unwrap();
    assert!(
        marked >= at && marked <= plus(at, Duration::from_millis(1)),
        "marked at {marked}, the window ended at {at}"
    );
}

#[actix::test]
async fn a_nodeclaim_becomes_consolidatable_exactly_consolidate_after_after_its_initialization() {
    tokio::time::pause();
    let h = cluster("30s");
    ready_nodeclaim(&h, "default-a", json!({})).await;
    let initialized = transitioned(&h, "default-a", "Initialized").unwrap();
    assert_eq!(consolidatable(&h, "default-a"), None);
    assert_eq!(last_pod_event(&h, "default-a"), None);

    expect_consolidatable_at(&h, "default-a", plus(initialized, Duration::from_secs(30))).await;
    assert_eq!(
        h.condition("default-a", "Ready").map(|c| c.0).as_deref(),
        Some("True"),
        "Ready does not depend on Consolidatable"
    );
}

#[actix::test]
async fn a_pod_event_removes_consolidatable_until_consolidate_after_has_passed_again() {
    tokio::time::pause();
    let h = cluster("30s");
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    h.advance(Duration::from_secs(31)).await;
    assert_eq!(consolidatable(&h, "default-a").as_deref(), Some("True"));

    let event = h.clock_now();
    h.put_pod(PodSpecBuilder::new("web-1", &node).build());
    h.settle().await;
    assert_eq!(
        last_pod_event(&h, "default-a"),
        Some(event),
        "a pod created on the node is recorded"
    );
    assert_eq!(
        consolidatable(&h, "default-a"),
        None,
        "the condition is removed"
    );

    expect_consolidatable_at(&h, "default-a", plus(event, Duration::from_secs(30))).await;
}

#[actix::test]
async fn two_pod_events_five_seconds_apart_are_written_once() {
    tokio::time::pause();
    let h = cluster("1h");
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    let before = status_writes(&h, "default-a");

    let first = h.clock_now();
    h.put_pod(PodSpecBuilder::new("web-1", &node).build());
    h.settle().await;
    assert_eq!(last_pod_event(&h, "default-a"), Some(first));
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.put_pod(PodSpecBuilder::new("web-2", &node).build());
    h.settle().await;
    assert_eq!(
        last_pod_event(&h, "default-a"),
        Some(first),
        "within 10 s of the last one"
    );
    assert_eq!(status_writes(&h, "default-a") - before, 1, "one write");

    // Ten seconds after the recorded one, the next event is written.
    tokio::time::sleep(until(&h, plus(first, Duration::from_secs(10)))).await;
    let third = h.clock_now();
    h.remove_pod("default", "web-1").await;
    h.settle().await;
    assert_eq!(
        last_pod_event(&h, "default-a"),
        Some(third),
        "a pod deleted from the node"
    );
    assert_eq!(status_writes(&h, "default-a") - before, 2);
}

#[actix::test]
async fn consolidate_after_never_never_marks_and_a_nodepool_change_to_never_removes_the_condition()
{
    tokio::time::pause();
    let h = cluster("Never");
    ready_nodeclaim(&h, "default-a", json!({})).await;
    h.advance(Duration::from_hours(2)).await;
    assert_eq!(consolidatable(&h, "default-a"), None, "Never");

    let set_consolidate_after = |value: NillableDuration| {
        let mut pool = h.api.nodepool(NODEPOOL).unwrap();
        pool.spec.disruption.consolidate_after = value;
        h.add_nodepool(pool);
    };
    set_consolidate_after(NillableDuration::from_duration(Duration::from_mins(5)));
    h.settle().await;
    assert_eq!(
        consolidatable(&h, "default-a").as_deref(),
        Some("True"),
        "initialized two hours ago: consolidatable as soon as the pool allows it"
    );

    set_consolidate_after(NillableDuration::never());
    h.settle().await;
    assert_eq!(consolidatable(&h, "default-a"), None, "removed");
    h.advance(Duration::from_hours(1)).await;
    assert_eq!(consolidatable(&h, "default-a"), None, "and stays away");
}

#[actix::test]
async fn pod_events_of_daemonset_pods_and_of_nodes_without_a_nodeclaim_are_ignored() {
    tokio::time::pause();
    let h = cluster("30s");
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    h.advance(Duration::from_secs(31)).await;
    assert_eq!(consolidatable(&h, "default-a").as_deref(), Some("True"));
    let before = status_writes(&h, "default-a");

    h.put_pod(PodSpecBuilder::new("agent-1", &node).daemon().build());
    h.settle().await;
    h.put_node(support::node(
        "ip-elsewhere.ec2.internal",
        "aws:///us-west-2a/i-unknown",
        true,
    ));
    h.put_pod(PodSpecBuilder::new("web-elsewhere", "ip-elsewhere.ec2.internal").build());
    h.settle().await;
    assert_eq!(last_pod_event(&h, "default-a"), None);
    assert_eq!(consolidatable(&h, "default-a").as_deref(), Some("True"));
    assert_eq!(status_writes(&h, "default-a"), before, "no write");

    // The same node with an ordinary pod: recorded (the ignored ones were not missed by luck).
    h.put_pod(PodSpecBuilder::new("web-1", &node).build());
    h.settle().await;
    assert!(last_pod_event(&h, "default-a").is_some());
}

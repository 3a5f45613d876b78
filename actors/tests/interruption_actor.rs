//! The interruption actor over kwok's SQS and EventBridge (the same ports moto and AWS serve),
//! with a recording `ClusterApi` and paused tokio time: each event kind reaches the right
//! NodeClaim, messages are deleted after success or when they do not parse, and left for
//! redelivery when handling fails.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_actors::interruption::{
    InterruptionActor, InterruptionDeps, InterruptionMetrics, setup,
};
use karpenter_actors::kwok::eventbridge::KwokEventBridge;
use karpenter_actors::kwok::sqs::KwokSqs;
use karpenter_actors::ports::clock::{Clock, ManualClock};
use karpenter_actors::ports::cluster::{ClusterError, ObjectKind};
use karpenter_actors::ports::eventbridge::{EventBridgeApi, EventEntry};
use karpenter_actors::ports::sqs::SqsApi;
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_actors::runtime::{ActorKit, GroupSpec, KitOptions};
use karpenter_actors::testing::MemoryClusterView;
use karpenter_actors::testing::{FakeClusterApi, Operation};
use karpenter_core::apis::labels;
use karpenter_core::apis::nodeclaim::{
    NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference,
};
use karpenter_core::domain::instance_type::CapacityType;
use karpenter_core::domain::interruption::Kind;
use karpenter_core::domain::interruption::setup::Problem;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

const QUEUE: &str = "my-cluster";
const CLUSTER: &str = "my-cluster";
const START: &str = "2025-05-01T12:00:00Z";

struct Harness {
    sqs: Arc<KwokSqs>,
    eventbridge: Arc<KwokEventBridge>,
    cluster: Arc<FakeClusterApi>,
    view: Arc<MemoryClusterView>,
    unavailable: Arc<UnavailableOfferings>,
    metrics: InterruptionMetrics,
    clock: Arc<ManualClock>,
    queue_url: String,
}

fn nodeclaim(name: &str, instance_id: &str, capacity_type: &str) -> NodeClaim {
    let mut claim = NodeClaim::new(
        name,
        NodeClaimSpec {
            taints: vec![],
            startup_taints: vec![],
            requirements: karpenter_core::apis::nodeclaim::SharedRequirements::default(),
            resources: karpenter_core::apis::nodeclaim::ResourceRequirements::default(),
            node_class_ref: NodeClassReference::ec2("default"),
            termination_grace_period: None,
            expire_after: karpenter_core::apis::duration::NillableDuration("720h".into()),
        },
    );
    claim.metadata.labels = Some(BTreeMap::from([
        (labels::NODEPOOL.to_owned(), "default".to_owned()),
        (labels::INSTANCE_TYPE.to_owned(), "m5.large".to_owned()),
        (labels::ZONE.to_owned(), "us-west-2a".to_owned()),
        (labels::CAPACITY_TYPE.to_owned(), capacity_type.to_owned()),
    ]));
    claim.status = Some(NodeClaimStatus {
        provider_id: Some(format!("aws:///us-west-2a/{instance_id}")),
        node_name: Some(format!("ip-{instance_id}")),
        ..NodeClaimStatus::default()
    });
    claim
}

async fn harness(claims: &[NodeClaim]) -> Harness {
    let clock = Arc::new(ManualClock::new(START.parse().unwrap()));
    let sqs = Arc::new(KwokSqs::new("us-west-2"));
    let eventbridge = Arc::new(KwokEventBridge::new(
        "us-west-2",
        Arc::clone(&sqs),
        clock.clone(),
    ));
    let applied = setup::ensure(sqs.as_ref(), eventbridge.as_ref(), QUEUE, CLUSTER)
        .await
        .unwrap();
    let cluster = Arc::new(FakeClusterApi::new());
    let view = Arc::new(MemoryClusterView::new());
    for claim in claims {
        cluster.seed_nodeclaim(claim.clone());
        view.put_nodeclaim(claim);
    }
    Harness {
        sqs,
        eventbridge,
        cluster,
        view,
        unavailable: Arc::new(UnavailableOfferings::new(Duration::from_mins(3))),
        metrics: InterruptionMetrics::unregistered(Family::default()),
        clock,
        queue_url: applied.queue_url,
    }
}

fn start(h: &Harness, rebalance_replace: bool) -> (ActorKit, karpenter_actors::runtime::RootGroup) {
    let mut registry = Registry::default();
    let kit = ActorKit::new(&mut registry, KitOptions::default());
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let deps = InterruptionDeps {
        sqs: h.sqs.clone(),
        cluster: h.cluster.clone(),
        view: h.view.clone(),
        unavailable: h.unavailable.clone(),
        clock: h.clock.clone() as Arc<dyn Clock>,
        queue: QUEUE.to_owned(),
        rebalance_replace,
        metrics: h.metrics.clone(),
    };
    root.spawn::<InterruptionActor>("interruption", deps)
        .unwrap();
    (kit, root)
}

async fn put(h: &Harness, detail_type: &str, source: &str, detail: serde_json::Value) {
    let failed = h
        .eventbridge
        .put_events(&[EventEntry {
            source: source.to_owned(),
            detail_type: detail_type.to_owned(),
            detail: detail.to_string(),
            resources: vec![],
        }])
        .await
        .unwrap();
    assert_eq!(failed, 0);
}

async fn spot_interruption(h: &Harness, instance_id: &str) {
    put(
        h,
        "EC2 Spot Instance Interruption Warning",
        "aws.ec2",
        serde_json::json!({ "instance-id": instance_id, "instance-action": "terminate" }),
    )
    .await;
}

/// Lets simulated time pass until `done` holds (at most a simulated minute).
async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..600 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

fn deleted_nodeclaims(h: &Harness) -> Vec<String> {
    h.cluster
        .calls_of(Operation::DeleteNodeClaim)
        .into_iter()
        .map(|call| format!("{call:?}"))
        .collect()
}

#[actix::test]
async fn spot_interruption_deletes_the_nodeclaim_marks_the_offering_and_deletes_the_message() {
    tokio::time::pause();
    let h = harness(&[
        nodeclaim("default-a", "i-0aaa", "spot"),
        nodeclaim("default-b", "i-0bbb", "spot"),
    ])
    .await;
    let (_kit, _root) = start(&h, false);
    spot_interruption(&h, "i-0aaa").await;
    eventually("the message to be deleted", || h.metrics.deleted.get() == 1).await;
    let deleted = deleted_nodeclaims(&h);
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(deleted[0].contains("default-a"), "{deleted:?}");
    assert!(
        h.unavailable
            .is_unavailable("m5.large", "us-west-2a", CapacityType::Spot)
    );
    assert_eq!(h.metrics.received_count(Kind::SpotInterrupted), 1);
    assert_eq!(h.sqs.depth(&h.queue_url), 0);
    let reasons: Vec<String> = h.cluster.events().into_iter().map(|e| e.reason).collect();
    assert!(
        reasons.contains(&"SpotInterrupted".to_owned()),
        "{reasons:?}"
    );
}

#[actix::test]
async fn each_event_kind_reaches_the_right_nodeclaim() {
    tokio::time::pause();
    let claims = [
        nodeclaim("health", "i-0001", "on-demand"),
        nodeclaim("stopping", "i-0002", "on-demand"),
        nodeclaim("terminated", "i-0003", "on-demand"),
        nodeclaim("rebalanced", "i-0004", "spot"),
    ];
    let h = harness(&claims).await;
    let (_kit, _root) = start(&h, false);
    put(
        &h,
        "AWS Health Event",
        "aws.health",
        serde_json::json!({ "service": "EC2", "eventTypeCategory": "scheduledChange",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", "affectedEntities": [{ "entityValue": "i-0001" }] }),
    )
    .await;
    for (id, state) in [("i-0002", "stopping"), ("i-0003", "terminated")] {
        put(
            &h,
            "EC2 Instance State-change Notification",
            "aws.ec2",
            serde_json::json!({ "instance-id": id, "state": state }),
        )
        .await;
    }
    put(
        &h,
        "EC2 Instance Rebalance Recommendation",
        "aws.ec2",
        serde_json::json!({ "instance-id": "i-0004" }),
    )
    .await;
    eventually("all four messages to be deleted", || {
        h.metrics.deleted.get() == 4
    })
    .await;
    let deleted = deleted_nodeclaims(&h).join(" ");
    for name in ["health", "stopping", "terminated"] {
        assert!(deleted.contains(name), "{name} not deleted: {deleted}");
    }
    assert!(
        !deleted.contains("rebalanced"),
        "rebalance recommendations only record an event by default"
    );
    let reasons: Vec<String> = h.cluster.events().into_iter().map(|e| e.reason).collect();
    for reason in [
        "InstanceUnhealthy",
        "InstanceStopping",
        "InstanceTerminating",
        "SpotRebalanceRecommendation",
    ] {
        assert!(
            reasons.contains(&reason.to_owned()),
            "{reason} missing from {reasons:?}"
        );
    }
}

#[actix::test]
async fn rebalance_recommendations_replace_the_node_when_enabled() {
    tokio::time::pause();
    let h = harness(&[nodeclaim("rebalanced", "i-0004", "spot")]).await;
    let (_kit, _root) = start(&h, true);
    put(
        &h,
        "EC2 Instance Rebalance Recommendation",
        "aws.ec2",
        serde_json::json!({ "instance-id": "i-0004" }),
    )
    .await;
    eventually("the message to be deleted", || h.metrics.deleted.get() == 1).await;
    assert_eq!(deleted_nodeclaims(&h).len(), 1);
}

#[actix::test]
async fn an_unparseable_message_is_deleted_and_counted() {
    tokio::time::pause();
    let h = harness(&[]).await;
    let (_kit, _root) = start(&h, false);
    h.sqs
        .send_message(&h.queue_url, "{\"version\": \"0\", \"detail-type\": ")
        .await
        .unwrap();
    eventually("the message to be deleted", || h.metrics.deleted.get() == 1).await;
    assert_eq!(h.metrics.unparseable_count("malformed_envelope"), 1);
    assert_eq!(h.sqs.depth(&h.queue_url), 0);
}

#[actix::test]
async fn a_failed_deletion_leaves_the_message_for_redelivery() {
    tokio::time::pause();
    let h = harness(&[nodeclaim("default-a", "i-0aaa", "spot")]).await;
    h.cluster.fail_next(
        Operation::DeleteNodeClaim,
        ClusterError::Throttled {
            kind: ObjectKind::NodeClaim,
            name: "default-a".into(),
            message: "slow down".into(),
        },
    );
    let (_kit, _root) = start(&h, false);
    spot_interruption(&h, "i-0aaa").await;
    eventually("the first attempt", || {
        h.cluster.calls_of(Operation::DeleteNodeClaim).len() == 1
    })
    .await;
    assert_eq!(
        h.metrics.deleted.get(),
        0,
        "a failed message must not be deleted"
    );
    assert_eq!(h.sqs.depth(&h.queue_url), 1);
    // Redelivered after the 20 s visibility timeout, and handled this time.
    eventually("the redelivered message to be deleted", || {
        h.metrics.deleted.get() == 1
    })
    .await;
    assert_eq!(h.cluster.calls_of(Operation::DeleteNodeClaim).len(), 2);
    assert_eq!(h.sqs.depth(&h.queue_url), 0);
}

/// Karpenter's `deleteNodeClaim` returns early for a NodeClaim already deleting: the warning is
/// recorded and the offering marked, but no second delete and no second count in
/// `karpenter_nodeclaims_disrupted_total`.
#[actix::test]
async fn a_warning_for_a_nodeclaim_already_deleting_is_recorded_but_not_deleted_or_counted_again() {
    tokio::time::pause();
    let mut deleting = nodeclaim("default-a", "i-0aaa", "spot");
    deleting.metadata.deletion_timestamp = Some(Time(START.parse().unwrap()));
    let h = harness(&[deleting]).await;
    let (_kit, _root) = start(&h, false);
    spot_interruption(&h, "i-0aaa").await;
    eventually("the message to be deleted", || h.metrics.deleted.get() == 1).await;
    assert!(
        deleted_nodeclaims(&h).is_empty(),
        "{:?}",
        deleted_nodeclaims(&h)
    );
    assert_eq!(h.metrics.disrupted_total(), 0);
    assert!(
        h.unavailable
            .is_unavailable("m5.large", "us-west-2a", CapacityType::Spot)
    );
    let reasons: Vec<String> = h.cluster.events().into_iter().map(|e| e.reason).collect();
    assert!(
        reasons.contains(&"SpotInterrupted".to_owned()),
        "{reasons:?}"
    );
    assert!(
        !reasons.contains(&"TerminatingOnInterruption".to_owned()),
        "{reasons:?}"
    );

    // A NodeClaim not deleting yet is deleted and counted once.
    let h = harness(&[nodeclaim("default-b", "i-0bbb", "spot")]).await;
    let (_kit, _root) = start(&h, false);
    spot_interruption(&h, "i-0bbb").await;
    eventually("the message to be deleted", || h.metrics.deleted.get() == 1).await;
    assert_eq!(h.metrics.disrupted_total(), 1);
}

#[actix::test]
async fn duplicate_deliveries_are_harmless() {
    tokio::time::pause();
    let h = harness(&[nodeclaim("default-a", "i-0aaa", "spot")]).await;
    let (_kit, _root) = start(&h, false);
    spot_interruption(&h, "i-0aaa").await;
    spot_interruption(&h, "i-0aaa").await;
    eventually("both messages to be deleted", || {
        h.metrics.deleted.get() == 2
    })
    .await;
    assert!(h.cluster.nodeclaim("default-a").is_none());
}

#[actix::test]
async fn events_for_unknown_instances_are_deleted_without_action() {
    tokio::time::pause();
    let h = harness(&[nodeclaim("default-a", "i-0aaa", "spot")]).await;
    let (_kit, _root) = start(&h, false);
    spot_interruption(&h, "i-0fffffff").await;
    eventually("the message to be deleted", || h.metrics.deleted.get() == 1).await;
    assert!(deleted_nodeclaims(&h).is_empty());
}

#[actix::test]
async fn a_message_for_an_instance_an_unsynced_view_cannot_see_waits_for_the_sync() {
    tokio::time::pause();
    let h = harness(&[]).await;
    h.view.set_synced(false);
    let (_kit, _root) = start(&h, false);
    spot_interruption(&h, "i-0aaa").await;
    // Two redeliveries (20 s visibility each) while the view has not listed its NodeClaims.
    tokio::time::sleep(Duration::from_secs(50)).await;
    assert_eq!(
        h.metrics.deleted.get(),
        0,
        "deleted before the view could see its NodeClaim"
    );
    assert_eq!(h.sqs.depth(&h.queue_url), 1);
    // The first list arrives with the NodeClaim: the redelivered warning is acted on.
    let claim = nodeclaim("default-a", "i-0aaa", "spot");
    h.cluster.seed_nodeclaim(claim.clone());
    h.view.put_nodeclaim(&claim);
    h.view.set_synced(true);
    eventually("the redelivered message to be handled", || {
        h.metrics.deleted.get() == 1
    })
    .await;
    let deleted = deleted_nodeclaims(&h);
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert!(deleted[0].contains("default-a"), "{deleted:?}");
}

#[actix::test]
async fn the_actor_keeps_polling_through_sqs_failures() {
    tokio::time::pause();
    let h = harness(&[nodeclaim("default-a", "i-0aaa", "spot")]).await;
    h.sqs.faults().fail_next(
        "ReceiveMessage",
        3,
        karpenter_actors::ports::aws_error::AwsError::new(
            karpenter_actors::ports::aws_error::AwsService::Sqs,
            "ReceiveMessage",
            Some("ServiceUnavailable"),
            "try later",
        )
        .with_status(503),
    );
    let (_kit, _root) = start(&h, false);
    spot_interruption(&h, "i-0aaa").await;
    eventually("the message to be handled after the outage", || {
        h.metrics.deleted.get() == 1
    })
    .await;
    assert_eq!(deleted_nodeclaims(&h).len(), 1);
}

#[actix::test]
async fn setup_is_idempotent_and_check_reports_what_differs() {
    let h = harness(&[]).await;
    let again = setup::ensure(h.sqs.as_ref(), h.eventbridge.as_ref(), QUEUE, CLUSTER)
        .await
        .unwrap();
    assert_eq!(again.changes, Vec::<String>::new());
    assert_eq!(
        setup::check(h.sqs.as_ref(), h.eventbridge.as_ref(), QUEUE, CLUSTER)
            .await
            .unwrap(),
        Vec::new()
    );
    // A rule whose pattern drifted is reported, then fixed by running setup again.
    let rule = karpenter_core::domain::interruption::setup::desired(QUEUE, CLUSTER).rules[1]
        .name
        .clone();
    h.eventbridge
        .put_rule(&rule, r#"{"source":["aws.ec2"]}"#)
        .await
        .unwrap();
    let problems = setup::check(h.sqs.as_ref(), h.eventbridge.as_ref(), QUEUE, CLUSTER)
        .await
        .unwrap();
    assert!(
        matches!(problems.as_slice(), [Problem::RulePatternDiffers { .. }]),
        "{problems:?}"
    );
    let fixed = setup::ensure(h.sqs.as_ref(), h.eventbridge.as_ref(), QUEUE, CLUSTER)
        .await
        .unwrap();
    assert_eq!(fixed.changes.len(), 1, "{:?}", fixed.changes);
    assert_eq!(
        setup::check(h.sqs.as_ref(), h.eventbridge.as_ref(), QUEUE, CLUSTER)
            .await
            .unwrap(),
        Vec::new()
    );
    // Another queue name: everything is missing.
    let missing = setup::check(h.sqs.as_ref(), h.eventbridge.as_ref(), "other", CLUSTER)
        .await
        .unwrap();
    assert_eq!(
        missing,
        vec![Problem::QueueMissing {
            queue: "other".into()
        }]
    );
}

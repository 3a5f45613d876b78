//! The node lifecycle actors end to end over fakes: NodeClaimActor (launch, registration,
//! initialization, liveness, drain, termination), NodePoolActor (status, hash, readiness) and
//! the `GarbageCollectorActor`, started by the daemon assembly and fed by a mirrored fake
//! cluster (`support`). Time is tokio's paused clock; no test sleeps in wall time.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod support;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karpenter_actors::messages::ClusterChange;
use karpenter_actors::metrics::{FORCEFUL_TERMINATION, disruption_reason};
use karpenter_actors::nodepool::GetNodePoolUsage;
use karpenter_actors::ports::cloud_provider::{CloudProviderError, DriftReason};
use karpenter_actors::ports::cluster::{ClusterError, ObjectKind};
use karpenter_actors::runtime::{FaultAction, FaultPlan, FaultRule};
use karpenter_actors::testing::{
    CloudCall, CloudOperation, FAKE_INSTANCE_TYPE, FAKE_ZONE, FakeInstanceState,
};
use karpenter_actors::testing::{ClusterCall, Operation};
use karpenter_core::apis::labels;
use karpenter_core::domain::nodepool_hash::{HASH_VERSION, template_hash};
use serde_json::json;
use support::{
    Harness, PodSpecBuilder, make_ready, nodeclaim, nodeclass, nodepool, pod_deletions,
    ready_nodeclaim,
};

const NODEPOOL: &str = "default";

fn on_demand() -> &'static str {
    labels::CAPACITY_TYPE_ON_DEMAND
}

fn evictions(h: &Harness) -> Vec<String> {
    h.api
        .calls_of(Operation::EvictPod)
        .into_iter()
        .filter_map(|call| match call {
            ClusterCall::EvictPod { name, .. } => Some(name),
            _ => None,
        })
        .collect()
}

fn server_error(kind: ObjectKind, name: &str) -> ClusterError {
    ClusterError::Server {
        kind,
        name: name.to_owned(),
        code: 500,
        message: "etcd is unhappy".to_owned(),
    }
}

#[actix::test]
async fn a_nodeclaim_launches_registers_and_initializes_into_a_ready_node() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool(NODEPOOL, json!({})));
    h.add_nodeclaim(nodeclaim(
        "default-a",
        json!({ "spec": {
            "taints": [{ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" }],
            "startupTaints": [{ "key": "cni-not-ready", "effect": "NoSchedule" }],
        }}),
    ));
    h.settle().await;

    let launched = h.nodeclaim("default-a").unwrap();
    assert_eq!(
        h.condition("default-a", "Launched"),
        Some(("True".into(), "Launched".into()))
    );
    let status = launched.status.clone().unwrap();
    assert!(
        status
            .provider_id
            .as_deref()
            .unwrap()
            .starts_with("aws:///")
    );
    assert_eq!(status.image_id.as_deref(), Some("ami-0fake00000000000"));
    assert_eq!(status.capacity["cpu"].0, "2");
    assert_eq!(status.allocatable["memory"].0, "7Gi");
    let claim_labels = launched.metadata.labels.unwrap();
    assert_eq!(claim_labels[labels::INSTANCE_TYPE], "m5.large");
    assert_eq!(claim_labels[labels::CAPACITY_TYPE], on_demand());
    assert_eq!(
        h.condition("default-a", "Registered"),
        Some(("Unknown".into(), "NodeNotFound".into()))
    );
    let status_writes = h
        .api
        .calls_of(Operation::UpdateNodeClaimStatus)
        .into_iter()
        .filter(|c| matches!(c, ClusterCall::UpdateNodeClaimStatus { name } if name == "default-a"))
        .count();
    assert_eq!(
        status_writes, 1,
        "Karpenter patches the launch and the registration's NodeNotFound in one write"
    );

    let node = h.register_node("default-a", &[], &[]);
    h.settle().await;
    assert_eq!(
        h.condition("default-a", "Registered"),
        Some(("True".into(), "Registered".into()))
    );
    let synced = h.api.node(&node).unwrap();
    assert_eq!(
        synced.metadata.finalizers.as_deref(),
        Some(&[labels::TERMINATION_FINALIZER.to_owned()][..])
    );
    assert_eq!(
        synced.metadata.owner_references.as_ref().unwrap()[0].name,
        "default-a"
    );
    let node_labels = synced.metadata.labels.unwrap();
    assert_eq!(node_labels[labels::REGISTERED], "true");
    assert_eq!(node_labels[labels::NODEPOOL], NODEPOOL);
    assert_eq!(node_labels[labels::INSTANCE_TYPE], "m5.large");
    assert_eq!(
        h.node_taints(&node),
        ["dedicated", "cni-not-ready"],
        "the NodeClaim's taints are synced and the unregistered taint is gone"
    );
    assert_eq!(
        h.nodeclaim("default-a")
            .unwrap()
            .status
            .unwrap()
            .node_name
            .as_deref(),
        Some(node.as_str())
    );
    assert_eq!(h.metrics.nodes_created_count(NODEPOOL), 1);
    assert_eq!(
        h.pool_condition(NODEPOOL, "NodeRegistrationHealthy"),
        Some(("True".into(), "NodeRegistrationHealthy".into()))
    );
    assert_eq!(
        h.condition("default-a", "Initialized"),
        Some(("Unknown".into(), "NodeNotReady".into()))
    );

    h.edit_node(&node, |n| make_ready(n, &[]));
    h.settle().await;
    assert_eq!(
        h.condition("default-a", "Initialized"),
        Some(("Unknown".into(), "StartupTaintsExist".into()))
    );

    h.edit_node(&node, |n| make_ready(n, &["cni-not-ready"]));
    h.settle().await;
    assert_eq!(
        h.condition("default-a", "Initialized"),
        Some(("True".into(), "Initialized".into()))
    );
    assert_eq!(
        h.condition("default-a", "Ready"),
        Some(("True".into(), "Ready".into()))
    );
    assert_eq!(
        h.api.node(&node).unwrap().metadata.labels.unwrap()[labels::INITIALIZED],
        "true"
    );
    assert_eq!(h.cloud.creates().len(), 1);
}

#[actix::test]
async fn the_termination_finalizer_is_added_before_anything_is_launched() {
    tokio::time::pause();
    let h = Harness::start();
    h.api.fail_when(
        |call| matches!(call, ClusterCall::UpdateNodeClaim { .. }),
        server_error(ObjectKind::NodeClaim, "default-a"),
    );
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.advance(Duration::from_secs(3)).await;
    assert!(
        h.cloud.creates().is_empty(),
        "no launch while the finalizer cannot be written"
    );
    assert!(
        h.nodeclaim("default-a")
            .unwrap()
            .metadata
            .finalizers
            .is_none()
    );

    // The reconcile is retried with backoff; once the write goes through, the launch follows.
    h.api.clear_failures();
    h.advance(Duration::from_secs(5)).await;
    let creates = h.cloud.creates();
    assert_eq!(creates.len(), 1);
    assert_eq!(
        creates[0].metadata.finalizers.as_deref(),
        Some(&[labels::TERMINATION_FINALIZER.to_owned()][..]),
        "the NodeClaim handed to the cloud already carries the finalizer"
    );
    let first_finalizer_write = h
        .api
        .calls()
        .iter()
        .position(|c| matches!(c, ClusterCall::UpdateNodeClaim { .. }))
        .unwrap();
    let first_status_write = h
        .api
        .calls()
        .iter()
        .position(|c| matches!(c, ClusterCall::UpdateNodeClaimStatus { .. }))
        .unwrap();
    assert!(first_finalizer_write < first_status_write);
}

fn node_registered_calls(h: &Harness) -> Vec<(String, String)> {
    h.cloud
        .calls_of(CloudOperation::NodeRegistered)
        .into_iter()
        .filter_map(|call| match call {
            CloudCall::NodeRegistered { nodeclaim, node } => Some((nodeclaim, node)),
            _ => None,
        })
        .collect()
}

/// The cloud provider hears of a registration once (the AWS provider learns the node's real
/// memory from it), and of a NodeClaim registered before its actor started once too (a daemon
/// restart), as Karpenter's capacity controller hydrates its cache from registered nodes.
#[actix::test]
async fn the_cloud_provider_hears_of_each_registered_node_once() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool(NODEPOOL, json!({})));
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    h.advance(Duration::from_mins(1)).await;
    assert_eq!(node_registered_calls(&h), [("default-a".to_owned(), node)]);

    // Registered before its actor started.
    h.put_node(support::node("n-b", "aws:///us-west-2a/i-0b", true));
    let mut registered = nodeclaim(
        "default-b",
        json!({"status": {
            "providerID": "aws:///us-west-2a/i-0b",
            "nodeName": "n-b",
            "imageID": "ami-0fake00000000000",
            "conditions": [
                {"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
        }}),
    );
    registered.metadata.finalizers = Some(vec![labels::TERMINATION_FINALIZER.to_owned()]);
    h.add_nodeclaim(registered);
    h.settle().await;
    assert_eq!(
        node_registered_calls(&h)
            .into_iter()
            .filter(|(claim, _)| claim == "default-b")
            .collect::<Vec<_>>(),
        [("default-b".to_owned(), "n-b".to_owned())]
    );
}

#[actix::test]
async fn a_crash_between_launch_and_status_write_does_not_launch_a_second_instance() {
    tokio::time::pause();
    let plan = FaultPlan::new(7)
        .with_rule(
            FaultRule::new(FaultAction::Panic)
                .kind("NodeClaimActor")
                .message("LaunchCompleted")
                .nth(1),
        )
        .unwrap();
    let h = Harness::start_with(Some(plan));
    // CreateFleet takes a while: the launch result arrives with LaunchCompleted, whose handler
    // crashes before it writes anything.
    h.cloud.set_create_latency(Duration::from_secs(2));
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.advance(Duration::from_millis(1900)).await;
    assert_ne!(
        h.condition("default-a", "Launched").map(|c| c.0),
        Some("True".into()),
        "still launching"
    );
    let launched = h
        .wait_for(Duration::from_secs(30), Duration::from_millis(50), |h| {
            h.condition("default-a", "Launched").map(|c| c.0) == Some("True".into())
                && h.kit
                    .snapshot()
                    .actor("NodeClaimActor", "default-a")
                    .is_some_and(|a| a.restarts == 1)
        })
        .await;
    assert!(
        launched,
        "the restarted actor writes the launch it finds in the cache"
    );
    assert_eq!(
        h.kit.faults().unwrap().injected().len(),
        1,
        "the crash happened"
    );
    let actor = h
        .kit
        .snapshot()
        .actor("NodeClaimActor", "default-a")
        .cloned()
        .unwrap();
    assert_eq!(actor.panics, 1);
    assert_eq!(actor.restarts, 1);
    h.advance(Duration::from_mins(2)).await;
    assert_eq!(
        h.cloud.creates().len(),
        1,
        "one instance, however often it looked"
    );
    assert_eq!(h.cloud.instances().len(), 1);
    assert_eq!(
        h.provider_id("default-a"),
        h.cloud.instances().keys().next().cloned()
    );
}

#[actix::test]
async fn a_view_behind_the_launch_write_does_not_launch_again() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    assert_eq!(
        h.condition("default-a", "Launched"),
        Some(("True".into(), "Launched".into()))
    );
    let written = h.nodeclaim("default-a").unwrap();
    // The view falls behind: it shows the NodeClaim as it was before the launch was written.
    let mut stale = written.clone();
    stale.status = None;
    h.view.put_nodeclaim(&stale);
    h.daemon.observe(&ClusterChange::NodeClaim {
        name: "default-a".into(),
        deleted: false,
    });
    let reads = h.api.calls_of(Operation::UpdateNodeClaimStatus).len();
    h.advance(Duration::from_secs(10)).await;
    assert_eq!(h.cloud.creates().len(), 1, "no second launch");
    assert!(
        h.api.calls_of(Operation::UpdateNodeClaimStatus).len() > reads,
        "the written launch is read back from the API server"
    );
    assert_eq!(
        h.provider_id("default-a"),
        written.status.unwrap().provider_id
    );
}

#[actix::test]
async fn an_unregistered_nodeclaim_is_deleted_fifteen_minutes_after_launch() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool(NODEPOOL, json!({})));
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    let provider_id = h.provider_id("default-a").unwrap();

    h.advance(Duration::from_secs(14 * 60 + 58)).await;
    let waiting = h.nodeclaim("default-a").unwrap();
    assert!(
        waiting.metadata.deletion_timestamp.is_none(),
        "still inside the registration window"
    );

    h.advance(Duration::from_secs(3)).await;
    assert!(
        h.nodeclaim("default-a")
            .is_none_or(|nc| nc.metadata.deletion_timestamp.is_some()),
        "deleted at 15 minutes"
    );
    assert_eq!(
        h.metrics
            .disrupted_count(disruption_reason::LIVENESS, NODEPOOL, on_demand()),
        1
    );
    assert_eq!(
        h.pool_condition(NODEPOOL, "NodeRegistrationHealthy"),
        Some(("False".into(), "RegistrationFailed".into()))
    );
    // The instance is terminated and the finalizer goes.
    h.advance(Duration::from_secs(10)).await;
    assert!(h.nodeclaim("default-a").is_none());
    assert!(!h.cloud.instances().contains_key(&provider_id));
}

#[actix::test]
async fn registration_leaves_the_taints_of_a_node_labelled_do_not_sync_taints() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclaim(nodeclaim(
        "default-a",
        json!({ "spec": {
            "taints": [{ "key": "dedicated", "value": "gpu", "effect": "NoSchedule" }],
            "startupTaints": [{ "key": "cni-not-ready", "effect": "NoSchedule" }],
        }}),
    ));
    h.settle().await;
    let node = h.register_node(
        "default-a",
        &[(labels::DO_NOT_SYNC_TAINTS, "true")],
        &[("kubelet-registered", "NoSchedule")],
    );
    h.settle().await;
    assert_eq!(
        h.condition("default-a", "Registered").map(|c| c.0),
        Some("True".into())
    );
    assert_eq!(
        h.node_taints(&node),
        ["kubelet-registered"],
        "the NodeClaim's taints are not added; the unregistered taint is still removed"
    );
    let node_labels = h.api.node(&node).unwrap().metadata.labels.unwrap();
    assert_eq!(node_labels[labels::REGISTERED], "true");
    assert_eq!(node_labels[labels::DO_NOT_SYNC_TAINTS], "true");
}

#[actix::test]
async fn a_deleted_nodeclaim_drains_its_node_in_karpenters_order() {
    tokio::time::pause();
    let h = Harness::start();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    for pod in [
        PodSpecBuilder::new("critical-agent", &node)
            .daemon()
            .critical(),
        PodSpecBuilder::new("dns", &node).critical(),
        PodSpecBuilder::new("log-agent", &node).daemon(),
        PodSpecBuilder::new("web", &node),
    ] {
        h.put_pod(pod.build());
    }
    h.delete_nodeclaim("default-a").await;
    h.advance(Duration::from_secs(20)).await;

    assert_eq!(
        evictions(&h),
        ["web", "log-agent", "dns", "critical-agent"],
        "workloads first, DaemonSets next, critical pods last"
    );
    assert!(h.nodeclaim("default-a").is_none(), "terminated");
    assert!(h.api.node(&node).is_none(), "node deleted");
    assert_eq!(h.metrics.eviction_requests_count(200), 4);
    assert_eq!(h.metrics.pods_drained_count(FORCEFUL_TERMINATION), 4);
    assert_eq!(h.metrics.nodes_drained_count(NODEPOOL), 1);
    assert_eq!(
        h.events()
            .iter()
            .filter(|(reason, _)| reason == "Evicted")
            .count(),
        4
    );
    // The node was deleted, then tainted and taken out of load balancers, before the first
    // eviction; its finalizer was removed after the last.
    let calls = h.api.calls();
    let deleted = calls
        .iter()
        .position(|c| matches!(c, ClusterCall::DeleteNode { .. }))
        .unwrap();
    let first_eviction = calls
        .iter()
        .position(|c| matches!(c, ClusterCall::EvictPod { .. }))
        .unwrap();
    let last_eviction = calls
        .iter()
        .rposition(|c| matches!(c, ClusterCall::EvictPod { .. }))
        .unwrap();
    assert!(deleted < first_eviction);
    assert!(
        calls[deleted..first_eviction]
            .iter()
            .any(|c| matches!(c, ClusterCall::UpdateNode { .. })),
        "tainted before draining"
    );
    assert!(
        calls[last_eviction..]
            .iter()
            .any(|c| matches!(c, ClusterCall::UpdateNode { .. })),
        "the finalizer is removed after draining"
    );
}

#[actix::test]
async fn a_pdb_blocked_eviction_waits_until_the_termination_grace_period_then_the_pod_is_deleted() {
    tokio::time::pause();
    let h = Harness::start();
    let node = ready_nodeclaim(
        &h,
        "default-a",
        json!({ "spec": { "terminationGracePeriod": "5m" } }),
    )
    .await;
    h.put_pod(PodSpecBuilder::new("web", &node).grace(30).build());
    h.api.block_eviction(
        "default",
        "web",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    let deleted_at = h.clock_now();
    h.delete_nodeclaim("default-a").await;
    h.settle().await;

    let annotated = h.nodeclaim("default-a").unwrap();
    let deadline =
        annotated.metadata.annotations.unwrap()[labels::NODECLAIM_TERMINATION_TIMESTAMP].clone();
    // Deletion timestamps and the annotation have second precision, as in Kubernetes.
    let expected =
        k8s_openapi::jiff::Timestamp::from_second(deleted_at.as_second() + 5 * 60).unwrap();
    assert_eq!(deadline, expected.to_string());
    assert!(
        h.node_taints(&node)
            .contains(&labels::DISRUPTED_TAINT.to_owned())
    );
    assert!(!evictions(&h).is_empty(), "eviction tried");
    assert!(h.metrics.eviction_requests_count(429) >= 1);
    assert!(
        h.events()
            .iter()
            .any(|(reason, _)| reason == "FailedDraining")
    );
    assert!(h.api.pod("default", "web").is_some());

    // Until T - terminationGracePeriodSeconds the PDB is honoured, with backed-off retries.
    h.advance(Duration::from_secs(4 * 60 + 28)).await;
    assert!(h.api.pod("default", "web").is_some(), "PDB still honoured");
    assert!(pod_deletions(&h).is_empty());
    let attempts = evictions(&h).len();
    assert!(
        (20..=60).contains(&attempts),
        "retries back off to every 10 s, got {attempts}"
    );

    h.advance(Duration::from_secs(4)).await;
    let deletions = pod_deletions(&h);
    assert_eq!(deletions.len(), 1, "{deletions:?}");
    let (name, grace) = &deletions[0];
    assert_eq!(name, "web");
    assert!(
        grace.is_some_and(|g| (28..=30).contains(&g)),
        "the pod keeps its grace period: {grace:?}"
    );
    assert!(
        h.events()
            .iter()
            .any(|(reason, regarding)| reason == "Disrupted" && regarding == "web")
    );

    h.advance(Duration::from_secs(15)).await;
    assert!(h.nodeclaim("default-a").is_none());
    assert!(h.api.node(&node).is_none());
}

#[actix::test]
async fn pods_with_do_not_disrupt_keep_the_node_until_they_leave() {
    tokio::time::pause();
    let h = Harness::start();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    h.put_pod(
        PodSpecBuilder::new("batch-job", &node)
            .do_not_disrupt()
            .build(),
    );
    h.put_pod(PodSpecBuilder::new("web", &node).build());
    h.delete_nodeclaim("default-a").await;
    h.advance(Duration::from_mins(10)).await;

    assert_eq!(
        evictions(&h),
        ["web"],
        "the do-not-disrupt pod is never evicted"
    );
    assert!(h.api.pod("default", "batch-job").is_some());
    assert!(h.api.node(&node).is_some(), "the node waits");
    assert!(h.nodeclaim("default-a").is_some());
    assert!(
        h.cloud.calls_of(CloudOperation::Delete).is_empty(),
        "the instance keeps running"
    );
    assert!(h.api.events().iter().any(|e| {
        e.reason == "FailedDraining"
            && e.note
                .as_deref()
                .is_some_and(|n| n.contains(labels::DO_NOT_DISRUPT))
    }));

    h.remove_pod("default", "batch-job").await;
    h.advance(Duration::from_secs(15)).await;
    assert!(h.api.node(&node).is_none());
    assert!(h.nodeclaim("default-a").is_none());
}

#[actix::test]
async fn a_deleting_nodeclaim_is_not_terminated_before_the_view_has_listed_its_node_and_pods() {
    tokio::time::pause();
    let h = Harness::start();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    h.put_pod(PodSpecBuilder::new("web", &node).build());
    h.settle().await;
    // As after a restart: the view has not listed the node and its pods yet.
    h.view.set_synced(false);
    h.view.remove_node(&node);
    h.view.remove_pod("default/web");
    h.delete_nodeclaim("default-a").await;
    h.advance(Duration::from_secs(30)).await;
    assert!(
        h.cloud.calls_of(CloudOperation::Delete).is_empty(),
        "terminated before its node and pods were listed"
    );
    assert!(evictions(&h).is_empty());
    assert!(h.api.calls_of(Operation::DeleteNode).is_empty());

    // The first list arrives: the node is drained before the instance goes.
    h.mirror.sync_node(&node);
    h.mirror.sync_pod("default", "web");
    h.view.set_synced(true);
    h.advance(Duration::from_secs(20)).await;
    assert_eq!(evictions(&h), ["web"]);
    assert!(
        h.nodeclaim("default-a").is_none(),
        "terminated after the drain"
    );
}

#[actix::test]
async fn deletion_removes_the_finalizers_only_after_the_instance_is_gone() {
    tokio::time::pause();
    let h = Harness::start();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    let provider_id = h.provider_id("default-a").unwrap();
    h.cloud.set_termination_delay(Duration::from_secs(5));
    h.cloud.fail_times(
        CloudOperation::Delete,
        2,
        CloudProviderError::Create {
            reason: "RequestLimitExceeded".into(),
            message: "slow down".into(),
        },
    );
    h.delete_nodeclaim("default-a").await;
    h.advance(Duration::from_secs(4)).await;

    // Two failed terminations (1 s and 2 s backoff), then termination started.
    assert!(h.cloud.calls_of(CloudOperation::Delete).len() >= 3);
    assert!(matches!(
        h.cloud.instances()[&provider_id].state,
        FakeInstanceState::ShuttingDown(_)
    ));
    let terminating = h.nodeclaim("default-a").unwrap();
    assert!(
        terminating
            .metadata
            .finalizers
            .unwrap()
            .contains(&labels::TERMINATION_FINALIZER.to_owned())
    );
    assert_eq!(
        h.condition("default-a", "InstanceTerminating").map(|c| c.0),
        Some("True".into())
    );
    assert!(
        h.api
            .node(&node)
            .unwrap()
            .metadata
            .finalizers
            .unwrap()
            .contains(&labels::TERMINATION_FINALIZER.to_owned())
    );

    h.advance(Duration::from_secs(6)).await;
    assert!(
        !h.cloud.instances().contains_key(&provider_id),
        "instance gone"
    );
    assert!(h.nodeclaim("default-a").is_none());
    assert!(h.api.node(&node).is_none());
    assert_eq!(h.metrics.terminated_count(NODEPOOL, on_demand()), 1);
    assert_eq!(h.metrics.nodes_terminated_count(NODEPOOL), 1);
}

#[actix::test]
async fn insufficient_capacity_deletes_the_nodeclaim_and_counts_a_disruption() {
    tokio::time::pause();
    let h = Harness::start();
    h.cloud.fail_next(
        CloudOperation::Create,
        CloudProviderError::InsufficientCapacity {
            nodeclaim: "default-a".into(),
            message: "all requested instance types were unavailable".into(),
        },
    );
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.advance(Duration::from_secs(1)).await;
    assert!(h.nodeclaim("default-a").is_none());
    assert_eq!(
        h.metrics
            .disrupted_count(disruption_reason::INSUFFICIENT_CAPACITY, NODEPOOL, ""),
        1
    );
    assert!(
        h.events()
            .contains(&("InsufficientCapacityError".into(), "default-a".into()))
    );
}

#[actix::test]
async fn a_launch_error_sets_launched_unknown_and_retries_with_backoff() {
    tokio::time::pause();
    let h = Harness::start();
    h.cloud.fail_times(
        CloudOperation::Create,
        2,
        CloudProviderError::Create {
            reason: "SubnetResolutionFailed".into(),
            message: "no subnets found".into(),
        },
    );
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    assert_eq!(
        h.condition("default-a", "Launched"),
        Some(("Unknown".into(), "SubnetResolutionFailed".into()))
    );
    h.advance(Duration::from_millis(500)).await;
    assert_eq!(h.cloud.creates().len(), 1, "waits a second before retrying");
    h.advance(Duration::from_secs(4)).await;
    assert_eq!(h.cloud.creates().len(), 3);
    assert_eq!(
        h.condition("default-a", "Launched"),
        Some(("True".into(), "Launched".into()))
    );
}

#[actix::test]
async fn launches_beyond_the_limit_wait_for_a_slot() {
    tokio::time::pause();
    let start = tokio::time::Instant::now();
    let h = Harness::start_with_launch_limit(2);
    h.cloud.set_create_latency(Duration::from_secs(10));
    for name in ["a", "b", "c", "d", "e"] {
        h.add_nodeclaim(nodeclaim(&format!("default-{name}"), json!({})));
    }
    h.settle().await;
    // Two at a time, each 10 s long: 2, 4, then all 5 answered.
    for (after, answered) in [(9, 0), (11, 2), (21, 4), (31, 5)] {
        h.advance(Duration::from_secs(after).saturating_sub(start.elapsed()))
            .await;
        assert_eq!(h.cloud.creates().len(), answered, "after {after} s");
    }
    for name in ["a", "b", "c", "d", "e"] {
        assert_eq!(
            h.condition(&format!("default-{name}"), "Launched"),
            Some(("True".into(), "Launched".into()))
        );
    }
}

#[actix::test]
async fn nodepool_status_counts_the_resources_of_its_nodeclaims() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool(
        NODEPOOL,
        json!({ "spec": { "limits": { "cpu": "10", "nodes": "5" } } }),
    ));
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.add_nodeclaim(nodeclaim("default-b", json!({})));
    h.advance(Duration::from_secs(1)).await;

    let pool = h.api.nodepool(NODEPOOL).unwrap();
    let resources = pool.status.unwrap().resources;
    let shown: Vec<(&str, &str)> = resources
        .iter()
        .map(|(k, v)| (k.as_str(), v.0.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("cpu", "4"),
            ("ephemeral-storage", "40Gi"),
            ("memory", "16Gi"),
            ("nodes", "2"),
            ("pods", "58"),
        ]
    );
    for (kind, status) in [
        ("ValidationSucceeded", "True"),
        ("NodeClassReady", "True"),
        ("Ready", "True"),
        ("NodeRegistrationHealthy", "Unknown"),
    ] {
        assert_eq!(
            h.pool_condition(NODEPOOL, kind).map(|c| c.0),
            Some(status.to_owned()),
            "{kind}"
        );
    }
    let usage = h
        .daemon
        .nodepools()
        .request(NODEPOOL, GetNodePoolUsage, Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    let remaining: Vec<(&str, i64)> = usage.remaining.iter().collect();
    assert_eq!(remaining, [("cpu", 6000), ("nodes", 3)]);

    // Only a Node changes (no NodeClaim): the count is made again with the capacity it reports.
    let node = h.register_node("default-a", &[], &[]);
    h.advance(Duration::from_secs(6)).await;
    h.edit_node(&node, |n| {
        let capacity = n.status.as_mut().unwrap().capacity.as_mut().unwrap();
        capacity.insert("cpu".into(), Quantity("3".into()));
    });
    h.advance(Duration::from_secs(6)).await;
    let resources = h.api.nodepool(NODEPOOL).unwrap().status.unwrap().resources;
    assert_eq!(
        resources["cpu"].0, "5",
        "the node's reported capacity counts"
    );

    h.delete_nodeclaim("default-b").await;
    h.advance(Duration::from_secs(1)).await;
    let resources = h.api.nodepool(NODEPOOL).unwrap().status.unwrap().resources;
    assert_eq!(
        resources["cpu"].0, "3",
        "a deleting NodeClaim no longer counts"
    );
    assert_eq!(resources["nodes"].0, "1");
}

#[actix::test]
async fn nodepool_hash_annotations_are_stamped_and_a_version_change_restamps_nodeclaims() {
    tokio::time::pause();
    let h = Harness::start();
    let karpenter_annotations = json!({
        "karpenter.sh/nodepool-hash": "6046154364587185616",
        "karpenter.sh/nodepool-hash-version": "v3",
    });
    h.add_nodeclaim(nodeclaim(
        "default-a",
        json!({ "metadata": { "annotations": karpenter_annotations } }),
    ));
    // Drifted for a reason the hash switch leaves alone (the cloud reports its AMI drifted):
    // the NodeClaim actor keeps `Drifted` only on a launched NodeClaim whose drift still holds.
    h.cloud
        .set_drift("default-drifted", Some(DriftReason::AmiDrift));
    h.add_nodeclaim(nodeclaim(
        "default-drifted",
        json!({
            "metadata": {
                "annotations": karpenter_annotations,
                "labels": {
                    labels::INSTANCE_TYPE: FAKE_INSTANCE_TYPE,
                    labels::CAPACITY_TYPE: on_demand(),
                    labels::ZONE: FAKE_ZONE,
                },
            },
            "status": {
                "providerID": format!("aws:///{FAKE_ZONE}/i-drifted"),
                "conditions": [
                    {
                        "type": "Launched", "status": "True", "reason": "Launched", "message": "",
                        "lastTransitionTime": h.clock_now().to_string(),
                    },
                    {
                        "type": "Drifted", "status": "True", "reason": "AMIDrift", "message": "AMIDrift",
                        "lastTransitionTime": "2025-06-01T11:00:00Z",
                    },
                ],
            },
        }),
    ));
    h.add_nodepool(nodepool(
        NODEPOOL,
        json!({ "metadata": { "annotations": karpenter_annotations } }),
    ));
    h.settle().await;

    let pool = h.api.nodepool(NODEPOOL).unwrap();
    let hash = template_hash(&pool.spec.template);
    let annotations = pool.metadata.annotations.unwrap();
    assert_eq!(annotations[labels::NODEPOOL_HASH], hash);
    assert_eq!(annotations[labels::NODEPOOL_HASH_VERSION], HASH_VERSION);
    let restamped = h
        .nodeclaim("default-a")
        .unwrap()
        .metadata
        .annotations
        .unwrap();
    assert_eq!(
        restamped[labels::NODEPOOL_HASH],
        hash,
        "not drifted by the switch"
    );
    assert_eq!(restamped[labels::NODEPOOL_HASH_VERSION], HASH_VERSION);
    let drifted = h
        .nodeclaim("default-drifted")
        .unwrap()
        .metadata
        .annotations
        .unwrap();
    assert_eq!(
        drifted[labels::NODEPOOL_HASH],
        "6046154364587185616",
        "an already drifted NodeClaim keeps its hash"
    );
    assert_eq!(drifted[labels::NODEPOOL_HASH_VERSION], HASH_VERSION);
    // Its old hash under the new version: it stays drifted, now by the NodePool (the first
    // reason found), as Karpenter intends for NodeClaims drifted before a version switch.
    assert_eq!(
        h.condition("default-drifted", "Drifted"),
        Some(("True".into(), "NodePoolDrifted".into()))
    );

    // A template change moves the pool's hash only: the NodeClaims now look drifted.
    let mut edited = h.api.nodepool(NODEPOOL).unwrap();
    edited
        .spec
        .template
        .metadata
        .labels
        .insert("team".into(), "b".into());
    h.add_nodepool(edited);
    h.settle().await;
    let new_hash = h
        .api
        .nodepool(NODEPOOL)
        .unwrap()
        .metadata
        .annotations
        .unwrap()[labels::NODEPOOL_HASH]
        .clone();
    assert_ne!(new_hash, hash);
    assert_eq!(
        h.nodeclaim("default-a")
            .unwrap()
            .metadata
            .annotations
            .unwrap()[labels::NODEPOOL_HASH],
        hash
    );
}

#[actix::test]
async fn nodepool_readiness_follows_its_nodeclass_and_validation() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodepool(nodepool(NODEPOOL, json!({})));
    h.settle().await;
    assert_eq!(
        h.pool_condition(NODEPOOL, "NodeClassReady"),
        Some(("False".into(), "NodeClassNotFound".into()))
    );
    assert_eq!(
        h.pool_condition(NODEPOOL, "Ready").map(|c| c.0),
        Some("False".into())
    );

    h.add_nodeclass(nodeclass(None));
    h.settle().await;
    assert_eq!(
        h.pool_condition(NODEPOOL, "NodeClassReady"),
        Some(("False".into(), "NodeClassReadinessUnknown".into()))
    );
    h.add_nodeclass(nodeclass(Some(false)));
    h.settle().await;
    assert_eq!(
        h.pool_condition(NODEPOOL, "NodeClassReady"),
        Some(("False".into(), "AMIsNotReady".into()))
    );
    h.add_nodeclass(nodeclass(Some(true)));
    h.settle().await;
    assert_eq!(
        h.pool_condition(NODEPOOL, "Ready"),
        Some(("True".into(), "Ready".into()))
    );

    h.add_nodepool(nodepool(
        "odd",
        json!({ "spec": { "template": { "spec": { "requirements": [
            { "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-prem"] },
        ]}}}}),
    ));
    h.settle().await;
    assert_eq!(
        h.pool_condition("odd", "ValidationSucceeded"),
        Some(("False".into(), "NodePoolValidationFailed".into()))
    );
    assert_eq!(
        h.pool_condition("odd", "Ready").map(|c| c.0),
        Some("False".into())
    );
}

#[actix::test]
async fn the_garbage_collector_terminates_an_instance_leaked_for_30_seconds() {
    tokio::time::pause();
    let h = Harness::start();
    let leaked = h.cloud.plant_instance(NODEPOOL, h.clock_now());
    let node = support::node("ip-leaked.ec2.internal", &leaked, true);
    h.put_node(node);
    // A NodeClaim's own instance is never collected.
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    let owned = h.provider_id("default-a").unwrap();

    h.advance(Duration::from_secs(25)).await;
    assert_eq!(
        h.cloud.instances()[&leaked].state,
        FakeInstanceState::Running,
        "younger than 30 s: the launch may still be recording it"
    );

    h.advance(Duration::from_secs(20)).await;
    assert_ne!(
        h.cloud.instances().get(&leaked).map(|i| i.state),
        Some(FakeInstanceState::Running),
        "terminated"
    );
    assert!(
        h.api.node("ip-leaked.ec2.internal").is_none(),
        "its node deleted"
    );
    assert_eq!(
        h.cloud.instances()[&owned].state,
        FakeInstanceState::Running
    );
    let deletes: Vec<String> = h
        .cloud
        .calls_of(CloudOperation::Delete)
        .into_iter()
        .filter_map(|c| match c {
            CloudCall::Delete { provider_id } => Some(provider_id),
            _ => None,
        })
        .collect();
    assert_eq!(deletes, [leaked]);
}

#[actix::test]
async fn the_garbage_collector_deletes_a_nodeclaim_whose_instance_vanished() {
    tokio::time::pause();
    let h = Harness::start();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    let provider_id = h.provider_id("default-a").unwrap();
    assert!(h.cloud.vanish(&provider_id));

    // The node is still Ready: the kubelet runs, whatever the cloud's list says.
    h.advance(Duration::from_secs(2 * 60 + 5)).await;
    assert!(
        h.nodeclaim("default-a")
            .is_some_and(|nc| nc.metadata.deletion_timestamp.is_none())
    );

    h.edit_node(&node, |n| {
        n.status.as_mut().unwrap().conditions = Some(vec![support::ready_condition(false)]);
    });
    h.advance(Duration::from_secs(2 * 60 + 5)).await;
    assert!(
        h.nodeclaim("default-a").is_none(),
        "collected and terminated"
    );
    assert!(h.api.node(&node).is_none());
    assert_eq!(
        h.metrics
            .disrupted_count(disruption_reason::GARBAGE_COLLECTED, NODEPOOL, on_demand()),
        1
    );
}

#[actix::test]
async fn a_nodeclaim_created_again_under_the_same_name_gets_its_own_instance() {
    tokio::time::pause();
    let h = Harness::start();
    ready_nodeclaim(&h, "default-a", json!({})).await;
    let first = h.provider_id("default-a").unwrap();
    h.delete_nodeclaim("default-a").await;
    h.advance(Duration::from_secs(10)).await;
    assert!(h.nodeclaim("default-a").is_none());

    h.add_nodeclaim(nodeclaim(
        "default-a",
        json!({ "metadata": { "uid": "uid-second" } }),
    ));
    h.settle().await;
    let second = h.provider_id("default-a").unwrap();
    assert_ne!(first, second);
    assert_eq!(h.cloud.creates().len(), 2);
    assert_eq!(
        h.cloud.instances()[&second].state,
        FakeInstanceState::Running
    );
    // Its termination does not trust what the actor knew about the first one.
    h.delete_nodeclaim("default-a").await;
    h.advance(Duration::from_secs(10)).await;
    assert!(h.nodeclaim("default-a").is_none());
    assert!(
        !h.cloud.instances().contains_key(&second),
        "second instance terminated"
    );
}

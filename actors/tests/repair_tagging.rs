//! Node Repair and instance tagging in the NodeClaimActor over fakes (`support`), on tokio's
//! paused clock: an unhealthy node is replaced the instant its condition's toleration ends and
//! not a second before, only with the `NodeRepair` gate, not while more than 20% of its pool is
//! unhealthy, and its pods go at once whatever their PDBs and annotations say; a registered
//! NodeClaim's instance is tagged once, retried after a failure, and never again once the
//! NodeClaim says it is tagged.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use karpenter_actors::metrics::{UnhealthyDisruptedLabels, disruption_reason};
use karpenter_actors::ports::aws_error::{AwsError, AwsService};
use karpenter_actors::ports::cloud_provider::CloudProviderError;
use karpenter_actors::testing::{CloudOperation, FAKE_IMAGE_ID};
use karpenter_actors::testing::{ClusterCall, Operation};
use karpenter_core::apis::labels;
use karpenter_core::domain::tags::Tags;
use serde_json::json;
use support::{
    Harness, PodSpecBuilder, deleting, make_ready, nodeclaim, plus, pod_deletions, ready_nodeclaim,
    until,
};

const NODEPOOL: &str = "default";
const TAGGING_RETRY_LIMIT: Duration = Duration::from_mins(1);

fn repair_enabled() -> Harness {
    let mut settings = karpenter_config::Settings::default();
    settings.feature_gates.node_repair = true;
    Harness::start_with_settings(settings)
}

/// Sets (or adds) a node condition as the kubelet or the node monitoring agent would.
fn set_condition(node: &mut Node, kind: &str, status: &str, since: Timestamp) {
    let conditions = node
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default();
    conditions.retain(|c| c.type_ != kind);
    conditions.push(NodeCondition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        last_transition_time: Some(Time(since)),
        ..NodeCondition::default()
    });
}

/// Now, to the whole second (as Kubernetes stores condition times).
fn whole_second(at: Timestamp) -> Timestamp {
    Timestamp::from_second(at.as_second()).unwrap()
}

/// Moves time to `at` (then lets the actors run, 3 ms).
async fn advance_to(h: &Harness, at: Timestamp) {
    h.advance(until(h, at)).await;
}

fn termination_annotation(h: &Harness, name: &str) -> Option<String> {
    h.nodeclaim(name)?
        .metadata
        .annotations?
        .get(labels::NODECLAIM_TERMINATION_TIMESTAMP)
        .cloned()
}

/// NodeClaims of the pool disrupted as unhealthy (on-demand).
fn unhealthy_count(h: &Harness) -> u64 {
    h.metrics.disrupted_count(
        disruption_reason::UNHEALTHY,
        NODEPOOL,
        labels::CAPACITY_TYPE_ON_DEMAND,
    )
}

/// Changes something on the node that matters to neither repair nor tagging.
fn touch(h: &Harness, node: &str) {
    h.edit_node(node, |n| {
        n.metadata
            .labels
            .get_or_insert_default()
            .insert("touched".into(), "yes".into());
    });
}

fn unhealthy_labels(condition: &str) -> UnhealthyDisruptedLabels {
    UnhealthyDisruptedLabels {
        condition: condition.to_owned(),
        nodepool: NODEPOOL.to_owned(),
        capacity_type: labels::CAPACITY_TYPE_ON_DEMAND.to_owned(),
        image_id: FAKE_IMAGE_ID.to_owned(),
    }
}

fn repair_blocked_events(h: &Harness, node: &str) -> Vec<String> {
    h.api
        .events()
        .into_iter()
        .filter(|e| e.reason == "NodeRepairBlocked" && e.regarding.name.as_deref() == Some(node))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

fn nodeclaim_metadata_writes(h: &Harness, name: &str) -> usize {
    h.api
        .calls_of(Operation::UpdateNodeClaim)
        .into_iter()
        .filter(|call| matches!(call, ClusterCall::UpdateNodeClaim { name: n } if n == name))
        .count()
}

fn annotation(h: &Harness, name: &str, key: &str) -> Option<String> {
    h.nodeclaim(name)?.metadata.annotations?.get(key).cloned()
}

#[actix::test]
async fn a_node_not_ready_is_repaired_exactly_thirty_minutes_after_its_transition() {
    tokio::time::pause();
    let h = repair_enabled();
    // The instance takes a while to shut down, so the deleted NodeClaim can be looked at.
    h.cloud.set_termination_delay(Duration::from_secs(10));
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    let since = whole_second(h.clock_now());
    h.edit_node(&node, |n| set_condition(n, "Ready", "False", since));
    h.settle().await;

    advance_to(&h, plus(since, Duration::from_secs(30 * 60 - 1))).await;
    assert!(
        !deleting(&h, "default-a"),
        "repaired before the toleration ended"
    );
    assert_eq!(termination_annotation(&h, "default-a"), None);

    advance_to(&h, plus(since, Duration::from_mins(30))).await;
    assert!(
        deleting(&h, "default-a"),
        "not repaired when the toleration ended"
    );
    // Written the instant the timer fired (to the second, as Karpenter writes it).
    assert_eq!(
        termination_annotation(&h, "default-a"),
        Some(plus(since, Duration::from_mins(30)).to_string())
    );
    assert_eq!(unhealthy_count(&h), 1);
    assert_eq!(
        h.metrics
            .unhealthy_disrupted_count(&unhealthy_labels("ready")),
        1
    );

    // The NodeClaim terminates as any deleted one does, and is counted once.
    h.advance(Duration::from_secs(30)).await;
    assert!(h.nodeclaim("default-a").is_none());
    assert!(h.api.node(&node).is_none());
    assert_eq!(unhealthy_count(&h), 1);
}

#[actix::test]
async fn failed_accelerated_hardware_is_repaired_after_ten_minutes() {
    tokio::time::pause();
    let h = repair_enabled();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    let since = whole_second(h.clock_now());
    h.edit_node(&node, |n| {
        set_condition(n, "AcceleratedHardwareReady", "False", since);
    });
    h.settle().await;

    advance_to(&h, plus(since, Duration::from_secs(10 * 60 - 1))).await;
    assert!(!deleting(&h, "default-a"));
    advance_to(&h, plus(since, Duration::from_mins(10))).await;
    assert!(deleting(&h, "default-a"));
    assert_eq!(
        h.metrics
            .unhealthy_disrupted_count(&unhealthy_labels("accelerated_hardware_ready")),
        1
    );
    assert_eq!(
        h.metrics
            .unhealthy_disrupted_count(&unhealthy_labels("ready")),
        0
    );
}

#[actix::test]
async fn without_the_node_repair_gate_an_unhealthy_node_is_never_replaced() {
    tokio::time::pause();
    let h = Harness::start();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    let since = whole_second(h.clock_now());
    h.edit_node(&node, |n| set_condition(n, "Ready", "Unknown", since));
    h.advance(Duration::from_hours(2)).await;
    // Something else touches the node long after the toleration ended.
    touch(&h, &node);
    h.settle().await;

    assert!(!deleting(&h, "default-a"));
    assert_eq!(termination_annotation(&h, "default-a"), None);
    assert!(repair_blocked_events(&h, &node).is_empty());
    assert_eq!(unhealthy_count(&h), 0);
}

#[actix::test]
async fn a_cloud_provider_without_repair_policies_repairs_nothing() {
    tokio::time::pause();
    let h = repair_enabled();
    h.cloud.set_repair_policies(Vec::new());
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    let since = whole_second(h.clock_now());
    h.edit_node(&node, |n| set_condition(n, "Ready", "False", since));
    h.advance(Duration::from_hours(1)).await;
    h.edit_node(&node, |n| set_condition(n, "Ready", "False", since));
    h.settle().await;
    assert!(!deleting(&h, "default-a"));
}

#[actix::test]
async fn two_of_five_unhealthy_nodes_block_repair_until_one_recovers() {
    tokio::time::pause();
    let h = repair_enabled();
    let mut nodes = Vec::new();
    for name in [
        "default-a",
        "default-b",
        "default-c",
        "default-d",
        "default-e",
    ] {
        nodes.push(ready_nodeclaim(&h, name, json!({})).await);
    }
    let since = whole_second(h.clock_now());
    for node in &nodes[..2] {
        h.edit_node(node, |n| set_condition(n, "Ready", "False", since));
    }
    h.settle().await;

    advance_to(&h, plus(since, Duration::from_mins(30))).await;
    // ceil(20% of 5) = 1 may be unhealthy: 2 are.
    assert!(!deleting(&h, "default-a"));
    assert!(!deleting(&h, "default-b"));
    for node in &nodes[..2] {
        assert_eq!(
            repair_blocked_events(&h, node),
            ["more than 20% nodes are unhealthy in the nodepool"]
        );
    }
    for node in &nodes[2..] {
        assert!(
            repair_blocked_events(&h, node).is_empty(),
            "{node} is healthy"
        );
    }

    // Rechecked every minute; the warning is repeated every 15 minutes at most.
    h.advance(Duration::from_mins(14)).await;
    assert!(!deleting(&h, "default-a"));
    assert_eq!(repair_blocked_events(&h, &nodes[0]).len(), 1);
    h.advance(Duration::from_secs(61)).await;
    assert_eq!(repair_blocked_events(&h, &nodes[0]).len(), 2);

    // One recovers: 1 of 5 unhealthy is allowed, and the other goes at its next look.
    h.edit_node(&nodes[1], |n| make_ready(n, &[]));
    h.settle().await;
    h.advance(Duration::from_secs(61)).await;
    assert!(
        deleting(&h, "default-a"),
        "repaired once the pool recovered"
    );
    assert!(!deleting(&h, "default-b"));
    assert_eq!(unhealthy_count(&h), 1);
}

#[actix::test]
async fn a_repaired_node_loses_its_pdb_blocked_and_do_not_disrupt_pods_at_once() {
    tokio::time::pause();
    let h = repair_enabled();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    h.put_pod(PodSpecBuilder::new("guarded", &node).grace(120).build());
    h.api.block_eviction(
        "default",
        "guarded",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    h.put_pod(
        PodSpecBuilder::new("batch-job", &node)
            .do_not_disrupt()
            .build(),
    );
    let since = whole_second(h.clock_now());
    h.edit_node(&node, |n| set_condition(n, "Ready", "False", since));
    h.settle().await;

    advance_to(&h, plus(since, Duration::from_mins(30))).await;
    assert!(deleting(&h, "default-a"));
    // Within the same instant: no eviction is waited on, no grace period is granted.
    h.settle().await;
    let mut deleted = pod_deletions(&h);
    deleted.sort();
    assert_eq!(
        deleted,
        [
            ("batch-job".to_owned(), Some(0)),
            ("guarded".to_owned(), Some(0))
        ]
    );
    assert!(h.api.pod("default", "guarded").is_none());
    assert!(h.api.pod("default", "batch-job").is_none());

    h.advance(Duration::from_secs(30)).await;
    assert!(
        h.nodeclaim("default-a").is_none(),
        "terminated after the drain"
    );
}

#[actix::test]
async fn a_nodeclaim_without_a_nodepool_is_held_to_the_health_of_the_whole_cluster() {
    tokio::time::pause();
    let h = repair_enabled();
    let mut standalone = nodeclaim("solo-a", json!({}));
    standalone
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(labels::NODEPOOL);
    h.add_nodeclaim(standalone);
    h.settle().await;
    let node = h.register_node("solo-a", &[], &[]);
    h.settle().await;
    // Two nodes Karpenter does not manage: 2 of 3 nodes unhealthy, 1 allowed.
    h.put_node(support::node(
        "ip-other-1",
        "aws:///us-west-2a/i-other1",
        true,
    ));
    h.put_node(support::node(
        "ip-other-2",
        "aws:///us-west-2a/i-other2",
        true,
    ));
    let since = whole_second(h.clock_now());
    h.edit_node(&node, |n| set_condition(n, "Ready", "False", since));
    h.edit_node("ip-other-1", |n| set_condition(n, "Ready", "False", since));
    h.settle().await;

    advance_to(&h, plus(since, Duration::from_mins(30))).await;
    assert!(!deleting(&h, "solo-a"));
    assert_eq!(
        repair_blocked_events(&h, &node),
        ["more than 20% nodes are unhealthy in the cluster"]
    );

    h.edit_node("ip-other-1", |n| make_ready(n, &[]));
    h.advance(Duration::from_secs(61)).await;
    assert!(deleting(&h, "solo-a"));
}

#[actix::test]
async fn a_due_repair_waits_for_the_cluster_view_to_sync() {
    tokio::time::pause();
    let h = repair_enabled();
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    let since = whole_second(h.clock_now());
    h.edit_node(&node, |n| set_condition(n, "Ready", "False", since));
    h.settle().await;
    // As after a restart: the other nodes of the pool may not be listed yet.
    h.view.set_synced(false);
    advance_to(&h, plus(since, Duration::from_mins(31))).await;
    assert!(!deleting(&h, "default-a"), "repaired on a partial view");

    h.view.set_synced(true);
    h.advance(Duration::from_secs(2)).await;
    assert!(deleting(&h, "default-a"));
}

fn registered_tags(node: &str, nodeclaim: &str) -> Tags {
    Tags::from([
        ("Name".to_owned(), node.to_owned()),
        ("karpenter.sh/nodeclaim".to_owned(), nodeclaim.to_owned()),
        ("eks:eks-cluster-name".to_owned(), "test-cluster".to_owned()),
    ])
}

#[actix::test]
async fn a_registered_instance_is_tagged_once_and_its_nodeclaim_annotated_once() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    assert!(
        h.cloud.tagged().is_empty(),
        "nothing to tag before a node registers"
    );
    let writes_before = nodeclaim_metadata_writes(&h, "default-a");

    let node = h.register_node("default-a", &[], &[]);
    h.settle().await;
    assert_eq!(h.cloud.tagged(), [registered_tags(&node, "default-a")]);
    assert_eq!(
        annotation(&h, "default-a", labels::TAGGED).as_deref(),
        Some("true")
    );
    assert_eq!(
        annotation(&h, "default-a", labels::CLUSTER_NAME_TAGGED).as_deref(),
        Some("true")
    );
    let provider_id = h.provider_id("default-a").unwrap();
    assert_eq!(
        h.cloud.instances()[&provider_id].tags,
        registered_tags(&node, "default-a")
    );

    // Later reconciles (initialization, node edits, time) neither tag nor annotate again.
    h.edit_node(&node, |n| make_ready(n, &[]));
    h.advance(Duration::from_mins(5)).await;
    touch(&h, &node);
    h.settle().await;
    assert_eq!(h.cloud.tagged().len(), 1);
    assert_eq!(
        nodeclaim_metadata_writes(&h, "default-a") - writes_before,
        1,
        "the tagged annotations are written once"
    );
}

#[actix::test]
async fn a_failed_create_tags_is_retried_with_backoff_until_it_succeeds() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    h.cloud.fail_when(
        |call| call.operation() == CloudOperation::TagInstance,
        CloudProviderError::Aws(AwsError::new(
            AwsService::Ec2,
            "CreateTags",
            Some("RequestLimitExceeded"),
            "Request limit exceeded.",
        )),
    );
    let node = h.register_node("default-a", &[], &[]);
    h.settle().await;
    h.advance(Duration::from_secs(10)).await;
    let failed = h.cloud.calls_of(CloudOperation::TagInstance).len();
    // 1 s, 2 s, 4 s, 8 s apart, plus the reconciles the node's own changes started.
    assert!((2..=7).contains(&failed), "{failed} attempts in 10 s");
    assert_eq!(annotation(&h, "default-a", labels::TAGGED), None);
    // Registration and initialization went on meanwhile.
    h.edit_node(&node, |n| make_ready(n, &[]));
    h.settle().await;
    assert_eq!(
        h.condition("default-a", "Initialized").map(|c| c.0),
        Some("True".to_owned())
    );

    h.cloud.clear_failures();
    let tagged = h
        .wait_for(TAGGING_RETRY_LIMIT, Duration::from_secs(1), |h| {
            annotation(h, "default-a", labels::TAGGED).is_some()
        })
        .await;
    assert!(tagged, "tagged once CreateTags works again");
    let attempts = h.cloud.calls_of(CloudOperation::TagInstance).len();
    h.advance(Duration::from_mins(5)).await;
    assert_eq!(
        h.cloud.calls_of(CloudOperation::TagInstance).len(),
        attempts
    );
    assert!(attempts > failed);
}

#[actix::test]
async fn a_nodeclaim_already_tagged_makes_no_aws_call() {
    tokio::time::pause();
    let h = Harness::start();
    ready_nodeclaim(
        &h,
        "default-a",
        json!({ "metadata": { "annotations": {
            labels::TAGGED: "true",
            labels::CLUSTER_NAME_TAGGED: "true",
        }}}),
    )
    .await;
    h.advance(Duration::from_mins(5)).await;
    assert!(h.cloud.calls_of(CloudOperation::TagInstance).is_empty());
}

#[actix::test]
async fn a_nodeclaim_tagged_before_the_cluster_name_tag_existed_is_tagged_once_more() {
    tokio::time::pause();
    let h = Harness::start();
    let node = ready_nodeclaim(
        &h,
        "default-a",
        json!({ "metadata": { "annotations": { labels::TAGGED: "true" } } }),
    )
    .await;
    assert_eq!(h.cloud.tagged(), [registered_tags(&node, "default-a")]);
    assert_eq!(
        annotation(&h, "default-a", labels::CLUSTER_NAME_TAGGED).as_deref(),
        Some("true")
    );
}

#[actix::test]
async fn an_instance_already_gone_is_not_tagged_and_not_retried() {
    tokio::time::pause();
    let h = Harness::start();
    h.add_nodeclaim(nodeclaim("default-a", json!({})));
    h.settle().await;
    let provider_id = h.provider_id("default-a").unwrap();
    assert!(h.cloud.vanish(&provider_id));
    let node = h.register_node("default-a", &[], &[]);
    h.settle().await;
    h.edit_node(&node, |n| make_ready(n, &[]));
    h.advance(Duration::from_secs(30)).await;

    assert_eq!(h.cloud.calls_of(CloudOperation::TagInstance).len(), 1);
    assert_eq!(annotation(&h, "default-a", labels::TAGGED), None);
}

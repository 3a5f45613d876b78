//! Nodes that follow their spec over time, on the NodeClaim side over fakes: the `Drifted`
//! condition (Karpenter's `nodeclaim.disruption` Drift: the NodePool's hash, its requirements,
//! the instance type gone from it, then the cloud provider's own reasons), decided again every
//! 5 minutes and at once when the NodePool or its `EC2NodeClass` changes; and expiration
//! (Karpenter's `nodeclaim.expiration`), which deletes a NodeClaim at its creation plus
//! `expireAfter`. The daemon assembly routes the mirrored fake cluster's changes (`support`);
//! time is tokio's paused clock.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

mod support;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_actors::metrics::disruption_reason;
use karpenter_actors::ports::cloud_provider::{CloudProviderError, DriftReason};
use karpenter_actors::testing::{CloudOperation, fake_instance_type};
use karpenter_core::apis::labels;
use karpenter_core::domain::nodepool_hash::{HASH_VERSION, template_hash};
use serde_json::json;
use support::{Harness, deleting, nodeclaim, nodeclass, nodepool, plus, ready_nodeclaim, until};

const NODEPOOL: &str = "default";
const DRIFTED: &str = "Drifted";
/// Karpenter's drift requeue (spelled out rather than taken from the crate, so a changed
/// constant fails here).
const DRIFT_RECHECK: Duration = Duration::from_mins(5);

/// A cluster with a ready class and the `default` pool consolidating after `consolidate_after`,
/// with a budget of zero nodes: the disruption round leaves the nodes these tests watch alone
/// (an empty node would otherwise go 15 s after it turns consolidatable).
async fn cluster_consolidating_after(consolidate_after: &str) -> Harness {
    let h = Harness::start();
    h.add_nodeclass(nodeclass(Some(true)));
    h.add_nodepool(nodepool(
        NODEPOOL,
        json!({ "spec": { "disruption": {
            "consolidateAfter": consolidate_after,
            "budgets": [{ "nodes": "0" }],
        }}}),
    ));
    h.settle().await;
    h
}

async fn cluster() -> Harness {
    cluster_consolidating_after("Never").await
}

/// `Drifted` as (status, reason), asserting its message repeats the reason as Karpenter's does.
fn drifted(h: &Harness, name: &str) -> Option<(String, String)> {
    let condition = h
        .nodeclaim(name)?
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == DRIFTED)?;
    assert_eq!(condition.message, condition.reason, "message is the reason");
    Some((condition.status.as_str().to_owned(), condition.reason))
}

fn drifted_by(reason: &str) -> (String, String) {
    ("True".to_owned(), reason.to_owned())
}

/// Rewrites the `default` pool as a user would.
async fn edit_pool(h: &Harness, edit: impl FnOnce(&mut karpenter_core::apis::NodePool)) {
    let mut pool = h.api.nodepool(NODEPOOL).unwrap();
    edit(&mut pool);
    h.add_nodepool(pool);
    h.settle().await;
}

/// Sets the `team` label of the `default` pool's template (a change of its template hash).
async fn label_pool_team(h: &Harness, team: &str) {
    edit_pool(h, |pool| {
        pool.spec
            .template
            .metadata
            .labels
            .insert("team".into(), team.into());
    })
    .await;
}

/// When the NodeClaim's `Drifted` condition last transitioned.
fn drifted_since(h: &Harness, name: &str) -> Time {
    h.nodeclaim(name)
        .unwrap()
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == DRIFTED)
        .unwrap()
        .last_transition_time
}

fn plus_signed(at: Timestamp, by: SignedDuration) -> Timestamp {
    at.checked_add(by).unwrap()
}

fn expired_count(h: &Harness) -> u64 {
    h.metrics.disrupted_count(
        disruption_reason::EXPIRED,
        NODEPOOL,
        labels::CAPACITY_TYPE_ON_DEMAND,
    )
}

/// The `DisruptionTerminating` events about a NodeClaim: (type, action, note).
fn terminating_events(h: &Harness, name: &str) -> Vec<(String, String, String)> {
    h.api
        .events()
        .into_iter()
        .filter(|e| {
            e.reason == "DisruptionTerminating" && e.regarding.name.as_deref() == Some(name)
        })
        .map(|e| {
            (
                format!("{:?}", e.type_),
                e.action,
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

// ---- drift ---------------------------------------------------------------------------------

#[actix::test]
async fn a_template_change_drifts_the_nodeclaim_by_its_nodepool_hash_and_reverting_it_clears_it() {
    tokio::time::pause();
    let h = cluster().await;
    // Stamped with its pool's hash, as the Provisioner creates NodeClaims.
    let pool = h.api.nodepool(NODEPOOL).unwrap();
    let hash = template_hash(&pool.spec.template);
    assert_eq!(
        pool.metadata.annotations.as_ref().unwrap()[labels::NODEPOOL_HASH],
        hash
    );
    ready_nodeclaim(
        &h,
        "default-a",
        json!({ "metadata": { "annotations": {
            labels::NODEPOOL_HASH: hash,
            labels::NODEPOOL_HASH_VERSION: HASH_VERSION,
        }}}),
    )
    .await;
    assert_eq!(drifted(&h, "default-a"), None);

    label_pool_team(&h, "b").await;
    assert_ne!(
        h.api
            .nodepool(NODEPOOL)
            .unwrap()
            .metadata
            .annotations
            .unwrap()[labels::NODEPOOL_HASH],
        hash,
        "the pool actor stamped the new template's hash"
    );
    assert_eq!(
        drifted(&h, "default-a"),
        Some(drifted_by("NodePoolDrifted"))
    );

    label_pool_team(&h, "a").await;
    assert_eq!(drifted(&h, "default-a"), None, "the hash is back");
}

#[actix::test]
async fn a_requirement_the_nodeclaim_no_longer_meets_drifts_it_until_the_pool_allows_it_again() {
    tokio::time::pause();
    let h = cluster().await;
    // No hash annotations: only the requirements can tell.
    ready_nodeclaim(&h, "default-a", json!({})).await;
    assert_eq!(drifted(&h, "default-a"), None);

    let set_capacity_types = |values: &'static [&'static str]| {
        move |pool: &mut karpenter_core::apis::NodePool| {
            pool.spec.template.spec.requirements = vec![
                serde_json::from_value(json!({
                    "key": labels::CAPACITY_TYPE, "operator": "In", "values": values,
                }))
                .unwrap(),
            ];
        }
    };
    edit_pool(&h, set_capacity_types(&[labels::CAPACITY_TYPE_SPOT])).await;
    assert_eq!(
        drifted(&h, "default-a"),
        Some(drifted_by("RequirementsDrifted"))
    );

    edit_pool(
        &h,
        set_capacity_types(&[labels::CAPACITY_TYPE_SPOT, labels::CAPACITY_TYPE_ON_DEMAND]),
    )
    .await;
    assert_eq!(drifted(&h, "default-a"), None);
}

#[actix::test]
async fn a_nodeclaim_relabelled_out_of_its_pools_requirements_drifts_though_the_pool_did_not_change()
 {
    tokio::time::pause();
    let h = cluster().await;
    edit_pool(&h, |pool| {
        pool.spec.template.spec.requirements = vec![
            serde_json::from_value(json!({
                "key": labels::CAPACITY_TYPE, "operator": "In",
                "values": [labels::CAPACITY_TYPE_ON_DEMAND],
            }))
            .unwrap(),
        ];
    })
    .await;
    ready_nodeclaim(&h, "default-a", json!({})).await;
    assert_eq!(drifted(&h, "default-a"), None);

    // The same pool object; only the NodeClaim's labels move (a verdict kept by the pool alone
    // would miss it).
    let mut claim = h.nodeclaim("default-a").unwrap();
    claim.metadata.labels.get_or_insert_default().insert(
        labels::CAPACITY_TYPE.into(),
        labels::CAPACITY_TYPE_SPOT.into(),
    );
    h.add_nodeclaim(claim);
    h.settle().await;
    assert_eq!(
        drifted(&h, "default-a"),
        Some(drifted_by("RequirementsDrifted"))
    );
}

#[actix::test]
async fn an_instance_type_gone_from_the_pool_drifts_the_nodeclaim_at_the_next_recheck() {
    tokio::time::pause();
    let h = cluster().await;
    ready_nodeclaim(&h, "default-a", json!({})).await;
    assert_eq!(drifted(&h, "default-a"), None);

    // The type is still listed, but only in another zone: no offering matches the NodeClaim.
    let mut elsewhere = (*fake_instance_type()).clone();
    for offering in &mut elsewhere.offerings {
        *offering = karpenter_core::domain::instance_type::Offering::new(
            "us-west-2b",
            offering.capacity_type().unwrap(),
            offering.price,
        );
    }
    h.cloud
        .set_instance_types_for(NODEPOOL, vec![std::sync::Arc::new(elsewhere)]);
    h.advance(DRIFT_RECHECK).await;
    assert_eq!(
        drifted(&h, "default-a"),
        Some(drifted_by("InstanceTypeNotFound"))
    );

    h.cloud.set_instance_types_for(NODEPOOL, Vec::new());
    h.advance(DRIFT_RECHECK).await;
    assert_eq!(
        drifted(&h, "default-a"),
        Some(drifted_by("InstanceTypeNotFound")),
        "gone altogether"
    );

    h.cloud
        .set_instance_types_for(NODEPOOL, vec![fake_instance_type()]);
    h.advance(DRIFT_RECHECK).await;
    assert_eq!(drifted(&h, "default-a"), None);
}

#[actix::test]
async fn drift_the_cloud_reports_appears_at_the_five_minute_recheck_without_any_event() {
    tokio::time::pause();
    let h = cluster().await;
    ready_nodeclaim(&h, "default-a", json!({})).await;
    assert_eq!(drifted(&h, "default-a"), None);
    assert!(
        !h.cloud.calls_of(CloudOperation::IsDrifted).is_empty(),
        "asked once launched"
    );

    // Let the writes that follow initialization (the pool's status) settle: from here on no
    // event reaches the NodeClaim.
    h.advance(Duration::from_secs(30)).await;
    let asked = h.cloud.calls_of(CloudOperation::IsDrifted).len();
    h.cloud.set_drift("default-a", Some(DriftReason::AmiDrift));
    // The last look was about 25 s before the drift began: the next is about 4.5 min after.
    h.advance(Duration::from_mins(4)).await;
    assert_eq!(drifted(&h, "default-a"), None, "nothing looked yet");
    assert_eq!(h.cloud.calls_of(CloudOperation::IsDrifted).len(), asked);
    h.advance(Duration::from_mins(1)).await;
    assert_eq!(drifted(&h, "default-a"), Some(drifted_by("AMIDrift")));
    let since = drifted_since(&h, "default-a");

    // A new reason rewrites the condition; it has been drifted since the first one.
    h.cloud
        .set_drift("default-a", Some(DriftReason::SubnetDrift));
    h.advance(DRIFT_RECHECK).await;
    assert_eq!(drifted(&h, "default-a"), Some(drifted_by("SubnetDrift")));
    let still = drifted_since(&h, "default-a");
    assert_eq!(still, since);

    h.cloud.set_drift("default-a", None);
    h.advance(DRIFT_RECHECK).await;
    assert_eq!(drifted(&h, "default-a"), None, "fixed");
}

#[actix::test]
async fn an_ec2nodeclass_change_decides_drift_again_at_once() {
    tokio::time::pause();
    let h = cluster().await;
    ready_nodeclaim(&h, "default-a", json!({})).await;
    // Quiet first: the pool's status writes after the initialization nudge its NodeClaims too.
    h.advance(Duration::from_secs(30)).await;
    h.cloud
        .set_drift("default-a", Some(DriftReason::SecurityGroupDrift));
    h.advance(Duration::from_secs(30)).await;
    assert_eq!(drifted(&h, "default-a"), None, "nothing looked yet");

    let mut class = h.api.ec2nodeclass("default").unwrap();
    class.spec.security_group_selector_terms =
        serde_json::from_value(json!([{ "tags": { "karpenter.sh/discovery": "other-cluster" } }]))
            .unwrap();
    h.add_nodeclass(class);
    h.settle().await;
    assert_eq!(
        drifted(&h, "default-a"),
        Some(drifted_by("SecurityGroupDrift"))
    );
}

#[actix::test]
async fn a_nodeclaim_that_is_not_launched_carries_no_drifted_condition() {
    tokio::time::pause();
    let h = cluster().await;
    h.cloud.set_create_latency(Duration::from_secs(30));
    h.cloud.set_drift("default-a", Some(DriftReason::AmiDrift));
    h.add_nodeclaim(nodeclaim(
        "default-a",
        json!({ "status": { "conditions": [{
            "type": DRIFTED, "status": "True", "reason": "AMIDrift", "message": "AMIDrift",
            "lastTransitionTime": "2025-06-01T11:00:00Z",
        }]}}),
    ));
    h.settle().await;
    assert_ne!(
        h.condition("default-a", "Launched").map(|c| c.0).as_deref(),
        Some("True")
    );
    assert_eq!(drifted(&h, "default-a"), None, "removed before the launch");
    assert!(h.cloud.calls_of(CloudOperation::IsDrifted).is_empty());

    h.advance(Duration::from_secs(30)).await;
    assert_eq!(
        h.condition("default-a", "Launched").map(|c| c.0).as_deref(),
        Some("True")
    );
    assert_eq!(drifted(&h, "default-a"), Some(drifted_by("AMIDrift")));
}

#[actix::test]
async fn a_failed_drift_check_is_retried_and_does_not_hold_back_consolidation() {
    tokio::time::pause();
    let h = cluster_consolidating_after("0s").await;
    h.cloud.fail_when(
        |call| call.operation() == CloudOperation::IsDrifted,
        CloudProviderError::NodeClassIncomplete {
            nodeclass: "default".into(),
            message: "no amis exist given constraints".into(),
        },
    );
    ready_nodeclaim(&h, "default-a", json!({})).await;
    assert_eq!(
        h.condition("default-a", "Consolidatable")
            .map(|c| c.0)
            .as_deref(),
        Some("True"),
        "the steps after drift ran"
    );
    assert_eq!(drifted(&h, "default-a"), None);
    let failed = h.cloud.calls_of(CloudOperation::IsDrifted).len();
    h.advance(Duration::from_secs(2)).await;
    assert!(
        h.cloud.calls_of(CloudOperation::IsDrifted).len() > failed,
        "retried with backoff, well before the 5-minute recheck"
    );

    h.cloud.clear_failures();
    h.cloud.set_drift("default-a", Some(DriftReason::AmiDrift));
    h.advance(Duration::from_mins(1)).await;
    assert_eq!(drifted(&h, "default-a"), Some(drifted_by("AMIDrift")));
}

// ---- expiration ----------------------------------------------------------------------------

#[actix::test]
async fn a_nodeclaim_is_deleted_exactly_expire_after_after_its_creation_and_counted_once() {
    tokio::time::pause();
    let h = cluster().await;
    ready_nodeclaim(&h, "default-a", json!({ "spec": { "expireAfter": "1h" } })).await;
    let created = h
        .nodeclaim("default-a")
        .unwrap()
        .metadata
        .creation_timestamp
        .unwrap()
        .0;
    let expires = plus(created, Duration::from_hours(1));

    tokio::time::sleep(
        until(&h, expires)
            .checked_sub(Duration::from_secs(1))
            .unwrap(),
    )
    .await;
    h.settle().await;
    assert!(!deleting(&h, "default-a"), "one second before: alive");
    assert_eq!(expired_count(&h), 0);
    assert!(terminating_events(&h, "default-a").is_empty());

    tokio::time::sleep(until(&h, expires)).await;
    h.settle().await;
    assert!(
        deleting(&h, "default-a"),
        "deleted at creation + expireAfter"
    );
    assert_eq!(expired_count(&h), 1);
    assert_eq!(
        terminating_events(&h, "default-a"),
        [(
            "Normal".to_owned(),
            "Disrupting".to_owned(),
            "Disrupting NodeClaim: Expired".to_owned()
        )]
    );

    // Termination runs its course; the expiration is not counted or announced again.
    h.advance(Duration::from_mins(2)).await;
    assert!(h.nodeclaim("default-a").is_none(), "terminated");
    assert_eq!(expired_count(&h), 1);
    assert_eq!(terminating_events(&h, "default-a").len(), 1);
}

#[actix::test]
async fn expire_after_never_or_unparsable_never_deletes() {
    tokio::time::pause();
    let h = cluster().await;
    ready_nodeclaim(
        &h,
        "default-never",
        json!({ "spec": { "expireAfter": "Never" } }),
    )
    .await;
    ready_nodeclaim(
        &h,
        "default-typo",
        json!({ "spec": { "expireAfter": "30 days" } }),
    )
    .await;
    ready_nodeclaim(&h, "default-control", json!({})).await;
    assert_eq!(expired_count(&h), 0);

    // 1000 hours pass, past Karpenter's default of 720h that the control NodeClaim carries
    // (backdated rather than advanced: a month of paused time ticks every periodic actor).
    let long_ago = plus_signed(h.clock_now(), -SignedDuration::from_hours(1000));
    for name in ["default-never", "default-typo", "default-control"] {
        let mut backdated = h.nodeclaim(name).unwrap();
        backdated.metadata.creation_timestamp = Some(Time(long_ago));
        h.add_nodeclaim(backdated);
    }
    h.settle().await;
    assert!(deleting(&h, "default-control"), "the default 720h expired");
    assert_eq!(expired_count(&h), 1);

    h.advance(Duration::from_hours(2)).await;
    assert!(!deleting(&h, "default-never"));
    assert!(!deleting(&h, "default-typo"));
    assert_eq!(expired_count(&h), 1);
}

/// Changes the node (a label), which reconciles its NodeClaim.
fn heartbeat(h: &Harness, node: &str, n: usize) {
    h.edit_node(node, |node| {
        node.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("example.com/heartbeat".into(), n.to_string());
    });
}

#[actix::test]
async fn the_cloud_is_asked_about_drift_once_per_recheck_however_often_the_node_changes() {
    tokio::time::pause();
    let h = cluster().await;
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    h.advance(Duration::from_secs(30)).await;
    let asked = h.cloud.calls_of(CloudOperation::IsDrifted).len();
    // The node changes every 20 s for 5 min 20 s (each change reconciles its NodeClaim).
    for n in 0..16 {
        heartbeat(&h, &node, n);
        h.advance(Duration::from_secs(20)).await;
    }
    let after = h.cloud.calls_of(CloudOperation::IsDrifted).len();
    assert_eq!(
        after - asked,
        1,
        "16 node changes make one cloud call, at the 5-minute recheck"
    );
}

/// The pool's status changes with every NodeClaim that joins it (its resources): that asks the
/// cloud nothing; a change of the pool's spec (a new generation) does, at once.
#[actix::test]
async fn a_pools_status_change_asks_the_cloud_nothing_and_a_spec_change_asks_at_once() {
    tokio::time::pause();
    let h = cluster().await;
    edit_pool(&h, |pool| pool.metadata.generation = Some(1)).await;
    let node = ready_nodeclaim(&h, "default-a", json!({})).await;
    h.advance(Duration::from_secs(30)).await;
    let asked = h.cloud.calls_of(CloudOperation::IsDrifted).len();
    for n in 0..5 {
        edit_pool(&h, |pool| {
            pool.status
                .get_or_insert_with(Default::default)
                .resources
                .insert("nodes".into(), Quantity(n.to_string()));
        })
        .await;
        // Each status change comes with a node change, so the NodeClaim reconciles.
        heartbeat(&h, &node, n);
        h.advance(Duration::from_secs(20)).await;
    }
    assert_eq!(
        h.cloud.calls_of(CloudOperation::IsDrifted).len(),
        asked,
        "status changes of the pool make no cloud call"
    );

    edit_pool(&h, |pool| {
        pool.metadata.generation = Some(2);
        pool.spec.weight = Some(10);
    })
    .await;
    assert_eq!(
        h.cloud.calls_of(CloudOperation::IsDrifted).len(),
        asked + 1,
        "a new generation of the pool asks the cloud again"
    );
}

//! Ports of the AWS provider's interruption suite (`aws: test/suites/interruption/suite_test.go`)
//! over the simulation, and the rebalance recommendation upstream leaves out: one pod on one
//! node, then an EventBridge event about its instance reaches the interruption queue (kwok's
//! EventBridge routes it by the rules the harness created, as in a real account). Upstream's
//! threshold: the node is deleting within a minute of the event, then gone, and the pod runs
//! again on a replacement.

use std::time::Duration;

use karpenter::sim::scenario::{LoadedScenario, Simulation};
use karpenter_actors::ports::eventbridge::{EventBridgeApi, EventEntry};
use serde_json::json;

use super::support::{
    PoolScenario, REGION, event_reasons, in_simulation, is_bound, live_instances, node_state,
    nodeclaims, pods, registered, until_node_deleting,
};

/// Upstream's `Eventually(...).WithTimeout(time.Minute)` for the node's deletion timestamp.
const DELETING_WITHIN: Duration = Duration::from_mins(1);
/// When the events are sent: the pod's node registered at about 40 s.
const EVENT_AT: Duration = Duration::from_mins(2);

/// One pod (`app`, 1 CPU) on a pool of `capacity_type` nodes; the spot warning is sent by the
/// scenario's own `interruptions` at [`EVENT_AT`] (EC2 reclaims the instance two minutes later).
fn one_pod(capacity_type: &str, spot_warning: bool) -> LoadedScenario {
    let capacity = format!(
        r#"{{key: karpenter.sh/capacity-type, operator: In, values: ["{capacity_type}"]}}"#
    );
    PoolScenario {
        duration: "10m",
        requirements: &[
            &capacity,
            r#"{key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}"#,
            r#"{key: kubernetes.io/arch, operator: In, values: ["amd64"]}"#,
        ],
        workloads: "  - name: app\n    requests: {cpu: \"1\", memory: 1Gi}\n    steps: [{at: 0s, replicas: 1}]\n",
        top: if spot_warning {
            "interruptions:\n  - {at: 2m, count: 1}\n"
        } else {
            ""
        },
        ..PoolScenario::default()
    }
    .load()
}

/// An EC2 event about `instance` as EventBridge receives it from EC2 or AWS Health.
async fn send(sim: &Simulation<'_>, source: &str, detail_type: &str, detail: serde_json::Value) {
    let failed = sim
        .world()
        .eventbridge
        .put_events(&[EventEntry {
            source: source.into(),
            detail_type: detail_type.into(),
            detail: detail.to_string(),
            resources: Vec::new(),
        }])
        .await
        .unwrap();
    assert_eq!(failed, 0);
}

async fn state_change(sim: &Simulation<'_>, instance: &str, state: &str) {
    let detail = json!({"instance-id": instance, "state": state});
    send(
        sim,
        "aws.ec2",
        "EC2 Instance State-change Notification",
        detail,
    )
    .await;
}

/// The one registered node before [`EVENT_AT`]: its NodeClaim, Node and instance.
async fn the_node(sim: &mut Simulation<'_>) -> (String, String, String) {
    assert!(
        sim.advance(EVENT_AT.saturating_sub(Duration::from_secs(1)))
            .await
    );
    assert_eq!(nodeclaims(sim).await.len(), 1, "one pod, one NodeClaim");
    registered(sim).await
}

/// Upstream's checks after the event: the node deleting within [`DELETING_WITHIN`], then gone
/// with its NodeClaim and instance, and the pod running on another node; `reason` among the
/// events on the NodeClaim or the Node (the interruption controller's, so the deletion is
/// its doing).
async fn expect_replaced(sim: &mut Simulation<'_>, node: (String, String, String), reason: &str) {
    let (claim, node, instance) = node;
    let took = until_node_deleting(sim, &node, DELETING_WITHIN + Duration::from_secs(1)).await;
    assert!(
        took.is_some(),
        "{node} not deleting {DELETING_WITHIN:?} after the event"
    );
    let mut reasons = event_reasons(sim, &claim).await;
    reasons.extend(event_reasons(sim, &node).await);
    assert!(reasons.contains(reason), "{reason} not in {reasons:?}");
    assert!(reasons.contains("TerminatingOnInterruption"), "{reasons:?}");

    assert!(sim.advance(Duration::from_mins(1)).await);
    assert_eq!(node_state(sim, &node).await, None, "{node} gone");
    let claims = nodeclaims(sim).await;
    assert!(
        claims
            .iter()
            .all(|c| c.metadata.name.as_deref() != Some(claim.as_str())),
        "{claim} gone"
    );
    assert!(!live_instances(sim).contains(&instance), "{instance} ended");
    let pods = pods(sim).await;
    assert_eq!(pods.len(), 1);
    let on = pods[0].spec.as_ref().and_then(|s| s.node_name.clone());
    assert!(
        is_bound(&pods[0]) && on.as_deref() != Some(node.as_str()),
        "{on:?}"
    );
    assert_eq!(
        pods[0].status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
}

/// `Interruption / It("should terminate the spot instance and spin-up a new node on spot
/// interruption warning")`: the warning comes from the scenario (kwok's EC2 sends it as EC2
/// does and reclaims the instance two minutes later), so Karpenter must act before the reclaim.
#[test]
fn a_spot_interruption_warning_deletes_the_node_and_its_pod_runs_on_a_new_one() {
    let report = in_simulation(|| async {
        let mut sim = Simulation::start(one_pod("spot", true), None)
            .await
            .unwrap();
        let node = the_node(&mut sim).await;
        expect_replaced(&mut sim, node, "SpotInterrupted").await;
        // Past the reclaim: the warned instance was already gone.
        assert!(sim.advance(Duration::from_mins(1)).await);
        sim.finish().await
    });
    let warned = &report.interruptions;
    assert_eq!((warned.warnings, warned.handled), (1, 1), "{warned:?}");
    assert_eq!(warned.left_in_queue, 0);
}

/// `Interruption / It("should terminate the node at the API server when the EC2 instance is
/// stopped")`: EC2's `stopping` state-change notification (kwok's instance keeps running, so
/// nothing but the message can take the node away).
#[test]
fn an_instance_stopping_notification_deletes_the_node_and_its_pod_runs_on_a_new_one() {
    in_simulation(|| async {
        let mut sim = Simulation::start(one_pod("on-demand", false), None)
            .await
            .unwrap();
        let node = the_node(&mut sim).await;
        state_change(&sim, &node.2, "stopping").await;
        expect_replaced(&mut sim, node, "InstanceStopping").await;
        sim.finish().await;
    });
}

/// `Interruption / It("should terminate the node at the API server when the EC2 instance is
/// terminated")`: EC2 takes the instance away behind Karpenter's back and says so.
#[test]
fn an_instance_terminated_notification_deletes_the_node_and_its_pod_runs_on_a_new_one() {
    in_simulation(|| async {
        let mut sim = Simulation::start(one_pod("on-demand", false), None)
            .await
            .unwrap();
        let node = the_node(&mut sim).await;
        assert!(sim.world().ec2.reclaim(&node.2));
        state_change(&sim, &node.2, "shutting-down").await;
        expect_replaced(&mut sim, node, "InstanceTerminating").await;
        sim.finish().await;
    });
}

/// `Interruption / It("should terminate the node when receiving a scheduled change health
/// event")`: an AWS Health `scheduledChange` event for EC2 naming the instance.
#[test]
fn a_scheduled_change_health_event_deletes_the_node_and_its_pod_runs_on_a_new_one() {
    in_simulation(|| async {
        let mut sim = Simulation::start(one_pod("on-demand", false), None)
            .await
            .unwrap();
        let node = the_node(&mut sim).await;
        let detail = json!({
            "service": "EC2",
            "eventTypeCategory": "scheduledChange",
            "eventTypeCode": "AWS_EC2_PERSISTENT_INSTANCE_RETIREMENT_SCHEDULED",
            "affectedEntities": [{"entityValue": node.2}],
            "region": REGION,
        });
        send(&sim, "aws.health", "AWS Health Event", detail).await;
        expect_replaced(&mut sim, node, "InstanceUnhealthy").await;
        sim.finish().await;
    });
}

/// No upstream e2e test: Karpenter v1.5 only records an event for a rebalance recommendation
/// (`pkg/controllers/interruption`: `SpotRebalanceRecommendation`, no action); the node stays.
#[test]
fn a_rebalance_recommendation_records_an_event_and_keeps_the_node() {
    in_simulation(|| async {
        let mut sim = Simulation::start(one_pod("spot", false), None)
            .await
            .unwrap();
        let (claim, node, instance) = the_node(&mut sim).await;
        let detail = json!({"instance-id": instance});
        send(
            &sim,
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            detail,
        )
        .await;
        assert_eq!(
            until_node_deleting(&mut sim, &node, Duration::from_mins(5)).await,
            None,
            "a rebalance recommendation disrupts nothing"
        );
        let mut reasons = event_reasons(&sim, &claim).await;
        reasons.extend(event_reasons(&sim, &node).await);
        assert!(
            reasons.contains("SpotRebalanceRecommendation"),
            "the recommendation was received: {reasons:?}"
        );
        assert!(
            !reasons.contains("TerminatingOnInterruption"),
            "{reasons:?}"
        );
        assert!(live_instances(&sim).contains(&instance));
        let report = sim.finish().await;
        assert_eq!(
            report.interruptions.left_in_queue, 0,
            "the message was handled"
        );
    });
}

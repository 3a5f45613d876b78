//! Interruption handling through the real queue: a spot interruption warning, an AWS Health
//! scheduled change and an instance state change, put on EventBridge and routed by the rules
//! `karpenter interruption setup` made to the SQS queue, each lead the daemon to delete the
//! NodeClaim of the instance they name, and every message leaves the queue; a malformed message
//! put straight on the queue is deleted and counted.

use std::collections::BTreeSet;
use std::time::Duration;

use karpenter_actors::ports::eventbridge::{EventBridgeApi as _, EventEntry};
use karpenter_actors::ports::sqs::SqsApi as _;
use kube::ResourceExt;
use serde_json::json;

use crate::support::{World, instance_of, until};

/// From a message on the queue to its NodeClaim deleted: one long poll (20 s) at most, plus the
/// handling.
const HANDLED: Duration = Duration::from_mins(1);

fn event(source: &str, detail_type: &str, detail: &serde_json::Value) -> EventEntry {
    EventEntry {
        source: source.into(),
        detail_type: detail_type.into(),
        detail: detail.to_string(),
        resources: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interruption_messages_delete_their_nodeclaims_and_leave_the_queue_empty() {
    let Some(world) = World::start("interruption").await else {
        return;
    };
    world.apply_nodepool().await;
    let daemon = world.daemon(&[]);
    world.create_pods("batch", 3).await;
    world.until_pods_run("batch", 3, &[&daemon]).await;
    let mut claims: Vec<(String, String)> = world
        .nodeclaims()
        .await
        .iter()
        .filter_map(|c| Some((instance_of(c)?, c.name_any())))
        .collect();
    claims.sort();
    assert_eq!(claims.len(), 3, "{claims:?}");
    let (spot, health, stopping) = (&claims[0], &claims[1], &claims[2]);

    let entries = [
        event(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            &json!({"instance-id": spot.0, "instance-action": "terminate"}),
        ),
        event(
            "aws.health",
            "AWS Health Event",
            &json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
                    "affectedEntities": [{"entityValue": health.0}]}),
        ),
        event(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            &json!({"instance-id": stopping.0, "state": "stopping"}),
        ),
    ];
    let failed = world
        .moto
        .clients
        .eventbridge
        .put_events(&entries)
        .await
        .unwrap();
    assert_eq!(failed, 0);
    world
        .moto
        .clients
        .sqs
        .send_message(&world.queue_url, "this is not an EventBridge event")
        .await
        .unwrap();

    let interrupted: BTreeSet<String> = [spot, health, stopping]
        .iter()
        .map(|(_, name)| name.clone())
        .collect();
    until(
        "the three NodeClaims deleted, four messages deleted and the malformed one counted",
        HANDLED,
        || world.context(&[&daemon]),
        || async {
            let deleting: BTreeSet<String> = world
                .nodeclaims()
                .await
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .map(ResourceExt::name_any)
                .collect();
            let all_deleted = interrupted.iter().all(|name| !deleting.contains(name));
            let deleted = daemon
                .metric("karpenter_interruption_deleted_messages_total")
                .await;
            let unparseable = daemon
                .metric_sum("karpenter_interruption_unparseable_messages_total")
                .await;
            (all_deleted && deleted >= 4.0 && unparseable >= 1.0).then_some(())
        },
    )
    .await;

    // Every message is gone from the queue, none waiting to come back.
    let attributes = world
        .moto
        .clients
        .sqs
        .get_queue_attributes(&world.queue_url)
        .await
        .unwrap();
    for attribute in [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
    ] {
        assert_eq!(
            attributes.get(attribute).map(String::as_str),
            Some("0"),
            "{attribute}: {attributes:?}"
        );
    }
    for kind in ["spot_interrupted", "scheduled_change", "instance_stopped"] {
        let received = daemon
            .metric(&format!(
                "karpenter_interruption_received_messages_total{{message_type=\"{kind}\"}}"
            ))
            .await;
        assert!(
            received >= 1.0,
            "{kind} received: {}",
            daemon.metrics_text().await.unwrap_or_default()
        );
    }
}

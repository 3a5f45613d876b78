//! Interruption handling end to end against `moto_server` (real SQS and EventBridge over the
//! aws-sdk adapters) and the Kubernetes API emulator (real kube-rs watchers and writes):
//! `interruption setup` creates the rules, each event kind put on EventBridge arrives in SQS,
//! and the interruption actor deletes the right NodeClaim and the message; a handling failure
//! leaves the message to come back after the visibility timeout.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

#[path = "aws_moto/moto.rs"]
#[allow(
    dead_code,
    reason = "shared with tests/aws_moto; this suite uses part of it"
)]
mod moto;

use std::sync::Arc;
use std::time::{Duration, Instant};

use karpenter::commands::Status;
use karpenter::commands::interruption::{SetupArgs, setup_with};
use karpenter::emulator::{Emulator, FaultRule, Verb};
use karpenter::kube::cluster_api::KubeClusterApi;
use karpenter::kube::ingress::ClusterIngress;
use karpenter_actors::interruption::{InterruptionActor, InterruptionDeps, InterruptionMetrics};
use karpenter_actors::ports::clock::SystemClock;
use karpenter_actors::ports::eventbridge::{EventBridgeApi, EventEntry};
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_actors::runtime::{ActorKit, GroupSpec, KitOptions};
use karpenter_core::apis::NodeClaim;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::json;

const QUEUE: &str = "moto-cluster";

fn args(check: bool) -> SetupArgs {
    SetupArgs {
        queue: QUEUE.into(),
        cluster: "moto-cluster".into(),
        check,
        region: None,
        endpoint_url: None,
    }
}

async fn create_nodeclaim(api: &Api<NodeClaim>, name: &str, instance_id: &str) {
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": { "name": name, "labels": {
            "karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "m5.large",
            "topology.kubernetes.io/zone": "us-west-2a", "karpenter.sh/capacity-type": "spot" } },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [],
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &claim).await.unwrap();
    let status = json!({ "status": { "providerID": format!("aws:///us-west-2a/{instance_id}") } });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn put(
    events: &dyn EventBridgeApi,
    detail_type: &str,
    source: &str,
    detail: serde_json::Value,
) {
    let entry = EventEntry {
        source: source.into(),
        detail_type: detail_type.into(),
        detail: detail.to_string(),
        resources: vec![],
    };
    assert_eq!(events.put_events(&[entry]).await.unwrap(), 0);
}

/// Waits (real time: moto is a real server) until `done` holds.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut done: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {what}");
}

#[actix::test]
async fn interruption_events_flow_from_eventbridge_through_sqs_to_nodeclaim_deletion() {
    let Some(moto) = moto::Moto::start().await else {
        return;
    };
    let (sqs, events) = (moto.clients.sqs.clone(), moto.clients.eventbridge.clone());

    // `interruption setup` creates the queue and rules; `--check` agrees; a second run is a no-op.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        setup_with(
            sqs.as_ref(),
            events.as_ref(),
            &args(false),
            &mut out,
            &mut err
        )
        .await,
        Status::Success
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let checked = setup_with(
        sqs.as_ref(),
        events.as_ref(),
        &args(true),
        &mut out,
        &mut err,
    )
    .await;
    assert_eq!(
        checked,
        Status::Success,
        "{}{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&err)
    );
    let (mut out, mut err) = (Vec::new(), Vec::new());
    setup_with(
        sqs.as_ref(),
        events.as_ref(),
        &args(false),
        &mut out,
        &mut err,
    )
    .await;
    assert!(
        String::from_utf8_lossy(&out).contains("already set up"),
        "{}",
        String::from_utf8_lossy(&out)
    );

    // A cluster with four NodeClaims, watched by the daemon's ingress.
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let nodeclaims: Api<NodeClaim> = Api::all(client.clone());
    for (name, id) in [
        ("spot", "i-0001"),
        ("health", "i-0002"),
        ("stopped", "i-0003"),
        ("terminated", "i-0004"),
    ] {
        create_nodeclaim(&nodeclaims, name, id).await;
    }
    let ingress = ClusterIngress::new(client.clone());
    let state = ingress.state();
    let _watch = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    until(
        "the store to see the NodeClaims",
        Duration::from_secs(10),
        || {
            let count = state.nodeclaims.state().len();
            async move { count == 4 }
        },
    )
    .await;

    let reporter = Reporter {
        controller: "karpenter".into(),
        instance: None,
    };
    let metrics = InterruptionMetrics::unregistered(Family::default());
    let mut registry = Registry::default();
    let kit = ActorKit::new(&mut registry, KitOptions::default());
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let unavailable = Arc::new(UnavailableOfferings::new(Duration::from_mins(3)));
    root.spawn::<InterruptionActor>(
        "interruption",
        InterruptionDeps {
            sqs: sqs.clone(),
            cluster: Arc::new(KubeClusterApi::new(client.clone(), reporter)),
            view: Arc::new(state.clone()),
            unavailable: unavailable.clone(),
            clock: Arc::new(SystemClock),
            queue: QUEUE.into(),
            rebalance_replace: false,
            metrics: metrics.clone(),
        },
    )
    .unwrap();

    put(
        events.as_ref(),
        "EC2 Spot Instance Interruption Warning",
        "aws.ec2",
        json!({ "instance-id": "i-0001", "instance-action": "terminate" }),
    )
    .await;
    put(events.as_ref(), "AWS Health Event", "aws.health", json!({ "service": "EC2", "eventTypeCategory": "scheduledChange", "affectedEntities": [{ "entityValue": "i-0002" }] })).await;
    put(
        events.as_ref(),
        "EC2 Instance State-change Notification",
        "aws.ec2",
        json!({ "instance-id": "i-0003", "state": "stopped" }),
    )
    .await;
    put(
        events.as_ref(),
        "EC2 Instance Rebalance Recommendation",
        "aws.ec2",
        json!({ "instance-id": "i-0004" }),
    )
    .await;
    until(
        "three NodeClaims deleted and four messages deleted",
        Duration::from_secs(30),
        || {
            let nodeclaims = nodeclaims.clone();
            let deleted = metrics.deleted.get();
            async move {
                let left: Vec<String> = nodeclaims
                    .list(&kube::api::ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .filter_map(|c| c.metadata.name)
                    .collect();
                left == vec!["terminated".to_owned()] && deleted == 4
            }
        },
    )
    .await;
    assert!(unavailable.is_unavailable(
        "m5.large",
        "us-west-2a",
        karpenter_core::domain::instance_type::CapacityType::Spot
    ));

    // A deletion that fails leaves the message; it comes back after the 20 s visibility timeout.
    emulator.faults().inject(
        FaultRule::fail(500)
            .on(Verb::Delete)
            .resource("nodeclaims")
            .times(1),
    );
    put(
        events.as_ref(),
        "EC2 Instance State-change Notification",
        "aws.ec2",
        json!({ "instance-id": "i-0004", "state": "terminated" }),
    )
    .await;
    until(
        "the redelivered message to be handled",
        Duration::from_mins(1),
        || {
            let nodeclaims = nodeclaims.clone();
            let deleted = metrics.deleted.get();
            async move {
                deleted == 5
                    && nodeclaims
                        .list(&kube::api::ListParams::default())
                        .await
                        .unwrap()
                        .items
                        .is_empty()
            }
        },
    )
    .await;
    root.stop().await;
}

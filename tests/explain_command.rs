//! `karpenter explain pod` and `explain node` end to end: a daemon (the actors' `Daemon` with a
//! fake cluster, a fake cloud provider and kwok's AWS) routes a pending pod to the Provisioner,
//! which decides; the explain routes answer over HTTP on loopback and the command's client
//! prints the reasons.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "integration test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use karpenter::commands::explain;
use karpenter::daemon::{
    EXPLAIN_NODE_ROUTE_PREFIX, EXPLAIN_ROUTE_PREFIX, explain_answer, explain_node_answer,
};
use karpenter_actors::daemon::Daemon;
use karpenter_actors::deps::ClusterVersion;
use karpenter_actors::deps::{AwsPorts, Deps};
use karpenter_actors::kwok::ec2::{KwokEc2, KwokEc2Config, KwokEc2Deps};
use karpenter_actors::kwok::eventbridge::KwokEventBridge;
use karpenter_actors::kwok::iam::KwokIam;
use karpenter_actors::kwok::pricing::KwokPricing;
use karpenter_actors::kwok::sqs::KwokSqs;
use karpenter_actors::kwok::ssm::KwokSsm;
use karpenter_actors::messages::ClusterChange;
use karpenter_actors::metrics::Metrics;
use karpenter_actors::ports::clock::{Clock, ManualClock};
use karpenter_actors::providers::unavailable::UnavailableOfferings;
use karpenter_actors::provisioner::{Decision, PodState};
use karpenter_actors::runtime::{ActorKit, GroupSpec, KitOptions};
use karpenter_actors::testing::FakeCloudProvider;
use karpenter_actors::testing::FakeClusterApi;
use karpenter_actors::testing::MemoryClusterView;
use karpenter_config::Settings;
use karpenter_core::apis::nodepool::NodePool;
use karpenter_core::domain::scheduling::workload::fake_instance_type;
use karpenter_core::domain::userdata::ClusterInfo;
use prometheus_client::registry::Registry;

const REGION: &str = "us-west-2";

fn nodepool(name: &str, taint: Option<&str>) -> NodePool {
    let taints = taint.map_or_else(Vec::new, |key| {
        vec![serde_json::json!({"key": key, "effect": "NoSchedule"})]
    });
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "requirements": [],
            "taints": taints,
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        }}},
        "status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "Ready", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]},
    }))
    .unwrap()
}

fn pod(name: &str, cpu: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("default".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".to_owned(),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "cpu".to_owned(),
                        Quantity(cpu.to_owned()),
                    )])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn deps(view: Arc<MemoryClusterView>, registry: &mut Registry) -> Deps {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(
        "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap(),
    ));
    let sqs = Arc::new(KwokSqs::new(REGION));
    let eventbridge = Arc::new(KwokEventBridge::new(REGION, sqs.clone(), clock.clone()));
    let ec2 = KwokEc2::new(
        KwokEc2Config::new(REGION, "test"),
        KwokEc2Deps {
            clock: clock.clone(),
            events: Some(eventbridge.clone()),
        },
    )
    .unwrap();
    let cloud = FakeCloudProvider::with_instance_types(vec![Arc::new(fake_instance_type(
        "fake-4x",
        4,
        16 << 30,
        110,
    ))]);
    Deps {
        settings: Arc::new(Settings::default()),
        clock,
        cluster: Arc::new(FakeClusterApi::new()),
        view,
        cloud: Arc::new(cloud),
        aws: AwsPorts {
            ec2: Arc::new(ec2),
            sqs,
            eventbridge,
            iam: Arc::new(KwokIam::default()),
            ssm: Arc::new(KwokSsm::default()),
            pricing: Arc::new(KwokPricing::new(1.0)),
            eks: Arc::new(karpenter_actors::kwok::eks::KwokEks::default()),
        },
        unavailable: Arc::new(UnavailableOfferings::default()),
        cluster_info: ClusterInfo::default(),
        region: REGION.into(),
        kubernetes_version: ClusterVersion::default(),
        kubernetes_version_source: None,
        metrics: Arc::new(Metrics::register(registry)),
    }
}

/// Serves the explain route of `daemon` on loopback; returns the base URL.
async fn serve(daemon: Rc<Daemon>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    actix::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let daemon = Rc::clone(&daemon);
            let handler = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let daemon = Rc::clone(&daemon);
                async move {
                    let path = request.uri().path();
                    let answer = match explain_answer(&daemon, path).await {
                        Some(answer) => Some(answer),
                        None => explain_node_answer(&daemon, path).await,
                    };
                    let (status, body) =
                        answer.map_or((404, String::new()), |a| (a.status, a.body));
                    Ok::<_, Infallible>(
                        hyper::Response::builder()
                            .status(status)
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(body)))
                            .unwrap(),
                    )
                }
            });
            actix::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), handler)
                    .await;
            });
        }
    });
    url
}

#[actix::test]
async fn explain_prints_why_a_pod_routed_by_the_daemon_is_pending() {
    tokio::time::pause();
    let view = Arc::new(MemoryClusterView::new());
    view.put_nodepool(nodepool("default", None));
    view.put_nodepool(nodepool("gpu", Some("nvidia.com/gpu")));
    let mut registry = Registry::default();
    let kit = ActorKit::new(&mut registry, KitOptions::default());
    let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
    let deps = deps(view.clone(), &mut registry);
    let daemon = Daemon::start((*root).clone(), deps, &mut registry).unwrap();

    // One pod fits the default pool; one needs more CPU than any instance type has.
    for (name, cpu) in [("web", "1"), ("huge", "64")] {
        view.put_pod(pod(name, cpu));
        daemon.observe(&ClusterChange::Pod {
            namespace: "default".to_owned(),
            name: name.to_owned(),
            node_name: None,
            pending: true,
            pod_event: false,
            deleted: false,
        });
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let web = daemon.explain_pod("default", "web").await.unwrap();
    assert!(
        matches!(
            web.decision.map(|d| d.decision),
            Some(Decision::Provisioned { .. })
        ),
        "the pending pod was routed and provisioned"
    );
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("karpenter_nodeclaims_created_total"),
        "{text}"
    );

    // Real sockets from here on: a paused clock would jump to the request timeout while the
    // runtime waits for I/O.
    tokio::time::resume();
    let daemon = Rc::new(daemon);
    let url = serve(Rc::clone(&daemon)).await;

    let huge = explain::fetch(&url, "default", "huge").await.unwrap();
    assert_eq!(huge.state, PodState::Pending);
    let text = karpenter_actors::provisioner::render(&huge);
    assert!(text.contains("No NodePool can run it"), "{text}");
    assert!(
        text.contains("nodepool \"default\": no instance type has enough resources"),
        "{text}"
    );
    assert!(
        text.contains("nodepool \"gpu\": did not tolerate taint nvidia.com/gpu:NoSchedule"),
        "{text}"
    );

    // A path that is not `<namespace>/<name>` is a 400 naming the route.
    let bad = explain_answer(&daemon, &format!("{EXPLAIN_ROUTE_PREFIX}only-a-name"))
        .await
        .unwrap();
    assert_eq!(bad.status, 400);
    assert!(explain_answer(&daemon, "/metrics").await.is_none());

    // No disruption round has run yet (the first comes 10 s after start): the node is not seen.
    let node = explain::fetch_node(&url, "ip-10-0-0-1").await.unwrap();
    assert_eq!(node.node, "ip-10-0-0-1");
    assert_eq!(
        node.verdicts,
        [karpenter_actors::disruption::NodeVerdict::NotSeen]
    );
    let text = karpenter_actors::disruption::explain::render(&node);
    assert!(
        text.contains("not seen by the last disruption round"),
        "{text}"
    );
    let bad = explain_node_answer(&daemon, &format!("{EXPLAIN_NODE_ROUTE_PREFIX}a/b"))
        .await
        .unwrap();
    assert_eq!(bad.status, 400);
    root.stop().await;
}

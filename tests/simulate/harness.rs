//! The harness without actors: a kwok instance becomes a Node (with the unregistered taint
//! that only Karpenter removes), the Node turns Ready and takes a pending pod once the taint is
//! gone, and everything goes away with the instance.

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter::sim::world::Launch;
use karpenter_actors::ports::cluster::ClusterApi as _;
use karpenter_actors::ports::ec2::Tags;
use karpenter_core::apis::{SlimPod, labels};
use karpenter_core::domain::instance_type::CapacityType;
use kube::Api;
use kube::api::PostParams;

use super::support::{Cluster, ready_condition, taint_keys};

fn pod(name: &str, cpu: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]}
    }))
    .unwrap()
}

fn ready(node: &Node) -> Option<String> {
    ready_condition(node).map(|c| c.status.clone())
}

#[tokio::test(start_paused = true)]
async fn a_kwok_instance_registers_a_ready_node_that_takes_a_pending_pod_once_registered() {
    let mut cluster = Cluster::start().await;
    let instance = cluster
        .world
        .launch(&Launch {
            launch_template: "outside",
            instance_type: "m5.large",
            zone: "us-west-2a",
            capacity_type: CapacityType::OnDemand,
            tags: Tags::from([(labels::TAG_NODEPOOL.to_owned(), "default".to_owned())]),
        })
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    pods.create(&PostParams::default(), &pod("web-0", "500m"))
        .await
        .unwrap();

    // 15 s pending in EC2, then 20 s until the kubelet registers.
    cluster.run_for(30).await;
    assert!(cluster.kubelet.node_of(&instance.id).is_none());
    let marked = pods.get("web-0").await.unwrap();
    assert!(
        karpenter::sim::binder::is_marked_unschedulable(&SlimPod::from(&marked)),
        "with no node the scheduler marks the pod unschedulable"
    );
    cluster.run_for(10).await;
    let node_name = cluster.kubelet.node_of(&instance.id).unwrap().to_owned();
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let node = nodes.get(&node_name).await.unwrap();
    assert_eq!(
        node.spec.as_ref().and_then(|s| s.provider_id.clone()),
        Some(format!("aws:///us-west-2a/{}", instance.id))
    );
    assert!(taint_keys(&node).contains(&labels::UNREGISTERED_TAINT.to_owned()));
    let allocatable = node.status.clone().unwrap().allocatable.unwrap();
    assert!(allocatable.contains_key("cpu") && allocatable.contains_key("pods"));

    // Ready after 5 s, the not-ready taint gone; the unregistered taint still keeps pods off.
    cluster.run_for(10).await;
    let node = nodes.get(&node_name).await.unwrap();
    assert_eq!(ready(&node).as_deref(), Some("True"));
    assert!(!taint_keys(&node).contains(&labels::NOT_READY_TAINT.to_owned()));
    assert!(
        pods.get("web-0")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .is_none()
    );

    // Karpenter's registration drops the unregistered taint; the scheduler binds, the kubelet
    // starts the pod.
    let cluster_api = karpenter::kube::cluster_api::KubeClusterApi::new(
        cluster.client.clone(),
        kube::runtime::events::Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    cluster_api
        .taint_node(&node_name, &[], &[labels::UNREGISTERED_TAINT.to_owned()])
        .await
        .unwrap();
    cluster.run_for(3).await;
    let bound = pods.get("web-0").await.unwrap();
    assert_eq!(
        bound.spec.unwrap().node_name.as_deref(),
        Some(node_name.as_str())
    );
    assert_eq!(bound.status.unwrap().phase.as_deref(), Some("Running"));

    // EC2 takes the instance away: the Node goes, and with it the pod.
    assert!(cluster.world.ec2.reclaim(&instance.id));
    cluster.run_for(2).await;
    assert!(nodes.get_opt(&node_name).await.unwrap().is_none());
    assert!(pods.get_opt("web-0").await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn the_scheduler_never_overcommits_a_node_and_honours_taints() {
    let mut cluster = Cluster::start().await;
    let instance = cluster
        .world
        .launch(&Launch {
            launch_template: "outside",
            instance_type: "m5.large",
            zone: "us-west-2b",
            capacity_type: CapacityType::OnDemand,
            tags: Tags::new(),
        })
        .await
        .unwrap();
    cluster.run_for(45).await;
    let node_name = cluster.kubelet.node_of(&instance.id).unwrap().to_owned();
    let cluster_api = karpenter::kube::cluster_api::KubeClusterApi::new(
        cluster.client.clone(),
        kube::runtime::events::Reporter {
            controller: "test".into(),
            instance: None,
        },
    );
    cluster_api
        .taint_node(&node_name, &[], &[labels::UNREGISTERED_TAINT.to_owned()])
        .await
        .unwrap();
    // An m5.large has under 2 CPUs allocatable: three 600m pods fit, the fourth does not.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");
    for i in 0..4 {
        pods.create(&PostParams::default(), &pod(&format!("web-{i}"), "600m"))
            .await
            .unwrap();
    }
    cluster.run_for(3).await;
    let list = pods.list(&kube::api::ListParams::default()).await.unwrap();
    let bound = list
        .items
        .iter()
        .filter(|p| p.spec.as_ref().unwrap().node_name.is_some())
        .count();
    assert_eq!(bound, 3);
    let pending: Vec<_> = list
        .items
        .iter()
        .filter(|p| p.spec.as_ref().unwrap().node_name.is_none())
        .collect();
    assert_eq!(pending.len(), 1);
    assert!(karpenter::sim::binder::is_marked_unschedulable(
        &SlimPod::from(pending[0])
    ));
}

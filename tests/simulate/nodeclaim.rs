//! Ports of kubernetes-sigs' standalone NodeClaim tests (`test/suites/regression/nodeclaim_test.go`)
//! and the AWS provider's nodeclaim suite (`aws: test/suites/nodeclaim/suite_test.go`) over the
//! simulation: a NodeClaim created by hand (no NodePool asks for it) becomes an initialized,
//! Ready node fitting its requests; deleting its Node takes the NodeClaim and the instance with
//! it; an instance terminated behind Karpenter's back takes its NodeClaim and Node away.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter::sim::scenario::Simulation;
use karpenter_core::apis::NodeClaim;
use karpenter_core::domain::resources::parse_resource;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use super::support::{
    PoolScenario, condition_is_true, in_simulation, label_of, live_instances, node_state,
    nodeclaims, nodes, registered,
};

/// Upstream's `EventuallyExpectNotFound` and `EventuallyExpectInitializedNodeCount` waits, well
/// within their default timeouts: launch, registration and readiness take under a minute.
const WITHIN: Duration = Duration::from_secs(90);

/// A cluster whose only NodePool has no pods to provision for.
async fn empty_cluster() -> Simulation<'static> {
    let scenario = PoolScenario {
        requirements: &[r#"{key: kubernetes.io/arch, operator: In, values: ["amd64"]}"#],
        workloads: "  []\n",
        ..PoolScenario::default()
    };
    Simulation::start(scenario.load(), None).await.unwrap()
}

/// Creates upstream's standalone NodeClaim (on-demand c instances, the class `default`) with
/// `requests`, and steps until its node is initialized; the NodeClaim and the Node.
async fn standalone(sim: &mut Simulation<'_>, requests: serde_json::Value) -> (NodeClaim, Node) {
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "standalone"},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            ],
            "resources": {"requests": requests},
        },
    }))
    .unwrap();
    Api::<NodeClaim>::all(sim.client())
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    assert!(sim.advance(WITHIN).await);
    let claims = nodeclaims(sim).await;
    assert_eq!(claims.len(), 1, "no NodePool launched anything");
    let claim = claims.into_iter().next().unwrap();
    assert!(condition_is_true(&claim, "Ready"), "{:?}", claim.status);
    let nodes = nodes(sim).await;
    assert_eq!(nodes.len(), 1);
    let node = nodes.into_iter().next().unwrap();
    assert_eq!(label_of(&node, "karpenter.sh/initialized"), Some("true"));
    (claim, node)
}

/// `StandaloneNodeClaim / It("should create a standard NodeClaim")` and `It("should create a
/// standard NodeClaim based on resource requests")` (3 CPUs, 11Gi): an initialized on-demand
/// node whose allocatable fits the requests, and a Ready NodeClaim.
#[test]
fn a_standalone_nodeclaim_becomes_a_ready_node_that_fits_its_requests() {
    in_simulation(|| async {
        let mut sim = empty_cluster().await;
        let (_, node) = standalone(&mut sim, json!({"cpu": "3", "memory": "11Gi"})).await;
        assert_eq!(
            label_of(&node, "karpenter.sh/capacity-type"),
            Some("on-demand")
        );
        let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
        for (resource, wanted) in [("cpu", "3"), ("memory", "11Gi")] {
            let has = allocatable.get(resource).map_or("0", |q| q.0.as_str());
            assert!(
                parse_resource(resource, has).unwrap() >= parse_resource(resource, wanted).unwrap(),
                "{resource}: {has} allocatable, {wanted} requested"
            );
        }
        sim.finish().await;
    });
}

/// `StandaloneNodeClaim / It("should delete a NodeClaim from the node termination
/// finalizer")`: deleting the Node deletes the NodeClaim and terminates the instance.
#[test]
fn deleting_a_standalone_nodeclaims_node_deletes_the_nodeclaim_and_its_instance() {
    in_simulation(|| async {
        let mut sim = empty_cluster().await;
        let (claim, node) = standalone(&mut sim, json!({})).await;
        let name = node.metadata.name.clone().unwrap();
        let (_, _, instance) = registered(&sim).await;
        Api::<Node>::all(sim.client())
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
        assert!(sim.advance(WITHIN).await);
        assert_eq!(node_state(&sim, &name).await, None, "the Node is gone");
        assert!(
            nodeclaims(&sim).await.is_empty(),
            "{:?} is gone",
            claim.metadata.name
        );
        assert!(
            !live_instances(&sim).contains(&instance),
            "{instance} terminated"
        );
        sim.finish().await;
    });
}

/// `aws: Garbage Collection / It("should succeed to garbage collect an Instance that was
/// deleted without the cluster's knowledge")`: EC2 terminates the instance behind Karpenter's
/// back; its NodeClaim and Node go.
#[test]
fn an_instance_terminated_behind_karpenters_back_takes_its_nodeclaim_and_node_away() {
    in_simulation(|| async {
        let mut sim = empty_cluster().await;
        let (_, node) = standalone(&mut sim, json!({})).await;
        let name = node.metadata.name.clone().unwrap();
        let (_, _, instance) = registered(&sim).await;
        assert!(sim.world().ec2.reclaim(&instance));
        assert!(sim.advance(WITHIN).await);
        assert!(
            nodeclaims(&sim).await.is_empty(),
            "the NodeClaim is collected"
        );
        assert_eq!(node_state(&sim, &name).await, None, "the Node is gone");
        sim.finish().await;
    });
}

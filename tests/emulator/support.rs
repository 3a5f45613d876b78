//! Builders for the objects the emulator tests create.

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter::emulator::{Emulator, EmulatorConfig, LoopbackServer};
use karpenter_core::apis::{NodeClaim, NodePool};
use kube::api::PostParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use serde_json::{Value, json};

/// A fresh emulator and an in-process client for it.
pub fn cluster() -> (Emulator, Client) {
    cluster_with(EmulatorConfig::default())
}

/// A kube-rs client for a served emulator, from its kubeconfig.
pub async fn client_for(kubeconfig: &str) -> Client {
    let parsed = Kubeconfig::from_yaml(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// An emulator served on loopback, and a kube-rs client reaching it through its kubeconfig.
pub async fn served() -> (Emulator, LoopbackServer, Client) {
    let emulator = Emulator::new().unwrap();
    let server = emulator
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = client_for(&server.kubeconfig()).await;
    (emulator, server, client)
}

pub fn cluster_with(config: EmulatorConfig) -> (Emulator, Client) {
    let emulator = Emulator::with_config(config).unwrap();
    let client = emulator.client();
    (emulator, client)
}

pub fn pod(name: &str, labels: Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "app", "image": "nginx" }] },
    });
    pod["metadata"]["labels"] = labels;
    serde_json::from_value(pod).unwrap()
}

pub fn node(name: &str, labels: Value) -> Node {
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name },
        "spec": { "providerID": format!("aws:///us-west-2a/i-{name}") },
    });
    node["metadata"]["labels"] = labels;
    serde_json::from_value(node).unwrap()
}

pub fn nodepool(name: &str) -> NodePool {
    serde_json::from_value(nodepool_json(name)).unwrap()
}

pub fn nodepool_json(name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": name },
        "spec": { "template": { "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [{ "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"] }],
        } } },
    })
}

pub fn nodeclaim(name: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": { "name": name, "labels": { "karpenter.sh/nodepool": "default" } },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [{ "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"] }],
        },
    }))
    .unwrap()
}

pub async fn create_pod(client: &Client, name: &str, labels: Value) -> Pod {
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod(name, labels))
        .await
        .unwrap()
}

pub async fn create_node(client: &Client, name: &str, labels: Value) -> Node {
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node(name, labels))
        .await
        .unwrap()
}

/// The API error status of a failed call.
pub fn status_of<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

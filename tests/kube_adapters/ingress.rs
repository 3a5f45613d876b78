//! The ingress: store and subscribers converge after watch errors, restarts and compaction.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter::emulator::{Emulator, FaultRule, Verb};
use karpenter::kube::ingress::{ClusterIngress, Observed};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tokio::sync::mpsc;

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "containers": [{ "name": "c", "image": "x" }] },
    }))
    .unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({ "metadata": { "name": name }, "spec": { "providerID": format!("aws:///zone/i-{name}") } })).unwrap()
}

/// Receives until `done` accepts the accumulated names (event-driven; the timeout only guards
/// against a hang).
async fn until<K: kube::Resource>(
    receiver: &mut mpsc::Receiver<Observed<K>>,
    names: &mut BTreeSet<String>,
    done: impl Fn(&BTreeSet<String>) -> bool,
) {
    let receive = async {
        while !done(names) {
            match receiver.recv().await.expect("the ingress stopped") {
                Observed::Applied(object) => {
                    names.insert(object.meta().name.clone().unwrap());
                }
                Observed::Deleted(object) => {
                    names.remove(object.meta().name.as_deref().unwrap());
                }
                Observed::Relisted => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_mins(10), receive)
        .await
        .expect("never converged");
}

#[tokio::test(start_paused = true)]
async fn the_store_and_subscribers_converge_after_watch_errors_and_restarts() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["a", "b"] {
        pods.create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();

    let mut ingress = ClusterIngress::new(client.clone());
    let state = ingress.state();
    let counters = ingress.counters();
    let mut pod_changes = ingress.channel::<Pod>(1024);
    let mut node_changes = ingress.channel::<Node>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    let mut pod_names = BTreeSet::new();
    until(&mut pod_changes, &mut pod_names, |n| n.len() == 2).await;

    // An outage: every new watch fails three times, open watches end, the history is
    // compacted, and the cluster changes meanwhile.
    emulator.faults().inject(
        FaultRule::fail(500)
            .on(Verb::Watch)
            .resource("pods")
            .times(3),
    );
    emulator.close_watches();
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    pods.create(&PostParams::default(), &pod("c"))
        .await
        .unwrap();
    nodes
        .create(&PostParams::default(), &node("n2"))
        .await
        .unwrap();
    emulator.compact();
    pods.create(&PostParams::default(), &pod("d"))
        .await
        .unwrap();

    until(&mut pod_changes, &mut pod_names, |n| {
        n.iter().eq(["b", "c", "d"].iter())
    })
    .await;
    let mut node_names = BTreeSet::new();
    until(&mut node_changes, &mut node_names, |n| n.len() == 2).await;

    let stored: BTreeSet<String> = state.pods.state().iter().map(|p| p.name_any()).collect();
    let served: BTreeSet<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(kube::ResourceExt::name_any)
        .collect();
    assert_eq!(stored, served);
    assert!(state.node_by_provider_id("aws:///zone/i-n2").is_some());
    assert!(
        counters
            .pods
            .errors
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 3
    );
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_full_subscriber_loses_changes_but_the_store_does_not() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let counters = ingress.counters();
    // Holds the initial `Relisted` and is never read: full from the start.
    let _slow = ingress.channel::<Pod>(1);
    let mut fast = ingress.channel::<Pod>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    for i in 0..5 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    let mut names = BTreeSet::new();
    until(&mut fast, &mut names, |n| n.len() == 5).await;
    assert_eq!(state.pods.len(), 5);
    assert_eq!(
        counters
            .pods
            .dropped
            .load(std::sync::atomic::Ordering::Relaxed),
        5
    );
    task.abort();
}

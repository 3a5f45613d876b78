//! The ingress: store and subscribers converge after watch errors, restarts and compaction, the
//! store's indexes (by provider id, by node) follow changes, deletes and re-lists, a watch that
//! panics is restarted with a fresh list, and one that keeps failing fails its check by name.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use karpenter::daemon::ChangeFeed;
use karpenter::emulator::{Emulator, FaultRule, Verb};
use karpenter::kube::ingress::{ClusterIngress, Observed, WATCH_FAILING_LIMIT};
use karpenter_actors::cluster_index::Indexed;
use karpenter_actors::messages::ClusterChange;
use karpenter_actors::ports::cluster_view::ClusterView as _;
use karpenter_core::apis::{NodeClaim, SlimNode, SlimNodeClaim, SlimPod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
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
async fn until<K: Indexed>(
    receiver: &mut mpsc::Receiver<Observed<K>>,
    names: &mut BTreeSet<String>,
    done: impl Fn(&BTreeSet<String>) -> bool,
) {
    let receive = async {
        while !done(names) {
            match receiver.recv().await.expect("the ingress stopped") {
                Observed::Applied { object, .. } => {
                    names.insert(object.names().1.to_owned());
                }
                Observed::Deleted(object) => {
                    names.remove(object.names().1);
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
    let mut pod_changes = ingress.channel::<SlimPod>(1024);
    let mut node_changes = ingress.channel::<SlimNode>(1024);
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
    let _slow = ingress.channel::<SlimPod>(1);
    let mut fast = ingress.channel::<SlimPod>(1024);
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

/// Receives `K` changes until `holds` (a look at the store and its index) is true; a
/// subscriber hears of a change only after both hold it, so each change is a moment to look.
async fn until_state<K>(receiver: &mut mpsc::Receiver<Observed<K>>, holds: impl Fn() -> bool) {
    let receive = async {
        while !holds() {
            receiver.recv().await.expect("the ingress stopped");
        }
    };
    tokio::time::timeout(Duration::from_mins(10), receive)
        .await
        .expect("never converged");
}

/// A NodeClaim of the `default` NodePool.
fn nodeclaim(name: &str) -> NodeClaim {
    let mut claim = crate::cluster_api::nodeclaim(name, &[]);
    claim.metadata.labels = Some(std::collections::BTreeMap::from([(
        "karpenter.sh/nodepool".to_owned(),
        "default".to_owned(),
    )]));
    claim
}

fn name_of<K: Indexed>(object: Option<std::sync::Arc<K>>) -> Option<String> {
    object.map(|o| o.names().1.to_owned())
}

#[tokio::test(start_paused = true)]
async fn the_nodeclaim_index_follows_a_provider_id_that_appears_and_then_changes() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let mut changes = ingress.channel::<SlimNodeClaim>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    claims
        .create(&PostParams::default(), &nodeclaim("c1"))
        .await
        .unwrap();
    until_state(&mut changes, || state.nodeclaim("c1").is_some()).await;
    assert_eq!(state.nodeclaims_of_nodepool("default").len(), 1);

    let provider_id = |id: &str| json!({ "status": { "providerID": id } });
    claims
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(provider_id("aws:///zone/i-1")),
        )
        .await
        .unwrap();
    until_state(&mut changes, || {
        state.nodeclaim_by_provider_id("aws:///zone/i-1").is_some()
    })
    .await;
    claims
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(provider_id("aws:///zone/i-2")),
        )
        .await
        .unwrap();
    until_state(&mut changes, || {
        state.nodeclaim_by_provider_id("aws:///zone/i-2").is_some()
    })
    .await;
    assert!(state.nodeclaim_by_provider_id("aws:///zone/i-1").is_none());
    assert_eq!(
        name_of(state.nodeclaim_by_provider_id("aws:///zone/i-2")).as_deref(),
        Some("c1")
    );
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_deleted_node_leaves_the_provider_id_index() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let mut changes = ingress.channel::<SlimNode>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    until_state(&mut changes, || {
        state.node_by_provider_id("aws:///zone/i-n1").is_some()
    })
    .await;
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    until_state(&mut changes, || state.node("n1").is_none()).await;
    assert!(state.node_by_provider_id("aws:///zone/i-n1").is_none());
    assert!(state.nodes_by_provider_id("aws:///zone/i-n1").is_empty());
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_relist_after_the_history_is_compacted_rebuilds_the_index() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let counters = ingress.counters();
    let mut changes = ingress.channel::<SlimNode>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    assert!(state.node_by_provider_id("aws:///zone/i-n1").is_some());

    // The watch is down while n1 goes and n2 comes, and the history it would resume from is
    // compacted: it must re-list (410 Gone), and the index must be rebuilt from that list.
    emulator.faults().inject(
        FaultRule::fail(500)
            .on(Verb::Watch)
            .resource("nodes")
            .times(3),
    );
    emulator.close_watches();
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    nodes
        .create(&PostParams::default(), &node("n2"))
        .await
        .unwrap();
    emulator.compact();
    until_state(&mut changes, || {
        counters.nodes.relists.load(Ordering::Relaxed) >= 2 && state.node("n1").is_none()
    })
    .await;
    assert!(state.node_by_provider_id("aws:///zone/i-n1").is_none());
    assert_eq!(
        name_of(state.node_by_provider_id("aws:///zone/i-n2")).as_deref(),
        Some("n2")
    );
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_binds_is_found_on_its_node() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let mut changes = ingress.channel::<SlimPod>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    pods.create(&PostParams::default(), &pod("web"))
        .await
        .unwrap();
    until_state(&mut changes, || state.pod("default", "web").is_some()).await;
    assert!(state.pods_on_node("n1").is_empty());

    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": { "name": "web", "namespace": "default" },
        "target": { "apiVersion": "v1", "kind": "Node", "name": "n1" },
    });
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        "web",
        &PostParams::default(),
        &binding,
    )
    .await
    .unwrap();
    until_state(&mut changes, || !state.pods_on_node("n1").is_empty()).await;
    assert_eq!(
        name_of(state.pods_on_node("n1").into_iter().next()).as_deref(),
        Some("web")
    );
    pods.delete("web", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    until_state(&mut changes, || state.pod("default", "web").is_none()).await;
    assert!(state.pods_on_node("n1").is_empty());
    task.abort();
}

/// Namespaces are watched (pod affinity `namespaceSelector`s read their labels): one created
/// through the API is in the state with its labels, and a relabel follows.
#[tokio::test(start_paused = true)]
async fn namespaces_and_their_labels_are_watched() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let mut changes = ingress.channel::<Namespace>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    let team = |name: &str| {
        state
            .namespaces()
            .into_iter()
            .find(|ns| ns.metadata.name.as_deref() == Some("team-a"))
            .is_some_and(|ns| ns.labels().get("team").map(String::as_str) == Some(name))
    };
    let created: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "labels": {"team": "a"}},
    }))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &created)
        .await
        .unwrap();
    until_state(&mut changes, || team("a")).await;
    namespaces
        .patch(
            "team-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "b"}}})),
        )
        .await
        .unwrap();
    until_state(&mut changes, || team("b")).await;
    task.abort();
}

/// The next change of pod `name` the feed routes.
async fn next_pod_change(feed: &mut ChangeFeed, name: &str) -> ClusterChange {
    let receive = async {
        loop {
            let change = feed.next().await.expect("the ingress stopped");
            if matches!(&change, ClusterChange::Pod { name: n, .. } if n == name) {
                return change;
            }
        }
    };
    tokio::time::timeout(Duration::from_mins(10), receive)
        .await
        .expect("no change of the pod")
}

fn pod_event_of(change: &ClusterChange) -> bool {
    match change {
        ClusterChange::Pod { pod_event, .. } => *pod_event,
        other => panic!("not a pod change: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn the_routing_marks_a_bind_as_a_pod_event_and_a_label_change_as_not() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let mut feed = ChangeFeed::subscribe(&mut ingress);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();

    pods.create(&PostParams::default(), &pod("web"))
        .await
        .unwrap();
    let created = next_pod_change(&mut feed, "web").await;
    assert!(!pod_event_of(&created), "created unbound: {created:?}");

    let binding = json!({ "apiVersion": "v1", "kind": "Binding", "metadata": { "name": "web" }, "target": { "kind": "Node", "name": "n1" } });
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        "web",
        &PostParams::default(),
        &binding,
    )
    .await
    .unwrap();
    let bound = next_pod_change(&mut feed, "web").await;
    assert!(
        matches!(&bound, ClusterChange::Pod { node_name: Some(n), pod_event: true, .. } if n == "n1"),
        "the ingress compared the bind with the stored unbound pod: {bound:?}"
    );

    pods.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": { "tier": "web" } } })),
    )
    .await
    .unwrap();
    let relabelled = next_pod_change(&mut feed, "web").await;
    assert!(
        matches!(&relabelled, ClusterChange::Pod { node_name: Some(n), pod_event: false, .. } if n == "n1"),
        "a label on a bound pod moves nothing: {relabelled:?}"
    );

    pods.delete("web", &DeleteParams::default()).await.unwrap();
    let deleted = next_pod_change(&mut feed, "web").await;
    assert!(
        matches!(
            &deleted,
            ClusterChange::Pod {
                deleted: true,
                pod_event: true,
                ..
            }
        ),
        "deleted while bound: {deleted:?}"
    );
    task.abort();
}

/// A subscriber with a bug: it panics on the first change of a pod named `poison`.
struct PanicsOnPoison {
    panicked: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl karpenter::kube::ingress::ChangeSink<SlimPod> for PanicsOnPoison {
    fn deliver(&self, change: Observed<SlimPod>) -> karpenter::kube::ingress::Delivery {
        if let Observed::Applied { object, .. } = &change
            && object.metadata.name.as_deref() == Some("poison")
            && !self
                .panicked
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            panic!("a subscriber's bug");
        }
        karpenter::kube::ingress::Delivery::Delivered
    }
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_panics_is_restarted_with_a_fresh_list_and_the_other_kinds_go_on() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client.clone());
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let counters = ingress.counters();
    let health = ingress.health();
    ingress.subscribe::<SlimPod>(PanicsOnPoison {
        panicked: std::sync::Arc::default(),
    });
    let mut pod_changes = ingress.channel::<SlimPod>(1024);
    let mut node_changes = ingress.channel::<SlimNode>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    pods.create(&PostParams::default(), &pod("poison"))
        .await
        .unwrap();
    // The pods' watch dies on the event and comes back with a list that holds the pod.
    let mut names = BTreeSet::new();
    until(&mut pod_changes, &mut names, |n| n.contains("poison")).await;
    assert!(state.pod("default", "poison").is_some());
    assert_eq!(
        counters
            .pods
            .restarts
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(health.check("pods").is_ok(), "one restart is not a failure");
    // The nodes' watch never stopped.
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let mut node_names = BTreeSet::new();
    until(&mut node_changes, &mut node_names, |n| n.contains("n1")).await;
    assert_eq!(
        counters
            .nodes
            .restarts
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_watch_that_keeps_failing_fails_its_check_by_name_and_recovers() {
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let health = ingress.health();
    let mut node_changes = ingress.channel::<SlimNode>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    // The API server refuses every watch and list of nodes from now on.
    emulator
        .faults()
        .inject(FaultRule::fail(500).on(Verb::Watch).resource("nodes"));
    emulator
        .faults()
        .inject(FaultRule::fail(500).on(Verb::List).resource("nodes"));
    emulator.close_watches();
    tokio::time::sleep(
        WATCH_FAILING_LIMIT
            .checked_sub(Duration::from_secs(30))
            .unwrap(),
    )
    .await;
    assert!(health.check("nodes").is_ok(), "not failing for long yet");
    tokio::time::sleep(Duration::from_mins(1)).await;
    let failed = health.check("nodes").unwrap_err();
    assert!(failed.contains("failing for"), "{failed}");
    assert!(health.check("pods").is_ok(), "the other kinds reconnected");
    // The API server answers again: the watch reconnects and the check passes.
    emulator.faults().clear();
    nodes
        .create(&PostParams::default(), &node("n1"))
        .await
        .unwrap();
    let mut names = BTreeSet::new();
    until(&mut node_changes, &mut names, |n| n.contains("n1")).await;
    assert!(health.check("nodes").is_ok());
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn the_rate_limit_counts_a_watch_once_when_it_opens_not_per_event() {
    use karpenter::kube::client::{ClientOptions, layered_client};
    use karpenter::kube::leader::LeadershipGate;
    let emulator = Emulator::new().unwrap();
    let (client, rate_limit) = layered_client(
        emulator.service(),
        &ClientOptions {
            qps: 5,
            burst: 10,
            gate: LeadershipGate::always_open(),
        },
    );
    let mut ingress = ClusterIngress::new(client);
    let state = ingress.state();
    let mut changes = ingress.channel::<SlimPod>(1024);
    let task = tokio::spawn(ingress.run());
    state.wait_until_ready().await.unwrap();
    let mut names = BTreeSet::new();
    // Let every kind open its watch after its list.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let opened = rate_limit.admitted();
    // A list and a watch per kind (seven kinds).
    assert!((14..=21).contains(&opened), "{opened} requests to start");
    let pods: Api<Pod> = Api::namespaced(emulator.client(), "default");
    for i in 0..100 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    until(&mut changes, &mut names, |n| n.len() == 100).await;
    assert_eq!(
        rate_limit.admitted(),
        opened,
        "100 events arrived on the open watch without passing the limit"
    );
    task.abort();
}

/// Waits (paused time, a minute at most) until `done` holds.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_mins(1), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never: {what}"));
}

/// A NodePool as a newer CRD version might store it: `requirements` is not a list.
fn future_nodepool(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": name },
        "spec": { "template": { "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": { "matchAll": true },
        }}},
    })
}

fn nodepool(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": { "name": name },
        "spec": { "template": { "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [],
        }}},
    })
}

#[tokio::test(start_paused = true)]
async fn a_nodepool_the_types_cannot_decode_is_skipped_with_an_event_and_the_cache_syncs() {
    use karpenter_core::apis::NodePool;
    let emulator = Emulator::new().unwrap();
    let client = emulator.client();
    let raw: Api<kube::api::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::erase::<NodePool>(&()),
    );
    emulator.set_schema_admission(false);
    for object in [nodepool("default"), future_nodepool("future")] {
        raw.create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
    }

    let ingress = ClusterIngress::new(client.clone());
    let state = ingress.state();
    let counters = ingress.counters();
    let task = tokio::spawn(ingress.run());
    tokio::time::timeout(Duration::from_mins(1), state.wait_until_ready())
        .await
        .expect("one bad NodePool does not keep the store from syncing")
        .unwrap();
    assert!(state.nodepool("default").is_some());
    assert!(state.nodepool("future").is_none());
    assert_eq!(counters.nodepools.undecodable.load(Ordering::Relaxed), 1);
    assert_eq!(counters.nodepools.errors.load(Ordering::Relaxed), 0);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let recorded = events.list(&ListParams::default()).await.unwrap().items;
    let failed: Vec<_> = recorded
        .iter()
        .filter(|e| e.reason.as_deref() == Some("FailedDecoding"))
        .collect();
    assert_eq!(failed.len(), 1, "{recorded:?}");
    assert_eq!(failed[0].involved_object.name.as_deref(), Some("future"));
    assert_eq!(failed[0].involved_object.kind.as_deref(), Some("NodePool"));

    // Fixed, it is read; broken again, the daemon forgets the old version it had.
    raw.replace(
        "future",
        &PostParams::default(),
        &serde_json::from_value({
            let mut fixed = nodepool("future");
            fixed["metadata"]["resourceVersion"] =
                json!(raw.get("future").await.unwrap().resource_version().unwrap());
            fixed
        })
        .unwrap(),
    )
    .await
    .unwrap();
    eventually("the fixed NodePool is read", || {
        state.nodepool("future").is_some()
    })
    .await;
    raw.patch(
        "default",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "template": { "spec": { "requirements": "broken" } } } })),
    )
    .await
    .unwrap();
    eventually("a NodePool that turned unreadable leaves the store", || {
        state.nodepool("default").is_none()
    })
    .await;
    assert_eq!(counters.nodepools.undecodable.load(Ordering::Relaxed), 2);
    task.abort();
}

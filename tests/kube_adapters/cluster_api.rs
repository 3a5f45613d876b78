//! The `ClusterApi` adapter over kube-rs, against the emulator.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter::emulator::{Emulator, FaultRule, Verb};
use karpenter::kube::cluster_api::{KubeClusterApi, WRITES_IN_FLIGHT};
use karpenter_actors::ports::cluster::{
    ClusterApi, ClusterError, ClusterEvent, Deletion, EventType, Eviction, ObjectKind,
};
use karpenter_core::apis::conditions::{Condition, ConditionStatus};
use karpenter_core::apis::{NodeClaim, SlimNodeClaim};
use kube::api::{ListParams, Patch, PostParams};
use kube::runtime::events::Reporter;
use kube::{Api, Client, Resource as _, ResourceExt as _};
use serde_json::json;

fn adapter(emulator: &Emulator) -> (KubeClusterApi, Client) {
    let client = emulator.client();
    let reporter = Reporter {
        controller: "karpenter".into(),
        instance: Some("karpenter-0".into()),
    };
    (KubeClusterApi::new(client.clone(), reporter), client)
}

pub(crate) fn nodeclaim(name: &str, finalizers: &[&str]) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": { "name": name, "finalizers": finalizers },
        "spec": {
            "nodeClassRef": { "group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default" },
            "requirements": [{ "key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"] }],
        },
    }))
    .unwrap()
}

fn launched() -> Condition {
    serde_json::from_value(json!({
        "type": "Launched", "status": "True", "reason": "Launched", "message": "",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_status_update_retries_through_conflicts() {
    let emulator = Emulator::new().unwrap();
    let (api, _client) = adapter(&emulator);
    api.create_nodeclaim(&nodeclaim("c1", &[])).await.unwrap();
    emulator.faults().inject(
        FaultRule::fail(409)
            .on(Verb::Patch)
            .resource("nodeclaims")
            .subresource("status")
            .times(2),
    );
    emulator.clear_requests();
    let set = |status: &mut karpenter_core::apis::NodeClaimStatus| {
        status.provider_id = Some("aws:///us-west-2a/i-1".into());
        status.conditions = vec![launched()];
    };
    let updated = api.update_nodeclaim_status("c1", &set).await.unwrap();
    let status = updated.status.unwrap();
    assert_eq!(status.provider_id.as_deref(), Some("aws:///us-west-2a/i-1"));
    assert_eq!(status.conditions[0].status, ConditionStatus::True);
    let patches = emulator
        .requests()
        .iter()
        .filter(|r| r.verb == Verb::Patch)
        .count();
    assert_eq!(patches, 3, "two conflicts, then the write");
}

#[tokio::test(start_paused = true)]
async fn updates_beyond_the_in_flight_limit_wait_for_a_slot() {
    let emulator = Emulator::new().unwrap();
    let (api, _client) = adapter(&emulator);
    let count = WRITES_IN_FLIGHT * 2;
    for i in 0..count {
        api.create_nodeclaim(&nodeclaim(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    // Every read takes a second (on tokio's paused clock).
    emulator.faults().inject(
        FaultRule::delay(Duration::from_secs(1))
            .on(Verb::Get)
            .resource("nodeclaims"),
    );
    let started = tokio::time::Instant::now();
    let set =
        |status: &mut karpenter_core::apis::NodeClaimStatus| status.node_name = Some("n1".into());
    let writes = (0..count).map(|i| {
        let api = api.clone();
        async move {
            api.update_nodeclaim_status(&format!("c{i}"), &set)
                .await
                .unwrap();
        }
    });
    futures::future::join_all(writes).await;
    // Unbounded, all reads would overlap in one second; the limit makes two waves of them.
    assert_eq!(started.elapsed().as_secs(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_status_update_gives_up_after_the_retry_budget() {
    let emulator = Emulator::new().unwrap();
    let (api, _client) = adapter(&emulator);
    api.create_nodeclaim(&nodeclaim("c1", &[])).await.unwrap();
    emulator
        .faults()
        .inject(FaultRule::fail(409).on(Verb::Patch).resource("nodeclaims"));
    let set =
        |status: &mut karpenter_core::apis::NodeClaimStatus| status.node_name = Some("n1".into());
    let error = api.update_nodeclaim_status("c1", &set).await.unwrap_err();
    assert_eq!(
        error,
        ClusterError::Conflict {
            kind: ObjectKind::NodeClaim,
            name: "c1".into(),
            attempts: 5
        }
    );
    assert_eq!(error.category(), "conflict");
}

#[tokio::test]
async fn a_real_conflict_is_detected_through_the_resource_version() {
    let emulator = Emulator::new().unwrap();
    let (api, client) = adapter(&emulator);
    api.create_nodeclaim(&nodeclaim("c1", &[])).await.unwrap();
    let claims: Api<NodeClaim> = Api::all(client);
    let stale = claims.get("c1").await.unwrap();
    // Someone else writes first; a patch carrying the stale version must fail.
    api.update_nodeclaim("c1", &|c: &mut NodeClaim| {
        c.labels_mut().insert("a".into(), "1".into());
    })
    .await
    .unwrap();
    let patch = json!({ "metadata": { "resourceVersion": stale.resource_version(), "labels": { "b": "2" } } });
    let result = claims
        .patch(
            "c1",
            &kube::api::PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await;
    assert!(matches!(result, Err(kube::Error::Api(s)) if s.code == 409));
    // The adapter always starts from a fresh read, so its own update goes through.
    let updated = api
        .update_nodeclaim("c1", &|c: &mut NodeClaim| {
            c.labels_mut().insert("b".into(), "2".into());
        })
        .await
        .unwrap();
    assert_eq!(updated.labels().len(), 2);
}

#[tokio::test]
async fn an_unchanged_object_is_not_written() {
    let emulator = Emulator::new().unwrap();
    let (api, _client) = adapter(&emulator);
    api.create_nodeclaim(&nodeclaim("c1", &[])).await.unwrap();
    emulator.clear_requests();
    api.update_nodeclaim("c1", &|_: &mut NodeClaim| {})
        .await
        .unwrap();
    assert!(emulator.requests().iter().all(|r| r.verb == Verb::Get));
}

/// The verbs and status codes of the requests since the last clear.
fn calls(emulator: &Emulator) -> Vec<(Verb, u16)> {
    emulator
        .requests()
        .iter()
        .map(|r| (r.verb, r.code))
        .collect()
}

#[tokio::test]
async fn an_update_from_a_current_copy_patches_without_reading() {
    let emulator = Emulator::new().unwrap();
    let (api, _client) = adapter(&emulator);
    let created = api.create_nodeclaim(&nodeclaim("c1", &[])).await.unwrap();
    // The copy the view keeps.
    let kept = SlimNodeClaim::from(&created);
    emulator.clear_requests();
    let set =
        |status: &mut karpenter_core::apis::NodeClaimStatus| status.node_name = Some("n1".into());
    let updated = api.update_nodeclaim_status_from(&kept, &set).await.unwrap();
    assert_eq!(updated.status.unwrap().node_name.as_deref(), Some("n1"));
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(calls(&emulator), [(Verb::Patch, 200)]);
    // A change the copy already shows sends nothing and answers the copy.
    emulator.clear_requests();
    let same = api
        .update_nodeclaim_from(&kept, &|_: &mut NodeClaim| {})
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&same).unwrap(),
        serde_json::to_value(&created).unwrap()
    );
    assert!(calls(&emulator).is_empty());
}

#[tokio::test]
async fn an_update_from_a_stale_copy_reads_and_applies_the_change_again() {
    let emulator = Emulator::new().unwrap();
    let (api, _client) = adapter(&emulator);
    let stale = api.create_nodeclaim(&nodeclaim("c1", &[])).await.unwrap();
    api.update_nodeclaim("c1", &|c: &mut NodeClaim| {
        c.labels_mut().insert("a".into(), "1".into());
    })
    .await
    .unwrap();
    emulator.clear_requests();
    let updated = api
        .update_nodeclaim_from(&SlimNodeClaim::from(stale), &|c: &mut NodeClaim| {
            c.labels_mut().insert("b".into(), "2".into());
        })
        .await
        .unwrap();
    assert_eq!(
        updated.labels().len(),
        2,
        "the other writer's label is kept"
    );
    assert_eq!(
        calls(&emulator),
        [(Verb::Patch, 409), (Verb::Get, 200), (Verb::Patch, 200)],
        "the stale copy's precondition fails once, then the fresh object is patched"
    );
}

#[tokio::test]
async fn an_invalid_nodeclaim_is_refused_with_its_field_paths() {
    let emulator = Emulator::new().unwrap();
    let (api, _client) = adapter(&emulator);
    let mut claim = nodeclaim("bad", &[]);
    claim.spec.node_class_ref.group = "a/b".into();
    let error = api.create_nodeclaim(&claim).await.unwrap_err();
    let ClusterError::Invalid { fields, .. } = &error else {
        panic!("{error:?}")
    };
    assert!(
        fields.iter().any(|f| f.field == "spec.nodeClassRef.group"),
        "{fields:?}"
    );
}

#[tokio::test]
async fn deleting_a_nodeclaim_with_a_finalizer_leaves_it_terminating() {
    let emulator = Emulator::new().unwrap();
    let (api, _client) = adapter(&emulator);
    api.create_nodeclaim(&nodeclaim("c1", &["karpenter.sh/termination"]))
        .await
        .unwrap();
    assert_eq!(
        api.delete_nodeclaim("c1").await.unwrap(),
        Deletion::Terminating
    );
    let drop_finalizer = |c: &mut NodeClaim| c.meta_mut().finalizers = None;
    api.update_nodeclaim("c1", &drop_finalizer).await.unwrap();
    assert_eq!(
        api.delete_nodeclaim("c1").await.unwrap(),
        Deletion::NotFound
    );
}

#[tokio::test]
async fn node_labels_taints_and_cordon_are_applied() {
    let emulator = Emulator::new().unwrap();
    let (api, client) = adapter(&emulator);
    let nodes: Api<Node> = Api::all(client);
    let node = serde_json::from_value(
        json!({ "metadata": { "name": "n1", "labels": { "old": "x" } }, "spec": {
        "taints": [{ "key": "karpenter.sh/unregistered", "effect": "NoExecute" }],
    } }),
    )
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let labels = BTreeMap::from([
        (
            "karpenter.sh/registered".to_owned(),
            Some("true".to_owned()),
        ),
        ("old".to_owned(), None),
    ]);
    api.label_node("n1", &labels).await.unwrap();
    let disrupted = Taint {
        key: "karpenter.sh/disrupted".into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    api.taint_node(
        "n1",
        std::slice::from_ref(&disrupted),
        &["karpenter.sh/unregistered".into()],
    )
    .await
    .unwrap();
    api.cordon_node("n1", true).await.unwrap();
    let stored = nodes.get("n1").await.unwrap();
    assert_eq!(
        stored.labels(),
        &BTreeMap::from([("karpenter.sh/registered".to_owned(), "true".to_owned())])
    );
    let spec = stored.spec.unwrap();
    assert_eq!(spec.taints.unwrap(), vec![disrupted]);
    assert_eq!(spec.unschedulable, Some(true));
    assert_eq!(api.delete_node("n1").await.unwrap(), Deletion::Deleted);
}

async fn ready_pod(client: &Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "app": "web" } },
        "spec": { "containers": [{ "name": "c", "image": "x" }] },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let ready = json!({ "status": { "phase": "Running", "conditions": [{ "type": "Ready", "status": "True" }] } });
    pods.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &Patch::Merge(&ready),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn evictions_report_budgets_and_missing_pods() {
    let emulator = Emulator::new().unwrap();
    let (api, client) = adapter(&emulator);
    ready_pod(&client, "web-1").await;
    ready_pod(&client, "web-2").await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb = serde_json::from_value(json!({ "metadata": { "name": "web" }, "spec": {
        "minAvailable": 1, "selector": { "matchLabels": { "app": "web" } },
    } }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    assert_eq!(
        api.evict_pod("default", "web-1").await.unwrap(),
        Eviction::Evicted
    );
    let Eviction::Blocked { message } = api.evict_pod("default", "web-2").await.unwrap() else {
        panic!("the budget allows one disruption only");
    };
    assert!(message.contains("disruption budget web"), "{message}");
    assert_eq!(
        api.evict_pod("default", "web-1").await.unwrap(),
        Eviction::Gone
    );
    assert_eq!(
        api.delete_pod("default", "web-2", Some(0)).await.unwrap(),
        Deletion::Deleted
    );
    assert_eq!(
        api.delete_pod("default", "web-2", None).await.unwrap(),
        Deletion::NotFound
    );
}

#[tokio::test]
async fn events_are_recorded_and_repeats_become_a_series() {
    let emulator = Emulator::new().unwrap();
    let (api, client) = adapter(&emulator);
    let claim = api.create_nodeclaim(&nodeclaim("c1", &[])).await.unwrap();
    let event = ClusterEvent {
        regarding: claim.object_ref(&()),
        related: None,
        type_: EventType::Warning,
        reason: "DisruptionBlocked".into(),
        action: "Disrupting".into(),
        note: Some("pdb web prevents pod evictions".into()),
    };
    api.publish_event(&event).await.unwrap();
    api.publish_event(&event).await.unwrap();
    let events: Api<CoreEvent> = Api::namespaced(client, "default");
    let found = events
        .list(&ListParams::default().fields("involvedObject.name=c1,reason=DisruptionBlocked"))
        .await
        .unwrap();
    assert_eq!(found.items.len(), 1);
    let recorded = &found.items[0];
    assert_eq!(
        recorded.message.as_deref(),
        Some("pdb web prevents pod evictions")
    );
    assert_eq!(recorded.type_.as_deref(), Some("Warning"));
    assert_eq!(recorded.series.as_ref().map(|s| s.count), Some(Some(2)));
}

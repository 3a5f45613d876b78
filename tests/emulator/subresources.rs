//! The status subresource (spec and status written separately), pod binding, and evictions
//! that honour PodDisruptionBudgets.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::apis::NodePool;
use kube::api::{EvictParams, Patch, PostParams};
use kube::{Api, Client, Resource as _, ResourceExt as _};
use serde_json::json;

use crate::support::{cluster, create_pod, nodepool, status_of};

#[tokio::test]
async fn status_and_spec_are_written_through_separate_endpoints() {
    let (_emulator, client) = cluster();
    let pools: Api<NodePool> = Api::all(client);
    let mut pool = nodepool("default");
    pool.status = serde_json::from_value(json!({ "resources": { "nodes": "7" } })).unwrap();
    let created = pools.create(&PostParams::default(), &pool).await.unwrap();
    assert!(created.status.is_none(), "status is not set on create");

    let nodes = |pool: &NodePool| pool.status.as_ref().map(|s| s.resources["nodes"].0.clone());
    let status = json!({ "status": { "resources": { "nodes": "3" } }, "spec": { "weight": 50 } });
    let updated = pools
        .patch_status(
            "default",
            &kube::api::PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
    assert_eq!(nodes(&updated).as_deref(), Some("3"));
    assert_eq!(updated.spec.weight, None, "a status write ignores the spec");
    assert_eq!(updated.meta().generation, Some(1));

    let spec = json!({ "status": { "resources": { "nodes": "9" } }, "spec": { "weight": 50 } });
    let updated = pools
        .patch(
            "default",
            &kube::api::PatchParams::default(),
            &Patch::Merge(&spec),
        )
        .await
        .unwrap();
    assert_eq!(updated.spec.weight, Some(50));
    assert_eq!(
        nodes(&updated).as_deref(),
        Some("3"),
        "a spec write ignores the status"
    );
    assert_eq!(updated.meta().generation, Some(2));

    let mut replaced = updated.clone();
    replaced.status.as_mut().unwrap().resources.insert(
        "nodes".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()),
    );
    let stored = pools
        .replace_status("default", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(nodes(&stored).as_deref(), Some("4"));
}

#[tokio::test]
async fn a_pod_is_bound_once() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(&client, "web", json!({})).await;
    let bind = |node: &str| json!({ "apiVersion": "v1", "kind": "Binding", "metadata": { "name": "web" }, "target": { "kind": "Node", "name": node } });
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        "web",
        &PostParams::default(),
        &bind("n1"),
    )
    .await
    .unwrap();
    let pod = pods.get("web").await.unwrap();
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
    let scheduled = pod.status.unwrap().conditions.unwrap();
    assert!(
        scheduled
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    );
    let again = pods
        .create_subresource::<_, serde_json::Value>(
            "binding",
            "web",
            &PostParams::default(),
            &bind("n2"),
        )
        .await;
    assert_eq!(status_of(again).code, 409);
}

#[tokio::test]
async fn binding_replaces_the_schedulers_unschedulable_condition() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(&client, "web", json!({})).await;
    let unschedulable = json!({ "status": { "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available", "lastTransitionTime": "2025-01-01T00:00:00Z",
    }] } });
    pods.patch_status(
        "web",
        &kube::api::PatchParams::default(),
        &Patch::Merge(&unschedulable),
    )
    .await
    .unwrap();
    let bind = json!({ "apiVersion": "v1", "kind": "Binding", "metadata": { "name": "web" }, "target": { "kind": "Node", "name": "n1" } });
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        "web",
        &PostParams::default(),
        &bind,
    )
    .await
    .unwrap();
    let conditions = pods
        .get("web")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap();
    let scheduled: Vec<_> = conditions
        .iter()
        .filter(|c| c.type_ == "PodScheduled")
        .collect();
    assert_eq!(scheduled.len(), 1, "{conditions:?}");
    assert_eq!(scheduled[0].status, "True");
    assert_eq!(
        scheduled[0].reason, None,
        "the Unschedulable reason is gone"
    );
    assert_eq!(
        scheduled[0].message, None,
        "the scheduler's message is gone"
    );
    assert_ne!(
        scheduled[0]
            .last_transition_time
            .as_ref()
            .map(|t| t.0.to_string())
            .as_deref(),
        Some("2025-01-01T00:00:00Z"),
        "the condition changed status, so it has a new transition time"
    );
}

/// A running, ready pod labelled `app=web`.
async fn ready_pod(client: &Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(client, name, json!({ "app": "web" })).await;
    let ready = json!({ "status": { "phase": "Running", "conditions": [{ "type": "Ready", "status": "True" }] } });
    pods.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &Patch::Merge(&ready),
    )
    .await
    .unwrap();
}

async fn budget(client: &Client, min_available: i32) -> Api<PodDisruptionBudget> {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "minAvailable": min_available, "selector": { "matchLabels": { "app": "web" } } },
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    pdbs
}

#[tokio::test]
async fn an_eviction_that_would_break_a_budget_is_refused_with_429() {
    let (_emulator, client) = cluster();
    ready_pod(&client, "web-1").await;
    ready_pod(&client, "web-2").await;
    let pdbs = budget(&client, 2).await;
    let status = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (Some(2), Some(2), Some(0))
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let status = status_of(pods.evict("web-1", &EvictParams::default()).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    let cause = &status.details.as_ref().unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert!(
        cause
            .message
            .contains("needs 2 healthy pods and has 2 currently"),
        "{}",
        cause.message
    );
    assert!(pods.get_opt("web-1").await.unwrap().is_some());
}

#[tokio::test]
async fn an_eviction_the_budget_allows_deletes_the_pod_and_updates_the_budget() {
    let (_emulator, client) = cluster();
    ready_pod(&client, "web-1").await;
    ready_pod(&client, "web-2").await;
    let pdbs = budget(&client, 1).await;
    assert_eq!(
        pdbs.get("web")
            .await
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        Some(1)
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.evict("web-1", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("web-1").await.unwrap().is_none());
    assert_eq!(
        pdbs.get("web")
            .await
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        Some(0)
    );
    let status = status_of(pods.evict("web-2", &EvictParams::default()).await);
    assert_eq!(status.code, 429);
}

#[tokio::test]
async fn pods_no_budget_selects_are_evicted_freely() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(&client, "lonely", json!({ "app": "other" })).await;
    budget(&client, 5).await;
    pods.evict("lonely", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("lonely").await.unwrap().is_none());
    assert_eq!(
        status_of(pods.evict("lonely", &EvictParams::default()).await).code,
        404
    );
    let _ = client;
}

#[tokio::test]
async fn a_budget_status_follows_pod_readiness() {
    let (_emulator, client) = cluster();
    let pdbs = budget(&client, 1).await;
    assert_eq!(
        pdbs.get("web").await.unwrap().status.unwrap().expected_pods,
        Some(0)
    );
    ready_pod(&client, "web-1").await;
    ready_pod(&client, "web-2").await;
    let status = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.disruptions_allowed
        ),
        (Some(2), Some(2), Some(1))
    );
    let name = pdbs.get("web").await.unwrap().name_any();
    assert_eq!(name, "web");
}

#[tokio::test]
async fn a_max_unavailable_budget_counts_the_controllers_scale() {
    let (_emulator, client) = cluster();
    let sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(client.clone(), "default");
    let set = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 2, "selector": { "matchLabels": { "app": "web" } }, "template": {
            "metadata": { "labels": { "app": "web" } },
            "spec": { "containers": [{ "name": "c", "image": "x" }] },
        } },
    }))
    .unwrap();
    let set = sets.create(&PostParams::default(), &set).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["web-1", "web-2"] {
        let mut owned = crate::support::pod(name, json!({ "app": "web" }));
        owned.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web".into(),
                uid: set.uid().unwrap(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        pods.create(&PostParams::default(), &owned).await.unwrap();
        let ready = json!({ "status": { "phase": "Running", "conditions": [{ "type": "Ready", "status": "True" }] } });
        pods.patch_status(
            name,
            &kube::api::PatchParams::default(),
            &Patch::Merge(&ready),
        )
        .await
        .unwrap();
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let pdb = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "maxUnavailable": 1, "selector": { "matchLabels": { "app": "web" } } },
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    pods.evict("web-1", &EvictParams::default()).await.unwrap();
    // The ReplicaSet still wants 2: one is missing, so no further disruption is allowed.
    let status = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.disruptions_allowed
        ),
        (Some(2), Some(1), Some(0))
    );
    assert_eq!(
        status_of(pods.evict("web-2", &EvictParams::default()).await).code,
        429
    );
}

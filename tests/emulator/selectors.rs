//! Label selectors (equality and set-based, as kube-rs encodes them), field selectors, and
//! pagination with limit and continue.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::{cluster, create_node, create_pod, status_of};

fn names<K: kube::Resource + Clone>(list: &kube::core::ObjectList<K>) -> Vec<String> {
    let mut names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
    names.sort();
    names
}

#[tokio::test]
async fn set_based_label_selectors_select_like_the_api_server() {
    let (_emulator, client) = cluster();
    create_pod(&client, "web", json!({ "app": "web", "tier": "front" })).await;
    create_pod(&client, "api", json!({ "app": "api", "tier": "back" })).await;
    create_pod(&client, "db", json!({ "app": "db" })).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let list = |selector: &'static str| {
        let pods = pods.clone();
        async move {
            names(
                &pods
                    .list(&ListParams::default().labels(selector))
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(list("app in (web, api)").await, ["api", "web"]);
    assert_eq!(list("app notin (web,api)").await, ["db"]);
    assert_eq!(list("tier").await, ["api", "web"]);
    assert_eq!(list("!tier").await, ["db"]);
    assert_eq!(list("app=web,tier==front").await, ["web"]);
    assert_eq!(list("app!=web").await, ["api", "db"]);
}

#[tokio::test]
async fn a_malformed_selector_is_a_bad_request() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let status = status_of(pods.list(&ListParams::default().labels("app in web")).await);
    assert_eq!(status.code, 400);
}

#[tokio::test]
async fn pods_are_selected_by_node_and_phase() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(&client, "bound", json!({})).await;
    create_pod(&client, "pending", json!({})).await;
    let binding = json!({ "apiVersion": "v1", "kind": "Binding", "metadata": { "name": "bound" }, "target": { "kind": "Node", "name": "n1" } });
    pods.create_subresource::<_, serde_json::Value>(
        "binding",
        "bound",
        &kube::api::PostParams::default(),
        &binding,
    )
    .await
    .unwrap();
    let running = json!({ "status": { "phase": "Running" } });
    pods.patch_status(
        "bound",
        &kube::api::PatchParams::default(),
        &Patch::Merge(&running),
    )
    .await
    .unwrap();
    let on_node = pods
        .list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();
    assert_eq!(names(&on_node), ["bound"]);
    let unbound = pods
        .list(&ListParams::default().fields("spec.nodeName="))
        .await
        .unwrap();
    assert_eq!(names(&unbound), ["pending"]);
    let not_running = pods
        .list(&ListParams::default().fields("status.phase!=Running"))
        .await
        .unwrap();
    assert_eq!(names(&not_running), ["pending"]);
    let by_name = pods
        .list(&ListParams::default().fields("metadata.name=pending"))
        .await
        .unwrap();
    assert_eq!(names(&by_name), ["pending"]);
}

#[tokio::test]
async fn nodes_are_selected_by_unschedulable_but_not_by_provider_id() {
    let (_emulator, client) = cluster();
    let nodes: Api<Node> = Api::all(client.clone());
    create_node(&client, "n1", json!({})).await;
    create_node(&client, "n2", json!({})).await;
    nodes
        .patch(
            "n2",
            &kube::api::PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "unschedulable": true } })),
        )
        .await
        .unwrap();
    let cordoned = nodes
        .list(&ListParams::default().fields("spec.unschedulable=true"))
        .await
        .unwrap();
    assert_eq!(names(&cordoned), ["n2"]);
    let schedulable = nodes
        .list(&ListParams::default().fields("spec.unschedulable=false"))
        .await
        .unwrap();
    assert_eq!(names(&schedulable), ["n1"]);
    // A real API server has no such field selector for nodes; neither does the emulator.
    let status = status_of(
        nodes
            .list(&ListParams::default().fields("spec.providerID=aws:///us-west-2a/i-n1"))
            .await,
    );
    assert_eq!(status.code, 400);
    assert!(status.message.contains("field label not supported"));
}

#[tokio::test]
async fn limit_and_continue_page_through_a_consistent_list() {
    let (_emulator, client) = cluster();
    for i in 0..5 {
        create_pod(&client, &format!("p{i}"), json!({ "batch": "x" })).await;
    }
    create_pod(&client, "other", json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut seen = Vec::new();
    let mut params = ListParams::default().labels("batch=x").limit(2);
    let mut pages = 0;
    let mut first_rv = None;
    loop {
        let page = pods.list(&params).await.unwrap();
        pages += 1;
        first_rv.get_or_insert_with(|| page.metadata.resource_version.clone());
        assert_eq!(Some(page.metadata.resource_version.clone()), first_rv);
        seen.extend(page.items.iter().map(ResourceExt::name_any));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, ["p0", "p1", "p2", "p3", "p4"]);
}

//! Create, get, list, replace, delete; system metadata; resourceVersion conflicts.

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Resource as _, ResourceExt as _};
use serde_json::json;

use crate::support::{cluster, create_node, create_pod, pod, status_of};

#[tokio::test]
async fn created_objects_get_a_uid_a_timestamp_a_generation_and_a_resource_version() {
    let (_emulator, client) = cluster();
    let created = create_pod(&client, "web", json!({ "app": "web" })).await;
    assert!(created.uid().is_some());
    assert!(created.creation_timestamp().is_some());
    assert_eq!(created.meta().generation, Some(1));
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    let fetched = Api::<Pod>::namespaced(client, "default")
        .get("web")
        .await
        .unwrap();
    assert_eq!(
        fetched.resource_version(),
        created.metadata.resource_version
    );
}

#[tokio::test]
async fn resource_versions_grow_across_kinds() {
    let (_emulator, client) = cluster();
    let pod = create_pod(&client, "a", json!({})).await;
    let node = create_node(&client, "n", json!({})).await;
    let rv = |v: Option<String>| v.unwrap().parse::<u64>().unwrap();
    assert!(rv(node.metadata.resource_version) > rv(pod.metadata.resource_version));
}

#[tokio::test]
async fn a_replace_with_a_stale_resource_version_is_a_conflict() {
    let (_emulator, client) = cluster();
    let nodes: Api<Node> = Api::all(client.clone());
    let original = create_node(&client, "n1", json!({ "zone": "a" })).await;
    let mut first = original.clone();
    first.labels_mut().insert("zone".into(), "b".into());
    nodes
        .replace("n1", &PostParams::default(), &first)
        .await
        .unwrap();
    let mut stale = original;
    stale.labels_mut().insert("zone".into(), "c".into());
    let status = status_of(nodes.replace("n1", &PostParams::default(), &stale).await);
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );
    assert_eq!(nodes.get("n1").await.unwrap().labels()["zone"], "b");
}

#[tokio::test]
async fn a_merge_patch_carrying_a_stale_resource_version_is_a_conflict() {
    let (_emulator, client) = cluster();
    let nodes: Api<Node> = Api::all(client.clone());
    let original = create_node(&client, "n1", json!({})).await;
    let bump = json!({ "metadata": { "labels": { "x": "1" } } });
    nodes
        .patch(
            "n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&bump),
        )
        .await
        .unwrap();
    let stale = json!({ "metadata": { "resourceVersion": original.resource_version(), "labels": { "x": "2" } } });
    let status = status_of(
        nodes
            .patch(
                "n1",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&stale),
            )
            .await,
    );
    assert_eq!(status.code, 409);
}

#[tokio::test]
async fn creating_an_existing_name_is_already_exists() {
    let (_emulator, client) = cluster();
    create_pod(&client, "web", json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let status = status_of(
        pods.create(&PostParams::default(), &pod("web", json!({})))
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
}

#[tokio::test]
async fn generate_name_creates_distinct_names_with_the_prefix() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let mut template = pod("", json!({}));
    template.metadata.name = None;
    template.metadata.generate_name = Some("worker-".into());
    let a = pods
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    let b = pods
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    assert!(a.name_any().starts_with("worker-") && a.name_any().len() == "worker-".len() + 5);
    assert_ne!(a.name_any(), b.name_any());
}

#[tokio::test]
async fn objects_in_a_missing_namespace_are_rejected() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client, "nowhere");
    let status = status_of(
        pods.create(&PostParams::default(), &pod("web", json!({})))
            .await,
    );
    assert_eq!(status.code, 404);
    assert!(status.message.contains("namespaces \"nowhere\" not found"));
}

#[tokio::test]
async fn deleting_a_namespace_deletes_what_it_holds() {
    let (_emulator, client) = cluster();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({ "metadata": { "name": "team" } })).unwrap();
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let map =
        serde_json::from_value(json!({ "metadata": { "name": "settings" }, "data": { "a": "b" } }))
            .unwrap();
    maps.create(&PostParams::default(), &map).await.unwrap();
    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    assert!(maps.get_opt("settings").await.unwrap().is_none());
    assert!(namespaces.get_opt("team").await.unwrap().is_none());
}

#[tokio::test]
async fn lists_across_namespaces_and_within_one() {
    let (_emulator, client) = cluster();
    create_pod(&client, "a", json!({})).await;
    let other: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    other
        .create(&PostParams::default(), &pod("b", json!({})))
        .await
        .unwrap();
    let all = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(all.items.len(), 2);
    let system = other.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        system
            .items
            .iter()
            .map(kube::ResourceExt::name_any)
            .collect::<Vec<_>>(),
        ["b"]
    );
    assert!(system.metadata.resource_version.is_some());
}

#[tokio::test]
async fn updating_nothing_keeps_the_resource_version_and_spec_changes_bump_the_generation() {
    let (_emulator, client) = cluster();
    let nodes: Api<Node> = Api::all(client.clone());
    let created = create_node(&client, "n1", json!({})).await;
    let same = nodes
        .replace("n1", &PostParams::default(), &created)
        .await
        .unwrap();
    assert_eq!(same.resource_version(), created.resource_version());
    let labelled = nodes
        .patch(
            "n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "metadata": { "labels": { "a": "b" } } })),
        )
        .await
        .unwrap();
    assert_eq!(labelled.meta().generation, Some(1));
    let cordoned = nodes
        .patch(
            "n1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": { "unschedulable": true } })),
        )
        .await
        .unwrap();
    assert_eq!(cordoned.meta().generation, Some(2));
}

#[tokio::test]
async fn a_pod_cannot_be_moved_to_another_node_by_an_update() {
    let (_emulator, client) = cluster();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(&client, "web", json!({})).await;
    let moved = json!({ "spec": { "nodeName": "elsewhere" } });
    let status = status_of(
        pods.patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&moved),
        )
        .await,
    );
    assert_eq!(status.code, 422);
}

#[tokio::test]
async fn deleting_a_pod_answers_the_deleted_pod_and_a_config_map_a_status() {
    // kube-apiserver's pod storage sets ReturnDeletedObject; the config map storage does not.
    let (_emulator, client) = cluster();
    create_pod(&client, "gone", json!({ "app": "a" })).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let answer = pods.delete("gone", &DeleteParams::default()).await.unwrap();
    let deleted = answer.left().expect("a Pod, not a Status");
    assert_eq!(deleted.name_any(), "gone");
    assert!(pods.get_opt("gone").await.unwrap().is_none());

    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let map = serde_json::from_value(json!({ "metadata": { "name": "settings" } })).unwrap();
    maps.create(&PostParams::default(), &map).await.unwrap();
    let answer = maps
        .delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    let status = answer.right().expect("a Status");
    assert_eq!(status.details.unwrap().name, "settings");
}

//! Merge, JSON, strategic merge patches and server-side apply.

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use karpenter_core::apis::NodePool;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;

use crate::support::{cluster, create_node, nodepool_json, status_of};

#[tokio::test]
async fn a_strategic_merge_patch_replaces_node_taints_and_merges_conditions_by_type() {
    let (_emulator, client) = cluster();
    let nodes: Api<Node> = Api::all(client.clone());
    create_node(&client, "n1", json!({ "keep": "me" })).await;
    let setup = json!({
        "metadata": { "finalizers": ["a"] },
        "spec": { "taints": [{ "key": "karpenter.sh/unregistered", "effect": "NoExecute" }] },
    });
    nodes
        .patch("n1", &PatchParams::default(), &Patch::Strategic(&setup))
        .await
        .unwrap();
    let conditions = json!({ "status": { "conditions": [
        { "type": "Ready", "status": "False" },
        { "type": "DiskPressure", "status": "False" },
    ] } });
    nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(&conditions),
        )
        .await
        .unwrap();

    // Node taints carry no patch strategy in Kubernetes: the list is replaced, not merged.
    let patch = json!({
        "metadata": { "labels": { "added": "yes" }, "finalizers": ["b"] },
        "spec": { "taints": [{ "key": "karpenter.sh/disrupted", "effect": "NoSchedule" }] },
    });
    let node = nodes
        .patch("n1", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let taints: Vec<String> = node
        .spec
        .as_ref()
        .unwrap()
        .taints
        .as_ref()
        .unwrap()
        .iter()
        .map(|t| t.key.clone())
        .collect();
    assert_eq!(taints, ["karpenter.sh/disrupted"]);
    assert_eq!(node.labels()["keep"], "me");
    assert_eq!(node.labels()["added"], "yes");
    assert_eq!(node.finalizers(), ["a", "b"], "finalizers merge as a set");

    let ready = json!({ "status": { "conditions": [{ "type": "Ready", "status": "True" }] } });
    let node = nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Strategic(&ready))
        .await
        .unwrap();
    let conditions: Vec<(String, String)> = node
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conditions,
        [
            ("Ready".into(), "True".into()),
            ("DiskPressure".into(), "False".into())
        ]
    );
}

#[tokio::test]
async fn a_strategic_merge_patch_of_a_custom_resource_is_unsupported_media() {
    let (_emulator, client) = cluster();
    let pools: Api<NodePool> = Api::all(client);
    pools
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(nodepool_json("default")).unwrap(),
        )
        .await
        .unwrap();
    let patch = json!({ "spec": { "weight": 5 } });
    let status = status_of(
        pools
            .patch(
                "default",
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await,
    );
    assert_eq!(status.code, 415);
}

#[tokio::test]
async fn a_json_patch_applies_its_operations_and_fails_on_a_failed_test() {
    let (_emulator, client) = cluster();
    let nodes: Api<Node> = Api::all(client.clone());
    create_node(&client, "n1", json!({ "a": "1" })).await;
    let operations: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/metadata/labels/a", "value": "1" },
        { "op": "replace", "path": "/metadata/labels/a", "value": "2" },
        { "op": "add", "path": "/spec/unschedulable", "value": true },
    ]))
    .unwrap();
    let node = nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::<()>::Json(operations),
        )
        .await
        .unwrap();
    assert_eq!(node.labels()["a"], "2");
    assert_eq!(node.spec.unwrap().unschedulable, Some(true));
    let failing: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": "/metadata/labels/a", "value": "1" },
    ]))
    .unwrap();
    let status = status_of(
        nodes
            .patch("n1", &PatchParams::default(), &Patch::<()>::Json(failing))
            .await,
    );
    assert_eq!(status.code, 422);
}

#[tokio::test]
async fn server_side_apply_creates_updates_and_prunes_what_the_manager_stopped_applying() {
    let (_emulator, client) = cluster();
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let params = PatchParams::apply("tests").force();
    let first = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cfg" }, "data": { "a": "1", "b": "2" } });
    let created = maps
        .patch("cfg", &params, &Patch::Apply(&first))
        .await
        .unwrap();
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    assert_eq!(
        created.managed_fields()[0].manager.as_deref(),
        Some("tests")
    );
    let second = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cfg" }, "data": { "a": "3" } });
    let updated = maps
        .patch("cfg", &params, &Patch::Apply(&second))
        .await
        .unwrap();
    assert_eq!(
        updated.data.unwrap(),
        [("a".to_owned(), "3".to_owned())].into()
    );
}

#[tokio::test]
async fn server_side_apply_conflicts_with_another_manager_unless_forced() {
    let (_emulator, client) = cluster();
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let config = |value: &str| json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cfg" }, "data": { "k": value } });
    maps.patch(
        "cfg",
        &PatchParams::apply("one"),
        &Patch::Apply(&config("a")),
    )
    .await
    .unwrap();
    let status = status_of(
        maps.patch(
            "cfg",
            &PatchParams::apply("two"),
            &Patch::Apply(&config("b")),
        )
        .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.details.unwrap().causes[0].field, ".data.k");
    let forced = maps
        .patch(
            "cfg",
            &PatchParams::apply("two").force(),
            &Patch::Apply(&config("b")),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["k"], "b");
}

//! Our CRDs are admitted like the real server does: unknown fields pruned (or rejected under
//! strict field validation), defaults applied, schema and rule violations refused with 422 and
//! one cause per field path, and the CRDs' immutability rules enforced on update.

use karpenter_core::apis::{NodeClaim, NodePool};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{cluster, nodeclaim, nodepool_json, status_of};

#[tokio::test]
async fn an_invalid_nodepool_is_rejected_with_each_field_path() {
    let (_emulator, client) = cluster();
    let pools: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<NodePool>(&()));
    let mut document = nodepool_json("broken");
    document["spec"]["weight"] = json!(1000);
    document["spec"]["template"]["spec"]["requirements"][0]["operator"] = json!("Near");
    document["spec"]["disruption"] = json!({ "consolidateAfter": "soon" });
    let pool: DynamicObject = serde_json::from_value(document).unwrap();
    let status = status_of(pools.create(&PostParams::default(), &pool).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status
            .message
            .starts_with("NodePool.karpenter.sh \"broken\" is invalid"),
        "{}",
        status.message
    );
    let fields: Vec<String> = status
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| c.field)
        .collect();
    for expected in [
        "spec.weight",
        "spec.template.spec.requirements[0].operator",
        "spec.disruption.consolidateAfter",
    ] {
        assert!(
            fields.iter().any(|f| f == expected),
            "{expected} missing from {fields:?}"
        );
    }
}

#[tokio::test]
async fn schema_defaults_are_filled_on_create() {
    let (_emulator, client) = cluster();
    let pools: Api<NodePool> = Api::all(client.clone());
    let raw: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<NodePool>(&()));
    let created = raw
        .create(
            &PostParams::default(),
            &serde_json::from_value(nodepool_json("defaults")).unwrap(),
        )
        .await
        .unwrap();
    // Karpenter's CRD defaults `disruption` to {consolidateAfter: 0s}; the server then fills
    // the defaults inside it.
    assert_eq!(created.data["spec"]["disruption"]["consolidateAfter"], "0s");
    assert_eq!(
        created.data["spec"]["disruption"]["consolidationPolicy"],
        "WhenEmptyOrUnderutilized"
    );
    assert_eq!(
        created.data["spec"]["disruption"]["budgets"],
        json!([{ "nodes": "10%" }])
    );
    assert_eq!(
        created.data["spec"]["template"]["spec"]["expireAfter"],
        "720h"
    );
    assert!(pools.get("defaults").await.is_ok());
}

#[tokio::test]
async fn unknown_fields_are_pruned_by_default_and_rejected_when_strict() {
    let (_emulator, client) = cluster();
    let pools: Api<NodePool> = Api::all(client);
    let patch = |value: serde_json::Value| Patch::Merge(value);
    pools
        .create(
            &PostParams::default(),
            &serde_json::from_value(nodepool_json("p")).unwrap(),
        )
        .await
        .unwrap();
    let unknown = json!({ "spec": { "colour": "blue" } });
    let pruned = pools
        .patch("p", &PatchParams::default(), &patch(unknown.clone()))
        .await
        .unwrap();
    assert!(
        serde_json::to_value(&pruned).unwrap()["spec"]
            .get("colour")
            .is_none()
    );
    let strict = PatchParams {
        field_validation: Some(kube::api::ValidationDirective::Strict),
        ..PatchParams::default()
    };
    let status = status_of(pools.patch("p", &strict, &patch(unknown)).await);
    assert_eq!(status.code, 400);
    assert!(
        status.message.contains("unknown field \"spec.colour\""),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn a_nodeclaim_spec_cannot_change() {
    let (_emulator, client) = cluster();
    let claims: Api<NodeClaim> = Api::all(client);
    claims
        .create(&PostParams::default(), &nodeclaim("c1"))
        .await
        .unwrap();
    let change = json!({ "spec": { "expireAfter": "24h" } });
    let status = status_of(
        claims
            .patch("c1", &PatchParams::default(), &Patch::Merge(&change))
            .await,
    );
    assert_eq!(status.code, 422);
    let cause = &status.details.unwrap().causes[0];
    assert_eq!(cause.field, "spec");
    assert!(cause.message.contains("spec is immutable"));
    let labels = json!({ "metadata": { "labels": { "team": "a" } } });
    assert!(
        claims
            .patch("c1", &PatchParams::default(), &Patch::Merge(&labels))
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn a_nodepool_with_an_empty_node_class_name_is_refused_as_karpenters_crd_refuses_it() {
    // Karpenter's CRD: `self != ''` on nodeClassRef group, kind and name.
    let (_emulator, client) = cluster();
    let pools: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<NodePool>(&()));
    let mut document = nodepool_json("nameless");
    document["spec"]["template"]["spec"]["nodeClassRef"]["name"] = json!("");
    let pool: DynamicObject = serde_json::from_value(document).unwrap();
    let status = status_of(pools.create(&PostParams::default(), &pool).await);
    assert_eq!(status.code, 422);
    let causes = status.details.unwrap().causes;
    assert!(
        causes
            .iter()
            .any(|c| c.field == "spec.template.spec.nodeClassRef.name"
                && c.message.contains("name may not be empty")),
        "{causes:?}"
    );
}

#[tokio::test]
async fn an_update_ratchets_what_it_did_not_change_and_checks_what_it_did() {
    // kube-apiserver ratchets unchanged values (CRDValidationRatcheting, on by default since
    // 1.30): an object stored under an older schema can still be written where it did not change.
    let (emulator, client) = cluster();
    let pools: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<NodePool>(&()));
    let mut document = nodepool_json("legacy");
    document["spec"]["weight"] = json!(1000);
    emulator.set_schema_admission(false);
    let stored = pools
        .create(
            &PostParams::default(),
            &serde_json::from_value(document).unwrap(),
        )
        .await
        .unwrap();
    emulator.set_schema_admission(true);
    let same = json!({ "spec": { "weight": 1000 } });
    let unchanged = pools
        .patch("legacy", &PatchParams::default(), &Patch::Merge(&same))
        .await
        .expect("an unchanged object is written back");
    assert_eq!(
        unchanged.metadata.resource_version,
        stored.metadata.resource_version
    );
    let labels = json!({ "metadata": { "labels": { "team": "a" } } });
    let relabelled = pools
        .patch("legacy", &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .expect("the unchanged invalid weight is ratcheted");
    assert_ne!(
        relabelled.metadata.resource_version,
        stored.metadata.resource_version
    );
    let weight = json!({ "spec": { "weight": 2000 } });
    let status = status_of(
        pools
            .patch("legacy", &PatchParams::default(), &Patch::Merge(&weight))
            .await,
    );
    assert_eq!(status.code, 422, "a changed value is checked: {status:?}");
    assert_eq!(status.details.unwrap().causes[0].field, "spec.weight");
}

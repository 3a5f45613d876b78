//! Finalizers: DELETE marks an object with a deletionTimestamp while finalizers remain; it goes
//! when the last one is removed; no finalizer may be added meanwhile.

use futures::{StreamExt as _, TryStreamExt as _};
use karpenter_core::apis::NodeClaim;
use kube::api::{DeleteParams, Patch, PostParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;

use crate::support::{cluster, nodeclaim, status_of};

#[tokio::test]
async fn a_finalizer_holds_a_deleted_object_until_it_is_removed() {
    let (_emulator, client) = cluster();
    let claims: Api<NodeClaim> = Api::all(client);
    let mut claim = nodeclaim("default-abcde");
    claim.metadata.finalizers = Some(vec!["karpenter.sh/termination".into()]);
    let created = claims.create(&PostParams::default(), &claim).await.unwrap();
    let mut watch = claims
        .watch(
            &WatchParams::default(),
            &created.resource_version().unwrap(),
        )
        .await
        .unwrap()
        .boxed();

    let deleted = claims
        .delete("default-abcde", &DeleteParams::default())
        .await
        .unwrap();
    let marked = deleted
        .left()
        .expect("the object stays while its finalizer remains");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(matches!(
        watch.try_next().await.unwrap(),
        Some(WatchEvent::Modified(_))
    ));

    let add =
        json!({ "metadata": { "finalizers": ["karpenter.sh/termination", "example.com/other"] } });
    let status = status_of(
        claims
            .patch(
                "default-abcde",
                &kube::api::PatchParams::default(),
                &Patch::Merge(&add),
            )
            .await,
    );
    assert_eq!(status.code, 422);

    let again = claims
        .delete("default-abcde", &DeleteParams::default())
        .await
        .unwrap();
    assert!(again.is_left(), "a second delete leaves it marked");

    let remove = json!({ "metadata": { "finalizers": null } });
    claims
        .patch(
            "default-abcde",
            &kube::api::PatchParams::default(),
            &Patch::Merge(&remove),
        )
        .await
        .unwrap();
    assert!(claims.get_opt("default-abcde").await.unwrap().is_none());
    let event = watch.try_next().await.unwrap();
    assert!(
        matches!(event, Some(WatchEvent::Deleted(ref c)) if c.finalizers().is_empty()),
        "{event:?}"
    );
}

#[tokio::test]
async fn an_object_without_finalizers_is_deleted_at_once() {
    let (_emulator, client) = cluster();
    let claims: Api<NodeClaim> = Api::all(client);
    claims
        .create(&PostParams::default(), &nodeclaim("plain"))
        .await
        .unwrap();
    let deleted = claims
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deleted.is_right());
    assert!(claims.get_opt("plain").await.unwrap().is_none());
}

#[tokio::test]
async fn a_delete_with_a_stale_precondition_is_a_conflict() {
    let (_emulator, client) = cluster();
    let claims: Api<NodeClaim> = Api::all(client);
    let created = claims
        .create(&PostParams::default(), &nodeclaim("guarded"))
        .await
        .unwrap();
    let params = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("someone-else".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let status = status_of(claims.delete("guarded", &params).await);
    assert_eq!(status.code, 409);
    let matching = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: created.uid(),
            resource_version: created.resource_version(),
        }),
        ..DeleteParams::default()
    };
    assert!(
        claims
            .delete("guarded", &matching)
            .await
            .unwrap()
            .is_right()
    );
}

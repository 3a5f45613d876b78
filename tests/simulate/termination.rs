//! Termination over the emulator and kwok on paused time: a deleted NodeClaim's instance waits
//! for the node's `VolumeAttachments` to go (or for the termination grace period to pass), and
//! a deleting Node whose NodeClaim vanished is released once its instance is gone.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{
    VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
};
use karpenter::sim::scenario::Simulation;
use karpenter_core::apis::NodeClaim;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

use super::support::{
    delete_nodeclaim, in_simulation, live_instances, nodeclaims, registered,
    small_without_consolidation, small_without_consolidation_and,
};

async fn attach(sim: &Simulation<'_>, name: &str, node: &str, volume: &str) {
    let attachment = VolumeAttachment {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: VolumeAttachmentSpec {
            attacher: "ebs.csi.aws.com".into(),
            node_name: node.into(),
            source: VolumeAttachmentSource {
                persistent_volume_name: Some(volume.into()),
                ..Default::default()
            },
        },
        status: None,
    };
    Api::<VolumeAttachment>::all(sim.client())
        .create(&PostParams::default(), &attachment)
        .await
        .unwrap();
}

async fn nodeclaim_exists(sim: &Simulation<'_>, name: &str) -> bool {
    nodeclaims(sim)
        .await
        .iter()
        .any(|c| c.metadata.name.as_deref() == Some(name))
}

/// A minute in, deletes a registered NodeClaim whose node has a volume attached; the
/// NodeClaim's name and its instance id.
async fn delete_with_an_attachment(sim: &mut Simulation<'_>) -> (String, String) {
    assert!(sim.advance(Duration::from_mins(1)).await);
    let (name, node, instance) = registered(sim).await;
    attach(sim, "csi-data-0", &node, "pv-data-0").await;
    delete_nodeclaim(sim, &name).await;
    (name, instance)
}

/// Within 40 s the instance is terminated and the NodeClaim finalized.
async fn terminated_within_40_seconds(sim: &mut Simulation<'_>, name: &str, instance: &str) {
    assert!(sim.advance(Duration::from_secs(40)).await);
    assert!(!live_instances(sim).contains(instance), "terminated");
    assert!(!nodeclaim_exists(sim, name).await, "finalized");
}

#[test]
fn a_deleted_nodeclaims_instance_waits_for_the_nodes_volume_attachments() {
    in_simulation(|| async {
        let mut sim = Simulation::start(small_without_consolidation(), None)
            .await
            .unwrap();
        let (name, instance) = delete_with_an_attachment(&mut sim).await;
        // Long enough to drain and terminate without the attachment (the lifecycle test's 50 s).
        assert!(sim.advance(Duration::from_mins(1)).await);
        assert!(
            live_instances(&sim).contains(&instance),
            "the instance waits for the volume to detach"
        );
        assert!(nodeclaim_exists(&sim, &name).await);

        Api::<VolumeAttachment>::all(sim.client())
            .delete("csi-data-0", &DeleteParams::default())
            .await
            .unwrap();
        terminated_within_40_seconds(&mut sim, &name, &instance).await;
        sim.finish().await;
    });
}

#[test]
fn the_wait_for_volume_attachments_ends_at_the_termination_grace_period() {
    in_simulation(|| async {
        let scenario = small_without_consolidation_and("          terminationGracePeriod: 2m\n");
        let mut sim = Simulation::start(scenario, None).await.unwrap();
        let (name, instance) = delete_with_an_attachment(&mut sim).await;
        assert!(sim.advance(Duration::from_secs(100)).await);
        assert!(
            live_instances(&sim).contains(&instance),
            "within the grace period the instance waits"
        );
        // The grace period ends 2 minutes after the deletion; then kwok's 10 s shutdown.
        terminated_within_40_seconds(&mut sim, &name, &instance).await;
        sim.finish().await;
    });
}

#[test]
fn a_deleting_node_whose_nodeclaim_vanished_is_released_once_its_instance_is_gone() {
    in_simulation(|| async {
        let mut sim = Simulation::start(small_without_consolidation(), None)
            .await
            .unwrap();
        assert!(sim.advance(Duration::from_mins(1)).await);
        let (name, node, instance) = registered(&sim).await;
        // Someone strips the NodeClaim's finalizer and deletes it; EC2 takes the instance.
        let claims = Api::<NodeClaim>::all(sim.client());
        claims
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        delete_nodeclaim(&sim, &name).await;
        assert!(sim.advance(Duration::from_secs(1)).await);
        assert!(!nodeclaim_exists(&sim, &name).await);
        let nodes = Api::<Node>::all(sim.client());
        assert!(nodes.get_opt(&node).await.unwrap().is_some());
        // EC2 takes the instance; the cloud node lifecycle controller (the simulation's
        // kubelet) deletes its Node, which our finalizer holds with no NodeClaim to release it.
        assert!(sim.world().ec2.reclaim(&instance));
        // Well within the collector's 2-minute sweep: the Node's change brings the release.
        assert!(sim.advance(Duration::from_secs(15)).await);
        assert!(!live_instances(&sim).contains(&instance));
        assert!(
            nodes.get_opt(&node).await.unwrap().is_none(),
            "the Node is released and gone"
        );
        sim.finish().await;
    });
}

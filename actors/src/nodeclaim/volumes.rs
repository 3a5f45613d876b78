//! Which `VolumeAttachments` hold a drained node's instance (Karpenter's node.termination
//! `ensureVolumesDetached`): after the drain, the instance is terminated only once the volumes of
//! the pods that left are detached, so a stateful pod's replacement does not wait out EBS's
//! force-detach delay elsewhere. Attachments of pods that stay (not drainable: tolerating the
//! disrupted taint, static, or stuck terminating) are not waited for, nor are attachments
//! without a `PersistentVolume` (inline volumes). Past the NodeClaim's termination time nothing
//! is waited for (the caller checks).
//!
//! Flow: the node's attachments (indexed by `spec.nodeName`) and pods come from the
//! `ClusterView`; each pod that stays maps its `persistentVolumeClaim` volumes to their bound
//! `PersistentVolume` names through the claims in the view; what is left is the answer.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
use karpenter_core::apis::SlimPod;

use super::drain::is_drainable;

/// The names of the attachments the termination must wait for, in the order given.
/// `claim` finds a `PersistentVolumeClaim` by namespace and name.
pub fn blocking_attachments<'a>(
    attachments: &'a [Arc<VolumeAttachment>],
    pods: &[Arc<SlimPod>],
    now: Timestamp,
    claim: impl Fn(&str, &str) -> Option<Arc<PersistentVolumeClaim>>,
) -> Vec<&'a str> {
    if attachments.is_empty() {
        return Vec::new();
    }
    let mut kept_volumes: HashSet<String> = HashSet::new();
    for pod in pods.iter().filter(|p| !is_drainable(p, now)) {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let claims = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.persistent_volume_claim.as_ref());
        for source in claims {
            if let Some(volume) = claim(namespace, &source.claim_name)
                .and_then(|c| c.spec.as_ref().and_then(|s| s.volume_name.clone()))
            {
                kept_volumes.insert(volume);
            }
        }
    }
    attachments
        .iter()
        .filter(|a| {
            a.spec
                .source
                .persistent_volume_name
                .as_ref()
                .is_some_and(|pv| !kept_volumes.contains(pv))
        })
        .map(|a| a.metadata.name.as_deref().unwrap_or_default())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Toleration,
    };
    // The view's slim types, under the names the literals below use.
    use k8s_openapi::api::storage::v1::{VolumeAttachmentSource, VolumeAttachmentSpec};
    use karpenter_core::apis::labels;
    use karpenter_core::apis::{SharedPodSpec as PodSpec, SlimPod as Pod, SlimVolume as Volume};

    fn attachment(name: &str, pv: Option<&str>) -> Arc<VolumeAttachment> {
        let mut a = VolumeAttachment::default();
        a.metadata.name = Some(name.into());
        a.spec = VolumeAttachmentSpec {
            attacher: "ebs.csi.aws.com".into(),
            node_name: "node-a".into(),
            source: VolumeAttachmentSource {
                persistent_volume_name: pv.map(str::to_owned),
                ..VolumeAttachmentSource::default()
            },
        };
        Arc::new(a)
    }

    fn pod_with_claim(name: &str, claim: &str, tolerates_disrupted: bool) -> Arc<Pod> {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("db".into());
        pod.spec = Some(
            PodSpec {
                volumes: Some(vec![Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: claim.into(),
                        read_only: None,
                    }),
                }]),
                tolerations: tolerates_disrupted.then(|| {
                    vec![Toleration {
                        key: Some(labels::DISRUPTED_TAINT.into()),
                        operator: Some("Exists".into()),
                        ..Toleration::default()
                    }]
                }),
                ..PodSpec::default()
            }
            .into(),
        );
        Arc::new(pod)
    }

    fn claims(namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let volume = match (namespace, name) {
            ("db", "data-0") => "pv-0",
            ("db", "data-1") => "pv-1",
            _ => return None,
        };
        Some(Arc::new(PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                volume_name: Some(volume.into()),
                ..PersistentVolumeClaimSpec::default()
            }),
            ..PersistentVolumeClaim::default()
        }))
    }

    #[test]
    fn attachments_of_pods_that_left_block_and_those_of_pods_that_stay_do_not() {
        let attachments = [
            attachment("va-0", Some("pv-0")),
            attachment("va-1", Some("pv-1")),
            attachment("va-inline", None),
        ];
        // pv-0's pod was evicted (gone from the node); pv-1's pod tolerates the taint and stays.
        let pods = [pod_with_claim("stays", "data-1", true)];
        let blocking = blocking_attachments(&attachments, &pods, Timestamp::UNIX_EPOCH, claims);
        assert_eq!(blocking, vec!["va-0"]);
    }

    #[test]
    fn a_drainable_pod_does_not_excuse_its_attachment() {
        let attachments = [attachment("va-1", Some("pv-1"))];
        let pods = [pod_with_claim("leaving", "data-1", false)];
        let blocking = blocking_attachments(&attachments, &pods, Timestamp::UNIX_EPOCH, claims);
        assert_eq!(blocking, vec!["va-1"]);
    }

    #[test]
    fn a_claim_missing_from_the_view_excuses_nothing() {
        let attachments = [attachment("va-0", Some("pv-0"))];
        let pods = [pod_with_claim("stays", "unknown-claim", true)];
        let blocking = blocking_attachments(&attachments, &pods, Timestamp::UNIX_EPOCH, claims);
        assert_eq!(blocking, vec!["va-0"]);
    }
}

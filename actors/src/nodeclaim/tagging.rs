//! The NodeClaimActor's tagging step (Karpenter AWS's `nodeclaim.tagging`): once the NodeClaim
//! is `Registered` and names its Node, its instance is tagged `Name=<node>`,
//! `karpenter.sh/nodeclaim=<nodeclaim>` and `eks:eks-cluster-name=<cluster>` through
//! `CloudProvider::tag_instance` (which writes only the tags the instance lacks), and the
//! NodeClaim is annotated `karpenter.k8s.aws/tagged=true` and
//! `compatibility.karpenter.k8s.aws/cluster-name-tagged=true`.
//!
//! The annotations make the step idempotent across restarts: a NodeClaim carrying both makes no
//! AWS call. Both are checked, as Karpenter v1.5 does, so a NodeClaim tagged by a Karpenter
//! older than the `eks:eks-cluster-name` tag (only `tagged=true`) gets that tag once. A failed
//! call fails the reconcile, which the kit retries with backoff (1 s to 1 min); an instance
//! already gone, or a provider id that names none, is not retried (Karpenter drops both too).

use std::sync::Arc;

use super::lifecycle::{Step, is_true};
use super::{NodeClaimActor, NodeClaimError, provider_id};
use crate::logs;
use crate::ports::cloud_provider::CloudProviderError;
use karpenter_core::apis::conditions::nodeclaim as cond;
use karpenter_core::apis::labels;
use karpenter_core::apis::{NodeClaim, SlimNodeClaim};
use karpenter_core::domain::tags;

/// The annotations that mark a NodeClaim whose instance is tagged.
const TAGGED_ANNOTATIONS: [&str; 2] = [labels::TAGGED, labels::CLUSTER_NAME_TAGGED];

/// Whether the NodeClaim carries every tagged annotation.
#[must_use]
pub fn is_tagged(nodeclaim: &SlimNodeClaim) -> bool {
    let annotations = nodeclaim.metadata.annotations.as_ref();
    TAGGED_ANNOTATIONS.iter().all(|key| {
        annotations
            .and_then(|a| a.get(key))
            .is_some_and(|v| v == "true")
    })
}

impl NodeClaimActor {
    /// Tags the registered NodeClaim's instance once; `Step::Stop` when the NodeClaim is gone.
    pub(super) async fn tag_instance(
        &mut self,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Step, NodeClaimError> {
        if self.reported.tagged
            || self.reported.untaggable
            || is_tagged(&nodeclaim)
            || nodeclaim.metadata.deletion_timestamp.is_some()
            || !is_true(&nodeclaim, cond::REGISTERED)
            || provider_id(&nodeclaim).is_none()
        {
            return Ok(Step::Continue(nodeclaim, None));
        }
        let Some(node_name) = nodeclaim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
        else {
            return Ok(Step::Continue(nodeclaim, None));
        };
        let wanted =
            tags::registered_instance_tags(node_name, &self.name, &self.deps.cluster_info.name);
        match self.deps.cloud.tag_instance(&nodeclaim, &wanted).await {
            Ok(()) => {}
            Err(CloudProviderError::NodeClaimNotFound { .. }) => {
                // Terminated under us: garbage collection deletes the NodeClaim; retrying
                // would only ask EC2 again about an instance that stays gone.
                tracing::debug!("instance not found; not tagging it");
                self.reported.untaggable = true;
                return Ok(Step::Continue(nodeclaim, None));
            }
            Err(error @ CloudProviderError::InvalidProviderId { .. }) => {
                tracing::error!(error = logs::err(&error), "failed parsing instance id");
                self.reported.untaggable = true;
                return Ok(Step::Continue(nodeclaim, None));
            }
            Err(source) => {
                return Err(NodeClaimError::Cloud {
                    what: "tagging the instance",
                    nodeclaim: self.name.clone(),
                    source: Box::new(source),
                });
            }
        }
        let annotate = |nodeclaim: &mut NodeClaim| {
            let annotations = nodeclaim.metadata.annotations.get_or_insert_default();
            for key in TAGGED_ANNOTATIONS {
                annotations.insert(key.to_owned(), "true".to_owned());
            }
        };
        let Some(written) = self
            .write_nodeclaim(&nodeclaim, "annotating the instance tagged", &annotate)
            .await?
        else {
            return Ok(Step::Stop);
        };
        // A reconcile on a view older than this write must not ask EC2 again.
        self.reported.tagged = true;
        Ok(Step::Continue(written, None))
    }
}

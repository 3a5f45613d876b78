//! The NodeClaimActor's drift step, for a live NodeClaim: it keeps the `Drifted` condition
//! (Karpenter's `nodeclaim.disruption` Drift), which the disruption round's Drift method
//! requires of its candidates, oldest transition first.
//!
//! Flow: every reconcile of a NodeClaim whose NodePool exists decides. Not `Launched=True`:
//! the condition is removed and nothing is rechecked. Otherwise the reason, first hit wins:
//! the NodePool's own checks that need no cloud call
//! ([`karpenter_core::domain::drift::static_drift_with`]: `NodePoolDrifted`,
//! `RequirementsDrifted`),
//! then `InstanceTypeNotFound` against `CloudProvider::instance_types` of the pool, then
//! `CloudProvider::is_drifted` (`NodeClassDrift`, `AMIDrift`, `SecurityGroupDrift`,
//! `SubnetDrift`, `CapacityReservationDrift`). Drifted: `Drifted=True` with the reason as
//! reason and message (a new reason rewrites it, keeping the transition time). Not drifted: the
//! condition is removed. Either way the actor looks again when the cloud's verdict it used is
//! [`DRIFT_RECHECK`] old, since the cloud side (AMIs, subnets, security groups) changes without
//! any event the actor sees.
//!
//! The requirements check is decided again only when the NodePool or the NodeClaim's labels
//! changed ([`RequirementsDrift`]): after launch, every pod bound to the node and every
//! status write reconciles the NodeClaim, and parsing both sides' requirements each time was a
//! few percent of a 5,000-node scale-up.
//!
//! The cloud half (instance types, `is_drifted`: a `DescribeInstances` per NodeClaim) is asked
//! at most once per [`DRIFT_RECHECK`] while the NodePool and its `EC2NodeClass` stay the same
//! ([`CloudDrift`]): a node's pods move often and each move reconciles its NodeClaim, which
//! Karpenter answers with a fresh cloud call every time.
//!
//! A cloud error is returned as a [`NodeClaimError`] (retried with backoff) and leaves the
//! condition as it was; a NodeClaim whose instance is gone is left to the garbage collector.
//! The daemon nudges the NodeClaims of a NodePool when it changes and those of an
//! `EC2NodeClass`'s pools when the class changes, so a spec change is seen at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::lifecycle::{Step, condition, is_true};
use super::{NodeClaimActor, NodeClaimError, label};
use crate::logs;
use crate::ports::cloud_provider::CloudProviderError;
use karpenter_core::apis::conditions::nodeclaim as cond;
use karpenter_core::apis::labels;
use karpenter_core::apis::requirements::NodePoolRequirement;
use karpenter_core::apis::{LabelMap, SlimNodeClaim};
use karpenter_core::domain::drift::{
    NodePoolDrift, instance_type_not_found, requirements_drifted, static_drift_with,
};
use karpenter_core::domain::requirements::RequirementError;

/// How often a launched NodeClaim's drift is decided again without an event (Karpenter's
/// requeue, sized to the cloud provider's cache TTLs).
pub const DRIFT_RECHECK: Duration = Duration::from_mins(5);

/// A cloud-side drift verdict, reused until [`DRIFT_RECHECK`] has passed or the NodePool or
/// its `EC2NodeClass` changed: the pool's spec (its `generation`; the resource version where an
/// API keeps no generation) or the class's resource version (its status holds the AMIs, subnets
/// and security groups drift is told from). The pool's status changes with every NodeClaim that
/// joins it and says nothing about the cloud side.
#[derive(Debug, Clone)]
pub(super) struct CloudDrift {
    at: Instant,
    /// The pool's generation, its resource version (only without a generation), the class's
    /// resource version.
    versions: (Option<i64>, Option<String>, Option<String>),
    reason: Option<&'static str>,
}

/// A requirements-drift verdict, reused while the NodePool is the very object it was decided
/// on (the view replaces a pool's `Arc` with every change of it) and the NodeClaim's labels
/// stay the same. The labels are compared by a 64-bit hash (as Karpenter tells template drift
/// by one), so an actor keeps eight bytes, not a copy of thirty-odd labels.
#[derive(Debug, Clone)]
pub(super) struct RequirementsDrift {
    pool: Arc<karpenter_core::apis::NodePool>,
    labels: u64,
    drifted: bool,
}

fn labels_hash(labels: &LabelMap) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(labels)
}

impl NodeClaimActor {
    /// Sets, rewrites or removes `Drifted`; asks to look again in [`DRIFT_RECHECK`] once
    /// launched.
    pub(super) async fn update_drifted(
        &mut self,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Step, NodeClaimError> {
        // Without its NodePool there is nothing to compare with (Karpenter leaves it as it is).
        let Some(nodepool) = self.deps.view.nodepool(label(&nodeclaim, labels::NODEPOOL)) else {
            return Ok(Step::Continue(nodeclaim, None));
        };
        let present = condition(&nodeclaim, cond::DRIFTED).is_some();
        if !is_true(&nodeclaim, cond::LAUNCHED) {
            if !present {
                return Ok(Step::Continue(nodeclaim, None));
            }
            let written = self.clear_drifted(&nodeclaim).await?;
            if written.is_some() {
                tracing::debug!("removing drift status condition, isn't launched");
            }
            return Ok(written.map_or(Step::Stop, |nc| Step::Continue(nc, None)));
        }
        let (reason, recheck) = match self.drift_reason(&nodepool, &nodeclaim).await {
            Ok(found) => found,
            // The instance is gone: the garbage collector deletes the NodeClaim.
            Err(CloudProviderError::NodeClaimNotFound { .. }) => {
                return Ok(Step::Continue(nodeclaim, None));
            }
            Err(source) => {
                return Err(NodeClaimError::Cloud {
                    what: "getting drift",
                    nodeclaim: self.name.clone(),
                    source: Box::new(source),
                });
            }
        };
        let written = match reason {
            Some(reason) => {
                let written = self
                    .set_conditions(&nodeclaim, "marking the nodeclaim drifted", &|set| {
                        set.set_true_with_reason(cond::DRIFTED, reason, reason);
                    })
                    .await?;
                if !present && written.is_some() {
                    tracing::debug!(reason, "marking drifted");
                }
                written
            }
            None if present => {
                let written = self.clear_drifted(&nodeclaim).await?;
                if written.is_some() {
                    tracing::debug!("removing drifted status condition, not drifted");
                }
                written
            }
            None => Some(nodeclaim),
        };
        Ok(written.map_or(Step::Stop, |nc| Step::Continue(nc, Some(recheck))))
    }

    async fn clear_drifted(
        &self,
        nodeclaim: &Arc<SlimNodeClaim>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        self.set_conditions(nodeclaim, "removing the drifted condition", &|set| {
            set.clear(cond::DRIFTED);
        })
        .await
    }

    /// The first drift reason, the NodePool's before the cloud provider's; the cheap checks
    /// first, the cloud's at most once per [`DRIFT_RECHECK`] for the same pool and class. With
    /// it, when to look again: when the cloud's verdict in use turns [`DRIFT_RECHECK`] old (a
    /// reconcile between two rechecks must not push the next one back).
    async fn drift_reason(
        &mut self,
        nodepool: &Arc<karpenter_core::apis::NodePool>,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<(Option<&'static str>, Duration), CloudProviderError> {
        let requirements = |pool_requirements: &[NodePoolRequirement], labels: &_| {
            self.requirements_drifted(nodepool, pool_requirements, labels)
        };
        match static_drift_with(nodepool, nodeclaim, requirements) {
            Ok(Some(reason)) => return Ok((Some(reason.as_str()), DRIFT_RECHECK)),
            Ok(None) => {}
            // Validation marks such a pool not ready; the other checks still apply.
            Err(error) => {
                tracing::debug!(
                    error = logs::err(&error),
                    "nodepool requirements do not parse; skipping requirements drift"
                );
            }
        }
        let class = self
            .deps
            .view
            .ec2nodeclass(&nodepool.spec.template.spec.node_class_ref.name);
        let versions = (
            nodepool.metadata.generation,
            nodepool
                .metadata
                .resource_version
                .clone()
                .filter(|_| nodepool.metadata.generation.is_none()),
            class.and_then(|c| c.metadata.resource_version.clone()),
        );
        let now = Instant::now();
        if let Some(memo) = &self.cloud_drift
            && memo.versions == versions
            && now.duration_since(memo.at) < DRIFT_RECHECK
        {
            return Ok((
                memo.reason,
                DRIFT_RECHECK.saturating_sub(now.duration_since(memo.at)),
            ));
        }
        let reason = self.cloud_drift_reason(nodepool, nodeclaim).await?;
        self.cloud_drift = Some(CloudDrift {
            at: now,
            versions,
            reason,
        });
        Ok((reason, DRIFT_RECHECK))
    }

    /// Karpenter's `RequirementsDrifted` of `nodepool`'s requirements against the NodeClaim's
    /// labels, from the last verdict while neither side changed.
    fn requirements_drifted(
        &mut self,
        nodepool: &Arc<karpenter_core::apis::NodePool>,
        pool_requirements: &[NodePoolRequirement],
        claim_labels: &LabelMap,
    ) -> Result<bool, RequirementError> {
        let labels = labels_hash(claim_labels);
        if let Some(memo) = &self.requirements_drift
            && Arc::ptr_eq(&memo.pool, nodepool)
            && memo.labels == labels
        {
            return Ok(memo.drifted);
        }
        let drifted = requirements_drifted(pool_requirements, claim_labels)?;
        self.requirements_drift = Some(RequirementsDrift {
            pool: Arc::clone(nodepool),
            labels,
            drifted,
        });
        Ok(drifted)
    }

    /// `InstanceTypeNotFound` against the pool's instance types, then the cloud provider's
    /// `is_drifted`.
    async fn cloud_drift_reason(
        &self,
        nodepool: &karpenter_core::apis::NodePool,
        nodeclaim: &SlimNodeClaim,
    ) -> Result<Option<&'static str>, CloudProviderError> {
        let types = self.deps.cloud.instance_types(nodepool).await?;
        let empty = LabelMap::default();
        let labels = nodeclaim.metadata.labels.as_ref().unwrap_or(&empty);
        if instance_type_not_found(&types, labels) {
            return Ok(Some(NodePoolDrift::InstanceTypeNotFound.as_str()));
        }
        Ok(self
            .deps
            .cloud
            .is_drifted(nodeclaim)
            .await?
            .map(crate::ports::cloud_provider::DriftReason::as_str))
    }
}

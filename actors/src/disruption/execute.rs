//! The writes of disruption: marking candidates (the `karpenter.sh/disrupted:NoSchedule` taint on
//! the Node, the `DisruptionReason` condition on the NodeClaim), unmarking them when a command
//! fails or a restart left them marked, deleting them once the replacements are up, and
//! publishing the events. Karpenter's `MarkDisrupted`, `state.RequireNoScheduleTaint`,
//! `ClearNodeClaimsCondition` and the queue's deletions.

use k8s_openapi::api::core::v1::Taint;
use tokio::time::Instant;

use super::events::{self, Involved, Pending};
use super::{DisruptionDeps, DisruptionError};
use crate::ports::cluster::ClusterError;
use karpenter_core::apis::condition_set::{ConditionSet, NODECLAIM_DEPENDENTS, ObjectFacts};
use karpenter_core::apis::conditions::nodeclaim as cond;
use karpenter_core::apis::labels;
use karpenter_core::apis::nodepool::DisruptionReason;
use karpenter_core::domain::disruption::CommandCandidate;

/// The taint that keeps new pods off a node being disrupted.
fn disrupted_taint() -> Taint {
    Taint {
        key: labels::DISRUPTED_TAINT.to_owned(),
        effect: "NoSchedule".to_owned(),
        ..Taint::default()
    }
}

fn ignore_not_found<T>(result: Result<T, ClusterError>) -> Result<(), ClusterError> {
    match result {
        Ok(_) | Err(ClusterError::NotFound { .. }) => Ok(()),
        Err(error) => Err(error),
    }
}

impl DisruptionDeps {
    /// Taints a candidate's Node and sets its NodeClaim's `DisruptionReason` condition.
    pub(super) async fn mark(
        &self,
        node: &CommandCandidate,
        reason: DisruptionReason,
    ) -> Result<(), DisruptionError> {
        if self.deps.view.node(&node.name).is_some() {
            let taint = [disrupted_taint()];
            ignore_not_found(self.deps.cluster.taint_node(&node.name, &taint, &[]).await)
                .map_err(|source| DisruptionError::write("tainting node", &node.name, source))?;
        }
        let Some(claim) = self.deps.view.nodeclaim(&node.node_claim) else {
            return Ok(());
        };
        let facts = ObjectFacts::of(&claim.metadata);
        let now = self.deps.clock.now();
        let reason = reason.as_str();
        let change = |status: &mut karpenter_core::apis::NodeClaimStatus| {
            let mut set =
                ConditionSet::new(&mut status.conditions, NODECLAIM_DEPENDENTS, facts, now);
            set.set_true_with_reason(cond::DISRUPTION_REASON, reason, reason);
        };
        ignore_not_found(
            self.deps
                .cluster
                .update_nodeclaim_status(&node.node_claim, &change)
                .await,
        )
        .map_err(|source| {
            DisruptionError::write("marking nodeclaim disrupted", &node.node_claim, source)
        })
    }

    /// Removes the taint (when the Node has it) and the `DisruptionReason` condition (when the
    /// NodeClaim has it). Idempotent.
    pub(super) async fn unmark(&self, node: &str, node_claim: &str) -> Result<(), DisruptionError> {
        if self.deps.view.node(node).is_some_and(|n| n.is_disrupted()) {
            let remove = [labels::DISRUPTED_TAINT.to_owned()];
            ignore_not_found(self.deps.cluster.taint_node(node, &[], &remove).await)
                .map_err(|source| DisruptionError::write("untainting node", node, source))?;
            tracing::info!(
                Node = node,
                taint.Key = labels::DISRUPTED_TAINT,
                taint.Value = "",
                taint.Effect = "NoSchedule",
                "untainted node"
            );
        }
        let has_condition = self.deps.view.nodeclaim(node_claim).is_some_and(|c| {
            c.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == cond::DISRUPTION_REASON)
            })
        });
        if has_condition {
            let change = |status: &mut karpenter_core::apis::NodeClaimStatus| {
                status
                    .conditions
                    .retain(|c| c.type_ != cond::DISRUPTION_REASON);
            };
            ignore_not_found(
                self.deps
                    .cluster
                    .update_nodeclaim_status(node_claim, &change)
                    .await,
            )
            .map_err(|source| {
                DisruptionError::write("clearing the disruption reason", node_claim, source)
            })?;
        }
        Ok(())
    }

    /// Deletes a candidate's NodeClaim (its actor drains and terminates it).
    pub(super) async fn delete_candidate(
        &self,
        node: &CommandCandidate,
    ) -> Result<bool, DisruptionError> {
        match self.deps.cluster.delete_nodeclaim(&node.node_claim).await {
            Ok(_) => Ok(true),
            Err(ClusterError::NotFound { .. }) => Ok(false),
            Err(source) => Err(DisruptionError::write(
                "deleting nodeclaim",
                &node.node_claim,
                source,
            )),
        }
    }

    /// The Node and NodeClaim of a candidate, for events.
    pub(super) fn involved(
        &self,
        node: &str,
        node_claim: Option<&str>,
    ) -> (Option<Involved>, Option<Involved>) {
        let node = self
            .deps
            .view
            .node(node)
            .map(|n| Involved::node(node, n.metadata.uid.clone()));
        let claim = node_claim.map(|name| {
            let uid = self
                .deps
                .view
                .nodeclaim(name)
                .and_then(|c| c.metadata.uid.clone());
            Involved::nodeclaim(name, uid)
        });
        (node, claim)
    }

    /// Publishes the events the dedupe memory lets through, in a task beside the actor (a slow
    /// API server must not hold up the next round).
    pub(super) fn publish(&self, pending: Vec<Pending>, tasks: crate::runtime::Tasks) {
        let now = Instant::now();
        let admitted: Vec<_> = {
            let mut memory = self.shared.lock_events();
            pending
                .into_iter()
                .filter(|event| memory.admit(event, now))
                .map(|event| event.event())
                .collect()
        };
        if admitted.is_empty() {
            return;
        }
        let cluster = std::sync::Arc::clone(&self.deps.cluster);
        tasks.spawn(async move {
            for event in admitted {
                if let Err(error) = cluster.publish_event(&event).await {
                    tracing::debug!(
                        reason = %event.reason,
                        error = crate::logs::err(&error),
                        "failed publishing event"
                    );
                }
            }
        });
    }
}

/// The replacement and candidate events of a finished command.
pub(super) fn terminating_events(
    deps: &DisruptionDeps,
    node: &CommandCandidate,
    reason: &str,
) -> Vec<Pending> {
    let (node_ref, claim_ref) = deps.involved(&node.name, Some(&node.node_claim));
    claim_ref.map_or_else(Vec::new, |claim| {
        events::terminating(node_ref, claim, reason)
    })
}

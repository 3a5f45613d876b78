//! The NodeClaimActor's Node Repair step (Karpenter's `node.health`), run only with the
//! `NodeRepair` feature gate, for a live NodeClaim whose Node exists: the Node's changes come to
//! this actor, so a condition that turns unhealthy is seen at once and the actor looks again the
//! instant its toleration ends ([`karpenter_core::domain::repair::decide`]).
//!
//! Once due, and only on a synced view (the pool's health counts every node of the pool), the
//! NodeClaim is replaced unless more than 20% of its NodePool's nodes (of the cluster's, for a
//! NodeClaim without a pool) are unhealthy: then the Node gets a `NodeRepairBlocked` warning and
//! the actor looks again every minute, since other nodes recover without telling this actor.
//! Otherwise the NodeClaim is annotated `karpenter.sh/nodeclaim-termination-timestamp` = now and
//! deleted. A termination time already past makes the drain (`termination`) delete every pod at
//! once: repair ignores disruption budgets, PodDisruptionBudgets and `do-not-disrupt`, as a node
//! that stopped working serves none of them.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::lifecycle::{Step, until};
use super::termination::rfc3339;
use super::{NodeClaimActor, NodeClaimError, events};
use crate::metrics::{UnhealthyDisruptedLabels, disruption_reason};
use crate::runtime::ActorCtx;
use karpenter_core::apis::labels;
use karpenter_core::apis::{NodeClaim, SlimNode, SlimNodeClaim};
use karpenter_core::domain::repair::{
    self, ALLOWED_UNHEALTHY_PERCENT, Decision, RepairPolicy, Unhealthy,
};

/// While repair is blocked by the pool's health the actor looks again this often: the nodes
/// that recover belong to other actors.
pub const REPAIR_BLOCKED_RECHECK: Duration = Duration::from_mins(1);
/// `NodeRepairBlocked` is published about one node at most this often (Karpenter's dedupe
/// timeout for the event).
pub const REPAIR_BLOCKED_EVENT_INTERVAL: Duration = Duration::from_mins(15);
/// How soon a due repair looks again while the cluster view has not synced: the pool's health
/// cannot be told from a partial list of nodes.
const UNSYNCED_RECHECK: Duration = Duration::from_secs(1);

fn node_label<'a>(node: &'a SlimNode, key: &str) -> &'a str {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map_or("", String::as_str)
}

impl NodeClaimActor {
    /// Replaces the NodeClaim once a condition of its Node has been unhealthy for its
    /// toleration; `Step::Stop` once deleted.
    pub(super) async fn repair(
        &mut self,
        ctx: &mut ActorCtx<Self>,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Step, NodeClaimError> {
        if !self.deps.settings.feature_gates.node_repair
            || nodeclaim.metadata.deletion_timestamp.is_some()
        {
            return Ok(Step::Continue(nodeclaim, None));
        }
        let Some(node) = self.node_of(&nodeclaim) else {
            return Ok(Step::Continue(nodeclaim, None));
        };
        let policies = self.deps.cloud.repair_policies();
        let now = self.now();
        let unhealthy = match repair::decide(&node, &policies, now) {
            Decision::Healthy => return Ok(Step::Continue(nodeclaim, None)),
            Decision::Tolerated(unhealthy) => {
                let left = until(now, unhealthy.repair_at);
                return Ok(Step::Continue(nodeclaim, Some(left)));
            }
            Decision::Due(unhealthy) => unhealthy,
        };
        if !self.deps.view.is_synced() {
            ctx.set_state("waiting for the cluster state to sync");
            return Ok(Step::Continue(nodeclaim, Some(UNSYNCED_RECHECK)));
        }
        if let Some(why) = self.repair_blocked(&nodeclaim, &policies) {
            ctx.set_state("repair blocked");
            tracing::debug!(
                condition = unhealthy.policy.condition_type,
                reason = %why,
                "node repair blocked"
            );
            self.report_repair_blocked(&node, &why).await;
            return Ok(Step::Continue(nodeclaim, Some(REPAIR_BLOCKED_RECHECK)));
        }
        let Some(nodeclaim) = self.annotate_termination_now(nodeclaim, now).await? else {
            return Ok(Step::Stop);
        };
        self.delete_nodeclaim("deleting an unhealthy nodeclaim")
            .await?;
        if !std::mem::replace(&mut self.reported.repaired, true) {
            self.count_repair(&nodeclaim, &node, &unhealthy);
        }
        Ok(Step::Stop)
    }

    /// Why repair must wait: the NodeClaim's NodePool, or the cluster for a NodeClaim without
    /// one, has more unhealthy nodes than [`repair::allowed_unhealthy`] allows.
    fn repair_blocked(
        &self,
        nodeclaim: &SlimNodeClaim,
        policies: &[RepairPolicy],
    ) -> Option<String> {
        let nodes = self.deps.view.nodes();
        let pool = nodeclaim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL));
        let (healthy, scope) = match pool {
            Some(pool) => (
                repair::is_healthy(
                    nodes
                        .iter()
                        .map(AsRef::as_ref)
                        .filter(|node| node_label(node, labels::NODEPOOL) == pool),
                    policies,
                ),
                "nodepool",
            ),
            None => (
                repair::is_healthy(nodes.iter().map(AsRef::as_ref), policies),
                "cluster",
            ),
        };
        (!healthy).then(|| {
            format!("more than {ALLOWED_UNHEALTHY_PERCENT}% nodes are unhealthy in the {scope}")
        })
    }

    /// Publishes `NodeRepairBlocked` on the Node, at most once per
    /// [`REPAIR_BLOCKED_EVENT_INTERVAL`].
    ///
    /// Karpenter v1.5 publishes it on every node of an unhealthy pool, due or not (and once
    /// more per NodeClaim and NodePool); here only a node that is itself due for repair gets
    /// it, once per interval: the event then says "this node would be replaced now", and a
    /// healthy node of a degraded pool is not flagged.
    async fn report_repair_blocked(&mut self, node: &SlimNode, why: &str) {
        let now = Instant::now();
        if self
            .last_repair_blocked_event
            .is_some_and(|last| now.duration_since(last) < REPAIR_BLOCKED_EVENT_INTERVAL)
        {
            return;
        }
        self.last_repair_blocked_event = Some(now);
        self.publish(events::node_repair_blocked(node, why)).await;
    }

    /// Writes `karpenter.sh/nodeclaim-termination-timestamp` = now, unless one already past is
    /// there; `None` when the NodeClaim is gone.
    async fn annotate_termination_now(
        &self,
        nodeclaim: Arc<SlimNodeClaim>,
        now: Timestamp,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        let past = nodeclaim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::NODECLAIM_TERMINATION_TIMESTAMP))
            .and_then(|value| value.parse::<Timestamp>().ok())
            .is_some_and(|at| at < now);
        if past {
            return Ok(Some(nodeclaim));
        }
        let value = rfc3339(now);
        let change = |nodeclaim: &mut NodeClaim| {
            nodeclaim
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(
                    labels::NODECLAIM_TERMINATION_TIMESTAMP.to_owned(),
                    value.clone(),
                );
        };
        let written = self
            .write_nodeclaim(
                &nodeclaim,
                "annotating the termination time of an unhealthy node",
                &change,
            )
            .await?;
        if written.is_some() {
            tracing::info!(
                "karpenter.sh/nodeclaim-termination-timestamp" = %value,
                "annotated nodeclaim"
            );
        }
        Ok(written)
    }

    /// The log line and the two counters of a repair (Karpenter labels both by the Node's pool
    /// and capacity type).
    fn count_repair(&self, nodeclaim: &SlimNodeClaim, node: &SlimNode, unhealthy: &Unhealthy) {
        tracing::debug!(
            condition = unhealthy.policy.condition_type,
            "deleting unhealthy node"
        );
        let nodepool = node_label(node, labels::NODEPOOL);
        let capacity_type = node_label(node, labels::CAPACITY_TYPE);
        self.deps.metrics.nodeclaim_disrupted(
            disruption_reason::UNHEALTHY,
            nodepool,
            capacity_type,
        );
        self.deps
            .metrics
            .nodeclaim_unhealthy_disrupted(&UnhealthyDisruptedLabels {
                condition: repair::snake_case(unhealthy.policy.condition_type),
                nodepool: nodepool.to_owned(),
                capacity_type: capacity_type.to_owned(),
                image_id: nodeclaim
                    .status
                    .as_ref()
                    .and_then(|s| s.image_id.clone())
                    .unwrap_or_default(),
            });
    }
}

//! The NodeClaimActor's part in consolidation, for a live NodeClaim: it records pod events on
//! its node (Karpenter's `nodeclaim.podevents`) and keeps the `Consolidatable` condition
//! (Karpenter's `nodeclaim.disruption` Consolidation), which the disruption round requires of
//! every consolidation candidate.
//!
//! Flow: the daemon sees a pod change that is a pod event (`ClusterChange::Pod::pod_event`) on
//! a node whose NodeClaim is live, marks that NodeClaim in the shared [`PodEvents`] and nudges
//! its actor. The mark, not the message, carries the event: nudges coalesce (one queued per
//! actor, whatever its cause), so a `Reconcile` queued for the node's change would otherwise
//! swallow the pod event's. The actor's next reconcile takes the mark and writes
//! `status.lastPodEventTime` (at most every 10 s,
//! [`karpenter_core::domain::consolidatable::POD_EVENT_DEDUPE`]), then decides the condition
//! ([`karpenter_core::domain::consolidatable::decide`]): removed under `consolidateAfter:
//! Never` or before initialization, removed with a requeue at the exact instant the window
//! ends while pods moved recently, set `True` after. A NodePool change nudges its NodeClaims,
//! so a new `consolidateAfter` applies at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::lifecycle::{Step, condition};
use super::{NodeClaimActor, NodeClaimError, label};
use karpenter_core::apis::conditions::{ConditionStatus, nodeclaim as cond};
use karpenter_core::apis::labels;
use karpenter_core::apis::{NodeClaimStatus, SlimNodeClaim};
use karpenter_core::domain::consolidatable::{self, Inputs, Verdict, pod_event_due};

/// NodeClaims with a pod event that their actor has not recorded yet, by name. The daemon marks
/// ([`PodEvents::mark`]); the NodeClaim's actor takes the mark as it records the event.
#[derive(Debug, Default)]
pub struct PodEvents {
    marked: Mutex<HashSet<String>>,
}

impl PodEvents {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.marked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A pod event happened on the NodeClaim's node.
    pub fn mark(&self, nodeclaim: &str) {
        let mut marked = self.lock();
        if !marked.contains(nodeclaim) {
            marked.insert(nodeclaim.to_owned());
        }
    }

    /// Whether a pod event was marked, unmarking it.
    pub fn take(&self, nodeclaim: &str) -> bool {
        self.lock().remove(nodeclaim)
    }
}

/// The stored `status.lastPodEventTime`.
pub(super) fn last_pod_event(nodeclaim: &SlimNodeClaim) -> Option<k8s_openapi::jiff::Timestamp> {
    nodeclaim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(|t| t.0)
}

impl NodeClaimActor {
    /// Writes `status.lastPodEventTime` if a pod event was marked and the stored one is older
    /// than the dedupe window; `None` when the NodeClaim is gone.
    pub(super) async fn record_pod_event(
        &self,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Option<Arc<SlimNodeClaim>>, NodeClaimError> {
        if !self.pod_events.take(&self.name) {
            return Ok(Some(nodeclaim));
        }
        let now = self.now();
        if !pod_event_due(last_pod_event(&nodeclaim), now) {
            return Ok(Some(nodeclaim));
        }
        let change = |status: &mut NodeClaimStatus| status.last_pod_event_time = Some(Time(now));
        let written = self
            .write_status(&nodeclaim, "recording a pod event", &change)
            .await;
        if written.is_err() {
            // The retry records it.
            self.pod_events.mark(&self.name);
        }
        written
    }

    /// Sets or removes `Consolidatable` from the NodePool's `consolidateAfter`, the
    /// initialization and the last pod event; asks to look again when the window ends.
    pub(super) async fn update_consolidatable(
        &self,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Step, NodeClaimError> {
        // Without its NodePool there is nothing to decide by (Karpenter leaves it as it is).
        let Some(nodepool) = self.deps.view.nodepool(label(&nodeclaim, labels::NODEPOOL)) else {
            return Ok(Step::Continue(nodeclaim, None));
        };
        let consolidate_after = match nodepool.spec.disruption.consolidate_after.get() {
            Ok(after) => after,
            // Validation rejects it and the pool is not ready; consolidate nothing meanwhile.
            Err(error) => {
                tracing::debug!(error = %error, "consolidateAfter does not parse; treating it as Never");
                None
            }
        };
        let initialized_at = condition(&nodeclaim, cond::INITIALIZED)
            .filter(|c| c.status == ConditionStatus::True)
            .map(|c| c.last_transition_time.0);
        let verdict = consolidatable::decide(&Inputs {
            consolidate_after,
            initialized_at,
            last_pod_event: last_pod_event(&nodeclaim),
            now: self.now(),
        });
        let present = condition(&nodeclaim, cond::CONSOLIDATABLE).is_some();
        let written = if verdict.is_consolidatable() {
            let written = self
                .set_conditions(&nodeclaim, "marking the nodeclaim consolidatable", &|set| {
                    set.set_true(cond::CONSOLIDATABLE);
                })
                .await?;
            if !present && written.is_some() {
                tracing::debug!("marking consolidatable");
            }
            written
        } else if present {
            let written = self
                .set_conditions(
                    &nodeclaim,
                    "removing the consolidatable condition",
                    &|set| {
                        set.clear(cond::CONSOLIDATABLE);
                    },
                )
                .await?;
            if written.is_some() {
                let why = match verdict {
                    Verdict::Disabled => ", consolidation is disabled",
                    Verdict::NotInitialized => ", isn't initialized",
                    Verdict::Waiting { .. } | Verdict::Consolidatable => "",
                };
                tracing::debug!("removing consolidatable status condition{why}");
            }
            written
        } else {
            Some(nodeclaim)
        };
        Ok(written.map_or(Step::Stop, |nc| Step::Continue(nc, verdict.recheck())))
    }
}

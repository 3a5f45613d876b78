//! The NodeClaimActor's expiration step (Karpenter's `nodeclaim.expiration`): a live NodeClaim
//! whose `spec.expireAfter` is set (not `Never`) is deleted at its creation plus
//! `expireAfter`, whatever its launch state.
//!
//! Flow: every reconcile of a live NodeClaim computes the deadline; before it, the actor asks
//! to look again at that exact instant; at or after it, the NodeClaim is deleted and its
//! finalizer terminates it (`termination`). Expiration is forceful: no disruption budget
//! applies, but the drain that follows still honours PodDisruptionBudgets and
//! `karpenter.sh/do-not-disrupt` until the NodeClaim's `terminationGracePeriod` runs out. The
//! deletion is counted once per NodeClaim in `karpenter_nodeclaims_disrupted_total{reason=
//! "expired"}` and announced with a `DisruptionTerminating` event.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::lifecycle::{Step, until};
use super::{NodeClaimActor, NodeClaimError, events, label};
use crate::metrics::disruption_reason;
use karpenter_core::apis::SlimNodeClaim;
use karpenter_core::apis::labels;

/// When the NodeClaim expires; `None` when it never does (`Never`, an `expireAfter` that does
/// not parse, no creation time, or a deadline past the end of representable time).
fn expires_at(nodeclaim: &SlimNodeClaim) -> Option<Timestamp> {
    let expire_after: Duration = match nodeclaim.spec.expire_after.get() {
        Ok(after) => after?,
        // Validation rejects it at admission; a NodeClaim that slipped through lives on.
        Err(error) => {
            tracing::debug!(error = %error, "expireAfter does not parse; treating it as Never");
            return None;
        }
    };
    let created = nodeclaim.metadata.creation_timestamp.as_ref()?.0;
    created
        .checked_add(SignedDuration::try_from(expire_after).ok()?)
        .ok()
}

impl NodeClaimActor {
    /// Deletes the NodeClaim once it has expired; until then asks to look again at the
    /// instant it does.
    pub(super) async fn expire(
        &mut self,
        nodeclaim: Arc<SlimNodeClaim>,
    ) -> Result<Step, NodeClaimError> {
        let Some(deadline) = expires_at(&nodeclaim) else {
            return Ok(Step::Continue(nodeclaim, None));
        };
        let now = self.now();
        if now < deadline {
            return Ok(Step::Continue(nodeclaim, Some(until(now, deadline))));
        }
        self.delete_nodeclaim("deleting an expired nodeclaim")
            .await?;
        // Once per NodeClaim: a reconcile on a view that does not show the deletion yet
        // deletes again (harmless) but must not count or announce it twice.
        if !std::mem::replace(&mut self.reported.expired, true) {
            tracing::debug!("deleting expired nodeclaim");
            self.deps.metrics.nodeclaim_disrupted(
                disruption_reason::EXPIRED,
                label(&nodeclaim, labels::NODEPOOL),
                label(&nodeclaim, labels::CAPACITY_TYPE),
            );
            // Karpenter's expiration controller only counts; the event is ours (see
            // `events::expired`).
            self.publish(events::expired(&nodeclaim)).await;
        }
        Ok(Step::Stop)
    }
}

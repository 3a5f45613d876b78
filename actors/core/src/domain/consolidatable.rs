//! When a NodeClaim may be consolidated: Karpenter's `nodeclaim.disruption` Consolidation
//! sub-controller (the `Consolidatable` condition the disruption round filters candidates by)
//! and the dedupe of `nodeclaim.podevents` (how often `status.lastPodEventTime` is written).
//!
//! A NodeClaim is consolidatable once its pods have been still for its NodePool's
//! `consolidateAfter`: counted from its last pod event, or from its initialization when it has
//! had none. The NodeClaim actor reads the inputs, calls [`decide`] and writes the condition
//! (`actors/src/nodeclaim/consolidatable.rs`).

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// A pod event is not recorded while the stored one is younger than this (Karpenter's
/// `dedupeTimeout`): pods bind and go in bursts, and this is shorter than the disruption
/// round's 15 s validation, so a decision made during a dedupe window is still invalidated.
pub const POD_EVENT_DEDUPE: Duration = Duration::from_secs(10);

/// Whether a pod event seen `now` should be written, given the stored `lastPodEventTime`.
#[must_use]
pub fn pod_event_due(last: Option<Timestamp>, now: Timestamp) -> bool {
    match last {
        None => true,
        // A stored time in the future (clock skew) counts as recent, as Karpenter's `Since`.
        Some(last) => now.duration_since(last) >= signed(POD_EVENT_DEDUPE),
    }
}

/// What [`decide`] looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    /// The NodePool's `consolidateAfter`; `None` for `Never`.
    pub consolidate_after: Option<Duration>,
    /// When the `Initialized` condition turned `True` (its `lastTransitionTime`); `None`
    /// while it is not `True`.
    pub initialized_at: Option<Timestamp>,
    /// `status.lastPodEventTime`.
    pub last_pod_event: Option<Timestamp>,
    pub now: Timestamp,
}

/// What to do with the `Consolidatable` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `consolidateAfter: Never`: remove the condition.
    Disabled,
    /// Not `Initialized`: remove the condition.
    NotInitialized,
    /// Its pods moved less than `consolidateAfter` ago: remove the condition and look again
    /// `recheck` from now, the instant it becomes consolidatable (`None` when that instant is
    /// past the end of representable time).
    Waiting { recheck: Option<Duration> },
    /// Set `Consolidatable=True`.
    Consolidatable,
}

impl Verdict {
    /// Whether the condition should be `True` (otherwise it is removed).
    #[must_use]
    pub fn is_consolidatable(self) -> bool {
        self == Self::Consolidatable
    }

    /// When to look again; `None` waits for a change.
    #[must_use]
    pub fn recheck(self) -> Option<Duration> {
        match self {
            Self::Waiting { recheck } => recheck,
            Self::Disabled | Self::NotInitialized | Self::Consolidatable => None,
        }
    }
}

/// Karpenter's rule: disabled by `Never`; not before initialization; then consolidatable once
/// `consolidateAfter` has passed since the last pod event (or the initialization).
#[must_use]
pub fn decide(inputs: &Inputs) -> Verdict {
    let Some(after) = inputs.consolidate_after else {
        return Verdict::Disabled;
    };
    let Some(initialized_at) = inputs.initialized_at else {
        return Verdict::NotInitialized;
    };
    let since = inputs.last_pod_event.unwrap_or(initialized_at);
    let Ok(deadline) = since.checked_add(signed(after)) else {
        return Verdict::Waiting { recheck: None };
    };
    if inputs.now < deadline {
        let left = deadline.duration_since(inputs.now);
        return Verdict::Waiting {
            recheck: Some(Duration::try_from(left).unwrap_or(Duration::MAX)),
        };
    }
    Verdict::Consolidatable
}

/// A std duration as jiff's signed one, saturating (no NodePool waits 292 billion years).
fn signed(duration: Duration) -> SignedDuration {
    SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_750_000_000 + seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn inputs(after: Option<u64>, initialized: Option<i64>, pod_event: Option<i64>) -> Inputs {
        Inputs {
            consolidate_after: after.map(Duration::from_secs),
            initialized_at: initialized.map(at),
            last_pod_event: pod_event.map(at),
            now: at(100),
        }
    }

    #[test]
    fn never_disables_consolidation_whatever_else_holds() {
        assert_eq!(decide(&inputs(None, Some(0), None)), Verdict::Disabled);
        assert_eq!(decide(&inputs(None, None, Some(0))), Verdict::Disabled);
        assert!(!Verdict::Disabled.is_consolidatable());
        assert_eq!(Verdict::Disabled.recheck(), None);
    }

    #[test]
    fn a_nodeclaim_that_is_not_initialized_is_not_consolidatable() {
        assert_eq!(
            decide(&inputs(Some(0), None, Some(0))),
            Verdict::NotInitialized
        );
        assert_eq!(Verdict::NotInitialized.recheck(), None);
    }

    #[test]
    fn without_pod_events_the_window_counts_from_the_initialization() {
        // Initialized at 40, consolidateAfter 90: consolidatable at 130, now is 100.
        let waiting = decide(&inputs(Some(90), Some(40), None));
        assert_eq!(
            waiting,
            Verdict::Waiting {
                recheck: Some(Duration::from_secs(30))
            }
        );
        assert!(!waiting.is_consolidatable());
        assert_eq!(waiting.recheck(), Some(Duration::from_secs(30)));
        assert_eq!(
            decide(&inputs(Some(60), Some(40), None)),
            Verdict::Consolidatable,
            "exactly at the deadline"
        );
        assert_eq!(
            decide(&inputs(Some(0), Some(100), None)),
            Verdict::Consolidatable,
            "0s: at once"
        );
    }

    #[test]
    fn a_pod_event_restarts_the_window() {
        // Initialized long ago, but a pod moved at 95: consolidatable at 95 + 30.
        assert_eq!(
            decide(&inputs(Some(30), Some(0), Some(95))),
            Verdict::Waiting {
                recheck: Some(Duration::from_secs(25))
            }
        );
        assert_eq!(
            decide(&inputs(Some(30), Some(0), Some(70))),
            Verdict::Consolidatable
        );
        assert_eq!(
            decide(&inputs(Some(30), Some(0), Some(60))),
            Verdict::Consolidatable
        );
    }

    #[test]
    fn the_recheck_lands_on_the_exact_instant() {
        let mut input = inputs(Some(30), Some(0), None);
        input.last_pod_event = at(95).checked_add(SignedDuration::from_millis(250)).ok();
        assert_eq!(
            decide(&input),
            Verdict::Waiting {
                recheck: Some(Duration::from_millis(25_250))
            }
        );
    }

    #[test]
    fn a_window_past_the_end_of_time_waits_for_a_change() {
        let mut input = inputs(Some(0), Some(0), None);
        input.consolidate_after = Some(Duration::from_secs(u64::MAX / 4));
        assert_eq!(decide(&input), Verdict::Waiting { recheck: None });
    }

    #[test]
    fn pod_events_are_written_at_most_every_ten_seconds() {
        assert!(pod_event_due(None, at(100)));
        assert!(!pod_event_due(Some(at(95)), at(100)));
        assert!(!pod_event_due(Some(at(91)), at(100)));
        assert!(pod_event_due(Some(at(90)), at(100)));
        assert!(
            !pod_event_due(Some(at(130)), at(100)),
            "a future time is recent"
        );
    }
}

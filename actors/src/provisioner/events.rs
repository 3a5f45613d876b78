//! The events the Provisioner records, with Karpenter's reasons and messages (core
//! `pkg/controllers/provisioning/scheduling/events.go`), and the gate that keeps them from
//! flooding the API server: `Nominated` is rate limited (5 per second, bursts of 10, as
//! Karpenter's `PodNominationRateLimiter`) and deduplicated per pod; `FailedScheduling` is
//! deduplicated per pod and message for 5 minutes; `NoCompatibleInstanceTypes` per NodePool for
//! 1 minute. A run collects its events through [`EventGate::admit`] and publishes them in the
//! background, at most [`MAX_EVENTS_PER_RUN`] per run.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::time::Instant;

use crate::ports::cluster::{ClusterEvent, EventType};

use super::build::PodRef;

/// Karpenter's event reasons.
pub const NOMINATED: &str = "Nominated";
pub const FAILED_SCHEDULING: &str = "FailedScheduling";
pub const NO_COMPATIBLE_INSTANCE_TYPES: &str = "NoCompatibleInstanceTypes";

/// The events.k8s.io `action` of the Provisioner's events.
const ACTION: &str = "Scheduling";

/// Karpenter's `PodFailedToScheduleEvent` dedupe window.
const FAILED_SCHEDULING_DEDUPE: Duration = Duration::from_mins(5);
/// Karpenter's default event dedupe window, used for nominations.
const NOMINATED_DEDUPE: Duration = Duration::from_mins(2);
/// Karpenter's `NoCompatibleInstanceTypes` dedupe window.
const NODEPOOL_DEDUPE: Duration = Duration::from_mins(1);
/// Karpenter's `PodNominationRateLimiter`: 5 nominations per second, bursts of 10.
const NOMINATIONS_PER_SECOND: f64 = 5.0;
const NOMINATION_BURST: f64 = 10.0;
/// Events one run publishes at most; client-go's broadcaster drops beyond its 1000-event queue
/// too. Pods beyond it still get their decision in `explain`.
pub const MAX_EVENTS_PER_RUN: usize = 1000;
/// Most bytes of an event note (events.k8s.io caps `note` at 1 kB).
const MAX_NOTE_BYTES: usize = 1024;
/// Entries the dedupe memory keeps before forgetting the oldest window's worth.
const MAX_REMEMBERED: usize = 100_000;

fn pod_reference(pod: &PodRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: pod.uid.clone(),
        ..ObjectReference::default()
    }
}

fn nodepool_reference(name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("karpenter.sh/v1".to_owned()),
        kind: Some("NodePool".to_owned()),
        name: Some(name.to_owned()),
        uid,
        ..ObjectReference::default()
    }
}

/// Cuts a note to the API's limit at a character boundary, pointing at `explain` for the rest.
fn short_note(note: String, pod: &PodRef) -> String {
    if note.len() <= MAX_NOTE_BYTES {
        return note;
    }
    let tail = format!(" ... (run `karpenter explain pod {}`)", pod.key);
    let mut cut = MAX_NOTE_BYTES.saturating_sub(tail.len());
    while !note.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{tail}", &note[..cut])
}

/// Karpenter's `NominatePodEvent`: `Pod should schedule on: nodeclaim/x, node/y`.
pub(super) fn nominated(
    pod: &PodRef,
    node_claim: Option<&str>,
    node: Option<&str>,
) -> ClusterEvent {
    let mut targets = Vec::new();
    if let Some(claim) = node_claim {
        targets.push(format!("nodeclaim/{claim}"));
    }
    if let Some(node) = node {
        targets.push(format!("node/{node}"));
    }
    ClusterEvent {
        regarding: pod_reference(pod),
        related: None,
        type_: EventType::Normal,
        reason: NOMINATED.to_owned(),
        action: ACTION.to_owned(),
        note: Some(format!("Pod should schedule on: {}", targets.join(", "))),
    }
}

/// Karpenter's `PodFailedToScheduleEvent`: `Failed to schedule pod, <why>`.
pub(super) fn failed_scheduling(pod: &PodRef, why: &str) -> ClusterEvent {
    ClusterEvent {
        regarding: pod_reference(pod),
        related: None,
        type_: EventType::Warning,
        reason: FAILED_SCHEDULING.to_owned(),
        action: ACTION.to_owned(),
        note: Some(short_note(format!("Failed to schedule pod, {why}"), pod)),
    }
}

/// Karpenter's `NoCompatibleInstanceTypes` on a NodePool.
pub(super) fn no_compatible_instance_types(nodepool: &str, uid: Option<String>) -> ClusterEvent {
    ClusterEvent {
        regarding: nodepool_reference(nodepool, uid),
        related: None,
        type_: EventType::Warning,
        reason: NO_COMPATIBLE_INSTANCE_TYPES.to_owned(),
        action: ACTION.to_owned(),
        note: Some(
            "NodePool requirements filtered out all compatible available instance types".to_owned(),
        ),
    }
}

/// Remembers recent events to drop repeats, and rate-limits nominations. Kept across runs (and
/// across restarts of the actor, in its deps); losing it only means a repeated event.
#[derive(Debug)]
pub(super) struct EventGate {
    /// (reason, object key) -> (note, when published).
    recent: HashMap<(String, String), (String, Instant)>,
    tokens: f64,
    refilled: Option<Instant>,
}

impl Default for EventGate {
    fn default() -> Self {
        Self {
            recent: HashMap::new(),
            tokens: NOMINATION_BURST,
            refilled: None,
        }
    }
}

impl EventGate {
    /// Whether to publish `event` about the object `key` now.
    pub(super) fn admit(&mut self, event: &ClusterEvent, key: &str, now: Instant) -> bool {
        let window = match event.reason.as_str() {
            NOMINATED => NOMINATED_DEDUPE,
            FAILED_SCHEDULING => FAILED_SCHEDULING_DEDUPE,
            _ => NODEPOOL_DEDUPE,
        };
        let id = (event.reason.clone(), key.to_owned());
        let note = event.note.clone().unwrap_or_default();
        if let Some((seen, at)) = self.recent.get(&id)
            && *seen == note
            && now.duration_since(*at) < window
        {
            return false;
        }
        if event.reason == NOMINATED && !self.take_token(now) {
            return false;
        }
        if self.recent.len() >= MAX_REMEMBERED {
            self.recent
                .retain(|_, (_, at)| now.duration_since(*at) < FAILED_SCHEDULING_DEDUPE);
        }
        self.recent.insert(id, (note, now));
        true
    }

    fn take_token(&mut self, now: Instant) -> bool {
        if let Some(last) = self.refilled {
            let earned = now.duration_since(last).as_secs_f64() * NOMINATIONS_PER_SECOND;
            self.tokens = (self.tokens + earned).min(NOMINATION_BURST);
        }
        self.refilled = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str) -> PodRef {
        PodRef {
            key: format!("default/{name}"),
            namespace: "default".to_owned(),
            name: name.to_owned(),
            uid: Some(format!("uid-{name}")),
        }
    }

    #[test]
    fn nominations_are_rate_limited_like_karpenters() {
        let mut gate = EventGate::default();
        let now = Instant::now();
        let admitted = (0..30)
            .filter(|i| {
                let p = pod(&format!("p{i}"));
                gate.admit(&nominated(&p, Some("default-abcde"), None), &p.key, now)
            })
            .count();
        assert_eq!(admitted, 10);
        let p = pod("late");
        let later = now + Duration::from_millis(400);
        assert!(gate.admit(&nominated(&p, Some("c"), None), &p.key, later));
    }

    #[test]
    fn a_repeated_failure_is_published_once_per_window() {
        let mut gate = EventGate::default();
        let now = Instant::now();
        let p = pod("web");
        let event = failed_scheduling(&p, "no nodepools found");
        assert!(gate.admit(&event, &p.key, now));
        assert!(!gate.admit(&event, &p.key, now + Duration::from_mins(1)));
        let changed = failed_scheduling(&p, "incompatible with nodepool \"a\", x");
        assert!(gate.admit(&changed, &p.key, now + Duration::from_mins(1)));
        assert!(gate.admit(&changed, &p.key, now + Duration::from_mins(7)));
    }

    #[test]
    fn long_notes_are_cut_and_point_at_explain() {
        let p = pod("web");
        let event = failed_scheduling(&p, &"x".repeat(5000));
        let note = event.note.unwrap_or_default();
        assert!(note.len() <= MAX_NOTE_BYTES);
        assert!(note.ends_with("(run `karpenter explain pod default/web`)"));
    }
}

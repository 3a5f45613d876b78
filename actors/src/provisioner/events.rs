//! The events the Provisioner records, with Karpenter's reasons and messages (core
//! `pkg/controllers/provisioning/scheduling/events.go`), and the gate that keeps them from
//! flooding the API server: `Nominated` is rate limited (5 per second, bursts of 10, as
//! Karpenter's `PodNominationRateLimiter`) and deduplicated per pod; `FailedScheduling` is
//! deduplicated per pod and message for 5 minutes; `NoCompatibleInstanceTypes` per NodePool for
//! 1 minute. A run plans its events as [`Planned`] (the pod, the reason, a note shared by every
//! pod of a NodeClaim), passes them through [`EventGate::admit`] and builds and publishes only
//! those let through, at most [`MAX_EVENTS_PER_RUN`] per run, in the background: at 20,000 pods
//! all but a few nominations are rate limited, so building an event per pod would be wasted.

use std::collections::HashMap;
use std::sync::Arc;
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
        namespace: Some(pod.namespace().to_owned()),
        name: Some(pod.name().to_owned()),
        uid: pod.uid().map(str::to_owned),
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

/// The note of Karpenter's `NominatePodEvent`, `Pod should schedule on: nodeclaim/x, node/y`:
/// the same for every pod going to one NodeClaim or node, so built once for all of them.
pub(super) fn nomination_note(node_claim: Option<&str>, node: Option<&str>) -> Arc<str> {
    let mut targets = Vec::new();
    if let Some(claim) = node_claim {
        targets.push(format!("nodeclaim/{claim}"));
    }
    if let Some(node) = node {
        targets.push(format!("node/{node}"));
    }
    format!("Pod should schedule on: {}", targets.join(", ")).into()
}

/// An event a run means to record, cheap until the [`EventGate`] lets it through.
#[derive(Debug, Clone)]
pub(super) enum Planned<'a> {
    /// Karpenter's `NominatePodEvent`; the note from [`nomination_note`].
    Nominated { pod: &'a PodRef, note: Arc<str> },
    /// Karpenter's `PodFailedToScheduleEvent`: `Failed to schedule pod, <why>`.
    FailedScheduling { pod: &'a PodRef, note: String },
    /// Karpenter's `NoCompatibleInstanceTypes` on a NodePool.
    NoCompatibleInstanceTypes {
        nodepool: String,
        uid: Option<String>,
    },
}

impl<'a> Planned<'a> {
    pub(super) fn nominated(pod: &'a PodRef, note: Arc<str>) -> Self {
        Self::Nominated { pod, note }
    }

    pub(super) fn failed_scheduling(pod: &'a PodRef, why: &str) -> Self {
        Self::FailedScheduling {
            pod,
            note: short_note(format!("Failed to schedule pod, {why}"), pod),
        }
    }

    pub(super) fn no_compatible_instance_types(nodepool: &str, uid: Option<String>) -> Self {
        Self::NoCompatibleInstanceTypes {
            nodepool: nodepool.to_owned(),
            uid,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            Self::Nominated { .. } => NOMINATED,
            Self::FailedScheduling { .. } => FAILED_SCHEDULING,
            Self::NoCompatibleInstanceTypes { .. } => NO_COMPATIBLE_INSTANCE_TYPES,
        }
    }

    /// The key of the object it is about, for dedupe: the pod's `namespace/name`, the
    /// NodePool's name.
    fn key(&self) -> &str {
        match self {
            Self::Nominated { pod, .. } | Self::FailedScheduling { pod, .. } => &pod.key,
            Self::NoCompatibleInstanceTypes { nodepool, .. } => nodepool,
        }
    }

    fn note(&self) -> &str {
        match self {
            Self::Nominated { note, .. } => note,
            Self::FailedScheduling { note, .. } => note,
            Self::NoCompatibleInstanceTypes { .. } => NO_COMPATIBLE_INSTANCE_TYPES_NOTE,
        }
    }

    /// The event to publish.
    pub(super) fn into_event(self) -> ClusterEvent {
        let reason = self.reason();
        let (regarding, type_, note) = match self {
            Self::Nominated { pod, note } => {
                (pod_reference(pod), EventType::Normal, note.to_string())
            }
            Self::FailedScheduling { pod, note } => (pod_reference(pod), EventType::Warning, note),
            Self::NoCompatibleInstanceTypes { nodepool, uid } => (
                nodepool_reference(&nodepool, uid),
                EventType::Warning,
                NO_COMPATIBLE_INSTANCE_TYPES_NOTE.to_owned(),
            ),
        };
        ClusterEvent {
            regarding,
            related: None,
            type_,
            reason: reason.to_owned(),
            action: ACTION.to_owned(),
            note: Some(note),
        }
    }
}

/// The note of `NoCompatibleInstanceTypes`.
const NO_COMPATIBLE_INSTANCE_TYPES_NOTE: &str =
    "NodePool requirements filtered out all compatible available instance types";

/// Remembers recent events to drop repeats, and rate-limits nominations. Kept across runs (and
/// across restarts of the actor, in its deps); losing it only means a repeated event.
#[derive(Debug)]
pub(super) struct EventGate {
    /// Per reason: object key -> (note, when published).
    recent: HashMap<&'static str, HashMap<String, (String, Instant)>>,
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
    /// Whether to publish `event` now. Allocates only for an event it lets through.
    pub(super) fn admit(&mut self, event: &Planned<'_>, now: Instant) -> bool {
        let reason = event.reason();
        let window = match reason {
            NOMINATED => NOMINATED_DEDUPE,
            FAILED_SCHEDULING => FAILED_SCHEDULING_DEDUPE,
            _ => NODEPOOL_DEDUPE,
        };
        let (key, note) = (event.key(), event.note());
        if let Some((seen, at)) = self.recent.get(reason).and_then(|r| r.get(key))
            && seen == note
            && now.duration_since(*at) < window
        {
            return false;
        }
        if reason == NOMINATED && !self.take_token(now) {
            return false;
        }
        if self.recent.values().map(HashMap::len).sum::<usize>() >= MAX_REMEMBERED {
            for recent in self.recent.values_mut() {
                recent.retain(|_, (_, at)| now.duration_since(*at) < FAILED_SCHEDULING_DEDUPE);
            }
        }
        self.recent
            .entry(reason)
            .or_default()
            .insert(key.to_owned(), (note.to_owned(), now));
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
    use karpenter_core::apis::SlimPod;

    use super::*;

    fn pod(name: &str) -> PodRef {
        let mut pod = SlimPod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("default".to_owned());
        pod.metadata.uid = Some(format!("uid-{name}").into());
        PodRef::of(&Arc::new(pod))
    }

    #[test]
    fn nominations_are_rate_limited_like_karpenters() {
        let mut gate = EventGate::default();
        let now = Instant::now();
        let note = nomination_note(Some("default-abcde"), None);
        let admitted = (0..30)
            .filter(|i| {
                let p = pod(&format!("p{i}"));
                gate.admit(&Planned::nominated(&p, note.clone()), now)
            })
            .count();
        assert_eq!(admitted, 10);
        let p = pod("late");
        let later = now + Duration::from_millis(400);
        let event = Planned::nominated(&p, nomination_note(Some("c"), None));
        assert!(gate.admit(&event, later));
        assert_eq!(
            event.into_event().note.as_deref(),
            Some("Pod should schedule on: nodeclaim/c")
        );
    }

    #[test]
    fn a_repeated_failure_is_published_once_per_window() {
        let mut gate = EventGate::default();
        let now = Instant::now();
        let p = pod("web");
        let event = Planned::failed_scheduling(&p, "no nodepools found");
        assert!(gate.admit(&event, now));
        assert!(!gate.admit(&event, now + Duration::from_mins(1)));
        let changed = Planned::failed_scheduling(&p, "incompatible with nodepool \"a\", x");
        assert!(gate.admit(&changed, now + Duration::from_mins(1)));
        assert!(gate.admit(&changed, now + Duration::from_mins(7)));
    }

    #[test]
    fn long_notes_are_cut_and_point_at_explain() {
        let p = pod("web");
        let event = Planned::failed_scheduling(&p, &"x".repeat(5000)).into_event();
        let note = event.note.unwrap_or_default();
        assert!(note.len() <= MAX_NOTE_BYTES);
        assert!(note.ends_with("(run `karpenter explain pod default/web`)"));
    }
}

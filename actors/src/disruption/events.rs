//! The Kubernetes events of disruption, with Karpenter's reasons and messages (core
//! `pkg/controllers/disruption/events/events.go`), and the dedupe memory that keeps a round
//! every 10 s from repeating them: Karpenter's recorder drops an event whose dedupe values it
//! saw within the event's timeout (2 minutes unless the event says otherwise).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::time::Instant;

use crate::ports::cluster::{ClusterEvent, EventType};

pub const DISRUPTION_LAUNCHING: &str = "DisruptionLaunching";
pub const DISRUPTION_WAITING_READINESS: &str = "DisruptionWaitingReadiness";
pub const DISRUPTION_TERMINATING: &str = "DisruptionTerminating";
pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";

/// The events' `action` (the events.k8s.io field Karpenter's recorder leaves to the reason).
const ACTION: &str = "Disrupting";
/// Karpenter's recorder default dedupe window.
const DEFAULT_DEDUPE: Duration = Duration::from_mins(2);
/// `Unconsolidatable` repeats at most every 15 minutes per object.
const UNCONSOLIDATABLE_DEDUPE: Duration = Duration::from_mins(15);
/// A NodePool's `DisruptionBlocked` repeats at most every minute.
const NODEPOOL_BLOCKED_DEDUPE: Duration = Duration::from_mins(1);
/// Entries kept before expired ones are dropped.
const MAX_REMEMBERED: usize = 50_000;

/// An object an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Involved {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub name: String,
    pub uid: Option<String>,
}

impl Involved {
    #[must_use]
    pub fn node(name: &str, uid: Option<String>) -> Self {
        Self {
            api_version: "v1",
            kind: "Node",
            name: name.to_owned(),
            uid,
        }
    }

    #[must_use]
    pub fn nodeclaim(name: &str, uid: Option<String>) -> Self {
        Self {
            api_version: "karpenter.sh/v1",
            kind: "NodeClaim",
            name: name.to_owned(),
            uid,
        }
    }

    #[must_use]
    pub fn nodepool(name: &str, uid: Option<String>) -> Self {
        Self {
            api_version: "karpenter.sh/v1",
            kind: "NodePool",
            name: name.to_owned(),
            uid,
        }
    }

    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.api_version.to_owned()),
            kind: Some(self.kind.to_owned()),
            name: Some(self.name.clone()),
            uid: self.uid.clone(),
            ..ObjectReference::default()
        }
    }

    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.kind,
            self.uid.as_deref().unwrap_or(&self.name)
        )
    }
}

/// One event to publish, with its dedupe window.
#[derive(Debug, Clone)]
pub struct Pending {
    pub about: Involved,
    pub reason: &'static str,
    pub message: String,
    /// Part of the dedupe key besides the object and reason (Karpenter's dedupe values).
    pub dedupe_extra: String,
    pub dedupe: Duration,
}

impl Pending {
    fn new(about: Involved, reason: &'static str, message: String) -> Self {
        Self {
            about,
            reason,
            message,
            dedupe_extra: String::new(),
            dedupe: DEFAULT_DEDUPE,
        }
    }

    /// The event to publish.
    #[must_use]
    pub fn event(&self) -> ClusterEvent {
        ClusterEvent {
            regarding: self.about.reference(),
            related: None,
            type_: EventType::Normal,
            reason: self.reason.to_owned(),
            action: ACTION.to_owned(),
            note: Some(self.message.clone()),
        }
    }
}

/// Go's `cases.Title` of a command reason such as `underutilized/replace`.
fn title(reason: &str) -> String {
    reason
        .split('/')
        .map(|part| {
            let mut chars = part.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect(),
                None => String::new(),
            }
        })
        .collect::<Vec<String>>()
        .join("/")
}

/// `Launching NodeClaim: <Reason/Decision>` on a replacement.
#[must_use]
pub fn launching(nodeclaim: Involved, reason: &str) -> Pending {
    let mut event = Pending::new(
        nodeclaim,
        DISRUPTION_LAUNCHING,
        format!("Launching NodeClaim: {}", title(reason)),
    );
    reason.clone_into(&mut event.dedupe_extra);
    event
}

/// `Waiting on readiness to continue disruption` on a replacement.
#[must_use]
pub fn waiting_on_readiness(nodeclaim: Involved) -> Pending {
    Pending::new(
        nodeclaim,
        DISRUPTION_WAITING_READINESS,
        "Waiting on readiness to continue disruption".to_owned(),
    )
}

/// `Disrupting Node: <Reason/Decision>` and `Disrupting NodeClaim: ...` on a candidate.
#[must_use]
pub fn terminating(node: Option<Involved>, nodeclaim: Involved, reason: &str) -> Vec<Pending> {
    let mut out = Vec::new();
    if let Some(node) = node {
        let mut event = Pending::new(
            node,
            DISRUPTION_TERMINATING,
            format!("Disrupting Node: {}", title(reason)),
        );
        reason.clone_into(&mut event.dedupe_extra);
        out.push(event);
    }
    let mut event = Pending::new(
        nodeclaim,
        DISRUPTION_TERMINATING,
        format!("Disrupting NodeClaim: {}", title(reason)),
    );
    reason.clone_into(&mut event.dedupe_extra);
    out.push(event);
    out
}

/// `Unconsolidatable` on a node and its NodeClaim (15-minute dedupe).
#[must_use]
pub fn unconsolidatable(
    node: Option<Involved>,
    nodeclaim: Option<Involved>,
    message: &str,
) -> Vec<Pending> {
    node.into_iter()
        .chain(nodeclaim)
        .map(|about| {
            let mut event = Pending::new(about, UNCONSOLIDATABLE, message.to_owned());
            event.dedupe = UNCONSOLIDATABLE_DEDUPE;
            event
        })
        .collect()
}

/// `DisruptionBlocked` on a node and its NodeClaim.
#[must_use]
pub fn blocked(node: Option<Involved>, nodeclaim: Option<Involved>, message: &str) -> Vec<Pending> {
    node.into_iter()
        .chain(nodeclaim)
        .map(|about| Pending::new(about, DISRUPTION_BLOCKED, message.to_owned()))
        .collect()
}

/// `DisruptionBlocked` on a NodePool whose budget allows nothing for a reason (1-minute dedupe).
#[must_use]
pub fn nodepool_blocked(nodepool: Involved, message: String, reason: &str) -> Pending {
    let mut event = Pending::new(nodepool, DISRUPTION_BLOCKED, message);
    reason.clone_into(&mut event.dedupe_extra);
    event.dedupe = NODEPOOL_BLOCKED_DEDUPE;
    event
}

/// Recently published events, to drop repeats within their windows.
#[derive(Debug, Default)]
pub struct EventMemory {
    recent: HashMap<(String, &'static str, String), Instant>,
}

impl EventMemory {
    /// Whether to publish `event` now (and remember it if so).
    pub fn admit(&mut self, event: &Pending, now: Instant) -> bool {
        let key = (event.about.key(), event.reason, event.dedupe_extra.clone());
        if let Some(at) = self.recent.get(&key)
            && now.duration_since(*at) < event.dedupe
        {
            return false;
        }
        if self.recent.len() >= MAX_REMEMBERED {
            self.recent
                .retain(|_, at| now.duration_since(*at) < UNCONSOLIDATABLE_DEDUPE);
        }
        self.recent.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_title_the_reason_as_karpenter_does() {
        let event = launching(Involved::nodeclaim("a", None), "underutilized/replace");
        assert_eq!(event.message, "Launching NodeClaim: Underutilized/Replace");
        let events = terminating(
            Some(Involved::node("n", None)),
            Involved::nodeclaim("a", None),
            "empty/delete",
        );
        assert_eq!(events[0].message, "Disrupting Node: Empty/Delete");
        assert_eq!(events[1].message, "Disrupting NodeClaim: Empty/Delete");
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeat_within_the_window_is_dropped() {
        let mut memory = EventMemory::default();
        let event =
            unconsolidatable(Some(Involved::node("n", None)), None, "no cheaper type").remove(0);
        let now = Instant::now();
        assert!(memory.admit(&event, now));
        assert!(!memory.admit(&event, now + Duration::from_mins(14)));
        assert!(memory.admit(&event, now + Duration::from_mins(15)));
    }
}

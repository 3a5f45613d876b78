//! Kubernetes events for parked family members: the runtime knows nothing of Kubernetes, so the
//! daemon gives each per-object family a [`ParkHook`] that records an event on the object the
//! actor owns (the NodeClaim, NodePool or `EC2NodeClass` of the same name) when its group parks
//! the actor after repeated failures, and again when it is retried.
//!
//! Flow: the family's group calls the hook on its own thread ([`ParkNotice`]) → the hook builds
//! the event (the object's uid from the view, when it is still there) → a task publishes it
//! through `ClusterApi`; a failed publish is logged and dropped (an event is best effort, and
//! the registry and `karpenter_actor_parked` show the parking anyway).
//!
//! The note names the failure's kind and the message being handled, not the panic or error text:
//! that may carry raw AWS messages, which belong in logs and `/debug/actors`, not in events
//! anyone who can list events reads.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use crate::ports::cluster::{ClusterApi, ClusterEvent, EventType};
use crate::ports::cluster_view::ClusterView;
use crate::runtime::{ParkChange, ParkHook, ParkNotice, StopReason};
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};

/// Reason of the Warning event when an object's actor is parked.
pub const REASON_PARKED: &str = "ReconcileParked";
/// Reason of the Normal event when a parked actor is retried.
pub const REASON_RETRIED: &str = "ReconcileRetried";

/// The object kinds whose actors the daemon runs in families.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkedObject {
    NodeClaim,
    NodePool,
    EC2NodeClass,
}

impl ParkedObject {
    fn reference(self, view: &dyn ClusterView, name: &str) -> ObjectReference {
        let (api_version, kind, uid) = match self {
            Self::NodeClaim => (
                NodeClaim::api_version(&()),
                NodeClaim::kind(&()),
                view.nodeclaim(name).and_then(|o| o.metadata.uid.clone()),
            ),
            Self::NodePool => (
                NodePool::api_version(&()),
                NodePool::kind(&()),
                view.nodepool(name).and_then(|o| o.metadata.uid.clone()),
            ),
            Self::EC2NodeClass => (
                EC2NodeClass::api_version(&()),
                EC2NodeClass::kind(&()),
                view.ec2nodeclass(name).and_then(|o| o.metadata.uid.clone()),
            ),
        };
        ObjectReference {
            api_version: Some(api_version.into_owned()),
            kind: Some(kind.into_owned()),
            name: Some(name.to_owned()),
            uid,
            ..ObjectReference::default()
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Self::NodeClaim => "NodeClaim",
            Self::NodePool => "NodePool",
            Self::EC2NodeClass => "EC2NodeClass",
        }
    }
}

/// What failed, without the panic payload or error text (see the module docs).
fn failure_summary(reason: &StopReason) -> String {
    match reason {
        StopReason::Panicked { message, .. } => format!("panicked handling {message}"),
        StopReason::Failed { message, error } => {
            let category = error.split_once(':').map_or("error", |(c, _)| c);
            format!("failed handling {message} ({category})")
        }
        StopReason::StartFailed { error } => {
            let category = error.split_once(':').map_or("error", |(c, _)| c);
            format!("failed to start ({category})")
        }
        other => other.category().to_owned(),
    }
}

/// Durations as Kubernetes and Go print them (`5m0s`, `1h0m0s`).
fn go_duration(duration: Duration) -> String {
    let total = duration.as_secs();
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

/// The event for one notice.
#[must_use]
pub fn park_event(
    object: ParkedObject,
    view: &dyn ClusterView,
    notice: &ParkNotice,
) -> ClusterEvent {
    let regarding = object.reference(view, &notice.key);
    let kind = object.kind();
    let name = &notice.key;
    let (type_, reason, action, note) = match &notice.change {
        ParkChange::Parked {
            retry_in,
            failures,
            within,
            parkings,
            reason,
        } => (
            EventType::Warning,
            REASON_PARKED,
            "Parking",
            format!(
                "{kind} {name}: its controller failed {failures} times within {} (last: {}); \
                 not reconciled again for {} (parking {parkings}), other objects are unaffected",
                go_duration(*within),
                failure_summary(reason),
                go_duration(*retry_in),
            ),
        ),
        ParkChange::Unparked { parked_for } => (
            EventType::Normal,
            REASON_RETRIED,
            "Retrying",
            format!(
                "{kind} {name}: reconciling again after {} parked",
                go_duration(*parked_for)
            ),
        ),
    };
    ClusterEvent {
        regarding,
        related: None,
        type_,
        reason: reason.to_owned(),
        action: action.to_owned(),
        note: Some(note),
    }
}

/// A hook that records [`park_event`]s through `cluster`.
#[must_use]
pub fn park_events(
    object: ParkedObject,
    cluster: Arc<dyn ClusterApi>,
    view: Arc<dyn ClusterView>,
) -> ParkHook {
    Arc::new(move |notice: &ParkNotice| {
        let event = park_event(object, view.as_ref(), notice);
        let cluster = Arc::clone(&cluster);
        // The group must not wait on the API server: the write runs beside it.
        tokio::spawn(async move {
            if let Err(error) = cluster.publish_event(&event).await {
                tracing::warn!(
                    reason = %event.reason,
                    error = %error,
                    category = error.category(),
                    "recording a parking event failed"
                );
            }
        });
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryClusterView;

    #[test]
    fn a_parking_event_names_the_object_and_the_failure_without_its_text() {
        let view = MemoryClusterView::new();
        let notice = ParkNotice {
            kind: "NodeClaimActor",
            key: Arc::from("default-x7k2p"),
            change: ParkChange::Parked {
                retry_in: Duration::from_mins(5),
                failures: 6,
                within: Duration::from_mins(1),
                parkings: 1,
                reason: StopReason::Failed {
                    message: "Reconcile".to_owned(),
                    error: "unauthorized: secret AWS text".to_owned(),
                },
            },
        };
        let event = park_event(ParkedObject::NodeClaim, &view, &notice);
        assert_eq!(event.reason, REASON_PARKED);
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.regarding.kind.as_deref(), Some("NodeClaim"));
        assert_eq!(
            event.regarding.api_version.as_deref(),
            Some("karpenter.sh/v1")
        );
        assert_eq!(event.regarding.name.as_deref(), Some("default-x7k2p"));
        let note = event.note.unwrap();
        assert_eq!(
            note,
            "NodeClaim default-x7k2p: its controller failed 6 times within 1m0s (last: failed \
             handling Reconcile (unauthorized)); not reconciled again for 5m0s (parking 1), other \
             objects are unaffected"
        );
        assert!(!note.contains("secret"));
    }

    #[test]
    fn a_retry_event_is_normal() {
        let view = MemoryClusterView::new();
        let notice = ParkNotice {
            kind: "NodePoolActor",
            key: Arc::from("default"),
            change: ParkChange::Unparked {
                parked_for: Duration::from_mins(10),
            },
        };
        let event = park_event(ParkedObject::NodePool, &view, &notice);
        assert_eq!(
            (event.type_, event.reason.as_str()),
            (EventType::Normal, REASON_RETRIED)
        );
        assert_eq!(
            event.note.as_deref(),
            Some("NodePool default: reconciling again after 10m0s parked")
        );
    }
}

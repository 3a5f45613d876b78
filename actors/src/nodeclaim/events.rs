//! The Kubernetes events the NodeClaimActor publishes, with Karpenter's reasons, types and
//! messages (core `pkg/events/reason.go`, `nodeclaim/lifecycle/events.go`,
//! `node/termination/terminator/events`, `node/health/events.go`).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use super::drain::PodKey;
use super::launch::truncate;
use crate::ports::cluster::{ClusterEvent, EventType};
use karpenter_core::apis::{NodeClaim, SlimNode, SlimNodeClaim};

/// Event reasons (Karpenter's).
pub mod reason {
    pub const INSUFFICIENT_CAPACITY_ERROR: &str = "InsufficientCapacityError";
    pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
    pub const UNREGISTERED_TAINT_MISSING: &str = "UnregisteredTaintMissing";
    pub const TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";
    pub const FAILED_DRAINING: &str = "FailedDraining";
    pub const EVICTED: &str = "Evicted";
    pub const DISRUPTED: &str = "Disrupted";
    pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
    pub const DISRUPTION_TERMINATING: &str = crate::disruption::DISRUPTION_TERMINATING;
}

fn nodeclaim_ref(nodeclaim: &SlimNodeClaim) -> ObjectReference {
    ObjectReference {
        api_version: Some(NodeClaim::api_version(&()).into_owned()),
        kind: Some(NodeClaim::kind(&()).into_owned()),
        name: nodeclaim.metadata.name.clone(),
        uid: nodeclaim.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

fn node_ref(node: &SlimNode) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Node".to_owned()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

fn pod_ref(pod: &PodKey) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("Pod".to_owned()),
        name: Some(pod.name.clone()),
        namespace: Some(pod.namespace.clone()),
        uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
        ..ObjectReference::default()
    }
}

fn event(
    regarding: ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) -> ClusterEvent {
    ClusterEvent {
        regarding,
        related: None,
        type_,
        reason: reason.to_owned(),
        action: action.to_owned(),
        note: Some(note),
    }
}

fn name(nodeclaim: &SlimNodeClaim) -> &str {
    nodeclaim.metadata.name.as_deref().unwrap_or_default()
}

/// The launch found no capacity; the NodeClaim is deleted.
#[must_use]
pub fn insufficient_capacity(nodeclaim: &SlimNodeClaim, error: &str) -> ClusterEvent {
    event(
        nodeclaim_ref(nodeclaim),
        EventType::Warning,
        reason::INSUFFICIENT_CAPACITY_ERROR,
        "Launch",
        format!("NodeClaim {} event: {}", name(nodeclaim), truncate(error)),
    )
}

/// The launch found the `NodeClass` not ready; the NodeClaim is deleted.
#[must_use]
pub fn nodeclass_not_ready(nodeclaim: &SlimNodeClaim, error: &str) -> ClusterEvent {
    event(
        nodeclaim_ref(nodeclaim),
        EventType::Warning,
        reason::NODE_CLASS_NOT_READY,
        "Launch",
        format!("NodeClaim {} event: {}", name(nodeclaim), truncate(error)),
    )
}

/// The NodeClaim expired and was deleted. Karpenter's expiration controller only counts the
/// metric; this is our addition, worded as its disruption controller's `DisruptionTerminating`
/// so that `kubectl get events` tells why the node goes away, whichever way it was disrupted.
#[must_use]
pub fn expired(nodeclaim: &SlimNodeClaim) -> ClusterEvent {
    event(
        nodeclaim_ref(nodeclaim),
        EventType::Normal,
        reason::DISRUPTION_TERMINATING,
        "Disrupting",
        "Disrupting NodeClaim: Expired".to_owned(),
    )
}

/// The node registered without the `karpenter.sh/unregistered` taint.
#[must_use]
pub fn unregistered_taint_missing(nodeclaim: &SlimNodeClaim) -> ClusterEvent {
    event(
        nodeclaim_ref(nodeclaim),
        EventType::Warning,
        reason::UNREGISTERED_TAINT_MISSING,
        "Register",
        format!(
            "Missing {} taint which prevents registration related race conditions on Karpenter-managed nodes",
            karpenter_core::apis::labels::UNREGISTERED_TAINT
        ),
    )
}

/// The NodeClaim's pods will be deleted by `deadline`.
#[must_use]
pub fn nodeclaim_grace_period_expiring(nodeclaim: &SlimNodeClaim, deadline: &str) -> ClusterEvent {
    event(
        nodeclaim_ref(nodeclaim),
        EventType::Warning,
        reason::TERMINATION_GRACE_PERIOD_EXPIRING,
        "Terminate",
        format!("All pods will be deleted by {deadline}"),
    )
}

/// The node's pods will be deleted by `deadline`.
#[must_use]
pub fn node_grace_period_expiring(node: &SlimNode, deadline: &str) -> ClusterEvent {
    event(
        node_ref(node),
        EventType::Warning,
        reason::TERMINATION_GRACE_PERIOD_EXPIRING,
        "Terminate",
        format!("All pods will be deleted by {deadline}"),
    )
}

/// The node could not be drained yet.
#[must_use]
pub fn failed_draining(node: &SlimNode, why: &str) -> ClusterEvent {
    event(
        node_ref(node),
        EventType::Warning,
        reason::FAILED_DRAINING,
        "Drain",
        format!("Failed to drain node, {why}"),
    )
}

/// A pod was evicted (`why`: the disruption reason or `Forceful Termination`).
#[must_use]
pub fn evicted(pod: &PodKey, why: &str) -> ClusterEvent {
    event(
        pod_ref(pod),
        EventType::Normal,
        reason::EVICTED,
        "Evict",
        format!("Evicted pod: {why}"),
    )
}

/// A pod was deleted so it terminates before the node's termination time.
#[must_use]
pub fn pod_deleted_for_grace_period(
    pod: &PodKey,
    grace_seconds: i64,
    pod_grace_seconds: i64,
    deadline: &str,
) -> ClusterEvent {
    event(
        pod_ref(pod),
        EventType::Normal,
        reason::DISRUPTED,
        "Delete",
        format!(
            "Deleting the pod to accommodate the terminationTime {deadline} of the node. The pod was granted {grace_seconds} seconds of grace-period of its {pod_grace_seconds} terminationGracePeriodSeconds. This bypasses the PDB of the pod and the do-not-disrupt annotation."
        ),
    )
}

/// Node Repair would replace the node, but too many nodes of its pool (or of the cluster, for a
/// NodeClaim without a pool) are unhealthy.
#[must_use]
pub fn node_repair_blocked(node: &SlimNode, why: &str) -> ClusterEvent {
    event(
        node_ref(node),
        EventType::Warning,
        reason::NODE_REPAIR_BLOCKED,
        "Repair",
        why.to_owned(),
    )
}

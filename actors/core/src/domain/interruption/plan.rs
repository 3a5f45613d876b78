//! What to do about a parsed message: a list of commands for the interruption actor to carry
//! out (reference section 3.2).
//!
//! For each instance the message names, the caller looks up the `NodeClaim` that owns it;
//! unknown instances are ignored. Spot interruptions mark the offering unavailable (so the
//! replacement goes elsewhere) and delete the `NodeClaim`; scheduled changes, stops and
//! terminations delete it; rebalance recommendations only record an event, unless the
//! `NodeClaim`'s pool opted in to proactive replacement.

use super::message::{Kind, Message};
use crate::apis::labels::CAPACITY_TYPE_SPOT;

/// The `NodeClaim` that owns an instance, as far as interruption handling needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClaimRef {
    pub name: String,
    pub nodepool: Option<String>,
    pub node_name: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// Replace on a rebalance recommendation instead of only recording it (the
    /// `INTERRUPTION_REBALANCE_REPLACE` setting, or the pool's opt-in).
    pub replace_on_rebalance: bool,
    /// Already being deleted: the message is recorded (its event, the spot offering marked
    /// unavailable), but the NodeClaim is not deleted or counted again (Karpenter's
    /// `deleteNodeClaim` returns early on a deletion timestamp).
    pub deleting: bool,
}

/// One thing the interruption actor does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Record a Kubernetes event on the `NodeClaim` (and its node, when registered).
    RecordEvent {
        nodeclaim: String,
        node: Option<String>,
        event: Event,
    },
    /// Keep launches away from this spot offering for the ICE cache TTL.
    MarkSpotOfferingUnavailable { instance_type: String, zone: String },
    /// Delete the `NodeClaim`: its actor taints, drains and terminates; the provisioner
    /// replaces the capacity. Counted in `karpenter_nodeclaims_disrupted_total{reason=kind}`.
    DeleteNodeClaim {
        nodeclaim: String,
        nodepool: Option<String>,
        capacity_type: Option<String>,
        kind: Kind,
    },
    /// Launch a replacement first, then delete the `NodeClaim` (rebalance opt-in).
    ReplaceNodeClaim { nodeclaim: String },
}

/// Kubernetes events interruption handling records, with Karpenter's reasons and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    SpotInterrupted,
    SpotRebalanceRecommendation,
    InstanceStopping,
    InstanceTerminating,
    InstanceUnhealthy,
    /// Recorded when the `NodeClaim` is deleted because of an interruption.
    TerminatingOnInterruption,
}

impl Event {
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Self::SpotInterrupted => "SpotInterrupted",
            Self::SpotRebalanceRecommendation => "SpotRebalanceRecommendation",
            Self::InstanceStopping => "InstanceStopping",
            Self::InstanceTerminating => "InstanceTerminating",
            Self::InstanceUnhealthy => "InstanceUnhealthy",
            Self::TerminatingOnInterruption => "TerminatingOnInterruption",
        }
    }

    #[must_use]
    pub fn message(self) -> &'static str {
        match self {
            Self::SpotInterrupted => "Spot interruption warning was triggered",
            Self::SpotRebalanceRecommendation => "Spot rebalance recommendation was triggered",
            Self::InstanceStopping => "Instance is stopping",
            Self::InstanceTerminating => "Instance is terminating",
            Self::InstanceUnhealthy => "An unhealthy warning was triggered for the instance",
            Self::TerminatingOnInterruption => {
                "Interruption triggered termination for the NodeClaim"
            }
        }
    }

    /// `Normal` or `Warning`.
    #[must_use]
    pub fn type_(self) -> &'static str {
        match self {
            Self::SpotRebalanceRecommendation => "Normal",
            _ => "Warning",
        }
    }
}

/// The commands for `message`, looking each instance up with `lookup`.
pub fn plan(message: &Message, lookup: impl Fn(&str) -> Option<NodeClaimRef>) -> Vec<Command> {
    let mut commands = Vec::new();
    for instance_id in &message.instance_ids {
        let Some(claim) = lookup(instance_id) else {
            continue;
        };
        let event = |event| Command::RecordEvent {
            nodeclaim: claim.name.clone(),
            node: claim.node_name.clone(),
            event,
        };
        // Deleting the NodeClaim, announced by `TerminatingOnInterruption`; nothing for one
        // already being deleted.
        let delete = |commands: &mut Vec<Command>| {
            if !claim.deleting {
                commands.push(event(Event::TerminatingOnInterruption));
                commands.push(Command::DeleteNodeClaim {
                    nodeclaim: claim.name.clone(),
                    nodepool: claim.nodepool.clone(),
                    capacity_type: claim.capacity_type.clone(),
                    kind: message.kind,
                });
            }
        };
        match message.kind {
            Kind::SpotInterrupted => {
                commands.push(event(Event::SpotInterrupted));
                let spot = claim
                    .capacity_type
                    .as_deref()
                    .is_none_or(|c| c == CAPACITY_TYPE_SPOT);
                if let (true, Some(instance_type), Some(zone)) =
                    (spot, &claim.instance_type, &claim.zone)
                {
                    commands.push(Command::MarkSpotOfferingUnavailable {
                        instance_type: instance_type.clone(),
                        zone: zone.clone(),
                    });
                }
                delete(&mut commands);
            }
            Kind::RebalanceRecommendation => {
                commands.push(event(Event::SpotRebalanceRecommendation));
                if claim.replace_on_rebalance && !claim.deleting {
                    commands.push(Command::ReplaceNodeClaim {
                        nodeclaim: claim.name.clone(),
                    });
                }
            }
            Kind::ScheduledChange => {
                commands.push(event(Event::InstanceUnhealthy));
                delete(&mut commands);
            }
            Kind::InstanceStopped => {
                commands.push(event(Event::InstanceStopping));
                delete(&mut commands);
            }
            Kind::InstanceTerminated => {
                commands.push(event(Event::InstanceTerminating));
                delete(&mut commands);
            }
            Kind::NoOp => {}
        }
    }
    commands
}

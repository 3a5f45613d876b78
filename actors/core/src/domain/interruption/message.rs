//! The interruption messages EventBridge delivers to the queue, as data: their kind, the
//! instances they name and when the event happened.

use k8s_openapi::jiff::Timestamp;

/// What happened, as Karpenter's `message_type` metric label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `EC2 Spot Instance Interruption Warning`: the instance goes in two minutes.
    SpotInterrupted,
    /// `EC2 Instance Rebalance Recommendation`: the instance is at elevated risk.
    RebalanceRecommendation,
    /// `AWS Health Event` of category `scheduledChange` for EC2: retirement, maintenance.
    ScheduledChange,
    /// `EC2 Instance State-change Notification` to `stopping` or `stopped`.
    InstanceStopped,
    /// `EC2 Instance State-change Notification` to `shutting-down` or `terminated`.
    InstanceTerminated,
    /// Anything else: deleted from the queue without action.
    NoOp,
}

impl Kind {
    /// Every kind, for metric label pre-registration.
    pub const ALL: [Self; 6] = [
        Self::SpotInterrupted,
        Self::RebalanceRecommendation,
        Self::ScheduledChange,
        Self::InstanceStopped,
        Self::InstanceTerminated,
        Self::NoOp,
    ];

    /// The `message_type` label of `karpenter_interruption_received_messages_total`.
    #[must_use]
    pub fn metric_label(self) -> &'static str {
        match self {
            Self::SpotInterrupted => "spot_interrupted",
            Self::RebalanceRecommendation => "rebalance_recommendation",
            Self::ScheduledChange => "scheduled_change",
            Self::InstanceStopped => "instance_stopped",
            Self::InstanceTerminated => "instance_terminated",
            Self::NoOp => "no_op",
        }
    }
}

/// A parsed message: its kind, the EC2 instances it concerns, and its event metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: Kind,
    /// Instance ids (`i-...`) the event is about; empty for [`Kind::NoOp`].
    pub instance_ids: Vec<String>,
    /// EventBridge event id, for logs.
    pub id: String,
    /// When the event happened (the envelope's `time`); drives the queue-duration metric.
    pub time: Option<Timestamp>,
    /// Account that emitted it; moto and some test senders omit it.
    pub account: Option<String>,
    pub region: Option<String>,
    /// For [`Kind::ScheduledChange`]: the Health event type code, e.g.
    /// `AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED`.
    pub event_type_code: Option<String>,
    /// For state changes: the state the instance moved to.
    pub state: Option<String>,
}

impl Message {
    /// A message that needs no action.
    #[must_use]
    pub fn no_op(id: String, time: Option<Timestamp>) -> Self {
        Self {
            kind: Kind::NoOp,
            instance_ids: Vec::new(),
            id,
            time,
            account: None,
            region: None,
            event_type_code: None,
            state: None,
        }
    }
}

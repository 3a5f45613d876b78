//! Interruption metrics with Karpenter's names (reference 6.2), registered once at startup.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_interruption_received_messages_total` | counter | message_type |
//! | `karpenter_interruption_deleted_messages_total` | counter | |
//! | `karpenter_interruption_message_queue_duration_seconds` | histogram | |
//! | `karpenter_interruption_unparseable_messages_total` | counter | reason (ours) |
//! | `karpenter_nodeclaims_disrupted_total` | counter | reason, nodepool, capacity_type |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use karpenter_core::domain::interruption::Kind;

/// Queue-duration buckets in seconds: from a message read at once to one that waited out most
/// of the 5-minute retention.
const QUEUE_DURATION_BUCKETS_SECONDS: [f64; 10] =
    [0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MessageType {
    message_type: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

/// `karpenter_nodeclaims_disrupted_total`'s labels. NodePool names are labels here because
/// Karpenter's dashboards group by them; their number is bounded by the NodePools.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DisruptedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
}

/// The counters and histogram, cheap to clone (shared handles).
#[derive(Debug, Clone)]
pub struct InterruptionMetrics {
    received: Family<MessageType, Counter>,
    pub deleted: Counter,
    pub queue_duration: Histogram,
    unparseable: Family<Reason, Counter>,
    disrupted: Family<DisruptedLabels, Counter>,
}

impl InterruptionMetrics {
    /// Registers the interruption metrics; `disrupted` is the shared
    /// `karpenter_nodeclaims_disrupted_total` family (registered by whoever owns it).
    pub fn register(registry: &mut Registry, disrupted: Family<DisruptedLabels, Counter>) -> Self {
        let metrics = Self::unregistered(disrupted);
        registry.register(
            "karpenter_interruption_received_messages",
            "Interruption messages received, by message type",
            metrics.received.clone(),
        );
        registry.register(
            "karpenter_interruption_deleted_messages",
            "Interruption messages deleted from the queue",
            metrics.deleted.clone(),
        );
        registry.register(
            "karpenter_interruption_message_queue_duration_seconds",
            "Time from the event to its handling",
            metrics.queue_duration.clone(),
        );
        registry.register(
            "karpenter_interruption_unparseable_messages",
            "Interruption messages deleted because they do not parse, by reason",
            metrics.unparseable.clone(),
        );
        metrics
    }

    /// Handles not registered anywhere (tests that read them directly).
    #[must_use]
    pub fn unregistered(disrupted: Family<DisruptedLabels, Counter>) -> Self {
        Self {
            received: Family::default(),
            deleted: Counter::default(),
            queue_duration: Histogram::new(QUEUE_DURATION_BUCKETS_SECONDS),
            unparseable: Family::default(),
            disrupted,
        }
    }

    pub fn received(&self, kind: Kind) {
        self.received
            .get_or_create(&MessageType {
                message_type: kind.metric_label(),
            })
            .inc();
    }

    #[must_use]
    pub fn received_count(&self, kind: Kind) -> u64 {
        self.received
            .get_or_create(&MessageType {
                message_type: kind.metric_label(),
            })
            .get()
    }

    /// NodeClaims this actor counted as disrupted, over every reason, pool and capacity type.
    #[must_use]
    pub fn disrupted_total(&self) -> u64 {
        let mut text = String::new();
        let mut registry = Registry::default();
        registry.register("disrupted", "", self.disrupted.clone());
        if prometheus_client::encoding::text::encode(&mut text, &registry).is_err() {
            return 0;
        }
        text.lines()
            .filter(|line| line.starts_with("disrupted_total{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    pub fn unparseable(&self, reason: &'static str) {
        self.unparseable.get_or_create(&Reason { reason }).inc();
    }

    #[must_use]
    pub fn unparseable_count(&self, reason: &'static str) -> u64 {
        self.unparseable.get_or_create(&Reason { reason }).get()
    }

    pub fn disrupted(&self, kind: Kind, nodepool: Option<&str>, capacity_type: Option<&str>) {
        self.disrupted
            .get_or_create(&DisruptedLabels {
                reason: kind.metric_label().to_owned(),
                nodepool: nodepool.unwrap_or_default().to_owned(),
                capacity_type: capacity_type.unwrap_or_default().to_owned(),
            })
            .inc();
    }
}

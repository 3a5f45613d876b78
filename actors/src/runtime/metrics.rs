//! Family-level actor metrics in a `prometheus-client` Registry, with bounded labels only:
//! `kind` (the actor kind, a type-level constant), `message` (the message type name, a
//! type-level constant, or `build` / `started` for the lifecycle hooks), `reason` (a fixed set)
//! and `supervisor` (a group name, a constant). Keys (object names) never become labels.
//!
//! Handles are cached per kind and per (kind, message) so the hot path increments a counter it
//! already holds instead of hashing a label set per message.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_actor_messages_handled_total` | counter | kind, message |
//! | `karpenter_actor_handler_errors_total` | counter | kind, message |
//! | `karpenter_actor_panics_total` | counter | kind, message |
//! | `karpenter_actor_handler_duration_seconds` | histogram | kind, message |
//! | `karpenter_actor_mailbox_overflows_total` | counter | kind, message |
//! | `karpenter_actor_messages_dropped_total` | counter | kind, message, reason |
//! | `karpenter_actor_restarts_total` | counter | kind |
//! | `karpenter_actor_live_actors` | gauge | kind |
//! | `karpenter_actor_mailbox_depth` | gauge | kind |
//! | `karpenter_actor_supervisor_escalations_total` | counter | supervisor |
//! | `karpenter_actor_parked` | gauge | kind |
//! | `karpenter_actor_parkings_total` | counter | kind |

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Handler duration buckets in seconds: 50 µs (an in-memory update) to 60 s (a handler that
/// waits on a slow AWS call with retries); roughly x2.5 apart so a 2x regression moves a bucket.
pub const HANDLER_DURATION_BUCKETS_SECONDS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0,
    60.0,
];

/// Why a message was not handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types, reason = "the variants are the label values")]
pub enum DropReason {
    /// The actor was stopped (sent to a stopped actor, or still queued when it stopped).
    actor_stopped,
    /// The fault injector dropped it.
    fault_injected,
    /// A timer scheduled by an instance that has since been restarted.
    stale_timer,
    /// The handler was cancelled because the supervisor restarted or stopped the actor.
    interrupted,
    /// Sent to an actor its group parked (it kept failing); see `karpenter_actor_parked`.
    parked,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MessageLabels {
    kind: &'static str,
    message: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DropLabels {
    kind: &'static str,
    message: &'static str,
    reason: DropReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SupervisorLabels {
    supervisor: &'static str,
}

type HistogramFamily = Family<MessageLabels, Histogram, fn() -> Histogram>;

fn handler_histogram() -> Histogram {
    Histogram::new(HANDLER_DURATION_BUCKETS_SECONDS)
}

/// The actor metric families, registered once at startup and passed down in the kit.
#[derive(Debug)]
pub struct ActorMetrics {
    handled: Family<MessageLabels, Counter>,
    errors: Family<MessageLabels, Counter>,
    panics: Family<MessageLabels, Counter>,
    duration: HistogramFamily,
    overflows: Family<MessageLabels, Counter>,
    dropped: Family<DropLabels, Counter>,
    restarts: Family<KindLabels, Counter>,
    live: Family<KindLabels, Gauge>,
    depth: Family<KindLabels, Gauge>,
    escalations: Family<SupervisorLabels, Counter>,
    parked: Family<KindLabels, Gauge>,
    parkings: Family<KindLabels, Counter>,
    kinds: Mutex<HashMap<&'static str, Arc<KindMetrics>>>,
    messages: Mutex<HashMap<(&'static str, &'static str), Arc<MessageMetrics>>>,
}

/// Cached per-kind handles.
#[derive(Debug)]
pub(crate) struct KindMetrics {
    pub(crate) restarts: Counter,
    pub(crate) live: Gauge,
    pub(crate) depth: Gauge,
    pub(crate) parked: Gauge,
    pub(crate) parkings: Counter,
}

/// Cached per-(kind, message) handles.
#[derive(Debug)]
pub(crate) struct MessageMetrics {
    pub(crate) handled: Counter,
    pub(crate) errors: Counter,
    pub(crate) panics: Counter,
    pub(crate) duration: Histogram,
    pub(crate) overflows: Counter,
}

impl ActorMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            handled: Family::default(),
            errors: Family::default(),
            panics: Family::default(),
            duration: Family::new_with_constructor(handler_histogram),
            overflows: Family::default(),
            dropped: Family::default(),
            restarts: Family::default(),
            live: Family::default(),
            depth: Family::default(),
            escalations: Family::default(),
            parked: Family::default(),
            parkings: Family::default(),
            kinds: Mutex::default(),
            messages: Mutex::default(),
        };
        registry.register(
            "karpenter_actor_messages_handled",
            "Messages that reached an actor's handler (whatever the outcome), by actor kind and message type",
            metrics.handled.clone(),
        );
        registry.register(
            "karpenter_actor_handler_errors",
            "Handler or start errors returned by actors, by actor kind and message type",
            metrics.errors.clone(),
        );
        registry.register(
            "karpenter_actor_panics",
            "Panics caught in actor handlers and lifecycle hooks, by actor kind and message type",
            metrics.panics.clone(),
        );
        registry.register(
            "karpenter_actor_handler_duration_seconds",
            "Time from a handler's start to its reply, by actor kind and message type",
            metrics.duration.clone(),
        );
        registry.register(
            "karpenter_actor_mailbox_overflows",
            "Events rejected because the actor's mailbox was full, by actor kind and message type",
            metrics.overflows.clone(),
        );
        registry.register(
            "karpenter_actor_messages_dropped",
            "Messages never handled, by actor kind, message type and reason",
            metrics.dropped.clone(),
        );
        registry.register(
            "karpenter_actor_restarts",
            "Actor instances restarted by their supervisor, by actor kind",
            metrics.restarts.clone(),
        );
        registry.register(
            "karpenter_actor_live_actors",
            "Actors currently registered, by actor kind",
            metrics.live.clone(),
        );
        registry.register(
            "karpenter_actor_mailbox_depth",
            "Messages queued in the mailboxes of all actors of a kind",
            metrics.depth.clone(),
        );
        registry.register(
            "karpenter_actor_supervisor_escalations",
            "Times a supervisor group exceeded its restart intensity and escalated to its parent",
            metrics.escalations.clone(),
        );
        registry.register(
            "karpenter_actor_parked",
            "Actors parked now by their family's supervisor because they kept failing, by actor kind",
            metrics.parked.clone(),
        );
        registry.register(
            "karpenter_actor_parkings",
            "Times a family's supervisor parked a member that kept failing, by actor kind",
            metrics.parkings.clone(),
        );
        metrics
    }

    pub(crate) fn kind(&self, kind: &'static str) -> Arc<KindMetrics> {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(kinds.entry(kind).or_insert_with(|| {
            let labels = KindLabels { kind };
            Arc::new(KindMetrics {
                restarts: self.restarts.get_or_create_owned(&labels),
                live: self.live.get_or_create_owned(&labels),
                depth: self.depth.get_or_create_owned(&labels),
                parked: self.parked.get_or_create_owned(&labels),
                parkings: self.parkings.get_or_create_owned(&labels),
            })
        }))
    }

    pub(crate) fn message(&self, kind: &'static str, message: &'static str) -> Arc<MessageMetrics> {
        let mut messages = self.messages.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(messages.entry((kind, message)).or_insert_with(|| {
            let labels = MessageLabels { kind, message };
            Arc::new(MessageMetrics {
                handled: self.handled.get_or_create_owned(&labels),
                errors: self.errors.get_or_create_owned(&labels),
                panics: self.panics.get_or_create_owned(&labels),
                duration: self.duration.get_or_create_owned(&labels),
                overflows: self.overflows.get_or_create_owned(&labels),
            })
        }))
    }

    pub(crate) fn dropped(&self, kind: &'static str, message: &'static str, reason: DropReason) {
        self.dropped
            .get_or_create(&DropLabels {
                kind,
                message,
                reason,
            })
            .inc();
    }

    pub(crate) fn escalated(&self, supervisor: &'static str) {
        self.escalations
            .get_or_create(&SupervisorLabels { supervisor })
            .inc();
    }
}

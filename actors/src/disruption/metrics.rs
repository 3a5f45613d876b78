//! Karpenter's voluntary disruption metrics (core `pkg/controllers/disruption/metrics.go` and
//! `orchestration`), registered once into the daemon's Registry and passed to the disruption
//! actor in its deps.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_voluntary_disruption_decision_evaluation_duration_seconds` | histogram | reason, `consolidation_type` |
//! | `karpenter_voluntary_disruption_decisions_total` | counter | decision, reason, `consolidation_type` |
//! | `karpenter_voluntary_disruption_eligible_nodes` | gauge | reason |
//! | `karpenter_voluntary_disruption_consolidation_timeouts_total` | counter | `consolidation_type` |
//! | `karpenter_voluntary_disruption_failed_validations_total` | counter | `consolidation_type` |
//! | `karpenter_voluntary_disruption_queue_failures_total` | counter | decision, reason, `consolidation_type` |
//! | `karpenter_nodepools_allowed_disruptions` | gauge | nodepool, reason |
//!
//! `karpenter_nodeclaims_disrupted_total` is the shared family of [`crate::metrics::Metrics`].

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::provisioner::DURATION_BUCKETS_SECONDS;
use karpenter_core::domain::disruption::Method;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MethodLabels {
    reason: &'static str,
    consolidation_type: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    decision: &'static str,
    reason: &'static str,
    consolidation_type: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TypeLabels {
    consolidation_type: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PoolReasonLabels {
    nodepool: String,
    reason: &'static str,
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS_SECONDS)
}

/// The disruption actor's metric families; cheap to clone (every family is shared).
#[derive(Debug, Clone)]
pub struct DisruptionMetrics {
    evaluation: Family<MethodLabels, Histogram, fn() -> Histogram>,
    decisions: Family<DecisionLabels, Counter>,
    eligible: Family<ReasonLabels, Gauge>,
    timeouts: Family<TypeLabels, Counter>,
    failed_validations: Family<TypeLabels, Counter>,
    queue_failures: Family<DecisionLabels, Counter>,
    allowed: Family<PoolReasonLabels, Gauge>,
}

impl Default for DisruptionMetrics {
    /// Unregistered families (tests).
    fn default() -> Self {
        Self {
            evaluation: Family::new_with_constructor(duration_histogram),
            decisions: Family::default(),
            eligible: Family::default(),
            timeouts: Family::default(),
            failed_validations: Family::default(),
            queue_failures: Family::default(),
            allowed: Family::default(),
        }
    }
}

impl DisruptionMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            "Duration of the disruption decision evaluation process in seconds. Labeled by method and consolidation type.",
            metrics.evaluation.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_decisions",
            "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
            metrics.decisions.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_eligible_nodes",
            "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
            metrics.eligible.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_consolidation_timeouts",
            "Number of times the Consolidation algorithm has reached a timeout. Labeled by consolidation type.",
            metrics.timeouts.clone(),
        );
        // At zero from the start, as Karpenter's single- and multi-node consolidations set them.
        for consolidation_type in ["single", "multi"] {
            let _ = metrics
                .timeouts
                .get_or_create(&TypeLabels { consolidation_type });
        }
        registry.register(
            "karpenter_voluntary_disruption_failed_validations",
            "Number of candidates that were selected for disruption but failed validation. Labeled by consolidation type.",
            metrics.failed_validations.clone(),
        );
        registry.register(
            "karpenter_voluntary_disruption_queue_failures",
            "The number of times that an enqueued disruption decision failed. Labeled by disruption method.",
            metrics.queue_failures.clone(),
        );
        registry.register(
            "karpenter_nodepools_allowed_disruptions",
            "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by NodePool. Note that allowed disruptions can change very rapidly, as new nodes may be created and others may be deleted at any point.",
            metrics.allowed.clone(),
        );
        metrics
    }

    fn decision_labels(method: Method, decision: &'static str) -> DecisionLabels {
        DecisionLabels {
            decision,
            reason: method.reason_label(),
            consolidation_type: method.consolidation_type(),
        }
    }

    fn method_labels(method: Method) -> MethodLabels {
        MethodLabels {
            reason: method.reason_label(),
            consolidation_type: method.consolidation_type(),
        }
    }

    pub(super) fn observe_evaluation(&self, method: Method, took: Duration) {
        self.evaluation
            .get_or_create(&Self::method_labels(method))
            .observe(took.as_secs_f64());
    }

    pub(super) fn count_decision(&self, method: Method, decision: &'static str) {
        self.decisions
            .get_or_create(&Self::decision_labels(method, decision))
            .inc();
    }

    pub(super) fn set_eligible(&self, method: Method, nodes: usize) {
        self.eligible
            .get_or_create(&ReasonLabels {
                reason: method.reason_label(),
            })
            .set(i64::try_from(nodes).unwrap_or(i64::MAX));
    }

    pub(super) fn count_timeout(&self, method: Method) {
        self.timeouts
            .get_or_create(&TypeLabels {
                consolidation_type: method.consolidation_type(),
            })
            .inc();
    }

    pub(super) fn count_failed_validations(&self, method: Method, candidates: usize) {
        self.failed_validations
            .get_or_create(&TypeLabels {
                consolidation_type: method.consolidation_type(),
            })
            .inc_by(u64::try_from(candidates).unwrap_or(u64::MAX));
    }

    pub(super) fn count_queue_failures(
        &self,
        method: Method,
        decision: &'static str,
        launches: usize,
    ) {
        self.queue_failures
            .get_or_create(&Self::decision_labels(method, decision))
            .inc_by(u64::try_from(launches).unwrap_or(u64::MAX));
    }

    pub(super) fn set_allowed(&self, nodepool: &str, method: Method, allowed: i64) {
        self.allowed
            .get_or_create(&PoolReasonLabels {
                nodepool: nodepool.to_owned(),
                reason: method.reason_label(),
            })
            .set(allowed);
    }

    /// Decisions performed so far with these labels (tests and the simulation report).
    #[must_use]
    pub fn decisions_count(&self, method: Method, decision: &'static str) -> u64 {
        self.decisions
            .get_or_create(&Self::decision_labels(method, decision))
            .get()
    }

    /// Queue failures so far with these labels.
    #[must_use]
    pub fn queue_failures_count(&self, method: Method, decision: &'static str) -> u64 {
        self.queue_failures
            .get_or_create(&Self::decision_labels(method, decision))
            .get()
    }

    /// Failed validations so far for the method's consolidation type.
    #[must_use]
    pub fn failed_validations_count(&self, method: Method) -> u64 {
        self.failed_validations
            .get_or_create(&TypeLabels {
                consolidation_type: method.consolidation_type(),
            })
            .get()
    }

    /// The allowed disruptions gauge of a pool and method reason.
    #[must_use]
    pub fn allowed_disruptions(&self, nodepool: &str, method: Method) -> i64 {
        self.allowed
            .get_or_create(&PoolReasonLabels {
                nodepool: nodepool.to_owned(),
                reason: method.reason_label(),
            })
            .get()
    }
}

//! Karpenter's scheduler and provisioning metrics (reference section 6.1), registered once into
//! the daemon's Registry and passed to the Provisioner in its deps.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_scheduler_scheduling_duration_seconds` | histogram | controller |
//! | `karpenter_scheduler_queue_depth` | gauge | controller, `scheduling_id` (removed when the solve ends) |
//! | `karpenter_scheduler_unschedulable_pods_count` | gauge | controller |
//! | `karpenter_scheduler_ignored_pods_count` | gauge | |
//! | `karpenter_nodeclaims_created_total` | counter | reason, nodepool, `capacity_type` (the shared family) |
//! | `karpenter_pods_scheduling_decision_duration_seconds` | histogram | |
//!
//! `controller` is always `provisioner` here (the disruption simulations use their own);
//! `scheduling_id` is the run number, present only while that run solves.

use crate::pod_times::PodSchedulingTimes;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::metrics::CreatedLabels;

/// The `controller` label of the Provisioner's scheduler metrics.
pub const CONTROLLER: &str = "provisioner";
/// The `reason` label of NodeClaims the Provisioner creates.
pub const PROVISIONED_REASON: &str = "provisioned";

/// Karpenter's `DurationBuckets` (controller-runtime's, extended to 600 s for singletons).
pub const DURATION_BUCKETS_SECONDS: [f64; 45] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SchedulingLabels {
    controller: &'static str,
    scheduling_id: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS_SECONDS)
}

/// The Provisioner's metric families; cheap to clone (every family is shared).
#[derive(Debug, Clone)]
pub struct ProvisionerMetrics {
    scheduling_duration: HistogramFamily<ControllerLabels>,
    queue_depth: Family<SchedulingLabels, Gauge>,
    unschedulable: Family<ControllerLabels, Gauge>,
    ignored: Gauge,
    created: Family<CreatedLabels, Counter>,
    decision_duration: Histogram,
    /// When pods were first seen and first placed, for the pod gauges
    /// ([`crate::metrics::Metrics::pod_times`] in the daemon; a table of its own otherwise).
    pub(crate) pod_times: PodSchedulingTimes,
}

impl ProvisionerMetrics {
    /// Records pod times into the daemon's shared table.
    #[must_use]
    pub fn with_pod_times(mut self, pod_times: PodSchedulingTimes) -> Self {
        self.pod_times = pod_times;
        self
    }

    /// Creates the Provisioner's families and registers them in `registry`; `created` is the
    /// shared `karpenter_nodeclaims_created_total` family
    /// ([`crate::metrics::Metrics::nodeclaims_created`], registered by its owner).
    pub fn register(registry: &mut Registry, created: Family<CreatedLabels, Counter>) -> Self {
        let metrics = Self {
            scheduling_duration: Family::new_with_constructor(duration_histogram),
            queue_depth: Family::default(),
            unschedulable: Family::default(),
            ignored: Gauge::default(),
            created,
            decision_duration: duration_histogram(),
            pod_times: PodSchedulingTimes::default(),
        };
        registry.register(
            "karpenter_scheduler_scheduling_duration_seconds",
            "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
            metrics.scheduling_duration.clone(),
        );
        registry.register(
            "karpenter_scheduler_queue_depth",
            "The number of pods currently waiting to be scheduled.",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "karpenter_scheduler_unschedulable_pods_count",
            "The number of unschedulable Pods.",
            metrics.unschedulable.clone(),
        );
        registry.register(
            "karpenter_scheduler_ignored_pods_count",
            "Number of pods ignored during scheduling by Karpenter",
            metrics.ignored.clone(),
        );
        registry.register(
            "karpenter_pods_scheduling_decision_duration_seconds",
            "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
            metrics.decision_duration.clone(),
        );
        metrics
    }

    pub(super) fn observe_scheduling(&self, took: Duration) {
        self.scheduling_duration
            .get_or_create(&ControllerLabels {
                controller: CONTROLLER,
            })
            .observe(took.as_secs_f64());
    }

    pub(super) fn set_queue_depth(&self, run: u64, pods: usize) {
        self.queue_depth
            .get_or_create(&SchedulingLabels {
                controller: CONTROLLER,
                scheduling_id: run.to_string(),
            })
            .set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    pub(super) fn clear_queue_depth(&self, run: u64) {
        self.queue_depth.remove(&SchedulingLabels {
            controller: CONTROLLER,
            scheduling_id: run.to_string(),
        });
    }

    pub(super) fn set_unschedulable(&self, pods: usize) {
        self.unschedulable
            .get_or_create(&ControllerLabels {
                controller: CONTROLLER,
            })
            .set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    pub(super) fn set_ignored(&self, pods: usize) {
        self.ignored.set(i64::try_from(pods).unwrap_or(i64::MAX));
    }

    pub(super) fn count_created(&self, nodepool: &str, capacity_type: &str) {
        self.count_created_for(PROVISIONED_REASON, nodepool, capacity_type);
    }

    /// `karpenter_nodeclaims_created_total` with another reason (disruption replacements are
    /// created with the disruption reason, as Karpenter's `CreateNodeClaims(WithReason)`).
    pub(super) fn count_created_for(&self, reason: &str, nodepool: &str, capacity_type: &str) {
        self.created
            .get_or_create(&CreatedLabels {
                reason: reason.to_owned(),
                nodepool: nodepool.to_owned(),
                capacity_type: capacity_type.to_owned(),
            })
            .inc();
    }

    pub(super) fn observe_decision(&self, waited: Duration) {
        self.decision_duration.observe(waited.as_secs_f64());
    }
}

//! Karpenter's core Prometheus metrics (reference 6.1) for the node lifecycle: NodeClaims
//! created, terminated and disrupted, node registration, draining and termination, evictions.
//! Names and label names are Karpenter's so its dashboards keep working.
//! `karpenter_nodeclaims_disrupted_total` is shared: the lifecycle actors, the garbage
//! collector and the interruption actor all count into the one family registered here;
//! `karpenter_nodeclaims_created_total` too (the Provisioner, later the disruption actor).
//!
//! One [`Metrics`] is registered into the daemon's `prometheus-client` Registry at startup and
//! passed down in [`crate::deps::Deps`]; actors record through its methods. Labels come from
//! bounded sets: NodePool names (Karpenter labels by them too), capacity types, reasons from a
//! fixed list and HTTP status codes. Tests use [`Metrics::default`], registered nowhere.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_nodeclaims_created_total` | counter | `reason`, `nodepool`, `capacity_type` |
//! | `karpenter_nodeclaims_terminated_total` | counter | `nodepool`, `capacity_type` |
//! | `karpenter_nodeclaims_disrupted_total` | counter | `reason`, `nodepool`, `capacity_type` |
//! | `karpenter_nodeclaims_unhealthy_disrupted_total` | counter | `condition`, `nodepool`, `capacity_type`, `image_id` |
//! | `karpenter_nodeclaims_termination_duration_seconds` | histogram | nodepool |
//! | `karpenter_nodeclaims_instance_termination_duration_seconds` | histogram | nodepool |
//! | `karpenter_nodes_created_total` | counter | nodepool |
//! | `karpenter_nodes_terminated_total` | counter | nodepool |
//! | `karpenter_nodes_termination_duration_seconds` | summary | nodepool |
//! | `karpenter_nodes_lifetime_duration_seconds` | histogram | nodepool |
//! | `karpenter_nodes_drained_total` | counter | nodepool |
//! | `karpenter_nodes_eviction_requests_total` | counter | code |
//! | `karpenter_pods_pods_drained_total` | counter | reason |
//!
//! `karpenter_nodes_termination_duration_seconds` is a summary, as Karpenter's (its performance
//! dashboard reads its `quantile` series); `prometheus-client` has no summary type, so it is a
//! [`Summary`] outside the Registry that `/metrics` appends ([`Metrics::text_families`]).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use crate::interruption::metrics::DisruptedLabels;
use crate::pod_times::PodSchedulingTimes;
use crate::summary::{Summary, TextFamily};

/// `reason` of `karpenter_nodeclaims_disrupted_total` for the disruptions this crate causes.
pub mod disruption_reason {
    /// The launch found no capacity.
    pub const INSUFFICIENT_CAPACITY: &str = "insufficient_capacity";
    /// The launch found its `NodeClass` not ready.
    pub const NODECLASS_NOT_READY: &str = "nodeclass_not_ready";
    /// The node did not register within 15 minutes of the launch.
    pub const LIVENESS: &str = "liveness";
    /// The instance vanished while the NodeClaim was registered.
    pub const GARBAGE_COLLECTED: &str = "garbage_collected";
    /// Node Repair replaced a node whose conditions stayed unhealthy past their toleration.
    pub const UNHEALTHY: &str = "unhealthy";
    /// The NodeClaim lived past its `expireAfter` (Karpenter lowercases its `Expired`).
    pub const EXPIRED: &str = "expired";
}

/// `reason` of `karpenter_pods_pods_drained_total` when the NodeClaim has no `DisruptionReason`.
pub const FORCEFUL_TERMINATION: &str = "Forceful Termination";

/// Prometheus' default histogram buckets (`prometheus.DefBuckets`), which Karpenter keeps for
/// its cloud provider call durations and operatorpkg for its status-condition histograms.
pub const DEFAULT_BUCKETS_SECONDS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Seconds buckets of the NodeClaim termination histogram: 1 s to 2048 s, doubling (Karpenter).
const NODECLAIM_TERMINATION_BUCKETS: u16 = 12;
/// Seconds buckets of the instance termination histogram: 1 s to 1024 s, doubling (Karpenter).
const INSTANCE_TERMINATION_BUCKETS: u16 = 11;
const MINUTE: f64 = 60.0;
const HOUR: f64 = 60.0 * MINUTE;
const DAY: f64 = 24.0 * HOUR;
/// Node lifetime buckets: Karpenter's, from 15 minutes to 30 days.
const LIFETIME_BUCKETS_SECONDS: [f64; 21] = [
    15.0 * MINUTE,
    30.0 * MINUTE,
    45.0 * MINUTE,
    HOUR,
    2.0 * HOUR,
    4.0 * HOUR,
    6.0 * HOUR,
    8.0 * HOUR,
    10.0 * HOUR,
    12.0 * HOUR,
    16.0 * HOUR,
    20.0 * HOUR,
    DAY,
    2.0 * DAY,
    3.0 * DAY,
    5.0 * DAY,
    10.0 * DAY,
    15.0 * DAY,
    20.0 * DAY,
    25.0 * DAY,
    30.0 * DAY,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PoolLabels {
    nodepool: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PoolCapacityLabels {
    nodepool: String,
    capacity_type: String,
}

/// `karpenter_nodeclaims_created_total`'s labels: `reason` is `provisioned` or the disruption
/// reason of a replacement; NodePool names are bounded by the NodePools.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CreatedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
}

/// `karpenter_nodeclaims_unhealthy_disrupted_total`'s labels: `condition` is a repair policy's
/// condition type in snake case (a handful per cloud provider), `image_id` the NodeClaim's AMI
/// (bounded by the AMIs the classes select; Karpenter labels by it too).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct UnhealthyDisruptedLabels {
    pub condition: String,
    pub nodepool: String,
    pub capacity_type: String,
    pub image_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

type HistogramFamily = Family<PoolLabels, Histogram, fn() -> Histogram>;

fn nodeclaim_termination_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, NODECLAIM_TERMINATION_BUCKETS))
}

fn instance_termination_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, INSTANCE_TERMINATION_BUCKETS))
}

fn lifetime_histogram() -> Histogram {
    Histogram::new(LIFETIME_BUCKETS_SECONDS)
}

/// The node-lifecycle metric families.
#[derive(Debug, Clone)]
pub struct Metrics {
    nodeclaims_created: Family<CreatedLabels, Counter>,
    nodeclaims_terminated: Family<PoolCapacityLabels, Counter>,
    nodeclaims_disrupted: Family<DisruptedLabels, Counter>,
    nodeclaims_unhealthy_disrupted: Family<UnhealthyDisruptedLabels, Counter>,
    nodeclaims_termination_duration: HistogramFamily,
    nodeclaims_instance_termination_duration: HistogramFamily,
    nodes_created: Family<PoolLabels, Counter>,
    nodes_terminated: Family<PoolLabels, Counter>,
    nodes_termination_duration: Summary,
    nodes_lifetime_duration: HistogramFamily,
    nodes_drained: Family<PoolLabels, Counter>,
    nodes_eviction_requests: Family<CodeLabels, Counter>,
    pods_drained: Family<ReasonLabels, Counter>,
    /// When the Provisioner first saw and first placed each pending pod (not a family: read by
    /// the pod gauges for the `karpenter_pods_provisioning_*` families).
    pub pod_times: PodSchedulingTimes,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            nodeclaims_created: Family::default(),
            nodeclaims_terminated: Family::default(),
            nodeclaims_disrupted: Family::default(),
            nodeclaims_unhealthy_disrupted: Family::default(),
            nodeclaims_termination_duration: Family::new_with_constructor(
                nodeclaim_termination_histogram,
            ),
            nodeclaims_instance_termination_duration: Family::new_with_constructor(
                instance_termination_histogram,
            ),
            nodes_created: Family::default(),
            nodes_terminated: Family::default(),
            nodes_termination_duration: Summary::new(
                "karpenter_nodes_termination_duration_seconds",
                "The time taken between a node's deletion request and the removal of its finalizer",
            ),
            nodes_lifetime_duration: Family::new_with_constructor(lifetime_histogram),
            nodes_drained: Family::default(),
            nodes_eviction_requests: Family::default(),
            pods_drained: Family::default(),
            pod_times: PodSchedulingTimes::default(),
        }
    }
}

fn pool(nodepool: &str) -> PoolLabels {
    PoolLabels {
        nodepool: nodepool.to_owned(),
    }
}

impl Metrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "karpenter_nodeclaims_created",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created and the owning nodepool.",
            metrics.nodeclaims_created.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_terminated",
            "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool.",
            metrics.nodeclaims_terminated.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_disrupted",
            "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted and the owning nodepool.",
            metrics.nodeclaims_disrupted.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_unhealthy_disrupted",
            "Number of unhealthy nodeclaims disrupted in total by Karpenter. Labeled by condition on the node was disrupted, the owning nodepool, and the image ID.",
            metrics.nodeclaims_unhealthy_disrupted.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_termination_duration_seconds",
            "Duration of NodeClaim termination in seconds.",
            metrics.nodeclaims_termination_duration.clone(),
        );
        registry.register(
            "karpenter_nodeclaims_instance_termination_duration_seconds",
            "Duration of CloudProvider Instance termination in seconds.",
            metrics.nodeclaims_instance_termination_duration.clone(),
        );
        registry.register(
            "karpenter_nodes_created",
            "Number of nodes created in total by Karpenter. Labeled by owning nodepool.",
            metrics.nodes_created.clone(),
        );
        registry.register(
            "karpenter_nodes_terminated",
            "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool.",
            metrics.nodes_terminated.clone(),
        );
        registry.register(
            "karpenter_nodes_lifetime_duration_seconds",
            "The lifetime duration of the nodes since creation.",
            metrics.nodes_lifetime_duration.clone(),
        );
        registry.register(
            "karpenter_nodes_drained",
            "The total number of nodes drained by Karpenter",
            metrics.nodes_drained.clone(),
        );
        registry.register(
            "karpenter_nodes_eviction_requests",
            "The total number of eviction requests made by Karpenter",
            metrics.nodes_eviction_requests.clone(),
        );
        registry.register(
            "karpenter_pods_pods_drained",
            "The total number of pods drained during node termination by Karpenter, labeled by reason",
            metrics.pods_drained.clone(),
        );
        metrics
    }

    /// The families `/metrics` writes itself (summaries), to add beside the Registry.
    #[must_use]
    pub fn text_families(&self) -> Vec<Arc<dyn TextFamily>> {
        vec![Arc::new(self.nodes_termination_duration.clone())]
    }

    /// A NodeClaim was created (`reason`: `provisioned` or the disruption reason of a
    /// replacement). Recorded by whoever creates NodeClaims (the Provisioner, Disruption).
    pub fn nodeclaim_created(&self, reason: &str, nodepool: &str, capacity_type: &str) {
        self.nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: reason.to_owned(),
                nodepool: nodepool.to_owned(),
                capacity_type: capacity_type.to_owned(),
            })
            .inc();
    }

    /// A NodeClaim's finalizer was removed.
    pub fn nodeclaim_terminated(
        &self,
        nodepool: &str,
        capacity_type: &str,
        since_deletion: Duration,
        since_instance_termination: Option<Duration>,
    ) {
        self.nodeclaims_terminated
            .get_or_create(&PoolCapacityLabels {
                nodepool: nodepool.to_owned(),
                capacity_type: capacity_type.to_owned(),
            })
            .inc();
        self.nodeclaims_termination_duration
            .get_or_create(&pool(nodepool))
            .observe(since_deletion.as_secs_f64());
        if let Some(instance) = since_instance_termination {
            self.nodeclaims_instance_termination_duration
                .get_or_create(&pool(nodepool))
                .observe(instance.as_secs_f64());
        }
    }

    /// The shared `karpenter_nodeclaims_created_total` family, for actors that keep their own
    /// metric handles (the Provisioner).
    #[must_use]
    pub fn nodeclaims_created(&self) -> Family<CreatedLabels, Counter> {
        self.nodeclaims_created.clone()
    }

    /// The shared `karpenter_nodeclaims_disrupted_total` family, for actors that keep their own
    /// metric handles (the interruption actor).
    #[must_use]
    pub fn nodeclaims_disrupted(&self) -> Family<DisruptedLabels, Counter> {
        self.nodeclaims_disrupted.clone()
    }

    /// A NodeClaim was deleted for `reason` (see [`disruption_reason`]).
    pub fn nodeclaim_disrupted(&self, reason: &str, nodepool: &str, capacity_type: &str) {
        self.nodeclaims_disrupted
            .get_or_create(&DisruptedLabels {
                reason: reason.to_owned(),
                nodepool: nodepool.to_owned(),
                capacity_type: capacity_type.to_owned(),
            })
            .inc();
    }

    /// Node Repair deleted a NodeClaim because of `condition` (already snake-cased).
    pub fn nodeclaim_unhealthy_disrupted(&self, labels: &UnhealthyDisruptedLabels) {
        self.nodeclaims_unhealthy_disrupted
            .get_or_create(labels)
            .inc();
    }

    /// A node registered for a NodeClaim of `nodepool`.
    pub fn node_created(&self, nodepool: &str) {
        self.nodes_created.get_or_create(&pool(nodepool)).inc();
    }

    /// A node's finalizer was removed.
    pub fn node_terminated(&self, nodepool: &str, since_deletion: Duration, lifetime: Duration) {
        self.nodes_terminated.get_or_create(&pool(nodepool)).inc();
        self.nodes_termination_duration.observe(
            vec![("nodepool", nodepool.to_owned())],
            since_deletion.as_secs_f64(),
        );
        self.nodes_lifetime_duration
            .get_or_create(&pool(nodepool))
            .observe(lifetime.as_secs_f64());
    }

    /// A node finished draining.
    pub fn node_drained(&self, nodepool: &str) {
        self.nodes_drained.get_or_create(&pool(nodepool)).inc();
    }

    /// An eviction request got HTTP status `code`.
    pub fn eviction_request(&self, code: u16) {
        self.nodes_eviction_requests
            .get_or_create(&CodeLabels {
                code: code.to_string(),
            })
            .inc();
    }

    /// A pod was evicted while draining (`reason`: the NodeClaim's disruption reason or
    /// [`FORCEFUL_TERMINATION`]).
    pub fn pod_drained(&self, reason: &str) {
        self.pods_drained
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// `karpenter_nodeclaims_disrupted_total` for one label set (tests and reports).
    #[must_use]
    pub fn disrupted_count(&self, reason: &str, nodepool: &str, capacity_type: &str) -> u64 {
        self.nodeclaims_disrupted
            .get_or_create(&DisruptedLabels {
                reason: reason.to_owned(),
                nodepool: nodepool.to_owned(),
                capacity_type: capacity_type.to_owned(),
            })
            .get()
    }

    /// `karpenter_nodeclaims_unhealthy_disrupted_total` for one label set.
    #[must_use]
    pub fn unhealthy_disrupted_count(&self, labels: &UnhealthyDisruptedLabels) -> u64 {
        self.nodeclaims_unhealthy_disrupted
            .get_or_create(labels)
            .get()
    }

    /// `karpenter_nodeclaims_terminated_total` for one label set.
    #[must_use]
    pub fn terminated_count(&self, nodepool: &str, capacity_type: &str) -> u64 {
        self.nodeclaims_terminated
            .get_or_create(&PoolCapacityLabels {
                nodepool: nodepool.to_owned(),
                capacity_type: capacity_type.to_owned(),
            })
            .get()
    }

    /// `karpenter_nodes_created_total` for a pool.
    #[must_use]
    pub fn nodes_created_count(&self, nodepool: &str) -> u64 {
        self.nodes_created.get_or_create(&pool(nodepool)).get()
    }

    /// `karpenter_nodes_drained_total` for a pool.
    #[must_use]
    pub fn nodes_drained_count(&self, nodepool: &str) -> u64 {
        self.nodes_drained.get_or_create(&pool(nodepool)).get()
    }

    /// `karpenter_nodes_terminated_total` for a pool.
    #[must_use]
    pub fn nodes_terminated_count(&self, nodepool: &str) -> u64 {
        self.nodes_terminated.get_or_create(&pool(nodepool)).get()
    }

    /// `karpenter_nodes_eviction_requests_total` for a status code.
    #[must_use]
    pub fn eviction_requests_count(&self, code: u16) -> u64 {
        self.nodes_eviction_requests
            .get_or_create(&CodeLabels {
                code: code.to_string(),
            })
            .get()
    }

    /// `karpenter_pods_pods_drained_total` for a reason.
    #[must_use]
    pub fn pods_drained_count(&self, reason: &str) -> u64 {
        self.pods_drained
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .get()
    }
}

/// Karpenter's cluster-state gauges (`pkg/controllers/state/cluster.go`): whether the
/// daemon's view has listed every watched kind once, for how long it has not, and how many
/// nodes it holds. Written by whoever watches the view's sync (the binary's daemon assembly,
/// once a second), on every replica.
///
/// | metric | type |
/// |---|---|
/// | `karpenter_cluster_state_synced` | gauge (1 synced, 0 not) |
/// | `karpenter_cluster_state_unsynced_time_seconds` | gauge |
/// | `karpenter_cluster_state_node_count` | gauge |
/// | `karpenter_cluster_state_undecodable_objects_total{kind}` | counter (ours: objects a watch skipped because this version's types cannot read them) |
#[derive(Debug, Clone, Default)]
pub struct ClusterStateMetrics {
    synced: Gauge,
    unsynced_time: Gauge<f64, AtomicU64>,
    node_count: Gauge,
    undecodable: Family<KindLabels, Counter>,
}

/// The `kind` label of a watched kind's metric.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

impl ClusterStateMetrics {
    /// Creates the gauges and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "karpenter_cluster_state_synced",
            "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored in the APIServer have the same representation as Karpenter's cluster state",
            metrics.synced.clone(),
        );
        registry.register(
            "karpenter_cluster_state_unsynced_time_seconds",
            "The time for which cluster state is not synced",
            metrics.unsynced_time.clone(),
        );
        registry.register(
            "karpenter_cluster_state_node_count",
            "Current count of nodes in cluster state",
            metrics.node_count.clone(),
        );
        registry.register(
            "karpenter_cluster_state_undecodable_objects",
            "Objects a watch skipped because this version cannot decode them (e.g. written under a newer CRD version). Labeled by kind.",
            metrics.undecodable.clone(),
        );
        metrics
    }

    /// A watch skipped an object of `kind` it cannot decode.
    pub fn undecodable_object(&self, kind: &str) {
        self.undecodable
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// `karpenter_cluster_state_undecodable_objects_total` for one kind.
    #[must_use]
    pub fn undecodable_count(&self, kind: &str) -> u64 {
        self.undecodable
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .get()
    }

    /// One sync check: `unsynced_for` is zero once synced.
    pub fn record(&self, synced: bool, unsynced_for: Duration, nodes: usize) {
        self.synced.set(i64::from(synced));
        self.unsynced_time.set(unsynced_for.as_secs_f64());
        self.node_count
            .set(i64::try_from(nodes).unwrap_or(i64::MAX));
    }

    /// `karpenter_cluster_state_synced`.
    #[must_use]
    pub fn synced(&self) -> bool {
        self.synced.get() == 1
    }

    /// `karpenter_cluster_state_unsynced_time_seconds`.
    #[must_use]
    pub fn unsynced_seconds(&self) -> f64 {
        self.unsynced_time.get()
    }

    /// `karpenter_cluster_state_node_count`.
    #[must_use]
    pub fn node_count(&self) -> i64 {
        self.node_count.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_are_karpenters() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.nodeclaim_disrupted(disruption_reason::LIVENESS, "default", "spot");
        metrics.nodeclaim_terminated("default", "spot", Duration::from_secs(3), None);
        metrics.node_terminated("default", Duration::from_secs(1), Duration::from_hours(1));
        metrics.eviction_request(429);
        metrics.pod_drained(FORCEFUL_TERMINATION);
        metrics.nodeclaim_unhealthy_disrupted(&UnhealthyDisruptedLabels {
            condition: "accelerated_hardware_ready".into(),
            nodepool: "gpu".into(),
            capacity_type: "on-demand".into(),
            image_id: "ami-1".into(),
        });
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for name in [
            "karpenter_nodeclaims_disrupted_total{reason=\"liveness\",nodepool=\"default\",capacity_type=\"spot\"} 1",
            "karpenter_nodeclaims_terminated_total{nodepool=\"default\",capacity_type=\"spot\"} 1",
            "karpenter_nodeclaims_termination_duration_seconds_bucket",
            "karpenter_nodes_lifetime_duration_seconds_bucket{le=\"3600.0\",nodepool=\"default\"} 1",
            "karpenter_nodes_eviction_requests_total{code=\"429\"} 1",
            "karpenter_pods_pods_drained_total{reason=\"Forceful Termination\"} 1",
            "karpenter_nodeclaims_unhealthy_disrupted_total{condition=\"accelerated_hardware_ready\",nodepool=\"gpu\",capacity_type=\"on-demand\",image_id=\"ami-1\"} 1",
        ] {
            assert!(text.contains(name), "missing {name} in\n{text}");
        }
        assert_eq!(metrics.eviction_requests_count(429), 1);
    }
}

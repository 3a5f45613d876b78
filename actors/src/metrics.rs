//! Metrics that several actors write, registered once: Karpenter's
//! `karpenter_nodeclaims_disrupted_total` is counted by the lifecycle (liveness, expiration,
//! insufficient capacity), interruption and disruption actors alike.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

pub use crate::interruption::metrics::DisruptedLabels;

/// Shared metric families, cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SharedMetrics {
    /// `karpenter_nodeclaims_disrupted_total{reason, nodepool, capacity_type}`.
    pub nodeclaims_disrupted: Family<DisruptedLabels, Counter>,
}

impl SharedMetrics {
    /// Registers the shared families.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "karpenter_nodeclaims_disrupted",
            "NodeClaims disrupted, by reason, NodePool and capacity type",
            metrics.nodeclaims_disrupted.clone(),
        );
        metrics
    }
}

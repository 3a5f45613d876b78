//! Metrics that several actors write, registered once: Karpenter's
//! `karpenter_nodeclaims_disrupted_total` is counted by the lifecycle (liveness, expiration,
//! insufficient capacity), interruption and disruption actors alike;
//! `karpenter_nodeclaims_created_total` by the Provisioner (`provisioned`) and the disruption
//! actor (replacements, by disruption reason).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

pub use crate::interruption::metrics::DisruptedLabels;

/// `karpenter_nodeclaims_created_total`'s labels: `reason` is `provisioned` or the disruption
/// reason of a replacement; NodePool names are bounded by the NodePools.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CreatedLabels {
    pub reason: String,
    pub nodepool: String,
    pub capacity_type: String,
}

/// Shared metric families, cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SharedMetrics {
    /// `karpenter_nodeclaims_disrupted_total{reason, nodepool, capacity_type}`.
    pub nodeclaims_disrupted: Family<DisruptedLabels, Counter>,
    /// `karpenter_nodeclaims_created_total{reason, nodepool, capacity_type}`.
    pub nodeclaims_created: Family<CreatedLabels, Counter>,
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
        registry.register(
            "karpenter_nodeclaims_created",
            "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created and the owning nodepool.",
            metrics.nodeclaims_created.clone(),
        );
        metrics
    }
}

//! `ClusterView`: read access to the cluster as the watchers last saw it. The production
//! implementation is the kube reflector store (`karpenter::kube::ClusterState`); tests use
//! `crate::testing::MemoryClusterView`. Reads return `Arc`s of shared objects and never block on I/O, so
//! actors can read in a handler without awaiting; writes go through [`super::cluster::ClusterApi`]
//! and come back here through the watch. Lookups by a field (provider id, NodePool, node)
//! answer from the indexes of [`crate::cluster_index`] instead of scanning.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_core::apis::SlimPod;

use karpenter_core::apis::{EC2NodeClass, NodePool, SlimNode, SlimNodeClaim};

use crate::cluster_index::{NODE_PROVIDER_ID, NODECLAIM_NODEPOOL, VOLUME_ATTACHMENT_NODE_NAME};

/// A reader's memory of the view's change counts ([`ClusterView::changes`]) for the kinds one
/// of its passes reads: the pass is skipped while none of them changed.
#[derive(Debug, Clone)]
pub struct ChangeMark<const N: usize> {
    kinds: [crate::messages::WatchedKind; N],
    last: Option<[u64; N]>,
}

impl<const N: usize> ChangeMark<N> {
    #[must_use]
    pub fn new(kinds: [crate::messages::WatchedKind; N]) -> Self {
        Self { kinds, last: None }
    }

    /// The counts now (read them before the pass: a change during it shows next time);
    /// `None` when the view cannot tell.
    #[must_use]
    pub fn read(&self, view: &dyn ClusterView) -> Option<[u64; N]> {
        let mut counts = [0; N];
        for (count, kind) in counts.iter_mut().zip(self.kinds) {
            *count = view.changes(kind)?;
        }
        Some(counts)
    }

    /// Whether `counts` are those of the last completed pass (never when unknown).
    #[must_use]
    pub fn unchanged(&self, counts: Option<[u64; N]>) -> bool {
        counts.is_some() && counts == self.last
    }

    /// A pass over `counts` completed; `None` forgets it (the next pass runs).
    pub fn mark(&mut self, counts: Option<[u64; N]>) {
        self.last = counts;
    }
}

/// The objects the daemon reads.
pub trait ClusterView: Send + Sync + fmt::Debug {
    /// A count that grows with every watch event applied to `kind`, so a reader that walks
    /// every object of a kind can skip a pass when nothing changed; `None` when this view
    /// cannot tell (then every pass must run).
    fn changes(&self, kind: crate::messages::WatchedKind) -> Option<u64> {
        let _ = kind;
        None
    }
    fn nodeclaims(&self) -> Vec<Arc<SlimNodeClaim>>;
    fn nodeclaim(&self, name: &str) -> Option<Arc<SlimNodeClaim>>;
    /// The NodeClaim whose `status.providerID` is this.
    fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<Arc<SlimNodeClaim>>;
    /// The NodeClaims labelled with this NodePool (`karpenter.sh/nodepool`), deleting ones
    /// included, in name order. Both implementations answer from an index; this default scans.
    fn nodeclaims_of_nodepool(&self, nodepool: &str) -> Vec<Arc<SlimNodeClaim>> {
        let mut claims: Vec<Arc<SlimNodeClaim>> = self
            .nodeclaims()
            .into_iter()
            .filter(|claim| NODECLAIM_NODEPOOL.value(claim) == Some(nodepool))
            .collect();
        claims.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        claims
    }
    fn nodepools(&self) -> Vec<Arc<NodePool>>;
    fn nodepool(&self, name: &str) -> Option<Arc<NodePool>>;
    fn ec2nodeclasses(&self) -> Vec<Arc<EC2NodeClass>>;
    fn ec2nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>>;
    fn nodes(&self) -> Vec<Arc<SlimNode>>;
    fn node(&self, name: &str) -> Option<Arc<SlimNode>>;
    /// The node whose `spec.providerID` is this (the API server cannot select nodes by it).
    fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<SlimNode>>;
    /// Every node whose `spec.providerID` is this, in name order (more than one breaks the
    /// invariant registration checks). Both implementations answer from an index; this
    /// default scans.
    fn nodes_by_provider_id(&self, provider_id: &str) -> Vec<Arc<SlimNode>> {
        let mut nodes: Vec<Arc<SlimNode>> = self
            .nodes()
            .into_iter()
            .filter(|node| NODE_PROVIDER_ID.value(node) == Some(provider_id))
            .collect();
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        nodes
    }
    fn pods(&self) -> Vec<Arc<SlimPod>>;
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<SlimPod>>;
    /// Pods bound to the node.
    fn pods_on_node(&self, node: &str) -> Vec<Arc<SlimPod>>;
    fn daemonsets(&self) -> Vec<Arc<DaemonSet>>;
    fn pdbs(&self) -> Vec<Arc<PodDisruptionBudget>>;
    fn volumeattachments(&self) -> Vec<Arc<VolumeAttachment>>;
    /// The `VolumeAttachments` whose `spec.nodeName` is this node, in name order. Both
    /// implementations answer from an index; this default scans.
    fn volume_attachments_of_node(&self, node: &str) -> Vec<Arc<VolumeAttachment>> {
        let mut attachments: Vec<Arc<VolumeAttachment>> = self
            .volumeattachments()
            .into_iter()
            .filter(|a| VOLUME_ATTACHMENT_NODE_NAME.value(a) == Some(node))
            .collect();
        attachments.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        attachments
    }
    fn pvcs(&self) -> Vec<Arc<PersistentVolumeClaim>>;
    /// Every namespace (pod affinity `namespaceSelector`s select them by label).
    fn namespaces(&self) -> Vec<Arc<Namespace>>;
    /// One `PersistentVolumeClaim`. Both implementations look it up by key; this default scans.
    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.pvcs().into_iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace)
                && c.metadata.name.as_deref() == Some(name)
        })
    }
    /// Every kind has been listed at least once since start (decisions wait for this).
    fn is_synced(&self) -> bool;
}

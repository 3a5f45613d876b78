//! `ClusterView`: read access to the cluster as the watchers last saw it. The production
//! implementation is the kube reflector store (`karpenter::kube::ClusterState`); tests use
//! `crate::testing::MemoryClusterView`. Reads return `Arc`s of shared objects and never block on I/O, so
//! actors can read in a handler without awaiting; writes go through [`super::cluster::ClusterApi`]
//! and come back here through the watch. Lookups by a field (provider id, NodePool, node)
//! answer from the indexes of [`crate::cluster_index`] instead of scanning.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;

use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};

use crate::cluster_index::{NODE_PROVIDER_ID, NODECLAIM_NODEPOOL, VOLUME_ATTACHMENT_NODE_NAME};

/// The objects the daemon reads.
pub trait ClusterView: Send + Sync + fmt::Debug {
    fn nodeclaims(&self) -> Vec<Arc<NodeClaim>>;
    fn nodeclaim(&self, name: &str) -> Option<Arc<NodeClaim>>;
    /// The NodeClaim whose `status.providerID` is this.
    fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<Arc<NodeClaim>>;
    /// The NodeClaims labelled with this NodePool (`karpenter.sh/nodepool`), deleting ones
    /// included, in name order. Both implementations answer from an index; this default scans.
    fn nodeclaims_of_nodepool(&self, nodepool: &str) -> Vec<Arc<NodeClaim>> {
        let mut claims: Vec<Arc<NodeClaim>> = self
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
    fn nodes(&self) -> Vec<Arc<Node>>;
    fn node(&self, name: &str) -> Option<Arc<Node>>;
    /// The node whose `spec.providerID` is this (the API server cannot select nodes by it).
    fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<Node>>;
    /// Every node whose `spec.providerID` is this, in name order (more than one breaks the
    /// invariant registration checks). Both implementations answer from an index; this
    /// default scans.
    fn nodes_by_provider_id(&self, provider_id: &str) -> Vec<Arc<Node>> {
        let mut nodes: Vec<Arc<Node>> = self
            .nodes()
            .into_iter()
            .filter(|node| NODE_PROVIDER_ID.value(node) == Some(provider_id))
            .collect();
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        nodes
    }
    fn pods(&self) -> Vec<Arc<Pod>>;
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>>;
    /// Pods bound to the node.
    fn pods_on_node(&self, node: &str) -> Vec<Arc<Pod>>;
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

//! The cluster-state store: one kube-runtime reflector [`Store`] per watched kind. The
//! [`StateWriters`] (not cloneable, one per kind) go to the ingress, the only writer; readers
//! clone [`ClusterState`] freely. Reads return `Arc`s of the stored objects and hold no lock
//! once they return, so nothing is held across an `.await`.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::runtime::reflector;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};

/// Read access to every watched kind.
#[derive(Clone)]
pub struct ClusterState {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub nodeclaims: Store<NodeClaim>,
    pub nodepools: Store<NodePool>,
    pub ec2nodeclasses: Store<EC2NodeClass>,
    pub daemonsets: Store<DaemonSet>,
    pub pdbs: Store<PodDisruptionBudget>,
}

impl std::fmt::Debug for ClusterState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterState")
            .field("pods", &self.pods.len())
            .field("nodes", &self.nodes.len())
            .field("nodeclaims", &self.nodeclaims.len())
            .field("nodepools", &self.nodepools.len())
            .field("ec2nodeclasses", &self.ec2nodeclasses.len())
            .field("daemonsets", &self.daemonsets.len())
            .field("pdbs", &self.pdbs.len())
            .finish()
    }
}

/// The writing half of every store; owned by the ingress.
pub struct StateWriters {
    pub pods: Writer<Pod>,
    pub nodes: Writer<Node>,
    pub nodeclaims: Writer<NodeClaim>,
    pub nodepools: Writer<NodePool>,
    pub ec2nodeclasses: Writer<EC2NodeClass>,
    pub daemonsets: Writer<DaemonSet>,
    pub pdbs: Writer<PodDisruptionBudget>,
}

impl std::fmt::Debug for StateWriters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateWriters").finish_non_exhaustive()
    }
}

/// An empty store with its writers.
#[must_use]
pub fn new() -> (ClusterState, StateWriters) {
    let (pods, pods_writer) = reflector::store();
    let (nodes, nodes_writer) = reflector::store();
    let (nodeclaims, nodeclaims_writer) = reflector::store();
    let (nodepools, nodepools_writer) = reflector::store();
    let (ec2nodeclasses, ec2nodeclasses_writer) = reflector::store();
    let (daemonsets, daemonsets_writer) = reflector::store();
    let (pdbs, pdbs_writer) = reflector::store();
    (
        ClusterState {
            pods,
            nodes,
            nodeclaims,
            nodepools,
            ec2nodeclasses,
            daemonsets,
            pdbs,
        },
        StateWriters {
            pods: pods_writer,
            nodes: nodes_writer,
            nodeclaims: nodeclaims_writer,
            nodepools: nodepools_writer,
            ec2nodeclasses: ec2nodeclasses_writer,
            daemonsets: daemonsets_writer,
            pdbs: pdbs_writer,
        },
    )
}

impl ClusterState {
    /// Waits until every kind has been listed once.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pods.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.nodeclaims.wait_until_ready().await?;
        self.nodepools.wait_until_ready().await?;
        self.ec2nodeclasses.wait_until_ready().await?;
        self.daemonsets.wait_until_ready().await?;
        self.pdbs.wait_until_ready().await
    }

    #[must_use]
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    #[must_use]
    pub fn nodeclaim(&self, name: &str) -> Option<Arc<NodeClaim>> {
        self.nodeclaims.get(&ObjectRef::new(name))
    }

    #[must_use]
    pub fn nodepool(&self, name: &str) -> Option<Arc<NodePool>> {
        self.nodepools.get(&ObjectRef::new(name))
    }

    #[must_use]
    pub fn ec2nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        self.ec2nodeclasses.get(&ObjectRef::new(name))
    }

    #[must_use]
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }

    /// The node with this provider ID (the API server cannot select nodes by it).
    #[must_use]
    pub fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<Node>> {
        self.nodes.find(|node| {
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id)
        })
    }

    /// The NodeClaim whose status carries this provider ID.
    #[must_use]
    pub fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<Arc<NodeClaim>> {
        self.nodeclaims.find(|claim| {
            claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id)
        })
    }

    /// Pods bound to a node.
    #[must_use]
    pub fn pods_on_node(&self, node: &str) -> Vec<Arc<Pod>> {
        self.pods.state_filter(|pod| {
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        })
    }
}

/// [`ClusterState`] is the production [`ClusterView`]: the actors read the reflector stores
/// through it.
impl karpenter_actors::ports::cluster_view::ClusterView for ClusterState {
    fn nodeclaims(&self) -> Vec<Arc<NodeClaim>> {
        self.nodeclaims.state()
    }
    fn nodeclaim(&self, name: &str) -> Option<Arc<NodeClaim>> {
        ClusterState::nodeclaim(self, name)
    }
    fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<Arc<NodeClaim>> {
        ClusterState::nodeclaim_by_provider_id(self, provider_id)
    }
    fn nodepools(&self) -> Vec<Arc<NodePool>> {
        self.nodepools.state()
    }
    fn nodepool(&self, name: &str) -> Option<Arc<NodePool>> {
        ClusterState::nodepool(self, name)
    }
    fn ec2nodeclasses(&self) -> Vec<Arc<EC2NodeClass>> {
        self.ec2nodeclasses.state()
    }
    fn ec2nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        ClusterState::ec2nodeclass(self, name)
    }
    fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
    }
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        ClusterState::node(self, name)
    }
    fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<Node>> {
        ClusterState::node_by_provider_id(self, provider_id)
    }
    fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods.state()
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        ClusterState::pod(self, namespace, name)
    }
    fn pods_on_node(&self, node: &str) -> Vec<Arc<Pod>> {
        ClusterState::pods_on_node(self, node)
    }
    fn daemonsets(&self) -> Vec<Arc<DaemonSet>> {
        self.daemonsets.state()
    }
    fn pdbs(&self) -> Vec<Arc<PodDisruptionBudget>> {
        self.pdbs.state()
    }
    fn is_synced(&self) -> bool {
        // A store is ready once its first list has been applied; polling the readiness future
        // once answers without waiting.
        futures::FutureExt::now_or_never(self.wait_until_ready()).is_some_and(|ready| ready.is_ok())
    }
}

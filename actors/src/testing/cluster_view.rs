//! [`MemoryClusterView`]: an in-memory [`ClusterView`] for tests: put objects in, read them back.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};

use crate::ports::cluster_view::ClusterView;

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    match &meta.namespace {
        Some(namespace) => format!("{namespace}/{}", meta.name.as_deref().unwrap_or_default()),
        None => meta.name.clone().unwrap_or_default(),
    }
}

/// An in-memory [`ClusterView`] for tests: put objects in, read them back.
#[derive(Debug, Default)]
pub struct MemoryClusterView {
    inner: RwLock<Objects>,
}

#[derive(Debug, Default)]
struct Objects {
    nodeclaims: BTreeMap<String, Arc<NodeClaim>>,
    nodepools: BTreeMap<String, Arc<NodePool>>,
    ec2nodeclasses: BTreeMap<String, Arc<EC2NodeClass>>,
    nodes: BTreeMap<String, Arc<Node>>,
    pods: BTreeMap<String, Arc<Pod>>,
    daemonsets: BTreeMap<String, Arc<DaemonSet>>,
    pdbs: BTreeMap<String, Arc<PodDisruptionBudget>>,
    unsynced: bool,
}

macro_rules! memory_kind {
    ($put:ident, $remove:ident, $field:ident, $ty:ty) => {
        /// Adds or replaces the object (keyed by `namespace/name` or `name`).
        pub fn $put(&self, object: $ty) {
            let key = name_of(&object.metadata);
            self.write().$field.insert(key, Arc::new(object));
        }

        /// Removes the object with this key (`namespace/name` or `name`).
        pub fn $remove(&self, key: &str) {
            self.write().$field.remove(key);
        }
    };
}

impl MemoryClusterView {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Objects> {
        self.inner
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Objects> {
        self.inner
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    memory_kind!(put_nodeclaim, remove_nodeclaim, nodeclaims, NodeClaim);
    memory_kind!(put_nodepool, remove_nodepool, nodepools, NodePool);
    memory_kind!(
        put_ec2nodeclass,
        remove_ec2nodeclass,
        ec2nodeclasses,
        EC2NodeClass
    );
    memory_kind!(put_node, remove_node, nodes, Node);
    memory_kind!(put_pod, remove_pod, pods, Pod);
    memory_kind!(put_daemonset, remove_daemonset, daemonsets, DaemonSet);
    memory_kind!(put_pdb, remove_pdb, pdbs, PodDisruptionBudget);

    /// Makes [`ClusterView::is_synced`] report `synced`.
    pub fn set_synced(&self, synced: bool) {
        self.write().unsynced = !synced;
    }
}

impl ClusterView for MemoryClusterView {
    fn nodeclaims(&self) -> Vec<Arc<NodeClaim>> {
        self.read().nodeclaims.values().cloned().collect()
    }
    fn nodeclaim(&self, name: &str) -> Option<Arc<NodeClaim>> {
        self.read().nodeclaims.get(name).cloned()
    }
    fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<Arc<NodeClaim>> {
        self.read()
            .nodeclaims
            .values()
            .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
            .cloned()
    }
    fn nodepools(&self) -> Vec<Arc<NodePool>> {
        self.read().nodepools.values().cloned().collect()
    }
    fn nodepool(&self, name: &str) -> Option<Arc<NodePool>> {
        self.read().nodepools.get(name).cloned()
    }
    fn ec2nodeclasses(&self) -> Vec<Arc<EC2NodeClass>> {
        self.read().ec2nodeclasses.values().cloned().collect()
    }
    fn ec2nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        self.read().ec2nodeclasses.get(name).cloned()
    }
    fn nodes(&self) -> Vec<Arc<Node>> {
        self.read().nodes.values().cloned().collect()
    }
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.read().nodes.get(name).cloned()
    }
    fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<Node>> {
        self.read()
            .nodes
            .values()
            .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
            .cloned()
    }
    fn pods(&self) -> Vec<Arc<Pod>> {
        self.read().pods.values().cloned().collect()
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.read()
            .pods
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }
    fn pods_on_node(&self, node: &str) -> Vec<Arc<Pod>> {
        self.read()
            .pods
            .values()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .cloned()
            .collect()
    }
    fn daemonsets(&self) -> Vec<Arc<DaemonSet>> {
        self.read().daemonsets.values().cloned().collect()
    }
    fn pdbs(&self) -> Vec<Arc<PodDisruptionBudget>> {
        self.read().pdbs.values().cloned().collect()
    }
    fn is_synced(&self) -> bool {
        !self.read().unsynced
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_view_finds_nodes_by_provider_id_and_pods_by_node() {
        let view = MemoryClusterView::new();
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            provider_id: Some("aws:///us-west-2a/i-1".into()),
            ..Default::default()
        });
        view.put_node(node);
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("default".into());
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("n1".into()),
            ..Default::default()
        });
        view.put_pod(pod);
        assert_eq!(
            view.node_by_provider_id("aws:///us-west-2a/i-1")
                .map(|n| n.metadata.name.clone()),
            Some(Some("n1".into()))
        );
        assert_eq!(view.pods_on_node("n1").len(), 1);
        assert!(view.pod("default", "p").is_some());
        view.remove_pod("default/p");
        assert!(view.pods_on_node("n1").is_empty());
    }
}

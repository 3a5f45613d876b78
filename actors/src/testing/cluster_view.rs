//! [`MemoryClusterView`]: an in-memory [`ClusterView`] for tests: put objects in, read them back.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_core::apis::SlimPod;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool, SlimNode, SlimNodeClaim};

use crate::cluster_index::{
    Field, Indexed, KindIndex, NODE_PROVIDER_ID, NODECLAIM_NODEPOOL, NODECLAIM_PROVIDER_ID,
    POD_NODE_NAME, VOLUME_ATTACHMENT_NODE_NAME,
};
use crate::ports::cluster_view::ClusterView;

/// An in-memory [`ClusterView`] for tests: put objects in, read them back. Lookups by provider
/// id, NodePool and node answer from [`KindIndex`]es kept under the same lock as the objects.
#[derive(Debug, Default)]
pub struct MemoryClusterView {
    inner: RwLock<Objects>,
}

/// One kind's objects by key (`namespace/name` or `name`) and their index.
#[derive(Debug)]
struct Stored<K> {
    objects: BTreeMap<String, Arc<K>>,
    index: KindIndex<K>,
    /// Puts and removes so far ([`ClusterView::changes`]), as the reflector store counts
    /// watch events.
    changes: u64,
}

impl<K: Indexed> Default for Stored<K> {
    fn default() -> Self {
        Self {
            objects: BTreeMap::new(),
            index: KindIndex::new(),
            changes: 0,
        }
    }
}

impl<K: Indexed> Stored<K> {
    fn put(&mut self, object: Arc<K>) {
        let key = object.key();
        let previous = self.objects.get(&key);
        self.index.insert(&key, &object, previous.map(|p| &**p));
        self.objects.insert(key, object);
        self.changes += 1;
    }

    fn remove(&mut self, key: &str) {
        if let Some(held) = self.objects.remove(key) {
            self.index.remove(key, &held);
            self.changes += 1;
        }
    }

    fn list(&self) -> Vec<Arc<K>> {
        self.objects.values().cloned().collect()
    }

    fn get(&self, key: &str) -> Option<Arc<K>> {
        self.objects.get(key).cloned()
    }

    fn find(&self, field: &Field<K>, value: &str) -> Vec<Arc<K>> {
        self.index.find(field, value, |key| self.get(key))
    }

    fn find_first(&self, field: &Field<K>, value: &str) -> Option<Arc<K>> {
        self.index.find_first(field, value, |key| self.get(key))
    }
}

/// A kind [`MemoryClusterView`] stores: where its objects are.
trait MemoryKind: Indexed {
    fn stored_mut(objects: &mut Objects) -> &mut Stored<Self>;
}

macro_rules! memory_objects {
    ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
        #[derive(Debug, Default)]
        struct Objects {
            $($field: Stored<$type>,)*
            unsynced: bool,
        }

        impl Objects {
            fn changes(&self, kind: crate::messages::WatchedKind) -> u64 {
                match kind {
                    $(crate::messages::WatchedKind::$kind => self.$field.changes,)*
                }
            }
        }

        $(impl MemoryKind for $type {
            fn stored_mut(objects: &mut Objects) -> &mut Stored<Self> {
                &mut objects.$field
            }
        })*
    };
}

crate::for_each_watched_kind!(memory_objects);

/// The `ClusterView` list method of every kind.
macro_rules! memory_lists {
    ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
        $(fn $field(&self) -> Vec<Arc<$type>> {
            self.read().$field.list()
        })*
    };
}

macro_rules! memory_kind {
    ($put:ident, $put_shared:ident, $remove:ident, $ty:ty) => {
        /// Adds or replaces the object (keyed by `namespace/name` or `name`).
        pub fn $put(&self, object: $ty) {
            self.put(Arc::new(object));
        }

        /// Adds or replaces the object, sharing the allocation (the mirror hands over the
        /// fake's own copy rather than a clone).
        pub fn $put_shared(&self, object: Arc<$ty>) {
            self.put(object);
        }

        /// Removes the object with this key (`namespace/name` or `name`).
        pub fn $remove(&self, key: &str) {
            self.remove::<$ty>(key);
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

    /// Adds or replaces an object of any watched kind (keyed by `namespace/name` or `name`).
    fn put<K: MemoryKind>(&self, object: Arc<K>) {
        K::stored_mut(&mut self.write()).put(object);
    }

    /// Removes the object of kind `K` with this key (`namespace/name` or `name`).
    fn remove<K: MemoryKind>(&self, key: &str) {
        K::stored_mut(&mut self.write()).remove(key);
    }

    /// Adds or replaces a NodeClaim, kept as the daemon's view keeps it (a
    /// [`SlimNodeClaim`]).
    pub fn put_nodeclaim(&self, nodeclaim: &NodeClaim) {
        self.put(Arc::new(SlimNodeClaim::from(nodeclaim)));
    }

    /// Removes the NodeClaim with this name.
    pub fn remove_nodeclaim(&self, name: &str) {
        self.remove::<SlimNodeClaim>(name);
    }
    memory_kind!(put_nodepool, put_shared_nodepool, remove_nodepool, NodePool);
    memory_kind!(
        put_ec2nodeclass,
        put_shared_ec2nodeclass,
        remove_ec2nodeclass,
        EC2NodeClass
    );
    memory_kind!(put_slim_node, put_shared_node, remove_node, SlimNode);

    /// Adds or replaces a node, given whole (kept slim, as the watch keeps it) or slim.
    pub fn put_node(&self, node: impl Into<SlimNode>) {
        self.put_slim_node(node.into());
    }
    memory_kind!(put_slim_pod, put_shared_pod, remove_pod, SlimPod);

    /// Adds or replaces a pod given whole, kept slim as the watch keeps it.
    pub fn put_pod(&self, pod: Pod) {
        self.put_slim_pod(SlimPod::from(pod));
    }
    memory_kind!(
        put_daemonset,
        put_shared_daemonset,
        remove_daemonset,
        DaemonSet
    );
    memory_kind!(put_pdb, put_shared_pdb, remove_pdb, PodDisruptionBudget);
    memory_kind!(
        put_volume_attachment,
        put_shared_volume_attachment,
        remove_volume_attachment,
        VolumeAttachment
    );
    memory_kind!(put_pvc, put_shared_pvc, remove_pvc, PersistentVolumeClaim);
    memory_kind!(
        put_namespace,
        put_shared_namespace,
        remove_namespace,
        Namespace
    );

    /// Makes [`ClusterView::is_synced`] report `synced`.
    pub fn set_synced(&self, synced: bool) {
        self.write().unsynced = !synced;
    }
}

impl ClusterView for MemoryClusterView {
    crate::for_each_watched_kind!(memory_lists);

    fn changes(&self, kind: crate::messages::WatchedKind) -> Option<u64> {
        Some(self.read().changes(kind))
    }

    fn nodeclaim(&self, name: &str) -> Option<Arc<SlimNodeClaim>> {
        self.read().nodeclaims.get(name)
    }
    fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<Arc<SlimNodeClaim>> {
        self.read()
            .nodeclaims
            .find_first(&NODECLAIM_PROVIDER_ID, provider_id)
    }
    fn nodeclaims_of_nodepool(&self, nodepool: &str) -> Vec<Arc<SlimNodeClaim>> {
        self.read().nodeclaims.find(&NODECLAIM_NODEPOOL, nodepool)
    }
    fn nodepool(&self, name: &str) -> Option<Arc<NodePool>> {
        self.read().nodepools.get(name)
    }
    fn ec2nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        self.read().ec2nodeclasses.get(name)
    }
    fn node(&self, name: &str) -> Option<Arc<SlimNode>> {
        self.read().nodes.get(name)
    }
    fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<SlimNode>> {
        self.read().nodes.find_first(&NODE_PROVIDER_ID, provider_id)
    }
    fn nodes_by_provider_id(&self, provider_id: &str) -> Vec<Arc<SlimNode>> {
        self.read().nodes.find(&NODE_PROVIDER_ID, provider_id)
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<SlimPod>> {
        self.read().pods.get(&format!("{namespace}/{name}"))
    }
    fn pods_on_node(&self, node: &str) -> Vec<Arc<SlimPod>> {
        self.read().pods.find(&POD_NODE_NAME, node)
    }
    fn volume_attachments_of_node(&self, node: &str) -> Vec<Arc<VolumeAttachment>> {
        self.read()
            .volumeattachments
            .find(&VOLUME_ATTACHMENT_NODE_NAME, node)
    }
    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.read().pvcs.get(&format!("{namespace}/{name}"))
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
        let mut node = SlimNode::default();
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

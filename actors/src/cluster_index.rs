//! Secondary indexes of the cluster view: the objects of one kind by the value of a field
//! (NodeClaims and Nodes by provider id, NodeClaims by NodePool, Pods and `VolumeAttachments` by
//! node), kept from the same watch events that keep the store, so a lookup costs the matches
//! instead of a scan of every object (as linkerd2's policy-controller keeps its indexes from its
//! watches).
//!
//! ```text
//! watch event --> store (kube's reflector Writer, or MemoryClusterView's maps)
//!             \-> KindIndex<K>::apply (same event, same order, right after the store)
//! lookup: KindIndex::keys(field, value) -> object keys -> store get -> field re-checked
//! ```
//!
//! The index follows the store's rules for a re-list (kube-runtime's `Writer`): `RelistStarted`
//! opens a fresh index that `RelistApply` fills while lookups keep reading the old one, and
//! `RelistDone` swaps it in, as the store swaps its buffer in. Between the store's update and the
//! index's a reader may meet an entry that no longer holds (the object went or moved to another
//! value), so [`KindIndex::find`] fetches each candidate and keeps it only if its field still
//! has the value: a stale entry yields "not found", never a wrong object.
//!
//! The index knows object keys (`namespace/name`, or `name` for cluster-scoped kinds) and field
//! values only; the production store (`karpenter::kube::state`) and
//! [`crate::testing::MemoryClusterView`] own the objects and their locks.

use std::collections::BTreeSet;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_core::apis::SlimPod;
use karpenter_core::apis::{EC2NodeClass, MetaFields, NodePool, SlimNode, SlimNodeClaim, labels};
use rustc_hash::FxHashMap;

/// A field of `K` that objects are looked up by.
pub struct Field<K> {
    /// The field's path, for logs and tests.
    pub name: &'static str,
    /// Where the field sits in [`Indexed::FIELDS`].
    position: usize,
    value: for<'a> fn(&'a K) -> Option<&'a str>,
}

impl<K> Field<K> {
    /// The field of `object` (what the index keys it by).
    #[must_use]
    pub fn value<'a>(&self, object: &'a K) -> Option<&'a str> {
        (self.value)(object)
    }
}

impl<K> fmt::Debug for Field<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A kind whose objects the index follows: its key and the fields it is looked up by.
pub trait Indexed: Sized + 'static {
    /// Every indexed field, each at its `position`; empty for kinds looked up by name only.
    const FIELDS: &'static [Field<Self>];

    /// The object's namespace (`None` for a cluster-scoped kind) and name.
    fn names(&self) -> (Option<&str>, &str);

    /// Its name as a shared string, for a store that keys objects by name: a copy by default,
    /// the object's own for a kind that holds its name as one (a pod).
    fn shared_name(&self) -> Arc<str> {
        Arc::from(self.names().1)
    }

    /// Its key in the index and the stores: `namespace/name`, or `name`.
    fn key(&self) -> String {
        let (namespace, name) = self.names();
        join_key(namespace, name)
    }
}

/// `status.providerID` of a NodeClaim.
pub const NODECLAIM_PROVIDER_ID: Field<SlimNodeClaim> = Field {
    name: "status.providerID",
    position: 0,
    value: |claim| claim.status.as_ref()?.provider_id.as_deref(),
};

/// The `karpenter.sh/nodepool` label of a NodeClaim.
pub const NODECLAIM_NODEPOOL: Field<SlimNodeClaim> = Field {
    name: "metadata.labels[karpenter.sh/nodepool]",
    position: 1,
    value: |claim| {
        claim
            .metadata
            .labels
            .as_ref()?
            .get(labels::NODEPOOL)
            .map(String::as_str)
    },
};

/// `spec.providerID` of a Node.
pub const NODE_PROVIDER_ID: Field<SlimNode> = Field {
    name: "spec.providerID",
    position: 0,
    value: |node| node.spec.as_ref()?.provider_id.as_deref(),
};

/// `spec.nodeName` of a Pod (unset while it is unbound).
pub const POD_NODE_NAME: Field<SlimPod> = Field {
    name: "spec.nodeName",
    position: 0,
    value: |pod| pod.spec.as_ref()?.node_name.as_deref(),
};

/// `spec.nodeName` of a `VolumeAttachment` (the node the volume is attached to).
pub const VOLUME_ATTACHMENT_NODE_NAME: Field<VolumeAttachment> = Field {
    name: "spec.nodeName",
    position: 0,
    value: |attachment| Some(attachment.spec.node_name.as_str()),
};

/// An object's namespace and name, read from its `metadata` (an `ObjectMeta`, or a pod's
/// `PodMeta`, whose fields have the same names).
macro_rules! names {
    ($object:expr) => {
        (
            $object.metadata.namespace.as_deref(),
            $object.metadata.name.as_deref().unwrap_or_default(),
        )
    };
}

impl Indexed for SlimNodeClaim {
    const FIELDS: &'static [Field<Self>] = &[NODECLAIM_PROVIDER_ID, NODECLAIM_NODEPOOL];
    fn names(&self) -> (Option<&str>, &str) {
        names!(self)
    }
}

impl Indexed for SlimNode {
    const FIELDS: &'static [Field<Self>] = &[NODE_PROVIDER_ID];
    fn names(&self) -> (Option<&str>, &str) {
        names!(self)
    }
}

impl Indexed for SlimPod {
    const FIELDS: &'static [Field<Self>] = &[POD_NODE_NAME];
    fn names(&self) -> (Option<&str>, &str) {
        names!(self)
    }

    fn shared_name(&self) -> Arc<str> {
        self.metadata.name.clone().unwrap_or_default()
    }
}

macro_rules! looked_up_by_name_only {
    ($($type:ty),*) => {
        $(impl Indexed for $type {
            const FIELDS: &'static [Field<Self>] = &[];
            fn names(&self) -> (Option<&str>, &str) {
                names!(self)
            }
        })*
    };
}

impl Indexed for VolumeAttachment {
    const FIELDS: &'static [Field<Self>] = &[VOLUME_ATTACHMENT_NODE_NAME];
    fn names(&self) -> (Option<&str>, &str) {
        names!(self)
    }
}

looked_up_by_name_only!(
    NodePool,
    EC2NodeClass,
    DaemonSet,
    PodDisruptionBudget,
    PersistentVolumeClaim,
    Namespace
);

/// The key of an object in the index and in `MemoryClusterView`: `namespace/name`, or `name`
/// for a cluster-scoped object.
#[must_use]
pub fn object_key(metadata: &impl MetaFields) -> String {
    join_key(metadata.namespace(), metadata.name().unwrap_or_default())
}

/// The key of `name` in `namespace` (see [`object_key`]).
#[must_use]
pub fn join_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// An object key split back into namespace (if any) and name; names and namespaces cannot
/// contain `/`.
#[must_use]
pub fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((namespace, name)) => (Some(namespace), name),
        None => (None, key),
    }
}

/// One field's index: value -> keys of the objects that have it. A key is allocated once, and
/// a value once for every object that has it (the pods of a node share its name). An object
/// moves from the value of the version its store held before (the store hands it over), so
/// the index keeps no map back from key to value (at 50,000 bound pods, one more table of
/// 50,000 entries).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct FieldIndex {
    keys_by_value: FxHashMap<Arc<str>, BTreeSet<Arc<str>>>,
}

impl FieldIndex {
    /// Moves the object with `key` (made only if it moves) from `old` to `new` (`None`:
    /// nowhere).
    fn set(&mut self, key: impl FnOnce() -> String, old: Option<&str>, new: Option<&str>) {
        // Most changes leave the indexed fields alone: nothing to allocate then.
        if old == new {
            return;
        }
        let key = key();
        let key = old
            .and_then(|old| self.remove(&key, old))
            .unwrap_or_else(|| Arc::from(key));
        if let Some(value) = new {
            match self.keys_by_value.get_mut(value) {
                Some(keys) => {
                    keys.insert(key);
                }
                None => {
                    self.keys_by_value
                        .insert(Arc::from(value), BTreeSet::from([key]));
                }
            }
        }
    }

    /// Unfiles `key` from `value`; its shared name, for a caller that files it again.
    fn remove(&mut self, key: &str, value: &str) -> Option<Arc<str>> {
        let keys = self.keys_by_value.get_mut(value)?;
        let key = keys.take(key);
        if keys.is_empty() {
            self.keys_by_value.remove(value);
        }
        key
    }

    /// How many objects are filed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys_by_value.values().map(BTreeSet::len).sum()
    }
}

/// What the index hears: the store's events, named as kube-runtime's watcher names them.
#[derive(Debug)]
pub enum IndexEvent<'a, K> {
    /// An object was created or changed: its new version, and the version its store held
    /// before (which the index filed it by).
    Apply {
        object: &'a K,
        previous: Option<&'a K>,
    },
    /// An object was deleted: the version its store held (or the event's, if it held none).
    Delete(&'a K),
    /// A (re-)list began: the objects that follow replace the whole kind at `RelistDone`.
    RelistStarted,
    /// One object of the list, and the version the same list gave before (if it named the
    /// object twice).
    RelistApply {
        object: &'a K,
        previous: Option<&'a K>,
    },
    /// The list is complete: it replaces the index.
    RelistDone,
}

// Copy for any `K` (a derive would ask `K: Copy`): the event holds references only.
impl<K> Clone for IndexEvent<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for IndexEvent<'_, K> {}

/// The indexes of one kind, kept by the same events as its store.
pub struct KindIndex<K> {
    live: Vec<FieldIndex>,
    /// The index a re-list is filling; swapped in when it is done.
    relisting: Option<Vec<FieldIndex>>,
    kind: PhantomData<fn(&K)>,
}

impl<K> fmt::Debug for KindIndex<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KindIndex")
            .field(
                "values",
                &self.live.first().map_or(0, |i| i.keys_by_value.len()),
            )
            .field("relisting", &self.relisting.is_some())
            .finish()
    }
}

impl<K: Indexed> Default for KindIndex<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// Moves `object` (with `key`) from where `previous` was filed, field by field.
fn fill<K: Indexed>(
    fields: &mut [FieldIndex],
    key: impl Fn() -> String,
    object: &K,
    previous: Option<&K>,
) {
    for (index, field) in fields.iter_mut().zip(K::FIELDS) {
        let old = previous.and_then(|previous| field.value(previous));
        index.set(&key, old, field.value(object));
    }
}

impl<K: Indexed> KindIndex<K> {
    #[must_use]
    pub fn new() -> Self {
        Self {
            live: empty::<K>(),
            relisting: None,
            kind: PhantomData,
        }
    }

    /// Follows one event of the store.
    pub fn apply(&mut self, event: IndexEvent<'_, K>) {
        if K::FIELDS.is_empty() {
            return;
        }
        match event {
            IndexEvent::Apply { object, previous } => {
                fill(&mut self.live, || object.key(), object, previous);
            }
            IndexEvent::Delete(object) => self.remove(&object.key(), object),
            // A list that restarts before it completes starts over, as the store's buffer does.
            IndexEvent::RelistStarted => self.relisting = Some(empty::<K>()),
            IndexEvent::RelistApply { object, previous } => {
                let fields = self.relisting.get_or_insert_with(empty::<K>);
                fill(fields, || object.key(), object, previous);
            }
            IndexEvent::RelistDone => self.live = self.relisting.take().unwrap_or_else(empty::<K>),
        }
    }

    /// Files the object stored under `key` in place of `previous` (an in-memory store's put).
    pub fn insert(&mut self, key: &str, object: &K, previous: Option<&K>) {
        fill(&mut self.live, || key.to_owned(), object, previous);
    }

    /// Forgets `object`, stored under `key` (the version its store held).
    pub fn remove(&mut self, key: &str, object: &K) {
        for (index, field) in self.live.iter_mut().zip(K::FIELDS) {
            if let Some(value) = field.value(object) {
                index.remove(key, value);
            }
        }
    }

    /// Keys of the objects whose `field` is `value`, in key order. May name objects that
    /// changed since (see [`Self::find`]).
    pub fn keys<'a>(
        &'a self,
        field: &Field<K>,
        value: &str,
    ) -> impl Iterator<Item = &'a str> + use<'a, K> {
        self.live
            .get(field.position)
            .and_then(|index| index.keys_by_value.get(value))
            .into_iter()
            .flatten()
            .map(|key| &**key)
    }

    /// The objects whose `field` is `value`, in key order: each candidate of the index
    /// fetched with `get` and kept only if its field still holds `value`.
    pub fn find<A: Deref<Target = K>>(
        &self,
        field: &Field<K>,
        value: &str,
        mut get: impl FnMut(&str) -> Option<A>,
    ) -> Vec<A> {
        self.keys(field, value)
            .filter_map(&mut get)
            .filter(|object| field.value(object) == Some(value))
            .collect()
    }

    /// The first (by key) object whose `field` is `value`, re-checked as [`Self::find`] does.
    pub fn find_first<A: Deref<Target = K>>(
        &self,
        field: &Field<K>,
        value: &str,
        mut get: impl FnMut(&str) -> Option<A>,
    ) -> Option<A> {
        self.keys(field, value)
            .filter_map(&mut get)
            .find(|object| field.value(object) == Some(value))
    }
}

fn empty<K: Indexed>() -> Vec<FieldIndex> {
    K::FIELDS.iter().map(|_| FieldIndex::default()).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    // The view's slim types, under the names the literals below use.
    use karpenter_core::apis::{SharedPodSpec as PodSpec, SlimNode as Node, SlimPod as Pod};
    use proptest::prelude::*;

    use super::*;

    fn fields_sit_at_their_positions<K: Indexed>() {
        for (position, field) in K::FIELDS.iter().enumerate() {
            assert_eq!(field.position, position, "{}", field.name);
        }
    }

    #[test]
    fn every_field_sits_at_its_position() {
        fields_sit_at_their_positions::<SlimNodeClaim>();
        fields_sit_at_their_positions::<Node>();
        fields_sit_at_their_positions::<Pod>();
        fields_sit_at_their_positions::<NodePool>();
    }

    fn pod(name: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some("default".to_owned()),
                ..ObjectMeta::default()
            }
            .into(),
            spec: Some(
                PodSpec {
                    node_name: node.map(str::to_owned),
                    ..PodSpec::default()
                }
                .into(),
            ),
            ..Pod::default()
        }
    }

    fn node(name: &str, provider_id: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            }
            .into(),
            spec: Some(NodeSpec {
                provider_id: provider_id.map(str::to_owned),
                ..NodeSpec::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn a_pod_that_binds_moves_from_nowhere_to_its_node() {
        let mut index = KindIndex::<Pod>::new();
        let (unbound, bound) = (pod("web", None), pod("web", Some("n1")));
        index.apply(IndexEvent::Apply {
            object: &unbound,
            previous: None,
        });
        assert_eq!(index.keys(&POD_NODE_NAME, "n1").count(), 0);
        index.apply(IndexEvent::Apply {
            object: &bound,
            previous: Some(&unbound),
        });
        assert_eq!(
            index.keys(&POD_NODE_NAME, "n1").collect::<Vec<_>>(),
            ["default/web"]
        );
        index.apply(IndexEvent::Delete(&bound));
        assert_eq!(index.keys(&POD_NODE_NAME, "n1").count(), 0);
        assert_eq!(index.live[POD_NODE_NAME.position].len(), 0);
    }

    #[test]
    fn the_pods_of_a_node_share_its_name_and_a_moved_pod_keeps_its_key() {
        let mut index = KindIndex::<Pod>::new();
        for name in ["a", "b", "c"] {
            index.apply(IndexEvent::Apply {
                object: &pod(name, Some("n1")),
                previous: None,
            });
        }
        let field = &index.live[POD_NODE_NAME.position];
        assert_eq!(field.keys_by_value.len(), 1, "one value for the three");
        assert_eq!(field.len(), 3);
        let key_before = Arc::clone(field.keys_by_value["n1"].get("default/a").unwrap());
        index.apply(IndexEvent::Apply {
            object: &pod("a", Some("n2")),
            previous: Some(&pod("a", Some("n1"))),
        });
        let field = &index.live[POD_NODE_NAME.position];
        let key_after = field.keys_by_value["n2"].get("default/a").unwrap();
        assert!(
            Arc::ptr_eq(&key_before, key_after),
            "the moved pod keeps its key"
        );
        assert_eq!(field.len(), 3);
        assert_eq!(
            index.keys(&POD_NODE_NAME, "n1").collect::<Vec<_>>(),
            ["default/b", "default/c"]
        );
        for name in ["b", "c"] {
            index.apply(IndexEvent::Delete(&pod(name, Some("n1"))));
        }
        assert!(
            !index.live[POD_NODE_NAME.position]
                .keys_by_value
                .contains_key("n1")
        );
    }

    #[test]
    fn a_stale_entry_is_not_found_rather_than_a_wrong_object() {
        let mut index = KindIndex::<Node>::new();
        index.apply(IndexEvent::Apply {
            object: &node("n1", Some("i-1")),
            previous: None,
        });
        // The store moved on (n1 now has another provider id) before the index heard of it.
        let store = BTreeMap::from([("n1".to_owned(), Arc::new(node("n1", Some("i-2"))))]);
        let get = |key: &str| store.get(key).cloned();
        assert!(index.find_first(&NODE_PROVIDER_ID, "i-1", get).is_none());
        assert!(index.find(&NODE_PROVIDER_ID, "i-1", get).is_empty());
    }

    #[test]
    fn lookups_read_the_old_index_until_the_relist_is_done() {
        let mut index = KindIndex::<Node>::new();
        index.apply(IndexEvent::Apply {
            object: &node("n1", Some("i-1")),
            previous: None,
        });
        index.apply(IndexEvent::RelistStarted);
        index.apply(IndexEvent::RelistApply {
            object: &node("n2", Some("i-2")),
            previous: None,
        });
        assert_eq!(index.keys(&NODE_PROVIDER_ID, "i-1").count(), 1);
        assert_eq!(index.keys(&NODE_PROVIDER_ID, "i-2").count(), 0);
        index.apply(IndexEvent::RelistDone);
        assert_eq!(index.keys(&NODE_PROVIDER_ID, "i-1").count(), 0);
        assert_eq!(index.keys(&NODE_PROVIDER_ID, "i-2").count(), 1);
    }

    /// One step of the watch, over a few nodes and provider ids so that they collide.
    #[derive(Debug, Clone)]
    enum Step {
        Apply(u8, Option<u8>),
        Delete(u8),
        RelistStarted,
        RelistApply(u8, Option<u8>),
        RelistDone,
    }

    fn step() -> impl Strategy<Value = Step> {
        let name = 0u8..6;
        let id = proptest::option::of(0u8..4);
        prop_oneof![
            4 => (name.clone(), id.clone()).prop_map(|(n, i)| Step::Apply(n, i)),
            2 => name.clone().prop_map(Step::Delete),
            1 => Just(Step::RelistStarted),
            3 => (name, id).prop_map(|(n, i)| Step::RelistApply(n, i)),
            1 => Just(Step::RelistDone),
        ]
    }

    fn named(name: u8, id: Option<u8>) -> Node {
        node(&format!("n{name}"), id.map(|i| format!("i-{i}")).as_deref())
    }

    /// kube-runtime's reflector `Writer`: applies and deletes to the store, a re-list into a
    /// buffer swapped in at the end.
    #[derive(Default)]
    struct ModelStore {
        live: BTreeMap<String, Node>,
        buffer: BTreeMap<String, Node>,
    }

    proptest! {
        #[test]
        fn the_index_always_finds_what_a_scan_of_the_store_finds(
            steps in proptest::collection::vec(step(), 0..60)
        ) {
            let mut store = ModelStore::default();
            let mut index = KindIndex::<Node>::new();
            for step in steps {
                match step {
                    Step::Apply(n, i) => {
                        let object = named(n, i);
                        let previous = store.live.insert(object_key(&object.metadata), object.clone());
                        index.apply(IndexEvent::Apply { object: &object, previous: previous.as_ref() });
                    }
                    Step::Delete(n) => {
                        // The event's last state may differ from the stored one; the store
                        // hands the index the version it held.
                        let object = named(n, None);
                        let held = store.live.remove(&object_key(&object.metadata));
                        index.apply(IndexEvent::Delete(held.as_ref().unwrap_or(&object)));
                    }
                    Step::RelistStarted => {
                        store.buffer.clear();
                        index.apply(IndexEvent::RelistStarted);
                    }
                    Step::RelistApply(n, i) => {
                        let object = named(n, i);
                        let previous = store.buffer.insert(object_key(&object.metadata), object.clone());
                        index.apply(IndexEvent::RelistApply { object: &object, previous: previous.as_ref() });
                    }
                    Step::RelistDone => {
                        store.live = std::mem::take(&mut store.buffer);
                        index.apply(IndexEvent::RelistDone);
                    }
                }
                for id in (0..4).map(|i| format!("i-{i}")) {
                    let scanned: Vec<&str> = store
                        .live
                        .iter()
                        .filter(|(_, n)| NODE_PROVIDER_ID.value(n) == Some(id.as_str()))
                        .map(|(key, _)| key.as_str())
                        .collect();
                    let indexed: Vec<&str> = index.keys(&NODE_PROVIDER_ID, &id).collect();
                    prop_assert_eq!(&indexed, &scanned);
                    let found = index.find(&NODE_PROVIDER_ID, &id, |key| store.live.get(key));
                    prop_assert_eq!(found.len(), scanned.len());
                }
            }
        }
    }
}

//! The cluster-state store: one [`KindStore`] per watched kind, each with its
//! [`KindIndex`] (NodeClaims and Nodes by provider id, NodeClaims by NodePool, Pods and
//! `VolumeAttachments` by node).
//! The [`StateWriters`] (not cloneable, one [`KindWriter`] per kind) go to the ingress, the only
//! writer; readers clone [`ClusterState`] freely. Reads return `Arc`s of the stored objects and
//! hold no lock once they return, so nothing is held across an `.await`.
//!
//! ```text
//! watch event --> KindWriter::apply --> KindStore (insert, remove, re-list swap)
//!                                   \-> KindIndex (the same event, right after the store)
//!                                   \-> Applied (the stored Arc, for the change routed on)
//! lookup by field: index -> keys -> KindStore::get -> field re-checked (a stale entry is "not found")
//! ```
//!
//! The kinds come from [`karpenter_actors::for_each_watched_kind!`], the one list of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_actors::cluster_index::{
    Field, IndexEvent, Indexed, KindIndex, NODE_PROVIDER_ID, NODECLAIM_NODEPOOL,
    NODECLAIM_PROVIDER_ID, POD_NODE_NAME, VOLUME_ATTACHMENT_NODE_NAME, split_key,
};
use karpenter_core::apis::{EC2NodeClass, NodePool, SlimNodeClaim};
use karpenter_core::apis::{SlimNode, SlimPod};
use kube::runtime::watcher;
use tokio::sync::watch;

use super::store::{Applied, KindStore};

/// The index of one kind, shared by its writer and every reader.
type SharedIndex<K> = Arc<RwLock<KindIndex<K>>>;

/// How many kinds have been listed once, shared by the writers (each counts itself once) and
/// every reader. kube's own `Store::wait_until_ready` keeps a single waker: a second reader
/// polling it (a probe's `now_or_never`) silently takes the wake-up from the first, which then
/// waits forever. A watch channel wakes every waiter.
type SyncCount = Arc<watch::Sender<usize>>;

/// The number of watched kinds: synced once each has been listed.
const KINDS: usize = karpenter_actors::messages::WatchedKind::ALL.len();

/// The store was closed before every kind was listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the cluster store closed before every kind was listed")]
pub struct StoreClosed;

/// The writing half of one kind: its store and its index, fed the same events in the same
/// order.
pub struct KindWriter<K: Indexed + Clone + 'static> {
    store: KindStore<K>,
    index: SharedIndex<K>,
    /// Bumped after every applied event ([`ClusterState::changes`]).
    changes: Arc<AtomicU64>,
    synced: SyncCount,
    listed: bool,
}

impl<K> KindWriter<K>
where
    K: Indexed + Clone + 'static,
{
    /// Applies one watch event to the store (which takes its object), then to the index, and
    /// says what changed. A reader in between meets index entries that the store no longer
    /// backs; lookups re-check them.
    pub fn apply(&mut self, event: watcher::Event<K>) -> Applied<K> {
        let listing = matches!(event, watcher::Event::InitApply(_));
        let applied = self.store.apply(event);
        let event = match &applied {
            Applied::Stored {
                object,
                listed_before,
                ..
            } if listing => IndexEvent::RelistApply {
                object: object.as_ref(),
                previous: listed_before.as_deref(),
            },
            Applied::Stored {
                object, previous, ..
            } => IndexEvent::Apply {
                object: object.as_ref(),
                previous: previous.as_deref(),
            },
            Applied::Deleted { object, held } => {
                IndexEvent::Delete(held.as_deref().unwrap_or(object.as_ref()))
            }
            Applied::RelistStarted => IndexEvent::RelistStarted,
            Applied::Relisted => IndexEvent::RelistDone,
        };
        let done = matches!(event, IndexEvent::RelistDone);
        self.index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(event);
        self.changes.fetch_add(1, Ordering::Release);
        if done && !std::mem::replace(&mut self.listed, true) {
            self.synced.send_modify(|listed| *listed += 1);
        }
        applied
    }
}

impl<K: Indexed + Clone + 'static> std::fmt::Debug for KindWriter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindWriter").finish_non_exhaustive()
    }
}

/// The object of an index key (`namespace/name` or `name`).
fn by_key<K: Indexed>(store: &KindStore<K>, key: &str) -> Option<Arc<K>> {
    let (namespace, name) = split_key(key);
    store.get(namespace, name)
}

fn read<K>(index: &SharedIndex<K>) -> RwLockReadGuard<'_, KindIndex<K>> {
    index.read().unwrap_or_else(PoisonError::into_inner)
}

/// The store and the index of one kind, found by type.
trait StateKind: Indexed + Clone + 'static {
    fn parts(state: &ClusterState) -> (&KindStore<Self>, &SharedIndex<Self>);
}

macro_rules! cluster_state {
    ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
        /// Read access to every watched kind.
        #[derive(Clone)]
        pub struct ClusterState {
            $(pub $field: KindStore<$type>,)*
            indexes: Indexes,
            changes: Changes,
            synced: SyncCount,
        }

        #[derive(Clone)]
        struct Indexes {
            $($field: SharedIndex<$type>,)*
        }

        /// Each kind's count of applied events.
        #[derive(Clone, Default)]
        struct Changes {
            $($field: Arc<AtomicU64>,)*
        }

        impl std::fmt::Debug for ClusterState {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("ClusterState")
                    $(.field(stringify!($field), &self.$field.len()))*
                    .finish()
            }
        }

        /// The writing half of every store; owned by the ingress.
        pub struct StateWriters {
            $(pub $field: KindWriter<$type>,)*
        }

        $(impl StateKind for $type {
            fn parts(state: &ClusterState) -> (&KindStore<Self>, &SharedIndex<Self>) {
                (&state.$field, &state.indexes.$field)
            }
        })*

        /// An empty store with its writers.
        #[must_use]
        pub fn new() -> (ClusterState, StateWriters) {
            let synced: SyncCount = Arc::new(watch::channel(0).0);
            let changes = Changes::default();
            $(let $field = {
                let store = KindStore::default();
                let index: SharedIndex<$type> = Arc::default();
                (store.clone(), KindWriter {
                    store,
                    index,
                    changes: Arc::clone(&changes.$field),
                    synced: Arc::clone(&synced),
                    listed: false,
                })
            };)*
            (
                ClusterState {
                    indexes: Indexes {
                        $($field: Arc::clone(&$field.1.index),)*
                    },
                    changes,
                    $($field: $field.0,)*
                    synced,
                },
                StateWriters {
                    $($field: $field.1,)*
                },
            )
        }

        impl ClusterState {
            /// Waits until every kind has been listed once (any number of waiters).
            pub async fn wait_until_ready(&self) -> Result<(), StoreClosed> {
                let mut synced = self.synced.subscribe();
                synced
                    .wait_for(|listed| *listed >= KINDS)
                    .await
                    .map(|_| ())
                    .map_err(|_| StoreClosed)
            }

            /// Whether every kind has been listed once.
            #[must_use]
            pub fn is_synced(&self) -> bool {
                *self.synced.borrow() >= KINDS
            }

            /// How many watch events `kind` has had applied: a reader that walks every
            /// object of a kind skips its pass while this stays the same.
            #[must_use]
            pub fn changes(&self, kind: karpenter_actors::messages::WatchedKind) -> u64 {
                use karpenter_actors::messages::WatchedKind;
                match kind {
                    $(WatchedKind::$kind => self.changes.$field.load(Ordering::Acquire),)*
                }
            }
        }
    };
}

karpenter_actors::for_each_watched_kind!(cluster_state);

impl std::fmt::Debug for StateWriters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateWriters").finish_non_exhaustive()
    }
}

impl ClusterState {
    // The lookups below read the store while holding the index's read lock: the writer takes
    // the store's lock and then the index's, never both at once, so this cannot deadlock.

    /// The objects of `K` whose `field` is `value`, in key order, from the index.
    fn find<K: StateKind>(&self, field: &Field<K>, value: &str) -> Vec<Arc<K>> {
        let (store, index) = K::parts(self);
        read(index).find(field, value, |key| by_key(store, key))
    }

    /// The first (by key) object of `K` whose `field` is `value`, from the index.
    fn find_first<K: StateKind>(&self, field: &Field<K>, value: &str) -> Option<Arc<K>> {
        let (store, index) = K::parts(self);
        read(index).find_first(field, value, |key| by_key(store, key))
    }

    #[must_use]
    pub fn node(&self, name: &str) -> Option<Arc<SlimNode>> {
        self.nodes.get(None, name)
    }

    #[must_use]
    pub fn nodeclaim(&self, name: &str) -> Option<Arc<SlimNodeClaim>> {
        self.nodeclaims.get(None, name)
    }

    #[must_use]
    pub fn nodepool(&self, name: &str) -> Option<Arc<NodePool>> {
        self.nodepools.get(None, name)
    }

    #[must_use]
    pub fn ec2nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        self.ec2nodeclasses.get(None, name)
    }

    #[must_use]
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<SlimPod>> {
        self.pods.get(Some(namespace), name)
    }

    /// The node with this provider ID (the API server cannot select nodes by it); the first
    /// by name when several have it.
    #[must_use]
    pub fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<SlimNode>> {
        self.find_first(&NODE_PROVIDER_ID, provider_id)
    }

    /// Every node with this provider ID, by name.
    #[must_use]
    pub fn nodes_by_provider_id(&self, provider_id: &str) -> Vec<Arc<SlimNode>> {
        self.find(&NODE_PROVIDER_ID, provider_id)
    }

    /// The NodeClaim whose status carries this provider ID.
    #[must_use]
    pub fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<Arc<SlimNodeClaim>> {
        self.find_first(&NODECLAIM_PROVIDER_ID, provider_id)
    }

    /// The NodeClaims labelled with this NodePool, by name.
    #[must_use]
    pub fn nodeclaims_of_nodepool(&self, nodepool: &str) -> Vec<Arc<SlimNodeClaim>> {
        self.find(&NODECLAIM_NODEPOOL, nodepool)
    }

    /// Pods bound to a node, by namespace and name.
    #[must_use]
    pub fn pods_on_node(&self, node: &str) -> Vec<Arc<SlimPod>> {
        self.find(&POD_NODE_NAME, node)
    }

    /// The `VolumeAttachments` of a node, by name.
    #[must_use]
    pub fn volume_attachments_of_node(&self, node: &str) -> Vec<Arc<VolumeAttachment>> {
        self.find(&VOLUME_ATTACHMENT_NODE_NAME, node)
    }

    #[must_use]
    pub fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.pvcs.get(Some(namespace), name)
    }
}

/// The `ClusterView` list method of every kind: the whole store.
macro_rules! store_lists {
    ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
        $(fn $field(&self) -> Vec<Arc<$type>> {
            self.$field.state()
        })*
    };
}

/// [`ClusterState`] is the production [`ClusterView`]: the actors read the reflector stores
/// through it.
///
/// [`ClusterView`]: karpenter_actors::ports::cluster_view::ClusterView
impl karpenter_actors::ports::cluster_view::ClusterView for ClusterState {
    karpenter_actors::for_each_watched_kind!(store_lists);

    fn nodeclaim(&self, name: &str) -> Option<Arc<SlimNodeClaim>> {
        ClusterState::nodeclaim(self, name)
    }
    fn nodeclaim_by_provider_id(&self, provider_id: &str) -> Option<Arc<SlimNodeClaim>> {
        ClusterState::nodeclaim_by_provider_id(self, provider_id)
    }
    fn nodeclaims_of_nodepool(&self, nodepool: &str) -> Vec<Arc<SlimNodeClaim>> {
        ClusterState::nodeclaims_of_nodepool(self, nodepool)
    }
    fn nodepool(&self, name: &str) -> Option<Arc<NodePool>> {
        ClusterState::nodepool(self, name)
    }
    fn ec2nodeclass(&self, name: &str) -> Option<Arc<EC2NodeClass>> {
        ClusterState::ec2nodeclass(self, name)
    }
    fn node(&self, name: &str) -> Option<Arc<SlimNode>> {
        ClusterState::node(self, name)
    }
    fn node_by_provider_id(&self, provider_id: &str) -> Option<Arc<SlimNode>> {
        ClusterState::node_by_provider_id(self, provider_id)
    }
    fn nodes_by_provider_id(&self, provider_id: &str) -> Vec<Arc<SlimNode>> {
        ClusterState::nodes_by_provider_id(self, provider_id)
    }
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<SlimPod>> {
        ClusterState::pod(self, namespace, name)
    }
    fn pods_on_node(&self, node: &str) -> Vec<Arc<SlimPod>> {
        ClusterState::pods_on_node(self, node)
    }
    fn volume_attachments_of_node(&self, node: &str) -> Vec<Arc<VolumeAttachment>> {
        ClusterState::volume_attachments_of_node(self, node)
    }
    fn pvc(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        ClusterState::pvc(self, namespace, name)
    }
    fn is_synced(&self) -> bool {
        ClusterState::is_synced(self)
    }
    fn changes(&self, kind: karpenter_actors::messages::WatchedKind) -> Option<u64> {
        Some(ClusterState::changes(self, kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;

    fn node(name: &str, provider_id: &str) -> SlimNode {
        let mut node = SlimNode::default();
        node.metadata.name = Some(name.into());
        node.spec = Some(NodeSpec {
            provider_id: Some(provider_id.into()),
            ..NodeSpec::default()
        });
        node
    }

    #[test]
    fn a_relist_replaces_the_index_when_it_replaces_the_store() {
        let (state, mut writers) = new();
        writers
            .nodes
            .apply(watcher::Event::Apply(node("n1", "aws:///a/i-1")));
        assert!(state.node_by_provider_id("aws:///a/i-1").is_some());
        writers.nodes.apply(watcher::Event::Init);
        writers
            .nodes
            .apply(watcher::Event::InitApply(node("n2", "aws:///a/i-2")));
        // Until the list is done, both the store and the index show the old state.
        assert!(state.node_by_provider_id("aws:///a/i-1").is_some());
        assert!(state.node_by_provider_id("aws:///a/i-2").is_none());
        writers.nodes.apply(watcher::Event::InitDone);
        assert!(state.node_by_provider_id("aws:///a/i-1").is_none());
        assert_eq!(
            state
                .node_by_provider_id("aws:///a/i-2")
                .and_then(|n| n.metadata.name.clone())
                .as_deref(),
            Some("n2")
        );
    }

    #[test]
    fn a_store_ahead_of_its_index_answers_not_found_rather_than_a_wrong_node() {
        let (state, mut writers) = new();
        writers
            .nodes
            .apply(watcher::Event::Apply(node("n1", "aws:///a/i-1")));
        // The store hears of the change, the index not yet (a reader between the two).
        writers
            .nodes
            .store
            .apply(watcher::Event::Apply(node("n1", "aws:///a/i-9")));
        assert!(state.node_by_provider_id("aws:///a/i-1").is_none());
    }

    #[tokio::test]
    async fn every_waiter_hears_of_the_sync_even_with_a_poller_beside_it() {
        let (state, mut writers) = new();
        let sleepers: Vec<_> = (0..2)
            .map(|_| {
                let state = state.clone();
                tokio::spawn(async move { state.wait_until_ready().await })
            })
            .collect();
        tokio::task::yield_now().await;
        macro_rules! list_every_kind {
            ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
                $(
                    assert!(!state.is_synced());
                    // A probe polling the readiness meanwhile takes no wake-up from the waiters.
                    let _ = futures::FutureExt::now_or_never(state.wait_until_ready());
                    writers.$field.apply(watcher::Event::Init);
                    writers.$field.apply(watcher::Event::InitDone);
                    // A second list of the same kind does not count twice.
                    writers.$field.apply(watcher::Event::Init);
                    writers.$field.apply(watcher::Event::InitDone);
                )*
            };
        }
        karpenter_actors::for_each_watched_kind!(list_every_kind);
        assert!(state.is_synced());
        for waiter in sleepers {
            tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
                .await
                .expect("a waiter was never woken")
                .unwrap()
                .unwrap();
        }
    }
}

//! [`KindStore`]: one watched kind's objects by namespace and name, the reflector store of
//! [`super::state`].
//!
//! kube-runtime's reflector `Store` clones every object a watch event brings (its writer takes
//! the event by reference), keys it by an `ObjectRef` holding copies of the name, namespace,
//! uid and resourceVersion, and each lookup builds such a key. At 50,000 pods that was a copy
//! of every pod per event and a few hundred bytes per stored pod. This store takes the decoded
//! object by value, keys it by namespace then name (looked up by `&str`; a pod's key is its own
//! name, shared, not a copy), and hands the applied `Arc` back so the change routed to the
//! actors shares it.
//!
//! ```text
//! watch event --> KindStore::apply (by value) --> Apply/InitApply: Arc<K> in, Arc<K> out
//!                                                 Delete: removed; Init/InitDone: re-list
//! readers: get(namespace, name) / state() / len(), under a read lock held only for the call
//! ```
//!
//! A re-list fills a buffer that replaces the objects at its end, as kube's reflector does, so
//! readers see the old state until the new one is whole.

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use karpenter_actors::cluster_index::Indexed;
use kube::runtime::watcher;
use rustc_hash::FxHashMap;

/// Objects by name within one namespace (`""` for cluster-scoped kinds).
type Names<K> = FxHashMap<Arc<str>, Arc<K>>;
/// Objects by namespace, then name.
type Objects<K> = FxHashMap<String, Names<K>>;

/// One kind's objects, shared by its writer and every reader (clones share them).
#[derive(Debug)]
pub struct KindStore<K> {
    inner: Arc<RwLock<Inner<K>>>,
}

impl<K> Clone for KindStore<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K> Default for KindStore<K> {
    fn default() -> Self {
        Self {
            inner: Arc::new(RwLock::new(Inner {
                objects: Objects::default(),
                len: 0,
                relist: None,
            })),
        }
    }
}

#[derive(Debug)]
struct Inner<K> {
    objects: Objects<K>,
    len: usize,
    /// A re-list in progress: what it has listed so far.
    relist: Option<(Objects<K>, usize)>,
}

/// What an applied event changed, for the change routed to the actors.
#[derive(Debug)]
pub enum Applied<K> {
    /// An object stored (or listed), with the version the store held before (during a re-list,
    /// the version from before it).
    Stored {
        object: Arc<K>,
        previous: Option<Arc<K>>,
        /// During a re-list, the version the same list gave before (a list that names an
        /// object twice), which the re-list's index filed it by.
        listed_before: Option<Arc<K>>,
    },
    /// An object deleted: the event's last known state, and the version the store held.
    Deleted {
        object: Arc<K>,
        held: Option<Arc<K>>,
    },
    /// A re-list started.
    RelistStarted,
    /// A re-list ended: the store now holds exactly what it listed.
    Relisted,
}

/// Inserts `object` under its namespace and name; the object it replaced, if any. The key is
/// the new object's shared name, so a pod's key never holds an old version's name alive.
fn insert<K: Indexed>(objects: &mut Objects<K>, len: &mut usize, object: Arc<K>) -> Option<Arc<K>> {
    let (namespace, name) = object.names();
    let namespace = namespace.unwrap_or_default();
    let names = match objects.get_mut(namespace) {
        Some(names) => names,
        None => objects.entry(namespace.to_owned()).or_default(),
    };
    let previous = names.remove(name);
    if previous.is_none() {
        *len += 1;
    }
    names.insert(object.shared_name(), object);
    previous
}

impl<K: Indexed> KindStore<K> {
    fn read(&self) -> RwLockReadGuard<'_, Inner<K>> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner<K>> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The object `name` in `namespace` (`None` or `""` for a cluster-scoped kind).
    #[must_use]
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.read()
            .objects
            .get(namespace.unwrap_or_default())?
            .get(name)
            .cloned()
    }

    /// Every object, in no particular order.
    #[must_use]
    pub fn state(&self) -> Vec<Arc<K>> {
        let inner = self.read();
        let mut all = Vec::with_capacity(inner.len);
        for names in inner.objects.values() {
            all.extend(names.values().cloned());
        }
        all
    }

    /// How many objects it holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.read().len
    }

    /// Whether it holds no object.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies one watch event (taking its object) and says what changed.
    pub fn apply(&self, event: watcher::Event<K>) -> Applied<K> {
        let mut inner = self.write();
        let inner = &mut *inner;
        match event {
            watcher::Event::Apply(object) => {
                let object = Arc::new(object);
                let previous = insert(&mut inner.objects, &mut inner.len, Arc::clone(&object));
                Applied::Stored {
                    object,
                    previous,
                    listed_before: None,
                }
            }
            watcher::Event::InitApply(object) => {
                let (namespace, name) = object.names();
                let previous = inner
                    .objects
                    .get(namespace.unwrap_or_default())
                    .and_then(|names| names.get(name))
                    .cloned();
                let object = Arc::new(object);
                let (listed, len) = inner.relist.get_or_insert_with(Default::default);
                let listed_before = insert(listed, len, Arc::clone(&object));
                Applied::Stored {
                    object,
                    previous,
                    listed_before,
                }
            }
            watcher::Event::Delete(object) => {
                let (namespace, name) = object.names();
                let namespace = namespace.unwrap_or_default();
                let mut held = None;
                if let Some(names) = inner.objects.get_mut(namespace) {
                    held = names.remove(name);
                    if held.is_some() {
                        inner.len -= 1;
                    }
                    if names.is_empty() {
                        inner.objects.remove(namespace);
                    }
                }
                Applied::Deleted {
                    object: Arc::new(object),
                    held,
                }
            }
            watcher::Event::Init => {
                inner.relist = Some(Default::default());
                Applied::RelistStarted
            }
            watcher::Event::InitDone => {
                let (objects, len) = inner.relist.take().unwrap_or_default();
                inner.objects = objects;
                inner.len = len;
                Applied::Relisted
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::apis::SlimPod as Pod;

    fn pod(namespace: &str, name: &str, version: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.name = Some(name.into());
        pod.metadata.resource_version = Some(version.into());
        pod
    }

    fn version(pod: Option<Arc<Pod>>) -> Option<String> {
        pod.and_then(|p| p.metadata.resource_version.as_deref().map(str::to_owned))
    }

    #[test]
    fn an_applied_object_is_found_by_namespace_and_name_and_shared_with_the_change() {
        let store = KindStore::default();
        let Applied::Stored {
            object, previous, ..
        } = store.apply(watcher::Event::Apply(pod("a", "p", "1")))
        else {
            panic!("an apply stores");
        };
        assert!(previous.is_none());
        let held = store.get(Some("a"), "p").unwrap();
        assert!(
            Arc::ptr_eq(&object, &held),
            "the change shares the stored object"
        );
        assert!(store.get(Some("b"), "p").is_none(), "another namespace");
        assert!(store.get(None, "p").is_none(), "no namespace");
        let Applied::Stored { previous, .. } =
            store.apply(watcher::Event::Apply(pod("a", "p", "2")))
        else {
            panic!("an apply stores");
        };
        assert_eq!(version(previous).as_deref(), Some("1"));
        assert_eq!(version(store.get(Some("a"), "p")).as_deref(), Some("2"));
        assert_eq!(store.len(), 1);
        store.apply(watcher::Event::Delete(pod("a", "p", "3")));
        assert!(store.get(Some("a"), "p").is_none());
        assert!(store.is_empty());
        // Deleting what is not there changes nothing.
        store.apply(watcher::Event::Delete(pod("a", "p", "3")));
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn a_pods_key_is_its_current_versions_own_name_not_a_copy() {
        let store = KindStore::<Pod>::default();
        store.apply(watcher::Event::Apply(pod("ns", "web-0", "1")));
        store.apply(watcher::Event::Apply(pod("ns", "web-0", "2")));
        let inner = store.read();
        assert_eq!(inner.len, 1);
        let (key, held) = inner.objects["ns"]
            .iter()
            .next()
            .expect("the pod is stored");
        let name = held.metadata.name.as_ref().expect("the pod has a name");
        assert_eq!(held.metadata.resource_version.as_deref(), Some("2"));
        assert!(
            Arc::ptr_eq(key, name),
            "the key is the stored version's own name"
        );
    }

    #[test]
    fn a_relist_shows_the_old_state_until_it_is_done_then_exactly_what_it_listed() {
        let store = KindStore::default();
        store.apply(watcher::Event::Apply(pod("a", "kept", "1")));
        store.apply(watcher::Event::Apply(pod("a", "gone", "1")));
        store.apply(watcher::Event::Init);
        let Applied::Stored {
            object, previous, ..
        } = store.apply(watcher::Event::InitApply(pod("a", "kept", "2")))
        else {
            panic!("a listed object is stored");
        };
        assert_eq!(
            version(previous).as_deref(),
            Some("1"),
            "the version before the re-list"
        );
        assert_eq!(object.metadata.resource_version.as_deref(), Some("2"));
        store.apply(watcher::Event::InitApply(pod("b", "new", "1")));
        assert_eq!(store.len(), 2, "the old state until the list is done");
        assert!(store.get(Some("a"), "gone").is_some());
        assert!(matches!(
            store.apply(watcher::Event::InitDone),
            Applied::Relisted
        ));
        assert_eq!(store.len(), 2);
        assert!(store.get(Some("a"), "gone").is_none());
        assert_eq!(version(store.get(Some("a"), "kept")).as_deref(), Some("2"));
        assert!(store.get(Some("b"), "new").is_some());
        let mut names: Vec<String> = store
            .state()
            .iter()
            .filter_map(|p| p.metadata.name.as_deref().map(str::to_owned))
            .collect();
        names.sort();
        assert_eq!(names, ["kept", "new"]);
    }

    #[test]
    fn an_empty_relist_empties_the_store() {
        let store = KindStore::default();
        store.apply(watcher::Event::Apply(pod("a", "p", "1")));
        store.apply(watcher::Event::Init);
        store.apply(watcher::Event::InitDone);
        assert!(store.is_empty());
        assert!(store.state().is_empty());
    }
}

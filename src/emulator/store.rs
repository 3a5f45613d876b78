//! The emulator's storage: objects per kind, a global monotonic resourceVersion, and a bounded
//! history of watch events per kind.
//!
//! Objects are kept serialized ([`StoredObject::json`], compressed against a dictionary of their
//! kind: [`super::packed`]) next to the index selectors need (labels, selectable fields), so a
//! list concatenates bytes and a watch event is written once and shared by every watcher. One
//! `RwLock` guards everything: a write (the handler's read-modify-write, run inside
//! [`Store::write`]) is short and serialized; lists and watches read in parallel. Each write
//! bumps the kind's `tokio::sync::watch` channel to wake its watchers.
//!
//! The history of a kind keeps the events an open watch has yet to read and, past those, its
//! last [`Retention::read`] events for watches that resume later (a reconnect after a timeout),
//! never more than [`Retention::limit`]. Each open watch registers its position
//! ([`Store::follow`]), so while every watcher keeps up the history stays short however busy the
//! kind is, the way kube-apiserver's watch cache keeps only recent events. A watch resuming before
//! the oldest retained event (the kind's `floor`) gets 410 Gone, as from a compacted etcd.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use super::kinds::{Behavior, KindId, Kinds};
use super::packed::{Packed, Packer};
use super::selector::{self, Fields, Labels, Text};

/// Where an object lives: namespace (empty for cluster-scoped) and name. Ordered as the API
/// server lists: by namespace, then name. A stored key shares its strings: the store's map and
/// every version of the object hold one name, and the objects of a namespace one namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjectKey {
    pub namespace: Text,
    pub name: Text,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// One stored version of an object.
#[derive(Debug)]
pub(crate) struct StoredObject {
    pub key: ObjectKey,
    pub rv: u64,
    /// The object as JSON, with `metadata.resourceVersion` set to `rv` ([`Self::json`]).
    packed: Packed,
    pub labels: Labels,
    pub fields: Fields,
}

impl StoredObject {
    /// A version as stored, made outside a store (for tests of what reads one).
    #[cfg(test)]
    pub fn of(key: ObjectKey, rv: u64, behavior: Behavior, value: &Value) -> Self {
        Self {
            key,
            rv,
            packed: Packed::Plain(Bytes::from(value.to_string())),
            labels: selector::extract_labels(value),
            fields: selector::extract_fields(behavior, value),
        }
    }

    /// The object as JSON, with `metadata.resourceVersion` set to `rv`.
    pub fn json(&self) -> Bytes {
        self.packed.bytes()
    }

    /// The length of [`Self::json`].
    pub fn json_len(&self) -> usize {
        self.packed.len()
    }

    /// The object parsed back into a value.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json()).unwrap_or(Value::Null)
    }

    /// Heap bytes of this version but its selector index (which versions and objects share)
    /// and its namespace (which the objects in it share): its name counts with each version.
    fn own_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.packed.stored_len() + self.key.name.len()
    }
}

/// Heap bytes of a labels index: its entries, and each text `seen` does not hold yet.
fn labels_bytes(labels: &Labels, seen: &mut HashSet<*const ()>) -> usize {
    labels
        .iter()
        .map(|(k, v)| {
            std::mem::size_of::<(Text, Text)>() + text_bytes(k, seen) + text_bytes(v, seen)
        })
        .sum()
}

/// Heap bytes of a fields index: its entries, and each text `seen` does not hold yet.
fn fields_bytes(fields: &Fields, seen: &mut HashSet<*const ()>) -> usize {
    fields
        .iter()
        .map(|v| std::mem::size_of::<Text>() + text_bytes(v, seen))
        .sum()
}

/// An index's text, counted once (its bytes and the `Arc`'s two counts).
fn text_bytes(text: &Text, seen: &mut HashSet<*const ()>) -> usize {
    if seen.insert(Arc::as_ptr(text).cast::<()>()) {
        text.len() + 2 * std::mem::size_of::<usize>()
    } else {
        0
    }
}

/// One copy of each distinct selector index: the pods of a workload carry the same labels,
/// and the pods on a node in a phase the same fields, so they share one each. A new index's
/// texts are shared with every other index's (Nodes differ in a few labels of two dozen).
#[derive(Default)]
struct Indexes {
    labels: HashSet<Labels>,
    fields: HashSet<Fields>,
    texts: HashSet<Text>,
    /// Sweep unused entries when the sets reach this size.
    sweep_at: usize,
}

/// First size at which [`Indexes`] drops entries no object holds any more.
const FIRST_INDEX_SWEEP: usize = 1_024;

impl Indexes {
    /// The held indexes equal to `labels` and `fields` (or these, now held), and whether
    /// `labels` was new.
    fn share(&mut self, labels: &[(Text, Text)], fields: &[Text]) -> (Labels, Fields, bool) {
        self.sweep();
        let (labels, new_labels) = if let Some(held) = self.labels.get(labels) {
            (Arc::clone(held), false)
        } else {
            let labels: Labels = labels
                .iter()
                .map(|(k, v)| (self.text(k), self.text(v)))
                .collect();
            (intern(&mut self.labels, labels), true)
        };
        let fields = if let Some(held) = self.fields.get(fields) {
            Arc::clone(held)
        } else {
            let fields: Fields = fields.iter().map(|v| self.text(v)).collect();
            intern(&mut self.fields, fields)
        };
        (labels, fields, new_labels)
    }

    /// The held text equal to `text` (or `text`, now held).
    fn text(&mut self, text: &Text) -> Text {
        intern(&mut self.texts, Arc::clone(text))
    }

    /// Drops the entries only the sets hold, once they have doubled since the last sweep.
    fn sweep(&mut self) {
        if self.labels.len() + self.fields.len() < self.sweep_at.max(FIRST_INDEX_SWEEP) {
            return;
        }
        self.labels.retain(|l| Arc::strong_count(l) > 1);
        self.fields.retain(|f| Arc::strong_count(f) > 1);
        self.texts.retain(|t| Arc::strong_count(t) > 1);
        self.sweep_at = (self.labels.len() + self.fields.len()) * 2;
    }
}

/// The held value equal to `fresh`, or `fresh`, now held.
fn intern<T: Eq + std::hash::Hash + ?Sized>(set: &mut HashSet<Arc<T>>, fresh: Arc<T>) -> Arc<T> {
    if let Some(held) = set.get(&*fresh) {
        return Arc::clone(held);
    }
    set.insert(Arc::clone(&fresh));
    fresh
}

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One entry of a kind's history.
#[derive(Debug, Clone)]
pub(crate) struct HistoryEvent {
    pub event_type: EventType,
    pub object: Arc<StoredObject>,
    /// The version before a modification, so a filtered watch can tell an object that left or
    /// entered its selection.
    pub previous: Option<Arc<StoredObject>>,
}

/// How many events a kind's history keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retention {
    /// At most this many, however far behind a watcher is.
    pub limit: usize,
    /// This many once every open watch has read them.
    pub read: usize,
}

/// Where an open watch has read a kind's history up to; the history keeps what follows it.
#[derive(Debug)]
pub(crate) struct ReadPosition(Arc<AtomicU64>);

impl ReadPosition {
    /// The watch has read every event up to `rv`.
    pub fn advance(&self, rv: u64) {
        self.0.fetch_max(rv, Ordering::Relaxed);
    }
}

/// A watch asked for events older than the retained history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooOld {
    pub oldest_available: u64,
}

struct KindState {
    behavior: Behavior,
    objects: BTreeMap<ObjectKey, Arc<StoredObject>>,
    history: VecDeque<HistoryEvent>,
    /// Compresses the kind's objects against a dictionary of its own.
    packer: Packer,
    /// The positions of open watches; a dropped watch leaves a dead entry, pruned on use.
    readers: Vec<Weak<AtomicU64>>,
    /// Every event with a resourceVersion above `floor` is in `history`.
    floor: u64,
    notify: watch::Sender<u64>,
}

struct Inner {
    rv: u64,
    indexes: Indexes,
    kinds: Vec<KindState>,
    rng: u64,
}

/// The object store shared by every request.
pub(crate) struct Store {
    inner: RwLock<Inner>,
    retention: Retention,
    /// Behind its own lock: read while a write holds `inner` (a deletion's reply).
    recent: Mutex<RecentJson>,
}

/// The JSON of the latest writes as they were written, by resourceVersion: a write's reply and
/// the watch events right after it read the object at once, and the stored copy is compressed
/// (decompressing what was just compressed was a twentieth of a scale-up's time).
struct RecentJson {
    slots: Vec<Option<(u64, Bytes)>>,
}

/// Writes [`RecentJson`] remembers: more than the events a watch falls behind in a burst,
/// at a few kilobytes each.
const RECENT_JSON: usize = 256;

/// The JSON of `object`, from `recent` when it is there.
fn json_of(recent: &Mutex<RecentJson>, object: &StoredObject) -> Bytes {
    let remembered = recent
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(object.rv);
    remembered.unwrap_or_else(|| object.json())
}

impl RecentJson {
    fn new() -> Self {
        Self {
            slots: vec![None; RECENT_JSON],
        }
    }

    fn slot(rv: u64) -> usize {
        usize::try_from(rv % RECENT_JSON as u64).unwrap_or_default()
    }

    fn remember(&mut self, rv: u64, json: Bytes) {
        self.slots[Self::slot(rv)] = Some((rv, json));
    }

    fn get(&self, rv: u64) -> Option<Bytes> {
        match &self.slots[Self::slot(rv)] {
            Some((at, json)) if *at == rv => Some(json.clone()),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

/// Read access inside [`Store::read`].
pub(crate) struct View<'a> {
    inner: &'a Inner,
}

/// Read-write access inside [`Store::write`].
pub(crate) struct Txn<'a> {
    inner: &'a mut Inner,
    retention: Retention,
    recent: &'a Mutex<RecentJson>,
}

impl Store {
    pub fn new(kinds: &Kinds, retention: Retention, seed: u64) -> Self {
        let states = kinds
            .iter()
            .map(|(_, kind)| KindState {
                behavior: kind.behavior,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                packer: Packer::default(),
                readers: Vec::new(),
                floor: 0,
                notify: watch::channel(0).0,
            })
            .collect();
        Self {
            inner: RwLock::new(Inner {
                rv: 0,
                indexes: Indexes::default(),
                kinds: states,
                // Zero would stay zero under xorshift.
                rng: seed | 1,
            }),
            retention: Retention {
                limit: retention.limit.max(1),
                read: retention.read.clamp(1, retention.limit.max(1)),
            },
            recent: Mutex::new(RecentJson::new()),
        }
    }

    /// The JSON of a stored version: as written when it is one of the latest writes, else
    /// unpacked.
    pub fn json(&self, object: &StoredObject) -> Bytes {
        json_of(&self.recent, object)
    }

    fn read_guard(&self) -> RwLockReadGuard<'_, Inner> {
        // A panic while writing leaves the maps consistent (each write is one insert or remove),
        // so a poisoned lock is still usable.
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_guard(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn read<R>(&self, f: impl FnOnce(&View<'_>) -> R) -> R {
        let guard = self.read_guard();
        f(&View { inner: &guard })
    }

    pub fn write<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> R) -> R {
        let mut guard = self.write_guard();
        let mut txn = Txn {
            inner: &mut guard,
            retention: self.retention,
            recent: &self.recent,
        };
        f(&mut txn)
    }

    /// The latest resourceVersion.
    pub fn rv(&self) -> u64 {
        self.read_guard().rv
    }

    /// Bytes held by objects and history, and object counts, per kind.
    pub fn footprint(&self) -> Vec<(usize, usize, usize)> {
        View {
            inner: &self.read_guard(),
        }
        .footprint()
    }

    /// A receiver that changes whenever `kind` gets an event.
    pub fn subscribe(&self, kind: KindId) -> watch::Receiver<u64> {
        self.read_guard().kinds[kind].notify.subscribe()
    }

    /// Registers an open watch of `kind` that has read up to `from` (the latest resourceVersion
    /// when `None`): the history keeps every later event until the position advances past it or
    /// is dropped (or the kind reaches its limit).
    pub fn follow(&self, kind: KindId, from: Option<u64>) -> ReadPosition {
        let mut guard = self.write_guard();
        let position = Arc::new(AtomicU64::new(from.unwrap_or(guard.rv)));
        let readers = &mut guard.kinds[kind].readers;
        readers.retain(|r| r.strong_count() > 0);
        readers.push(Arc::downgrade(&position));
        ReadPosition(position)
    }

    /// Drops every kind's history: watches resuming from any earlier resourceVersion get 410.
    pub fn compact(&self) {
        let mut guard = self.write_guard();
        let rv = guard.rv;
        for state in &mut guard.kinds {
            state.history.clear();
            state.floor = rv;
        }
    }
}

impl View<'_> {
    /// The latest resourceVersion: every event of every kind so far is at or below it.
    pub fn rv(&self) -> u64 {
        self.inner.rv
    }

    pub fn get(&self, kind: KindId, key: &ObjectKey) -> Option<Arc<StoredObject>> {
        self.inner.kinds[kind].objects.get(key).cloned()
    }

    /// Objects of `kind` in `namespace` (all namespaces when `None`) after `after`, in key order.
    pub fn objects<'s>(
        &'s self,
        kind: KindId,
        namespace: Option<&str>,
        after: Option<&ObjectKey>,
    ) -> Box<dyn Iterator<Item = &'s Arc<StoredObject>> + 's> {
        range(&self.inner.kinds[kind].objects, namespace, after)
    }

    /// Events of `kind` after `since`, at most `max`; `TooOld` when some were compacted away.
    pub fn events_since(
        &self,
        kind: KindId,
        since: u64,
        max: usize,
    ) -> Result<Vec<HistoryEvent>, TooOld> {
        let state = &self.inner.kinds[kind];
        if since < state.floor {
            return Err(TooOld {
                oldest_available: state.floor,
            });
        }
        let start = state.history.partition_point(|e| e.object.rv <= since);
        Ok(state.history.range(start..).take(max).cloned().collect())
    }

    /// Bytes held by objects and history, and object counts, per kind. An index, an index's
    /// text or a compression dictionary several versions or objects share counts once, with the
    /// first that holds it (kinds in order, objects before history); the kind's dictionary
    /// samples count with its objects.
    pub fn footprint(&self) -> Vec<(usize, usize, usize)> {
        let mut seen = HashSet::new();
        let mut bytes = |version: &StoredObject| {
            let labels = seen
                .insert(Arc::as_ptr(&version.labels).cast::<()>())
                .then(|| labels_bytes(&version.labels, &mut seen));
            let fields = seen
                .insert(Arc::as_ptr(&version.fields).cast::<()>())
                .then(|| fields_bytes(&version.fields, &mut seen));
            let dictionary = version
                .packed
                .dictionary()
                .filter(|(at, _)| seen.insert(*at))
                .map(|(_, size)| size);
            version.own_bytes()
                + labels.unwrap_or(0)
                + fields.unwrap_or(0)
                + dictionary.unwrap_or(0)
        };
        let mut footprint = Vec::with_capacity(self.inner.kinds.len());
        for state in &self.inner.kinds {
            let objects: usize =
                state.packer.held_bytes() + state.objects.values().map(|o| bytes(o)).sum::<usize>();
            let history: usize = state
                .history
                .iter()
                .filter(|e| {
                    // The live version itself is counted above.
                    state
                        .objects
                        .get(&e.object.key)
                        .is_none_or(|live| !Arc::ptr_eq(live, &e.object))
                })
                .map(|e| bytes(&e.object))
                .sum();
            footprint.push((state.objects.len(), objects, history));
        }
        footprint
    }
}

fn range<'s>(
    objects: &'s BTreeMap<ObjectKey, Arc<StoredObject>>,
    namespace: Option<&str>,
    after: Option<&ObjectKey>,
) -> Box<dyn Iterator<Item = &'s Arc<StoredObject>> + 's> {
    use std::ops::Bound;
    let lower = match after {
        Some(key) => Bound::Excluded(key.clone()),
        None => match namespace {
            Some(ns) => Bound::Included(ObjectKey::new(ns, "")),
            None => Bound::Unbounded,
        },
    };
    match namespace {
        Some(ns) => {
            let ns: Text = ns.into();
            Box::new(
                objects
                    .range((lower, Bound::Unbounded))
                    .take_while(move |(k, _)| k.namespace == ns)
                    .map(|(_, v)| v),
            )
        }
        None => Box::new(objects.range((lower, Bound::Unbounded)).map(|(_, v)| v)),
    }
}

impl Txn<'_> {
    pub fn view(&self) -> View<'_> {
        View { inner: self.inner }
    }

    pub fn get(&self, kind: KindId, key: &ObjectKey) -> Option<Arc<StoredObject>> {
        self.inner.kinds[kind].objects.get(key).cloned()
    }

    /// A stored version parsed, from its JSON as written when it is one of the latest writes
    /// ([`StoredObject::value`] unpacks it).
    pub fn value(&self, object: &StoredObject) -> Value {
        serde_json::from_slice(&json_of(self.recent, object)).unwrap_or(Value::Null)
    }

    /// A pseudo-random number (seeded, so simulations replay).
    pub fn random(&mut self) -> u64 {
        let mut x = self.inner.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.inner.rng = x;
        x
    }

    /// Stores `object` under a new resourceVersion (written into its metadata) and records the
    /// event.
    pub fn put(
        &mut self,
        kind: KindId,
        key: ObjectKey,
        mut object: Value,
        event_type: EventType,
    ) -> Arc<StoredObject> {
        // The key the map holds for the object, or this one with its namespace shared.
        let key = match self.inner.kinds[kind].objects.get_key_value(&key) {
            Some((held, _)) => held.clone(),
            None => ObjectKey {
                namespace: self.inner.indexes.text(&key.namespace),
                name: key.name,
            },
        };
        let stored = self.stamp(kind, key, &mut object);
        let state = &mut self.inner.kinds[kind];
        let previous = state
            .objects
            .insert(stored.key.clone(), Arc::clone(&stored));
        self.record(kind, event_type, &stored, previous);
        stored
    }

    /// Removes the object; `last` is its final state, carried by the DELETED event under a new
    /// resourceVersion.
    pub fn remove(&mut self, kind: KindId, key: &ObjectKey, mut last: Value) -> Arc<StoredObject> {
        let previous = self.inner.kinds[kind].objects.remove_entry(key);
        let held = previous
            .as_ref()
            .map_or_else(|| key.clone(), |(held, _)| held.clone());
        let stored = self.stamp(kind, held, &mut last);
        let previous = previous.map(|(_, object)| object);
        self.record(kind, EventType::Deleted, &stored, previous);
        stored
    }

    fn stamp(&mut self, kind: KindId, key: ObjectKey, object: &mut Value) -> Arc<StoredObject> {
        self.inner.rv += 1;
        let rv = self.inner.rv;
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let behavior = self.inner.kinds[kind].behavior;
        // Exactly sized: a version kept as it is holds no spare room.
        let json = Bytes::from(
            serde_json::to_vec(object)
                .unwrap_or_default()
                .into_boxed_slice(),
        );
        // Most writes change neither, and most objects share theirs with others.
        let (labels, fields, new_labels) = self.inner.indexes.share(
            &selector::extract_labels(object),
            &selector::extract_fields(behavior, object),
        );
        let packer = &mut self.inner.kinds[kind].packer;
        packer.learn(&json, new_labels);
        let stored = Arc::new(StoredObject {
            key,
            rv,
            packed: packer.pack(&json),
            labels,
            fields,
        });
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remember(rv, json);
        stored
    }

    fn record(
        &mut self,
        kind: KindId,
        event_type: EventType,
        object: &Arc<StoredObject>,
        previous: Option<Arc<StoredObject>>,
    ) {
        let state = &mut self.inner.kinds[kind];
        state.history.push_back(HistoryEvent {
            event_type,
            object: Arc::clone(object),
            previous,
        });
        state.trim(self.retention);
        state.notify.send_replace(object.rv);
    }
}

impl KindState {
    /// Drops the oldest events beyond the limit, and beyond `read` those every open watch has read.
    fn trim(&mut self, retention: Retention) {
        if self.history.len() <= retention.read {
            return;
        }
        self.readers.retain(|r| r.strong_count() > 0);
        let read_by_all = self
            .readers
            .iter()
            .filter_map(Weak::upgrade)
            .map(|p| p.load(Ordering::Relaxed))
            .min()
            .unwrap_or(u64::MAX);
        while let Some(oldest) = self.history.front() {
            let over_limit = self.history.len() > retention.limit;
            let read = self.history.len() > retention.read && oldest.object.rv <= read_by_all;
            if !(over_limit || read) {
                break;
            }
            self.floor = oldest.object.rv;
            self.history.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str) -> Value {
        json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name, "namespace": "a" } })
    }

    fn pod_value(name: &str) -> Value {
        pod(name)
    }

    /// Keeps `limit` events whether or not they were read.
    fn keep(limit: usize) -> Retention {
        Retention { limit, read: limit }
    }

    fn add(store: &Store, kind: KindId, names: std::ops::Range<u32>) -> u64 {
        let mut rv = 0;
        for i in names {
            let name = format!("p{i}");
            rv = store
                .write(|t| {
                    t.put(
                        kind,
                        ObjectKey::new("a", &name),
                        pod(&name),
                        EventType::Added,
                    )
                })
                .rv;
        }
        rv
    }

    fn retained(store: &Store, kind: KindId) -> usize {
        store.read(|v| v.inner.kinds[kind].history.len())
    }

    #[test]
    fn history_keeps_what_an_open_watch_has_yet_to_read_up_to_the_limit() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, Retention { limit: 8, read: 2 }, 1);
        // Nobody watching: only the last `read` events stay.
        let start = add(&store, pods, 0..5);
        assert_eq!(retained(&store, pods), 2);
        // A watch that has read up to `start` holds everything after it...
        let behind = store.follow(pods, None);
        let read_up_to = add(&store, pods, 5..11);
        assert_eq!(retained(&store, pods), 6);
        store.read(|v| assert_eq!(v.events_since(pods, start, 100).unwrap().len(), 6));
        // ...but not beyond the limit.
        add(&store, pods, 11..14);
        assert_eq!(retained(&store, pods), 8);
        store.read(|v| assert!(v.events_since(pods, start, 100).is_err()));
        // Once it has read them, the next write trims to `read`.
        behind.advance(read_up_to + 3);
        add(&store, pods, 14..15);
        assert_eq!(retained(&store, pods), 2);
        // A watch that goes away without reading releases what it held.
        drop(behind);
        let laggard = store.follow(pods, None);
        add(&store, pods, 15..19);
        assert_eq!(retained(&store, pods), 4);
        drop(laggard);
        add(&store, pods, 19..20);
        assert_eq!(retained(&store, pods), 2);
    }

    #[test]
    fn every_version_of_an_object_shares_its_name_and_a_namespace_is_held_once() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(10), 1);
        let put = |name: &str, event| {
            store.write(|t| t.put(pods, ObjectKey::new("a", name), pod(name), event))
        };
        let first = put("x", EventType::Added);
        let second = put("x", EventType::Modified);
        let other = put("y", EventType::Added);
        assert!(Arc::ptr_eq(&first.key.name, &second.key.name));
        assert!(Arc::ptr_eq(&first.key.namespace, &other.key.namespace));
        let deleted = store.write(|t| t.remove(pods, &ObjectKey::new("a", "x"), pod("x")));
        assert!(Arc::ptr_eq(&first.key.name, &deleted.key.name));
        store.read(|v| {
            let (held, _) = v.inner.kinds[pods]
                .objects
                .get_key_value(&ObjectKey::new("a", "y"))
                .unwrap();
            assert!(
                Arc::ptr_eq(&held.name, &other.key.name),
                "the map's key too"
            );
        });
    }

    #[test]
    fn every_write_gets_a_higher_resource_version_written_into_the_object() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(10), 1);
        let first =
            store.write(|t| t.put(pods, ObjectKey::new("a", "x"), pod("x"), EventType::Added));
        let second =
            store.write(|t| t.put(pods, ObjectKey::new("a", "y"), pod("y"), EventType::Added));
        assert!(second.rv > first.rv);
        assert_eq!(
            first.value()["metadata"]["resourceVersion"],
            json!(first.rv.to_string())
        );
    }

    #[test]
    fn a_recent_write_is_served_as_written_and_an_older_one_unpacked_alike() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(10), 1);
        let first =
            store.write(|t| t.put(pods, ObjectKey::new("a", "x"), pod("x"), EventType::Added));
        let remembered = store.json(&first);
        assert_eq!(remembered, first.json());
        assert_eq!(store.write(|t| t.value(&first)), first.value());
        // Enough later writes that `first` is no longer among the remembered ones (and a
        // dictionary is learned, so it is read back from its packed copy).
        for i in 0..RECENT_JSON + 10 {
            let name = format!("y{i}");
            store.write(|t| {
                t.put(
                    pods,
                    ObjectKey::new("a", &name),
                    pod(&name),
                    EventType::Added,
                )
            });
        }
        assert!(store.recent.lock().unwrap().get(first.rv).is_none());
        assert_eq!(store.json(&first), remembered);
        assert_eq!(
            store.write(|t| t.value(&first))["metadata"]["resourceVersion"],
            json!(first.rv.to_string())
        );
    }

    #[test]
    fn history_beyond_the_limit_makes_old_resource_versions_too_old() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(2), 1);
        for name in ["a", "b", "c"] {
            store.write(|t| t.put(pods, ObjectKey::new("a", name), pod(name), EventType::Added));
        }
        store.read(|v| {
            assert!(v.events_since(pods, 0, 10).is_err());
            assert_eq!(v.events_since(pods, 1, 10).unwrap().len(), 2);
            assert_eq!(v.events_since(pods, 3, 10).unwrap().len(), 0);
        });
    }

    #[test]
    fn namespaced_ranges_list_only_that_namespace_in_name_order() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(10), 1);
        for (ns, name) in [("b", "z"), ("a", "y"), ("b", "a"), ("c", "a")] {
            store.write(|t| t.put(pods, ObjectKey::new(ns, name), pod(name), EventType::Added));
        }
        let names: Vec<String> = store.read(|v| {
            v.objects(pods, Some("b"), None)
                .map(|o| o.key.name.to_string())
                .collect()
        });
        assert_eq!(names, ["a", "z"]);
    }

    #[test]
    fn a_write_that_keeps_the_labels_shares_the_live_index_and_is_counted_once() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(10), 1);
        let labelled = |phase: &str, app: &str| {
            let mut pod = pod("x");
            pod["metadata"]["labels"] = json!({ "app": app });
            pod["status"] = json!({ "phase": phase });
            pod
        };
        let put = |phase: &str, app: &str| {
            store.write(|t| {
                t.put(
                    pods,
                    ObjectKey::new("a", "x"),
                    labelled(phase, app),
                    EventType::Modified,
                )
            })
        };
        let first = put("Pending", "web");
        let second = put("Running", "web");
        assert!(Arc::ptr_eq(&first.labels, &second.labels));
        assert!(
            !Arc::ptr_eq(&first.fields, &second.fields),
            "status.phase changed"
        );
        let third = put("Running", "web");
        assert!(Arc::ptr_eq(&second.labels, &third.labels));
        assert!(Arc::ptr_eq(&second.fields, &third.fields));
        // The live version counts in full; an older one in history counts its own bytes, and
        // only the index the live version does not share.
        let (objects, object_bytes, history_bytes) = store.footprint()[pods];
        assert_eq!(objects, 1);
        let mut seen = HashSet::new();
        let index = labels_bytes(&third.labels, &mut seen) + fields_bytes(&third.fields, &mut seen);
        assert!(index > 0);
        assert_eq!(
            object_bytes,
            third.own_bytes()
                + index
                + held_bytes(&store, pods)
                + dictionary_bytes(&mut seen, &[&third])
        );
        assert_eq!(
            history_bytes,
            first.own_bytes()
                + fields_bytes(&first.fields, &mut seen)
                + second.own_bytes()
                + dictionary_bytes(&mut seen, &[&first, &second])
        );
        let fourth = put("Running", "db");
        assert!(!Arc::ptr_eq(&third.labels, &fourth.labels));
        assert_eq!(&*fourth.labels, &[("app".into(), "db".into())]);
    }

    #[test]
    fn objects_with_equal_labels_and_fields_share_one_index_counted_once() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(1), 1);
        let put = |name: &str, node: &str| {
            let mut pod = pod(name);
            pod["metadata"]["labels"] = json!({ "app": "web", "tier": "front" });
            pod["spec"] = json!({ "nodeName": node });
            // Each pod its own IP, which the shared set leaves out.
            pod["status"] =
                json!({ "podIP": format!("10.0.0.{}", name.len() + name.as_bytes()[0] as usize) });
            store.write(|t| t.put(pods, ObjectKey::new("a", name), pod, EventType::Added))
        };
        let (a, b, c) = (put("a", "n1"), put("b", "n1"), put("c", "n2"));
        assert!(Arc::ptr_eq(&a.labels, &b.labels) && Arc::ptr_eq(&a.labels, &c.labels));
        assert!(
            Arc::ptr_eq(&a.fields, &b.fields),
            "on one node, with their own IPs"
        );
        assert!(!Arc::ptr_eq(&a.fields, &c.fields), "on another node");
        let (_, object_bytes, _) = store.footprint()[pods];
        let mut seen = HashSet::new();
        assert_eq!(
            object_bytes,
            a.own_bytes()
                + b.own_bytes()
                + c.own_bytes()
                + labels_bytes(&a.labels, &mut seen)
                + fields_bytes(&a.fields, &mut seen)
                + fields_bytes(&c.fields, &mut seen)
                + held_bytes(&store, pods)
                + dictionary_bytes(&mut seen, &[&a, &b, &c])
        );
        // The two field sets share every text but the node's name.
        assert!(Arc::ptr_eq(&a.fields[1], &c.fields[1]), "restartPolicy");
        assert!(!Arc::ptr_eq(&a.fields[0], &c.fields[0]), "nodeName");
    }

    /// The kind's dictionary samples and encoder.
    fn held_bytes(store: &Store, kind: KindId) -> usize {
        let held = store.read(|v| v.inner.kinds[kind].packer.held_bytes());
        assert!(held > 0);
        held
    }

    /// The dictionaries the versions need, each once over every call with one `seen`.
    fn dictionary_bytes(seen: &mut HashSet<*const ()>, versions: &[&StoredObject]) -> usize {
        versions
            .iter()
            .filter_map(|v| v.packed.dictionary())
            .filter(|(at, _)| seen.insert(*at))
            .map(|(_, size)| size)
            .sum()
    }

    #[test]
    fn stored_objects_read_back_as_written_whether_packed_or_not() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(10), 1);
        let written: Vec<Arc<StoredObject>> = (0..20)
            .map(|i| {
                let name = format!("web-{i}");
                let mut pod = pod(&name);
                pod["metadata"]["labels"] = json!({ "app": "web" });
                pod["spec"] = json!({ "nodeName": format!("node-{}", i % 3) });
                store.write(|t| t.put(pods, ObjectKey::new("a", &name), pod, EventType::Added))
            })
            .collect();
        // Each is packed against a dictionary that holds the first pods (itself among them).
        assert!(written.iter().all(|w| w.packed.dictionary().is_some()));
        assert!(written[19].packed.stored_len() * 2 < written[19].json_len());
        for (i, version) in written.iter().enumerate() {
            let value = version.value();
            assert_eq!(value["metadata"]["name"], json!(format!("web-{i}")));
            assert_eq!(
                value["metadata"]["resourceVersion"],
                json!(version.rv.to_string())
            );
            assert_eq!(value["spec"]["nodeName"], json!(format!("node-{}", i % 3)));
            assert_eq!(version.json().len(), version.json_len());
        }
    }

    #[test]
    fn an_index_no_object_holds_is_dropped_when_the_sets_have_grown() {
        let kinds = Kinds::new();
        let pods = kinds.find("", "v1", "pods").unwrap();
        let store = Store::new(&kinds, keep(1), 1);
        for i in 0..3 * FIRST_INDEX_SWEEP {
            let name = format!("p{i}");
            let mut pod = pod(&name);
            pod["metadata"]["labels"] = json!({ "app": name });
            store.write(|t| t.put(pods, ObjectKey::new("a", &name), pod, EventType::Added));
            // Each pod replaces the last, so only the newest labels are in use.
            if i > 0 {
                let gone = format!("p{}", i - 1);
                store.write(|t| t.remove(pods, &ObjectKey::new("a", &gone), pod_value(&gone)));
            }
        }
        let held = store.read(|v| v.inner.indexes.labels.len());
        assert!(held < FIRST_INDEX_SWEEP, "{held} label sets held");
    }
}

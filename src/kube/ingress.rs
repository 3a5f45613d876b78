//! The cluster ingress: one kube-runtime watcher per kind (the kinds of
//! [`karpenter_actors::for_each_watched_kind!`]: EC2NodeClasses, NodePools, NodeClaims, Nodes,
//! Pods, DaemonSets, PodDisruptionBudgets) feeding the [`ClusterState`] (each store through its
//! reflector writer, then its index), and routing each change to the kind's subscribers.
//!
//! ```text
//! API server -> watcher (list, watch, backoff, re-list on 410) -> store, then index
//!                                                                 \-> subscribers (ChangeSink)
//! ```
//!
//! A subscriber hears of a change only after the store and the index both hold it.
//!
//! Subscribers get [`Observed`] changes through a [`ChangeSink`]: a tokio `mpsc::Sender` works
//! as one (`try_send`; a full channel drops the change and counts it), and the actor runtime can
//! implement the trait for its own mailboxes. A dropped change is recoverable: the store is
//! always current, and a re-list ends with [`Observed::Relisted`] so owners re-read it. Objects
//! that vanished while the watch was down arrive as [`Observed::Deleted`] after the re-list.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt as _;
use karpenter_actors::cluster_index::Indexed;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::state::{self, ClusterState, KindWriter, StateWriters};

/// A change of one object, as its owner hears of it.
#[derive(Debug, Clone)]
pub enum Observed<K> {
    /// Created or changed (also sent for every object of a re-list), with the version the store
    /// held before (`None` when it held none: a creation, or an object first listed). During a
    /// re-list that is the version from before the re-list (kube's reflector swaps the listed
    /// objects in at its end), so, as client-go's informers do, a re-listed object that did not
    /// change meanwhile arrives as an update to itself and one that appeared as a creation.
    Applied {
        object: Arc<K>,
        previous: Option<Arc<K>>,
    },
    /// Deleted (its last known state).
    Deleted(Arc<K>),
    /// A re-list finished: the store holds the whole current state.
    Relisted,
}

/// What became of a delivered change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Delivered,
    /// The subscriber is full; the change was dropped (counted).
    Full,
    /// The subscriber is gone.
    Closed,
}

/// Where changes of kind `K` go.
pub trait ChangeSink<K>: Send + Sync {
    fn deliver(&self, change: Observed<K>) -> Delivery;
}

impl<K: Send + Sync> ChangeSink<K> for mpsc::Sender<Observed<K>> {
    fn deliver(&self, change: Observed<K>) -> Delivery {
        match self.try_send(change) {
            Ok(()) => Delivery::Delivered,
            Err(mpsc::error::TrySendError::Full(_)) => Delivery::Full,
            Err(mpsc::error::TrySendError::Closed(_)) => Delivery::Closed,
        }
    }
}

/// Counters of one kind's watcher.
#[derive(Debug, Default)]
pub struct KindCounters {
    /// Watch events applied to the store.
    pub events: AtomicU64,
    /// Changes dropped because a subscriber was full.
    pub dropped: AtomicU64,
    /// Watch errors (each followed by a backoff and a retry).
    pub errors: AtomicU64,
    /// Completed (re-)lists.
    pub relists: AtomicU64,
}

type Sinks<K> = Vec<Box<dyn ChangeSink<K>>>;

macro_rules! per_kind {
    ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
        /// Counters per kind, shared with whoever exports metrics.
        #[derive(Debug, Default)]
        pub struct IngressCounters {
            $(pub $field: KindCounters,)*
        }

        /// The subscribers of every kind (filled through [`ClusterIngress::subscribe`]).
        #[derive(Default)]
        pub struct Subscribers {
            $($field: Sinks<$type>,)*
        }

        impl fmt::Debug for Subscribers {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct("Subscribers")
                    $(.field(stringify!($field), &self.$field.len()))*
                    .finish()
            }
        }

        $(impl Watched for $type {
            fn subscribers(subscribers: &mut Subscribers) -> &mut Sinks<Self> {
                &mut subscribers.$field
            }
        })*
    };
}

karpenter_actors::for_each_watched_kind!(per_kind);

/// A kind the ingress watches.
pub trait Watched:
    Resource<DynamicType = ()> + Indexed + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static
{
    #[doc(hidden)]
    fn subscribers(subscribers: &mut Subscribers) -> &mut Sinks<Self>;
}

/// Watches the cluster and keeps the store; build it, subscribe, then [`ClusterIngress::run`].
pub struct ClusterIngress {
    client: Client,
    writers: StateWriters,
    state: ClusterState,
    subscribers: Subscribers,
    counters: Arc<IngressCounters>,
    config: watcher::Config,
}

impl fmt::Debug for ClusterIngress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterIngress")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl ClusterIngress {
    /// An ingress over `client` with kube's default watcher configuration (pages of 500,
    /// bookmarks on).
    #[must_use]
    pub fn new(client: Client) -> Self {
        Self::with_config(client, watcher::Config::default())
    }

    #[must_use]
    pub fn with_config(client: Client, config: watcher::Config) -> Self {
        let (state, writers) = state::new();
        Self {
            client,
            writers,
            state,
            subscribers: Subscribers::default(),
            counters: Arc::default(),
            config,
        }
    }

    /// The store's read side.
    #[must_use]
    pub fn state(&self) -> ClusterState {
        self.state.clone()
    }

    /// Counters per kind.
    #[must_use]
    pub fn counters(&self) -> Arc<IngressCounters> {
        Arc::clone(&self.counters)
    }

    /// Routes changes of `K` to `sink` as well.
    pub fn subscribe<K: Watched>(&mut self, sink: impl ChangeSink<K> + 'static) {
        K::subscribers(&mut self.subscribers).push(Box::new(sink));
    }

    /// A channel of `K` changes with room for `capacity` (sized by the subscriber's role).
    pub fn channel<K: Watched>(&mut self, capacity: usize) -> mpsc::Receiver<Observed<K>> {
        let (sender, receiver) = mpsc::channel(capacity.max(1));
        self.subscribe(sender);
        receiver
    }

    /// Watches every kind until the task is dropped (watch errors back off and retry forever).
    pub async fn run(self) {
        let Self {
            client,
            writers,
            subscribers,
            counters,
            config,
            state,
        } = self;
        // One `follow` per kind, all on this task.
        macro_rules! follow_every_kind {
            ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
                tokio::join!($(follow(
                    Api::<$type>::all(client.clone()),
                    writers.$field,
                    state.$field.clone(),
                    subscribers.$field,
                    &counters.$field,
                    config.clone(),
                )),*)
            };
        }
        karpenter_actors::for_each_watched_kind!(follow_every_kind);
    }
}

fn deliver<K>(sinks: &[Box<dyn ChangeSink<K>>], counters: &KindCounters, change: &Observed<K>)
where
    K: Clone,
{
    for sink in sinks {
        if sink.deliver(change.clone()) == Delivery::Full {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One kind: watch, reflect into the store, route changes.
async fn follow<K: Watched>(
    api: Api<K>,
    mut writer: KindWriter<K>,
    reader: Store<K>,
    sinks: Sinks<K>,
    counters: &KindCounters,
    config: watcher::Config,
) {
    let kind = K::kind(&());
    // The reflector's work, done here so the index follows each event right after the store.
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut before_relist: Vec<Arc<K>> = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                // The version this event replaces, read before the store takes it.
                let previous = match &event {
                    watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                        reader.get(&ObjectRef::from_obj(object))
                    }
                    watcher::Event::Init | watcher::Event::InitDone | watcher::Event::Delete(_) => {
                        None
                    }
                };
                writer.apply(&event);
                counters.events.fetch_add(1, Ordering::Relaxed);
                match event {
                    watcher::Event::Init => before_relist = reader.state(),
                    watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                        let object = Arc::new(object);
                        deliver(&sinks, counters, &Observed::Applied { object, previous });
                    }
                    watcher::Event::Delete(object) => {
                        deliver(&sinks, counters, &Observed::Deleted(Arc::new(object)));
                    }
                    watcher::Event::InitDone => {
                        counters.relists.fetch_add(1, Ordering::Relaxed);
                        let present: HashSet<ObjectRef<K>> = reader
                            .state()
                            .iter()
                            .map(|o| ObjectRef::from_obj(o.as_ref()))
                            .collect();
                        for gone in std::mem::take(&mut before_relist) {
                            if !present.contains(&ObjectRef::from_obj(gone.as_ref())) {
                                deliver(&sinks, counters, &Observed::Deleted(gone));
                            }
                        }
                        deliver(&sinks, counters, &Observed::Relisted);
                    }
                }
            }
            Err(error) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    kind = %kind,
                    error = karpenter_actors::logs::err(&error),
                    "watch failed; retrying with backoff"
                );
            }
        }
    }
}

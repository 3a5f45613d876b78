//! The cluster ingress: one kube-runtime watcher per kind (Pods, Nodes, NodeClaims, NodePools,
//! EC2NodeClasses, DaemonSets, PodDisruptionBudgets) feeding the [`ClusterState`] through
//! reflectors, and routing each change to the kind's subscribers.
//!
//! ```text
//! API server -> watcher (list, watch, backoff, re-list on 410) -> reflector -> store
//!                                                                 \-> subscribers (ChangeSink)
//! ```
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
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_core::apis::{EC2NodeClass, NodeClaim, NodePool};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::state::{self, ClusterState, StateWriters};

/// A change of one object, as its owner hears of it.
#[derive(Debug, Clone)]
pub enum Observed<K> {
    /// Created or changed (also sent for every object of a re-list).
    Applied(Arc<K>),
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

/// Counters per kind, shared with whoever exports metrics.
#[derive(Debug, Default)]
pub struct IngressCounters {
    pub pods: KindCounters,
    pub nodes: KindCounters,
    pub nodeclaims: KindCounters,
    pub nodepools: KindCounters,
    pub ec2nodeclasses: KindCounters,
    pub daemonsets: KindCounters,
    pub pdbs: KindCounters,
}

type Sinks<K> = Vec<Box<dyn ChangeSink<K>>>;

impl fmt::Debug for Subscribers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscribers")
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

/// The subscribers of every kind (filled through [`ClusterIngress::subscribe`]).
#[derive(Default)]
pub struct Subscribers {
    pods: Sinks<Pod>,
    nodes: Sinks<Node>,
    nodeclaims: Sinks<NodeClaim>,
    nodepools: Sinks<NodePool>,
    ec2nodeclasses: Sinks<EC2NodeClass>,
    daemonsets: Sinks<DaemonSet>,
    pdbs: Sinks<PodDisruptionBudget>,
}

/// A kind the ingress watches.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static
{
    #[doc(hidden)]
    fn subscribers(subscribers: &mut Subscribers) -> &mut Sinks<Self>;
}

macro_rules! watched {
    ($($type:ty => $field:ident),* $(,)?) => {
        $(impl Watched for $type {
            fn subscribers(subscribers: &mut Subscribers) -> &mut Sinks<Self> {
                &mut subscribers.$field
            }
        })*
    };
}

watched!(
    Pod => pods,
    Node => nodes,
    NodeClaim => nodeclaims,
    NodePool => nodepools,
    EC2NodeClass => ec2nodeclasses,
    DaemonSet => daemonsets,
    PodDisruptionBudget => pdbs,
);

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
        let c = &counters;
        tokio::join!(
            follow(
                Api::<Pod>::all(client.clone()),
                writers.pods,
                state.pods.clone(),
                subscribers.pods,
                &c.pods,
                config.clone()
            ),
            follow(
                Api::<Node>::all(client.clone()),
                writers.nodes,
                state.nodes.clone(),
                subscribers.nodes,
                &c.nodes,
                config.clone()
            ),
            follow(
                Api::<NodeClaim>::all(client.clone()),
                writers.nodeclaims,
                state.nodeclaims.clone(),
                subscribers.nodeclaims,
                &c.nodeclaims,
                config.clone()
            ),
            follow(
                Api::<NodePool>::all(client.clone()),
                writers.nodepools,
                state.nodepools.clone(),
                subscribers.nodepools,
                &c.nodepools,
                config.clone()
            ),
            follow(
                Api::<EC2NodeClass>::all(client.clone()),
                writers.ec2nodeclasses,
                state.ec2nodeclasses.clone(),
                subscribers.ec2nodeclasses,
                &c.ec2nodeclasses,
                config.clone()
            ),
            follow(
                Api::<DaemonSet>::all(client.clone()),
                writers.daemonsets,
                state.daemonsets.clone(),
                subscribers.daemonsets,
                &c.daemonsets,
                config.clone()
            ),
            follow(
                Api::<PodDisruptionBudget>::all(client),
                writers.pdbs,
                state.pdbs.clone(),
                subscribers.pdbs,
                &c.pdbs,
                config
            ),
        );
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
    writer: Writer<K>,
    reader: Store<K>,
    sinks: Sinks<K>,
    counters: &KindCounters,
    config: watcher::Config,
) {
    let kind = K::kind(&());
    let stream = reflector::reflector(writer, watcher::watcher(api, config).default_backoff());
    let mut stream = std::pin::pin!(stream);
    let mut before_relist: Vec<Arc<K>> = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                counters.events.fetch_add(1, Ordering::Relaxed);
                match event {
                    watcher::Event::Init => before_relist = reader.state(),
                    watcher::Event::InitApply(object) | watcher::Event::Apply(object) => {
                        deliver(&sinks, counters, &Observed::Applied(Arc::new(object)));
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
                tracing::warn!(%kind, %error, "watch failed; retrying with backoff");
            }
        }
    }
}

//! The cluster ingress: one kube-runtime watcher per kind (the kinds of
//! [`karpenter_actors::for_each_watched_kind!`]: EC2NodeClasses, NodePools, NodeClaims, Nodes,
//! Pods, DaemonSets, PodDisruptionBudgets, `VolumeAttachments`, `PersistentVolumeClaims`) feeding
//! the [`ClusterState`] (each store through its reflector writer, then its index), and routing each
//! change to the kind's subscribers.
//!
//! ```text
//! API server -> watcher (list, watch, backoff, re-list on 410) -> store, then index
//!                                                                 \-> subscribers (ChangeSink)
//! ```
//!
//! A subscriber hears of a change only after the store and the index both hold it.
//!
//! Each kind's watch is supervised: if it ends or panics (a subscriber's or the index's bug) it
//! is started again after a backoff with a fresh watcher, whose first list replaces the store
//! and the index whole (so a half-applied event cannot survive the restart). [`IngressHealth`]
//! keeps, per kind, whether its watch keeps failing and how often it was restarted; the daemon
//! turns that into a liveness check per kind (`watch-pods`, ...). kube-runtime's watcher
//! consumes bookmarks itself, so a watch that is silent is not stale by itself: the watcher
//! ends a watch that stayed silent past its server-side timeout plus a margin, and reconnects;
//! if that keeps failing, the kind's check fails.
//!
//! Subscribers get [`Observed`] changes through a [`ChangeSink`]: a tokio `mpsc::Sender` works
//! as one (`try_send`; a full channel drops the change and counts it), and the actor runtime can
//! implement the trait for its own mailboxes. A dropped change is recoverable: the store is
//! always current, and a re-list ends with [`Observed::Relisted`] so owners re-read it. Objects
//! that vanished while the watch was down arrive as [`Observed::Deleted`] after the re-list.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{FutureExt as _, StreamExt as _};
use karpenter_actors::cluster_index::Indexed;
use karpenter_actors::metrics::ClusterStateMetrics;
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::lenient::{Undecodable, WireFormat};
use super::state::{self, ClusterState, KindWriter, StateWriters};
use super::store::{Applied, KindStore};

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
    /// Times the watch ended or panicked and was started again.
    pub restarts: AtomicU64,
    /// Objects skipped because they could not be decoded (each version once).
    pub undecodable: AtomicU64,
}

/// How long a kind's watch may keep failing (every try an error, no event in between) before
/// its liveness check fails: longer than an API server upgrade usually keeps it away, while
/// kube-runtime's watcher retries with backoff (at most about every 30 s) meanwhile.
pub const WATCH_FAILING_LIMIT: Duration = Duration::from_mins(5);
/// Restarts of one kind's watch within [`RESTART_WINDOW`] past which its check fails: a watch
/// that keeps dying is a bug a fresh process may not have.
pub const MAX_RESTARTS: usize = 5;
/// See [`MAX_RESTARTS`].
pub const RESTART_WINDOW: Duration = Duration::from_mins(10);
/// A failing watch that has seen no error for this long has reconnected (kube-runtime's watcher
/// retries at most 30 s apart while it fails, and a reconnected watch that sees no change sends
/// us nothing: its bookmarks stay inside the watcher).
const RECOVERED_AFTER: Duration = Duration::from_mins(1);
/// The first wait before a dead watch is started again; doubles up to [`MAX_RESTART_BACKOFF`].
const MIN_RESTART_BACKOFF: Duration = Duration::from_secs(1);
const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);

/// The health of one kind's watch.
#[derive(Debug, Default)]
struct WatchState {
    /// Since when every try failed (none while events arrive).
    failing_since: Option<Instant>,
    last_error: Option<String>,
    last_error_at: Option<Instant>,
    /// When the watch was restarted, within the window.
    restarts: VecDeque<Instant>,
    /// Why it last died.
    last_death: Option<String>,
}

/// Per kind (by plural): is its watch healthy. Shared by the ingress (writer) and the checks.
#[derive(Debug, Default)]
pub struct IngressHealth {
    kinds: Mutex<BTreeMap<&'static str, WatchState>>,
}

impl IngressHealth {
    fn with<T>(&self, kind: &'static str, f: impl FnOnce(&mut WatchState) -> T) -> T {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        f(kinds.entry(kind).or_default())
    }

    /// The kinds watched (plurals).
    #[must_use]
    pub fn kinds(&self) -> Vec<&'static str> {
        self.kinds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect()
    }

    fn progressed(&self, kind: &'static str) {
        self.with(kind, |state| {
            state.failing_since = None;
        });
    }

    fn failed(&self, kind: &'static str, error: String) {
        self.with(kind, |state| {
            let now = Instant::now();
            if state
                .last_error_at
                .is_some_and(|at| now.duration_since(at) >= RECOVERED_AFTER)
            {
                // It recovered in between without an event to show for it.
                state.failing_since = None;
            }
            state.failing_since.get_or_insert(now);
            state.last_error = Some(error);
            state.last_error_at = Some(now);
        });
    }

    fn died(&self, kind: &'static str, why: String) {
        self.with(kind, |state| {
            let now = Instant::now();
            state.restarts.push_back(now);
            while state
                .restarts
                .front()
                .is_some_and(|at| now.duration_since(*at) > RESTART_WINDOW)
            {
                state.restarts.pop_front();
            }
            state.last_death = Some(why);
        });
    }

    /// The liveness verdict for `kind`: failing for longer than [`WATCH_FAILING_LIMIT`] (errors
    /// still arriving, no event in between), or
    /// restarted more than [`MAX_RESTARTS`] times within [`RESTART_WINDOW`].
    pub fn check(&self, kind: &'static str) -> Result<(), String> {
        self.with(kind, |state| {
            let now = Instant::now();
            let recent = state
                .restarts
                .iter()
                .filter(|at| now.duration_since(**at) <= RESTART_WINDOW)
                .count();
            if recent > MAX_RESTARTS {
                return Err(format!(
                    "the watch died {recent} times in {}m, last: {}",
                    RESTART_WINDOW.as_secs() / 60,
                    state.last_death.as_deref().unwrap_or("unknown")
                ));
            }
            let still_failing = state
                .last_error_at
                .is_some_and(|at| now.duration_since(at) < RECOVERED_AFTER);
            match state.failing_since {
                Some(since)
                    if still_failing && now.duration_since(since) >= WATCH_FAILING_LIMIT =>
                {
                    Err(format!(
                        "the watch has been failing for {}s: {}",
                        now.duration_since(since).as_secs(),
                        state.last_error.as_deref().unwrap_or("unknown")
                    ))
                }
                _ => Ok(()),
            }
        })
    }
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

            fn plural_name() -> &'static str {
                stringify!($field)
            }
        })*
    };
}

karpenter_actors::for_each_watched_kind!(per_kind);

/// A kind the ingress watches.
pub trait Watched:
    WireFormat + Indexed + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static
{
    #[doc(hidden)]
    fn subscribers(subscribers: &mut Subscribers) -> &mut Sinks<Self>;

    /// The kind's plural (`pods`), naming its watch in health checks.
    fn plural_name() -> &'static str;
}

/// Watches the cluster and keeps the store; build it, subscribe, then [`ClusterIngress::run`].
pub struct ClusterIngress {
    client: Client,
    writers: StateWriters,
    state: ClusterState,
    subscribers: Subscribers,
    counters: Arc<IngressCounters>,
    health: Arc<IngressHealth>,
    config: watcher::Config,
    /// Where skipped undecodable objects are counted for `/metrics`.
    undecodable: Option<ClusterStateMetrics>,
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
        let health = Arc::new(IngressHealth::default());
        macro_rules! every_kind {
            ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
                $(health.with(<$type as Watched>::plural_name(), |_| ());)*
            };
        }
        karpenter_actors::for_each_watched_kind!(every_kind);
        Self {
            client,
            writers,
            state,
            subscribers: Subscribers::default(),
            counters: Arc::default(),
            health,
            config,
            undecodable: None,
        }
    }

    /// Counts the objects the watches skip as undecodable in
    /// `karpenter_cluster_state_undecodable_objects_total`.
    pub fn count_undecodable_in(&mut self, metrics: ClusterStateMetrics) {
        self.undecodable = Some(metrics);
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

    /// The health of every kind's watch.
    #[must_use]
    pub fn health(&self) -> Arc<IngressHealth> {
        Arc::clone(&self.health)
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

    /// Watches every kind until the task is dropped (watch errors back off and retry forever;
    /// a watch that ends or panics is started again).
    pub async fn run(self) {
        let Self {
            client,
            writers,
            subscribers,
            counters,
            health,
            config,
            state,
            undecodable,
        } = self;
        // One supervised `follow` per kind, all on this task.
        macro_rules! follow_every_kind {
            ($(($type:ty, $field:ident, $kind:ident)),* $(,)?) => {
                tokio::join!($(supervise(
                    Api::<<$type as WireFormat>::Wire>::all(client.clone()),
                    writers.$field,
                    state.$field.clone(),
                    subscribers.$field,
                    Observers {
                        counters: &counters.$field,
                        health: &health,
                        undecodable: undecodable.as_ref(),
                    },
                    config.clone(),
                )),*)
            };
        }
        karpenter_actors::for_each_watched_kind!(follow_every_kind);
    }
}

/// Runs one kind's [`follow`] for good: when it ends or panics, it is counted, reported and
/// started again after a backoff, with a fresh watcher whose first list replaces the store.
async fn supervise<K: Watched>(
    api: Api<K::Wire>,
    mut writer: KindWriter<K>,
    reader: KindStore<K>,
    sinks: Sinks<K>,
    observers: Observers<'_>,
    config: watcher::Config,
) {
    let Observers {
        counters, health, ..
    } = observers;
    let kind = K::plural_name();
    let mut backoff = MIN_RESTART_BACKOFF;
    loop {
        let run = follow(
            api.clone(),
            &mut writer,
            &reader,
            &sinks,
            observers,
            config.clone(),
        );
        let why = match std::panic::AssertUnwindSafe(run).catch_unwind().await {
            Ok(()) => "the watch stream ended".to_owned(),
            Err(panic) => format!(
                "panicked: {}",
                panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_owned())
            ),
        };
        counters.restarts.fetch_add(1, Ordering::Relaxed);
        health.died(kind, why.clone());
        tracing::error!(kind, reason = %why, ?backoff, "watch died; restarting it with a fresh list");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_RESTART_BACKOFF);
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

/// The typed event of a wire event; an object that does not decode is set aside in `skipped`
/// and, if the store holds an older version of it, becomes its deletion (what the daemon knew
/// is no longer what the cluster holds). `None`: nothing for the store.
fn decoded<K: Watched>(
    event: watcher::Event<K::Wire>,
    reader: &KindStore<K>,
    skipped: &mut Option<Box<Undecodable>>,
) -> Option<watcher::Event<K>> {
    let mut held = |bad: Box<Undecodable>| {
        let held = reader.get(
            bad.metadata.namespace.as_deref(),
            bad.metadata.name.as_deref().unwrap_or_default(),
        );
        *skipped = Some(bad);
        held
    };
    match event {
        watcher::Event::Init => Some(watcher::Event::Init),
        watcher::Event::InitDone => Some(watcher::Event::InitDone),
        // Left out of a re-list: the re-list's end reports it gone if the store had it.
        watcher::Event::InitApply(wire) => match K::decode(wire) {
            Ok(object) => Some(watcher::Event::InitApply(object)),
            Err(bad) => {
                *skipped = Some(bad);
                None
            }
        },
        watcher::Event::Apply(wire) => match K::decode(wire) {
            Ok(object) => Some(watcher::Event::Apply(object)),
            Err(bad) => held(bad).map(|old| watcher::Event::Delete((*old).clone())),
        },
        watcher::Event::Delete(wire) => match K::decode(wire) {
            Ok(object) => Some(watcher::Event::Delete(object)),
            Err(bad) => held(bad).map(|old| watcher::Event::Delete((*old).clone())),
        },
    }
}

/// Counts, logs and records a Warning event (`FailedDecoding`) on an object the watch
/// skipped, once per version of it.
async fn report_undecodable<K: Watched>(
    client: &Client,
    skipped: Box<Undecodable>,
    observers: Observers<'_>,
    reported: &mut HashSet<(String, String)>,
) {
    let meta = &skipped.metadata;
    let version = (
        meta.uid.clone().unwrap_or_default(),
        meta.resource_version.clone().unwrap_or_default(),
    );
    if !reported.insert(version) {
        return;
    }
    let kind = K::Wire::kind(&()).into_owned();
    let name = meta.name.clone().unwrap_or_default();
    observers
        .counters
        .undecodable
        .fetch_add(1, Ordering::Relaxed);
    if let Some(metrics) = observers.undecodable {
        metrics.undecodable_object(&kind);
    }
    tracing::error!(
        kind = %kind,
        name = %name,
        error = %skipped.error,
        "skipping an object that cannot be decoded"
    );
    let namespace = meta
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let event = k8s_openapi::api::core::v1::Event {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            generate_name: Some(format!("{name}.")),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        involved_object: k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(K::Wire::api_version(&()).into_owned()),
            kind: Some(kind.clone()),
            name: Some(name.clone()),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            ..Default::default()
        },
        reason: Some("FailedDecoding".to_owned()),
        message: Some(format!(
            "{kind} {name} cannot be read by this version of Karpenter and is ignored until it can be: {}",
            skipped.error
        )),
        type_: Some("Warning".to_owned()),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some("karpenter".to_owned()),
            host: None,
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), &namespace);
    if let Err(error) = events
        .create(&kube::api::PostParams::default(), &event)
        .await
    {
        tracing::debug!(error = %error, "failed recording the FailedDecoding event");
    }
}

/// What a kind's watch reports to: its counters, the health checks, the undecodable-object
/// metric.
#[derive(Clone, Copy)]
struct Observers<'a> {
    counters: &'a KindCounters,
    health: &'a IngressHealth,
    undecodable: Option<&'a ClusterStateMetrics>,
}

/// One kind: watch, reflect into the store, route changes.
async fn follow<K: Watched>(
    api: Api<K::Wire>,
    writer: &mut KindWriter<K>,
    reader: &KindStore<K>,
    sinks: &Sinks<K>,
    observers: Observers<'_>,
    config: watcher::Config,
) {
    let Observers {
        counters, health, ..
    } = observers;
    let kind = K::Wire::kind(&());
    let plural = K::plural_name();
    let client = api.clone().into_client();
    let mut reported: HashSet<(String, String)> = HashSet::new();
    // The reflector's work, done here so the index follows each event right after the store.
    let stream = watcher::watcher(api, config).backoff(watch_backoff());
    let mut stream = std::pin::pin!(stream);
    let mut before_relist: Vec<Arc<K>> = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                health.progressed(plural);
                let mut skipped = None;
                let Some(event) = decoded(event, reader, &mut skipped) else {
                    if let Some(skipped) = skipped {
                        report_undecodable::<K>(&client, skipped, observers, &mut reported).await;
                    }
                    continue;
                };
                if let Some(skipped) = skipped {
                    report_undecodable::<K>(&client, skipped, observers, &mut reported).await;
                }
                let applied = writer.apply(event);
                counters.events.fetch_add(1, Ordering::Relaxed);
                match applied {
                    Applied::RelistStarted => before_relist = reader.state(),
                    // The store's own `Arc` (this task is its only writer): a subscriber's
                    // backlog shares it rather than holding a second copy.
                    Applied::Stored {
                        object, previous, ..
                    } => {
                        deliver(sinks, counters, &Observed::Applied { object, previous });
                    }
                    Applied::Deleted { object, .. } => {
                        deliver(sinks, counters, &Observed::Deleted(object));
                    }
                    Applied::Relisted => {
                        counters.relists.fetch_add(1, Ordering::Relaxed);
                        for gone in std::mem::take(&mut before_relist) {
                            let (namespace, name) = gone.names();
                            if reader.get(namespace, name).is_none() {
                                deliver(sinks, counters, &Observed::Deleted(gone));
                            }
                        }
                        deliver(sinks, counters, &Observed::Relisted);
                    }
                }
            }
            Err(error) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                health.failed(plural, error.to_string());
                tracing::error!(
                    kind = %kind,
                    error = karpenter_actors::logs::err(&error),
                    "watch failed; retrying with backoff"
                );
            }
        }
    }
}

/// kube-runtime's default watch backoff (800 ms doubling to 30 s, with jitter, reset after two
/// quiet minutes), its jitter drawn from [`karpenter_actors::jitter`] so a simulation replays.
fn watch_backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    let mut builder = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(800))
        .with_max_delay(Duration::from_secs(30))
        .with_factor(2.0)
        .without_max_times()
        .with_jitter();
    if let Some(seed) = karpenter_actors::jitter::next_jitter_seed() {
        builder = builder.with_jitter_seed(seed);
    }
    ResetTimerBackoff::new(builder.into(), Duration::from_mins(2))
}

//! Request batching, as Karpenter's `pkg/batcher` (reference 4.3): requests with equal keys that
//! arrive close together become one call. A bucket is executed when no request joined it for the
//! idle time, when the oldest waited the maximum time, or when it is full.
//!
//! Each batcher is a supervised actor ([`BatcherActor`], one kind per batched call: a
//! [`BatchKind`]) in the AWS group (`crate::aws`), so its mailbox, restarts and
//! `karpenter_actor_*` metrics show in `karpenter actors` and a fault plan can target it.
//!
//! Flow: a caller holds a [`Batcher`] handle and calls [`Batcher::add`]: the item goes to the
//! actor as an `Add` request carrying a reply channel, and the caller awaits that channel. The
//! actor files the item in its key's bucket and keeps one `Flush` timer armed for the earliest
//! bucket deadline. A due (or full) bucket is handed to the executor as a task beside the actor,
//! so the actor keeps taking requests while AWS answers; the executor gets the key and the items
//! in arrival order and returns one output per item, in the same order, and the task sends each
//! to its caller. Timers are tokio's, so paused-time tests control the windows.
//!
//! Failure: the open buckets live in the actor instance. If the actor panics (or is stopped),
//! the instance and its buckets are dropped, so every caller waiting in them gets
//! [`BatchDropped`] at once (never a hang) and retries; the kit restarts the actor with empty
//! buckets and the next batch works. A batch already handed to the executor is not lost with
//! the actor. An executor that panics fails its own batch's callers, and is reported to the
//! actor, which fails with it (counted, restarted) as if the panic had been its own.
//!
//! Before [`Batcher::start`] puts the actor in a group, `add` fails with `not_started`: there
//! is no second, actor-less path.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt as _;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::runtime::{
    ActorCtx, ActorError, ActorRef, GroupRef, Handles, Mail, SendError, SpawnError, Supervised,
};

/// When a bucket is executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchWindow {
    pub idle: Duration,
    pub max_wait: Duration,
    pub max_items: usize,
}

/// Karpenter's CreateFleet batcher: 35 ms idle, 1 s max, 1000 requests.
pub const CREATE_FLEET_WINDOW: BatchWindow = BatchWindow {
    idle: Duration::from_millis(35),
    max_wait: Duration::from_secs(1),
    max_items: 1000,
};
/// Karpenter's `DescribeInstances` batcher: 100 ms idle, 1 s max, 500 ids.
pub const DESCRIBE_INSTANCES_WINDOW: BatchWindow = BatchWindow {
    idle: Duration::from_millis(100),
    max_wait: Duration::from_secs(1),
    max_items: 500,
};
/// Karpenter's `TerminateInstances` batcher: 100 ms idle, 1 s max, 500 ids.
pub const TERMINATE_INSTANCES_WINDOW: BatchWindow = DESCRIBE_INSTANCES_WINDOW;

/// How long an `add` waits for room in the batcher's mailbox (or for a restarting batcher):
/// filing an item takes microseconds, so only a batcher stuck restarting makes a caller wait
/// this long; the caller then fails and retries as after any AWS error.
pub const ENQUEUE_TIMEOUT: Duration = Duration::from_secs(30);

/// A boxed executor future.
pub type BatchFuture<O> = Pin<Box<dyn Future<Output = Vec<O>> + Send>>;
/// Runs one bucket.
pub type Executor<K, I, O> = Arc<dyn Fn(K, Vec<I>) -> BatchFuture<O> + Send + Sync>;

/// One batched call: the actor kind, its key in the AWS group and the types it batches.
pub trait BatchKind: 'static {
    /// The actor kind (`karpenter actors`, the `kind` metric label, fault plans).
    const KIND: &'static str;
    /// The actor's key, and the batcher's name in logs.
    const NAME: &'static str;
    /// Requests queued at most: twice a full window, so a burst that fills one bucket while
    /// the previous one is filed never waits for room.
    const MAILBOX_CAPACITY: usize;
    /// Requests with equal keys share a call.
    type Key: Clone + Eq + Hash + Send + 'static;
    type Item: Send + 'static;
    type Output: Send + 'static;
}

/// Why a request got no output; the caller retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("batch {name} dropped the request ({reason})")]
pub struct BatchDropped {
    pub name: &'static str,
    /// `not_started`, `batch_failed` (the batcher or its executor failed with the request in a
    /// batch), or the category of the failed send (`timeout`, `stopped`, `panicked`, ...).
    pub reason: &'static str,
}

/// Files one item into a bucket.
pub struct Add<B: BatchKind> {
    key: B::Key,
    item: B::Item,
    reply: oneshot::Sender<B::Output>,
}

impl<B: BatchKind> std::fmt::Debug for Add<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Add")
            .field("kind", &B::KIND)
            .finish_non_exhaustive()
    }
}

impl<B: BatchKind> Mail for Add<B> {
    type Reply = ();
    const NAME: &'static str = "Add";
}

/// Executes the buckets that are due (the actor's own timer).
#[derive(Debug)]
pub struct Flush {
    at: Instant,
}

impl Mail for Flush {
    type Reply = ();
    const NAME: &'static str = "Flush";
}

/// The executor of a batch panicked (its callers have failed already).
#[derive(Debug)]
pub struct ExecutorPanicked {
    panic: String,
}

impl Mail for ExecutorPanicked {
    type Reply = ();
    const NAME: &'static str = "ExecutorPanicked";
}

struct Bucket<I, O> {
    items: Vec<(I, oneshot::Sender<O>)>,
    started: Instant,
    last: Instant,
    /// Opening order: buckets due together run in the order they opened, so a run is
    /// reproducible (the map's own order is random per process).
    opened: u64,
}

impl<I, O> Bucket<I, O> {
    fn deadline(&self, window: BatchWindow) -> Instant {
        (self.last + window.idle).min(self.started + window.max_wait)
    }
}

/// What a batcher actor is built from.
pub struct BatcherDeps<B: BatchKind> {
    pub window: BatchWindow,
    pub executor: Executor<B::Key, B::Item, B::Output>,
}

impl<B: BatchKind> std::fmt::Debug for BatcherDeps<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatcherDeps")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// The actor behind one [`Batcher`]: its open buckets and their timer.
pub struct BatcherActor<B: BatchKind> {
    window: BatchWindow,
    executor: Executor<B::Key, B::Item, B::Output>,
    buckets: HashMap<B::Key, Bucket<B::Item, B::Output>>,
    opened: u64,
    /// The deadline of the `Flush` timer set last, while it has not fired.
    armed: Option<Instant>,
}

impl<B: BatchKind> std::fmt::Debug for BatcherActor<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatcherActor")
            .field("kind", &B::KIND)
            .field("buckets", &self.buckets.len())
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

impl<B: BatchKind> Supervised for BatcherActor<B> {
    const KIND: &'static str = B::KIND;
    const MAILBOX_CAPACITY: usize = B::MAILBOX_CAPACITY;
    type Deps = BatcherDeps<B>;

    fn build(_key: &str, deps: &BatcherDeps<B>) -> Result<Self, ActorError> {
        Ok(Self {
            window: deps.window,
            executor: Arc::clone(&deps.executor),
            buckets: HashMap::new(),
            opened: 0,
            armed: None,
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.set_state("idle");
        Ok(())
    }
}

impl<B: BatchKind> Handles<Add<B>> for BatcherActor<B> {
    async fn handle(&mut self, add: Add<B>, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        let Add { key, item, reply } = add;
        let now = Instant::now();
        let opened = &mut self.opened;
        let bucket = self.buckets.entry(key.clone()).or_insert_with(|| {
            *opened += 1;
            Bucket {
                items: Vec::new(),
                started: now,
                last: now,
                opened: *opened,
            }
        });
        bucket.items.push((item, reply));
        bucket.last = now;
        if bucket.items.len() >= self.window.max_items
            && let Some(full) = self.buckets.remove(&key)
        {
            self.execute(key, full, ctx);
        }
        self.rearm(ctx);
        Ok(())
    }
}

impl<B: BatchKind> Handles<Flush> for BatcherActor<B> {
    async fn handle(&mut self, flush: Flush, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        if self.armed == Some(flush.at) {
            self.armed = None;
        }
        let now = Instant::now();
        let window = self.window;
        let mut due: Vec<(u64, B::Key)> = self
            .buckets
            .iter()
            .filter(|(_, b)| b.deadline(window) <= now)
            .map(|(k, b)| (b.opened, k.clone()))
            .collect();
        due.sort_by_key(|(opened, _)| *opened);
        for (_, key) in due {
            if let Some(bucket) = self.buckets.remove(&key) {
                self.execute(key, bucket, ctx);
            }
        }
        self.rearm(ctx);
        Ok(())
    }
}

impl<B: BatchKind> Handles<ExecutorPanicked> for BatcherActor<B> {
    async fn handle(
        &mut self,
        report: ExecutorPanicked,
        _ctx: &mut ActorCtx<Self>,
    ) -> Result<(), ActorError> {
        // A panic is a bug: fail as if it were ours, so it is counted and the batcher restarts.
        Err(ActorError::fatal(
            "executor_panicked",
            format!("batch {} executor panicked: {}", B::NAME, report.panic),
        ))
    }
}

impl<B: BatchKind> BatcherActor<B> {
    /// Keeps one timer armed for the earliest bucket deadline (a new request moves its bucket's
    /// idle deadline later, so most requests arm nothing).
    fn rearm(&mut self, ctx: &mut ActorCtx<Self>) {
        let window = self.window;
        let Some(next) = self.buckets.values().map(|b| b.deadline(window)).min() else {
            ctx.set_state("idle");
            return;
        };
        ctx.set_state("batching");
        if self.armed.is_some_and(|armed| armed <= next) {
            return;
        }
        self.armed = Some(next);
        ctx.send_after(
            next.saturating_duration_since(Instant::now()),
            Flush { at: next },
        );
    }

    /// Runs a bucket beside the actor and answers its callers.
    fn execute(&self, key: B::Key, bucket: Bucket<B::Item, B::Output>, ctx: &ActorCtx<Self>) {
        ctx.myself()
            .kit_metrics()
            .batch(B::NAME, bucket.items.len(), bucket.started.elapsed());
        let (items, replies): (Vec<B::Item>, Vec<oneshot::Sender<B::Output>>) =
            bucket.items.into_iter().unzip();
        tracing::debug!(
            batcher = B::NAME,
            batch_size = items.len(),
            "executing batch"
        );
        let executor = Arc::clone(&self.executor);
        let myself = ctx.myself().clone();
        ctx.spawn_task(async move {
            // Built inside the guard: a panicking executor must not take the task down unseen.
            let run = AssertUnwindSafe(async move { executor(key, items).await }).catch_unwind();
            match run.await {
                Ok(outputs) => {
                    // Fewer outputs than items drop the rest's senders: those callers fail.
                    for (reply, output) in replies.into_iter().zip(outputs) {
                        // The caller may have given up waiting; nothing else needs the output.
                        let _ = reply.send(output);
                    }
                }
                Err(payload) => {
                    drop(replies);
                    let panic = panic_text(payload.as_ref());
                    tracing::error!(batcher = B::NAME, %panic, "batch executor panicked");
                    // Counted as a handler failure; if even that cannot be queued the batcher
                    // is stopping or flooded, and the callers above have their error anyway.
                    let _ = myself.try_send_event(ExecutorPanicked { panic });
                }
            }
        });
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-text payload".to_owned()
    }
}

/// The handle callers use: the batcher's window and executor, and its actor once started.
pub struct Batcher<B: BatchKind> {
    deps: Arc<BatcherDeps<B>>,
    actor: Mutex<Option<ActorRef<BatcherActor<B>>>>,
}

impl<B: BatchKind> std::fmt::Debug for Batcher<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("kind", &B::KIND)
            .field("window", &self.deps.window)
            .field("started", &self.actor().is_some())
            .finish_non_exhaustive()
    }
}

impl<B: BatchKind> Batcher<B> {
    /// A batcher whose actor is not started yet ([`Self::start`]).
    #[must_use]
    pub fn new(window: BatchWindow, executor: Executor<B::Key, B::Item, B::Output>) -> Self {
        Self {
            deps: Arc::new(BatcherDeps { window, executor }),
            actor: Mutex::new(None),
        }
    }

    fn actor(&self) -> Option<ActorRef<BatcherActor<B>>> {
        self.actor
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Starts the batcher's actor under `group` (keyed [`BatchKind::NAME`]). A batcher whose
    /// actor still runs keeps it; one whose group was stopped gets a new one.
    pub fn start(&self, group: &GroupRef) -> Result<ActorRef<BatcherActor<B>>, SpawnError> {
        let mut slot = self.actor.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(actor) = slot.as_ref().filter(|a| a.is_alive()) {
            return Ok(actor.clone());
        }
        let (actor, _) =
            group.spawn_shared::<BatcherActor<B>>(Arc::from(B::NAME), Arc::clone(&self.deps))?;
        *slot = Some(actor.clone());
        Ok(actor)
    }

    /// Adds a request and waits for its output; fails (never hangs) when the batcher is not
    /// started, cannot take it within [`ENQUEUE_TIMEOUT`], or fails with it in a batch.
    pub async fn add(&self, key: B::Key, item: B::Item) -> Result<B::Output, BatchDropped> {
        let dropped = |reason| BatchDropped {
            name: B::NAME,
            reason,
        };
        let actor = self.actor().ok_or(dropped("not_started"))?;
        let (reply, output) = oneshot::channel();
        actor
            .request(Add::<B> { key, item, reply }, ENQUEUE_TIMEOUT)
            .await
            .map_err(|error: SendError| dropped(error.category()))?;
        output.await.map_err(|_| dropped("batch_failed"))
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;

    use super::*;
    use crate::runtime::{
        ActorKit, FaultAction, FaultPlan, FaultRule, GroupSpec, KitOptions, RootGroup,
    };

    struct TestBatch;
    impl BatchKind for TestBatch {
        const KIND: &'static str = "TestBatcherActor";
        const NAME: &'static str = "test";
        const MAILBOX_CAPACITY: usize = 64;
        type Key = u8;
        type Item = u32;
        type Output = u32;
    }

    type Calls = Arc<Mutex<Vec<Vec<u32>>>>;

    /// An executor that records its batches and multiplies by ten; it panics on item 666.
    fn recording() -> (Executor<u8, u32, u32>, Calls) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&calls);
        let executor: Executor<u8, u32, u32> = Arc::new(move |_key, items: Vec<u32>| {
            seen.lock().unwrap().push(items.clone());
            Box::pin(async move {
                assert!(!items.contains(&666), "the executor met item 666");
                items.into_iter().map(|i| i * 10).collect()
            })
        });
        (executor, calls)
    }

    fn started(plan: Option<FaultPlan>) -> (ActorKit, RootGroup, Arc<Batcher<TestBatch>>, Calls) {
        let mut registry = Registry::default();
        let kit = ActorKit::new(
            &mut registry,
            KitOptions {
                faults: plan.map(Arc::new),
                ..KitOptions::default()
            },
        );
        let root = kit.root(GroupSpec::one_for_one("aws")).unwrap();
        let (executor, calls) = recording();
        let batcher = Arc::new(Batcher::<TestBatch>::new(CREATE_FLEET_WINDOW, executor));
        batcher.start(&root).unwrap();
        (kit, root, batcher, calls)
    }

    fn add_all(
        batcher: &Arc<Batcher<TestBatch>>,
        items: &[u32],
    ) -> Vec<tokio::task::JoinHandle<Result<u32, BatchDropped>>> {
        items
            .iter()
            .map(|&i| {
                let b = Arc::clone(batcher);
                tokio::task::spawn_local(async move { b.add(1, i).await })
            })
            .collect()
    }

    /// Karpenter's `karpenter_cloudprovider_batcher_batch_{size,time_seconds}` per batcher.
    #[actix::test]
    async fn each_batch_is_measured_by_size_and_window() {
        tokio::time::pause();
        let mut registry = Registry::default();
        let kit = ActorKit::new(&mut registry, KitOptions::default());
        let root = kit.root(GroupSpec::one_for_one("aws")).unwrap();
        let (executor, _calls) = recording();
        let batcher = Arc::new(Batcher::<TestBatch>::new(CREATE_FLEET_WINDOW, executor));
        batcher.start(&root).unwrap();
        for handle in add_all(&batcher, &(0..20).collect::<Vec<_>>()) {
            handle.await.unwrap().unwrap();
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let line = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("no {name} in {text}"))
                .to_owned()
        };
        assert_eq!(
            line("karpenter_cloudprovider_batcher_batch_size_sum{batcher=\"test\"}"),
            "karpenter_cloudprovider_batcher_batch_size_sum{batcher=\"test\"} 20.0"
        );
        assert_eq!(
            line("karpenter_cloudprovider_batcher_batch_time_seconds_count{batcher=\"test\"}"),
            "karpenter_cloudprovider_batcher_batch_time_seconds_count{batcher=\"test\"} 1"
        );
        // The window stayed open for the idle time after the last request.
        let window: f64 = line("karpenter_cloudprovider_batcher_batch_time_seconds_sum")
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(window >= CREATE_FLEET_WINDOW.idle.as_secs_f64(), "{window}");
    }

    #[actix::test]
    async fn concurrent_requests_with_one_key_become_one_call() {
        tokio::time::pause();
        let (kit, _root, batcher, calls) = started(None);
        let handles = add_all(&batcher, &(0..20).collect::<Vec<_>>());
        for (i, handle) in handles.into_iter().enumerate() {
            assert_eq!(handle.await.unwrap(), Ok(u32::try_from(i).unwrap() * 10));
        }
        assert_eq!(calls.lock().unwrap().len(), 1);
        let snapshot = kit.snapshot();
        let actor = snapshot.actor("TestBatcherActor", "test").unwrap();
        assert_eq!(actor.handled_by_message["Add"], 20);
        assert_eq!(actor.state, "idle");
    }

    #[actix::test]
    async fn different_keys_and_idle_gaps_split_batches() {
        tokio::time::pause();
        let (_kit, _root, batcher, calls) = started(None);
        let (a, b) = tokio::join!(batcher.add(1, 1), batcher.add(2, 2));
        assert_eq!((a, b), (Ok(10), Ok(20)));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(batcher.add(1, 3).await, Ok(30));
        assert_eq!(calls.lock().unwrap().len(), 3);
    }

    #[actix::test]
    async fn a_steady_stream_is_cut_at_the_maximum_wait() {
        tokio::time::pause();
        let (_kit, _root, batcher, calls) = started(None);
        let mut handles = Vec::new();
        // One request every 20 ms for 1.5 s: never idle for 35 ms, so the 1 s cap splits it.
        for i in 0..75 {
            handles.extend(add_all(&batcher, &[i]));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for handle in handles {
            assert!(handle.await.unwrap().is_ok());
        }
        assert_eq!(calls.lock().unwrap().len(), 2);
    }

    #[actix::test]
    async fn a_full_bucket_runs_at_once() {
        tokio::time::pause();
        let (_kit, _root, batcher, calls) = started(None);
        // Ids clear of the executor's poisoned item.
        let items: Vec<u32> =
            (1000..1000 + u32::try_from(CREATE_FLEET_WINDOW.max_items).unwrap()).collect();
        let started = Instant::now();
        for handle in add_all(&batcher, &items) {
            assert!(handle.await.unwrap().is_ok());
        }
        assert_eq!(started.elapsed(), Duration::ZERO, "no window to wait for");
        assert_eq!(
            calls.lock().unwrap()[0].len(),
            CREATE_FLEET_WINDOW.max_items
        );
    }

    #[actix::test]
    async fn an_unstarted_batcher_fails_at_once() {
        let (executor, _) = recording();
        let batcher = Batcher::<TestBatch>::new(CREATE_FLEET_WINDOW, executor);
        assert_eq!(
            batcher.add(1, 1).await,
            Err(BatchDropped {
                name: "test",
                reason: "not_started"
            })
        );
    }

    #[actix::test]
    async fn a_panicking_executor_fails_its_callers_and_the_batcher_restarts() {
        tokio::time::pause();
        let (kit, _root, batcher, calls) = started(None);
        let handles = add_all(&batcher, &[1, 666, 3]);
        for handle in handles {
            assert_eq!(
                handle.await.unwrap(),
                Err(BatchDropped {
                    name: "test",
                    reason: "batch_failed"
                })
            );
        }
        // The next batch works, on a restarted actor.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(batcher.add(1, 4).await, Ok(40));
        assert_eq!(calls.lock().unwrap().len(), 2);
        let snapshot = kit.snapshot();
        let actor = snapshot.actor("TestBatcherActor", "test").unwrap();
        assert_eq!(actor.restarts, 1);
        assert!(
            actor
                .last_error
                .as_deref()
                .unwrap()
                .contains("the executor met item 666"),
            "{actor:?}"
        );
    }

    #[actix::test]
    async fn a_batcher_panicking_mid_batch_fails_the_open_bucket_and_serves_the_next() {
        tokio::time::pause();
        // The third Add panics: the two items already in the open bucket are lost with it.
        let plan = FaultPlan::new(1)
            .with_rule(
                FaultRule::new(FaultAction::Panic)
                    .kind("TestBatcherActor")
                    .message("Add")
                    .nth(3),
            )
            .unwrap();
        let (kit, _root, batcher, calls) = started(Some(plan));
        let handles = add_all(&batcher, &[1, 2, 3]);
        let outcomes: Vec<_> = futures::future::join_all(handles)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            outcomes,
            vec![
                Err(BatchDropped {
                    name: "test",
                    reason: "batch_failed"
                }),
                Err(BatchDropped {
                    name: "test",
                    reason: "batch_failed"
                }),
                Err(BatchDropped {
                    name: "test",
                    reason: "panicked"
                }),
            ]
        );
        assert!(calls.lock().unwrap().is_empty(), "nothing was executed");
        for i in 4..7 {
            assert_eq!(batcher.add(1, i).await, Ok(i * 10));
        }
        let snapshot = kit.snapshot();
        let actor = snapshot.actor("TestBatcherActor", "test").unwrap();
        assert_eq!((actor.panics, actor.restarts), (1, 1));
    }
}

//! The actor kit against plain actix and a plain tokio mpsc channel: request round trip,
//! one-way throughput, spawn+stop, and memory per idle actor at 10,000 actors; and the AWS
//! batcher actor's overhead per request (1, 100 and 1000 requests per window) against the plain
//! tokio task it replaced.
//!
//! Run: `cargo bench --bench actors` (add `-- --quick` for a short run). Memory is measured
//! with a counting global allocator before the timed benchmarks and printed as
//! `memory/idle-actor/...` lines: bytes allocated and not freed per idle actor.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "benchmark setup: a failed unwrap is a broken benchmark"
)]

use std::alloc::System;
use std::hint::black_box;
use std::time::{Duration, Instant};

use std::collections::HashMap;
use std::sync::Arc;

use actix::{Actor, AsyncContext as _, Context, Handler, Message};
use criterion::{BenchmarkId, Criterion, Throughput};
use karpenter_actors::providers::batcher::{BatchKind, BatchWindow, Batcher, Executor};
use karpenter_actors::runtime::{
    ActorCtx, ActorError, ActorKit, ActorRef, Family, GroupSpec, Handles, KitOptions, Mail,
    RestartPolicy, RootGroup, Supervised,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tokio::sync::{mpsc, oneshot};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const TIMEOUT: Duration = Duration::from_secs(10);
/// Messages per one-way throughput sample; every mailbox holds them all.
const BURST: usize = 1_000;
const IDLE_ACTORS: usize = 10_000;

// ---- the kit ----------------------------------------------------------------------------

struct KitCounter {
    count: u64,
}

impl Supervised for KitCounter {
    const KIND: &'static str = "KitCounter";
    // A whole burst fits, as with the other two contenders.
    const MAILBOX_CAPACITY: usize = BURST + 1;
    const RESTART: RestartPolicy = RestartPolicy::Transient;
    type Deps = ();

    fn build(_: &str, (): &()) -> Result<Self, ActorError> {
        Ok(Self { count: 0 })
    }
}

struct Add(u64);
impl Mail for Add {
    type Reply = u64;
    const NAME: &'static str = "Add";
}
impl Handles<Add> for KitCounter {
    async fn handle(&mut self, Add(n): Add, _: &mut ActorCtx<Self>) -> Result<u64, ActorError> {
        self.count += n;
        Ok(self.count)
    }
}

// ---- plain actix --------------------------------------------------------------------------

struct ActixCounter {
    count: u64,
}

impl Actor for ActixCounter {
    type Context = Context<Self>;
}

struct ActixAdd(u64);
impl Message for ActixAdd {
    type Result = u64;
}
impl Handler<ActixAdd> for ActixCounter {
    type Result = u64;
    fn handle(&mut self, ActixAdd(n): ActixAdd, _: &mut Context<Self>) -> u64 {
        self.count += n;
        self.count
    }
}

struct ActixStop;
impl Message for ActixStop {
    type Result = ();
}
impl Handler<ActixStop> for ActixCounter {
    type Result = ();
    fn handle(&mut self, _: ActixStop, ctx: &mut Context<Self>) {
        actix::ActorContext::stop(ctx);
    }
}

struct ActixWarm;
impl Message for ActixWarm {
    type Result = ();
}
impl Handler<ActixWarm> for ActixCounter {
    type Result = ();
    fn handle(&mut self, _: ActixWarm, ctx: &mut Context<Self>) {
        let _ = ctx.address();
    }
}

// ---- plain tokio mpsc ---------------------------------------------------------------------

enum MpscMessage {
    Add(u64, Option<oneshot::Sender<u64>>),
}

fn spawn_mpsc_counter() -> mpsc::Sender<MpscMessage> {
    let (tx, mut rx) = mpsc::channel::<MpscMessage>(BURST + 1);
    actix::spawn(async move {
        let mut count = 0u64;
        while let Some(MpscMessage::Add(n, reply)) = rx.recv().await {
            count += n;
            if let Some(reply) = reply {
                let _ = reply.send(count);
            }
        }
    });
    tx
}

// ---- benchmarks ---------------------------------------------------------------------------

struct Setup {
    _kit: ActorKit,
    root: RootGroup,
    kit_actor: ActorRef<KitCounter>,
    family: Family<KitCounter>,
    actix_actor: actix::Addr<ActixCounter>,
    mpsc: mpsc::Sender<MpscMessage>,
}

fn setup(system: &actix::SystemRunner) -> Setup {
    system.block_on(async {
        let mut metrics = prometheus_client::registry::Registry::default();
        let kit = ActorKit::new(&mut metrics, KitOptions::default());
        let root = kit.root(GroupSpec::one_for_one("bench")).unwrap();
        let kit_actor = root.spawn::<KitCounter>("counter", ()).unwrap();
        kit_actor.request(Add(0), TIMEOUT).await.unwrap();
        let family = root
            .family::<KitCounter>(GroupSpec::one_for_one("family"), ())
            .unwrap();
        let actix_actor = ActixCounter { count: 0 }.start();
        actix_actor.send(ActixAdd(0)).await.unwrap();
        let mpsc = spawn_mpsc_counter();
        Setup {
            _kit: kit,
            root,
            kit_actor,
            family,
            actix_actor,
            mpsc,
        }
    })
}

fn timed<F: std::future::Future<Output = ()>>(
    system: &actix::SystemRunner,
    iters: u64,
    mut step: impl FnMut() -> F,
) -> Duration {
    system.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            step().await;
        }
        start.elapsed()
    })
}

fn round_trip(c: &mut Criterion, system: &actix::SystemRunner, s: &Setup) {
    let mut group = c.benchmark_group("round_trip");
    group.bench_function("kit_request", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                black_box(s.kit_actor.request(Add(1), TIMEOUT).await.unwrap());
            })
        });
    });
    group.bench_function("actix_send", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                black_box(s.actix_actor.send(ActixAdd(1)).await.unwrap());
            })
        });
    });
    group.bench_function("actix_send_with_timeout", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                black_box(
                    s.actix_actor
                        .send(ActixAdd(1))
                        .timeout(TIMEOUT)
                        .await
                        .unwrap(),
                );
            })
        });
    });
    group.bench_function("tokio_mpsc_oneshot", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                let (tx, rx) = oneshot::channel();
                s.mpsc
                    .send(MpscMessage::Add(1, Some(tx)))
                    .await
                    .map_err(|_| ())
                    .unwrap();
                black_box(rx.await.unwrap());
            })
        });
    });
    group.finish();
}

fn throughput(c: &mut Criterion, system: &actix::SystemRunner, s: &Setup) {
    let mut group = c.benchmark_group("one_way");
    group.throughput(Throughput::Elements(BURST as u64));
    group.bench_function("kit_try_send_event", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                for _ in 0..BURST {
                    s.kit_actor.try_send_event(Add(1)).unwrap();
                }
                black_box(s.kit_actor.request(Add(0), TIMEOUT).await.unwrap());
            })
        });
    });
    group.bench_function("actix_do_send", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                for _ in 0..BURST {
                    s.actix_actor.do_send(ActixAdd(1));
                }
                black_box(s.actix_actor.send(ActixAdd(0)).await.unwrap());
            })
        });
    });
    group.bench_function("tokio_mpsc_try_send", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                for _ in 0..BURST {
                    s.mpsc
                        .try_send(MpscMessage::Add(1, None))
                        .map_err(|_| ())
                        .unwrap();
                }
                let (tx, rx) = oneshot::channel();
                s.mpsc
                    .send(MpscMessage::Add(0, Some(tx)))
                    .await
                    .map_err(|_| ())
                    .unwrap();
                black_box(rx.await.unwrap());
            })
        });
    });
    group.finish();
}

fn spawn_stop(c: &mut Criterion, system: &actix::SystemRunner, s: &Setup) {
    let mut group = c.benchmark_group("spawn_stop");
    group.bench_function("kit_family_member", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                let actor = s.family.ensure("member").unwrap();
                s.family.remove("member");
                actor.terminated().await;
            })
        });
    });
    group.bench_function("actix_actor", |b| {
        b.iter_custom(|iters| {
            timed(system, iters, || async {
                let addr = ActixCounter { count: 0 }.start();
                addr.send(ActixStop).await.unwrap();
            })
        });
    });
    group.finish();
}

fn net_bytes(region: &Region<'_, System>) -> isize {
    let change = region.change();
    isize::try_from(change.bytes_allocated).unwrap()
        - isize::try_from(change.bytes_deallocated).unwrap()
}

/// Bytes per idle actor at 10,000 actors, for the kit, plain actix and a tokio task + mpsc.
fn memory(system: &actix::SystemRunner, s: &Setup) {
    let keys: Vec<String> = (0..IDLE_ACTORS).map(|i| format!("nodeclaim-{i}")).collect();
    let per_actor = |net: isize| net / isize::try_from(IDLE_ACTORS).unwrap();
    let kit = system.block_on(async {
        let family = s
            .root
            .family::<KitCounter>(GroupSpec::one_for_one("idle"), ())
            .unwrap();
        let warm = family.ensure("warm").unwrap();
        warm.request(Add(1), TIMEOUT).await.unwrap();
        let region = Region::new(GLOBAL);
        let mut actors = Vec::with_capacity(IDLE_ACTORS);
        for key in &keys {
            actors.push(family.ensure(key).unwrap());
        }
        for actor in &actors {
            actor.request(Add(1), TIMEOUT).await.unwrap();
        }
        drop(actors);
        let net = net_bytes(&region);
        family.group().stop().await;
        net
    });
    let actix = system.block_on(async {
        let warm = ActixCounter { count: 0 }.start();
        warm.send(ActixWarm).await.unwrap();
        let region = Region::new(GLOBAL);
        let mut actors = Vec::with_capacity(IDLE_ACTORS);
        for _ in 0..IDLE_ACTORS {
            actors.push(ActixCounter { count: 0 }.start());
        }
        for actor in &actors {
            actor.send(ActixAdd(1)).await.unwrap();
        }
        let net = net_bytes(&region);
        for actor in &actors {
            actor.do_send(ActixStop);
        }
        net
    });
    let tokio = system.block_on(async {
        let region = Region::new(GLOBAL);
        let mut senders = Vec::with_capacity(IDLE_ACTORS);
        for _ in 0..IDLE_ACTORS {
            // Sized like the kit's per-object mailboxes in production (64), not the bench's.
            let (tx, mut rx) = mpsc::channel::<MpscMessage>(64);
            actix::spawn(async move {
                let mut count = 0;
                while let Some(MpscMessage::Add(n, reply)) = rx.recv().await {
                    count += n;
                    if let Some(reply) = reply {
                        let _ = reply.send(count);
                    }
                }
            });
            senders.push(tx);
        }
        for tx in &senders {
            let (reply, rx) = oneshot::channel();
            tx.send(MpscMessage::Add(1, Some(reply)))
                .await
                .map_err(|_| ())
                .unwrap();
            rx.await.unwrap();
        }
        net_bytes(&region)
    });
    println!(
        "memory/idle-actor/kit: {} bytes ({IDLE_ACTORS} actors, registry and family map included)",
        per_actor(kit)
    );
    println!(
        "memory/idle-actor/actix: {} bytes (Addr kept by the caller)",
        per_actor(actix)
    );
    println!(
        "memory/idle-actor/tokio_task_mpsc: {} bytes (task + channel, Sender kept by the caller)",
        per_actor(tokio)
    );
}

/// Round trips of the kit and of actix measured in alternating blocks, so that load from other
/// processes hits both alike; prints the per-request means and their ratio.
fn paired_round_trip(system: &actix::SystemRunner, s: &Setup) {
    const BLOCKS: u32 = 200;
    const PER_BLOCK: u32 = 1_000;
    let (mut kit, mut actix, mut actix_timeout) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    system.block_on(async {
        for _ in 0..BLOCKS {
            let start = Instant::now();
            for _ in 0..PER_BLOCK {
                black_box(s.kit_actor.request(Add(1), TIMEOUT).await.unwrap());
            }
            kit += start.elapsed();
            let start = Instant::now();
            for _ in 0..PER_BLOCK {
                black_box(s.actix_actor.send(ActixAdd(1)).await.unwrap());
            }
            actix += start.elapsed();
            let start = Instant::now();
            for _ in 0..PER_BLOCK {
                black_box(
                    s.actix_actor
                        .send(ActixAdd(1))
                        .timeout(TIMEOUT)
                        .await
                        .unwrap(),
                );
            }
            actix_timeout += start.elapsed();
        }
    });
    let n = BLOCKS * PER_BLOCK;
    println!(
        "paired/round_trip: kit {:?}, actix {:?}, actix with timeout {:?}; kit/actix {:.2}x, kit/actix-with-timeout {:.2}x",
        kit / n,
        actix / n,
        actix_timeout / n,
        kit.as_secs_f64() / actix.as_secs_f64(),
        kit.as_secs_f64() / actix_timeout.as_secs_f64(),
    );
}

// ---- the batcher ------------------------------------------------------------------------

struct BenchBatch;

impl BatchKind for BenchBatch {
    const KIND: &'static str = "BenchBatcherActor";
    const NAME: &'static str = "bench";
    // The largest window of the bench fits twice.
    const MAILBOX_CAPACITY: usize = 2 * 1000;
    type Key = u8;
    type Item = u32;
    type Output = u32;
}

/// A window that only its size closes: the bench measures the batcher, not its timers.
fn window(size: usize) -> BatchWindow {
    BatchWindow {
        idle: Duration::from_mins(10),
        max_wait: Duration::from_mins(10),
        max_items: size,
    }
}

/// An executor that answers at once (the AWS call is not what is measured).
fn echo() -> Executor<u8, u32, u32> {
    Arc::new(|_key, items: Vec<u32>| Box::pin(async move { items }))
}

/// The tokio-task batcher the actor replaced (main before issue 15), reduced to what a full
/// window exercises: an unbounded channel, one task owning the buckets and their deadline, a
/// task per executed batch.
struct TaskBatcher {
    requests: mpsc::UnboundedSender<(u8, u32, oneshot::Sender<u32>)>,
}

impl TaskBatcher {
    fn spawn(window: BatchWindow, executor: Executor<u8, u32, u32>) -> Self {
        let (requests, mut receiver) = mpsc::unbounded_channel::<(u8, u32, oneshot::Sender<u32>)>();
        tokio::spawn(async move {
            type Bucket = (Vec<(u32, oneshot::Sender<u32>)>, tokio::time::Instant);
            let mut buckets: HashMap<u8, Bucket> = HashMap::new();
            loop {
                let next = buckets.values().map(|(_, at)| *at + window.idle).min();
                tokio::select! {
                    request = receiver.recv() => {
                        let Some((key, item, reply)) = request else { return };
                        let bucket = buckets
                            .entry(key)
                            .or_insert_with(|| (Vec::new(), tokio::time::Instant::now()));
                        bucket.0.push((item, reply));
                        if bucket.0.len() >= window.max_items
                            && let Some((full, _)) = buckets.remove(&key)
                        {
                            let (items, replies): (Vec<u32>, Vec<_>) = full.into_iter().unzip();
                            let run = executor(key, items);
                            tokio::spawn(async move {
                                for (reply, output) in replies.into_iter().zip(run.await) {
                                    let _ = reply.send(output);
                                }
                            });
                        }
                    }
                    () = async { tokio::time::sleep_until(next.unwrap_or_else(tokio::time::Instant::now)).await }, if next.is_some() => {}
                }
            }
        });
        Self { requests }
    }

    async fn add(&self, key: u8, item: u32) -> u32 {
        let (reply, output) = oneshot::channel();
        self.requests.send((key, item, reply)).unwrap();
        output.await.unwrap()
    }
}

/// Per-request cost of the batcher actor and of the task it replaced, by window size: every
/// sample adds `size` requests at once (one task polling them all) and waits for every output.
fn batcher(c: &mut Criterion, system: &actix::SystemRunner, s: &Setup) {
    let mut group = c.benchmark_group("batcher");
    for size in [1_usize, 100, 1000] {
        let count = u32::try_from(size).unwrap();
        group.throughput(Throughput::Elements(size as u64));
        let actor = system.block_on(async {
            let batcher = Batcher::<BenchBatch>::new(window(size), echo());
            batcher.start(&s.root).unwrap();
            batcher
        });
        group.bench_with_input(BenchmarkId::new("actor", size), &size, |b, _| {
            b.iter_custom(|iters| {
                timed(system, iters, || async {
                    let outputs =
                        futures::future::join_all((0..count).map(|i| actor.add(1, i))).await;
                    black_box(outputs);
                })
            });
        });
        let task = system.block_on(async { TaskBatcher::spawn(window(size), echo()) });
        group.bench_with_input(BenchmarkId::new("tokio_task", size), &size, |b, _| {
            b.iter_custom(|iters| {
                timed(system, iters, || async {
                    let outputs =
                        futures::future::join_all((0..count).map(|i| task.add(1, i))).await;
                    black_box(outputs);
                })
            });
        });
    }
    group.finish();
}

fn main() {
    let system = actix::System::new();
    let s = setup(&system);
    memory(&system, &s);
    paired_round_trip(&system, &s);
    let mut c = Criterion::default().configure_from_args();
    round_trip(&mut c, &system, &s);
    throughput(&mut c, &system, &s);
    spawn_stop(&mut c, &system, &s);
    batcher(&mut c, &system, &s);
    c.final_summary();
}

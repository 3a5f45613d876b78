//! Family-level actor metrics in a `prometheus-client` Registry, with bounded labels only:
//! `kind` (the actor kind, a type-level constant), `message` (the message type name, a
//! type-level constant, or `build` / `started` for the lifecycle hooks), `reason` (a fixed set)
//! and `supervisor` (a group name, a constant). Keys (object names) never become labels.
//!
//! Handles are cached per kind and per (kind, message) so the hot path increments a counter it
//! already holds instead of hashing a label set per message.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `karpenter_actor_messages_handled_total` | counter | kind, message |
//! | `karpenter_actor_handler_errors_total` | counter | kind, message |
//! | `karpenter_actor_panics_total` | counter | kind, message |
//! | `karpenter_actor_handler_duration_seconds` | histogram | kind, message |
//! | `karpenter_actor_mailbox_overflows_total` | counter | kind, message |
//! | `karpenter_actor_messages_dropped_total` | counter | kind, message, reason |
//! | `karpenter_actor_restarts_total` | counter | kind |
//! | `karpenter_actor_live_actors` | gauge | kind |
//! | `karpenter_actor_mailbox_depth` | gauge | kind |
//! | `karpenter_actor_supervisor_escalations_total` | counter | supervisor |
//! | `karpenter_actor_parked` | gauge | kind |
//! | `karpenter_actor_parkings_total` | counter | kind |
//!
//! Beside them, controller-runtime's families as Karpenter exports them, so its Grafana
//! dashboards (which query `controller_runtime_reconcile_*` and `workqueue_depth`) work
//! unchanged. A handled message is a reconcile, an actor kind's mailboxes are its work queue;
//! `controller` (and the queue's `name`) is Karpenter's controller name for the actor family,
//! [`super::Supervised::CONTROLLER`] (or a message's [`super::Mail::CONTROLLER`] for the
//! reconcile families when one actor does the work of two of Karpenter's controllers):
//!
//! | actor kind | `controller` |
//! |---|---|
//! | `NodeClaimActor` | `nodeclaim.lifecycle` |
//! | `NodePoolActor` | `nodepool.counter` |
//! | `NodeClassActor` | `nodeclass` |
//! | `ProvisionerActor` | `provisioner` |
//! | `DisruptionActor` | `disruption` |
//! | `InterruptionActor` | `interruption` |
//! | `GarbageCollectorActor` | `instance.garbagecollection` (its `CollectNodeClaims`: `nodeclaim.garbagecollection`) |
//! | `VersionActor` | `providers.version` |
//! | the batchers, `UnavailableOfferingsActor`, `LaunchTemplateJanitorActor`, `CatalogueRefreshActor` | their kind (Karpenter has no controller for them) |
//!
//! | metric | type | labels | recorded |
//! |---|---|---|---|
//! | `controller_runtime_reconcile_total` | counter | controller, result (`success`, `error`; `requeue`, `requeue_after` stay 0) | handler end |
//! | `controller_runtime_reconcile_errors_total` | counter | controller | handler error or panic |
//! | `controller_runtime_terminal_reconcile_errors_total` | counter | controller | never (0, as Karpenter) |
//! | `controller_runtime_reconcile_panics_total` | counter | controller | handler panic |
//! | `controller_runtime_reconcile_time_seconds` | histogram (Karpenter's duration buckets to 60 s) | controller | handler end |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | controller | scrape: live actors (each handles one message at a time) |
//! | `controller_runtime_active_workers` | gauge | controller | scrape: actors in a handler |
//! | `workqueue_depth` | gauge | name, controller | mailbox slot reserved / released |
//! | `workqueue_adds_total` | counter | name, controller | message queued |
//! | `workqueue_retries_total` | counter | name, controller | handler error or panic (retried with backoff) |
//! | `workqueue_queue_duration_seconds` | histogram (1e-8 s x10, 12) | name, controller | handler start: time queued |
//! | `workqueue_work_duration_seconds` | histogram (1e-8 s x10, 12) | name, controller | handler end |
//! | `workqueue_unfinished_work_seconds` | gauge | name, controller | scrape: sum of running handlers' ages |
//! | `workqueue_longest_running_processor_seconds` | gauge | name, controller | scrape: oldest running handler's age |
//!
//! Every controller's series exist at zero from its first actor's spawn, as controller-runtime
//! initializes them when a controller starts.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric as _,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::registry::{ActorRegistry, HandlerFailure};
use crate::provisioner::DURATION_BUCKETS_SECONDS;

/// Handler duration buckets in seconds: 50 µs (an in-memory update) to 60 s (a handler that
/// waits on a slow AWS call with retries); roughly x2.5 apart so a 2x regression moves a bucket.
pub const HANDLER_DURATION_BUCKETS_SECONDS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10.0,
    60.0,
];

/// `controller_runtime_reconcile_time_seconds` buckets: Karpenter's duration buckets up to 60 s
/// (controller-runtime's own).
const RECONCILE_TIME_BUCKETS: usize = 40;
/// Work-queue histograms: client-go's `ExponentialBuckets(10e-9, 10, 12)`, 10 ns to 1000 s.
const WORKQUEUE_BUCKET_START_SECONDS: f64 = 1e-8;
const WORKQUEUE_BUCKET_FACTOR: f64 = 10.0;
const WORKQUEUE_BUCKETS: u16 = 12;

/// `result` of `controller_runtime_reconcile_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types, reason = "the variants are the label values")]
enum ReconcileResult {
    success,
    error,
    requeue,
    requeue_after,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: ReconcileResult,
}

/// A work queue's labels: controller-runtime names each controller's queue after it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    name: &'static str,
    controller: &'static str,
}

impl QueueLabels {
    fn of(controller: &'static str) -> Self {
        Self {
            name: controller,
            controller,
        }
    }
}

tokio::task_local! {
    /// Karpenter's controller name of the handler running on this task, for metrics recorded
    /// below it (the cloud provider's `controller` label, Karpenter's `injection` context).
    static HANDLER_CONTROLLER: &'static str;
}

/// Karpenter's controller for message `M` handled by actor `A`: the message's own (the garbage
/// collector's sweeps), else the actor family's.
pub(crate) fn controller_of<A: super::Supervised, M: super::Mail>() -> &'static str {
    M::CONTROLLER.unwrap_or(A::CONTROLLER.name)
}

/// Runs `work` as a handler of `controller` (see [`current_controller`]).
pub(crate) fn in_controller<F: std::future::Future>(
    controller: &'static str,
    work: F,
) -> impl std::future::Future<Output = F::Output> {
    HANDLER_CONTROLLER.scope(controller, work)
}

/// The controller whose handler is running here, `""` outside one (a task it spawned, a test),
/// as Karpenter's label when the context names no controller.
#[must_use]
pub fn current_controller() -> &'static str {
    HANDLER_CONTROLLER.try_with(|name| *name).unwrap_or("")
}

/// Why a message was not handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types, reason = "the variants are the label values")]
pub enum DropReason {
    /// The actor was stopped (sent to a stopped actor, or still queued when it stopped).
    actor_stopped,
    /// The fault injector dropped it.
    fault_injected,
    /// A timer scheduled by an instance that has since been restarted.
    stale_timer,
    /// The handler was cancelled because the supervisor restarted or stopped the actor.
    interrupted,
    /// Sent to an actor its group parked (it kept failing); see `karpenter_actor_parked`.
    parked,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MessageLabels {
    kind: &'static str,
    message: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DropLabels {
    kind: &'static str,
    message: &'static str,
    reason: DropReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SupervisorLabels {
    supervisor: &'static str,
}

type HistogramFamily = Family<MessageLabels, Histogram, fn() -> Histogram>;
type LabeledHistograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn handler_histogram() -> Histogram {
    Histogram::new(HANDLER_DURATION_BUCKETS_SECONDS)
}

fn reconcile_time_histogram() -> Histogram {
    Histogram::new(
        DURATION_BUCKETS_SECONDS
            .into_iter()
            .take(RECONCILE_TIME_BUCKETS),
    )
}

fn workqueue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(
        WORKQUEUE_BUCKET_START_SECONDS,
        WORKQUEUE_BUCKET_FACTOR,
        WORKQUEUE_BUCKETS,
    ))
}

/// controller-runtime's families (see the module docs).
#[derive(Debug)]
struct ControllerFamilies {
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    terminal_errors: Family<ControllerLabels, Counter>,
    panics: Family<ControllerLabels, Counter>,
    time: LabeledHistograms<ControllerLabels>,
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: LabeledHistograms<QueueLabels>,
    work_duration: LabeledHistograms<QueueLabels>,
}

impl ControllerFamilies {
    fn register(registry: &mut Registry) -> Self {
        let families = Self {
            reconciles: Family::default(),
            errors: Family::default(),
            terminal_errors: Family::default(),
            panics: Family::default(),
            time: Family::new_with_constructor(reconcile_time_histogram),
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(workqueue_histogram),
            work_duration: Family::new_with_constructor(workqueue_histogram),
        };
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            families.reconciles.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            families.errors.clone(),
        );
        registry.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            families.terminal_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            families.panics.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            families.time.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            families.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            families.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            families.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            families.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            families.work_duration.clone(),
        );
        families
    }

    /// The handles of one controller, its series created at zero.
    fn handles(&self, controller: &'static str) -> ControllerMetrics {
        let labels = ControllerLabels { controller };
        let queue = QueueLabels::of(controller);
        let result = |result| {
            self.reconciles
                .get_or_create_owned(&ResultLabels { controller, result })
        };
        // Created at zero, as controller-runtime does for every result when a controller starts.
        let _ = result(ReconcileResult::requeue);
        let _ = result(ReconcileResult::requeue_after);
        let _ = self.terminal_errors.get_or_create_owned(&labels);
        ControllerMetrics {
            name: controller,
            success: result(ReconcileResult::success),
            error: result(ReconcileResult::error),
            errors: self.errors.get_or_create_owned(&labels),
            panics: self.panics.get_or_create_owned(&labels),
            time: self.time.get_or_create_owned(&labels),
            depth: self.depth.get_or_create_owned(&queue),
            adds: self.adds.get_or_create_owned(&queue),
            retries: self.retries.get_or_create_owned(&queue),
            queue_duration: self.queue_duration.get_or_create_owned(&queue),
            work_duration: self.work_duration.get_or_create_owned(&queue),
        }
    }
}

/// Cached handles of one controller's controller-runtime series.
#[derive(Debug)]
pub(crate) struct ControllerMetrics {
    pub(crate) name: &'static str,
    success: Counter,
    error: Counter,
    errors: Counter,
    panics: Counter,
    time: Histogram,
    pub(crate) depth: Gauge,
    pub(crate) adds: Counter,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
}

impl ControllerMetrics {
    /// A message waited `queued` in its mailbox before its handler started.
    pub(crate) fn started(&self, queued: Duration) {
        self.queue_duration.observe(queued.as_secs_f64());
    }

    /// A handler ended after `latency`, failed or not.
    pub(crate) fn reconciled(&self, latency: Duration, failure: Option<HandlerFailure<'_>>) {
        let seconds = latency.as_secs_f64();
        self.time.observe(seconds);
        self.work_duration.observe(seconds);
        match failure {
            None => {
                self.success.inc();
            }
            Some(failure) => {
                self.error.inc();
                self.errors.inc();
                // A failed reconcile is retried with backoff (controller-runtime's
                // AddRateLimited); ours by the reconciler's backoff or the supervisor's restart.
                self.retries.inc();
                if matches!(failure, HandlerFailure::Panic(_)) {
                    self.panics.inc();
                }
            }
        }
    }
}

/// controller-runtime's gauges read at scrape time from the live actors: how many there are per
/// controller (`max_concurrent_reconciles`), how many are in a handler (`active_workers`) and for
/// how long (`workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`).
/// client-go updates the last two every 500 ms from its queue; reading them per scrape is as
/// fresh and costs the hot path one atomic store per message.
#[derive(Debug)]
struct InFlightCollector {
    actors: Arc<ActorRegistry>,
    controllers: Arc<Mutex<BTreeMap<&'static str, Arc<ControllerMetrics>>>>,
}

/// One controller's in-flight figures at a scrape.
#[derive(Debug, Default, Clone, Copy)]
struct InFlight {
    live: i64,
    busy: i64,
    unfinished: f64,
    longest: f64,
}

impl Collector for InFlightCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut figures: BTreeMap<&'static str, InFlight> = self
            .controllers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .map(|name| (*name, InFlight::default()))
            .collect();
        self.actors.for_each_in_flight(|controller, busy_for| {
            let entry = figures.entry(controller).or_default();
            entry.live += 1;
            if let Some(age) = busy_for {
                let seconds = age.as_secs_f64();
                entry.busy += 1;
                entry.unfinished += seconds;
                entry.longest = entry.longest.max(seconds);
            }
        });
        let max_concurrent: Family<ControllerLabels, Gauge> = Family::default();
        let active: Family<ControllerLabels, Gauge> = Family::default();
        let unfinished: Family<QueueLabels, Gauge<f64, AtomicU64>> = Family::default();
        let longest: Family<QueueLabels, Gauge<f64, AtomicU64>> = Family::default();
        for (controller, figure) in figures {
            let labels = ControllerLabels { controller };
            max_concurrent.get_or_create(&labels).set(figure.live);
            active.get_or_create(&labels).set(figure.busy);
            let queue = QueueLabels::of(controller);
            unfinished.get_or_create(&queue).set(figure.unfinished);
            longest.get_or_create(&queue).set(figure.longest);
        }
        max_concurrent.encode(encoder.encode_descriptor(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            None,
            max_concurrent.metric_type(),
        )?)?;
        active.encode(encoder.encode_descriptor(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            None,
            active.metric_type(),
        )?)?;
        unfinished.encode(encoder.encode_descriptor(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
            None,
            unfinished.metric_type(),
        )?)?;
        longest.encode(encoder.encode_descriptor(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            None,
            longest.metric_type(),
        )?)?;
        Ok(())
    }
}

/// The actor metric families, registered once at startup and passed down in the kit.
#[derive(Debug)]
pub struct ActorMetrics {
    handled: Family<MessageLabels, Counter>,
    errors: Family<MessageLabels, Counter>,
    panics: Family<MessageLabels, Counter>,
    duration: HistogramFamily,
    overflows: Family<MessageLabels, Counter>,
    dropped: Family<DropLabels, Counter>,
    restarts: Family<KindLabels, Counter>,
    live: Family<KindLabels, Gauge>,
    depth: Family<KindLabels, Gauge>,
    escalations: Family<SupervisorLabels, Counter>,
    parked: Family<KindLabels, Gauge>,
    parkings: Family<KindLabels, Counter>,
    controller_families: ControllerFamilies,
    batch_size: BatcherHistograms,
    batch_time: BatcherHistograms,
    controllers: Arc<Mutex<BTreeMap<&'static str, Arc<ControllerMetrics>>>>,
    kinds: Mutex<HashMap<&'static str, Arc<KindMetrics>>>,
    messages: Mutex<HashMap<(&'static str, &'static str), Arc<MessageMetrics>>>,
}

/// Cached per-kind handles.
#[derive(Debug)]
pub(crate) struct KindMetrics {
    pub(crate) restarts: Counter,
    pub(crate) live: Gauge,
    pub(crate) depth: Gauge,
    pub(crate) parked: Gauge,
    pub(crate) parkings: Counter,
    /// The kind's controller: its work queue is the kind's mailboxes.
    pub(crate) controller: Arc<ControllerMetrics>,
}

/// Cached per-(kind, message) handles.
#[derive(Debug)]
pub(crate) struct MessageMetrics {
    pub(crate) handled: Counter,
    pub(crate) errors: Counter,
    pub(crate) panics: Counter,
    pub(crate) duration: Histogram,
    pub(crate) overflows: Counter,
    /// The controller whose reconciles this message's handler counts as.
    pub(crate) controller: Arc<ControllerMetrics>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BatcherLabels {
    batcher: String,
}

type BatcherHistograms = Family<BatcherLabels, Histogram, fn() -> Histogram>;

/// Karpenter's batch-size buckets: 1, 2, 4, 5, 10 to 30 by 5, 40 to 100 by 10, 125 to 300 by
/// 25, 350 to 600 by 50, then 700, 800, 900, 1000.
fn batch_size_histogram() -> Histogram {
    let mut buckets = vec![1.0, 2.0, 4.0];
    buckets.extend((1..=6).map(|i| f64::from(i) * 5.0));
    buckets.extend((4..=10).map(|i| f64::from(i) * 10.0));
    buckets.extend((5..=12).map(|i| f64::from(i) * 25.0));
    buckets.extend((7..=12).map(|i| f64::from(i) * 50.0));
    buckets.extend([700.0, 800.0, 900.0, 1000.0]);
    Histogram::new(buckets)
}

/// Karpenter's duration buckets.
fn batch_time_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS_SECONDS)
}

impl ActorMetrics {
    /// Creates the families and registers them in `registry`; the in-flight gauges are read
    /// from `actors` at each scrape.
    pub(crate) fn register(registry: &mut Registry, actors: Arc<ActorRegistry>) -> Self {
        let controllers = Arc::default();
        registry.register_collector(Box::new(InFlightCollector {
            actors,
            controllers: Arc::clone(&controllers),
        }));
        let metrics = Self {
            controller_families: ControllerFamilies::register(registry),
            batch_size: Family::new_with_constructor(batch_size_histogram),
            batch_time: Family::new_with_constructor(batch_time_histogram),
            controllers,
            handled: Family::default(),
            errors: Family::default(),
            panics: Family::default(),
            duration: Family::new_with_constructor(handler_histogram),
            overflows: Family::default(),
            dropped: Family::default(),
            restarts: Family::default(),
            live: Family::default(),
            depth: Family::default(),
            escalations: Family::default(),
            parked: Family::default(),
            parkings: Family::default(),
            kinds: Mutex::default(),
            messages: Mutex::default(),
        };
        registry.register(
            "karpenter_actor_messages_handled",
            "Messages that reached an actor's handler (whatever the outcome), by actor kind and message type",
            metrics.handled.clone(),
        );
        registry.register(
            "karpenter_actor_handler_errors",
            "Handler or start errors returned by actors, by actor kind and message type",
            metrics.errors.clone(),
        );
        registry.register(
            "karpenter_actor_panics",
            "Panics caught in actor handlers and lifecycle hooks, by actor kind and message type",
            metrics.panics.clone(),
        );
        registry.register(
            "karpenter_actor_handler_duration_seconds",
            "Time from a handler's start to its reply, by actor kind and message type",
            metrics.duration.clone(),
        );
        registry.register(
            "karpenter_actor_mailbox_overflows",
            "Events rejected because the actor's mailbox was full, by actor kind and message type",
            metrics.overflows.clone(),
        );
        registry.register(
            "karpenter_actor_messages_dropped",
            "Messages never handled, by actor kind, message type and reason",
            metrics.dropped.clone(),
        );
        registry.register(
            "karpenter_actor_restarts",
            "Actor instances restarted by their supervisor, by actor kind",
            metrics.restarts.clone(),
        );
        registry.register(
            "karpenter_actor_live_actors",
            "Actors currently registered, by actor kind",
            metrics.live.clone(),
        );
        registry.register(
            "karpenter_actor_mailbox_depth",
            "Messages queued in the mailboxes of all actors of a kind",
            metrics.depth.clone(),
        );
        registry.register(
            "karpenter_actor_supervisor_escalations",
            "Times a supervisor group exceeded its restart intensity and escalated to its parent",
            metrics.escalations.clone(),
        );
        registry.register(
            "karpenter_actor_parked",
            "Actors parked now by their family's supervisor because they kept failing, by actor kind",
            metrics.parked.clone(),
        );
        registry.register(
            "karpenter_actor_parkings",
            "Times a family's supervisor parked a member that kept failing, by actor kind",
            metrics.parkings.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_batcher_batch_time_seconds",
            "Duration of the batching window per batcher",
            metrics.batch_time.clone(),
        );
        registry.register(
            "karpenter_cloudprovider_batcher_batch_size",
            "Size of the request batch per batcher",
            metrics.batch_size.clone(),
        );
        metrics
    }

    /// A batch of `size` requests executed by `batcher` (the AWS batchers' actor key, e.g.
    /// `create-fleet`; labelled as Karpenter's `create_fleet`) after its window stayed open for
    /// `window` (Karpenter's `pkg/batcher` metrics).
    pub(crate) fn batch(&self, batcher: &str, size: usize, window: Duration) {
        let labels = BatcherLabels {
            batcher: batcher.replace('-', "_"),
        };
        self.batch_size.get_or_create(&labels).observe(
            karpenter_core::domain::resources::approx_f64(i64::try_from(size).unwrap_or(i64::MAX)),
        );
        self.batch_time
            .get_or_create(&labels)
            .observe(window.as_secs_f64());
    }

    /// The controller-runtime handles of `controller`, created (at zero) on first use.
    fn controller(&self, controller: &'static str) -> Arc<ControllerMetrics> {
        let mut controllers = self
            .controllers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            controllers
                .entry(controller)
                .or_insert_with(|| Arc::new(self.controller_families.handles(controller))),
        )
    }

    /// The handles of actor `kind`, whose work is Karpenter's `controller`.
    pub(crate) fn kind(&self, kind: &'static str, controller: &'static str) -> Arc<KindMetrics> {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(kinds.entry(kind).or_insert_with(|| {
            let labels = KindLabels { kind };
            Arc::new(KindMetrics {
                controller: self.controller(controller),
                restarts: self.restarts.get_or_create_owned(&labels),
                live: self.live.get_or_create_owned(&labels),
                depth: self.depth.get_or_create_owned(&labels),
                parked: self.parked.get_or_create_owned(&labels),
                parkings: self.parkings.get_or_create_owned(&labels),
            })
        }))
    }

    /// The handles of `message` handled by actor `kind` as Karpenter's `controller`.
    pub(crate) fn message(
        &self,
        kind: &'static str,
        message: &'static str,
        controller: &'static str,
    ) -> Arc<MessageMetrics> {
        let mut messages = self.messages.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(messages.entry((kind, message)).or_insert_with(|| {
            let labels = MessageLabels { kind, message };
            Arc::new(MessageMetrics {
                controller: self.controller(controller),
                handled: self.handled.get_or_create_owned(&labels),
                errors: self.errors.get_or_create_owned(&labels),
                panics: self.panics.get_or_create_owned(&labels),
                duration: self.duration.get_or_create_owned(&labels),
                overflows: self.overflows.get_or_create_owned(&labels),
            })
        }))
    }

    pub(crate) fn dropped(&self, kind: &'static str, message: &'static str, reason: DropReason) {
        self.dropped
            .get_or_create(&DropLabels {
                kind,
                message,
                reason,
            })
            .inc();
    }

    pub(crate) fn escalated(&self, supervisor: &'static str) {
        self.escalations
            .get_or_create(&SupervisorLabels { supervisor })
            .inc();
    }
}

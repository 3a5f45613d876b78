//! The live registry: one [`ActorRecord`] per running actor and one group record per
//! supervisor group, and the serializable [`RegistrySnapshot`] built from them (served at
//! `/debug/actors` and printed by `karpenter actors`).
//!
//! Flow: a record is created and registered when an actor is spawned, shared by the actor's
//! cell (which updates counters as it handles messages), by its addresses (mailbox depth,
//! overflows) and by the registry; the cell deregisters it when it stops for good. Counters are
//! atomics; the few text fields sit behind a mutex that is never held across an await.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::control::ControlBlock;
use super::metrics::{KindMetrics, MessageMetrics};

/// The last error is cut to this many bytes: enough for an AWS error with its request id,
/// small enough that 10,000 failing actors stay a few MiB.
pub const MAX_LAST_ERROR_BYTES: usize = 512;

/// State label of an actor that is building or running `started`.
pub const STATE_STARTING: &str = "starting";
/// State label after `started`, until the actor sets its own.
pub const STATE_RUNNING: &str = "running";
/// State label while the supervisor decides (backoff before a restart, or escalated).
pub const STATE_SUSPENDED: &str = "suspended";
/// State label once the actor is stopping.
pub const STATE_STOPPING: &str = "stopping";
/// State label of a family member its group parked: it kept failing, and is left stopped until
/// its retry ([`ActorSnapshot::unpark_in_seconds`]).
pub const STATE_PARKED: &str = "parked";

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[derive(Debug)]
struct MessageCount {
    name: &'static str,
    handled: u64,
    metrics: Arc<MessageMetrics>,
}

/// What the cell updates per handled message, under one lock (cheaper than an atomic each).
#[derive(Debug)]
struct Detail {
    state: &'static str,
    /// When a parked actor is retried.
    parked_until: Option<Instant>,
    last_error: Option<String>,
    handled: u64,
    errors: u64,
    panics: u64,
    latency_last_ns: u64,
    latency_max_ns: u64,
    latency_total_ns: u64,
    by_message: Vec<MessageCount>,
}

impl Detail {
    fn record_failure(&mut self, metrics: &MessageMetrics, failure: HandlerFailure<'_>) {
        match failure {
            HandlerFailure::Error(text) => {
                self.errors += 1;
                metrics.errors.inc();
                self.last_error = Some(bounded(text, MAX_LAST_ERROR_BYTES));
            }
            HandlerFailure::Panic(text) => {
                self.panics += 1;
                metrics.panics.inc();
                self.last_error = Some(bounded(text, MAX_LAST_ERROR_BYTES));
            }
        }
    }
}

/// Everything the kit knows about one live actor.
#[derive(Debug)]
pub(crate) struct ActorRecord {
    pub(crate) id: u64,
    pub(crate) kind: &'static str,
    pub(crate) key: Arc<str>,
    pub(crate) capacity: usize,
    started_at: Instant,
    started_wall: SystemTime,
    depth: AtomicUsize,
    /// Nanoseconds from `started_at` to the start of the running handler, plus one; 0 while no
    /// handler runs (read at scrape time for the work-queue gauges).
    busy_since_ns: AtomicU64,
    restarts: AtomicU64,
    overflows: AtomicU64,
    /// A nudge ([`crate::runtime::ActorRef::nudge`]) is queued and not yet handled.
    pub(crate) nudged: AtomicBool,
    /// Parked by its group: sends fail at once (read on every send, so an atomic).
    parked: AtomicBool,
    detail: Mutex<Detail>,
    /// Commands from the supervisor.
    pub(crate) control: ControlBlock,
    /// Woken when the mailbox goes from full to not full (requests wait on it).
    pub(crate) space: Notify,
    pub(crate) kind_metrics: Arc<KindMetrics>,
}

impl ActorRecord {
    pub(crate) fn new(
        id: u64,
        kind: &'static str,
        key: Arc<str>,
        capacity: usize,
        started_wall: SystemTime,
        kind_metrics: Arc<KindMetrics>,
    ) -> Self {
        Self {
            id,
            kind,
            key,
            capacity,
            started_at: Instant::now(),
            started_wall,
            depth: AtomicUsize::new(0),
            busy_since_ns: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            nudged: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            detail: Mutex::new(Detail {
                state: STATE_STARTING,
                parked_until: None,
                last_error: None,
                handled: 0,
                errors: 0,
                panics: 0,
                latency_last_ns: 0,
                latency_max_ns: 0,
                latency_total_ns: 0,
                by_message: Vec::new(),
            }),
            control: ControlBlock::default(),
            space: Notify::new(),
            kind_metrics,
        }
    }

    /// Reserves a mailbox slot; false when the mailbox is full.
    pub(crate) fn try_reserve(&self) -> bool {
        let reserved = self
            .depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |depth| {
                (depth < self.capacity).then_some(depth + 1)
            })
            .is_ok();
        if reserved {
            self.kind_metrics.depth.inc();
            self.kind_metrics.controller.depth.inc();
            self.kind_metrics.controller.adds.inc();
        }
        reserved
    }

    /// Reserves a slot even when the mailbox is full (self-scheduled timers).
    pub(crate) fn force_reserve(&self) {
        self.depth.fetch_add(1, Ordering::AcqRel);
        self.kind_metrics.depth.inc();
        self.kind_metrics.controller.depth.inc();
        self.kind_metrics.controller.adds.inc();
    }

    /// Releases the slot of a message the cell took from its mailbox. Every queued message
    /// reserved one, and the cell stops taking messages before `release_all`, so this never
    /// underflows.
    pub(crate) fn release_taken(&self) {
        let before = self.depth.fetch_sub(1, Ordering::AcqRel);
        self.kind_metrics.depth.dec();
        self.kind_metrics.controller.depth.dec();
        if before >= self.capacity {
            self.space.notify_waiters();
        }
    }

    /// Releases a slot: the message left the mailbox (handled, or never queued).
    pub(crate) fn release(&self) {
        let before = self
            .depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |depth| {
                depth.checked_sub(1)
            });
        if let Ok(before) = before {
            self.kind_metrics.depth.dec();
            self.kind_metrics.controller.depth.dec();
            if before >= self.capacity {
                self.space.notify_waiters();
            }
        }
    }

    /// Forgets every reserved slot (the actor stopped; its queue is dropped).
    pub(crate) fn release_all(&self) {
        let left = i64::try_from(self.depth.swap(0, Ordering::AcqRel)).unwrap_or(i64::MAX);
        self.kind_metrics.depth.dec_by(left);
        self.kind_metrics.controller.depth.dec_by(left);
        self.space.notify_waiters();
    }

    pub(crate) fn depth(&self) -> usize {
        self.depth.load(Ordering::Acquire)
    }

    /// A handler starts now, after its message waited `queued` in the mailbox.
    pub(crate) fn begin_work(&self, queued: Duration) {
        let since = Instant::now().saturating_duration_since(self.started_at);
        let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX - 1);
        self.busy_since_ns.store(nanos + 1, Ordering::Release);
        self.kind_metrics.controller.started(queued);
    }

    /// The running handler ended.
    pub(crate) fn end_work(&self) {
        self.busy_since_ns.store(0, Ordering::Release);
    }

    /// How long the running handler has run, if one runs.
    fn busy_for(&self, now: Instant) -> Option<Duration> {
        let stored = self.busy_since_ns.load(Ordering::Acquire);
        (stored != 0).then(|| {
            let started = self.started_at + Duration::from_nanos(stored - 1);
            now.saturating_duration_since(started)
        })
    }

    pub(crate) fn set_state(&self, state: &'static str) {
        lock(&self.detail).state = state;
    }

    pub(crate) fn state(&self) -> &'static str {
        lock(&self.detail).state
    }

    /// Parks the actor until `until`: state `parked`, sends fail at once, counted.
    pub(crate) fn park(&self, until: Instant) {
        {
            let mut detail = lock(&self.detail);
            detail.state = STATE_PARKED;
            detail.parked_until = Some(until);
        }
        if !self.parked.swap(true, Ordering::AcqRel) {
            self.kind_metrics.parked.inc();
        }
        self.kind_metrics.parkings.inc();
        // Requests waiting for room look again and fail instead of waiting for their timeout.
        self.space.notify_waiters();
    }

    /// Ends a parking (the actor is retried, or stopped).
    pub(crate) fn unpark(&self) {
        lock(&self.detail).parked_until = None;
        if self.parked.swap(false, Ordering::AcqRel) {
            self.kind_metrics.parked.dec();
        }
    }

    pub(crate) fn is_parked(&self) -> bool {
        self.parked.load(Ordering::Acquire)
    }

    pub(crate) fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    pub(crate) fn count_restart(&self) {
        // A queued nudge may have been lost with the old incarnation: let the next one through.
        self.nudged.store(false, Ordering::Release);
        self.restarts.fetch_add(1, Ordering::Relaxed);
        self.kind_metrics.restarts.inc();
    }

    pub(crate) fn count_overflow(&self, metrics: &MessageMetrics) {
        self.overflows.fetch_add(1, Ordering::Relaxed);
        metrics.overflows.inc();
    }

    /// Records a message that reached the handler: counts, latency, and the failure if any.
    pub(crate) fn record_handled(
        &self,
        message: &'static str,
        lookup: impl FnOnce() -> Arc<MessageMetrics>,
        latency: Duration,
        failure: Option<HandlerFailure<'_>>,
    ) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let mut guard = lock(&self.detail);
        let detail = &mut *guard;
        detail.handled += 1;
        detail.latency_last_ns = nanos;
        detail.latency_max_ns = detail.latency_max_ns.max(nanos);
        detail.latency_total_ns = detail.latency_total_ns.saturating_add(nanos);
        let index = if let Some(index) = detail.by_message.iter().position(|m| m.name == message) {
            index
        } else {
            detail.by_message.push(MessageCount {
                name: message,
                handled: 0,
                metrics: lookup(),
            });
            detail.by_message.len() - 1
        };
        let entry = &mut detail.by_message[index];
        entry.handled += 1;
        entry.metrics.handled.inc();
        entry.metrics.duration.observe(latency.as_secs_f64());
        entry.metrics.controller.reconciled(latency, failure);
        if let Some(failure) = failure {
            let metrics = Arc::clone(&entry.metrics);
            detail.record_failure(&metrics, failure);
        }
    }

    /// Records a failure outside a message (building the actor, `started`).
    pub(crate) fn record_lifecycle_failure(
        &self,
        metrics: &MessageMetrics,
        failure: HandlerFailure<'_>,
    ) {
        lock(&self.detail).record_failure(metrics, failure);
    }

    fn snapshot(&self, now: Instant) -> ActorSnapshot {
        let detail = lock(&self.detail);
        let handled = detail.handled;
        let total_ns = detail.latency_total_ns;
        #[allow(clippy::cast_precision_loss, reason = "averages of nanoseconds")]
        let avg_seconds = if handled == 0 {
            0.0
        } else {
            total_ns as f64 / handled as f64 / 1e9
        };
        ActorSnapshot {
            kind: self.kind.to_owned(),
            key: self.key.to_string(),
            state: detail.state.to_owned(),
            started_at_unix_ms: self
                .started_wall
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            uptime_seconds: now.saturating_duration_since(self.started_at).as_secs_f64(),
            restarts: self.restarts.load(Ordering::Relaxed),
            handled,
            handled_by_message: detail
                .by_message
                .iter()
                .map(|m| (m.name.to_owned(), m.handled))
                .collect(),
            errors: detail.errors,
            panics: detail.panics,
            mailbox_depth: self.depth(),
            mailbox_capacity: self.capacity,
            overflows: self.overflows.load(Ordering::Relaxed),
            latency: LatencySnapshot {
                last_seconds: nanos_to_seconds(detail.latency_last_ns),
                avg_seconds,
                max_seconds: nanos_to_seconds(detail.latency_max_ns),
            },
            last_error: detail.last_error.clone(),
            unpark_in_seconds: detail
                .parked_until
                .map(|until| until.saturating_duration_since(now).as_secs_f64()),
        }
    }
}

fn nanos_to_seconds(nanos: u64) -> f64 {
    Duration::from_nanos(nanos).as_secs_f64()
}

/// A handler outcome worth recording as a failure.
#[derive(Debug, Clone, Copy)]
pub(crate) enum HandlerFailure<'a> {
    Error(&'a str),
    Panic(&'a str),
}

/// What the registry shows of a supervisor group.
#[derive(Debug)]
pub(crate) struct GroupRecord {
    pub(crate) id: u64,
    pub(crate) name: &'static str,
    pub(crate) strategy: &'static str,
    /// Commands from the parent group.
    pub(crate) control: ControlBlock,
    detail: Mutex<GroupDetail>,
}

#[derive(Debug, Default)]
struct GroupDetail {
    phase: &'static str,
    children: usize,
    parked: usize,
    restarts: u64,
    escalations: u64,
    last_child_stop: Option<String>,
}

impl GroupRecord {
    pub(crate) fn new(id: u64, name: &'static str, strategy: &'static str) -> Self {
        Self {
            id,
            name,
            strategy,
            control: ControlBlock::default(),
            detail: Mutex::new(GroupDetail {
                phase: STATE_RUNNING,
                ..GroupDetail::default()
            }),
        }
    }

    pub(crate) fn set_phase(&self, phase: &'static str) {
        lock(&self.detail).phase = phase;
    }

    pub(crate) fn set_children(&self, children: usize) {
        lock(&self.detail).children = children;
    }

    pub(crate) fn set_parked(&self, parked: usize) {
        lock(&self.detail).parked = parked;
    }

    pub(crate) fn child_stopped(&self, child: &str, reason: &str, restarted: bool) {
        let mut detail = lock(&self.detail);
        if restarted {
            detail.restarts += 1;
        }
        detail.last_child_stop = Some(bounded(&format!("{child}: {reason}"), MAX_LAST_ERROR_BYTES));
    }

    pub(crate) fn escalated(&self) {
        lock(&self.detail).escalations += 1;
    }

    fn snapshot(&self) -> SupervisorSnapshot {
        let detail = lock(&self.detail);
        SupervisorSnapshot {
            name: self.name.to_owned(),
            strategy: self.strategy.to_owned(),
            phase: detail.phase.to_owned(),
            children: detail.children,
            parked: detail.parked,
            restarts: detail.restarts,
            escalations: detail.escalations,
            last_child_stop: detail.last_child_stop.clone(),
        }
    }
}

/// The live actors and groups of one kit.
#[derive(Debug, Default)]
pub struct ActorRegistry {
    next_id: AtomicU64,
    actors: Mutex<HashMap<u64, Arc<ActorRecord>>>,
    groups: Mutex<HashMap<u64, Arc<GroupRecord>>>,
}

impl ActorRegistry {
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn register(&self, record: Arc<ActorRecord>) {
        record.kind_metrics.live.inc();
        lock(&self.actors).insert(record.id, record);
    }

    pub(crate) fn deregister(&self, id: u64) {
        if let Some(record) = lock(&self.actors).remove(&id) {
            record.unpark();
            record.kind_metrics.live.dec();
        }
    }

    pub(crate) fn register_group(&self, record: Arc<GroupRecord>) {
        lock(&self.groups).insert(record.id, record);
    }

    pub(crate) fn deregister_group(&self, id: u64) {
        lock(&self.groups).remove(&id);
    }

    /// Calls `visit` with each live actor's controller and how long its running handler has
    /// run (`None` when idle).
    pub(crate) fn for_each_in_flight(&self, mut visit: impl FnMut(&'static str, Option<Duration>)) {
        let now = Instant::now();
        for record in lock(&self.actors).values() {
            visit(record.kind_metrics.controller.name, record.busy_for(now));
        }
    }

    /// Live actors.
    #[must_use]
    pub fn len(&self) -> usize {
        lock(&self.actors).len()
    }

    /// Whether no actor is live.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Live actors of one kind.
    #[must_use]
    pub fn count_kind(&self, kind: &str) -> usize {
        lock(&self.actors)
            .values()
            .filter(|record| record.kind == kind)
            .count()
    }

    /// Every live actor and group, sorted by kind and key (groups by name).
    #[must_use]
    pub fn snapshot(&self) -> RegistrySnapshot {
        let now = Instant::now();
        let records: Vec<Arc<ActorRecord>> = lock(&self.actors).values().cloned().collect();
        let mut actors: Vec<ActorSnapshot> = records.iter().map(|r| r.snapshot(now)).collect();
        actors.sort_by(|a, b| (&a.kind, &a.key).cmp(&(&b.kind, &b.key)));
        let groups: Vec<Arc<GroupRecord>> = lock(&self.groups).values().cloned().collect();
        let mut supervisors: Vec<SupervisorSnapshot> =
            groups.iter().map(|g| g.snapshot()).collect();
        supervisors.sort_by(|a, b| a.name.cmp(&b.name));
        RegistrySnapshot {
            actors,
            supervisors,
        }
    }
}

/// All live actors and groups at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySnapshot {
    pub actors: Vec<ActorSnapshot>,
    pub supervisors: Vec<SupervisorSnapshot>,
}

impl RegistrySnapshot {
    /// The actor of this kind and key, if live.
    #[must_use]
    pub fn actor(&self, kind: &str, key: &str) -> Option<&ActorSnapshot> {
        self.actors.iter().find(|a| a.kind == kind && a.key == key)
    }

    /// The supervisor group of this name, if live.
    #[must_use]
    pub fn supervisor(&self, name: &str) -> Option<&SupervisorSnapshot> {
        self.supervisors.iter().find(|s| s.name == name)
    }

    /// Actors parked now.
    #[must_use]
    pub fn parked(&self) -> usize {
        self.actors
            .iter()
            .filter(|a| a.unpark_in_seconds.is_some())
            .count()
    }
}

/// One live actor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActorSnapshot {
    pub kind: String,
    pub key: String,
    /// The label the actor set last ([`super::ActorCtx::set_state`]), or a kit label
    /// (`starting`, `running`, `suspended`, `stopping`).
    pub state: String,
    /// When the actor was first spawned (restarts keep it), from the kit's wall clock.
    pub started_at_unix_ms: u64,
    pub uptime_seconds: f64,
    pub restarts: u64,
    /// Messages that reached the handler, whatever the outcome.
    pub handled: u64,
    pub handled_by_message: BTreeMap<String, u64>,
    /// Handler errors and start failures.
    pub errors: u64,
    pub panics: u64,
    pub mailbox_depth: usize,
    pub mailbox_capacity: usize,
    /// Events rejected because the mailbox was full.
    pub overflows: u64,
    pub latency: LatencySnapshot,
    /// At most [`MAX_LAST_ERROR_BYTES`].
    pub last_error: Option<String>,
    /// A parked actor ([`STATE_PARKED`]): seconds until its retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unpark_in_seconds: Option<f64>,
}

/// Handler latency of one actor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LatencySnapshot {
    pub last_seconds: f64,
    pub avg_seconds: f64,
    pub max_seconds: f64,
}

/// One supervisor group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupervisorSnapshot {
    pub name: String,
    /// `one_for_one` or `one_for_all`.
    pub strategy: String,
    /// `running`, `suspended` (escalated or suspended by its parent), `stopping`.
    pub phase: String,
    pub children: usize,
    /// Children parked now (families).
    #[serde(default)]
    pub parked: usize,
    /// Child restarts this group performed.
    pub restarts: u64,
    pub escalations: u64,
    pub last_child_stop: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_text_is_cut_on_a_character_boundary() {
        let text = "é".repeat(400);
        let cut = bounded(&text, MAX_LAST_ERROR_BYTES);
        assert!(cut.len() <= MAX_LAST_ERROR_BYTES);
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("short", MAX_LAST_ERROR_BYTES), "short");
    }
}

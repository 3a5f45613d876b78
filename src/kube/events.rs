//! [`EventRecorder`]: publishes `events.k8s.io/v1` Events the way kube-runtime's `Recorder`
//! (and client-go's event broadcaster) does: the first occurrence creates an Event named
//! `<object>.<unix nanoseconds in hex>`; a repeat of the same event (type, action, reason,
//! reporter, regarding and related object) within [`SERIES_TTL`] of the last one patches that
//! Event into a series with its count and last observed time.
//!
//! It differs from kube-runtime's `Recorder` where that one does not scale or does not follow
//! the daemon's time:
//!
//! - Times come from the daemon's [`Clock`], so `karpenter simulate` stamps events with
//!   simulated time and a series expires after six simulated minutes, not six wall-clock ones.
//! - Per event it remembers only the Event's name, namespace, series count and last time (not
//!   the whole Event), and sweeps expired entries at most once per [`SWEEP_EVERY`] instead of
//!   walking every entry on every publish. At 5,000 nodes the daemon publishes tens of
//!   thousands of events; kube-runtime's cache held a full Event and two object references for
//!   each, and scanned them all per publish.
//! - Two events for the same object at the same nanosecond (simulated time stands still while
//!   the daemon works) get distinct names: a name already used is taken one nanosecond later.
//!
//! Flow: [`EventRecorder::publish`] looks its key up (an expired entry counts as absent),
//! creates or patches the Event without holding the lock, then records the outcome.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_actors::ports::clock::Clock;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::Reporter;
use serde_json::json;

/// How long after its last occurrence a repeat still joins an event's series (kube-runtime's
/// and client-go's six minutes).
pub const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);
/// Expired entries are swept at most this often.
pub const SWEEP_EVERY: SignedDuration = SignedDuration::from_mins(1);

/// What happened, to whom (the fields of an `events.k8s.io/v1` Event a publisher chooses).
#[derive(Debug, Clone, PartialEq)]
pub struct Occurrence<'a> {
    /// `Normal` or `Warning`.
    pub type_: &'a str,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: Option<&'a str>,
    pub regarding: &'a ObjectReference,
    pub related: Option<&'a ObjectReference>,
}

/// An Event already published, as far as a repeat needs it.
#[derive(Debug, Clone)]
struct Published {
    name: String,
    namespace: String,
    count: i32,
    last: Timestamp,
}

#[derive(Debug, Default)]
struct Memory {
    published: HashMap<String, Published>,
    last_sweep: Option<Timestamp>,
    /// The nanosecond stamp of the last Event created, so names never repeat.
    last_stamp: i128,
}

/// Publishes Events through `client` as `reporter` (its `instance` is the Event's
/// `reportingInstance`, the controller's name when absent), timed by `clock`.
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    clock: Arc<dyn Clock>,
    memory: Arc<Mutex<Memory>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("reporter", &self.reporter)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    #[must_use]
    pub fn new(client: Client, reporter: Reporter, clock: Arc<dyn Clock>) -> Self {
        Self {
            client,
            reporter,
            clock,
            memory: Arc::default(),
        }
    }

    /// Events remembered for a series now (expired ones count until the next sweep).
    #[must_use]
    pub fn remembered(&self) -> usize {
        self.lock().published.len()
    }

    /// The same recorder (and memory) timed by `clock`.
    #[must_use]
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self { clock, ..self }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates the Event, or patches the series of the same event published within
    /// [`SERIES_TTL`].
    ///
    /// # Errors
    ///
    /// The API server's refusal of the create or the patch.
    pub async fn publish(&self, occurrence: &Occurrence<'_>) -> Result<(), kube::Error> {
        let now = self.clock.now();
        let key = self.key(occurrence);
        let repeat = {
            let mut memory = self.lock();
            memory.sweep(now);
            memory
                .published
                .get(&key)
                .filter(|p| p.last + SERIES_TTL > now)
                .cloned()
        };
        let published = match repeat {
            Some(previous) => self.patch_series(previous, now).await?,
            None => self.create(occurrence, now).await?,
        };
        self.lock().published.insert(key, published);
        Ok(())
    }

    async fn patch_series(
        &self,
        previous: Published,
        now: Timestamp,
    ) -> Result<Published, kube::Error> {
        let count = previous.count.saturating_add(1);
        let events: Api<Event> = Api::namespaced(self.client.clone(), &previous.namespace);
        let patch = json!({
            "series": EventSeries { count, last_observed_time: MicroTime(now) },
        });
        events
            .patch(
                &previous.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        Ok(Published {
            count,
            last: now,
            ..previous
        })
    }

    async fn create(
        &self,
        occurrence: &Occurrence<'_>,
        now: Timestamp,
    ) -> Result<Published, kube::Error> {
        let regarding = occurrence.regarding;
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let stamp = {
            let mut memory = self.lock();
            let stamp = now.as_nanosecond().max(memory.last_stamp + 1);
            memory.last_stamp = stamp;
            stamp
        };
        let object = regarding
            .name
            .as_deref()
            .unwrap_or(&self.reporter.controller);
        let name = format!("{object}.{stamp:x}");
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            action: Some(occurrence.action.to_owned()),
            reason: Some(occurrence.reason.to_owned()),
            note: occurrence.note.map(str::to_owned),
            type_: Some(occurrence.type_.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: occurrence.related.cloned(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            ..Event::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        events.create(&PostParams::default(), &event).await?;
        Ok(Published {
            name,
            namespace,
            count: 1,
            last: now,
        })
    }

    /// The identity of an event for its series: kube-runtime's key (type, action, reason,
    /// reporter, and the regarding and related objects by API version, kind, namespace, name
    /// and uid) as one string.
    fn key(&self, occurrence: &Occurrence<'_>) -> String {
        let mut key = String::with_capacity(160);
        let mut field = |value: &str| {
            key.push_str(value);
            key.push('\u{1f}');
        };
        field(occurrence.type_);
        field(occurrence.action);
        field(occurrence.reason);
        field(&self.reporter.controller);
        field(self.reporter.instance.as_deref().unwrap_or_default());
        for object in std::iter::once(Some(occurrence.regarding)).chain([occurrence.related]) {
            let Some(object) = object else {
                field("-");
                continue;
            };
            for part in [
                &object.api_version,
                &object.kind,
                &object.namespace,
                &object.name,
                &object.uid,
            ] {
                field(part.as_deref().unwrap_or_default());
            }
        }
        key
    }
}

impl Memory {
    /// Forgets the events whose series has expired, at most once per [`SWEEP_EVERY`].
    fn sweep(&mut self, now: Timestamp) {
        if self.last_sweep.is_some_and(|last| last + SWEEP_EVERY > now) {
            return;
        }
        self.last_sweep = Some(now);
        self.published.retain(|_, p| p.last + SERIES_TTL > now);
    }
}

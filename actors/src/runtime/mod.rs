//! The actor kit: every actor of the daemon runs on it, and only this module knows actix.
//!
//! # Defining an actor
//!
//! Implement [`Supervised`] (kind, mailbox capacity, restart policy, `Deps`, `build`, optional
//! `started`/`stopped`), a [`Mail`] type per message and [`Handles<M>`] per message the actor
//! accepts. Spawn it under a group ([`GroupRef::spawn`]) or, for per-object actors, get it from a
//! [`Family`] by key. Callers hold an [`ActorRef`] and pick a send style: [`ActorRef::request`]
//! (reply or a [`SendError`] within a timeout), [`ActorRef::try_send_event`] (queued or an
//! [`Overflow`], counted), [`ActorRef::nudge`] (at most one queued) or [`ActorRef::send_lossy`].
//!
//! ```
//! use std::time::Duration;
//!
//! use karpenter_actors::runtime::{
//!     ActorCtx, ActorError, ActorKit, GroupSpec, Handles, KitOptions, Mail, RestartPolicy,
//!     Supervised,
//! };
//!
//! /// One per claim (an illustration, not the real NodeClaimActor).
//! struct ClaimActor {
//!     launches: u32,
//! }
//!
//! /// Ports and shared handles, built once at startup.
//! struct ClaimDeps;
//!
//! impl Supervised for ClaimActor {
//!     const KIND: &'static str = "ClaimActor";
//!     // A NodeClaim sees a handful of events between reconciles; 32 absorbs a watch resync.
//!     const MAILBOX_CAPACITY: usize = 32;
//!     // Stops for good when its NodeClaim is gone; restarted only after a failure.
//!     const RESTART: RestartPolicy = RestartPolicy::Transient;
//!     type Deps = ClaimDeps;
//!
//!     fn build(_key: &str, _deps: &ClaimDeps) -> Result<Self, ActorError> {
//!         Ok(Self { launches: 0 })
//!     }
//! }
//!
//! /// A command: imperative name; `NAME` is its metric label.
//! struct Launch;
//! impl Mail for Launch {
//!     type Reply = u32;
//!     const NAME: &'static str = "Launch";
//! }
//!
//! impl Handles<Launch> for ClaimActor {
//!     async fn handle(&mut self, _: Launch, ctx: &mut ActorCtx<Self>) -> Result<u32, ActorError> {
//!         ctx.set_state("launching");
//!         self.launches += 1;
//!         Ok(self.launches)
//!     }
//! }
//!
//! actix::System::new().block_on(async {
//!     let mut metrics = prometheus_client::registry::Registry::default();
//!     let kit = ActorKit::new(&mut metrics, KitOptions::default());
//!     let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
//!     let claims = root
//!         .family::<ClaimActor>(GroupSpec::one_for_one("nodeclaims"), ClaimDeps)
//!         .unwrap();
//!     // An event (queued or an Overflow error), then a request (a reply or a SendError).
//!     claims.ensure("default-x7k2p").unwrap().try_send_event(Launch).unwrap();
//!     let launches = claims
//!         .request("default-x7k2p", Launch, Duration::from_secs(5))
//!         .await
//!         .unwrap();
//!     assert_eq!(launches, 2);
//!     assert_eq!(kit.snapshot().actors[0].state, "launching");
//!     root.stop().await;
//! });
//! ```
//!
//! # Per-object actors: reconcilers
//!
//! An actor that owns one object (a NodeClaim, a NodePool, an `EC2NodeClass`, ...) implements
//! [`Reconciler`] beside [`Supervised`]: how to read its object by key ([`Reconciler::fetch`])
//! and one step of its reconcile, returning an [`Action`] (requeue after a delay, or wait for
//! the next event) or an error with a category ([`ReconcileError`]). The kit handles
//! [`Reconcile`] (the daemon's "look again") and [`Requeue`] (its own timer) for it: a gone
//! object stops the actor, requeue timers are folded ([`Coalesce`]), failures back off
//! ([`Backoff`]) and are logged and returned as [`ActorError`]s. [`ReconcilePolicy`] holds a
//! family's timings; [`reconcile_object`] runs one reconcile for a family's own messages.
//!
//! A new family (say, one actor per Node checking its health) is a struct with its ports, the
//! two trait impls below, a [`Family`] started by the daemon, and `Reconcile` sent to it by key
//! when its object or a related one changes; everything about timers and failures is here.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//!
//! use karpenter_actors::runtime::{
//!     Action, ActorCtx, ActorError, ActorKit, Backoff, Cause, GroupSpec, KitOptions, Reconcile,
//!     ReconcileError, ReconcilePolicy, Reconciler, RestartPolicy, Supervised,
//! };
//!
//! /// The object (an illustration): how many replicas a widget wants.
//! struct Widget {
//!     replicas: u32,
//! }
//!
//! /// Where widgets are read from (the `ClusterView`, in the daemon).
//! #[derive(Default)]
//! struct Widgets(Mutex<HashMap<String, Arc<Widget>>>);
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("scaling widget {name}")]
//! struct ScaleFailed {
//!     name: String,
//! }
//!
//! impl ReconcileError for ScaleFailed {
//!     fn category(&self) -> &'static str {
//!         "scale_failed"
//!     }
//! }
//!
//! /// One per widget.
//! struct WidgetActor {
//!     widgets: Arc<Widgets>,
//!     replicas: u32,
//! }
//!
//! impl Supervised for WidgetActor {
//!     const KIND: &'static str = "WidgetActor";
//!     // One event per change of the widget; every one re-reads it, so 16 is plenty.
//!     const MAILBOX_CAPACITY: usize = 16;
//!     // Stops for good when its widget is gone.
//!     const RESTART: RestartPolicy = RestartPolicy::Transient;
//!     type Deps = Arc<Widgets>;
//!
//!     fn build(_key: &str, widgets: &Arc<Widgets>) -> Result<Self, ActorError> {
//!         Ok(Self { widgets: Arc::clone(widgets), replicas: 0 })
//!     }
//!
//!     async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
//!         ctx.start_reconciling();
//!         Ok(())
//!     }
//! }
//!
//! impl Reconciler for WidgetActor {
//!     type Object = Widget;
//!     type Error = ScaleFailed;
//!     // Retries after 2 s, 4 s, ... at most 30 s; the rest as every family.
//!     const POLICY: ReconcilePolicy = ReconcilePolicy {
//!         backoff: Backoff::exponential(Duration::from_secs(2), Duration::from_secs(30)),
//!         ..ReconcilePolicy::DEFAULT
//!     };
//!
//!     fn fetch(&self, key: &str) -> Option<Arc<Widget>> {
//!         self.widgets.0.lock().unwrap().get(key).cloned()
//!     }
//!
//!     async fn reconcile(
//!         &mut self,
//!         widget: Arc<Widget>,
//!         _cause: Cause,
//!         ctx: &mut ActorCtx<Self>,
//!     ) -> Result<Action, ScaleFailed> {
//!         self.replicas = widget.replicas;
//!         ctx.set_state("scaled");
//!         // Look again in five minutes even if nothing changes.
//!         Ok(Action::requeue(Duration::from_mins(5)))
//!     }
//! }
//!
//! actix::System::new().block_on(async {
//!     let mut metrics = prometheus_client::registry::Registry::default();
//!     let kit = ActorKit::new(&mut metrics, KitOptions::default());
//!     let root = kit.root(GroupSpec::one_for_one("root")).unwrap();
//!     let store = Arc::new(Widgets::default());
//!     store.0.lock().unwrap().insert("w1".into(), Arc::new(Widget { replicas: 3 }));
//!     let widgets = root
//!         .family::<WidgetActor>(GroupSpec::one_for_one("widgets"), Arc::clone(&store))
//!         .unwrap();
//!     let actor = widgets.ensure("w1").unwrap();
//!     let changed = Reconcile { cause: Cause::Changed };
//!     widgets.request("w1", changed, Duration::from_secs(5)).await.unwrap();
//!     assert_eq!(kit.snapshot().actor("WidgetActor", "w1").unwrap().state, "scaled");
//!     // The widget is deleted: the next reconcile stops the actor.
//!     store.0.lock().unwrap().remove("w1");
//!     let deleted = Reconcile { cause: Cause::Deleted };
//!     widgets.request("w1", deleted, Duration::from_secs(5)).await.unwrap();
//!     actor.terminated().await;
//!     assert!(widgets.get("w1").is_none());
//!     root.stop().await;
//! });
//! ```
//!
//! # Background work
//!
//! A handler never waits on slow work it can hand off: [`ActorCtx::spawn_task`] runs a future
//! beside the actor (it reports back with a message to [`ActorCtx::myself`]) and
//! [`Tasks::blocking`] runs a CPU-heavy closure on the blocking pool. Tasks are detached: a
//! restart does not cancel them.
//!
//! # What actix alone does not do, and the kit does
//!
//! - actix's `Supervisor` restarts only an actor that stops itself, and a panic in a handler is
//!   not supervised. Here every poll of a handler (and of `build`/`started`/`stopped`) runs under
//!   `catch_unwind`; a panic or fatal error becomes a `ChildStopped { reason }` report to the
//!   group, which restarts a fresh instance after a backoff or escalates ([`GroupRef`]).
//! - actix's `do_send` ignores the mailbox bound and drops silently when the actor is gone, and
//!   its bound lets each sender clone add one more message. Here the capacity is enforced by the
//!   kit per actor ([`Supervised::MAILBOX_CAPACITY`]), events beyond it are rejected and counted,
//!   requests wait for room within their timeout, and a stopped actor gives a clear error.
//!
//! # How often is too often: restart intensity
//!
//! A plain group (the root, the AWS group, groups of singletons) counts every restart of every
//! child in one window ([`GroupSpec::intensity`], 5 within a minute by default) and escalates
//! beyond it: a singleton that crash-loops means the controller is broken, and the process
//! exits for Kubernetes to restart it. A [`Family`] counts per member instead: a member over the
//! intensity is *parked* (state [`STATE_PARKED`], not restarted for [`DEFAULT_PARK_FIRST`],
//! doubling per consecutive parking up to [`DEFAULT_PARK_MAX`], then retried), while its
//! siblings, its family and the process go on, so one bad object cannot crash-loop the
//! controller. The family escalates only when more than [`family_escalation_limit`] distinct
//! members (5, or a fifth of them) fail within the window. A family started with
//! [`GroupRef::family_with_park_hook`] is told of every parking and retry ([`ParkNotice`]); the
//! daemon records a Kubernetes event on the object. Parked actors are counted in
//! `karpenter_actor_parked` and `karpenter_actor_parkings_total`.
//!
//! # What happens to messages when an actor fails
//!
//! - **The message in flight** (the one whose handler panicked or returned a fatal error) is
//!   lost: the handler's partial work stays wherever it went (state that must survive lives in
//!   Kubernetes or AWS), the instance is dropped, and a requester gets
//!   [`SendError::Panicked`] / [`SendError::Failed`] at once; it never waits for its timeout.
//! - **Queued messages** stay in the mailbox while the group backs off, and are handled by the
//!   fresh instance, in order. Senders may keep sending meanwhile (events until the mailbox is
//!   full; requests wait for room or time out). A message sent while the child restarts is
//!   therefore delivered afterwards, or fails with `Timeout` if the restart outlasts the
//!   caller's timeout.
//! - **If the group escalates**, its children stay suspended with their queues until the parent
//!   restarts the group (messages delivered to the fresh instances) or stops it (queued messages
//!   dropped; requesters get [`SendError::Stopped`]).
//! - **One-for-all**: when a sibling fails, the others are suspended at once; a handler running
//!   in a sibling is cancelled and its requester gets [`SendError::Interrupted`].
//! - **Timers** ([`ActorCtx::send_after`]) belong to the instance that set them: after a restart
//!   they are dropped (counted as `stale_timer`), so a fresh instance sets its own in `started`.
//! - **A parked member** keeps what was queued before its parking (delivered to the retried
//!   instance) and rejects new sends at once: requests get [`SendError::Parked`], events
//!   [`Overflow::Parked`], both counted as dropped with reason `parked`.
//!
//! # Time
//!
//! Handlers, timers, restart backoff and request timeouts all use tokio time. actix runs actors
//! on a tokio current-thread runtime (`actix::System`, `#[actix::test]`), so a test can call
//! `tokio::time::pause()` (dev-dependency feature `test-util`): the clock then stands still and
//! jumps to the next timer whenever every actor is idle, so backoffs of seconds take no wall
//! time and latencies in the registry are exact. The kit's own tests run this way.
//!
//! # Observability
//!
//! [`ActorKit::snapshot`] returns every live actor (kind, key, state label, start time,
//! restarts, messages handled by type, errors, panics, mailbox depth/capacity, overflows,
//! latency last/avg/max, last error, time to the retry of a parked actor) and group (with its
//! parked children); it serializes with serde. Family-level metrics
//! go to the Prometheus registry given to [`ActorKit::new`]; their names are listed in the
//! `metrics` module. Faults are injected from a seeded [`FaultPlan`] given in [`KitOptions`].

mod actor;
mod address;
mod cell;
mod control;
mod error;
mod family;
mod fault;
mod group;
mod kit;
mod metrics;
mod reconciler;
mod registry;
mod task;

pub use actor::{ActorCtx, ControllerId, Handles, Mail, RestartPolicy, Supervised};
pub use address::ActorRef;
pub use error::{ActorError, INJECTED_CATEGORY, Overflow, SendError, SpawnError, StopReason};
pub use family::Family;
pub use fault::{
    FaultAction, FaultActionName, FaultPlan, FaultPlanError, FaultPlanFile, FaultRule,
    FaultRuleFile, InjectedFault, MAX_INJECTION_LOG, STARTED_HOOK,
};
pub use group::{
    CHILD_SHUTDOWN_GRACE, DEFAULT_BACKOFF_FACTOR, DEFAULT_BACKOFF_MAX, DEFAULT_BACKOFF_MIN,
    DEFAULT_MAX_RESTARTS, DEFAULT_PARK_FIRST, DEFAULT_PARK_MAX, DEFAULT_RESTART_WINDOW,
    FAMILY_ESCALATION_MIN_KEYS, FAMILY_ESCALATION_PERCENT, GroupRef, GroupSpec, ParkChange,
    ParkHook, ParkNotice, ParkPolicy, RestartBackoff, RootGroup, Strategy, family_escalation_limit,
};
pub use kit::{ActorKit, KitOptions};
#[cfg(test)]
pub(crate) use metrics::in_controller;
pub use metrics::{ActorMetrics, DropReason, HANDLER_DURATION_BUCKETS_SECONDS, current_controller};
pub use reconciler::{
    Action, Backoff, Cause, Coalesce, Reconcile, ReconcileError, ReconcilePolicy, Reconciler,
    Requeue, Start, reconcile_object,
};
pub use registry::{
    ActorRegistry, ActorSnapshot, LatencySnapshot, MAX_LAST_ERROR_BYTES, RegistrySnapshot,
    STATE_PARKED, STATE_RUNNING, STATE_STARTING, STATE_STOPPING, STATE_SUSPENDED,
    SupervisorSnapshot,
};
pub use task::{TaskFailed, Tasks};

//! The Provisioner: finds nodes for pending pods (Karpenter's `provisioner` singleton with its
//! `provisioner.trigger.pod` and `provisioner.trigger.node` controllers, reference 2.1).
//!
//! Data flow:
//!
//! ```text
//! Daemon::observe --Triggered (pending pod, disrupted node, NodePool/NodeClass change)-->
//!   ProvisionerActor: batch window (idle 1 s / max 10 s) --BatchDue--> wait for sync -->
//!   run task (beside the actor, ActorCtx::spawn_task): CloudProvider::instance_types per NodePool;
//!     Tasks::blocking { snapshot from the ClusterView; solve } with a 1-minute cap;
//!     NodePool limits checked again; ClusterApi::create_nodeclaim in parallel;
//!     events (Nominated, FailedScheduling, NoCompatibleInstanceTypes) published in the background
//!   --RunFinished--> ProvisionerActor: keeps the decision per pod for Explain; re-triggers
//!                    itself 10 s later while pods are still pending
//! Explain {namespace, name} --> PodExplanation (rendered by explain::render)
//! ```
//!
//! The actor only batches, keeps decisions and answers queries; a run holds no actor state, so
//! `Explain` and `GetProvisionerStatus` are answered while a large solve runs. One run at a
//! time: a window that closes during a run waits for it. Before a run the actor waits until the
//! cluster view is synced, every NodeClaim it created is visible there and every other NodeClaim
//! has launched (Karpenter's `Cluster.Synced`), so a run never provisions twice for the same
//! pods. What must outlive a restart of the actor (the run in progress, the NodeClaims awaiting
//! visibility, the name generator, the event dedupe memory) lives in [`ProvisionerDeps`], which
//! the kit keeps across restarts; the decisions are diagnostics and start afresh.

mod batch;
pub(crate) mod build;
mod events;
pub mod explain;
mod launch;
mod metrics;
pub(crate) mod run;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use karpenter_config::Settings;
use serde::Serialize;
use tokio::time::Instant;

use crate::ports::clock::Clock;
use crate::ports::cloud_provider::CloudProvider;
use crate::ports::cluster::ClusterApi;
use crate::ports::cluster_view::ClusterView;
use crate::runtime::{ActorCtx, ActorError, ControllerId, Handles, Mail, Supervised};
use karpenter_core::domain::scheduling::{Options, Plan, Snapshot};

pub use build::{NotProvisionable, provisionable};
pub use events::{FAILED_SCHEDULING, MAX_EVENTS_PER_RUN, NO_COMPATIBLE_INSTANCE_TYPES, NOMINATED};
pub use explain::{Decision, PodDecision, PodExplanation, PodState, PoolVerdict, render};
pub use launch::NameGenerator;
pub use metrics::{CONTROLLER, DURATION_BUCKETS_SECONDS, PROVISIONED_REASON, ProvisionerMetrics};
pub use run::{CreateError, RunSummary};

/// The singleton's key.
pub const PROVISIONER_KEY: &str = "provisioner";
/// Karpenter's cap on one provisioning solve; a run that takes longer is abandoned and the next
/// batch tries again.
pub const SOLVE_TIMEOUT: Duration = Duration::from_mins(1);
/// How often a closed window re-checks whether the cluster view has caught up.
const SYNC_POLL: Duration = Duration::from_secs(1);
/// Karpenter's `provisioner.trigger.pod` requeues a pending pod every 10 s; the actor re-triggers
/// itself as often while any pod is still pending.
const POD_REQUEUE: Duration = Duration::from_secs(10);
/// How long a created NodeClaim may take to show up in the cluster view before runs stop
/// waiting for it (it may have been deleted before the watch saw it).
const CREATED_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);
/// A pod seen pending but never part of a run is forgotten after this (for the decision-time
/// metric).
const ACK_TTL: Duration = Duration::from_mins(10);
/// How long a run task waits for room in the actor's mailbox to report back.
const REPORT_TIMEOUT: Duration = Duration::from_mins(1);

/// The scheduler the runs call; [`karpenter_core::domain::scheduling::solve`] in production. Tests may
/// substitute one that blocks, to show the actor keeps answering while a solve runs.
pub type SolveFn = Arc<dyn Fn(&Snapshot, &Options) -> Plan + Send + Sync>;

/// The ports and settings the Provisioner uses.
#[derive(Debug, Clone)]
pub struct ProvisionerPorts {
    pub settings: Arc<Settings>,
    /// Decision timestamps.
    pub clock: Arc<dyn Clock>,
    pub cluster: Arc<dyn ClusterApi>,
    pub view: Arc<dyn ClusterView>,
    pub cloud: Arc<dyn CloudProvider>,
}

/// State that outlives a restart of the actor.
#[derive(Debug)]
struct Shared {
    running: AtomicBool,
    runs: AtomicU64,
    names: Mutex<NameGenerator>,
    events: Mutex<events::EventGate>,
    /// NodeClaims created, with when, until the cluster view shows them.
    created: Mutex<Vec<(String, Instant)>>,
    /// The pods' conversions, kept between runs (one run at a time holds them).
    conversions: Arc<Mutex<build::PodConversions>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the [`ProvisionerActor`] is built from; cheap to clone.
#[derive(Clone)]
pub struct ProvisionerDeps {
    pub settings: Arc<Settings>,
    pub clock: Arc<dyn Clock>,
    pub cluster: Arc<dyn ClusterApi>,
    pub view: Arc<dyn ClusterView>,
    pub cloud: Arc<dyn CloudProvider>,
    pub metrics: ProvisionerMetrics,
    solver: SolveFn,
    /// Existing nodes a run places pods on are nominated here, so disruption leaves them be.
    pub nominations: Arc<crate::nominations::Nominations>,
    /// Solve on the actor's thread instead of a blocking thread (see [`Self::solving_inline`]).
    inline: bool,
    shared: Arc<Shared>,
}

impl fmt::Debug for ProvisionerDeps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProvisionerDeps")
            .field("cloud", &self.cloud.name())
            .field("running", &self.shared.running.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl ProvisionerDeps {
    /// Deps with the real scheduler; NodeClaim names are seeded from the clock's start time, so
    /// a simulation on a manual clock names them the same way every run.
    #[must_use]
    pub fn new(ports: ProvisionerPorts, metrics: ProvisionerMetrics) -> Self {
        let seed = u64::try_from(ports.clock.now().as_nanosecond()).unwrap_or_default();
        Self {
            settings: ports.settings,
            clock: ports.clock,
            cluster: ports.cluster,
            view: ports.view,
            cloud: ports.cloud,
            metrics,
            solver: Arc::new(karpenter_core::domain::scheduling::solve),
            nominations: Arc::default(),
            inline: false,
            shared: Arc::new(Shared {
                running: AtomicBool::new(false),
                runs: AtomicU64::new(0),
                names: Mutex::new(NameGenerator::seeded(seed)),
                events: Mutex::new(events::EventGate::default()),
                created: Mutex::new(Vec::new()),
                conversions: Arc::default(),
            }),
        }
    }

    /// The pods' conversions kept between runs ([`build::build`]).
    pub(crate) fn conversions(&self) -> Arc<Mutex<build::PodConversions>> {
        Arc::clone(&self.shared.conversions)
    }

    /// Names NodeClaims from this seed instead.
    #[must_use]
    pub fn with_name_seed(self, seed: u64) -> Self {
        *lock(&self.shared.names) = NameGenerator::seeded(seed);
        self
    }

    /// Solves on the actor's thread, without the one-minute cap: a run then finishes at a
    /// point of simulated time that does not depend on how fast a thread pool is, so a
    /// simulation replays exactly. For `karpenter simulate`; the daemon keeps the off-thread
    /// solve so a long one never stalls the other actors.
    #[must_use]
    pub fn solving_inline(mut self) -> Self {
        self.inline = true;
        self
    }

    /// Nominates into this shared registry (the disruption actor reads it).
    #[must_use]
    pub fn with_nominations(mut self, nominations: Arc<crate::nominations::Nominations>) -> Self {
        self.nominations = nominations;
        self
    }

    /// Whether runs solve inline (simulations).
    #[must_use]
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// Solves with `solver` instead of the real scheduler.
    #[must_use]
    pub fn with_solver(mut self, solver: SolveFn) -> Self {
        self.solver = solver;
        self
    }

    fn next_name(&self, nodepool: &str) -> String {
        lock(&self.shared.names).next(nodepool)
    }

    fn event_gate(&self) -> MutexGuard<'_, events::EventGate> {
        lock(&self.shared.events)
    }

    fn remember_created(&self, name: &str) {
        lock(&self.shared.created).push((name.to_owned(), Instant::now()));
    }

    /// Why a run, or a disruption round, must not start yet, if it must not: Karpenter's
    /// `Cluster.Synced`, which both its provisioner and its disruption controller wait for, so
    /// neither decides before the NodeClaims the other just created are counted as capacity on
    /// its way.
    pub(crate) fn not_synced(&self, now: Instant) -> Option<String> {
        if !self.view.is_synced() {
            return Some("the cluster view has not synced".to_owned());
        }
        let mut created = lock(&self.shared.created);
        created.retain(|(name, at)| {
            self.view.nodeclaim(name).is_none()
                && now.duration_since(*at) < CREATED_VISIBILITY_TIMEOUT
        });
        if let Some((name, _)) = created.first() {
            return Some(format!("nodeclaim {name} is not in the cluster view yet"));
        }
        drop(created);
        self.view
            .nodeclaims()
            .iter()
            .find(|c| {
                c.metadata.deletion_timestamp.is_none()
                    && c.status
                        .as_ref()
                        .and_then(|s| s.provider_id.as_deref())
                        .is_none_or(str::is_empty)
            })
            .map(|c| {
                format!(
                    "nodeclaim {} has not launched yet",
                    c.metadata.name.as_deref().unwrap_or_default()
                )
            })
    }
}

/// What asked for a look at the pending pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerSource {
    /// A pod became or stayed pending (`provisioner.trigger.pod`).
    PodPending,
    /// A node was tainted `karpenter.sh/disrupted` (`provisioner.trigger.node`): its pods get
    /// capacity before it goes.
    NodeDisrupted,
    /// A NodePool or node class changed: pods refused before may fit now.
    NodePoolChanged,
    /// A NodeClaim went away: its pods need capacity again.
    NodeClaimDeleted,
    /// A watch re-listed.
    Relisted,
    /// The actor's own 10 s re-check while pods are pending.
    Requeue,
}

/// An event: something may need capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Triggered {
    pub source: TriggerSource,
    /// `(namespace, name)` of the pending pod, for `PodPending`.
    pub pod: Option<(String, String)>,
}

impl Triggered {
    /// A pending pod.
    #[must_use]
    pub fn pod(namespace: &str, name: &str) -> Self {
        Self {
            source: TriggerSource::PodPending,
            pod: Some((namespace.to_owned(), name.to_owned())),
        }
    }

    /// Any other source.
    #[must_use]
    pub fn by(source: TriggerSource) -> Self {
        Self { source, pod: None }
    }
}

impl Mail for Triggered {
    type Reply = ();
    const NAME: &'static str = "Triggered";
}

/// A query: why is this pod (still) pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explain {
    pub namespace: String,
    pub name: String,
}

impl Mail for Explain {
    type Reply = PodExplanation;
    const NAME: &'static str = "Explain";
}

/// A query: what the Provisioner is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetProvisionerStatus;

/// The answer to [`GetProvisionerStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionerStatus {
    /// Runs started since the daemon started.
    pub runs: u64,
    pub batch_open: bool,
    /// Triggers in the open window.
    pub batch_triggers: u64,
    pub running: bool,
    /// Pods with a recorded decision.
    pub decisions: usize,
    pub last_run: Option<RunSummary>,
}

impl Mail for GetProvisionerStatus {
    type Reply = ProvisionerStatus;
    const NAME: &'static str = "GetProvisionerStatus";
}

/// Timer: the batch window may have closed.
struct BatchDue;

impl Mail for BatchDue {
    type Reply = ();
    const NAME: &'static str = "BatchDue";
}

/// A run task reporting back.
struct RunFinished(Box<run::RunReport>);

impl Mail for RunFinished {
    type Reply = ();
    const NAME: &'static str = "RunFinished";
}

/// A pod's latest decision as the actor keeps it: the run's time and the decision shared with
/// the other pods of its NodeClaim or node; a [`PodDecision`] of its own only when asked.
#[derive(Debug, Clone)]
struct KeptDecision {
    decided_at: Arc<str>,
    run: u64,
    decision: Arc<Decision>,
}

impl KeptDecision {
    fn to_pod_decision(&self) -> PodDecision {
        PodDecision {
            decided_at: self.decided_at.to_string(),
            run: self.run,
            decision: Decision::clone(&self.decision),
        }
    }
}

/// The Provisioner singleton.
#[derive(Debug)]
pub struct ProvisionerActor {
    deps: ProvisionerDeps,
    batcher: batch::Batcher,
    /// The latest run's decision per pod (`namespace/name`); also the pods whose first
    /// decision has been measured.
    decisions: HashMap<Arc<str>, KeptDecision>,
    skipped_pools: Vec<PoolVerdict>,
    last_run: Option<RunSummary>,
    /// When each pending pod was first seen, until its first decision.
    acks: HashMap<Arc<str>, Instant>,
    requeue_armed: bool,
}

impl Supervised for ProvisionerActor {
    const KIND: &'static str = "ProvisionerActor";
    const CONTROLLER: ControllerId = ControllerId::singleton("provisioner");
    // One trigger per pending pod: a Deployment scaled by thousands queues thousands at once.
    // Overflowing triggers are harmless (the window is open and a run reads every pending pod
    // from the view) but they lose the pod's decision-time measurement, so keep it generous.
    const MAILBOX_CAPACITY: usize = 8192;
    type Deps = ProvisionerDeps;

    fn build(_key: &str, deps: &ProvisionerDeps) -> Result<Self, ActorError> {
        Ok(Self {
            batcher: batch::Batcher::new(
                deps.settings.batch_idle_duration,
                deps.settings.batch_max_duration,
            ),
            deps: deps.clone(),
            decisions: HashMap::new(),
            skipped_pools: Vec::new(),
            last_run: None,
            acks: HashMap::new(),
            requeue_armed: false,
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.set_state("idle");
        // A fresh start (or restart) looks once: pods may have been pending all along.
        self.open_window(ctx);
        Ok(())
    }
}

impl ProvisionerActor {
    fn open_window(&mut self, ctx: &ActorCtx<Self>) {
        if self.batcher.trigger(Instant::now()) {
            ctx.set_state("batching");
            ctx.send_after(self.deps.settings.batch_idle_duration, BatchDue);
        }
    }

    fn running(&self) -> bool {
        self.deps.shared.running.load(Ordering::Acquire)
    }

    /// Starts a run if the window has closed, no run is going on and the view has caught up;
    /// otherwise makes sure something looks again.
    fn try_start(&mut self, ctx: &ActorCtx<Self>) {
        let Some(due) = self.batcher.due_at() else {
            if !self.running() {
                ctx.set_state("idle");
            }
            return;
        };
        let now = Instant::now();
        if now < due {
            ctx.send_after(due - now, BatchDue);
            return;
        }
        if self.running() {
            // RunFinished looks again; the poll covers a report that never arrives.
            ctx.send_after(SYNC_POLL, BatchDue);
            return;
        }
        if let Some(why) = self.deps.not_synced(now) {
            tracing::debug!(%why, "provisioning waits for the cluster view");
            ctx.set_state("waiting_for_sync");
            ctx.send_after(SYNC_POLL, BatchDue);
            return;
        }
        self.batcher.close();
        let run = self.deps.shared.runs.fetch_add(1, Ordering::AcqRel) + 1;
        self.deps.shared.running.store(true, Ordering::Release);
        ctx.set_state("solving");
        let deps = self.deps.clone();
        let me = ctx.myself().clone();
        let tasks = ctx.tasks();
        ctx.spawn_task(async move {
            let report = run::run(&deps, run, tasks).await;
            deps.shared.running.store(false, Ordering::Release);
            if let Err(error) = me
                .request(RunFinished(Box::new(report)), REPORT_TIMEOUT)
                .await
            {
                tracing::error!(
                    error = crate::logs::err(&error),
                    run,
                    "the provisioner did not take its run report"
                );
            }
        });
    }

    fn finish(&mut self, report: run::RunReport, ctx: &ActorCtx<Self>) {
        let now = Instant::now();
        let run = report.summary.run;
        let pending = report.summary.pods;
        if report.summary.error.is_none() {
            // This run's decisions replace the last run's in the same table: a scale-up's runs
            // each decide tens of thousands of pods, and a new table filled beside the old one
            // held both at once.
            let decisions = &mut self.decisions;
            decisions.clear();
            decisions.reserve(report.decisions.len());
            let decided_at: Arc<str> = report.decided_at.into();
            for (key, decision) in &report.decisions {
                if let Some(seen) = self.acks.remove(&**key) {
                    self.deps.metrics.observe_decision(now.duration_since(seen));
                }
                decisions.insert(
                    Arc::clone(key),
                    KeptDecision {
                        decided_at: Arc::clone(&decided_at),
                        run,
                        decision: Arc::clone(decision),
                    },
                );
            }
            let placed = report.decisions.iter().filter(|(_, decision)| {
                matches!(
                    **decision,
                    Decision::Nominated { .. } | Decision::Provisioned { .. }
                )
            });
            self.deps
                .metrics
                .pod_times
                .schedulable_all(placed.map(|(key, _)| &**key), self.deps.clock.now());
            if crate::table_room::mostly_empty(self.decisions.capacity(), self.decisions.len()) {
                self.decisions.shrink_to_fit();
            }
            self.skipped_pools = report.skipped_pools;
        }
        self.acks
            .retain(|_, seen| now.duration_since(*seen) < ACK_TTL);
        let retry = pending > 0 || report.summary.error.is_some();
        self.last_run = Some(report.summary);
        if retry && !self.requeue_armed {
            self.requeue_armed = true;
            ctx.send_after(POD_REQUEUE, Triggered::by(TriggerSource::Requeue));
        }
        self.try_start(ctx);
    }

    fn explain(&self, namespace: &str, name: &str) -> PodExplanation {
        let key = format!("{namespace}/{name}");
        let state = match self.deps.view.pod(namespace, name) {
            None => PodState::NotFound,
            Some(pod) => match provisionable(&pod) {
                Ok(()) => PodState::Pending,
                Err(NotProvisionable::Bound { node }) => PodState::Bound { node },
                Err(other) => PodState::NotProvisionable {
                    reason: other.to_string(),
                },
            },
        };
        let decision = self
            .decisions
            .get(key.as_str())
            .map(KeptDecision::to_pod_decision);
        PodExplanation {
            pod: key,
            state,
            skipped_node_pools: if decision.is_some() {
                self.skipped_pools.clone()
            } else {
                Vec::new()
            },
            decision,
            provisioning_in_progress: self.batcher.is_open() || self.running(),
        }
    }
}

impl Handles<Triggered> for ProvisionerActor {
    async fn handle(
        &mut self,
        message: Triggered,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<(), ActorError> {
        if message.source == TriggerSource::Requeue {
            self.requeue_armed = false;
        }
        if let Some((namespace, name)) = &message.pod {
            let key = format!("{namespace}/{name}");
            if !self.decisions.contains_key(key.as_str()) {
                // One key for the pod's ack and its scheduling times, made shared only the
                // first time (a pending pod triggers on each of its changes).
                let key: Arc<str> = match self.acks.get_key_value(key.as_str()) {
                    Some((held, _)) => Arc::clone(held),
                    None => key.into(),
                };
                self.deps.metrics.pod_times.ack(&key, self.deps.clock.now());
                self.acks.entry(key).or_insert_with(Instant::now);
            }
        }
        self.open_window(ctx);
        Ok(())
    }
}

impl Handles<BatchDue> for ProvisionerActor {
    async fn handle(&mut self, _: BatchDue, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        self.try_start(ctx);
        Ok(())
    }
}

impl Handles<RunFinished> for ProvisionerActor {
    async fn handle(
        &mut self,
        RunFinished(report): RunFinished,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<(), ActorError> {
        self.finish(*report, ctx);
        Ok(())
    }
}

impl Handles<Explain> for ProvisionerActor {
    async fn handle(
        &mut self,
        message: Explain,
        _: &mut ActorCtx<Self>,
    ) -> Result<PodExplanation, ActorError> {
        Ok(self.explain(&message.namespace, &message.name))
    }
}

impl Handles<GetProvisionerStatus> for ProvisionerActor {
    async fn handle(
        &mut self,
        _: GetProvisionerStatus,
        _: &mut ActorCtx<Self>,
    ) -> Result<ProvisionerStatus, ActorError> {
        Ok(ProvisionerStatus {
            runs: self.deps.shared.runs.load(Ordering::Acquire),
            batch_open: self.batcher.is_open(),
            batch_triggers: self.batcher.triggers(),
            running: self.running(),
            decisions: self.decisions.len(),
            last_run: self.last_run.clone(),
        })
    }
}

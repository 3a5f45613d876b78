//! The `DisruptionActor`: Karpenter's `disruption` and `disruption.queue` singletons in one
//! owner (core `pkg/controllers/disruption`, reference 2.1). It removes or replaces nodes to
//! save money, within the NodePools' budgets.
//!
//! Data flow:
//!
//! ```text
//! Poll (every 10 s; sooner after a NodeClaim, Node or NodePool change, at most every 2 s)
//!   --> wait for the view to sync, to show the NodeClaims the create path made (a Drift
//!       command's replacements among them) and to see every NodeClaim launched (the
//!       Provisioner's check, Karpenter's `Cluster.Synced`); untaint nodes a lost command left
//!       marked
//!   --> instance types per NodePool (CloudProvider) --> input::InputReuse (the Provisioner's
//!       snapshot + state nodes + PDBs + queue + nominations; the last round's input with the
//!       queue, nominations and time refreshed while the view and the pools did not change)
//!   --> karpenter_core::domain::disruption::decide (off the actor thread; inline in
//!       simulations) --> metrics, events, last decision (for explain)
//!   --> a command: Drift executes at once; the others wait 15 s (ValidateDue), are checked
//!       again on a fresh input (validate) and executed or abandoned
//! execute: taint candidates + DisruptionReason --> create replacements (the Provisioner's
//!   create path: limits, names, remembered so provisioning waits for them) --> nominate the
//!   destination nodes --> queue
//! QueueTick (every 1 s while the queue holds commands): replacements Initialized --> delete
//!   the candidates' NodeClaims (their actors drain and terminate them); a replacement deleted,
//!   or 10 minutes gone --> untaint, clear the condition, count the failure
//! ```
//!
//! The queue and the history survive a restart of the actor (they live in [`DisruptionDeps`]);
//! after a restart of the process the first round removes the taints of commands that were in
//! flight, as Karpenter's does.

mod events;
mod execute;
pub mod explain;
mod input;
mod metrics;
pub mod queue;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant as WallInstant};

use serde::Serialize;
use tokio::time::Instant;

use crate::deps::Deps;
use crate::logs;
use crate::nominations::{Nominations, nomination_window};
use crate::ports::cluster::ClusterError;
use crate::provisioner::ProvisionerDeps;
use crate::provisioner::build::UsablePool;
use crate::runtime::{
    ActorCtx, ActorError, ControllerId, Handles, Mail, RestartPolicy, Supervised,
};
use karpenter_core::apis::NodePool;
use karpenter_core::apis::conditions::nodeclaim as cond;
use karpenter_core::domain::disruption::{
    Command, CommandCandidate, Decision, DisruptionInput, DisruptionOptions, Memos, Method,
    MethodOutcome, Validation, decide_observed, validate,
};
use karpenter_core::domain::instance_type::InstanceType;

pub use events::{
    DISRUPTION_BLOCKED, DISRUPTION_LAUNCHING, DISRUPTION_TERMINATING, DISRUPTION_WAITING_READINESS,
    UNCONSOLIDATABLE,
};
pub use explain::{NodeExplanation, NodeVerdict};
pub use metrics::DisruptionMetrics;
pub use queue::{CommandState, DisruptionRecord};

use self::events::{Involved, Pending};
use self::queue::{Queue, Queued, Replacement, ReplacementSeen, Step};

/// The singleton's key.
pub const DISRUPTION_KEY: &str = "disruption";
/// Karpenter's polling period of the disruption controller.
pub const POLL_PERIOD: Duration = Duration::from_secs(10);
/// A NodeClaim, Node or NodePool change brings the next round forward, but never closer than
/// this to the last one (a scale-up changes objects many times a second).
pub const CHANGE_DEBOUNCE: Duration = Duration::from_secs(2);
/// Karpenter's `consolidationTTL`: a command is checked again this long after it was decided.
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);
/// The queue looks at its commands this often (Karpenter's base delay).
pub const QUEUE_POLL: Duration = Duration::from_secs(1);
/// While the view has not synced, look again this soon.
const SYNC_POLL: Duration = Duration::from_secs(1);
/// Why a command whose validation a restart of the actor lost was abandoned.
const LOST_VALIDATION: &str = "the disruption actor restarted before validating it";
/// Karpenter refreshes its consolidation state every 5 minutes even without changes, so a
/// memo of "nothing to consolidate" never outlives this.
const MEMO_TTL: Duration = Duration::from_mins(5);

/// A failed step of the disruption actor.
#[derive(Debug, thiserror::Error)]
pub enum DisruptionError {
    #[error("{what} {name}")]
    Write {
        what: &'static str,
        name: String,
        #[source]
        source: ClusterError,
    },
    #[error("launching replacement nodeclaims")]
    Replacements(#[source] crate::provisioner::CreateError),
    #[error("the disruption round did not finish")]
    Task(#[source] crate::runtime::TaskFailed),
    #[error(transparent)]
    Decision(#[from] karpenter_core::domain::disruption::DisruptionError),
}

impl DisruptionError {
    fn write(what: &'static str, name: &str, source: ClusterError) -> Self {
        Self::Write {
            what,
            name: name.to_owned(),
            source,
        }
    }

    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Write { source, .. } => source.category(),
            Self::Replacements(error) => error.category(),
            Self::Task(error) => error.category(),
            Self::Decision(error) => error.category(),
        }
    }
}

/// State that outlives a restart of the actor.
#[derive(Debug, Default)]
struct Shared {
    queue: Mutex<Queue>,
    history: Mutex<Vec<DisruptionRecord>>,
    events: Mutex<events::EventMemory>,
    last: Mutex<Option<LastRound>>,
    next_id: AtomicU64,
    rounds: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn lock_events(&self) -> MutexGuard<'_, events::EventMemory> {
        lock(&self.events)
    }
}

/// The last round's decision, for `karpenter explain node`.
#[derive(Debug, Clone)]
pub struct LastRound {
    /// RFC 3339.
    pub at: String,
    pub decision: Arc<Decision>,
    /// The state nodes the round saw, by name.
    pub nodes: Arc<HashMap<String, SeenNode>>,
}

/// A state node a round saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenNode {
    pub node_claim: Option<String>,
    pub node_pool: Option<String>,
}

/// What the [`DisruptionActor`] is built from; cheap to clone.
#[derive(Clone)]
pub struct DisruptionDeps {
    pub deps: Deps,
    /// The Provisioner's create path (names, limits, the NodeClaims it waits for).
    pub provisioner: ProvisionerDeps,
    pub nominations: Arc<Nominations>,
    pub metrics: DisruptionMetrics,
    /// The round's knobs (feature gates are read from the settings at build time).
    pub options: DisruptionOptions,
    /// Decide on the actor's thread, so a simulation replays exactly.
    pub inline: bool,
    /// Raised with structural changes (see [`ClusterChanged`]).
    pub changes: ChangeSignal,
    shared: Arc<Shared>,
}

impl fmt::Debug for DisruptionDeps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DisruptionDeps")
            .field("options", &self.options)
            .field("inline", &self.inline)
            .finish_non_exhaustive()
    }
}

impl DisruptionDeps {
    /// Deps over the daemon's ports, sharing the Provisioner's create path and nominations.
    #[must_use]
    pub fn new(deps: Deps, provisioner: ProvisionerDeps, metrics: DisruptionMetrics) -> Self {
        let gates = deps.settings.feature_gates;
        let options = DisruptionOptions {
            spot_to_spot: gates.spot_to_spot_consolidation,
            reserved_capacity: gates.reserved_capacity,
            preference_policy: deps.settings.preference_policy,
            repack: deps.settings.consolidation_repack,
            ..DisruptionOptions::default()
        };
        Self {
            inline: provisioner.is_inline(),
            nominations: Arc::clone(&provisioner.nominations),
            deps,
            provisioner,
            metrics,
            options,
            changes: ChangeSignal::default(),
            shared: Arc::default(),
        }
    }

    /// The commands decided so far (bounded), oldest first.
    #[must_use]
    pub fn history(&self) -> Vec<DisruptionRecord> {
        lock(&self.shared.history).clone()
    }

    fn record(&self, record: DisruptionRecord) {
        let mut history = lock(&self.shared.history);
        if history.len() >= queue::HISTORY_LIMIT {
            history.remove(0);
        }
        history.push(record);
    }

    /// Records the candidates a validation kept (Emptiness may keep fewer than it decided).
    fn set_candidates(&self, id: u64, command: &Command) {
        let mut history = lock(&self.shared.history);
        if let Some(record) = history.iter_mut().rev().find(|r| r.id == id) {
            record.candidates.clone_from(&command.candidates);
            if record.price_before.is_some() {
                record.price_before = record.candidates.iter().map(|c| c.price).sum();
            }
        }
    }

    /// Abandons the records of validations that were in flight in a previous instance of the
    /// actor: their timers died with it and their commands were never executed.
    fn abandon_lost_validations(&self) {
        let mut history = lock(&self.shared.history);
        for record in history
            .iter_mut()
            .filter(|r| r.state == CommandState::Validating)
        {
            record.state = CommandState::Abandoned(LOST_VALIDATION.to_owned());
        }
    }

    fn set_state(&self, id: u64, state: CommandState, replacements: Option<&[String]>) {
        let mut history = lock(&self.shared.history);
        if let Some(record) = history.iter_mut().rev().find(|r| r.id == id) {
            record.state = state;
            if let Some(names) = replacements {
                record.replacements = names.to_vec();
            }
        }
    }
}

/// Timer: time for a round.
struct Poll;

impl Mail for Poll {
    type Reply = ();
    const NAME: &'static str = "Poll";
}

/// Timer: a command's 15 s are up.
struct ValidateDue;

impl Mail for ValidateDue {
    type Reply = ();
    const NAME: &'static str = "ValidateDue";
}

/// Timer: look at the queue.
struct QueueTick;

impl Mail for QueueTick {
    type Reply = ();
    const NAME: &'static str = "QueueTick";
}

/// An event (sent as a nudge): the cluster changed. When [`ChangeSignal::structural`] was raised
/// (a NodeClaim, Node, NodePool or PDB changed) the next round comes sooner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterChanged;

/// Raised by the daemon's routing beside a [`ClusterChanged`] nudge; a nudge carries no data,
/// so whether any of the changes it stands for was structural travels here.
#[derive(Debug, Clone, Default)]
pub struct ChangeSignal(Arc<AtomicBool>);

impl ChangeSignal {
    /// Notes a structural change.
    pub fn structural(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::AcqRel)
    }
}

impl Mail for ClusterChanged {
    type Reply = ();
    const NAME: &'static str = "ClusterChanged";
}

/// A query: what disruption is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetDisruptionStatus;

/// The answer to [`GetDisruptionStatus`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionStatus {
    pub rounds: u64,
    /// Commands in the orchestration queue.
    pub queued: usize,
    /// A command waits for its validation.
    pub validating: bool,
    /// Every command decided (bounded history), oldest first.
    pub commands: Vec<DisruptionRecord>,
}

impl Mail for GetDisruptionStatus {
    type Reply = DisruptionStatus;
    const NAME: &'static str = "GetDisruptionStatus";
}

/// A query: why is this node (not) being disrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainNode {
    pub name: String,
}

impl Mail for ExplainNode {
    type Reply = NodeExplanation;
    const NAME: &'static str = "ExplainNode";
}

/// A command waiting for its validation.
#[derive(Debug)]
struct Validating {
    command: Command,
    id: u64,
    types_by_pool: HashMap<String, Vec<Arc<InstanceType>>>,
}

/// The disruption singleton.
#[derive(Debug)]
pub struct DisruptionActor {
    deps: DisruptionDeps,
    next_round: Option<Instant>,
    last_round: Option<Instant>,
    validating: Option<Validating>,
    queue_armed: bool,
    memos: Memos,
    memos_since: Option<Instant>,
    /// The consolidation state the memos were set in ([`input::consolidation_state`]).
    memo_state: Option<u64>,
    single_node_unseen_pools: Vec<String>,
    /// The last input, reused while the view does not change.
    inputs: input::InputReuse,
}

impl Supervised for DisruptionActor {
    const KIND: &'static str = "DisruptionActor";
    const CONTROLLER: ControllerId = ControllerId::singleton("disruption");
    // Change notices (one per watched change) and a few timers; an overflowing notice only
    // delays a round to the next poll.
    const MAILBOX_CAPACITY: usize = 1024;
    const RESTART: RestartPolicy = RestartPolicy::Permanent;
    type Deps = DisruptionDeps;

    fn build(_key: &str, deps: &DisruptionDeps) -> Result<Self, ActorError> {
        Ok(Self {
            deps: deps.clone(),
            next_round: None,
            last_round: None,
            validating: None,
            queue_armed: false,
            memos: Memos::default(),
            memos_since: None,
            memo_state: None,
            single_node_unseen_pools: Vec::new(),
            inputs: input::InputReuse::new(deps.provisioner.conversions()),
        })
    }

    async fn started(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        ctx.set_state("idle");
        // A validation in flight was lost with the previous instance; its command was never
        // executed, so nothing is left marked, and its record must not stay `Validating`.
        // Queued commands go on.
        self.deps.abandon_lost_validations();
        self.schedule_round(ctx, POLL_PERIOD);
        if !lock(&self.deps.shared.queue).commands.is_empty() {
            self.arm_queue(ctx);
        }
        Ok(())
    }
}

/// The instance types of every managed NodePool, and the pools whose listing failed.
async fn pools_with_types(deps: &DisruptionDeps) -> (Vec<UsablePool>, Vec<Arc<NodePool>>) {
    let mut nodepools: Vec<Arc<NodePool>> = deps
        .deps
        .view
        .nodepools()
        .into_iter()
        .filter(|p| input::is_managed(p))
        .collect();
    nodepools.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut usable = Vec::new();
    let mut without = Vec::new();
    for nodepool in nodepools {
        match deps.deps.cloud.instance_types(&nodepool).await {
            Ok(types) if !types.is_empty() => usable.push(UsablePool {
                nodepool,
                instance_types: types,
            }),
            Ok(_) => without.push(nodepool),
            Err(error) => {
                let name = nodepool.metadata.name.as_deref().unwrap_or_default();
                // Karpenter logs this at ERROR every round: the pool's nodes cannot be
                // disrupted. A pool without NodeClaims loses nothing by it (its class is being
                // resolved, say, right after startup), so that case is said at debug.
                if deps.deps.view.nodeclaims_of_nodepool(name).is_empty() {
                    tracing::debug!(
                        error = logs::err(&error),
                        "failed listing instance types for {name}"
                    );
                } else {
                    tracing::error!(
                        error = logs::err(&error),
                        "failed listing instance types for {name}"
                    );
                }
                without.push(nodepool);
            }
        }
    }
    (usable, without)
}

fn types_by_pool(pools: &[UsablePool]) -> HashMap<String, Vec<Arc<InstanceType>>> {
    pools
        .iter()
        .map(|p| {
            (
                p.nodepool.metadata.name.clone().unwrap_or_default(),
                p.instance_types.to_vec(),
            )
        })
        .collect()
}

impl DisruptionActor {
    /// Arms a round `delay` from now unless one is due sooner.
    fn schedule_round(&mut self, ctx: &ActorCtx<Self>, delay: Duration) {
        let at = Instant::now() + delay;
        if self.next_round.is_some_and(|t| t <= at) {
            return;
        }
        self.next_round = Some(at);
        ctx.send_after(delay, Poll);
    }

    fn arm_queue(&mut self, ctx: &ActorCtx<Self>) {
        if !self.queue_armed {
            self.queue_armed = true;
            ctx.send_after(QUEUE_POLL, QueueTick);
        }
    }

    /// The memos that still hold for a cluster in consolidation state `state`: Karpenter's
    /// `IsConsolidated`, which a new pod binding, a pod deletion, a node or NodeClaim coming or
    /// going, or a node's initialization or deletion mark invalidates, and which lapses after
    /// [`MEMO_TTL`] anyway.
    fn memos_for(&mut self, state: u64, now: Instant) -> Memos {
        let lapsed = self
            .memos_since
            .is_some_and(|since| now.duration_since(since) >= MEMO_TTL);
        if lapsed || self.memo_state != Some(state) {
            self.forget_memos();
            self.memo_state = Some(state);
        }
        self.memos.clone()
    }

    fn forget_memos(&mut self) {
        self.memos = Memos::default();
        self.memos_since = None;
        self.memo_state = None;
    }

    /// Reads the input for a round (or a validation) at this instant.
    async fn read_input(&mut self) -> (DisruptionInput, HashMap<String, Vec<Arc<InstanceType>>>) {
        let (pools, without) = pools_with_types(&self.deps).await;
        let queued = lock(&self.deps.shared.queue).candidates();
        let context = input::RoundContext {
            now: self.deps.deps.clock.now(),
            pools: &pools,
            pools_without_types: &without,
            queued,
            nominations: &self.deps.nominations,
            memos: Memos::default(),
            single_node_unseen_pools: self.single_node_unseen_pools.clone(),
            options: self.deps.options.clone(),
        };
        let input = self.inputs.input(self.deps.deps.view.as_ref(), context);
        (input, types_by_pool(&pools))
    }

    /// Runs `decide` off the actor thread (inline in simulations), timing each method.
    async fn decide(
        &self,
        ctx: &ActorCtx<Self>,
        input: DisruptionInput,
    ) -> Result<(Decision, Vec<(Method, Duration)>, DisruptionInput), DisruptionError> {
        let work = move || {
            let mut timings = Vec::new();
            let mut started = WallInstant::now();
            let decision = decide_observed(&input, &mut |method| {
                let now = WallInstant::now();
                timings.push((method, now.duration_since(started)));
                started = now;
            });
            (decision, timings, input)
        };
        if self.deps.inline {
            Ok(work())
        } else {
            ctx.tasks()
                .blocking(work)
                .await
                .map_err(DisruptionError::Task)
        }
    }

    /// Removes taints and `DisruptionReason` conditions that no command in the queue accounts
    /// for (left by a restart or a failed step), from nodes that are not being deleted.
    async fn clean_stale_marks(&self) -> Result<(), DisruptionError> {
        let (queued, queued_claims) = {
            let queue = lock(&self.deps.shared.queue);
            (queue.candidates(), queue.nodeclaims())
        };
        let view = &self.deps.deps.view;
        for node in view.nodes() {
            let Some(name) = node.metadata.name.as_deref() else {
                continue;
            };
            if queued.contains(name)
                || node.metadata.deletion_timestamp.is_some()
                || !node.is_disrupted()
            {
                continue;
            }
            let claim = node
                .spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(|id| view.nodeclaim_by_provider_id(id));
            if claim
                .as_ref()
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
            {
                continue;
            }
            let claim_name = claim
                .and_then(|c| c.metadata.name.clone())
                .unwrap_or_default();
            self.deps.unmark(name, &claim_name).await?;
        }
        for claim in view.nodeclaims() {
            let Some(name) = claim.metadata.name.as_deref() else {
                continue;
            };
            let marked = claim.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == cond::DISRUPTION_REASON)
            });
            if marked
                && claim.metadata.deletion_timestamp.is_none()
                && !queued_claims.contains(name)
            {
                self.deps.unmark("", name).await?;
            }
        }
        Ok(())
    }

    async fn round(&mut self, ctx: &mut ActorCtx<Self>) -> Result<(), DisruptionError> {
        self.next_round = None;
        if self.validating.is_some() {
            // The validation's own timer runs the next round.
            return Ok(());
        }
        // Karpenter's `Cluster.Synced`: a command decided before the replacements of the
        // commands before it are in the view (and launched) would not count them, and would
        // launch capacity again for the pods of those commands' candidates.
        if let Some(why) = self.deps.provisioner.not_synced(Instant::now()) {
            tracing::debug!(%why, "disruption waits for the cluster view");
            ctx.set_state("waiting_for_sync");
            self.schedule_round(ctx, SYNC_POLL);
            return Ok(());
        }
        self.last_round = Some(Instant::now());
        self.deps.shared.rounds.fetch_add(1, Ordering::Relaxed);
        if let Err(error) = self.clean_stale_marks().await {
            self.schedule_round(ctx, POLL_PERIOD);
            return Err(error);
        }
        ctx.set_state("deciding");
        let (mut input, types) = self.read_input().await;
        input.memos = self.memos_for(input::consolidation_state(&input), Instant::now());
        let now = input.now;
        let nodes: HashMap<String, SeenNode> = input
            .nodes
            .iter()
            .map(|n| {
                (
                    n.name.clone(),
                    SeenNode {
                        node_claim: n.node_claim.as_ref().map(|c| c.name.clone()),
                        node_pool: n.node_pool().map(str::to_owned),
                    },
                )
            })
            .collect();
        let (decision, timings) = match self.decide(ctx, input).await {
            Ok((decision, timings, input)) => {
                self.inputs.keep(input);
                (decision, timings)
            }
            Err(error) => {
                self.schedule_round(ctx, POLL_PERIOD);
                return Err(error);
            }
        };
        self.observe(&decision, &timings, ctx);
        let decision = Arc::new(decision);
        *lock(&self.deps.shared.last) = Some(LastRound {
            at: now.to_string(),
            decision: Arc::clone(&decision),
            nodes: Arc::new(nodes),
        });
        ctx.set_state("idle");
        if let Some(error) = &decision.error {
            tracing::error!(error = %error, "failed computing consolidation");
            self.schedule_round(ctx, POLL_PERIOD);
            return Ok(());
        }
        let Some(command) = decision.command.clone() else {
            self.schedule_round(ctx, POLL_PERIOD);
            return Ok(());
        };
        let id = self.deps.shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.deps.record(record_of(&command, id, &now.to_string()));
        if command.method == Method::Drift {
            self.execute(ctx, &command, id, &types).await;
            self.schedule_round(ctx, Duration::ZERO);
        } else {
            tracing::debug!(
                "command-id" = id,
                method = queue::method_name(command.method),
                candidates = ?command.candidate_names(),
                "waiting to validate a disruption command"
            );
            ctx.set_state("validating");
            self.validating = Some(Validating {
                command,
                id,
                types_by_pool: types,
            });
            ctx.send_after(VALIDATION_DELAY, ValidateDue);
        }
        Ok(())
    }

    /// Metrics, memos, events and logs of a decided round.
    fn observe(
        &mut self,
        decision: &Decision,
        timings: &[(Method, Duration)],
        ctx: &ActorCtx<Self>,
    ) {
        for (method, took) in timings {
            self.deps.metrics.observe_evaluation(*method, *took);
        }
        let mut pending: Vec<Pending> = Vec::new();
        for report in &decision.methods {
            tracing::debug!(
                method = queue::method_name(report.method),
                eligible = report.eligible,
                outcome = ?report.outcome,
                timed_out = report.timed_out,
                simulations = report.simulations,
                "disruption method evaluated"
            );
            self.deps
                .metrics
                .set_eligible(report.method, report.eligible);
            if report.timed_out {
                self.deps.metrics.count_timeout(report.method);
            }
            for budget in &report.budgets {
                self.deps
                    .metrics
                    .set_allowed(&budget.node_pool, report.method, budget.allowed);
                if budget.blocked {
                    let uid = self
                        .deps
                        .deps
                        .view
                        .nodepool(&budget.node_pool)
                        .and_then(|p| p.metadata.uid.clone());
                    pending.push(events::nodepool_blocked(
                        Involved::nodepool(&budget.node_pool, uid),
                        budget.blocked_message(),
                        budget.reason.as_str(),
                    ));
                }
            }
            for event in &report.events {
                let (node, claim) = self.deps.involved(&event.node, event.node_claim.as_deref());
                pending.extend(match event.reason {
                    karpenter_core::domain::disruption::NodeEventReason::Unconsolidatable => {
                        events::unconsolidatable(node, claim, &event.message)
                    }
                    karpenter_core::domain::disruption::NodeEventReason::DisruptionBlocked => {
                        events::blocked(node, claim, &event.message)
                    }
                });
            }
            for (node, error) in &report.errors {
                tracing::error!(Node = %node, error = %error, "failed computing consolidation");
            }
            if !report.judged.is_empty() {
                self.memos
                    .single_node_judged
                    .extend(report.judged.iter().cloned());
                self.memos_since.get_or_insert_with(Instant::now);
            }
            if let MethodOutcome::Nothing {
                mark_consolidated: true,
            } = report.outcome
            {
                match report.method {
                    Method::Emptiness => self.memos.emptiness = true,
                    Method::MultiNode => self.memos.multi_node = true,
                    Method::SingleNode => self.memos.single_node = true,
                    Method::Repack => self.memos.repack = true,
                    Method::Drift => {}
                }
                self.memos_since.get_or_insert_with(Instant::now);
            }
        }
        for blocked in &decision.blocked {
            if let Some(message) = blocked.blocker.message() {
                let (node, claim) = if blocked.blocker.node_claim_only() {
                    (
                        None,
                        self.deps
                            .involved(&blocked.node, blocked.node_claim.as_deref())
                            .1,
                    )
                } else {
                    self.deps
                        .involved(&blocked.node, blocked.node_claim.as_deref())
                };
                pending.extend(events::blocked(node, claim, &message));
            }
        }
        for (pool, errors) in &decision.budget_errors {
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            tracing::error!(
                NodePool = %pool,
                error = %errors.join("; "),
                "detected disruption budget errors"
            );
        }
        self.single_node_unseen_pools
            .clone_from(&decision.single_node_unseen_pools);
        self.deps.publish(pending, ctx.tasks());
    }

    async fn validate_pending(&mut self, ctx: &mut ActorCtx<Self>) {
        let Some(pending) = self.validating.take() else {
            return;
        };
        ctx.set_state("validating");
        let (fresh, types) = self.read_input().await;
        let validation = validate(&pending.command, &fresh);
        self.inputs.keep(fresh);
        match validation {
            Validation::Keep {
                command,
                failed_validations,
            } => {
                if failed_validations > 0 {
                    self.deps
                        .metrics
                        .count_failed_validations(command.method, failed_validations);
                }
                if command.candidates.len() != pending.command.candidates.len() {
                    self.deps.set_candidates(pending.id, &command);
                }
                let types = if types.is_empty() {
                    pending.types_by_pool
                } else {
                    types
                };
                self.execute(ctx, &command, pending.id, &types).await;
            }
            Validation::Abandon(abandoned) => {
                self.deps
                    .metrics
                    .count_failed_validations(pending.command.method, abandoned.failed_validations);
                tracing::debug!(
                    "command-id" = pending.id,
                    reason = %abandoned.reason,
                    "abandoning {} consolidation attempt due to pod churn, command is no longer valid",
                    queue::method_name(pending.command.method)
                );
                self.deps
                    .set_state(pending.id, CommandState::Abandoned(abandoned.reason), None);
            }
        }
        ctx.set_state("idle");
        self.schedule_round(ctx, Duration::ZERO);
    }

    /// Marks the candidates, launches the replacements, nominates the destinations and queues
    /// the command (Karpenter's `executeCommand`). A failure undoes the marks.
    async fn execute(
        &mut self,
        ctx: &mut ActorCtx<Self>,
        command: &Command,
        id: u64,
        types: &HashMap<String, Vec<Arc<InstanceType>>>,
    ) {
        let candidates = command.candidates.clone();
        if lock(&self.deps.shared.queue).has_any(candidates.iter().map(|c| c.name.as_str())) {
            self.deps.set_state(
                id,
                CommandState::Failed("candidate is being disrupted".to_owned()),
                None,
            );
            return;
        }
        let reason_label = format!(
            "{}/{}",
            command.method.reason_label(),
            command.decision().as_str()
        );
        log_disrupting(command, id);
        for candidate in &candidates {
            if let Err(error) = self.deps.mark(candidate, command.reason()).await {
                tracing::error!(
                    "command-id" = id,
                    error = logs::err(&error),
                    "failed marking candidates for disruption; undoing"
                );
                self.undo(&candidates).await;
                self.deps
                    .set_state(id, CommandState::Failed(error.to_string()), None);
                return;
            }
        }
        let Some(replacements) = self
            .launch_replacements(command, id, types, &candidates)
            .await
        else {
            return;
        };
        let now = self.deps.deps.clock.now();
        let window = nomination_window(self.deps.deps.settings.batch_max_duration);
        for node in command.destinations() {
            self.deps.nominations.nominate(&node, now, window);
        }
        let mut pending = Vec::new();
        for name in &replacements {
            let uid = self
                .deps
                .deps
                .view
                .nodeclaim(name)
                .and_then(|c| c.metadata.uid.clone());
            pending.push(events::launching(
                Involved::nodeclaim(name, uid),
                &reason_label,
            ));
        }
        self.deps.publish(pending, ctx.tasks());
        self.deps
            .metrics
            .count_decision(command.method, command.decision().as_str());
        self.deps
            .set_state(id, CommandState::Executing, Some(&replacements));
        lock(&self.deps.shared.queue).commands.push(Queued {
            id,
            method: command.method,
            decision: command.decision(),
            candidates,
            replacements: replacements
                .into_iter()
                .map(|name| Replacement {
                    name,
                    initialized: false,
                })
                .collect(),
            added: Instant::now(),
        });
        self.arm_queue(ctx);
    }

    /// Creates the command's replacements; on a failure deletes those created, undoes the
    /// marks and records the failure (`None`).
    async fn launch_replacements(
        &self,
        command: &Command,
        id: u64,
        types: &HashMap<String, Vec<Arc<InstanceType>>>,
        candidates: &[CommandCandidate],
    ) -> Option<Vec<String>> {
        if command.replacements.is_empty() {
            return Some(Vec::new());
        }
        match crate::provisioner::run::create_planned(
            &self.deps.provisioner,
            &command.replacements,
            command.method.reason_label(),
            types,
        )
        .await
        {
            Ok(names) => Some(names),
            Err((created, error)) => {
                let error = DisruptionError::Replacements(error);
                tracing::error!(
                    "command-id" = id,
                    created = ?created,
                    error = logs::err(&error),
                    "failed launching replacement nodeclaims; undoing"
                );
                for name in &created {
                    if let Err(error) = self.deps.deps.cluster.delete_nodeclaim(name).await {
                        tracing::error!(
                            NodeClaim = %name,
                            error = logs::err(&error),
                            "failed deleting a replacement of a failed command"
                        );
                    }
                }
                self.undo(candidates).await;
                self.deps
                    .set_state(id, CommandState::Failed(error.to_string()), None);
                None
            }
        }
    }

    async fn undo(&self, candidates: &[CommandCandidate]) {
        for candidate in candidates {
            if let Err(error) = self
                .deps
                .unmark(&candidate.name, &candidate.node_claim)
                .await
            {
                tracing::error!(
                    Node = %candidate.name,
                    error = logs::err(&error),
                    "failed unmarking a disruption candidate; the next round retries"
                );
            }
        }
    }

    /// One look at every queued command.
    async fn tend_queue(&mut self, ctx: &mut ActorCtx<Self>) {
        self.queue_armed = false;
        let commands = std::mem::take(&mut lock(&self.deps.shared.queue).commands);
        let now = Instant::now();
        let mut kept = Vec::new();
        let mut finished = false;
        for mut command in commands {
            let view = &self.deps.deps.view;
            let step = command.next_step(now, |name| match view.nodeclaim(name) {
                None => ReplacementSeen::Missing,
                Some(claim) => {
                    let initialized = claim.status.as_ref().is_some_and(|s| {
                        s.conditions.iter().any(|c| {
                            c.type_ == cond::INITIALIZED
                                && c.status
                                    == karpenter_core::apis::conditions::ConditionStatus::True
                        })
                    });
                    if initialized {
                        ReplacementSeen::Initialized
                    } else {
                        ReplacementSeen::Launching
                    }
                }
            });
            match step {
                Step::Wait(waiting) => {
                    let pending = waiting
                        .iter()
                        .map(|name| {
                            let uid = view.nodeclaim(name).and_then(|c| c.metadata.uid.clone());
                            events::waiting_on_readiness(Involved::nodeclaim(name, uid))
                        })
                        .collect();
                    self.deps.publish(pending, ctx.tasks());
                    kept.push(command);
                }
                Step::DeleteCandidates => match self.delete_candidates(&command, ctx).await {
                    Ok(()) => {
                        tracing::debug!(
                            "command-id" = command.id,
                            reason = ?command.method.reason(),
                            decision = command.decision.as_str(),
                            "command succeeded"
                        );
                        self.deps
                            .set_state(command.id, CommandState::Succeeded, None);
                        finished = true;
                    }
                    Err(error) => {
                        tracing::error!(
                            "command-id" = command.id,
                            error = logs::err(&error),
                            "failed terminating candidates; retrying"
                        );
                        kept.push(command);
                    }
                },
                Step::Fail { reason, launches } => {
                    self.deps.metrics.count_queue_failures(
                        command.method,
                        command.decision.as_str(),
                        launches,
                    );
                    self.undo(&command.candidates).await;
                    let nodes: Vec<&str> = command.candidate_names().collect();
                    tracing::error!(
                        "command-id" = command.id,
                        nodes = ?nodes,
                        error = %reason,
                        "failed terminating nodes while executing a disruption command"
                    );
                    self.deps
                        .set_state(command.id, CommandState::Failed(reason), None);
                    finished = true;
                }
            }
        }
        let mut queue = lock(&self.deps.shared.queue);
        queue.commands.extend(kept);
        let more = !queue.commands.is_empty();
        drop(queue);
        if more {
            self.arm_queue(ctx);
        }
        if finished {
            self.forget_memos();
            self.schedule_round(ctx, Duration::ZERO);
        }
    }

    async fn delete_candidates(
        &self,
        command: &Queued,
        ctx: &ActorCtx<Self>,
    ) -> Result<(), DisruptionError> {
        let reason = command.reason();
        let mut pending = Vec::new();
        for candidate in &command.candidates {
            pending.extend(execute::terminating_events(&self.deps, candidate, &reason));
            if self.deps.delete_candidate(candidate).await? {
                self.deps.deps.metrics.nodeclaim_disrupted(
                    command.method.reason_label(),
                    &candidate.node_pool,
                    candidate.capacity_type.as_deref().unwrap_or_default(),
                );
            }
        }
        self.deps.publish(pending, ctx.tasks());
        Ok(())
    }

    fn status(&self) -> DisruptionStatus {
        DisruptionStatus {
            rounds: self.deps.shared.rounds.load(Ordering::Relaxed),
            queued: lock(&self.deps.shared.queue).commands.len(),
            validating: self.validating.is_some(),
            commands: self.deps.history(),
        }
    }
}

fn record_of(command: &Command, id: u64, decided_at: &str) -> DisruptionRecord {
    DisruptionRecord {
        id,
        decided_at: decided_at.to_owned(),
        method: queue::method_name(command.method),
        reason: command.reason().as_str(),
        decision: command.decision().as_str(),
        candidates: command.candidates.clone(),
        replacements: Vec::new(),
        replacement_types: command
            .replacements
            .iter()
            .map(|r| {
                r.instance_types
                    .first()
                    .map(|t| t.name.clone())
                    .unwrap_or_default()
            })
            .collect(),
        price_before: command.price_before,
        price_after: command.price_after,
        state: if command.method == Method::Drift {
            CommandState::Executing
        } else {
            CommandState::Validating
        },
    }
}

/// Karpenter's `disrupting node(s)` line: the command, its reason and decision, and what it
/// disrupts and launches.
fn log_disrupting(command: &Command, id: u64) {
    let disrupted: Vec<serde_json::Value> = command
        .candidates
        .iter()
        .map(|c| {
            serde_json::json!({
                "Node": {"name": c.name},
                "NodeClaim": {"name": c.node_claim},
                "capacity-type": c.capacity_type.as_deref().unwrap_or_default(),
                "instance-type": c.instance_type.as_deref().unwrap_or_default(),
            })
        })
        .collect();
    let single = command.replacements.len() == 1;
    let replacements: Vec<serde_json::Value> = command
        .replacements
        .iter()
        .map(|r| {
            let spot = r
                .requirements
                .get(karpenter_core::apis::labels::CAPACITY_TYPE)
                .is_some_and(|ct| ct.has("spot"));
            let capacity_type = if spot { "spot" } else { "on-demand" };
            if single {
                let names = r.instance_type_names();
                serde_json::json!({
                    "capacity-type": capacity_type,
                    "instance-types": logs::Truncated { items: &names, max: 5 }.to_string(),
                })
            } else {
                serde_json::json!({ "capacity-type": capacity_type })
            }
        })
        .collect();
    tracing::info!(
        "command-id" = id,
        reason = command.method.reason_label(),
        decision = command.decision().as_str(),
        "disrupted-node-count" = command.candidates.len(),
        "replacement-node-count" = command.replacements.len(),
        "pod-count" = command.candidates.iter().map(|c| c.reschedulable_pods).sum::<usize>(),
        "disrupted-nodes" = %logs::json(&disrupted),
        "replacement-nodes" = %logs::json(&replacements),
        "disrupting node(s)"
    );
}

impl Handles<Poll> for DisruptionActor {
    async fn handle(&mut self, _: Poll, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        if self.next_round.is_some_and(|at| Instant::now() < at) {
            // A timer superseded by a sooner round.
            return Ok(());
        }
        self.round(ctx).await.map_err(|error| {
            tracing::error!(error = logs::err(&error), "Reconciler error");
            ActorError::from_error(error.category(), &error)
        })
    }
}

impl Handles<ValidateDue> for DisruptionActor {
    async fn handle(&mut self, _: ValidateDue, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        self.validate_pending(ctx).await;
        Ok(())
    }
}

impl Handles<QueueTick> for DisruptionActor {
    async fn handle(&mut self, _: QueueTick, ctx: &mut ActorCtx<Self>) -> Result<(), ActorError> {
        self.tend_queue(ctx).await;
        Ok(())
    }
}

impl Handles<ClusterChanged> for DisruptionActor {
    async fn handle(
        &mut self,
        _: ClusterChanged,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<(), ActorError> {
        self.inputs.forget_stale(self.deps.deps.view.as_ref());
        // The memos follow the consolidation state each round reads, not every change.
        if self.deps.changes.take() {
            let since = self
                .last_round
                .map_or(CHANGE_DEBOUNCE, |at| Instant::now().duration_since(at));
            self.schedule_round(ctx, CHANGE_DEBOUNCE.saturating_sub(since));
        }
        Ok(())
    }
}

impl Handles<GetDisruptionStatus> for DisruptionActor {
    async fn handle(
        &mut self,
        _: GetDisruptionStatus,
        _: &mut ActorCtx<Self>,
    ) -> Result<DisruptionStatus, ActorError> {
        Ok(self.status())
    }
}

impl Handles<ExplainNode> for DisruptionActor {
    async fn handle(
        &mut self,
        message: ExplainNode,
        _: &mut ActorCtx<Self>,
    ) -> Result<NodeExplanation, ActorError> {
        let last = lock(&self.deps.shared.last).clone();
        let queue = lock(&self.deps.shared.queue);
        let queued = queue
            .commands
            .iter()
            .find(|c| c.candidate_names().any(|n| n == message.name))
            .map(|c| (c.id, queue::method_name(c.method), c.reason()));
        drop(queue);
        let validating = self
            .validating
            .as_ref()
            .filter(|v| v.command.candidate_names().contains(&message.name.as_str()))
            .map(|v| (v.id, queue::method_name(v.command.method)));
        Ok(explain::explain(
            &message.name,
            last.as_ref(),
            self.deps.deps.view.as_ref(),
            queued,
            validating,
            &self.deps.history(),
        ))
    }
}

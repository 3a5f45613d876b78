//! Supervisor groups: a group owns children (actors, families' members, child groups) in start
//! order and decides what happens when one stops, as OTP supervisors do.
//!
//! Flow: a child reports `ChildStopped { reason }`. A normal stop of a transient or temporary
//! child removes it; anything else is a restart, after the child's next backoff delay (capped
//! exponential with jitter, from backon): one-for-one restarts the child alone; one-for-all
//! suspends every sibling at once and restarts them all, in start order, after the delay.
//! Stopping a group stops its children one by one in reverse start order, each waited for (up
//! to [`CHILD_SHUTDOWN_GRACE`]).
//!
//! How often is too often (restart intensity) is counted one of two ways:
//!
//! - **Per group** (plain groups: the root, the AWS group, groups of singletons): every restart
//!   counts in the group's window; more than `max_restarts` within `within` and the group gives
//!   up: it suspends all its children (reverse start order) and reports `Escalated` to its own
//!   parent, which restarts or stops the whole group (the root instead raises
//!   [`RootGroup::escalated`]). A singleton that crash-loops is a broken controller: giving up
//!   and letting the process restart is the honest answer.
//! - **Per child** (families, one-for-one: [`GroupSpec::parking`]): `max_restarts` within
//!   `within` applies to each member on its own. A member over it is *parked*: not restarted
//!   for [`ParkPolicy::first`] (doubling per consecutive parking, at most [`ParkPolicy::max`]),
//!   then retried once; failing again within a window of that retry parks it again, and a
//!   window without failure forgives it. While parked its queued messages stay (the mailbox
//!   stays bounded) and new sends fail at once (`SendError::Parked`, `Overflow::Parked`,
//!   counted as dropped with reason `parked`). One bad object thus costs one parked actor, not
//!   its family or the process. The family escalates only when many distinct members fail
//!   within the window: more than [`family_escalation_limit`] (the fault is then shared, not
//!   one object's). Parking and unparking are visible in the registry (state `parked`), in
//!   `karpenter_actor_parked` / `karpenter_actor_parkings_total`, and through the family's
//!   [`ParkHook`] (the daemon records a Kubernetes event on the object).
//!
//! All timers are tokio timers (actix's `run_later`), so `tokio::time::pause()` drives them.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::{
    Actor, ActorFutureExt as _, Addr, Arbiter, ArbiterHandle, AsyncContext as _, Context, Handler,
    WrapFuture as _,
};
use backon::{BackoffBuilder as _, ExponentialBackoff, ExponentialBuilder};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::actor::{RestartPolicy, Supervised};
use super::address::{ActorRef, Wake};
use super::cell::spawn_cell;
use super::control::{Command, ControlBlock};
use super::error::{SpawnError, StopReason};
use super::family::Family;
use super::kit::KitInner;
use super::registry::{ActorRecord, GroupRecord, STATE_RUNNING, STATE_STOPPING, STATE_SUSPENDED};

/// How long a stopping group waits for one child to terminate before it moves on; a kit actor
/// stops as soon as it sees the command (an in-flight handler is cancelled), so this only bounds
/// a child stuck on another arbiter.
pub const CHILD_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Default intensity: 5 restarts within 60 s. A per-object actor failing on a persistent AWS
/// error restarts at 0.1, 0.2, 0.4, 0.8, 1.6 s and then escalates instead of spinning.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// See [`DEFAULT_MAX_RESTARTS`].
pub const DEFAULT_RESTART_WINDOW: Duration = Duration::from_mins(1);
/// First restart delay: long enough to let a transient fault clear, short enough not to be seen.
pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest restart delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Delay growth per consecutive restart.
pub const DEFAULT_BACKOFF_FACTOR: f32 = 2.0;
/// How long a family member over its own intensity is parked the first time: long enough that a
/// bad object costs a handful of attempts an hour instead of a crash loop, short enough that a
/// transient cause (a webhook, a quota) clears without an operator.
pub const DEFAULT_PARK_FIRST: Duration = Duration::from_mins(5);
/// Longest parking (5, 10, 20, 40, 60, 60 ... minutes): an object fixed by hand is picked up
/// within the hour.
pub const DEFAULT_PARK_MAX: Duration = Duration::from_hours(1);
/// A family never escalates for fewer distinct failing members than this within its window:
/// in a small cluster a few bad objects are still those objects' problem.
pub const FAMILY_ESCALATION_MIN_KEYS: usize = 5;
/// ... nor for a smaller share of its members (percent): when a fifth of all NodeClaims fail
/// within a minute the cause is shared (a bug in the actor, a broken dependency), and restarting
/// the family (and, if that keeps happening, the process) is the remedy left.
pub const FAMILY_ESCALATION_PERCENT: usize = 20;

/// The most distinct members of a family of `members` that may fail within its window before
/// the family escalates: `max(FAMILY_ESCALATION_MIN_KEYS, FAMILY_ESCALATION_PERCENT% of
/// members)`.
#[must_use]
pub fn family_escalation_limit(members: usize) -> usize {
    FAMILY_ESCALATION_MIN_KEYS.max(members.saturating_mul(FAMILY_ESCALATION_PERCENT) / 100)
}

/// How long a family member over its own restart intensity is left stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkPolicy {
    /// The first parking.
    pub first: Duration,
    /// The cap; each consecutive parking doubles the previous one up to it.
    pub max: Duration,
}

impl Default for ParkPolicy {
    fn default() -> Self {
        Self {
            first: DEFAULT_PARK_FIRST,
            max: DEFAULT_PARK_MAX,
        }
    }
}

impl ParkPolicy {
    /// The delay of the `parkings`-th consecutive parking (1-based).
    #[must_use]
    pub fn delay(&self, parkings: u32) -> Duration {
        let doublings = parkings.saturating_sub(1).min(31);
        self.first
            .checked_mul(1_u32 << doublings)
            .map_or(self.max, |d| d.min(self.max))
    }
}

/// A family member was parked or is retried (see the module docs); given to the family's
/// [`ParkHook`].
#[derive(Debug, Clone, PartialEq)]
pub struct ParkNotice {
    pub kind: &'static str,
    pub key: Arc<str>,
    pub change: ParkChange,
}

/// What happened to a parked member.
#[derive(Debug, Clone, PartialEq)]
pub enum ParkChange {
    /// Stopped for `retry_in` after `failures` failures within the window (`parkings`
    /// consecutive parkings so far, this one included); `reason` is the last failure.
    Parked {
        retry_in: Duration,
        failures: usize,
        within: Duration,
        parkings: u32,
        reason: StopReason,
    },
    /// Started again after `parked_for`.
    Unparked { parked_for: Duration },
}

/// Called by a family's group when a member is parked or retried. Runs on the group's thread:
/// it must not block (spawn any IO).
pub type ParkHook = Arc<dyn Fn(&ParkNotice) + Send + Sync>;

pub(crate) type ChildId = u64;

/// One-for-one or one-for-all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Restart only the child that stopped.
    OneForOne,
    /// Restart every child when one stops (children that depend on each other).
    OneForAll,
}

impl Strategy {
    fn label(self) -> &'static str {
        match self {
            Self::OneForOne => "one_for_one",
            Self::OneForAll => "one_for_all",
        }
    }
}

/// Restart delays: capped exponential with optional jitter (backon's `ExponentialBuilder`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartBackoff {
    pub min: Duration,
    pub max: Duration,
    pub factor: f32,
    pub jitter: bool,
    /// Seed for the jitter, for reproducible runs; random when `None`.
    pub jitter_seed: Option<u64>,
}

impl Default for RestartBackoff {
    fn default() -> Self {
        Self {
            min: DEFAULT_BACKOFF_MIN,
            max: DEFAULT_BACKOFF_MAX,
            factor: DEFAULT_BACKOFF_FACTOR,
            jitter: true,
            jitter_seed: None,
        }
    }
}

impl RestartBackoff {
    fn build(&self) -> ExponentialBackoff {
        let mut builder = ExponentialBuilder::new()
            .with_min_delay(self.min)
            .with_max_delay(self.max)
            .with_factor(self.factor)
            .without_max_times();
        if self.jitter {
            builder = builder.with_jitter();
            if let Some(seed) = self.jitter_seed.or_else(crate::jitter::next_jitter_seed) {
                builder = builder.with_jitter_seed(seed);
            }
        }
        builder.build()
    }
}

/// A group's name, strategy, restart intensity and backoff.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// Bounded: used in logs, the registry and the escalation metric label.
    pub name: &'static str,
    pub strategy: Strategy,
    /// More than this many restarts within [`Self::within`] escalates.
    pub max_restarts: u32,
    pub within: Duration,
    pub backoff: RestartBackoff,
    /// Count intensity per child and park children over it (families); `None` counts it per
    /// group. Ignored by one-for-all groups, whose children restart together.
    pub parking: Option<ParkPolicy>,
}

impl GroupSpec {
    /// A one-for-one group with the default intensity and backoff.
    #[must_use]
    pub fn one_for_one(name: &'static str) -> Self {
        Self {
            name,
            strategy: Strategy::OneForOne,
            max_restarts: DEFAULT_MAX_RESTARTS,
            within: DEFAULT_RESTART_WINDOW,
            backoff: RestartBackoff::default(),
            parking: None,
        }
    }

    /// A one-for-all group with the default intensity and backoff.
    #[must_use]
    pub fn one_for_all(name: &'static str) -> Self {
        Self {
            strategy: Strategy::OneForAll,
            ..Self::one_for_one(name)
        }
    }

    /// Escalate after more than `max_restarts` restarts within `within`.
    #[must_use]
    pub fn intensity(mut self, max_restarts: u32, within: Duration) -> Self {
        self.max_restarts = max_restarts;
        self.within = within;
        self
    }

    /// Restart delays.
    #[must_use]
    pub fn backoff(mut self, backoff: RestartBackoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Intensity per child: a child with more than `max_restarts` restarts within `within` is
    /// parked as `policy` says (families get [`ParkPolicy::default`] unless they set their own).
    #[must_use]
    pub fn parking(mut self, policy: ParkPolicy) -> Self {
        self.parking = Some(policy);
        self
    }

    fn per_child(&self) -> Option<ParkPolicy> {
        match self.strategy {
            Strategy::OneForOne => self.parking,
            Strategy::OneForAll => None,
        }
    }
}

/// Where a child reports to.
pub(crate) struct ParentLink {
    pub(crate) group: Addr<GroupActor>,
    pub(crate) child: ChildId,
}

/// A child's report to its group.
pub(crate) struct ChildStopped {
    pub(crate) child: ChildId,
    pub(crate) reason: StopReason,
}

impl actix::Message for ChildStopped {
    type Result = ();
}

/// How a group reaches one child.
enum ChildTarget {
    Actor {
        record: Arc<ActorRecord>,
        wake: Box<dyn Fn() + Send + Sync>,
    },
    Group {
        record: Arc<GroupRecord>,
        addr: Addr<GroupActor>,
    },
}

impl ChildTarget {
    fn control(&self) -> &ControlBlock {
        match self {
            Self::Actor { record, .. } => &record.control,
            Self::Group { record, .. } => &record.control,
        }
    }

    fn command(&self, command: Command) {
        self.control().post(command);
        match self {
            Self::Actor { wake, .. } => wake(),
            // Internal message outside any capacity, like a cell's Wake.
            Self::Group { addr, .. } => addr.do_send(Wake),
        }
    }

    fn label(&self) -> String {
        match self {
            Self::Actor { record, .. } => format!("{} {}", record.kind, record.key),
            Self::Group { record, .. } => format!("group {}", record.name),
        }
    }
}

struct ChildEntry {
    id: ChildId,
    target: Arc<ChildTarget>,
    restart: RestartPolicy,
    /// Family members: the key to forget when the child goes away.
    key: Option<Arc<str>>,
    backoff: Option<ExponentialBackoff>,
    last_failure: Option<Instant>,
    /// Per-child intensity: this child's failures within the window.
    failures: VecDeque<Instant>,
    /// Consecutive parkings (reset by a window without failure after a retry).
    parkings: u32,
    /// Parked since then, waiting for its retry.
    parked_at: Option<Instant>,
    /// Retried after a parking at this instant; a failure within a window of it parks again.
    unparked_at: Option<Instant>,
}

impl ChildEntry {
    fn new(
        id: ChildId,
        target: ChildTarget,
        restart: RestartPolicy,
        key: Option<Arc<str>>,
    ) -> Self {
        Self {
            id,
            target: Arc::new(target),
            restart,
            key,
            backoff: None,
            last_failure: None,
            failures: VecDeque::new(),
            parkings: 0,
            parked_at: None,
            unparked_at: None,
        }
    }
}

/// Adds a child to a group (sent by the spawner right after starting the child).
struct Adopt(Option<ChildEntry>);

impl actix::Message for Adopt {
    type Result = ();
}

impl Drop for Adopt {
    fn drop(&mut self) {
        // Never handled: the group stopped with this message still queued (a spawn from
        // another thread raced the group's shutdown). Stop the child rather than orphan it.
        if let Some(child) = self.0.take() {
            child.target.command(Command::Stop);
        }
    }
}

/// Called when a family member leaves its group, with its key and child id.
pub(crate) type RemovalHook = Box<dyn Fn(&str, ChildId) + Send>;

enum GroupParent {
    Group(ParentLink),
    Root(Arc<RootSignal>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupPhase {
    Running,
    /// One-for-all: siblings suspended, restart scheduled.
    RestartingAll,
    /// Escalated, or suspended by the parent: waiting for a command.
    Suspended,
    Stopping,
}

pub(crate) struct GroupActor {
    spec: GroupSpec,
    kit: Arc<KitInner>,
    record: Arc<GroupRecord>,
    parent: GroupParent,
    /// By id: ids are handed out in spawn order, so the map iterates in start order, and a
    /// family of thousands of children finds and removes one in O(log n).
    children: BTreeMap<ChildId, ChildEntry>,
    restarts: VecDeque<Instant>,
    /// Per-child intensity: the last failure of each child that failed within the window.
    failing: BTreeMap<ChildId, Instant>,
    phase: GroupPhase,
    on_removed: Option<RemovalHook>,
    on_park: Option<ParkHook>,
}

impl Actor for GroupActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        for child in std::mem::take(&mut self.children).into_values() {
            if let ChildTarget::Actor { record, .. } = &*child.target {
                record.unpark();
            }
            if let (Some(hook), Some(key)) = (&self.on_removed, &child.key) {
                hook(key, child.id);
            }
        }
        self.kit.registry.deregister_group(self.record.id);
        self.record.control.mark_terminated();
        if let GroupParent::Group(link) = &self.parent {
            link.report(StopReason::Shutdown);
        }
    }
}

impl Handler<Adopt> for GroupActor {
    type Result = ();

    fn handle(&mut self, mut adopt: Adopt, _ctx: &mut Context<Self>) {
        let Some(child) = adopt.0.take() else {
            return;
        };
        match self.phase {
            GroupPhase::Stopping => child.target.command(Command::Stop),
            GroupPhase::Suspended | GroupPhase::RestartingAll => {
                child.target.command(Command::Suspend);
            }
            GroupPhase::Running => {}
        }
        self.children.insert(child.id, child);
        self.record.set_children(self.children.len());
    }
}

impl Handler<ChildStopped> for GroupActor {
    type Result = ();

    fn handle(&mut self, report: ChildStopped, ctx: &mut Context<Self>) {
        if !self.children.contains_key(&report.child) {
            return;
        }
        if report.reason == StopReason::Shutdown {
            let Some(child) = self.children.remove(&report.child) else {
                return;
            };
            self.failing.remove(&report.child);
            if child.parked_at.is_some() {
                self.record.set_parked(self.parked_count());
            }
            self.record.set_children(self.children.len());
            if let (Some(hook), Some(key)) = (&self.on_removed, &child.key) {
                hook(key, child.id);
            }
            return;
        }
        if matches!(self.phase, GroupPhase::Stopping | GroupPhase::Suspended) {
            // Every child is being stopped, or waits for the parent's decision.
            return;
        }
        let Some(child) = self.children.get(&report.child) else {
            return;
        };
        let label = child.target.label();
        let restart = child.restart.restarts_after(report.reason.is_normal());
        let reason_text = report.reason.to_string();
        if !restart {
            self.record.child_stopped(&label, &reason_text, false);
            child.target.command(Command::Stop);
            return;
        }
        let now = Instant::now();
        let per_child = self
            .spec
            .per_child()
            .filter(|_| matches!(&*child.target, ChildTarget::Actor { .. }));
        if let Some(policy) = per_child {
            match self.count_child_failure(report.child, now, !report.reason.is_normal()) {
                ChildVerdict::Escalate(cause) => {
                    self.record.child_stopped(&label, &reason_text, false);
                    self.escalate_with(&cause, &report.reason);
                    return;
                }
                ChildVerdict::Park => {
                    self.record.child_stopped(&label, &reason_text, false);
                    self.park(report.child, policy, &report.reason, now, ctx);
                    return;
                }
                ChildVerdict::Restart => {}
            }
        } else {
            self.restarts.push_back(now);
            while self
                .restarts
                .front()
                .is_some_and(|at| now.duration_since(*at) > self.spec.within)
            {
                self.restarts.pop_front();
            }
            if self.restarts.len() > self.spec.max_restarts as usize {
                self.record.child_stopped(&label, &reason_text, false);
                self.escalate(&label, &report.reason);
                return;
            }
        }
        self.record.child_stopped(&label, &reason_text, true);
        let delay = self.next_delay(report.child, now);
        tracing::info!(group = self.spec.name, child = %label, reason = %report.reason, ?delay, "restarting child");
        match self.spec.strategy {
            Strategy::OneForOne => {
                let id = report.child;
                ctx.run_later(delay, move |group, _| group.restart_child(id));
            }
            Strategy::OneForAll => {
                if self.phase == GroupPhase::RestartingAll {
                    // A restart of everyone is already scheduled.
                    return;
                }
                self.phase = GroupPhase::RestartingAll;
                for sibling in self.children.values().rev() {
                    if sibling.id != report.child {
                        sibling.target.command(Command::Suspend);
                    }
                }
                ctx.run_later(delay, |group, _| group.restart_all());
            }
        }
    }
}

impl Handler<Wake> for GroupActor {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        let Some(command) = self.record.control.take() else {
            return;
        };
        if self.phase == GroupPhase::Stopping {
            return;
        }
        match command {
            Command::Stop => self.shutdown(ctx),
            Command::Suspend => {
                self.phase = GroupPhase::Suspended;
                self.record.set_phase(STATE_SUSPENDED);
                for child in self.children.values().rev() {
                    child.target.command(Command::Suspend);
                }
            }
            Command::Restart => {
                // A restarted group starts afresh: empty windows, fresh backoffs, nobody parked.
                self.restarts.clear();
                self.failing.clear();
                let now = Instant::now();
                let mut unparked = Vec::new();
                for child in self.children.values_mut() {
                    child.backoff = None;
                    child.last_failure = None;
                    child.failures.clear();
                    child.parkings = 0;
                    child.unparked_at = None;
                    if let Some(since) = child.parked_at.take() {
                        unparked.push((Arc::clone(&child.target), now.duration_since(since)));
                    }
                }
                for (target, parked_for) in unparked {
                    self.notify_unparked(&target, parked_for);
                }
                self.record.set_parked(0);
                self.phase = GroupPhase::RestartingAll;
                self.restart_all();
            }
        }
    }
}

/// What a failure of a child counted per child leads to.
enum ChildVerdict {
    Restart,
    Park,
    /// Too many distinct children failed: the group gives up (the cause's text).
    Escalate(String),
}

impl GroupActor {
    /// Counts a restart of `id` in its own window and, when it `failed` (rather than a
    /// permanent child stopping normally), in the group's set of failing children; decides (see
    /// the module docs).
    fn count_child_failure(&mut self, id: ChildId, now: Instant, failed: bool) -> ChildVerdict {
        let within = self.spec.within;
        let max_restarts = self.spec.max_restarts as usize;
        if failed {
            self.failing.insert(id, now);
        }
        self.failing
            .retain(|_, at| now.duration_since(*at) <= within);
        let members = self.children.len();
        let limit = family_escalation_limit(members);
        if self.failing.len() > limit {
            return ChildVerdict::Escalate(format!(
                "{} of its {members} members failed within {within:?} (more than {limit})",
                self.failing.len()
            ));
        }
        let Some(child) = self.children.get_mut(&id) else {
            return ChildVerdict::Restart;
        };
        // A retried child that ran a whole window without failing is forgiven.
        if child
            .unparked_at
            .is_some_and(|at| now.duration_since(at) > within)
        {
            child.unparked_at = None;
            child.parkings = 0;
        }
        child.failures.push_back(now);
        while child
            .failures
            .front()
            .is_some_and(|at| now.duration_since(*at) > within)
        {
            child.failures.pop_front();
        }
        if child.unparked_at.is_some() || child.failures.len() > max_restarts {
            ChildVerdict::Park
        } else {
            ChildVerdict::Restart
        }
    }

    /// Parks a child: it stays stopped (suspended, its queue kept) until its retry.
    fn park(
        &mut self,
        id: ChildId,
        policy: ParkPolicy,
        reason: &StopReason,
        now: Instant,
        ctx: &mut Context<Self>,
    ) {
        let within = self.spec.within;
        let Some(child) = self.children.get_mut(&id) else {
            return;
        };
        child.parkings = child.parkings.saturating_add(1);
        child.parked_at = Some(now);
        child.unparked_at = None;
        // The retry counts afresh; a failure within a window of it parks again at once.
        let failures = std::mem::take(&mut child.failures).len();
        child.backoff = None;
        let parkings = child.parkings;
        let delay = policy.delay(parkings);
        let target = Arc::clone(&child.target);
        let ChildTarget::Actor { record, .. } = &*target else {
            return;
        };
        record.park(now + delay);
        self.record.set_parked(self.parked_count());
        tracing::warn!(
            group = self.spec.name,
            child = %target.label(),
            %reason,
            failures,
            parkings,
            retry_in = ?delay,
            "parking child: it keeps failing"
        );
        if let Some(hook) = &self.on_park {
            hook(&ParkNotice {
                kind: record.kind,
                key: Arc::clone(&record.key),
                change: ParkChange::Parked {
                    retry_in: delay,
                    failures,
                    within,
                    parkings,
                    reason: reason.clone(),
                },
            });
        }
        ctx.run_later(delay, move |group, _| group.unpark(id));
    }

    /// The parking of `id` is over: start it again.
    fn unpark(&mut self, id: ChildId) {
        if self.phase != GroupPhase::Running {
            // Suspended or stopping: a restart of the group unparks everyone itself.
            return;
        }
        let now = Instant::now();
        let Some(child) = self.children.get_mut(&id) else {
            return;
        };
        let Some(since) = child.parked_at.take() else {
            return;
        };
        child.unparked_at = Some(now);
        let target = Arc::clone(&child.target);
        self.record.set_parked(self.parked_count());
        self.notify_unparked(&target, now.duration_since(since));
        tracing::info!(group = self.spec.name, child = %target.label(), "retrying parked child");
        target.command(Command::Restart);
    }

    fn notify_unparked(&self, target: &ChildTarget, parked_for: Duration) {
        let ChildTarget::Actor { record, .. } = target else {
            return;
        };
        record.unpark();
        if let Some(hook) = &self.on_park {
            hook(&ParkNotice {
                kind: record.kind,
                key: Arc::clone(&record.key),
                change: ParkChange::Unparked { parked_for },
            });
        }
    }

    fn parked_count(&self) -> usize {
        self.children
            .values()
            .filter(|c| c.parked_at.is_some())
            .count()
    }

    fn next_delay(&mut self, id: ChildId, now: Instant) -> Duration {
        let within = self.spec.within;
        let backoff = self.spec.backoff;
        let Some(child) = self.children.get_mut(&id) else {
            return backoff.min;
        };
        // A child that ran a whole window without failing starts its backoff over.
        if child
            .last_failure
            .is_some_and(|at| now.duration_since(at) > within)
        {
            child.backoff = None;
        }
        child.last_failure = Some(now);
        child
            .backoff
            .get_or_insert_with(|| backoff.build())
            .next()
            .unwrap_or(backoff.max)
    }

    fn restart_child(&mut self, id: ChildId) {
        if self.phase != GroupPhase::Running {
            return;
        }
        if let Some(child) = self.children.get(&id) {
            child.target.command(Command::Restart);
        }
    }

    fn restart_all(&mut self) {
        if self.phase != GroupPhase::RestartingAll {
            return;
        }
        self.phase = GroupPhase::Running;
        self.record.set_phase(STATE_RUNNING);
        for child in self.children.values() {
            child.target.command(Command::Restart);
        }
    }

    fn escalate(&mut self, child: &str, reason: &StopReason) {
        let cause = format!(
            "{child} needed more than {} restarts within {:?}",
            self.spec.max_restarts, self.spec.within
        );
        self.escalate_with(&cause, reason);
    }

    fn escalate_with(&mut self, cause: &str, reason: &StopReason) {
        self.phase = GroupPhase::Suspended;
        self.record.set_phase(STATE_SUSPENDED);
        self.record.escalated();
        self.kit.metrics.escalated(self.spec.name);
        for sibling in self.children.values().rev() {
            sibling.target.command(Command::Suspend);
        }
        let reason = StopReason::Escalated {
            group: self.spec.name.to_owned(),
            cause: format!("{cause}; last: {reason}"),
        };
        tracing::error!(group = self.spec.name, %reason, "supervisor group escalates");
        match &self.parent {
            GroupParent::Group(link) => link.report(reason),
            GroupParent::Root(signal) => signal.raise(reason),
        }
    }

    fn shutdown(&mut self, ctx: &mut Context<Self>) {
        self.phase = GroupPhase::Stopping;
        self.record.set_phase(STATE_STOPPING);
        let order: Vec<Arc<ChildTarget>> = self
            .children
            .values()
            .rev()
            .map(|c| Arc::clone(&c.target))
            .collect();
        ctx.wait(
            async move {
                for child in order {
                    child.command(Command::Stop);
                    let _ =
                        tokio::time::timeout(CHILD_SHUTDOWN_GRACE, child.control().terminated())
                            .await;
                }
            }
            .into_actor(self)
            .map(|(), _group, ctx: &mut Context<Self>| {
                actix::ActorContext::stop(ctx);
            }),
        );
    }
}

/// The root's escalation, for whoever runs the system (the daemon exits on it).
#[derive(Debug, Default)]
pub(crate) struct RootSignal {
    reason: Mutex<Option<StopReason>>,
    notify: Notify,
}

impl RootSignal {
    fn raise(&self, reason: StopReason) {
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason);
        self.notify.notify_waiters();
    }

    fn get(&self) -> Option<StopReason> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A handle on a supervisor group: spawn children under it, stop it.
#[derive(Clone)]
pub struct GroupRef {
    inner: Arc<GroupRefInner>,
}

struct GroupRefInner {
    name: &'static str,
    addr: Addr<GroupActor>,
    record: Arc<GroupRecord>,
    kit: Arc<KitInner>,
    arbiter: ArbiterHandle,
}

impl fmt::Debug for GroupRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupRef")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl GroupRef {
    pub(crate) fn start(
        kit: &Arc<KitInner>,
        spec: GroupSpec,
        parent: Option<&GroupRef>,
        root: Option<Arc<RootSignal>>,
        on_removed: Option<RemovalHook>,
        on_park: Option<ParkHook>,
    ) -> Result<Self, SpawnError> {
        let what = || format!("group {}", spec.name);
        let arbiter = match parent {
            Some(parent) => parent.inner.arbiter.clone(),
            None => Arbiter::try_current().ok_or_else(|| SpawnError::NoArbiter { what: what() })?,
        };
        if let Some(parent) = parent {
            parent.check_running(what)?;
        }
        let id = kit.registry.next_id();
        let record = Arc::new(GroupRecord::new(id, spec.name, spec.strategy.label()));
        kit.registry.register_group(Arc::clone(&record));
        let group_parent = match (parent, root) {
            (Some(parent), _) => GroupParent::Group(ParentLink {
                group: parent.inner.addr.clone(),
                child: id,
            }),
            (None, Some(signal)) => GroupParent::Root(signal),
            (None, None) => GroupParent::Root(Arc::default()),
        };
        let name = spec.name;
        let actor = GroupActor {
            spec,
            kit: Arc::clone(kit),
            record: Arc::clone(&record),
            parent: group_parent,
            children: BTreeMap::new(),
            restarts: VecDeque::new(),
            failing: BTreeMap::new(),
            phase: GroupPhase::Running,
            on_removed,
            on_park,
        };
        let addr = GroupActor::start_in_arbiter(&arbiter, move |_| actor);
        if let Some(parent) = parent {
            parent.inner.addr.do_send(Adopt(Some(ChildEntry::new(
                id,
                ChildTarget::Group {
                    record: Arc::clone(&record),
                    addr: addr.clone(),
                },
                RestartPolicy::Permanent,
                None,
            ))));
        }
        Ok(Self {
            inner: Arc::new(GroupRefInner {
                name,
                addr,
                record,
                kit: Arc::clone(kit),
                arbiter,
            }),
        })
    }

    fn check_running(&self, what: impl FnOnce() -> String) -> Result<(), SpawnError> {
        if self.inner.record.control.is_terminated() {
            return Err(SpawnError::GroupStopped {
                what: what(),
                group: self.inner.name,
            });
        }
        Ok(())
    }

    /// The group's name.
    #[must_use]
    pub fn name(&self) -> &'static str {
        self.inner.name
    }

    /// Whether the group has stopped for good.
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        self.inner.record.control.is_terminated()
    }

    /// Spawns an actor under this group. Children start, and are restarted (one-for-all), in
    /// spawn order, and stop in reverse.
    pub fn spawn<A: Supervised>(
        &self,
        key: impl Into<Arc<str>>,
        deps: A::Deps,
    ) -> Result<ActorRef<A>, SpawnError> {
        self.spawn_shared(key.into(), Arc::new(deps))
            .map(|(actor, _)| actor)
    }

    pub(crate) fn spawn_shared<A: Supervised>(
        &self,
        key: Arc<str>,
        deps: Arc<A::Deps>,
    ) -> Result<(ActorRef<A>, ChildId), SpawnError> {
        self.spawn_child(key, deps, false)
    }

    pub(crate) fn spawn_member<A: Supervised>(
        &self,
        key: Arc<str>,
        deps: Arc<A::Deps>,
    ) -> Result<(ActorRef<A>, ChildId), SpawnError> {
        self.spawn_child(key, deps, true)
    }

    fn spawn_child<A: Supervised>(
        &self,
        key: Arc<str>,
        deps: Arc<A::Deps>,
        member: bool,
    ) -> Result<(ActorRef<A>, ChildId), SpawnError> {
        self.check_running(|| format!("{} {key}", A::KIND))?;
        let kit = &self.inner.kit;
        let id = kit.registry.next_id();
        let record = Arc::new(ActorRecord::new(
            id,
            A::KIND,
            Arc::clone(&key),
            A::MAILBOX_CAPACITY,
            (kit.wall_clock)(),
            kit.metrics.kind(A::KIND, A::CONTROLLER.name),
        ));
        kit.registry.register(Arc::clone(&record));
        let parent = ParentLink {
            group: self.inner.addr.clone(),
            child: id,
        };
        let actor = spawn_cell::<A>(kit, &self.inner.arbiter, Arc::clone(&record), deps, parent);
        self.inner.addr.do_send(Adopt(Some(ChildEntry::new(
            id,
            ChildTarget::Actor {
                record,
                wake: Box::new(actor.downgrade_waker()),
            },
            A::RESTART,
            member.then_some(key),
        ))));
        Ok((actor, id))
    }

    /// Starts a child group (a sub-supervisor) under this group.
    pub fn group(&self, spec: GroupSpec) -> Result<GroupRef, SpawnError> {
        Self::start(&self.inner.kit, spec, Some(self), None, None, None)
    }

    /// Starts a family: a one-for-one (usually) group of per-key actors of kind `A`, with
    /// restart intensity counted per member (parked when over it; see the module docs).
    pub fn family<A: Supervised>(
        &self,
        spec: GroupSpec,
        deps: A::Deps,
    ) -> Result<Family<A>, SpawnError> {
        Family::start(self, spec, Arc::new(deps), None)
    }

    /// [`Self::family`], calling `on_park` whenever a member is parked or retried.
    pub fn family_with_park_hook<A: Supervised>(
        &self,
        spec: GroupSpec,
        deps: A::Deps,
        on_park: ParkHook,
    ) -> Result<Family<A>, SpawnError> {
        Family::start(self, spec, Arc::new(deps), Some(on_park))
    }

    pub(crate) fn kit(&self) -> &Arc<KitInner> {
        &self.inner.kit
    }

    /// Stops the group: its children one by one in reverse start order (each waited for), then
    /// the group itself. Resolves when everything has terminated.
    pub async fn stop(&self) {
        self.inner.record.control.post(Command::Stop);
        self.inner.addr.do_send(Wake);
        self.inner.record.control.terminated().await;
    }
}

/// The top group. Its escalation has no parent to go to: it is raised here for the daemon to
/// exit on.
#[derive(Debug, Clone)]
pub struct RootGroup {
    group: GroupRef,
    signal: Arc<RootSignal>,
}

impl RootGroup {
    pub(crate) fn start(kit: &Arc<KitInner>, spec: GroupSpec) -> Result<Self, SpawnError> {
        let signal = Arc::new(RootSignal::default());
        let group = GroupRef::start(kit, spec, None, Some(Arc::clone(&signal)), None, None)?;
        Ok(Self { group, signal })
    }

    /// The escalation, if the root gave up already.
    #[must_use]
    pub fn escalation(&self) -> Option<StopReason> {
        self.signal.get()
    }

    /// Resolves when the root gives up (a child exceeded the root's intensity).
    pub async fn escalated(&self) -> StopReason {
        loop {
            let notified = self.signal.notify.notified();
            if let Some(reason) = self.signal.get() {
                return reason;
            }
            notified.await;
        }
    }
}

impl Deref for RootGroup {
    type Target = GroupRef;

    fn deref(&self) -> &GroupRef {
        &self.group
    }
}

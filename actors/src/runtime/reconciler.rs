//! Per-object actors in one shape (kube-runtime's `Controller` + `Action`): a [`Reconciler`]
//! says how to read its object and how to take it one step further; the kit does the rest,
//! once for every family: the [`Reconcile`] event and the [`Requeue`] timer, "gone from the
//! view: stop", requeue timers folded per [`Coalesce`], error backoff ([`Backoff`]), the warn
//! log and the [`ActorError`] of a failed reconcile, and the first look at start ([`Start`]).
//!
//! Flow of one event ([`Reconcile`] from the daemon, a [`Requeue`] timer, or a family's own
//! "look again" message through [`reconcile_object`]):
//!
//! 1. a fired timer is forgotten; a superseded one ([`Coalesce::Latest`]) does nothing more;
//! 2. [`Reconciler::defer`] may fold the event into a timer (a burst costs one pass);
//! 3. [`Reconciler::fetch`] reads the object by the actor's key; `None` sets the state `gone`
//!    and stops the actor (per-object actors are [`super::RestartPolicy::Transient`]);
//! 4. [`Reconciler::reconcile`] returns an [`Action`] (the failure count is reset and the
//!    requeue set) or an error (the next retry waits the policy's backoff, the error is logged
//!    at warn with the actor's kind and key and returned as an `ActorError` with its category).
//!
//! See the [module docs](super) for a complete example.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::actor::{ActorCtx, Handles, Mail, Supervised};
use super::error::ActorError;

/// Why an object actor is asked to reconcile; a bounded set, logged and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The object itself changed (or was created).
    Changed,
    /// The object is gone from the cluster.
    Deleted,
    /// A related object changed: the node of a NodeClaim, a NodeClaim of a node class, the class
    /// of a NodePool.
    Related,
    /// A member changed: a NodeClaim of a NodePool (its usage and status.resources). Frequent in
    /// bursts, so the pool folds them (`nodepool::MEMBER_COALESCE`, [`Reconciler::defer`]).
    Member,
    /// A watch re-listed.
    Relisted,
    /// A timer the actor set (requeue), or the first look of a fresh instance.
    Requeue,
}

/// "Look at your object again": the one event every per-object actor handles (the kit handles
/// it for every [`Reconciler`]). The actor re-reads its object; messages carry no object
/// copies, so a late message can never act on stale data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconcile {
    pub cause: Cause,
}

impl Mail for Reconcile {
    type Reply = ();
    const NAME: &'static str = "Reconcile";
}

/// A reconciler's own requeue timer, set by the kit from an [`Action`] or a backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requeue {
    /// Which timer this is, for [`Coalesce::Latest`].
    token: u64,
}

impl Mail for Requeue {
    type Reply = ();
    const NAME: &'static str = "Requeue";
}

/// What a successful reconcile asks for next (kube-runtime's `controller::Action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Look again after this long, even without an event.
    Requeue(Duration),
    /// Nothing to do until an event arrives.
    AwaitChange,
}

impl Action {
    /// Look again after `delay`.
    #[must_use]
    pub const fn requeue(delay: Duration) -> Self {
        Self::Requeue(delay)
    }

    /// Wait for the next event.
    #[must_use]
    pub const fn await_change() -> Self {
        Self::AwaitChange
    }
}

impl From<Option<Duration>> for Action {
    /// `Some(delay)` requeues, `None` waits for an event.
    fn from(next: Option<Duration>) -> Self {
        next.map_or(Self::AwaitChange, Self::Requeue)
    }
}

/// How requeue timers of one actor combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coalesce {
    /// The earliest wake wins (controller-runtime's and kube-runtime's schedulers): a requeue
    /// no sooner than the pending timer sets none, so a burst of reconciles sets one timer;
    /// every timer that fires reconciles; [`Action::AwaitChange`] leaves a pending timer be.
    Earliest,
    /// The latest decision wins: every requeue replaces the pending timer and
    /// [`Action::AwaitChange`] cancels it; a superseded timer still arrives (and is counted as
    /// handled) but does nothing.
    Latest,
}

/// Delay before retrying a failed reconcile: `min`, doubling per failure in a row, at most
/// `max` (Karpenter's per-controller rate limiters). A constant delay has `min == max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub min: Duration,
    pub max: Duration,
}

impl Backoff {
    /// `min` doubling up to `max`.
    #[must_use]
    pub const fn exponential(min: Duration, max: Duration) -> Self {
        Self { min, max }
    }

    /// Always `delay`.
    #[must_use]
    pub const fn constant(delay: Duration) -> Self {
        Self {
            min: delay,
            max: delay,
        }
    }

    /// The delay after `failures` earlier failures in a row: `min * 2^failures`, at most `max`.
    #[must_use]
    pub fn delay(self, failures: u32) -> Duration {
        self.min
            .saturating_mul(2u32.saturating_pow(failures.min(31)))
            .min(self.max)
    }
}

/// How a fresh instance takes its first look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Every instance queues a [`Reconcile`] (cause [`Cause::Requeue`]) as it starts: the
    /// message in flight when its predecessor crashed is lost, and its timers with it.
    Reconcile,
    /// The first instance waits for the event that started it (the daemon sends one with the
    /// spawn); a restarted one requeues at once through its own timer.
    RequeueAfterRestart,
}

/// Timers, retries and start of one [`Reconciler`] family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcilePolicy {
    pub coalesce: Coalesce,
    pub backoff: Backoff,
    pub start: Start,
}

impl ReconcilePolicy {
    /// Earliest wake wins, 1 s doubling to 1 min after failures (Karpenter's controllers),
    /// a look at every start.
    pub const DEFAULT: Self = Self {
        coalesce: Coalesce::Earliest,
        backoff: Backoff::exponential(Duration::from_secs(1), Duration::from_mins(1)),
        start: Start::Reconcile,
    };
}

/// The error of a failed reconcile: logged with its source chain, returned to the kit as a
/// recoverable [`ActorError`] with [`ReconcileError::category`].
pub trait ReconcileError: std::error::Error + 'static {
    /// Bounded label for metrics and events.
    fn category(&self) -> &'static str;
}

/// A per-object actor in the kit's reconcile shape. Implement it beside [`Supervised`] and call
/// [`ActorCtx::start_reconciling`] from `started`; the kit then handles [`Reconcile`] and
/// [`Requeue`] for it.
pub trait Reconciler: Supervised {
    /// The object, read afresh for every reconcile.
    type Object;
    /// Why a reconcile failed.
    type Error: ReconcileError;
    /// Timers, retries and start.
    const POLICY: ReconcilePolicy = ReconcilePolicy::DEFAULT;

    /// The object under the actor's `key`; `None` when it is gone (the actor then stops).
    fn fetch(&self, key: &str) -> Option<Arc<Self::Object>>;

    /// Takes the object one step towards what it should be, and says when to look again.
    fn reconcile(
        &mut self,
        object: Arc<Self::Object>,
        cause: Cause,
        ctx: &mut ActorCtx<Self>,
    ) -> impl Future<Output = Result<Action, Self::Error>>;

    /// Folds bursts: `Some(delay)` skips this event and looks again after `delay` (combined
    /// with a pending timer per the policy). Asked before the object is read.
    fn defer(&self, cause: Cause) -> Option<Duration> {
        let _ = cause;
        None
    }
}

/// The kit's reconcile bookkeeping of one actor instance (it lives in its [`ActorCtx`], so a
/// restart starts afresh, as the instance's timers are dropped with it).
#[derive(Debug, Default)]
pub(crate) struct RequeueState {
    /// Failed reconciles in a row.
    failures: u32,
    /// [`Coalesce::Earliest`]: when the earliest pending timer fires.
    pending: Option<Instant>,
    /// [`Coalesce::Latest`]: the timer that counts.
    token: u64,
}

impl<R: Reconciler> ActorCtx<R> {
    /// The first look of a fresh instance, per [`ReconcilePolicy::start`]; call it from
    /// [`Supervised::started`].
    pub fn start_reconciling(&mut self) {
        match R::POLICY.start {
            Start::Reconcile => {
                // A full mailbox already holds a reconcile that covers this look.
                let _ = self.myself().try_send_event(Reconcile {
                    cause: Cause::Requeue,
                });
            }
            Start::RequeueAfterRestart => {
                if self.restarts() > 0 {
                    self.schedule_requeue(Duration::ZERO);
                }
            }
        }
    }

    /// The next failure of a reconcile retries after the policy's minimum again (for an object
    /// replaced under the same key).
    pub fn reset_backoff(&mut self) {
        self.requeue_state().failures = 0;
    }

    /// Sets a requeue timer per [`ReconcilePolicy::coalesce`].
    fn schedule_requeue(&mut self, delay: Duration) {
        let state = self.requeue_state();
        let token = match R::POLICY.coalesce {
            Coalesce::Earliest => {
                let now = Instant::now();
                let at = now + delay;
                if state
                    .pending
                    .is_some_and(|pending| pending > now && pending <= at)
                {
                    return;
                }
                state.pending = Some(at);
                0
            }
            Coalesce::Latest => {
                state.token += 1;
                state.token
            }
        };
        self.send_after(delay, Requeue { token });
    }

    /// Carries out a successful reconcile's [`Action`].
    fn apply(&mut self, action: Action) {
        match action {
            Action::Requeue(delay) => self.schedule_requeue(delay),
            Action::AwaitChange => {
                if R::POLICY.coalesce == Coalesce::Latest {
                    self.requeue_state().token += 1;
                }
            }
        }
    }
}

/// Runs one reconcile of `actor`'s object (see the module docs for the steps). The kit calls it
/// for [`Reconcile`] and [`Requeue`]; call it from the handler of a family's own "look again"
/// message.
pub async fn reconcile_object<R: Reconciler>(
    actor: &mut R,
    cause: Cause,
    ctx: &mut ActorCtx<R>,
) -> Result<(), ActorError> {
    let state = ctx.requeue_state();
    if state.pending.is_some_and(|at| at <= Instant::now()) {
        state.pending = None;
    }
    if let Some(delay) = actor.defer(cause) {
        ctx.schedule_requeue(delay);
        return Ok(());
    }
    let Some(object) = actor.fetch(ctx.key()) else {
        tracing::debug!(?cause, "the object is gone; stopping");
        ctx.set_state("gone");
        ctx.stop();
        return Ok(());
    };
    match actor.reconcile(object, cause, ctx).await {
        Ok(action) => {
            ctx.requeue_state().failures = 0;
            ctx.apply(action);
            Ok(())
        }
        Err(error) => {
            let state = ctx.requeue_state();
            let delay = R::POLICY.backoff.delay(state.failures);
            state.failures = state.failures.saturating_add(1);
            ctx.schedule_requeue(delay);
            // controller-runtime's line for every failed reconcile, with the error's structured
            // fields; the retry is the kit's backoff.
            tracing::error!(error = crate::logs::err(&error), "Reconciler error");
            Err(ActorError::from_error(error.category(), &error))
        }
    }
}

impl<R: Reconciler> Handles<Reconcile> for R {
    async fn handle(
        &mut self,
        message: Reconcile,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<(), ActorError> {
        reconcile_object(self, message.cause, ctx).await
    }
}

impl<R: Reconciler> Handles<Requeue> for R {
    async fn handle(
        &mut self,
        message: Requeue,
        ctx: &mut ActorCtx<Self>,
    ) -> Result<(), ActorError> {
        if R::POLICY.coalesce == Coalesce::Latest && message.token != ctx.requeue_state().token {
            return Ok(());
        }
        reconcile_object(self, Cause::Requeue, ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_its_minimum_up_to_its_maximum() {
        let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_mins(1));
        let delays: Vec<u64> = (0..8).map(|n| backoff.delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_mins(1));
    }

    #[test]
    fn a_constant_backoff_never_grows() {
        let backoff = Backoff::constant(Duration::from_secs(5));
        assert_eq!(backoff.delay(0), Duration::from_secs(5));
        assert_eq!(backoff.delay(40), Duration::from_secs(5));
    }

    #[test]
    fn no_next_step_awaits_a_change() {
        assert_eq!(Action::from(None), Action::await_change());
        assert_eq!(
            Action::from(Some(Duration::from_secs(3))),
            Action::requeue(Duration::from_secs(3))
        );
    }
}

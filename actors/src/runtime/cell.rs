//! The actix actor behind every kit actor: a cell that owns the current instance of an actor,
//! runs its handlers one at a time with panics caught, and replaces the instance in place when
//! its supervisor restarts it. This module and `address`, `group` are the only places that know
//! actix.
//!
//! Message flow: an [`ActorRef`] reserves a mailbox slot and queues a `Req`; the cell releases
//! the slot, consults the fault plan, takes the instance out of the cell and runs the handler
//! future with `catch_unwind` around every poll. A handler that completes on its first poll is
//! finished synchronously (no extra scheduling); one that awaits is run with `ctx.wait`, which
//! holds the mailbox until it ends, raced against supervisor commands.
//!
//! Failure flow: a panic, a fatal error, a failed `build`/`started`, or a normal stop drops the
//! instance, answers the caller (`Panicked` / `Failed`), reports `ChildStopped { reason }` to
//! the group and suspends the cell: it handles nothing until the group posts `Restart` (after a
//! backoff) or `Stop`. Messages queued meanwhile stay in the mailbox and go to the fresh
//! instance; a message taken while a command is being applied is parked and handled first once
//! the instance is up. On `Stop` everything still queued or parked is dropped and its callers
//! get `Stopped`.

use std::any::Any;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, Waker};

use actix::dev::channel;
use actix::{
    Actor, ActorFutureExt as _, Addr, ArbiterHandle, AsyncContext as _, Context, Handler,
    WrapFuture as _,
};
use tokio::time::Instant;
use tracing::Instrument as _;

use super::actor::{ActorCtx, Handles, Mail, Supervised};
use super::address::{ActorRef, Failure, ReplyTo, Req, Wake};
use super::control::Command;
use super::error::{ActorError, StopReason};
use super::fault::{FaultAction, STARTED_HOOK};
use super::group::{ChildStopped, ParentLink};
use super::kit::KitInner;
use super::metrics::{DropReason, in_controller};
use super::registry::{
    ActorRecord, HandlerFailure, STATE_RUNNING, STATE_STARTING, STATE_STOPPING, STATE_SUSPENDED,
};

/// Message label for failures while building an instance.
const BUILD_HOOK: &str = "build";

type LocalFuture<T> = Pin<Box<dyn Future<Output = T>>>;
/// A running handler (or `started`): gives the instance back with the result.
type Work<A, R> = LocalFuture<(Box<Instance<A>>, Result<R, ActorError>)>;
/// A message taken from the mailbox while a command was being applied, with its type name.
type Parked<A> = (
    &'static str,
    Box<dyn FnOnce(&mut Cell<A>, &mut Context<Cell<A>>)>,
);

struct Instance<A: Supervised> {
    actor: A,
    ctx: ActorCtx<A>,
}

/// How a handler (or `started`) ended.
enum Outcome<A: Supervised, R> {
    Done(Box<Instance<A>>, Result<R, ActorError>),
    Panicked(String),
    Interrupted(Command),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Starting,
    Ready,
    Busy,
    Suspended,
    Stopping,
}

pub(crate) struct Cell<A: Supervised> {
    record: Arc<ActorRecord>,
    deps: Arc<A::Deps>,
    kit: Arc<KitInner>,
    parent: ParentLink,
    myself: Option<ActorRef<A>>,
    instance: Option<Box<Instance<A>>>,
    phase: Phase,
    incarnation: u32,
    parked: VecDeque<Parked<A>>,
}

/// Starts a cell on `arbiter` and returns its address at once.
pub(crate) fn spawn_cell<A: Supervised>(
    kit: &Arc<KitInner>,
    arbiter: &ArbiterHandle,
    record: Arc<ActorRecord>,
    deps: Arc<A::Deps>,
    parent: ParentLink,
) -> ActorRef<A> {
    // Capacity 0 makes the actix channel unbounded: the kit enforces the capacity itself, and
    // actix's own bound would park a sender that races the cell's construction.
    let (tx, rx) = channel::channel::<Cell<A>>(0);
    let addr = Addr::new(tx);
    let cell_record = Arc::clone(&record);
    let cell_kit = Arc::clone(kit);
    // Only Send parts cross to the arbiter; the cell (with its !Send instance) is built there.
    let started = arbiter.spawn_fn(move || {
        let cell = Cell {
            record: cell_record,
            deps,
            kit: cell_kit,
            parent,
            myself: None,
            instance: None,
            phase: Phase::Starting,
            incarnation: 0,
            parked: VecDeque::new(),
        };
        Context::with_receiver(rx).run(cell);
    });
    if !started {
        // The arbiter is gone (system shutting down): the receiver was dropped with the
        // closure, so sends fail with Stopped; make the record say so too.
        record.control.mark_terminated();
        kit.registry.deregister(record.id);
    }
    ActorRef::new(addr, record, Arc::clone(kit))
}

impl<A: Supervised> Actor for Cell<A> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.myself = Some(ActorRef::new(
            ctx.address(),
            Arc::clone(&self.record),
            Arc::clone(&self.kit),
        ));
        self.boot(ctx, false);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.instance = None;
        // Dropping parked messages drops their reply senders: their callers get `Stopped`.
        for (message, _) in self.parked.drain(..) {
            self.kit
                .metrics
                .dropped(A::KIND, message, DropReason::actor_stopped);
        }
        self.myself = None;
        self.kit.registry.deregister(self.record.id);
        self.record.release_all();
        self.record.control.mark_terminated();
        self.parent.report(StopReason::Shutdown);
    }
}

impl<A: Handles<M>, M: Mail> Handler<Req<M>> for Cell<A> {
    type Result = ();

    fn handle(&mut self, request: Req<M>, ctx: &mut Context<Self>) {
        self.record.release_taken();
        self.dispatch(request, ctx, false);
    }
}

impl<A: Supervised> Handler<Wake> for Cell<A> {
    type Result = ();

    fn handle(&mut self, _: Wake, ctx: &mut Context<Self>) {
        // Only an idle cell looks here; a busy, starting or suspended one races the control
        // block inside the future it waits on.
        if self.phase == Phase::Ready
            && let Some(command) = self.record.control.take()
        {
            self.apply(command, ctx);
            self.drain(ctx);
        }
    }
}

impl<A: Supervised> Cell<A> {
    fn dispatch<M: Mail>(&mut self, request: Req<M>, ctx: &mut Context<Self>, from_parked: bool)
    where
        A: Handles<M>,
    {
        if self.phase == Phase::Ready
            && let Some(command) = self.record.control.take()
        {
            self.apply(command, ctx);
        }
        if self.phase != Phase::Ready {
            let job: Parked<A> = (
                M::NAME,
                Box::new(move |cell, ctx| cell.dispatch(request, ctx, true)),
            );
            if from_parked {
                self.parked.push_front(job);
            } else {
                self.parked.push_back(job);
            }
            return;
        }
        self.run(request, ctx);
    }

    /// Handles parked messages while the cell is ready.
    fn drain(&mut self, ctx: &mut Context<Self>) {
        while self.phase == Phase::Ready {
            let Some((_, job)) = self.parked.pop_front() else {
                return;
            };
            job(self, ctx);
        }
    }

    fn run<M: Mail>(&mut self, request: Req<M>, ctx: &mut Context<Self>)
    where
        A: Handles<M>,
    {
        let Req {
            message,
            reply,
            timer_of,
            nudge,
            queued_at,
        } = request;
        if nudge {
            // Changes from here on need a new look: let the next nudge be queued.
            self.record
                .nudged
                .store(false, std::sync::atomic::Ordering::Release);
        }
        if timer_of.is_some_and(|incarnation| incarnation != self.incarnation) {
            self.kit
                .metrics
                .dropped(A::KIND, M::NAME, DropReason::stale_timer);
            return;
        }
        let fault = self
            .kit
            .faults
            .as_ref()
            .and_then(|plan| plan.decide(A::KIND, &self.record.key, M::NAME));
        if fault == Some(FaultAction::Drop) {
            self.kit
                .metrics
                .dropped(A::KIND, M::NAME, DropReason::fault_injected);
            respond(reply, Err(Failure::Dropped));
            return;
        }
        let Some(mut instance) = self.instance.take() else {
            // Ready always has an instance; if not, behave as a stopped actor would.
            respond(reply, Err(Failure::Interrupted));
            return;
        };
        let started = Instant::now();
        self.record
            .begin_work(started.saturating_duration_since(queued_at));
        // The handler runs in its reconcile's log context (controller, object, reconcileID),
        // and so does the reporting of how it ended.
        let span = crate::logs::reconcile_span(&A::CONTROLLER, M::CONTROLLER, &self.record.key);
        let controller = super::metrics::controller_of::<A, M>();
        let future: Work<A, M::Reply> = Box::pin(
            in_controller(controller, async move {
                if let Err(error) = inject::<A>(fault, M::NAME).await {
                    return (instance, Err(error));
                }
                let Instance { actor, ctx } = &mut *instance;
                let result = actor.handle(message, ctx).await;
                (instance, result)
            })
            .instrument(span.clone()),
        );
        self.drive(
            future,
            ctx,
            Phase::Busy,
            move |cell: &mut Self, outcome, ctx: &mut Context<Self>| {
                let _entered = span.enter();
                cell.complete::<M>(outcome, reply, started, ctx);
            },
        );
    }

    /// Polls `future` once; finishes it now if it is done, else holds the mailbox with
    /// `ctx.wait` until it is, racing supervisor commands.
    fn drive<R: 'static>(
        &mut self,
        mut future: Work<A, R>,
        ctx: &mut Context<Self>,
        waiting_phase: Phase,
        finish: impl FnOnce(&mut Self, Outcome<A, R>, &mut Context<Self>) + 'static,
    ) {
        let mut task = TaskContext::from_waker(Waker::noop());
        match poll_caught(&mut future, &mut task) {
            Poll::Ready(outcome) => finish(self, outcome, ctx),
            Poll::Pending => {
                // The first poll used a no-op waker; ctx.wait polls again at once with the
                // task's waker, which every well-behaved future re-registers.
                self.phase = waiting_phase;
                let record = Arc::clone(&self.record);
                let raced = async move {
                    let mut work = CatchUnwind(future);
                    tokio::select! {
                        biased;
                        outcome = &mut work => outcome,
                        command = record.control.next() => Outcome::Interrupted(command),
                    }
                };
                ctx.wait(raced.into_actor(self).map(
                    move |outcome, cell: &mut Self, ctx: &mut Context<Self>| {
                        finish(cell, outcome, ctx);
                        cell.drain(ctx);
                    },
                ));
            }
        }
    }

    fn complete<M: Mail>(
        &mut self,
        outcome: Outcome<A, M::Reply>,
        reply: Option<ReplyTo<M::Reply>>,
        started: Instant,
        ctx: &mut Context<Self>,
    ) {
        let latency = started.elapsed();
        let metrics = &self.kit.metrics;
        let lookup = || metrics.message(A::KIND, M::NAME, super::metrics::controller_of::<A, M>());
        self.record.end_work();
        match outcome {
            Outcome::Done(mut instance, Ok(value)) => {
                self.record.record_handled(M::NAME, lookup, latency, None);
                respond(reply, Ok(value));
                let stop = instance.ctx.take_stop_request();
                self.instance = Some(instance);
                self.phase = Phase::Ready;
                if stop {
                    self.stop_normally(ctx);
                }
            }
            Outcome::Done(mut instance, Err(error)) => {
                let text = error.public_text();
                self.record.record_handled(
                    M::NAME,
                    lookup,
                    latency,
                    Some(HandlerFailure::Error(&text)),
                );
                let fatal = error.is_fatal();
                respond(reply, Err(Failure::Failed(error)));
                if fatal {
                    drop(instance);
                    self.fail(
                        ctx,
                        StopReason::Failed {
                            message: M::NAME.to_owned(),
                            error: text,
                        },
                    );
                } else {
                    let stop = instance.ctx.take_stop_request();
                    self.instance = Some(instance);
                    self.phase = Phase::Ready;
                    if stop {
                        self.stop_normally(ctx);
                    }
                }
            }
            Outcome::Panicked(panic) => {
                let text = format!("panicked handling {}: {panic}", M::NAME);
                self.record.record_handled(
                    M::NAME,
                    lookup,
                    latency,
                    Some(HandlerFailure::Panic(&text)),
                );
                respond(reply, Err(Failure::Panicked(panic.clone())));
                self.fail(
                    ctx,
                    StopReason::Panicked {
                        message: M::NAME.to_owned(),
                        panic,
                    },
                );
            }
            Outcome::Interrupted(command) => {
                self.kit
                    .metrics
                    .dropped(A::KIND, M::NAME, DropReason::interrupted);
                respond(reply, Err(Failure::Interrupted));
                self.apply(command, ctx);
            }
        }
    }

    /// Builds a fresh instance and runs its `started`.
    fn boot(&mut self, ctx: &mut Context<Self>, restart: bool) {
        if restart {
            self.record.count_restart();
        }
        self.instance = None;
        self.incarnation = self.incarnation.wrapping_add(1);
        self.phase = Phase::Starting;
        self.record.set_state(STATE_STARTING);
        let Some(myself) = self.myself.clone() else {
            return;
        };
        let built = catch_unwind(AssertUnwindSafe(|| A::build(&self.record.key, &self.deps)));
        let actor = match built {
            Ok(Ok(actor)) => actor,
            Ok(Err(error)) => {
                let text = error.public_text();
                self.lifecycle_failure(BUILD_HOOK, HandlerFailure::Error(&text));
                self.fail(ctx, StopReason::StartFailed { error: text });
                return;
            }
            Err(payload) => {
                let panic = panic_text(payload.as_ref());
                self.lifecycle_failure(
                    BUILD_HOOK,
                    HandlerFailure::Panic(&format!("panicked in build: {panic}")),
                );
                self.fail(
                    ctx,
                    StopReason::Panicked {
                        message: BUILD_HOOK.to_owned(),
                        panic,
                    },
                );
                return;
            }
        };
        let mut instance = Box::new(Instance {
            actor,
            ctx: ActorCtx::new(myself, self.incarnation),
        });
        let fault = self
            .kit
            .faults
            .as_ref()
            .and_then(|plan| plan.decide(A::KIND, &self.record.key, STARTED_HOOK))
            // Dropping `started` has no meaning; the hook runs.
            .filter(|action| *action != FaultAction::Drop);
        let span = crate::logs::reconcile_span(&A::CONTROLLER, None, &self.record.key);
        let future: Work<A, ()> = Box::pin(
            async move {
                if let Err(error) = inject::<A>(fault, STARTED_HOOK).await {
                    return (instance, Err(error));
                }
                let Instance { actor, ctx } = &mut *instance;
                let result = actor.started(ctx).await;
                (instance, result)
            }
            .instrument(span.clone()),
        );
        self.drive(
            future,
            ctx,
            Phase::Starting,
            move |cell: &mut Self, outcome, ctx: &mut Context<Self>| {
                let _entered = span.enter();
                cell.finish_boot(outcome, ctx);
            },
        );
    }

    fn finish_boot(&mut self, outcome: Outcome<A, ()>, ctx: &mut Context<Self>) {
        match outcome {
            Outcome::Done(mut instance, Ok(())) => {
                let stop = instance.ctx.take_stop_request();
                self.instance = Some(instance);
                self.phase = Phase::Ready;
                if self.record.state() == STATE_STARTING {
                    self.record.set_state(STATE_RUNNING);
                }
                if stop {
                    self.stop_normally(ctx);
                }
            }
            Outcome::Done(_, Err(error)) => {
                let text = error.public_text();
                self.lifecycle_failure(STARTED_HOOK, HandlerFailure::Error(&text));
                self.fail(ctx, StopReason::StartFailed { error: text });
            }
            Outcome::Panicked(panic) => {
                self.lifecycle_failure(
                    STARTED_HOOK,
                    HandlerFailure::Panic(&format!("panicked in started: {panic}")),
                );
                self.fail(
                    ctx,
                    StopReason::Panicked {
                        message: STARTED_HOOK.to_owned(),
                        panic,
                    },
                );
            }
            Outcome::Interrupted(command) => self.apply(command, ctx),
        }
    }

    fn lifecycle_failure(&self, hook: &'static str, failure: HandlerFailure<'_>) {
        let metrics = self.kit.metrics.message(A::KIND, hook, A::CONTROLLER.name);
        self.record.record_lifecycle_failure(&metrics, failure);
    }

    /// The instance is gone abnormally: report to the group and wait for its decision.
    fn fail(&mut self, ctx: &mut Context<Self>, reason: StopReason) {
        // controller-runtime's lines for a failed reconcile: a panic is reported as observed
        // and then as the reconcile's error; a handler's own error was logged where it arose.
        match &reason {
            StopReason::Panicked { panic, .. } => {
                tracing::error!(panic = %panic, "Observed a panic");
                tracing::error!(error = %format_args!("panic: {panic} [recovered]"), "Reconciler error");
            }
            StopReason::StartFailed { error } => {
                tracing::error!(error = %error, "Reconciler error");
            }
            _ => tracing::debug!(kind = A::KIND, %reason, "actor failed"),
        }
        self.instance = None;
        self.suspend(ctx);
        self.parent.report(reason);
    }

    /// The actor asked to stop: run `stopped`, report a normal stop, wait for the decision.
    fn stop_normally(&mut self, ctx: &mut Context<Self>) {
        self.run_stopped_hook();
        self.suspend(ctx);
        self.parent.report(StopReason::Normal);
    }

    fn suspend(&mut self, ctx: &mut Context<Self>) {
        self.instance = None;
        self.phase = Phase::Suspended;
        self.record.set_state(STATE_SUSPENDED);
        let record = Arc::clone(&self.record);
        ctx.wait(
            async move { record.control.next().await }
                .into_actor(self)
                .map(|command, cell: &mut Self, ctx: &mut Context<Self>| {
                    cell.apply(command, ctx);
                    cell.drain(ctx);
                }),
        );
    }

    fn apply(&mut self, command: Command, ctx: &mut Context<Self>) {
        match command {
            Command::Stop => {
                self.run_stopped_hook();
                self.phase = Phase::Stopping;
                self.record.set_state(STATE_STOPPING);
                actix::ActorContext::stop(ctx);
            }
            Command::Suspend => self.suspend(ctx),
            Command::Restart => self.boot(ctx, true),
        }
    }

    fn run_stopped_hook(&mut self) {
        if let Some(mut instance) = self.instance.take() {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let Instance { actor, ctx } = &mut *instance;
                actor.stopped(ctx);
            }));
            if let Err(payload) = outcome {
                let panic = panic_text(payload.as_ref());
                self.lifecycle_failure(
                    "stopped",
                    HandlerFailure::Panic(&format!("panicked in stopped: {panic}")),
                );
            }
        }
    }
}

impl ParentLink {
    pub(crate) fn report(&self, reason: StopReason) {
        // do_send on purpose: the group's mailbox is internal and unbounded, and a report must
        // not be lost while the group lives; a stopped group no longer cares.
        self.group.do_send(ChildStopped {
            child: self.child,
            reason,
        });
    }
}

fn respond<R>(reply: Option<ReplyTo<R>>, result: Result<R, Failure>) {
    if let Some(reply) = reply {
        // The caller may have timed out and gone; its reply is then discarded.
        let _ = reply.send(result);
    }
}

/// Applies an injected fault before the handler.
async fn inject<A: Supervised>(
    fault: Option<FaultAction>,
    message: &'static str,
) -> Result<(), ActorError> {
    match fault {
        Some(FaultAction::Delay(delay)) => {
            tokio::time::sleep(delay).await;
            Ok(())
        }
        Some(FaultAction::Panic) => {
            // resume_unwind skips the panic hook: an injected panic is expected, not a bug.
            resume_unwind(Box::new(format!(
                "injected panic in {} handling {message}",
                A::KIND
            )))
        }
        Some(FaultAction::Error) => {
            let error = ActorError::injected(A::KIND, message);
            // Logged as any handler's returned error is (it runs in the reconcile's span).
            tracing::error!(error = crate::logs::err(&error), "Reconciler error");
            Err(error)
        }
        Some(FaultAction::Drop) | None => Ok(()),
    }
}

fn poll_caught<A: Supervised, R>(
    future: &mut Work<A, R>,
    task: &mut TaskContext<'_>,
) -> Poll<Outcome<A, R>> {
    match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(task))) {
        Ok(Poll::Ready((instance, result))) => Poll::Ready(Outcome::Done(instance, result)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(payload) => Poll::Ready(Outcome::Panicked(panic_text(payload.as_ref()))),
    }
}

/// Runs a handler future with every poll under `catch_unwind`.
struct CatchUnwind<A: Supervised, R>(Work<A, R>);

impl<A: Supervised, R> Future for CatchUnwind<A, R> {
    type Output = Outcome<A, R>;

    fn poll(mut self: Pin<&mut Self>, task: &mut TaskContext<'_>) -> Poll<Self::Output> {
        poll_caught(&mut self.0, task)
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panic with a non-text payload".to_owned()
    }
}

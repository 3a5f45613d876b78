//! What a module implements to define an actor: [`Supervised`] (kind, mailbox capacity, restart
//! policy, how to build an instance from its key and `Deps`, lifecycle hooks), [`Mail`] for each
//! message type and [`Handles`] for each message the actor accepts. Handlers are `async` and get
//! `&mut self` for their whole run: an actor handles one message at a time, so an object's
//! changes are serialized by its mailbox. [`ActorCtx`] is the handler's view of the runtime.

use std::future::Future;
use std::time::Duration;

use super::address::ActorRef;
use super::error::ActorError;
use super::reconciler::RequeueState;
use super::task::Tasks;

/// A message type. `NAME` is the `message` metric label and the name in the registry, so it
/// must be a constant (the type's name, e.g. `"Launch"`).
pub trait Mail: Send + 'static {
    /// What a request for this message returns. Events use `()`; a reply to an event is
    /// discarded.
    type Reply: Send + 'static;
    /// Bounded label: the message type's name.
    const NAME: &'static str;
    /// Karpenter's controller name for this message's work when it differs from the actor's
    /// [`Supervised::CONTROLLER`] (one actor doing the work of two of Karpenter's controllers,
    /// like the garbage collector): the `controller` of its log lines.
    const CONTROLLER: Option<&'static str> = None;
}

/// How an actor's log lines name it: Karpenter's controller name for the family and, for a
/// per-object family, the group and kind it reconciles (controller-runtime's `For(T)`), which
/// give the `controllerGroup`, `controllerKind` and object-reference fields of every line its
/// handlers log (see [`crate::logs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerId {
    /// `controller`, e.g. `nodeclaim.lifecycle`.
    pub name: &'static str,
    /// `controllerGroup`, e.g. `karpenter.sh`; `""` for core kinds (and singletons).
    pub group: &'static str,
    /// `controllerKind`, e.g. `NodeClaim`; `""` for a singleton.
    pub kind: &'static str,
}

impl ControllerId {
    /// A controller with no object kind: lines carry `controller`, an empty `namespace` and
    /// `name`, and `reconcileID`.
    #[must_use]
    pub const fn singleton(name: &'static str) -> Self {
        Self {
            name,
            group: "",
            kind: "",
        }
    }

    /// A controller of one kind: lines also carry `controllerGroup`, `controllerKind` and the
    /// object (`"NodeClaim":{"name":…}`), with the actor's key as `name`.
    #[must_use]
    pub const fn of_kind(name: &'static str, group: &'static str, kind: &'static str) -> Self {
        Self { name, group, kind }
    }
}

/// When a supervisor restarts a child that stopped (OTP's child restart types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Always restarted, even after a normal stop (singletons: Provisioner, Disruption, ...).
    Permanent,
    /// Restarted only after a failure; a normal stop ([`ActorCtx::stop`]) removes it (per-object
    /// actors: a NodeClaimActor stops when its NodeClaim is gone).
    Transient,
    /// Never restarted.
    Temporary,
}

impl RestartPolicy {
    pub(crate) fn restarts_after(self, normal: bool) -> bool {
        match self {
            Self::Permanent => true,
            Self::Transient => !normal,
            Self::Temporary => false,
        }
    }
}

/// An actor run by the kit. See the [module docs](super) for a complete example.
pub trait Supervised: Sized + 'static {
    /// The actor kind: the `kind` metric label and registry column (`"NodeClaimActor"`).
    const KIND: &'static str;
    /// Messages queued at most; sized per role with a comment at the impl. Events beyond it are
    /// rejected ([`super::Overflow::MailboxFull`]) and requests wait for room.
    const MAILBOX_CAPACITY: usize;
    /// Whether a stopped instance is restarted.
    const RESTART: RestartPolicy = RestartPolicy::Permanent;
    /// The controller its log lines name (default: a singleton named after [`Self::KIND`]).
    const CONTROLLER: ControllerId = ControllerId::singleton(Self::KIND);
    /// What [`Self::build`] needs: shared handles and ports, built once at startup.
    type Deps: Send + Sync + 'static;

    /// Builds a fresh instance; called at spawn and at every restart. Keep it cheap and
    /// infallible where possible: do IO in [`Self::started`].
    fn build(key: &str, deps: &Self::Deps) -> Result<Self, ActorError>;

    /// Runs before the first message of each instance; an error or panic is a start failure
    /// that the supervisor handles like a crash (restart with backoff, counted in intensity).
    fn started(
        &mut self,
        ctx: &mut ActorCtx<Self>,
    ) -> impl Future<Output = Result<(), ActorError>> {
        let _ = ctx;
        std::future::ready(Ok(()))
    }

    /// Runs when the instance is stopped in order (by its supervisor, or after
    /// [`ActorCtx::stop`]); not after a panic or a fatal error, nor when a one-for-all sibling's
    /// failure suspends it.
    fn stopped(&mut self, ctx: &mut ActorCtx<Self>) {
        let _ = ctx;
    }
}

/// An actor that accepts message `M`.
pub trait Handles<M: Mail>: Supervised {
    /// Handles one message. An `Err` is counted and returned to a requester; a fatal one also
    /// restarts the instance. A panic is caught and handled like a fatal error.
    fn handle(
        &mut self,
        message: M,
        ctx: &mut ActorCtx<Self>,
    ) -> impl Future<Output = Result<M::Reply, ActorError>>;
}

/// The handler's view of the runtime: its key, state label, own address, timers, background
/// tasks, stop.
#[derive(Debug)]
pub struct ActorCtx<A: Supervised> {
    myself: ActorRef<A>,
    incarnation: u32,
    stop_requested: bool,
    /// A [`super::Reconciler`]'s timers and failures (unused by other actors).
    requeue: RequeueState,
}

impl<A: Supervised> ActorCtx<A> {
    pub(crate) fn new(myself: ActorRef<A>, incarnation: u32) -> Self {
        Self {
            myself,
            incarnation,
            stop_requested: false,
            requeue: RequeueState::default(),
        }
    }

    pub(super) fn requeue_state(&mut self) -> &mut RequeueState {
        &mut self.requeue
    }

    /// The actor's key (object name, or the singleton's name).
    #[must_use]
    pub fn key(&self) -> &str {
        self.myself.key()
    }

    /// Sets the state label shown in the registry (`"launching"`, `"registered"`, ...).
    pub fn set_state(&self, label: &'static str) {
        self.myself.record().set_state(label);
    }

    /// The actor's own address, e.g. to hand to a spawned task that reports back.
    #[must_use]
    pub fn myself(&self) -> &ActorRef<A> {
        &self.myself
    }

    /// How many times this actor has been restarted (0 for the first instance).
    #[must_use]
    pub fn restarts(&self) -> u64 {
        self.myself.restarts()
    }

    /// Stops the actor in order once this handler returns: `stopped` runs, the supervisor is
    /// told `ChildStopped { reason: Normal }` and, per [`Supervised::RESTART`], restarts it or
    /// stops it for good.
    pub fn stop(&mut self) {
        self.stop_requested = true;
    }

    pub(crate) fn take_stop_request(&mut self) -> bool {
        std::mem::take(&mut self.stop_requested)
    }

    /// Sends `message` to this actor after `delay` (tokio time, so paused in tests). The timer
    /// belongs to this instance: if the actor restarts first, the message is dropped (counted as
    /// `stale_timer`). Timers bypass the mailbox capacity: they are self-scheduled and bounded
    /// by the actor's own logic.
    pub fn send_after<M: Mail>(&self, delay: Duration, message: M)
    where
        A: Handles<M>,
    {
        let target = self.myself.clone();
        let incarnation = self.incarnation;
        self.tasks().spawn(async move {
            tokio::time::sleep(delay).await;
            target.deliver_timer(message, incarnation);
        });
    }

    /// Runs background work for this actor (see [`Tasks`]).
    #[must_use]
    pub fn tasks(&self) -> Tasks {
        Tasks::new()
    }

    /// Runs `task` beside the actor, on its thread; it is not cancelled by a restart, so it
    /// reports back through [`Self::myself`]. Shorthand for `ctx.tasks().spawn(task)`.
    pub fn spawn_task(&self, task: impl Future<Output = ()> + 'static) {
        self.tasks().spawn(task);
    }
}

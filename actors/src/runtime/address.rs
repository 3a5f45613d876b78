//! [`ActorRef`]: the address callers hold, with the three send styles of the conventions:
//! [`ActorRef::request`] (wait for room and a reply, with a timeout), [`ActorRef::try_send_event`]
//! (queue or fail at once, counting overflows) and [`ActorRef::send_lossy`] (queue or drop).
//!
//! The mailbox capacity is enforced here, not by actix: a send reserves a slot in the actor's
//! record before queueing (actix's own bound lets every sender clone add one more message and
//! its `do_send` ignores the bound), and the actor releases the slot when it takes the message.
//! A stopped actor rejects every send with a clear error instead of dropping it silently.

use std::fmt;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix::Addr;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::actor::{Handles, Mail, Supervised};
use super::cell::Cell;
use super::control::Command;
use super::error::{ActorError, Overflow, SendError};
use super::kit::KitInner;
use super::metrics::DropReason;
use super::registry::ActorRecord;

/// What the cell sends back instead of a reply.
#[derive(Debug)]
pub(crate) enum Failure {
    Panicked(String),
    Failed(ActorError),
    Interrupted,
    Dropped,
}

pub(crate) type ReplyTo<R> = oneshot::Sender<Result<R, Failure>>;

/// A message in an actor's mailbox.
pub(crate) struct Req<M: Mail> {
    pub(crate) message: M,
    pub(crate) reply: Option<ReplyTo<M::Reply>>,
    /// For timers: the incarnation that scheduled it.
    pub(crate) timer_of: Option<u32>,
    /// Sent by [`ActorRef::nudge`]: handling it lets the next nudge be queued.
    pub(crate) nudge: bool,
    /// When it was queued (`workqueue_queue_duration_seconds`).
    pub(crate) queued_at: Instant,
}

impl<M: Mail> actix::Message for Req<M> {
    type Result = ();
}

/// Asks a cell to look at its control block (sent outside the capacity: it carries no work).
pub(crate) struct Wake;

impl actix::Message for Wake {
    type Result = ();
}

/// The address of a kit actor. Cheap to clone; stays valid across restarts (the instance is
/// replaced in place), fails with `Stopped` once the actor is stopped for good.
pub struct ActorRef<A: Supervised> {
    inner: Arc<RefInner<A>>,
}

struct RefInner<A: Supervised> {
    addr: Addr<Cell<A>>,
    record: Arc<ActorRecord>,
    kit: Arc<KitInner>,
}

impl<A: Supervised> ActorRef<A> {
    /// The kit's metrics, for families an actor records itself (the batchers' batch sizes).
    pub(crate) fn kit_metrics(&self) -> &super::metrics::ActorMetrics {
        &self.inner.kit.metrics
    }
}

impl<A: Supervised> Clone for ActorRef<A> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<A: Supervised> fmt::Debug for ActorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorRef")
            .field("kind", &A::KIND)
            .field("key", &self.key())
            .finish_non_exhaustive()
    }
}

impl<A: Supervised> ActorRef<A> {
    pub(crate) fn new(addr: Addr<Cell<A>>, record: Arc<ActorRecord>, kit: Arc<KitInner>) -> Self {
        Self {
            inner: Arc::new(RefInner { addr, record, kit }),
        }
    }

    /// The actor's key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.inner.record.key
    }

    /// The actor's kind.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        A::KIND
    }

    /// Whether the actor is still running (possibly restarting).
    #[must_use]
    pub fn is_alive(&self) -> bool {
        self.inner.addr.connected() && !self.inner.record.control.is_terminated()
    }

    /// Messages queued now.
    #[must_use]
    pub fn mailbox_depth(&self) -> usize {
        self.inner.record.depth()
    }

    /// Restarts so far.
    #[must_use]
    pub fn restarts(&self) -> u64 {
        self.inner.record.restarts()
    }

    /// Resolves once the actor has stopped for good (it is then out of the registry).
    pub async fn terminated(&self) {
        self.inner.record.control.terminated().await;
    }

    pub(crate) fn record(&self) -> &Arc<ActorRecord> {
        &self.inner.record
    }

    /// Sends a request and waits for the reply, at most `timeout` in all (waiting for mailbox
    /// room included). Never hangs: a panic, a fatal error, a stop or a restart of the actor
    /// ends the wait with an error.
    pub async fn request<M: Mail>(
        &self,
        message: M,
        timeout: Duration,
    ) -> Result<M::Reply, SendError>
    where
        A: Handles<M>,
    {
        let deadline = Instant::now() + timeout;
        let mut reply = pin!(self.request_unbounded(message));
        // Most handlers answer without awaiting, within one turn of the scheduler on the
        // actor's thread: look again after that turn before paying for a timer (arming and
        // cancelling a tokio timer costs about as much as the rest of the round trip).
        if let Some(result) = (OneTurn {
            future: reply.as_mut(),
            polled: false,
        })
        .await
        {
            return result;
        }
        match tokio::time::timeout_at(deadline, reply).await {
            Ok(result) => result,
            Err(_) => Err(SendError::Timeout {
                kind: A::KIND,
                key: Arc::clone(&self.inner.record.key),
                message: M::NAME,
                timeout,
            }),
        }
    }

    async fn request_unbounded<M: Mail>(&self, message: M) -> Result<M::Reply, SendError>
    where
        A: Handles<M>,
    {
        let record = &self.inner.record;
        if record.is_parked() {
            return Err(self.parked::<M>());
        }
        // Fast path: room now. Otherwise wait for a slot to be released.
        while !record.try_reserve() {
            // Registered before the retry, so a slot freed in between (or a parking) wakes us.
            let space = record.space.notified();
            if record.try_reserve() {
                break;
            }
            if !self.is_alive() {
                return Err(self.stopped::<M>());
            }
            if record.is_parked() {
                return Err(self.parked::<M>());
            }
            space.await;
        }
        let (tx, rx) = oneshot::channel();
        self.enqueue(Req {
            message,
            reply: Some(tx),
            timer_of: None,
            nudge: false,
            queued_at: Instant::now(),
        })
        .map_err(|()| self.stopped::<M>())?;
        match rx.await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(failure)) => Err(self.failure::<M>(failure)),
            // The actor stopped with the message queued or parked.
            Err(_) => Err(self.stopped::<M>()),
        }
    }

    /// Queues an event if the mailbox has room; a full mailbox is counted as an overflow.
    pub fn try_send_event<M: Mail>(&self, message: M) -> Result<(), Overflow>
    where
        A: Handles<M>,
    {
        self.queue_event(message, false)
    }

    /// Queues an idempotent event ("look again") unless one sent this way is already queued and
    /// not yet handled: a burst of changes costs one mailbox slot and one handling, and never
    /// overflows the mailbox. For messages whose handler re-reads its state, so that the queued
    /// one covers every change before it starts (the flag clears as handling begins). Errors as
    /// [`ActorRef::try_send_event`].
    pub fn nudge<M: Mail>(&self, message: M) -> Result<(), Overflow>
    where
        A: Handles<M>,
    {
        let nudged = &self.inner.record.nudged;
        if nudged.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(());
        }
        let queued = self.queue_event(message, true);
        if queued.is_err() {
            nudged.store(false, std::sync::atomic::Ordering::Release);
        }
        queued
    }

    /// An event into the mailbox if it has room (a full one counts an overflow).
    fn queue_event<M: Mail>(&self, message: M, nudge: bool) -> Result<(), Overflow>
    where
        A: Handles<M>,
    {
        let record = &self.inner.record;
        if record.is_parked() {
            self.inner
                .kit
                .metrics
                .dropped(A::KIND, M::NAME, DropReason::parked);
            return Err(Overflow::Parked {
                kind: A::KIND,
                key: Arc::clone(&record.key),
                message: M::NAME,
            });
        }
        if !record.try_reserve() {
            let metrics = self.inner.kit.metrics.message(
                A::KIND,
                M::NAME,
                super::metrics::controller_of::<A, M>(),
            );
            record.count_overflow(&metrics);
            return Err(Overflow::MailboxFull {
                kind: A::KIND,
                key: Arc::clone(&record.key),
                message: M::NAME,
                capacity: record.capacity,
            });
        }
        self.enqueue(Req {
            message,
            reply: None,
            timer_of: None,
            nudge,
            queued_at: Instant::now(),
        })
        .map_err(|()| Overflow::Stopped {
            kind: A::KIND,
            key: Arc::clone(&record.key),
            message: M::NAME,
        })
    }

    /// Queues an event if possible and otherwise drops it (counted as an overflow or a drop).
    /// Only for messages whose loss is acceptable; say why at the call site.
    pub fn send_lossy<M: Mail>(&self, message: M)
    where
        A: Handles<M>,
    {
        // The error is already counted; losing the message is the caller's stated intent.
        let _ = self.try_send_event(message);
    }

    pub(crate) fn deliver_timer<M: Mail>(&self, message: M, incarnation: u32)
    where
        A: Handles<M>,
    {
        self.inner.record.force_reserve();
        // A stopped actor has no use for its timer; the drop is counted in enqueue.
        let _ = self.enqueue(Req {
            message,
            reply: None,
            timer_of: Some(incarnation),
            nudge: false,
            queued_at: Instant::now(),
        });
    }

    /// Posts a supervisor command and wakes the actor.
    pub(crate) fn command(&self, command: Command) {
        self.inner.record.control.post(command);
        self.wake();
    }

    pub(crate) fn wake(&self) {
        // Outside the capacity on purpose: it carries no work, and a full mailbox must not
        // delay a stop. A closed mailbox means the actor is gone, which is what we wanted.
        self.inner.addr.do_send(Wake);
    }

    pub(crate) fn downgrade_waker(&self) -> impl Fn() + Send + Sync + 'static {
        let weak = self.inner.addr.downgrade();
        move || {
            if let Some(addr) = weak.upgrade() {
                addr.do_send(Wake);
            }
        }
    }

    fn enqueue<M: Mail>(&self, request: Req<M>) -> Result<(), ()>
    where
        A: Handles<M>,
    {
        // The actix mailbox is unbounded (capacity 0): try_send fails only when it is closed.
        if self.inner.addr.try_send(request).is_ok() {
            return Ok(());
        }
        self.inner.record.release();
        self.inner
            .kit
            .metrics
            .dropped(A::KIND, M::NAME, DropReason::actor_stopped);
        Err(())
    }

    fn stopped<M: Mail>(&self) -> SendError {
        SendError::Stopped {
            kind: A::KIND,
            key: Arc::clone(&self.inner.record.key),
            message: M::NAME,
        }
    }

    fn parked<M: Mail>(&self) -> SendError {
        self.inner
            .kit
            .metrics
            .dropped(A::KIND, M::NAME, DropReason::parked);
        SendError::Parked {
            kind: A::KIND,
            key: Arc::clone(&self.inner.record.key),
            message: M::NAME,
        }
    }

    /// Whether its group parked it (it kept failing; sends fail until its retry).
    #[must_use]
    pub fn is_parked(&self) -> bool {
        self.inner.record.is_parked()
    }

    fn failure<M: Mail>(&self, failure: Failure) -> SendError {
        let kind = A::KIND;
        let key = Arc::clone(&self.inner.record.key);
        let message = M::NAME;
        match failure {
            Failure::Panicked(panic) => SendError::Panicked {
                kind,
                key,
                message,
                panic,
            },
            Failure::Failed(error) => SendError::Failed {
                kind,
                key,
                message,
                error,
            },
            Failure::Interrupted => SendError::Interrupted { kind, key, message },
            Failure::Dropped => SendError::Dropped { kind, key, message },
        }
    }
}

/// Polls a future, lets the scheduler run one turn, and polls it again: `Some(output)` if it
/// finished by then, `None` if it is still pending.
struct OneTurn<'a, F: Future> {
    future: Pin<&'a mut F>,
    polled: bool,
}

impl<F: Future> Future for OneTurn<'_, F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, task: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(output) = self.future.as_mut().poll(task) {
            return Poll::Ready(Some(output));
        }
        if self.polled {
            return Poll::Ready(None);
        }
        self.polled = true;
        // Back of the run queue: the actor, woken by our message, runs first.
        task.waker().wake_by_ref();
        Poll::Pending
    }
}

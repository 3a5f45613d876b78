//! Background work of an actor ([`Tasks`], from [`super::ActorCtx::tasks`]): futures that run
//! beside the actor on its thread (a launch waiting on CreateFleet, a provisioning run, events
//! published after a run) and closures that run on tokio's blocking pool (a CPU-heavy solve),
//! so the actor's mailbox keeps moving meanwhile.
//!
//! A task is detached: it is not cancelled when the actor restarts or stops, so it reports back
//! through an [`super::ActorRef`] (which survives restarts) in the send style it needs, and keeps
//! what must outlive the instance in the family's `Deps` (as the launch cache and the
//! provisioner's run state do).

use std::future::Future;

use tracing::Instrument as _;

/// Why a blocking closure gave no result.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TaskFailed(#[from] tokio::task::JoinError);

impl TaskFailed {
    /// Label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        if self.0.is_panic() {
            "panicked"
        } else {
            "cancelled"
        }
    }
}

/// Runs an actor's background work; cheap to copy into a task that spawns more.
#[derive(Debug, Clone, Copy)]
pub struct Tasks {
    _private: (),
}

impl Tasks {
    pub(crate) fn new() -> Self {
        Self { _private: () }
    }

    /// Runs `task` beside the actor, on its thread (no `Send` needed).
    pub fn spawn(self, task: impl Future<Output = ()> + 'static) {
        // The task keeps the log context (controller, reconcileID) of the handler spawning it,
        // as a goroutine keeps its `ctx` in Karpenter.
        actix::spawn(task.in_current_span());
    }

    /// Runs `work` on the blocking pool and waits for its result; a panic in `work` is an
    /// error, not a crash of the caller.
    pub async fn blocking<T: Send + 'static>(
        self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, TaskFailed> {
        Ok(tokio::task::spawn_blocking(work).await?)
    }
}

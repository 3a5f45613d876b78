//! The control block a supervisor uses to drive a child (an actor cell or a child group)
//! without going through the child's bounded mailbox, and the child's "terminated" signal.
//!
//! Flow: the supervisor posts a [`Command`] (the strongest pending one wins: stop over restart
//! over suspend) and wakes the child. The child takes the command when it next looks: before
//! each message, while a handler runs (the handler races the command and is cancelled), or while
//! it waits suspended. When the child has stopped for good it marks itself terminated, which is
//! what a stopping supervisor waits for before stopping the next child.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tokio::sync::Notify;

/// What a supervisor asks of a child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Command {
    /// Drop the current instance and wait for the next command (a sibling failed in a
    /// one-for-all group, or the group escalated). Queued messages stay queued.
    Suspend = 1,
    /// Drop the current instance, if any, and start a fresh one.
    Restart = 2,
    /// Stop for good: queued and parked messages are dropped (callers get `Stopped`).
    Stop = 3,
}

impl Command {
    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Suspend),
            2 => Some(Self::Restart),
            3 => Some(Self::Stop),
            _ => None,
        }
    }
}

/// Shared between a child and its supervisor.
#[derive(Debug, Default)]
pub(crate) struct ControlBlock {
    pending: AtomicU8,
    changed: Notify,
    terminated: AtomicBool,
    on_terminated: Notify,
}

impl ControlBlock {
    /// Posts a command; a stronger command already pending is kept.
    pub(crate) fn post(&self, command: Command) {
        self.pending.fetch_max(command as u8, Ordering::AcqRel);
        self.changed.notify_waiters();
    }

    /// Takes the pending command, if any.
    pub(crate) fn take(&self) -> Option<Command> {
        if self.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        Command::from_code(self.pending.swap(0, Ordering::AcqRel))
    }

    /// Waits for and takes the next command.
    pub(crate) async fn next(&self) -> Command {
        loop {
            // Registered before the check, so a post between the check and the await wakes us.
            let changed = self.changed.notified();
            if let Some(command) = self.take() {
                return command;
            }
            changed.await;
        }
    }

    pub(crate) fn mark_terminated(&self) {
        self.terminated.store(true, Ordering::Release);
        self.on_terminated.notify_waiters();
    }

    pub(crate) fn is_terminated(&self) -> bool {
        self.terminated.load(Ordering::Acquire)
    }

    /// Resolves once the child has stopped for good.
    pub(crate) async fn terminated(&self) {
        loop {
            let notified = self.on_terminated.notified();
            if self.is_terminated() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strongest_pending_command_wins() {
        let control = ControlBlock::default();
        control.post(Command::Suspend);
        control.post(Command::Stop);
        control.post(Command::Restart);
        assert_eq!(control.take(), Some(Command::Stop));
        assert_eq!(control.take(), None);
    }

    #[tokio::test]
    async fn a_command_posted_before_waiting_is_seen() {
        let control = ControlBlock::default();
        control.post(Command::Restart);
        assert_eq!(control.next().await, Command::Restart);
    }
}

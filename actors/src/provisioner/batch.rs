//! The batching window (Karpenter's `Batcher`, core `pkg/controllers/provisioning/batcher.go`):
//! the first trigger opens a window; it closes once no trigger has come for the idle duration
//! (`BATCH_IDLE_DURATION`, 1 s) or the window has been open for the max duration
//! (`BATCH_MAX_DURATION`, 10 s), whichever is first. Pure: the actor passes the (tokio) time in
//! and sets a timer for [`Batcher::due_at`].

use std::time::Duration;

use tokio::time::Instant;

/// One batching window at a time.
#[derive(Debug, Clone)]
pub(super) struct Batcher {
    idle: Duration,
    max: Duration,
    /// When the open window started, and when its latest trigger came.
    window: Option<(Instant, Instant)>,
    triggers: u64,
}

impl Batcher {
    pub(super) fn new(idle: Duration, max: Duration) -> Self {
        Self {
            idle,
            max,
            window: None,
            triggers: 0,
        }
    }

    /// Records a trigger; `true` when it opened a new window.
    pub(super) fn trigger(&mut self, now: Instant) -> bool {
        self.triggers += 1;
        if let Some((_, last)) = &mut self.window {
            *last = now;
            return false;
        }
        self.window = Some((now, now));
        true
    }

    /// When the open window closes, if one is open.
    pub(super) fn due_at(&self) -> Option<Instant> {
        self.window
            .map(|(opened, last)| (last + self.idle).min(opened + self.max))
    }

    /// Whether a window is open.
    pub(super) fn is_open(&self) -> bool {
        self.window.is_some()
    }

    /// Triggers in the open window so far.
    pub(super) fn triggers(&self) -> u64 {
        self.triggers
    }

    /// Closes the window (a run takes its pods); the next trigger opens a new one.
    pub(super) fn close(&mut self) {
        self.window = None;
        self.triggers = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(10);

    #[test]
    fn a_window_closes_after_the_idle_duration_without_triggers() {
        let start = Instant::now();
        let mut batcher = Batcher::new(IDLE, MAX);
        assert!(batcher.trigger(start));
        assert!(!batcher.trigger(start + Duration::from_millis(600)));
        assert_eq!(batcher.due_at(), Some(start + Duration::from_millis(1600)));
        assert_eq!(batcher.triggers(), 2);
    }

    #[test]
    fn a_window_closes_at_the_max_duration_however_busy() {
        let start = Instant::now();
        let mut batcher = Batcher::new(IDLE, MAX);
        for step in 0..30 {
            batcher.trigger(start + Duration::from_millis(500) * step);
        }
        assert_eq!(batcher.due_at(), Some(start + MAX));
        batcher.close();
        assert_eq!(batcher.due_at(), None);
        assert!(batcher.trigger(start + MAX));
    }
}

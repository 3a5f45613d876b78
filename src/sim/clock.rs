//! Simulated wall time: a fixed start plus the elapsed time of tokio's clock. In a simulation
//! tokio's clock is paused and jumps from timer to timer, so every timestamp written to the
//! emulator, to kwok and by the actors (through the [`Clock`] port) follows simulated time and a
//! run replays exactly for a seed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_actors::ports::clock::Clock;
use tokio::time::Instant;

/// When every simulation starts: 2025-06-01T00:00:00Z (fixed, so runs replay; Karpenter v1.5
/// was current then).
pub const SIMULATION_EPOCH_SECONDS: i64 = 1_748_736_000;

/// Simulated wall time (see the module docs). Create it inside the runtime that drives it.
#[derive(Debug, Clone, Copy)]
pub struct SimClock {
    start: Timestamp,
    origin: Instant,
}

impl SimClock {
    /// A clock reading `start` now.
    #[must_use]
    pub fn starting_at(start: Timestamp) -> Self {
        Self {
            start,
            origin: Instant::now(),
        }
    }

    /// A clock reading [`SIMULATION_EPOCH_SECONDS`] now.
    #[must_use]
    pub fn at_epoch() -> Self {
        Self::starting_at(Timestamp::from_second(SIMULATION_EPOCH_SECONDS).unwrap_or_default())
    }

    /// The simulated instant the clock started at.
    #[must_use]
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// Simulated time since the clock was made.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.origin.elapsed()
    }

    /// The clock as the emulator takes it.
    #[must_use]
    pub fn for_emulator(self) -> crate::emulator::Clock {
        Arc::new(move || self.now())
    }
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.elapsed()).unwrap_or(SignedDuration::MAX);
        self.start.saturating_add(elapsed).unwrap_or(self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn simulated_time_follows_the_paused_tokio_clock() {
        let clock = SimClock::at_epoch();
        assert_eq!(clock.now().as_second(), SIMULATION_EPOCH_SECONDS);
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now().as_second(), SIMULATION_EPOCH_SECONDS + 90);
        assert_eq!(
            (clock.for_emulator())().as_second(),
            SIMULATION_EPOCH_SECONDS + 90
        );
    }
}

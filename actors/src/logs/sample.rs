//! zap's sampler as Karpenter configures it: per level and message, the first
//! [`SAMPLE_FIRST`] lines of each [`SAMPLE_TICK`] window are written, then every
//! [`SAMPLE_THEREAFTER`]th. Like zap, messages are hashed into a fixed table of counters per
//! level (two messages sharing a slot share a budget), so sampling allocates nothing and takes
//! no lock.

use std::hash::{Hash as _, Hasher as _};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustc_hash::FxHasher;

/// The sampling window: one second (Karpenter's `zap.SamplingConfig{Initial: 100,
/// Thereafter: 100}` with zap's default tick).
pub const SAMPLE_TICK: Duration = Duration::from_secs(1);
/// Lines of one level and message written in full per window.
pub const SAMPLE_FIRST: u64 = 100;
/// After the first ones, one line in this many is written.
pub const SAMPLE_THEREAFTER: u64 = 100;

/// Counters per level: zap's table size.
const SLOTS: usize = 4096;
/// DEBUG, INFO, ERROR.
const LEVELS: usize = 3;

#[derive(Debug, Default)]
struct Counter {
    /// Unix nanoseconds when the current window ends.
    reset_at: AtomicI64,
    count: AtomicU64,
}

/// The sampler (see the module docs).
#[derive(Debug)]
pub struct Sampler {
    counters: Box<[Counter]>,
}

impl Default for Sampler {
    fn default() -> Self {
        Self {
            counters: (0..SLOTS * LEVELS).map(|_| Counter::default()).collect(),
        }
    }
}

impl Sampler {
    /// Whether a line of `level` (0 debug, 1 info, 2 error) and `message` at `now` is written.
    #[must_use]
    pub fn admit(&self, level: usize, message: &str, now: SystemTime) -> bool {
        let mut hasher = FxHasher::default();
        message.hash(&mut hasher);
        let slot = usize::try_from(hasher.finish() % SLOTS as u64).unwrap_or(0);
        let Some(counter) = self.counters.get(level.min(LEVELS - 1) * SLOTS + slot) else {
            return true;
        };
        let now = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let count = counter.increment(now);
        count <= SAMPLE_FIRST || (count - SAMPLE_FIRST).is_multiple_of(SAMPLE_THEREAFTER)
    }
}

impl Counter {
    /// zap's `counter.IncCheckReset`: a window starts at the first line after the previous one
    /// ended.
    fn increment(&self, now: i64) -> u64 {
        let reset_at = self.reset_at.load(Ordering::Acquire);
        if reset_at > now {
            return self.count.fetch_add(1, Ordering::AcqRel) + 1;
        }
        self.count.store(1, Ordering::Release);
        let tick = i64::try_from(SAMPLE_TICK.as_nanos()).unwrap_or(i64::MAX);
        if self
            .reset_at
            .compare_exchange(
                reset_at,
                now.saturating_add(tick),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // Another thread opened the window first: count in it.
            return self.count.fetch_add(1, Ordering::AcqRel) + 1;
        }
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(sampler: &Sampler, level: usize, message: &str, now: SystemTime, n: u64) -> u64 {
        (0..n)
            .filter(|_| sampler.admit(level, message, now))
            .count() as u64
    }

    #[test]
    fn the_first_hundred_then_every_hundredth_are_written_per_second() {
        let sampler = Sampler::default();
        let start = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(admitted(&sampler, 1, "m", start, 100), 100);
        // 101..=1000: the 200th, 300th, ... 1000th.
        assert_eq!(admitted(&sampler, 1, "m", start, 900), 9);
        // Another message and another level have their own budgets.
        assert_eq!(admitted(&sampler, 1, "other", start, 100), 100);
        assert_eq!(admitted(&sampler, 2, "m", start, 100), 100);
        // A second later the window starts again.
        let later = start + SAMPLE_TICK;
        assert_eq!(admitted(&sampler, 1, "m", later, 150), 100);
    }
}

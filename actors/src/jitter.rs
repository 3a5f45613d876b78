//! Where backoff jitter comes from: the system's randomness in a daemon, a seeded sequence once
//! a simulation calls [`seed_jitter`], so that a run with faults and retries replays for its
//! seed (`karpenter simulate` and the chaos proofs rely on it).
//!
//! Every backoff built ([`crate::retry::RetryPolicy`], the supervisors' restart backoff) asks
//! [`next_jitter_seed`]; after [`seed_jitter`] each gets the next value of one splitmix64
//! sequence, so backoffs built one after the other still differ (retries do not march in step).
//! The sequence is process-wide: a simulation runs on one thread, so the order in which its
//! backoffs are built, and thus their seeds, is the same on every run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static SEEDED: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicU64 = AtomicU64::new(0);

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// From now on, jitter in this process is drawn from a sequence seeded with `seed` (restarting
/// the sequence if it was seeded before).
pub fn seed_jitter(seed: u64) {
    NEXT.store(seed, Ordering::SeqCst);
    SEEDED.store(true, Ordering::SeqCst);
}

/// The seed of the next backoff's jitter: `None` (random) unless [`seed_jitter`] was called.
#[must_use]
pub fn next_jitter_seed() -> Option<u64> {
    if !SEEDED.load(Ordering::SeqCst) {
        return None;
    }
    let state = NEXT
        .fetch_add(GOLDEN_GAMMA, Ordering::SeqCst)
        .wrapping_add(GOLDEN_GAMMA);
    let mut z = state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    Some(z ^ (z >> 31))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seeded_sequence_replays_and_its_values_differ() {
        seed_jitter(7);
        let first: Vec<Option<u64>> = (0..4).map(|_| next_jitter_seed()).collect();
        seed_jitter(7);
        let again: Vec<Option<u64>> = (0..4).map(|_| next_jitter_seed()).collect();
        assert_eq!(first, again);
        assert!(first.iter().all(Option::is_some));
        assert_ne!(first[0], first[1]);
    }
}

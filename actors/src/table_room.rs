//! When a hash table gives back its room.
//!
//! A std `HashMap` or `HashSet` keeps the largest size it ever grew to. The daemon's per-pod
//! tables (the Provisioner's pending-pod conversions, the pod metrics' sets, the pods'
//! scheduling times) grow with a scale-up's pending pods and are nearly empty once those are
//! bound and Ready; left as they are, they hold megabytes of empty room for good. Their owners
//! ask [`mostly_empty`] after each sweep and shrink a table that uses a quarter of its room or
//! less, so a table that stays about as full is never copied back and forth.

/// Tables this small are left as they are.
const FLOOR: usize = 256;

/// Whether a table with room for `capacity` entries holding `len` should shrink to fit.
#[must_use]
pub fn mostly_empty(capacity: usize, len: usize) -> bool {
    capacity > 4 * len.max(FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_shrinks_only_past_a_quarter_used_and_above_the_floor() {
        assert!(mostly_empty(16_384, 1_000));
        assert!(!mostly_empty(3_584, 1_000), "more than a quarter used");
        assert!(!mostly_empty(1_024, 0), "small tables stay");
        assert!(mostly_empty(1_025, 0));
    }
}

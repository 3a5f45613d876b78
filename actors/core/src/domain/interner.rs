//! One shared allocation per distinct value: pods of one workload convert to equal
//! [`PodShape`](super::scheduling::pod::PodShape)s and equal label maps, and at 50,000 pods a
//! copy each was most of the scheduler-side memory of the Provisioner and the disruption
//! actor (each keeps its conversions between runs).
//!
//! ```text
//! intern(value) --> an equal value already held --> that Arc (the new value is dropped)
//!               --> none                         --> Arc::new(value), held for the next caller
//! ```
//!
//! [`Interner::share`] takes a borrowed value (a `str`, a slice) and copies it only when no
//! equal one is held.
//!
//! An interner holds its values strongly; when its set has doubled since the last sweep it
//! drops the values nobody else holds, so it stays within twice the live distinct values at an
//! amortized constant cost per call. Values are immutable behind their `Arc`, so sharing is
//! invisible to readers.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::FxBuildHasher;

/// The fewest values held before a sweep is worth it.
const FIRST_SWEEP_AT: usize = 1_024;

/// A set of shared values (see the module docs).
#[derive(Debug)]
pub struct Interner<T: ?Sized> {
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T: ?Sized> {
    values: HashSet<Arc<T>, FxBuildHasher>,
    sweep_at: usize,
}

impl<T: ?Sized + Hash + Eq> Default for Interner<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    /// An empty interner (usable in a `static`).
    #[must_use]
    pub const fn new() -> Self {
        Self {
            state: Mutex::new(State {
                values: HashSet::with_hasher(FxBuildHasher),
                sweep_at: FIRST_SWEEP_AT,
            }),
        }
    }

    /// The held value equal to `value`, or a copy of it, now held.
    pub fn share(&self, value: &T) -> Arc<T>
    where
        for<'a> Arc<T>: From<&'a T>,
    {
        self.held_or(value, Arc::from)
    }

    /// The held value equal to `value`, or `make(value)` (an equal one), now held.
    fn held_or<V: Borrow<T>>(&self, value: V, make: impl FnOnce(V) -> Arc<T>) -> Arc<T> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = state.values.get(value.borrow()) {
            return Arc::clone(held);
        }
        if state.values.len() >= state.sweep_at {
            state.values.retain(|held| Arc::strong_count(held) > 1);
            state.sweep_at = (state.values.len() * 2).max(FIRST_SWEEP_AT);
        }
        let value = make(value);
        state.values.insert(Arc::clone(&value));
        value
    }

    /// Distinct values held (some perhaps no longer used elsewhere, until the next sweep).
    #[must_use]
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values
            .len()
    }

    /// Whether nothing is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Hash + Eq> Interner<T> {
    /// The held value equal to `value`, or `value` itself, now held.
    pub fn intern(&self, value: T) -> Arc<T> {
        self.held_or(value, Arc::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_allocation_and_different_ones_do_not() {
        let interner = Interner::new();
        let a = interner.intern(String::from("web"));
        let b = interner.intern(String::from("web"));
        let c = interner.intern(String::from("db"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(interner.len(), 2);
    }

    #[test]
    fn a_borrowed_value_is_copied_only_when_none_equal_is_held() {
        let interner: Interner<str> = Interner::new();
        let a = interner.share("Ready");
        let b = interner.share(&String::from("Ready"));
        let c = interner.share("Launched");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!((&*a, interner.len()), ("Ready", 2));
    }

    #[test]
    fn values_nobody_holds_are_dropped_once_the_set_has_doubled() {
        let interner = Interner::new();
        let kept: Vec<Arc<u32>> = (0..10).map(|i| interner.intern(i)).collect();
        for i in 10..u32::try_from(FIRST_SWEEP_AT).unwrap() {
            drop(interner.intern(i));
        }
        assert_eq!(
            interner.len(),
            FIRST_SWEEP_AT,
            "no sweep below the threshold"
        );
        let next = interner.intern(u32::MAX);
        assert_eq!(
            interner.len(),
            kept.len() + 1,
            "the sweep kept what is still held and the new value"
        );
        assert!(Arc::ptr_eq(&kept[3], &interner.intern(3)));
        assert_eq!(*next, u32::MAX);
    }
}

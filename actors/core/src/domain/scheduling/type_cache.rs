//! Instance-type filtering shared by many solves over the same NodePools.
//!
//! Each solve asks, per NodePool and per *class* (the merged requirements of a NodeClaim
//! being planned), which of the pool's instance types the class allows and in which order
//! of price; that is a compatibility check and a price lookup per instance type, hundreds per
//! class. A disruption round solves the same pools thousands of times with the same few
//! classes, so [`solve_shared`](super::solve_shared) lets the solver keep those answers in a
//! [`TypeCache`] across its calls. A cache is valid for one list of pools: the same pool
//! names with the same instance types in the same order (hand it pools made by
//! [`NodePoolInput::prepared`](super::NodePoolInput::prepared) once).

use std::sync::{Mutex, MutexGuard, PoisonError};

use rustc_hash::FxHashMap;

use crate::domain::requirements::Requirements;

use super::bitset::BitSet;

/// What the solver learned about one class of one pool.
#[derive(Debug, Clone, Default)]
struct ClassTypes {
    /// Indices of the pool's instance types the class allows.
    allowed: Option<BitSet>,
    /// Those indices, cheapest compatible offering first.
    order: Option<Vec<usize>>,
}

type Classes = FxHashMap<String, FxHashMap<Requirements, ClassTypes>>;

/// Per pool name and class requirements: the instance types the class allows and their order.
#[derive(Debug, Default)]
pub struct TypeCache {
    classes: Mutex<Classes>,
}

impl TypeCache {
    fn lock(&self) -> MutexGuard<'_, Classes> {
        self.classes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn with<T>(
        &self,
        pool: &str,
        class: &Requirements,
        read: impl Fn(&ClassTypes) -> Option<T>,
    ) -> Option<T> {
        self.lock().get(pool)?.get(class).and_then(read)
    }

    fn update(&self, pool: &str, class: &Requirements, write: impl FnOnce(&mut ClassTypes)) {
        let mut classes = self.lock();
        let pool = classes.entry(pool.to_owned()).or_default();
        match pool.get_mut(class) {
            Some(entry) => write(entry),
            None => write(pool.entry(class.clone()).or_default()),
        }
    }

    pub(super) fn allowed(&self, pool: &str, class: &Requirements) -> Option<BitSet> {
        self.with(pool, class, |c| c.allowed.clone())
    }

    pub(super) fn order(&self, pool: &str, class: &Requirements) -> Option<Vec<usize>> {
        self.with(pool, class, |c| c.order.clone())
    }

    pub(super) fn keep_allowed(&self, pool: &str, class: &Requirements, allowed: &BitSet) {
        self.update(pool, class, |c| c.allowed = Some(allowed.clone()));
    }

    pub(super) fn keep_order(&self, pool: &str, class: &Requirements, order: &[usize]) {
        self.update(pool, class, |c| c.order = Some(order.to_vec()));
    }

    /// How many (pool, class) answers are cached.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().values().map(FxHashMap::len).sum()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

//! Status conditions as Karpenter's operatorpkg manages them: a root condition (`Ready`) that
//! summarises a fixed list of dependent conditions, transition times that move only when a
//! status changes, and the observed generation stamped on every write.
//!
//! A [`ConditionSet`] borrows an object's condition list for the length of one change closure
//! (the `ClusterApi` status writes): the actor builds it with the object's generation, creation
//! time and "now" from the clock, sets conditions, and the root follows:
//!
//! - every dependent `True` (at the current generation): root `True`, reason `Ready`;
//! - otherwise root `False` (reason `UnhealthyDependents`) when a dependent is `False` at the
//!   current generation, else `Unknown` (reason `ReconcilingDependents`), with a message listing
//!   the dependents that are not `True` (`Launched=True, Registered=Unknown`).
//!
//! Conditions that are not yet present are initialised `Unknown` (reason
//! `AwaitingReconciliation`) with the object's creation as their transition time, so a
//! dependent's `lastTransitionTime` tells how long it has been pending since the object was made
//! (the NodeClaim liveness window counts from it).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::conditions::{Condition, ConditionStatus, READY, nodeclaim, nodepool};

/// Reason of a condition initialised before anything decided it.
pub const REASON_AWAITING_RECONCILIATION: &str = "AwaitingReconciliation";
const MESSAGE_AWAITING_RECONCILIATION: &str = "object is awaiting reconciliation";
/// Root reason while some dependent is `Unknown`.
pub const REASON_RECONCILING_DEPENDENTS: &str = "ReconcilingDependents";
/// Root reason once some dependent is `False`.
pub const REASON_UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";

/// The dependents of a `NodeClaim`'s `Ready`.
pub const NODECLAIM_DEPENDENTS: &[&str] = &[
    nodeclaim::LAUNCHED,
    nodeclaim::REGISTERED,
    nodeclaim::INITIALIZED,
];
/// The dependents of a `NodePool`'s `Ready` (`NodeRegistrationHealthy` is informational).
pub const NODEPOOL_DEPENDENTS: &[&str] =
    &[nodepool::VALIDATION_SUCCEEDED, nodepool::NODE_CLASS_READY];

/// What the set needs to know about the object that owns the conditions.
#[derive(Debug, Clone, Copy)]
pub struct ObjectFacts {
    /// `metadata.generation` (0 when the API server did not set one).
    pub generation: i64,
    /// `metadata.creationTimestamp`; `None` uses `now`.
    pub created: Option<Timestamp>,
    /// The object has a `deletionTimestamp`: every condition's observed generation is bumped.
    pub deleting: bool,
}

impl ObjectFacts {
    /// Facts read from an object's metadata.
    #[must_use]
    pub fn of(meta: &impl super::MetaFields) -> Self {
        Self {
            generation: meta.generation().unwrap_or(0),
            created: meta.creation_timestamp().map(|t| t.0),
            deleting: meta.deletion_timestamp().is_some(),
        }
    }
}

/// A borrowed condition list with a root and its dependents.
#[derive(Debug)]
pub struct ConditionSet<'a> {
    conditions: &'a mut Vec<Condition>,
    dependents: &'static [&'static str],
    facts: ObjectFacts,
    now: Timestamp,
}

impl<'a> ConditionSet<'a> {
    /// A set over `conditions` whose root is `Ready`; missing root and dependents are
    /// initialised `Unknown`.
    pub fn new(
        conditions: &'a mut Vec<Condition>,
        dependents: &'static [&'static str],
        facts: ObjectFacts,
        now: Timestamp,
    ) -> Self {
        let mut set = Self {
            conditions,
            dependents,
            facts,
            now,
        };
        for kind in std::iter::once(READY).chain(dependents.iter().copied()) {
            if set.get(kind).is_none() {
                set.set(
                    kind,
                    ConditionStatus::Unknown,
                    REASON_AWAITING_RECONCILIATION,
                    MESSAGE_AWAITING_RECONCILIATION,
                );
            }
        }
        set
    }

    /// The condition of this type, if present.
    #[must_use]
    pub fn get(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == kind)
    }

    /// Whether the condition of this type is `True`.
    #[must_use]
    pub fn is_true(&self, kind: &str) -> bool {
        self.get(kind)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }

    /// `True` with the type as reason (operatorpkg's `SetTrue`).
    pub fn set_true(&mut self, kind: &str) -> bool {
        self.set(kind, ConditionStatus::True, kind, "")
    }

    pub fn set_true_with_reason(&mut self, kind: &str, reason: &str, message: &str) -> bool {
        self.set(kind, ConditionStatus::True, reason, message)
    }

    pub fn set_unknown_with_reason(&mut self, kind: &str, reason: &str, message: &str) -> bool {
        self.set(kind, ConditionStatus::Unknown, reason, message)
    }

    pub fn set_false(&mut self, kind: &str, reason: &str, message: &str) -> bool {
        self.set(kind, ConditionStatus::False, reason, message)
    }

    /// Sets a condition; returns whether anything changed. The transition time moves only
    /// when the status changes; a newly added dependent takes the object's creation time.
    pub fn set(
        &mut self,
        kind: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> bool {
        let changed = self.set_one(kind, status, reason, message);
        if changed && kind != READY {
            self.recompute_root();
        }
        changed
    }

    /// Removes an informational condition (neither the root nor a dependent); returns whether
    /// one was there (operatorpkg's `Clear`, which refuses the root and dependents too: the
    /// root summarises them, so they are set, never removed). The root is unaffected.
    pub fn clear(&mut self, kind: &str) -> bool {
        if self.is_dependent(kind) {
            return false;
        }
        let before = self.conditions.len();
        self.conditions.retain(|c| c.type_ != kind);
        self.conditions.len() != before
    }

    fn is_dependent(&self, kind: &str) -> bool {
        kind == READY || self.dependents.contains(&kind)
    }

    fn set_one(
        &mut self,
        kind: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> bool {
        let generation = self.facts.generation;
        if self.facts.deleting {
            for condition in self.conditions.iter_mut().filter(|c| c.type_ != kind) {
                condition.observed_generation = Some(generation);
            }
        }
        let mut next = Condition {
            type_: kind.to_owned(),
            status,
            observed_generation: Some(generation),
            last_transition_time: Time(self.now),
            reason: reason.to_owned(),
            message: message.to_owned(),
        };
        match self.conditions.iter().position(|c| c.type_ == kind) {
            Some(index) => {
                let current = &self.conditions[index];
                if current.status == status {
                    next.last_transition_time = current.last_transition_time.clone();
                }
                if *current == next {
                    return false;
                }
                self.conditions.remove(index);
            }
            None => {
                if self.is_dependent(kind) {
                    next.last_transition_time = Time(self.facts.created.unwrap_or(self.now));
                }
            }
        }
        self.conditions.push(next);
        // The root last, the others by transition time (stable: ties keep their order).
        self.conditions.sort_by(|a, b| {
            (a.type_ == READY)
                .cmp(&(b.type_ == READY))
                .then_with(|| a.last_transition_time.0.cmp(&b.last_transition_time.0))
        });
        true
    }

    fn recompute_root(&mut self) {
        let generation = self.facts.generation;
        let mut unhealthy: Vec<&Condition> = self
            .conditions
            .iter()
            .filter(|c| self.dependents.contains(&c.type_.as_str()))
            .filter(|c| {
                c.status != ConditionStatus::True || c.observed_generation != Some(generation)
            })
            .collect();
        if unhealthy.is_empty() {
            self.set_one(READY, ConditionStatus::True, READY, "");
            return;
        }
        // Newest transition first, as operatorpkg lists them.
        unhealthy.sort_by_key(|c| std::cmp::Reverse(c.last_transition_time.0));
        let failed = unhealthy.iter().any(|c| {
            c.status == ConditionStatus::False && c.observed_generation == Some(generation)
        });
        let message = unhealthy
            .iter()
            .map(|c| format!("{}={}", c.type_, c.status.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        let (status, reason) = if failed {
            (ConditionStatus::False, REASON_UNHEALTHY_DEPENDENTS)
        } else {
            (ConditionStatus::Unknown, REASON_RECONCILING_DEPENDENTS)
        };
        self.set_one(READY, status, reason, &message);
    }
}

/// The condition of this type in a list, if present.
#[must_use]
pub fn find<'c>(conditions: &'c [Condition], kind: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.type_ == kind)
}

/// Whether the condition of this type is present and `True`.
#[must_use]
pub fn is_true(conditions: &[Condition], kind: &str) -> bool {
    find(conditions, kind).is_some_and(|c| c.status == ConditionStatus::True)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn facts() -> ObjectFacts {
        ObjectFacts {
            generation: 1,
            created: Some(at(0)),
            deleting: false,
        }
    }

    #[test]
    fn missing_conditions_start_unknown_at_creation_and_the_root_waits() {
        let mut conditions = Vec::new();
        let set = ConditionSet::new(&mut conditions, NODECLAIM_DEPENDENTS, facts(), at(50));
        let launched = set.get(nodeclaim::LAUNCHED).unwrap();
        assert_eq!(launched.status, ConditionStatus::Unknown);
        assert_eq!(launched.reason, REASON_AWAITING_RECONCILIATION);
        assert_eq!(launched.last_transition_time.0, at(0));
        let ready = set.get(READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::Unknown);
        assert_eq!(conditions.last().unwrap().type_, READY, "root sorts last");
    }

    #[test]
    fn the_root_turns_true_when_every_dependent_is_true() {
        let mut conditions = Vec::new();
        let mut set = ConditionSet::new(&mut conditions, NODECLAIM_DEPENDENTS, facts(), at(10));
        set.set_true(nodeclaim::LAUNCHED);
        set.set_true(nodeclaim::REGISTERED);
        assert!(!set.is_true(READY));
        assert_eq!(
            set.get(READY).unwrap().message,
            "Initialized=Unknown",
            "lists what is missing"
        );
        set.set_true(nodeclaim::INITIALIZED);
        assert!(set.is_true(READY));
        assert_eq!(set.get(READY).unwrap().reason, READY);
    }

    #[test]
    fn a_false_dependent_makes_the_root_false() {
        let mut conditions = Vec::new();
        let mut set = ConditionSet::new(&mut conditions, NODEPOOL_DEPENDENTS, facts(), at(10));
        set.set_true(nodepool::VALIDATION_SUCCEEDED);
        set.set_false(nodepool::NODE_CLASS_READY, "NodeClassNotFound", "gone");
        let ready = set.get(READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, REASON_UNHEALTHY_DEPENDENTS);
        assert_eq!(ready.message, "NodeClassReady=False");
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let mut conditions = Vec::new();
        ConditionSet::new(&mut conditions, NODECLAIM_DEPENDENTS, facts(), at(10))
            .set_unknown_with_reason(nodeclaim::REGISTERED, "NodeNotFound", "not yet");
        let first = find(&conditions, nodeclaim::REGISTERED).unwrap().clone();
        let mut set = ConditionSet::new(&mut conditions, NODECLAIM_DEPENDENTS, facts(), at(99));
        assert!(set.set_unknown_with_reason(nodeclaim::REGISTERED, "Other", "still not"));
        assert!(!set.set_unknown_with_reason(nodeclaim::REGISTERED, "Other", "still not"));
        assert_eq!(
            set.get(nodeclaim::REGISTERED).unwrap().last_transition_time,
            first.last_transition_time
        );
        set.set_true(nodeclaim::REGISTERED);
        assert_eq!(
            set.get(nodeclaim::REGISTERED)
                .unwrap()
                .last_transition_time
                .0,
            at(99)
        );
    }

    #[test]
    fn clearing_removes_an_informational_condition_but_never_the_root_or_a_dependent() {
        let mut conditions = Vec::new();
        let mut set = ConditionSet::new(&mut conditions, NODECLAIM_DEPENDENTS, facts(), at(10));
        for kind in NODECLAIM_DEPENDENTS {
            set.set_true(kind);
        }
        set.set_true(nodeclaim::CONSOLIDATABLE);
        assert!(set.clear(nodeclaim::CONSOLIDATABLE));
        assert!(set.get(nodeclaim::CONSOLIDATABLE).is_none());
        assert!(
            !set.clear(nodeclaim::CONSOLIDATABLE),
            "nothing left to clear"
        );
        assert!(!set.clear(nodeclaim::INITIALIZED));
        assert!(!set.clear(READY));
        assert!(set.is_true(nodeclaim::INITIALIZED) && set.is_true(READY));
        assert_eq!(conditions.len(), 4);
    }

    #[test]
    fn consolidatable_is_not_a_dependent_of_the_nodeclaim_root() {
        let mut conditions = Vec::new();
        let mut set = ConditionSet::new(&mut conditions, NODECLAIM_DEPENDENTS, facts(), at(10));
        for kind in NODECLAIM_DEPENDENTS {
            set.set_true(kind);
        }
        set.set_false(nodeclaim::CONSOLIDATABLE, "NotYet", "");
        assert!(
            set.is_true(READY),
            "Ready depends on Launched, Registered, Initialized only"
        );
    }

    #[test]
    fn non_dependent_conditions_do_not_affect_the_root() {
        let mut conditions = Vec::new();
        let mut set = ConditionSet::new(&mut conditions, NODECLAIM_DEPENDENTS, facts(), at(10));
        for kind in NODECLAIM_DEPENDENTS {
            set.set_true(kind);
        }
        set.set_true(nodeclaim::INSTANCE_TERMINATING);
        assert!(set.is_true(READY));
        assert_eq!(
            set.get(nodeclaim::INSTANCE_TERMINATING)
                .unwrap()
                .last_transition_time
                .0,
            at(10),
            "informational conditions transition now"
        );
    }
}

//! What a reconcile decided about an `EC2NodeClass`'s status, and how that is applied to the
//! status the API server holds (pure; the actor performs the write).
//!
//! A reconcile fills a [`StatusPlan`]: the resolved fields it replaces and the conditions it
//! sets. [`StatusPlan::apply`] is the change closure's body for
//! `ClusterApi::update_ec2nodeclass_status`, so it works on whatever status is current when the
//! write happens: fields a step could not resolve (an AWS call failed) are left as they were,
//! a condition keeps its `lastTransitionTime` unless its status changes, and the root `Ready`
//! is recomputed from the dependent conditions as operatorpkg does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use karpenter_core::apis::conditions::{Condition, ConditionStatus, READY, ec2nodeclass as types};
use karpenter_core::apis::ec2nodeclass::{Ami, EC2NodeClassStatus, SecurityGroup, Subnet};

/// The reason of a condition nobody reconciled yet (operatorpkg's initial value).
pub const REASON_AWAITING_RECONCILIATION: &str = "AwaitingReconciliation";
/// The message of a condition nobody reconciled yet.
pub const MESSAGE_AWAITING_RECONCILIATION: &str = "object is awaiting reconciliation";
/// Root reason when a dependent condition is False.
pub const REASON_UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";
/// Root reason while a dependent condition is Unknown and none is False.
pub const REASON_RECONCILING_DEPENDENTS: &str = "ReconcilingDependents";

/// The conditions `Ready` depends on (Karpenter's `EC2NodeClass.StatusConditions()` without the
/// capacity-reservation one, which this build does not resolve).
pub const DEPENDENTS: [&str; 5] = [
    types::AMIS_READY,
    types::SUBNETS_READY,
    types::SECURITY_GROUPS_READY,
    types::INSTANCE_PROFILE_READY,
    types::VALIDATION_SUCCEEDED,
];

/// One condition to set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionUpdate {
    pub type_: &'static str,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

impl ConditionUpdate {
    /// `True`, with the condition type as its reason and no message (operatorpkg's `SetTrue`).
    #[must_use]
    pub fn ready(type_: &'static str) -> Self {
        Self {
            type_,
            status: ConditionStatus::True,
            reason: type_.to_owned(),
            message: String::new(),
        }
    }

    #[must_use]
    pub fn not_ready(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: ConditionStatus::False,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    #[must_use]
    pub fn unknown(type_: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_,
            status: ConditionStatus::Unknown,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// The status changes of one reconcile.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusPlan {
    /// `Some`: replace `status.subnets` (an empty list clears it).
    pub subnets: Option<Vec<Subnet>>,
    pub security_groups: Option<Vec<SecurityGroup>>,
    pub amis: Option<Vec<Ami>>,
    /// `Some`: replace `status.instanceProfile`.
    pub instance_profile: Option<Option<String>>,
    /// Dependent conditions to set, in order.
    pub conditions: Vec<ConditionUpdate>,
    /// A root `Ready` that overrides the one computed from the dependents (`NodeClassNotReady`
    /// when an AL2023 class cannot learn the cluster CIDR).
    pub ready_override: Option<ConditionUpdate>,
}

impl StatusPlan {
    /// Records a condition (replacing an earlier update of the same type).
    pub fn set(&mut self, update: ConditionUpdate) {
        self.conditions.retain(|c| c.type_ != update.type_);
        self.conditions.push(update);
    }

    /// Applies the plan to `status`; conditions carry `generation` and transitions `now`.
    pub fn apply(&self, status: &mut EC2NodeClassStatus, generation: Option<i64>, now: Timestamp) {
        if let Some(subnets) = &self.subnets {
            status.subnets.clone_from(subnets);
        }
        if let Some(groups) = &self.security_groups {
            status.security_groups.clone_from(groups);
        }
        if let Some(amis) = &self.amis {
            status.amis.clone_from(amis);
        }
        if let Some(profile) = &self.instance_profile {
            status.instance_profile.clone_from(profile);
        }
        let conditions = &mut status.conditions;
        for type_ in DEPENDENTS.into_iter().chain([READY]) {
            if find(conditions, type_).is_none() {
                set_condition(
                    conditions,
                    &ConditionUpdate::unknown(
                        type_,
                        REASON_AWAITING_RECONCILIATION,
                        MESSAGE_AWAITING_RECONCILIATION,
                    ),
                    generation,
                    now,
                );
            }
        }
        for update in &self.conditions {
            set_condition(conditions, update, generation, now);
        }
        let root = self
            .ready_override
            .clone()
            .unwrap_or_else(|| root_condition(conditions, generation));
        set_condition(conditions, &root, generation, now);
    }
}

/// The condition of a type, if present.
#[must_use]
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The status of a condition; `Unknown` when absent.
#[must_use]
pub fn status_of(conditions: &[Condition], type_: &str) -> ConditionStatus {
    find(conditions, type_).map_or(ConditionStatus::Unknown, |c| c.status)
}

/// Sets a condition: a new transition time only when the status changes.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    update: &ConditionUpdate,
    generation: Option<i64>,
    now: Timestamp,
) {
    match conditions.iter_mut().find(|c| c.type_ == update.type_) {
        Some(current) => {
            if current.status != update.status {
                current.last_transition_time = Time(now);
            }
            current.status = update.status;
            current.reason.clone_from(&update.reason);
            current.message.clone_from(&update.message);
            current.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: update.type_.to_owned(),
            status: update.status,
            observed_generation: generation,
            last_transition_time: Time(now),
            reason: update.reason.clone(),
            message: update.message.clone(),
        }),
    }
}

/// The root `Ready` from the dependents: True when all are True; False when one is False for
/// the current generation; Unknown otherwise. The message lists the unhealthy ones.
#[must_use]
pub fn root_condition(conditions: &[Condition], generation: Option<i64>) -> ConditionUpdate {
    let unhealthy: Vec<&Condition> = DEPENDENTS
        .iter()
        .filter_map(|type_| find(conditions, type_))
        .filter(|c| c.status != ConditionStatus::True)
        .collect();
    if unhealthy.is_empty() {
        return ConditionUpdate::ready(READY);
    }
    let message = unhealthy
        .iter()
        .map(|c| format!("{}={}", c.type_, c.status.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let failed = unhealthy
        .iter()
        .any(|c| c.status == ConditionStatus::False && c.observed_generation == generation);
    if failed {
        ConditionUpdate::not_ready(READY, REASON_UNHEALTHY_DEPENDENTS, message)
    } else {
        ConditionUpdate::unknown(READY, REASON_RECONCILING_DEPENDENTS, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap()
    }

    #[test]
    fn a_new_status_starts_with_every_condition_awaiting_reconciliation() {
        let mut status = EC2NodeClassStatus::default();
        StatusPlan::default().apply(&mut status, Some(1), at(10));
        assert_eq!(status.conditions.len(), DEPENDENTS.len() + 1);
        let ready = find(&status.conditions, READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::Unknown);
        assert_eq!(ready.reason, REASON_RECONCILING_DEPENDENTS);
        assert_eq!(
            status_of(&status.conditions, types::AMIS_READY),
            ConditionStatus::Unknown
        );
    }

    #[test]
    fn ready_is_true_only_when_every_dependent_is_true() {
        let mut status = EC2NodeClassStatus::default();
        let mut plan = StatusPlan::default();
        for type_ in DEPENDENTS {
            plan.set(ConditionUpdate::ready(type_));
        }
        plan.apply(&mut status, Some(1), at(10));
        let ready = find(&status.conditions, READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::True);
        assert_eq!(ready.reason, READY);

        let mut failed = StatusPlan::default();
        failed.set(ConditionUpdate::not_ready(
            types::SUBNETS_READY,
            types::REASON_SUBNETS_NOT_FOUND,
            "SubnetSelector did not match any Subnets",
        ));
        failed.apply(&mut status, Some(1), at(20));
        let ready = find(&status.conditions, READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, REASON_UNHEALTHY_DEPENDENTS);
        assert_eq!(ready.message, "SubnetsReady=False");
        assert_eq!(ready.last_transition_time, Time(at(20)));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let mut status = EC2NodeClassStatus::default();
        let mut plan = StatusPlan::default();
        plan.set(ConditionUpdate::not_ready(
            types::AMIS_READY,
            "AMINotFound",
            "a",
        ));
        plan.apply(&mut status, Some(1), at(10));
        let mut again = StatusPlan::default();
        again.set(ConditionUpdate::not_ready(
            types::AMIS_READY,
            "AMINotFound",
            "b",
        ));
        again.apply(&mut status, Some(2), at(30));
        let amis = find(&status.conditions, types::AMIS_READY).unwrap();
        assert_eq!(amis.last_transition_time, Time(at(10)));
        assert_eq!(amis.message, "b");
        assert_eq!(amis.observed_generation, Some(2));
    }

    #[test]
    fn fields_a_step_could_not_resolve_are_left_alone() {
        let mut status = EC2NodeClassStatus {
            instance_profile: Some("kept".into()),
            ..EC2NodeClassStatus::default()
        };
        let plan = StatusPlan {
            subnets: Some(Vec::new()),
            ..StatusPlan::default()
        };
        plan.apply(&mut status, None, at(1));
        assert_eq!(status.instance_profile.as_deref(), Some("kept"));
        assert!(status.subnets.is_empty());
    }

    #[test]
    fn an_override_replaces_the_computed_root() {
        let mut status = EC2NodeClassStatus::default();
        let mut plan = StatusPlan::default();
        for type_ in DEPENDENTS {
            plan.set(ConditionUpdate::ready(type_));
        }
        plan.ready_override = Some(ConditionUpdate::not_ready(
            READY,
            types::REASON_NODE_CLASS_NOT_READY,
            "Failed to detect the cluster CIDR",
        ));
        plan.apply(&mut status, Some(1), at(1));
        let ready = find(&status.conditions, READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, types::REASON_NODE_CLASS_NOT_READY);
    }
}

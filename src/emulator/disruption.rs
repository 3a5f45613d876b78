//! PodDisruptionBudgets: the emulator plays Kubernetes' disruption controller (it keeps each
//! budget's `status` current as pods change) and the eviction subresource's admission (an
//! eviction that would take a budget below its desired healthy count is refused with 429).
//!
//! As in Kubernetes, a budget with an integer `minAvailable` expects the pods it selects; one with
//! `maxUnavailable` or a percentage expects the scale (`spec.replicas`) of the controllers
//! (`ReplicaSet`, `StatefulSet`, `ReplicationController`) of those pods. A selected pod without a
//! controller, or whose controller is not stored, counts as one (the real controller reports an
//! error for such budgets instead). A pod is healthy when its `Ready` condition is `True` and
//! it is not being deleted.

use std::sync::Arc;

use serde_json::{Value, json};

use super::kinds::{Behavior, ResourceKind};
use super::selector::{self, LabelSelector, POD_CONTROLLER, POD_DELETING, POD_READY, Text};
use super::status::{ApiError, Cause};
use super::store::StoredObject;

/// A budget evaluated against the pods of its namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    pub expected: i64,
    pub healthy: i64,
    pub desired: i64,
    pub allowed: i64,
}

/// Whether `pdb` selects a pod with these labels.
pub(crate) fn selects(pdb: &Value, labels: &[(Text, Text)]) -> bool {
    pdb.pointer("/spec/selector")
        .and_then(LabelSelector::from_object)
        .is_some_and(|s| s.matches(labels))
}

/// `value` of an int-or-percent field scaled against `total`, rounding up.
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(text) => {
            let percent: i64 = text.strip_suffix('%')?.trim().parse().ok()?;
            Some((percent * total + 99) / 100)
        }
        _ => None,
    }
}

/// Counts the pods `pdb` selects among `pods` (its namespace's); `scale_of("ReplicaSet/web")`
/// gives a controller's `spec.replicas`.
pub(crate) fn evaluate<'a>(
    pdb: &Value,
    pods: impl Iterator<Item = &'a Arc<StoredObject>>,
    scale_of: impl Fn(&str) -> Option<i64>,
) -> Budget {
    let selector = pdb
        .pointer("/spec/selector")
        .and_then(LabelSelector::from_object);
    let (mut selected, mut healthy) = (0, 0);
    let mut controllers: Vec<&str> = Vec::new();
    let mut uncontrolled = 0;
    if let Some(selector) = selector {
        for pod in pods.filter(|p| selector.matches(&p.labels)) {
            selected += 1;
            match selector::field(Behavior::Pod, &pod.fields, POD_CONTROLLER) {
                "" => uncontrolled += 1,
                controller => {
                    if !controllers.contains(&controller) {
                        controllers.push(controller);
                    }
                }
            }
            let phase = selector::field(Behavior::Pod, &pod.fields, "status.phase");
            if !matches!(phase, "Succeeded" | "Failed")
                && selector::field(Behavior::Pod, &pod.fields, POD_READY) == "true"
                && selector::field(Behavior::Pod, &pod.fields, POD_DELETING) != "true"
            {
                healthy += 1;
            }
        }
    }
    let scaled_count = || -> i64 {
        uncontrolled
            + controllers
                .iter()
                .map(|c| scale_of(c).unwrap_or(1))
                .sum::<i64>()
    };
    let spec = pdb.get("spec").cloned().unwrap_or(Value::Null);
    let (expected, desired) = if let Some(max) = spec.get("maxUnavailable") {
        let expected = scaled_count();
        (
            expected,
            (expected - scaled(max, expected).unwrap_or(0)).max(0),
        )
    } else if let Some(min) = spec.get("minAvailable") {
        if min.is_number() {
            (selected, min.as_i64().unwrap_or(0))
        } else {
            let expected = scaled_count();
            (expected, scaled(min, expected).unwrap_or(0))
        }
    } else {
        (selected, 0)
    };
    Budget {
        expected,
        healthy,
        desired,
        allowed: (healthy - desired).max(0),
    }
}

/// The status the disruption controller would write; `previous` keeps transition times.
pub(crate) fn status(pdb: &Value, budget: Budget, now: &str) -> Value {
    let allowed = budget.allowed > 0;
    let condition_status = if allowed { "True" } else { "False" };
    let generation = pdb
        .pointer("/metadata/generation")
        .cloned()
        .unwrap_or(json!(1));
    let previous = pdb.pointer("/status/conditions/0");
    let since = previous
        .filter(|c| c["status"] == condition_status)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now));
    json!({
        "observedGeneration": generation,
        "disruptionsAllowed": budget.allowed,
        "currentHealthy": budget.healthy,
        "desiredHealthy": budget.desired,
        "expectedPods": budget.expected,
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": condition_status,
            "reason": if allowed { "SufficientPods" } else { "InsufficientPods" },
            "message": "",
            "observedGeneration": generation,
            "lastTransitionTime": since,
        }],
    })
}

/// Whether the counts in `status` differ from `pdb`'s current status.
pub(crate) fn status_changed(pdb: &Value, status: &Value) -> bool {
    let current = pdb.get("status");
    [
        "observedGeneration",
        "disruptionsAllowed",
        "currentHealthy",
        "desiredHealthy",
        "expectedPods",
    ]
    .iter()
    .any(|f| current.and_then(|c| c.get(*f)) != status.get(*f))
}

/// The eviction subresource's decision for `pod` given the budgets that select it and the pods
/// of its namespace. `Ok` lets the eviction delete the pod.
pub(crate) fn admit_eviction<'a>(
    pdb_kind: &ResourceKind,
    pod: &StoredObject,
    pod_value: &Value,
    budgets: &[Value],
    pods: impl Iterator<Item = &'a Arc<StoredObject>>,
    scale_of: impl Fn(&str) -> Option<i64>,
) -> Result<(), ApiError> {
    let phase = pod_value
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    // Terminal and pending pods are evicted without consulting budgets.
    if matches!(phase, "Succeeded" | "Failed" | "Pending" | "") {
        return Ok(());
    }
    let matching: Vec<&Value> = budgets.iter().filter(|b| selects(b, &pod.labels)).collect();
    let budget_value = match matching.as_slice() {
        [] => return Ok(()),
        [one] => *one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let budget = evaluate(budget_value, pods, scale_of);
    let healthy = selector::field(Behavior::Pod, &pod.fields, POD_READY) == "true";
    let permitted = if healthy {
        budget.allowed > 0
    } else {
        let always = budget_value
            .pointer("/spec/unhealthyPodEvictionPolicy")
            .and_then(Value::as_str)
            == Some("AlwaysAllow");
        always || budget.healthy >= budget.desired
    };
    if permitted {
        return Ok(());
    }
    let name = budget_value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let cause = Cause {
        reason: "DisruptionBudget",
        field: String::new(),
        message: format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            budget.desired, budget.healthy
        ),
    };
    Err(ApiError {
        details: Some(json!({
            "name": name,
            "group": pdb_kind.group,
            "kind": pdb_kind.plural,
            "causes": [{ "reason": cause.reason, "message": cause.message }],
        })),
        ..ApiError::new(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulator::kinds::Behavior;
    use crate::emulator::store::ObjectKey;

    fn pod(name: &str, ready: bool) -> Arc<StoredObject> {
        let value = json!({
            "metadata": { "name": name, "labels": { "app": "web" } },
            "status": { "phase": "Running", "conditions": [{ "type": "Ready", "status": if ready { "True" } else { "False" } }] },
        });
        Arc::new(StoredObject::of(
            ObjectKey::new("default", name),
            1,
            Behavior::Pod,
            &value,
        ))
    }

    #[test]
    fn percentages_round_up_like_the_disruption_controller() {
        let pods = [pod("a", true), pod("b", true), pod("c", true)];
        let pdb = json!({ "spec": { "selector": { "matchLabels": { "app": "web" } }, "minAvailable": "50%" } });
        let budget = evaluate(&pdb, pods.iter(), |_| None);
        assert_eq!(
            budget,
            Budget {
                expected: 3,
                healthy: 3,
                desired: 2,
                allowed: 1
            }
        );
        let pdb = json!({ "spec": { "selector": { "matchLabels": { "app": "web" } }, "maxUnavailable": 0 } });
        assert_eq!(evaluate(&pdb, pods.iter(), |_| None).allowed, 0);
    }

    #[test]
    fn an_unready_pod_can_go_only_while_the_budget_is_healthy() {
        let kinds = crate::emulator::kinds::Kinds::new();
        let pdb_kind = kinds
            .get(kinds.by_behavior(Behavior::PodDisruptionBudget).unwrap())
            .clone();
        let pods = [pod("a", true), pod("b", false)];
        let pdb = json!({ "metadata": { "name": "web" }, "spec": { "selector": { "matchLabels": { "app": "web" } }, "minAvailable": 1 } });
        let unready = &pods[1];
        let value = unready.value();
        assert!(
            admit_eviction(
                &pdb_kind,
                unready,
                &value,
                std::slice::from_ref(&pdb),
                pods.iter(),
                |_| None
            )
            .is_ok()
        );
        let ready = &pods[0];
        let error = admit_eviction(
            &pdb_kind,
            ready,
            &ready.value(),
            &[pdb],
            pods.iter(),
            |_| None,
        )
        .unwrap_err();
        assert_eq!(error.code, 429);
    }
}

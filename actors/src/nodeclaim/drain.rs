//! Draining a node: which pods must leave, in which order, and which must be deleted now so
//! they get their whole grace period before the NodeClaim's `terminationGracePeriod` ends
//! (Karpenter's `termination/terminator`). A pure function over the node's pods and the time;
//! the NodeClaimActor carries the plan out through the eviction API.
//!
//! - A pod *waits* (blocks the drain) unless it is finished, tolerates the
//!   `karpenter.sh/disrupted:NoSchedule` taint, is a static (mirror) pod, or has been
//!   terminating for over a minute past its deletion timestamp (stuck).
//! - Waiting pods leave in groups: non-critical non-DaemonSet, non-critical DaemonSet, critical
//!   non-DaemonSet, critical DaemonSet (`system-cluster-critical`/`system-node-critical`); only
//!   the first non-empty group is evicted, so DaemonSets (log shippers) outlive the workloads.
//! - Pods carrying `karpenter.sh/do-not-disrupt=true` are never evicted; they keep the node
//!   until they finish or the grace period forces them out.
//! - With a termination time `T` (the `karpenter.sh/nodeclaim-termination-timestamp`), a waiting
//!   pod is deleted at `T - terminationGracePeriodSeconds` with the time left to `T` as its grace,
//!   bypassing PodDisruptionBudgets and `do-not-disrupt`.

use karpenter_core::domain::pods::{is_terminal, owned_by};
use std::sync::Arc;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use karpenter_core::apis::SlimPod;

use karpenter_core::apis::labels;
use karpenter_core::apis::taints::{Taint, TaintEffect};
use karpenter_core::domain::scheduling::Toleration;

/// A terminating pod still on the node this long after its deletion timestamp no longer blocks
/// the drain (Karpenter's `IsStuckTerminating`).
pub const STUCK_TERMINATING_AFTER: SignedDuration = SignedDuration::from_mins(1);
/// Kubernetes' default `terminationGracePeriodSeconds`, for pods that do not say.
pub const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// A pod, by identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl PodKey {
    #[must_use]
    pub fn of(pod: &SlimPod) -> Self {
        Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.as_deref().unwrap_or_default().to_owned(),
            uid: pod.metadata.uid.as_deref().unwrap_or_default().to_owned(),
        }
    }
}

/// A pod to delete now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDeletion {
    pub pod: PodKey,
    /// The time left until the node's termination time, in whole seconds (at least 0).
    pub grace_seconds: i64,
    /// The pod's own grace period, for the event.
    pub pod_grace_seconds: i64,
}

/// What to do now to drain a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    /// Delete these pods now (they would otherwise outlive the termination time).
    pub delete: Vec<PodDeletion>,
    /// Evict these pods (the first non-empty group, without the pods deleted above).
    pub evict: Vec<PodKey>,
    /// Pods that keep the node from draining, in every group.
    pub waiting: usize,
    /// Waiting pods that will never be evicted (`do-not-disrupt`), for the event.
    pub do_not_disrupt: usize,
    /// When the plan changes on its own: a pod's deletion time or a terminating pod turning
    /// stuck.
    pub next_deadline: Option<Timestamp>,
}

impl DrainPlan {
    /// Whether the node is drained.
    #[must_use]
    pub fn is_drained(&self) -> bool {
        self.waiting == 0
    }
}

fn is_mirror(pod: &SlimPod) -> bool {
    owned_by(pod, "v1", "Node")
}

fn is_daemon(pod: &SlimPod) -> bool {
    owned_by(pod, "apps/v1", "DaemonSet")
}

fn is_critical(pod: &SlimPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|class| CRITICAL_PRIORITY_CLASSES.contains(&class))
}

/// Whether the pod carries `karpenter.sh/do-not-disrupt=true`.
#[must_use]
pub fn has_do_not_disrupt(pod: &SlimPod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT))
        .is_some_and(|v| v == "true")
}

fn tolerates_disrupted(pod: &SlimPod) -> bool {
    let taint = Taint::new(labels::DISRUPTED_TAINT, None, TaintEffect::NoSchedule);
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|tolerations| {
            tolerations
                .iter()
                .any(|t| Toleration::from_api(t).tolerates(&taint))
        })
}

fn deletion(pod: &SlimPod) -> Option<Timestamp> {
    pod.metadata.deletion_timestamp.as_ref().map(|t| t.0)
}

fn grace_seconds(pod: &SlimPod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
}

fn is_stuck_terminating(pod: &SlimPod, now: Timestamp) -> bool {
    deletion(pod).is_some_and(|deleted| now.duration_since(deleted) > STUCK_TERMINATING_AFTER)
}

/// Karpenter's `IsDrainable`: the drain would make the pod leave (it does not tolerate the
/// disrupted taint, is not stuck terminating and is not static). The volumes of pods that are
/// not drainable stay attached and must not hold the instance's termination.
#[must_use]
pub fn is_drainable(pod: &SlimPod, now: Timestamp) -> bool {
    !tolerates_disrupted(pod) && !is_stuck_terminating(pod, now) && !is_mirror(pod)
}

/// Karpenter's `IsWaitingEviction`: the pod must leave before the node can go.
fn is_waiting(pod: &SlimPod, now: Timestamp) -> bool {
    is_terminal(pod).is_none() && is_drainable(pod, now)
}

/// Karpenter's `IsEvictable`: active, not tolerating the disrupted taint, not static, not
/// `do-not-disrupt`.
fn is_evictable(pod: &SlimPod) -> bool {
    is_terminal(pod).is_none()
        && deletion(pod).is_none()
        && !tolerates_disrupted(pod)
        && !is_mirror(pod)
        && !has_do_not_disrupt(pod)
}

fn earliest(current: Option<Timestamp>, candidate: Timestamp) -> Timestamp {
    current.map_or(candidate, |c| c.min(candidate))
}

/// The drain plan for a node's pods at `now`, with the NodeClaim's termination time if it has a
/// `terminationGracePeriod`.
#[must_use]
pub fn plan(
    pods: &[Arc<SlimPod>],
    now: Timestamp,
    termination_time: Option<Timestamp>,
) -> DrainPlan {
    let mut out = DrainPlan::default();
    let waiting: Vec<&SlimPod> = pods
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| is_waiting(p, now))
        .collect();
    out.waiting = waiting.len();
    for pod in &waiting {
        if let Some(deleted) = deletion(pod) {
            out.next_deadline = deleted
                .checked_add(STUCK_TERMINATING_AFTER)
                .ok()
                .map(|stuck| earliest(out.next_deadline, stuck));
            continue;
        }
        let Some(node_deadline) = termination_time else {
            continue;
        };
        let pod_grace = grace_seconds(pod);
        let delete_at = node_deadline
            .checked_sub(SignedDuration::from_secs(pod_grace))
            .unwrap_or(node_deadline);
        if now >= delete_at {
            let left = node_deadline.duration_since(now).as_secs().max(0);
            out.delete.push(PodDeletion {
                pod: PodKey::of(pod),
                grace_seconds: left,
                pod_grace_seconds: pod_grace,
            });
        } else {
            out.next_deadline = Some(earliest(out.next_deadline, delete_at));
        }
    }
    out.do_not_disrupt = waiting.iter().filter(|p| has_do_not_disrupt(p)).count();
    let groups: [fn(&SlimPod) -> bool; 4] = [
        |p| !is_critical(p) && !is_daemon(p),
        |p| !is_critical(p) && is_daemon(p),
        |p| is_critical(p) && !is_daemon(p),
        |p| is_critical(p) && is_daemon(p),
    ];
    if let Some(group) = groups
        .iter()
        .map(|in_group| waiting.iter().filter(|p| in_group(p)).collect::<Vec<_>>())
        .find(|group| !group.is_empty())
    {
        out.evict = group
            .into_iter()
            .filter(|p| is_evictable(p))
            .map(|p| PodKey::of(p))
            .filter(|key| !out.delete.iter().any(|d| &d.pod == key))
            .collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Toleration as ApiToleration;
    // The view's slim types, under the names the literals below use.
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use karpenter_core::apis::{
        SharedPodSpec as PodSpec, SlimPod as Pod, SlimPodStatus as PodStatus,
    };

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap()
    }

    #[derive(Default)]
    #[expect(
        clippy::struct_excessive_bools,
        reason = "a test builder: one flag per pod trait"
    )]
    struct PodBuilder {
        name: &'static str,
        daemon: bool,
        critical: bool,
        do_not_disrupt: bool,
        grace: Option<i64>,
        deleted: Option<Timestamp>,
        phase: Option<&'static str>,
        tolerates: bool,
        mirror: bool,
    }

    impl PodBuilder {
        fn build(self) -> Arc<Pod> {
            let mut owners = Vec::new();
            if self.daemon {
                owners.push(OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "DaemonSet".into(),
                    name: "ds".into(),
                    uid: "ds".into(),
                    ..OwnerReference::default()
                });
            }
            if self.mirror {
                owners.push(OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: "n".into(),
                    uid: "n".into(),
                    ..OwnerReference::default()
                });
            }
            Arc::new(Pod {
                metadata: ObjectMeta {
                    name: Some(self.name.into()),
                    namespace: Some("default".into()),
                    uid: Some(format!("uid-{}", self.name)),
                    owner_references: Some(owners),
                    annotations: self
                        .do_not_disrupt
                        .then(|| [(labels::DO_NOT_DISRUPT.to_owned(), "true".to_owned())].into()),
                    deletion_timestamp: self.deleted.map(Time),
                    ..ObjectMeta::default()
                }
                .into(),
                spec: Some(
                    PodSpec {
                        priority_class_name: self.critical.then(|| "system-node-critical".into()),
                        termination_grace_period_seconds: self.grace,
                        tolerations: self.tolerates.then(|| {
                            vec![ApiToleration {
                                key: Some(labels::DISRUPTED_TAINT.into()),
                                operator: Some("Exists".into()),
                                ..ApiToleration::default()
                            }]
                        }),
                        ..PodSpec::default()
                    }
                    .into(),
                ),
                status: Some(PodStatus {
                    phase: self.phase.map(Into::into),
                    ..PodStatus::default()
                }),
            })
        }
    }

    fn names(keys: &[PodKey]) -> Vec<&str> {
        keys.iter().map(|k| k.name.as_str()).collect()
    }

    #[test]
    fn groups_are_evicted_in_karpenters_order() {
        let mut pods = vec![
            PodBuilder {
                name: "critical-ds",
                daemon: true,
                critical: true,
                ..Default::default()
            }
            .build(),
            PodBuilder {
                name: "critical",
                critical: true,
                ..Default::default()
            }
            .build(),
            PodBuilder {
                name: "ds",
                daemon: true,
                ..Default::default()
            }
            .build(),
            PodBuilder {
                name: "app",
                ..Default::default()
            }
            .build(),
        ];
        let mut order = Vec::new();
        while !pods.is_empty() {
            let plan = plan(&pods, at(0), None);
            assert_eq!(plan.waiting, pods.len());
            order.extend(names(&plan.evict).into_iter().map(str::to_owned));
            pods.retain(|p| !plan.evict.contains(&PodKey::of(p)));
        }
        assert_eq!(order, ["app", "ds", "critical", "critical-ds"]);
    }

    #[test]
    fn finished_tolerating_static_and_stuck_pods_do_not_block() {
        let pods = vec![
            PodBuilder {
                name: "done",
                phase: Some("Succeeded"),
                ..Default::default()
            }
            .build(),
            PodBuilder {
                name: "tolerant",
                tolerates: true,
                ..Default::default()
            }
            .build(),
            PodBuilder {
                name: "static",
                mirror: true,
                ..Default::default()
            }
            .build(),
            PodBuilder {
                name: "stuck",
                deleted: Some(at(-61)),
                ..Default::default()
            }
            .build(),
        ];
        assert!(plan(&pods, at(0), None).is_drained());
    }

    #[test]
    fn do_not_disrupt_and_terminating_pods_wait_without_being_evicted() {
        let pods = vec![
            PodBuilder {
                name: "pinned",
                do_not_disrupt: true,
                ..Default::default()
            }
            .build(),
            PodBuilder {
                name: "leaving",
                deleted: Some(at(-10)),
                ..Default::default()
            }
            .build(),
        ];
        let plan = plan(&pods, at(0), None);
        assert_eq!(plan.waiting, 2);
        assert!(plan.evict.is_empty());
        assert_eq!(plan.do_not_disrupt, 1);
        assert_eq!(
            plan.next_deadline,
            Some(at(50)),
            "the terminating pod turns stuck"
        );
    }

    #[test]
    fn pods_are_deleted_early_to_get_their_grace_period_before_the_termination_time() {
        let pods = vec![
            PodBuilder {
                name: "slow",
                grace: Some(600),
                ..Default::default()
            }
            .build(),
            PodBuilder {
                name: "fast",
                grace: Some(30),
                do_not_disrupt: true,
                ..Default::default()
            }
            .build(),
        ];
        let deadline = at(900);
        let early = plan(&pods, at(0), Some(deadline));
        assert!(early.delete.is_empty());
        assert_eq!(early.next_deadline, Some(at(300)));
        let slow_due = plan(&pods, at(300), Some(deadline));
        assert_eq!(slow_due.delete.len(), 1);
        assert_eq!(slow_due.delete[0].pod.name, "slow");
        assert_eq!(slow_due.delete[0].grace_seconds, 600);
        assert!(
            slow_due.evict.is_empty(),
            "a pod being deleted is not also evicted"
        );
        let expired = plan(&pods, at(900), Some(deadline));
        assert_eq!(
            names(
                &expired
                    .delete
                    .iter()
                    .map(|d| d.pod.clone())
                    .collect::<Vec<_>>()
            ),
            ["slow", "fast"]
        );
        assert!(expired.delete.iter().all(|d| d.grace_seconds == 0));
    }
}

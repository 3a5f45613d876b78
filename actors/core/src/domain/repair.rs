//! Node Repair (Karpenter's `node.health`, behind the `NodeRepair` feature gate): which node
//! conditions make a node unhealthy, when an unhealthy node is due for replacement, and whether
//! its NodePool (or the cluster) is healthy enough to replace it.
//!
//! A cloud provider names its repair policies: a node condition type and status that, held for
//! the policy's toleration (counted from the condition's `lastTransitionTime`), make the node
//! due. When several policies match, the one whose toleration ends first decides. A pool may
//! have at most 20% of its nodes unhealthy, rounded up as `intstr` percentages are for
//! PodDisruptionBudgets (3 nodes: 1 may be unhealthy; 5 nodes: still 1), before repair stops:
//! nodes that all fail at once point at a cause that new nodes would share. The NodeClaim actor
//! reads the node and the pool, calls [`decide`] and [`is_healthy`], and deletes the NodeClaim
//! (`actors/src/nodeclaim/repair.rs`).

use std::time::Duration;

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::apis::SlimNode;

/// A node condition that, held for `toleration`, makes Node Repair replace the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition_type: &'static str,
    pub condition_status: &'static str,
    pub toleration: Duration,
}

/// Most conditions are tolerated this long: long enough for a kubelet restart or a network
/// blip to heal on its own (Karpenter AWS's `RepairPolicies`).
const REPAIR_TOLERATION: Duration = Duration::from_mins(30);
/// `AcceleratedHardwareReady=False` is repaired sooner: a GPU node whose accelerators failed
/// runs nothing it was launched for.
const ACCELERATED_HARDWARE_TOLERATION: Duration = Duration::from_mins(10);

/// The AWS cloud provider's repair policies (reference 2.2): the kubelet's `Ready` and the EKS
/// node monitoring agent's conditions.
pub const AWS_REPAIR_POLICIES: &[RepairPolicy] = &[
    RepairPolicy {
        condition_type: "Ready",
        condition_status: "False",
        toleration: REPAIR_TOLERATION,
    },
    RepairPolicy {
        condition_type: "Ready",
        condition_status: "Unknown",
        toleration: REPAIR_TOLERATION,
    },
    RepairPolicy {
        condition_type: "AcceleratedHardwareReady",
        condition_status: "False",
        toleration: ACCELERATED_HARDWARE_TOLERATION,
    },
    RepairPolicy {
        condition_type: "StorageReady",
        condition_status: "False",
        toleration: REPAIR_TOLERATION,
    },
    RepairPolicy {
        condition_type: "NetworkingReady",
        condition_status: "False",
        toleration: REPAIR_TOLERATION,
    },
    RepairPolicy {
        condition_type: "KernelReady",
        condition_status: "False",
        toleration: REPAIR_TOLERATION,
    },
    RepairPolicy {
        condition_type: "ContainerRuntimeReady",
        condition_status: "False",
        toleration: REPAIR_TOLERATION,
    },
];

/// The share of a pool's nodes that may be unhealthy while repair goes on (Karpenter's
/// `allowedUnhealthyPercent`).
pub const ALLOWED_UNHEALTHY_PERCENT: usize = 20;

/// A condition of the node that a policy matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unhealthy {
    /// The matching policy.
    pub policy: RepairPolicy,
    /// When its toleration ends: the condition's `lastTransitionTime` plus the toleration.
    pub repair_at: Timestamp,
}

/// What Node Repair does about one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No condition matches a policy.
    Healthy,
    /// A condition matches, its toleration ends at `repair_at` (the soonest of all matches):
    /// look again then.
    Tolerated(Unhealthy),
    /// A condition has matched for its whole toleration: replace the node (if its pool is
    /// healthy).
    Due(Unhealthy),
}

fn condition<'a>(node: &'a SlimNode, kind: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == kind))
}

/// The condition of `node` that `policy` matches, if any.
fn matching<'a>(node: &'a SlimNode, policy: &RepairPolicy) -> Option<&'a NodeCondition> {
    condition(node, policy.condition_type).filter(|c| c.status == policy.condition_status)
}

/// Whether any policy matches one of the node's conditions, however recently it turned (the
/// pool health count, Karpenter's `areNodesHealthy`).
#[must_use]
pub fn is_unhealthy(node: &SlimNode, policies: &[RepairPolicy]) -> bool {
    policies.iter().any(|p| matching(node, p).is_some())
}

/// The matching condition whose toleration ends soonest (the first policy wins a tie), and
/// whether that end is past at `now` (an end equal to `now` is past, as in Karpenter).
///
/// A matching condition without a `lastTransitionTime` counts from the node's creation (the
/// condition cannot be older), or from the Unix epoch without one. Karpenter reads the missing
/// time as Go's zero time, which makes such a node due at once, even one that registered a
/// second ago with `Ready=False`; the kubelet always sets the time, so only hand-written nodes
/// see the difference.
#[must_use]
pub fn decide(node: &SlimNode, policies: &[RepairPolicy], now: Timestamp) -> Decision {
    let created = node
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    let soonest = policies
        .iter()
        .filter_map(|policy| {
            let since = matching(node, policy)?
                .last_transition_time
                .as_ref()
                .map_or(created, |t| t.0);
            let toleration =
                SignedDuration::try_from(policy.toleration).unwrap_or(SignedDuration::MAX);
            let repair_at = since.saturating_add(toleration).unwrap_or(Timestamp::MAX);
            Some(Unhealthy {
                policy: *policy,
                repair_at,
            })
        })
        .reduce(|best, next| {
            if next.repair_at < best.repair_at {
                next
            } else {
                best
            }
        });
    match soonest {
        None => Decision::Healthy,
        Some(unhealthy) if now < unhealthy.repair_at => Decision::Tolerated(unhealthy),
        Some(unhealthy) => Decision::Due(unhealthy),
    }
}

/// How many of `total` nodes may be unhealthy: 20% rounded up (`intstr` with `roundUp`).
#[must_use]
pub fn allowed_unhealthy(total: usize) -> usize {
    (total * ALLOWED_UNHEALTHY_PERCENT).div_ceil(100)
}

/// Whether a pool (or the cluster) of `nodes` is healthy enough for repair: its unhealthy nodes
/// are at most [`allowed_unhealthy`] of them. The node being repaired counts too.
#[must_use]
pub fn is_healthy<'a>(
    nodes: impl IntoIterator<Item = &'a SlimNode>,
    policies: &[RepairPolicy],
) -> bool {
    let (total, unhealthy) = nodes.into_iter().fold((0, 0), |(total, unhealthy), node| {
        (
            total + 1,
            unhealthy + usize::from(is_unhealthy(node, policies)),
        )
    });
    unhealthy <= allowed_unhealthy(total)
}

/// A condition type as the `condition` label of `karpenter_nodeclaims_unhealthy_disrupted_total`
/// writes it (Karpenter's `pretty.ToSnakeCase`): `AcceleratedHardwareReady` →
/// `accelerated_hardware_ready`.
#[must_use]
pub fn snake_case(kind: &str) -> String {
    let chars: Vec<char> = kind.chars().collect();
    let mut out = String::with_capacity(kind.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let previous = chars[i - 1];
            let next_is_lower = chars.get(i + 1).is_some_and(char::is_ascii_lowercase);
            // A word starts at a capital after a lowercase letter or digit ("hardwareReady"),
            // or at the last capital of a run followed by lowercase ("HTTPServer").
            if previous.is_ascii_lowercase()
                || previous.is_ascii_digit()
                || (next_is_lower && previous != '_')
            {
                out.push('_');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, NodeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    const SINCE: &str = "2025-06-01T12:00:00Z";

    fn node(conditions: &[(&str, &str, &str)]) -> SlimNode {
        SlimNode::from(Node {
            status: Some(NodeStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(kind, status, since)| NodeCondition {
                            type_: (*kind).to_owned(),
                            status: (*status).to_owned(),
                            last_transition_time: Some(Time(at(since))),
                            ..NodeCondition::default()
                        })
                        .collect(),
                ),
                ..NodeStatus::default()
            }),
            ..Node::default()
        })
    }

    fn after(minutes: i64, seconds: i64) -> Timestamp {
        at(SINCE)
            .checked_add(SignedDuration::from_secs(minutes * 60 + seconds))
            .unwrap()
    }

    /// The instant Node Repair would replace a node with only this condition, checked one
    /// second before (tolerated) and at that instant (due).
    fn repaired_after(kind: &str, status: &str) -> Option<Duration> {
        let node = node(&[(kind, status, SINCE)]);
        let Decision::Tolerated(unhealthy) = decide(&node, AWS_REPAIR_POLICIES, at(SINCE)) else {
            return None;
        };
        let toleration = Duration::try_from(unhealthy.repair_at.duration_since(at(SINCE))).unwrap();
        let just_before = unhealthy
            .repair_at
            .checked_sub(SignedDuration::from_secs(1))
            .unwrap();
        assert!(matches!(
            decide(&node, AWS_REPAIR_POLICIES, just_before),
            Decision::Tolerated(_)
        ));
        assert_eq!(
            decide(&node, AWS_REPAIR_POLICIES, unhealthy.repair_at),
            Decision::Due(unhealthy)
        );
        Some(toleration)
    }

    #[test]
    fn each_aws_policy_tolerates_its_condition_for_its_own_window() {
        let thirty = Some(Duration::from_mins(30));
        assert_eq!(repaired_after("Ready", "False"), thirty);
        assert_eq!(repaired_after("Ready", "Unknown"), thirty);
        assert_eq!(
            repaired_after("AcceleratedHardwareReady", "False"),
            Some(Duration::from_mins(10))
        );
        for kind in [
            "StorageReady",
            "NetworkingReady",
            "KernelReady",
            "ContainerRuntimeReady",
        ] {
            assert_eq!(repaired_after(kind, "False"), thirty, "{kind}");
        }
        assert_eq!(AWS_REPAIR_POLICIES.len(), 7);
    }

    #[test]
    fn healthy_statuses_and_unknown_conditions_match_no_policy() {
        for conditions in [
            vec![("Ready", "True", SINCE)],
            vec![("AcceleratedHardwareReady", "Unknown", SINCE)],
            vec![
                ("KernelReady", "True", SINCE),
                ("MemoryPressure", "True", SINCE),
            ],
            vec![],
        ] {
            let node = node(&conditions);
            assert_eq!(
                decide(&node, AWS_REPAIR_POLICIES, after(600, 0)),
                Decision::Healthy,
                "{conditions:?}"
            );
            assert!(!is_unhealthy(&node, AWS_REPAIR_POLICIES));
        }
        assert_eq!(
            decide(&node(&[("Ready", "False", SINCE)]), &[], after(600, 0)),
            Decision::Healthy,
            "a provider without policies repairs nothing"
        );
    }

    #[test]
    fn of_several_matching_conditions_the_soonest_toleration_end_decides() {
        // Ready went False first, but the accelerators' shorter window ends sooner.
        let node = node(&[
            ("Ready", "False", SINCE),
            ("AcceleratedHardwareReady", "False", "2025-06-01T12:05:00Z"),
            ("KernelReady", "False", "2025-06-01T12:01:00Z"),
        ]);
        let Decision::Tolerated(unhealthy) = decide(&node, AWS_REPAIR_POLICIES, after(1, 0)) else {
            panic!("tolerated");
        };
        assert_eq!(unhealthy.policy.condition_type, "AcceleratedHardwareReady");
        assert_eq!(unhealthy.repair_at, after(15, 0));
        assert!(matches!(
            decide(&node, AWS_REPAIR_POLICIES, after(15, 0)),
            Decision::Due(u) if u.policy.condition_type == "AcceleratedHardwareReady"
        ));

        // An accelerator failure long after Ready went False does not postpone the repair.
        let late = self::node(&[
            ("Ready", "False", SINCE),
            ("AcceleratedHardwareReady", "False", "2025-06-01T12:25:00Z"),
        ]);
        assert!(matches!(
            decide(&late, AWS_REPAIR_POLICIES, after(30, 0)),
            Decision::Due(u) if u.policy.condition_type == "Ready"
        ));
    }

    #[test]
    fn a_matching_condition_without_a_transition_time_counts_from_the_nodes_creation() {
        let mut node = node(&[("Ready", "Unknown", SINCE)]);
        node.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_transition_time = None;
        assert!(
            matches!(
                decide(&node, AWS_REPAIR_POLICIES, at(SINCE)),
                Decision::Due(_)
            ),
            "no creation time either: due at once"
        );
        node.metadata.creation_timestamp = Some(Time(after(5, 0)));
        assert!(matches!(
            decide(&node, AWS_REPAIR_POLICIES, after(34, 59)),
            Decision::Tolerated(u) if u.repair_at == after(35, 0)
        ));
    }

    #[test]
    fn a_fifth_of_the_nodes_rounded_up_may_be_unhealthy() {
        assert_eq!(allowed_unhealthy(0), 0);
        assert_eq!(allowed_unhealthy(1), 1);
        assert_eq!(allowed_unhealthy(3), 1);
        assert_eq!(allowed_unhealthy(5), 1);
        assert_eq!(allowed_unhealthy(6), 2);
        assert_eq!(allowed_unhealthy(10), 2);
        assert_eq!(allowed_unhealthy(11), 3);

        let healthy = node(&[("Ready", "True", SINCE)]);
        // Unhealthy by policy even while still tolerated: it counts against the pool.
        let unhealthy = node(&[("Ready", "False", "2025-06-01T12:29:00Z")]);
        let pool = |bad: usize, total: usize| -> Vec<SlimNode> {
            (0..total)
                .map(|i| {
                    if i < bad {
                        unhealthy.clone()
                    } else {
                        healthy.clone()
                    }
                })
                .collect()
        };
        assert!(is_healthy(&pool(1, 3), AWS_REPAIR_POLICIES), "1 of 3");
        assert!(!is_healthy(&pool(2, 3), AWS_REPAIR_POLICIES), "2 of 3");
        assert!(is_healthy(&pool(1, 5), AWS_REPAIR_POLICIES), "1 of 5");
        assert!(!is_healthy(&pool(2, 5), AWS_REPAIR_POLICIES), "2 of 5");
        assert!(is_healthy(&pool(2, 10), AWS_REPAIR_POLICIES), "2 of 10");
        assert!(is_healthy(&pool(1, 1), AWS_REPAIR_POLICIES), "a lone node");
    }

    #[test]
    fn condition_types_are_snake_cased_as_karpenter_labels_them() {
        assert_eq!(snake_case("Ready"), "ready");
        assert_eq!(
            snake_case("AcceleratedHardwareReady"),
            "accelerated_hardware_ready"
        );
        assert_eq!(
            snake_case("ContainerRuntimeReady"),
            "container_runtime_ready"
        );
        assert_eq!(snake_case("HTTPServerReady"), "http_server_ready");
        assert_eq!(snake_case("Disk2Pressure"), "disk2_pressure");
    }
}

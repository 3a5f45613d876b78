//! What the Provisioner last decided for each pod, and the answer to "why is this pod still
//! pending" (`karpenter explain pod NAMESPACE/NAME`).
//!
//! Data flow: each provisioning run returns a [`Decision`] per pod it looked at; the
//! [`super::ProvisionerActor`] keeps the latest one per pod ([`PodDecision`]) and, asked with
//! [`super::Explain`], joins it with what the cluster view says about the pod now into a
//! [`PodExplanation`]. The daemon's HTTP server sends that as JSON; the `explain` command and
//! `karpenter simulate` print it with [`render`]. The types serialize both ways so the CLI can
//! read what the daemon wrote; a NodePool's structured reason travels as JSON in
//! [`PoolVerdict::detail`].

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Why one NodePool did not take a pod, or was not considered at all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolVerdict {
    pub node_pool: String,
    /// One line, e.g. `did not tolerate taint dedicated=db:NoSchedule`.
    pub reason: String,
    /// The scheduler's structured reason (requirement, taint, topology counts, instance type
    /// checks), when there is one.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}

/// What the Provisioner decided for a pod in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum Decision {
    /// It fits on a node that exists or is launching; kube-scheduler should bind it there.
    #[serde(rename_all = "camelCase")]
    Nominated {
        node: Option<String>,
        node_claim: Option<String>,
    },
    /// A NodeClaim was created for it.
    #[serde(rename_all = "camelCase")]
    Provisioned {
        node_claim: String,
        node_pool: String,
        /// The cheapest few of the NodeClaim's instance types.
        instance_types: Vec<String>,
        /// How many instance types the NodeClaim allows.
        instance_type_count: usize,
    },
    /// The plan gave it a new NodeClaim that was not created (NodePool limits reached since the
    /// solve, or the create call failed); the next batch tries again.
    #[serde(rename_all = "camelCase")]
    NotLaunched { node_pool: String, reason: String },
    /// No NodePool can take it: one verdict per NodePool, in the order they were tried.
    #[serde(rename_all = "camelCase")]
    Unschedulable { pools: Vec<PoolVerdict> },
    /// It could use a capacity reservation that is used up; it waits rather than falling back.
    #[serde(rename_all = "camelCase")]
    Deferred { pools: Vec<PoolVerdict> },
    /// It could not be read or asks for something Karpenter refuses; it is left alone.
    #[serde(rename_all = "camelCase")]
    Ignored { reason: String },
    /// The run could not decide (the solve timed out or failed); the next batch tries again.
    #[serde(rename_all = "camelCase")]
    Undecided { reason: String },
}

impl Decision {}

/// The message of a `FailedScheduling` event and the first line of an explanation: every
/// NodePool's reason, Karpenter's wording (`incompatible with nodepool "x", ...`).
#[must_use]
pub fn failure_message(pools: &[PoolVerdict]) -> String {
    if pools.is_empty() {
        return "no nodepools found".to_owned();
    }
    pools
        .iter()
        .map(|p| format!("incompatible with nodepool {:?}, {}", p.node_pool, p.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A pod's latest decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDecision {
    /// RFC 3339, from the daemon's clock.
    pub decided_at: String,
    /// The provisioning run (batch) that decided, counted from 1 since the daemon started.
    pub run: u64,
    pub decision: Decision,
}

/// The pod as the cluster view shows it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "camelCase")]
pub enum PodState {
    NotFound,
    /// Bound to a node.
    Bound {
        node: String,
    },
    /// Waiting for a node, and something the Provisioner acts on.
    Pending,
    /// Not something the Provisioner acts on (bound elsewhere, terminal, owned by a DaemonSet,
    /// a static pod, preempting, gated).
    #[serde(rename_all = "camelCase")]
    NotProvisionable {
        reason: String,
    },
}

/// The answer to `karpenter explain pod NAMESPACE/NAME`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodExplanation {
    /// `namespace/name`.
    pub pod: String,
    pub state: PodState,
    /// The latest decision about the pod, if a run has looked at it since it last became
    /// pending.
    pub decision: Option<PodDecision>,
    /// NodePools that run left out before scheduling (not ready, deleting, no instance types).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_node_pools: Vec<PoolVerdict>,
    /// Whether a batch is open or a run is in progress now.
    #[serde(default)]
    pub provisioning_in_progress: bool,
}

/// The explanation as text for a terminal, one fact per line.
#[must_use]
pub fn render(explanation: &PodExplanation) -> String {
    let mut out = String::new();
    let pod = &explanation.pod;
    match &explanation.state {
        PodState::NotFound => {
            let _ = writeln!(out, "Pod {pod} was not found.");
        }
        PodState::Bound { node } => {
            let _ = writeln!(out, "Pod {pod} is bound to node {node}.");
        }
        PodState::Pending => {
            let _ = writeln!(out, "Pod {pod} is pending.");
        }
        PodState::NotProvisionable { reason } => {
            let _ = writeln!(
                out,
                "Pod {pod} is not waiting for Karpenter to provision capacity: {reason}."
            );
        }
    }
    match &explanation.decision {
        None => {
            let wait = if explanation.provisioning_in_progress {
                "a batch is in progress; ask again in a few seconds"
            } else {
                "no provisioning run has looked at it since it became pending"
            };
            let _ = writeln!(out, "No scheduling decision yet: {wait}.");
        }
        Some(decision) => render_decision(&mut out, decision),
    }
    if !explanation.skipped_node_pools.is_empty() {
        let _ = writeln!(out, "NodePools left out of that run:");
        for pool in &explanation.skipped_node_pools {
            let _ = writeln!(out, "  nodepool {:?}: {}", pool.node_pool, pool.reason);
        }
    }
    out
}

fn render_decision(out: &mut String, decision: &PodDecision) {
    let when = format!("run {}, {}", decision.run, decision.decided_at);
    match &decision.decision {
        Decision::Nominated { node, node_claim } => {
            let target = match (node, node_claim) {
                (Some(node), Some(claim)) => format!("node {node} (nodeclaim {claim})"),
                (Some(node), None) => format!("node {node}"),
                (None, Some(claim)) => format!("nodeclaim {claim}, still launching"),
                (None, None) => "an existing node".to_owned(),
            };
            let _ = writeln!(out, "Nominated to {target} ({when}).");
        }
        Decision::Provisioned {
            node_claim,
            node_pool,
            instance_types,
            instance_type_count,
        } => {
            let _ = writeln!(
                out,
                "Provisioned nodeclaim {node_claim} from nodepool {node_pool:?} ({when})."
            );
            if !instance_types.is_empty() {
                let more = instance_type_count.saturating_sub(instance_types.len());
                let _ = write!(out, "  instance types: {}", instance_types.join(", "));
                if more > 0 {
                    let _ = write!(out, " and {more} more");
                }
                out.push('\n');
            }
        }
        Decision::NotLaunched { node_pool, reason } => {
            let _ = writeln!(
                out,
                "A new node from nodepool {node_pool:?} was planned but not created ({when}): {reason}; the next batch tries again."
            );
        }
        Decision::Unschedulable { pools } => {
            if pools.is_empty() {
                let _ = writeln!(out, "No NodePool can run it: no nodepools found ({when}).");
            } else {
                let _ = writeln!(out, "No NodePool can run it ({when}):");
                render_pools(out, pools);
            }
        }
        Decision::Deferred { pools } => {
            let _ = writeln!(
                out,
                "Waiting for reserved capacity rather than falling back to on-demand or spot ({when}):"
            );
            render_pools(out, pools);
        }
        Decision::Ignored { reason } => {
            let _ = writeln!(out, "Ignored by the provisioner ({when}): {reason}.");
        }
        Decision::Undecided { reason } => {
            let _ = writeln!(
                out,
                "The last run could not decide ({when}): {reason}; the next batch tries again."
            );
        }
    }
}

fn render_pools(out: &mut String, pools: &[PoolVerdict]) {
    for pool in pools {
        let _ = writeln!(out, "  nodepool {:?}: {}", pool.node_pool, pool.reason);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(pool: &str, reason: &str) -> PoolVerdict {
        PoolVerdict {
            node_pool: pool.to_owned(),
            reason: reason.to_owned(),
            detail: serde_json::Value::Null,
        }
    }

    #[test]
    fn an_unschedulable_pod_lists_every_nodepool_and_the_skipped_ones() {
        let explanation = PodExplanation {
            pod: "default/web".to_owned(),
            state: PodState::Pending,
            decision: Some(PodDecision {
                decided_at: "2026-01-01T00:00:00Z".to_owned(),
                run: 3,
                decision: Decision::Unschedulable {
                    pools: vec![
                        verdict("default", "did not tolerate taint a:NoSchedule"),
                        verdict("gpu", "no instance type has enough resources"),
                    ],
                },
            }),
            skipped_node_pools: vec![verdict("spot", "not ready")],
            provisioning_in_progress: false,
        };
        let text = render(&explanation);
        assert_eq!(
            text,
            "Pod default/web is pending.\n\
             No NodePool can run it (run 3, 2026-01-01T00:00:00Z):\n  \
             nodepool \"default\": did not tolerate taint a:NoSchedule\n  \
             nodepool \"gpu\": no instance type has enough resources\n\
             NodePools left out of that run:\n  \
             nodepool \"spot\": not ready\n"
        );
    }

    #[test]
    fn explanations_survive_a_json_round_trip() {
        let explanation = PodExplanation {
            pod: "ns/p".to_owned(),
            state: PodState::Bound {
                node: "n1".to_owned(),
            },
            decision: Some(PodDecision {
                decided_at: "t".to_owned(),
                run: 1,
                decision: Decision::Provisioned {
                    node_claim: "default-abcde".to_owned(),
                    node_pool: "default".to_owned(),
                    instance_types: vec!["m5.large".to_owned()],
                    instance_type_count: 12,
                },
            }),
            skipped_node_pools: Vec::new(),
            provisioning_in_progress: true,
        };
        let json = serde_json::to_string(&explanation).expect("serializes");
        let back: PodExplanation = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, explanation);
        assert!(render(&back).contains("m5.large and 11 more"));
    }

    #[test]
    fn the_failure_message_uses_karpenters_wording() {
        assert_eq!(
            failure_message(&[verdict("a", "x"), verdict("b", "y")]),
            "incompatible with nodepool \"a\", x; incompatible with nodepool \"b\", y"
        );
        assert_eq!(failure_message(&[]), "no nodepools found");
    }
}

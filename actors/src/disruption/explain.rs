//! `karpenter explain node NAME`: why a node is or is not being disrupted now, from the disruption
//! actor's last round (its candidates, blocks, budgets, the replacements it priced and refused)
//! and its queue, plus the NodeClaim's own consolidation clock. Past Karpenter, which only
//! leaves events behind.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::LastRound;
use super::queue::{CommandState, DisruptionRecord};
use crate::ports::cluster_view::ClusterView;
use karpenter_core::apis::conditions::{ConditionStatus, nodeclaim as cond};

/// One reason bearing on the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "verdict")]
pub enum NodeVerdict {
    /// A command in the orchestration queue is replacing or deleting it.
    Disrupting {
        command: u64,
        method: String,
        reason: String,
    },
    /// A command chose it and waits for its 15-second validation.
    Validating { command: u64, method: String },
    /// The round's node checks rejected it.
    Blocked { message: String },
    /// A method filtered it out (`Unconsolidatable`, a pod that blocks, ...).
    Filtered { method: String, message: String },
    /// Its NodeClaim is not `Consolidatable` yet.
    NotConsolidatable { detail: String },
    /// Its NodePool's budget allows no disruption for this reason now.
    Budget {
        node_pool: String,
        reason: String,
        allowed: i64,
        disrupting: usize,
    },
    /// Consolidation priced a replacement and found none cheaper.
    NoCheaperReplacement {
        method: String,
        price: f64,
        cheapest: Option<(String, f64)>,
    },
    /// A command that included it was abandoned or failed.
    Previously {
        command: u64,
        method: String,
        outcome: String,
    },
    /// The last round did not see the node.
    NotSeen,
    /// Nothing holds it back; no method found a cheaper arrangement that includes it.
    NoAction,
}

/// The answer to `explain node`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeExplanation {
    pub node: String,
    /// When the last round ran (RFC 3339).
    pub round_at: Option<String>,
    pub verdicts: Vec<NodeVerdict>,
}

fn consolidation_clock(view: &dyn ClusterView, node_claim: &str) -> Option<String> {
    let claim = view.nodeclaim(node_claim)?;
    let status = claim.status.as_ref();
    let consolidatable = status
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == cond::CONSOLIDATABLE)
        })
        .is_some_and(|c| c.status == ConditionStatus::True);
    if consolidatable {
        return None;
    }
    let pool = claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(karpenter_core::apis::labels::NODEPOOL))
        .and_then(|p| view.nodepool(p));
    let after = pool.map(|p| p.spec.disruption.consolidate_after.0.clone());
    let last_event = status
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(|t| t.0.to_string());
    Some(match (after.as_deref(), last_event) {
        (Some("Never"), _) => "consolidateAfter is Never".to_owned(),
        (Some(after), Some(at)) => {
            format!("consolidatable {after} after the last pod event ({at})")
        }
        (Some(after), None) => format!("consolidatable {after} after initialization"),
        (None, _) => "its NodePool is gone".to_owned(),
    })
}

/// Explains `node` from the last round, the queue and the history.
#[must_use]
pub fn explain(
    node: &str,
    last: Option<&LastRound>,
    view: &dyn ClusterView,
    queued: Option<(u64, &'static str, String)>,
    validating: Option<(u64, &'static str)>,
    history: &[DisruptionRecord],
) -> NodeExplanation {
    let mut verdicts = Vec::new();
    if let Some((command, method, reason)) = queued {
        verdicts.push(NodeVerdict::Disrupting {
            command,
            method: method.to_owned(),
            reason,
        });
    }
    if let Some((command, method)) = validating {
        verdicts.push(NodeVerdict::Validating {
            command,
            method: method.to_owned(),
        });
    }
    let Some(last) = last else {
        verdicts.push(NodeVerdict::NotSeen);
        return NodeExplanation {
            node: node.to_owned(),
            round_at: None,
            verdicts,
        };
    };
    let Some(super::SeenNode {
        node_claim,
        node_pool,
    }) = last.nodes.get(node)
    else {
        verdicts.push(NodeVerdict::NotSeen);
        return NodeExplanation {
            node: node.to_owned(),
            round_at: Some(last.at.clone()),
            verdicts,
        };
    };
    let decision = &last.decision;
    for blocked in decision.blocked.iter().filter(|b| b.node == node) {
        if let Some(message) = blocked.blocker.message() {
            verdicts.push(NodeVerdict::Blocked { message });
        }
    }
    if let Some(detail) = node_claim
        .as_deref()
        .and_then(|c| consolidation_clock(view, c))
    {
        verdicts.push(NodeVerdict::NotConsolidatable { detail });
    }
    for report in &decision.methods {
        let method = super::queue::method_name(report.method);
        for event in report.events.iter().filter(|e| e.node == node) {
            verdicts.push(NodeVerdict::Filtered {
                method: method.to_owned(),
                message: event.message.clone(),
            });
        }
        if let Some(pool) = node_pool {
            for budget in report
                .budgets
                .iter()
                .filter(|b| &b.node_pool == pool && b.available == 0)
            {
                verdicts.push(NodeVerdict::Budget {
                    node_pool: pool.clone(),
                    reason: budget.reason.as_str().to_owned(),
                    allowed: budget.allowed,
                    disrupting: budget.disrupting,
                });
            }
        }
        for considered in report
            .replacements
            .iter()
            .filter(|r| r.candidates.iter().any(|c| c == node))
        {
            verdicts.push(NodeVerdict::NoCheaperReplacement {
                method: method.to_owned(),
                price: considered.price,
                cheapest: considered.cheapest.clone(),
            });
        }
    }
    if let Some(record) = history
        .iter()
        .rev()
        .find(|r| r.candidates.iter().any(|c| c.name == node))
        && let CommandState::Abandoned(outcome) | CommandState::Failed(outcome) = &record.state
    {
        verdicts.push(NodeVerdict::Previously {
            command: record.id,
            method: record.method.to_owned(),
            outcome: outcome.clone(),
        });
    }
    if verdicts.is_empty() {
        verdicts.push(NodeVerdict::NoAction);
    }
    NodeExplanation {
        node: node.to_owned(),
        round_at: Some(last.at.clone()),
        verdicts,
    }
}

/// The explanation as text for the terminal.
#[must_use]
pub fn render(explanation: &NodeExplanation) -> String {
    let mut out = format!("node {}", explanation.node);
    if let Some(at) = &explanation.round_at {
        let _ = write!(out, " (last disruption round at {at})");
    }
    out.push('\n');
    for verdict in &explanation.verdicts {
        let line = match verdict {
            NodeVerdict::Disrupting {
                command,
                method,
                reason,
            } => format!("being disrupted by command {command} ({method}, {reason})"),
            NodeVerdict::Validating { command, method } => {
                format!("chosen by command {command} ({method}); waiting 15s to validate it")
            }
            NodeVerdict::Blocked { message } => format!("blocked: {message}"),
            NodeVerdict::Filtered { method, message } => format!("{method}: {message}"),
            NodeVerdict::NotConsolidatable { detail } => format!("not consolidatable yet: {detail}"),
            NodeVerdict::Budget {
                node_pool,
                reason,
                allowed,
                disrupting,
            } => format!(
                "budget: nodepool {node_pool} allows {allowed} disruption(s) for {reason} and {disrupting} node(s) are already disrupting or not ready"
            ),
            NodeVerdict::NoCheaperReplacement {
                method,
                price,
                cheapest,
            } => match cheapest {
                Some((name, cheapest)) => format!(
                    "{method}: no cheaper replacement (the candidates cost ${price:.4}/h; the cheapest replacement {name} costs ${cheapest:.4}/h)"
                ),
                None => format!("{method}: no replacement could take its pods (the candidates cost ${price:.4}/h)"),
            },
            NodeVerdict::Previously {
                command,
                method,
                outcome,
            } => format!("command {command} ({method}) that included it ended: {outcome}"),
            NodeVerdict::NotSeen => "not seen by the last disruption round".to_owned(),
            NodeVerdict::NoAction => {
                "nothing blocks it; no disruption method found a cheaper arrangement that includes it"
                    .to_owned()
            }
        };
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}

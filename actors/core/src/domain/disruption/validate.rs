//! Validation after the 15-second wait (spec section 8): given a command decided at T and a
//! fresh input at T + 15 s, keep it (Emptiness possibly with fewer candidates) or abandon it
//! with the reason, as Karpenter's validators do per method. Drift commands are not validated.

use std::collections::BTreeSet;

use super::budgets::BudgetMapping;
use super::candidates::{self, Candidate};
use super::input::DisruptionInput;
use super::methods::Round;
use super::{Command, Method, MethodReport};

/// Why a command was abandoned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abandoned {
    /// Karpenter's validation error text.
    pub reason: String,
    /// What to add to `karpenter_voluntary_disruption_failed_validations_total
    /// {consolidation_type}`.
    pub failed_validations: usize,
}

/// The verdict on a command.
#[derive(Debug, Clone, PartialEq)]
pub enum Validation {
    /// Execute this command: the original, or for Emptiness the candidates still valid.
    /// `failed_validations` counts the Emptiness candidates dropped.
    Keep {
        command: Command,
        failed_validations: usize,
    },
    Abandon(Abandoned),
}

fn abandon(reason: impl Into<String>, failed_validations: usize) -> Validation {
    Validation::Abandon(Abandoned {
        reason: reason.into(),
        failed_validations,
    })
}

/// Re-checks a command against a fresh input.
#[must_use]
pub fn validate(command: &Command, fresh: &DisruptionInput) -> Validation {
    match command.method {
        Method::Drift => Validation::Keep {
            command: command.clone(),
            failed_validations: 0,
        },
        Method::Emptiness => emptiness(command, fresh),
        Method::MultiNode | Method::SingleNode | Method::Repack => consolidation(command, fresh),
    }
}

/// Emptiness (8.1): the candidates that are still empty candidates, within a fresh budget.
fn emptiness(command: &Command, fresh: &DisruptionInput) -> Validation {
    let round = Round::new(fresh);
    let names: BTreeSet<&str> = command.candidates.iter().map(|c| c.name.as_str()).collect();
    let still: Vec<&Candidate> = round
        .candidates
        .all
        .iter()
        .filter(|c| names.contains(c.name.as_str()))
        .filter(|c| candidates::emptiness_filter(c, fresh).is_ok())
        .collect();
    let total = command.candidates.len();
    if still.is_empty() {
        return abandon(format!("{total} candidates are no longer valid"), total);
    }
    let mut mapping = BudgetMapping::from_counts(
        &round.pool_counts,
        &fresh.pools,
        command.method.reason(),
        fresh.now,
    );
    let mut kept = BTreeSet::new();
    let mut failed = 0;
    for candidate in still {
        if fresh.nodes[candidate.node].is_nominated(fresh.now)
            || !mapping.take(&candidate.node_pool)
        {
            failed += 1;
        } else {
            kept.insert(candidate.name.as_str());
        }
    }
    if kept.is_empty() {
        return abandon(format!("{total} candidates are no longer valid"), failed);
    }
    let mut reduced = command.clone();
    reduced
        .candidates
        .retain(|c| kept.contains(c.name.as_str()));
    Validation::Keep {
        failed_validations: failed,
        command: reduced,
    }
}

/// Multi-node, single-node and repack (8.2): the candidates are all still candidates within
/// a fresh budget, and a fresh simulation reaches the same kind of decision with the
/// command's replacement types still on offer. Karpenter checks the candidates once more
/// after simulating, against pods that bound meanwhile; over one fresh snapshot that second
/// check is the first one, so it is not repeated (the actor may validate again on a newer
/// snapshot).
fn consolidation(command: &Command, fresh: &DisruptionInput) -> Validation {
    let total = command.candidates.len();
    let mut round = Round::new(fresh);
    let mut still: Vec<Candidate> = Vec::new();
    for wanted in &command.candidates {
        match round
            .candidates
            .all
            .iter()
            .find(|c| c.name == wanted.name)
            .filter(|c| candidates::consolidation_filter(c, fresh).is_ok())
        {
            Some(candidate) => still.push(candidate.clone()),
            None => return abandon(format!("{total} candidates are no longer valid"), total),
        }
    }
    let mut mapping = BudgetMapping::from_counts(
        &round.pool_counts,
        &fresh.pools,
        command.method.reason(),
        fresh.now,
    );
    for candidate in &still {
        if fresh.nodes[candidate.node].is_nominated(fresh.now) {
            return abandon("a candidate was nominated during validation", total);
        }
        if !mapping.take(&candidate.node_pool) {
            return abandon(
                "a candidate can no longer be disrupted without violating budgets",
                total,
            );
        }
    }
    let refs: Vec<&Candidate> = still.iter().collect();
    let mut report = MethodReport::new(command.method);
    let simulation = round.sims.simulate(&refs, &mut report);
    if !simulation.all_non_pending_scheduled() {
        return abandon(simulation.error_text(), 0);
    }
    let fresh_claims = simulation.new_node_claims();
    let keep = || Validation::Keep {
        command: command.clone(),
        failed_validations: 0,
    };
    match (command.replacements.len(), fresh_claims.len()) {
        (0, 0) => keep(),
        (0, n) => abandon(
            format!("a delete command would now need {n} new nodeclaims"),
            0,
        ),
        (_, 0) => abandon("a replace command would now be a delete", 0),
        (wanted, n) if wanted != n || (n > 1 && command.method != Method::Repack) => {
            abandon(format!("the command would now need {n} new nodeclaims"), 0)
        }
        _ => {
            // Every replacement's instance types must still be among a fresh NodeClaim's
            // (names only, as upstream); each fresh NodeClaim matches one replacement.
            let mut used = vec![false; fresh_claims.len()];
            for replacement in &command.replacements {
                let matched = fresh_claims.iter().enumerate().position(|(i, claim)| {
                    !used[i]
                        && replacement
                            .instance_types
                            .iter()
                            .all(|t| claim.instance_types.iter().any(|f| f.name == t.name))
                });
                match matched {
                    Some(i) => used[i] = true,
                    None => {
                        return abandon(
                            "the replacement's instance types are no longer all on offer",
                            0,
                        );
                    }
                }
            }
            keep()
        }
    }
}

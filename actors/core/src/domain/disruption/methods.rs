//! The round and its methods in v1.5's order (spec sections 1 and 6): Emptiness, Drift,
//! multi-node consolidation, single-node consolidation; the first command wins.

use std::collections::BTreeSet;

use crate::domain::scheduling::{NewNodeClaim, Placement};

use super::budgets::{BudgetMapping, PoolCounts, sanity_check};
use super::candidates::{self, Candidate, Candidates};
use super::consolidation::{self, Consolidation, candidate_price, sentence};
use super::input::DisruptionInput;
use super::repack;
use super::simulate::{Simulation, Simulator};
use super::{
    Command, CommandCandidate, Decision, Destination, DisruptionError, Method, MethodOutcome,
    MethodReport, NodeEvent, NodeEventReason,
};

/// One round's shared state.
pub(super) struct Round<'a> {
    pub input: &'a DisruptionInput,
    pub candidates: Candidates,
    pub sims: Sims<'a>,
    /// The nodes each pool's budgets count, for every method of the round.
    pub pool_counts: PoolCounts<'a>,
}

/// The round's simulator, made on first use.
pub(super) struct Sims<'a> {
    input: &'a DisruptionInput,
    simulator: Option<Simulator<'a>>,
}

impl<'a> Round<'a> {
    pub fn new(input: &'a DisruptionInput) -> Self {
        Self {
            input,
            candidates: candidates::build(input),
            sims: Sims {
                input,
                simulator: None,
            },
            pool_counts: PoolCounts::of(&input.nodes),
        }
    }
}

impl Sims<'_> {
    /// Simulates removing the candidates, counting the work on the report.
    pub fn simulate(&mut self, candidates: &[&Candidate], report: &mut MethodReport) -> Simulation {
        let input = self.input;
        let simulator = self.simulator.get_or_insert_with(|| Simulator::new(input));
        let before = simulator.work;
        let simulation = simulator.simulate(candidates);
        report.simulations += 1;
        report.work += simulator.work - before;
        simulation
    }

    /// The total work and simulation count so far.
    fn totals(&self) -> (usize, u64) {
        self.simulator
            .as_ref()
            .map_or((0, 0), |s| (s.simulations, s.work))
    }
}

/// Decides one disruption round (see the module docs of [`super`]).
#[must_use]
pub fn decide(input: &DisruptionInput) -> Decision {
    decide_observed(input, &mut |_| {})
}

/// [`decide`], calling `method_done` as each method finishes (before the next starts), so a
/// caller can time the methods (Karpenter's `decision_evaluation_duration_seconds`) without the
/// decision reading a clock.
pub fn decide_observed(input: &DisruptionInput, method_done: &mut dyn FnMut(Method)) -> Decision {
    let mut round = Round::new(input);
    let mut decision = Decision {
        command: None,
        error: None,
        methods: Vec::new(),
        blocked: round.candidates.blocked.clone(),
        budget_errors: input
            .pools
            .iter()
            .filter_map(|p| {
                let errors = sanity_check(&p.disruption.budgets, input.now);
                (!errors.is_empty()).then(|| (p.name.clone(), errors))
            })
            .collect(),
        single_node_unseen_pools: input.single_node_unseen_pools.clone(),
        simulations: 0,
        work: 0,
    };
    let mut methods = vec![
        Method::Emptiness,
        Method::Drift,
        Method::MultiNode,
        Method::SingleNode,
    ];
    if input.options.repack {
        methods.push(Method::Repack);
    }
    for method in methods {
        let mut report = MethodReport::new(method);
        let result = match method {
            Method::Emptiness => Ok(emptiness(&mut round, &mut report)),
            Method::Drift => Ok(drift(&mut round, &mut report)),
            Method::MultiNode => multi_node(&mut round, &mut report),
            Method::SingleNode => {
                let (command, unseen) = single_node(&mut round, &mut report);
                decision.single_node_unseen_pools = unseen;
                Ok(command)
            }
            Method::Repack => repack::repack(&mut round, &mut report),
        };
        method_done(method);
        match result {
            Ok(Some(command)) => {
                if !report.timed_out {
                    report.outcome = MethodOutcome::Command;
                }
                decision.methods.push(report);
                decision.command = Some(command);
                break;
            }
            Ok(None) => decision.methods.push(report),
            Err(error) => {
                report.outcome = MethodOutcome::Failed(error.clone());
                decision.methods.push(report);
                decision.error = Some(error);
                break;
            }
        }
    }
    (decision.simulations, decision.work) = round.sims.totals();
    decision
}

/// Filters the round's candidates for a method, publishing the filter's events.
fn eligible<'r>(
    all: &'r Candidates,
    report: &mut MethodReport,
    filter: impl Fn(&Candidate) -> Result<(), candidates::Unconsolidatable>,
) -> Vec<&'r Candidate> {
    let mut out = Vec::new();
    for candidate in &all.all {
        match filter(candidate) {
            Ok(()) => out.push(candidate),
            Err(reason) => {
                if let Some(message) = reason.message() {
                    report.events.push(event(
                        candidate,
                        NodeEventReason::Unconsolidatable,
                        message,
                    ));
                }
            }
        }
    }
    report.eligible = out.len();
    out
}

pub(super) fn event(candidate: &Candidate, reason: NodeEventReason, message: String) -> NodeEvent {
    NodeEvent {
        node: candidate.name.clone(),
        node_claim: Some(candidate.node_claim.clone()),
        reason,
        message,
    }
}

/// The budget mapping for the method, recorded on the report.
pub(super) fn budgets(round: &Round<'_>, report: &mut MethodReport) -> BudgetMapping {
    let input = round.input;
    let mapping = BudgetMapping::from_counts(
        &round.pool_counts,
        &input.pools,
        report.method.reason(),
        input.now,
    );
    report.budgets.clone_from(&mapping.pools);
    mapping
}

/// Builds a command from its candidates, replacements and simulation.
pub(super) fn command(
    method: Method,
    candidates: &[&Candidate],
    input: &DisruptionInput,
    simulation: Option<&Simulation>,
    replacements: Vec<NewNodeClaim>,
    price_before: Option<f64>,
) -> Command {
    let priced = price_before.is_some();
    let price_after = priced.then(|| {
        replacements
            .iter()
            .map(|r| {
                r.instance_types
                    .iter()
                    .map(|t| t.worst_launch_price(&r.requirements))
                    .fold(0.0, f64::max)
            })
            .sum()
    });
    let mut placements = Vec::new();
    if let Some(simulation) = simulation {
        let where_to = simulation.plan.placements(simulation.pods.len());
        for (pod, placement) in simulation.pods.iter().zip(where_to) {
            let destination = match placement {
                Some(Placement::Existing(node)) => input
                    .scheduling
                    .existing_nodes
                    .get(node)
                    .map(|n| Destination::Existing(n.name.clone())),
                Some(Placement::NewNodeClaim(i)) => Some(Destination::Replacement(i)),
                None => None,
            };
            if let Some(destination) = destination {
                placements.push((pod.key.clone(), destination));
            }
        }
    }
    Command {
        method,
        candidates: candidates
            .iter()
            .map(|c| CommandCandidate {
                name: c.name.clone(),
                node_claim: c.node_claim.clone(),
                node_pool: c.node_pool.clone(),
                instance_type: c.instance_type.as_ref().map(|t| t.name.clone()),
                capacity_type: c.capacity_type.clone(),
                zone: c.zone.clone(),
                price: if priced {
                    candidate_price(c, input).ok().flatten()
                } else {
                    None
                },
                reschedulable_pods: c.reschedulable.len(),
            })
            .collect(),
        replacements,
        price_before,
        price_after,
        placements,
    }
}

/// The command a consolidation computation found (`None` for nothing).
fn consolidation_command(
    method: Method,
    candidates: &[&Candidate],
    input: &DisruptionInput,
    consolidation: Consolidation,
) -> Option<Command> {
    match consolidation {
        Consolidation::Nothing { .. } => None,
        Consolidation::Delete { simulation } => Some(command(
            method,
            candidates,
            input,
            Some(&simulation),
            Vec::new(),
            consolidation::candidates_price(candidates, input).ok(),
        )),
        Consolidation::Replace {
            simulation,
            replacement,
            price_before,
        } => Some(command(
            method,
            candidates,
            input,
            Some(&simulation),
            vec![replacement],
            Some(price_before),
        )),
    }
}

/// Emptiness (spec 6.1): every empty consolidatable candidate the budgets allow, deleted.
fn emptiness(round: &mut Round<'_>, report: &mut MethodReport) -> Option<Command> {
    let input = round.input;
    let eligible = eligible(&round.candidates, report, |c| {
        candidates::emptiness_filter(c, input)
    });
    if eligible.is_empty() {
        return None;
    }
    let mut mapping = budgets(round, report);
    if input.memos.emptiness {
        report.outcome = MethodOutcome::Memo;
        return None;
    }
    let mut taken = Vec::new();
    let mut constrained = false;
    for candidate in eligible {
        if mapping.take(&candidate.node_pool) {
            taken.push(candidate);
        } else {
            constrained = true;
        }
    }
    if taken.is_empty() {
        report.outcome = MethodOutcome::Nothing {
            mark_consolidated: !constrained,
        };
        return None;
    }
    Some(command(
        Method::Emptiness,
        &taken,
        input,
        None,
        Vec::new(),
        None,
    ))
}

/// Drift (spec 6.2): the oldest drifted node with pods whose simulation schedules them all,
/// replaced by whatever the simulation needs.
fn drift(round: &mut Round<'_>, report: &mut MethodReport) -> Option<Command> {
    let input = round.input;
    let all: Vec<Candidate> = round
        .candidates
        .all
        .iter()
        .filter(|c| candidates::drift_filter(c, input))
        .cloned()
        .collect();
    report.eligible = all.len();
    if all.is_empty() {
        return None;
    }
    let mapping = budgets(round, report);
    let mut ordered: Vec<&Candidate> = all.iter().collect();
    let since = |c: &Candidate| {
        input.nodes[c.node]
            .node_claim
            .as_ref()
            .and_then(|n| n.drifted_since)
    };
    ordered.sort_by(|a, b| since(a).cmp(&since(b)).then_with(|| a.name.cmp(&b.name)));
    for candidate in ordered {
        // Empty drifted nodes are left to Emptiness.
        if candidate.is_empty() || mapping.remaining(&candidate.node_pool) == 0 {
            continue;
        }
        let simulation = round.sims.simulate(&[candidate], report);
        if !simulation.all_non_pending_scheduled() {
            report.events.push(event(
                candidate,
                NodeEventReason::DisruptionBlocked,
                sentence(&simulation.error_text()),
            ));
            continue;
        }
        let replacements = simulation.plan.new_node_claims.clone();
        return Some(command(
            Method::Drift,
            &[candidate],
            input,
            Some(&simulation),
            replacements,
            None,
        ));
    }
    report.outcome = MethodOutcome::Nothing {
        mark_consolidated: false,
    };
    None
}

/// The consolidation candidates the budgets allow, in cost order, each taking one from its
/// pool (multi-node and repack), and whether a budget of 0 held one back.
pub(super) fn budgeted<'c>(
    eligible: &[&'c Candidate],
    mapping: &mut BudgetMapping,
) -> (Vec<&'c Candidate>, bool) {
    let mut kept = Vec::new();
    let mut constrained = false;
    for candidate in eligible {
        if mapping.remaining(&candidate.node_pool) == 0 {
            constrained = true;
            continue;
        }
        if candidate.is_empty() {
            continue;
        }
        mapping.take(&candidate.node_pool);
        kept.push(*candidate);
    }
    (kept, constrained)
}

/// Whether a method's work budget is spent.
pub(super) fn over_budget(report: &MethodReport, budget: Option<u64>) -> bool {
    budget.is_some_and(|b| report.work >= b)
}

/// Multi-node consolidation (spec 6.4): the longest prefix of up to 101 candidates that can
/// be deleted, or replaced by one cheaper node not of their own types, by binary search.
fn multi_node(
    round: &mut Round<'_>,
    report: &mut MethodReport,
) -> Result<Option<Command>, DisruptionError> {
    let input = round.input;
    let eligible = eligible(&round.candidates, report, |c| {
        candidates::consolidation_filter(c, input)
    });
    if eligible.is_empty() {
        return Ok(None);
    }
    let mut mapping = budgets(round, report);
    if input.memos.multi_node {
        report.outcome = MethodOutcome::Memo;
        return Ok(None);
    }
    let (kept, constrained) = budgeted(&eligible, &mut mapping);
    let nothing = MethodOutcome::Nothing {
        mark_consolidated: !constrained,
    };
    if kept.len() < 2 {
        report.outcome = nothing;
        return Ok(None);
    }
    let cap = input.options.multi_node_limit.max(2) - 1;
    let mut low = 1;
    let mut high = if kept.len() <= cap {
        kept.len() - 1
    } else {
        cap
    };
    let mut saved: Option<Command> = None;
    while low <= high {
        if over_budget(report, input.options.multi_node_budget) {
            // Karpenter's timeout: the last valid command, or nothing (memo set unless a
            // budget held a candidate back).
            report.timed_out = true;
            report.outcome = if saved.is_some() {
                MethodOutcome::TimedOut
            } else {
                nothing
            };
            return Ok(saved);
        }
        let mid = usize::midpoint(low, high);
        let prefix = &kept[..=mid];
        let simulation = round.sims.simulate(prefix, report);
        let computed = consolidation::compute(simulation, prefix, input)?;
        if let Consolidation::Nothing {
            considered: Some(considered),
            ..
        } = &computed
        {
            report.replacements.push(considered.clone());
        }
        let consolidation = match computed {
            // Karpenter's filterOutSameType: a replacement no cheaper than a candidate of its
            // own type is no move at all.
            Consolidation::Replace {
                simulation,
                mut replacement,
                price_before,
            } => match consolidation::filter_out_same_type(&replacement, prefix, input) {
                Some(types) => {
                    consolidation::set_instance_types(&mut replacement, types);
                    Consolidation::Replace {
                        simulation,
                        replacement,
                        price_before,
                    }
                }
                None => Consolidation::Nothing {
                    event: None,
                    considered: None,
                },
            },
            other => other,
        };
        let workable = consolidation_command(Method::MultiNode, prefix, input, consolidation);
        match workable {
            Some(command) => {
                saved = Some(command);
                low = mid + 1;
            }
            None => high = mid - 1,
        }
    }
    if saved.is_none() {
        report.outcome = nothing;
    }
    Ok(saved)
}

/// The single-node order (spec 6.5): by cost within each NodePool, interleaved across pools,
/// the pools a previous timeout left unseen first (then by name).
fn interleave<'c>(eligible: &[&'c Candidate], unseen: &[String]) -> Vec<&'c Candidate> {
    let mut pools: Vec<&str> = eligible.iter().map(|c| c.node_pool.as_str()).collect();
    pools.sort_unstable();
    pools.dedup();
    pools.sort_by_key(|p| !unseen.iter().any(|u| u == p));
    let groups: Vec<Vec<&Candidate>> = pools
        .iter()
        .map(|p| {
            eligible
                .iter()
                .filter(|c| c.node_pool == *p)
                .copied()
                .collect()
        })
        .collect();
    let longest = groups.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(eligible.len());
    for i in 0..longest {
        for group in &groups {
            if let Some(candidate) = group.get(i) {
                out.push(*candidate);
            }
        }
    }
    out
}

/// Single-node consolidation (spec 6.5): the first candidate, in interleaved cost order, that
/// can be deleted or replaced by one cheaper node. Returns the NodePools left unseen.
fn single_node(round: &mut Round<'_>, report: &mut MethodReport) -> (Option<Command>, Vec<String>) {
    let input = round.input;
    let eligible = eligible(&round.candidates, report, |c| {
        candidates::consolidation_filter(c, input)
    });
    if eligible.is_empty() {
        return (None, input.single_node_unseen_pools.clone());
    }
    let mapping = budgets(round, report);
    if input.memos.single_node {
        report.outcome = MethodOutcome::Memo;
        return (None, input.single_node_unseen_pools.clone());
    }
    let ordered = interleave(&eligible, &input.single_node_unseen_pools);
    let mut unseen: BTreeSet<String> = eligible.iter().map(|c| c.node_pool.clone()).collect();
    let mut constrained = false;
    for (i, candidate) in ordered.iter().enumerate() {
        if input.memos.single_node_judged.contains(&candidate.name) {
            unseen.remove(&candidate.node_pool);
            continue;
        }
        if over_budget(report, input.options.single_node_budget) {
            report.timed_out = true;
            report.evaluated = i;
            report.outcome = MethodOutcome::TimedOut;
            return (None, unseen.into_iter().collect());
        }
        unseen.remove(&candidate.node_pool);
        if mapping.remaining(&candidate.node_pool) == 0 {
            constrained = true;
            continue;
        }
        if candidate.is_empty() {
            continue;
        }
        let simulation = round.sims.simulate(&[candidate], report);
        match consolidation::compute(simulation, &[candidate], input) {
            // Karpenter logs "failed computing consolidation" (no event) and goes on.
            Err(error) => report.errors.push((candidate.name.clone(), error)),
            Ok(Consolidation::Nothing {
                event: message,
                considered,
            }) => {
                report.judged.push(candidate.name.clone());
                report.replacements.extend(considered);
                if let Some(message) = message {
                    report.events.push(event(
                        candidate,
                        NodeEventReason::Unconsolidatable,
                        message,
                    ));
                }
            }
            Ok(found) => {
                report.evaluated = i + 1;
                let command = consolidation_command(Method::SingleNode, &[candidate], input, found);
                return (command, Vec::new());
            }
        }
    }
    report.evaluated = ordered.len();
    report.outcome = MethodOutcome::Nothing {
        mark_consolidated: !constrained,
    };
    (None, Vec::new())
}

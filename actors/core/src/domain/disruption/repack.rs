//! Past Karpenter: N→M repacking, behind [`super::DisruptionOptions::repack`].
//!
//! Karpenter replaces a set of nodes only by *one* cheaper node ("never splits"). When the pods
//! of several underutilized nodes need more than one node, it gives up, even if two cheaper
//! nodes could take the pods of five; and when topology spread sends the pods of one large node
//! to two zones, it keeps the large node however much two small ones would save. Repacking runs
//! after the four methods found nothing: it searches the budgeted consolidation candidates,
//! cheapest to disrupt first, for the longest prefix of 2 to 16 (longest first), then for each
//! single candidate, whose pods the scheduler places on existing nodes plus M ≥ 2 new
//! NodeClaims that cost less together than the candidates (M < N merges, M ≥ N splits), within
//! its own work budget ([`super::DisruptionOptions::repack_budget`]).
//!
//! Savings are guaranteed the way Karpenter guarantees them for one replacement: each
//! replacement `j` is priced at `w_j`, the worst launch price of its cheapest instance type;
//! the command needs `Σ w_j < C = P · (1 − MIN_REPACK_SAVING)` (`P` the candidates' price), and
//! replacement `j` keeps only the instance types whose worst launch price is below
//! `w_j + (C − Σ w) / M`, so whatever types the launches pick, the replacements cost less than
//! `C`. A replacement allowed both spot and
//! on-demand is narrowed to spot (its worst launch price is the spot one). All-spot candidates
//! with spot replacements need the `SpotToSpotConsolidation` gate.
//!
//! Why this cannot oscillate: every command, Karpenter's or this one, strictly lowers the sum of
//! the nodes' prices (a launched node's price is at most the worst launch price it was admitted
//! with), and a cluster with a fixed workload has finitely many states, so no sequence of
//! commands can come back to a state. `tests/disruption.rs` runs rounds to a fixed point and
//! checks it.

use std::sync::Arc;

use crate::apis::labels;
use crate::domain::instance_type::{InstanceType, order_by_price, satisfies_min_values};
use crate::domain::requirements::Requirement;
use crate::domain::scheduling::NewNodeClaim;

use super::candidates::{self, Candidate};
use super::consolidation::{candidates_price, set_instance_types};
use super::input::DisruptionInput;
use super::methods::{Round, Sims, budgeted, budgets, command, over_budget};
use super::simulate::Simulation;
use super::{Command, DisruptionError, Method, MethodOutcome, MethodReport};

/// Fewest candidates a merge takes (a single candidate is tried as a split).
const MIN_MERGE: usize = 2;
/// Most candidates a merge takes: a merge into two or more nodes saves the per-node overhead of
/// the nodes it removes, which a few candidates already show; longer prefixes cost much more to
/// simulate (multi-node consolidation covers long prefixes into one node).
const MAX_MERGE: usize = 16;
/// Fewest replacements: one replacement is multi- and single-node consolidation's job.
const MIN_REPLACEMENTS: usize = 2;
/// The least share of the candidates' price a repack must save: moving pods for a rounding
/// error (two nodes of half the size at exactly half the price) is churn, not a saving.
pub const MIN_REPACK_SAVING: f64 = 0.01;

/// Repacks the budgeted candidates (see the module docs): merges first (the longest prefix of
/// two or more budgeted candidates), then splits (each candidate alone, within its pool's
/// budget, cheapest to disrupt first, as single-node consolidation walks them).
pub(super) fn repack(
    round: &mut Round<'_>,
    report: &mut MethodReport,
) -> Result<Option<Command>, DisruptionError> {
    let input = round.input;
    let eligible: Vec<&Candidate> = round
        .candidates
        .all
        .iter()
        .filter(|c| candidates::consolidation_filter(c, input).is_ok())
        .collect();
    report.eligible = eligible.len();
    if eligible.is_empty() {
        return Ok(None);
    }
    let mut mapping = budgets(round, report);
    if input.memos.repack {
        report.outcome = MethodOutcome::Memo;
        return Ok(None);
    }
    let fresh = mapping.clone();
    let (kept, _constrained) = budgeted(&eligible, &mut mapping);
    // Unlike Karpenter's methods, a repack that found nothing is remembered even when budgets
    // held candidates back: the splits below try every candidate within its pool's budget, and
    // the memo lasts until the cluster changes or for 5 minutes (when a budget schedule may have
    // opened), so a small cluster under a 10% budget does not search again every 10 seconds.
    report.outcome = MethodOutcome::Nothing {
        mark_consolidated: true,
    };
    // Unlike Karpenter's N→1 search, a longer prefix is not harder here (more nodes leave
    // more room to save one), so the search goes from the longest prefix down.
    let longest = kept
        .len()
        .min(input.options.multi_node_limit)
        .min(MAX_MERGE);
    for size in (MIN_MERGE..=longest).rev() {
        if let Some(command) = try_prefix(&mut round.sims, input, report, &kept[..size])? {
            return Ok(Some(command));
        }
        if report.timed_out {
            return Ok(None);
        }
    }
    for candidate in eligible
        .iter()
        .filter(|c| !c.is_empty() && fresh.remaining(&c.node_pool) > 0)
    {
        if let Some(command) = try_prefix(&mut round.sims, input, report, &[*candidate])? {
            return Ok(Some(command));
        }
        if report.timed_out {
            return Ok(None);
        }
    }
    Ok(None)
}

/// Simulates removing `prefix` and builds the repack command if it saves money.
fn try_prefix(
    sims: &mut Sims<'_>,
    input: &DisruptionInput,
    report: &mut MethodReport,
    prefix: &[&Candidate],
) -> Result<Option<Command>, DisruptionError> {
    if over_budget(report, input.options.repack_budget) {
        report.timed_out = true;
        return Ok(None);
    }
    let simulation = sims.simulate(prefix, report);
    let Some(replacements) = evaluate(&simulation, prefix, input)? else {
        return Ok(None);
    };
    let price = candidates_price(prefix, input)?;
    Ok(Some(command(
        Method::Repack,
        prefix,
        input,
        Some(&simulation),
        replacements,
        Some(price),
    )))
}

/// The replacements that make removing `candidates` a saving, if any.
fn evaluate(
    simulation: &Simulation,
    candidates: &[&Candidate],
    input: &DisruptionInput,
) -> Result<Option<Vec<NewNodeClaim>>, DisruptionError> {
    if !simulation.all_non_pending_scheduled() {
        return Ok(None);
    }
    let claims = simulation.new_node_claims();
    // Deletes and single replacements are the other methods'.
    if claims.len() < MIN_REPLACEMENTS {
        return Ok(None);
    }
    let price = candidates_price(candidates, input)?;
    if price <= 0.0 {
        return Ok(None);
    }
    let all_spot = candidates
        .iter()
        .all(|c| c.capacity_type.as_deref() == Some(labels::CAPACITY_TYPE_SPOT));
    let mut claims: Vec<NewNodeClaim> = claims.to_vec();
    let mut cheapest = Vec::with_capacity(claims.len());
    for claim in &mut claims {
        let allows = |value: &str| {
            claim
                .requirements
                .get(labels::CAPACITY_TYPE)
                .is_none_or(|r| r.has(value))
        };
        if all_spot && allows(labels::CAPACITY_TYPE_SPOT) && !input.options.spot_to_spot {
            return Ok(None);
        }
        if allows(labels::CAPACITY_TYPE_SPOT) && allows(labels::CAPACITY_TYPE_ON_DEMAND) {
            claim.requirements.add(Requirement::in_values(
                labels::CAPACITY_TYPE,
                &[labels::CAPACITY_TYPE_SPOT],
            ));
        }
        let mut types = claim.instance_types.clone();
        order_by_price(&mut types, &claim.requirements);
        let worst = types
            .iter()
            .map(|t| t.worst_launch_price(&claim.requirements))
            .fold(f64::MAX, f64::min);
        if worst >= f64::MAX {
            return Ok(None);
        }
        cheapest.push(worst);
        claim.instance_types = types;
    }
    let floor: f64 = cheapest.iter().sum();
    let ceiling = price * (1.0 - MIN_REPACK_SAVING);
    if floor >= ceiling {
        return Ok(None);
    }
    let share = (ceiling - floor) / approx_count(claims.len());
    for (claim, worst) in claims.iter_mut().zip(cheapest) {
        let threshold = worst + share;
        let kept: Vec<Arc<InstanceType>> = claim
            .instance_types
            .iter()
            .filter(|t| t.worst_launch_price(&claim.requirements) < threshold)
            .cloned()
            .collect();
        if kept.is_empty() || satisfies_min_values(&kept, &claim.requirements).is_err() {
            return Ok(None);
        }
        set_instance_types(claim, kept);
    }
    Ok(Some(claims))
}

/// A small count as a float.
fn approx_count(n: usize) -> f64 {
    f64::from(u32::try_from(n).unwrap_or(u32::MAX))
}

//! Disruption budgets (spec section 5): whether each budget of a NodePool is active now, how
//! many nodes it allows, the most restrictive per reason, and the per-round mapping of NodePool
//! to nodes that may still be disrupted once those already disrupting are subtracted.
//!
//! Karpenter's rules, kept exactly: a budget without schedule and duration is always active;
//! otherwise it is active when the schedule fired within the last `duration`
//! (`[hit, hit + duration)`, robfig's search from `now - duration`), and a schedule that never
//! fires within five years counts as active. `nodes` is a count (not capped by the node count)
//! or a percentage rounded up. An inactive budget allows everything (2147483647) without its
//! `nodes` being read. Any budget of a NodePool that cannot be evaluated (bad schedule, bad
//! duration, bad `nodes`) makes the NodePool allow 0 for every reason: budgets fail closed.
//! `budgets: []` means no budget and so no limit; `reasons: []` applies to no reason.

use std::collections::BTreeMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::apis::duration;
use crate::apis::nodepool::{Budget, DisruptionReason};

use super::cron::{CronError, CronSchedule};
use super::input::{PoolInput, StateNode};

/// What an inactive budget, or no budget, allows (Go's `math.MaxInt32`).
pub const UNLIMITED: i64 = 2_147_483_647;

/// A budget that cannot be evaluated; its NodePool then allows nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("budgets[{index}].schedule: {source}")]
    Schedule {
        index: usize,
        #[source]
        source: CronError,
    },
    #[error("budgets[{index}].duration: {source}")]
    Duration {
        index: usize,
        #[source]
        source: duration::InvalidDuration,
    },
    #[error("budgets[{index}].nodes: invalid value {value:?}: {problem}")]
    Nodes {
        index: usize,
        value: String,
        problem: &'static str,
    },
}

impl BudgetError {
    /// A short label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::Schedule { .. } => "invalid_schedule",
            Self::Duration { .. } => "invalid_duration",
            Self::Nodes { .. } => "invalid_nodes",
        }
    }
}

/// Whether one budget is active at `now` (Karpenter's `Budget.IsActive`).
pub fn is_active(budget: &Budget, index: usize, now: Timestamp) -> Result<bool, BudgetError> {
    if budget.schedule.is_none() && budget.duration.is_none() {
        return Ok(true);
    }
    // A duration without a schedule parses as an empty schedule (an error); a schedule
    // without a duration searches from now and so is never active, as upstream.
    let schedule = CronSchedule::parse(budget.schedule.as_deref().unwrap_or(""))
        .map_err(|source| BudgetError::Schedule { index, source })?;
    let window = match &budget.duration {
        None => std::time::Duration::ZERO,
        Some(text) => {
            duration::parse(text).map_err(|source| BudgetError::Duration { index, source })?
        }
    };
    let window = SignedDuration::try_from(window).unwrap_or(SignedDuration::MAX);
    let checkpoint = now.checked_sub(window).unwrap_or(Timestamp::MIN);
    Ok(match schedule.next_after(checkpoint) {
        // robfig's zero time is never after now: a schedule that never fires is active.
        None => true,
        Some(next) => next <= now,
    })
}

/// How many nodes one budget allows out of `node_count` at `now` (Karpenter's
/// `Budget.GetAllowedDisruptions`).
pub fn budget_allows(
    budget: &Budget,
    index: usize,
    node_count: usize,
    now: Timestamp,
) -> Result<i64, BudgetError> {
    if !is_active(budget, index, now)? {
        return Ok(UNLIMITED);
    }
    nodes_value(&budget.nodes, node_count).map_err(|problem| BudgetError::Nodes {
        index,
        value: budget.nodes.clone(),
        problem,
    })
}

/// `intstr.GetScaledValueFromIntOrPercent(..., roundUp = true)` over Karpenter's
/// `GetIntStrFromValue`: an integer as it is (saturated to 32 bits where Go would wrap), or a
/// percentage of the node count rounded up.
fn nodes_value(text: &str, node_count: usize) -> Result<i64, &'static str> {
    if let Some(count) = go_atoi(text) {
        return Ok(count.clamp(i64::from(i32::MIN), i64::from(i32::MAX)));
    }
    let Some(percent) = text.strip_suffix('%') else {
        return Err("string is not a percentage");
    };
    let percent = go_atoi(percent).ok_or("not an integer percentage")?;
    let count = i64::try_from(node_count).unwrap_or(i64::MAX);
    // ceil(p * n / 100) in integers (p and n are small; saturate anyway).
    let product = i128::from(percent) * i128::from(count);
    let rounded = if product >= 0 {
        (product + 99) / 100
    } else {
        product / 100
    };
    Ok(i64::try_from(rounded).unwrap_or(i64::MAX))
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits.
fn go_atoi(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'+') => (false, &text[1..]),
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: i64 = digits.parse().ok()?;
    Some(if negative { -value } else { value })
}

/// A NodePool's allowance for one reason, with the errors that forced it to 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowance {
    /// The most restrictive active budget's value, [`UNLIMITED`] when none applies, 0 when
    /// any budget errored.
    pub allowed: i64,
    pub errors: Vec<BudgetError>,
}

/// Karpenter's `GetAllowedDisruptionsByReason` with `MustGetAllowedDisruptions`' fail-closed
/// rule: every budget is evaluated (those of other reasons too), the applicable ones (no
/// `reasons`, or `reasons` naming this one) give the minimum, any error gives 0.
#[must_use]
pub fn allowed_disruptions(
    budgets: &[Budget],
    reason: DisruptionReason,
    node_count: usize,
    now: Timestamp,
) -> Allowance {
    let mut allowed = UNLIMITED;
    let mut errors = Vec::new();
    for (index, budget) in budgets.iter().enumerate() {
        let value = match budget_allows(budget, index, node_count, now) {
            Ok(value) => value,
            Err(error) => {
                errors.push(error);
                0
            }
        };
        if budget.reasons.as_ref().is_none_or(|r| r.contains(&reason)) {
            allowed = allowed.min(value);
        }
    }
    if !errors.is_empty() {
        allowed = 0;
    }
    Allowance { allowed, errors }
}

/// The budget errors of a NodePool as Karpenter's round start logs them: evaluated for each
/// method's reason with a dummy count of 100 nodes, stopping at the first reason that errors.
#[must_use]
pub fn sanity_check(budgets: &[Budget], now: Timestamp) -> Vec<BudgetError> {
    /// The node count Karpenter's sanity check passes.
    const DUMMY_NODE_COUNT: usize = 100;
    for reason in [
        DisruptionReason::Empty,
        DisruptionReason::Drifted,
        DisruptionReason::Underutilized,
    ] {
        let allowance = allowed_disruptions(budgets, reason, DUMMY_NODE_COUNT, now);
        if !allowance.errors.is_empty() {
            return allowance.errors;
        }
    }
    Vec::new()
}

/// One NodePool's budget for one method round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolBudget {
    pub node_pool: String,
    pub reason: DisruptionReason,
    /// Initialized managed nodes of the pool whose instance is not terminating.
    pub nodes: usize,
    /// Of those, the ones not Ready or already marked for deletion.
    pub disrupting: usize,
    /// The raw allowance: `karpenter_nodepools_allowed_disruptions{nodepool, reason}`.
    pub allowed: i64,
    /// What this round may still disrupt: `max(allowed - disrupting, 0)`.
    pub available: i64,
    /// Karpenter publishes `DisruptionBlocked` on the NodePool ("No allowed disruptions for
    /// disruption reason <Reason> due to blocking budget") when the pool has nodes and the
    /// raw allowance is 0.
    pub blocked: bool,
    pub errors: Vec<BudgetError>,
}

impl PoolBudget {
    /// The `DisruptionBlocked` message on the NodePool.
    #[must_use]
    pub fn blocked_message(&self) -> String {
        format!(
            "No allowed disruptions for disruption reason {} due to blocking budget",
            self.reason.as_str()
        )
    }
}

/// What each NodePool may still disrupt in one method round (Karpenter's
/// `BuildDisruptionBudgetMapping`); methods decrement it as they take candidates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BudgetMapping {
    pub pools: Vec<PoolBudget>,
    remaining: BTreeMap<String, i64>,
}

/// Per NodePool, its nodes that budgets count and how many of them are disrupting already:
/// the same for every method of a round, so a round counts once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolCounts<'a>(BTreeMap<&'a str, (usize, usize)>);

impl<'a> PoolCounts<'a> {
    /// Counts the initialized nodes of every pool (instances terminating apart), and those not
    /// ready or marked for deletion among them.
    #[must_use]
    pub fn of(nodes: &'a [StateNode]) -> Self {
        let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for node in nodes {
            let Some(claim) = &node.node_claim else {
                continue;
            };
            if !node.initialized || claim.instance_terminating {
                continue;
            }
            let Some(pool) = node.node_pool() else {
                continue;
            };
            let entry = counts.entry(pool).or_default();
            entry.0 += 1;
            if !node.ready || node.marked_for_deletion {
                entry.1 += 1;
            }
        }
        Self(counts)
    }
}

impl BudgetMapping {
    /// Counts the nodes of every pool and evaluates its budgets for `reason`.
    #[must_use]
    pub fn build(
        nodes: &[StateNode],
        pools: &[PoolInput],
        reason: DisruptionReason,
        now: Timestamp,
    ) -> Self {
        Self::from_counts(&PoolCounts::of(nodes), pools, reason, now)
    }

    /// Evaluates every pool's budgets for `reason` over nodes counted already.
    #[must_use]
    pub fn from_counts(
        counts: &PoolCounts<'_>,
        pools: &[PoolInput],
        reason: DisruptionReason,
        now: Timestamp,
    ) -> Self {
        let mut mapping = Self::default();
        for pool in pools {
            let (count, disrupting) = counts
                .0
                .get(pool.name.as_str())
                .copied()
                .unwrap_or_default();
            let allowance = allowed_disruptions(&pool.disruption.budgets, reason, count, now);
            let disrupting_i64 = i64::try_from(disrupting).unwrap_or(i64::MAX);
            let available = allowance.allowed.saturating_sub(disrupting_i64).max(0);
            mapping.remaining.insert(pool.name.clone(), available);
            mapping.pools.push(PoolBudget {
                node_pool: pool.name.clone(),
                reason,
                nodes: count,
                disrupting,
                allowed: allowance.allowed,
                available,
                blocked: count != 0 && allowance.allowed == 0,
                errors: allowance.errors,
            });
        }
        mapping
    }

    /// What the pool may still disrupt this round (0 for a pool without a budget entry).
    #[must_use]
    pub fn remaining(&self, pool: &str) -> i64 {
        self.remaining.get(pool).copied().unwrap_or(0)
    }

    /// Takes one disruption from the pool; `false` (and nothing taken) when none is left.
    pub fn take(&mut self, pool: &str) -> bool {
        match self.remaining.get_mut(pool) {
            Some(left) if *left > 0 => {
                *left -= 1;
                true
            }
            _ => false,
        }
    }
}

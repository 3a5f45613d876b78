//! Voluntary disruption: which nodes to remove or replace to save money, as Karpenter v1.5's
//! disruption controller decides it (core `pkg/controllers/disruption`), as a pure function
//! over a snapshot.
//!
//! Data flow: the disruption actor builds a [`DisruptionInput`] from its cluster view (state
//! nodes with their pods, NodePools with their budgets and instance types, PDBs, the
//! provisioner's scheduling snapshot, the orchestration queue, its memos) with an injected
//! `now`, and calls [`decide`]. The round runs the methods in v1.5's order, Emptiness, Drift,
//! multi-node consolidation, single-node consolidation (and, behind
//! [`DisruptionOptions::repack`], N→M repacking), and stops at the first that yields a
//! [`Command`]. The [`Decision`] carries the command and, per method that ran, what the actor
//! publishes: eligible node counts, the budget per NodePool and reason (the
//! `karpenter_nodepools_allowed_disruptions` gauge), the `Unconsolidatable` and
//! `DisruptionBlocked` event texts, timeouts. Fifteen seconds later the actor rebuilds the
//! input and calls [`validate`], which keeps or abandons the command the way Karpenter's
//! validators do; a kept command is executed by the actor (taint, mark, launch replacements,
//! queue).
//!
//! Modules: [`cron`] and [`budgets`] evaluate budgets, [`candidates`] filters and prices the
//! nodes, `simulate` runs the scheduler with the candidates removed (and explains how that
//! stays cheap), `consolidation` judges a simulation, `methods` holds the four methods and
//! `repack` the N→M extension, `validate` the validation; [`workload`] builds inputs for tests
//! and the bench.
//!
//! # Work budgets
//!
//! Karpenter bounds multi-node consolidation to one minute and single-node consolidation to
//! three. A pure function reads no clock, so these are budgets of *work*: every simulation
//! adds the pods it schedules, the existing nodes and bound pods it hands the scheduler, and
//! the instance types of its NodePools. A method checks its budget before each simulation,
//! and stops as Karpenter stops at its deadline: multi-node returns the last valid command,
//! single-node gives up and remembers the NodePools it did not reach. The defaults
//! ([`input::MULTI_NODE_BUDGET`], [`input::SINGLE_NODE_BUDGET`]) are about half a second of
//! simulation each on one core (see `benches/disruption.rs`): far more candidates than
//! Karpenter evaluates in its minutes, since a simulation here costs microseconds.
//!
//! # Deviations from Karpenter
//!
//! - Ties in disruption cost, and the NodePool interleaving of single-node consolidation, are
//!   ordered by name instead of at random.
//! - An invalid PDB selector selects nothing instead of failing the round.
//! - A budget `nodes` count beyond 32 bits saturates instead of wrapping.
//! - A `@every` budget schedule is refused (fails closed); the CRD pattern cannot admit one.
//! - Multi-node consolidation takes up to [`input::MULTI_NODE_LIMIT`] (101) candidates, as
//!   Karpenter's off-by-one does; the limit is an option.
//! - A single-node pass that runs out of budget is continued, not restarted: the candidates
//!   it found nothing for are remembered while the consolidation state stays the same
//!   ([`Memos::single_node_judged`], forgotten with the other memos after 5 minutes), and the
//!   next round simulates the others. Karpenter starts again from the cheapest candidate
//!   after each timeout, so in a large cluster it never looks past its deadline; here every
//!   candidate is judged, then the pass completes and is memoized.

pub mod budgets;
pub mod candidates;
mod consolidation;
pub mod cron;
pub mod input;
mod methods;
mod repack;
mod simulate;
mod validate;
pub mod workload;

use std::collections::BTreeSet;

use crate::apis::nodepool::DisruptionReason;
use crate::domain::scheduling::NewNodeClaim;

pub use budgets::{BudgetError, BudgetMapping, PoolBudget, UNLIMITED};
pub use candidates::{BlockedNode, Blocker, Unconsolidatable};
pub use consolidation::{ReplacementConsidered, SPOT_TO_SPOT_MIN_TYPES};
pub use input::{
    DisruptionInput, DisruptionOptions, Memos, NodeClaimFacts, NodePod, Pdb, PodOwner, PoolInput,
    StateNode,
};
pub use methods::{decide, decide_observed};
pub use simulate::{Origin, SimulatedPod, Simulation};
pub use validate::{Abandoned, Validation, validate};

/// Simulates removing the named state nodes, whatever their candidacy, as a consolidation
/// method would: their currently reschedulable pods, the pending pods and the deleting nodes'
/// pods scheduled on the rest of the cluster (for explanations and tests). Unknown names are
/// ignored.
#[must_use]
pub fn simulate_removal(input: &DisruptionInput, nodes: &[&str]) -> Simulation {
    let candidates: Vec<candidates::Candidate> = nodes
        .iter()
        .filter_map(|name| input.nodes.iter().position(|n| n.name == *name))
        .map(|index| candidates::any_node(input, index))
        .collect();
    let refs: Vec<&candidates::Candidate> = candidates.iter().collect();
    simulate::Simulator::new(input).simulate(&refs)
}

/// A round that could not be decided (the controller backs off, as after Karpenter's
/// reconcile errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DisruptionError {
    #[error(
        "getting offering price from candidate node {node}, unable to determine offering (instance-type={instance_type}, capacity-type={capacity_type}, zone={zone})"
    )]
    UnknownOffering {
        node: String,
        instance_type: String,
        capacity_type: String,
        zone: String,
    },
}

impl DisruptionError {
    /// A short label for metrics and events.
    #[must_use]
    pub fn category(&self) -> &'static str {
        match self {
            Self::UnknownOffering { .. } => "unknown_offering",
        }
    }
}

/// A disruption method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Emptiness,
    Drift,
    MultiNode,
    SingleNode,
    /// Past Karpenter: N underutilized nodes replaced by M < N cheaper ones.
    Repack,
}

impl Method {
    /// The disruption reason the method's budgets and metrics use.
    #[must_use]
    pub fn reason(self) -> DisruptionReason {
        match self {
            Self::Emptiness => DisruptionReason::Empty,
            Self::Drift => DisruptionReason::Drifted,
            Self::MultiNode | Self::SingleNode | Self::Repack => DisruptionReason::Underutilized,
        }
    }

    /// The lower-case reason of metric labels.
    #[must_use]
    pub fn reason_label(self) -> &'static str {
        match self.reason() {
            DisruptionReason::Empty => "empty",
            DisruptionReason::Drifted => "drifted",
            DisruptionReason::Underutilized => "underutilized",
        }
    }

    /// The `consolidation_type` label (empty for Drift, as upstream).
    #[must_use]
    pub fn consolidation_type(self) -> &'static str {
        match self {
            Self::Emptiness => "empty",
            Self::Drift => "",
            Self::MultiNode => "multi",
            Self::SingleNode => "single",
            Self::Repack => "repack",
        }
    }

    /// Drift is the eventual class (pod blocks are ignored with a termination grace period);
    /// the others are graceful.
    #[must_use]
    pub fn is_eventual(self) -> bool {
        self == Self::Drift
    }
}

/// Whether a command deletes its candidates only or also launches replacements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandDecision {
    Delete,
    Replace,
}

impl CommandDecision {
    /// The `decision` label.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Replace => "replace",
        }
    }
}

/// A node a command disrupts.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandCandidate {
    /// The state node's name.
    pub name: String,
    pub node_claim: String,
    pub node_pool: String,
    pub instance_type: Option<String>,
    pub capacity_type: Option<String>,
    pub zone: Option<String>,
    /// Its price as consolidation computes it (`None` when not priced: Emptiness, Drift, a
    /// reserved node whose offering is gone).
    pub price: Option<f64>,
    /// How many of its pods need a new home.
    pub reschedulable_pods: usize,
}

/// Where a moved pod goes in the command's simulation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// An existing node (by name): the actor nominates it.
    Existing(String),
    /// The replacement with this index.
    Replacement(usize),
}

/// One command: the candidates to disrupt and their replacements.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    pub method: Method,
    pub candidates: Vec<CommandCandidate>,
    /// 0: delete; 1 (or more for Drift and Repack): replace.
    pub replacements: Vec<NewNodeClaim>,
    /// The candidates' price (consolidation only).
    pub price_before: Option<f64>,
    /// What the replacements cost at most (the sum of each one's most expensive kept
    /// instance type at its worst launch price); 0 for a delete.
    pub price_after: Option<f64>,
    /// Where each moved pod goes (`namespace/name`), for nominations and explanations.
    pub placements: Vec<(String, Destination)>,
}

impl Command {
    /// Delete or replace.
    #[must_use]
    pub fn decision(&self) -> CommandDecision {
        if self.replacements.is_empty() {
            CommandDecision::Delete
        } else {
            CommandDecision::Replace
        }
    }

    /// The disruption reason.
    #[must_use]
    pub fn reason(&self) -> DisruptionReason {
        self.method.reason()
    }

    /// The existing nodes receiving pods: nominated when the command executes, so the next
    /// rounds leave them alone.
    #[must_use]
    pub fn destinations(&self) -> Vec<String> {
        let mut out: BTreeSet<&str> = BTreeSet::new();
        for (_, destination) in &self.placements {
            if let Destination::Existing(node) = destination {
                out.insert(node);
            }
        }
        out.into_iter().map(str::to_owned).collect()
    }

    /// Candidate names.
    #[must_use]
    pub fn candidate_names(&self) -> Vec<&str> {
        self.candidates.iter().map(|c| c.name.as_str()).collect()
    }
}

/// The event a node gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeEventReason {
    DisruptionBlocked,
    Unconsolidatable,
}

impl NodeEventReason {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DisruptionBlocked => "DisruptionBlocked",
            Self::Unconsolidatable => "Unconsolidatable",
        }
    }
}

/// An event for a node and its NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    pub node: String,
    pub node_claim: Option<String>,
    pub reason: NodeEventReason,
    pub message: String,
}

/// How a method ended.
#[derive(Debug, Clone, PartialEq)]
pub enum MethodOutcome {
    /// No candidate passed its filter (budgets were not computed).
    NoCandidates,
    /// The cluster did not change since it last found nothing.
    Memo,
    /// Nothing to do. `mark_consolidated`: the actor sets the method's memo (nothing was held
    /// back by a budget of 0).
    Nothing {
        mark_consolidated: bool,
    },
    /// Its work budget ran out (Karpenter's timeout); multi-node may still have returned a
    /// command.
    TimedOut,
    Command,
    Failed(DisruptionError),
}

/// What one method did.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodReport {
    pub method: Method,
    /// Candidates after the method's filter
    /// (`karpenter_voluntary_disruption_eligible_nodes{reason}`).
    pub eligible: usize,
    /// The budget per NodePool (empty when there were no candidates).
    pub budgets: Vec<PoolBudget>,
    /// `Unconsolidatable` and `DisruptionBlocked` events.
    pub events: Vec<NodeEvent>,
    pub outcome: MethodOutcome,
    /// The work budget ran out
    /// (`karpenter_voluntary_disruption_consolidation_timeouts_total`).
    pub timed_out: bool,
    pub simulations: usize,
    pub work: u64,
    /// Single-node: candidates evaluated before a timeout.
    pub evaluated: usize,
    /// Replacements priced and refused as no cheaper, with the cheapest type considered.
    pub replacements: Vec<ReplacementConsidered>,
    /// Single-node: candidates whose computation failed and was skipped (Karpenter logs
    /// `failed computing consolidation` at ERROR for each).
    pub errors: Vec<(String, DisruptionError)>,
    /// Single-node: candidates simulated this round that can be neither deleted nor replaced
    /// (for [`Memos::single_node_judged`]).
    pub judged: Vec<String>,
}

impl MethodReport {
    fn new(method: Method) -> Self {
        Self {
            method,
            eligible: 0,
            budgets: Vec::new(),
            events: Vec::new(),
            outcome: MethodOutcome::NoCandidates,
            timed_out: false,
            simulations: 0,
            work: 0,
            evaluated: 0,
            replacements: Vec::new(),
            errors: Vec::new(),
            judged: Vec::new(),
        }
    }
}

/// The result of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The command to validate (after 15 s, except Drift) and execute.
    pub command: Option<Command>,
    /// The round failed (the methods after the failing one did not run).
    pub error: Option<DisruptionError>,
    /// The methods that ran, in order.
    pub methods: Vec<MethodReport>,
    /// State nodes that are no candidates, with their `DisruptionBlocked` reason.
    pub blocked: Vec<BlockedNode>,
    /// NodePools whose budgets cannot be evaluated (logged every round).
    pub budget_errors: Vec<(String, Vec<BudgetError>)>,
    /// NodePools the single-node pass did not reach before its budget ran out: pass them in
    /// [`DisruptionInput::single_node_unseen_pools`] next round.
    pub single_node_unseen_pools: Vec<String>,
    /// Simulations run and work spent in the whole round.
    pub simulations: usize,
    pub work: u64,
}

impl Decision {
    /// The report of one method, if it ran.
    #[must_use]
    pub fn method(&self, method: Method) -> Option<&MethodReport> {
        self.methods.iter().find(|m| m.method == method)
    }
}

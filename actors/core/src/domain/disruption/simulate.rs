//! Scheduling simulations (Karpenter's `SimulateScheduling`, spec section 7): remove the
//! candidates from the cluster, schedule their currently reschedulable pods together with the
//! pending pods and the pods of deleting nodes, and judge the result.
//!
//! # How a simulation stays cheap
//!
//! Karpenter hands the scheduler every existing node each time, and so does a naive port: at
//! 5,000 nodes the scheduler's setup alone takes about 50 ms, and a round may run thousands of
//! simulations. Here a simulation gives [`scheduling::solve_observed`] a *reduced* snapshot
//! whose answer is provably the one the full snapshot would give:
//!
//! - **Closed nodes are left out.** The scheduler never places a pod on a node that cannot fit
//!   the batch's smallest request (it closes the slot at setup), so such a node matters only
//!   through NodePool limits and topology, both handled below.
//! - **Only a prefix of the open nodes is real.** Existing nodes are tried in a fixed order
//!   (initialized first, then by name) and the first that fits wins. The simulation offers
//!   the first open nodes of that order (as many as the batch has pods, at least 16), and
//!   accepts the answer when no pod could have done otherwise with every node present: a pod
//!   the scheduler placed on a prefix node by its very first, unrelaxed attempt went to the
//!   first node that could take it, which is the same node in the full order; any other pod
//!   must be unable to fit any node past the prefix, judged per *node class* (same labels
//!   but the hostname, same taints) from the largest free room of the class's members past
//!   the prefix, its taints, and its labels against the pod's node selector and required
//!   terms. Otherwise the prefix grows fourfold; once it holds every open node the answer is
//!   exact by the first point.
//! - **Real nodes are trimmed** to the pods topology needs (below) and those binding host
//!   ports (the others only count in groups no simulated pod looks at), and to the labels the
//!   batch reads: the hostname, the NodePool, and the keys its requirements and topology terms
//!   (and the relevant existing anti-affinity terms) name; compatibility and domains look at
//!   nothing else.
//! - **Topology is kept with ghosts.** When the batch's pods have spread or (anti-)affinity
//!   terms, or existing pods' anti-affinity selects them, the nodes left out still count: per
//!   node class one closed "ghost" node with the class's labels carries the left-out nodes'
//!   pods that such a selector selects, so domains and per-domain counts are the full
//!   cluster's. Hostname-keyed counts only matter on the node itself and stay out of ghosts.
//!   A pod whose node selector or required terms name a hostname takes the full snapshot
//!   (its counts depend on the hostnames).
//! - **NodePool limits are corrected** for the capacity of the nodes left out, so a pool's
//!   remaining limit is the full run's (Karpenter subtracts only the simulation's existing
//!   nodes: the candidates' capacity is free again).
//! - **Without topology, a first pass uses two instance types per pool**: the cheapest per CPU
//!   and per byte, which is all that orders the pods. When every pod lands on an existing
//!   node, NodeClaims never mattered and the answer stands; otherwise the pass is repeated
//!   with the full pools.
//!
//! The per-round preparation ([`Simulator::new`]) sorts the existing nodes once, groups them
//! into classes, filters and orders each pool's instance types once
//! ([`NodePoolInput::prepared`]), and (on first need) indexes the pods topology may need; the
//! simulations share the scheduler's per-class instance-type answers ([`TypeCache`]). A
//! simulation then costs about its batch, its prefix and the relevant topology pods, not the
//! cluster or the instance types.
//! `tests/disruption.rs` checks reduced simulations against full ones on randomized clusters.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::apis::labels;
use crate::apis::taints::{Taint, TaintEffect};
use crate::domain::instance_type::InstanceType;
use crate::domain::requirements::{AllowUndefined, Requirements};
use crate::domain::resources::{NODES, Resources, approx_f64};
use crate::domain::scheduling::{
    self, BoundPod, ExistingNode, LabelSelector, NewNodeClaim, NodeLabels, NodePoolInput, Options,
    Placement, Plan, PodShape, ReservedOfferingMode, SchedulingPod, SelectorOperator, Snapshot,
    SpreadConstraint, Toleration, TypeCache, first_untolerated,
};

use super::candidates::{Candidate, is_currently_reschedulable};
use super::input::DisruptionInput;

/// Open nodes offered to the first attempt of a simulation; each retry offers four times as
/// many. 16 holds the pods of one or two candidates in a cluster with room to spare.
const FIRST_PREFIX: usize = 8;
const PREFIX_GROWTH: usize = 4;
/// Karpenter's cap on the number of errors an event message lists.
const MAX_ERRORS_LISTED: usize = 5;

/// Where a simulated pod comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A pending pod: it may fail without blocking the decision.
    Pending,
    /// A candidate's pod: it must land somewhere initialized.
    Candidate,
    /// A deleting node's pod: it must land, and may land on a node still initializing.
    Deleting,
}

/// One pod of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatedPod {
    /// `namespace/name`.
    pub key: String,
    pub origin: Origin,
}

/// A simulation's answer, judged as Karpenter judges it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Simulation {
    /// The simulated pods; the plan's pod indices point here.
    pub pods: Vec<SimulatedPod>,
    /// The scheduler's plan; existing node indices point into the input's scheduling snapshot.
    pub plan: Plan,
    /// Errors of pods that must schedule (not pending): failures and placements on
    /// uninitialized nodes, as (pod index, error).
    pub errors: Vec<(usize, String)>,
    /// How much the simulation cost in work units (see the module docs of [`super`]).
    pub work: u64,
}

impl Simulation {
    /// Karpenter's `AllNonPendingPodsScheduled`.
    #[must_use]
    pub fn all_non_pending_scheduled(&self) -> bool {
        self.errors.is_empty()
    }

    /// The NodeClaims the plan would create.
    #[must_use]
    pub fn new_node_claims(&self) -> &[NewNodeClaim] {
        &self.plan.new_node_claims
    }

    /// Karpenter's `NonPendingPodSchedulingErrors` (the `" and 0 other(s)"` it writes for
    /// exactly five errors included).
    #[must_use]
    pub fn error_text(&self) -> String {
        if self.errors.is_empty() {
            return "No Pod Scheduling Errors".to_owned();
        }
        let mut text = String::from("not all pods would schedule, ");
        for (listed, (pod, error)) in self.errors.iter().enumerate() {
            let _ = write!(text, "{} => {error} ", self.pods[*pod].key);
            if listed + 1 >= MAX_ERRORS_LISTED {
                let _ = write!(
                    text,
                    " and {} other(s)",
                    self.errors.len() - MAX_ERRORS_LISTED
                );
                break;
            }
        }
        text
    }

    /// Names of the existing nodes that receive pods (they get nominated).
    #[must_use]
    pub fn destinations(&self) -> Vec<String> {
        self.plan
            .existing
            .iter()
            .map(|e| e.node_name.clone())
            .collect()
    }
}

/// A node class: existing nodes with the same labels (but the hostname), taints and flags.
#[derive(Debug)]
struct Class {
    /// Members in solver order, with their positions in it.
    members: Vec<usize>,
    positions: Vec<usize>,
    /// `suffix_max[i]`: the largest free room of each resource over `members[i..]`.
    suffix_max: Vec<Resources>,
    /// Members in snapshot order (for placing the ghost where the class first appears).
    by_index: Vec<usize>,
    requirements: Requirements,
    taints: Vec<Taint>,
    /// The closed stand-in: the class's labels and flags, no room, no pods.
    ghost: ExistingNode,
    /// Index into the snapshot's NodePools of the pool its nodes count against.
    pool: Option<usize>,
}

/// An existing pod that topology may need: its node and index on the node.
type PodRef = (usize, usize);

/// Pods per domain value, each list sorted.
type DomainLists = Vec<(String, Vec<PodRef>)>;

/// The existing pods' required anti-affinity terms that are alike (same namespaces, selector
/// and topology key): one Deployment's replicas share one.
#[derive(Debug)]
struct AntiGroup {
    namespaces: Vec<String>,
    selector: LabelSelector,
    /// The normalized topology key.
    key: Arc<str>,
    hostname: bool,
    pods: Vec<PodRef>,
}

/// Indexes of the existing pods for topology relevance.
#[derive(Debug, Default)]
struct TopologyIndex {
    /// Pods counted for topology by (namespace, label key, label value): an index into
    /// `lists`.
    by_label: FxHashMap<(Arc<str>, String, String), usize>,
    /// Pods counted for topology by namespace: an index into `lists`.
    by_namespace: FxHashMap<Arc<str>, usize>,
    /// The pod lists, each in snapshot order.
    lists: Vec<Vec<PodRef>>,
    anti: Vec<AntiGroup>,
    /// The anti-affinity groups of each pod that has some.
    anti_of: FxHashMap<PodRef, Vec<usize>>,
}

/// The per-round state all simulations share.
#[derive(Debug)]
pub struct Simulator<'a> {
    input: &'a DisruptionInput,
    options: Options,
    /// Existing nodes in the solver's order (initialized first, then by name).
    order: Vec<usize>,
    /// Free room of each existing node, as the solver computes it.
    free: Vec<Resources>,
    class_of: Vec<usize>,
    classes: Vec<Class>,
    /// Per existing node, the snapshot pool its capacity counts against.
    pool_of: Vec<Option<usize>>,
    /// Per snapshot pool, the sum over all its existing nodes of each bounded limit resource
    /// (in `limits.iter()` order).
    pool_usage: Vec<Vec<i64>>,
    /// The snapshot's pools with their instance types filtered and ordered once per round.
    prepared_pools: Vec<NodePoolInput>,
    /// The pools cut down to the two instance types that decide the pod order.
    restricted_pools: Vec<NodePoolInput>,
    /// The solver's per-class instance-type answers for `prepared_pools` and
    /// `restricted_pools`, shared by the round's simulations.
    prepared_types: TypeCache,
    restricted_types: TypeCache,
    /// Per existing node: the state node's NodeClaim name, for error texts.
    claim_names: Vec<Option<String>>,
    topology: Option<TopologyIndex>,
    /// Per (namespace, selector): the counted existing pods it selects.
    selected: FxHashMap<(String, LabelSelector), Vec<PodRef>>,
    /// Per shiftable (namespace, selector, key): its pods per domain.
    per_domain: FxHashMap<(String, LabelSelector, Arc<str>), DomainLists>,
    /// Per topology key: every value it may take as a domain (`None`: not listable).
    domains: FxHashMap<Arc<str>, Option<Vec<String>>>,
    /// Some existing pod's anti-affinity term selects namespaces by label.
    existing_namespace_selectors: bool,
    fits: FxHashMap<(*const PodShape, usize), bool>,
    /// Per pod shape: the existing nodes its required hostname anti-affinity keeps it off
    /// (nodes holding a pod a term selects); `None` when it has no such term.
    anti_blocked: FxHashMap<*const PodShape, Option<FxHashSet<usize>>>,
    /// How many leading pods of the snapshot are pending.
    pending: usize,
    /// Total work spent.
    pub work: u64,
    pub simulations: usize,
}

fn amount_for_limit(capacity: &Resources, name: &str) -> i64 {
    if name == NODES { 1 } else { capacity.get(name) }
}

/// The solver's free room of an existing node: allocatable minus requested minus the
/// DaemonSets still expected.
fn free_room(node: &ExistingNode) -> Resources {
    let mut daemon = node.pending_daemon_overhead.clone();
    daemon.clamp_negative_to_zero();
    node.allocatable.minus(&node.requested).minus(&daemon)
}

/// A node's labels but the hostname: what its class is named by.
fn class_labels(node: &ExistingNode) -> impl Iterator<Item = (&String, &String)> {
    node.labels
        .iter()
        .filter(|(k, _)| k.as_str() != labels::HOSTNAME)
}

/// The hash of a node's class: its labels but the hostname, its taints (key, value, effect)
/// and its flags. Hashed in place: a round builds the classes of every node, and copying
/// about 40 labels per node was most of a round's preparation. Of the labels only the
/// values are hashed, in key order, with their number: the keys are mostly the same long
/// well-known names on every node (most of the bytes hashed), and two nodes whose keys differ
/// under equal values only share a bucket, which [`same_class`] tells apart.
fn class_hash(node: &ExistingNode) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    let mut labels = 0usize;
    for (_, value) in class_labels(node) {
        value.hash(&mut hasher);
        labels += 1;
    }
    labels.hash(&mut hasher);
    for taint in &node.taints {
        (&taint.key, &taint.value, taint.effect).hash(&mut hasher);
    }
    (node.registered, node.initialized).hash(&mut hasher);
    hasher.finish()
}

/// Whether two nodes are of one class (see [`class_hash`]).
fn same_class(a: &ExistingNode, b: &ExistingNode) -> bool {
    a.registered == b.registered
        && a.initialized == b.initialized
        && a.taints.len() == b.taints.len()
        && a.taints
            .iter()
            .zip(&b.taints)
            .all(|(x, y)| x.key == y.key && x.value == y.value && x.effect == y.effect)
        && class_labels(a).eq(class_labels(b))
}

impl<'a> Simulator<'a> {
    /// Prepares the simulations of one round.
    #[must_use]
    pub fn new(input: &'a DisruptionInput) -> Self {
        let snapshot = &input.scheduling;
        let nodes = &snapshot.existing_nodes;
        let order = scheduling::existing_node_order(nodes);
        let free: Vec<Resources> = nodes.iter().map(free_room).collect();
        let pool_of: Vec<Option<usize>> = nodes
            .iter()
            .map(|n| {
                n.node_pool()
                    .and_then(|p| snapshot.node_pools.iter().position(|pool| pool.name == p))
            })
            .collect();
        let mut pool_usage: Vec<Vec<i64>> = snapshot
            .node_pools
            .iter()
            .map(|p| vec![0; p.limits.iter().count()])
            .collect();
        for (node, pool) in nodes.iter().zip(&pool_of) {
            if let Some(pool) = pool {
                let limits = &snapshot.node_pools[*pool].limits;
                for ((name, _), used) in limits.iter().zip(pool_usage[*pool].iter_mut()) {
                    *used = used.saturating_add(amount_for_limit(&node.capacity, name));
                }
            }
        }
        let (class_of, classes) = Self::classes(nodes, &order, &free, &pool_of);
        let mut claim_names = vec![None; nodes.len()];
        for state in &input.nodes {
            if let (Some(index), Some(claim)) = (state.existing, &state.node_claim)
                && let Some(slot) = claim_names.get_mut(index)
            {
                *slot = Some(claim.name.clone());
            }
        }
        let prepared_pools: Vec<NodePoolInput> = snapshot
            .node_pools
            .iter()
            .map(NodePoolInput::prepared)
            .collect();
        Self {
            input,
            options: Options {
                preference_policy: input.options.preference_policy,
                reserved_capacity: input.options.reserved_capacity,
                reserved_offering_mode: ReservedOfferingMode::Fallback,
                ..Options::default()
            },
            order,
            free,
            class_of,
            classes,
            pool_of,
            pool_usage,
            restricted_pools: snapshot
                .node_pools
                .iter()
                .map(|pool| restrict_pool(pool).prepared())
                .collect(),
            prepared_pools,
            prepared_types: TypeCache::default(),
            restricted_types: TypeCache::default(),
            claim_names,
            topology: None,
            selected: FxHashMap::default(),
            domains: FxHashMap::default(),
            per_domain: FxHashMap::default(),
            existing_namespace_selectors: nodes.iter().any(|n| {
                n.pods.iter().any(|p| {
                    p.anti_affinity
                        .iter()
                        .any(|t| t.namespace_selector.is_some())
                })
            }),
            fits: FxHashMap::default(),
            anti_blocked: FxHashMap::default(),
            pending: input.pending_pods.min(snapshot.pods.len()),
            work: 0,
            simulations: 0,
        }
    }

    fn classes(
        nodes: &[ExistingNode],
        order: &[usize],
        free: &[Resources],
        pool_of: &[Option<usize>],
    ) -> (Vec<usize>, Vec<Class>) {
        // Classes by hash, each with its first node to compare with.
        let mut index: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
        let mut classes: Vec<Class> = Vec::new();
        let mut class_of = vec![0; nodes.len()];
        for (i, node) in nodes.iter().enumerate() {
            let next = classes.len();
            let same_hash = index.entry(class_hash(node)).or_default();
            let found = same_hash
                .iter()
                .copied()
                .find(|c| same_class(&nodes[classes[*c].by_index[0]], node));
            let class = found.unwrap_or(next);
            if class == next {
                same_hash.push(next);
                let class_labels: BTreeMap<String, String> = class_labels(node)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                classes.push(Class {
                    members: Vec::new(),
                    positions: Vec::new(),
                    suffix_max: Vec::new(),
                    by_index: Vec::new(),
                    requirements: Requirements::from_labels(&class_labels),
                    taints: node.taints.clone(),
                    ghost: ExistingNode {
                        name: format!("disruption-simulation-class-{next}"),
                        labels: class_labels.into(),
                        taints: node.taints.clone(),
                        // Negative room keeps the ghost closed even for pods requesting
                        // nothing.
                        allocatable: Resources::core(-1, -1, -1),
                        initialized: node.initialized,
                        registered: node.registered,
                        ..ExistingNode::default()
                    },
                    pool: pool_of[i],
                });
            }
            class_of[i] = class;
            classes[class].by_index.push(i);
        }
        for (position, node) in order.iter().enumerate() {
            let class = &mut classes[class_of[*node]];
            class.members.push(*node);
            class.positions.push(position);
        }
        for class in &mut classes {
            let mut max: Option<Resources> = None;
            let mut suffix = vec![Resources::default(); class.members.len()];
            for (i, node) in class.members.iter().enumerate().rev() {
                let room = &free[*node];
                match &mut max {
                    None => max = Some(room.clone()),
                    Some(m) => m.max_with(room),
                }
                suffix[i] = max.clone().unwrap_or_default();
            }
            class.suffix_max = suffix;
        }
        (class_of, classes)
    }

    /// The pods a simulation with these candidates schedules: pending pods, the candidates'
    /// currently reschedulable pods, the deleting nodes' pods (Karpenter's order).
    fn batch(&self, candidates: &[&Candidate]) -> (Vec<SchedulingPod>, Vec<SimulatedPod>) {
        let snapshot = &self.input.scheduling;
        let mut pods = Vec::new();
        let mut origins = Vec::new();
        let mut push = |pod: &SchedulingPod, origin: Origin| {
            origins.push(SimulatedPod {
                key: pod.key(),
                origin,
            });
            pods.push(pod.clone());
        };
        for pod in &snapshot.pods[..self.pending] {
            push(pod, Origin::Pending);
        }
        for candidate in candidates {
            let node = &self.input.nodes[candidate.node];
            for index in &candidate.reschedulable {
                let pod = &node.pods[*index];
                if is_currently_reschedulable(pod, &self.input.pdbs) {
                    push(&pod.pod, Origin::Candidate);
                }
            }
        }
        for pod in &snapshot.pods[self.pending..] {
            push(pod, Origin::Deleting);
        }
        (pods, origins)
    }

    /// Simulates removing the candidates.
    pub fn simulate(&mut self, candidates: &[&Candidate]) -> Simulation {
        self.simulations += 1;
        let (pods, origins) = self.batch(candidates);
        if pods.is_empty() {
            return Simulation {
                pods: origins,
                ..Simulation::default()
            };
        }
        let excluded_list: Vec<usize> = candidates
            .iter()
            .filter_map(|c| self.input.nodes[c.node].existing)
            .collect();
        let mut excluded = vec![false; self.free.len()];
        for node in &excluded_list {
            excluded[*node] = true;
        }
        let shapes = distinct_shapes(&pods);
        let min_request = min_request(&pods);
        let full = shapes.iter().any(|s| names_hostname(s));
        let relevant = if full {
            None
        } else {
            self.relevant_topology(&shapes)
        };
        let batch = Batch {
            namespace_selectors: shapes.iter().any(|s| uses_namespace_selector(s)),
            label_keys: label_keys(&shapes, relevant.as_ref()),
            pods,
            excluded,
            excluded_list,
        };
        // The quick pass pays off when every pod could land on some existing node.
        let quick_pass = !full
            && relevant
                .as_ref()
                .is_none_or(|r| !r.selectors.iter().any(|s| s.for_ghosts))
            && shapes.iter().all(|shape| self.could_fit_past(shape, 0));
        let mut prefix_size = FIRST_PREFIX.max(batch.pods.len());
        loop {
            let cut = self.cut(&batch.excluded, &min_request, prefix_size, full);
            if quick_pass {
                // Without topology that reads domains, two instance types per pool order the
                // pods as all of them would; if every pod lands on an existing node,
                // NodeClaims never mattered.
                let solved = self.solve(&batch, &cut, relevant.as_ref(), true);
                if plan_on_existing(&solved.plan, batch.pods.len()) {
                    if cut.complete || self.accept(&batch.pods, &solved, cut.end) {
                        return self.judge(solved.plan, origins, solved.work);
                    }
                    prefix_size = prefix_size.saturating_mul(PREFIX_GROWTH);
                    continue;
                }
            }
            let solved = self.solve(&batch, &cut, relevant.as_ref(), false);
            if cut.complete || self.accept(&batch.pods, &solved, cut.end) {
                return self.judge(solved.plan, origins, solved.work);
            }
            prefix_size = prefix_size.saturating_mul(PREFIX_GROWTH);
        }
    }

    /// The first `size` open, non-excluded nodes in solver order (every non-excluded node
    /// when `full`).
    fn cut(&self, excluded: &[bool], min_request: &Resources, size: usize, full: bool) -> Cut {
        let mut real = Vec::new();
        for (position, node) in self.order.iter().enumerate() {
            if excluded[*node] {
                continue;
            }
            if !full && !min_request.fits_in(&self.free[*node]) {
                continue;
            }
            if !full && real.len() == size {
                return Cut {
                    real,
                    end: position,
                    complete: false,
                    full,
                };
            }
            real.push(*node);
        }
        Cut {
            real,
            end: self.order.len(),
            complete: true,
            full,
        }
    }

    /// Builds the reduced snapshot and solves it; the plan's node indices are mapped back.
    fn solve(
        &mut self,
        batch: &Batch,
        cut: &Cut,
        relevant: Option<&Relevant>,
        restricted: bool,
    ) -> Solved {
        let snapshot = &self.input.scheduling;
        let mut in_prefix = vec![false; self.free.len()];
        for node in &cut.real {
            in_prefix[*node] = true;
        }
        // Ghosts stand for left-out nodes in non-hostname counts; hostname counts only
        // matter on the node itself.
        let ghost_pods = match relevant {
            Some(relevant) if !cut.full && relevant.selectors.iter().any(|s| s.for_ghosts) => {
                self.ghost_pods(relevant, batch, cut, &in_prefix)
            }
            _ => BTreeMap::new(),
        };
        let reduced = self.existing_nodes(cut, batch, &ghost_pods, relevant);
        let mut work = reduced.work;
        // Work counts the instance types as the pools list them (filtering them is done
        // once per round now, but the budgets were measured in these units).
        let (source, counted, types) = if restricted {
            (
                &self.restricted_pools,
                &self.restricted_pools,
                &self.restricted_types,
            )
        } else {
            (
                &self.prepared_pools,
                &snapshot.node_pools,
                &self.prepared_types,
            )
        };
        work += counted
            .iter()
            .map(|p| p.instance_types.len() as u64)
            .sum::<u64>();
        let node_pools = self.pools_with_limits(source, batch, cut, &reduced.ghosts_per_pool);
        work += batch.pods.len() as u64;
        let snapshot = Snapshot {
            pods: batch.pods.clone(),
            existing_nodes: reduced.nodes,
            node_pools,
            namespaces: if batch.namespace_selectors || self.existing_namespace_selectors {
                snapshot.namespaces.clone()
            } else {
                BTreeMap::new()
            },
        };
        let (mut plan, first_try) = scheduling::solve_shared(&snapshot, &self.options, Some(types));
        for placement in &mut plan.existing {
            placement.node = reduced
                .map
                .get(placement.node)
                .copied()
                .unwrap_or(usize::MAX);
        }
        self.work += work;
        Solved {
            plan,
            first_try,
            work,
        }
    }

    /// Per class with members left out, the relevant pods of those members.
    ///
    /// A shiftable spread selector's counts only matter as differences between domains (its
    /// skew test compares each count with the least one, and the pick is the least one), so
    /// `m` of its pods may go from every domain, `m` being the fewest any possible domain
    /// holds on left-out nodes; the ghosts then carry the imbalance instead of every replica.
    fn ghost_pods(
        &mut self,
        relevant: &Relevant,
        batch: &Batch,
        cut: &Cut,
        in_prefix: &[bool],
    ) -> BTreeMap<usize, Vec<PodRef>> {
        let excluded = &batch.excluded;
        let left_out = |node: usize| !excluded[node] && !in_prefix[node];
        let mut out: BTreeMap<usize, Vec<PodRef>> = BTreeMap::new();
        for (class, c) in self.classes.iter().enumerate() {
            if c.by_index.iter().any(|n| left_out(*n)) {
                out.insert(class, Vec::new());
            }
        }
        for pod in &relevant.fixed {
            if left_out(pod.0) {
                out.entry(self.class_of[pod.0]).or_default().push(*pod);
            }
        }
        let mut kept: Vec<usize> = batch.excluded_list.clone();
        kept.extend_from_slice(&cut.real);
        kept.sort_unstable();
        kept.dedup();
        for shifted in &relevant.shifted {
            let domains: Option<Vec<String>> = self.domains(&shifted.key).map(<[String]>::to_vec);
            let lists = self.per_domain(shifted).to_vec();
            // Pods of each domain on left-out nodes: the list less those on nodes the
            // simulation removes or keeps real.
            let counts: Vec<usize> = lists
                .iter()
                .map(|(_, list)| {
                    let on_kept: usize = kept
                        .iter()
                        .map(|node| {
                            let start = list.partition_point(|(n, _)| n < node);
                            let end = list.partition_point(|(n, _)| n <= node);
                            end - start
                        })
                        .sum();
                    list.len() - on_kept
                })
                .collect();
            let fewest = match &domains {
                Some(domains) => domains
                    .iter()
                    .map(|d| {
                        lists
                            .iter()
                            .position(|(domain, _)| domain == d)
                            .map_or(0, |i| counts[i])
                    })
                    .min()
                    .unwrap_or(0),
                None => 0,
            };
            for ((_, list), count) in lists.iter().zip(counts) {
                let mut need = count - fewest;
                for pod in list.iter().rev() {
                    if need == 0 {
                        break;
                    }
                    if left_out(pod.0) {
                        out.entry(self.class_of[pod.0]).or_default().push(*pod);
                        need -= 1;
                    }
                }
            }
        }
        for pods in out.values_mut() {
            pods.sort_unstable();
            pods.dedup();
        }
        out
    }

    /// The reduced snapshot's existing nodes in snapshot order: the prefix, and each ghost
    /// where its class first appears (so topology domains are interned in the full run's
    /// order).
    fn existing_nodes(
        &self,
        cut: &Cut,
        batch: &Batch,
        ghost_pods: &BTreeMap<usize, Vec<PodRef>>,
        relevant: Option<&Relevant>,
    ) -> ReducedNodes {
        let (excluded, label_keys) = (&batch.excluded, &batch.label_keys);
        let snapshot = &self.input.scheduling;
        let mut entries: Vec<(usize, Entry)> =
            cut.real.iter().map(|n| (*n, Entry::Real(*n))).collect();
        for class in ghost_pods.keys() {
            let first = self.classes[*class]
                .by_index
                .iter()
                .find(|n| !excluded[**n])
                .copied()
                .unwrap_or(0);
            entries.push((first, Entry::Ghost(*class)));
        }
        entries.sort_by_key(|(index, entry)| (*index, matches!(entry, Entry::Ghost(_))));
        let mut out = ReducedNodes {
            nodes: Vec::with_capacity(entries.len()),
            map: Vec::with_capacity(entries.len()),
            ghosts_per_pool: FxHashMap::default(),
            work: 0,
        };
        for (_, entry) in entries {
            match entry {
                Entry::Real(node) => {
                    let original = &snapshot.existing_nodes[node];
                    let copy = if cut.full {
                        original.clone()
                    } else {
                        // Pods matter to the batch through topology and host ports only, labels
                        // through the keys its requirements and topology read.
                        existing_copy(
                            original,
                            trimmed(&original.labels, label_keys),
                            (0..original.pods.len())
                                .filter(|i| self.keeps(relevant, node, *i))
                                .map(|i| original.pods[i].clone())
                                .collect(),
                        )
                    };
                    out.work += 1 + copy.pods.len() as u64;
                    out.nodes.push(copy);
                    out.map.push(node);
                }
                Entry::Ghost(class) => {
                    let c = &self.classes[class];
                    let pods = ghost_pods.get(&class).map_or_else(Vec::new, |refs| {
                        refs.iter()
                            .map(|(n, p)| Arc::clone(&snapshot.existing_nodes[*n].pods[*p]))
                            .collect()
                    });
                    let node = existing_copy(&c.ghost, trimmed(&c.ghost.labels, label_keys), pods);
                    out.work += 1 + node.pods.len() as u64;
                    if let Some(pool) = c.pool {
                        *out.ghosts_per_pool.entry(pool).or_default() += 1;
                    }
                    out.nodes.push(node);
                    out.map.push(usize::MAX);
                }
            }
        }
        out
    }

    /// The NodePools with limits corrected for the nodes left out: the full run subtracts
    /// every non-excluded node, this one subtracts the prefix and the ghosts (one node each,
    /// no resources).
    fn pools_with_limits(
        &self,
        source: &[NodePoolInput],
        batch: &Batch,
        cut: &Cut,
        ghosts_per_pool: &FxHashMap<usize, i64>,
    ) -> Vec<NodePoolInput> {
        let snapshot = &self.input.scheduling;
        let mut left_out: Vec<Vec<i64>> = self.pool_usage.clone();
        for node in batch.excluded_list.iter().chain(&cut.real) {
            let Some(pool) = self.pool_of[*node] else {
                continue;
            };
            let limits = &snapshot.node_pools[pool].limits;
            let capacity = &snapshot.existing_nodes[*node].capacity;
            for ((name, _), used) in limits.iter().zip(left_out[pool].iter_mut()) {
                *used = used.saturating_sub(amount_for_limit(capacity, name));
            }
        }
        source
            .iter()
            .enumerate()
            .map(|(i, pool)| {
                if pool.limits.is_unlimited() {
                    return pool.clone();
                }
                let ghosts = ghosts_per_pool.get(&i).copied().unwrap_or(0);
                let mut limits = pool.limits.clone();
                for ((name, amount), used) in pool.limits.iter().zip(&left_out[i]) {
                    let back = if name == NODES { ghosts } else { 0 };
                    limits = limits.with(name, amount.saturating_sub(*used).saturating_add(back));
                }
                NodePoolInput {
                    limits,
                    ..pool.clone()
                }
            })
            .collect()
    }

    /// Whether the plan of a prefix run is the full run's (see the module docs): every pod
    /// either went to a prefix node by its first, unrelaxed attempt, or cannot fit any node
    /// past the prefix at all.
    fn accept(&mut self, pods: &[SchedulingPod], solved: &Solved, end: usize) -> bool {
        let placements = solved.plan.placements(pods.len());
        let mut past: FxHashMap<*const PodShape, bool> = FxHashMap::default();
        for ((pod, placement), first) in pods.iter().zip(placements).zip(&solved.first_try) {
            if *first && matches!(placement, Some(Placement::Existing(_))) {
                continue;
            }
            let key = Arc::as_ptr(&pod.shape);
            let fits = if let Some(fits) = past.get(&key) {
                *fits
            } else {
                let fits = self.could_fit_past(&pod.shape, end);
                past.insert(key, fits);
                fits
            };
            if fits {
                return false;
            }
        }
        true
    }

    /// Whether the pod could fit some node at or past position `end` of the solver order
    /// (over-approximated: free room is the class's largest, requirements and taints at the
    /// pod's most relaxed).
    ///
    /// A pod whose required anti-affinity on the hostname selects pods on a node cannot go
    /// there: with such terms the nodes past `end` are looked at one by one, those holding a
    /// selected pod left out (one replica per node of a Deployment with hostname
    /// anti-affinity then proves at once that no node past the prefix could take it).
    fn could_fit_past(&mut self, shape: &Arc<PodShape>, end: usize) -> bool {
        let mut some_class = false;
        for class in 0..self.classes.len() {
            let c = &self.classes[class];
            let first = c.positions.partition_point(|p| *p < end);
            if first == c.positions.len() || !shape.requests.fits_in(&c.suffix_max[first]) {
                continue;
            }
            if self.compatible(shape, class) {
                some_class = true;
                break;
            }
        }
        if !some_class {
            return false;
        }
        let key = Arc::as_ptr(shape);
        if !self.anti_blocked.contains_key(&key) {
            let blocked = self.hostname_anti_blocked(shape);
            self.anti_blocked.insert(key, blocked);
        }
        let Some(blocked) = self.anti_blocked.get(&key).and_then(Option::as_ref) else {
            return true;
        };
        let past: Vec<usize> = self.order[end.min(self.order.len())..]
            .iter()
            .copied()
            .filter(|node| !blocked.contains(node) && shape.requests.fits_in(&self.free[*node]))
            .collect();
        past.into_iter()
            .any(|node| self.compatible(shape, self.class_of[node]))
    }

    /// The existing nodes holding a counted pod that one of the shape's required
    /// hostname anti-affinity terms selects; `None` without such terms (or with a namespace
    /// selector, left to the scheduler).
    fn hostname_anti_blocked(&mut self, shape: &PodShape) -> Option<FxHashSet<usize>> {
        let terms: Vec<&scheduling::AffinityTerm> = shape
            .anti_affinity
            .iter()
            .filter(|t| is_hostname(&t.topology_key))
            .collect();
        if terms.is_empty() || terms.iter().any(|t| t.namespace_selector.is_some()) {
            return None;
        }
        let mut blocked = FxHashSet::default();
        for term in terms {
            let namespaces =
                term.selected_namespaces(&shape.namespace, &self.input.scheduling.namespaces);
            for namespace in namespaces {
                blocked.extend(
                    self.selected(&namespace, &term.selector)
                        .iter()
                        .map(|(n, _)| *n),
                );
            }
        }
        Some(blocked)
    }

    fn compatible(&mut self, shape: &Arc<PodShape>, class: usize) -> bool {
        let key = (Arc::as_ptr(shape), class);
        if let Some(hit) = self.fits.get(&key) {
            return *hit;
        }
        let c = &self.classes[class];
        let mut tolerations = shape.tolerations.clone();
        tolerations.push(Toleration::exists_for_effect(
            TaintEffect::PreferNoSchedule.as_str(),
        ));
        let tolerated = first_untolerated(&tolerations, &c.taints).is_none();
        let mut base = shape.node_selector.clone();
        base.add_all(&shape.volume_requirements);
        let fits = |term: Option<&Requirements>| {
            let mut required = base.clone();
            if let Some(term) = term {
                required.add_all(term);
            }
            required.remove(labels::HOSTNAME);
            c.requirements
                .is_compatible(&required, AllowUndefined::None)
        };
        let ok = tolerated
            && if shape.required_terms.is_empty() {
                fits(None)
            } else {
                shape.required_terms.iter().any(|t| fits(Some(t)))
            };
        self.fits.insert(key, ok);
        ok
    }

    /// The topology the batch depends on: the selectors of its pods' terms, the existing
    /// anti-affinity terms that select its pods (with their selectors, which the scheduler
    /// counts too), and for ghosts the existing pods these select. `None` when nothing
    /// topological concerns the batch. Counts on a hostname key only matter on the node
    /// itself, so ghosts need only what non-hostname keys (and hostname affinity, which asks
    /// whether any selected pod exists) select.
    fn relevant_topology(&mut self, shapes: &[Arc<PodShape>]) -> Option<Relevant> {
        let mut selectors = batch_selectors(&self.input.scheduling.namespaces, shapes);
        let index = self.topology_index();
        let mut groups = Vec::new();
        for (id, group) in index.anti.iter().enumerate() {
            let selects = shapes.iter().any(|shape| {
                group.namespaces.binary_search(&shape.namespace).is_ok()
                    && group.selector.matches(&shape.labels)
            });
            if selects {
                groups.push(id);
                selectors.push(Selector {
                    namespaces: group.namespaces.clone(),
                    selector: group.selector.clone(),
                    for_ghosts: !group.hostname,
                    shift: None,
                });
            }
        }
        if selectors.is_empty() {
            return None;
        }
        let selectors = merge_selectors(selectors);
        let mut fixed: Vec<PodRef> = Vec::new();
        let index = self.topology_index();
        for group in &groups {
            if !index.anti[*group].hostname {
                fixed.extend_from_slice(&index.anti[*group].pods);
            }
        }
        let mut shifted: Vec<Shifted> = Vec::new();
        for selector in selectors.iter().filter(|s| s.for_ghosts) {
            match (&selector.shift, selector.namespaces.as_slice()) {
                (Some(key), [namespace]) => shifted.push(Shifted {
                    key: key.clone(),
                    namespace: namespace.clone(),
                    selector: selector.selector.clone(),
                }),
                _ => {
                    for namespace in &selector.namespaces {
                        let pods = self.selected(namespace, &selector.selector).to_vec();
                        fixed.extend(pods);
                    }
                }
            }
        }
        fixed.sort_unstable();
        fixed.dedup();
        // A pod another use counts too cannot be shifted away: then every pod stays.
        let mut conflict = false;
        for (i, a) in shifted.iter().enumerate() {
            let a_pods = self.selected(&a.namespace, &a.selector).to_vec();
            conflict |= a_pods.iter().any(|p| fixed.binary_search(p).is_ok());
            for b in &shifted[i + 1..] {
                conflict |= intersects(&a_pods, self.selected(&b.namespace, &b.selector));
            }
        }
        if conflict {
            for s in shifted.drain(..) {
                let pods = self.selected(&s.namespace, &s.selector).to_vec();
                fixed.extend(pods);
            }
            fixed.sort_unstable();
            fixed.dedup();
        }
        let keys = groups
            .iter()
            .map(|g| self.topology_index().anti[*g].key.clone())
            .collect();
        Some(Relevant {
            selectors,
            groups,
            fixed,
            shifted,
            keys,
        })
    }

    /// A shiftable selector's pods per domain of its key, each list sorted (computed once
    /// per round); pods on nodes without the key are left out (not counted on it).
    fn per_domain(&mut self, shifted: &Shifted) -> &[(String, Vec<PodRef>)] {
        let cache_key = (
            shifted.namespace.clone(),
            shifted.selector.clone(),
            shifted.key.clone(),
        );
        if !self.per_domain.contains_key(&cache_key) {
            let pods = self
                .selected(&shifted.namespace, &shifted.selector)
                .to_vec();
            let mut lists: BTreeMap<String, Vec<PodRef>> = BTreeMap::new();
            for pod in pods {
                let class = &self.classes[self.class_of[pod.0]];
                if let Some(domain) = class.ghost.labels.get(&shifted.key) {
                    lists.entry(domain.clone()).or_default().push(pod);
                }
            }
            self.per_domain
                .insert(cache_key.clone(), lists.into_iter().collect());
        }
        self.per_domain.get(&cache_key).map_or(&[], Vec::as_slice)
    }

    /// Every value the topology key could have as a domain (the scheduler's domains are a
    /// subset: the pools' offerings and the existing nodes' labels); `None` when a pool allows
    /// values that cannot be listed.
    fn domains(&mut self, key: &Arc<str>) -> Option<&[String]> {
        if !self.domains.contains_key(key) {
            let snapshot = &self.input.scheduling;
            let mut values: BTreeSet<String> = BTreeSet::new();
            let mut bounded = true;
            for pool in &snapshot.node_pools {
                let pool_requirement = pool.requirements.get(key);
                for instance_type in &pool.instance_types {
                    let combined = match (pool_requirement, instance_type.requirements.get(key)) {
                        (None, None) => continue,
                        (Some(r), None) | (None, Some(r)) => r.clone(),
                        (Some(a), Some(b)) => a.intersection(b),
                    };
                    if combined.is_complement() {
                        bounded = false;
                    } else {
                        values.extend(combined.values().iter().map(ToString::to_string));
                    }
                }
                if let Some(r) = pool_requirement {
                    if r.is_complement() {
                        bounded = false;
                    } else {
                        values.extend(r.values().iter().map(ToString::to_string));
                    }
                }
            }
            for node in &snapshot.existing_nodes {
                if let Some(value) = node.labels.get(key) {
                    values.insert(value.clone());
                }
            }
            self.domains
                .insert(key.clone(), bounded.then(|| values.into_iter().collect()));
        }
        self.domains.get(key).and_then(Option::as_deref)
    }

    /// The counted pods a selector selects in a namespace (computed once per round).
    fn selected(&mut self, namespace: &str, selector: &LabelSelector) -> &[PodRef] {
        let key = (namespace.to_owned(), selector.clone());
        if !self.selected.contains_key(&key) {
            let snapshot = &self.input.scheduling;
            let index = self.topology_index();
            let mut pods = Vec::new();
            if let LabelSelector::Terms(terms) = selector {
                let anchor = terms
                    .iter()
                    .find(|t| t.operator == SelectorOperator::In && t.values.len() == 1);
                let list = match anchor {
                    Some(term) => index.by_label.get(&(
                        Arc::from(namespace),
                        term.key.clone(),
                        term.values[0].clone(),
                    )),
                    None => index.by_namespace.get(namespace),
                };
                let candidates = list.map(|list| &index.lists[*list]);
                for (node, pod) in candidates.into_iter().flatten() {
                    let bound = &snapshot.existing_nodes[*node].pods[*pod];
                    if selector.matches(&bound.labels) {
                        pods.push((*node, *pod));
                    }
                }
            }
            self.selected.insert(key.clone(), pods);
        }
        self.selected.get(&key).map_or(&[], Vec::as_slice)
    }

    /// Whether a pod of a node given as itself matters to the batch: it binds host ports, or
    /// topology counts it (a relevant selector selects it, or it owns a relevant
    /// anti-affinity term).
    fn keeps(&self, relevant: Option<&Relevant>, node: usize, index: usize) -> bool {
        let pod = &self.input.scheduling.existing_nodes[node].pods[index];
        if !pod.host_ports.is_empty() {
            return true;
        }
        let (Some(relevant), Some(topology)) = (relevant, &self.topology) else {
            return false;
        };
        if !pod.counts_for_topology {
            return false;
        }
        relevant.selectors.iter().any(|s| {
            s.namespaces
                .binary_search_by(|n| n.as_str().cmp(&pod.namespace))
                .is_ok()
                && s.selector.matches(&pod.labels)
        }) || topology
            .anti_of
            .get(&(node, index))
            .is_some_and(|ids| ids.iter().any(|id| relevant.groups.contains(id)))
    }

    fn topology_index(&mut self) -> &TopologyIndex {
        if self.topology.is_none() {
            let snapshot = &self.input.scheduling;
            let mut index = TopologyIndex::default();
            let mut group_ids: FxHashMap<(Vec<String>, LabelSelector, Arc<str>), usize> =
                FxHashMap::default();
            // The lists of the previous pod's namespace and labels: the pods of a workload
            // share their labels' `Arc` and mostly sit side by side, so their lists are found
            // once per run of them rather than once per pod and label.
            let mut previous: Option<(&BoundPod, usize, Vec<usize>)> = None;
            let TopologyIndex {
                by_label,
                by_namespace,
                lists,
                anti,
                anti_of,
            } = &mut index;
            let new_list = |lists: &mut Vec<Vec<PodRef>>| {
                lists.push(Vec::new());
                lists.len() - 1
            };
            for (n, node) in snapshot.existing_nodes.iter().enumerate() {
                for (p, pod) in node.pods.iter().enumerate() {
                    if !pod.counts_for_topology {
                        continue;
                    }
                    let same = previous.as_ref().is_some_and(|(last, _, _)| {
                        Arc::ptr_eq(&last.labels, &pod.labels) && last.namespace == pod.namespace
                    });
                    if !same {
                        let namespace_list = *by_namespace
                            .entry(pod.namespace.clone())
                            .or_insert_with(|| new_list(lists));
                        let label_lists = pod
                            .labels
                            .iter()
                            .map(|(key, value)| {
                                let key = (pod.namespace.clone(), key.clone(), value.clone());
                                *by_label.entry(key).or_insert_with(|| new_list(lists))
                            })
                            .collect();
                        previous = Some((pod, namespace_list, label_lists));
                    }
                    if let Some((_, namespace_list, label_lists)) = &previous {
                        lists[*namespace_list].push((n, p));
                        for list in label_lists {
                            lists[*list].push((n, p));
                        }
                    }
                    for term in &pod.anti_affinity {
                        let key = (
                            term.selected_namespaces(&pod.namespace, &snapshot.namespaces),
                            term.selector.clone(),
                            Arc::from(labels::normalize(&term.topology_key)),
                        );
                        let next = anti.len();
                        let id = *group_ids.entry(key.clone()).or_insert(next);
                        if id == next {
                            anti.push(AntiGroup {
                                namespaces: key.0,
                                selector: key.1,
                                hostname: &*key.2 == labels::HOSTNAME,
                                key: key.2,
                                pods: Vec::new(),
                            });
                        }
                        anti[id].pods.push((n, p));
                        anti_of.entry((n, p)).or_default().push(id);
                    }
                }
            }
            self.topology = Some(index);
        }
        self.topology.get_or_insert_with(TopologyIndex::default)
    }

    /// Judges a plan: failures of pods that must schedule, and pods that must not land on a
    /// node still initializing (unless they come from a deleting node).
    fn judge(&self, plan: Plan, pods: Vec<SimulatedPod>, work: u64) -> Simulation {
        let mut errors: Vec<(usize, String)> = plan
            .failures
            .iter()
            .filter(|f| pods.get(f.pod).is_some_and(|p| p.origin != Origin::Pending))
            .map(|f| (f.pod, f.message()))
            .collect();
        for placement in &plan.existing {
            let Some(node) = self.input.scheduling.existing_nodes.get(placement.node) else {
                continue;
            };
            if node.initialized {
                continue;
            }
            let mut parts = Vec::new();
            if let Some(claim) = self.claim_names.get(placement.node).cloned().flatten() {
                parts.push(format!("nodeclaim/{claim}"));
            }
            if node.registered {
                parts.push(format!("node/{}", node.name));
            }
            let message = format!("would schedule against uninitialized {}", parts.join(", "));
            for pod in &placement.pods {
                if pods
                    .get(*pod)
                    .is_some_and(|p| p.origin == Origin::Candidate)
                {
                    errors.push((*pod, message.clone()));
                }
            }
        }
        errors.sort_by_key(|(pod, _)| *pod);
        Simulation {
            pods,
            plan,
            errors,
            work,
        }
    }
}

/// A solved reduced snapshot.
#[derive(Debug)]
struct Solved {
    plan: Plan,
    /// Per pod: placed by its first attempt, unrelaxed.
    first_try: Vec<bool>,
    work: u64,
}

/// The prefix of a simulation.
#[derive(Debug)]
struct Cut {
    /// Existing nodes given to the solver as themselves.
    real: Vec<usize>,
    /// Position in the solver order where the prefix ends.
    end: usize,
    /// Every open node is in the prefix.
    complete: bool,
    /// Every non-excluded node is in it, no ghosts.
    full: bool,
}

/// The pods of one simulation and the nodes it removes.
#[derive(Debug)]
struct Batch {
    pods: Vec<SchedulingPod>,
    /// Per existing node: a candidate, removed.
    excluded: Vec<bool>,
    excluded_list: Vec<usize>,
    /// Some pod's (anti-)affinity term selects namespaces by label.
    namespace_selectors: bool,
    /// The (normalized) label keys the simulation reads on existing nodes.
    label_keys: FxHashSet<Arc<str>>,
}

/// An existing node of a reduced snapshot.
#[derive(Debug, Clone, Copy)]
enum Entry {
    Real(usize),
    Ghost(usize),
}

/// A reduced snapshot's existing nodes.
#[derive(Debug)]
struct ReducedNodes {
    nodes: Vec<ExistingNode>,
    /// Reduced index to snapshot index (`usize::MAX` for ghosts).
    map: Vec<usize>,
    ghosts_per_pool: FxHashMap<usize, i64>,
    work: u64,
}

/// What topology the batch depends on.
#[derive(Debug)]
struct Relevant {
    /// The selectors whose counts the batch's decisions read.
    selectors: Vec<Selector>,
    /// The existing anti-affinity groups that select batch pods.
    groups: Vec<usize>,
    /// Pods ghosts must carry, sorted.
    fixed: Vec<PodRef>,
    /// Shiftable selectors whose pods nothing else needs.
    shifted: Vec<Shifted>,
    /// The topology keys of the relevant existing anti-affinity terms.
    keys: Vec<Arc<str>>,
}

/// A spread selector whose counts may be shifted (see [`Selector::shift`]).
#[derive(Debug, Clone)]
struct Shifted {
    key: Arc<str>,
    namespace: String,
    selector: LabelSelector,
}

/// Whether two sorted lists share an element.
fn intersects(a: &[PodRef], b: &[PodRef]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

fn is_hostname(key: &str) -> bool {
    labels::normalize(key) == labels::HOSTNAME
}

/// A selector topology counts with.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Selector {
    /// The namespaces it selects in.
    namespaces: Vec<String>,
    selector: LabelSelector,
    /// Whether ghosts need what it selects (not for hostname keys, whose counts matter on
    /// the node only).
    for_ghosts: bool,
    /// Only used by spread constraints on this (non-hostname) key that count every node and
    /// have no `minDomains`: their decisions read count differences only, so the same number
    /// of pods may go from every domain (see [`Simulator::ghost_pods`]).
    shift: Option<Arc<str>>,
}

/// Whether a spread constraint's counts may be shifted (see [`Selector::shift`]).
fn shiftable(shape: &PodShape, spread: &SpreadConstraint) -> Option<Arc<str>> {
    let every_node = (!spread.honor_node_affinity
        || (shape.node_selector.is_empty()
            && shape.required_terms.is_empty()
            && shape.volume_requirements.is_empty()))
        && !spread.honor_node_taints;
    (every_node && spread.min_domains.is_none() && !is_hostname(&spread.topology_key))
        .then(|| Arc::from(labels::normalize(&spread.topology_key)))
}

/// The selectors of the batch's own spread and (anti-)affinity terms.
fn batch_selectors(
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    shapes: &[Arc<PodShape>],
) -> Vec<Selector> {
    let mut selectors = Vec::new();
    for shape in shapes {
        for spread in &shape.spread {
            selectors.push(Selector {
                namespaces: vec![shape.namespace.clone()],
                selector: spread.selector.clone(),
                for_ghosts: !is_hostname(&spread.topology_key),
                shift: shiftable(shape, spread),
            });
        }
        for term in shape.affinity.iter().chain(&shape.preferred_affinity) {
            selectors.push(Selector {
                namespaces: term.selected_namespaces(&shape.namespace, namespaces),
                selector: term.selector.clone(),
                for_ghosts: true,
                shift: None,
            });
        }
        for term in shape
            .anti_affinity
            .iter()
            .chain(&shape.preferred_anti_affinity)
        {
            selectors.push(Selector {
                namespaces: term.selected_namespaces(&shape.namespace, namespaces),
                selector: term.selector.clone(),
                for_ghosts: !is_hostname(&term.topology_key),
                shift: None,
            });
        }
    }
    selectors
}

/// Merges selectors that select alike: ghosts need what any use needs, and a selector is
/// shiftable only when every use is, on one key.
fn merge_selectors(selectors: Vec<Selector>) -> Vec<Selector> {
    let mut merged: Vec<Selector> = Vec::new();
    let mut index: FxHashMap<(Vec<String>, LabelSelector), usize> = FxHashMap::default();
    for selector in selectors {
        let key = (selector.namespaces.clone(), selector.selector.clone());
        if let Some(i) = index.get(&key) {
            let existing = &mut merged[*i];
            existing.for_ghosts |= selector.for_ghosts;
            if existing.shift != selector.shift {
                existing.shift = None;
            }
        } else {
            index.insert(key, merged.len());
            merged.push(selector);
        }
    }
    merged
}

/// The label keys a simulation reads on existing nodes: the hostname, the NodePool (limits),
/// every key the batch's requirements (node selector, required and preferred terms, volumes)
/// and topology terms name, and the keys of the existing anti-affinity terms that select
/// batch pods. Other labels cannot change a placement: compatibility only looks at the keys
/// a pod requires, topology only at its keys.
fn label_keys(shapes: &[Arc<PodShape>], relevant: Option<&Relevant>) -> FxHashSet<Arc<str>> {
    let mut keys: FxHashSet<Arc<str>> = FxHashSet::default();
    keys.insert(Arc::from(labels::HOSTNAME));
    keys.insert(Arc::from(labels::NODEPOOL));
    for shape in shapes {
        let requirements = std::iter::once(&shape.node_selector)
            .chain(&shape.required_terms)
            .chain(shape.preferred_terms.iter().map(|t| &t.requirements))
            .chain(std::iter::once(&shape.volume_requirements));
        for requirements in requirements {
            keys.extend(requirements.keys().map(Arc::from));
        }
        let topology = shape
            .spread
            .iter()
            .map(|s| &s.topology_key)
            .chain(shape.affinity.iter().map(|t| &t.topology_key))
            .chain(shape.preferred_affinity.iter().map(|t| &t.topology_key))
            .chain(shape.anti_affinity.iter().map(|t| &t.topology_key))
            .chain(
                shape
                    .preferred_anti_affinity
                    .iter()
                    .map(|t| &t.topology_key),
            );
        keys.extend(topology.map(|k| Arc::from(labels::normalize(k))));
    }
    if let Some(relevant) = relevant {
        keys.extend(relevant.keys.iter().cloned());
    }
    keys
}

/// The labels whose (normalized) keys are among `keys`.
fn trimmed(labels: &NodeLabels, keys: &FxHashSet<Arc<str>>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| keys.contains(labels::normalize(k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A node's copy with other labels and pods.
fn existing_copy(
    node: &ExistingNode,
    labels: BTreeMap<String, String>,
    pods: Vec<Arc<BoundPod>>,
) -> ExistingNode {
    ExistingNode {
        name: node.name.clone(),
        labels: labels.into(),
        taints: node.taints.clone(),
        allocatable: node.allocatable.clone(),
        requested: node.requested.clone(),
        pending_daemon_overhead: node.pending_daemon_overhead.clone(),
        capacity: node.capacity.clone(),
        pods,
        initialized: node.initialized,
        registered: node.registered,
    }
}

fn plan_on_existing(plan: &Plan, pods: usize) -> bool {
    plan.new_node_claims.is_empty() && plan.failures.is_empty() && plan.scheduled_pods() == pods
}

fn distinct_shapes(pods: &[SchedulingPod]) -> Vec<Arc<PodShape>> {
    let mut seen: FxHashSet<*const PodShape> = FxHashSet::default();
    let mut out = Vec::new();
    for pod in pods {
        if seen.insert(Arc::as_ptr(&pod.shape)) {
            out.push(pod.shape.clone());
        }
    }
    out
}

/// The solver's smallest request: the least of each core resource over the batch.
fn min_request(pods: &[SchedulingPod]) -> Resources {
    let mut iter = pods.iter();
    let Some(first) = iter.next() else {
        return Resources::default();
    };
    let r = &first.shape.requests;
    let mut min = Resources::core(r.cpu, r.memory, r.pods);
    min.ephemeral_storage = r.ephemeral_storage;
    for pod in iter {
        let r = &pod.shape.requests;
        min.cpu = min.cpu.min(r.cpu);
        min.memory = min.memory.min(r.memory);
        min.pods = min.pods.min(r.pods);
        min.ephemeral_storage = min.ephemeral_storage.min(r.ephemeral_storage);
    }
    min
}

fn uses_namespace_selector(shape: &PodShape) -> bool {
    shape
        .affinity
        .iter()
        .chain(&shape.preferred_affinity)
        .chain(&shape.anti_affinity)
        .chain(&shape.preferred_anti_affinity)
        .any(|t| t.namespace_selector.is_some())
}

/// Whether the pod's placement depends on hostnames (then ghosts would not do).
fn names_hostname(shape: &PodShape) -> bool {
    shape.node_selector.has(labels::HOSTNAME)
        || shape.volume_requirements.has(labels::HOSTNAME)
        || shape.required_terms.iter().any(|t| t.has(labels::HOSTNAME))
}

/// A pool cut down to the instance types that decide the solver's pod order: those with the
/// least $ per CPU and per byte of allocatable among the types the pool allows.
fn restrict_pool(pool: &NodePoolInput) -> NodePoolInput {
    let mut base = pool.requirements.clone();
    base.remove(labels::HOSTNAME);
    let allowed: Vec<&Arc<InstanceType>> = pool
        .instance_types
        .iter()
        .filter(|t| t.is_compatible(&base))
        .collect();
    let per = |t: &InstanceType, amount: i64| {
        let price = t
            .available_offerings()
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min);
        if amount > 0 {
            price / approx_f64(amount)
        } else {
            f64::INFINITY
        }
    };
    let cheapest = |amount: fn(&InstanceType) -> i64| {
        allowed
            .iter()
            .min_by(|a, b| per(a, amount(a)).total_cmp(&per(b, amount(b))))
            .map(|t| (*t).clone())
    };
    let mut types: Vec<Arc<InstanceType>> = Vec::new();
    for t in [
        cheapest(|t| t.allocatable().cpu),
        cheapest(|t| t.allocatable().memory),
    ]
    .into_iter()
    .flatten()
    {
        if !types.iter().any(|k| Arc::ptr_eq(k, &t)) {
            types.push(t);
        }
    }
    NodePoolInput {
        instance_types: types,
        ..pool.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, zone: &str) -> ExistingNode {
        ExistingNode {
            name: name.to_owned(),
            labels: BTreeMap::from([
                (labels::HOSTNAME.to_owned(), name.to_owned()),
                (labels::ZONE.to_owned(), zone.to_owned()),
            ])
            .into(),
            registered: true,
            initialized: true,
            ..ExistingNode::default()
        }
    }

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            value: None,
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }
    }

    /// Nodes share a class when all but their hostnames agree: labels, taints and flags.
    #[test]
    fn a_class_is_the_labels_but_the_hostname_the_taints_and_the_flags() {
        let mut nodes: Vec<ExistingNode> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|name| node(name, "zone-1"))
            .collect();
        nodes[2].labels = node("c", "zone-2").labels;
        nodes[3].taints = vec![taint("dedicated")];
        nodes[4].taints = vec![taint("dedicated")];
        nodes[5].initialized = false;
        let order: Vec<usize> = (0..nodes.len()).collect();
        let free = vec![Resources::default(); nodes.len()];
        let pools = vec![None; nodes.len()];
        let (class_of, classes) = Simulator::classes(&nodes, &order, &free, &pools);
        assert_eq!(class_of, vec![0, 0, 1, 2, 2, 3]);
        assert_eq!(classes.len(), 4);
        assert_eq!(classes[2].taints, vec![taint("dedicated")]);
        assert!(!classes[0].ghost.labels.contains_key(labels::HOSTNAME));
    }
}

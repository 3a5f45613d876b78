//! The scheduling loop: Karpenter's algorithm (each pod in turn, largest first: existing
//! nodes, then NodeClaims being planned, then a new NodeClaim from the heaviest NodePool that
//! can take it, relaxing preferences one at a time; failed pods retried until a pass places
//! nothing) on data structures that keep the time per pod flat as the batch grows, with two
//! cheap changes that make plans cheaper.
//!
//! How it stays fast:
//! - Pods with equal [`PodShape`]s share a signature; each signature's requirements,
//!   tolerations, topology groups and relaxations ("variants") are computed once.
//! - Requirements are interned; compatibility and merges of (node class, pod requirements)
//!   pairs, the instance types a class allows, and taint toleration are cached.
//! - Nodes and planned NodeClaims are "slots" in one list, existing nodes first. A slot that
//!   cannot fit the smallest pod of the batch is closed. A search skips, 64 slots per word,
//!   closed slots and slots a hostname anti-affinity or spread rule blocks, and resumes from
//!   a per-variant cursor: what refused a pod (resources used, requirements narrowed, pods
//!   counted) only grows, so an identical pod need not look at those slots again.
//! - Topology counts are updated incrementally on placement; the node-independent part of
//!   each topology decision is computed once per attempt, not once per slot.
//! - A NodeClaim's instance types are filtered by requirements when those change and by fit
//!   only where it matters (the cheapest-type cursor, fit checks, the plan).
//!
//! How plans get cheaper:
//! - The queue is largest-first by cost (the cheapest $ per CPU and per byte), merged from
//!   CPU-heavy and memory-heavy pods so every stretch of the queue keeps the batch's
//!   CPU:memory ratio and NodeClaims fill both at once ([`Solver::queue_order`]).
//! - Before first fit, a pod goes where a NodeClaim's cheapest instance type still has room
//!   for it, at no extra cost (the free-room index, searched with a fixed budget).
//!
//! Other deliberate differences from Karpenter: NodeClaims are tried oldest first rather than
//! fewest pods first (true first fit packs tighter and needs no sort per pod); ties between
//! topology domains go to the lowest domain instead of a random one; topology rules on the
//! same key narrow one after another instead of independently (so a spread and an affinity on
//! the zone can agree on a zone); `NotIn` values are not topology domains; `minDomains` is part
//! of a spread group's identity; a NodePool's `nodes` limit counts NodeClaims, and limits get
//! back the capacity of instance types a NodeClaim's narrowed requirements rule out.
//!
//! Modules: [`setup`] builds the state, [`variants`] the relaxation steps, [`groups`] the
//! topology groups, [`search`] finds where a pod fits, [`placement`] commits it, [`results`]
//! writes the plan.

use std::collections::{BTreeMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;

use karpenter_config::PreferencePolicy;
use rustc_hash::FxHashMap;

use crate::apis::taints::Taint;
use crate::domain::instance_type::{InstanceType, MinValuesError};
use crate::domain::requirements::{Requirement, Requirements};
use crate::domain::resources::{ResourceLimits, Resources, approx_f64};

use super::Options;
use super::bitset::BitSet;
use super::input::Snapshot;
use super::pod::{HostPort, PodShape, SpreadConstraint, Toleration};
use super::topology::{Allowance, DomainTable, Group, GroupKey};

mod groups;
mod placement;
mod results;
mod search;
mod setup;
mod variants;

/// Values interned once and referred to by index.
#[derive(Debug)]
pub(super) struct Interner<T> {
    items: Vec<T>,
    index: FxHashMap<T, usize>,
}

impl<T: Hash + Eq + Clone> Interner<T> {
    fn new() -> Self {
        Self {
            items: Vec::new(),
            index: FxHashMap::default(),
        }
    }

    pub fn intern(&mut self, item: T) -> usize {
        if let Some(id) = self.index.get(&item) {
            return *id;
        }
        let id = self.items.len();
        self.items.push(item.clone());
        self.index.insert(item, id);
        id
    }

    pub fn get(&self, id: usize) -> &T {
        &self.items[id]
    }
}

/// How far a pod's preferences have been relaxed (Karpenter's `Preferences.Relax` steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(super) struct Relaxation {
    required_terms_dropped: usize,
    preferred_affinity_dropped: usize,
    preferred_anti_dropped: usize,
    preferred_node_dropped: usize,
    schedule_anyway_dropped: usize,
    tolerate_prefer_no_schedule: bool,
}

/// A pod signature at one relaxation step: what the scheduler checks.
#[derive(Debug)]
pub(super) struct Variant {
    pub sig: usize,
    relax: Relaxation,
    /// Requirements (preferences included when respected), without the hostname.
    pub req: usize,
    /// Required-only requirements, without the hostname.
    pub strict: usize,
    /// The hostname requirement, if any.
    pub host: Option<Requirement>,
    pub strict_host: Option<Requirement>,
    pub tolerations: usize,
    /// Owned topology groups: anti-affinity, then affinity, then spread.
    pub groups: Vec<usize>,
    /// How many of `groups` are anti-affinity.
    anti_groups: usize,
    /// Per domain table: domains the strict requirements allow, and those the requirements
    /// allow.
    pod_domains: FxHashMap<usize, (BitSet, BitSet)>,
    /// Whether a hostname affinity group is owned (its search cannot resume from a cursor).
    host_affinity: bool,
    next: NextVariant,
}

/// Existing pods of one namespace and equal (shared) labels, and the slots they are on with
/// how many of them each holds (a ghost node of a disruption simulation can stand for
/// thousands).
type LabelSet = (Arc<str>, Arc<BTreeMap<String, String>>, Vec<(usize, u32)>);

/// The variant one relaxation step further, once computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NextVariant {
    Unknown,
    None,
    Some(usize),
}

/// Pods with equal shapes.
#[derive(Debug)]
pub(super) struct Sig {
    pub shape: Arc<PodShape>,
    /// Non-inverse groups whose selector selects these pods (they are counted there).
    selected_by: Vec<usize>,
    /// Inverse anti-affinity groups selecting these pods (they must avoid those domains).
    inverse_selecting: Vec<usize>,
    /// Inverse groups of these pods' own required anti-affinity terms.
    inverse_owned: Vec<usize>,
    base: usize,
}

/// A NodePool, in the order pools are tried.
#[derive(Debug)]
pub(super) struct Pool {
    /// Index into [`Snapshot::node_pools`].
    pub input: usize,
    pub name: String,
    pub base: usize,
    pub taints: usize,
    /// Instance types the pool's requirements allow, cheapest first.
    pub types: Vec<Arc<InstanceType>>,
    alloc: Vec<Resources>,
    capacity: Vec<Resources>,
    class_types: FxHashMap<usize, BitSet>,
    /// Per class: its instance types, cheapest compatible offering first.
    class_order: FxHashMap<usize, Vec<usize>>,
    /// Per class: (instance type, reservation ID) of the available reserved offerings the
    /// class allows.
    class_reserved: FxHashMap<usize, Vec<(usize, Arc<str>)>>,
    pub remaining: ResourceLimits,
    /// Types within the remaining limits, and whether that set is current.
    within_limits: BitSet,
    within_limits_stale: bool,
    pub daemon: Resources,
    daemon_ports: Vec<HostPort>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotKind {
    /// Index into [`Snapshot::existing_nodes`].
    Existing(usize),
    /// Index into the solver's pools.
    Claim(usize),
}

/// An existing node or a NodeClaim being planned.
#[derive(Debug)]
pub(super) struct Slot {
    pub kind: SlotKind,
    pub class: usize,
    pub taints: usize,
    pub used: Resources,
    /// Existing: what is free; NodeClaims: the largest allocatable of each resource over the
    /// remaining instance types.
    capacity: Resources,
    /// NodeClaims: the remaining instance types (pool type indices).
    pub types: BitSet,
    /// NodeClaims: the largest capacity of each resource over the remaining types (counted
    /// against the pool's limits).
    max_capacity: Resources,
    pub pods: Vec<usize>,
    host_ports: Vec<HostPort>,
    pub hostname: Arc<str>,
    /// NodeClaims: the cheapest remaining instance type for the class (pool type index), the
    /// position of the search for it in the class's price order, and what that type leaves
    /// free (room a pod can take without making the NodeClaim more expensive).
    cheapest: usize,
    price_cursor: usize,
    slack: Resources,
    /// Where the slot is filed in the free-room index: its bucket and position.
    room: Option<(RoomBucket, usize)>,
    /// NodeClaims: the capacity reservations held for it (one instance each).
    reserved: Vec<Arc<str>>,
}

/// Free room in (CPU, memory) buckets: bucket `b` holds amounts in `[2^(b-1), 2^b)`.
type RoomBucket = (u8, u8);

/// Why a slot or a new NodeClaim refused a pod.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Reject {
    Taint(Taint),
    HostPort(HostPort),
    Resources,
    Hostname,
    Requirements,
    Topology {
        group: usize,
        inverse: bool,
    },
    Limits(String),
    InstanceTypes {
        class: usize,
    },
    MinValues(MinValuesError),
    /// Strict reserved-offering mode: the pod would take the NodeClaim off capacity
    /// reservations it could use, or every compatible reservation is used up.
    Reserved,
}

/// A slot can take the pod; its class (requirements) becomes `class`.
#[derive(Debug)]
struct Fit {
    class: usize,
    /// The capacity reservations the NodeClaim holds with the pod added.
    reserve: Vec<Arc<str>>,
}

/// A new NodeClaim can take the pod.
#[derive(Debug)]
struct NewFit {
    fit: Fit,
    types: BitSet,
}

/// Remaining capacity of each reservation (Karpenter's `ReservationManager`).
#[derive(Debug)]
pub(super) struct Reservations {
    capacity: FxHashMap<Arc<str>, i64>,
    strict: bool,
}

/// Per-attempt scratch: the node-independent topology decisions.
#[derive(Debug, Default)]
struct Attempt {
    allowances: Vec<(Allowance, bool)>,
    context: u64,
}

/// The solver state for one [`super::solve`] call.
pub(super) struct Solver<'a> {
    snapshot: &'a Snapshot,
    policy: PreferencePolicy,
    max_instance_types: usize,
    pub reqs: Interner<Requirements>,
    empty_req: usize,
    tolsets: Interner<Vec<Toleration>>,
    taintsets: Vec<Arc<[Taint]>>,
    pub pools: Vec<Pool>,
    /// Inputs whose requirements leave no instance type.
    skipped_pools: Vec<usize>,
    any_prefer_no_schedule: bool,
    pub tables: Vec<DomainTable>,
    table_keys: Vec<Arc<str>>,
    table_of: FxHashMap<Arc<str>, usize>,
    pub groups: Vec<Group>,
    group_index: FxHashMap<GroupKey, usize>,
    /// Selection index: (namespace, label key, label value) → groups anchored there; groups
    /// without an anchor by namespace.
    anchored: FxHashMap<(String, String, String), Vec<usize>>,
    unanchored: FxHashMap<String, Vec<usize>>,
    /// Existing pods grouped by (namespace, labels), with the slots they are on.
    label_sets: Vec<LabelSet>,
    pub sigs: Vec<Sig>,
    sig_index: FxHashMap<Arc<PodShape>, usize>,
    pod_sig: Vec<usize>,
    pub variants: Vec<Variant>,
    variant_index: FxHashMap<(usize, Relaxation), usize>,
    pub slots: Vec<Slot>,
    open: BitSet,
    /// How many slots are existing nodes (they come first).
    existing_slots: usize,
    /// NodeClaims by the free room of their cheapest instance type (non-empty buckets only).
    rooms: BTreeMap<RoomBucket, Vec<usize>>,
    cursors: FxHashMap<(usize, u64, bool), usize>,
    min_request: Resources,
    merge_cache: FxHashMap<(usize, usize, bool), Option<usize>>,
    narrow_cache: FxHashMap<(usize, usize, BitSet), usize>,
    tolerates_cache: FxHashMap<(usize, usize), bool>,
    class_domains: FxHashMap<(usize, usize), BitSet>,
    filter_cache: FxHashMap<(usize, usize, usize), bool>,
    placed: Vec<Option<usize>>,
    last_variant: Vec<usize>,
    attempt: Attempt,
    /// Set once the groups of the unrelaxed pods exist; groups created later (for relaxed
    /// pods) link themselves to the signatures they select.
    ready: bool,
    /// Capacity reservations, when the `ReservedCapacity` gate is on and pools offer some.
    reservations: Option<Reservations>,
    /// Pods deferred because reserved capacity ran out (strict mode).
    deferred: Vec<bool>,
    /// Pods tried at least once, and pods placed by their first attempt with their
    /// unrelaxed requirements (see [`super::solve_observed`]).
    attempted: Vec<bool>,
    pub first_try: Vec<bool>,
    /// Per-class instance-type answers shared with other solves of the same pools.
    pub type_cache: Option<&'a super::TypeCache>,
}

/// Karpenter's placeholder hostnames for NodeClaims not launched yet.
fn placeholder_hostname(slot: usize) -> Arc<str> {
    Arc::from(format!("hostname-placeholder-{slot:04}"))
}

impl<'a> Solver<'a> {
    pub fn new(snapshot: &'a Snapshot, options: &Options) -> Self {
        let mut solver = Self {
            snapshot,
            policy: options.preference_policy,
            max_instance_types: options.max_instance_types,
            reqs: Interner::new(),
            empty_req: 0,
            tolsets: Interner::new(),
            taintsets: Vec::new(),
            pools: Vec::new(),
            skipped_pools: Vec::new(),
            any_prefer_no_schedule: false,
            tables: Vec::new(),
            table_keys: Vec::new(),
            table_of: FxHashMap::default(),
            groups: Vec::new(),
            group_index: FxHashMap::default(),
            anchored: FxHashMap::default(),
            unanchored: FxHashMap::default(),
            label_sets: Vec::new(),
            sigs: Vec::new(),
            sig_index: FxHashMap::default(),
            pod_sig: Vec::with_capacity(snapshot.pods.len()),
            variants: Vec::new(),
            variant_index: FxHashMap::default(),
            slots: Vec::new(),
            open: BitSet::new(),
            existing_slots: 0,
            rooms: BTreeMap::new(),
            cursors: FxHashMap::default(),
            min_request: Resources::default(),
            merge_cache: FxHashMap::default(),
            narrow_cache: FxHashMap::default(),
            tolerates_cache: FxHashMap::default(),
            class_domains: FxHashMap::default(),
            filter_cache: FxHashMap::default(),
            placed: vec![None; snapshot.pods.len()],
            last_variant: vec![0; snapshot.pods.len()],
            attempt: Attempt::default(),
            ready: false,
            reservations: None,
            deferred: vec![false; snapshot.pods.len()],
            attempted: vec![false; snapshot.pods.len()],
            first_try: vec![false; snapshot.pods.len()],
            type_cache: None,
        };
        solver.empty_req = solver.reqs.intern(Requirements::new());
        solver.init_pools();
        solver.init_reservations(options);
        solver.init_sigs();
        solver.init_tables();
        solver.init_existing_slots();
        solver.init_groups();
        solver
    }

    /// Karpenter's queue: each pod in turn, failed pods back at the end, until a full pass
    /// places nothing.
    pub fn run(&mut self) {
        let order = self.queue_order();
        let mut queue: VecDeque<usize> = order.into();
        let mut last_len = vec![0usize; self.snapshot.pods.len()];
        while let Some(&pod) = queue.front() {
            if last_len[pod] == queue.len() {
                break;
            }
            queue.pop_front();
            if !self.try_schedule(pod) {
                queue.push_back(pod);
                last_len[pod] = queue.len();
            }
        }
    }

    /// Pods in the order they are placed: largest first, as Karpenter does, with two changes
    /// that make plans cheaper. "Largest" is what the pod costs at the cheapest $ per CPU and
    /// per byte of the NodePools' instance types, not CPU alone. And CPU-heavy and
    /// memory-heavy pods (relative to the whole batch) are merged so that every prefix of the
    /// queue keeps the batch's CPU:memory ratio: NodeClaims filled from consecutive pods then
    /// run out of CPU and memory together instead of wasting one. Ties keep Karpenter's order
    /// (CPU, memory, creation time, UID).
    fn queue_order(&self) -> Vec<usize> {
        let mut cpu_price = f64::INFINITY;
        let mut memory_price = f64::INFINITY;
        for pool in &self.pools {
            for (instance_type, alloc) in pool.types.iter().zip(&pool.alloc) {
                let price = instance_type
                    .available_offerings()
                    .map(|o| o.price)
                    .fold(f64::INFINITY, f64::min);
                if alloc.cpu > 0 {
                    cpu_price = cpu_price.min(price / approx_f64(alloc.cpu));
                }
                if alloc.memory > 0 {
                    memory_price = memory_price.min(price / approx_f64(alloc.memory));
                }
            }
        }
        let finite = |p: f64| if p.is_finite() { p } else { 0.0 };
        let (cpu_price, memory_price) = (finite(cpu_price), finite(memory_price));
        let pods = &self.snapshot.pods;
        let weight: Vec<f64> = pods
            .iter()
            .map(|p| {
                let r = &p.shape.requests;
                (approx_f64(r.cpu) * cpu_price).max(approx_f64(r.memory) * memory_price)
            })
            .collect();
        let largest_first = |a: &usize, b: &usize| {
            let (pa, pb) = (&pods[*a], &pods[*b]);
            let (ra, rb) = (&pa.shape.requests, &pb.shape.requests);
            weight[*b]
                .total_cmp(&weight[*a])
                .then_with(|| rb.cpu.cmp(&ra.cpu))
                .then_with(|| rb.memory.cmp(&ra.memory))
                .then_with(|| pa.created.cmp(&pb.created))
                .then_with(|| pa.uid.cmp(&pb.uid))
        };
        let total_cpu: f64 = pods.iter().map(|p| approx_f64(p.shape.requests.cpu)).sum();
        let total_memory: f64 = pods
            .iter()
            .map(|p| approx_f64(p.shape.requests.memory))
            .sum();
        if total_cpu <= 0.0 || total_memory <= 0.0 {
            let mut order: Vec<usize> = (0..pods.len()).collect();
            order.sort_by(largest_first);
            return order;
        }
        // Memory per millicore of the batch; a pod below it is CPU-heavy.
        let ratio = total_memory / total_cpu;
        let (mut cpu_heavy, mut memory_heavy): (Vec<usize>, Vec<usize>) = (0..pods.len())
            .partition(|p| {
                let r = &pods[*p].shape.requests;
                approx_f64(r.memory) < ratio * approx_f64(r.cpu)
            });
        cpu_heavy.sort_by(largest_first);
        memory_heavy.sort_by(largest_first);
        let mut order = Vec::with_capacity(pods.len());
        let (mut cpu, mut memory) = (0.0f64, 0.0f64);
        let (mut i, mut j) = (0, 0);
        while i < cpu_heavy.len() || j < memory_heavy.len() {
            let take_cpu_heavy =
                j >= memory_heavy.len() || (i < cpu_heavy.len() && memory >= ratio * cpu);
            let next = if take_cpu_heavy {
                i += 1;
                cpu_heavy[i - 1]
            } else {
                j += 1;
                memory_heavy[j - 1]
            };
            let r = &pods[next].shape.requests;
            cpu += approx_f64(r.cpu);
            memory += approx_f64(r.memory);
            order.push(next);
        }
        order
    }

    fn try_schedule(&mut self, pod: usize) -> bool {
        let base = self.sigs[self.pod_sig[pod]].base;
        let mut variant = base;
        let first = !std::mem::replace(&mut self.attempted[pod], true);
        self.deferred[pod] = false;
        loop {
            match self.add(pod, variant) {
                Added::Placed => {
                    self.first_try[pod] = first && variant == base;
                    return true;
                }
                // Reserved capacity may free up later; relaxing would not help.
                Added::Deferred => {
                    self.deferred[pod] = true;
                    break;
                }
                Added::NoRoom => {}
            }
            match self.relax(variant) {
                Some(next) => variant = next,
                None => break,
            }
        }
        self.last_variant[pod] = variant;
        false
    }

    fn add(&mut self, pod: usize, variant: usize) -> Added {
        self.prepare_attempt(variant);
        if self
            .attempt
            .allowances
            .iter()
            .any(|(a, _)| matches!(a, Allowance::Impossible { .. }))
        {
            return Added::NoRoom;
        }
        let (existing, total) = (self.existing_slots, self.slots.len());
        let found = self
            .find_slot(variant, 0, existing)
            .or_else(|| self.find_free_room(variant))
            .or_else(|| self.find_slot(variant, existing, total));
        if let Some((slot, fit)) = found {
            self.commit(slot, pod, variant, fit);
            return Added::Placed;
        }
        for pool in 0..self.pools.len() {
            match self.check_new(pool, variant) {
                Ok(new) => {
                    let slot = self.open_claim(pool, new.types);
                    self.commit(slot, pod, variant, new.fit);
                    return Added::Placed;
                }
                // A heavier pool has reservations for the pod: lighter pools must not take it.
                Err(Reject::Reserved) => return Added::Deferred,
                Err(_) => {}
            }
        }
        Added::NoRoom
    }
}

/// The outcome of one placement attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Added {
    Placed,
    NoRoom,
    /// Strict reserved-offering mode refused: try again in a later run.
    Deferred,
}

/// Most NodeClaims the free-room search fully checks per pod before falling back to first
/// fit, most it looks at, and most it skips for hostname rules: enough to find room nearby,
/// few enough to keep the time per pod flat (measured with the scheduling bench: larger
/// budgets buy 1-2% of plan cost at 20,000 pods for 25% more time per pod).
const MAX_FREE_ROOM_CHECKS: usize = 16;
const MAX_FREE_ROOM_LOOKS: usize = 64;
const MAX_FREE_ROOM_BLOCKED: usize = 256;

/// The room bucket of an amount: four buckets per power of two (bucket `4k + j` holds
/// `[2^k (1 + j/4), 2^k (1 + (j+1)/4))`), so rooms just too small for a pod are few; zero and
/// below are bucket 0.
fn bucket_of(amount: i64) -> u8 {
    let Ok(amount) = u64::try_from(amount) else {
        return 0;
    };
    if amount < 4 {
        return u8::try_from(amount).unwrap_or(0);
    }
    let octave = amount.ilog2();
    let quarter = (amount >> (octave - 2)) & 3;
    u8::try_from(octave * 4 + u32::try_from(quarter).unwrap_or(0)).unwrap_or(u8::MAX)
}

/// The spread constraints left after removing `dropped` `ScheduleAnyway` ones the way Karpenter
/// does (the first one found is swapped with the last and the list shortened).
fn remaining_spread(spread: &[SpreadConstraint], dropped: usize) -> Vec<&SpreadConstraint> {
    let mut list: Vec<&SpreadConstraint> = spread.iter().collect();
    for _ in 0..dropped {
        match list.iter().position(|s| s.schedule_anyway) {
            Some(i) => {
                list.swap_remove(i);
            }
            None => break,
        }
    }
    list
}

/// The first of `ports` that conflicts with one of `taken`.
fn conflicting_port(ports: &[HostPort], taken: &[HostPort]) -> Option<HostPort> {
    ports
        .iter()
        .find(|p| taken.iter().any(|t| p.conflicts(t)))
        .cloned()
}

/// `used + request` fits into `capacity`, without building the sum.
#[inline]
fn fits_sum(used: &Resources, request: &Resources, capacity: &Resources) -> bool {
    if capacity.cpu < 0
        || capacity.memory < 0
        || capacity.pods < 0
        || capacity.ephemeral_storage < 0
    {
        return false;
    }
    if used.cpu.saturating_add(request.cpu) > capacity.cpu
        || used.memory.saturating_add(request.memory) > capacity.memory
        || used.pods.saturating_add(request.pods) > capacity.pods
        || used
            .ephemeral_storage
            .saturating_add(request.ephemeral_storage)
            > capacity.ephemeral_storage
    {
        return false;
    }
    if request.extended().is_empty() && used.extended().is_empty() && capacity.extended().is_empty()
    {
        return true;
    }
    used.plus(request).fits_in(capacity)
}

//! The scheduling loop: Karpenter's algorithm (first-fit decreasing over existing nodes, then
//! NodeClaims being planned, then a new NodeClaim from the heaviest NodePool that can take
//! the pod, relaxing preferences one at a time) on data structures that keep the time per
//! pod flat as the batch grows.
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
//!
//! Differences from Karpenter, all deliberate: NodeClaims are tried oldest first rather than
//! fewest pods first (true first-fit packs tighter and needs no sort per pod); ties between
//! topology domains go to the lowest domain instead of a random one; topology rules on the
//! same key narrow one after another instead of independently (so a spread and an affinity on
//! the zone can agree on a zone); `NotIn` values are not topology domains; `minDomains` is part
//! of a spread group's identity; a NodePool's `nodes` limit counts NodeClaims, and limits get
//! back the capacity of instance types a NodeClaim can no longer use.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use karpenter_config::PreferencePolicy;
use rustc_hash::{FxHashMap, FxHasher};

use crate::apis::labels;
use crate::apis::taints::{Taint, TaintEffect};
use crate::domain::instance_type::{
    InstanceType, MinValuesError, order_by_price, satisfies_min_values,
};
use crate::domain::requirements::{AllowUndefined, Requirement, Requirements};
use crate::domain::resources::{ResourceLimits, Resources, approx_f64};

use super::Options;
use super::bitset::{BitSet, BitsOf};
use super::input::Snapshot;
use super::plan::{ExistingPlacement, NewNodeClaim, Plan, PodFailure, PoolReason, Reason};
use super::pod::{
    AffinityTerm, HostPort, PodShape, SpreadConstraint, Toleration, first_untolerated,
};
use super::selector::LabelSelector;
use super::topology::{
    Allowance, DomainTable, Group, GroupKey, GroupKind, NodeFilter, without_hostname,
};

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
    Topology { group: usize, inverse: bool },
    Limits(String),
    InstanceTypes { class: usize },
    MinValues(MinValuesError),
}

/// A slot can take the pod; its class (requirements) becomes `class`.
#[derive(Debug)]
struct Fit {
    class: usize,
}

/// A new NodeClaim can take the pod.
#[derive(Debug)]
struct NewFit {
    class: usize,
    types: BitSet,
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
    label_sets: Vec<(String, BTreeMap<String, String>, Vec<usize>)>,
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
        };
        solver.empty_req = solver.reqs.intern(Requirements::new());
        solver.init_pools();
        solver.init_sigs();
        solver.init_tables();
        solver.init_existing_slots();
        solver.init_groups();
        solver
    }

    fn taintset(&mut self, taints: &[Taint]) -> usize {
        if let Some(i) = self.taintsets.iter().position(|t| **t == *taints) {
            return i;
        }
        self.taintsets.push(Arc::from(taints.to_vec()));
        self.taintsets.len() - 1
    }

    fn init_pools(&mut self) {
        let mut order: Vec<usize> = (0..self.snapshot.node_pools.len()).collect();
        order.sort_by(|a, b| {
            let (pa, pb) = (&self.snapshot.node_pools[*a], &self.snapshot.node_pools[*b]);
            pb.weight
                .cmp(&pa.weight)
                .then_with(|| pa.name.cmp(&pb.name))
        });
        for input in order {
            let pool = &self.snapshot.node_pools[input];
            self.any_prefer_no_schedule |= pool
                .taints
                .iter()
                .any(|t| t.effect == TaintEffect::PreferNoSchedule);
            let base_reqs = without_hostname(&pool.requirements);
            let mut types: Vec<Arc<InstanceType>> = pool
                .instance_types
                .iter()
                .filter(|t| t.is_compatible(&base_reqs))
                .cloned()
                .collect();
            if types.is_empty() {
                self.skipped_pools.push(input);
                continue;
            }
            order_by_price(&mut types, &base_reqs);
            let base = self.reqs.intern(base_reqs);
            let taints = self.taintset(&pool.taints);
            let mut remaining = pool.limits.clone();
            for node in &self.snapshot.existing_nodes {
                if node.node_pool() == Some(pool.name.as_str()) {
                    remaining.subtract(&node.capacity);
                }
            }
            self.pools.push(Pool {
                input,
                name: pool.name.clone(),
                base,
                taints,
                alloc: types.iter().map(|t| t.allocatable().clone()).collect(),
                capacity: types.iter().map(|t| t.capacity.clone()).collect(),
                within_limits: BitSet::full(types.len()),
                within_limits_stale: !remaining.is_unlimited(),
                types,
                class_types: FxHashMap::default(),
                class_order: FxHashMap::default(),
                remaining,
                daemon: pool.daemon_overhead.clone(),
                daemon_ports: pool.daemon_host_ports.clone(),
            });
        }
    }

    fn init_sigs(&mut self) {
        let mut min_request: Option<Resources> = None;
        for pod in &self.snapshot.pods {
            let next = self.sigs.len();
            let sig = *self.sig_index.entry(pod.shape.clone()).or_insert(next);
            if sig == next {
                self.sigs.push(Sig {
                    shape: pod.shape.clone(),
                    selected_by: Vec::new(),
                    inverse_selecting: Vec::new(),
                    inverse_owned: Vec::new(),
                    base: usize::MAX,
                });
                let requests = &pod.shape.requests;
                match &mut min_request {
                    None => min_request = Some(requests.clone()),
                    Some(min) => {
                        min.cpu = min.cpu.min(requests.cpu);
                        min.memory = min.memory.min(requests.memory);
                        min.pods = min.pods.min(requests.pods);
                        min.ephemeral_storage =
                            min.ephemeral_storage.min(requests.ephemeral_storage);
                    }
                }
            }
            self.pod_sig.push(sig);
        }
        // Extended resources are left out of the minimum: a pod without them needs none.
        let mut min = min_request.unwrap_or_default();
        for (name, _) in min.extended().to_vec() {
            min.set(&name, 0);
        }
        self.min_request = min;
    }

    fn topology_keys(&self) -> Vec<Arc<str>> {
        let mut keys: Vec<Arc<str>> = Vec::new();
        let mut add = |key: &str| {
            let key = labels::normalize(key);
            if key != labels::HOSTNAME && !keys.iter().any(|k| &**k == key) {
                keys.push(Arc::from(key));
            }
        };
        for sig in &self.sigs {
            let shape = &sig.shape;
            shape.spread.iter().for_each(|s| add(&s.topology_key));
            shape
                .affinity
                .iter()
                .chain(&shape.preferred_affinity)
                .chain(&shape.anti_affinity)
                .chain(&shape.preferred_anti_affinity)
                .for_each(|t| add(&t.topology_key));
        }
        for node in &self.snapshot.existing_nodes {
            for pod in &node.pods {
                pod.anti_affinity.iter().for_each(|t| add(&t.topology_key));
            }
        }
        keys
    }

    fn init_tables(&mut self) {
        for key in self.topology_keys() {
            self.table_of.insert(key.clone(), self.tables.len());
            self.table_keys.push(key);
            self.tables.push(DomainTable::default());
        }
        if self.tables.is_empty() {
            return;
        }
        let keys: Vec<(Arc<str>, usize)> = self
            .table_keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), i))
            .collect();
        for pool in &self.pools {
            let base = self.reqs.get(pool.base);
            let taints = self.taintsets[pool.taints].clone();
            for (key, table) in &keys {
                let pool_req = base.get(key);
                for instance_type in &pool.types {
                    let combined = match (pool_req, instance_type.requirements.get(key)) {
                        (None, None) => continue,
                        (Some(r), None) | (None, Some(r)) => r.clone(),
                        (Some(a), Some(b)) => a.intersection(b),
                    };
                    if !combined.is_complement() {
                        for value in combined.values() {
                            self.tables[*table].offer(value, &taints);
                        }
                    }
                }
                if let Some(r) = pool_req
                    && !r.is_complement()
                {
                    for value in r.values() {
                        self.tables[*table].offer(value, &taints);
                    }
                }
            }
        }
        for node in &self.snapshot.existing_nodes {
            for (key, value) in &node.labels {
                if let Some(table) = self.table_of.get(labels::normalize(key)) {
                    self.tables[*table].intern(value);
                }
            }
        }
    }

    fn init_existing_slots(&mut self) {
        let nodes = &self.snapshot.existing_nodes;
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by(|a, b| {
            let (na, nb) = (&nodes[*a], &nodes[*b]);
            nb.initialized
                .cmp(&na.initialized)
                .then_with(|| na.name.cmp(&nb.name))
        });
        let mut label_sets: FxHashMap<(String, BTreeMap<String, String>), usize> =
            FxHashMap::default();
        for index in order {
            let node = &nodes[index];
            let class_reqs = without_hostname(&Requirements::from_labels(&node.labels));
            let class = self.reqs.intern(class_reqs);
            let taints = self.taintset(&node.taints);
            let mut daemon = node.pending_daemon_overhead.clone();
            daemon.clamp_negative_to_zero();
            let capacity = node.allocatable.minus(&node.requested).minus(&daemon);
            let slot = self.slots.len();
            for pod in node.pods.iter().filter(|p| p.counts_for_topology) {
                let key = (pod.namespace.clone(), pod.labels.clone());
                let next = self.label_sets.len();
                let entry = *label_sets.entry(key).or_insert(next);
                if entry == next {
                    self.label_sets
                        .push((pod.namespace.clone(), pod.labels.clone(), Vec::new()));
                }
                self.label_sets[entry].2.push(slot);
            }
            self.slots.push(Slot {
                kind: SlotKind::Existing(index),
                class,
                taints,
                used: Resources::default(),
                capacity,
                types: BitSet::new(),
                max_capacity: Resources::default(),
                pods: Vec::new(),
                host_ports: node
                    .pods
                    .iter()
                    .flat_map(|p| p.host_ports.clone())
                    .collect(),
                hostname: Arc::from(node.hostname()),
                cheapest: 0,
                price_cursor: 0,
                slack: Resources::default(),
                room: None,
            });
            if self.min_request.fits_in(&self.slots[slot].capacity) {
                self.open.insert(slot);
            }
        }
        self.existing_slots = self.slots.len();
    }

    /// Creates every group the batch's unrelaxed pods and the existing pods' anti-affinity
    /// define, counts existing pods into them, and links signatures to the groups that select
    /// them.
    fn init_groups(&mut self) {
        for sig in 0..self.sigs.len() {
            let base = self.variant(sig, Relaxation::default());
            self.sigs[sig].base = base;
            let shape = self.sigs[sig].shape.clone();
            let tolerations = shape.tolerations.clone();
            let owned: Vec<usize> = shape
                .anti_affinity
                .iter()
                .map(|term| {
                    let key =
                        self.affinity_key(&shape.namespace, term, GroupKind::AntiAffinity, true);
                    self.intern_group(key, Some(&tolerations))
                })
                .collect();
            self.sigs[sig].inverse_owned = owned;
        }
        let snapshot = self.snapshot;
        for (slot, node_pod) in self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(slot, s)| match s.kind {
                SlotKind::Existing(n) => Some((slot, n)),
                SlotKind::Claim(_) => None,
            })
            .flat_map(|(slot, n)| {
                snapshot.existing_nodes[n]
                    .pods
                    .iter()
                    .filter(|p| p.counts_for_topology && !p.anti_affinity.is_empty())
                    .map(move |p| (slot, p))
            })
            .collect::<Vec<_>>()
        {
            for term in &node_pod.anti_affinity {
                let key =
                    self.affinity_key(&node_pod.namespace, term, GroupKind::AntiAffinity, true);
                let group = self.intern_group(key, None);
                self.record_slot_domains(group, slot, true);
            }
        }
        for sig in 0..self.sigs.len() {
            let shape = self.sigs[sig].shape.clone();
            let candidates = self.selection_candidates(&shape.namespace, &shape.labels);
            for group in candidates {
                if self.groups[group].selects(&shape.namespace, &shape.labels) {
                    if self.groups[group].key.inverse {
                        self.sigs[sig].inverse_selecting.push(group);
                    } else {
                        self.sigs[sig].selected_by.push(group);
                    }
                }
            }
        }
        self.ready = true;
    }

    fn selection_candidates(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<usize> {
        let mut out: Vec<usize> = self.unanchored.get(namespace).cloned().unwrap_or_default();
        for (key, value) in labels {
            if let Some(groups) =
                self.anchored
                    .get(&(namespace.to_owned(), key.clone(), value.clone()))
            {
                out.extend_from_slice(groups);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn resolve_namespaces(&self, pod_namespace: &str, term: &AffinityTerm) -> Vec<String> {
        let mut out = match &term.namespace_selector {
            None if term.namespaces.is_empty() => vec![pod_namespace.to_owned()],
            None => term.namespaces.clone(),
            Some(selector) => {
                let mut selected: Vec<String> = self
                    .snapshot
                    .namespaces
                    .iter()
                    .filter(|(_, labels)| selector.matches(labels))
                    .map(|(name, _)| name.clone())
                    .collect();
                selected.extend(term.namespaces.iter().cloned());
                selected
            }
        };
        out.sort_unstable();
        out.dedup();
        out
    }

    fn affinity_key(
        &self,
        namespace: &str,
        term: &AffinityTerm,
        kind: GroupKind,
        inverse: bool,
    ) -> GroupKey {
        GroupKey {
            kind,
            topology_key: Arc::from(labels::normalize(&term.topology_key)),
            namespaces: self.resolve_namespaces(namespace, term),
            selector: term.selector.clone(),
            node_filter: None,
            inverse,
        }
    }

    fn spread_key(shape: &PodShape, tsc: &SpreadConstraint, relax: Relaxation) -> GroupKey {
        let terms = if tsc.honor_node_affinity {
            let required = &shape.required_terms
                [relax.required_terms_dropped.min(shape.required_terms.len())..];
            if required.is_empty() {
                let mut term = shape.node_selector.clone();
                term.add_all(&shape.volume_requirements);
                vec![term]
            } else {
                required
                    .iter()
                    .map(|t| {
                        let mut term = shape.node_selector.clone();
                        term.add_all(t);
                        term.add_all(&shape.volume_requirements);
                        term
                    })
                    .collect()
            }
        } else {
            Vec::new()
        };
        let tolerations = if tsc.honor_node_taints {
            Self::relaxed_tolerations(shape, relax)
        } else {
            Vec::new()
        };
        GroupKey {
            kind: GroupKind::Spread {
                max_skew: tsc.max_skew,
                min_domains: tsc.min_domains,
            },
            topology_key: Arc::from(labels::normalize(&tsc.topology_key)),
            namespaces: vec![shape.namespace.clone()],
            selector: tsc.selector.clone(),
            node_filter: Some(NodeFilter {
                terms,
                honor_affinity: tsc.honor_node_affinity,
                honor_taints: tsc.honor_node_taints,
                tolerations,
            }),
            inverse: false,
        }
    }

    fn relaxed_tolerations(shape: &PodShape, relax: Relaxation) -> Vec<Toleration> {
        let mut tolerations = shape.tolerations.clone();
        if relax.tolerate_prefer_no_schedule {
            tolerations.push(Toleration::exists_for_effect(
                TaintEffect::PreferNoSchedule.as_str(),
            ));
        }
        tolerations
    }

    /// The group with this key, created (registered domains, existing pods counted) when new.
    /// `creator_tolerations` filters the domains of (anti-)affinity groups as Karpenter does.
    fn intern_group(&mut self, key: GroupKey, creator_tolerations: Option<&[Toleration]>) -> usize {
        if let Some(id) = self.group_index.get(&key) {
            return *id;
        }
        let id = self.groups.len();
        let table = self.table_of.get(&key.topology_key).copied();
        let hostname = &*key.topology_key == labels::HOSTNAME;
        let table = if hostname { None } else { table };
        let mut registered = BitSet::new();
        if let Some(t) = table {
            let filter = match (&key.kind, &key.node_filter) {
                (GroupKind::Spread { .. }, Some(f)) if f.honor_taints => {
                    Some(f.tolerations.as_slice())
                }
                (GroupKind::Spread { .. }, _) => None,
                _ => creator_tolerations,
            };
            registered = self.tables[t].offered_domains(filter);
            for slot in 0..self.slots.len() {
                let SlotKind::Existing(node) = self.slots[slot].kind else {
                    continue;
                };
                if !self.snapshot.existing_nodes[node].registered {
                    continue;
                }
                if let Some(domain) = self.slot_single_domain(slot, t)
                    && self.filter_matches(&key, slot)
                {
                    registered.insert(domain);
                }
            }
        }
        self.groups.push(Group::new(key.clone(), table, registered));
        // Index for selection.
        let anchor = match &key.selector {
            LabelSelector::Terms(terms) => terms
                .iter()
                .find(|t| {
                    t.operator == super::selector::SelectorOperator::In && t.values.len() == 1
                })
                .map(|t| (t.key.clone(), t.values[0].clone())),
            LabelSelector::Nothing => None,
        };
        if key.selector != LabelSelector::Nothing {
            for namespace in &key.namespaces {
                match &anchor {
                    Some((k, v)) => self
                        .anchored
                        .entry((namespace.clone(), k.clone(), v.clone()))
                        .or_default()
                        .push(id),
                    None => self
                        .unanchored
                        .entry(namespace.clone())
                        .or_default()
                        .push(id),
                }
            }
        }
        // Existing pods.
        for set in 0..self.label_sets.len() {
            let (namespace, pod_labels, _) = &self.label_sets[set];
            if !self.groups[id].selects(namespace, pod_labels) {
                continue;
            }
            let slots = self.label_sets[set].2.clone();
            for slot in slots {
                if self.filter_matches(&key, slot) {
                    self.record_slot_domains(id, slot, false);
                }
            }
        }
        let inverse = key.inverse;
        self.group_index.insert(key, id);
        // Signatures learn that a group created late selects them.
        if self.ready && !inverse {
            for sig in 0..self.sigs.len() {
                {
                    let shape = &self.sigs[sig].shape;
                    if self.groups[id].selects(&shape.namespace, &shape.labels) {
                        self.sigs[sig].selected_by.push(id);
                    }
                }
            }
        }
        id
    }

    /// The single domain of a slot for a table's key, if its class pins one.
    fn slot_single_domain(&self, slot: usize, table: usize) -> Option<usize> {
        let key = self.table_key(table);
        let value = self
            .reqs
            .get(self.slots[slot].class)
            .get(key)?
            .single_value()?;
        self.tables[table].get(value)
    }

    fn table_key(&self, table: usize) -> &str {
        &self.table_keys[table]
    }

    /// Whether a spread group's node filter lets this slot count (other groups: always).
    fn filter_matches(&mut self, key: &GroupKey, slot: usize) -> bool {
        let Some(filter) = &key.node_filter else {
            return true;
        };
        let s = &self.slots[slot];
        filter.matches(
            &self.taintsets[s.taints],
            self.reqs.get(s.class),
            &s.hostname,
        )
    }

    fn group_filter_matches(&mut self, group: usize, slot: usize) -> bool {
        let Some(filter) = &self.groups[group].key.node_filter else {
            return true;
        };
        let s = &self.slots[slot];
        if filter.mentions_hostname() {
            return filter.matches(
                &self.taintsets[s.taints],
                self.reqs.get(s.class),
                &s.hostname,
            );
        }
        let cache_key = (group, s.class, s.taints);
        if let Some(hit) = self.filter_cache.get(&cache_key) {
            return *hit;
        }
        let result = filter.matches(
            &self.taintsets[s.taints],
            self.reqs.get(s.class),
            &s.hostname,
        );
        self.filter_cache.insert(cache_key, result);
        result
    }

    /// Records a pod on `slot` in a group: hostname groups count the slot; others the domains
    /// the slot's class allows (all of them for anti-affinity and inverse groups, only a single
    /// one for spread and affinity).
    fn record_slot_domains(&mut self, group: usize, slot: usize, all_values: bool) {
        let Some(table) = self.groups[group].table else {
            self.groups[group].record(slot);
            return;
        };
        let class = self.slots[slot].class;
        let requirement = self
            .reqs
            .get(class)
            .get(&self.groups[group].key.topology_key);
        let Some(requirement) = requirement.filter(|r| !r.is_complement()) else {
            return;
        };
        if !all_values && requirement.values().len() != 1 {
            return;
        }
        if requirement
            .values()
            .iter()
            .all(|v| self.tables[table].get(v).is_some())
        {
            self.ensure_class_domains(class, table);
            for domain in self.class_domains[&(class, table)].iter() {
                self.groups[group].record(domain);
            }
        } else {
            let values: Vec<Arc<str>> = requirement.values().to_vec();
            for value in values {
                let domain = self.tables[table].intern(&value);
                self.groups[group].record(domain);
            }
        }
    }

    // ---- variants -------------------------------------------------------------------------

    fn variant(&mut self, sig: usize, relax: Relaxation) -> usize {
        if let Some(id) = self.variant_index.get(&(sig, relax)) {
            return *id;
        }
        let shape = self.sigs[sig].shape.clone();
        let respect = self.policy == PreferencePolicy::Respect;
        let mut req = shape.node_selector.clone();
        let mut strict = shape.node_selector.clone();
        if respect && let Some(preferred) = shape.preferred_terms.get(relax.preferred_node_dropped)
        {
            req.add_all(&preferred.requirements);
        }
        if let Some(required) = shape.required_terms.get(relax.required_terms_dropped) {
            req.add_all(required);
            strict.add_all(required);
        }
        req.add_all(&shape.volume_requirements);
        strict.add_all(&shape.volume_requirements);
        let host = req.remove(labels::HOSTNAME);
        let strict_host = strict.remove(labels::HOSTNAME);
        let tolerations = Self::relaxed_tolerations(&shape, relax);
        let tolerations_id = self.tolsets.intern(tolerations.clone());

        let mut groups = Vec::new();
        let anti = shape.anti_affinity.iter().chain(if respect {
            &shape.preferred_anti_affinity[relax
                .preferred_anti_dropped
                .min(shape.preferred_anti_affinity.len())..]
        } else {
            &[]
        });
        for term in anti.collect::<Vec<_>>() {
            let key = self.affinity_key(&shape.namespace, term, GroupKind::AntiAffinity, false);
            groups.push(self.intern_group(key, Some(&tolerations)));
        }
        let anti_groups = groups.len();
        let affinity = shape.affinity.iter().chain(if respect {
            &shape.preferred_affinity[relax
                .preferred_affinity_dropped
                .min(shape.preferred_affinity.len())..]
        } else {
            &[]
        });
        let mut host_affinity = false;
        for term in affinity.collect::<Vec<_>>() {
            let key = self.affinity_key(&shape.namespace, term, GroupKind::Affinity, false);
            host_affinity |= &*key.topology_key == labels::HOSTNAME;
            groups.push(self.intern_group(key, Some(&tolerations)));
        }
        for tsc in remaining_spread(&shape.spread, relax.schedule_anyway_dropped) {
            if tsc.schedule_anyway && !respect {
                continue;
            }
            let key = Self::spread_key(&shape, tsc, relax);
            groups.push(self.intern_group(key, None));
        }

        let req_id = self.reqs.intern(req);
        let strict_id = self.reqs.intern(strict);
        let mut pod_domains = FxHashMap::default();
        for table in 0..self.tables.len() {
            let key = self.table_key(table).to_owned();
            let strict_set = self.tables[table].allowed_by(self.reqs.get(strict_id).get(&key));
            let req_set = self.tables[table].allowed_by(self.reqs.get(req_id).get(&key));
            pod_domains.insert(table, (strict_set, req_set));
        }
        let id = self.variants.len();
        self.variants.push(Variant {
            sig,
            relax,
            req: req_id,
            strict: strict_id,
            host,
            strict_host,
            tolerations: tolerations_id,
            groups,
            anti_groups,
            pod_domains,
            host_affinity,
            next: NextVariant::Unknown,
        });
        self.variant_index.insert((sig, relax), id);
        id
    }

    /// Karpenter's next relaxation step, skipping steps that change nothing under the policy.
    fn relax(&mut self, variant: usize) -> Option<usize> {
        match self.variants[variant].next {
            NextVariant::Unknown => {}
            NextVariant::None => return None,
            NextVariant::Some(next) => return Some(next),
        }
        let v = &self.variants[variant];
        let shape = &self.sigs[v.sig].shape;
        let respect = self.policy == PreferencePolicy::Respect;
        let mut r = v.relax;
        let relaxed = if shape
            .required_terms
            .len()
            .saturating_sub(r.required_terms_dropped)
            > 1
        {
            r.required_terms_dropped += 1;
            true
        } else if respect && r.preferred_affinity_dropped < shape.preferred_affinity.len() {
            r.preferred_affinity_dropped += 1;
            true
        } else if respect && r.preferred_anti_dropped < shape.preferred_anti_affinity.len() {
            r.preferred_anti_dropped += 1;
            true
        } else if respect && r.preferred_node_dropped < shape.preferred_terms.len() {
            r.preferred_node_dropped += 1;
            true
        } else if respect
            && remaining_spread(&shape.spread, r.schedule_anyway_dropped)
                .iter()
                .any(|s| s.schedule_anyway)
        {
            r.schedule_anyway_dropped += 1;
            true
        } else if self.any_prefer_no_schedule
            && !r.tolerate_prefer_no_schedule
            && !shape.tolerations.contains(&Toleration::exists_for_effect(
                TaintEffect::PreferNoSchedule.as_str(),
            ))
        {
            r.tolerate_prefer_no_schedule = true;
            true
        } else {
            false
        };
        let sig = v.sig;
        let next = relaxed.then(|| self.variant(sig, r));
        self.variants[variant].next = next.map_or(NextVariant::None, NextVariant::Some);
        next
    }

    // ---- the loop -------------------------------------------------------------------------

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
        let mut variant = self.sigs[self.pod_sig[pod]].base;
        loop {
            if self.add(pod, variant) {
                return true;
            }
            match self.relax(variant) {
                Some(next) => variant = next,
                None => break,
            }
        }
        self.last_variant[pod] = variant;
        false
    }

    fn add(&mut self, pod: usize, variant: usize) -> bool {
        self.prepare_attempt(variant);
        if self
            .attempt
            .allowances
            .iter()
            .any(|(a, _)| matches!(a, Allowance::Impossible { .. }))
        {
            return false;
        }
        let (existing, total) = (self.existing_slots, self.slots.len());
        let found = self
            .find_slot(variant, 0, existing)
            .or_else(|| self.find_free_room(variant))
            .or_else(|| self.find_slot(variant, existing, total));
        if let Some((slot, fit)) = found {
            self.commit(slot, pod, variant, fit.class);
            return true;
        }
        for pool in 0..self.pools.len() {
            if let Ok(fit) = self.check_new(pool, variant) {
                let slot = self.open_claim(pool, fit.types);
                self.commit(slot, pod, variant, fit.class);
                return true;
            }
        }
        false
    }

    /// The node-independent topology decisions for a variant, set-valued ones first so the
    /// spread constraints pick among what is left: the pod's anti-affinity, other pods'
    /// anti-affinity that selects it, its affinity, then its spread constraints.
    fn prepare_attempt(&mut self, variant: usize) {
        let mut attempt = std::mem::take(&mut self.attempt);
        attempt.allowances.clear();
        let v = &self.variants[variant];
        let sig = &self.sigs[v.sig];
        let shape = &sig.shape;
        let (anti, rest) = v.groups.split_at(v.anti_groups);
        let inverse = sig.inverse_selecting.iter().map(|g| (*g, true));
        let anti = anti.iter().map(|g| (*g, false));
        let rest = rest.iter().map(|g| (*g, false));
        for (group, is_inverse) in anti.chain(inverse).chain(rest) {
            let g = &self.groups[group];
            let selected = g.selects(&shape.namespace, &shape.labels);
            let pod_domains = g
                .table
                .and_then(|t| v.pod_domains.get(&t))
                .map(|(strict, _)| strict);
            let host_ok = if g.is_hostname() && matches!(g.key.kind, GroupKind::Affinity) {
                match &v.strict_host {
                    None => !g.all_empty(),
                    Some(r) => g
                        .nonzero()
                        .iter()
                        .any(|slot| self.slots.get(slot).is_some_and(|s| r.has(&s.hostname))),
                }
            } else {
                true
            };
            let allowance = if is_inverse {
                // Inverse groups constrain like anti-affinity of the selected pod.
                g.allowance(group, true, pod_domains, host_ok)
            } else {
                g.allowance(group, selected, pod_domains, host_ok)
            };
            attempt.allowances.push((allowance, is_inverse));
        }
        let mut hasher = FxHasher::default();
        for (allowance, _) in &attempt.allowances {
            if let Allowance::Domains { .. } = allowance {
                allowance.hash(&mut hasher);
            }
        }
        attempt.context = hasher.finish();
        self.attempt = attempt;
    }

    /// The first slot (existing nodes first, then NodeClaims oldest first) that can take the
    /// pod, resuming from the variant's cursor.
    /// Hostname groups whose nonzero slots the attempt must skip, and the hostname affinity
    /// group whose nonzero slots it must stay within.
    fn masks(&self) -> (Vec<usize>, Option<usize>) {
        let mut skip: Vec<usize> = Vec::new();
        let mut require: Option<usize> = None;
        for (allowance, _) in &self.attempt.allowances {
            match allowance {
                Allowance::HostAtMost { group, max: 0 } => skip.push(*group),
                Allowance::HostAffinity {
                    group,
                    bootstrap: false,
                } => require = Some(*group),
                _ => {}
            }
        }
        (skip, require)
    }

    /// Candidate slots of one word of `set`, after the attempt's masks.
    #[inline]
    fn masked_word(
        &self,
        set: &BitSet,
        word: usize,
        skip: &[usize],
        require: Option<usize>,
    ) -> u64 {
        let mut bits = set.word(word);
        for group in skip {
            bits &= !self.groups[*group].nonzero().word(word);
        }
        if let Some(group) = require {
            bits &= self.groups[group].nonzero().word(word);
        }
        bits
    }

    /// The first open slot in `[low, high)` that can take the pod (existing nodes in
    /// Karpenter's order, NodeClaims oldest first), resuming from the variant's cursor.
    fn find_slot(&mut self, variant: usize, low: usize, high: usize) -> Option<(usize, Fit)> {
        if low >= high {
            return None;
        }
        let (skip, require) = self.masks();
        let use_cursor = !self.variants[variant].host_affinity;
        let cursor_key = (variant, self.attempt.context, low == 0);
        let start = if use_cursor {
            self.cursors
                .get(&cursor_key)
                .copied()
                .unwrap_or(low)
                .max(low)
        } else {
            low
        };
        let words = self.open.word_len().min(high.div_ceil(64));
        let mut word = start / 64;
        let mut found = None;
        let open = std::mem::take(&mut self.open);
        'scan: while word < words {
            let mut bits = self.masked_word(&open, word, &skip, require);
            if word == start / 64 {
                bits &= u64::MAX << (start % 64);
            }
            for bit in BitsOf(bits) {
                let slot = word * 64 + bit;
                if slot >= high {
                    break 'scan;
                }
                if let Ok(fit) = self.check_slot(slot, variant) {
                    found = Some((slot, fit));
                    break 'scan;
                }
            }
            word += 1;
        }
        self.open = open;
        if use_cursor {
            let position = found.as_ref().map_or(high, |(slot, _)| *slot);
            self.cursors.insert(cursor_key, position);
        }
        found
    }

    /// A NodeClaim whose cheapest instance type still has room for the pod, so placing it
    /// there costs nothing: rooms big enough in CPU and memory, tightest CPU first, a bounded
    /// number of candidates.
    fn find_free_room(&mut self, variant: usize) -> Option<(usize, Fit)> {
        let requests = self.sigs[self.variants[variant].sig].shape.requests.clone();
        let (cpu, memory) = (bucket_of(requests.cpu), bucket_of(requests.memory));
        let buckets: Vec<RoomBucket> = self
            .rooms
            .range((cpu, 0)..)
            .map(|(bucket, _)| *bucket)
            .filter(|(_, m)| *m >= memory)
            .collect();
        if buckets.is_empty() {
            return None;
        }
        let (skip, require) = self.masks();
        // Rooms too small or failing a check count against one budget; rooms a hostname rule
        // blocks are cheaper to skip and get a larger one.
        let (mut looked, mut checked, mut blocked) = (0, 0, 0);
        for bucket in buckets {
            let len = self.rooms.get(&bucket).map_or(0, Vec::len);
            for i in 0..len {
                let slot = self.rooms[&bucket][i];
                if skip
                    .iter()
                    .any(|g| self.groups[*g].nonzero().contains(slot))
                    || require.is_some_and(|g| !self.groups[g].nonzero().contains(slot))
                {
                    blocked += 1;
                    if blocked > MAX_FREE_ROOM_BLOCKED {
                        return None;
                    }
                    continue;
                }
                looked += 1;
                if looked > MAX_FREE_ROOM_LOOKS {
                    return None;
                }
                if !requests.fits_in(&self.slots[slot].slack) {
                    continue;
                }
                checked += 1;
                if let Ok(fit) = self.check_slot(slot, variant)
                    && self.costs_nothing(slot, &fit, &requests)
                {
                    return Some((slot, fit));
                }
                if checked >= MAX_FREE_ROOM_CHECKS {
                    return None;
                }
            }
        }
        None
    }

    /// Whether the slot's cheapest instance type survives the pod's requirements and still
    /// fits with the pod added.
    fn costs_nothing(&mut self, slot: usize, fit: &Fit, requests: &Resources) -> bool {
        let SlotKind::Claim(pool) = self.slots[slot].kind else {
            return false;
        };
        let cheapest = self.slots[slot].cheapest;
        if fit.class != self.slots[slot].class
            && !self.class_types(pool, fit.class).contains(cheapest)
        {
            return false;
        }
        fits_sum(
            &self.slots[slot].used,
            requests,
            &self.pools[pool].alloc[cheapest],
        )
    }

    fn tolerates(&mut self, tolerations: usize, taints: usize) -> Result<(), Taint> {
        if self.taintsets[taints].is_empty() {
            return Ok(());
        }
        let cached = self.tolerates_cache.get(&(tolerations, taints)).copied();
        let ok = cached.unwrap_or_else(|| {
            let ok =
                first_untolerated(self.tolsets.get(tolerations), &self.taintsets[taints]).is_none();
            self.tolerates_cache.insert((tolerations, taints), ok);
            ok
        });
        if ok {
            Ok(())
        } else {
            let taint = first_untolerated(self.tolsets.get(tolerations), &self.taintsets[taints]);
            Err(taint
                .cloned()
                .unwrap_or_else(|| Taint::new("", None, TaintEffect::NoSchedule)))
        }
    }

    fn merge(&mut self, class: usize, req: usize, allow: AllowUndefined) -> Option<usize> {
        if req == self.empty_req {
            return Some(class);
        }
        let key = (class, req, allow == AllowUndefined::WellKnown);
        if let Some(hit) = self.merge_cache.get(&key) {
            return *hit;
        }
        let (a, b) = (self.reqs.get(class), self.reqs.get(req));
        let merged = a.is_compatible(b, allow).then(|| {
            let mut merged = a.clone();
            merged.add_all(b);
            merged
        });
        let result = merged.map(|m| self.reqs.intern(m));
        self.merge_cache.insert(key, result);
        result
    }

    fn ensure_class_domains(&mut self, class: usize, table: usize) {
        if !self.class_domains.contains_key(&(class, table)) {
            let key = &self.table_keys[table];
            let set = self.tables[table].allowed_by(self.reqs.get(class).get(key));
            self.class_domains.insert((class, table), set);
        }
    }

    fn narrow(&mut self, class: usize, table: usize, domains: BitSet) -> usize {
        let cache_key = (class, table, domains);
        if let Some(hit) = self.narrow_cache.get(&cache_key) {
            return *hit;
        }
        let key = self.table_key(table).to_owned();
        let values: Vec<Arc<str>> = cache_key
            .2
            .iter()
            .map(|d| self.tables[table].values[d].clone())
            .collect();
        let mut narrowed = self.reqs.get(class).clone();
        narrowed.add(Requirement::in_shared(Arc::from(key.as_str()), values));
        let id = self.reqs.intern(narrowed);
        self.narrow_cache.insert(cache_key, id);
        id
    }

    /// Applies the attempt's topology decisions to one slot (or, with `slot = None`, to a new
    /// NodeClaim with class `class`): the class narrowed to the chosen domains.
    fn apply_topology(
        &mut self,
        slot: Option<usize>,
        class: usize,
        variant: usize,
        existing: bool,
    ) -> Result<usize, Reject> {
        let attempt = std::mem::take(&mut self.attempt);
        let result = self.apply_allowances(&attempt, slot, class, variant, existing);
        self.attempt = attempt;
        result
    }

    fn apply_allowances(
        &mut self,
        attempt: &Attempt,
        slot: Option<usize>,
        class: usize,
        variant: usize,
        existing: bool,
    ) -> Result<usize, Reject> {
        let mut class = class;
        for (allowance, inverse) in &attempt.allowances {
            let (group, inverse) = (allowance.group(), *inverse);
            let reject = Reject::Topology { group, inverse };
            match allowance {
                Allowance::Impossible { .. } => return Err(reject),
                Allowance::HostAtMost { max, .. } => {
                    let count = slot.map_or(0, |s| self.groups[group].count(s));
                    if count > *max {
                        return Err(reject);
                    }
                }
                Allowance::HostAffinity { bootstrap, .. } => {
                    let count = slot.map_or(0, |s| self.groups[group].count(s));
                    if count == 0 && !bootstrap {
                        return Err(reject);
                    }
                    if let (Some(r), Some(s)) = (&self.variants[variant].strict_host, slot)
                        && !r.has(&self.slots[s].hostname)
                    {
                        return Err(reject);
                    }
                }
                Allowance::Domains { .. } => {
                    let Some(table) = self.groups[group].table else {
                        return Err(reject);
                    };
                    self.ensure_class_domains(class, table);
                    let key = &self.groups[group].key.topology_key;
                    let v = &self.variants[variant];
                    let pod_filter = if existing {
                        v.pod_domains.get(&table).map(|(_, pod)| pod)
                    } else {
                        None
                    };
                    let chosen = allowance.choose(
                        &self.class_domains[&(class, table)],
                        pod_filter,
                        &self.groups,
                    );
                    if chosen.is_empty() {
                        return Err(reject);
                    }
                    let defined = self.reqs.get(class).has(key) || self.reqs.get(v.req).has(key);
                    if !defined && (existing || !labels::is_well_known(key)) {
                        return Err(reject);
                    }
                    if !existing {
                        class = self.narrow(class, table, chosen);
                    }
                }
            }
        }
        Ok(class)
    }

    /// Whether the slot can take a pod of the variant.
    fn check_slot(&mut self, slot: usize, variant: usize) -> Result<Fit, Reject> {
        let (sig, tolerations, req) = {
            let v = &self.variants[variant];
            (v.sig, v.tolerations, v.req)
        };
        let taints = self.slots[slot].taints;
        self.tolerates(tolerations, taints).map_err(Reject::Taint)?;
        let shape = self.sigs[sig].shape.clone();
        let requests = &shape.requests;
        let s = &self.slots[slot];
        if let Some(port) = conflicting_port(&shape.host_ports, &s.host_ports) {
            return Err(Reject::HostPort(port));
        }
        if !fits_sum(&s.used, requests, &s.capacity) {
            return Err(Reject::Resources);
        }
        if let Some(host) = &self.variants[variant].host
            && !host.has(&s.hostname)
        {
            return Err(Reject::Hostname);
        }
        match s.kind {
            SlotKind::Existing(_) => {
                let class = s.class;
                if req != self.empty_req
                    && !self
                        .reqs
                        .get(class)
                        .is_compatible(self.reqs.get(req), AllowUndefined::None)
                {
                    return Err(Reject::Requirements);
                }
                self.apply_topology(Some(slot), class, variant, true)?;
                Ok(Fit { class })
            }
            SlotKind::Claim(pool) => {
                let current = s.class;
                let merged = self
                    .merge(current, req, AllowUndefined::WellKnown)
                    .ok_or(Reject::Requirements)?;
                let class = self.apply_topology(Some(slot), merged, variant, false)?;
                let s = &self.slots[slot];
                let mut need = s.used.clone();
                need.add(requests);
                let fits = if class == current {
                    let p = &self.pools[pool];
                    s.types.iter().rev().any(|t| need.fits_in(&p.alloc[t]))
                } else {
                    self.ensure_class_types(pool, class);
                    let p = &self.pools[pool];
                    p.class_types[&class]
                        .and(&self.slots[slot].types)
                        .iter()
                        .rev()
                        .any(|t| need.fits_in(&p.alloc[t]))
                };
                if !fits {
                    return Err(Reject::InstanceTypes { class });
                }
                if self.reqs.get(class).has_min_values() {
                    self.ensure_class_types(pool, class);
                    let p = &self.pools[pool];
                    let types = p.class_types[&class].and(&self.slots[slot].types);
                    let fitting: Vec<&InstanceType> = types
                        .iter()
                        .filter(|t| need.fits_in(&p.alloc[*t]))
                        .map(|t| &*p.types[t])
                        .collect();
                    satisfies_min_values(&fitting, self.reqs.get(class))
                        .map_err(Reject::MinValues)?;
                }
                Ok(Fit { class })
            }
        }
    }

    /// The pool's instance types a class allows (requirements intersect, an available
    /// offering is compatible).
    fn class_types(&mut self, pool: usize, class: usize) -> &BitSet {
        self.ensure_class_types(pool, class);
        &self.pools[pool].class_types[&class]
    }

    fn ensure_class_types(&mut self, pool: usize, class: usize) {
        if !self.pools[pool].class_types.contains_key(&class) {
            let reqs = self.reqs.get(class);
            let set: BitSet = self.pools[pool]
                .types
                .iter()
                .enumerate()
                .filter(|(_, t)| t.is_compatible(reqs))
                .map(|(i, _)| i)
                .collect();
            self.pools[pool].class_types.insert(class, set);
        }
    }

    fn within_limits(&mut self, pool: usize) -> &BitSet {
        let p = &mut self.pools[pool];
        if p.within_limits_stale {
            p.within_limits = (0..p.types.len())
                .filter(|t| p.remaining.first_exceeded_by(&p.capacity[*t]).is_none())
                .collect();
            p.within_limits_stale = false;
        }
        &self.pools[pool].within_limits
    }

    /// Whether a new NodeClaim of the pool can take a pod of the variant.
    fn check_new(&mut self, pool: usize, variant: usize) -> Result<NewFit, Reject> {
        let (sig, tolerations, req) = {
            let v = &self.variants[variant];
            (v.sig, v.tolerations, v.req)
        };
        let taints = self.pools[pool].taints;
        self.tolerates(tolerations, taints).map_err(Reject::Taint)?;
        let shape = self.sigs[sig].shape.clone();
        if let Some(port) = conflicting_port(&shape.host_ports, &self.pools[pool].daemon_ports) {
            return Err(Reject::HostPort(port));
        }
        if let Some(host) = &self.variants[variant].host
            && !host.has(&placeholder_hostname(self.slots.len()))
        {
            return Err(Reject::Hostname);
        }
        let base = self.pools[pool].base;
        let merged = self
            .merge(base, req, AllowUndefined::WellKnown)
            .ok_or(Reject::Requirements)?;
        let class = self.apply_topology(None, merged, variant, false)?;
        let limited = self.within_limits(pool).clone();
        if limited.is_empty() {
            let resource = self.pools[pool]
                .remaining
                .iter()
                .find(|(_, remaining)| *remaining <= 0)
                .or_else(|| self.pools[pool].remaining.iter().next())
                .map_or_else(String::new, |(name, _)| name.to_owned());
            return Err(Reject::Limits(resource));
        }
        let mut need = self.pools[pool].daemon.clone();
        need.add(&shape.requests);
        let candidates = self.class_types(pool, class).and(&limited);
        let p = &self.pools[pool];
        let types: BitSet = candidates
            .iter()
            .filter(|t| need.fits_in(&p.alloc[*t]))
            .collect();
        if types.is_empty() {
            return Err(Reject::InstanceTypes { class });
        }
        if self.reqs.get(class).has_min_values() {
            let list: Vec<&InstanceType> = types.iter().map(|t| &*p.types[t]).collect();
            satisfies_min_values(&list, self.reqs.get(class)).map_err(Reject::MinValues)?;
        }
        Ok(NewFit { class, types })
    }

    fn open_claim(&mut self, pool: usize, types: BitSet) -> usize {
        let slot = self.slots.len();
        let p = &self.pools[pool];
        let mut capacity = Resources::default();
        let mut max_capacity = Resources::default();
        for t in types.iter() {
            capacity.max_with(&p.alloc[t]);
            max_capacity.max_with(&p.capacity[t]);
        }
        let used = p.daemon.clone();
        let class = p.base;
        let taints = p.taints;
        self.pools[pool].remaining.subtract(&max_capacity);
        self.pools[pool].within_limits_stale = !self.pools[pool].remaining.is_unlimited();
        self.slots.push(Slot {
            kind: SlotKind::Claim(pool),
            class,
            taints,
            used,
            capacity,
            types,
            max_capacity,
            pods: Vec::new(),
            host_ports: self.pools[pool].daemon_ports.clone(),
            hostname: placeholder_hostname(slot),
            cheapest: 0,
            price_cursor: 0,
            slack: Resources::default(),
            room: None,
        });
        self.open.insert(slot);
        slot
    }

    /// Places the pod on the slot: resources, requirements, instance types, host ports and
    /// topology counts.
    fn commit(&mut self, slot: usize, pod: usize, variant: usize, class: usize) {
        let sig = self.variants[variant].sig;
        let shape = self.sigs[sig].shape.clone();
        self.placed[pod] = Some(slot);
        {
            let s = &mut self.slots[slot];
            s.pods.push(pod);
            s.used.add(&shape.requests);
            s.host_ports.extend(shape.host_ports.iter().cloned());
        }
        match self.slots[slot].kind {
            SlotKind::Existing(_) => {
                let req = self.variants[variant].req;
                let current = self.slots[slot].class;
                if let Some(merged) = self.merge(current, req, AllowUndefined::None) {
                    self.slots[slot].class = merged;
                }
            }
            SlotKind::Claim(pool) => {
                // Types that no longer fit are skipped where they matter (the cheapest-type
                // cursor, fit checks, the plan) instead of being filtered on every placement.
                if self.slots[slot].class != class {
                    self.ensure_class_types(pool, class);
                    let p = &self.pools[pool];
                    let s = &mut self.slots[slot];
                    s.types.intersect_with(&p.class_types[&class]);
                    let mut capacity = Resources::default();
                    let mut max_capacity = Resources::default();
                    for t in s.types.iter() {
                        capacity.max_with(&p.alloc[t]);
                        max_capacity.max_with(&p.capacity[t]);
                    }
                    let mut released = s.max_capacity.minus(&max_capacity);
                    s.capacity = capacity;
                    s.max_capacity = max_capacity;
                    s.price_cursor = 0;
                    s.class = class;
                    if !released.is_zero() && !self.pools[pool].remaining.is_unlimited() {
                        released.clamp_negative_to_zero();
                        self.pools[pool].remaining.give_back(&released);
                        self.pools[pool].within_limits_stale = true;
                    }
                }
            }
        }
        // Topology: every group selecting the pod counts it; inverse groups it owns record
        // where it may be.
        for i in 0..self.sigs[sig].selected_by.len() {
            let group = self.sigs[sig].selected_by[i];
            let spread = matches!(self.groups[group].key.kind, GroupKind::Spread { .. });
            if spread && !self.group_filter_matches(group, slot) {
                continue;
            }
            let all = matches!(self.groups[group].key.kind, GroupKind::AntiAffinity);
            self.record_slot_domains(group, slot, all);
        }
        for i in 0..self.sigs[sig].inverse_owned.len() {
            let group = self.sigs[sig].inverse_owned[i];
            self.record_slot_domains(group, slot, true);
        }
        let full = match self.slots[slot].kind {
            SlotKind::Claim(pool) => {
                self.update_free_room(pool, slot);
                let (s, p) = (&self.slots[slot], &self.pools[pool]);
                let need = s.used.plus(&self.min_request);
                !s.types.iter().rev().any(|t| need.fits_in(&p.alloc[t]))
            }
            SlotKind::Existing(_) => {
                let s = &self.slots[slot];
                !fits_sum(&s.used, &self.min_request, &s.capacity)
            }
        };
        if full {
            self.open.remove(slot);
        }
    }

    /// Finds the NodeClaim's cheapest instance type that still fits and files the NodeClaim
    /// under the room that type leaves.
    fn update_free_room(&mut self, pool: usize, slot: usize) {
        let class = self.slots[slot].class;
        self.ensure_class_order(pool, class);
        let p = &self.pools[pool];
        let order = &p.class_order[&class];
        let s = &mut self.slots[slot];
        // Types only ever stop fitting, so the cursor only moves forward.
        while s.price_cursor < order.len() {
            let t = order[s.price_cursor];
            if s.types.contains(t) && s.used.fits_in(&p.alloc[t]) {
                break;
            }
            s.price_cursor += 1;
        }
        let bucket = match order.get(s.price_cursor) {
            Some(cheapest) => {
                s.cheapest = *cheapest;
                s.slack = p.alloc[*cheapest].minus(&s.used);
                self.min_request
                    .fits_in(&s.slack)
                    .then(|| (bucket_of(s.slack.cpu), bucket_of(s.slack.memory)))
            }
            None => None,
        };
        if bucket == self.slots[slot].room.map(|(b, _)| b) {
            return;
        }
        if let Some((old, position)) = self.slots[slot].room.take()
            && let Some(list) = self.rooms.get_mut(&old)
        {
            {
                list.swap_remove(position);
                if let Some(moved) = list.get(position).copied() {
                    self.slots[moved].room = Some((old, position));
                }
                if list.is_empty() {
                    self.rooms.remove(&old);
                }
            }
        }
        if let Some(new) = bucket {
            let list = self.rooms.entry(new).or_default();
            list.push(slot);
            self.slots[slot].room = Some((new, list.len() - 1));
        }
    }

    fn ensure_class_order(&mut self, pool: usize, class: usize) {
        if self.pools[pool].class_order.contains_key(&class) {
            return;
        }
        self.ensure_class_types(pool, class);
        let reqs = self.reqs.get(class);
        let p = &self.pools[pool];
        let mut order: Vec<(f64, usize)> = p.class_types[&class]
            .iter()
            .map(|t| (p.types[t].cheapest_price(reqs), t))
            .collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let order = order.into_iter().map(|(_, t)| t).collect();
        self.pools[pool].class_order.insert(class, order);
    }

    // ---- results --------------------------------------------------------------------------

    pub fn into_plan(mut self) -> Plan {
        let mut plan = Plan {
            pools_without_instance_types: self
                .skipped_pools
                .iter()
                .map(|i| self.snapshot.node_pools[*i].name.clone())
                .collect(),
            ..Plan::default()
        };
        let mut failed_pods: Vec<(usize, Option<Reason>, Option<String>)> = Vec::new();
        for slot in 0..self.slots.len() {
            if self.slots[slot].pods.is_empty() {
                continue;
            }
            match self.slots[slot].kind {
                SlotKind::Existing(node) => plan.existing.push(ExistingPlacement {
                    node,
                    node_name: self.snapshot.existing_nodes[node].name.clone(),
                    pods: self.slots[slot].pods.clone(),
                }),
                SlotKind::Claim(pool) => {
                    let class = self.slots[slot].class;
                    self.ensure_class_order(pool, class);
                    let (s, p) = (&self.slots[slot], &self.pools[pool]);
                    let mut requirements = self.reqs.get(class).clone();
                    // The class's price order, restricted to the types that still fit.
                    let types: Vec<Arc<InstanceType>> = p.class_order[&class]
                        .iter()
                        .filter(|t| s.types.contains(**t) && s.used.fits_in(&p.alloc[**t]))
                        .take(self.max_instance_types)
                        .map(|t| p.types[*t].clone())
                        .collect();
                    if let Err(error) = satisfies_min_values(&types, &requirements) {
                        for pod in &s.pods {
                            failed_pods.push((
                                *pod,
                                Some(Reason::MinValues {
                                    key: error.key.clone(),
                                    needed: error.needed,
                                    available: error.available,
                                }),
                                Some(p.name.clone()),
                            ));
                        }
                        continue;
                    }
                    let min_values = requirements
                        .get(labels::INSTANCE_TYPE)
                        .and_then(Requirement::min_values);
                    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
                    requirements.add(
                        Requirement::in_values(labels::INSTANCE_TYPE, &names)
                            .with_min_values(min_values),
                    );
                    let price = types
                        .first()
                        .map_or(0.0, |t| t.cheapest_price(&requirements));
                    plan.new_node_claims.push(NewNodeClaim {
                        node_pool: p.name.clone(),
                        node_pool_index: p.input,
                        requirements,
                        requests: s.used.clone(),
                        instance_types: types,
                        pods: s.pods.clone(),
                        price,
                    });
                }
            }
        }
        for pod in 0..self.snapshot.pods.len() {
            if self.placed[pod].is_none() {
                failed_pods.push((pod, None, None));
            }
        }
        failed_pods.sort_by_key(|(pod, _, _)| *pod);
        for (pod, reason, pool) in failed_pods {
            let reasons = match (reason, pool) {
                (Some(reason), Some(node_pool)) => vec![PoolReason { node_pool, reason }],
                _ => self.explain(pod),
            };
            plan.failures.push(PodFailure {
                pod,
                pod_key: self.snapshot.pods[pod].key(),
                reasons,
            });
        }
        plan
    }

    /// Why each NodePool refused the pod at its last relaxation step.
    fn explain(&mut self, pod: usize) -> Vec<PoolReason> {
        let variant = self.last_variant[pod];
        self.prepare_attempt(variant);
        let mut out = Vec::new();
        let mut order: Vec<(usize, Option<usize>)> = self
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| (p.input, Some(i)))
            .collect();
        order.extend(self.skipped_pools.iter().map(|i| (*i, None)));
        for (input, pool) in order {
            let node_pool = self.snapshot.node_pools[input].name.clone();
            let reason = match pool {
                None => Reason::NoInstanceTypes,
                Some(pool) => match self.check_new(pool, variant) {
                    Ok(_) => continue,
                    Err(reject) => super::explain::reason(self, pool, variant, reject),
                },
            };
            out.push(PoolReason { node_pool, reason });
        }
        out
    }
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

//! Building the solver's state from a snapshot: NodePools in weight order with the instance
//! types their requirements allow, pod signatures, topology domain tables, existing nodes as
//! slots, and the topology groups with the existing pods counted.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::apis::labels;
use crate::apis::taints::{Taint, TaintEffect};
use crate::domain::requirements::{Requirement, Requirements};
use crate::domain::resources::Resources;

use super::super::bitset::BitSet;
use super::super::pod::AffinityTerm;
use super::super::topology::{DomainTable, GroupKind, without_hostname};
use super::super::{Options, ReservedOfferingMode};
use super::{Pool, Relaxation, Reservations, Sig, Slot, SlotKind, Solver};

impl Solver<'_> {
    pub(super) fn taintset(&mut self, taints: &[Taint]) -> usize {
        if let Some(i) = self.taintsets.iter().position(|t| **t == *taints) {
            return i;
        }
        self.taintsets.push(Arc::from(taints.to_vec()));
        self.taintsets.len() - 1
    }

    /// Capacity reservations of every pool's reserved offerings, when the `ReservedCapacity`
    /// gate is on (the smallest capacity when pools disagree, as Karpenter takes).
    pub(super) fn init_reservations(&mut self, options: &Options) {
        if !options.reserved_capacity {
            return;
        }
        let mut capacity: FxHashMap<Arc<str>, i64> = FxHashMap::default();
        for pool in &self.pools {
            for offering in pool.types.iter().flat_map(|t| &t.offerings) {
                if offering.capacity_type() != Some(labels::CAPACITY_TYPE_RESERVED) {
                    continue;
                }
                let Some(id) = offering.reservation_id() else {
                    continue;
                };
                let amount = i64::from(offering.reservation_capacity);
                capacity
                    .entry(Arc::from(id))
                    .and_modify(|c| *c = (*c).min(amount))
                    .or_insert(amount);
            }
        }
        if !capacity.is_empty() {
            self.reservations = Some(Reservations {
                capacity,
                strict: options.reserved_offering_mode == ReservedOfferingMode::Strict,
            });
        }
    }

    pub(super) fn init_pools(&mut self) {
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
            let types = pool.launchable_types();
            if types.is_empty() {
                self.skipped_pools.push(input);
                continue;
            }
            let base_reqs = without_hostname(&pool.requirements);
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
                class_reserved: FxHashMap::default(),
                remaining,
                daemon: pool.daemon_overhead.clone(),
                daemon_ports: pool.daemon_host_ports.clone(),
            });
        }
    }

    pub(super) fn init_sigs(&mut self) {
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

    pub(super) fn topology_keys(&self) -> Vec<Arc<str>> {
        let mut keys: Vec<Arc<str>> = Vec::new();
        // Called for every bound pod's anti-affinity term (thousands of hostname terms at
        // scale), so the common answers come before the deprecated-key lookup.
        let mut add = |key: &str| {
            if key == labels::HOSTNAME || keys.iter().any(|k| &**k == key) {
                return;
            }
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

    pub(super) fn init_tables(&mut self) {
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
                    for_each_offered(pool_req, instance_type.requirements.get(key), |value| {
                        self.tables[*table].offer(value, &taints);
                    });
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

    pub(super) fn init_existing_slots(&mut self) {
        /// A namespace and a label set, shared by the pods of a workload.
        type LabelSetKey = (Arc<str>, Arc<BTreeMap<String, String>>);
        let nodes = &self.snapshot.existing_nodes;
        let order = super::super::existing_node_order(nodes);
        let mut label_sets: FxHashMap<LabelSetKey, usize> = FxHashMap::default();
        // Nodes of one type, zone and pool differ only in their hostname label: the class of
        // an earlier node with the same other labels is the node's own, found without building
        // requirements from its labels (most of a run's setup at 5,000 nodes).
        let mut classes: FxHashMap<u64, Vec<(usize, usize)>> = FxHashMap::default();
        for index in order {
            let node = &nodes[index];
            let like = classes.entry(hash_but_hostname(&node.labels)).or_default();
            let class = if let Some((_, class)) = like
                .iter()
                .find(|(other, _)| same_but_hostname(&nodes[*other].labels, &node.labels))
            {
                *class
            } else {
                let class_reqs = without_hostname(&Requirements::from_labels(&node.labels));
                let class = self.reqs.intern(class_reqs);
                like.push((index, class));
                class
            };
            let taints = self.taintset(&node.taints);
            let mut daemon = node.pending_daemon_overhead.clone();
            daemon.clamp_negative_to_zero();
            let capacity = node.allocatable.minus(&node.requested).minus(&daemon);
            let slot = self.slots.len();
            // The pods of a workload share their labels' `Arc` and sit side by side, so the
            // previous pod's set is checked before any hashing.
            let mut previous: Option<usize> = None;
            for pod in node.pods.iter().filter(|p| p.counts_for_topology) {
                let same = previous.filter(|set| {
                    let (namespace, labels, _) = &self.label_sets[*set];
                    Arc::ptr_eq(labels, &pod.labels) && *namespace == pod.namespace
                });
                let entry = same.unwrap_or_else(|| {
                    let next = self.label_sets.len();
                    let key = (pod.namespace.clone(), pod.labels.clone());
                    let entry = *label_sets.entry(key).or_insert(next);
                    if entry == next {
                        self.label_sets.push((
                            pod.namespace.clone(),
                            pod.labels.clone(),
                            Vec::new(),
                        ));
                    }
                    entry
                });
                previous = Some(entry);
                let slots = &mut self.label_sets[entry].2;
                match slots.last_mut() {
                    Some((last, pods)) if *last == slot => *pods += 1,
                    _ => slots.push((slot, 1)),
                }
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
                reserved: Vec::new(),
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
    pub(super) fn init_groups(&mut self) {
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

    pub(super) fn selection_candidates(
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

    pub(super) fn resolve_namespaces(
        &self,
        pod_namespace: &str,
        term: &AffinityTerm,
    ) -> Vec<String> {
        term.selected_namespaces(pod_namespace, &self.snapshot.namespaces)
    }
}

/// Each value both requirements on a key allow, in order, when they allow finitely many: the
/// values of Karpenter's intersection, without building it (every simulation offers every
/// instance type's zones, so the intersections were much of a consolidation round's setup).
fn for_each_offered(
    pool: Option<&Requirement>,
    offered: Option<&Requirement>,
    mut f: impl FnMut(&str),
) {
    let (finite, other) = match (pool, offered) {
        (None, None) => return,
        (Some(only), None) | (None, Some(only)) => (only, None),
        (Some(a), Some(b)) if !a.is_complement() => (a, Some(b)),
        (Some(a), Some(b)) => (b, Some(a)),
    };
    if finite.is_complement() {
        return;
    }
    finite
        .values()
        .iter()
        .filter(|value| other.is_none_or(|other| finite.has(value) && other.has(value)))
        .for_each(|value| f(value));
}

/// The labels other than the hostname, in order.
fn but_hostname<'a>(
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> impl Iterator<Item = (&'a String, &'a String)> {
    labels
        .into_iter()
        .filter(|(key, _)| *key != labels::HOSTNAME)
}

fn hash_but_hostname<'a>(labels: impl IntoIterator<Item = (&'a String, &'a String)>) -> u64 {
    let mut hasher = rustc_hash::FxHasher::default();
    for entry in but_hostname(labels) {
        entry.hash(&mut hasher);
    }
    hasher.finish()
}

fn same_but_hostname<'a>(
    a: impl IntoIterator<Item = (&'a String, &'a String)>,
    b: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> bool {
    but_hostname(a).eq(but_hostname(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_labels(host: &str, zone: &str) -> BTreeMap<String, String> {
        [
            (labels::HOSTNAME, host),
            (labels::ZONE, zone),
            (labels::INSTANCE_TYPE, "m5.large"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    #[test]
    fn the_values_offered_are_those_of_the_intersection() {
        use crate::apis::requirements::Operator;
        let zones = |operator, values: &[&str]| {
            Requirement::new(labels::ZONE, operator, values).expect("valid")
        };
        let cases = [
            zones(Operator::In, &["a", "b", "c"]),
            zones(Operator::In, &["b", "d"]),
            zones(Operator::In, &[]),
            zones(Operator::NotIn, &["b"]),
            zones(Operator::Exists, &[]),
            zones(Operator::DoesNotExist, &[]),
            Requirement::new("size", Operator::Gt, &["2"]).expect("valid"),
            Requirement::new("size", Operator::In, &["1", "3", "5"]).expect("valid"),
            Requirement::new("size", Operator::Lt, &["5"]).expect("valid"),
        ];
        let offered = |a: Option<&Requirement>, b: Option<&Requirement>| {
            let mut out = Vec::new();
            for_each_offered(a, b, |v| out.push(v.to_owned()));
            out
        };
        let expected = |r: &Requirement| -> Vec<String> {
            if r.is_complement() {
                Vec::new()
            } else {
                r.values().iter().map(ToString::to_string).collect()
            }
        };
        for a in &cases {
            assert_eq!(offered(Some(a), None), expected(a), "{a:?}");
            assert_eq!(offered(None, Some(a)), expected(a), "{a:?}");
            for b in &cases {
                let both = a.intersection(b);
                assert_eq!(
                    offered(Some(a), Some(b)),
                    expected(&both),
                    "{a:?} and {b:?}"
                );
            }
        }
        assert!(offered(None, None).is_empty());
    }

    #[test]
    fn nodes_alike_but_for_their_hostname_share_a_class_and_others_do_not() {
        let a = node_labels("a", "us-west-2a");
        let b = node_labels("b", "us-west-2a");
        let other_zone = node_labels("c", "us-west-2b");
        assert!(same_but_hostname(&a, &b));
        assert_eq!(hash_but_hostname(&a), hash_but_hostname(&b));
        assert!(!same_but_hostname(&a, &other_zone));
        let mut extra = b.clone();
        extra.insert("team".to_owned(), "x".to_owned());
        assert!(!same_but_hostname(&a, &extra));
        assert!(!same_but_hostname(&extra, &a));
    }
}

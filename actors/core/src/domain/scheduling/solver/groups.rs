//! Topology group bookkeeping: group identities for spread constraints and (anti-)affinity
//! terms, creating groups with their domains and existing counts, and recording placements.

use std::sync::Arc;

use crate::apis::labels;
use crate::apis::taints::TaintEffect;

use super::super::bitset::BitSet;
use super::super::pod::{AffinityTerm, PodShape, SpreadConstraint, Toleration};
use super::super::selector::{LabelSelector, SelectorOperator};
use super::super::topology::{Group, GroupKey, GroupKind, NodeFilter};
use super::{Relaxation, SlotKind, Solver};

impl Solver<'_> {
    pub(super) fn affinity_key(
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

    pub(super) fn spread_key(
        shape: &PodShape,
        tsc: &SpreadConstraint,
        relax: Relaxation,
    ) -> GroupKey {
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

    pub(super) fn relaxed_tolerations(shape: &PodShape, relax: Relaxation) -> Vec<Toleration> {
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
    pub(super) fn intern_group(
        &mut self,
        key: GroupKey,
        creator_tolerations: Option<&[Toleration]>,
    ) -> usize {
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
                .find(|t| t.operator == SelectorOperator::In && t.values.len() == 1)
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
            for (slot, pods) in slots {
                if self.filter_matches(&key, slot) {
                    self.record_pods_domains(id, slot, false, pods);
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
    pub(super) fn slot_single_domain(&self, slot: usize, table: usize) -> Option<usize> {
        let key = self.table_key(table);
        let value = self
            .reqs
            .get(self.slots[slot].class)
            .get(key)?
            .single_value()?;
        self.tables[table].get(value)
    }

    pub(super) fn table_key(&self, table: usize) -> &str {
        &self.table_keys[table]
    }

    /// Whether a spread group's node filter lets this slot count (other groups: always).
    pub(super) fn filter_matches(&mut self, key: &GroupKey, slot: usize) -> bool {
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

    pub(super) fn group_filter_matches(&mut self, group: usize, slot: usize) -> bool {
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
    pub(super) fn record_slot_domains(&mut self, group: usize, slot: usize, all_values: bool) {
        self.record_pods_domains(group, slot, all_values, 1);
    }

    /// [`Self::record_slot_domains`] of `pods` pods on the slot at once.
    pub(super) fn record_pods_domains(
        &mut self,
        group: usize,
        slot: usize,
        all_values: bool,
        pods: u32,
    ) {
        let Some(table) = self.groups[group].table else {
            self.groups[group].record(slot, pods);
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
                self.groups[group].record(domain, pods);
            }
        } else {
            let values: Vec<Arc<str>> = requirement.values().to_vec();
            for value in values {
                let domain = self.tables[table].intern(&value);
                self.groups[group].record(domain, pods);
            }
        }
    }
}

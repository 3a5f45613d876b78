//! Topology groups: pod counts per domain for every topology spread constraint and pod
//! (anti-)affinity term in the batch, as Karpenter's `Topology` keeps them
//! (core `scheduling/topology*.go`).
//!
//! A [`Group`] counts the pods its selector selects, per domain of its topology key. Groups
//! are shared: a Deployment's 500 replicas with the same spread constraint own one group. A
//! pod's own constraints are the groups it owns; inverse anti-affinity groups (the required
//! anti-affinity terms of pods, counted where those pods are) constrain the pods they select.
//!
//! Domains of a key are interned in a [`DomainTable`]; counts are plain vectors. The hostname
//! key is special, as in Karpenter: every node and NodeClaim is its own domain (the slot
//! index), new NodeClaims start at zero, and per-group bit sets of slots with a nonzero count
//! let the scheduler skip blocked nodes 64 at a time.
//!
//! Per placement attempt, [`Group::allowance`] computes the part of the decision that does not
//! depend on the node (which domains are eligible); [`Allowance::choose`] then intersects it
//! with one node's possible domains.

use std::collections::HashMap;
use std::sync::Arc;

use crate::apis::taints::Taint;
use crate::domain::requirements::{AllowUndefined, Requirement, Requirements};

use super::bitset::BitSet;
use super::pod::{Toleration, first_untolerated};
use super::selector::LabelSelector;

/// The values one topology key takes, with the taints of the pools that offer each (for
/// `nodeTaintsPolicy: Honor`: a domain counts if the pod tolerates one of its taint sets).
#[derive(Debug, Default)]
pub(super) struct DomainTable {
    pub values: Vec<Arc<str>>,
    index: HashMap<Arc<str>, usize>,
    /// Per domain: the taint sets of the pools offering it; `None` once a pool offers it
    /// untainted (always tolerated).
    taints: Vec<Option<Vec<Arc<[Taint]>>>>,
    /// Whether a pool or an instance type offers the domain (existing nodes may add others).
    offered: BitSet,
}

impl DomainTable {
    /// The id of a value, added when new.
    pub fn intern(&mut self, value: &str) -> usize {
        if let Some(id) = self.index.get(value) {
            return *id;
        }
        let id = self.values.len();
        let shared: Arc<str> = Arc::from(value);
        self.values.push(shared.clone());
        self.index.insert(shared, id);
        self.taints.push(Some(Vec::new()));
        id
    }

    /// The id of a known value.
    pub fn get(&self, value: &str) -> Option<usize> {
        self.index.get(value).copied()
    }

    /// Records that a pool with these taints offers the domain.
    pub fn offer(&mut self, value: &str, taints: &Arc<[Taint]>) {
        let id = self.intern(value);
        self.offered.insert(id);
        let entry = &mut self.taints[id];
        if taints.is_empty() {
            *entry = None;
        } else if let Some(sets) = entry
            && !sets
                .iter()
                .any(|s| Arc::ptr_eq(s, taints) || **s == **taints)
        {
            sets.push(taints.clone());
        }
    }

    /// The offered domains; with `tolerations`, only those some tolerated pool offers.
    pub fn offered_domains(&self, tolerations: Option<&[Toleration]>) -> BitSet {
        self.offered
            .iter()
            .filter(|id| match (tolerations, &self.taints[*id]) {
                (None, _) | (_, None) => true,
                (Some(tolerations), Some(sets)) => sets
                    .iter()
                    .any(|taints| first_untolerated(tolerations, taints).is_none()),
            })
            .collect()
    }

    /// The ids of the values a requirement allows; `None` (undefined) allows all.
    pub fn allowed_by(&self, requirement: Option<&Requirement>) -> BitSet {
        match requirement {
            None => BitSet::full(self.values.len()),
            Some(r) if !r.is_complement() => r
                .values()
                .iter()
                .filter_map(|v| self.get(v))
                .filter(|id| r.has(&self.values[*id]))
                .collect(),
            Some(r) => (0..self.values.len())
                .filter(|id| r.has(&self.values[*id]))
                .collect(),
        }
    }
}

/// What a group constrains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum GroupKind {
    Spread {
        max_skew: u32,
        min_domains: Option<u32>,
    },
    Affinity,
    AntiAffinity,
}

/// Which nodes count for a spread constraint (Karpenter's `TopologyNodeFilter`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct NodeFilter {
    /// Node selector combined with each required affinity term (ORed); checked only when
    /// `honor_affinity`.
    pub terms: Vec<Requirements>,
    pub honor_affinity: bool,
    pub honor_taints: bool,
    pub tolerations: Vec<Toleration>,
}

impl NodeFilter {
    /// Whether a node with these taints, requirements (without the hostname) and hostname
    /// counts.
    pub fn matches(&self, taints: &[Taint], class: &Requirements, hostname: &str) -> bool {
        let affinity = !self.honor_affinity
            || self.terms.is_empty()
            || self.terms.iter().any(|term| {
                let host_ok = term
                    .get(crate::apis::labels::HOSTNAME)
                    .is_none_or(|r| r.has(hostname));
                host_ok && class.is_compatible(&without_hostname(term), AllowUndefined::None)
            });
        let taints_ok =
            !self.honor_taints || first_untolerated(&self.tolerations, taints).is_none();
        affinity && taints_ok
    }

    /// Whether the filter looks at the hostname (then it cannot be cached per class).
    pub fn mentions_hostname(&self) -> bool {
        self.honor_affinity
            && self
                .terms
                .iter()
                .any(|t| t.has(crate::apis::labels::HOSTNAME))
    }
}

/// Requirements without the hostname key.
pub(super) fn without_hostname(requirements: &Requirements) -> Requirements {
    if requirements.has(crate::apis::labels::HOSTNAME) {
        let mut out = requirements.clone();
        out.remove(crate::apis::labels::HOSTNAME);
        out
    } else {
        requirements.clone()
    }
}

/// The identity of a group: groups with equal keys are one group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct GroupKey {
    pub kind: GroupKind,
    pub topology_key: Arc<str>,
    /// Sorted.
    pub namespaces: Vec<String>,
    pub selector: LabelSelector,
    pub node_filter: Option<NodeFilter>,
    pub inverse: bool,
}

/// Counts of selected pods per domain of one topology key.
#[derive(Debug)]
pub(super) struct Group {
    pub key: GroupKey,
    /// Index of the topology key's [`DomainTable`]; `None` for the hostname key.
    pub table: Option<usize>,
    /// Per domain (hostname: per slot).
    counts: Vec<u32>,
    /// Domains in the group's universe (non-hostname keys; hostname: every slot).
    registered: BitSet,
    /// Domains (hostname: slots) with a nonzero count.
    nonzero: BitSet,
}

/// How a group's eligible domains become a node's domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Pick {
    /// The eligible domain with the fewest pods (spread).
    FewestPods,
    /// Every eligible domain (anti-affinity; affinity to existing pods).
    All,
    /// One eligible domain (affinity bootstrap).
    First,
}

/// The node-independent part of one group's decision for one pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Allowance {
    /// Non-hostname keys: the eligible domains and how to pick among a node's.
    Domains {
        group: usize,
        set: BitSet,
        pick: Pick,
    },
    /// Hostname: the node's count must be at most `max`.
    HostAtMost { group: usize, max: u32 },
    /// Hostname affinity: the node must hold a selected pod, unless bootstrapping is allowed.
    HostAffinity { group: usize, bootstrap: bool },
    /// No node can satisfy the group.
    Impossible { group: usize },
}

impl Allowance {
    pub fn group(&self) -> usize {
        match self {
            Self::Domains { group, .. }
            | Self::HostAtMost { group, .. }
            | Self::HostAffinity { group, .. }
            | Self::Impossible { group } => *group,
        }
    }

    /// Picks from the domains a node allows (`node_domains`, further limited by `extra`);
    /// empty when the node cannot satisfy the group.
    pub fn choose(
        &self,
        node_domains: &BitSet,
        extra: Option<&BitSet>,
        groups: &[Group],
    ) -> BitSet {
        let Self::Domains { group, set, pick } = self else {
            return BitSet::new();
        };
        let mut candidates = set.and(node_domains);
        if let Some(extra) = extra {
            candidates.intersect_with(extra);
        }
        match pick {
            Pick::All => candidates,
            Pick::First => candidates.first().into_iter().collect(),
            Pick::FewestPods => {
                let counts = &groups[*group].counts;
                let best = candidates
                    .iter()
                    .min_by_key(|d| (counts.get(*d).copied().unwrap_or(0), *d));
                candidates = best.into_iter().collect();
                candidates
            }
        }
    }
}

impl Group {
    pub fn new(key: GroupKey, table: Option<usize>, registered: BitSet) -> Self {
        Self {
            key,
            table,
            counts: Vec::new(),
            registered,
            nonzero: BitSet::new(),
        }
    }

    pub fn is_hostname(&self) -> bool {
        self.table.is_none()
    }

    /// The pods counted in a domain (hostname: a slot).
    pub fn count(&self, domain: usize) -> u32 {
        self.counts.get(domain).copied().unwrap_or(0)
    }

    /// Slots (hostname) or domains with a nonzero count.
    pub fn nonzero(&self) -> &BitSet {
        &self.nonzero
    }

    /// Whether no domain holds a selected pod.
    pub fn all_empty(&self) -> bool {
        self.nonzero.is_empty()
    }

    /// Counts `pods` more selected pods in a domain (registering it).
    pub fn record(&mut self, domain: usize, pods: u32) {
        if self.counts.len() <= domain {
            self.counts.resize(domain + 1, 0);
        }
        self.counts[domain] += pods;
        self.nonzero.insert(domain);
        if self.table.is_some() {
            self.registered.insert(domain);
        }
    }

    /// Whether the group counts pods with these labels in this namespace.
    pub fn selects(
        &self,
        namespace: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        self.key
            .namespaces
            .binary_search_by(|n| n.as_str().cmp(namespace))
            .is_ok()
            && self.key.selector.matches(labels)
    }

    /// The registered domains with their counts, for explanations.
    pub fn domain_counts(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.registered.iter().map(|d| (d, self.count(d)))
    }

    /// The node-independent decision for a pod (`selected`: the group selects the pod
    /// itself; `pod_domains`: domains the pod's strict requirements allow, for non-hostname
    /// keys; `pod_has_host`: for hostname affinity, whether a slot holding a selected pod is
    /// one the pod's own hostname requirement allows).
    pub fn allowance(
        &self,
        index: usize,
        selected: bool,
        pod_domains: Option<&BitSet>,
        pod_host_affinity_ok: bool,
    ) -> Allowance {
        let self_count = u32::from(selected);
        match (self.key.kind, self.table) {
            (GroupKind::Spread { max_skew, .. }, None) => match max_skew.checked_sub(self_count) {
                Some(max) => Allowance::HostAtMost { group: index, max },
                None => Allowance::Impossible { group: index },
            },
            (GroupKind::AntiAffinity, None) => Allowance::HostAtMost {
                group: index,
                max: 0,
            },
            (GroupKind::Affinity, None) => Allowance::HostAffinity {
                group: index,
                bootstrap: selected && (self.all_empty() || !pod_host_affinity_ok),
            },
            (
                GroupKind::Spread {
                    max_skew,
                    min_domains,
                },
                Some(_),
            ) => {
                let supported = |d: &usize| pod_domains.is_none_or(|p| p.contains(*d));
                let mut supported_count = 0u32;
                let mut min = u32::MAX;
                for d in self.registered.iter().filter(supported) {
                    supported_count += 1;
                    min = min.min(self.count(d));
                }
                if min_domains.is_some_and(|m| supported_count < m) {
                    min = 0;
                }
                let set = self
                    .registered
                    .iter()
                    .filter(|d| {
                        let count = u64::from(self.count(*d)) + u64::from(self_count);
                        count.saturating_sub(u64::from(min)) <= u64::from(max_skew)
                    })
                    .collect();
                Allowance::Domains {
                    group: index,
                    set,
                    pick: Pick::FewestPods,
                }
            }
            (GroupKind::Affinity, Some(_)) => {
                let with_pods: BitSet = self
                    .nonzero
                    .iter()
                    .filter(|d| self.registered.contains(*d))
                    .filter(|d| pod_domains.is_none_or(|p| p.contains(*d)))
                    .collect();
                if !with_pods.is_empty() {
                    Allowance::Domains {
                        group: index,
                        set: with_pods,
                        pick: Pick::All,
                    }
                } else if selected {
                    let set = match pod_domains {
                        Some(p) => self.registered.and(p),
                        None => self.registered.clone(),
                    };
                    Allowance::Domains {
                        group: index,
                        set,
                        pick: Pick::First,
                    }
                } else {
                    Allowance::Impossible { group: index }
                }
            }
            (GroupKind::AntiAffinity, Some(_)) => {
                let set = self
                    .registered
                    .iter()
                    .filter(|d| self.count(*d) == 0)
                    .filter(|d| pod_domains.is_none_or(|p| p.contains(*d)))
                    .collect();
                Allowance::Domains {
                    group: index,
                    set,
                    pick: Pick::All,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(kind: GroupKind, domains: usize) -> Group {
        Group::new(
            GroupKey {
                kind,
                topology_key: Arc::from("zone"),
                namespaces: vec!["ns".to_owned()],
                selector: LabelSelector::everything(),
                node_filter: None,
                inverse: false,
            },
            Some(0),
            BitSet::full(domains),
        )
    }

    fn ids(set: &BitSet) -> Vec<usize> {
        set.iter().collect()
    }

    #[test]
    fn spread_allows_domains_within_the_skew_and_picks_the_emptiest() {
        let mut g = group(
            GroupKind::Spread {
                max_skew: 1,
                min_domains: None,
            },
            3,
        );
        g.record(0, 1);
        g.record(0, 1);
        g.record(1, 1);
        let allowance = g.allowance(0, true, None, true);
        let Allowance::Domains { set, .. } = &allowance else {
            panic!("domains expected");
        };
        // counts 2,1,0: only zone 2 (0+1-0 <= 1) and zone 1 (1+1-0 = 2 > 1)? no: only zone 2.
        assert_eq!(ids(set), [2]);
        let node = BitSet::full(3);
        assert_eq!(
            ids(&allowance.choose(&node, None, std::slice::from_ref(&g))),
            [2]
        );
    }

    #[test]
    fn min_domains_forces_the_global_minimum_to_zero() {
        let mut g = group(
            GroupKind::Spread {
                max_skew: 1,
                min_domains: Some(4),
            },
            3,
        );
        for d in 0..3 {
            g.record(d, 1);
        }
        // All three zones hold one pod; with fewer than 4 domains the minimum counts as 0, so
        // a fourth pod cannot go anywhere (1 + 1 - 0 > 1).
        let Allowance::Domains { set, .. } = g.allowance(0, true, None, true) else {
            panic!("domains expected");
        };
        assert!(set.is_empty());
    }

    #[test]
    fn affinity_follows_existing_pods_or_bootstraps_when_self_selecting() {
        let mut g = group(GroupKind::Affinity, 3);
        let Allowance::Domains { pick, set, .. } = g.allowance(0, true, None, true) else {
            panic!("bootstrap expected");
        };
        assert_eq!((pick, ids(&set)), (Pick::First, vec![0, 1, 2]));
        assert!(matches!(
            g.allowance(0, false, None, true),
            Allowance::Impossible { .. }
        ));
        g.record(2, 1);
        let Allowance::Domains { set, pick, .. } = g.allowance(0, false, None, true) else {
            panic!("domains expected");
        };
        assert_eq!((pick, ids(&set)), (Pick::All, vec![2]));
    }

    #[test]
    fn anti_affinity_allows_only_empty_domains() {
        let mut g = group(GroupKind::AntiAffinity, 3);
        g.record(1, 1);
        let Allowance::Domains { set, .. } = g.allowance(0, true, None, true) else {
            panic!("domains expected");
        };
        assert_eq!(ids(&set), [0, 2]);
    }

    #[test]
    fn domain_tables_filter_offered_domains_by_tolerated_taints() {
        use crate::apis::taints::TaintEffect;
        let mut table = DomainTable::default();
        let tainted: Arc<[Taint]> =
            Arc::from(vec![Taint::new("gpu", None, TaintEffect::NoSchedule)]);
        let clean: Arc<[Taint]> = Arc::from(Vec::new());
        table.offer("z1", &clean);
        table.offer("z2", &tainted);
        table.intern("z3");
        assert_eq!(ids(&table.offered_domains(None)), [0, 1]);
        assert_eq!(ids(&table.offered_domains(Some(&[]))), [0]);
        let tolerate = [Toleration::exists_for_effect("NoSchedule")];
        assert_eq!(ids(&table.offered_domains(Some(&tolerate))), [0, 1]);
    }
}

//! Variants: a pod signature at one preference relaxation step (Karpenter's
//! `Preferences.Relax`), with its requirements, tolerations and topology groups.

use karpenter_config::PreferencePolicy;
use rustc_hash::FxHashMap;

use crate::apis::labels;
use crate::apis::taints::TaintEffect;

use super::super::pod::Toleration;
use super::super::topology::GroupKind;
use super::{NextVariant, Relaxation, Solver, Variant, remaining_spread};

impl Solver<'_> {
    pub(super) fn variant(&mut self, sig: usize, relax: Relaxation) -> usize {
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
    pub(super) fn relax(&mut self, variant: usize) -> Option<usize> {
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
}

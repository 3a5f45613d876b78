//! Finding where a pod fits: the node-independent topology decisions of an attempt, the
//! search over existing nodes, free room and planned NodeClaims, the per-slot check and the
//! check for a new NodeClaim, with the caches they use.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::FxHasher;

use crate::apis::labels;
use crate::apis::taints::{Taint, TaintEffect};
use crate::domain::instance_type::{InstanceType, satisfies_min_values};
use crate::domain::requirements::{AllowUndefined, Requirement};
use crate::domain::resources::Resources;

use super::super::bitset::{BitSet, BitsOf};
use super::super::pod::first_untolerated;
use super::super::topology::{Allowance, GroupKind};
use super::{
    Attempt, Fit, MAX_FREE_ROOM_BLOCKED, MAX_FREE_ROOM_CHECKS, MAX_FREE_ROOM_LOOKS, NewFit, Reject,
    RoomBucket, SlotKind, Solver, bucket_of, conflicting_port, fits_sum, placeholder_hostname,
};

impl Solver<'_> {
    /// The node-independent topology decisions for a variant, set-valued ones first so the
    /// spread constraints pick among what is left: the pod's anti-affinity, other pods'
    /// anti-affinity that selects it, its affinity, then its spread constraints.
    pub(super) fn prepare_attempt(&mut self, variant: usize) {
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

    /// Hostname groups whose nonzero slots the attempt must skip, and the hostname affinity
    /// group whose nonzero slots it must stay within.
    pub(super) fn masks(&self) -> (Vec<usize>, Option<usize>) {
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
    pub(super) fn masked_word(
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
    pub(super) fn find_slot(
        &mut self,
        variant: usize,
        low: usize,
        high: usize,
    ) -> Option<(usize, Fit)> {
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
    pub(super) fn find_free_room(&mut self, variant: usize) -> Option<(usize, Fit)> {
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
    pub(super) fn costs_nothing(&mut self, slot: usize, fit: &Fit, requests: &Resources) -> bool {
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

    pub(super) fn tolerates(&mut self, tolerations: usize, taints: usize) -> Result<(), Taint> {
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

    pub(super) fn merge(
        &mut self,
        class: usize,
        req: usize,
        allow: AllowUndefined,
    ) -> Option<usize> {
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

    pub(super) fn ensure_class_domains(&mut self, class: usize, table: usize) {
        if !self.class_domains.contains_key(&(class, table)) {
            let key = &self.table_keys[table];
            let set = self.tables[table].allowed_by(self.reqs.get(class).get(key));
            self.class_domains.insert((class, table), set);
        }
    }

    pub(super) fn narrow(&mut self, class: usize, table: usize, domains: BitSet) -> usize {
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
    pub(super) fn apply_topology(
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

    pub(super) fn apply_allowances(
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
    pub(super) fn check_slot(&mut self, slot: usize, variant: usize) -> Result<Fit, Reject> {
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
                Ok(Fit {
                    class,
                    reserve: Vec::new(),
                })
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
                let reserve = if self.reservations.is_some() {
                    self.ensure_class_types(pool, class);
                    let types = self.pools[pool].class_types[&class].and(&self.slots[slot].types);
                    let need = self.slots[slot].used.plus(requests);
                    self.reservations_for(Some(slot), pool, class, &types, &need)?
                } else {
                    Vec::new()
                };
                Ok(Fit { class, reserve })
            }
        }
    }

    /// The pool's instance types a class allows (requirements intersect, an available
    /// offering is compatible).
    pub(super) fn class_types(&mut self, pool: usize, class: usize) -> &BitSet {
        self.ensure_class_types(pool, class);
        &self.pools[pool].class_types[&class]
    }

    pub(super) fn ensure_class_types(&mut self, pool: usize, class: usize) {
        if !self.pools[pool].class_types.contains_key(&class) {
            let reqs = self.reqs.get(class);
            let p = &self.pools[pool];
            let cached = self.type_cache.and_then(|c| c.allowed(&p.name, reqs));
            let set: BitSet = cached.unwrap_or_else(|| {
                let set = p
                    .types
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.is_compatible(reqs))
                    .map(|(i, _)| i)
                    .collect();
                if let Some(cache) = self.type_cache {
                    cache.keep_allowed(&p.name, reqs, &set);
                }
                set
            });
            self.pools[pool].class_types.insert(class, set);
        }
    }

    pub(super) fn within_limits(&mut self, pool: usize) -> &BitSet {
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
    pub(super) fn check_new(&mut self, pool: usize, variant: usize) -> Result<NewFit, Reject> {
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
        let reserve = if self.reservations.is_some() {
            self.reservations_for(None, pool, class, &types, &need)?
        } else {
            Vec::new()
        };
        Ok(NewFit {
            fit: Fit { class, reserve },
            types,
        })
    }

    /// Karpenter's `offeringsToReserve`: the reservations the NodeClaim (`slot`, or a new one)
    /// would hold with requirements `class` and instance types `types` fitting `need`. In
    /// strict mode, refuses when compatible reservations exist but none has room, or when the
    /// NodeClaim would lose all the reservations it holds.
    pub(super) fn reservations_for(
        &mut self,
        slot: Option<usize>,
        pool: usize,
        class: usize,
        types: &BitSet,
        need: &Resources,
    ) -> Result<Vec<Arc<str>>, Reject> {
        self.ensure_class_reserved(pool, class);
        let Some(reservations) = &self.reservations else {
            return Ok(Vec::new());
        };
        let held: &[Arc<str>] = slot.map_or(&[], |s| &self.slots[s].reserved);
        let p = &self.pools[pool];
        let mut compatible = false;
        let mut reserve: Vec<Arc<str>> = Vec::new();
        for (t, id) in &p.class_reserved[&class] {
            if !types.contains(*t) || !need.fits_in(&p.alloc[*t]) {
                continue;
            }
            compatible = true;
            let room = held.contains(id) || reservations.capacity.get(id).is_some_and(|c| *c > 0);
            if room && !reserve.contains(id) {
                reserve.push(id.clone());
            }
        }
        if reservations.strict && reserve.is_empty() && (compatible || !held.is_empty()) {
            return Err(Reject::Reserved);
        }
        Ok(reserve)
    }

    fn ensure_class_reserved(&mut self, pool: usize, class: usize) {
        if self.pools[pool].class_reserved.contains_key(&class) {
            return;
        }
        let reqs = self.reqs.get(class);
        let p = &self.pools[pool];
        let mut list = Vec::new();
        for (t, instance_type) in p.types.iter().enumerate() {
            for offering in instance_type.available_offerings() {
                if offering.capacity_type() == Some(labels::CAPACITY_TYPE_RESERVED)
                    && offering.is_compatible(reqs)
                    && let Some(id) = offering.reservation_id()
                {
                    list.push((t, Arc::from(id)));
                }
            }
        }
        self.pools[pool].class_reserved.insert(class, list);
    }
}

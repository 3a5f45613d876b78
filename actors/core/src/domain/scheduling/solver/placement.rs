//! Placing a pod: opening NodeClaims, committing a pod to a slot (resources, requirements,
//! instance types, limits, topology counts) and keeping the free-room index current.

use std::sync::Arc;

use crate::domain::requirements::AllowUndefined;
use crate::domain::resources::Resources;

use super::super::bitset::BitSet;
use super::super::topology::GroupKind;
use super::{Fit, Slot, SlotKind, Solver, bucket_of, fits_sum, placeholder_hostname};

impl Solver<'_> {
    pub(super) fn open_claim(&mut self, pool: usize, types: BitSet) -> usize {
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
            reserved: Vec::new(),
        });
        self.open.insert(slot);
        slot
    }

    /// Places the pod on the slot: resources, requirements, instance types, host ports and
    /// topology counts.
    pub(super) fn commit(&mut self, slot: usize, pod: usize, variant: usize, fit: Fit) {
        let Fit { class, reserve } = fit;
        self.hold_reservations(slot, reserve);
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
    pub(super) fn update_free_room(&mut self, pool: usize, slot: usize) {
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

    pub(super) fn ensure_class_order(&mut self, pool: usize, class: usize) {
        if self.pools[pool].class_order.contains_key(&class) {
            return;
        }
        self.ensure_class_types(pool, class);
        let reqs = self.reqs.get(class);
        let p = &self.pools[pool];
        let cached = self.type_cache.and_then(|c| c.order(&p.name, reqs));
        let order = cached.unwrap_or_else(|| {
            let mut priced: Vec<(f64, usize)> = p.class_types[&class]
                .iter()
                .map(|t| (p.types[t].cheapest_price(reqs), t))
                .collect();
            priced.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let order: Vec<usize> = priced.into_iter().map(|(_, t)| t).collect();
            if let Some(cache) = self.type_cache {
                cache.keep_order(&p.name, reqs, &order);
            }
            order
        });
        self.pools[pool].class_order.insert(class, order);
    }

    /// Holds `reserve` for the slot: one instance of each newly held reservation taken, each
    /// one no longer held given back.
    pub(super) fn hold_reservations(&mut self, slot: usize, reserve: Vec<Arc<str>>) {
        let Some(reservations) = &mut self.reservations else {
            return;
        };
        let held = &self.slots[slot].reserved;
        for id in reserve.iter().filter(|id| !held.contains(id)) {
            if let Some(capacity) = reservations.capacity.get_mut(id) {
                *capacity -= 1;
            }
        }
        for id in held.iter().filter(|id| !reserve.contains(id)) {
            if let Some(capacity) = reservations.capacity.get_mut(id) {
                *capacity += 1;
            }
        }
        self.slots[slot].reserved = reserve;
    }
}

//! The whole-node half of the cost lower bound: what the cheapest set of whole nodes for one
//! group of identical pods costs, with the group's zone spread kept when it binds the group.
//!
//! [`cost_lower_bound`](super::cost_lower_bound) hands each group its compatible (instance type,
//! offering) pairs as [`Slot`]s: how many of the group's pods one node of that pair holds, its
//! price and its zone. [`cheapest_cover`] solves the covering problem "nodes holding at least n
//! pods, cheapest first" exactly by dynamic programming over the pod count; [`spread_cover`]
//! does it per zone and then picks the cheapest split of the pods over the zones that a
//! `DoNotSchedule` zone spread allows. For one group of identical pods with nothing else in the
//! way, that is the price of the best plan there is, so the bound is reachable, not only a
//! bound.

use std::collections::BTreeMap;

use crate::domain::resources::approx_f64;

/// Pod counts up to which the covering problem is solved exactly; a larger group is priced per
/// pod at its best slot's price per pod, which is below the exact answer, so still a bound.
pub(super) const EXACT_UP_TO: usize = 20_000;

/// Spreads with a larger `maxSkew` are priced as if unspread (a relaxation: still a bound).
const MAX_PRICED_SKEW: usize = 16;

/// One node of a compatible (instance type, offering) pair, as the group sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Slot<'a> {
    /// How many of the group's pods fit on one such node (at least 1).
    pub pods: usize,
    /// $/h of the offering.
    pub price: f64,
    pub zone: Option<&'a str>,
}

/// The cheapest $/h of whole nodes from `slots` holding at least `pods` pods; `None` without
/// slots.
pub(super) fn cheapest_cover(slots: &[Slot<'_>], pods: usize) -> Option<f64> {
    Some(*cover_table(slots, pods)?.last()?)
}

/// The cheapest $/h of whole nodes holding `pods` pods when the pods spread over the zones of
/// `slots` with at most `max_skew` between the fullest and the emptiest zone; `None` without
/// slots.
pub(super) fn spread_cover(slots: &[Slot<'_>], pods: usize, max_skew: usize) -> Option<f64> {
    let mut by_zone: BTreeMap<Option<&str>, Vec<Slot<'_>>> = BTreeMap::new();
    for slot in slots {
        by_zone.entry(slot.zone).or_default().push(*slot);
    }
    let zones = by_zone.len();
    if zones <= 1 || max_skew > MAX_PRICED_SKEW || pods > EXACT_UP_TO || max_skew >= pods {
        return cheapest_cover(slots, pods);
    }
    // With the emptiest zone at m pods, every zone holds m..=m+max_skew of them.
    let highest_min = pods / zones;
    let lowest_min = pods.div_ceil(zones).saturating_sub(max_skew);
    let most_in_a_zone = (highest_min + max_skew).min(pods);
    // cost[z][k]: the cheapest nodes in zone z for k pods, as many as one zone can get.
    let cost: Vec<Vec<f64>> = by_zone
        .values()
        .map(|slots| cover_table(slots, most_in_a_zone))
        .collect::<Option<_>>()?;
    let mut best: Option<f64> = None;
    for min in lowest_min..=highest_min {
        let max = (min + max_skew).min(pods);
        // split[j]: the cheapest way to put j pods in the zones seen so far.
        let mut split = vec![f64::INFINITY; pods + 1];
        split[0] = 0.0;
        for zone in &cost {
            let mut next = vec![f64::INFINITY; pods + 1];
            for (placed, so_far) in split.iter().enumerate() {
                if so_far.is_infinite() {
                    continue;
                }
                for (here, price) in zone.iter().enumerate().take(max + 1).skip(min) {
                    let Some(total) = next.get_mut(placed + here) else {
                        break;
                    };
                    *total = total.min(so_far + price);
                }
            }
            split = next;
        }
        if split[pods].is_finite() {
            best = Some(best.map_or(split[pods], |b: f64| b.min(split[pods])));
        }
    }
    best
}

/// A price at least [`cheapest_cover`] (or [`spread_cover`] when `spread`) of the same slots,
/// found in one pass: the cheapest single kind of node for all the pods, or with a spread,
/// per zone for a balanced share (`⌈pods / zones⌉`; a balanced split is always allowed and
/// covering more pods never costs less). Infinite without slots.
pub(super) fn estimate_from_above(slots: &[Slot<'_>], pods: usize, spread: bool) -> f64 {
    let one_kind = |slots: &mut dyn Iterator<Item = &Slot<'_>>, pods: usize| {
        slots
            .map(|s| s.price * approx(pods.div_ceil(s.pods.max(1))))
            .fold(f64::INFINITY, f64::min)
    };
    if !spread {
        return one_kind(&mut slots.iter(), pods);
    }
    let zones: std::collections::BTreeSet<Option<&str>> = slots.iter().map(|s| s.zone).collect();
    let share = pods.div_ceil(zones.len().max(1));
    zones
        .iter()
        .map(|zone| one_kind(&mut slots.iter().filter(|s| s.zone == *zone), share))
        .sum()
}

/// The cheapest $/h for 0..=pods pods on whole nodes from `slots`; `None` without slots.
/// Above [`EXACT_UP_TO`] pods, only the last entry is filled, with the per-pod price bound.
fn cover_table(slots: &[Slot<'_>], pods: usize) -> Option<Vec<f64>> {
    let slots = undominated(slots, pods);
    if slots.is_empty() {
        return None;
    }
    if pods > EXACT_UP_TO {
        let per_pod = slots
            .iter()
            .map(|s| s.price / approx(s.pods))
            .fold(f64::INFINITY, f64::min);
        let mut table = vec![0.0; pods + 1];
        table[pods] = per_pod * approx(pods);
        return Some(table);
    }
    let mut table = vec![0.0; pods + 1];
    for k in 1..=pods {
        table[k] = slots
            .iter()
            .map(|s| s.price + table[k.saturating_sub(s.pods)])
            .fold(f64::INFINITY, f64::min);
    }
    Some(table)
}

/// The slots worth considering for up to `pods` pods: capacity capped at `pods`, the cheapest
/// per capacity, and none that a bigger slot beats on price.
fn undominated<'a>(slots: &[Slot<'a>], pods: usize) -> Vec<Slot<'a>> {
    let mut cheapest: BTreeMap<usize, f64> = BTreeMap::new();
    for slot in slots.iter().filter(|s| s.pods > 0 && s.price.is_finite()) {
        let entry = cheapest
            .entry(slot.pods.min(pods.max(1)))
            .or_insert(f64::INFINITY);
        *entry = entry.min(slot.price);
    }
    // From the biggest down, keep a slot only when it is cheaper than every bigger one.
    let mut kept = Vec::new();
    let mut cheapest_bigger = f64::INFINITY;
    for (&capacity, &price) in cheapest.iter().rev() {
        if price < cheapest_bigger {
            kept.push(Slot {
                pods: capacity,
                price,
                zone: None,
            });
            cheapest_bigger = price;
        }
    }
    kept
}

fn approx(count: usize) -> f64 {
    approx_f64(i64::try_from(count).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(pods: usize, price: f64, zone: &str) -> Slot<'_> {
        Slot {
            pods,
            price,
            zone: Some(zone),
        }
    }

    fn close(actual: Option<f64>, expected: f64) -> bool {
        actual.is_some_and(|a| (a - expected).abs() < 1e-9)
    }

    #[test]
    fn whole_nodes_cost_more_than_their_share() {
        // 10 pods on nodes of 8 ($0.80) or 3 ($0.33): 8 + 3 = $1.13, not 10 x $0.10.
        let slots = [slot(8, 0.80, "a"), slot(3, 0.33, "a")];
        assert!(close(cheapest_cover(&slots, 10), 1.13));
        // 6 pods: two nodes of 3 ($0.66) beat one of 8.
        assert!(close(cheapest_cover(&slots, 6), 0.66));
        assert!(close(cheapest_cover(&slots, 0), 0.0));
        assert_eq!(cheapest_cover(&[], 3), None);
    }

    #[test]
    fn a_dominated_slot_is_never_chosen_and_capacity_is_capped() {
        // The 4-pod node costs more than the 16-pod one: never worth it.
        let slots = [slot(16, 0.50, "a"), slot(4, 0.60, "a"), slot(1, 0.05, "a")];
        assert!(close(cheapest_cover(&slots, 5), 0.25));
        assert!(close(cheapest_cover(&slots, 12), 0.50));
        assert_eq!(
            undominated(&slots, 20).len(),
            2,
            "the 4-pod slot is dropped"
        );
    }

    #[test]
    fn a_spread_puts_pods_in_the_dear_zone_too() {
        // Zone a: 4 pods for $0.10; zone b: 2 pods for $0.15. 8 pods unspread: two nodes in a.
        let slots = [slot(4, 0.10, "a"), slot(2, 0.15, "b")];
        assert!(close(cheapest_cover(&slots, 8), 0.20));
        // maxSkew 1: 4 and 4.
        assert!(close(spread_cover(&slots, 8, 1), 0.40));
        // maxSkew 4: 6 and 2 is allowed.
        assert!(close(spread_cover(&slots, 8, 4), 0.35));
        // maxSkew 8 or more: the spread cannot bind 8 pods.
        assert!(close(spread_cover(&slots, 8, 8), 0.20));
    }

    #[test]
    fn an_odd_pod_goes_to_the_zone_where_it_is_cheapest() {
        // 7 pods over two zones, maxSkew 1: 4 + 3 or 3 + 4; zone a has room for the extra one.
        let slots = [slot(4, 0.10, "a"), slot(3, 0.30, "b"), slot(4, 0.45, "b")];
        assert!(close(spread_cover(&slots, 7, 1), 0.40));
    }

    #[test]
    fn the_estimate_from_above_is_never_below_the_cover() {
        let slots = [
            slot(4, 0.10, "a"),
            slot(3, 0.30, "b"),
            slot(4, 0.45, "b"),
            slot(1, 0.04, "c"),
        ];
        for pods in 0..40 {
            let free = cheapest_cover(&slots, pods).unwrap();
            assert!(
                estimate_from_above(&slots, pods, false) >= free - 1e-12,
                "{pods}"
            );
            for skew in 1..4 {
                let spread = spread_cover(&slots, pods, skew).unwrap();
                assert!(
                    estimate_from_above(&slots, pods, true) >= spread - 1e-12,
                    "{pods} {skew}"
                );
            }
        }
        assert!(estimate_from_above(&[], 3, false).is_infinite());
    }

    #[test]
    fn large_groups_are_priced_per_pod_at_the_best_slot() {
        let slots = [slot(3, 0.30, "a"), slot(8, 0.40, "a")];
        let pods = EXACT_UP_TO + 1;
        assert!(close(cheapest_cover(&slots, pods), 0.05 * approx(pods)));
    }
}

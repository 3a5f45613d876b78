//! A lower bound on what nodes for a set of pods cost per hour, using only the instance types
//! and offerings each pod may run on. The simulation (`karpenter simulate`) judges its cost by
//! it on every progress tick, so pods with identical constraints are priced once per group.
//!
//! Two bounds are computed and the higher one is the answer: a fractional one over all pods
//! (each pod at the cheapest price per allocatable unit it may run on) and, per group of
//! identical pods, the price of the cheapest whole nodes for the group alone with its zone
//! spread kept ([`whole_nodes`]). For a single group with nothing else in its way the second
//! is exactly the best plan's price, so a plan can reach the bound.
//!
//! [`cost_report`](super::cost_report) keeps the scheduler's own, looser bound (every instance
//! type of every pool) for the benches' cost ratio.

mod whole_nodes;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::apis::labels;
use crate::apis::taints::TaintEffect;
use crate::domain::requirements::{AllowUndefined, Requirements};
use crate::domain::resources::{PODS, Resources, approx_f64};

use super::input::NodePoolInput;
use super::pod::{PodShape, SchedulingPod, SpreadConstraint, Toleration, first_untolerated};
use super::topology::without_hostname;
use whole_nodes::Slot;

/// What [`cost_lower_bound`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CostLowerBound {
    /// $/h that no placement of the priced pods can beat: the higher of the two below.
    pub per_hour: f64,
    /// Each pod at its cheapest price per allocatable unit, for the dominating resource.
    pub fractional_per_hour: f64,
    /// The group of identical pods whose cheapest whole nodes (zone spread kept) cost most,
    /// where that beats the fractional bound; 0 when no group's can (its covering is then
    /// skipped).
    pub whole_nodes_per_hour: f64,
    /// The resource whose priced requests give the fractional bound; `None` when no pod was
    /// priced.
    pub resource: Option<String>,
    /// Pods with at least one compatible (instance type, offering).
    pub priced_pods: usize,
    /// Pods no NodePool offers a compatible instance type for: left out of the bound.
    pub unpriced_pods: usize,
    /// Distinct constraint groups priced (one computation each).
    pub groups: usize,
}

/// The cheapest $/h any placement of `pods` onto nodes of `node_pools` could cost.
///
/// For pod i, its compatible pairs are the (instance type t, offering o) of every NodePool
/// whose taints it tolerates, where the pool's requirements (hostname aside, as the scheduler
/// reads them) are compatible with the pod's node selector, volume requirements and one of its
/// required node affinity terms, t meets the union of both and has room for the pod's
/// requests, and o is available and compatible with that union.
///
/// *Fractional.* For each resource r, `c_i(r) = min over those pairs of price(o) /
/// allocatable_r(t)` (allocatable after the kubelet's overhead), and the bound is
/// `max over r of Σ_i request_{i,r} · c_i(r)`. Why it is a bound: a node of type t at price p
/// holding pods P has `Σ_{i∈P} request_{i,r} ≤ allocatable_r(t)`, so
/// `p ≥ Σ_{i∈P} request_{i,r} · p / allocatable_r(t) ≥ Σ_{i∈P} request_{i,r} · c_i(r)` for every
/// r, since (t, o) is among each such pod's pairs. Summing over the nodes, the total price is at
/// least `Σ_i request_{i,r} · c_i(r)` for every r, hence at least their maximum.
///
/// *Whole nodes.* Pods with equal constraints form a group; a node of pair (t, o) holds
/// `k = min over r of ⌊allocatable_r(t) / request_r⌋` of them. The cheapest multiset of nodes
/// holding the group is a covering problem solved exactly (up to
/// [`whole_nodes::EXACT_UP_TO`] pods). When the group carries a `DoNotSchedule` zone spread whose
/// selector matches exactly the group's pods, the pods are split over the zones as that spread
/// allows and each zone covered with its own offerings. Any placement of all pods also places
/// the group, so its price is at least the group's; the bound is the largest group's.
///
/// Everything else the scheduler honours is left out, which can only lower the bound:
/// preferences, other topology spreads, pod (anti-)affinity, host ports, hostnames, limits,
/// `minValues`, DaemonSet overhead, and `PreferNoSchedule` taints (which the scheduler's last
/// relaxation step tolerates). The bound prices what can be launched now: a node still running
/// on an offering that has since become unavailable is not among the pairs.
///
/// Pods with no compatible pair are counted in [`CostLowerBound::unpriced_pods`] and left out.
#[must_use]
pub fn cost_lower_bound<'a>(
    pods: impl IntoIterator<Item = &'a SchedulingPod>,
    node_pools: &[NodePoolInput],
) -> CostLowerBound {
    cost_lower_bound_of_shapes(pods.into_iter().map(|pod| &*pod.shape), node_pools)
}

/// [`cost_lower_bound`] of the pods' shapes (all it reads of a pod), one per pod in the pods'
/// order: a caller that has the shapes (shared among a workload's pods) need not build pods.
#[must_use]
pub fn cost_lower_bound_of_shapes<'a>(
    shapes: impl IntoIterator<Item = &'a PodShape>,
    node_pools: &[NodePoolInput],
) -> CostLowerBound {
    let mut index: FxHashMap<Constraints<'a>, usize> = FxHashMap::default();
    let mut groups: Vec<(Constraints<'a>, Vec<&'a PodShape>)> = Vec::new();
    let mut label_sets = LabelSets::default();
    for shape in shapes {
        *label_sets
            .entry((&shape.namespace, &shape.labels))
            .or_default() += 1;
        let key = Constraints::of(shape);
        if let Some(group) = index.get(&key) {
            groups[*group].1.push(shape);
        } else {
            index.insert(key, groups.len());
            groups.push((key, vec![shape]));
        }
    }
    let pools: Vec<(&NodePoolInput, Requirements)> = node_pools
        .iter()
        .map(|pool| (pool, without_hostname(&pool.requirements)))
        .collect();
    let mut out = CostLowerBound {
        groups: groups.len(),
        ..CostLowerBound::default()
    };
    // Largest groups first, so the bound so far rises early and the whole-node covering of
    // small groups that cannot beat it is skipped (stable: ties keep the pods' order).
    groups.sort_by_key(|(_, members)| std::cmp::Reverse(members.len()));
    // By resource name, so the sums are added in the same order on every run.
    let mut totals: BTreeMap<&str, f64> = BTreeMap::new();
    for (constraints, members) in &groups {
        let fits = constraints.fits(&pools);
        if fits.types.is_empty() {
            out.unpriced_pods += members.len();
            continue;
        }
        out.priced_pods += members.len();
        let count = approx_f64(i64::try_from(members.len()).unwrap_or(i64::MAX));
        for (resource, unit_price) in constraints.unit_prices(&fits) {
            let requested = approx_f64(constraints.requests.get(resource));
            *totals.entry(resource).or_default() += requested * unit_price * count;
        }
        // The fractional sums only grow, so any of them is already below the final bound.
        let so_far = totals
            .values()
            .fold(out.whole_nodes_per_hour, |a, b| a.max(*b));
        let whole = constraints.whole_nodes(&fits.slots, members, &label_sets, so_far);
        out.whole_nodes_per_hour = out.whole_nodes_per_hour.max(whole);
    }
    if let Some((resource, per_hour)) = totals.iter().max_by(|a, b| a.1.total_cmp(b.1)) {
        out.fractional_per_hour = *per_hour;
        out.resource = Some((*resource).to_owned());
    }
    out.per_hour = out.fractional_per_hour.max(out.whole_nodes_per_hour);
    out
}

/// How many of the priced pods carry each (namespace, labels): what a spread's selector is
/// matched against, once per distinct label set rather than once per pod.
type LabelSets<'a> = FxHashMap<(&'a str, &'a BTreeMap<String, String>), usize>;

/// What a group may run on: each compatible instance type with room for a pod, at its
/// cheapest compatible offering (the fractional half), and every compatible offering as a
/// [`Slot`] with the pods one node holds (the whole-node half).
#[derive(Default)]
struct Fits<'p> {
    types: Vec<(&'p Resources, f64)>,
    slots: Vec<Slot<'p>>,
}

/// The parts of a pod's shape that decide its compatible pairs and its zone spread; pods with
/// equal constraints are priced once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Constraints<'a> {
    namespace: &'a str,
    requests: &'a Resources,
    node_selector: &'a Requirements,
    required_terms: &'a [Requirements],
    volume_requirements: &'a Requirements,
    tolerations: &'a [Toleration],
    spread: &'a [SpreadConstraint],
}

impl<'a> Constraints<'a> {
    fn of(shape: &'a PodShape) -> Self {
        Self {
            namespace: &shape.namespace,
            requests: &shape.requests,
            node_selector: &shape.node_selector,
            required_terms: &shape.required_terms,
            volume_requirements: &shape.volume_requirements,
            tolerations: &shape.tolerations,
            spread: &shape.spread,
        }
    }

    /// The requirement sets the pod may be placed under, as the scheduler builds them: the node
    /// selector and volume requirements with each required node affinity term in turn (terms
    /// are ORed), without the hostname.
    fn requirement_sets(&self) -> Vec<Requirements> {
        let with = |term: Option<&Requirements>| {
            let mut requirements = self.node_selector.clone();
            if let Some(term) = term {
                requirements.add_all(term);
            }
            requirements.add_all(self.volume_requirements);
            requirements.remove(labels::HOSTNAME);
            requirements
        };
        if self.required_terms.is_empty() {
            vec![with(None)]
        } else {
            self.required_terms.iter().map(|t| with(Some(t))).collect()
        }
    }

    /// Every compatible instance type with room for the pod, and its compatible available
    /// offerings.
    fn fits<'p>(&self, pools: &'p [(&'p NodePoolInput, Requirements)]) -> Fits<'p> {
        let mut tolerations = self.tolerations.to_vec();
        tolerations.push(Toleration::exists_for_effect(
            TaintEffect::PreferNoSchedule.as_str(),
        ));
        let sets = self.requirement_sets();
        let mut fits = Fits::default();
        for (pool, pool_requirements) in pools {
            if first_untolerated(&tolerations, &pool.taints).is_some() {
                continue;
            }
            for set in &sets {
                if !pool_requirements.is_compatible(set, AllowUndefined::WellKnown) {
                    continue;
                }
                let mut merged = pool_requirements.clone();
                merged.add_all(set);
                for instance_type in &pool.instance_types {
                    let allocatable = instance_type.allocatable();
                    if !instance_type.is_compatible(&merged) || !self.requests.fits_in(allocatable)
                    {
                        continue;
                    }
                    let pods = self.pods_per_node(allocatable);
                    let mut cheapest = f64::INFINITY;
                    for offering in instance_type
                        .available_offerings()
                        .filter(|o| o.is_compatible(&merged))
                    {
                        cheapest = cheapest.min(offering.price);
                        if pods > 0 {
                            fits.slots.push(Slot {
                                pods,
                                price: offering.price,
                                zone: offering.zone(),
                            });
                        }
                    }
                    if cheapest.is_finite() {
                        fits.types.push((allocatable, cheapest));
                    }
                }
            }
        }
        fits
    }

    /// For each resource the pod requests, the cheapest $/h per allocatable unit among the
    /// types it fits.
    fn unit_prices(&self, fits: &Fits<'_>) -> Vec<(&'a str, f64)> {
        self.requests
            .iter()
            .filter(|(_, amount)| *amount > 0)
            .map(|(resource, _)| {
                let cheapest = fits
                    .types
                    .iter()
                    .filter_map(|(allocatable, price)| {
                        // Positive: the pod requests the resource and fits.
                        let units = allocatable.get(resource);
                        (units > 0).then(|| price / approx_f64(units))
                    })
                    .fold(f64::INFINITY, f64::min);
                (resource, cheapest)
            })
            .collect()
    }

    /// The cheapest whole nodes for the group's pods alone, with its zone spread where that
    /// spread binds exactly the group; 0 when even an estimate from above cannot exceed
    /// `so_far` (the covering is then not worth solving).
    fn whole_nodes(
        &self,
        slots: &[Slot<'_>],
        members: &[&PodShape],
        label_sets: &LabelSets<'_>,
        so_far: f64,
    ) -> f64 {
        let skew = self.binding_zone_skew(members, label_sets);
        if whole_nodes::estimate_from_above(slots, members.len(), skew.is_some()) <= so_far {
            return 0.0;
        }
        let cover = match skew {
            Some(skew) => whole_nodes::spread_cover(slots, members.len(), skew),
            None => whole_nodes::cheapest_cover(slots, members.len()),
        };
        cover.unwrap_or(0.0)
    }

    /// How many of the group's pods one node with this allocatable holds.
    fn pods_per_node(&self, allocatable: &Resources) -> usize {
        let mut fit = self
            .requests
            .iter()
            .filter(|(_, amount)| *amount > 0)
            .map(|(resource, amount)| allocatable.get(resource) / amount)
            .min()
            .unwrap_or(i64::MAX);
        if self.requests.get(PODS) == 0 && allocatable.get(PODS) > 0 {
            fit = fit.min(allocatable.get(PODS));
        }
        usize::try_from(fit).unwrap_or(0)
    }

    /// The `maxSkew` of a `DoNotSchedule` zone spread whose selector matches every pod of
    /// this group and no other pod given in its namespace: only then are the group's own
    /// zone counts the ones the spread balances. `None` otherwise (the spread is left out).
    fn binding_zone_skew(
        &self,
        members: &[&PodShape],
        label_sets: &LabelSets<'_>,
    ) -> Option<usize> {
        let spread = self
            .spread
            .iter()
            .filter(|s| s.topology_key == labels::ZONE && !s.schedule_anyway)
            .min_by_key(|s| s.max_skew)?;
        let selects = |namespace: &str, labels: &BTreeMap<String, String>| {
            namespace == self.namespace && spread.selector.matches(labels)
        };
        if !members.iter().all(|m| selects(&m.namespace, &m.labels)) {
            return None;
        }
        let selected: usize = label_sets
            .iter()
            .filter(|((namespace, labels), _)| selects(namespace, labels))
            .map(|(_, count)| count)
            .sum();
        (selected == members.len()).then(|| usize::try_from(spread.max_skew).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{ResourceRequirements, TopologySpreadConstraint};
    // The view's slim types, under the names the literals below use.
    use crate::apis::{SharedPodSpec as PodSpec, SlimContainer as Container, SlimPod as Pod};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

    use super::*;
    use crate::apis::taints::Taint;
    use crate::domain::instance_type::{InstanceType, Offering, Overhead};
    use crate::domain::requirements::Requirement;
    use crate::domain::resources::{CPU, MEMORY};

    const GI: i64 = 1 << 30;
    const ZONE_A: &str = "zone-a";
    const ZONE_B: &str = "zone-b";

    fn pod(name: &str, cpu: &str, memory: &str, selector: &[(&str, &str)]) -> SchedulingPod {
        let list = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                .collect()
        };
        SchedulingPod::from_pod(&Pod {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            }
            .into(),
            spec: Some(
                PodSpec {
                    containers: vec![Container {
                        name: "app".to_owned(),
                        resources: Some(ResourceRequirements {
                            requests: Some(list(&[(CPU, cpu), (MEMORY, memory)])),
                            ..ResourceRequirements::default()
                        }),
                        ..Container::default()
                    }],
                    node_selector: (!selector.is_empty()).then(|| {
                        selector
                            .iter()
                            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                            .collect()
                    }),
                    ..PodSpec::default()
                }
                .into(),
            ),
            status: None,
        })
        .expect("valid pod")
    }

    /// A type with `cpu` cores, `memory_gi` GiB and 110 pods, no overhead, and the given
    /// (zone, capacity type, price) offerings.
    fn instance_type(
        name: &str,
        family: &str,
        cpu: i64,
        memory_gi: i64,
        offerings: &[(&str, &str, f64)],
    ) -> Arc<InstanceType> {
        let zones: Vec<&str> = offerings.iter().map(|o| o.0).collect();
        let capacity_types: Vec<&str> = offerings.iter().map(|o| o.1).collect();
        Arc::new(InstanceType::new(
            name,
            Requirements::from_requirements([
                Requirement::in_values(labels::INSTANCE_TYPE, &[name]),
                Requirement::in_values("family", &[family]),
                Requirement::in_values(labels::ZONE, &zones),
                Requirement::in_values(labels::CAPACITY_TYPE, &capacity_types),
            ]),
            offerings
                .iter()
                .map(|(zone, capacity_type, price)| Offering::new(zone, capacity_type, *price))
                .collect(),
            Resources::core(cpu * 1000, memory_gi * GI, 110),
            Overhead::default(),
        ))
    }

    fn on_demand(price: f64) -> [(&'static str, &'static str, f64); 1] {
        [(ZONE_A, labels::CAPACITY_TYPE_ON_DEMAND, price)]
    }

    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() < 1e-9
    }

    #[test]
    fn a_pod_restricted_to_spot_gets_spot_prices() {
        // 4 cores, on-demand $0.40/h, spot $0.12/h: $0.10 and $0.03 per core-hour.
        let types = vec![instance_type(
            "m.xlarge",
            "m",
            4,
            64,
            &[
                (ZONE_A, labels::CAPACITY_TYPE_ON_DEMAND, 0.40),
                (ZONE_A, labels::CAPACITY_TYPE_SPOT, 0.12),
            ],
        )];
        let mut pool = NodePoolInput::new("default", types);
        pool.requirements.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            &[labels::CAPACITY_TYPE_ON_DEMAND, labels::CAPACITY_TYPE_SPOT],
        ));
        let pools = [pool];
        let spot = pod("spot", "2", "1Gi", &[(labels::CAPACITY_TYPE, "spot")]);
        let od = pod("od", "2", "1Gi", &[(labels::CAPACITY_TYPE, "on-demand")]);
        let bound = cost_lower_bound([&spot], &pools);
        assert!(close(bound.fractional_per_hour, 2.0 * 0.03), "{bound:?}");
        assert_eq!(bound.resource.as_deref(), Some(CPU));
        let bound = cost_lower_bound([&od], &pools);
        assert!(close(bound.fractional_per_hour, 2.0 * 0.10), "{bound:?}");
        let bound = cost_lower_bound([&spot, &od], &pools);
        assert!(
            close(bound.fractional_per_hour, 2.0 * 0.03 + 2.0 * 0.10),
            "{bound:?}"
        );
    }

    #[test]
    fn a_pool_excluding_a_cheap_type_does_not_see_it() {
        // "t" is five times cheaper per core, but the pool only allows family "m".
        let types = vec![
            instance_type("t.large", "t", 2, 4, &on_demand(0.02)),
            instance_type("m.large", "m", 2, 8, &on_demand(0.10)),
        ];
        let mut pool = NodePoolInput::new("default", types);
        pool.requirements
            .add(Requirement::in_values("family", &["m"]));
        let p = pod("p", "1", "1Gi", &[]);
        let bound = cost_lower_bound([&p], &[pool.clone()]);
        assert!(close(bound.fractional_per_hour, 0.05), "{bound:?}");
        // Without the requirement the cheap type prices the pod.
        pool.requirements.remove("family");
        let bound = cost_lower_bound([&p], &[pool]);
        assert!(close(bound.fractional_per_hour, 0.01), "{bound:?}");
    }

    #[test]
    fn a_node_selector_on_a_zone_prices_that_zone_only() {
        let types = vec![instance_type(
            "m.large",
            "m",
            2,
            8,
            &[
                (ZONE_A, labels::CAPACITY_TYPE_ON_DEMAND, 0.08),
                (ZONE_B, labels::CAPACITY_TYPE_ON_DEMAND, 0.20),
            ],
        )];
        let pools = [NodePoolInput::new("default", types)];
        let anywhere = pod("anywhere", "1", "1Gi", &[]);
        let zone_b = pod("b", "1", "1Gi", &[(labels::ZONE, ZONE_B)]);
        assert!(close(
            cost_lower_bound([&anywhere], &pools).fractional_per_hour,
            0.04
        ));
        assert!(close(
            cost_lower_bound([&zone_b], &pools).fractional_per_hour,
            0.10
        ));
        let nowhere = pod("c", "1", "1Gi", &[(labels::ZONE, "zone-c")]);
        let bound = cost_lower_bound([&nowhere, &zone_b], &pools);
        assert_eq!((bound.priced_pods, bound.unpriced_pods), (1, 1));
        assert!(close(bound.fractional_per_hour, 0.10), "{bound:?}");
    }

    #[test]
    fn the_dominating_resource_gives_the_bound() {
        // $0.10/h for 2 cores and 16 GiB: $0.05 per core, $0.00625 per GiB.
        let types = vec![instance_type("r.large", "r", 2, 16, &on_demand(0.10))];
        let pools = [NodePoolInput::new("default", types)];
        let cpu_heavy = pod("cpu", "2", "1Gi", &[]);
        let bound = cost_lower_bound([&cpu_heavy], &pools);
        assert_eq!(bound.resource.as_deref(), Some(CPU));
        assert!(close(bound.fractional_per_hour, 0.10), "{bound:?}");
        let memory_heavy = pod("mem", "100m", "12Gi", &[]);
        let bound = cost_lower_bound([&memory_heavy], &pools);
        assert_eq!(bound.resource.as_deref(), Some(MEMORY));
        assert!(
            close(bound.fractional_per_hour, 12.0 * 0.00625),
            "{bound:?}"
        );
    }

    #[test]
    fn untolerated_taints_exclude_the_pool_but_prefer_no_schedule_does_not() {
        let cheap = vec![instance_type("c.large", "c", 2, 4, &on_demand(0.02))];
        let dear = vec![instance_type("m.large", "m", 2, 8, &on_demand(0.10))];
        let mut tainted = NodePoolInput::new("gpu", cheap);
        tainted.taints = vec![Taint::new("gpu", None, TaintEffect::NoSchedule)];
        let pools = [tainted, NodePoolInput::new("default", dear)];
        let p = pod("p", "1", "1Gi", &[]);
        assert!(close(
            cost_lower_bound([&p], &pools).fractional_per_hour,
            0.05
        ));
        let mut soft = pools.clone();
        soft[0].taints = vec![Taint::new("gpu", None, TaintEffect::PreferNoSchedule)];
        assert!(close(
            cost_lower_bound([&p], &soft).fractional_per_hour,
            0.01
        ));
    }

    #[test]
    fn types_too_small_for_the_pod_do_not_price_it() {
        let types = vec![
            instance_type("c.medium", "c", 1, 2, &on_demand(0.01)),
            instance_type("m.xlarge", "m", 4, 16, &on_demand(0.20)),
        ];
        let pools = [NodePoolInput::new("default", types)];
        let big = pod("big", "2", "1Gi", &[]);
        assert!(close(
            cost_lower_bound([&big], &pools).fractional_per_hour,
            0.10
        ));
        let huge = pod("huge", "8", "1Gi", &[]);
        let bound = cost_lower_bound([&huge], &pools);
        assert_eq!((bound.fractional_per_hour, bound.unpriced_pods), (0.0, 1));
        assert_eq!(bound.resource, None);
    }

    mod never_above_a_feasible_packing {
        use proptest::prelude::*;

        use super::*;
        use crate::domain::scheduling::{Options, Snapshot, solve};

        /// (cores, GiB, on-demand $/h, spot discount in tenths, zones offered as bits).
        type TypePlan = (i64, i64, u32, u8, u8);
        /// (millicores, MiB, zone selector, capacity-type selector, tolerates the taint).
        type PodPlan = (u32, u32, Option<u8>, Option<bool>, bool);

        const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

        fn types(plans: &[TypePlan]) -> Vec<Arc<InstanceType>> {
            plans
                .iter()
                .enumerate()
                .map(|(i, (cpu, memory, price, discount, zones))| {
                    let on_demand = f64::from(*price) / 100.0;
                    let spot = on_demand * f64::from(*discount) / 10.0;
                    let offerings: Vec<(&str, &str, f64)> = ZONES
                        .iter()
                        .enumerate()
                        .filter(|(z, _)| zones & (1 << z) != 0)
                        .flat_map(|(_, zone)| {
                            [
                                (*zone, labels::CAPACITY_TYPE_ON_DEMAND, on_demand),
                                (*zone, labels::CAPACITY_TYPE_SPOT, spot),
                            ]
                        })
                        .collect();
                    let family = if i % 2 == 0 { "c" } else { "m" };
                    instance_type(&format!("t{i}"), family, *cpu, *memory, &offerings)
                })
                .collect()
        }

        fn pods(plans: &[PodPlan]) -> Vec<SchedulingPod> {
            plans
                .iter()
                .enumerate()
                .map(|(i, (cpu, memory, zone, spot, tolerates))| {
                    let mut selector = Vec::new();
                    if let Some(zone) = zone {
                        selector.push((labels::ZONE, ZONES[usize::from(*zone)]));
                    }
                    if let Some(spot) = spot {
                        selector.push((
                            labels::CAPACITY_TYPE,
                            if *spot { "spot" } else { "on-demand" },
                        ));
                    }
                    let mut p = pod(
                        &format!("p{i}"),
                        &format!("{cpu}m"),
                        &format!("{memory}Mi"),
                        &selector,
                    );
                    if *tolerates {
                        let mut shape = (*p.shape).clone();
                        shape.tolerations.push(Toleration {
                            key: Some("dedicated".to_owned()),
                            operator: crate::domain::scheduling::TolerationOperator::Exists,
                            value: String::new(),
                            effect: None,
                        });
                        p.shape = Arc::new(shape);
                    }
                    p
                })
                .collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

            #[test]
            fn the_bound_is_at_most_the_cost_of_the_schedulers_plan(
                type_plans in prop::collection::vec((1i64..=16, 1i64..=64, 1u32..=100, 1u8..=10, 1u8..8), 1..6),
                pod_plans in prop::collection::vec(
                    (100u32..=6000, 64u32..=16384, proptest::option::of(0u8..3), proptest::option::of(any::<bool>()), any::<bool>()),
                    1..30,
                ),
                restrict_family in any::<bool>(),
                tainted_spot_pool in any::<bool>(),
            ) {
                let all = types(&type_plans);
                let mut general = NodePoolInput::new("general", all.clone());
                if restrict_family {
                    general.requirements.add(Requirement::in_values("family", &["m"]));
                }
                let mut pools = vec![general];
                if tainted_spot_pool {
                    let mut dedicated = NodePoolInput::new("dedicated", all);
                    dedicated.requirements.add(Requirement::in_values(labels::CAPACITY_TYPE, &["spot"]));
                    dedicated.taints = vec![Taint::new("dedicated", None, TaintEffect::NoSchedule)];
                    dedicated.weight = 10;
                    pools.push(dedicated);
                }
                let snapshot = Snapshot {
                    pods: pods(&pod_plans),
                    node_pools: pools,
                    ..Snapshot::default()
                };
                let plan = solve(&snapshot, &Options::default());
                let placed = plan
                    .new_node_claims
                    .iter()
                    .flat_map(|c| &c.pods)
                    .map(|p| &snapshot.pods[*p]);
                let bound = cost_lower_bound(placed, &snapshot.node_pools);
                prop_assert_eq!(bound.unpriced_pods, 0);
                prop_assert_eq!(bound.priced_pods, plan.scheduled_pods());
                prop_assert!(
                    bound.per_hour <= plan.cost() * (1.0 + 1e-9) + 1e-12,
                    "bound {:?} above the plan's cost {}", bound, plan.cost()
                );
            }

            #[test]
            fn a_spread_groups_bound_is_at_most_the_cost_of_the_schedulers_plan(
                type_plans in prop::collection::vec((1i64..=16, 1i64..=64, 1u32..=100, 1u8..=10, 1u8..8), 1..6),
                count in 1usize..40,
                millicores in 100u32..=4000,
                max_skew in 1i32..=3,
            ) {
                let snapshot = Snapshot {
                    pods: (0..count)
                        .map(|i| app_pod(&format!("w{i}"), &format!("{millicores}m"), "web", Some(max_skew)))
                        .collect(),
                    node_pools: vec![NodePoolInput::new("general", types(&type_plans))],
                    ..Snapshot::default()
                };
                let plan = solve(&snapshot, &Options::default());
                let placed = plan
                    .new_node_claims
                    .iter()
                    .flat_map(|c| &c.pods)
                    .map(|p| &snapshot.pods[*p]);
                let bound = cost_lower_bound(placed, &snapshot.node_pools);
                prop_assert_eq!(bound.priced_pods, plan.scheduled_pods());
                prop_assert!(
                    bound.per_hour <= plan.cost() * (1.0 + 1e-9) + 1e-12,
                    "bound {:?} above the plan's cost {}", bound, plan.cost()
                );
            }
        }
    }

    /// A pod of workload `app` (label `app`), 1Gi, spread over zones with `max_skew` when given.
    fn app_pod(name: &str, cpu: &str, app: &str, max_skew: Option<i32>) -> SchedulingPod {
        let mut pod = pod(name, cpu, "1Gi", &[]);
        let mut shape = (*pod.shape).clone();
        Arc::make_mut(&mut shape.labels).insert("app".to_owned(), app.to_owned());
        if let Some(max_skew) = max_skew {
            let spread = SchedulingPod::from_pod(&Pod {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                }
                .into(),
                spec: Some(
                    PodSpec {
                        topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                            max_skew,
                            topology_key: labels::ZONE.to_owned(),
                            when_unsatisfiable: "DoNotSchedule".to_owned(),
                            label_selector: Some(LabelSelector {
                                match_labels: Some([("app".to_owned(), app.to_owned())].into()),
                                ..LabelSelector::default()
                            }),
                            ..TopologySpreadConstraint::default()
                        }]),
                        ..PodSpec::default()
                    }
                    .into(),
                ),
                status: None,
            })
            .expect("valid spread");
            shape.spread.clone_from(&spread.shape.spread);
        }
        pod.shape = Arc::new(shape);
        pod
    }

    /// c.large (2 cores) at $0.02/h in zone a and $0.10/h in zone b.
    fn two_zone_pool() -> [NodePoolInput; 1] {
        let types = vec![instance_type(
            "c.large",
            "c",
            2,
            8,
            &[
                (ZONE_A, labels::CAPACITY_TYPE_ON_DEMAND, 0.02),
                (ZONE_B, labels::CAPACITY_TYPE_ON_DEMAND, 0.10),
            ],
        )];
        [NodePoolInput::new("default", types)]
    }

    #[test]
    fn one_small_pod_costs_a_whole_node() {
        let types = vec![instance_type("m.large", "m", 2, 8, &on_demand(0.10))];
        let pools = [NodePoolInput::new("default", types)];
        let bound = cost_lower_bound([&pod("p", "1", "1Gi", &[])], &pools);
        assert!(close(bound.fractional_per_hour, 0.05), "{bound:?}");
        assert!(close(bound.whole_nodes_per_hour, 0.10), "{bound:?}");
        assert!(close(bound.per_hour, 0.10), "{bound:?}");
        // Three pods need two nodes; the fractional bound says one and a half.
        let three: Vec<SchedulingPod> = (0..3)
            .map(|i| pod(&format!("p{i}"), "1", "1Gi", &[]))
            .collect();
        let bound = cost_lower_bound(&three, &pools);
        assert!(close(bound.fractional_per_hour, 0.15), "{bound:?}");
        assert!(close(bound.per_hour, 0.20), "{bound:?}");
    }

    #[test]
    fn a_zone_spread_over_its_group_puts_pods_in_the_dear_zone() {
        let pools = two_zone_pool();
        // Four 1-core pods spread with maxSkew 1: two per zone, a node in each ($0.02 + $0.10).
        let spread: Vec<SchedulingPod> = (0..4)
            .map(|i| app_pod(&format!("w{i}"), "1", "web", Some(1)))
            .collect();
        let bound = cost_lower_bound(&spread, &pools);
        assert!(close(bound.whole_nodes_per_hour, 0.12), "{bound:?}");
        // Unspread, both nodes go to zone a.
        let free: Vec<SchedulingPod> = (0..4)
            .map(|i| app_pod(&format!("w{i}"), "1", "web", None))
            .collect();
        assert!(close(cost_lower_bound(&free, &pools).per_hour, 0.04));
    }

    #[test]
    fn a_spread_whose_selector_reaches_other_pods_is_left_out() {
        // A pod of another shape carries the same label: the spread counts it too, so the
        // group's own zone counts need not balance, and the bound does not assume they do.
        let pools = two_zone_pool();
        let mut pods: Vec<SchedulingPod> = (0..4)
            .map(|i| app_pod(&format!("w{i}"), "1", "web", Some(1)))
            .collect();
        pods.push(app_pod("other", "500m", "web", None));
        // Unspread, two nodes in zone a ($0.04) are below the fractional $0.045.
        let bound = cost_lower_bound(&pods, &pools);
        assert!(close(bound.per_hour, 0.045), "{bound:?}");
        // The same pod under another label leaves the spread binding again.
        pods.pop();
        pods.push(app_pod("other", "500m", "batch", None));
        let bound = cost_lower_bound(&pods, &pools);
        assert!(close(bound.per_hour, 0.12), "{bound:?}");
    }

    #[test]
    fn pods_with_equal_constraints_are_priced_once() {
        let types = vec![instance_type("m.large", "m", 2, 8, &on_demand(0.10))];
        let pools = [NodePoolInput::new("default", types)];
        let pods: Vec<SchedulingPod> = (0..1000)
            .map(|i| pod(&format!("p{i}"), "500m", "1Gi", &[]))
            .chain([pod("other", "1", "1Gi", &[])])
            .collect();
        let bound = cost_lower_bound(&pods, &pools);
        assert_eq!((bound.groups, bound.priced_pods), (2, 1001));
        assert!(
            close(bound.fractional_per_hour, 500.0 * 0.05 + 0.05),
            "{bound:?}"
        );
    }
}

//! Instance types and their offerings as the scheduler sees them (core
//! `pkg/cloudprovider/types.go`): a name, the well-known labels the type sets (as
//! [`Requirements`]), its [`Offering`]s (zone, capacity type, $/h, availability, reservation),
//! its capacity and the kubelet's [`Overhead`], from which [`InstanceType::allocatable`] follows.
//!
//! The AWS layer builds these from EC2 data; NodePools hand them to the scheduler; plans carry
//! the cheapest [`MAX_INSTANCE_TYPES`] of them per new NodeClaim ([`truncate`]), which must still
//! offer `minValues` distinct values per requirement ([`satisfies_min_values`]).

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::apis::labels;

use super::requirements::{AllowUndefined, Requirement, Requirements};
use super::resources::Resources;

/// Karpenter's capacity types (the `karpenter.sh/capacity-type` label). EC2 itself knows only
/// spot and on-demand: reserved capacity is on-demand capacity in a capacity reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CapacityType {
    OnDemand,
    Spot,
    Reserved,
}

impl CapacityType {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => labels::CAPACITY_TYPE_ON_DEMAND,
            CapacityType::Spot => labels::CAPACITY_TYPE_SPOT,
            CapacityType::Reserved => labels::CAPACITY_TYPE_RESERVED,
        }
    }

    #[must_use]
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            labels::CAPACITY_TYPE_ON_DEMAND => Some(CapacityType::OnDemand),
            labels::CAPACITY_TYPE_SPOT => Some(CapacityType::Spot),
            labels::CAPACITY_TYPE_RESERVED => Some(CapacityType::Reserved),
            _ => None,
        }
    }
}

/// Most instance types a NodeClaim carries (Karpenter's `MaxInstanceTypes`): CreateFleet takes
/// a bounded number of overrides, and the cheapest 60 are plenty of flexibility.
pub const MAX_INSTANCE_TYPES: usize = 60;

/// What the kubelet and the OS keep for themselves; the rest of the capacity is allocatable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overhead {
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    pub eviction_threshold: Resources,
}

impl Overhead {
    /// All three reservations together.
    #[must_use]
    pub fn total(&self) -> Resources {
        let mut total = self.kube_reserved.clone();
        total.add(&self.system_reserved);
        total.add(&self.eviction_threshold);
        total
    }
}

/// One way to buy an instance type: where, how (capacity type), for how much.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    /// `topology.kubernetes.io/zone` and `karpenter.sh/capacity-type` (and, for capacity
    /// reservations, the reservation ID label) as single-value requirements; shared by every
    /// offering of one zone and capacity type (a 5,000-node run held 10 MB of copies).
    pub requirements: Arc<Requirements>,
    /// US dollars per hour.
    pub price: f64,
    /// Whether it can be launched now (not out of capacity).
    pub available: bool,
    /// For reserved offerings: how many more instances the reservation holds.
    pub reservation_capacity: u32,
}

impl Offering {
    /// An available offering in a zone for a capacity type (`spot`, `on-demand`, `reserved`).
    #[must_use]
    pub fn new(zone: &str, capacity_type: &str, price: f64) -> Self {
        Self {
            requirements: Arc::new(Requirements::from_requirements([
                Requirement::in_values(labels::ZONE, &[zone]),
                Requirement::in_values(labels::CAPACITY_TYPE, &[capacity_type]),
            ])),
            price,
            available: true,
            reservation_capacity: 0,
        }
    }

    /// A reserved offering backed by a capacity reservation.
    #[must_use]
    pub fn reserved(zone: &str, reservation_id: &str, price: f64, capacity: u32) -> Self {
        let mut offering = Self::new(zone, labels::CAPACITY_TYPE_RESERVED, price);
        Arc::make_mut(&mut offering.requirements).add(Requirement::in_values(
            labels::CAPACITY_RESERVATION_ID,
            &[reservation_id],
        ));
        offering.reservation_capacity = capacity;
        offering
    }

    /// Marks the offering unavailable (for example after an insufficient-capacity error).
    #[must_use]
    pub fn unavailable(mut self) -> Self {
        self.available = false;
        self
    }

    /// The zone, when the offering names exactly one.
    #[must_use]
    pub fn zone(&self) -> Option<&str> {
        self.single(labels::ZONE)
    }

    /// The capacity type, when the offering names exactly one.
    #[must_use]
    pub fn capacity_type(&self) -> Option<&str> {
        self.single(labels::CAPACITY_TYPE)
    }

    /// The capacity reservation, for reserved offerings.
    #[must_use]
    pub fn reservation_id(&self) -> Option<&str> {
        self.single(labels::CAPACITY_RESERVATION_ID)
    }

    fn single(&self, key: &str) -> Option<&str> {
        self.requirements
            .get(key)
            .and_then(Requirement::single_value)
    }

    /// Whether a NodeClaim with these requirements could launch this offering (Karpenter's
    /// `IsCompatible(offering, AllowUndefinedWellKnownLabels)`), ignoring availability.
    #[must_use]
    pub fn is_compatible(&self, requirements: &Requirements) -> bool {
        requirements.is_compatible(&self.requirements, AllowUndefined::WellKnown)
    }
}

/// A machine shape the cloud provider can launch.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    pub name: String,
    /// The well-known labels a node of this type carries (instance type, arch, OS, zones and
    /// capacity types of its offerings, family, CPU count, ...).
    pub requirements: Requirements,
    pub offerings: Vec<Offering>,
    pub capacity: Resources,
    pub overhead: Overhead,
    allocatable: Resources,
}

impl InstanceType {
    /// An instance type; allocatable is capacity minus overhead.
    #[must_use]
    pub fn new(
        name: &str,
        requirements: Requirements,
        offerings: Vec<Offering>,
        capacity: Resources,
        overhead: Overhead,
    ) -> Self {
        let allocatable = capacity.minus(&overhead.total());
        Self {
            name: name.to_owned(),
            requirements,
            offerings,
            capacity,
            overhead,
            allocatable,
        }
    }

    /// What pods may request on a node of this type.
    #[must_use]
    pub fn allocatable(&self) -> &Resources {
        &self.allocatable
    }

    /// The available offerings.
    pub fn available_offerings(&self) -> impl Iterator<Item = &Offering> + '_ {
        self.offerings.iter().filter(|o| o.available)
    }

    /// The cheapest available offering a NodeClaim with these requirements could launch.
    #[must_use]
    pub fn cheapest_offering(&self, requirements: &Requirements) -> Option<&Offering> {
        self.available_offerings()
            .filter(|o| o.is_compatible(requirements))
            .min_by(|a, b| a.price.total_cmp(&b.price))
    }

    /// The price of [`InstanceType::cheapest_offering`], `f64::MAX` when there is none.
    #[must_use]
    pub fn cheapest_price(&self, requirements: &Requirements) -> f64 {
        self.cheapest_offering(requirements)
            .map_or(f64::MAX, |o| o.price)
    }

    /// Whether requirements allow this type: its labels intersect them (keys it does not set
    /// are fine) and some available offering is compatible.
    #[must_use]
    pub fn is_compatible(&self, requirements: &Requirements) -> bool {
        self.requirements.intersects_ok(requirements)
            && self
                .available_offerings()
                .any(|o| o.is_compatible(requirements))
    }

    /// Karpenter's `WorstLaunchPrice`: the most expensive compatible offering of the capacity
    /// type the launch would use (reserved, else spot, else on-demand).
    #[must_use]
    pub fn worst_launch_price(&self, requirements: &Requirements) -> f64 {
        for capacity_type in [
            labels::CAPACITY_TYPE_RESERVED,
            labels::CAPACITY_TYPE_SPOT,
            labels::CAPACITY_TYPE_ON_DEMAND,
        ] {
            let worst = self
                .available_offerings()
                .filter(|o| {
                    o.capacity_type() == Some(capacity_type) && o.is_compatible(requirements)
                })
                .map(|o| o.price)
                .max_by(f64::total_cmp);
            if let Some(price) = worst {
                return price;
            }
        }
        f64::MAX
    }
}

/// Sorts instance types by their cheapest compatible available offering (ties by name, so the
/// order is deterministic), as Karpenter's `OrderByPrice` does.
pub fn order_by_price<T: Borrow<InstanceType>>(types: &mut [T], requirements: &Requirements) {
    let mut keyed: Vec<(f64, usize)> = types
        .iter()
        .enumerate()
        .map(|(i, t)| (t.borrow().cheapest_price(requirements), i))
        .collect();
    keyed.sort_by(|(pa, ia), (pb, ib)| {
        pa.total_cmp(pb)
            .then_with(|| types[*ia].borrow().name.cmp(&types[*ib].borrow().name))
    });
    let order: Vec<usize> = keyed.into_iter().map(|(_, i)| i).collect();
    apply_permutation(types, &order);
}

fn apply_permutation<T>(items: &mut [T], order: &[usize]) {
    // Move each element into place by following cycles.
    let mut placed = vec![false; items.len()];
    for start in 0..items.len() {
        if placed[start] {
            continue;
        }
        let mut current = start;
        loop {
            placed[current] = true;
            let next = order[current];
            if next == start {
                break;
            }
            items.swap(current, next);
            current = next;
        }
    }
}

/// `minValues` not met by a list of instance types.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, thiserror::Error)]
#[error("minValues requirement is not met for label {key:?} ({available} of {needed} values)")]
pub struct MinValuesError {
    pub key: String,
    pub needed: u32,
    pub available: u32,
}

/// Karpenter's `SatisfiesMinValues`: the smallest prefix of `types` that offers at least
/// `minValues` distinct values for every requirement that has one (`Ok(0)` when none does).
pub fn satisfies_min_values<T: Borrow<InstanceType>>(
    types: &[T],
    requirements: &Requirements,
) -> Result<usize, MinValuesError> {
    let bounded: Vec<&Requirement> = requirements
        .iter()
        .filter(|r| r.min_values().is_some())
        .collect();
    if bounded.is_empty() {
        return Ok(0);
    }
    let mut seen: Vec<BTreeSet<Arc<str>>> = vec![BTreeSet::new(); bounded.len()];
    for (i, instance_type) in types.iter().enumerate() {
        for (requirement, values) in bounded.iter().zip(seen.iter_mut()) {
            if let Some(own) = instance_type.borrow().requirements.get(requirement.key())
                && !own.is_complement()
            {
                values.extend(own.values().iter().cloned());
            }
        }
        let all_met = bounded
            .iter()
            .zip(&seen)
            .all(|(r, values)| values.len() >= r.min_values().unwrap_or(0) as usize);
        if all_met {
            return Ok(i + 1);
        }
    }
    let (requirement, values) = bounded
        .iter()
        .zip(&seen)
        .find(|(r, values)| values.len() < r.min_values().unwrap_or(0) as usize)
        .map_or((bounded[0], &seen[0]), |(r, v)| (*r, v));
    Err(MinValuesError {
        key: requirement.key().to_owned(),
        needed: requirement.min_values().unwrap_or(0),
        available: u32::try_from(values.len()).unwrap_or(u32::MAX),
    })
}

/// Karpenter's `Truncate`: the `max` cheapest types (by [`order_by_price`]), refused when that
/// prefix no longer meets `minValues`.
pub fn truncate<T: Borrow<InstanceType> + Clone>(
    types: &[T],
    requirements: &Requirements,
    max: usize,
) -> Result<Vec<T>, MinValuesError> {
    let mut ordered = types.to_vec();
    order_by_price(&mut ordered, requirements);
    ordered.truncate(max);
    satisfies_min_values(&ordered, requirements)?;
    Ok(ordered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::labels::{CAPACITY_TYPE, INSTANCE_FAMILY, INSTANCE_TYPE, ZONE};
    use crate::domain::requirements::Operator;
    use crate::domain::resources::approx_f64;

    const GI: i64 = 1 << 30;

    fn instance_type(name: &str, family: &str, cpu: i64, offerings: Vec<Offering>) -> InstanceType {
        InstanceType::new(
            name,
            Requirements::from_requirements([
                Requirement::in_values(INSTANCE_TYPE, &[name]),
                Requirement::in_values(INSTANCE_FAMILY, &[family]),
            ]),
            offerings,
            Resources::core(cpu * 1000, cpu * 2 * GI, 10 * cpu),
            Overhead {
                kube_reserved: Resources::core(100, 10 << 20, 0),
                ..Overhead::default()
            },
        )
    }

    fn assert_price(actual: f64, expected: f64) {
        assert!((actual - expected).abs() < 1e-12, "{actual} != {expected}");
    }

    fn zone_req(zone: &str) -> Requirements {
        Requirements::from_requirements([Requirement::in_values(ZONE, &[zone])])
    }

    #[test]
    fn allocatable_is_capacity_minus_overhead() {
        let t = instance_type("a", "m5", 2, vec![]);
        assert_eq!(t.allocatable().cpu, 1900);
        assert_eq!(t.allocatable().memory, 4 * GI - (10 << 20));
    }

    #[test]
    fn cheapest_offering_respects_requirements_and_availability() {
        let t = instance_type(
            "a",
            "m5",
            2,
            vec![
                Offering::new("z1", "spot", 0.05),
                Offering::new("z2", "spot", 0.01).unavailable(),
                Offering::new("z2", "on-demand", 0.10),
            ],
        );
        assert_price(t.cheapest_price(&Requirements::new()), 0.05);
        assert_price(t.cheapest_price(&zone_req("z2")), 0.10);
        assert!(!t.is_compatible(&zone_req("z3")));
        let on_demand = Requirements::from_requirements([Requirement::in_values(
            CAPACITY_TYPE,
            &["on-demand"],
        )]);
        assert_price(t.worst_launch_price(&Requirements::new()), 0.05);
        assert_price(t.worst_launch_price(&on_demand), 0.10);
    }

    #[test]
    fn ordering_by_price_is_cheapest_first_and_stable_on_ties() {
        let mut types = vec![
            instance_type("c", "m5", 4, vec![Offering::new("z1", "spot", 0.3)]),
            instance_type("b", "m5", 2, vec![Offering::new("z1", "spot", 0.1)]),
            instance_type("a", "m5", 2, vec![Offering::new("z1", "spot", 0.1)]),
            instance_type("d", "m5", 1, vec![Offering::new("z2", "spot", 0.01)]),
        ];
        order_by_price(&mut types, &zone_req("z1"));
        let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"]);
    }

    #[test]
    fn truncation_keeps_the_cheapest_and_checks_min_values() {
        let types: Vec<InstanceType> = (0..5)
            .map(|i| {
                instance_type(
                    &format!("t{i}"),
                    if i < 3 { "m5" } else { "c5" },
                    i + 1,
                    vec![Offering::new("z1", "spot", 0.1 * approx_f64(i + 1))],
                )
            })
            .collect();
        let plain = Requirements::new();
        let kept = truncate(&types, &plain, 2).expect("no minValues");
        assert_eq!(
            kept.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["t0", "t1"]
        );
        let two_families = Requirements::from_requirements([Requirement::new(
            INSTANCE_FAMILY,
            Operator::Exists,
            &[] as &[&str],
        )
        .expect("valid")
        .with_min_values(Some(2))]);
        assert_eq!(satisfies_min_values(&types, &two_families), Ok(4));
        let error = truncate(&types, &two_families, 3).err();
        assert_eq!(
            error,
            Some(MinValuesError {
                key: INSTANCE_FAMILY.to_owned(),
                needed: 2,
                available: 1
            })
        );
        assert!(truncate(&types, &two_families, 4).is_ok());
    }
}

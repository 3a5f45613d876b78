//! Turning a simulation into a consolidation decision (Karpenter's `computeConsolidation`,
//! spec sections 6.3 and 6.6, prices per 12.3): delete when the pods fit elsewhere, replace by
//! one cheaper node when they need exactly one, nothing otherwise; plus multi-node's
//! same-type filter (`filterOutSameType`, 6.4).
//!
//! Prices: a candidate is priced at the cheapest offering of its instance type compatible with
//! its labels, available or not (an ICE'd offering still prices the node); a candidate whose
//! reservation is gone prices the whole set at 0. A replacement instance type counts at its
//! *worst launch price* (the most expensive compatible available offering of the capacity type
//! the launch would use) and must be strictly cheaper than the candidates together.

use std::sync::Arc;

use crate::apis::labels;
use crate::domain::instance_type::{
    InstanceType, MinValuesError, order_by_price, satisfies_min_values,
};
use crate::domain::requirements::{Requirement, Requirements};
use crate::domain::scheduling::NewNodeClaim;

use super::DisruptionError;
use super::candidates::Candidate;
use super::input::DisruptionInput;
use super::simulate::Simulation;

/// Spot-to-spot consolidation needs this many cheaper instance types, and launches from the
/// cheapest this many, so the launched instance is never immediately consolidatable again
/// (Karpenter's `MinInstanceTypesForSpotToSpotConsolidation`).
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

/// The price of one candidate: its instance type's cheapest offering compatible with its
/// labels, availability ignored. `Ok(None)` for a reserved node whose offering is gone.
pub fn candidate_price(
    candidate: &Candidate,
    input: &DisruptionInput,
) -> Result<Option<f64>, DisruptionError> {
    candidate
        .price
        .get_or_init(|| price_of(candidate, input))
        .clone()
}

fn price_of(
    candidate: &Candidate,
    input: &DisruptionInput,
) -> Result<Option<f64>, DisruptionError> {
    let node = &input.nodes[candidate.node];
    let requirements = Requirements::from_labels(&node.labels);
    let cheapest = candidate.instance_type.as_ref().and_then(|t| {
        t.offerings
            .iter()
            .filter(|o| o.is_compatible(&requirements))
            .map(|o| o.price)
            .min_by(f64::total_cmp)
    });
    match cheapest {
        Some(price) => Ok(Some(price)),
        None if candidate.capacity_type.as_deref() == Some(labels::CAPACITY_TYPE_RESERVED) => {
            Ok(None)
        }
        None => Err(DisruptionError::UnknownOffering {
            node: candidate.name.clone(),
            instance_type: candidate
                .instance_type
                .as_ref()
                .map(|t| t.name.clone())
                .unwrap_or_default(),
            capacity_type: candidate.capacity_type.clone().unwrap_or_default(),
            zone: candidate.zone.clone().unwrap_or_default(),
        }),
    }
}

/// Karpenter's `getCandidatePrices`: the sum, or 0 as soon as one candidate is a reserved node
/// without its offering.
pub fn candidates_price(
    candidates: &[&Candidate],
    input: &DisruptionInput,
) -> Result<f64, DisruptionError> {
    let mut total = 0.0;
    for candidate in candidates {
        match candidate_price(candidate, input)? {
            Some(price) => total += price,
            None => return Ok(0.0),
        }
    }
    Ok(total)
}

/// What a consolidation computation concluded.
#[derive(Debug, Clone)]
pub enum Consolidation {
    /// Nothing to do; `event` is the `Unconsolidatable` message Karpenter publishes when
    /// there is exactly one candidate; `considered` the replacement priced and refused.
    Nothing {
        event: Option<String>,
        considered: Option<ReplacementConsidered>,
    },
    Delete {
        simulation: Simulation,
    },
    Replace {
        simulation: Simulation,
        replacement: NewNodeClaim,
        price_before: f64,
    },
}

/// A replacement consolidation priced and found no cheaper (for explanations).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplacementConsidered {
    /// The candidates' names.
    pub candidates: Vec<String>,
    /// What the candidates cost together.
    pub price: f64,
    /// The cheapest instance type the replacement could launch as, at its worst launch price.
    pub cheapest: Option<(String, f64)>,
}

impl ReplacementConsidered {
    fn new(
        candidates: &[&Candidate],
        price: f64,
        types: &[Arc<InstanceType>],
        requirements: &Requirements,
    ) -> Self {
        let cheapest = types
            .iter()
            .map(|t| (t.name.clone(), t.worst_launch_price(requirements)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        Self {
            candidates: candidates.iter().map(|c| c.name.clone()).collect(),
            price,
            cheapest,
        }
    }
}

/// Karpenter's `minValues` error text.
fn min_values_text(error: &MinValuesError) -> String {
    format!(
        "minValues requirement is not met for label (label={})",
        error.key
    )
}

/// Karpenter's `RemoveInstanceTypeOptionsByPriceAndMinValues`: keep the types whose worst
/// launch price is below `max_price`, then check `minValues` on what is left.
pub fn filter_by_price(
    types: &[Arc<InstanceType>],
    requirements: &Requirements,
    max_price: f64,
) -> Result<Vec<Arc<InstanceType>>, MinValuesError> {
    let kept: Vec<Arc<InstanceType>> = types
        .iter()
        .filter(|t| t.worst_launch_price(requirements) < max_price)
        .cloned()
        .collect();
    satisfies_min_values(&kept, requirements)?;
    Ok(kept)
}

/// Points a NodeClaim at a new list of instance types: the `node.kubernetes.io/instance-type`
/// requirement (its `minValues` kept) and the price follow.
pub fn set_instance_types(claim: &mut NewNodeClaim, types: Vec<Arc<InstanceType>>) {
    let min_values = claim
        .requirements
        .get(labels::INSTANCE_TYPE)
        .and_then(Requirement::min_values);
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    claim
        .requirements
        .set(Requirement::in_values(labels::INSTANCE_TYPE, &names).with_min_values(min_values));
    claim.price = types
        .iter()
        .map(|t| t.cheapest_price(&claim.requirements))
        .fold(f64::MAX, f64::min);
    claim.instance_types = types;
}

/// The capacity type requirement allows a value.
fn allows_capacity_type(requirements: &Requirements, value: &str) -> bool {
    requirements
        .get(labels::CAPACITY_TYPE)
        .is_none_or(|r| r.has(value))
}

/// Karpenter's `computeConsolidation` after the simulation (spec 6.3, steps 2 to 11).
pub fn compute(
    simulation: Simulation,
    candidates: &[&Candidate],
    input: &DisruptionInput,
) -> Result<Consolidation, DisruptionError> {
    let single = candidates.len() == 1;
    let nothing = |message: String| Consolidation::Nothing {
        event: single.then_some(message),
        considered: None,
    };
    if !simulation.all_non_pending_scheduled() {
        return Ok(nothing(sentence(&simulation.error_text())));
    }
    match simulation.new_node_claims().len() {
        0 => return Ok(Consolidation::Delete { simulation }),
        1 => {}
        n => {
            return Ok(nothing(format!(
                "Can't remove without creating {n} candidates"
            )));
        }
    }
    let price = candidates_price(candidates, input)?;
    let mut replacement = simulation.plan.new_node_claims[0].clone();
    let mut types = replacement.instance_types.clone();
    order_by_price(&mut types, &replacement.requirements);
    let all_spot = candidates
        .iter()
        .all(|c| c.capacity_type.as_deref() == Some(labels::CAPACITY_TYPE_SPOT));
    if all_spot && allows_capacity_type(&replacement.requirements, labels::CAPACITY_TYPE_SPOT) {
        return Ok(spot_to_spot(
            simulation,
            replacement,
            types,
            candidates,
            price,
            input.options.spot_to_spot,
        ));
    }
    let refused = |message: String| Consolidation::Nothing {
        event: single.then_some(message),
        considered: Some(ReplacementConsidered::new(
            candidates,
            price,
            &types,
            &replacement.requirements,
        )),
    };
    let kept = match filter_by_price(&types, &replacement.requirements, price) {
        Ok(kept) => kept,
        Err(error) => {
            return Ok(refused(format!(
                "Filtering by price: {}",
                min_values_text(&error)
            )));
        }
    };
    if kept.is_empty() {
        return Ok(refused("Can't replace with a cheaper node".to_owned()));
    }
    // The price filter priced the spot variant; an on-demand fallback could cost more, so the
    // launch must fail rather than fall back.
    if allows_capacity_type(&replacement.requirements, labels::CAPACITY_TYPE_SPOT)
        && allows_capacity_type(&replacement.requirements, labels::CAPACITY_TYPE_ON_DEMAND)
    {
        replacement.requirements.add(Requirement::in_values(
            labels::CAPACITY_TYPE,
            &[labels::CAPACITY_TYPE_SPOT],
        ));
    }
    set_instance_types(&mut replacement, kept);
    Ok(Consolidation::Replace {
        simulation,
        replacement,
        price_before: price,
    })
}

/// Spot-to-spot consolidation (spec 6.6), entered with the types already price-sorted.
fn spot_to_spot(
    simulation: Simulation,
    mut replacement: NewNodeClaim,
    types: Vec<Arc<InstanceType>>,
    candidates: &[&Candidate],
    price: f64,
    enabled: bool,
) -> Consolidation {
    let single = candidates.len() == 1;
    let nothing = |message: String| Consolidation::Nothing {
        event: single.then_some(message),
        considered: None,
    };
    if !enabled {
        return nothing(
            "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
                .to_owned(),
        );
    }
    replacement.requirements.add(Requirement::in_values(
        labels::CAPACITY_TYPE,
        &[labels::CAPACITY_TYPE_SPOT],
    ));
    let requirements = replacement.requirements.clone();
    // Karpenter keeps the order computed before the narrowing (no re-sort).
    let compatible: Vec<Arc<InstanceType>> = types
        .into_iter()
        .filter(|t| {
            t.available_offerings()
                .any(|o| o.is_compatible(&requirements))
        })
        .collect();
    let refused = |message: String| Consolidation::Nothing {
        event: single.then_some(message),
        considered: Some(ReplacementConsidered::new(
            candidates,
            price,
            &compatible,
            &requirements,
        )),
    };
    let mut kept = match filter_by_price(&compatible, &requirements, price) {
        Ok(kept) => kept,
        Err(error) => return refused(format!("Filtering by price: {}", min_values_text(&error))),
    };
    if kept.is_empty() {
        return refused("Can't replace with a cheaper node".to_owned());
    }
    if single {
        if kept.len() < SPOT_TO_SPOT_MIN_TYPES {
            return nothing(format!(
                "SpotToSpotConsolidation requires {SPOT_TO_SPOT_MIN_TYPES} cheaper instance type options than the current candidate to consolidate, got {}",
                kept.len()
            ));
        }
        let limit = if requirements.has_min_values() {
            satisfies_min_values(&kept, &requirements)
                .unwrap_or(0)
                .max(SPOT_TO_SPOT_MIN_TYPES)
        } else {
            SPOT_TO_SPOT_MIN_TYPES
        };
        kept.truncate(limit);
    }
    set_instance_types(&mut replacement, kept);
    Consolidation::Replace {
        simulation,
        replacement,
        price_before: price,
    }
}

/// Karpenter's `filterOutSameType` for multi-node replacements: when the replacement could be
/// one of the candidates' own instance types, it must be cheaper than the cheapest candidate
/// of such a type (otherwise deleting the others is the better move). `None` when no type is
/// left or `minValues` fails.
pub fn filter_out_same_type(
    replacement: &NewNodeClaim,
    candidates: &[&Candidate],
    input: &DisruptionInput,
) -> Option<Vec<Arc<InstanceType>>> {
    let mut prices: Vec<(&str, Option<f64>)> = Vec::new();
    for candidate in candidates {
        let Some(instance_type) = &candidate.instance_type else {
            continue;
        };
        let requirements = Requirements::from_labels(&input.nodes[candidate.node].labels);
        let cheapest = instance_type
            .offerings
            .iter()
            .filter(|o| o.is_compatible(&requirements))
            .map(|o| o.price)
            .min_by(f64::total_cmp);
        match prices
            .iter_mut()
            .find(|(name, _)| *name == instance_type.name)
        {
            Some((_, price)) => {
                if let Some(cheapest) = cheapest {
                    *price = Some(price.map_or(cheapest, |p| p.min(cheapest)));
                }
            }
            None => prices.push((instance_type.name.as_str(), cheapest)),
        }
    }
    let mut max_price = f64::MAX;
    for t in &replacement.instance_types {
        if let Some((_, price)) = prices.iter().find(|(name, _)| *name == t.name) {
            // A candidate type without a compatible offering has no recorded price: Go's map
            // reads 0, which rules the replacement out.
            max_price = max_price.min(price.unwrap_or(0.0));
        }
    }
    let kept = filter_by_price(
        &replacement.instance_types,
        &replacement.requirements,
        max_price,
    )
    .ok()?;
    (!kept.is_empty()).then_some(kept)
}

/// Karpenter's `pretty.Sentence`: the first letter upper-cased.
#[must_use]
pub fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

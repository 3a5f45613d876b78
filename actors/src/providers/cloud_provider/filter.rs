//! Which instance types a NodeClaim launches as (Karpenter's `resolveInstanceTypes` and
//! `FilterRejectInstanceTypes`), a pure function of the class's instance types, the NodeClaim's
//! requirements and its requests:
//!
//! 1. compatible with the requirements (well-known labels may be undefined), with an available
//!    offering compatible with them, and with room for the requests;
//! 2. without `minValues`: "exotic" types (metal, GPUs, Neuron, Gaudi) are dropped when generic
//!    ones remain, and when both spot and on-demand could launch, spot types dearer than the
//!    cheapest on-demand offering are dropped;
//! 3. the 60 cheapest, refused when they no longer offer `minValues` distinct values.
//!
//! A launch burst asks this of thousands of NodeClaims that mostly share their requirements and
//! requests (one per pod of a workload): [`CandidatesMemo`] keeps the last few answers, each
//! with the identity of the instance type list it was computed from, so an unchanged question
//! over the same list (the instance type provider hands out a new list whenever availability,
//! prices or the class change) is answered without filtering the list again. Answers about a
//! list the provider has let go are dropped, with the types they hold.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use karpenter_core::apis::labels;
use karpenter_core::domain::instance_type::{
    InstanceType, MAX_INSTANCE_TYPES, MinValuesError, truncate,
};
use karpenter_core::domain::requirements::{AllowUndefined, Requirements};
use karpenter_core::domain::resources::Resources;

/// Extended resources that make an instance type "exotic".
const EXOTIC_RESOURCES: [&str; 5] = [
    labels::RESOURCE_AWS_NEURON,
    labels::RESOURCE_AWS_NEURON_CORE,
    labels::RESOURCE_AMD_GPU,
    labels::RESOURCE_NVIDIA_GPU,
    labels::RESOURCE_HABANA_GAUDI,
];

/// The types to launch with, cheapest first, and the names of those filtered out by
/// preference (logged, as Karpenter v1.5 does).
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchCandidates {
    pub instance_types: Vec<Arc<InstanceType>>,
    pub rejected: Vec<String>,
}

/// See the module docs.
pub fn launch_candidates(
    instance_types: &[Arc<InstanceType>],
    requirements: &Requirements,
    requests: &Resources,
) -> Result<LaunchCandidates, MinValuesError> {
    // A type's own instance-type label is its name: a name the requirements exclude can never
    // be compatible, and checking the name first skips the full comparison for the hundreds of
    // types a scheduled NodeClaim's instance-type list leaves out.
    let named = requirements.get(labels::INSTANCE_TYPE);
    let compatible: Vec<Arc<InstanceType>> = instance_types
        .iter()
        .filter(|it| {
            named.is_none_or(|allowed| allowed.has(&it.name))
                && requirements.is_compatible(&it.requirements, AllowUndefined::WellKnown)
                && it
                    .available_offerings()
                    .any(|o| o.is_compatible(requirements))
                && requests.fits_in(it.allocatable())
        })
        .cloned()
        .collect();
    let mut rejected = Vec::new();
    let mut filtered = compatible;
    if !requirements.has_min_values() {
        let (kept, dropped) = reject_exotic(filtered);
        rejected.extend(dropped);
        filtered = kept;
        if is_mixed_capacity_launch(requirements, &filtered) {
            let (kept, dropped) = reject_unwanted_spot(filtered);
            rejected.extend(dropped);
            filtered = kept;
        }
    }
    let instance_types = truncate(&filtered, requirements, MAX_INSTANCE_TYPES)?;
    Ok(LaunchCandidates {
        instance_types,
        rejected: rejected.into_iter().map(|it| it.name.clone()).collect(),
    })
}

/// Answers [`CandidatesMemo`] keeps: enough for the distinct requirements of a burst (a
/// workload's pods per zone and capacity type), few enough to compare against on every launch.
const MEMOISED_ANSWERS: usize = 16;

/// One remembered answer and the question it answers.
#[derive(Debug)]
struct Answer {
    /// The list asked about, not kept alive by the memo (a list the provider replaced is
    /// dropped with its types); while this is held, its address is not reused by another list.
    instance_types: Weak<Vec<Arc<InstanceType>>>,
    requirements: Requirements,
    requests: Resources,
    candidates: Result<Arc<LaunchCandidates>, MinValuesError>,
}

/// [`launch_candidates`] over a shared instance type list, remembering its last answers (see
/// the module docs). The answer is the function's own: only asked again of the same list
/// (by identity), requirements and requests.
#[derive(Debug, Default)]
pub struct CandidatesMemo {
    answers: Mutex<VecDeque<Answer>>,
}

impl CandidatesMemo {
    /// [`launch_candidates`] of `instance_types`, remembered.
    ///
    /// # Errors
    ///
    /// As [`launch_candidates`].
    pub fn candidates(
        &self,
        instance_types: &Arc<Vec<Arc<InstanceType>>>,
        requirements: &Requirements,
        requests: &Resources,
    ) -> Result<Arc<LaunchCandidates>, MinValuesError> {
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        // A list nobody holds any more is never asked about again: its answers (and the types
        // they hold) go.
        answers.retain(|a| a.instance_types.strong_count() > 0);
        if let Some(answer) = answers.iter().find(|a| {
            std::ptr::eq(a.instance_types.as_ptr(), Arc::as_ptr(instance_types))
                && a.requests == *requests
                && a.requirements == *requirements
        }) {
            return answer.candidates.clone();
        }
        drop(answers);
        let candidates = launch_candidates(instance_types, requirements, requests).map(Arc::new);
        let mut answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
        if answers.len() >= MEMOISED_ANSWERS {
            answers.pop_front();
        }
        answers.push_back(Answer {
            instance_types: Arc::downgrade(instance_types),
            requirements: requirements.clone(),
            requests: requests.clone(),
            candidates: candidates.clone(),
        });
        candidates
    }
}

fn is_exotic(it: &InstanceType) -> bool {
    let metal = it
        .requirements
        .get(labels::INSTANCE_SIZE)
        .is_some_and(|size| size.values().iter().any(|v| v.contains("metal")));
    metal || EXOTIC_RESOURCES.iter().any(|r| it.capacity.get(r) != 0)
}

type Split = (Vec<Arc<InstanceType>>, Vec<Arc<InstanceType>>);

/// Generic types when there are any (and the exotic ones as rejected), else all.
fn reject_exotic(instance_types: Vec<Arc<InstanceType>>) -> Split {
    let (exotic, generic): Split = instance_types.into_iter().partition(|it| is_exotic(it));
    if generic.is_empty() {
        (exotic, Vec::new())
    } else {
        (generic, exotic)
    }
}

/// Whether the requirements allow both spot and on-demand and both have an available
/// compatible offering.
fn is_mixed_capacity_launch(
    requirements: &Requirements,
    instance_types: &[Arc<InstanceType>],
) -> bool {
    let allows = |capacity_type: &str| {
        requirements
            .get(labels::CAPACITY_TYPE)
            .is_none_or(|r| r.has(capacity_type))
    };
    if !allows(labels::CAPACITY_TYPE_SPOT) || !allows(labels::CAPACITY_TYPE_ON_DEMAND) {
        return false;
    }
    let (mut spot, mut on_demand) = (false, false);
    for offering in instance_types
        .iter()
        .flat_map(|it| it.available_offerings())
        .filter(|o| o.is_compatible(requirements))
    {
        if offering.capacity_type() == Some(labels::CAPACITY_TYPE_SPOT) {
            spot = true;
        } else {
            on_demand = true;
        }
    }
    spot && on_demand
}

/// Drops types whose cheapest available offering costs more than the cheapest available
/// on-demand offering of any type: a bigger spot type is not worth more than a fitting
/// on-demand one.
fn reject_unwanted_spot(instance_types: Vec<Arc<InstanceType>>) -> Split {
    let cheapest_on_demand = instance_types
        .iter()
        .flat_map(|it| it.available_offerings())
        .filter(|o| o.capacity_type() == Some(labels::CAPACITY_TYPE_ON_DEMAND))
        .map(|o| o.price)
        .fold(f64::MAX, f64::min);
    instance_types.into_iter().partition(|it| {
        it.available_offerings()
            .map(|o| o.price)
            .min_by(f64::total_cmp)
            .is_none_or(|cheapest| cheapest <= cheapest_on_demand)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::apis::labels::{
        CAPACITY_TYPE, INSTANCE_FAMILY, INSTANCE_SIZE, INSTANCE_TYPE,
    };
    use karpenter_core::domain::instance_type::{Offering, Overhead};
    use karpenter_core::domain::requirements::{Operator, Requirement};

    const GI: i64 = 1 << 30;

    fn it(
        name: &str,
        size: &str,
        cpu: i64,
        gpus: i64,
        offerings: Vec<Offering>,
    ) -> Arc<InstanceType> {
        let family = name.split('.').next().unwrap_or(name);
        let mut capacity = Resources::core(cpu * 1000, cpu * 4 * GI, 29);
        capacity.set(labels::RESOURCE_NVIDIA_GPU, gpus);
        Arc::new(InstanceType::new(
            name,
            Requirements::from_requirements([
                Requirement::in_values(INSTANCE_TYPE, &[name]),
                Requirement::in_values(INSTANCE_SIZE, &[size]),
                Requirement::in_values(INSTANCE_FAMILY, &[family]),
                Requirement::in_values(CAPACITY_TYPE, &["spot", "on-demand"]),
            ]),
            offerings,
            capacity,
            Overhead::default(),
        ))
    }

    fn names(candidates: &LaunchCandidates) -> Vec<&str> {
        candidates
            .instance_types
            .iter()
            .map(|t| t.name.as_str())
            .collect()
    }

    fn both(spot: f64, on_demand: f64) -> Vec<Offering> {
        vec![
            Offering::new("z1", "spot", spot),
            Offering::new("z1", "on-demand", on_demand),
        ]
    }

    #[test]
    fn requests_requirements_and_availability_narrow_the_types() {
        let types = [
            it("m5.large", "large", 2, 0, both(0.04, 0.096)),
            it("m5.xlarge", "xlarge", 4, 0, both(0.08, 0.192)),
            it(
                "c5.large",
                "large",
                2,
                0,
                vec![Offering::new("z1", "spot", 0.03).unavailable()],
            ),
        ];
        let requests = Resources::core(3000, GI, 1);
        let candidates = launch_candidates(&types, &Requirements::new(), &requests).expect("ok");
        assert_eq!(names(&candidates), ["m5.xlarge"]);
        let only_large =
            Requirements::from_requirements([Requirement::in_values(INSTANCE_SIZE, &["large"])]);
        let candidates = launch_candidates(&types, &only_large, &Resources::default()).expect("ok");
        assert_eq!(
            names(&candidates),
            ["m5.large"],
            "c5.large has nothing available"
        );
    }

    #[test]
    fn exotic_types_go_when_generic_ones_fit_and_stay_when_nothing_else_does() {
        let types = [
            it("g5.xlarge", "xlarge", 4, 1, both(0.01, 0.02)),
            it("m5.metal", "metal", 96, 0, both(0.01, 0.02)),
            it("m5.large", "large", 2, 0, both(0.04, 0.096)),
        ];
        let candidates =
            launch_candidates(&types, &Requirements::new(), &Resources::default()).expect("ok");
        assert_eq!(names(&candidates), ["m5.large"]);
        assert_eq!(candidates.rejected, ["g5.xlarge", "m5.metal"]);
        let gpu_only = &types[..1];
        let candidates =
            launch_candidates(gpu_only, &Requirements::new(), &Resources::default()).expect("ok");
        assert_eq!(names(&candidates), ["g5.xlarge"]);
    }

    #[test]
    fn spot_dearer_than_the_cheapest_on_demand_is_dropped_in_mixed_launches_only() {
        let types = [
            it("m5.large", "large", 2, 0, both(0.04, 0.096)),
            it("m5.2xlarge", "2xlarge", 8, 0, both(0.12, 0.384)),
        ];
        let candidates =
            launch_candidates(&types, &Requirements::new(), &Resources::default()).expect("ok");
        assert_eq!(names(&candidates), ["m5.large"]);
        assert_eq!(candidates.rejected, ["m5.2xlarge"]);
        let spot_only =
            Requirements::from_requirements([Requirement::in_values(CAPACITY_TYPE, &["spot"])]);
        let candidates = launch_candidates(&types, &spot_only, &Resources::default()).expect("ok");
        assert_eq!(names(&candidates), ["m5.large", "m5.2xlarge"]);
    }

    #[test]
    fn min_values_keep_the_preferences_off_and_bound_truncation() {
        let types: Vec<Arc<InstanceType>> = (0..70)
            .map(|i| {
                it(
                    &format!("f{i}.large"),
                    "large",
                    2,
                    i64::from(i == 0),
                    both(0.01 + f64::from(i) * 0.001, 1.0),
                )
            })
            .collect();
        let families = Requirements::from_requirements([Requirement::new(
            INSTANCE_FAMILY,
            Operator::Exists,
            &[] as &[&str],
        )
        .expect("valid")
        .with_min_values(Some(3))]);
        let candidates = launch_candidates(&types, &families, &Resources::default()).expect("ok");
        assert_eq!(candidates.instance_types.len(), 60);
        assert_eq!(
            candidates.instance_types[0].name, "f0.large",
            "the GPU type stays"
        );
        assert!(candidates.rejected.is_empty());
        let too_many = Requirements::from_requirements([Requirement::new(
            INSTANCE_FAMILY,
            Operator::Exists,
            &[] as &[&str],
        )
        .expect("valid")
        .with_min_values(Some(61))]);
        let error =
            launch_candidates(&types, &too_many, &Resources::default()).expect_err("refused");
        assert_eq!((error.needed, error.available), (61, 60));
    }

    #[test]
    fn the_instance_type_name_check_keeps_exactly_the_compatible_types() {
        let types: Vec<Arc<InstanceType>> = ["m5.large", "m5.xlarge", "c5.large", "r5.large"]
            .iter()
            .map(|name| it(name, "large", 2, 0, both(0.04, 0.096)))
            .collect();
        let pick = ["m5.xlarge", "r5.large"];
        let cases = [
            (Operator::In, &pick[..]),
            (Operator::NotIn, &pick[..]),
            (Operator::Exists, &[][..]),
            (Operator::DoesNotExist, &[][..]),
        ];
        for (operator, values) in cases {
            let requirements = Requirements::from_requirements([Requirement::new(
                INSTANCE_TYPE,
                operator,
                values,
            )
            .expect("valid")]);
            let compatible: Vec<&str> = types
                .iter()
                .filter(|t| requirements.is_compatible(&t.requirements, AllowUndefined::WellKnown))
                .map(|t| t.name.as_str())
                .collect();
            let mut kept = launch_candidates(&types, &requirements, &Resources::default())
                .map(|c| names(&c).into_iter().map(str::to_owned).collect::<Vec<_>>())
                .unwrap_or_default();
            kept.sort();
            let mut expected: Vec<String> = compatible.iter().map(|n| (*n).to_owned()).collect();
            expected.sort();
            assert_eq!(kept, expected, "{operator:?} {values:?}");
        }
    }

    #[test]
    fn the_memo_answers_as_the_function_and_only_the_same_question_over_the_same_list() {
        let memo = CandidatesMemo::default();
        let list = Arc::new(vec![
            it("m5.large", "large", 2, 0, both(0.04, 0.096)),
            it("m5.xlarge", "xlarge", 4, 0, both(0.08, 0.192)),
        ]);
        let none = Requirements::new();
        let small = Resources::core(1000, GI, 1);
        let first = memo.candidates(&list, &none, &small).expect("fits");
        assert_eq!(
            *first,
            launch_candidates(&list, &none, &small).expect("fits")
        );
        let again = memo.candidates(&list, &none, &small).expect("fits");
        assert!(
            Arc::ptr_eq(&first, &again),
            "the same question is remembered"
        );

        // Other requests: asked anew.
        let large = Resources::core(3000, GI, 1);
        assert_eq!(
            names(&memo.candidates(&list, &none, &large).expect("fits")),
            ["m5.xlarge"]
        );
        // Another list with the same types (as the provider hands out after availability
        // changed): asked anew, and its answer is its own.
        let only_small = Arc::new(vec![Arc::clone(&list[0])]);
        assert_eq!(
            names(&memo.candidates(&only_small, &none, &small).expect("fits")),
            ["m5.large"]
        );
        let relisted = Arc::new(list.as_ref().clone());
        let fresh = memo.candidates(&relisted, &none, &small).expect("fits");
        assert!(!Arc::ptr_eq(&first, &fresh));
        assert_eq!(*first, *fresh);
    }

    #[test]
    fn the_memo_lets_go_of_the_answers_about_lists_nobody_holds() {
        let memo = CandidatesMemo::default();
        let none = Requirements::new();
        let old = Arc::new(vec![it("m5.large", "large", 2, 0, both(0.04, 0.096))]);
        memo.candidates(&old, &none, &Resources::default())
            .expect("fits");
        let old_type = Arc::downgrade(&old[0]);
        drop(old);
        let new = Arc::new(vec![it("m5.xlarge", "xlarge", 4, 0, both(0.08, 0.192))]);
        memo.candidates(&new, &none, &Resources::default())
            .expect("fits");
        assert!(
            old_type.upgrade().is_none(),
            "the old list's types are let go"
        );
        let answers = memo.answers.lock().expect("not poisoned");
        assert_eq!(answers.len(), 1);
    }
}

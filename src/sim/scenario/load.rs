//! Loading a scenario: the file's own rules ([`super::file`]), then the parts that need
//! Kubernetes types and kwok's catalogue.
//!
//! ```text
//! text --Scenario::from_yaml--> Scenario (durations, events in time order)
//!   (--chaos FILE replaces the chaos plan)
//!   -> NodePools and EC2NodeClasses through the API server's validator, each NodePool's class
//!      among the scenario's; region, zones and instance types of kwok's capacity limits in its
//!      catalogue; workload templates (tolerations, spread, affinity as Kubernetes types); the
//!      actor kit's fault plan; AWS faults naming operations kwok answers; PodDisruptionBudget
//!      specs as Kubernetes types (a selector, one of minAvailable and maxUnavailable)
//!   -> LoadedScenario (what `Simulation::start` seeds the cluster with)
//! ```
//!
//! Every failure is a [`ScenarioError`] naming the field path in the file.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_actors::kwok::catalog;
use karpenter_actors::runtime::{FaultPlan, FaultPlanFile};
use karpenter_core::apis::validation::{Outcome, Validator};
use karpenter_core::apis::{EC2NodeClass, NodePool};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::file::{
    self, Chaos, DEFAULT_CLUSTER_NAME, DEFAULT_LAUNCH_LATENCY, DEFAULT_READY_DELAY, DEFAULT_REGION,
    DEFAULT_REGISTRATION_DELAY, DEFAULT_STARTUP_TAINT_DELAY, KwokSettings, MAX_DURATION, Scenario,
    ScenarioError,
};
use crate::sim::workloads::WorkloadTemplate;
use crate::sim::world::kwok_operation;

/// A scenario with its embedded manifests checked and converted.
#[derive(Debug, Clone)]
pub struct LoadedScenario {
    pub scenario: Scenario,
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<EC2NodeClass>,
    pub workloads: Vec<WorkloadTemplate>,
    /// The scenario's PodDisruptionBudgets, in its order (`scenario.pod_disruption_budgets`
    /// says when each goes).
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    pub actor_faults: Option<Arc<FaultPlan>>,
    /// Runs until stopped instead of for the scenario's duration (serving without a scenario).
    pub open_ended: bool,
}

/// Checks one embedded manifest as the API server would and converts it.
fn manifest<T: DeserializeOwned>(
    validator: &Validator,
    path: &str,
    kind: &str,
    json: &Value,
) -> Result<T, ScenarioError> {
    match validator.validate(json) {
        Outcome::Checked {
            kind: checked,
            violations,
            ..
        } => {
            if checked.as_str() != kind {
                return Err(ScenarioError::invalid(
                    format!("{path}.kind"),
                    format!("must be {kind}, not {}", checked.as_str()),
                ));
            }
            if let Some(first) = violations.first() {
                let more = match violations.len() {
                    1 => String::new(),
                    n => format!(" (and {} more problems)", n - 1),
                };
                return Err(ScenarioError::invalid(
                    format!("{path}.{}", first.path),
                    format!("{}{more}", first.message),
                ));
            }
        }
        Outcome::Skipped { reason } => {
            return Err(ScenarioError::invalid(
                path,
                format!("must be a {kind} manifest: {reason}"),
            ));
        }
    }
    serde_json::from_value(json.clone()).map_err(|e| ScenarioError::invalid(path, e.to_string()))
}

impl LoadedScenario {
    /// Parses and checks a scenario; `chaos` (a `--chaos FILE`) replaces its chaos plan.
    pub fn from_yaml(text: &str, chaos: Option<&str>) -> Result<Self, ScenarioError> {
        let mut scenario = Scenario::from_yaml(text)?;
        if let Some(chaos) = chaos {
            scenario = scenario.with_chaos_yaml(chaos)?;
        }
        Self::from_scenario(scenario)
    }

    /// Checks the parts of `scenario` that need Kubernetes types and kwok's catalogue.
    pub fn from_scenario(scenario: Scenario) -> Result<Self, ScenarioError> {
        let validator = Validator::new().map_err(|e| ScenarioError::Parse(e.to_string()))?;
        let node_classes: Vec<EC2NodeClass> = scenario
            .ec2_node_classes
            .iter()
            .enumerate()
            .map(|(i, v)| {
                manifest(
                    &validator,
                    &format!("ec2NodeClasses[{i}]"),
                    "EC2NodeClass",
                    v,
                )
            })
            .collect::<Result<_, _>>()?;
        let node_pools: Vec<NodePool> = scenario
            .node_pools
            .iter()
            .enumerate()
            .map(|(i, v)| manifest(&validator, &format!("nodePools[{i}]"), "NodePool", v))
            .collect::<Result<_, _>>()?;
        let class_names: BTreeSet<String> = node_classes
            .iter()
            .map(kube::ResourceExt::name_any)
            .collect();
        for (i, pool) in node_pools.iter().enumerate() {
            let wanted = &pool.spec.template.spec.node_class_ref.name;
            if !class_names.contains(wanted) {
                return Err(ScenarioError::invalid(
                    format!("nodePools[{i}].spec.template.spec.nodeClassRef.name"),
                    format!("{wanted:?} is not one of the scenario's ec2NodeClasses"),
                ));
            }
        }
        check_kwok(&scenario.region, &scenario.kwok)?;
        let workloads = scenario
            .workloads
            .iter()
            .enumerate()
            .map(|(i, w)| WorkloadTemplate::from_workload(i, w))
            .collect::<Result<Vec<_>, _>>()?;
        let pod_disruption_budgets = scenario
            .pod_disruption_budgets
            .iter()
            .enumerate()
            .map(|(i, b)| pod_disruption_budget(i, b))
            .collect::<Result<Vec<_>, _>>()?;
        let actor_faults = match &scenario.chaos.actors {
            Some(value) => {
                let file: FaultPlanFile = serde_json::from_value(value.clone())
                    .map_err(|e| ScenarioError::invalid("chaos.actors", e.to_string()))?;
                let plan = file.into_plan().map_err(|e| match e {
                    karpenter_actors::runtime::FaultPlanError::Invalid { path, rule } => {
                        ScenarioError::invalid(format!("chaos.actors.{path}"), rule)
                    }
                    other @ karpenter_actors::runtime::FaultPlanError::Parse(_) => {
                        ScenarioError::invalid("chaos.actors", other.to_string())
                    }
                })?;
                Some(Arc::new(plan))
            }
            None => None,
        };
        for (i, fault) in scenario.chaos.aws.iter().enumerate() {
            kwok_operation(fault.service, &fault.operation).map_err(|rule| {
                ScenarioError::invalid(format!("chaos.aws[{i}].operation"), rule.to_string())
            })?;
        }
        Ok(Self {
            scenario,
            node_pools,
            node_classes,
            workloads,
            pod_disruption_budgets,
            actor_faults,
            open_ended: false,
        })
    }

    /// An empty cluster that runs until stopped: the daemon, kwok and the harness, waiting for
    /// whatever kubectl applies (`simulate --serve` without `--scenario`).
    #[must_use]
    pub fn open_ended(seed: u64) -> Self {
        Self {
            scenario: Scenario {
                name: "interactive".to_owned(),
                description: None,
                seed,
                duration: MAX_DURATION,
                region: DEFAULT_REGION.to_owned(),
                cluster_name: DEFAULT_CLUSTER_NAME.to_owned(),
                progress_every: Duration::from_mins(1),
                feature_gates: karpenter_config::FeatureGates::default(),
                kwok: KwokSettings {
                    launch_latency: DEFAULT_LAUNCH_LATENCY,
                    registration_delay: DEFAULT_REGISTRATION_DELAY,
                    ready_delay: DEFAULT_READY_DELAY,
                    startup_taint_delay: DEFAULT_STARTUP_TAINT_DELAY,
                    capacity: Vec::new(),
                },
                node_pools: Vec::new(),
                ec2_node_classes: Vec::new(),
                workloads: Vec::new(),
                interruptions: Vec::new(),
                node_failures: Vec::new(),
                ami_releases: Vec::new(),
                pod_disruption_budgets: Vec::new(),
                chaos: Chaos::default(),
            },
            node_pools: Vec::new(),
            node_classes: Vec::new(),
            workloads: Vec::new(),
            pod_disruption_budgets: Vec::new(),
            actor_faults: None,
            open_ended: true,
        }
    }
}

/// The `index`th budget of the scenario as a Kubernetes object, with the API server's rules on
/// its spec: a selector (a budget without one selects nothing) and exactly one of
/// `minAvailable` and `maxUnavailable`.
fn pod_disruption_budget(
    index: usize,
    budget: &file::PodDisruptionBudget,
) -> Result<PodDisruptionBudget, ScenarioError> {
    let path = format!("podDisruptionBudgets[{index}].spec");
    let spec: PodDisruptionBudgetSpec = serde_json::from_value(budget.spec.clone())
        .map_err(|e| ScenarioError::invalid(path.clone(), e.to_string()))?;
    if spec.selector.is_none() {
        return Err(ScenarioError::invalid(
            format!("{path}.selector"),
            "required (a budget without a selector selects no pod)",
        ));
    }
    if spec.min_available.is_some() == spec.max_unavailable.is_some() {
        return Err(ScenarioError::invalid(
            path,
            "set exactly one of minAvailable and maxUnavailable",
        ));
    }
    Ok(PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(budget.name.clone()),
            namespace: Some(budget.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

fn check_kwok(region: &str, kwok: &KwokSettings) -> Result<(), ScenarioError> {
    let catalogue = catalog::bundled().map_err(|e| ScenarioError::Parse(e.to_string()))?;
    let Some(zones) = catalogue.regions.get(region) else {
        return Err(ScenarioError::invalid(
            "region",
            format!(
                "{region:?} is not in kwok's catalogue ({})",
                catalogue
                    .regions
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    };
    for (i, pool) in kwok.capacity.iter().enumerate() {
        let path = format!("kwok.capacity[{i}]");
        if !zones.iter().any(|z| z.name == pool.zone) {
            return Err(ScenarioError::invalid(
                format!("{path}.zone"),
                format!("{:?} is not a zone of {region}", pool.zone),
            ));
        }
        if !catalogue
            .instance_types
            .iter()
            .any(|t| t.name == pool.instance_type)
        {
            return Err(ScenarioError::invalid(
                format!("{path}.instanceType"),
                format!("{:?} is not in kwok's catalogue", pool.instance_type),
            ));
        }
    }
    Ok(())
}

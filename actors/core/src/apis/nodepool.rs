//! `karpenter.sh/v1` `NodePool`: the template, disruption policy, limits and weight from which
//! NodeClaims are made (reference section 1.1).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use super::duration::{BUDGET_DURATION_PATTERN, KubeDuration, NillableDuration};
use super::nodeclaim::{NodeClassReference, default_expire_after};
use super::requirements::NodePoolRequirement;
use super::taints::Taint;

/// The budget every `NodePool` gets when it names none.
pub const DEFAULT_BUDGET_NODES: &str = "10%";
/// Budget `nodes`: a percentage up to 100 or a count.
pub const BUDGET_NODES_PATTERN: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";
/// Budget `schedule`: a cron descriptor or five space-separated fields.
pub const BUDGET_SCHEDULE_PATTERN: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";
/// Most budgets a `NodePool` may carry.
pub const MAX_BUDGETS: usize = 50;

/// A template of nodes Karpenter may launch, how it may disrupt them, and how many it may run.
#[expect(
    clippy::duplicated_attributes,
    reason = "kube's derive takes one printcolumn(...) per column, and their fields repeat"
)]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    status = "NodePoolStatus",
    category = "karpenter",
    doc = "NodePool is the Schema for the NodePools API",
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.template.spec.nodeClassRef.name"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "string",
        json_path = ".status.resources.nodes"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".spec.weight",
        priority = "1"
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.resources.cpu",
        priority = "1"
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.resources.memory",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// The template of the NodeClaims this `NodePool` launches.
    pub template: NodeClaimTemplate,
    /// When and how fast Karpenter may disrupt this pool's nodes.
    #[serde(default)]
    #[schemars(extend("default" = {"consolidateAfter": "0s"}))]
    pub disruption: Disruption,
    /// Upper bounds on the resources of all this pool's nodes together.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::resource_list")]
    pub limits: BTreeMap<String, Quantity>,
    /// Priority among pools: higher weights are tried first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
}

/// Metadata and spec of the NodeClaims a `NodePool` makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations copied onto each NodeClaim and its node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::template_labels")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::string_map")]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// A `NodeClaim` spec without resource requests (which come from the pods scheduled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints applied to the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints a daemon removes after startup; pods need not tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Constraints layered with the labels onto every node.
    #[schemars(transform = super::requirements::requirements_list_rules)]
    pub requirements: Vec<NodePoolRequirement>,
    /// The provider-specific class of the nodes; its group and kind are fixed once created
    /// (a `NodeClaim`'s whole spec is immutable, so only the pool's reference carries these).
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.group == oldSelf.group", "message": "nodeClassRef.group is immutable"},
        {"rule": "self.kind == oldSelf.kind", "message": "nodeClassRef.kind is immutable"},
    ]))]
    pub node_class_ref: NodeClassReference,
    /// Longest time a node may spend draining before its pods are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<KubeDuration>,
    /// Node lifetime from creation; `Never` to disable.
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
}

/// Which nodes consolidation may remove.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
}

/// Disruption parameters of a `NodePool`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("default" = {"consolidateAfter": "0s"}))]
pub struct Disruption {
    /// How long a node must be consolidatable before Karpenter acts; `Never` disables it.
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation considers.
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// Limits on how many nodes may be disrupted at once; the most restrictive active one wins.
    #[serde(default = "default_budgets")]
    #[schemars(length(max = MAX_BUDGETS))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.all(x, has(x.schedule) == has(x.duration))", "message": "'schedule' must be set with 'duration'"}]))]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidate_after: NillableDuration("0s".to_owned()),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget::default()]
}

/// Why a node is being voluntarily disrupted; budgets may apply to some reasons only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
}

impl DisruptionReason {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Underutilized => "Underutilized",
            Self::Empty => "Empty",
            Self::Drifted => "Drifted",
        }
    }
}

/// How many of this pool's nodes may be disrupting at once, optionally during a schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("required" = ["nodes"]))]
pub struct Budget {
    /// Reasons this budget applies to; all when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// Most nodes disrupting at once: a count or a percentage (rounded up) of the pool's nodes.
    #[serde(default = "default_budget_nodes")]
    #[schemars(pattern(BUDGET_NODES_PATTERN))]
    pub nodes: String,
    /// Cron schedule (UTC) at which the budget becomes active; always active when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(BUDGET_SCHEDULE_PATTERN))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit; required with `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(BUDGET_DURATION_PATTERN))]
    pub duration: Option<String>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            reasons: None,
            nodes: default_budget_nodes(),
            schedule: None,
            duration: None,
        }
    }
}

fn default_budget_nodes() -> String {
    DEFAULT_BUDGET_NODES.to_owned()
}

/// What the pool runs now and how healthy it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Resources provisioned by this pool (cpu, memory, pods, ephemeral-storage, nodes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::resource_list")]
    pub resources: BTreeMap<String, Quantity>,
    /// The generation of the node class last observed; a change resets registration health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::apis::conditions::conditions_schema")]
    pub conditions: Vec<Condition>,
}

//! `karpenter.sh/v1` `NodeClaim`: a request for one node, created by the provisioner or the
//! disruption controller and carried out by its `NodeClaimActor` (reference section 1.2).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::conditions::Condition;
use super::duration::{KubeDuration, NillableDuration};
pub use super::shared::{SharedRequirements, SharedResources};
use super::slim_nodeclaim::ClaimParts;
use super::taints::Taint;

/// Karpenter's default node lifetime.
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";

/// The NodeClaim's `status.providerID`, unless unset or empty.
#[must_use]
pub fn provider_id(nodeclaim: &impl ClaimParts) -> Option<&str> {
    nodeclaim
        .claim_status()
        .and_then(|s| s.provider_id.as_deref())
        .filter(|p| !p.is_empty())
}

/// `expireAfter` when a NodeClaim or NodePool does not set it.
#[must_use]
pub fn default_expire_after() -> NillableDuration {
    NillableDuration(DEFAULT_EXPIRE_AFTER.to_owned())
}

/// The desired node: requirements the instance must meet, what it must fit, and how it starts.
/// Immutable once created.
#[expect(
    clippy::duplicated_attributes,
    reason = "kube's derive takes one printcolumn(...) per column, and their fields repeat"
)]
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core"),
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    status = "NodeClaimStatus",
    category = "karpenter",
    doc = "NodeClaim is the Schema for the NodeClaims API",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = ".metadata.labels.node\\.kubernetes\\.io/instance-type"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/capacity-type"
    ),
    printcolumn(
        name = "Zone",
        type_ = "string",
        json_path = ".metadata.labels.topology\\.kubernetes\\.io/zone"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
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
        name = "ImageID",
        type_ = "string",
        json_path = ".status.imageID",
        priority = "1"
    ),
    printcolumn(
        name = "ID",
        type_ = "string",
        json_path = ".status.providerID",
        priority = "1"
    ),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/nodepool",
        priority = "1"
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.nodeClassRef.name",
        priority = "1"
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drifted\")].status",
        priority = "1"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "spec is immutable"}]))]
pub struct NodeClaimSpec {
    /// Taints applied to the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints expected to be removed by a daemon shortly after startup; ignored for scheduling.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    // Shared with the NodeClaims whose list is equal (the doc line below is the CRD's).
    /// Constraints on the instance (type, zone, capacity type, any label).
    #[schemars(transform = super::requirements::requirements_list_rules)]
    pub requirements: SharedRequirements,
    /// Resources the node must have room for.
    #[serde(default, skip_serializing_if = "ResourceRequirements::is_empty")]
    pub resources: ResourceRequirements,
    /// The provider-specific class of the node.
    pub node_class_ref: NodeClassReference,
    /// Longest time the node may spend draining before its pods are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<KubeDuration>,
    /// Node lifetime from creation; `Never` to disable.
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
}

/// Resources the scheduled pods and daemonsets need.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "SharedResources::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::resource_list")]
    pub requests: SharedResources,
}

impl ResourceRequirements {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// Reference to the node class (group, kind, name), e.g. an `EC2NodeClass`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct NodeClassReference {
    /// API group of the referent.
    #[schemars(pattern(r"^[^/]*$"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "group may not be empty"}]))]
    pub group: String,
    /// Kind of the referent.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "kind may not be empty"}]))]
    pub kind: String,
    /// Name of the referent.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "name may not be empty"}]))]
    pub name: String,
}

impl NodeClassReference {
    /// A reference to an `EC2NodeClass`.
    #[must_use]
    pub fn ec2(name: &str) -> Self {
        Self {
            group: super::labels::AWS_GROUP.to_owned(),
            kind: "EC2NodeClass".to_owned(),
            name: name.to_owned(),
        }
    }
}

/// What the `NodeClaim` became: its node, instance and conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `aws:///<zone>/<instance-id>`.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "SharedResources::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::resource_list")]
    pub capacity: SharedResources,
    #[serde(default, skip_serializing_if = "SharedResources::is_empty")]
    #[schemars(schema_with = "crate::apis::schema::resource_list")]
    pub allocatable: SharedResources,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::apis::conditions::nodeclaim_conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Last time a non-daemonset pod was bound to or left the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

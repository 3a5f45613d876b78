//! Status conditions (operatorpkg's `status.Condition`, the shape of `metav1.Condition`) and the
//! condition types and reasons of the three kinds.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// One observation about an object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: ConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    pub last_transition_time: Time,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// `True`, `False` or `Unknown`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl ConditionStatus {
    /// The status `text` names; any other text reads as `Unknown`, which no reader takes for
    /// either answer (a pod condition's status as the watch reads it).
    #[must_use]
    pub fn of(text: &str) -> Self {
        match text {
            "True" => Self::True,
            "False" => Self::False,
            _ => Self::Unknown,
        }
    }

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

const CONDITION_TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

fn condition_schema(reason_required: bool) -> Schema {
    let (reason_pattern, required) = if reason_required {
        (
            r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            serde_json::json!(["lastTransitionTime", "message", "reason", "status", "type"]),
        )
    } else {
        (
            r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$",
            serde_json::json!(["lastTransitionTime", "status", "type"]),
        )
    };
    let mut reason =
        serde_json::json!({ "type": "string", "maxLength": 1024, "pattern": reason_pattern });
    if reason_required {
        reason["minLength"] = 1.into();
    }
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "required": required,
            "properties": {
                "lastTransitionTime": { "type": "string", "format": "date-time" },
                "message": { "type": "string", "maxLength": 32768 },
                "observedGeneration": { "type": "integer", "format": "int64", "minimum": 0 },
                "reason": reason,
                "status": { "type": "string", "enum": ["True", "False", "Unknown"] },
                "type": { "type": "string", "maxLength": 316, "pattern": CONDITION_TYPE_PATTERN },
            },
        },
    })
}

/// Conditions of `NodePool`s and `EC2NodeClass`es: every field required.
#[must_use]
pub fn conditions_schema(_: &mut SchemaGenerator) -> Schema {
    condition_schema(true)
}

/// Conditions of `NodeClaim`s: reason and message may be empty.
#[must_use]
pub fn nodeclaim_conditions_schema(_: &mut SchemaGenerator) -> Schema {
    condition_schema(false)
}

/// Condition types every kind shares.
pub const READY: &str = "Ready";

/// `NodePool` condition types and reasons.
pub mod nodepool {
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    pub const NODE_CLASS_READY: &str = "NodeClassReady";
    pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";
    pub const REASON_REGISTRATION_FAILED: &str = "RegistrationFailed";
    pub const REASON_NODE_CLASS_NOT_FOUND: &str = "NodeClassNotFound";
    pub const REASON_NODE_CLASS_TERMINATING: &str = "NodeClassTerminating";
    pub const REASON_NODE_CLASS_READINESS_UNKNOWN: &str = "NodeClassReadinessUnknown";
    pub const REASON_NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
    pub const REASON_VALIDATION_FAILED: &str = "NodePoolValidationFailed";
}

/// `NodeClaim` condition types and reasons.
pub mod nodeclaim {
    pub const LAUNCHED: &str = "Launched";
    pub const REGISTERED: &str = "Registered";
    pub const INITIALIZED: &str = "Initialized";
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    pub const DRIFTED: &str = "Drifted";
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    pub const DISRUPTION_REASON: &str = "DisruptionReason";

    pub const REASON_LAUNCH_FAILED: &str = "LaunchFailed";
    pub const REASON_NODE_CLASS_READINESS_UNKNOWN: &str = "NodeClassReadinessUnknown";
    pub const REASON_INSTANCE_TYPE_RESOLUTION_FAILED: &str = "InstanceTypeResolutionFailed";
    pub const REASON_SUBNET_RESOLUTION_FAILED: &str = "SubnetResolutionFailed";
    pub const REASON_INSTANCE_TYPE_FILTERING_FAILED: &str = "InstanceTypeFilteringFailed";
    pub const REASON_SPOT_SLR_CREATION_FAILED: &str = "SpotSLRCreationFailed";
    pub const REASON_NODE_NOT_FOUND: &str = "NodeNotFound";
    pub const REASON_MULTIPLE_NODES_FOUND: &str = "MultipleNodesFound";
    pub const REASON_NODE_NOT_READY: &str = "NodeNotReady";
    pub const REASON_STARTUP_TAINTS_EXIST: &str = "StartupTaintsExist";
    pub const REASON_KNOWN_EPHEMERAL_TAINTS_EXIST: &str = "KnownEphemeralTaintsExist";
    pub const REASON_RESOURCE_NOT_REGISTERED: &str = "ResourceNotRegistered";
}

/// `EC2NodeClass` condition types and reasons.
pub mod ec2nodeclass {
    pub const AMIS_READY: &str = "AMIsReady";
    pub const SUBNETS_READY: &str = "SubnetsReady";
    pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
    pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";

    pub const REASON_AMI_NOT_FOUND: &str = "AMINotFound";
    pub const REASON_SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
    pub const REASON_SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
    pub const REASON_CREATE_FLEET_AUTH_CHECK_FAILED: &str = "CreateFleetAuthCheckFailed";
    pub const REASON_CREATE_LAUNCH_TEMPLATE_AUTH_CHECK_FAILED: &str =
        "CreateLaunchTemplateAuthCheckFailed";
    pub const REASON_RUN_INSTANCES_AUTH_CHECK_FAILED: &str = "RunInstancesAuthCheckFailed";
    pub const REASON_DEPENDENCIES_NOT_READY: &str = "DependenciesNotReady";
    pub const REASON_TAG_VALIDATION_FAILED: &str = "TagValidationFailed";
    pub const REASON_NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
    /// Not Karpenter's: the class's user data (or kubelet settings) cannot be rendered, which
    /// Karpenter only finds out when a launch fails.
    pub const REASON_USER_DATA_VALIDATION_FAILED: &str = "UserDataValidationFailed";
    /// Not Karpenter's (which leaves the condition as it was and retries): IAM refused to
    /// create the instance profile or to put the role in it.
    pub const REASON_INSTANCE_PROFILE_CREATION_FAILED: &str = "InstanceProfileCreationFailed";
}
